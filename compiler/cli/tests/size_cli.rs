//! `ptec size` on the `mlp` fixture: a release build measured (for the
//! host, and for a microcontroller), its numbers checked against each
//! other and against what `ptec inspect` reads from the file.
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn ptec_json(args: &[&std::ffi::OsStr]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ptec")).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ptec {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a byte count"))
}

#[test]
fn the_size_report_measures_a_release_build() {
    let file = fixture("mlp.pte");
    let dir = tempfile::tempdir().unwrap();
    let kept = dir.path().join("mlp-size");
    let report = ptec_json(&[
        "size".as_ref(),
        file.as_os_str(),
        "--json".as_ref(),
        "--keep".as_ref(),
        kept.as_os_str(),
    ]);
    let inspected = ptec_json(&["inspect".as_ref(), file.as_os_str(), "--json".as_ref()]);

    // The binary it measured is the one it kept.
    let binary = u(&report["binary_bytes"]);
    assert_eq!(std::fs::metadata(&kept).unwrap().len(), binary, "{report}");
    let code = u(&report["code_bytes"]);
    assert!(code > 0 && code < binary, "{report}");

    // Its sections: the code is the executable ones, what they take in the
    // file fits in it (zero-initialised ones take nothing), and the
    // embedded constants are data.
    let sections = report["sections"].as_array().unwrap();
    let of_kind = |kind: &str| -> u64 {
        sections
            .iter()
            .filter(|s| s["kind"] == kind)
            .map(|s| u(&s["bytes"]))
            .sum()
    };
    assert_eq!(of_kind("code"), code, "{report}");
    let in_file: u64 = sections.iter().map(|s| u(&s["file_bytes"])).sum();
    assert!(in_file <= binary, "{in_file} of {binary}: {report}");
    for s in sections {
        assert!(u(&s["file_bytes"]) <= u(&s["bytes"]), "{s}");
        if s["kind"] == "zero-initialised" {
            assert_eq!(u(&s["file_bytes"]), 0, "{s}");
        }
    }
    #[cfg(target_os = "linux")]
    assert!(
        sections.iter().any(|s| s["name"] == ".text" && s["kind"] == "code"),
        "{report}"
    );
    let data = of_kind("read-only data") + of_kind("data");
    assert!(u(&report["embedded_bytes"]) <= data, "{report}");

    // Code by origin and by operator are parts of the code, none counted
    // twice.
    let origins: u64 = ["generated_bytes", "kernel_bytes", "runtime_bytes", "other_bytes"]
        .iter()
        .map(|k| u(&report[*k]))
        .sum();
    assert!(origins <= code, "{origins} of {code}: {report}");
    assert!(
        u(&report["generated_bytes"]) > 0 && u(&report["kernel_bytes"]) > 0,
        "{report}"
    );
    let operators = report["operators"].as_array().unwrap();
    let by_operator: u64 = operators.iter().map(|o| u(&o["code_bytes"])).sum();
    let kernel_parts = by_operator + u(&report["shared_kernel_bytes"]) + u(&report["other_kernel_bytes"]);
    assert!(
        kernel_parts <= u(&report["kernel_bytes"]) + u(&report["generated_bytes"]),
        "{report}"
    );
    assert!(by_operator <= code, "{report}");
    // The operators of the generated instructions: the file's, less those
    // ptec folded (the transpose and the relu go into the addmm).
    let names: Vec<&str> = operators.iter().map(|o| o["operator"].as_str().unwrap()).collect();
    let file_ops: Vec<&str> = inspected["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{report}");
    for n in &names {
        assert!(file_ops.iter().any(|o| n.starts_with(o)), "{n} not among {file_ops:?}");
    }
    let addmm = operators.iter().find(|o| o["operator"] == "aten::addmm.out").unwrap();
    assert_eq!(addmm["instructions"], 2, "{report}");
    assert!(
        addmm["kernels"].as_array().unwrap().iter().any(|k| k == "linear"),
        "{report}"
    );

    // Per method: the plan as `ptec inspect` reads it, the constants, code
    // and a stack measured on the host.
    let methods = report["methods"].as_array().unwrap();
    let method = &inspected["methods"][0];
    assert_eq!(methods.len(), 1);
    assert_eq!(methods[0]["name"], "forward");
    let plan: u64 = method["buffers"].as_array().unwrap().iter().map(u).sum();
    assert_eq!(u(&methods[0]["planned_bytes"]), plan, "{report}");
    assert_eq!(u(&methods[0]["planned_bytes"]), u(&method["planned_bytes"]), "{report}");
    assert_eq!(
        u(&methods[0]["constant_bytes"]),
        u(&method["constant_bytes"]),
        "{report}"
    );
    // The fixture's constants: Linear(16, 32) and Linear(32, 10), weights
    // and biases, in f32.
    assert_eq!(
        u(&methods[0]["constant_bytes"]),
        (16 * 32 + 32 + 32 * 10 + 10) * 4,
        "{report}"
    );
    // ptec embeds the constants it prepares from them: here the same
    // bytes, each tensor aligned.
    let (embedded, constant) = (u(&report["embedded_bytes"]), u(&method["constant_bytes"]));
    assert!(embedded >= constant && embedded < constant + 64, "{report}");
    let method_code = u(&methods[0]["code_bytes"]);
    assert!(
        method_code > 0 && method_code <= u(&report["generated_bytes"]),
        "{report}"
    );
    let stack = u(&methods[0]["stack_bytes"]);
    // Two matrix products and a softmax of a 4 × 16 input: some hundreds
    // of bytes of frames, far from the 8 MiB painted.
    assert!(stack > 64 && stack < 1 << 20, "{report}");
    assert!(u(&report["state_bytes"]) > 0, "{report}");
}

