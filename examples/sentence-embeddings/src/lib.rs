//! Sentence embeddings with all-MiniLM-L6-v2, the pretrained
//! sentence-transformers model: the tokenizer from its `tokenizer.json`
//! (the `tokenizers` crate), the model as ptec compiled it from the
//! ExecuTorch export (`export.py`), portably or through XNNPACK.
use std::path::PathBuf;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

#[cfg(model)]
mod portable {
    include!(concat!(env!("OUT_DIR"), "/minilm.rs"));
}
#[cfg(model)]
mod xnnpack {
    include!(concat!(env!("OUT_DIR"), "/minilm_xnnpack.rs"));
}

/// Tokens per sentence: the export's fixed length (padded, or truncated).
pub const SEQ_LEN: usize = 128;
/// The embedding's length.
pub const DIM: usize = 384;

/// Where `export.py` put the model, the tokenizer and the reference.
pub fn model_dir() -> PathBuf {
    PathBuf::from(env!("PTEC_MINILM_DIR"))
}

/// The model's tokenizer, padding and truncating to [`SEQ_LEN`].
pub fn tokenizer() -> Result<Tokenizer, String> {
    let path = model_dir().join("tokenizer.json");
    let mut t = Tokenizer::from_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    t.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::Fixed(SEQ_LEN),
        ..Default::default()
    }));
    t.with_truncation(Some(TruncationParams {
        max_length: SEQ_LEN,
        ..Default::default()
    }))
    .map_err(|e| e.to_string())?;
    Ok(t)
}

/// One tokenized sentence, as the model takes it: `[1, SEQ_LEN]`.
pub type Tokens = [[i64; SEQ_LEN]; 1];

/// Token ids and attention mask of `sentence`.
pub fn tokenize(t: &Tokenizer, sentence: &str) -> Result<(Tokens, Tokens), String> {
    let e = t.encode(sentence, true).map_err(|e| e.to_string())?;
    let (mut ids, mut mask) = ([[0i64; SEQ_LEN]; 1], [[0i64; SEQ_LEN]; 1]);
    for (k, (&i, &m)) in e.get_ids().iter().zip(e.get_attention_mask()).enumerate().take(SEQ_LEN) {
        ids[0][k] = i64::from(i);
        mask[0][k] = i64::from(m);
    }
    Ok((ids, mask))
}

/// The cosine similarity of two embeddings (they are normalized: a dot
/// product).
pub fn cosine(a: &[f32; DIM], b: &[f32; DIM]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// One of the two compiled exports, with its weights read from the `.pte`.
#[cfg(model)]
pub enum Model {
    Portable(ptec_runtime::Boxed<portable::MiniLm<'static>>),
    Xnnpack(ptec_runtime::Boxed<xnnpack::MiniLm<'static>>),
}

#[cfg(model)]
impl Model {
    /// Opens `minilm.pte`, or `minilm_xnnpack.pte`.
    pub fn open(xnnpack: bool) -> Result<Model, String> {
        let file = model_dir().join(if xnnpack { "minilm_xnnpack.pte" } else { "minilm.pte" });
        let blob = ptec_runtime::Blob::open(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let at = |e: ptec_runtime::Error| format!("{}: {e}", file.display());
        Ok(if xnnpack {
            Model::Xnnpack(xnnpack::MiniLm::boxed([blob]).map_err(at)?)
        } else {
            Model::Portable(portable::MiniLm::boxed([blob]).map_err(at)?)
        })
    }

    /// The normalized mean-pooled embedding of one tokenized sentence.
    pub fn embed(&mut self, ids: &Tokens, mask: &Tokens) -> Result<[f32; DIM], String> {
        let out = match self {
            Model::Portable(m) => m.forward(ids, mask),
            Model::Xnnpack(m) => m.forward(ids, mask),
        };
        out.map(|e| e[0]).map_err(|e| e.to_string())
    }
}
