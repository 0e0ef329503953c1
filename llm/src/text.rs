//! Text in and out: the model's tokenizer, incremental detokenization for
//! streaming, and its Jinja chat template.
use crate::Error;
use std::path::Path;

/// A Hugging Face `tokenizer.json`.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl Tokenizer {
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let inner =
            tokenizers::Tokenizer::from_file(path).map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(Tokenizer { inner })
    }

    pub fn from_json(json: &str) -> Result<Self, Error> {
        let inner: tokenizers::Tokenizer = json.parse().map_err(|e| Error::Tokenizer(format!("{e}")))?;
        Ok(Tokenizer { inner })
    }

    /// The ids of `text`. Special tokens written in the text (`<|im_end|>`)
    /// are read as themselves; `add_special` adds what the tokenizer's
    /// post-processor adds (a BOS, say). A rendered chat template already
    /// holds its special tokens: encode it without.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>, Error> {
        let enc = self
            .inner
            .encode(text, add_special)
            .map_err(|e| Error::Tokenizer(format!("{e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens left out when `skip_special`.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, Error> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| Error::Tokenizer(format!("{e}")))
    }

    /// The id of a token written out (`<|im_end|>`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

/// Turns tokens into text as they come. Byte-level and byte-fallback
/// vocabularies split characters across tokens, and some decoders treat
/// the first token apart (a leading space dropped), so each step decodes
/// a short window of recent tokens and emits what it adds to the same
/// window without the newest ones, holding back text that ends in an
/// incomplete character. The pieces concatenate to the decode of all
/// tokens ([`StreamDecoder::finish`] flushes what is held back).
pub struct StreamDecoder {
    tokens: Vec<u32>,
    /// Start of the window (tokens before it are settled).
    prefix: usize,
    /// Tokens up to here have been emitted.
    read: usize,
    skip_special: bool,
}

impl StreamDecoder {
    pub fn new(skip_special: bool) -> Self {
        StreamDecoder {
            tokens: Vec::new(),
            prefix: 0,
            read: 0,
            skip_special,
        }
    }

    /// Adds a token; returns the text it completes (maybe empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String, Error> {
        self.tokens.push(id);
        let before = tok.decode(&self.tokens[self.prefix..self.read], self.skip_special)?;
        let now = tok.decode(&self.tokens[self.prefix..], self.skip_special)?;
        if now.len() > before.len() && !now.ends_with('\u{fffd}') && now.starts_with(&before) {
            let piece = now[before.len()..].to_string();
            self.prefix = self.read;
            self.read = self.tokens.len();
            Ok(piece)
        } else {
            Ok(String::new())
        }
    }

    /// The text held back (an incomplete character at the end, shown as
    /// U+FFFD as the full decode shows it).
    pub fn finish(&mut self, tok: &Tokenizer) -> Result<String, Error> {
        let before = tok.decode(&self.tokens[self.prefix..self.read], self.skip_special)?;
        let now = tok.decode(&self.tokens[self.prefix..], self.skip_special)?;
        self.prefix = self.tokens.len();
        self.read = self.tokens.len();
        Ok(now.strip_prefix(before.as_str()).unwrap_or("").to_string())
    }

    /// Every token pushed.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A model's Jinja chat template (the `chat_template` of its tokenizer
/// config), rendered as Hugging Face's `apply_chat_template` does.
pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// `bos_token` and `eos_token` are the strings the template may refer to.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, Error> {
        let mut env = minijinja::Environment::new();
        // Templates are written for Python's Jinja: its string methods,
        // whitespace as it leaves it, and `raise_exception` to refuse a
        // conversation.
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        });
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| Error::Template(format!("the chat template does not parse: {e:#}")))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// The conversation as the model reads it; with `add_generation_prompt`
    /// it ends where the assistant's answer starts.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, Error> {
        let messages: Vec<minijinja::Value> = messages
            .iter()
            .map(|m| minijinja::context! { role => m.role, content => m.content })
            .collect();
        let t = self
            .env
            .get_template("chat")
            .map_err(|e| Error::Template(format!("{e:#}")))?;
        t.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        })
        .map_err(|e| Error::Template(format!("{e:#}")))
    }
}
