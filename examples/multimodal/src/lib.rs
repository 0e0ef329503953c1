//! A multimodal turn over LLaVA as ExecuTorch's `examples/models/llava`
//! exports it: one program of three methods, `image_encoder` (a `uint8`
//! image `[3, H, W]` to its embeddings), `token_embedding` (token ids to
//! embeddings) and `text_decoder` (embeddings and a start position to the
//! last position's logits, its KV cache kept in the program). A turn
//! embeds the prompt before the image, the image and the prompt after it,
//! prefills the decoder with all of them at once (in chunks if they exceed
//! what one call takes), then feeds each chosen token's embedding back, as
//! ExecuTorch's own llava runner does. Tokens are chosen by `ptec-llm`'s
//! sampler. The fixtures are tiny and random (`make_fixtures.py`), so the
//! tokens mean nothing; what matters is that they are ExecuTorch's.
pub mod llava {
    ptec_macros::include_pte!("../../tests/fixtures/llava.pte", name = Llava);
}

pub mod xnnpack_llava {
    ptec_macros::include_pte!("../../tests/fixtures/xnnpack_llava.pte", name = XnnpackLlava);
}

pub use llava::Llava;
pub use ptec_llm::{Error, Sampling};
pub use xnnpack_llava::XnnpackLlava;

use ptec_llm::Sampler;
use ptec_runtime::{Model, ScalarType, TensorMeta, TensorRef, Value};

/// An image as the encoder takes it: channels first, one byte per value.
#[derive(Clone, Copy, Debug)]
pub struct Image<'a> {
    pub height: usize,
    pub width: usize,
    /// `3 * height * width` bytes, red plane first.
    pub data: &'a [u8],
}

/// A vision-language program with export_llava's methods.
pub struct Vlm<M: Model> {
    model: M,
    encoder: usize,
    embedding: usize,
    decoder: usize,
    /// Width of one embedding.
    dim: usize,
    /// Most tokens one `token_embedding` call takes.
    embed_bound: usize,
    /// Most positions one `text_decoder` call takes.
    decode_bound: usize,
    /// Positions the KV cache holds.
    context: usize,
    /// Embeddings not yet fed to the decoder, `dim` floats each.
    pending: Vec<f32>,
    ids: Vec<i64>,
}

fn program_error(msg: String) -> Error {
    Error::Program(msg)
}

fn find<M: Model>(model: &M, name: &str) -> Result<usize, Error> {
    model
        .method_index(name)
        .ok_or_else(|| program_error(format!("no method `{name}`")))
}

fn tensor_in<M: Model>(model: &M, method: usize, index: usize) -> Result<&'static TensorMeta, Error> {
    let m = &model.methods()[method];
    m.input_tensor_meta(index)
        .map_err(|_| program_error(format!("`{}` input {index} is not a tensor", m.name)))
}

impl<M: Model> Vlm<M> {
    /// Finds the three methods and checks their signatures against
    /// export_llava's: `image_encoder(uint8 [3, H, W]) -> float [1, n, dim]`,
    /// `token_embedding(int64 [1, n]) -> float [1, n, dim]`,
    /// `text_decoder(float [1, n, dim], int64 [1]) -> float logits`, and
    /// `get_max_seq_len`, the positions the cache holds.
    pub fn new(mut model: M) -> Result<Self, Error> {
        let encoder = find(&model, "image_encoder")?;
        let embedding = find(&model, "token_embedding")?;
        let decoder = find(&model, "text_decoder")?;
        let image = tensor_in(&model, encoder, 0)?;
        let tokens = tensor_in(&model, embedding, 0)?;
        let embeds = tensor_in(&model, decoder, 0)?;
        let pos = tensor_in(&model, decoder, 1)?;
        let ok = image.dtype == ScalarType::Byte
            && image.sizes.len() == 3
            && image.sizes[0] == 3
            && tokens.dtype == ScalarType::Long
            && tokens.sizes.len() == 2
            && embeds.dtype == ScalarType::Float
            && embeds.sizes.len() == 3
            && pos.dtype == ScalarType::Long
            && pos.sizes == [1];
        if !ok || tokens.sizes[1] == 0 || embeds.sizes[1] == 0 {
            return Err(program_error(format!(
                "not export_llava's signatures: image_encoder takes {:?} {:?}, token_embedding {:?} {:?}, text_decoder {:?} {:?} and {:?} {:?}",
                image.dtype, image.sizes, tokens.dtype, tokens.sizes, embeds.dtype, embeds.sizes, pos.dtype, pos.sizes
            )));
        }
        let max_seq = find(&model, "get_max_seq_len")?;
        model.execute(max_seq)?;
        let context = match model.output(max_seq, 0)? {
            Value::Int(n) if n > 0 => n as usize,
            other => return Err(program_error(format!("`get_max_seq_len` returns {other:?}"))),
        };
        Ok(Vlm {
            dim: embeds.sizes[2],
            embed_bound: tokens.sizes[1],
            decode_bound: embeds.sizes[1],
            context,
            model,
            encoder,
            embedding,
            decoder,
            pending: Vec::new(),
            ids: Vec::new(),
        })
    }

