//! Chains of convolutions run band by band: a pointwise convolution whose
//! result only a depthwise one reads, a depthwise one whose result only a
//! pointwise one reads, or all three (the expansion, depthwise and
//! projection layers of an inverted residual block). An image network's
//! first layer, a regular convolution of a shallow window, may take the
//! expansion's place (MobileNetV2's 112 × 112 × 32 result then stays in
//! L2 too).
//!
//! Run one after the other, each convolution writes its whole result (4.8
//! MB for MobileNetV2's first expansion, 112 × 112 pixels of 96 channels)
//! and the next reads it back: beyond the L2 cache, both run at the speed
//! of the memory, not of the arithmetic. Here each band of the depthwise
//! convolution's output rows is computed from the few rows of the
//! expansion it needs, computed just before into a buffer that stays in
//! L2, and the projection multiplies the band while it is still there.
//! Expansion rows a band shares with the next (the taps' overlap) move to
//! the front of the buffer instead of being recomputed.
use super::depthwise::depthwise_activated;
use super::fold::FoldedConv;
use super::{direct, im2col, Conv2dNhwc, Window2d};
use crate::gemm::gemm_packed;
use crate::gemm::Epilogue;
use core::ops::Range;

/// About how many bytes of intermediate result a band keeps (the
/// expansion's rows, else the depthwise convolution's): a few rows, so
/// that the rows carried over to the next band are a small share (192 KiB
/// measured 5% slower on the 112 × 112 layer, 640 KiB no faster). Under
/// Miri 256 bytes, so that the tests' small images still take several
/// bands, of one row and of several.
const BAND_BYTES: usize = if cfg!(miri) { 256 } else { 384 * 1024 };

/// The most parts the output rows are split into across threads (each
/// needs its own band buffers in the scratch).
pub const MAX_CHAIN_PARTS: usize = 4;

/// How a chain runs: which stages surround the depthwise convolution,
/// output rows per band, and the rows of the expansion a band's buffer
/// holds (the int8 chains' too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub expand: bool,
    pub project: bool,
    pub out_rows: usize,
    pub buffer_rows: usize,
}

impl Plan {
    /// The depthwise stage's index.
    pub(crate) fn depthwise(&self) -> usize {
        usize::from(self.expand)
    }

    /// Floats of one part's buffers: the expansion's rows, the depthwise
    /// convolution's output rows (when projected), and the windows a
    /// regular expansion gathers (when not run directly).
    fn buffers(&self, stages: &[Conv2dNhwc]) -> Option<Buffers> {
        let dw = &stages[self.depthwise()];
        let win = &dw.window;
        let expansion = if self.expand {
            self.buffer_rows.checked_mul(win.in_w)?.checked_mul(dw.in_c)?
        } else {
            0
        };
        let band = if self.project {
            self.out_rows.checked_mul(win.out_w)?.checked_mul(dw.out_c)?
        } else {
            0
        };
        let gather = if self.expand { stages[0].gather_len() } else { 0 };
        Some(Buffers {
            expansion,
            band,
            gather,
        })
    }
}

/// Floats of each of one part's buffers (see [`Plan::buffers`]).
#[derive(Clone, Copy, Debug)]
struct Buffers {
    expansion: usize,
    band: usize,
    gather: usize,
}

impl Buffers {
    fn total(&self) -> Option<usize> {
        self.expansion.checked_add(self.band)?.checked_add(self.gather)
    }
}

/// Whether `conv` may open a chain as its expansion: pointwise, or a
/// regular convolution of a window the direct kernel takes (at most
/// [`direct::MAX_DEPTH`] floats deep).
fn expands(conv: &Conv2dNhwc) -> bool {
    conv.is_pointwise() || (conv.groups == 1 && !conv.is_depthwise() && conv.depth() <= direct::MAX_DEPTH)
}

/// Whether `next` reads exactly what `conv` writes.
fn feeds(conv: &Conv2dNhwc, next: &Conv2dNhwc) -> bool {
    let w = &next.window;
    [w.batch, w.in_h, w.in_w, next.in_c] == conv.output_sizes()
}

