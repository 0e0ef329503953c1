//! Text generation and chat over language models from ExecuTorch's LLM
//! export (`export_llama -kv --use_sdpa_with_kv_cache`), compiled by ptec.
//!
//! A [`Program`] wraps any compiled program through ptec's dynamic
//! [`ptec_runtime::Model`] interface and reads its metadata methods; a
//! [`Session`] owns it with its [`Tokenizer`] and what its KV cache holds,
//! and generates (prefill in chunks, sampling, stop ids and strings,
//! streamed text, timings); a [`Chat`] renders conversations with the
//! model's own template and extends the same cache turn by turn.
//!
//! ```no_run
//! # fn demo<M: ptec_runtime::Model>(model: M) -> Result<(), ptec_llm::Error> {
//! use ptec_llm::{Chat, ChatTemplate, Generate, Program, Session, Tokenizer};
//! let session = Session::new(Program::new(model)?, Tokenizer::from_file("tokenizer.json")?);
//! let template = ChatTemplate::new(&std::fs::read_to_string("chat_template.jinja")?, "", "<|im_end|>")?;
//! let mut chat = Chat::new(session, template);
//! let out = chat.say("What is the capital of France?", &Generate::default(), |piece| print!("{piece}"))?;
//! eprintln!("{:.1} tokens/s", out.stats.decode_tokens_per_s());
//! # Ok(()) }
//! ```
mod program;
mod sample;
mod session;
mod text;

pub use program::{Metadata, Program};
pub use sample::{Rng, Sampler, Sampling};
pub use session::{Chat, Generate, Output, Session, Stats, Stop};
pub use text::{ChatTemplate, Message, StreamDecoder, Tokenizer};

/// What can go wrong in generation.
#[derive(Debug)]
pub enum Error {
    /// The compiled program failed.
    Runtime(ptec_runtime::Error),
    /// The program is not a language model this library drives.
    Program(String),
    Tokenizer(String),
    Template(String),
    /// `needed` positions do not fit in the `capacity` the KV cache holds.
    ContextFull {
        needed: usize,
        capacity: usize,
    },
    EmptyPrompt,
    Io(std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Runtime(e) => write!(f, "the program failed: {e}"),
            Error::Program(s) => write!(f, "not a language model program: {s}"),
            Error::Tokenizer(s) => write!(f, "tokenizer: {s}"),
            Error::Template(s) => write!(f, "chat template: {s}"),
            Error::ContextFull { needed, capacity } => {
                write!(
                    f,
                    "the context is full: {needed} positions needed, the program holds {capacity}"
                )
            }
            Error::EmptyPrompt => write!(f, "the prompt has no tokens"),
            Error::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<ptec_runtime::Error> for Error {
    fn from(e: ptec_runtime::Error) -> Self {
        Error::Runtime(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}
