//! A pointwise convolution whose result only a depthwise convolution
//! reads (the expansion and depthwise layers of an inverted residual
//! block), run together band by band.
//!
//! Run one after the other, the pointwise convolution writes its whole
//! result (4.8 MB for MobileNetV2's first expansion, 112 × 112 pixels of
//! 96 channels) and the depthwise one reads it back: beyond the L2 cache,
//! both run at the speed of the memory, not of the arithmetic. Here each
//! band of the depthwise convolution's output rows is computed from the
//! few rows of the pointwise result it needs, computed just before into a
//! buffer that stays in L2. Rows a band shares with the next (the taps'
//! overlap) move to the front of the buffer instead of being recomputed.
use super::{depthwise_conv2d_nhwc, Conv2dNhwc, FoldedConv};
use crate::gemm::Epilogue;
use crate::packed::gemm_packed;

/// About how many bytes of pointwise result a band keeps: a few rows, so
/// that the rows carried over to the next band are a small share (192 KiB
/// measured 5% slower on the 112 × 112 layer, 640 KiB no faster).
const BAND_BYTES: usize = 384 * 1024;

/// The most parts the output rows are split into across threads (each
/// needs its own band buffer in the scratch).
pub const MAX_PAIR_PARTS: usize = 4;

/// How a pair runs: output rows per band, and rows of the pointwise
/// result a band's buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bands {
    out_rows: usize,
    buffer_rows: usize,
}

/// The bands of `first` then `second`, or `None` when they are not a
/// pointwise convolution feeding a depthwise one.
fn bands(first: &Conv2dNhwc, second: &Conv2dNhwc) -> Option<Bands> {
    let (w1, w2) = (&first.window, &second.window);
    let feeds = [w2.batch, w2.in_h, w2.in_w, second.in_c] == first.output_sizes();
    let span = w2.dilation_h * (w2.kernel_h - 1) + 1;
    // Padding no deeper than the window keeps every band's first row
    // inside the image (see `Pair::rows`).
    let shallow = w2.pad_top < span && pad_bottom(w2) < span;
    if !(first.is_pointwise() && second.is_depthwise() && feeds && shallow && w1.in_w > 0 && w2.out_h > 0) {
        return None;
    }
    let row_bytes = (w2.in_w * second.in_c * 4).max(1);
    let s = w2.stride_h;
    // The rows output rows o0 .. o0 + n need: (n - 1)·s + span.
    let fit = (BAND_BYTES / row_bytes).saturating_sub(span) / s + 1;
    let out_rows = fit.min(w2.out_h).max(1);
    Some(Bands {
        out_rows,
        buffer_rows: (out_rows - 1) * s + span,
    })
}

/// Scratch, in floats, [`conv2d_folded_pair`] needs for `first` then
/// `second`, or `None` when they are not a pointwise convolution feeding a
/// depthwise one.
pub fn pair_scratch_len(first: &Conv2dNhwc, second: &Conv2dNhwc) -> Option<usize> {
    let b = bands(first, second)?;
    let buffer = b
        .buffer_rows
        .checked_mul(second.window.in_w)?
        .checked_mul(second.in_c)?;
    buffer.checked_mul(MAX_PAIR_PARTS)
}

/// `out = second(first(x))` for `first` a pointwise [`FoldedConv`] and
/// `second` a depthwise one reading its result, neither with a residual;
/// `first_kept` and `second_kept` keep their prepared filters (see
/// [`super::conv2d_folded`]). `scratch`: [`pair_scratch_len`] floats.
/// Output rows are split across threads (at most [`MAX_PAIR_PARTS`]).
pub fn conv2d_folded_pair(
    first: &FoldedConv<'_>,
    first_kept: &mut [f32],
    second: &FoldedConv<'_>,
    second_kept: &mut [f32],
    x: &[f32],
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let (g1, g2) = (&first.geometry, &second.geometry);
    let bands = bands(g1, g2).expect("a pointwise convolution feeding a depthwise one");
    assert!(
        first.residual.is_none() && second.residual.is_none(),
        "a fused pair adds no residual"
    );
    let (b1, f1) = first.prepared(first_kept);
    let (b2, f2) = second.prepared(second_kept);
    let win = &g2.window;
    let (h, w) = (win.in_h, win.in_w);
    let image_in = h * w * g1.in_c;
    let image_out = win.out_h * win.out_w * g2.out_c;
    let x = &x[..win.batch * image_in];
    let out = &mut out[..win.batch * image_out];
    let buffer_len = bands.buffer_rows * w * g2.in_c;
    let scratch = &mut scratch[..MAX_PAIR_PARTS * buffer_len];
    let pair = Pair {
        first,
        first_filter: f1,
        first_bias: b1,
        second,
        second_filter: f2,
        second_bias: b2,
        bands,
    };
    let parts = crate::parallel::threads().min(MAX_PAIR_PARTS).min(win.out_h).max(1);
    let per = win.out_h.div_ceil(parts);
    let row_len = win.out_w * g2.out_c;
    for (xi, oi) in x.chunks_exact(image_in).zip(out.chunks_exact_mut(image_out)) {
        let starts = || (0..parts).map(|p| (p * per).min(win.out_h));
        let outs = crate::parallel::Pieces::new(oi, starts().map(|r| r * row_len));
        let buffers = crate::parallel::Pieces::new(&mut *scratch, (0..parts).map(|p| p * buffer_len));
        crate::parallel::run_parts(parts, &|p| {
            let (r0, r1) = (p * per, ((p + 1) * per).min(win.out_h));
            if let (true, Some(o), Some(buffer)) = (r0 < r1, outs.take(p), buffers.take(p)) {
                pair.rows(xi, r0..r1, o, &mut buffer[..buffer_len]);
            }
        });
    }
}

