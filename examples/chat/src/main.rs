//! Chat with SmolLM2-135M-Instruct: the answer streams to stdout, timings
//! go to stderr.
//!
//!   cargo run --release -p example-chat -- "What is the capital of France?"
//!   cargo run --release -p example-chat -- --interactive
use clap::Parser;
use example_chat::{Export, WithSession};
use ptec_llm::{Chat, ChatTemplate, Error, Generate, Output, Sampling, Session, Stop};
use std::io::{BufRead, Write};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(about = "Chat with SmolLM2-135M-Instruct, compiled by ptec (run examples/chat/setup.sh first)")]
struct Args {
    /// The question (or the first message with --interactive).
    prompt: Vec<String>,
    /// A conversation: read messages from stdin, one a line (`/clear`
    /// starts over, an empty line or end of input ends it).
    #[arg(long)]
    interactive: bool,
    /// 0 picks the most likely token each step (greedy).
    #[arg(long, default_value_t = 0.2)]
    temperature: f32,
    #[arg(long, default_value_t = 0.9)]
    top_p: f32,
    /// 0 keeps every token.
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    /// 1 is off.
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// The same seed gives the same text (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// The most tokens an answer takes.
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// Threads the kernels use (default: every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Which export: `fp32` (the model's own numbers: greedy answers are
    /// transformers') or `8da4w` (4-bit weights, int8 activations: faster,
    /// smaller, slightly different answers).
    #[arg(long, default_value = "fp32", value_parser = ["fp32", "8da4w"])]
    export: String,
    /// A system message (the template's default otherwise).
    #[arg(long)]
    system: Option<String>,
    /// Ends the answer where this text appears (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// The folder setup.sh made (default: the one this build compiled).
    #[arg(long)]
    dir: Option<PathBuf>,
}

struct Run(Args);

impl WithSession for Run {
    type Out = Result<(), Error>;

    fn run<M: ptec_runtime::Model>(self, session: Session<M>, template: ChatTemplate) -> Result<(), Error> {
        let args = self.0;
        // The first call prepares the weights (packing them, reading the
        // mapped file): done now, so that the first answer does not wait.
        let mut session = session;
        let start = std::time::Instant::now();
        session.warm_up()?;
        eprintln!("[loaded in {:.0} ms]", start.elapsed().as_secs_f64() * 1e3);
        let seed = args.seed.unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            t.as_nanos() as u64
        });
        let request = Generate {
            sampling: Sampling {
                temperature: args.temperature,
                top_k: args.top_k,
                top_p: args.top_p,
                min_p: args.min_p,
                repetition_penalty: args.repeat_penalty,
                seed,
                ..Sampling::default()
            },
            max_tokens: args.max_tokens,
            stop_strings: args.stop.clone(),
            ignore_eos: false,
        };
        let mut chat = Chat::new(session, template);
        if let Some(system) = &args.system {
            chat = chat.with_system(system);
        }
        let first = args.prompt.join(" ");
        if !args.interactive {
            if first.trim().is_empty() {
                return Err(Error::EmptyPrompt);
            }
            let out = say(&mut chat, &first, &request)?;
            report(&out, seed);
            return Ok(());
        }
        let stdin = std::io::stdin();
        let mut lines = stdin.lock().lines();
        let mut next = (!first.trim().is_empty()).then_some(first);
        loop {
            let line = match next.take() {
                Some(l) => l,
                None => {
                    eprint!("> ");
                    match lines.next() {
                        Some(l) => l?,
                        None => break,
                    }
                }
            };
            let line = line.trim();
            if line.is_empty() {
                break;
            }
            if line == "/clear" {
                chat.clear();
                continue;
            }
            let out = match say(&mut chat, line, &request) {
                // The policy for a full context: start a new conversation
                // (keeping the system message) and ask again.
                Err(Error::ContextFull { .. }) => {
                    eprintln!("[the context is full: starting a new conversation]");
                    chat.clear();
                    say(&mut chat, line, &request)?
                }
                other => other?,
            };
            report(&out, seed);
        }
        Ok(())
    }
}

fn say<M: ptec_runtime::Model>(chat: &mut Chat<M>, text: &str, request: &Generate) -> Result<Output, Error> {
    let stdout = std::io::stdout();
    let out = chat.say(text, request, |piece| {
        let mut s = stdout.lock();
        let _ = s.write_all(piece.as_bytes());
        let _ = s.flush();
    })?;
    println!();
    Ok(out)
}

fn report(out: &Output, seed: u64) {
    let s = &out.stats;
    let stop = match &out.stop {
        Stop::Eos(_) => "end of answer".to_string(),
        Stop::StopString(t) => format!("stop string {t:?}"),
        Stop::MaxTokens => "--max-tokens".to_string(),
        Stop::ContextFull => "the context is full".to_string(),
    };
    eprintln!(
        "[{} prompt tokens at {:.0} tokens/s, first token after {:.0} ms; {} tokens at {:.1} tokens/s; stopped by {stop}; seed {seed}]",
        s.prefill_tokens,
        s.prefill_tokens_per_s(),
        s.time_to_first_token.as_secs_f64() * 1e3,
        s.generated_tokens,
        s.decode_tokens_per_s(),
    );
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    ptec_runtime::set_threads(
        args.threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
    );
    let export = if args.export == "8da4w" {
        Export::Q4
    } else {
        Export::Fp32
    };
    let dir = example_chat::dir(args.dir.clone());
    match example_chat::with_session(&dir, export, Run(args)).and_then(|r| r) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
