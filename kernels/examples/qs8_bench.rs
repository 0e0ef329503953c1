//! int8 (XNNPACK QS8) convolution micro-benchmark: the layers of
//! torchvision's RegNetY-400MF that its profile ranks first (`ptec bench
//! --profile` on the broad set's int8 export): the stem, grouped 3 × 3
//! convolutions of 8 channels a group at each stage, and a pointwise one.
//! Random weights packed as the compiler packs them, through
//! `qs8::conv2d_nhwc`; then depthwise layers of MobileNetV2 and a 5 × 5 one.
//!
//! Last, MobileNetV2's first two inverted residual blocks as chains
//! (`qs8::conv2d_chain`: expansion, depthwise, projection band by band).
//!
//!   cargo run --release -p ptec-kernels --example qs8_bench [-- THREADS...] [NAME...]
//!
//! A NAME times only the layers whose names contain it (e.g. `stem`), for
//! a profiler. `cold` rotates each layer's weights among copies of 8 MiB
//! in all, so that they come from memory as in a model's run (whose
//! weights outgrow the caches), not from L2.
//! Prints each layer's best and median time over 30 runs (1000 with NAMEs) (after 3
//! untimed), per thread count (default 1), and its multiply-adds a
//! nanosecond.
use ptec_kernels::nhwc::{Conv2dNhwc, Window2d};
use ptec_kernels::qs8::{chain_scratch_len, conv2d_chain, conv2d_nhwc, pack_conv, ChainStage, Layout, Output, Quant};
use std::time::Instant;

/// (name, input size, input channels, output channels, kernel, stride, groups)
const LAYERS: [(&str, usize, usize, usize, usize, usize, usize); 27] = [
    ("stem 3x3/2, 3 -> 32", 224, 3, 32, 3, 2, 1),
    // ResNet's stem.
    ("stem 7x7/2, 3 -> 64", 224, 3, 64, 7, 2, 1),
    // ResNet's 3 × 3 layers at 56, 14 and 7.
    ("3x3, 64 at 56", 56, 64, 64, 3, 1, 1),
    ("3x3, 256 at 14", 14, 256, 256, 3, 1, 1),
    ("3x3, 512 at 7", 7, 512, 512, 3, 1, 1),
    ("grouped 3x3/2, 48 in 6 groups", 112, 48, 48, 3, 2, 6),
    ("grouped 3x3/2, 104 in 13 groups", 56, 104, 104, 3, 2, 13),
    ("grouped 3x3, 104 in 13 groups", 28, 104, 104, 3, 1, 13),
    ("grouped 3x3, 208 in 26 groups", 14, 208, 208, 3, 1, 26),
    ("grouped 3x3, 440 in 55 groups", 7, 440, 440, 3, 1, 55),
    ("pointwise, 32 -> 48", 112, 32, 48, 1, 1, 1),
    // RegNet's last stage (7 × 7: 49 rows) and ResNet-50's.
    ("pointwise, 104 -> 104 at 28", 28, 104, 104, 1, 1, 1),
    ("pointwise, 208 -> 208 at 14", 14, 208, 208, 1, 1, 1),
    ("pointwise, 440 -> 440 at 7", 7, 440, 440, 1, 1, 1),
    ("pointwise, 2048 -> 512 at 7", 7, 2048, 512, 1, 1, 1),
    // MobileNetV3-Large's classifier (one row, as a fully connected layer).
    ("pointwise, 960 -> 1280 at 1", 1, 960, 1280, 1, 1, 1),
    // And one of its squeeze-excitations' (weights that stay in cache).
    ("pointwise, 240 -> 960 at 1", 1, 240, 960, 1, 1, 1),
    // MobileNetV2's pointwise layers at 112 and 56 (few input channels).
    ("pointwise, 16 -> 96 at 112", 112, 16, 96, 1, 1, 1),
    ("pointwise, 96 -> 24 at 56", 56, 96, 24, 1, 1, 1),
    ("pointwise, 24 -> 144 at 56", 56, 24, 144, 1, 1, 1),
    ("pointwise, 144 -> 24 at 56", 56, 144, 24, 1, 1, 1),
    // MobileNetV2's depthwise layers, and a 5 × 5 one as MobileNetV3's
    // and EfficientNet's.
    ("depthwise 3x3, 32 at 112", 112, 32, 32, 3, 1, 32),
    ("depthwise 3x3/2, 96 at 112", 112, 96, 96, 3, 2, 96),
    ("depthwise 3x3, 144 at 56", 56, 144, 144, 3, 1, 144),
    ("depthwise 3x3, 384 at 14", 14, 384, 384, 3, 1, 384),
    ("depthwise 5x5, 240 at 14", 14, 240, 240, 5, 1, 240),
    // What a call costs before its first pixel (a chain calls each
    // depthwise stage once a band of a few rows).
    ("depthwise 3x3, 144 at 2", 2, 144, 144, 3, 1, 144),
];