/// A pair's convolutions with their prepared filters and biases.
struct Pair<'a> {
    first: &'a FoldedConv<'a>,
    first_filter: &'a [f32],
    first_bias: &'a [f32],
    second: &'a FoldedConv<'a>,
    second_filter: &'a [f32],
    second_bias: &'a [f32],
    bands: Bands,
}

impl Pair<'_> {
    /// Output rows `rows` of one image (`x` its input, `out` from row
    /// `rows.start`), band by band, through `buffer`.
    fn rows(&self, x: &[f32], rows: core::ops::Range<usize>, out: &mut [f32], buffer: &mut [f32]) {
        let (g1, g2) = (&self.first.geometry, &self.second.geometry);
        let win = &g2.window;
        let (h, w, c) = (win.in_h, win.in_w, g2.in_c);
        let (s, pad) = (win.stride_h, win.pad_top);
        let span = win.dilation_h * (win.kernel_h - 1) + 1;
        let row = w * c;
        let out_row = win.out_w * g2.out_c;
        let expand = Epilogue {
            bias: Some(self.first_bias),
            residual: None,
            min: self.first.min,
            max: self.first.max,
        };
        // Rows of the pointwise result in the buffer, from its start.
        let mut held = 0..0;
        for o0 in rows.clone().step_by(self.bands.out_rows) {
            let o1 = (o0 + self.bands.out_rows).min(rows.end);
            // The rows these output rows' taps reach, within the image.
            let lo = (o0 * s).saturating_sub(pad);
            let hi = ((o1 - 1) * s + span).saturating_sub(pad).min(h).max(lo);
            let mut from = lo;
            if lo < held.end && held.start <= lo {
                buffer.copy_within((lo - held.start) * row..(held.end - held.start) * row, 0);
                from = held.end;
            }
            if from < hi {
                let pixels = (hi - from) * w;
                let dst = &mut buffer[(from - lo) * row..(hi - lo) * row];
                gemm_packed(
                    pixels,
                    c,
                    g1.in_c,
                    &x[from * w * g1.in_c..],
                    g1.in_c,
                    self.first_filter,
                    &expand,
                    dst,
                    c,
                );
            }
            held = lo..hi;
            // The depthwise convolution of output rows o0 .. o1 over
            // buffer rows lo .. hi: rows above `lo` and below `hi` are
            // the image's padding.
            let top = pad + lo - o0 * s;
            let bottom = ((o1 - o0 - 1) * s + span) - top - (hi - lo);
            let band = Conv2dNhwc::depthwise(
                &[1, hi - lo, w, c],
                &[1, win.kernel_h, win.kernel_w, g2.out_c],
                [s, win.stride_w],
                [top, pad_right(win), bottom, win.pad_left],
                [win.dilation_h, win.dilation_w],
            )
            .expect("a band of a valid depthwise convolution");
            debug_assert_eq!((band.window.out_h, band.window.out_w), (o1 - o0, win.out_w));
            let dst = &mut out[(o0 - rows.start) * out_row..(o1 - rows.start) * out_row];
            depthwise_conv2d_nhwc(
                &band,
                &buffer[..(hi - lo) * row],
                self.second_filter,
                Some(self.second_bias),
                self.second.min,
                self.second.max,
                dst,
            );
        }
    }
}

/// The padding after the input along one dimension (not stored in a
/// window): the least that gives `out` outputs of a `kernel`-tap window,
/// `stride` and `dilation`, over `input` elements padded by `before`.
fn pad_after(out: usize, stride: usize, kernel: usize, dilation: usize, input: usize, before: usize) -> usize {
    let span = dilation * (kernel - 1) + 1;
    ((out - 1) * stride + span).saturating_sub(input + before)
}

