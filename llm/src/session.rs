//! Generation over one KV cache: prefill in chunks, decode with a sampler,
//! stop on EOS ids and stop strings, stream text, and chat turns that
//! extend the cache instead of feeding the history again.
use crate::program::Program;
use crate::sample::{Sampler, Sampling};
use crate::text::{ChatTemplate, Message, StreamDecoder, Tokenizer};
use crate::Error;
use ptec_runtime::Model;
use std::time::{Duration, Instant};

/// What one generation asks for.
#[derive(Clone, Debug)]
pub struct Generate {
    pub sampling: Sampling,
    /// The most new tokens (the context may end it sooner).
    pub max_tokens: usize,
    /// Text that ends the answer where it first appears (not included).
    pub stop_strings: Vec<String>,
    /// Go on past the model's EOS ids (for benchmarks: a fixed number of
    /// tokens).
    pub ignore_eos: bool,
}

impl Default for Generate {
    fn default() -> Self {
        Generate {
            sampling: Sampling::default(),
            max_tokens: 256,
            stop_strings: Vec::new(),
            ignore_eos: false,
        }
    }
}

/// Why a generation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The model gave one of its EOS ids (not part of the text).
    Eos(u32),
    /// The text reached this stop string (cut before it).
    StopString(String),
    MaxTokens,
    /// The KV cache is full: nothing more fits. [`Session::reset`] (or a
    /// chat's [`Chat::clear`]) starts over.
    ContextFull,
}

/// Timings of one generation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Tokens fed before the first new one (those already in the cache
    /// are not fed again).
    pub prefill_tokens: usize,
    pub prefill: Duration,
    /// From the call to the first new token: prefill and sampling.
    pub time_to_first_token: Duration,
    /// New tokens, the first included.
    pub generated_tokens: usize,
    /// The calls after the first token (each feeds one token).
    pub decode: Duration,
    pub decode_steps: usize,
}

impl Stats {
    pub fn prefill_tokens_per_s(&self) -> f64 {
        self.prefill_tokens as f64 / self.prefill.as_secs_f64().max(1e-9)
    }

    pub fn decode_tokens_per_s(&self) -> f64 {
        self.decode_steps as f64 / self.decode.as_secs_f64().max(1e-9)
    }
}

/// What one generation gave.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    /// The new tokens (an EOS id that ended it included).
    pub tokens: Vec<u32>,
    /// Their text, cut at a stop string; what was streamed, joined.
    pub text: String,
    pub stop: Stop,
    pub stats: Stats,
}

/// A compiled model with its tokenizer, and the tokens its KV cache holds.
pub struct Session<M: Model> {
    program: Program<M>,
    tokenizer: Tokenizer,
    /// The tokens at positions 0.. of the cache.
    cached: Vec<u32>,
}

impl<M: Model> Session<M> {
    pub fn new(program: Program<M>, tokenizer: Tokenizer) -> Self {
        Session {
            program,
            tokenizer,
            cached: Vec::new(),
        }
    }

