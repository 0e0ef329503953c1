//! The library over the repository's tiny Llama exports (random weights,
//! a 64-token vocabulary, 16 positions): greedy tokens as ExecuTorch's
//! runtime gave them (`tests/fixtures/llama_generation.json`), chunked and
//! token-at-a-time prefill, a full context, seeds, streaming.
use ptec_llm::{Error, Generate, Program, Sampling, Session, Stop, Tokenizer};

mod dynamic {
    ptec_macros::include_pte!("../tests/fixtures/llama_dynamic.pte", name = Llama);
}
mod one_token {
    // The same export without dynamic shapes: forward takes [1, 1].
    ptec_macros::include_pte!("../tests/fixtures/llama_kv.pte", name = LlamaKv);
}

const TOKENIZER: &str = include_str!("../../tests/fixtures/llama_tokenizer.json");

fn session() -> Session<ptec_runtime::Boxed<dynamic::Llama>> {
    let program = Program::new(dynamic::Llama::boxed()).unwrap();
    Session::new(program, Tokenizer::from_json(TOKENIZER).unwrap())
}

fn reference() -> (Vec<u32>, Vec<u32>, String) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/llama_generation.json");
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ids = |k: &str| {
        doc[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    (ids("prompt"), ids("tokens"), doc["text"].as_str().unwrap().to_string())
}

fn greedy(n: usize) -> Generate {
    Generate {
        max_tokens: n,
        ..Generate::default()
    }
}

#[test]
fn metadata_comes_from_the_program() {
    let mut s = session();
    let m = s.program().metadata().clone();
    // get_max_seq_len says 16, but forward's tokens input is bounded at 15.
    assert_eq!((m.max_seq_len, m.max_context_len, m.vocab_size), (15, 16, 64));
    assert!(m.use_kv_cache && m.dynamic_shape);
    assert_eq!((m.bos_id, m.eos_ids.clone()), (None, vec![]));
    let p = Program::new(one_token::LlamaKv::boxed()).unwrap();
    assert_eq!(p.metadata().max_seq_len, 1);
    assert!(!p.metadata().dynamic_shape);
}

#[test]
fn greedy_tokens_and_text_match_executorch() {
    let (prompt, want, text) = reference();
    let mut s = session();
    let mut pieces = Vec::new();
    let out = s
        .generate(&prompt, &greedy(want.len()), |p| pieces.push(p.to_string()))
        .unwrap();
    assert_eq!(out.tokens, want);
    assert_eq!(out.stop, Stop::MaxTokens);
    assert_eq!(out.text, text);
    assert_eq!(pieces.concat(), text);
    assert_eq!(out.stats.prefill_tokens, prompt.len());
    assert_eq!(out.stats.generated_tokens, want.len());
    assert_eq!(out.stats.decode_steps, want.len() - 1);
    // The cache holds the prompt and every new token but the last.
    assert_eq!(s.cached().len(), prompt.len() + want.len() - 1);
}

#[test]
fn prefill_in_any_chunks_gives_the_same_tokens() {
    let (prompt, want, _) = reference();
    for chunk in [1, 2, 3] {
        let mut s = session();
        s.program().limit_seq_len(chunk);
        let out = s.generate(&prompt, &greedy(want.len()), |_| {}).unwrap();
        assert_eq!(out.tokens, want, "chunks of {chunk}");
    }
    // The export without dynamic shapes is fed one token a call.
    let program = Program::new(one_token::LlamaKv::boxed()).unwrap();
    let mut s = Session::new(program, Tokenizer::from_json(TOKENIZER).unwrap());
    let out = s.generate(&prompt, &greedy(4), |_| {}).unwrap();
    assert_eq!(out.tokens.len(), 4);
    assert_eq!(out.stats.prefill_tokens, prompt.len());
}

#[test]
fn a_shared_prefix_is_not_fed_again() {
    let (prompt, want, _) = reference();
    let mut s = session();
    let first = s.generate(&prompt, &greedy(3), |_| {}).unwrap();
    // The prompt and the first two new tokens are cached: continuing
    // from there feeds only the third.
    let mut context = prompt.clone();
    context.extend_from_slice(&first.tokens);
    let more = s.generate(&context, &greedy(want.len() - 3), |_| {}).unwrap();
    assert_eq!(more.stats.prefill_tokens, 1);
    assert_eq!([&first.tokens[..], &more.tokens[..]].concat(), want);
    // A context that leaves the cache's path goes back to where they part.
    let mut other = prompt[..2].to_vec();
    other.push(7);
    let out = s.generate(&other, &greedy(2), |_| {}).unwrap();
    assert_eq!(out.stats.prefill_tokens, 1);
    let mut fresh = session();
    assert_eq!(fresh.generate(&other, &greedy(2), |_| {}).unwrap().tokens, out.tokens);
}

#[test]
fn a_full_context_stops_generation_and_refuses_long_prompts() {
    let mut s = session();
    let prompt: Vec<u32> = (0..14).map(|i| (i * 5 + 1) % 64).collect();
    // 16 positions: the prompt's 14, then two fed tokens; the third new
    // token comes from the logits of the last position.
    let out = s.generate(&prompt, &greedy(100), |_| {}).unwrap();
    assert_eq!(out.stop, Stop::ContextFull);
    assert_eq!(out.tokens.len(), 3);
    assert_eq!(s.cached().len(), 16);
    let long: Vec<u32> = (0..16).collect();
    match s.generate(&long, &greedy(1), |_| {}) {
        Err(Error::ContextFull {
            needed: 17,
            capacity: 16,
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(s.generate(&[], &greedy(1), |_| {}), Err(Error::EmptyPrompt)));
    // The session is still good: the same prompt gives the same tokens.
    let again = s.generate(&prompt, &greedy(100), |_| {}).unwrap();
    assert_eq!(again.tokens, out.tokens);
}

#[test]
fn a_seed_reproduces_sampled_text() {
    let (prompt, _, _) = reference();
    let sample = |seed| {
        let mut s = session();
        let request = Generate {
            max_tokens: 10,
            sampling: Sampling {
                temperature: 1.5,
                seed,
                ..Sampling::default()
            },
            ..Generate::default()
        };
        s.generate(&prompt, &request, |_| {}).unwrap().tokens
    };
    assert_eq!(sample(3), sample(3));
    assert!((4..12).any(|seed| sample(seed) != sample(3)));
}

#[test]
fn stop_strings_end_the_text_before_them() {
    let (prompt, want, text) = reference();
    // "rh mazzazh": stop at "zz".
    let mut s = session();
    let mut streamed = String::new();
    let request = Generate {
        max_tokens: want.len(),
        stop_strings: vec!["zz".into()],
        ..Generate::default()
    };
    let out = s.generate(&prompt, &request, |p| streamed.push_str(p)).unwrap();
    let cut = &text[..text.find("zz").unwrap()];
    assert_eq!(out.stop, Stop::StopString("zz".into()));
    assert_eq!(out.text, cut);
    assert_eq!(streamed, cut);
}
