//! `docs/model-coverage.md` accounts for every model ExecuTorch ships: its
//! table "ExecuTorch's examples/models" (written by `tests/zoo/zoo.py` from
//! its `EXAMPLES`) has one row for each directory of the pinned wheel's
//! `executorch/examples/models`, saying where it is checked and how it
//! fared, or why it is not exported.
//!
//! The wheel is read from the Python environment `examples/chat/setup.sh`
//! makes (or `PTEC_VENV`); without it the comparison says `NOT RUN`,
//! unless `PTEC_REQUIRE_CHAT` is set (CI), when it fails.
#[path = "common/venv.rs"]
mod venv;

use std::path::{Path, PathBuf};
use venv::venv_or_not_run;

fn coverage_page() -> String {
    let page = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/model-coverage.md");
    std::fs::read_to_string(page).expect("docs/model-coverage.md")
}

/// The table's rows: (directory, covered by, result).
fn rows(page: &str) -> Vec<(String, String, String)> {
    let section = page
        .split("\n## ExecuTorch's examples/models\n")
        .nth(1)
        .expect("docs/model-coverage.md has no section \"ExecuTorch's examples/models\"");
    let section = section.split("\n## ").next().unwrap();
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            // Escaped bars (`\|`) inside a cell are not separators.
            let cells: Vec<String> = l
                .replace("\\|", "\u{1}")
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().replace('\u{1}', "|"))
                .collect();
            assert_eq!(cells.len(), 3, "a row of three cells: {l}");
            (
                cells[0].trim_matches('`').to_string(),
                cells[1].clone(),
                cells[2].clone(),
            )
        })
        .collect()
}

/// The directories of the wheel's `executorch/examples/models`.
fn wheel_models(venv: &Path) -> Vec<String> {
    let lib = venv.join("lib");
    let python = std::fs::read_dir(&lib)
        .unwrap_or_else(|e| panic!("{}: {e}", lib.display()))
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("python3"))
        .unwrap_or_else(|| panic!("no python3.* in {}", lib.display()));
    let models = python.join("site-packages/executorch/examples/models");
    let mut dirs: Vec<String> = std::fs::read_dir(&models)
        .unwrap_or_else(|e| panic!("{}: {e}", models.display()))
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("__"))
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn every_example_model_of_the_wheel_has_a_row() {
    let Some(venv) = venv_or_not_run() else {
        return;
    };
    let wheel = wheel_models(&venv);
    assert!(wheel.len() >= 50, "only {} directories: {wheel:?}", wheel.len());
    let listed: Vec<String> = rows(&coverage_page()).into_iter().map(|r| r.0).collect();
    let missing: Vec<&String> = wheel.iter().filter(|d| !listed.contains(d)).collect();
    let stale: Vec<&String> = listed.iter().filter(|d| !wheel.contains(d)).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/model-coverage.md's examples/models table (tests/zoo/zoo.py's EXAMPLES, then \
         `zoo.py --report`): missing {missing:?}, not in the wheel {stale:?}"
    );
}

/// Runs without the environment: every row says where the model is
/// checked and its result, or why it is not exported, naming the error.
#[test]
fn every_row_says_where_it_is_checked_or_why_not() {
    let rows = rows(&coverage_page());
    assert!(rows.len() >= 50, "only {} rows", rows.len());
    let mut names: Vec<&String> = rows.iter().map(|r| &r.0).collect();
    names.dedup();
    assert_eq!(names.len(), rows.len(), "a directory listed twice");
    let fixtures: serde_json::Value = serde_json::from_slice(
        &std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/manifest.json")).unwrap(),
    )
    .unwrap();
    for (dir, covered, result) in &rows {
        // Each fixture named is one the repository has.
        for named in covered.split("fixture `").skip(1) {
            let name = named.split('`').next().unwrap();
            assert!(
                fixtures["fixtures"].get(name).is_some(),
                "{dir}: no fixture {name} in tests/fixtures/manifest.json"
            );
        }
        assert!(!result.contains("not run"), "{dir}: a zoo model not run: {result}");
        if covered == "none" {
            assert!(result.starts_with("not exported: "), "{dir}: {result}");
            assert!(result.len() > "not exported: ".len() + 10, "{dir}: no reason");
        } else {
            assert!(
                ["pass", "not built", "not exported", "refused", "mismatch"]
                    .iter()
                    .any(|r| result.contains(r)),
                "{dir}: neither a result nor a reason: {result}"
            );
        }
    }
}