    pub fn program(&mut self) -> &mut Program<M> {
        &mut self.program
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The tokens the KV cache holds, in order.
    pub fn cached(&self) -> &[u32] {
        &self.cached
    }

    /// Runs the program once on one token and forgets the cache: the first
    /// call of a compiled program prepares its weights (packs them, faults
    /// in the mapped file), which the first answer would otherwise wait for.
    pub fn warm_up(&mut self) -> Result<(), Error> {
        let token = self.program.metadata().bos_id.unwrap_or(0);
        self.program.forward(&[token], 0)?;
        self.cached.clear();
        Ok(())
    }

    /// Forgets the cache (the next generation feeds its whole prompt).
    pub fn reset(&mut self) {
        self.cached.clear();
    }

    /// Positions the cache holds.
    pub fn capacity(&self) -> usize {
        self.program.metadata().max_context_len
    }

    /// Continues `context` (token ids, from position 0): what the cache
    /// already holds of it is kept, the rest is fed in chunks of at most
    /// `max_seq_len`, then new tokens are sampled until a stop. Each piece
    /// of text is passed to `on_text` as it is decoded.
    ///
    /// The cache keeps positions: a context that shares only a prefix
    /// with the cache goes back to the end of that prefix (later keys and
    /// values are overwritten; attention never reads past the position it
    /// is fed at). A context that does not fit, with room for one new
    /// token, is [`Error::ContextFull`] and changes nothing.
    pub fn generate(
        &mut self,
        context: &[u32],
        request: &Generate,
        mut on_text: impl FnMut(&str),
    ) -> Result<Output, Error> {
        let start = Instant::now();
        let capacity = self.capacity();
        if context.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        if context.len() >= capacity {
            return Err(Error::ContextFull {
                needed: context.len() + 1,
                capacity,
            });
        }
        // Keep the longest common prefix, but feed at least one token: the
        // logits come from the last one fed.
        let keep = common_prefix(&self.cached, context).min(context.len() - 1);
        self.cached.truncate(keep);
        let chunk = self.program.metadata().max_seq_len;
        let mut stats = Stats {
            prefill_tokens: context.len() - keep,
            ..Stats::default()
        };
        let mut pos = keep;
        for piece in context[keep..].chunks(chunk) {
            // A failed call leaves the cache unknown from `pos` on.
            self.program.forward(piece, pos)?;
            self.cached.extend_from_slice(piece);
            pos += piece.len();
        }
        stats.prefill = start.elapsed();

        let mut sampler = Sampler::new(request.sampling.clone());
        let eos = self.program.metadata().eos_ids.clone();
        let mut decoder = StreamDecoder::new(true);
        let mut text = String::new();
        // Streamed text not yet passed on: it might be the start of a stop string.
        let mut held = String::new();
        let mut tokens = Vec::new();
        let decode_start;
        let stop = 'gen: {
            if request.max_tokens == 0 {
                stats.time_to_first_token = start.elapsed();
                decode_start = Instant::now();
                break 'gen Stop::MaxTokens;
            }
            let mut next = sampler.sample(self.program.last_logits(), &self.cached);
            stats.time_to_first_token = start.elapsed();
            decode_start = Instant::now();
            loop {
                tokens.push(next);
                stats.generated_tokens += 1;
                if !request.ignore_eos && eos.contains(&next) {
                    break 'gen Stop::Eos(next);
                }
                held.push_str(&decoder.push(&self.tokenizer, next)?);
                if let Some((at, s)) = find_stop(&held, &request.stop_strings) {
                    held.truncate(at);
                    on_text(&held);
                    text.push_str(&held);
                    held.clear();
                    break 'gen Stop::StopString(s);
                }
                let safe = held.len() - partial_stop_suffix(&held, &request.stop_strings);
                if safe > 0 {
                    on_text(&held[..safe]);
                    text.push_str(&held[..safe]);
                    held.drain(..safe);
                }
                if tokens.len() >= request.max_tokens {
                    break 'gen Stop::MaxTokens;
                }
                if pos >= capacity {
                    break 'gen Stop::ContextFull;
                }
                self.program.forward(&[next], pos)?;
                self.cached.push(next);
                pos += 1;
                stats.decode_steps += 1;
                next = sampler.sample(self.program.last_logits(), &self.cached);
            }
        };
        stats.decode = decode_start.elapsed();
        if !matches!(stop, Stop::StopString(_)) {
            held.push_str(&decoder.finish(&self.tokenizer)?);
            on_text(&held);
            text.push_str(&held);
        }
        Ok(Output {
            tokens,
            text,
            stop,
            stats,
        })
    }
}

/// A conversation on one [`Session`]: each turn renders the whole
/// conversation with the model's template, and only what the cache does
/// not hold yet is fed.
pub struct Chat<M: Model> {
    session: Session<M>,
    template: ChatTemplate,
    messages: Vec<Message>,
    /// The conversation's text as the cache holds it: the last rendered
    /// prompt and the answer's tokens as the model wrote them.
    cached_text: String,
}

