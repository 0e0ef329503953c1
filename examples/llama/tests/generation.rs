//! The example's greedy generation yields the tokens ExecuTorch's own
//! runtime yields for the same program and prompt, and the tokenizer reads
//! and writes text as Python's does (both recorded by
//! `tests/fixtures/make_fixtures.py` in `llama_generation.json` and
//! `llama_8da4w_generation.json`).
use example_llama::{generate, tokenizer, LanguageModel, Llama, Llama8da4w};

fn check(model: &mut impl LanguageModel, file: &str) {
    let path = format!("{}/../../tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ids = |key: &str| -> Vec<i64> {
        doc[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect()
    };
    let (prompt, want) = (ids("prompt"), ids("tokens"));
    assert!(!want.is_empty());
    // The prompt's text encodes to the ids ExecuTorch was given.
    let tokenizer = tokenizer();
    let encoded = tokenizer.encode(doc["prompt_text"].as_str().unwrap(), false).unwrap();
    let encoded: Vec<i64> = encoded.get_ids().iter().map(|&id| id as i64).collect();
    assert_eq!(encoded, prompt);
    assert_eq!(generate(model, &prompt, want.len()).unwrap(), want);
    // Again on the same instance: restarting empties the cache.
    assert_eq!(generate(model, &prompt, want.len()).unwrap(), want);
    let ids: Vec<u32> = want.iter().map(|&t| t as u32).collect();
    assert_eq!(tokenizer.decode(&ids, true).unwrap(), doc["text"].as_str().unwrap());
}

#[test]
fn generation_matches_executorch() {
    check(&mut *Llama::boxed(), "llama_generation.json");
}

#[test]
fn generation_of_the_8da4w_export_matches_executorch() {
    check(&mut *Llama8da4w::boxed(), "llama_8da4w_generation.json");
}
