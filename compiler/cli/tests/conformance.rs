//! The conformance suite: every bundle of `../shared/corpus` (and its
//! `bench/`), compiled by ptec, built and run against PyTorch's outputs with
//! the manifest's tolerances. The bench's `_xnnpack` programs, which ship
//! without a bundle, run the test cases of the same model's portable bundle. Prints a table case → pass / fail /
//! unsupported and the `N passed, M failed` line.
//!
//! `cargo test -p ptec-cli --test conformance -- --ignored --nocapture`
//! shows the table (the test is in the slow set, docs/testing.md).
use ptec_cli::check::{check, CheckInput, CheckStatus};

/// Cases that must compile and pass. Grows as operators and delegates land;
/// a case not listed here that compiles must still pass.
const REQUIRED: &[&str] = &[
    "activations",
    "cond",
    "conv_net",
    "dtypes",
    "dynamic",
    "elementwise",
    "external_weights",
    "half",
    "kv_cache",
    "lstm",
    "mlp",
    "multi_method",
    "quantized",
    "reductions",
    "shapes",
    "signal_net",
    "stacktrace",
    "transformer",
    "encoder_256",
    "mlp_1024",
    "mobilenet_v2",
    "xnnpack_mlp",
    "xnnpack_partial",
    "encoder_256_xnnpack",
    "mlp_1024_xnnpack",
    "mobilenet_v2_xnnpack",
];

#[path = "common/corpus.rs"]
mod common;
use common::corpus;

/// Every corpus program built and run: minutes, left to the full run.
#[test]
#[ignore = "slow: run with `cargo test --workspace --tests -- --ignored`"]
fn corpus_bundles_reproduce_pytorch() {
    let Some(root) = corpus() else {
        return;
    };
    let mut names = Vec::new();
    let mut inputs = Vec::new();
    for dir in [root.clone(), root.join("bench")] {
        let m: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
        for (name, case) in m["cases"].as_object().unwrap() {
            let Some(bpte) = case["bpte"].as_str() else { continue };
            let mut path = dir.join(bpte);
            let mut cases = None;
            if !path.exists() {
                // The _xnnpack bench programs ship as .pte only: they are
                // checked against the bundle of the same model exported
                // portably (`ptec check X_xnnpack.pte --cases X.bpte`).
                let base = name
                    .strip_suffix("_xnnpack")
                    .and_then(|b| m["cases"][b]["bpte"].as_str());
                let (Some(base), Some(pte)) = (base, case["pte"].as_str()) else {
                    panic!("{name}: {bpte} is missing and there is no bundle of the same model");
                };
                path = dir.join(pte);
                cases = Some(dir.join(base));
            }
            let data = case["data_files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| dir.join(d.as_str().unwrap()))
                .collect();
            let (rtol, atol) = (case["rtol"].as_f64().unwrap(), case["atol"].as_f64().unwrap());
            names.push(name.clone());
            inputs.push(CheckInput {
                path,
                data,
                rtol,
                atol,
                cases,
                winograd: true,
            });
        }
    }
    for extra in ["mlp_bp04.bp", "multi_method_bp04.bp"] {
        names.push(extra.to_string());
        inputs.push(CheckInput {
            path: root.join(extra),
            data: vec![],
            rtol: 1e-4,
            atol: 1e-5,
            cases: None,
            winograd: true,
        });
    }
    // On one thread and on two: the kernels split large work, and every
    // split must reproduce PyTorch's outputs too.
    let results = check(&inputs, &[1, 2], false, |m| eprintln!("conformance: {m}")).unwrap();
    let (mut passed, mut failed, mut unsupported) = (0, 0, 0);
    let mut problems = Vec::new();
    println!("{:<24} {:<12} detail", "case", "result");
    for (name, r) in names.iter().zip(&results) {
        match &r.status {
            CheckStatus::Ran {
                lines,
                passed: p,
                failed: f,
            } => {
                let verdict = if *f == 0 { "pass" } else { "FAIL" };
                println!("{name:<24} {verdict:<12} {p} passed, {f} failed");
                if *f > 0 {
                    for l in lines.iter().filter(|l| !l.ends_with(": ok")) {
                        println!("    {l}");
                    }
                    problems.push(format!("{name}: {f} case(s) failed"));
                    failed += 1;
                } else {
                    passed += 1;
                }
            }
            CheckStatus::NotCompiled(e) => {
                let first = e.lines().next().unwrap_or("");
                println!("{name:<24} {:<12} {first}", "unsupported");
                unsupported += 1;
                let base = name.trim_end_matches("_bp04.bp");
                if REQUIRED.contains(&name.as_str()) || REQUIRED.contains(&base) {
                    problems.push(format!("{name}: required but not compiled: {e}"));
                }
            }
        }
    }
    println!("conformance: {passed} passed, {failed} failed, {unsupported} unsupported");
    assert!(problems.is_empty(), "{problems:#?}");
}
