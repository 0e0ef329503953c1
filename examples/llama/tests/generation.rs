//! The example's greedy generation yields the tokens ExecuTorch's own
//! runtime yields for the same program and prompt (recorded by
//! `tests/fixtures/make_fixtures.py` in `llama_generation.json`).
#[test]
fn generation_matches_executorch() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/llama_generation.json"
    );
    let doc = std::fs::read_to_string(path).unwrap();
    let list = |key: &str| -> Vec<i64> {
        let start = doc.find(&format!("\"{key}\": [")).unwrap() + key.len() + 5;
        let end = start + doc[start..].find(']').unwrap();
        doc[start..end].split(',').map(|x| x.trim().parse().unwrap()).collect()
    };
    let (prompt, want) = (list("prompt"), list("tokens"));
    assert!(!want.is_empty());
    let mut model = example_llama::Llama::boxed();
    assert_eq!(example_llama::generate(&mut model, &prompt, want.len()).unwrap(), want);
    // Again on the same instance: reset empties the cache.
    assert_eq!(example_llama::generate(&mut model, &prompt, want.len()).unwrap(), want);
}
