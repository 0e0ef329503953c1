//! A compiled `export_llama` program seen through ptec's dynamic `Model`
//! interface: its metadata methods, and `forward(tokens, input_pos)` to
//! the logits of the last token. Any program the compiler accepts with
//! that shape works, whatever its lowering (portable, XNNPACK, 8da4w).
use crate::Error;
use ptec_runtime::{Dynamism, Model, ScalarType, TensorRef, Value};

/// What the program says about itself (ExecuTorch's `get_*` constant
/// methods, as its LLM runner reads them).
#[derive(Clone, Debug, PartialEq)]
pub struct Metadata {
    /// The most tokens one `forward` call takes.
    pub max_seq_len: usize,
    /// Positions the KV cache holds.
    pub max_context_len: usize,
    pub vocab_size: usize,
    pub bos_id: Option<u32>,
    pub eos_ids: Vec<u32>,
    pub use_kv_cache: bool,
    /// Whether `forward` takes more than one token at a time.
    pub dynamic_shape: bool,
}

/// A language model program: `forward` plus its metadata.
pub struct Program<M: Model> {
    model: M,
    forward: usize,
    meta: Metadata,
    /// Logits of the last call, for the last token.
    logits: Vec<f32>,
    /// The tokens of the last call as `int64`, reused.
    ids: Vec<i64>,
}

impl<M: Model> Program<M> {
    /// Reads the metadata and checks `forward`'s signature: tokens
    /// (`int64 [1, n]`) and the start position (`int64 [1]`) in, float
    /// logits out.
    pub fn new(mut model: M) -> Result<Self, Error> {
        let forward = model
            .method_index("forward")
            .ok_or_else(|| Error::Program("no method `forward`".into()))?;
        let m = &model.methods()[forward];
        let tokens = m
            .input_tensor_meta(0)
            .map_err(|_| Error::Program("`forward` input 0 is not a tensor".into()))?;
        if tokens.dtype != ScalarType::Long || tokens.sizes.len() != 2 || m.num_inputs() != 2 {
            return Err(Error::Program(format!(
                "`forward` takes {} inputs, the first {:?} {:?}: not export_llama's (tokens int64 [1, n], input_pos int64 [1])",
                m.num_inputs(),
                tokens.dtype,
                tokens.sizes
            )));
        }
        let dynamic = tokens.dynamism != Dynamism::Static && tokens.sizes[1] > 1;
        let seq_bound = tokens.sizes[1];
        let int = |model: &mut M, name: &str| -> Result<Option<Vec<i64>>, Error> {
            let Some(i) = model.method_index(name) else {
                return Ok(None);
            };
            model.execute(i)?;
            let n = model.methods()[i].num_outputs();
            let mut out = Vec::with_capacity(n);
            for k in 0..n {
                match model.output(i, k)? {
                    Value::Int(v) => out.push(v),
                    Value::Bool(b) => out.push(b as i64),
                    other => {
                        return Err(Error::Program(format!(
                            "metadata method `{name}` output {k} is a {:?}, not an int",
                            other.tag()
                        )))
                    }
                }
            }
            Ok(Some(out))
        };
        let one = |v: Option<Vec<i64>>, name: &str| -> Result<Option<i64>, Error> {
            match v.as_deref() {
                None => Ok(None),
                Some([x]) => Ok(Some(*x)),
                Some(other) => Err(Error::Program(format!(
                    "metadata method `{name}` returns {} values, not 1",
                    other.len()
                ))),
            }
        };
        let size = |v: Option<i64>, name: &str| -> Result<Option<usize>, Error> {
            v.map(|x| usize::try_from(x).map_err(|_| Error::Program(format!("`{name}` is {x}"))))
                .transpose()
        };
        let max_seq_len = size(
            one(int(&mut model, "get_max_seq_len")?, "get_max_seq_len")?,
            "get_max_seq_len",
        )?;
        let max_context_len = size(
            one(int(&mut model, "get_max_context_len")?, "get_max_context_len")?,
            "get_max_context_len",
        )?;
        let vocab_size = size(
            one(int(&mut model, "get_vocab_size")?, "get_vocab_size")?,
            "get_vocab_size",
        )?;
        let bos_id = one(int(&mut model, "get_bos_id")?, "get_bos_id")?.and_then(|x| u32::try_from(x).ok());
        let eos_ids = int(&mut model, "get_eos_ids")?
            .unwrap_or_default()
            .into_iter()
            .filter_map(|x| u32::try_from(x).ok())
            .collect();
        let use_kv_cache = one(int(&mut model, "use_kv_cache")?, "use_kv_cache")? != Some(0);
        let declared_dynamic = one(int(&mut model, "enable_dynamic_shape")?, "enable_dynamic_shape")?.map(|x| x != 0);
        let max_context_len = max_context_len
            .or(max_seq_len)
            .ok_or_else(|| Error::Program("no `get_max_context_len` nor `get_max_seq_len` method".into()))?;
        let dynamic_shape = declared_dynamic.unwrap_or(dynamic) && dynamic;
        let meta = Metadata {
            // One token a call unless the program takes more.
            max_seq_len: if dynamic_shape {
                max_seq_len.unwrap_or(seq_bound).min(seq_bound)
            } else {
                1
            },
            max_context_len,
            vocab_size: vocab_size.unwrap_or(0),
            bos_id,
            eos_ids,
            use_kv_cache,
            dynamic_shape,
        };
        if !meta.use_kv_cache {
            return Err(Error::Program(
                "the program has no KV cache (export with -kv): generation would re-run the whole context each token"
                    .into(),
            ));
        }
        if meta.max_seq_len == 0 || meta.max_context_len == 0 {
            return Err(Error::Program(
                "the program holds no tokens (max_seq_len or max_context_len is 0)".into(),
            ));
        }
        Ok(Program {
            model,
            forward,
            meta,
            logits: Vec::new(),
            ids: Vec::new(),
        })
    }

