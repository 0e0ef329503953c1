//! Depthwise convolutions over NHWC images: the entry point, the portable
//! kernel (any multiplier), and the choice among the kernels of a
//! multiplier of 1 in the files below, one per instruction set: `dw3x3`
//! (AVX-512, undilated 3×3 windows of stride 1 across), `dw_avx512`
//! (AVX-512, any other window), `dw_avx2` (AVX2 + FMA, windows whose
//! rows fit its ring) and `dw_neon` (aarch64 NEON, any window).
use super::{clamp, for_each_output, for_each_tap, Conv2dNhwc, Window2d};
use crate::activation::Activation;

#[cfg(target_arch = "x86_64")]
mod dw3x3;
#[cfg(target_arch = "x86_64")]
mod dw_avx2;
#[cfg(target_arch = "x86_64")]
mod dw_avx512;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod dw_neon;

/// Depthwise convolution (see [`Conv2dNhwc::depthwise`]): `out[N, OH, OW,
/// C · multiplier] = clamp(conv(x, w) + bias)`.
///
/// With a multiplier of 1 (the usual case) each output pixel accumulates
/// its taps in registers, a block of channels at a time: vectors run
/// across channels, which NHWC keeps contiguous.
#[allow(clippy::too_many_arguments)]
pub fn depthwise_conv2d_nhwc(
    g: &Conv2dNhwc,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    min: f32,
    max: f32,
    out: &mut [f32],
) {
    depthwise_activated(g, x, w, bias, min, max, Activation::Identity, out);
}

