//! Greedy generation over a language model from ExecuTorch's LLM export
//! (`export_llama -kv --use_sdpa_with_kv_cache`, dynamic sequence length),
//! compiled to Rust by `include_pte!`: the prompt in one call at position
//! 0, then one token per call, each the argmax of the last logits.
pub mod llama {
    ptec_macros::include_pte!("../../tests/fixtures/llama_dynamic.pte", name = Llama);
}

pub use llama::Llama;
use ptec_runtime::TensorRef;

/// The prompt's continuation: `new_tokens` token ids (fewer when the
/// model's context fills up). The KV cache starts empty (`reset`).
pub fn generate(model: &mut Llama, prompt: &[i64], new_tokens: usize) -> Result<Vec<i64>, ptec_runtime::Error> {
    use ptec_runtime::Model;
    model.reset(0)?;
    let context = model.get_max_seq_len()? as usize;
    let mut out = Vec::with_capacity(new_tokens);
    let mut step: Vec<i64> = prompt.to_vec();
    let mut pos = 0usize;
    while out.len() < new_tokens && !step.is_empty() && pos + step.len() <= context {
        let sizes = [1, step.len()];
        let logits = model.forward(TensorRef::from_slice(&sizes, &step), &[pos as i64])?;
        pos += step.len();
        let next = argmax(&logits[0]) as i64;
        out.push(next);
        step = vec![next];
    }
    Ok(out)
}

/// The index of the largest logit (the first of equals).
fn argmax(logits: &[f32]) -> usize {
    logits
        .iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |best, (i, &x)| if x > best.1 { (i, x) } else { best },
        )
        .0
}
