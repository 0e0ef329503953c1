//! `ptec inspect` over the shared corpus: every file reads and verifies, and
//! its operators are the manifest's; and its byte counts of test cases.
use std::collections::BTreeSet;
use std::path::PathBuf;

#[path = "common/corpus.rs"]
mod common;
use common::corpus;

fn operators(path: &std::path::Path, data: &[PathBuf]) -> BTreeSet<String> {
    let bytes = std::fs::read(path).unwrap();
    let data: Vec<Vec<u8>> = data.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let loaded = ptec::load(&bytes, &refs).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc = ptec_cli::inspect::to_json(&loaded, bytes.len());
    doc["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_corpus_file_matches_its_manifest_operators() {
    let Some(root) = corpus() else { return };
    let mut checked = 0;
    for (dir, manifest) in [
        (root.clone(), root.join("manifest.json")),
        (root.join("bench"), root.join("bench/manifest.json")),
    ] {
        let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
        for (name, case) in m["cases"].as_object().unwrap() {
            let want: BTreeSet<String> = case["ops"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect();
            let data: Vec<PathBuf> = case["data_files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| dir.join(d.as_str().unwrap()))
                .collect();
            for key in ["pte", "bpte"] {
                let Some(file) = case[key].as_str() else { continue };
                let path = dir.join(file);
                if !path.exists() {
                    continue;
                }
                assert_eq!(operators(&path, &data), want, "{name}: {}", path.display());
                checked += 1;
            }
        }
    }
    // BP04 bundles and the .ptd file are not in the manifest's file keys.
    for extra in ["mlp_bp04.bp", "multi_method_bp04.bp"] {
        let stem = extra.trim_end_matches("_bp04.bp");
        assert_eq!(
            operators(&root.join(extra), &[]),
            operators(&root.join(format!("{stem}.pte")), &[]),
            "{extra}"
        );
        checked += 1;
    }
    let ptd = std::fs::read(root.join("external_weights.ptd")).unwrap();
    let loaded = ptec::load(&ptd, &[]).unwrap();
    assert_eq!(loaded.tensor_data.unwrap().tensors.len(), 4);
    eprintln!("checked {checked} corpus files");
    assert!(checked >= 40, "only {checked} files checked");
}

#[test]
fn bundles_carry_the_manifest_test_cases() {
    let Some(root) = corpus() else { return };
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(root.join("manifest.json")).unwrap()).unwrap();
    for (name, case) in m["cases"].as_object().unwrap() {
        let path = root.join(case["bpte"].as_str().unwrap());
        let data: Vec<Vec<u8>> = case["data_files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| std::fs::read(root.join(d.as_str().unwrap())).unwrap())
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let bytes = std::fs::read(&path).unwrap();
        let loaded = ptec::load(&bytes, &refs).unwrap();
        for (method, count) in case["methods"].as_object().unwrap() {
            let suite = loaded
                .suites
                .iter()
                .find(|s| &s.method == method)
                .unwrap_or_else(|| panic!("{name}: no suite for {method}"));
            assert_eq!(suite.cases.len() as u64, count.as_u64().unwrap(), "{name}.{method}");
        }
    }
}

/// `test_data_bytes` against the fixture script's own count (PyTorch's
/// element sizes) for the Cortex-M example's bundles, which are in the
/// repository.
#[test]
fn inspect_counts_the_bytes_of_test_cases_as_the_exporter_does() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/cortex-m/models");
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let models = m["models"].as_object().unwrap();
    assert!(models.len() >= 12, "{} models", models.len());
    for (name, model) in models {
        let bytes = std::fs::read(dir.join(model["file"].as_str().unwrap())).unwrap();
        let loaded = ptec::load(&bytes, &[]).unwrap();
        let doc = ptec_cli::inspect::to_json(&loaded, bytes.len());
        let counted: u64 = doc["methods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["test_data_bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(counted, model["test_data_bytes"].as_u64().unwrap(), "{name}");
    }
}
