//! The model fuzzer's fixed seed set (`fuzz/models/seeds`, made by
//! `fuzz/models/make_seeds.py`): random small models exported portably and
//! through the XNNPACK partitioner, each bundled with eager PyTorch's
//! outputs. Every one must compile and reproduce them within its own
//! tolerance, except those `expected_refusals.json` lists, which must be
//! refused with the message listed (`unsupported operator `...``, or
//! `unsupported: XNNPACK node kind ...`).
#[path = "common/listed.rs"]
mod listed;

use listed::{check_listed, Listed};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn seeds() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/models/seeds")
}

/// The seed set, checked for its size and its refusals' names.
fn seed_set() -> Vec<Listed> {
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
    for file in refusals.keys() {
        assert!(
            programs.iter().any(|p| p["file"] == file.as_str()),
            "expected_refusals.json names {file}, which is not in the seed set"
        );
    }
    programs
        .iter()
        .map(|p| {
            let file = p["file"].as_str().unwrap();
            Listed {
                path: dir.join(file),
                rtol: p["rtol"].as_f64().unwrap(),
                atol: p["atol"].as_f64().unwrap(),
                cases: Some(p["cases"].as_u64().unwrap() as usize),
                refusal: refusals.get(file).cloned(),
            }
        })
        .collect()
}

/// Builds all 120 programs in release mode (minutes): the full run's.
#[test]
#[ignore = "slow: run with `cargo test --workspace --tests -- --ignored`"]
fn model_fuzz_seed_set_reproduces_pytorch() {
    check_listed("model fuzz seed set", &seed_set());
}

/// The first few seeds, portable and XNNPACK, in the default run.
#[test]
fn a_few_model_fuzz_seeds_reproduce_pytorch() {
    let listed = seed_set();
    let few = &listed[..6];
    for flavour in ["_portable.bpte", "_xnnpack.bpte"] {
        assert!(few.iter().any(|l| l.path.to_string_lossy().ends_with(flavour)));
    }
    check_listed("model fuzz seeds", few);
}
