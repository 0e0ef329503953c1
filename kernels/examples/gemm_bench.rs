//! GEMM micro-benchmark: GFLOP/s of `sgemm` on square and model-shaped
//! products, against the single-core fp32 peak measured in the same run
//! with an FMA-throughput loop (AVX2 and, where the CPU has it, AVX-512;
//! NEON on aarch64).
//!
//!   cargo run --release -p ptec-kernels --example gemm_bench [-- --quick]
//!   cargo run --release -p ptec-kernels --example gemm_bench -- --cores N
//!
//! `--cores N` only measures what N threads get of the peak at once, each
//! against one thread alone: on a shared host two vCPUs may share a core
//! or a busy neighbour's, which bounds what any N-thread run can gain.
//! It also times a cache line passed back and forth between two threads:
//! on this project's shared VM the round trip is 40–70 ns in some phases
//! and 380–490 ns in others, when every line one thread writes and another
//! reads costs several times more (see docs/benchmarking.md, "The host's
//! phases").
use ptec_kernels::gemm::{gemm_packed, gemm_scratch_len, pack, packed_len, sgemm, sgemm_kernel_name, Epilogue};
use ptec_kernels::nhwc::{conv2d_nhwc, depthwise_conv2d_nhwc, Conv2dNhwc};
use std::hint::black_box;
use std::time::Instant;

/// Runs `f` (doing `flops` each call) repeatedly for about `budget_s`
/// seconds; returns the GFLOP/s of the fastest call (the least disturbed
/// by other work on the machine; the peak is measured the same way).
fn gflops(flops: f64, budget_s: f64, f: impl FnMut()) -> f64 {
    gflops_after(flops, budget_s, || {}, f)
}

/// As [`gflops`], with `setup` run untimed before each call.
fn gflops_after(flops: f64, budget_s: f64, mut setup: impl FnMut(), mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    let mut rates = Vec::new();
    while rates.len() < 3 || (start.elapsed().as_secs_f64() < budget_s && rates.len() < 1000) {
        setup();
        let t0 = Instant::now();
        f();
        rates.push(flops / t0.elapsed().as_secs_f64() / 1e9);
    }
    rates.into_iter().fold(0.0, f64::max)
}

/// Peak FMA throughput: 12 independent accumulators, enough to cover the
/// FMA latency on every current x86 core. The operands come in as
/// arguments so the compiler cannot fold the loop away.
#[cfg(target_arch = "x86_64")]
mod peak {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn avx2(iters: usize, x: f32, y: f32) -> f32 {
        let (x, y) = (_mm256_set1_ps(x), _mm256_set1_ps(y));
        let mut acc = [y; 12];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm256_fmadd_ps(x, *a, y);
            }
        }
        let mut s = _mm256_setzero_ps();
        for a in acc {
            s = _mm256_add_ps(s, a);
        }
        _mm256_cvtss_f32(s)
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn avx512(iters: usize, x: f32, y: f32) -> f32 {
        let (x, y) = (_mm512_set1_ps(x), _mm512_set1_ps(y));
        let mut acc = [y; 12];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm512_fmadd_ps(x, *a, y);
            }
        }
        let mut s = _mm512_setzero_ps();
        for a in acc {
            s = _mm512_add_ps(s, a);
        }
        _mm512_reduce_add_ps(s)
    }
}

/// Peak NEON FMA throughput: 16 independent accumulators, enough to cover
/// the FMA latency on cores with four FMA pipes (Apple's) as well as two.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod peak_neon {
    use std::arch::aarch64::*;

    /// Accumulators the loop keeps.
    pub const ACCUMULATORS: usize = 16;

    #[target_feature(enable = "neon")]
    pub fn neon(iters: usize, x: f32, y: f32) -> f32 {
        let (x, y) = (vdupq_n_f32(x), vdupq_n_f32(y));
        let mut acc = [y; ACCUMULATORS];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = vfmaq_f32(y, x, *a);
            }
        }
        let mut s = vdupq_n_f32(0.0);
        for a in acc {
            s = vaddq_f32(s, a);
        }
        vaddvq_f32(s)
    }
}

