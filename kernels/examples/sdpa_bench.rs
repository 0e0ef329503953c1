//! `attention::custom_sdpa` micro-benchmark at SmolLM2-135M's shapes (9
//! heads over 3 kv heads of 64, a 512-position cache): one decoded token
//! at position 255, and a causal 128-token prompt from position 0.
//!
//!   cargo run --release -p ptec-kernels --example sdpa_bench [-- THREADS...]
use ptec_kernels::attention::{custom_sdpa, sdpa_scratch_len, Sdpa};
use std::time::Instant;

fn main() {
    let threads: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("thread counts"))
        .collect();
    let threads = if threads.is_empty() { vec![1, 2] } else { threads };
    let (h, kvh, d, len) = (9, 3, 64, 512);
    let cache: Vec<f32> = (0..len * kvh * d)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let values: Vec<f32> = (0..len * kvh * d)
        .map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0)
        .collect();
    let mut scores = vec![0f32; sdpa_scratch_len(len)];
    for &t in &threads {
        ptec_kernels::parallel::set_threads(t);
        for (s, start, reps) in [(1usize, 255i64, 3000), (128, 0, 30)] {
            let q: Vec<f32> = (0..s * h * d).map(|i| ((i * 29 % 89) as f32 - 44.0) / 44.0).collect();
            let mut out = vec![0f32; q.len()];
            let (qs, cs) = ([1, s, h, d], [1, len, kvh, d]);
            let args = Sdpa {
                q_sizes: &qs,
                cache_sizes: &cs,
                start_pos: start,
                mask: None,
                mask_sizes: &[],
                is_causal: true,
                scale: 0.125,
            };
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t0 = Instant::now();
                for _ in 0..reps {
                    custom_sdpa(&q, &cache, &values, &args, &mut out, &mut scores).unwrap();
                }
                best = best.min(t0.elapsed().as_secs_f64() / reps as f64);
            }
            println!(
                "threads {t} seq {s:>3}: {:8.1} us (x30 layers: {:.2} ms)",
                best * 1e6,
                best * 30e3
            );
        }
    }
}