impl<M: Model> Chat<M> {
    pub fn new(session: Session<M>, template: ChatTemplate) -> Self {
        Chat {
            session,
            template,
            messages: Vec::new(),
            cached_text: String::new(),
        }
    }

    /// Starts with a system message (if the template takes one).
    pub fn with_system(mut self, system: &str) -> Self {
        self.messages.push(Message::new("system", system));
        self
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    pub fn session(&mut self) -> &mut Session<M> {
        &mut self.session
    }

    /// Forgets the conversation (keeping a system message) and the cache.
    pub fn clear(&mut self) {
        self.messages.retain(|m| m.role == "system");
        self.session.reset();
        self.cached_text.clear();
    }

    /// The token ids of the conversation with `user` added, ready for the
    /// assistant's answer: what [`Chat::say`] feeds.
    pub fn prompt_tokens(&self, user: &str) -> Result<Vec<u32>, Error> {
        let mut messages = self.messages.clone();
        messages.push(Message::new("user", user));
        let rendered = self.template.render(&messages, true)?;
        self.session.tokenizer.encode(&rendered, false)
    }

    /// Adds the user's message and generates the assistant's answer,
    /// streaming it to `on_text`. If the conversation no longer fits the
    /// context, this is [`Error::ContextFull`] and the conversation is as
    /// before: [`Chat::clear`] it, or keep fewer turns.
    pub fn say(&mut self, user: &str, request: &Generate, on_text: impl FnMut(&str)) -> Result<Output, Error> {
        self.messages.push(Message::new("user", user));
        let result = self.answer(request, on_text);
        match &result {
            Ok(out) => self.messages.push(Message::new("assistant", &out.text)),
            Err(_) => {
                self.messages.pop();
            }
        }
        result
    }

    fn answer(&mut self, request: &Generate, on_text: impl FnMut(&str)) -> Result<Output, Error> {
        let rendered = self.template.render(&self.messages, true)?;
        let tok = &self.session.tokenizer;
        // The tokens the model wrote last turn are kept as they are when
        // the new rendering extends the text they stand for; otherwise
        // (the template changed the answer, a stop string cut it) the
        // whole rendering is encoded and the cache keeps what matches.
        let context = match rendered.strip_prefix(self.cached_text.as_str()) {
            Some(rest) if !self.cached_text.is_empty() && !rest.is_empty() => {
                let mut ids = self.session.cached.clone();
                ids.extend(tok.encode(rest, false)?);
                ids
            }
            _ => tok.encode(&rendered, false)?,
        };
        let out = self.session.generate(&context, request, on_text)?;
        // What the cache now holds, as text: the prompt, then the answer's
        // tokens with their special tokens (an EOS the model wrote is in
        // the rendered history too), minus a last token not yet fed.
        let fed = self.session.cached.len().saturating_sub(context.len());
        let answer = self
            .session
            .tokenizer
            .decode(&out.tokens[..fed.min(out.tokens.len())], false)?;
        self.cached_text = rendered + &answer;
        Ok(out)
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The first stop string in `text`: where it starts, and which.
fn find_stop(text: &str, stops: &[String]) -> Option<(usize, String)> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()).map(|at| (at, s.clone())))
        .min_by_key(|(at, _)| *at)
}

/// The length of the longest end of `text` that begins some stop string.
fn partial_stop_suffix(text: &str, stops: &[String]) -> usize {
    let mut best = 0;
    for s in stops {
        for (i, _) in s.char_indices().skip(1) {
            if i > best && text.ends_with(&s[..i]) {
                best = i;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_are_found_and_held_back() {
        let stops = vec!["</s>".to_string(), "\n\n".to_string()];
        assert_eq!(find_stop("ab</s>c\n\n", &stops), Some((2, "</s>".into())));
        assert_eq!(find_stop("ab", &stops), None);
        assert_eq!(partial_stop_suffix("ab</", &stops), 2);
        assert_eq!(partial_stop_suffix("ab\n", &stops), 1);
        assert_eq!(partial_stop_suffix("ab", &stops), 0);
        assert_eq!(partial_stop_suffix("é<", &["<é".to_string()]), 1);
    }
}