/// How `stages` run as a chain, or `None` when they are not a pointwise
/// then a depthwise convolution, a depthwise then a pointwise one, or all
/// three, each reading the previous one's result.
fn plan(stages: &[Conv2dNhwc]) -> Option<Plan> {
    let (expand, project) = match stages {
        [first, _] if expands(first) => (true, false),
        [_, _] => (false, true),
        [_, _, _] => (true, true),
        _ => return None,
    };
    let d = usize::from(expand);
    let dw = &stages[d];
    let win = &dw.window;
    let links = stages.windows(2).all(|w| feeds(&w[0], &w[1]));
    let ends = (!expand || expands(&stages[0])) && (!project || stages[d + 1].is_pointwise());
    let span = rows_spanned(win);
    // Padding no deeper than the window keeps every band's first row
    // inside the image (see `Chain::rows`).
    let shallow = win.pad_top < span && pad_bottom(win) < span;
    if !(dw.is_depthwise() && links && ends && shallow && win.in_w > 0 && win.out_h > 0) {
        return None;
    }
    let s = win.stride_h;
    let out_rows = if expand {
        // The rows output rows o0 .. o0 + n need: (n - 1)·s + span.
        let row_bytes = (win.in_w * dw.in_c * 4).max(1);
        (BAND_BYTES / row_bytes).saturating_sub(span) / s + 1
    } else {
        BAND_BYTES / (win.out_w * dw.out_c * 4).max(1)
    };
    let out_rows = out_rows.min(win.out_h).max(1);
    Some(Plan {
        expand,
        project,
        out_rows,
        buffer_rows: if expand { (out_rows - 1) * s + span } else { 0 },
    })
}

/// Scratch, in floats, [`conv2d_folded_chain`] needs for `stages`, or
/// `None` when they do not make a chain (see the module docs).
pub fn chain_scratch_len(stages: &[Conv2dNhwc]) -> Option<usize> {
    plan(stages)?.buffers(stages)?.total()?.checked_mul(MAX_CHAIN_PARTS)
}

/// Whether the last of `stages`, a chain, may add a residual: whether it
/// is a projection.
pub fn chain_takes_residual(stages: &[Conv2dNhwc]) -> bool {
    plan(stages).is_some_and(|p| p.project)
}

/// `out = stages[last](… stages[0](x))` for a chain of [`FoldedConv`]s
/// (see the module docs); only a projection may add a residual.
/// `prepared[i]` is stage `i`'s filter prepared by [`FoldedConv::prepare`].
/// Output rows are split across threads (at most [`MAX_CHAIN_PARTS`]).
///
/// `scratch`: at least [`chain_scratch_len`] floats, in [`MAX_CHAIN_PARTS`]
/// equal shares, part `p`'s buffers at the start of share `p`. A program
/// that gives all its chains the same scratch, which nothing else uses,
/// keeps each thread's buffers where only that thread writes: part `p`
/// runs on thread `p`. In the arena's free space instead, a thread's
/// buffers were lines the other thread had written as some tensor, each
/// fetched from the other core's cache, which cost MobileNetV2 on two
/// threads 5.4 against 4.9 ms when the host put the two CPUs far apart.
pub fn conv2d_folded_chain(
    stages: &[FoldedConv<'_>],
    prepared: &[&[f32]],
    x: &[f32],
    out: &mut [f32],
    scratch: &mut [f32],
) {
    assert!(
        (2..=3).contains(&stages.len()),
        "a chain of {} convolutions",
        stages.len()
    );
    let geometries: [Conv2dNhwc; 3] = core::array::from_fn(|i| stages[i.min(stages.len() - 1)].geometry);
    let plan = plan(&geometries[..stages.len()]).expect("a chain of convolutions");
    let d = plan.depthwise();
    assert!(
        stages
            .iter()
            .take(stages.len() - usize::from(plan.project))
            .all(|s| s.residual.is_none()),
        "only a chain's projection adds a residual"
    );
    assert_eq!(prepared.len(), stages.len(), "a prepared filter per stage");
    let mut filters: [(&[f32], &[f32]); 3] = [(&[], &[]); 3];
    for ((f, stage), p) in filters.iter_mut().zip(stages).zip(prepared) {
        *f = stage.prepared(p);
    }
    let (first, last) = (&stages[0].geometry, &stages[stages.len() - 1].geometry);
    let win = &stages[d].geometry.window;
    let image_in = first.window.in_h * first.window.in_w * first.in_c;
    let image_out = win.out_h * win.out_w * last.out_c;
    let x = &x[..win.batch * image_in];
    let out = &mut out[..win.batch * image_out];
    let buffers = plan
        .buffers(&geometries[..stages.len()])
        .expect("sizes checked by the plan");
    let part_len = buffers.total().expect("sizes checked by the plan");
    let share = scratch.len() / MAX_CHAIN_PARTS;
    assert!(
        share >= part_len,
        "a chain's scratch holds {} floats, not {}",
        scratch.len(),
        MAX_CHAIN_PARTS * part_len
    );
    let stage = |i: usize| Stage {
        conv: &stages[i],
        filter: filters[i].1,
        bias: filters[i].0,
    };
    let chain = Chain {
        expansion: plan.expand.then(|| stage(0)),
        depthwise: stage(d),
        projection: plan.project.then(|| stage(d + 1)),
        plan,
        buffers,
    };
    let parts = crate::parallel::threads().min(MAX_CHAIN_PARTS).min(win.out_h).max(1);
    let row_len = win.out_w * last.out_c;
    for (image, (xi, oi)) in x
        .chunks_exact(image_in)
        .zip(out.chunks_exact_mut(image_out))
        .enumerate()
    {
        crate::parallel::row_parts(oi, win.out_h, row_len, parts, scratch, share, &|r, o, buffer| {
            chain.rows(image, xi, r, o, &mut buffer[..part_len])
        });
    }
}

/// One stage of a chain with its prepared filter and folded bias.
struct Stage<'a> {
    conv: &'a FoldedConv<'a>,
    filter: &'a [f32],
    bias: &'a [f32],
}