fn main() {
    let (threads, mut names): (Vec<String>, Vec<String>) =
        std::env::args().skip(1).partition(|a| a.parse::<usize>().is_ok());
    let cold = names.iter().any(|n| n == "cold");
    names.retain(|n| n != "cold");
    let threads: Vec<usize> = threads.iter().map(|a| a.parse().expect("a thread count")).collect();
    let runs = if names.is_empty() { 33 } else { 1003 };
    let threads = if threads.is_empty() { vec![1] } else { threads };
    let mut seed = 7u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as u32
    };
    for &(name, size, in_c, out_c, k, stride, groups) in &LAYERS {
        if !names.is_empty() && !names.iter().any(|n| name.contains(n.as_str())) {
            continue;
        }
        let pad = k / 2;
        let out = (size + 2 * pad - k) / stride + 1;
        let g = Conv2dNhwc {
            window: Window2d {
                batch: 1,
                in_h: size,
                in_w: size,
                out_h: out,
                out_w: out,
                kernel_h: k,
                kernel_w: k,
                stride_h: stride,
                stride_w: stride,
                dilation_h: 1,
                dilation_w: 1,
                pad_top: pad,
                pad_left: pad,
            },
            in_c,
            out_c,
            groups,
        };
        let x: Vec<i8> = (0..size * size * in_c).map(|_| next() as i8).collect();
        let w: Vec<i8> = (0..out_c * k * k * in_c / groups)
            .map(|_| (next() % 255) as i8)
            .collect();
        let scales: Vec<f32> = (0..out_c).map(|i| 0.001 + 0.0001 * (i % 7) as f32).collect();
        let bias: Vec<i32> = (0..out_c).map(|_| (next() % 2000) as i32 - 1000).collect();
        let mut packed = vec![0f32; Layout::conv(&g).packed_len()];
        pack_conv(&g, &w, &mut packed);
        let copies = if cold { (2 << 20) / packed.len() + 1 } else { 1 };
        let packed = vec![packed; copies];
        let mut call = 0;
        let xq = Quant {
            scale: 0.02,
            zero_point: -3,
        };
        let y = Output {
            scale: 0.05,
            zero_point: 5,
            qmin: -128,
            qmax: 127,
        };
        let depthwise = groups == in_c && out_c == in_c;
        let mut o = vec![0i8; out * out * out_c];
        let macs = (out * out * out_c * k * k * in_c / groups) as f64;
        time(name, &threads, runs, macs, &mut || {
            call += 1;
            conv2d_nhwc(
                &g,
                depthwise,
                &x,
                &xq,
                &w,
                &scales,
                Some(&bias),
                Some(&packed[call % copies]),
                &y,
                &mut o,
            )
        });
    }
    chains(&names, &threads, runs, &mut next);
}

