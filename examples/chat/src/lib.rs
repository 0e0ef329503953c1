//! SmolLM2-135M-Instruct, exported by ExecuTorch's `export_llama` (fp32
//! and 8da4w, through XNNPACK) and compiled by ptec at build time, with
//! what `ptec-llm` needs beside it: the tokenizer and the chat template.
//! `setup.sh` makes the files; [`DIR`] is where the build found them.
#[cfg(chat_model)]
use ptec_llm::Program;
use ptec_llm::{ChatTemplate, Error, Session, Tokenizer};
use std::path::{Path, PathBuf};

/// The folder setup.sh filled (or `PTEC_CHAT_DIR` at build time).
pub const DIR: &str = env!("PTEC_CHAT_DIR");

#[cfg(chat_model)]
pub mod fp32 {
    include!(concat!(env!("OUT_DIR"), "/fp32.rs"));
}
#[cfg(chat_model)]
pub mod q4 {
    include!(concat!(env!("OUT_DIR"), "/q4.rs"));
}

/// Which export to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Export {
    /// `-X -qmode 8da4w -G 32`: 4-bit weights, int8 activations.
    Q4,
    Fp32,
}

impl Export {
    pub fn file(self) -> &'static str {
        match self {
            Export::Q4 => "smollm2_8da4w.pte",
            Export::Fp32 => "smollm2_fp32.pte",
        }
    }
}

/// The tokenizer and chat template of the model in `dir`.
pub fn text(dir: &Path) -> Result<(Tokenizer, ChatTemplate), Error> {
    let tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))?;
    let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("model.json"))?)
        .map_err(|e| Error::Template(format!("model.json: {e}")))?;
    let token = |k: &str| meta[k].as_str().unwrap_or("").to_string();
    let template = ChatTemplate::new(
        &std::fs::read_to_string(dir.join("chat_template.jinja"))?,
        &token("bos_token"),
        &token("eos_token"),
    )?;
    Ok((tokenizer, template))
}

/// What a caller does with a session, whichever export it holds.
pub trait WithSession {
    type Out;
    fn run<M: ptec_runtime::Model>(self, session: Session<M>, template: ChatTemplate) -> Self::Out;
}

/// Loads `export` from `dir` (the weights memory-mapped from the `.pte`)
/// and hands `f` a session over it.
#[cfg(chat_model)]
pub fn with_session<F: WithSession>(dir: &Path, export: Export, f: F) -> Result<F::Out, Error> {
    let (tokenizer, template) = text(dir)?;
    let blob = ptec_runtime::Blob::open(dir.join(export.file()))?;
    Ok(match export {
        Export::Q4 => f.run(
            Session::new(Program::new(q4::SmolLm2Q4::boxed([blob])?)?, tokenizer),
            template,
        ),
        Export::Fp32 => f.run(
            Session::new(Program::new(fp32::SmolLm2Fp32::boxed([blob])?)?, tokenizer),
            template,
        ),
    })
}

#[cfg(not(chat_model))]
pub fn with_session<F: WithSession>(_dir: &Path, _export: Export, _f: F) -> Result<F::Out, Error> {
    Err(missing())
}

/// The error when the build found no model.
pub fn missing() -> Error {
    let msg = format!("this build has no model: run examples/chat/setup.sh, then build again (looked in {DIR})");
    Error::Io(std::io::Error::new(std::io::ErrorKind::NotFound, msg))
}

/// The folder to read, `DIR` unless given.
pub fn dir(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| PathBuf::from(DIR))
}