impl Stage<'_> {
    /// The epilogue of a pointwise stage, with its residual from
    /// `residual_at` on.
    fn epilogue(&self, residual_at: usize) -> Epilogue<'_> {
        Epilogue {
            bias: Some(self.bias),
            residual: self.conv.residual.map(|r| &r[residual_at..]),
            min: self.conv.min,
            max: self.conv.max,
            activation: self.conv.activation,
        }
    }

    /// Rows `rows` of this stage (a regular convolution, `one` its
    /// geometry over one image `x`) into `out`; `gather` holds the windows
    /// where the direct kernel does not run.
    fn regular_rows(&self, one: &Conv2dNhwc, x: &[f32], rows: Range<usize>, out: &mut [f32], gather: &mut [f32]) {
        let e = self.epilogue(0);
        #[cfg(target_arch = "x86_64")]
        if direct::fits(one) {
            let avx512 = crate::cpu::Isa::detect() == crate::cpu::Isa::Avx512;
            return direct::conv_band(avx512, one, x, self.filter, &e, rows, out);
        }
        let pixels = rows.start * one.window.out_w..rows.end * one.window.out_w;
        im2col::gathered(one, x, 0, self.filter, &e, pixels, out, gather);
    }

    /// `out = this stage (a pointwise convolution) of `pixels` pixels of
    /// `x`, its residual taken from `residual_at`.
    fn pointwise(&self, pixels: usize, x: &[f32], residual_at: usize, out: &mut [f32]) {
        let g = &self.conv.geometry;
        let e = self.epilogue(residual_at);
        gemm_packed(pixels, g.out_c, g.in_c, x, g.in_c, self.filter, &e, out, g.out_c);
    }
}

/// A chain's stages and how it runs.
struct Chain<'a> {
    expansion: Option<Stage<'a>>,
    depthwise: Stage<'a>,
    projection: Option<Stage<'a>>,
    plan: Plan,
    /// Floats of a part's buffers.
    buffers: Buffers,
}

