//! `ptec bench` from the command line: one JSON line with et_runner's keys
//! and ptec's, a planned size equal to the program's plan, outputs that,
//! given a bundled case's input, are that case's expected output, and a
//! per-instruction profile. Each run builds a program in release mode: the
//! fast set keeps two, the rest are in the slow set (docs/testing.md).
use ptec::ir::TestValue;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn ptec(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ptec")).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The bytes of a bundled tensor value.
fn tensor_bytes(bundle: &[u8], v: &TestValue) -> Vec<u8> {
    match v {
        TestValue::Tensor { data, .. } => bundle[data.offset..data.offset + data.len].to_vec(),
        other => panic!("tensor expected, got {other:?}"),
    }
}

/// Little-endian f32s from their bytes.
fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn reports_et_runner_keys_and_the_planned_size() {
    let mlp = fixture("mlp.pte");
    let (ok, stdout, stderr) = ptec(&["bench", path_str(&mlp), "--iters", "4", "--warmup", "1", "--portable"]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let keys: Vec<&str> = report.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    let mut want = vec![
        "model",
        "method",
        "threads",
        "load_us",
        "planned_bytes",
        "iters",
        "min_us",
        "median_us",
        "max_us",
        "first_us",
        "gen_ms",
        "build_s",
        "binary_bytes",
        "state_bytes",
        "peak_rss_bytes",
    ];
    want.sort();
    assert_eq!(keys, want);
    assert_eq!(report["model"], path_str(&mlp));
    assert_eq!(report["method"], "forward");
    assert_eq!(report["threads"], 1);
    assert_eq!(report["iters"], 4);
    let num = |k: &str| report[k].as_f64().unwrap_or_else(|| panic!("{k} is not a number"));
    assert!(num("min_us") <= num("median_us") && num("median_us") <= num("max_us"));
    assert!(num("min_us") >= 0.0 && num("load_us") >= 0.0 && num("first_us") > 0.0);
    assert!(num("gen_ms") > 0.0 && num("build_s") > 0.0);
    // The executable embeds the program file.
    assert!(num("binary_bytes") > std::fs::metadata(&mlp).unwrap().len() as f64);

    let (ok, inspect, stderr) = ptec(&["inspect", "--json", path_str(&mlp)]);
    assert!(ok, "{stderr}");
    let doc: Value = serde_json::from_str(&inspect).unwrap();
    let plan: u64 = doc["methods"][0]["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .sum();
    assert!(plan > 0);
    assert_eq!(report["planned_bytes"].as_u64(), Some(plan));
    // The program owns at most the plan and little more: its scratch fits
    // in the plan's free bytes, the bytes of the transposed weights the
    // compiler folded are cut (the activations, 4x16, 4x32 and twice 4x10
    // floats, stay), and beyond the arena it holds only its counters and
    // flags.
    let state = report["state_bytes"].as_u64().unwrap();
    assert!(
        state >= 4 * (64 + 128 + 2 * 40) && state <= plan + 64,
        "state {state}, plan {plan}"
    );
    if cfg!(target_os = "linux") {
        let rss = report["peak_rss_bytes"].as_u64().unwrap();
        assert!(rss > state, "peak resident memory {rss} below the program's {state}");
    }
}

#[test]
#[ignore = "slow: run with `cargo test --workspace --tests -- --ignored`"]
fn ab_bands_times_each_iteration_both_ways() {
    let attention = fixture("attention.pte");
    let args = [
        "bench",
        path_str(&attention),
        "--iters",
        "6",
        "--warmup",
        "1",
        "--portable",
    ];
    let (ok, stdout, stderr) = ptec(&[&args[..], &["--threads", "2", "--ab-bands"]].concat());
    assert!(ok, "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["iters"], 6);
    assert!(
        report["bands_off_median_us"].as_f64().is_some_and(|us| us > 0.0),
        "{stdout}"
    );
    assert!(report["bands_on_faster"].as_u64().is_some_and(|n| n <= 6), "{stdout}");
    // Without the flag the report has neither key.
    let (ok, stdout, stderr) = ptec(&args);
    assert!(ok, "{stderr}");
    assert!(!stdout.contains("bands_"), "{stdout}");
}

#[test]
#[ignore = "slow: run with `cargo test --workspace --tests -- --ignored`"]
fn given_a_cases_input_dumps_its_expected_output() {
    let bundle = fixture("mlp.bpte");
    let bytes = std::fs::read(&bundle).unwrap();
    let loaded = ptec::load(&bytes, &[]).unwrap();
    let case = &loaded.suites[0].cases[1];
    let raw = |v: &TestValue| tensor_bytes(&bytes, v);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input0.bin");
    std::fs::write(&input, raw(&case.inputs[0])).unwrap();
    let dump = dir.path().join("out");
    let (ok, _, stderr) = ptec(&[
        "bench",
        path_str(&bundle),
        "--iters",
        "2",
        "--portable",
        "--input",
        &format!("0={}", path_str(&input)),
        "--dump-outputs",
        path_str(&dump),
        "--profile",
    ]);
    assert!(ok, "{stderr}");
    // The profile ranks instructions; mlp.bpte has 6, three folded away.
    assert!(stderr.contains("us per execution, costliest instructions:"), "{stderr}");
    let ranked = stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("instruction "))
        .count();
    assert_eq!(ranked, 6, "{stderr}");
    let got = floats(&std::fs::read(dump.join("output0.bin")).unwrap());
    let want = floats(&raw(&case.expected[0]));
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-5 + 1e-4 * w.abs(), "{g} vs {w}");
    }
}

#[test]
fn bad_arguments_are_errors_not_crashes() {
    let mlp = fixture("mlp.pte");
    let mlp = path_str(&mlp);
    let (ok, _, stderr) = ptec(&[
        "bench",
        mlp,
        "--iters",
        "1",
        "--portable",
        "--input",
        "0=/nonexistent/x.bin",
    ]);
    assert!(!ok);
    assert!(stderr.contains("/nonexistent/x.bin"), "{stderr}");
    let (ok, _, stderr) = ptec(&["bench", mlp, "--iters", "1", "--portable", "--method", "nope"]);
    assert!(!ok);
    assert!(stderr.contains("no method nope"), "{stderr}");
    let (ok, _, _) = ptec(&["bench", mlp, "--iters", "0"]);
    assert!(!ok);
    let delegating = fixture("tiny_delegate.pte");
    let (ok, _, stderr) = ptec(&["bench", path_str(&delegating)]);
    assert!(!ok);
    assert!(stderr.contains("has no user backends"), "{stderr}");
    let (ok, _, stderr) = ptec(&["bench", "/nonexistent/model.pte"]);
    assert!(!ok);
    assert!(
        stderr.contains("/nonexistent/model.pte") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

/// A program may reuse an input's planned bytes once it has read them (this
/// BERT's token ids are overwritten by later work), so every timed
/// execution must be given its inputs again: the last of several
/// executions still computes the case's expected outputs.
#[test]
#[ignore = "slow: run with `cargo test --workspace --tests -- --ignored`"]
fn every_execution_gets_its_inputs_afresh() {
    let bundle = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/zoo/default/hf_bert_xnnpack.bpte");
    let bytes = std::fs::read(&bundle).unwrap();
    let loaded = ptec::load(&bytes, &[]).unwrap();
    let case = &loaded.suites[0].cases[0];
    let raw = |v: &TestValue| tensor_bytes(&bytes, v);
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("out");
    let mut args: Vec<String> = [
        "bench",
        path_str(&bundle),
        "--iters",
        "3",
        "--warmup",
        "1",
        "--portable",
    ]
    .map(String::from)
    .to_vec();
    for (i, input) in case.inputs.iter().enumerate() {
        let file = dir.path().join(format!("input{i}.bin"));
        std::fs::write(&file, raw(input)).unwrap();
        args.extend(["--input".into(), format!("{i}={}", path_str(&file))]);
    }
    args.extend(["--dump-outputs".into(), path_str(&dump).into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, _, stderr) = ptec(&args);
    assert!(ok, "{stderr}");
    assert_eq!(case.expected.len(), 2);
    for (i, expected) in case.expected.iter().enumerate() {
        let got = floats(&std::fs::read(dump.join(format!("output{i}.bin"))).unwrap());
        let want = floats(&raw(expected));
        assert_eq!(got.len(), want.len());
        // The zoo's tolerance for this program (tests/zoo/default/manifest.json).
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4 + 1e-4 * w.abs(), "output {i}: {g} vs {w}");
        }
    }
}
