//! The model fuzzer's fixed seed set (`fuzz/models/seeds`, made by
//! `fuzz/models/make_seeds.py`): random small models exported portably and
//! through the XNNPACK partitioner, each bundled with eager PyTorch's
//! outputs. Every one must compile and reproduce them within its own
//! tolerance, except those `expected_refusals.json` lists, which must be
//! refused with the message listed (`unsupported operator `...``, or
//! `unsupported: XNNPACK node kind ...`).
use ptec_cli::check::{check, CheckInput, CheckStatus};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn seeds() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/models/seeds")
}

#[test]
fn model_fuzz_seed_set_reproduces_pytorch() {
    let dir = seeds();
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let refusals: BTreeMap<String, String> =
        serde_json::from_slice(&std::fs::read(dir.join("expected_refusals.json")).unwrap()).unwrap();
    let programs = manifest["programs"].as_array().unwrap();
    assert!(programs.len() >= 100, "only {} seed programs", programs.len());
    for flavour in ["portable", "xnnpack"] {
        let n = programs.iter().filter(|p| p["flavour"] == flavour).count();
        assert!(n >= 40, "only {n} {flavour} seed programs");
    }
    let mut inputs = Vec::new();
    let mut expected_cases = Vec::new();
    for p in programs {
        let file = p["file"].as_str().unwrap();
        inputs.push(CheckInput {
            path: dir.join(file),
            data: vec![],
            rtol: p["rtol"].as_f64().unwrap(),
            atol: p["atol"].as_f64().unwrap(),
            cases: None,
        });
        expected_cases.push((file.to_string(), p["cases"].as_u64().unwrap() as usize));
    }
    for file in refusals.keys() {
        assert!(
            expected_cases.iter().any(|(f, _)| f == file),
            "expected_refusals.json names {file}, which is not in the seed set"
        );
    }
    let results = check(&inputs, &[1], false, |m| eprintln!("model_fuzz: {m}")).unwrap();
    assert_eq!(results.len(), inputs.len());
    let mut problems = Vec::new();
    let (mut passed, mut refused) = (0, 0);
    for ((file, cases), r) in expected_cases.iter().zip(&results) {
        match (&r.status, refusals.get(file)) {
            (
                CheckStatus::Ran {
                    lines,
                    passed: p,
                    failed: f,
                },
                None,
            ) => {
                if *f != 0 || *p != *cases || lines.len() != *cases || !lines.iter().all(|l| l.ends_with(": ok")) {
                    problems.push(format!("{file}: {p} passed, {f} failed of {cases}: {lines:#?}"));
                } else {
                    passed += 1;
                }
            }
            (CheckStatus::Ran { .. }, Some(op)) => {
                problems.push(format!(
                    "{file}: compiled, but expected_refusals.json says ptec refuses it ({op}): remove it from the list"
                ));
            }
            (CheckStatus::NotCompiled(e), Some(op)) => {
                if e.contains(op.as_str()) {
                    refused += 1;
                } else {
                    problems.push(format!("{file}: refused, but not with `{op}`: {e}"));
                }
            }
            (CheckStatus::NotCompiled(e), None) => problems.push(format!("{file}: not compiled: {e}")),
        }
    }
    println!("model fuzz seed set: {passed} passed, {refused} refused as expected");
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(passed + refused, programs.len());
}