/// Measured peaks: `(name, GFLOP/s)` for each vector ISA the CPU has.
fn peaks() -> Vec<(&'static str, f64)> {
    // Pushed to only on the architectures below.
    #[allow(unused_mut)]
    let mut out = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        const ITERS: usize = 20_000_000;
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA.
            let r = gflops((ITERS * 12 * 8 * 2) as f64, 0.5, || {
                black_box(unsafe { peak::avx2(black_box(ITERS), black_box(0.5), black_box(0.25)) });
            });
            out.push(("avx2+fma", r));
        }
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            let r = gflops((ITERS * 12 * 16 * 2) as f64, 0.5, || {
                black_box(unsafe { peak::avx512(black_box(ITERS), black_box(0.5), black_box(0.25)) });
            });
            out.push(("avx512f", r));
        }
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    {
        const ITERS: usize = 20_000_000;
        let r = gflops((ITERS * peak_neon::ACCUMULATORS * 4 * 2) as f64, 0.5, || {
            // SAFETY: NEON is on for the whole build.
            black_box(unsafe { peak_neon::neon(black_box(ITERS), black_box(0.5), black_box(0.25)) });
        });
        out.push(("neon", r));
    }
    out
}

/// FMA throughput sustained over about a second (all the calls' flops
/// over their whole time, not the fastest call: what a thread gets while
/// others run), with the AVX2 loop; 0 without AVX2 and FMA.
fn sustained() -> f64 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        const ITERS: usize = 2_000_000;
        let start = Instant::now();
        let mut calls = 0usize;
        while calls == 0 || start.elapsed().as_secs_f64() < 1.0 {
            // SAFETY: the CPU has AVX2 and FMA.
            black_box(unsafe { peak::avx2(black_box(ITERS), black_box(0.5), black_box(0.25)) });
            calls += 1;
        }
        return (calls * ITERS * 12 * 8 * 2) as f64 / start.elapsed().as_secs_f64() / 1e9;
    }
    0.0
}

/// The FMA throughput of one thread alone, then of each of `n` threads at
/// once (started together), three times over, as the host's load moves
/// within seconds: one line, with the median of the slowest thread's
/// share of the lone throughput measured just before.
fn cores(n: usize) {
    let mut shares = Vec::new();
    let mut rounds = Vec::new();
    for _ in 0..3 {
        let alone = sustained();
        let start = std::sync::Barrier::new(n);
        let each: Vec<f64> = std::thread::scope(|s| {
            let runs: Vec<_> = (0..n)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        sustained()
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().expect("a peak thread")).collect()
        });
        let slowest = each.iter().copied().fold(f64::INFINITY, f64::min);
        shares.push(if alone > 0.0 { slowest / alone } else { 0.0 });
        let shown: Vec<String> = each.iter().map(|g| format!("{g:.0}")).collect();
        rounds.push(format!("{alone:.0} | {}", shown.join(" + ")));
    }
    shares.sort_by(f64::total_cmp);
    println!(
        "cores: AVX2 FMA GFLOP/s, one thread alone | {n} at once: {}; slowest at once: {:.0}% of alone (median); cache-line round trip {:.0} ns",
        rounds.join(", "),
        100.0 * shares[shares.len() / 2],
        round_trip_ns()
    );
}

