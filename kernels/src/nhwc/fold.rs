//! Convolutions whose filter is a constant, prepared once
//! ([`FoldedConv::prepare`]): rearranged from PyTorch's or XNNPACK's
//! layout into the one the NHWC kernels read, with an inference batch norm
//! folded in (each output channel's filter scaled, its bias shifted), and
//! kept from call to call; ptec prepares it at compile time when the
//! weights are embedded. Regular convolutions then run as [`super::conv`]
//! runs them, depthwise ones as [`super::depthwise`] does.
use super::conv::{add_residual, conv_group};
use super::depthwise::{depthwise_activated, depthwise_conv2d_nhwc};
use super::{winograd, Conv2dNhwc};
use crate::activation::Activation;
use crate::gemm::packing::{stamp, stamped};
use crate::gemm::{pack_with, Epilogue};

/// An inference-mode batch norm after a convolution, folded into it:
/// output channel `o` becomes `(y − mean[o]) / sqrt(var[o] + eps) ·
/// weight[o] + bias[o]`, which scales the channel's filter and shifts its
/// bias.
#[derive(Clone, Copy, Debug)]
pub struct BatchNormFold<'a> {
    pub weight: Option<&'a [f32]>,
    pub bias: Option<&'a [f32]>,
    pub mean: &'a [f32],
    pub var: &'a [f32],
    pub eps: f64,
}

impl BatchNormFold<'_> {
    /// `(scale, shift)` of output channel `o`, computed as PyTorch's
    /// inference batch norm computes them.
    fn channel(&self, o: usize) -> (f64, f64) {
        let rstd = 1.0 / crate::scalar::sqrt(self.var[o] as f64 + self.eps);
        let scale = self.weight.map_or(1.0, |w| w[o] as f64) * rstd;
        (
            scale,
            self.bias.map_or(0.0, |b| b[o] as f64) - self.mean[o] as f64 * scale,
        )
    }
}

/// First words of a prepared [`conv2d_folded`] filter ("PKF1").
const FOLDED_MAGIC: u32 = 0x3146_4b50;
/// First words of one transformed for Winograd's F(2 × 2, 3 × 3) ("PKW1").
const WINOGRAD_MAGIC: u32 = 0x3157_4b50;
/// Floats before the folded bias.
const FOLDED_HEADER: usize = 16;

/// How [`conv2d_folded`] multiplies an ungrouped convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// The direct sum over each output's window.
    Direct,
    /// Winograd's F(2 × 2, 3 × 3) for the convolutions it takes
    /// ([`Conv2dNhwc::winograd`]): 2.25× fewer multiplications, at a few
    /// units more of rounding. The direct sum for the others.
    Winograd,
}

impl Conv2dNhwc {
    /// Whether `algorithm` runs this convolution by Winograd's method.
    fn by_winograd(&self, algorithm: Algorithm) -> bool {
        algorithm == Algorithm::Winograd && self.winograd()
    }

    /// The algorithm that runs this convolution when `preferred` is asked
    /// for: the direct sum where Winograd's method does not apply.
    pub fn algorithm(&self, preferred: Algorithm) -> Algorithm {
        if self.by_winograd(preferred) {
            Algorithm::Winograd
        } else {
            Algorithm::Direct
        }
    }

    /// Floats that [`conv2d_folded`] keeps from call to call by
    /// `algorithm`: a header, the folded bias, then the filter (packed for
    /// a regular convolution, transformed for Winograd's method, `[kH, kW,
    /// O]` for a depthwise one).
    pub fn folded_len(&self, algorithm: Algorithm) -> usize {
        let filter = if self.is_depthwise() {
            self.window.kernel_h * self.window.kernel_w * self.out_c
        } else if self.by_winograd(algorithm) {
            self.winograd_filter_len()
        } else {
            self.packed_filter_len()
        };
        FOLDED_HEADER + self.out_c.div_ceil(16) * 16 + filter
    }

