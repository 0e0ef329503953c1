//! fp32 NHWC convolution micro-benchmark: ResNet's layers (the 7 × 7
//! stem, 3 × 3 convolutions at each stage, stride 2 too, and 1 × 1 ones
//! with a residual), the 3 × 3 stems of MobileNet and EfficientNet and
//! RegNetY-400MF's grouped layers (8 channels a group), each beside the
//! bare matrix product it amounts to (`gemm_packed` on windows gathered
//! beforehand, all groups' outputs in one product), so that what the
//! convolution spends around its product shows; against the FMA peak.
//! Layers ptec runs by Winograd's F(2 × 2, 3 × 3) are timed that way too.
//!
//!   cargo run --release -p ptec-kernels --example conv_bench [-- THREADS...] [NAME...]
//!
//! A NAME times only the layers whose names contain it. Prints the best
//! and median of 20 runs (after 2 untimed), per thread count (default 1).
use ptec_kernels::gemm::{gemm_packed, pack, packed_len, Epilogue};
use ptec_kernels::nhwc::{conv2d_folded, conv2d_nhwc, Algorithm, Conv2dNhwc, FilterLayout, FoldedConv};
use std::hint::black_box;
use std::time::Instant;

/// (name, input size, input channels, output channels, kernel, stride,
/// groups, residual)
type Layer = (&'static str, usize, usize, usize, usize, usize, usize, bool);
const LAYERS: [Layer; 18] = [
    ("stem 7x7/2, 3 -> 64", 224, 3, 64, 7, 2, 1, false),
    // MobileNets' and EfficientNet's stems.
    ("stem 3x3/2, 3 -> 16", 224, 3, 16, 3, 2, 1, false),
    ("stem 3x3/2, 3 -> 32", 224, 3, 32, 3, 2, 1, false),
    ("3x3, 64 at 56", 56, 64, 64, 3, 1, 1, false),
    ("3x3/2, 64 -> 128 at 56", 56, 64, 128, 3, 2, 1, false),
    ("3x3, 128 at 28", 28, 128, 128, 3, 1, 1, false),
    ("3x3, 256 at 14", 14, 256, 256, 3, 1, 1, false),
    ("3x3, 512 at 7", 7, 512, 512, 3, 1, 1, false),
    ("1x1, 64 -> 256 at 56", 56, 64, 256, 1, 1, 1, false),
    ("1x1, 64 -> 256 at 56 + residual", 56, 64, 256, 1, 1, 1, true),
    ("1x1, 256 -> 64 at 56", 56, 256, 64, 1, 1, 1, false),
    ("1x1, 1024 -> 256 at 14", 14, 1024, 256, 1, 1, 1, false),
    ("1x1, 512 -> 2048 at 7 + residual", 7, 512, 2048, 1, 1, 1, true),
    // RegNetY-400MF's grouped layers: the first of each stage (stride 2),
    // then its others.
    ("grouped 3x3/2, 104 in 13 at 56", 56, 104, 104, 3, 2, 13, false),
    ("grouped 3x3, 104 in 13 at 28", 28, 104, 104, 3, 1, 13, false),
    ("grouped 3x3/2, 208 in 26 at 28", 28, 208, 208, 3, 2, 26, false),
    ("grouped 3x3, 208 in 26 at 14", 14, 208, 208, 3, 1, 26, false),
    ("grouped 3x3, 440 in 55 at 7", 7, 440, 440, 3, 1, 55, false),
];

/// A convolution prepared as ptec prepares one at compile time.
struct Folded<'a> {
    conv: FoldedConv<'a>,
    kept: Vec<f32>,
}

