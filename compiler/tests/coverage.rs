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
    let stated = match covered == total {
        true => format!("all {total} operators"),
        false => format!("{covered} of the {total}"),
    };
    assert!(
        readme.contains(&stated),
        "README does not state the coverage ({stated})"
    );
}

/// Every portable operator ptec does not compile says why, and no reason
/// is kept for one it compiles.
#[test]
fn every_operator_left_out_says_why() {
    let supported: std::collections::BTreeSet<&str> = ptec::coverage::supported_operators().collect();
    for op in ptec::coverage::portable_operators() {
        let why = ptec::coverage::left_out_reason(op);
        assert_eq!(
            supported.contains(op),
            why.is_none(),
            "{op}: compiled {}, reason {why:?}",
            supported.contains(op)
        );
    }
}

/// A note on how an operator differs from ExecuTorch is kept only for one
/// ptec compiles.
#[test]
fn notes_are_on_compiled_operators() {
    let supported: std::collections::BTreeSet<&str> = ptec::coverage::supported_operators().collect();
    for op in ptec::coverage::portable_operators() {
        if let Some(note) = ptec::coverage::note(op) {
            assert!(supported.contains(op), "{op} has a note ({note}) but is not compiled");
        }
    }
    assert!(ptec::coverage::note("aten::rand.out").is_some_and(|n| n.contains("random_device")));
}
