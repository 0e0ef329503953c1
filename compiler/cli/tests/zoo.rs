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

#[test]
fn zoo_default_list_reproduces_pytorch() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/zoo/default");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let programs = manifest["programs"].as_array().unwrap();
    assert!(programs.len() >= 20, "only {} zoo programs", programs.len());
    let listed: Vec<Listed> = programs
        .iter()
        .map(|p| Listed {
            path: dir.join(p["file"].as_str().unwrap()),
            rtol: p["rtol"].as_f64().unwrap(),
            atol: p["atol"].as_f64().unwrap(),
            cases: Some(2),
            refusal: (p["result"] == "refused").then(|| p["reason"].as_str().unwrap().to_string()),
        })
        .collect();
    let (passed, _) = check_listed("zoo default list", &listed);
    assert!(
        passed * 10 >= programs.len() * 8,
        "only {passed} of {} zoo programs pass",
        programs.len()
    );
}
