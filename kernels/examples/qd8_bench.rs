//! 4-bit blockwise layer micro-benchmark (the LLM export's `8da4w`
//! linears): Llama-3.2-1B's feed-forward shapes, 40 layers alternating
//! 2048 × 8192 and 8192 × 2048 with a bf16 scale per 32 inputs, random
//! weights kept as the compiler keeps them (`qd8::prepare_blockwise`), run
//! through `qd8::fully_connected` for 1 row (a decoded token: every weight
//! read once, so the figure is memory bandwidth) and 128 rows (a prompt:
//! the integer kernel's throughput).
//!
//!   cargo run --release -p ptec-kernels --example qd8_bench [-- THREADS...]
//!
//! With `SHAPES=smollm2`, SmolLM2-135M's instead: 30 blocks of q, k, v,
//! o (576 × 576, 192, 192, 576), gate, up (576 × 1536) and down
//! (1536 × 576), then the output layer (576 × 49152).
//!
//! Prints the best and median sweep of the 40 layers over 10 (after 2
//! untimed), per thread count (default 1 and 2), and which order the
//! kernel sums in on this CPU (`qd8::blockwise_order`).
use ptec_kernels::bf16;
use ptec_kernels::qd8::{
    blockwise_kept_len, blockwise_order, fully_connected, prepare_blockwise, scratch_len, Weights,
};
use std::time::Instant;

const GROUP: usize = 32;

struct Layer {
    k: usize,
    n: usize,
    w: Vec<u8>,
    scales: Vec<bf16>,
    kept: Vec<f32>,
}

fn main() {
    let threads: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("thread counts"))
        .collect();
    let threads = if threads.is_empty() { vec![1, 2] } else { threads };
    let mut seed = 1u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as u32
    };
    let shapes: Vec<(usize, usize)> = match std::env::var("SHAPES").as_deref() {
        Ok("smollm2") => {
            let block = [
                (576, 576),
                (576, 192),
                (576, 192),
                (576, 576),
                (576, 1536),
                (576, 1536),
                (1536, 576),
            ];
            let mut all: Vec<_> = (0..30).flat_map(|_| block).collect();
            all.push((576, 49152));
            all
        }
        _ => (0..40).map(|i| [(2048, 8192), (8192, 2048)][i % 2]).collect(),
    };
    let widest = shapes.iter().map(|&(k, n)| k.max(n)).max().unwrap_or(0);
    let layers: Vec<Layer> = shapes
        .iter()
        .map(|&(k, n)| {
            let w: Vec<u8> = (0..n * k / 2).map(|_| next() as u8).collect();
            let scales: Vec<bf16> = (0..n * k / GROUP)
                .map(|_| bf16::from_f32((1 + next() % 100) as f32 * 1e-3))
                .collect();
            let mut kept = vec![0f32; blockwise_kept_len(k, n, GROUP)];
            prepare_blockwise(&w, &scales, GROUP, k, n, &mut kept);
            Layer { k, n, w, scales, kept }
        })
        .collect();
    let weight_bytes: usize = layers.iter().map(|l| l.kept.len() * 4).sum();
    let macs: usize = layers.iter().map(|l| l.k * l.n).sum();
    println!(
        "# {}; 4-bit sums in the order {:?}; {} layers, {:.0} MB kept",
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| c
                .lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l[l.find(':').map_or(0, |i| i + 2)..].to_string()))
            .unwrap_or_else(|| std::env::consts::ARCH.to_string()),
        blockwise_order(),
        layers.len(),
        weight_bytes as f64 / 1e6
    );
    for &t in &threads {
        ptec_kernels::parallel::set_threads(t);
        for rows in [1, 128] {
            let x: Vec<f32> = (0..rows * widest)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                .collect();
            let mut out = vec![0f32; rows * widest];
            let mut scratch = vec![0f32; scratch_len(rows, widest, GROUP)];
            let mut times = Vec::new();
            for sweep in 0..12 {
                let start = Instant::now();
                for l in &layers {
                    let weights = Weights::Blockwise4 {
                        w: &l.w,
                        scales: &l.scales,
                        group: GROUP,
                        kept: Some(&l.kept),
                    };
                    fully_connected(
                        &x[..rows * l.k],
                        rows,
                        l.k,
                        l.n,
                        &weights,
                        None,
                        f32::MIN,
                        f32::MAX,
                        &mut scratch,
                        &mut out[..rows * l.n],
                    );
                }
                if sweep >= 2 {
                    times.push(start.elapsed().as_secs_f64());
                }
            }
            times.sort_by(f64::total_cmp);
            let (best, median) = (times[0], times[times.len() / 2]);
            let rate = match rows {
                1 => format!("{:.1} GB/s", weight_bytes as f64 / best / 1e9),
                _ => format!("{:.0} GMAC/s", (macs * rows) as f64 / best / 1e9),
            };
            println!(
                "threads {t} rows {rows:>3}: best {:7.2} ms, median {:7.2} ms, {rate}",
                best * 1e3,
                median * 1e3
            );
        }
    }
}