impl Chain<'_> {
    /// Output rows `rows` of image `image` (`x` its input, `out` from row
    /// `rows.start`), band by band, through `buffer` (one part's).
    fn rows(&self, image: usize, x: &[f32], rows: Range<usize>, out: &mut [f32], buffer: &mut [f32]) {
        let dw = &self.depthwise.conv.geometry;
        let win = &dw.window;
        let (h, w, c) = (win.in_h, win.in_w, dw.in_c);
        let (s, pad) = (win.stride_h, win.pad_top);
        let span = rows_spanned(win);
        let row = w * c;
        let dw_row = win.out_w * dw.out_c;
        let out_row = self
            .projection
            .as_ref()
            .map_or(dw_row, |p| win.out_w * p.conv.geometry.out_c);
        let (expanded, rest) = buffer.split_at_mut(self.buffers.expansion);
        let (band_out, gather) = rest.split_at_mut(self.buffers.band);
        let gather = &mut gather[..self.buffers.gather];
        // Rows of the expansion in `expanded`, from its start.
        let mut held = 0..0;
        for o0 in rows.clone().step_by(self.plan.out_rows) {
            let o1 = (o0 + self.plan.out_rows).min(rows.end);
            // The input rows these output rows' taps reach, within the
            // image.
            let lo = (o0 * s).saturating_sub(pad);
            let hi = ((o1 - 1) * s + span).saturating_sub(pad).min(h).max(lo);
            let input: &[f32] = match &self.expansion {
                Some(e) => {
                    let mut from = lo;
                    if lo < held.end && held.start <= lo {
                        expanded.copy_within((lo - held.start) * row..(held.end - held.start) * row, 0);
                        from = held.end;
                    }
                    if from < hi {
                        let g = &e.conv.geometry;
                        let dst = &mut expanded[(from - lo) * row..(hi - lo) * row];
                        if g.is_pointwise() {
                            e.pointwise((hi - from) * w, &x[from * w * g.in_c..], 0, dst);
                        } else {
                            // Rows of this one image.
                            let mut one = *g;
                            one.window.batch = 1;
                            e.regular_rows(&one, x, from..hi, dst, gather);
                        }
                    }
                    held = lo..hi;
                    &expanded[..(hi - lo) * row]
                }
                None => &x[lo * row..hi * row],
            };
            // The depthwise convolution of output rows o0 .. o1 over
            // input rows lo .. hi: rows above `lo` and below `hi` are the
            // image's padding.
            let top = pad + lo - o0 * s;
            let bottom = ((o1 - o0 - 1) * s + span) - top - (hi - lo);
            let band = Conv2dNhwc::depthwise(
                &[1, hi - lo, w, c],
                &[1, win.kernel_h, win.kernel_w, dw.out_c],
                [s, win.stride_w],
                [top, pad_right(win), bottom, win.pad_left],
                [win.dilation_h, win.dilation_w],
            )
            .expect("a band of a valid depthwise convolution");
            debug_assert_eq!((band.window.out_h, band.window.out_w), (o1 - o0, win.out_w));
            let dst = &mut out[(o0 - rows.start) * out_row..(o1 - rows.start) * out_row];
            let d = &self.depthwise;
            let (min, max, activation) = (d.conv.min, d.conv.max, d.conv.activation);
            match &self.projection {
                Some(p) => {
                    let mid = &mut band_out[..(o1 - o0) * dw_row];
                    depthwise_activated(&band, input, d.filter, Some(d.bias), min, max, activation, mid);
                    let residual_at = image * win.out_h * out_row + o0 * out_row;
                    p.pointwise((o1 - o0) * win.out_w, mid, residual_at, dst);
                }
                None => {
                    depthwise_activated(&band, input, d.filter, Some(d.bias), min, max, activation, dst);
                }
            }
        }
    }
}

/// Input rows one output row's window spans.
fn rows_spanned(win: &Window2d) -> usize {
    win.dilation_h * (win.kernel_h - 1) + 1
}

/// The padding after the input along one dimension (not stored in a
/// window): the least that gives `out` outputs of a `kernel`-tap window,
/// `stride` and `dilation`, over `input` elements padded by `before`.
fn pad_after(out: usize, stride: usize, kernel: usize, dilation: usize, input: usize, before: usize) -> usize {
    let span = dilation * (kernel - 1) + 1;
    ((out - 1) * stride + span).saturating_sub(input + before)
}

/// The bottom padding of a window.
fn pad_bottom(win: &Window2d) -> usize {
    pad_after(
        win.out_h,
        win.stride_h,
        win.kernel_h,
        win.dilation_h,
        win.in_h,
        win.pad_top,
    )
}