    pub fn metadata(&self) -> &Metadata {
        &self.meta
    }

    /// The compiled program itself.
    pub fn model(&mut self) -> &mut M {
        &mut self.model
    }

    /// Feeds at most `n` tokens a call (at least 1): shorter calls bound
    /// the time one call takes.
    pub fn limit_seq_len(&mut self, n: usize) {
        self.meta.max_seq_len = self.meta.max_seq_len.min(n.max(1));
    }

    /// The logits the last [`Program::forward`] returned.
    pub fn last_logits(&self) -> &[f32] {
        &self.logits
    }

    /// Runs `tokens` (at most `max_seq_len`) at positions `pos..`, writing
    /// their keys and values into the cache, and returns the logits after
    /// the last of them.
    pub fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<&[f32], Error> {
        let n = tokens.len();
        if n == 0 || n > self.meta.max_seq_len {
            return Err(Error::Program(format!(
                "forward takes 1 to {} tokens, not {n}",
                self.meta.max_seq_len
            )));
        }
        if pos + n > self.meta.max_context_len {
            return Err(Error::ContextFull {
                needed: pos + n,
                capacity: self.meta.max_context_len,
            });
        }
        self.ids.clear();
        self.ids.extend(tokens.iter().map(|&t| t as i64));
        let sizes = [1, n];
        self.model
            .set_input(self.forward, 0, Value::Tensor(TensorRef::from_slice(&sizes, &self.ids)))?;
        let start = [pos as i64];
        self.model
            .set_input(self.forward, 1, Value::Tensor(TensorRef::from_slice(&[1], &start)))?;
        self.model.execute(self.forward)?;
        let out = self.model.output(self.forward, 0)?;
        let t = out
            .as_tensor()
            .ok_or_else(|| Error::Program("`forward` output 0 is not a tensor".into()))?;
        if t.dtype != ScalarType::Float {
            return Err(Error::Program(format!(
                "`forward` returns {:?} logits, not float",
                t.dtype
            )));
        }
        let all: &[f32] = t.as_slice()?;
        // [1, vocab] (the last token's) or [1, n, vocab] (every token's).
        let vocab = *t.sizes.last().unwrap_or(&0);
        if vocab == 0 || !all.len().is_multiple_of(vocab) {
            return Err(Error::Program(format!(
                "`forward` returns logits of sizes {:?}",
                t.sizes
            )));
        }
        self.logits.clear();
        self.logits.extend_from_slice(&all[all.len() - vocab..]);
        Ok(&self.logits)
    }
}