/// [`depthwise_conv2d_nhwc`], then `activation` of each result: in each
/// thread's band of rows as soon as it is written where the kernel splits
/// rows, else in a pass of its own.
#[allow(clippy::too_many_arguments)]
pub(super) fn depthwise_activated(
    g: &Conv2dNhwc,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    min: f32,
    max: f32,
    activation: Activation,
    out: &mut [f32],
) {
    let win = &g.window;
    let (c, o) = (g.in_c, g.out_c);
    let x = &x[..win.batch * win.in_h * win.in_w * c];
    let w = &w[..win.kernel_h * win.kernel_w * o];
    let out = &mut out[..win.out_pixels() * o];
    if let Some(b) = bias {
        assert!(b.len() >= o, "bias of {} for {o} channels", b.len());
    }
    let d = Depthwise {
        win,
        c,
        o,
        x,
        w,
        bias,
        min,
        max,
    };
    #[cfg(target_arch = "x86_64")]
    if c == o && crate::cpu::Isa::detect() == crate::cpu::Isa::Avx512 {
        if dw3x3::fits(win) {
            // SAFETY: AVX-512F was detected on this CPU; the slices above
            // have the lengths the geometry implies.
            unsafe { dw3x3::depthwise3x3_avx512(&d, out) };
            // Its threads split the channels: the activation's pass
            // splits the rows.
            return activation.apply_rows(out, win.batch * win.out_h, win.out_w * o);
        }
        // With threads, each takes a band of output rows.
        let worth_splitting = out.len() * win.kernel_h * win.kernel_w >= 1 << 17;
        let (rows, row_len) = (win.batch * win.out_h, win.out_w * o);
        crate::parallel::for_each_band(out, rows, row_len, 1, worth_splitting, &|rows, band| {
            // SAFETY: AVX-512F was detected on this CPU; the slices above
            // have the lengths the geometry implies, and `band` holds the
            // output rows `rows`.
            unsafe { dw_avx512::depthwise_avx512(&d, band, rows) };
            activation.apply(band);
        });
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if c == o && crate::cpu::has_avx2_fma() && dw_avx2::fits(win) {
        // SAFETY: AVX2 and FMA were detected on this CPU; the slices above
        // have the lengths the geometry implies.
        unsafe { dw_avx2::depthwise_avx2(&d, out) };
        return activation.apply_rows(out, win.batch * win.out_h, win.out_w * o);
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if c == o {
        // With threads, each takes a band of output rows (as on AVX-512).
        let worth_splitting = out.len() * win.kernel_h * win.kernel_w >= 1 << 17;
        let (rows, row_len) = (win.batch * win.out_h, win.out_w * o);
        crate::parallel::for_each_band(out, rows, row_len, 1, worth_splitting, &|rows, band| {
            // SAFETY: NEON is on for the whole build; the slices above
            // have the lengths the geometry implies, and `band` holds the
            // output rows `rows`.
            unsafe { dw_neon::depthwise_neon(&d, band, rows) };
            activation.apply(band);
        });
        return;
    }
    depthwise_portable(&d, out);
    activation.apply_rows(out, win.batch * win.out_h, win.out_w * o);
}

/// The inputs of a depthwise convolution, checked against its geometry by
/// [`depthwise_conv2d_nhwc`]: `x` holds `N·H·W·C` floats, `w` `kH·kW·O`,
/// `bias` (if any) `O`, for `C` input and `O` output channels.
struct Depthwise<'a> {
    win: &'a Window2d,
    c: usize,
    o: usize,
    x: &'a [f32],
    w: &'a [f32],
    bias: Option<&'a [f32]>,
    min: f32,
    max: f32,
}

/// Sets `o` to the bias, or zero.
#[inline(always)]
fn init_bias(o: &mut [f32], bias: Option<&[f32]>) {
    match bias {
        Some(b) => o.copy_from_slice(&b[..o.len()]),
        None => o.fill(0.0),
    }
}

/// Depthwise, portable, any multiplier: each pixel's channels accumulate
/// in the output row (which stays in L1), tap by tap; output channel `oc`
/// reads input channel `oc / multiplier`.
fn depthwise_portable(d: &Depthwise<'_>, out: &mut [f32]) {
    let (win, c, o, x, w, bias) = (d.win, d.c, d.o, d.x, d.w, d.bias);
    let (min, max) = (d.min, d.max);
    let image = win.in_h * win.in_w;
    let mult = o / c;
    for_each_output(win, out, o, |n, oh, ow, dst| {
        init_bias(dst, bias);
        for_each_tap(win, oh, ow, |pix, tap| {
            let xs = &x[(n * image + pix) * c..][..c];
            let ws = &w[tap * o..][..o];
            if mult == 1 {
                for ((acc, &xv), &wv) in dst.iter_mut().zip(xs).zip(ws) {
                    *acc += xv * wv;
                }
            } else {
                for (oc, (acc, &wv)) in dst.iter_mut().zip(ws).enumerate() {
                    *acc += xs[oc / mult] * wv;
                }
            }
        });
        clamp(dst, min, max);
    });
}

/// Adds one undilated 3-wide kernel row (weights `w`) to the accumulators
/// of `PX` pixels `SW` input columns apart, vectors of any width;
/// `column(j)` loads input column `j` counted from the first pixel's
/// window, `fma(x, w, acc)` is `x · w + acc`. Neighbouring windows share
/// columns (two at stride 1, one at stride 2): each is loaded once and
/// kept in a register for the pixels that read it, so that only three are
/// live at a time. Here, in their parent, because the AVX-512 and AVX2
/// kernels below all use it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn three_taps<V: Copy, const PX: usize, const SW: usize>(
    acc: &mut [V; PX],
    w: &[V; 3],
    column: impl Fn(usize) -> V,
    fma: impl Fn(V, V, V) -> V,
) {
    let (mut left, mut mid) = (column(0), column(1));
    for (p, a) in acc.iter_mut().enumerate() {
        let right = column(p * SW + 2);
        *a = fma(left, w[0], *a);
        *a = fma(mid, w[1], *a);
        *a = fma(right, w[2], *a);
        if SW == 1 {
            (left, mid) = (mid, right);
        } else if p + 1 < PX {
            (left, mid) = (right, column(p * SW + 3));
        }
    }
}