    /// The header of a filter prepared for this geometry by `algorithm`.
    fn folded_header(&self, algorithm: Algorithm) -> [u32; 4] {
        let magic = if self.by_winograd(algorithm) {
            WINOGRAD_MAGIC
        } else {
            FOLDED_MAGIC
        };
        [magic, self.out_c as u32, self.depth() as u32, self.groups as u32]
    }

    /// Scratch floats that [`conv2d_folded`] needs by `algorithm`.
    pub fn folded_scratch_len(&self, algorithm: Algorithm) -> usize {
        if self.by_winograd(algorithm) {
            self.winograd_scratch_len()
        } else {
            self.scratch_len(true)
        }
    }
}

/// How the filter of a [`FoldedConv`] is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterLayout {
    /// PyTorch's: `[O, C / groups, kH, kW]`.
    Torch,
    /// XNNPACK's: `[O, kH, kW, C]` ungrouped, `[1, kH, kW, O]` depthwise.
    Xnnpack,
}

/// A convolution of NHWC images whose filter is a constant in PyTorch's
/// or XNNPACK's layout, with an optional batch norm folded in and an
/// optional residual (`[N, OH, OW, O]`, as the output) added: `out[N, OH,
/// OW, O] = activation(clamp(bn(conv(x, w) + bias) + residual))`. Ungrouped and
/// depthwise convolutions only (see [`Conv2dNhwc::regular`] and
/// [`Conv2dNhwc::depthwise`] for the geometry).
#[derive(Clone, Copy, Debug)]
pub struct FoldedConv<'a> {
    pub geometry: Conv2dNhwc,
    pub algorithm: Algorithm,
    pub layout: FilterLayout,
    /// The filter, bias and batch norm are read only by [`Self::prepare`]:
    /// a convolution whose filter was prepared elsewhere (by ptec, at
    /// compile time) may leave them empty.
    pub w: &'a [f32],
    pub bias: Option<&'a [f32]>,
    pub bn: Option<BatchNormFold<'a>>,
    pub residual: Option<&'a [f32]>,
    pub min: f32,
    pub max: f32,
    /// Applied to each result after the clamp.
    pub activation: Activation,
}

impl FoldedConv<'_> {
    /// Prepares this convolution's filter in `kept` ([`Conv2dNhwc::folded_len`]
    /// floats by its algorithm, serving this convolution alone): rearranged into the layout
    /// the NHWC kernels read, scaled by the batch norm, with the bias
    /// shifted by it. Does nothing when `kept` already holds it, so it can
    /// run before every call; ptec runs it at compile time when the weights
    /// are embedded, and the program then holds the result as a constant.
    pub fn prepare(&self, kept: &mut [f32]) {
        let g = &self.geometry;
        assert!(
            g.groups == 1 || g.is_depthwise(),
            "{} groups of {} channels",
            g.groups,
            g.in_c
        );
        let (head, rest) = kept[..g.folded_len(self.algorithm)].split_at_mut(FOLDED_HEADER);
        let header = g.folded_header(self.algorithm);
        if !stamped(head, &header) {
            let (folded_bias, filter) = rest.split_at_mut(g.out_c.div_ceil(16) * 16);
            fold_filter(self, &mut folded_bias[..g.out_c], filter);
            stamp(head, &header);
        }
    }

    /// The folded bias and the filter that [`Self::prepare`] wrote in
    /// `prepared`.
    pub(super) fn prepared<'k>(&self, prepared: &'k [f32]) -> (&'k [f32], &'k [f32]) {
        let g = &self.geometry;
        let (head, rest) = prepared[..g.folded_len(self.algorithm)].split_at(FOLDED_HEADER);
        assert!(
            stamped(head, &g.folded_header(self.algorithm)),
            "the filter was not prepared for this convolution"
        );
        let (folded_bias, filter) = rest.split_at(g.out_c.div_ceil(16) * 16);
        (&folded_bias[..g.out_c], filter)
    }
}

