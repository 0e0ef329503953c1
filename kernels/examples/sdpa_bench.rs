//! `attention::custom_sdpa` micro-benchmark at SmolLM2-135M's shapes (9
//! heads over 3 kv heads of 64, a 512-position cache): one decoded token
//! at position 255, and a causal 128-token prompt from position 0, each
//! over 30 layers' caches. Before each pass a 64 MiB buffer is read, as a
//! token's weights evict the caches from the CPU's caches; only the
//! attention is timed.
//!
//!   cargo run --release -p ptec-kernels --example sdpa_bench [-- THREADS...]
use ptec_kernels::attention::{custom_sdpa, sdpa_scratch_len, Sdpa};
use std::time::Instant;

const LAYERS: usize = 30;

fn main() {
    let threads: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("thread counts"))
        .collect();
    let threads = if threads.is_empty() { vec![1, 2] } else { threads };
    let (h, kvh, d, len) = (9, 3, 64, 512);
    let layer = len * kvh * d;
    let keys: Vec<f32> = (0..LAYERS * layer)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let values: Vec<f32> = (0..LAYERS * layer)
        .map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0)
        .collect();
    let flush: Vec<u64> = (0..8u64 << 20).collect();
    let mut scores = vec![0f32; sdpa_scratch_len(len)];
    let mut sink = 0u64;
    for &t in &threads {
        ptec_kernels::parallel::set_threads(t);
        for (s, start, passes) in [(1usize, 255i64, 30), (128, 0, 5)] {
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
            for _ in 0..passes {
                sink = sink.wrapping_add(flush.iter().sum::<u64>());
                let t0 = Instant::now();
                for l in 0..LAYERS {
                    let (k, v) = (&keys[l * layer..][..layer], &values[l * layer..][..layer]);
                    custom_sdpa(&q, k, v, &args, &mut out, &mut scores).unwrap();
                }
                best = best.min(t0.elapsed().as_secs_f64());
            }
            println!("threads {t} seq {s:>3}: {:.3} ms over {LAYERS} layers", best * 1e3);
        }
    }
    assert_ne!(sink, 1);
}
