//! ExecuTorch's devtools on ptec's ETDumps: `ptec bench --etdump` and
//! `ptec check --debug-outputs` on the `mlp` and `channels_last` fixtures,
//! read by ExecuTorch's own `Inspector` (from the pinned `executorch`
//! package) with each fixture's ETRecord (`tests/fixtures/NAME.etrecord`).
//!
//! The Python environment is the one `examples/chat/setup.sh` makes (or
//! `PTEC_VENV`); without it the test says `NOT RUN`, unless
//! `PTEC_REQUIRE_CHAT` is set (CI), when it fails. Model Explorer's
//! ExecuTorch extension is installed over it once, into a venv of its own
//! in the user's cache (`tests/devtools/model-explorer-pins.txt`).
#[path = "common/venv.rs"]
mod venv;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use venv::venv_or_not_run;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures").join(name)
}

fn ptec(args: &[&std::ffi::OsStr]) -> String {
    let (ok, text) = ptec_status(args);
    assert!(ok, "ptec {args:?} failed:\n{text}");
    text
}

/// Whether ptec succeeded, and what it printed.
fn ptec_status(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ptec")).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// What ExecuTorch's Inspector makes of `etdump` (and its debug buffer),
/// with the ETRecord of fixture `name`.
fn inspect(venv: &Path, name: &str, etdump: &Path, debug: Option<&Path>) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/devtools/read_etdump.py");
    let mut cmd = Command::new(venv.join("bin/python"));
    cmd.arg(script).arg(fixture(&format!("{name}.etrecord"))).arg(etdump);
    if let Some(d) = debug {
        cmd.arg(d);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "the Inspector failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// `ptec bench mlp.pte --iters 4 --etdump` into `dir`: the profile.
fn mlp_profile(dir: &Path) -> PathBuf {
    let etdump = dir.join("profile.etdp");
    let file = fixture("mlp.pte");
    let args = [
        "bench".as_ref(),
        file.as_os_str(),
        "--iters".as_ref(),
        "4".as_ref(),
        "--etdump".as_ref(),
        etdump.as_os_str(),
    ];
    ptec(&args);
    etdump
}

fn events(doc: &Value) -> &[Value] {
    let blocks = doc["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 1, "one block of runs: {doc}");
    assert_eq!(blocks[0]["name"], "Execute");
    blocks[0]["events"].as_array().unwrap()
}

fn times(e: &Value) -> Vec<f64> {
    e["times_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect()
}

fn ops(e: &Value) -> Vec<&str> {
    e["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect()
}

/// The gaps by the operator the Inspector names on the reference's side.
fn gaps(doc: &Value) -> Vec<(String, f64)> {
    doc["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let op = g["aot_ops"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o.as_str().unwrap())
                .collect::<Vec<_>>();
            (op.join(","), g["gap"][0].as_f64().unwrap())
        })
        .collect()
}

/// `ptec check FILE --debug-outputs` into `dir`: the ETDump and its debug
/// buffer; `passes` says whether the cases must pass or fail.
fn debug_outputs(dir: &Path, file: &Path, passes: bool) -> (PathBuf, PathBuf) {
    let etdump = dir.join("case.etdp");
    let args = [
        "check".as_ref(),
        file.as_os_str(),
        "--debug-outputs".as_ref(),
        etdump.as_os_str(),
    ];
    let (ok, report) = ptec_status(&args);
    assert_eq!(ok, passes, "{report}");
    assert!(report.contains("the outputs of case forward[0]"), "{report}");
    (etdump, dir.join("case.bin"))
}

#[test]
fn the_inspector_reads_ptec_profiles_and_intermediate_outputs() {
    let Some(venv) = venv_or_not_run() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();

    // A profile of 4 runs: the operators of the program's instructions
    // (ExecuTorch's numbering: instruction 1 is the first addmm, with the
    // permute 0 and the relu 2 that ptec folded into it; 4 the second, 5
    // the softmax), each timed in every run.
    let etdump = mlp_profile(dir.path());
    let doc = inspect(&venv, "mlp", &etdump, None);
    let events = events(&doc);
    let by_instruction = |i: i64| {
        events
            .iter()
            .find(|e| e["instruction"] == i && e["name"] == "OPERATOR_CALL")
            .unwrap_or_else(|| panic!("no operator event for instruction {i}: {doc}"))
    };
    assert!(ops(by_instruction(1)).contains(&"aten.addmm.default"), "{doc}");
    assert!(ops(by_instruction(4)).contains(&"aten.addmm.default"), "{doc}");
    assert_eq!(ops(by_instruction(5)), ["aten._softmax.default"], "{doc}");
    let execute = events.iter().find(|e| e["name"] == "Method::execute").unwrap();
    let whole = times(execute);
    assert_eq!(whole.len(), 4, "{doc}");
    for i in [1, 4, 5] {
        let t = times(by_instruction(i));
        assert_eq!(t.len(), 4, "{doc}");
        for (run, (&op, &all)) in t.iter().zip(&whole).enumerate() {
            // Milliseconds: an operator of this size takes well under one,
            // and never more than the execution around it.
            assert!(
                op > 0.0 && op < all && all < 100.0,
                "run {run}: {op} ms of {all} ms: {doc}"
            );
        }
    }

    // The intermediate outputs of a case, against the ETRecord's edge
    // program run by PyTorch on the same input.
    let (etdump, debug) = debug_outputs(dir.path(), &fixture("mlp.bpte"), true);
    let doc = inspect(&venv, "mlp", &etdump, Some(&debug));
    let found = gaps(&doc);
    let names: Vec<&str> = found.iter().map(|(op, _)| op.as_str()).collect();
    assert_eq!(names, ["relu", "linear_1", "softmax"], "{doc}");
    for (op, gap) in &found {
        assert!(*gap < 1e-12, "{op}: mean squared gap {gap}: {doc}");
    }

    // The same outputs with the relu's perturbed: the gap points at it.
    // Its output is the first tensor ptec logs (that of instruction 1, which
    // does the relu), at the start of the debug buffer: 4 × 32 floats.
    let mut bytes = std::fs::read(&debug).unwrap();
    for x in bytes[..4 * 32 * 4].chunks_exact_mut(4) {
        let v = f32::from_le_bytes(x.try_into().unwrap()) + 0.5;
        x.copy_from_slice(&v.to_le_bytes());
    }
    let perturbed = dir.path().join("perturbed.bin");
    std::fs::write(&perturbed, bytes).unwrap();
    let doc = inspect(&venv, "mlp", &etdump, Some(&perturbed));
    for (op, gap) in gaps(&doc) {
        if op == "relu" {
            // Every element off by 0.5.
            assert!((gap - 0.25).abs() < 1e-6, "the perturbed relu's gap is {gap}: {doc}");
        } else {
            assert!(gap < 1e-12, "{op}: mean squared gap {gap}: {doc}");
        }
    }
}

/// Images ptec keeps NHWC are logged in PyTorch's NCHW order, and a
/// convolution that absorbed its batch norm and relu is logged as the relu:
/// every intermediate output lines up with eager PyTorch's.
#[test]
fn the_inspector_lines_up_channels_last_images() {
    let Some(venv) = venv_or_not_run() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (etdump, debug) = debug_outputs(dir.path(), &fixture("channels_last.bpte"), true);
    let doc = inspect(&venv, "channels_last", &etdump, Some(&debug));
    let found = gaps(&doc);
    let names: Vec<&str> = found.iter().map(|(op, _)| op.as_str()).collect();
    // The stem, c1 and c2 convolutions as their relus, the depthwise one as
    // its clamp; `conv2d_4` is the grouped convolution, left NCHW.
    assert_eq!(
        names,
        [
            "relu",
            "max_pool2d",
            "relu_1",
            "relu_2",
            "clamp",
            "conv2d_4",
            "conv2d_5",
            "mean",
            "linear"
        ],
        "{doc}"
    );
    for (op, gap) in &found {
        assert!(*gap < 1e-10, "{op}: mean squared gap {gap}: {doc}");
    }
}

/// A program with one operator perturbed runs wrong in ptec's compiled
/// code, and the Inspector's gap points at that operator: the outputs
/// before it line up with eager PyTorch's, its own is the first that does
/// not. The perturbation is the second batch norm's epsilon (1e-5 in the
/// file, made 1.0), which ptec folds into the convolution before it; the
/// ETRecord keeps the original, as PyTorch's reference.
#[test]
fn the_inspector_points_at_a_perturbed_operator() {
    let Some(venv) = venv_or_not_run() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = perturbed_channels_last(dir.path());
    let (etdump, debug) = debug_outputs(dir.path(), &file, false);
    let doc = inspect(&venv, "channels_last", &etdump, Some(&debug));
    let found = gaps(&doc);
    let first = found.iter().position(|(_, gap)| *gap > 1e-10);
    let names: Vec<&str> = found.iter().map(|(op, _)| op.as_str()).collect();
    // The second batch norm is c1's, whose relu is `relu_1`.
    assert_eq!(first.map(|k| names[k]), Some("relu_1"), "{doc}");
    assert!(found[first.unwrap()].1 > 1e-3, "{doc}");
}

/// The `channels_last` bundle with its second batch norm's epsilon made
/// 1.0 (1e-5 in the file), written into `dir`.
fn perturbed_channels_last(dir: &Path) -> PathBuf {
    let mut bytes = std::fs::read(fixture("channels_last.bpte")).unwrap();
    let eps = 1e-5f64.to_le_bytes();
    let at: Vec<usize> = (0..bytes.len().saturating_sub(7))
        .filter(|&i| bytes[i..i + 8] == eps)
        .collect();
    assert_eq!(at.len(), 3, "the three batch norms' epsilons, in program order");
    bytes[at[1]..at[1] + 8].copy_from_slice(&1.0f64.to_le_bytes());
    let file = dir.join("perturbed.bpte");
    std::fs::write(&file, bytes).unwrap();
    file
}

/// `ptec check` with `PTEC_VENV` set to `venv`: whether it passed, and
/// what it printed.
fn check_with_venv(venv: &Path, args: &[&std::ffi::OsStr]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ptec"))
        .arg("check")
        .args(args)
        .env("PTEC_VENV", venv)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// A delegate call ptec compiled is compared with ExecuTorch's as a
/// whole: ExecuTorch logs the call's arguments (its inputs, then its
/// outputs) and no node of it, ptec each node's outputs and then the
/// call's. Before, the first node's output was compared with the call's
/// first input, and a call ptec computes right was named as wrong.
#[test]
fn check_compares_a_delegate_call_by_its_outputs() {
    let Some(venv) = venv_or_not_run() else {
        return;
    };
    // ptec's convolution and XNNPACK's round differently in the last
    // bits: at atol 1e-12 the cases fail, and the call is named with a
    // difference of a few ulp.
    let file = fixture("xnnpack_conv.bpte");
    let (ok, report) = check_with_venv(
        &venv,
        &[
            file.as_os_str(),
            "--atol".as_ref(),
            "1e-12".as_ref(),
            "--rtol".as_ref(),
            "0".as_ref(),
        ],
    );
    assert!(!ok, "{report}");
    let line = report
        .lines()
        .find(|l| l.starts_with("first instruction whose output differs"))
        .unwrap_or_else(|| panic!("no instruction named:\n{report}"));
    assert!(line.contains("instruction 0 (delegate `XnnpackBackend`)"), "{line}");
    let number_after = |key: &str| -> f64 {
        let at = line.find(key).unwrap_or_else(|| panic!("no `{key}` in {line}")) + key.len();
        line[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .trim_end_matches(',')
            .parse()
            .unwrap()
    };
    let (diff, scale) = (number_after("max |ptec - ExecuTorch| "), number_after("values reach "));
    assert!(diff > 0.0 && diff <= 1e-6 * scale.max(1.0), "{line}");
}

/// The arguments (value indices) of instruction `n` of the first method
/// of the bundle `file`, as ExecuTorch's Python reader of programs gives
/// them.
fn instruction_args(venv: &Path, file: &Path, n: usize) -> Vec<u64> {
    let script = "import sys, json\n\
        from executorch.devtools.bundled_program.serialize import deserialize_from_flatbuffer_to_bundled_program\n\
        from executorch.exir._serialize._program import deserialize_pte_binary\n\
        bundle = deserialize_from_flatbuffer_to_bundled_program(open(sys.argv[1], 'rb').read())\n\
        program = deserialize_pte_binary(bundle.program)\n\
        program = getattr(program, 'program', program)\n\
        chain = program.execution_plan[0].chains[0]\n\
        print(json.dumps(chain.instructions[int(sys.argv[2])].instr_args.args))\n";
    let out = Command::new(venv.join("bin/python"))
        .arg("-c")
        .arg(script)
        .arg(file)
        .arg(n.to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// A failing `ptec check` runs the case in ExecuTorch's runtime and names
/// the first instruction whose output differs. With ExecuTorch running the
/// original program as the reference, ptec's run of the perturbed one
/// first differs at instruction 6, the relu after the second batch norm
/// (the stem's convolution, batch norm and relu are 0-2, the max pooling
/// 3, c1's convolution 4 and batch norm 5): ptec computes it in the
/// convolution it folded the batch norm into, and logs that output as the
/// relu's. With ExecuTorch running the perturbed program itself, both
/// agree everywhere, and the message says the program is off, not ptec.
#[test]
fn check_names_the_first_instruction_that_differs_from_executorch() {
    let Some(venv) = venv_or_not_run() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = perturbed_channels_last(dir.path());
    let original = fixture("channels_last.bpte");
    let (ok, report) = check_with_venv(&venv, &[file.as_os_str(), "--reference".as_ref(), original.as_os_str()]);
    assert!(!ok, "{report}");
    // The relu's out argument, as ExecuTorch's own reader of the file
    // gives it (`relu.out(self, *, out)`: its second argument).
    let out = instruction_args(&venv, &original, 6)[1];
    assert!(
        report.contains(&format!(
            "first instruction whose output differs from ExecuTorch's runtime: `forward` instruction 6 (aten::relu.out): \
             output 0 (value {out}): max |ptec - ExecuTorch| "
        )),
        "{report}"
    );
    // The size of the difference, and the tolerance it is beyond (the
    // check's defaults).
    let tolerance = ptec::Tolerance::default();
    let diff: f64 = report
        .split("max |ptec - ExecuTorch| ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no difference in {report}"));
    assert!(diff > 1e-3, "{report}");
    assert!(
        report.contains(&format!(
            "beyond the check's tolerance (rtol {}, atol {})",
            tolerance.rtol, tolerance.atol
        )),
        "{report}"
    );
    // The program as exported passes, and nothing is named.
    let (ok, report) = check_with_venv(&venv, &[original.as_os_str()]);
    assert!(ok, "{report}");
    assert!(
        !report.contains("first instruction whose output differs") && !report.contains("no reference"),
        "{report}"
    );
    // A reference with other instructions cannot be matched, and is not.
    let other = fixture("mlp.bpte");
    let (ok, report) = check_with_venv(&venv, &[file.as_os_str(), "--reference".as_ref(), other.as_os_str()]);
    assert!(!ok, "{report}");
    assert!(
        report.contains("no reference to find the first wrong instruction: --reference")
            && report.contains("does not run the instructions of"),
        "{report}"
    );
    // Reusing the outputs --debug-outputs wrote, against the same program.
    let etdump = dir.path().join("case.etdp");
    let (ok, report) = check_with_venv(
        &venv,
        &[file.as_os_str(), "--debug-outputs".as_ref(), etdump.as_os_str()],
    );
    assert!(!ok, "{report}");
    let compared = report
        .split("ExecuTorch's runtime computes what ptec does at every instruction compared (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|n| n.parse::<usize>().ok());
    // Every instruction whose outputs ptec logs: the Inspector's nine rows
    // in `the_inspector_lines_up_channels_last_images`.
    assert_eq!(compared, Some(9), "{report}");
    assert!(
        report.contains("and fails this case too: the program, or its bundled outputs, is off, not ptec"),
        "{report}"
    );
}

/// Without ExecuTorch's runtime to compare with, a failing check says so
/// instead of naming an instruction.
#[test]
fn check_says_when_there_is_no_reference() {
    let dir = tempfile::tempdir().unwrap();
    let file = perturbed_channels_last(dir.path());
    let (ok, report) = check_with_venv(&dir.path().join("no-venv"), &[file.as_os_str()]);
    assert!(!ok, "{report}");
    assert!(
        report.contains("no reference to find the first wrong instruction: PTEC_VENV=")
            && report.contains("has no bin/python"),
        "{report}"
    );
    assert!(!report.contains("first instruction whose output differs"), "{report}");
}

/// A venv with Model Explorer's ETRecord adapter and ETDump provider
/// (`tests/devtools/model-explorer-pins.txt`) that sees the pinned
/// environment's packages (executorch, torch) through a `.pth` file: made
/// once per pins and environment, in the user's cache.
fn explorer_venv(base: &Path) -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/devtools");
    let pins_file = here.join("model-explorer-pins.txt");
    let pins = std::fs::read(&pins_file).unwrap();
    let key = venv::short_hash(&[&pins, base.as_os_str().as_encoded_bytes()]);
    let v = venv::cache_dir()
        .join("ptec/model-explorer")
        .join(format!("venv-{key}"));
    if std::fs::read(v.join("pins.ok")).is_ok_and(|ok| ok == pins) {
        return v;
    }
    let python = |exe: &Path, code: &str| {
        let out = Command::new(exe).args(["-c", code]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let run = |cmd: &mut Command| {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let _ = std::fs::remove_dir_all(&v);
    // The same interpreter as the environment's, so that its packages load.
    let interpreter = python(&base.join("bin/python"), "import sys; print(sys._base_executable)");
    run(Command::new(interpreter).args(["-m", "venv"]).arg(&v));
    let site = "import sysconfig; print(sysconfig.get_paths()['purelib'])";
    let base_site = python(&base.join("bin/python"), site);
    std::fs::write(
        PathBuf::from(python(&v.join("bin/python"), site)).join("ptec-base.pth"),
        base_site + "\n",
    )
    .unwrap();
    run(Command::new(v.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&pins_file));
    std::fs::write(v.join("pins.ok"), pins).unwrap();
    v
}

/// Model Explorer's ETDump overlay (its ExecuTorch extension, as a user
/// runs it on an ETRecord with a profile) puts ptec's kernel times on the
/// graph's nodes: it reads ExecuTorch's `native_call_*` kernel events
/// (and skips `OPERATOR_CALL`), which ptec's tracer writes for each
/// kernel instruction; without them it found nothing to show.
#[test]
fn model_explorer_overlays_ptec_profiles_on_the_graph() {
    let Some(venv) = venv_or_not_run() else {
        return;
    };
    let explorer = explorer_venv(&venv);
    let dir = tempfile::tempdir().unwrap();
    let etdump = mlp_profile(dir.path());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/devtools/explorer_overlay.py");
    let out = Command::new(explorer.join("bin/python"))
        .arg(script)
        .arg(fixture("mlp.etrecord"))
        .arg(&etdump)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let graphs = doc.as_array().unwrap();
    assert_eq!(graphs.len(), 1, "{doc}");
    let g = &graphs[0];
    assert_eq!(g["id"], "forward");
    assert!(g["error"].as_str().unwrap_or("").is_empty(), "{}", g["error"]);
    let handle = |node: &str| g["nodes"][node]["debug_handle"].as_str().map(str::to_string);
    let overlay = |name: &str| -> Vec<(String, f64)> {
        let o = g["overlays"][name]
            .as_object()
            .unwrap_or_else(|| panic!("no overlay {name}: {g}"));
        o.iter().map(|(k, v)| (k.clone(), v.as_f64().unwrap())).collect()
    };
    // Every node of the kernel instructions ptec timed (1 and 3, each a
    // permute and an addmm; 4, the softmax) and no other: the relu (2)
    // runs inside the first addmm in ptec's code, which times it there.
    let mut handles: Vec<String> = overlay("Runtime Event Count")
        .iter()
        .map(|(node, count)| {
            assert_eq!(*count, 1.0, "{node}: one kernel event");
            handle(node).unwrap()
        })
        .collect();
    handles.sort();
    assert_eq!(handles, ["1", "1", "3", "3", "4"]);
    let (avg, min, max) = (
        overlay("Runtime Total Avg (ms)"),
        overlay("Runtime Total Min (ms)"),
        overlay("Runtime Total Max (ms)"),
    );
    for ((node, a), ((_, lo), (_, hi))) in avg.iter().zip(min.iter().zip(&max)) {
        assert!(
            *lo > 0.0 && lo <= a && a <= hi && *hi < 100.0,
            "{node}: {lo} {a} {hi} ms"
        );
        // The nodes of one instruction show its time.
        for (other, b) in &avg {
            if handle(other) == handle(node) {
                assert_eq!(a, b, "{node} and {other}");
            }
        }
    }
}

/// Whether ExecuTorch's runtime runs `bundle`'s first case with a debug
/// buffer of `size` bytes (it stops the process when the buffer is full).
fn executorch_logs_into(venv: &Path, bundle: &Path, size: u64) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/devtools/run_logged.py");
    let out = Command::new(venv.join("bin/python"))
        .arg(script)
        .arg(bundle)
        .arg(size.to_string())
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || err.contains("failed to write tensor to debug buffer"),
        "ExecuTorch failed otherwise:\n{err}"
    );
    out.status.success()
}

/// ExecuTorch logs every instruction's output, ptec a fused chain once
/// (convolution, batch norm and relu in `conv_chains`), so ExecuTorch's
/// log is larger than ptec's by more than the factor of two `ptec check`
/// once gave it: its reference run then stopped (ResNet-50) and no first
/// wrong instruction was named. The size worked out from the program
/// holds what ExecuTorch logs.
#[test]
fn the_reference_run_gets_the_debug_buffer_it_fills() {
    let Some(venv) = venv_or_not_run() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = fixture("conv_chains.bpte");
    let (_, debug) = debug_outputs(dir.path(), &file, true);
    let ptec_log = std::fs::metadata(&debug).unwrap().len();
    let bytes = std::fs::read(&file).unwrap();
    let loaded = ptec::load(&bytes, &[]).unwrap();
    let size = ptec_cli::reference::executorch_log_bytes(&loaded, "forward");
    assert!(
        !executorch_logs_into(&venv, &file, 2 * ptec_log),
        "twice ptec's log ({ptec_log} bytes) was enough"
    );
    assert!(executorch_logs_into(&venv, &file, size), "{size} bytes were not enough");
}