/// [`three_taps`] for an undilated kernel row `K` wide: input column `j`
/// (from the first pixel's window) is loaded once and added to each pixel
/// whose window holds it, so that one column is live at a time. Each
/// pixel takes its taps in order, as one pixel at a time does.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn row_taps<V: Copy, const K: usize, const PX: usize, const SW: usize>(
    acc: &mut [V; PX],
    w: &[V; K],
    column: impl Fn(usize) -> V,
    fma: impl Fn(V, V, V) -> V,
) {
    for j in 0..(PX - 1) * SW + K {
        let x = column(j);
        for (p, a) in acc.iter_mut().enumerate() {
            if (p * SW..p * SW + K).contains(&j) {
                *a = fma(x, w[j - p * SW], *a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::nhwc::tests::{close, reference, rng, work, Dims4, Pair};
    use std::vec;

    #[test]
    fn depthwise_convolutions_match_the_reference() {
        let cases: &[(Dims4, Dims4, Pair, Dims4, Pair)] = &[
            ([1, 8, 8, 48], [1, 3, 3, 48], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([2, 9, 7, 13], [1, 3, 3, 13], [2, 2], [1, 1, 1, 1], [1, 1]),
            ([1, 6, 6, 3], [1, 3, 3, 6], [1, 1], [0, 0, 0, 0], [1, 1]),
            ([1, 12, 12, 8], [1, 9, 9, 8], [1, 1], [4, 4, 4, 4], [1, 1]),
            ([1, 10, 10, 16], [1, 3, 3, 16], [1, 1], [2, 2, 2, 2], [2, 2]),
            // Long rows: runs of 8 interior pixels, strided too.
            ([1, 5, 21, 40], [1, 3, 3, 40], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([2, 7, 37, 19], [1, 3, 3, 19], [2, 2], [1, 1, 1, 1], [1, 1]),
            ([1, 6, 30, 70], [1, 5, 5, 70], [1, 1], [0, 2, 0, 2], [1, 1]),
            // Many whole channel blocks: at stride 1 through the ring (see
            // `dw3x3`), at stride 2 swept block by block along the row, 8,
            // 4 and 1 pixels at a time.
            ([1, 5, 23, 128], [1, 3, 3, 128], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([2, 7, 30, 144], [1, 3, 3, 144], [2, 2], [0, 1, 1, 0], [1, 1]),
            // Stride 1 across, through the ring of copied rows: rows in
            // three segments and two images; a block of one output row at
            // a time, stride 2 down, a partial channel block; padding of
            // two and none.
            ([2, 6, 300, 40], [1, 3, 3, 40], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([1, 7, 150, 200], [1, 3, 3, 200], [2, 1], [2, 0, 1, 1], [1, 1]),
            ([1, 4, 9, 17], [1, 3, 3, 17], [1, 1], [0, 2, 2, 2], [1, 1]),
            ([1, 7, 7, 960], [1, 3, 3, 960], [1, 1], [1, 1, 1, 1], [1, 1]),
            // The AVX2 ring (`dw_avx2`): stride 2, the top and bottom rows
            // in three segments of 15; dilation with strides apart and
            // padding of three; partial blocks of one and of five vectors,
            // one short; three images; bands of two and three rows
            // (padding above, none below, as `chain` cuts them); a 7×7
            // window of stride 2; a window of 70 taps, too many for the
            // ring (the portable path).
            ([1, 5, 90, 64], [1, 3, 3, 64], [2, 2], [1, 1, 1, 1], [1, 1]),
            ([1, 13, 40, 24], [1, 3, 3, 24], [1, 2], [2, 3, 2, 3], [2, 3]),
            ([3, 5, 9, 36], [1, 3, 3, 36], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([1, 6, 11, 5], [1, 3, 3, 5], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([1, 2, 15, 32], [1, 3, 3, 32], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([1, 3, 20, 48], [1, 3, 3, 48], [1, 1], [2, 1, 0, 1], [1, 1]),
            ([1, 20, 19, 16], [1, 7, 7, 16], [2, 2], [3, 3, 3, 3], [1, 1]),
            ([1, 3, 80, 8], [1, 1, 70, 8], [1, 1], [0, 0, 0, 0], [1, 1]),
            // Windows so wide that a segment of 4 outputs fills a ring
            // row, and one column wider (the portable path).
            ([1, 2, 200, 8], [1, 1, 2, 8], [1, 1], [0, 0, 0, 0], [1, 124]),
            ([1, 2, 200, 8], [1, 1, 2, 8], [1, 1], [0, 0, 0, 0], [1, 125]),
            // Stride 2 across, read from the image where the windows lie
            // inside it: a partial vector up to the image's last float,
            // and rows with padding on either side.
            ([1, 9, 41, 13], [1, 3, 3, 13], [2, 2], [0, 0, 0, 0], [1, 1]),
            ([2, 8, 45, 40], [1, 3, 3, 40], [2, 2], [1, 1, 1, 1], [1, 1]),
        ];
        for (i, &(input, filter, stride, padding, dilation)) in cases.iter().enumerate() {
            let g = Conv2dNhwc::depthwise(&input, &filter, stride, padding, dilation).unwrap();
            // Under Miri (the portable kernel) the cases of at most 2^13
            // multiply-adds: a channel multiplier, padding, stride 2 over
            // two images, dilation down and far across; each with one of
            // the two epilogues, in turn by its index.
            if crate::testing::too_large_for_miri(work(&g), 1 << 13) {
                continue;
            }
            let x = rng(i as u64, input.iter().product());
            let w = rng(100 + i as u64, filter.iter().product());
            let b = rng(200 + i as u64, filter[3]);
            let epilogues = [(None, f32::NEG_INFINITY, f32::INFINITY), (Some(&b[..]), -0.2, 6.0)];
            for (e, (bias, min, max)) in epilogues.into_iter().enumerate() {
                if cfg!(miri) && e != i % 2 {
                    continue;
                }
                let want = reference(&g, &x, &w, true, bias, min, max);
                let mut out = vec![f32::NAN; want.len()];
                depthwise_conv2d_nhwc(&g, &x, &w, bias, min, max, &mut out);
                close(&out, &want);
                // Under Miri that was the portable kernel, called below.
                if cfg!(miri) {
                    continue;
                }
                let mut out = vec![f32::NAN; want.len()];
                let d = Depthwise {
                    win: &g.window,
                    c: g.in_c,
                    o: g.out_c,
                    x: &x,
                    w: &w,
                    bias,
                    min,
                    max,
                };
                depthwise_portable(&d, &mut out);
                close(&out, &want);
                #[cfg(target_arch = "x86_64")]
                if g.in_c == g.out_c && crate::cpu::has_avx2_fma() && dw_avx2::fits(&g.window) {
                    let mut out = vec![f32::NAN; want.len()];
                    // SAFETY: AVX2 and FMA are present; the lengths fit the geometry.
                    unsafe { dw_avx2::depthwise_avx2(&d, &mut out) };
                    close(&out, &want);
                }
                #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
                if g.in_c == g.out_c {
                    // All the rows at once, and in bands of two (as
                    // threads take them): the same bits.
                    let mut all = vec![f32::NAN; want.len()];
                    let rows = g.window.batch * g.window.out_h;
                    // SAFETY: NEON is on; the lengths fit the geometry.
                    unsafe { dw_neon::depthwise_neon(&d, &mut all, 0..rows) };
                    close(&all, &want);
                    let row_len = g.window.out_w * g.out_c;
                    let mut bands = vec![f32::NAN; want.len()];
                    for (b, band) in bands.chunks_mut(2 * row_len).enumerate() {
                        let first = 2 * b;
                        // SAFETY: as above; `band` holds the rows.
                        unsafe { dw_neon::depthwise_neon(&d, band, first..(first + 2).min(rows)) };
                    }
                    assert!(all.iter().zip(&bands).all(|(x, y)| x.to_bits() == y.to_bits()));
                }
            }
        }
    }

    /// A NaN input on NEON: NaN where no clamp is asked for (as the
    /// portable kernel keeps it), the lower bound where one is, in the
    /// vector channels and the ones past them alike.
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    #[test]
    fn neon_nan_as_the_portable_kernel() {
        let g = Conv2dNhwc::depthwise(&[1, 5, 6, 11], &[1, 3, 3, 11], [1, 1], [1, 1, 1, 1], [1, 1]).unwrap();
        let mut x = rng(1, 5 * 6 * 11);
        for ch in [0, 5, 9, 10] {
            x[(2 * 6 + 3) * 11 + ch] = f32::NAN;
        }
        let w = rng(2, 9 * 11);
        for (min, max) in [(f32::NEG_INFINITY, f32::INFINITY), (-0.5, 0.5)] {
            let d = Depthwise {
                win: &g.window,
                c: 11,
                o: 11,
                x: &x,
                w: &w,
                bias: None,
                min,
                max,
            };
            let mut portable = vec![0.0; 5 * 6 * 11];
            depthwise_portable(&d, &mut portable);
            let mut neon = vec![0.0; 5 * 6 * 11];
            depthwise_conv2d_nhwc(&g, &x, &w, None, min, max, &mut neon);
            let nans = portable.iter().filter(|v| v.is_nan()).count();
            assert_eq!(nans, if min.is_finite() { 0 } else { 4 * 9 });
            for (i, (&p, &n)) in portable.iter().zip(&neon).enumerate() {
                assert!(
                    p.is_nan() == n.is_nan() && (p.is_nan() || (p - n).abs() <= 1e-5),
                    "at {i}: {p} vs {n}"
                );
            }
        }
    }
}
