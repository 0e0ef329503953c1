//! The committed coverage table is the one the registry gives today.
#[test]
fn coverage_table_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operator-coverage.md");
    let want = ptec::coverage::coverage_markdown();
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/operator-coverage.md is stale: run `cargo run -p ptec-cli -- coverage > docs/operator-coverage.md`"
    );
    let (covered, total) = ptec::coverage::coverage_counts();
    assert_eq!(total, 209);
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap();
    assert!(
        readme.contains(&format!("{covered} of the {total}")),
        "README does not state the coverage ({covered} of the {total})"
    );
}
