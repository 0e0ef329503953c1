//! The example's greedy generation yields the tokens ExecuTorch's own
//! runtime yields for the same program and prompt (recorded by
//! `tests/fixtures/make_fixtures.py` in `llama_generation.json` and
//! `llama_8da4w_generation.json`).
use example_llama::{generate, LanguageModel, Llama, Llama8da4w};

/// The prompt and ExecuTorch's tokens recorded in `file`.
fn recorded(file: &str) -> (Vec<i64>, Vec<i64>) {
    let path = format!("{}/../../tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(path).unwrap();
    let list = |key: &str| -> Vec<i64> {
        let start = doc.find(&format!("\"{key}\": [")).unwrap() + key.len() + 5;
        let end = start + doc[start..].find(']').unwrap();
        doc[start..end].split(',').map(|x| x.trim().parse().unwrap()).collect()
    };
    (list("prompt"), list("tokens"))
}

fn check(model: &mut impl LanguageModel, file: &str) {
    let (prompt, want) = recorded(file);
    assert!(!want.is_empty());
    assert_eq!(generate(model, &prompt, want.len()).unwrap(), want);
    // Again on the same instance: restarting empties the cache.
    assert_eq!(generate(model, &prompt, want.len()).unwrap(), want);
}

#[test]
fn generation_matches_executorch() {
    check(&mut *Llama::boxed(), "llama_generation.json");
}

#[test]
fn generation_of_the_8da4w_export_matches_executorch() {
    check(&mut *Llama8da4w::boxed(), "llama_8da4w_generation.json");
}