/// Whether rustup has the standard library (`core`) of `target`.
fn target_installed(target: &str) -> bool {
    let out = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
        .args(["--print", "target-libdir", "--target", target])
        .output();
    out.is_ok_and(|o| o.status.success() && PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).is_dir())
}

/// For a microcontroller (a `*-none-*` target) the runner is `no_std`: the
/// binary is built and measured, not run; the state is its static.
#[test]
#[ignore = "slow: run with `cargo test --workspace --tests -- --ignored`"]
fn the_size_report_measures_a_microcontroller_build() {
    let target = "thumbv7em-none-eabihf";
    if !target_installed(target) {
        // CI (.ci/run) installs it before the tests.
        assert!(
            std::env::var_os("PTEC_REQUIRE_CORPUS").is_none(),
            "rustup target add {target}: CI must run this test"
        );
        eprintln!("NOT RUN: no {target} standard library (rustup target add {target})");
        return;
    }
    let file = fixture("mlp.pte");
    let dir = tempfile::tempdir().unwrap();
    let kept = dir.path().join("mlp-size.elf");
    let report = ptec_json(&[
        "size".as_ref(),
        file.as_os_str(),
        "--target".as_ref(),
        target.as_ref(),
        "--json".as_ref(),
        "--keep".as_ref(),
        kept.as_os_str(),
    ]);
    let inspected = ptec_json(&["inspect".as_ref(), file.as_os_str(), "--json".as_ref()]);
    assert_eq!(report["target"], target, "{report}");
    assert_eq!(report["ran"], false, "{report}");
    // A 32-bit Arm ELF file.
    let binary = std::fs::read(&kept).unwrap();
    assert_eq!(&binary[..5], b"\x7fELF\x01", "not a 32-bit ELF file");
    assert_eq!(u16::from_le_bytes([binary[18], binary[19]]), 40, "e_machine is not Arm");
    assert_eq!(binary.len() as u64, u(&report["binary_bytes"]));

    // Everything a firmware calls is linked: the program's code (called
    // through the `Model` trait, not inlined away), its kernels.
    let code = u(&report["code_bytes"]);
    for k in ["generated_bytes", "kernel_bytes"] {
        assert!(u(&report[k]) > 0 && u(&report[k]) < code, "{k}: {report}");
    }
    let methods = report["methods"].as_array().unwrap();
    assert!(u(&methods[0]["code_bytes"]) > 0, "{report}");
    assert!(methods[0]["stack_bytes"].is_null(), "{report}");
    // The plan and constants are the file's; the program object is a
    // zero-initialised static.
    let method = &inspected["methods"][0];
    assert_eq!(u(&methods[0]["planned_bytes"]), u(&method["planned_bytes"]), "{report}");
    assert_eq!(
        u(&methods[0]["constant_bytes"]),
        (16 * 32 + 32 + 32 * 10 + 10) * 4,
        "{report}"
    );
    let state = u(&report["state_bytes"]);
    let zeroed: u64 = report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "zero-initialised")
        .map(|s| u(&s["bytes"]))
        .sum();
    assert!(
        state > 0 && state <= zeroed,
        "state {state}, zero-initialised {zeroed}: {report}"
    );
    assert!(u(&report["embedded_bytes"]) >= u(&method["constant_bytes"]), "{report}");
}

#[test]
fn size_refuses_what_it_cannot_build() {
    let out = Command::new(env!("CARGO_BIN_EXE_ptec"))
        .args(["size", "no-such-file.pte"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-file.pte"), "{err}");
}