/// Best and median of `f`'s time in microseconds.
fn time(mut f: impl FnMut()) -> (f64, f64) {
    let mut times = Vec::new();
    for i in 0..22 {
        let start = Instant::now();
        f();
        if i >= 2 {
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    times.sort_by(f64::total_cmp);
    (times[0], times[times.len() / 2])
}

fn main() {
    let (threads, names): (Vec<String>, Vec<String>) =
        std::env::args().skip(1).partition(|a| a.parse::<usize>().is_ok());
    let threads: Vec<usize> = threads.iter().map(|a| a.parse().expect("a thread count")).collect();
    let threads = if threads.is_empty() { vec![1] } else { threads };
    let mut seed = 1u32;
    let mut rand = move || {
        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
        (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
    };
    println!("GFLOP/s of the best run; gemm: the bare product of the same shape on gathered windows");
    for &(name, size, in_c, out_c, k, stride, groups, residual) in &LAYERS {
        if !names.is_empty() && !names.iter().any(|n| name.contains(n.as_str())) {
            continue;
        }
        let pad = k / 2;
        let g = Conv2dNhwc::regular(
            &[1, size, size, in_c],
            &[out_c, k, k, in_c / groups],
            [stride; 2],
            [pad; 4],
            [1, 1],
            groups,
        )
        .expect("a convolution");
        let x: Vec<f32> = (0..size * size * in_c).map(|_| rand()).collect();
        let w: Vec<f32> = (0..out_c * k * k * in_c / groups).map(|_| rand()).collect();
        let bias: Vec<f32> = (0..out_c).map(|_| rand()).collect();
        let mut kept = vec![0.0f32; g.packed_filter_len()];
        g.pack_filter(&w, &mut kept);
        let mut scratch = vec![0.0f32; g.scratch_len(true)];
        let pixels = g.window.out_pixels();
        let mut out = vec![0.0f32; pixels * out_c];
        let res: Vec<f32> = (0..out.len()).map(|_| rand()).collect();
        let depth = k * k * in_c / groups;
        // The product's operands: every window gathered (a 1 × 1
        // convolution's are the image itself), and the filter packed (a
        // grouped one's groups side by side: the bare product of the
        // groups' columns, over one group's depth).
        let a: Vec<f32> = (0..pixels * depth).map(|_| rand()).collect();
        let mut packed = vec![0.0f32; packed_len(depth, out_c)];
        pack(&w, depth, out_c, true, &mut packed);
        let flops = 2.0 * (pixels * out_c * depth) as f64;
        let e = Epilogue {
            bias: Some(&bias),
            residual: residual.then_some(&res[..]),
            min: 0.0,
            max: f32::INFINITY,
            activation: ptec_kernels::activation::Activation::Identity,
        };
        // Layers ptec runs by Winograd's F(2 × 2, 3 × 3) (`conv2d_folded`,
        // as the generated code calls it), timed that way too.
        let folded = g.winograd().then(|| {
            let conv = FoldedConv {
                geometry: g,
                algorithm: Algorithm::Winograd,
                layout: FilterLayout::Xnnpack,
                w: &w,
                bias: Some(&bias),
                bn: None,
                residual: None,
                min: 0.0,
                max: f32::INFINITY,
                activation: ptec_kernels::activation::Activation::Identity,
            };
            let mut kept = vec![0.0f32; g.folded_len(Algorithm::Winograd)];
            conv.prepare(&mut kept);
            Folded { conv, kept }
        });
        let mut folded_scratch = vec![0.0f32; g.folded_scratch_len(Algorithm::Winograd)];
        for &t in &threads {
            ptec_kernels::parallel::set_threads(t);
            let (best, median) = time(|| {
                if residual {
                    gemm_packed(pixels, out_c, depth, &x, depth, &kept, &e, &mut out, out_c);
                } else {
                    conv2d_nhwc(
                        &g,
                        &x,
                        &w,
                        Some(&bias),
                        0.0,
                        f32::INFINITY,
                        Some(&kept),
                        &mut out,
                        &mut scratch,
                    );
                }
                black_box(&mut out);
            });
            let (gemm, _) = time(|| {
                gemm_packed(pixels, out_c, depth, &a, depth, &packed, &e, &mut out, out_c);
                black_box(&mut out);
            });
            println!(
                "{name:34} {t}T: best {best:8.1} us ({:5.1} GFLOP/s), median {median:8.1} us; gemm {gemm:8.1} us ({:5.1})",
                flops / best / 1e3,
                flops / gemm / 1e3
            );
            if let Some(folded) = &folded {
                let (best, median) = time(|| {
                    conv2d_folded(&folded.conv, &x, &folded.kept, &mut out, &mut folded_scratch);
                    black_box(&mut out);
                });
                println!(
                    "{:34} {t}T: best {best:8.1} us ({:5.1} GFLOP/s of the direct sum), median {median:8.1} us",
                    "  by Winograd (as ptec runs it)",
                    flops / best / 1e3
                );
            }
        }
    }
}
