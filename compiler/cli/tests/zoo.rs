//! The model zoo's default list (`tests/zoo/default`, made by
//! `tests/zoo/zoo.py --commit`): tiny configurations of torchvision, timm
//! and Hugging Face models, exported portably and through the XNNPACK
//! partitioner, each bundled with eager PyTorch's outputs. Every one must
//! compile and reproduce them within its tolerance, except those the
//! manifest lists as refused, which must be refused for the reason listed.
#[path = "common/listed.rs"]
mod listed;

use listed::{check_listed, Listed};
use std::path::PathBuf;

/// The default list.
fn zoo_list() -> Vec<Listed> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/zoo/default");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let programs = manifest["programs"].as_array().unwrap();
    assert!(programs.len() >= 20, "only {} zoo programs", programs.len());
    programs
        .iter()
        .map(|p| Listed {
            path: dir.join(p["file"].as_str().unwrap()),
            rtol: p["rtol"].as_f64().unwrap(),
            atol: p["atol"].as_f64().unwrap(),
            cases: Some(2),
            refusal: (p["result"] == "refused").then(|| p["reason"].as_str().unwrap().to_string()),
        })
        .collect()
}

/// Builds every program in release mode (many minutes): the full run's.
#[test]
#[ignore = "slow: run with `cargo test --workspace --tests -- --ignored`"]
fn zoo_default_list_reproduces_pytorch() {
    let listed = zoo_list();
    let (passed, _) = check_listed("zoo default list", &listed);
    assert!(
        passed * 10 >= listed.len() * 8,
        "only {passed} of {} zoo programs pass",
        listed.len()
    );
}

/// A transformer and a convolutional network, both ways, in the default
/// run.
#[test]
fn a_few_zoo_programs_reproduce_pytorch() {
    let few: Vec<Listed> = zoo_list()
        .into_iter()
        .filter(|l| {
            let file = l.path.file_name().unwrap().to_string_lossy();
            file.starts_with("hf_bert_") || file.starts_with("tv_regnet_")
        })
        .collect();
    assert_eq!(few.len(), 4);
    check_listed("zoo programs", &few);
}