/// Prints the best and median of `runs` calls of `f` (after 3 untimed) on
/// each thread count.
fn time(name: &str, threads: &[usize], runs: usize, macs: f64, f: &mut dyn FnMut()) {
    for &t in threads {
        ptec_kernels::parallel::set_threads(t);
        let mut times = Vec::new();
        for i in 0..runs {
            let start = Instant::now();
            f();
            if i >= 3 {
                times.push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{name:34} {t} thread(s): best {:8.1} us, median {:8.1} us, {:6.1} MAC/ns",
            times[0],
            times[times.len() / 2],
            macs / times[0] / 1e3
        );
    }
}

/// MobileNetV2's first two inverted residual blocks after the stem, as the
/// compiler chains them: (input size, input channels, expansion, stride,
/// output channels).
const CHAINS: [(&str, usize, usize, usize, usize, usize); 2] = [
    ("chain 16 -> 96, 3x3/2, -> 24 at 112", 112, 16, 96, 2, 24),
    ("chain 24 -> 144, 3x3, -> 24 at 56", 56, 24, 144, 1, 24),
];

fn chains(names: &[String], threads: &[usize], runs: usize, next: &mut dyn FnMut() -> u32) {
    for &(name, size, in_c, mid, stride, out_c) in &CHAINS {
        if !names.is_empty() && !names.iter().any(|n| name.contains(n.as_str())) {
            continue;
        }
        let out = (size + 2 - 3) / stride + 1;
        let geometries = [
            Conv2dNhwc::regular(&[1, size, size, in_c], &[mid, 1, 1, in_c], [1, 1], [0; 4], [1, 1], 1),
            Conv2dNhwc::depthwise(&[1, size, size, mid], &[1, 3, 3, mid], [stride; 2], [1; 4], [1, 1]),
            Conv2dNhwc::regular(&[1, out, out, mid], &[out_c, 1, 1, mid], [1, 1], [0; 4], [1, 1], 1),
        ]
        .map(|g| g.expect("a convolution"));
        let mut weights = Vec::new();
        for g in &geometries {
            let (k, per) = (g.window.kernel_h * g.window.kernel_w, g.in_c / g.groups);
            let w: Vec<i8> = (0..g.out_c * k * per).map(|_| (next() % 255) as i8).collect();
            let scales: Vec<f32> = (0..g.out_c).map(|i| 0.001 + 0.0001 * (i % 7) as f32).collect();
            let bias: Vec<i32> = (0..g.out_c).map(|_| (next() % 2000) as i32 - 1000).collect();
            let mut packed = vec![0f32; Layout::conv(g).packed_len()];
            pack_conv(g, &w, &mut packed);
            weights.push((w, scales, bias, packed));
        }
        let q = Quant {
            scale: 0.02,
            zero_point: -3,
        };
        let y = Output {
            scale: 0.05,
            zero_point: -3,
            qmin: -3,
            qmax: 127,
        };
        let stages: Vec<ChainStage<'_>> = geometries
            .iter()
            .zip(&weights)
            .enumerate()
            .map(|(i, (g, (w, scales, bias, packed)))| ChainStage {
                g,
                w,
                w_scales: scales,
                bias: Some(bias),
                packed: (i != 1).then_some(&packed[..]),
                xq: q,
                y,
            })
            .collect();
        let x: Vec<i8> = (0..size * size * in_c).map(|_| next() as i8).collect();
        let mut o = vec![0i8; out * out * out_c];
        let mut scratch = vec![0i8; chain_scratch_len(&geometries).expect("a chain")];
        let macs = geometries
            .iter()
            .map(|g| {
                let w = &g.window;
                (w.out_h * w.out_w * g.out_c * w.kernel_h * w.kernel_w * g.in_c / g.groups) as f64
            })
            .sum();
        time(name, threads, runs, macs, &mut || {
            conv2d_chain(&stages, &x, &mut o, &mut scratch)
        });
    }
}