/// Runs a [`FoldedConv`] of `x` into `out`, its filter and bias taken from
/// `prepared` (what [`FoldedConv::prepare`] wrote). `scratch`:
/// [`Conv2dNhwc::folded_scratch_len`] floats by its algorithm.
pub fn conv2d_folded(conv: &FoldedConv<'_>, x: &[f32], prepared: &[f32], out: &mut [f32], scratch: &mut [f32]) {
    let g = &conv.geometry;
    let out = &mut out[..g.window.out_pixels() * g.out_c];
    if let Some(r) = conv.residual {
        assert!(r.len() >= out.len(), "residual of {} floats for {}", r.len(), out.len());
    }
    let (min, max) = (conv.min, conv.max);
    let (folded_bias, filter) = conv.prepared(prepared);
    let activation = conv.activation;
    if g.is_depthwise() {
        match conv.residual {
            None => depthwise_activated(g, x, filter, Some(folded_bias), min, max, activation, out),
            Some(r) => {
                // The depthwise kernels add no residual: the sum, the
                // clamp and the activation take a second pass.
                let (lo, hi) = (f32::NEG_INFINITY, f32::INFINITY);
                depthwise_conv2d_nhwc(g, x, filter, Some(folded_bias), lo, hi, out);
                add_residual(out, r, min, max);
                activation.apply_rows(out, g.window.batch * g.window.out_h, g.window.out_w * g.out_c);
            }
        }
    } else {
        let e = Epilogue {
            bias: Some(folded_bias),
            residual: conv.residual,
            min,
            max,
            activation,
        };
        if g.by_winograd(conv.algorithm) {
            winograd::conv(g, x, filter, &e, out, scratch);
        } else {
            conv_group(g, x, 0, filter, &e, out, &mut scratch[..g.gather_len()]);
        }
    }
}