/// The right padding of a window.
fn pad_right(win: &Window2d) -> usize {
    pad_after(
        win.out_w,
        win.stride_w,
        win.kernel_w,
        win.dilation_w,
        win.in_w,
        win.pad_left,
    )
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::nhwc::{conv2d_folded, Activation, BatchNormFold};
    use std::vec;
    use std::vec::Vec;

    /// Builds the stages of a chain and checks it against its
    /// convolutions run one after the other, twice (the second run finds
    /// its filters prepared).
    struct Case {
        /// N, H, W, and the channels into each stage and out of the last.
        n: usize,
        h: usize,
        w: usize,
        channels: Vec<usize>,
        /// What each stage is.
        stages: Vec<Kind>,
        /// The depthwise window: kernel, stride, padding, dilation.
        window: [usize; 4],
        residual: bool,
    }

    /// A stage of a [`Case`].
    #[derive(Clone, Copy, PartialEq)]
    enum Kind {
        Pointwise,
        Depthwise,
        /// A `K`×`K` stride-2 regular convolution, an image network's
        /// first layer, with the padding (top, right, bottom, left) given.
        Stem(usize, [usize; 4]),
    }
    use Kind::*;

    fn check(case: &Case, seed: u64) {
        let rng = |s: u64, n: usize| crate::testing::Lcg(seed * 100 + s).vec(n);
        let [k, st, p, d] = case.window;
        let mut sizes = [case.n, case.h, case.w, case.channels[0]];
        let mut geometries = Vec::new();
        for (i, &kind) in case.stages.iter().enumerate() {
            let (cin, cout) = (case.channels[i], case.channels[i + 1]);
            let g = match kind {
                Pointwise => Conv2dNhwc::regular(&sizes, &[cout, 1, 1, cin], [1, 1], [0; 4], [1, 1], 1),
                Depthwise => Conv2dNhwc::depthwise(&sizes, &[1, k, k, cout], [st, st], [p; 4], [d, d]),
                Stem(k, pad) => Conv2dNhwc::regular(&sizes, &[cout, k, k, cin], [2, 2], pad, [1, 1], 1),
            };
            let g = g.unwrap();
            sizes = g.output_sizes();
            geometries.push(g);
        }
        let weights: Vec<Vec<f32>> = geometries
            .iter()
            .enumerate()
            .map(|(i, g)| {
                rng(
                    10 + i as u64,
                    g.out_c * g.window.kernel_h * g.window.kernel_w * (g.in_c / g.groups),
                )
            })
            .collect();
        let biases: Vec<Vec<f32>> = geometries
            .iter()
            .enumerate()
            .map(|(i, g)| rng(20 + i as u64, g.out_c))
            .collect();
        let mean = rng(5, case.channels[1]);
        let var: Vec<f32> = rng(6, case.channels[1]).iter().map(|v| v.abs() + 0.5).collect();
        let out_len: usize = sizes.iter().product();
        let residual = rng(7, out_len);
        let last = geometries.len() - 1;
        let stages: Vec<FoldedConv<'_>> = geometries
            .iter()
            .enumerate()
            .map(|(i, &geometry)| FoldedConv {
                geometry,
                algorithm: crate::nhwc::Algorithm::Direct,
                layout: crate::nhwc::FilterLayout::Torch,
                w: &weights[i],
                bias: Some(&biases[i]),
                // The first stage folds a batch norm.
                bn: (i == 0).then_some(BatchNormFold {
                    weight: None,
                    bias: None,
                    mean: &mean,
                    var: &var,
                    eps: 1e-5,
                }),
                residual: (i == last && case.residual).then_some(&residual[..]),
                min: [0.0, -1.0, -2.0][i],
                max: [6.0, 1.0, 2.0][i],
                activation: [Activation::Hardswish, Activation::SigmoidMul, Activation::Hardswish][i],
            })
            .collect();
        let x = rng(8, case.n * case.h * case.w * case.channels[0]);
        let mut want = x.clone();
        for (stage, g) in stages.iter().zip(&geometries) {
            let mut next = vec![0.0; g.output_sizes().iter().product()];
            let mut kept = vec![0.0; g.folded_len(crate::nhwc::Algorithm::Direct)];
            stage.prepare(&mut kept);
            conv2d_folded(stage, &want, &kept, &mut next, &mut vec![0.0; g.gather_len()]);
            want = next;
        }
        // The second call's scratch has larger shares than the chain needs,
        // as a program's thread scratch does for all but its largest chain.
        let exact = chain_scratch_len(&geometries).unwrap();
        let mut scratches = [vec![f32::NAN; exact], vec![f32::NAN; exact + MAX_CHAIN_PARTS * 37 + 5]];
        let mut kept: Vec<Vec<f32>> = geometries
            .iter()
            .map(|g| vec![0.0; g.folded_len(crate::nhwc::Algorithm::Direct)])
            .collect();
        for (call, scratch) in scratches.iter_mut().enumerate() {
            for (stage, k) in stages.iter().zip(&mut kept) {
                stage.prepare(k);
            }
            let prepared: Vec<&[f32]> = kept.iter().map(|k| &k[..]).collect();
            let mut got = vec![f32::NAN; out_len];
            conv2d_folded_chain(&stages, &prepared, &x, &mut got, scratch);
            for (i, (&a, &b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                    "{:?} {:?} call {call} [{i}]: {a} vs {b}",
                    case.channels,
                    case.window
                );
            }
        }
    }

    /// Chains against their convolutions run one after the other, on
    /// shapes that take one band and several, strides 1 and 2, a 5×5 and a
    /// dilated window, a channel multiplier and two images; expansion and
    /// depthwise, depthwise and projection, all three, with and without a
    /// residual.
    #[test]
    fn chains_match_their_convolutions_one_after_the_other() {
        // (N, H, W, C in, C mid, C out, kernel, stride, padding, dilation)
        let shapes: &[[usize; 10]] = &[
            [1, 9, 7, 5, 16, 16, 3, 1, 1, 1],
            [2, 12, 10, 8, 24, 24, 3, 2, 1, 1],
            // Rows of 40 KiB: bands of a few rows, carried over.
            [1, 23, 40, 16, 256, 256, 3, 1, 1, 1],
            [1, 24, 40, 16, 256, 256, 3, 2, 1, 1],
            [1, 21, 30, 8, 200, 200, 5, 2, 2, 1],
            [1, 20, 33, 8, 320, 320, 3, 1, 2, 2],
            [1, 11, 9, 4, 12, 24, 3, 1, 1, 1],
        ];
        // Under Miri the same kinds of shape on tiny images, in several
        // bands (`BAND_BYTES`): a channel multiplier and dilation; two
        // images, a 5 × 5 window and stride 2.
        let miri: &[[usize; 10]] = &[[1, 4, 3, 3, 4, 8, 3, 1, 2, 2], [2, 3, 4, 3, 8, 8, 5, 2, 2, 1]];
        let shapes = if cfg!(miri) { miri } else { shapes };
        for (seed, &[n, h, w, cin, cmid, cout, k, s, p, d]) in shapes.iter().enumerate() {
            let window = [k, s, p, d];
            let seed = seed as u64;
            // Expansion, depthwise.
            let case = |channels: Vec<usize>, stages: Vec<Kind>, residual| Case {
                n,
                h,
                w,
                channels,
                stages,
                window,
                residual,
            };
            check(&case(vec![cin, cmid, cout], vec![Pointwise, Depthwise], false), seed);
            // Depthwise, projection; all three; each with and without a
            // residual (under Miri one of the two a shape, in turn).
            for residual in [false, true] {
                if cfg!(miri) && residual != (seed % 2 == 1) {
                    continue;
                }
                check(&case(vec![cmid, cout, cin], vec![Depthwise, Pointwise], residual), seed);
                let stages = vec![Pointwise, Depthwise, Pointwise];
                check(&case(vec![cin, cmid, cout, 7], stages, residual), seed);
            }
        }
    }

    /// Chains whose first stage is a stem (a regular stride-2 convolution
    /// of 3 channels: 3×3 as MobileNetV2's, or 7×7, 147 floats a window)
    /// against their convolutions run one after the other: on twice the
    /// images' height and width (the stem halves them), so the depthwise
    /// stage sees the shapes above; with the stem's padding even and
    /// uneven.
    #[test]
    fn chains_opened_by_a_stem_match_their_convolutions() {
        // (N, H, W, C mid, C out, kernel, stride, padding, dilation) of
        // the depthwise stage, as above.
        let shapes: &[[usize; 9]] = &[
            [1, 9, 7, 16, 16, 3, 1, 1, 1],
            [2, 12, 10, 24, 24, 3, 2, 1, 1],
            [1, 23, 40, 256, 256, 3, 1, 1, 1],
            [1, 24, 40, 256, 256, 3, 2, 1, 1],
            [1, 21, 30, 200, 200, 5, 2, 2, 1],
        ];
        // Under Miri a tiny image, in two bands (`BAND_BYTES`), and the
        // 3 × 3 stems (the 7 × 7 one takes their paths there: windows
        // gathered, one depth block): the first opens the three stages
        // with a residual, the second the two (the chains above take the
        // third stage without a residual).
        let miri: &[[usize; 9]] = &[[1, 2, 2, 16, 8, 3, 1, 1, 1]];
        let shapes = if cfg!(miri) { miri } else { shapes };
        for (seed, &[n, h, w, cmid, cout, k, s, p, d]) in shapes.iter().enumerate() {
            for (turn, (stem, pad)) in [(3, [1; 4]), (3, [0, 1, 1, 0]), (7, [3; 4])].into_iter().enumerate() {
                if cfg!(miri) && stem == 7 {
                    continue;
                }
                let take = |chain: usize| !cfg!(miri) || chain == [2, 0][turn];
                // The stem's output is h × w: its input, padded, spans
                // 2·(h - 1) + K rows.
                let ih = 2 * (h - 1) + stem - pad[0] - pad[2];
                let iw = 2 * (w - 1) + stem - pad[1] - pad[3];
                let case = |channels: Vec<usize>, stages: Vec<Kind>, residual| Case {
                    n,
                    h: ih,
                    w: iw,
                    channels,
                    stages,
                    window: [k, s, p, d],
                    residual,
                };
                let seed = 50 + seed as u64;
                if take(0) {
                    check(
                        &case(vec![3, cmid, cmid], vec![Stem(stem, pad), Depthwise], false),
                        seed,
                    );
                }
                for residual in [false, true] {
                    if !take(1 + usize::from(residual)) {
                        continue;
                    }
                    let stages = vec![Stem(stem, pad), Depthwise, Pointwise];
                    check(&case(vec![3, cmid, cmid, cout], stages, residual), seed);
                }
            }
        }
    }

    #[test]
    fn which_convolutions_make_chains() {
        let pw = Conv2dNhwc::regular(&[1, 8, 8, 4], &[16, 1, 1, 4], [1, 1], [0; 4], [1, 1], 1).unwrap();
        let dw = Conv2dNhwc::depthwise(&[1, 8, 8, 16], &[1, 3, 3, 16], [1, 1], [1; 4], [1, 1]).unwrap();
        let project = Conv2dNhwc::regular(&[1, 8, 8, 16], &[4, 1, 1, 16], [1, 1], [0; 4], [1, 1], 1).unwrap();
        assert!(chain_scratch_len(&[pw, dw]).is_some());
        assert!(chain_scratch_len(&[dw, project]).is_some());
        assert!(chain_scratch_len(&[pw, dw, project]).is_some());
        // Too short or long, not depthwise, not pointwise, not chained,
        // padded past the window.
        assert!(chain_scratch_len(&[dw]).is_none());
        assert!(chain_scratch_len(&[pw, dw, project, pw]).is_none());
        assert!(chain_scratch_len(&[pw, project]).is_none());
        // A regular convolution opens a chain when its window is shallow
        // enough for the direct kernel (an image network's stem), and
        // nowhere else.
        let full = Conv2dNhwc::regular(&[1, 8, 8, 24], &[16, 3, 3, 24], [1, 1], [1; 4], [1, 1], 1).unwrap();
        let stem = Conv2dNhwc::regular(&[1, 8, 8, 16], &[16, 3, 3, 16], [1, 1], [1; 4], [1, 1], 1).unwrap();
        assert!(chain_scratch_len(&[stem, dw]).is_some());
        assert!(chain_scratch_len(&[stem, dw, project]).is_some());
        assert!(chain_scratch_len(&[full, stem, dw]).is_none());
        assert!(chain_scratch_len(&[pw, stem]).is_none());
        assert!(chain_scratch_len(&[pw, stem, dw]).is_none());
        assert!(chain_scratch_len(&[dw, stem]).is_none());
        assert!(chain_scratch_len(&[pw, dw, stem]).is_none());
        assert!(chain_scratch_len(&[full, dw]).is_none());
        let other = Conv2dNhwc::depthwise(&[1, 8, 9, 16], &[1, 3, 3, 16], [1, 1], [1; 4], [1, 1]).unwrap();
        assert!(chain_scratch_len(&[pw, other]).is_none());
        assert!(chain_scratch_len(&[other, project]).is_none());
        let deep = Conv2dNhwc::depthwise(&[1, 8, 8, 16], &[1, 3, 3, 16], [1, 1], [3; 4], [1, 1]).unwrap();
        assert!(chain_scratch_len(&[pw, deep]).is_none());
    }
}