/// The time for a value written by one thread to be seen by another and
/// answered (one cache line crossing each way), in ns: the median of three
/// runs of 100 000 exchanges. Both threads spin, so on a two-CPU machine
/// the scheduler keeps them on different CPUs.
fn round_trip_ns() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    #[repr(align(128))]
    struct Line(AtomicU64);
    const EXCHANGES: u64 = 100_000;
    let mut runs: Vec<f64> = (0..3)
        .map(|_| {
            let line = Line(AtomicU64::new(0));
            std::thread::scope(|s| {
                s.spawn(|| {
                    for i in 0..EXCHANGES {
                        while line.0.load(Ordering::Acquire) != 2 * i + 1 {}
                        line.0.store(2 * i + 2, Ordering::Release);
                    }
                });
                let start = Instant::now();
                for i in 0..EXCHANGES {
                    line.0.store(2 * i + 1, Ordering::Release);
                    while line.0.load(Ordering::Acquire) != 2 * i + 2 {}
                }
                start.elapsed().as_secs_f64() * 1e9 / EXCHANGES as f64
            })
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[1]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--cores") {
        let n = args.get(i + 1).and_then(|n| n.parse().ok()).filter(|&n| n > 0);
        let Some(n) = n else {
            eprintln!("--cores takes a thread count of at least 1");
            std::process::exit(2);
        };
        return cores(n);
    }
    let quick = args.iter().any(|a| a == "--quick");
    let budget = if quick { 0.3 } else { 1.5 };
    let peaks = peaks();
    for (isa, p) in &peaks {
        println!("peak {isa:9} {p:7.1} GFLOP/s (FMA-throughput loop, one core)");
    }
    let best_peak = peaks.iter().map(|p| p.1).fold(0.0, f64::max);
    // GFLOP/s as a percentage of the widest peak.
    let pct = |r: f64| if best_peak > 0.0 { 100.0 * r / best_peak } else { 0.0 };
    println!("sgemm kernel: {}", sgemm_kernel_name());
    println!(
        "{:>6} {:>6} {:>6} {:>4} {:>9} {:>7} {:>10} {:>7}",
        "m", "n", "k", "B", "GFLOP/s", "% peak", "prepacked", "% peak"
    );
    // Square products, then the shapes of the bench models' layers
    // (mlp_1024: batch 8; encoder_256: 128 tokens, width 256, FF 1024).
    let shapes = [
        (512, 512, 512, false),
        (1024, 1024, 1024, false),
        (512, 512, 512, true),
        (1024, 1024, 1024, true),
        (8, 1024, 1024, true),
        (8, 1000, 1024, true),
        (1, 1000, 1280, true),
        (128, 768, 256, true),
        (128, 1024, 256, true),
        (128, 256, 1024, true),
        (128, 128, 64, false),
    ];
    let mut seed = 1u32;
    let mut rand = move || {
        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
        (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
    };
    for (m, n, k, b_trans) in shapes {
        let a: Vec<f32> = (0..m * k).map(|_| rand()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rand()).collect();
        let mut c = vec![0.0f32; m * n];
        let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
        let flops = 2.0 * (m * n * k) as f64;
        let r = gflops(flops, budget, || {
            sgemm(m, n, k, 1.0, &a, false, &b, b_trans, 0.0, &mut c, &mut scratch);
            black_box(&mut c);
        });
        // The same product with B packed ahead of time (a constant weight),
        // on the engine that multiplies packed weights.
        let mut pk = vec![0.0f32; packed_len(k, n)];
        pack(&b, k, n, b_trans, &mut pk);
        let re = gflops(flops, budget, || {
            gemm_packed(m, n, k, &a, k, &pk, &Epilogue::NONE, &mut c, n);
            black_box(&mut c);
        });
        let layout = if b_trans { "T" } else { "N" };
        println!(
            "{m:>6} {n:>6} {k:>6} {layout:>4} {r:>9.1} {:>6.0}% {re:>10.1} {:>6.0}%",
            pct(r),
            pct(re)
        );
    }
    println!("GFLOP/s of the fastest run; % peak: of the widest peak above; B: T when B is stored");
    println!("transposed (a Linear weight); prepacked: B packed once beforehand, as ptec does for weights,");
    println!("and multiplied by the packed engine (A read in place)");
    // The engine of NHWC 1×1 convolutions (A read in place, B prepacked),
    // on MobileNetV2's pointwise layers: pixels × out channels × in channels.
    println!();
    println!("packed engine, MobileNetV2 1x1 convolutions (cold: caches flushed before each run, so");
    println!("the weights come from memory, as they do inside the whole model):");
    println!(
        "{:>6} {:>6} {:>6} {:>9} {:>7} {:>9} {:>7}",
        "m", "n", "k", "GFLOP/s", "% peak", "cold", "% peak"
    );
    let mut flush = vec![0u8; 64 << 20];
    for (m, n, k) in [
        (12544, 96, 16),
        (12544, 16, 32),
        (3136, 144, 24),
        (3136, 24, 144),
        (196, 576, 96),
        (196, 96, 576),
        (49, 960, 160),
        (49, 160, 960),
        (49, 1280, 320),
    ] {
        let a: Vec<f32> = (0..m * k).map(|_| rand()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rand()).collect();
        let mut c = vec![0.0f32; m * n];
        let mut packed = vec![0.0f32; packed_len(k, n)];
        pack(&b, k, n, true, &mut packed);
        let flops = 2.0 * (m * n * k) as f64;
        let mut product = || {
            gemm_packed(m, n, k, &a, k, &packed, &Epilogue::NONE, &mut c, n);
            black_box(&mut c);
        };
        let warm = gflops(flops, budget, &mut product);
        let cold = gflops_after(
            flops,
            budget,
            || {
                for line in flush.chunks_mut(64) {
                    line[0] = line[0].wrapping_add(1);
                }
                black_box(&mut flush);
            },
            &mut product,
        );
        println!(
            "{m:>6} {n:>6} {k:>6} {warm:>9.1} {:>6.0}% {cold:>9.1} {:>6.0}%",
            pct(warm),
            pct(cold)
        );
    }
    // The first layer (3×3 over RGB, stride 2): its window is 27 floats,
    // multiplied from the image where the CPU has AVX-512 or AVX2 + FMA
    // (nhwc/direct.rs), through gathered windows (im2col) elsewhere.
    println!();
    let stem = Conv2dNhwc::regular(&[1, 224, 224, 3], &[32, 3, 3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 1)
        .expect("MobileNetV2's stem geometry");
    let x: Vec<f32> = (0..224 * 224 * 3).map(|_| rand()).collect();
    let w: Vec<f32> = (0..32 * 27).map(|_| rand()).collect();
    let mut out = vec![0.0f32; stem.output_sizes().iter().product()];
    let mut kept = vec![0.0f32; stem.packed_filter_len()];
    stem.pack_filter(&w, &mut kept);
    let mut scratch = vec![0.0f32; stem.scratch_len(true)];
    let flops = 2.0 * (out.len() * 27) as f64;
    let r = gflops(flops, budget, || {
        conv2d_nhwc(&stem, &x, &w, None, 0.0, 6.0, Some(&kept), &mut out, &mut scratch);
        black_box(&mut out);
    });
    println!(
        "MobileNetV2 stem convolution 1x224x224x3 -> 112x112x32: {:.1} us, {r:.1} GFLOP/s, {:.0}% peak",
        flops / r / 1e3,
        pct(r)
    );
    // MobileNetV2's depthwise 3×3 layers (bias, ReLU6): far from the FMA
    // peak, so times, and how many times the peak's time for their FMAs.
    println!();
    println!("MobileNetV2 depthwise 3x3 convolutions (x floor: the time over that of their FMAs at the peak):");
    println!("{:>5} {:>5} {:>6} {:>8} {:>8}", "size", "C", "stride", "us", "x floor");
    for (size, c, stride) in [
        (112, 32, 1),
        (112, 96, 2),
        (56, 144, 1),
        (56, 144, 2),
        (28, 192, 1),
        (14, 384, 1),
        (14, 576, 1),
        (7, 960, 1),
    ] {
        let pad = if stride == 1 { [1, 1, 1, 1] } else { [0, 1, 1, 0] };
        let g = Conv2dNhwc::depthwise(&[1, size, size, c], &[1, 3, 3, c], [stride, stride], pad, [1, 1])
            .expect("a depthwise geometry");
        let x: Vec<f32> = (0..size * size * c).map(|_| rand()).collect();
        let w: Vec<f32> = (0..9 * c).map(|_| rand()).collect();
        let bias: Vec<f32> = (0..c).map(|_| rand()).collect();
        let mut out = vec![0.0f32; g.output_sizes().iter().product()];
        let flops = 2.0 * (out.len() * 9) as f64;
        let r = gflops(flops, budget, || {
            depthwise_conv2d_nhwc(&g, &x, &w, Some(&bias), 0.0, 6.0, &mut out);
            black_box(&mut out);
        });
        println!(
            "{size:>5} {c:>5} {stride:>6} {:>8.1} {:>8.2}",
            flops / r / 1e3,
            best_peak / r
        );
    }
}