/// The bottom padding of a window.
fn pad_bottom(win: &super::Window2d) -> usize {
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
fn pad_right(win: &super::Window2d) -> usize {
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
    use super::super::{conv2d_folded, BatchNormFold};
    use super::*;
    use std::vec;
    use std::vec::Vec;

    /// The pair against its two convolutions run one after the other, on
    /// shapes that take one band and several, strides 1 and 2, a 5×5 and
    /// a dilated window, a channel multiplier and two images.
    #[test]
    fn pairs_match_their_convolutions_one_after_the_other() {
        // (N, H, W, C in, C mid, C out, kernel, stride, padding, dilation)
        let cases: &[[usize; 10]] = &[
            [1, 9, 7, 5, 16, 16, 3, 1, 1, 1],
            [2, 12, 10, 8, 24, 24, 3, 2, 1, 1],
            // Rows of 40 KiB: bands of a few rows, carried over.
            [1, 23, 40, 16, 256, 256, 3, 1, 1, 1],
            [1, 24, 40, 16, 256, 256, 3, 2, 1, 1],
            [1, 21, 30, 8, 200, 200, 5, 2, 2, 1],
            [1, 20, 33, 8, 320, 320, 3, 1, 2, 2],
            [1, 11, 9, 4, 12, 24, 3, 1, 1, 1],
        ];
        let rng = |seed: u64, n: usize| crate::testing::Lcg(seed).vec(n);
        for (ci, &[n, h, w, cin, cmid, cout, k, s, p, d]) in cases.iter().enumerate() {
            let g1 = Conv2dNhwc::regular(&[n, h, w, cin], &[cmid, 1, 1, cin], [1, 1], [0; 4], [1, 1], 1).unwrap();
            let g2 = Conv2dNhwc::depthwise(&[n, h, w, cmid], &[1, k, k, cout], [s, s], [p; 4], [d, d]).unwrap();
            let (w1, w2) = (rng(1, cmid * cin), rng(2, cout * k * k));
            let (bias1, bias2) = (rng(3, cmid), rng(4, cout));
            let (mean, var): (Vec<f32>, Vec<f32>) =
                (rng(5, cmid), rng(6, cmid).iter().map(|v| v.abs() + 0.5).collect());
            let bn = BatchNormFold {
                weight: None,
                bias: None,
                mean: &mean,
                var: &var,
                eps: 1e-5,
            };
            let first = FoldedConv {
                geometry: g1,
                w: &w1,
                bias: Some(&bias1),
                bn: Some(bn),
                residual: None,
                min: 0.0,
                max: 6.0,
            };
            let second = FoldedConv {
                geometry: g2,
                w: &w2,
                bias: Some(&bias2),
                bn: None,
                residual: None,
                min: -1.0,
                max: 1.0,
            };
            let x = rng(7, n * h * w * cin);
            let (mut k1, mut k2) = (vec![0.0; g1.folded_len()], vec![0.0; g2.folded_len()]);
            let mut mid = vec![0.0; n * h * w * cmid];
            let mut want = vec![0.0; g2.window.out_pixels() * cout];
            conv2d_folded(&first, &x, &mut k1, &mut mid, &mut []);
            conv2d_folded(&second, &mid, &mut k2, &mut want, &mut []);
            let mut scratch = vec![f32::NAN; pair_scratch_len(&g1, &g2).unwrap()];
            let (mut k1, mut k2) = (vec![0.0; g1.folded_len()], vec![0.0; g2.folded_len()]);
            for call in 0..2 {
                let mut got = vec![f32::NAN; want.len()];
                conv2d_folded_pair(&first, &mut k1, &second, &mut k2, &x, &mut got, &mut scratch);
                for (i, (&a, &b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                        "case {ci} call {call} [{i}]: {a} vs {b}"
                    );
                }
            }
        }
    }

    #[test]
    fn only_pointwise_then_depthwise_pairs() {
        let pw = Conv2dNhwc::regular(&[1, 8, 8, 4], &[16, 1, 1, 4], [1, 1], [0; 4], [1, 1], 1).unwrap();
        let dw = Conv2dNhwc::depthwise(&[1, 8, 8, 16], &[1, 3, 3, 16], [1, 1], [1; 4], [1, 1]).unwrap();
        assert!(pair_scratch_len(&pw, &dw).is_some());
        // Not depthwise, not pointwise, not chained, padded past the window.
        let full = Conv2dNhwc::regular(&[1, 8, 8, 16], &[16, 3, 3, 16], [1, 1], [1; 4], [1, 1], 1).unwrap();
        assert!(pair_scratch_len(&pw, &full).is_none());
        assert!(pair_scratch_len(&full, &dw).is_none());
        let other = Conv2dNhwc::depthwise(&[1, 8, 9, 16], &[1, 3, 3, 16], [1, 1], [1; 4], [1, 1]).unwrap();
        assert!(pair_scratch_len(&pw, &other).is_none());
        let deep = Conv2dNhwc::depthwise(&[1, 8, 8, 16], &[1, 3, 3, 16], [1, 1], [3; 4], [1, 1]).unwrap();
        assert!(pair_scratch_len(&pw, &deep).is_none());
    }
}