    /// Positions the KV cache holds.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Reads a float `[1, n, dim]` output of `method` into `pending`.
    fn take_embeddings(&mut self, method: usize) -> Result<(), Error> {
        let out = self.model.output(method, 0)?;
        let t = out
            .as_tensor()
            .ok_or_else(|| program_error("an embedding output is not a tensor".into()))?;
        if t.dtype != ScalarType::Float || t.sizes.len() != 3 || t.sizes[2] != self.dim {
            return Err(program_error(format!(
                "embeddings of {:?} {:?}, not float [1, n, {}]",
                t.dtype, t.sizes, self.dim
            )));
        }
        self.pending.extend_from_slice(t.as_slice::<f32>()?);
        Ok(())
    }

    /// Appends the embeddings of `tokens`, at most `embed_bound` a call.
    fn embed_tokens(&mut self, tokens: &[u32]) -> Result<(), Error> {
        for chunk in tokens.chunks(self.embed_bound) {
            self.ids.clear();
            self.ids.extend(chunk.iter().map(|&t| i64::from(t)));
            let sizes = [1, chunk.len()];
            self.model.set_input(
                self.embedding,
                0,
                Value::Tensor(TensorRef::from_slice(&sizes, &self.ids)),
            )?;
            self.model.execute(self.embedding)?;
            self.take_embeddings(self.embedding)?;
        }
        Ok(())
    }

    /// Appends the image's embeddings.
    fn embed_image(&mut self, image: &Image) -> Result<(), Error> {
        let sizes = [3, image.height, image.width];
        self.model.set_input(
            self.encoder,
            0,
            Value::Tensor(TensorRef::from_slice(&sizes, image.data)),
        )?;
        self.model.execute(self.encoder)?;
        self.take_embeddings(self.encoder)
    }

    /// Feeds the pending embeddings to the decoder from position `pos`
    /// (in calls of at most `decode_bound` positions) and returns the
    /// logits after the last, and the next position.
    fn decode(&mut self, mut pos: usize) -> Result<(Vec<f32>, usize), Error> {
        let n = self.pending.len() / self.dim;
        if n == 0 {
            return Err(Error::EmptyPrompt);
        }
        if pos + n > self.context {
            return Err(Error::ContextFull {
                needed: pos + n,
                capacity: self.context,
            });
        }
        let pending = std::mem::take(&mut self.pending);
        let mut logits = Vec::new();
        for chunk in pending.chunks(self.decode_bound * self.dim) {
            let sizes = [1, chunk.len() / self.dim, self.dim];
            self.model
                .set_input(self.decoder, 0, Value::Tensor(TensorRef::from_slice(&sizes, chunk)))?;
            let start = [pos as i64];
            self.model
                .set_input(self.decoder, 1, Value::Tensor(TensorRef::from_slice(&[1], &start)))?;
            self.model.execute(self.decoder)?;
            pos += sizes[1];
            let out = self.model.output(self.decoder, 0)?;
            let t = out
                .as_tensor()
                .ok_or_else(|| program_error("`text_decoder` output 0 is not a tensor".into()))?;
            let all: &[f32] = t.as_slice()?;
            // [1, vocab] (the last position's) or [1, n, vocab].
            let vocab = *t.sizes.last().unwrap_or(&0);
            if t.dtype != ScalarType::Float || vocab == 0 || !all.len().is_multiple_of(vocab) {
                return Err(program_error(format!(
                    "`text_decoder` returns logits of {:?} {:?}",
                    t.dtype, t.sizes
                )));
            }
            logits.clear();
            logits.extend_from_slice(&all[all.len() - vocab..]);
        }
        Ok((logits, pos))
    }

    /// One turn from an empty cache: the prompt `before` the image, the
    /// image, the prompt `after` it, then `new_tokens` tokens chosen by
    /// `sampling` (fewer if the context fills up).
    pub fn generate(
        &mut self,
        image: &Image,
        before: &[u32],
        after: &[u32],
        new_tokens: usize,
        sampling: &Sampling,
    ) -> Result<Vec<u32>, Error> {
        self.pending.clear();
        self.model.reset(self.decoder)?;
        if before.len() + after.len() == 0 {
            return Err(Error::EmptyPrompt);
        }
        self.embed_tokens(before)?;
        self.embed_image(image)?;
        self.embed_tokens(after)?;
        let mut sampler = Sampler::new(sampling.clone());
        let mut context: Vec<u32> = before.iter().chain(after).copied().collect();
        let mut out = Vec::with_capacity(new_tokens);
        let mut pos = 0;
        while out.len() < new_tokens {
            let (logits, next) = self.decode(pos)?;
            pos = next;
            let token = sampler.sample(&logits, &context);
            out.push(token);
            context.push(token);
            if out.len() == new_tokens || pos >= self.context {
                break;
            }
            self.embed_tokens(&[token])?;
        }
        self.pending.clear();
        Ok(out)
    }
}