/// Writes the filter and bias of [`conv2d_folded`]: the convolution's
/// filter rearranged for the NHWC kernels, each output channel scaled by
/// the batch norm, and the bias shifted by it.
fn fold_filter(conv: &FoldedConv<'_>, folded_bias: &mut [f32], filter: &mut [f32]) {
    let g = &conv.geometry;
    let (bias, bn) = (conv.bias, conv.bn.as_ref());
    let o = g.out_c;
    let (kh, kw) = (g.window.kernel_h, g.window.kernel_w);
    let taps = kh * kw;
    let cg = g.in_c / g.groups;
    let w = &conv.w[..o * cg * taps];
    let channel = |oc: usize| bn.map_or((1.0, 0.0), |bn| bn.channel(oc));
    // The scales, held where the bias goes until the filter is written.
    for (oc, s) in folded_bias.iter_mut().enumerate() {
        *s = channel(oc).0 as f32;
    }
    let scale = &*folded_bias;
    let torch = conv.layout == FilterLayout::Torch;
    if g.is_depthwise() {
        // Tap t of channel oc, wanted at [t · O + oc]: at w[oc · taps + t]
        // in PyTorch's layout, already there in XNNPACK's.
        for (oc, &s) in scale.iter().enumerate() {
            for t in 0..taps {
                let at = if torch { oc * taps + t } else { t * o + oc };
                filter[t * o + oc] = w[at] * s;
            }
        }
    } else {
        // Depth index q = (ki · kW + kj) · C + c of the NHWC windows, the
        // order of XNNPACK's `[O, kH, kW, C]`.
        let at = |oc: usize, q: usize| {
            if torch {
                let (tap, c) = (q / cg, q % cg);
                (oc * cg + c) * taps + tap
            } else {
                oc * g.depth() + q
            }
        };
        if g.by_winograd(conv.algorithm) {
            winograd::transform_filter(g, filter, |oc, c, ki, kj| {
                w[at(oc, (ki * kw + kj) * cg + c)] * scale[oc]
            });
        } else {
            pack_with(g.depth(), o, filter, |q, oc| w[at(oc, q)] * scale[oc]);
        }
    }
    for (oc, b) in folded_bias.iter_mut().enumerate() {
        let (scale, shift) = channel(oc);
        *b = (bias.map_or(0.0, |b| b[oc] as f64) * scale + shift) as f32;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::nhwc::tests::{rng, Dims4, Pair};
    use std::vec;
    use std::vec::Vec;

    /// NCHW ↔ NHWC of an `[n, a, b, c]` array: element `(i, j, k, l)` to
    /// `(i, k, l, j)`.
    fn to_last(x: &[f32], [n, a, b, c]: Dims4) -> Vec<f32> {
        let mut out = vec![0.0; x.len()];
        for i in 0..n {
            for j in 0..a {
                for k in 0..b * c {
                    out[(i * b * c + k) * a + j] = x[(i * a + j) * b * c + k];
                }
            }
        }
        out
    }

    /// `conv2d_folded` against aten's NCHW convolution then batch norm
    /// (then a residual added), ungrouped (multiplied from the image, 1×1,
    /// gathered) and depthwise, with and without bias, batch norm and
    /// residual; the second call reuses what the first kept.
    #[test]
    fn folded_convolutions_match_convolution_then_batch_norm() {
        use crate::conv::{conv_scratch_len, convolution};
        use crate::norm::batch_norm_no_training;
        // (NCHW input, OIHW weight, stride, padding (h, w), groups)
        let cases: &[(Dims4, Dims4, Pair, Pair, usize)] = &[
            ([1, 3, 9, 11], [8, 3, 3, 3], [2, 2], [1, 1], 1),
            ([2, 16, 5, 5], [40, 16, 1, 1], [1, 1], [0, 0], 1),
            ([1, 24, 7, 6], [24, 1, 3, 3], [1, 1], [1, 1], 24),
            ([1, 32, 8, 8], [32, 1, 3, 3], [2, 2], [1, 1], 32),
            ([1, 4, 6, 6], [8, 1, 3, 3], [1, 1], [0, 1], 4),
            ([1, 24, 6, 7], [16, 24, 3, 3], [1, 1], [1, 1], 1),
        ];
        for (ci, &(xs, ws, stride, [ph, pw], groups)) in cases.iter().enumerate() {
            // Under Miri the smallest case (by input pixels times filter): a
            // folded depthwise convolution with a channel multiplier.
            if crate::testing::too_large_for_miri(xs[0] * xs[2] * xs[3] * ws.iter().product::<usize>(), 1 << 12) {
                continue;
            }
            let combinations = [
                (true, true, false, Activation::Identity),
                (false, true, false, Activation::Hardswish),
                (true, false, false, Activation::SigmoidMul),
                (true, true, true, Activation::Hardswish),
            ];
            for (combination, (with_bias, with_bn, with_residual, activation)) in combinations.into_iter().enumerate() {
                let o = ws[0];
                let x = rng(ci as u64, xs.iter().product());
                let w = rng(10 + ci as u64, ws.iter().product());
                let bias = with_bias.then(|| rng(20, o));
                let (bw, bb, mean) = (rng(21, o), rng(22, o), rng(23, o));
                let var: Vec<f32> = rng(24, o).iter().map(|v| v.abs() + 0.1).collect();
                let eps = 1e-5;
                // aten: convolution, then batch norm, NCHW.
                let out_sizes = crate::conv::conv_output_sizes(
                    &xs,
                    &ws,
                    bias.as_ref().map(Vec::len),
                    &stride,
                    &[ph, pw],
                    &[1, 1],
                    false,
                    &[0, 0],
                    groups,
                )
                .unwrap();
                let mut scratch =
                    vec![0.0; conv_scratch_len(&xs, &ws, &stride, &[ph, pw], &[1, 1], false, &[0, 0], groups)];
                let mut y = vec![0.0f32; out_sizes.iter().product()];
                convolution(
                    &x,
                    &xs,
                    &w,
                    &ws,
                    bias.as_deref(),
                    &stride,
                    &[ph, pw],
                    &[1, 1],
                    false,
                    &[0, 0],
                    groups,
                    &mut y,
                    &mut scratch,
                )
                .unwrap();
                let want = if with_bn {
                    let mut z = vec![0.0f32; y.len()];
                    batch_norm_no_training(&y, &out_sizes, Some(&bw), Some(&bb), &mean, &var, eps, &mut z).unwrap();
                    z
                } else {
                    y
                };
                let mut want = to_last(&want, out_sizes.as_slice().try_into().unwrap());
                let residual = with_residual.then(|| rng(25, want.len()));
                if let Some(r) = &residual {
                    for (w, r) in want.iter_mut().zip(r) {
                        *w += r;
                    }
                }
                // NHWC, folded.
                let nhwc = [xs[0], xs[2], xs[3], xs[1]];
                let pad = [ph, pw, ph, pw];
                let g = if groups == 1 {
                    Conv2dNhwc::regular(&nhwc, &[o, ws[2], ws[3], ws[1]], stride, pad, [1, 1], 1)
                } else {
                    Conv2dNhwc::depthwise(&nhwc, &[1, ws[2], ws[3], o], stride, pad, [1, 1])
                }
                .unwrap();
                let bn = BatchNormFold {
                    weight: Some(&bw),
                    bias: Some(&bb),
                    mean: &mean,
                    var: &var,
                    eps,
                };
                let xl = to_last(&x, xs);
                // The weight in XNNPACK's layout: `[O, kH, kW, C]`, or
                // `[1, kH, kW, O]` depthwise.
                let [_, cg, kh, kw] = ws;
                let (mut wx, wx_sizes) = (
                    vec![0.0f32; w.len()],
                    if groups == 1 { [o, kh, kw, cg] } else { [1, kh, kw, o] },
                );
                for (at, &v) in w.iter().enumerate() {
                    let (oc, c, t) = (at / (cg * kh * kw), at / (kh * kw) % cg, at % (kh * kw));
                    wx[if groups == 1 {
                        (oc * kh * kw + t) * cg + c
                    } else {
                        t * o + oc
                    }] = v;
                }
                let layouts = [(FilterLayout::Torch, &w, ws), (FilterLayout::Xnnpack, &wx, wx_sizes)];
                for (l, (layout, w, w_sizes)) in layouts.into_iter().enumerate() {
                    // Under Miri one layout a combination, in turn.
                    if cfg!(miri) && l != combination % 2 {
                        continue;
                    }
                    assert_eq!(
                        Conv2dNhwc::folded(layout, &nhwc, &w_sizes, stride, pad, [1, 1], groups),
                        Some(g)
                    );
                    let mut kept = vec![0.0f32; g.folded_len(Algorithm::Direct)];
                    let mut scratch = vec![0.0f32; g.scratch_len(true)];
                    let conv = FoldedConv {
                        geometry: g,
                        algorithm: Algorithm::Direct,
                        layout,
                        w,
                        bias: bias.as_deref(),
                        bn: with_bn.then_some(bn),
                        residual: residual.as_deref(),
                        min: -1.5,
                        max: 2.0,
                        activation,
                    };
                    // The third call runs as ptec's code does when it
                    // prepared the filter at compile time: without the
                    // filter, bias and batch norm it was made from.
                    let prepared_elsewhere = FoldedConv {
                        w: &[],
                        bias: None,
                        bn: None,
                        ..conv
                    };
                    for call in 0..3 {
                        let mut got = vec![f32::NAN; want.len()];
                        let conv = if call < 2 {
                            conv.prepare(&mut kept);
                            &conv
                        } else {
                            &prepared_elsewhere
                        };
                        conv2d_folded(conv, &xl, &kept, &mut got, &mut scratch);
                        for (k, (&a, &b)) in got.iter().zip(&want).enumerate() {
                            let b = b.clamp(-1.5, 2.0);
                            let b = match activation {
                                Activation::Identity => b,
                                Activation::Hardswish => crate::scalar::hardswish(b),
                                Activation::SigmoidMul => b * crate::scalar::sigmoid(b),
                            };
                            assert!(
                                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                                "case {ci} {layout:?} ({with_bias}, {with_bn}, {with_residual}, {activation:?}) call {call} [{k}]: {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// A convolution's own activation gives the bits of its result
    /// activated in a pass after it, on every path and thread count: a
    /// pointwise product past a band of activated rows, a gathered 3 × 3,
    /// a stem (the direct kernel), depthwise 3 × 3 (split by channels)
    /// and 5 × 5 stride 2 (split by rows), and each with a residual.
    #[test]
    fn activations_give_the_bits_of_a_pass_after() {
        // (NHWC input, weight in XNNPACK's layout, stride, padding)
        let cases: &[(Dims4, Dims4, Pair, usize)] = &[
            ([1, 20, 20, 24], [72, 1, 1, 24], [1, 1], 0),
            ([1, 16, 16, 32], [40, 3, 3, 32], [1, 1], 1),
            ([1, 65, 63, 3], [16, 3, 3, 3], [2, 2], 1),
            ([1, 20, 20, 48], [1, 3, 3, 48], [1, 1], 1),
            ([1, 40, 40, 48], [1, 5, 5, 48], [2, 2], 2),
        ];
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        for threads in [1, 2] {
            crate::parallel::set_threads(threads);
            for (ci, &(xs, ws, stride, pad)) in cases.iter().enumerate() {
                let groups = if ws[0] == 1 { xs[3] } else { 1 };
                let g = Conv2dNhwc::folded(FilterLayout::Xnnpack, &xs, &ws, stride, [pad; 4], [1, 1], groups).unwrap();
                if crate::testing::too_large_for_miri(crate::nhwc::tests::work(&g), 1 << 14) {
                    continue;
                }
                let x = rng(ci as u64, xs.iter().product());
                let w = rng(10 + ci as u64, ws.iter().product());
                let bias = rng(20 + ci as u64, g.out_c);
                let residual: Vec<f32> = rng(30 + ci as u64, g.window.out_pixels() * g.out_c)
                    .iter()
                    .map(|v| v * 4.0)
                    .collect();
                let mut kept = vec![0.0f32; g.folded_len(Algorithm::Direct)];
                let mut scratch = vec![0.0f32; g.scratch_len(true)];
                for with_residual in [false, true] {
                    let conv = |activation| FoldedConv {
                        geometry: g,
                        algorithm: Algorithm::Direct,
                        layout: FilterLayout::Xnnpack,
                        w: &w,
                        bias: Some(&bias),
                        bn: None,
                        residual: with_residual.then_some(&residual[..]),
                        min: -2.5,
                        max: f32::INFINITY,
                        activation,
                    };
                    conv(Activation::Identity).prepare(&mut kept);
                    let mut plain = vec![f32::NAN; residual.len()];
                    conv2d_folded(&conv(Activation::Identity), &x, &kept, &mut plain, &mut scratch);
                    for activation in [Activation::Hardswish, Activation::SigmoidMul] {
                        let mut want = plain.clone();
                        activation.apply(&mut want);
                        let mut got = vec![f32::NAN; residual.len()];
                        conv2d_folded(&conv(activation), &x, &kept, &mut got, &mut scratch);
                        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                a.to_bits() == b.to_bits(),
                                "{threads} thread(s), case {ci}, residual {with_residual}, {activation:?} [{k}]: {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
        crate::parallel::set_threads(1);
    }
}
