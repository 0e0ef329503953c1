//! `ptec check` from the command line: a good bundle passes, a bundle whose
//! expected output was altered fails with a mismatch report, and a malformed
//! bundle gets a located error.
use ptec::ir::TestValue;
use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn ptec_check(file: &std::path::Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ptec"))
        .arg("check")
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn altered_expected_output_fails_with_a_mismatch_report() {
    let bytes = std::fs::read(fixture("mlp.bpte")).unwrap();
    let (ok, report) = ptec_check(&fixture("mlp.bpte"));
    assert!(ok, "{report}");
    assert!(report.lines().any(|l| l == "3 passed, 0 failed"), "{report}");

    // Change element 7 of case 1's expected output by +0.5.
    let loaded = ptec::load(&bytes, &[]).unwrap();
    let TestValue::Tensor { data, .. } = &loaded.suites[0].cases[1].expected[0] else {
        panic!("tensor output")
    };
    let at = data.offset + 7 * 4;
    let want = f32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut altered = bytes.clone();
    altered[at..at + 4].copy_from_slice(&(want + 0.5).to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("altered.bpte");
    std::fs::write(&path, &altered).unwrap();

    let (ok, report) = ptec_check(&path);
    assert!(!ok, "an altered bundle passed:\n{report}");
    assert!(report.lines().any(|l| l == "2 passed, 1 failed"), "{report}");
    let line = report.lines().find(|l| l.starts_with("forward[1]:")).unwrap();
    assert!(line.contains("output 0: 1 element(s) differ"), "{line}");
    assert!(
        line.contains(&format!("[7] expected {}", (want + 0.5) as f64)),
        "{line}"
    );
}

#[test]
fn threads_run_every_case_on_each_count() {
    // The attention fixture's products, softmax and permutations are large
    // enough to split on two threads.
    let out = Command::new(env!("CARGO_BIN_EXE_ptec"))
        .args(["check", "--threads", "1,2"])
        .arg(fixture("attention.bpte"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        report.lines().any(|l| l == "on 1 thread(s): forward[0]: ok"),
        "{report}"
    );
    assert!(
        report.lines().any(|l| l == "on 2 thread(s): forward[0]: ok"),
        "{report}"
    );
    assert!(report.lines().any(|l| l == "2 passed, 0 failed"), "{report}");
    let zero = Command::new(env!("CARGO_BIN_EXE_ptec"))
        .args(["check", "--threads", "0"])
        .arg(fixture("attention.bpte"))
        .output()
        .unwrap();
    assert!(!zero.status.success());
}

/// `--winograd false` checks the code that runs every convolution by the
/// direct sum; a bad value is refused.
#[test]
fn winograd_can_be_turned_off() {
    let out = Command::new(env!("CARGO_BIN_EXE_ptec"))
        .args(["check", "--winograd", "false"])
        .arg(fixture("winograd.bpte"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(report.lines().any(|l| l == "2 passed, 0 failed"), "{report}");
    let bad = Command::new(env!("CARGO_BIN_EXE_ptec"))
        .args(["check", "--winograd", "no"])
        .arg(fixture("winograd.bpte"))
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

/// Builds every fixture's generated code in release mode (minutes), so it
/// is left to the full run.
#[test]
#[ignore = "slow: run with `cargo test --workspace --tests -- --ignored`"]
fn every_fixture_passes_on_two_threads() {
    // Every other fixture ptec check can run by itself, on two threads, at
    // its manifest's tolerance: all but attention (above), those that need
    // a .ptd or a user backend, the BP04 copies, conv_chains (run on two
    // threads by tests/tests/threads.rs) and random, whose bundle holds no
    // cases (tests/tests/random.rs).
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("manifest.json")).unwrap()).unwrap();
    let others = [
        "attention",
        "external_weights",
        "tiny_delegate",
        "device_copies",
        "random",
        "mlp_bp04",
        "multi_method_bp04",
        "conv_chains",
    ];
    let names: Vec<&str> = manifest["fixtures"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .filter(|n| !others.contains(n))
        .collect();
    assert!(names.len() >= 40, "{names:?}");
    let tolerance = |n: &str| {
        let f = &manifest["fixtures"][n];
        (f["rtol"].to_string(), f["atol"].to_string())
    };
    let mut tolerances: Vec<_> = names.iter().map(|n| tolerance(n)).collect();
    tolerances.sort();
    tolerances.dedup();
    for (rtol, atol) in tolerances {
        let files = names
            .iter()
            .filter(|n| tolerance(n) == (rtol.clone(), atol.clone()))
            .map(|n| fixture(&format!("{n}.bpte")));
        let out = Command::new(env!("CARGO_BIN_EXE_ptec"))
            .args(["check", "--threads", "2", "--rtol", &rtol, "--atol", &atol])
            .args(files)
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{report}{}", String::from_utf8_lossy(&out.stderr));
        assert!(
            report.lines().last().is_some_and(|l| l.ends_with(" passed, 0 failed")),
            "{report}"
        );
    }
}

#[test]
fn bundles_with_prepared_filters_pass() {
    // Their filters are prepared at compile time and written beside each
    // generated module of the check's crate.
    for name in ["conv.bpte", "xnnpack_conv.bpte"] {
        let (ok, report) = ptec_check(&fixture(name));
        assert!(ok, "{name}: {report}");
        let passed = report
            .lines()
            .find_map(|l| l.strip_suffix(" passed, 0 failed"))
            .and_then(|n| n.parse::<usize>().ok());
        assert!(passed.is_some_and(|n| n > 0), "{name}: {report}");
    }
}

/// `cond.bpte` with its planned buffer's size (an int64 in the method's
/// plan) made `bytes`. A method with jumps keeps its whole plan; in one
/// without, the untouched bytes past the last value would be cut (see
/// `plan/squeeze.rs`) and the huge plan would cost nothing.
fn with_plan_of(bytes: u64) -> (tempfile::TempDir, PathBuf) {
    let file = std::fs::read(fixture("cond.bpte")).unwrap();
    let sizes = |file: &[u8]| {
        ptec::load(file, &[]).ok()?.program?.methods[0]
            .buffer_sizes
            .last()
            .copied()
    };
    let planned = sizes(&file).unwrap();
    assert!(planned > 0);
    // The int64 may occur elsewhere too: the occurrence that is the plan's
    // is the one whose change the reader sees there.
    let altered = (0..file.len().saturating_sub(7))
        .filter(|&i| file[i..i + 8] == planned.to_le_bytes())
        .map(|i| {
            let mut altered = file.clone();
            altered[i..i + 8].copy_from_slice(&bytes.to_le_bytes());
            altered
        })
        .find(|altered| sizes(altered) == Some(bytes))
        .expect("the plan's size in the file");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big_plan.bpte");
    std::fs::write(&path, &altered).unwrap();
    (dir, path)
}

/// A plan larger than any heap (a corrupted buffer size; 4 PiB) compiles,
/// as the program is well formed, but the check reports that the program
/// could not be constructed instead of crashing on the allocation.
#[test]
fn a_plan_no_heap_holds_is_reported_not_a_crash() {
    let (_dir, path) = with_plan_of(1 << 52);
    let (ok, report) = ptec_check(&path);
    assert!(!ok, "{report}");
    assert!(!report.contains("crashed"), "{report}");
    let line = report
        .lines()
        .find(|l| l.starts_with("construction:"))
        .unwrap_or_default();
    assert!(line.contains("bytes failed"), "{report}");
    assert!(report.lines().any(|l| l == "0 passed, 1 failed"), "{report}");
}

/// A plan too large for any Rust type (2^60 bytes) is a compile error that
/// names the method, not generated code that does not build.
#[test]
fn a_plan_no_type_holds_is_a_compile_error() {
    let (_dir, path) = with_plan_of(1 << 60);
    let (ok, report) = ptec_check(&path);
    assert!(!ok, "{report}");
    assert!(!report.contains("building the generated code failed"), "{report}");
    assert!(report.contains("method `forward`"), "{report}");
    assert!(report.contains("more than a method may take"), "{report}");
}

/// A program without test cases (a .pte) has nothing to run: it is
/// reported as such, and the files beside it are still checked.
#[test]
fn a_program_without_cases_is_reported_and_the_others_run() {
    let out = Command::new(env!("CARGO_BIN_EXE_ptec"))
        .arg("check")
        .arg(fixture("mlp.pte"))
        .arg(fixture("mlp.bpte"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{report}");
    assert!(!report.contains("building the generated code failed"), "{report}");
    let line = report.lines().find(|l| l.contains("mlp.pte:")).unwrap_or_default();
    assert!(line.contains("holds no test cases"), "{report}");
    assert!(report.lines().any(|l| l == "3 passed, 1 failed"), "{report}");
}

#[test]
fn malformed_bundle_gets_a_located_error() {
    let mut bytes = std::fs::read(fixture("mlp.bpte")).unwrap();
    bytes.truncate(bytes.len() / 2);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("truncated.bpte");
    std::fs::write(&path, &bytes).unwrap();
    let (ok, report) = ptec_check(&path);
    assert!(!ok);
    assert!(
        report.contains("not compiled") && report.contains("byte offset"),
        "{report}"
    );
    assert!(report.lines().any(|l| l == "0 passed, 1 failed"), "{report}");
}

/// Without its source tree (installed from crates.io), `ptec check`
/// builds its runner against the registry's ptec-runtime of its own
/// version; offline, with nothing cached, the error says what is missing.
#[test]
fn without_a_runtime_at_hand_the_error_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ptec"))
        .current_dir(tmp.path())
        .env("PTEC_RUNTIME_SOURCE", "registry")
        .env("CARGO_HOME", tmp.path().join("cargo-home"))
        .env("CARGO_NET_OFFLINE", "true")
        .arg("check")
        .arg("--target-dir")
        .arg(tmp.path().join("target"))
        .arg(fixture("mlp.bpte"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let want = format!("needs ptec-runtime {} and its dependencies", env!("CARGO_PKG_VERSION"));
    assert!(err.contains(&want) && err.contains("PTEC_RUNTIME_SOURCE"), "{err}");
}

/// A plan that fits a 64-bit address space but not a 32-bit one (3 GiB):
/// its generated code checks on x86-64, and on wasm32 the build fails with
/// one error naming the method, not with the overflows of its literals.
#[test]
fn a_plan_beyond_a_32_bit_address_space_is_a_located_error_there() {
    let (dir, path) = with_plan_of(3 << 30);
    let krate = dir.path().join("krate");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ptec"))
        .arg(&path)
        .arg("-o")
        .arg(krate.join("src/model.rs"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let runtime = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../runtime-min");
    std::fs::write(
        krate.join("Cargo.toml"),
        format!(
            "[package]\nname = \"big-plan\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
             [dependencies]\nptec-runtime = {{ path = {:?}, default-features = false }}\n\n[workspace]\n",
            runtime.display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(
        krate.join("src/lib.rs"),
        "#![no_std]\nmod model {\n    include!(\"model.rs\");\n}\n",
    )
    .unwrap();
    let lock = runtime.join("../Cargo.lock");
    std::fs::copy(lock, krate.join("Cargo.lock")).unwrap();
    let target_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/big-plan");
    let check = |target: Option<&str>| {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.arg("check").arg("--offline").arg("--target-dir").arg(&target_dir);
        cmd.current_dir(&krate);
        if let Some(t) = target {
            cmd.args(["--target", t]);
        }
        let out = cmd.output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, stderr) = check(None);
    assert!(ok, "{stderr}");
    // CI adds the target (`.ci/run`); elsewhere rustup may need to.
    let _ = Command::new("rustup")
        .args(["target", "add", "wasm32-unknown-unknown"])
        .output();
    let (ok, stderr) = check(Some("wasm32-unknown-unknown"));
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains(
            "ptec: the memory of method `forward` takes 3221225472 bytes, more than this target's address space holds"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("literal out of range"), "{stderr}");
}
