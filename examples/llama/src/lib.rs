//! Greedy generation over language models from ExecuTorch's LLM export
//! (`export_llama -kv --use_sdpa_with_kv_cache`, dynamic sequence length),
//! compiled to Rust by `include_pte!`: the prompt in one call at position
//! 0, then one token per call, each the argmax of the last logits. Two
//! exports of the same tiny model: fp32 (portable kernels) and `-X -qmode
//! 8da4w` (XNNPACK, 4-bit weights, int8 activations). Text goes in and
//! out through the model's byte-pair tokenizer (`tokenizer.json`, read by
//! Hugging Face's `tokenizers`).
pub mod llama {
    ptec_macros::include_pte!("../../tests/fixtures/llama_dynamic.pte", name = Llama);
}

pub mod llama_8da4w {
    ptec_macros::include_pte!("../../tests/fixtures/xnnpack_llama_8da4w.pte", name = Llama8da4w);
}

/// The tiny model's tokenizer: 64 ids, a byte-pair vocabulary trained on a
/// few sentences (`tests/fixtures/make_fixtures.py`).
pub fn tokenizer() -> tokenizers::Tokenizer {
    let json = include_str!("../../../tests/fixtures/llama_tokenizer.json");
    json.parse().expect("the bundled tokenizer.json is valid")
}

pub use llama::Llama;
pub use llama_8da4w::Llama8da4w;
use ptec_runtime::{Error, Model, TensorRef};

/// What greedy generation needs of a compiled language model.
pub trait LanguageModel {
    /// Empties the KV cache.
    fn restart(&mut self) -> Result<(), Error>;
    /// The longest context the program holds.
    fn context(&mut self) -> Result<usize, Error>;
    /// The most likely token after `tokens`, fed at position `pos`.
    fn next_token(&mut self, tokens: &[i64], pos: usize) -> Result<i64, Error>;
}

macro_rules! language_model {
    ($model:ty) => {
        impl LanguageModel for $model {
            fn restart(&mut self) -> Result<(), Error> {
                self.reset(0)
            }

            fn context(&mut self) -> Result<usize, Error> {
                Ok(self.get_max_seq_len()? as usize)
            }

            fn next_token(&mut self, tokens: &[i64], pos: usize) -> Result<i64, Error> {
                let sizes = [1, tokens.len()];
                let logits = self.forward(TensorRef::from_slice(&sizes, tokens), &[pos as i64])?;
                Ok(argmax(&logits[0]) as i64)
            }
        }
    };
}

language_model!(Llama);
language_model!(Llama8da4w);

/// The prompt's continuation: `new_tokens` token ids (fewer when the
/// model's context fills up). The KV cache starts empty.
pub fn generate(model: &mut impl LanguageModel, prompt: &[i64], new_tokens: usize) -> Result<Vec<i64>, Error> {
    model.restart()?;
    let context = model.context()?;
    let mut out = Vec::with_capacity(new_tokens);
    let mut step: Vec<i64> = prompt.to_vec();
    let mut pos = 0usize;
    while out.len() < new_tokens && !step.is_empty() && pos + step.len() <= context {
        let next = model.next_token(&step, pos)?;
        pos += step.len();
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
