//! The 8da4w program's memory: it repacks its 4-bit weights on the first
//! call and gives the file's pages back (`Blob::release`), so the mapped
//! `.pte` (181 MiB, most of it the fp32 embedding table, whose rows are
//! read one by one) stays mostly out of resident memory. chat-bench's
//! release build peaks at 158 MiB, below llama.cpp's 172 on the same model
//! (docs/chat.md); this test's unoptimized build at about 169, and at
//! over 330 when the file's pages stay. A test binary of its own: the
//! figures are the process's. On a CPU without a kernel for repacked
//! 4-bit weights (x86 without AVX-512 VNNI) the layers read the nibbles
//! from the mapping on every call, so those pages (about 70 MiB) stay:
//! 75 MiB of the file resident and a 229 MiB peak on an AVX2-only Zen 3.
#[cfg(all(chat_model, target_os = "linux"))]
#[test]
fn the_mapped_program_stays_out_of_memory() {
    use example_chat::{q4::SmolLm2Q4, text, DIR};
    use ptec_llm::{Generate, Program, Session};
    use std::path::Path;

    let (tok, _) = text(Path::new(DIR)).unwrap();
    let path = Path::new(DIR).join("smollm2_8da4w.pte");
    let blob = ptec_runtime::Blob::open(&path).unwrap();
    let mut session = Session::new(Program::new(SmolLm2Q4::boxed([blob]).unwrap()).unwrap(), tok);
    let request = Generate {
        max_tokens: 16,
        ignore_eos: true,
        ..Generate::default()
    };
    let ids = session.tokenizer().encode("The capital of France is", false).unwrap();
    let out = session.generate(&ids, &request, |_| {}).unwrap();
    assert_eq!(out.stats.generated_tokens, 16);

    // The mapping's resident KiB, from smaps: the lines after its header.
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = path.to_str().unwrap();
    let mut mapped_kib = 0;
    let mut inside = false;
    for line in smaps.lines() {
        if line
            .split_whitespace()
            .next()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            inside = line.ends_with(name);
        } else if inside && line.starts_with("Rss:") {
            mapped_kib += line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap();
        }
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    eprintln!(
        "resident of the mapped .pte: {} KiB; peak: {} KiB",
        mapped_kib, peak_kib
    );
    let (mapped_max, peak_max) = if ptec_runtime::kernels::qd8::repacks_weights() {
        (32 << 10, 200 << 10)
    } else {
        (96 << 10, 260 << 10)
    };
    assert!(mapped_kib < mapped_max, "{mapped_kib} KiB of the .pte resident");
    assert!(peak_kib < peak_max, "peak {peak_kib} KiB");
}

#[cfg(not(all(chat_model, target_os = "linux")))]
#[test]
fn the_model_is_set_up() {
    let msg = format!("no SmolLM2 export in {}: run examples/chat/setup.sh", example_chat::DIR);
    assert!(std::env::var_os("PTEC_REQUIRE_CHAT").is_none(), "{msg}");
    eprintln!("NOT RUN: {msg}");
}
