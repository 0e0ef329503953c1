//! bench/chat.sh's candle engine: one timed chat turn of
//! SmolLM2-135M-Instruct's GGUF on candle (`quantized_llama`), with the
//! protocol and JSON keys of ptec's `chat-bench` (and bench/chat_ref.py):
//! load, a one-token warm-up call at position 0 (in load_s), then one turn:
//! render DIR/chat_template.jinja (minijinja, trim_blocks and
//! lstrip_blocks, as transformers renders it) for the user message in
//! MESSAGE_FILE, tokenize with DIR/tokenizer.json, prefill, greedy decode
//! of DECODE tokens with EOS ignored, streaming detokenization.
//! prefill_tok_s and ttft_s are timed from the end of tokenization,
//! first_text_s and total_s from the start of the turn, as in ptec-llm.
//!
//!   chat-candle GGUF THREADS PROMPT DECODE MESSAGE_FILE DIR
//!
//! THREADS sets candle's pools (RAYON_NUM_THREADS and CANDLE_NUM_THREADS).
use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use std::error::Error;
use std::path::Path;
use std::time::Instant;
use tokenizers::Tokenizer;

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

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

fn argmax(logits: &Tensor) -> Res<u32> {
    let v: Vec<f32> = logits.flatten_all()?.to_vec1()?;
    Ok((0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b }) as u32)
}

fn render(template: &str, message: &str) -> Res<String> {
    let mut env = minijinja::Environment::new();
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()?,
    );
    let messages = [minijinja::context! { role => "user", content => message }];
    Ok(env.render_str(
        template,
        minijinja::context! { messages => messages, add_generation_prompt => true },
    )?)
}

fn run(a: &[String]) -> Res<String> {
    let (gguf, dir) = (&a[1], Path::new(&a[6]));
    let num = |i: usize| a[i].parse::<usize>().map_err(|_| format!("{} is not a number", a[i]));
    let (prompt, decode) = (num(3)?, num(4)?);
    let message = std::fs::read_to_string(&a[5])?.trim_end_matches('\n').to_string();
    let baseline = peak_rss_kb();

    let started = Instant::now();
    let device = Device::Cpu;
    let mut file = std::fs::File::open(gguf)?;
    let content = gguf_file::Content::read(&mut file)?;
    let mut model = ModelWeights::from_gguf(content, &mut file, &device)?;
    let tok = Tokenizer::from_file(dir.join("tokenizer.json"))?;
    let template = std::fs::read_to_string(dir.join("chat_template.jinja"))?;
    // The warm-up; the next call at position 0 replaces the cache.
    model.forward(&Tensor::new(&[[1u32]], &device)?, 0)?;
    let load_s = started.elapsed().as_secs_f64();

    let t0 = Instant::now();
    let rendered = render(&template, &message)?;
    let ids = tok.encode(rendered, false)?.get_ids().to_vec();
    if ids.len() != prompt {
        return Err(format!("the prompt is {} tokens, not {prompt}", ids.len()).into());
    }
    let t1 = Instant::now();
    let logits = model.forward(&Tensor::new(ids.as_slice(), &device)?.unsqueeze(0)?, 0)?;
    let mut next = argmax(&logits)?;
    let prefill = t1.elapsed();
    let decode_start = Instant::now();
    let mut stream = tok.decode_stream(true);
    let (mut tokens, mut pos, mut first_text, mut text) = (Vec::new(), prompt, None, String::new());
    loop {
        tokens.push(next);
        if let Some(piece) = stream.step(next)? {
            if !piece.is_empty() {
                first_text.get_or_insert_with(|| t0.elapsed());
            }
            text.push_str(&piece);
        }
        if tokens.len() >= decode {
            break;
        }
        let logits = model.forward(&Tensor::new(&[[next]], &device)?, pos)?;
        pos += 1;
        next = argmax(&logits)?;
    }
    let decode_s = decode_start.elapsed().as_secs_f64();
    let total_s = t0.elapsed().as_secs_f64();
    if std::env::var_os("CHAT_TEXT").is_some() {
        eprintln!("{text:?}");
    }
    Ok(format!(
        "{{\"prompt_tokens\": {prompt}, \"new_tokens\": {}, \"load_s\": {load_s:.6}, \"ttft_s\": {:.6}, \"first_text_s\": {:.6}, \
         \"prefill_tok_s\": {:.3}, \"decode_tok_s\": {:.3}, \"total_s\": {total_s:.6}, \"peak_rss_kb\": {}, \"baseline_rss_kb\": {baseline}}}",
        tokens.len(),
        prefill.as_secs_f64(),
        first_text.map_or(f64::NAN, |d| d.as_secs_f64()),
        prompt as f64 / prefill.as_secs_f64().max(1e-9),
        (tokens.len() - 1) as f64 / decode_s.max(1e-9),
        peak_rss_kb(),
    ))
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 7 {
        eprintln!("usage: chat-candle GGUF THREADS PROMPT DECODE MESSAGE_FILE DIR");
        std::process::exit(2);
    }
    // Before candle builds its thread pools (on first use).
    std::env::set_var("RAYON_NUM_THREADS", &a[2]);
    std::env::set_var("CANDLE_NUM_THREADS", &a[2]);
    match run(&a) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
