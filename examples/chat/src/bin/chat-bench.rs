//! One timed chat turn for bench/chat.sh, the whole path: template,
//! tokenizer, prefill, sampling and detokenization. The user message is
//! cut so that the rendered prompt is PROMPT tokens; the answer is DECODE
//! tokens (EOS ignored), greedy. Prints one JSON line.
//!
//!   chat-bench q4|fp32 THREADS PROMPT DECODE
//!   chat-bench message PROMPT      # prints the user message
use example_chat::{Export, WithSession};
use ptec_llm::{Chat, ChatTemplate, Error, Generate, Message, Session, Tokenizer};
use std::time::Instant;

const TEXT: &str = "Summarise the following notes about compilers for a student. A compiler reads a program \
written in one language and produces an equivalent program in another, usually lower-level, language. It \
checks the program for errors, builds an intermediate representation, optimises it, allocates registers \
and memory, and emits machine code. Ahead-of-time compilers do this before the program runs, while \
just-in-time compilers do it while the program runs, using what they observe to specialise the code. \
Interpreters skip code generation and execute the representation directly, which is simpler but slower. \
Modern machine learning compilers treat a trained model as a program: they plan its memory, fuse its \
operators and generate kernels specialised to its shapes and data types, so that it runs fast on phones, \
laptops and microcontrollers without a general-purpose runtime.";

struct Bench {
    prompt: usize,
    decode: usize,
    started: Instant,
}

impl WithSession for Bench {
    type Out = Result<String, Error>;

    fn run<M: ptec_runtime::Model>(self, session: Session<M>, template: ChatTemplate) -> Result<String, Error> {
        // Loading is done when the weights are ready: the first call
        // prepares them (packing, page faults of the mapped file), as
        // ExecuTorch's load_method and llama.cpp's load do; a one-token
        // call at position 0, then the cache is forgotten.
        let mut session = session;
        session.warm_up()?;
        let load_s = self.started.elapsed().as_secs_f64();
        let message = message(session.tokenizer(), &template, self.prompt)?;
        let mut chat = Chat::new(session, template);
        let prompt_len = chat.prompt_tokens(&message)?.len();
        let request = Generate {
            max_tokens: self.decode,
            ignore_eos: true,
            ..Generate::default()
        };
        let start = Instant::now();
        let mut first = None;
        let mut text = String::new();
        let out = chat.say(&message, &request, |piece| {
            first.get_or_insert_with(|| start.elapsed());
            text.push_str(piece);
        })?;
        let total = start.elapsed().as_secs_f64();
        let s = &out.stats;
        Ok(format!(
            "{{\"prompt_tokens\": {prompt_len}, \"new_tokens\": {}, \"load_s\": {:.6}, \"ttft_s\": {:.6}, \"first_text_s\": {:.6}, \
             \"prefill_tok_s\": {:.3}, \"decode_tok_s\": {:.3}, \"total_s\": {total:.6}, \"peak_rss_kb\": {}}}",
            s.generated_tokens,
            load_s,
            s.time_to_first_token.as_secs_f64(),
            first.map_or(f64::NAN, |d| d.as_secs_f64()),
            s.prefill_tokens_per_s(),
            s.decode_tokens_per_s(),
            peak_rss_kb(),
        ))
    }
}

/// The user message whose rendered prompt is `prompt` tokens: the longest
/// cut of TEXT, in words, that fits, then filler words (one token each).
fn message(tok: &Tokenizer, template: &ChatTemplate, prompt: usize) -> Result<String, Error> {
    let len = |m: &str| -> Result<usize, Error> {
        Ok(tok
            .encode(&template.render(&[Message::new("user", m)], true)?, false)?
            .len())
    };
    let words: Vec<&str> = TEXT.split(' ').collect();
    let mut n = words.len();
    while n > 0 && len(&words[..n].join(" "))? > prompt {
        n -= 1;
    }
    let mut message = words[..n].join(" ");
    while len(&message)? < prompt {
        message.push_str(" so");
    }
    Ok(message)
}

/// The process's peak resident memory (VmHWM), in KiB.
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() == 3 && a[1] == "message" {
        // The benchmark's user message, for the other engines.
        let dir = example_chat::dir(None);
        let prompt: usize = a[2].parse().expect("PROMPT");
        let run = || -> Result<String, Error> {
            let (tok, template) = example_chat::text(&dir)?;
            message(&tok, &template, prompt)
        };
        match run() {
            Ok(m) => println!("{m}"),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    if a.len() != 5 {
        eprintln!("usage: chat-bench q4|fp32 THREADS PROMPT DECODE");
        std::process::exit(2);
    }
    let export = if a[1] == "fp32" { Export::Fp32 } else { Export::Q4 };
    let num = |i: usize| {
        a[i].parse::<usize>()
            .unwrap_or_else(|_| panic!("{} is not a number", a[i]))
    };
    ptec_runtime::set_threads(num(2));
    let bench = Bench {
        prompt: num(3),
        decode: num(4),
        started: Instant::now(),
    };
    match example_chat::with_session(&example_chat::dir(None), export, bench).and_then(|r| r) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
