//! `aten::upsample_nearest2d.vec_out` and `aten::upsample_bilinear2d.vec_out`.
//!
//! Input `[N, C, H, W]` and output `[N, C, H_out, W_out]` are contiguous.
//! The output size comes from exactly one of `output_size` (`[H_out,
//! W_out]`) or `scale_factors` (`[s_h, s_w]`, giving `⌊H · s_h⌋`, `⌊W · s_w⌋`),
//! see [`upsample2d_output_sizes`]. Source coordinates follow PyTorch's CPU
//! kernels, including which `scale` they use: `1 / scale_factor` when scale
//! factors were given (and positive), `in / out` otherwise.

use crate::num::{AccFloat, Element, Float};
use crate::{KernelError, KernelResult};

/// Output sizes `[N, C, H_out, W_out]` of the 2-d upsampling ops for a
/// 4-d input, or `None` unless the input is 4-d, exactly one of
/// `output_size` (2 elements) and `scale_factors` (2 elements) is given,
/// and the input and output spatial sizes are all positive. With scale
/// factors, `out = ⌊in · scale⌋` (computed in `f64`).
pub fn upsample2d_output_sizes(
    input_sizes: &[usize],
    output_size: Option<&[usize]>,
    scale_factors: Option<&[f64]>,
) -> Option<[usize; 4]> {
    let &[n, c, h, w] = input_sizes else {
        return None;
    };
    let (oh, ow) = match (output_size, scale_factors) {
        (Some(&[oh, ow]), None) => (oh, ow),
        (None, Some(&[sh, sw])) => {
            let f = |i: usize, s: f64| -> Option<usize> {
                let v = i as f64 * s;
                (v.is_finite() && v >= 0.0).then_some(v as usize)
            };
            (f(h, sh)?, f(w, sw)?)
        }
        _ => return None,
    };
    (h > 0 && w > 0 && oh > 0 && ow > 0).then_some([n, c, oh, ow])
}

/// Resolved geometry: planes and spatial sizes, plus the scale factors
/// that reach the kernels (only when given as `scale_factors`).
struct Geom {
    planes: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    scale_h: Option<f64>,
    scale_w: Option<f64>,
}

fn geometry<T>(
    input: &[T],
    input_sizes: &[usize],
    output_size: Option<&[usize]>,
    scale_factors: Option<&[f64]>,
    out: &[T],
) -> Result<Geom, KernelError> {
    let [n, c, oh, ow] =
        upsample2d_output_sizes(input_sizes, output_size, scale_factors).ok_or(KernelError::ShapeMismatch)?;
    let (h, w) = (input_sizes[2], input_sizes[3]);
    let planes = n * c;
    if input.len() < planes * h * w || out.len() < planes * oh * ow {
        return Err(KernelError::ShapeMismatch);
    }
    Ok(Geom {
        planes,
        h,
        w,
        oh,
        ow,
        scale_h: scale_factors.map(|s| s[0]),
        scale_w: scale_factors.map(|s| s[1]),
    })
}

/// PyTorch's `nearest_idx`: the source index of output index `dst` along a
/// dim of `inp` → `out` elements (`f32` arithmetic, as on CPU).
#[inline(always)]
pub fn nearest_source_index(dst: usize, inp: usize, out: usize, scale_factor: Option<f64>) -> usize {
    if out == inp {
        dst
    } else if out == 2 * inp {
        dst >> 1
    } else {
        let scale = match scale_factor {
            Some(s) if s > 0.0 => (1.0 / s) as f32,
            _ => inp as f32 / out as f32,
        };
        let src = libm::floorf(dst as f32 * scale);
        (src as usize).min(inp - 1)
    }
}

/// `aten::upsample_nearest2d.vec_out(input, output_size?, scale_factors?,
/// out)`: `out[n, c, y, x] = input[n, c, src(y), src(x)]` with `src` from
/// [`nearest_source_index`]. Any element type (it only copies).
pub fn upsample_nearest2d<T: Element>(
    input: &[T],
    input_sizes: &[usize],
    output_size: Option<&[usize]>,
    scale_factors: Option<&[f64]>,
    out: &mut [T],
) -> KernelResult {
    let g = geometry(input, input_sizes, output_size, scale_factors, out)?;
    let (ihw, ohw) = (g.h * g.w, g.oh * g.ow);
    for p in 0..g.planes {
        let plane = &input[p * ihw..(p + 1) * ihw];
        let oplane = &mut out[p * ohw..(p + 1) * ohw];
        for (oy, orow) in oplane.chunks_exact_mut(g.ow).enumerate() {
            let iy = nearest_source_index(oy, g.h, g.oh, g.scale_h);
            let irow = &plane[iy * g.w..(iy + 1) * g.w];
            if g.ow == g.w {
                orow.copy_from_slice(irow);
            } else {
                for (ox, o) in orow.iter_mut().enumerate() {
                    *o = irow[nearest_source_index(ox, g.w, g.ow, g.scale_w)];
                }
            }
        }
    }
    Ok(())
}

/// PyTorch's `area_pixel_compute_scale` in the accumulation type.
#[inline(always)]
fn linear_scale<A: AccFloat>(inp: usize, out: usize, align_corners: bool, scale_factor: Option<f64>) -> A {
    if align_corners {
        if out > 1 {
            A::from_i64(inp as i64 - 1) / A::from_i64(out as i64 - 1)
        } else {
            A::ZERO
        }
    } else {
        match scale_factor {
            Some(s) if s > 0.0 => A::from_f64(1.0 / s),
            _ => A::from_i64(inp as i64) / A::from_i64(out as i64),
        }
    }
}

/// Source taps `(i0, i1, λ0, λ1)` of output index `dst` for linear
/// interpolation (PyTorch's `area_pixel_compute_source_index` with the
/// index/λ guards of its CPU kernel).
#[inline(always)]
fn linear_taps<A: AccFloat>(dst: usize, inp: usize, scale: A, align_corners: bool) -> (usize, usize, A, A) {
    let d = A::from_i64(dst as i64);
    let real = if align_corners {
        scale * d
    } else {
        let half = A::from_f32(0.5);
        let s = scale * (d + half) - half;
        if s < A::ZERO {
            A::ZERO
        } else {
            s
        }
    };
    // `real` is non-negative: truncation is floor.
    let i0 = (real.to_i64().max(0) as usize).min(inp - 1);
    let mut l1 = real - A::from_i64(i0 as i64);
    if l1 < A::ZERO {
        l1 = A::ZERO;
    }
    if l1 > A::ONE {
        l1 = A::ONE;
    }
    let i1 = if i0 < inp - 1 { i0 + 1 } else { i0 };
    (i0, i1, A::ONE - l1, l1)
}

/// `aten::upsample_bilinear2d.vec_out(input, output_size?, align_corners,
/// scale_factors?, out)`: bilinear interpolation of the four source pixels
/// around each output pixel's source coordinate, computed in
/// [`Float::Acc`]. Source coordinates: with `align_corners`,
/// `dst · (in − 1) / (out − 1)` (0 when `out == 1`); otherwise the
/// half-pixel rule `(dst + ½) · scale − ½` clamped at 0, with
/// `scale = 1 / scale_factor` when scale factors were given, else
/// `in / out`.
pub fn upsample_bilinear2d<T: Float>(
    input: &[T],
    input_sizes: &[usize],
    output_size: Option<&[usize]>,
    align_corners: bool,
    scale_factors: Option<&[f64]>,
    out: &mut [T],
) -> KernelResult {
    let g = geometry(input, input_sizes, output_size, scale_factors, out)?;
    let (ihw, ohw) = (g.h * g.w, g.oh * g.ow);
    let sh: T::Acc = linear_scale(g.h, g.oh, align_corners, g.scale_h);
    let sw: T::Acc = linear_scale(g.w, g.ow, align_corners, g.scale_w);
    for p in 0..g.planes {
        let plane = &input[p * ihw..(p + 1) * ihw];
        let oplane = &mut out[p * ohw..(p + 1) * ohw];
        for (oy, orow) in oplane.chunks_exact_mut(g.ow).enumerate() {
            let (y0, y1, ly0, ly1) = linear_taps(oy, g.h, sh, align_corners);
            let r0 = &plane[y0 * g.w..(y0 + 1) * g.w];
            let r1 = &plane[y1 * g.w..(y1 + 1) * g.w];
            for (ox, o) in orow.iter_mut().enumerate() {
                let (x0, x1, lx0, lx1) = linear_taps(ox, g.w, sw, align_corners);
                let top = lx0 * r0[x0].to_acc() + lx1 * r0[x1].to_acc();
                let bot = lx0 * r1[x0].to_acc() + lx1 * r1[x1].to_acc();
                *o = T::from_acc(ly0 * top + ly1 * bot);
            }
        }
    }
    Ok(())
}

/// One axis of `aten::_upsample_bilinear2d_aa`, as PyTorch's CPU kernel
/// (`_compute_indices_min_size_weights_aa`) computes it, in the element's
/// own precision (`A`: `f32` for `f32`, `f64` for `f64`): output `i`
/// averages the inputs within `support` of `center = scale · (i + ½)` with
/// the triangle filter stretched by the scale when downsampling,
/// normalised to sum to 1.
#[derive(Clone, Copy)]
struct AaAxis<A> {
    inp: usize,
    scale: A,
    support: A,
    invscale: A,
    max_taps: usize,
}

/// One output's window: its first input, count, centre and weight sum.
#[derive(Clone, Copy)]
struct AaWindow<A> {
    first: usize,
    count: usize,
    center: A,
    total: A,
}

impl<A: AccFloat> AaAxis<A> {
    fn new(inp: usize, out: usize, align_corners: bool, scale_factor: Option<f64>) -> Self {
        let scale: A = linear_scale(inp, out, align_corners, scale_factor);
        let down = scale.to_f64() >= 1.0;
        // PyTorch computes these in double and stores them in the element type.
        let support = if down { scale } else { A::ONE };
        let invscale = if down {
            A::from_f64(1.0 / scale.to_f64())
        } else {
            A::ONE
        };
        // Saturating: a tiny scale factor can make the support huge.
        let max_taps = (libm::ceil(support.to_f64()) as usize)
            .saturating_mul(2)
            .saturating_add(1);
        AaAxis {
            inp,
            scale,
            support,
            invscale,
            max_taps,
        }
    }

    /// The triangle filter at input `x` for a window centred at `center`.
    fn filter(&self, x: usize, center: A) -> A {
        let t = A::from_f64(((A::from_i64(x as i64) - center).to_f64() + 0.5) * self.invscale.to_f64());
        let t = if t < A::ZERO { A::ZERO - t } else { t };
        if t < A::ONE {
            A::ONE - t
        } else {
            A::ZERO
        }
    }

    fn window(&self, i: usize) -> AaWindow<A> {
        let center = A::from_f64(self.scale.to_f64() * (i as f64 + 0.5));
        // C's conversion to an integer truncates toward zero.
        let lo = ((center - self.support).to_f64() + 0.5) as i64;
        let hi = ((center + self.support).to_f64() + 0.5) as i64;
        let first = lo.max(0) as usize;
        let taps = i64::try_from(self.max_taps).unwrap_or(i64::MAX);
        let count = (hi.min(self.inp as i64) - first as i64).clamp(0, taps) as usize;
        let mut total = A::ZERO;
        for x in first..first + count {
            total += self.filter(x, center);
        }
        AaWindow {
            first,
            count,
            center,
            total,
        }
    }

    /// The normalised weight of input `x` in window `w`.
    fn weight(&self, w: &AaWindow<A>, x: usize) -> A {
        let f = self.filter(x, w.center);
        if w.total != A::ZERO {
            f / w.total
        } else {
            f
        }
    }
}

/// `Σ weight · value` over window `w` of `axis`, `value(x)` giving input
/// `x`, summed from the window's first input (PyTorch's order).
fn aa_sum<A: AccFloat>(axis: &AaAxis<A>, w: &AaWindow<A>, value: impl Fn(usize) -> A) -> A {
    let mut t = A::ZERO;
    for x in w.first..w.first + w.count {
        let v = value(x) * axis.weight(w, x);
        t = if x == w.first { v } else { t + v };
    }
    t
}

/// `aten::_upsample_bilinear2d_aa.out(input, output_size, align_corners,
/// scales_h?, scales_w?, out)`: antialiased bilinear resizing of `[N, C, H,
/// W]` to `[N, C, out_h, out_w]` as PyTorch's CPU kernel does it: separable,
/// the width first, then the height, each pass only when that dim's size
/// changes (an unchanged dim is copied whatever its scale), each rounded
/// to the element type. The width pass is recomputed for each output row
/// instead of kept in a buffer (the same sums, no scratch).
pub fn upsample_bilinear2d_aa<T: Float>(
    input: &[T],
    input_sizes: &[usize],
    out_hw: [usize; 2],
    align_corners: bool,
    scales: [Option<f64>; 2],
    out: &mut [T],
) -> KernelResult {
    let &[n, c, ih, iw] = input_sizes else {
        return Err(KernelError::ShapeMismatch);
    };
    let [oh, ow] = out_hw;
    let planes = n * c;
    if ih == 0 || iw == 0 || oh == 0 || ow == 0 || input.len() < planes * ih * iw || out.len() < planes * oh * ow {
        return Err(KernelError::ShapeMismatch);
    }
    let hx: AaAxis<T::Acc> = AaAxis::new(ih, oh, align_corners, scales[0]);
    let wx: AaAxis<T::Acc> = AaAxis::new(iw, ow, align_corners, scales[1]);
    for p in 0..planes {
        let src = &input[p * ih * iw..][..ih * iw];
        let dst = &mut out[p * oh * ow..][..oh * ow];
        // Row `r` of the width pass at output column `j`, rounded to `T`.
        let row = |r: usize, j: usize, win: Option<&AaWindow<T::Acc>>| -> T::Acc {
            match win {
                Some(win) => T::from_acc(aa_sum(&wx, win, |x| src[r * iw + x].to_acc())).to_acc(),
                None => src[r * iw + j].to_acc(),
            }
        };
        for j in 0..ow {
            let wwin = (ow != iw).then(|| wx.window(j));
            for i in 0..oh {
                let v = if oh != ih {
                    aa_sum(&hx, &hx.window(i), |r| row(r, j, wwin.as_ref()))
                } else {
                    row(i, j, wwin.as_ref())
                };
                dst[i * ow + j] = T::from_acc(v);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::{bf16, f16};
    use std::vec;
    use std::vec::Vec;

    #[test]
    fn output_sizes() {
        assert_eq!(
            upsample2d_output_sizes(&[1, 2, 3, 4], Some(&[6, 5]), None),
            Some([1, 2, 6, 5])
        );
        // ⌊3 · 1.5⌋ = 4, ⌊4 · 0.6⌋ = ⌊2.4⌋ = 2
        assert_eq!(
            upsample2d_output_sizes(&[1, 2, 3, 4], None, Some(&[1.5, 0.6])),
            Some([1, 2, 4, 2])
        );
        assert_eq!(
            upsample2d_output_sizes(&[1, 2, 3, 4], Some(&[6, 5]), Some(&[2.0, 2.0])),
            None
        );
        assert_eq!(upsample2d_output_sizes(&[1, 2, 3, 4], None, None), None);
        assert_eq!(upsample2d_output_sizes(&[1, 2, 3, 4], None, Some(&[0.1, 1.0])), None);
        assert_eq!(upsample2d_output_sizes(&[2, 3, 4], Some(&[6, 5]), None), None);
    }

    #[test]
    fn nearest_hand() {
        // 1×3 → 1×5 (output_size): scale 3/5 = 0.6; src = ⌊x · 0.6⌋ = 0,0,1,1,2
        let mut o = [0i32; 5];
        upsample_nearest2d(&[10, 20, 30], &[1, 1, 1, 3], Some(&[1, 5]), None, &mut o).unwrap();
        assert_eq!(o, [10, 10, 20, 20, 30]);
        // 2×2 → 4×4 doubles each pixel (the `dst >> 1` rule).
        let mut o = [0.0f32; 16];
        upsample_nearest2d(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 2, 2], None, Some(&[2.0, 2.0]), &mut o).unwrap();
        assert_eq!(o, [1., 1., 2., 2., 1., 1., 2., 2., 3., 3., 4., 4., 3., 3., 4., 4.]);
        // width 4 → scale factor 0.75 → ⌊3⌋ = 3 outputs, scale 1/0.75 = 4/3:
        // src = ⌊0⌋, ⌊1.33⌋, ⌊2.67⌋ = 0, 1, 2
        let mut o = [0i32; 3];
        upsample_nearest2d(&[1, 2, 3, 4], &[1, 1, 1, 4], None, Some(&[1.0, 0.75]), &mut o).unwrap();
        assert_eq!(o, [1, 2, 3]);
    }

    #[test]
    fn bilinear_hand() {
        // row [0, 4] → width 4, half-pixel, scale 0.5:
        // src = max(0.5·(x+0.5) − 0.5, 0) = 0, 0.25, 0.75, 1.25
        // → 0, 1, 3, then i0 = 1 (last) → 4
        let mut o = [0.0f32; 4];
        upsample_bilinear2d(&[0.0f32, 4.0], &[1, 1, 1, 2], Some(&[1, 4]), false, None, &mut o).unwrap();
        assert_eq!(o, [0.0, 1.0, 3.0, 4.0]);
        // align_corners: scale (2−1)/(4−1) = 1/3: src = 0, 1/3, 2/3, 1 → 0, 4/3, 8/3, 4
        upsample_bilinear2d(&[0.0f32, 4.0], &[1, 1, 1, 2], Some(&[1, 4]), true, None, &mut o).unwrap();
        let want = [0.0f32, 4.0 / 3.0, 8.0 / 3.0, 4.0];
        for (g, w) in o.iter().zip(want) {
            assert!((g - w).abs() < 1e-6);
        }
        // 2×2 [[0, 1], [2, 3]] → 1×1 with align_corners: src (0, 0) → 0;
        // without: scale 2, src = 2·0.5 − 0.5 = 0.5 → mean of all four = 1.5
        let mut o = [0.0f32; 1];
        upsample_bilinear2d(
            &[0.0f32, 1.0, 2.0, 3.0],
            &[1, 1, 2, 2],
            Some(&[1, 1]),
            true,
            None,
            &mut o,
        )
        .unwrap();
        assert_eq!(o, [0.0]);
        upsample_bilinear2d(
            &[0.0f32, 1.0, 2.0, 3.0],
            &[1, 1, 2, 2],
            Some(&[1, 1]),
            false,
            None,
            &mut o,
        )
        .unwrap();
        assert_eq!(o, [1.5]);
    }

    /// Independent bilinear reference in f64: interpolate with the
    /// coordinate rules restated from PyTorch.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        x: &[f64],
        planes: usize,
        h: usize,
        w: usize,
        oh: usize,
        ow: usize,
        ac: bool,
        sf: Option<(f64, f64)>,
    ) -> Vec<f64> {
        let coord = |dst: usize, inp: usize, out: usize, s: Option<f64>| -> f64 {
            if ac {
                if out > 1 {
                    dst as f64 * (inp - 1) as f64 / (out - 1) as f64
                } else {
                    0.0
                }
            } else {
                let scale = s.map_or(inp as f64 / out as f64, |s| 1.0 / s);
                ((dst as f64 + 0.5) * scale - 0.5).max(0.0)
            }
        };
        let mut r = vec![];
        for p in 0..planes {
            for y in 0..oh {
                let cy = coord(y, h, oh, sf.map(|s| s.0)).min((h - 1) as f64);
                let (y0, fy) = (cy.floor() as usize, cy - cy.floor());
                let y1 = (y0 + 1).min(h - 1);
                for xx in 0..ow {
                    let cx = coord(xx, w, ow, sf.map(|s| s.1)).min((w - 1) as f64);
                    let (x0, fx) = (cx.floor() as usize, cx - cx.floor());
                    let x1 = (x0 + 1).min(w - 1);
                    let at = |yy: usize, xq: usize| x[p * h * w + yy * w + xq];
                    let top = at(y0, x0) * (1.0 - fx) + at(y0, x1) * fx;
                    let bot = at(y1, x0) * (1.0 - fx) + at(y1, x1) * fx;
                    r.push(top * (1.0 - fy) + bot * fy);
                }
            }
        }
        r
    }

    fn random_bilinear<T: Float>(tol: f64) {
        let mut seed = 77u64;
        for &(h, w, oh, ow) in &[
            (3usize, 5usize, 7usize, 4usize),
            (4, 4, 8, 8),
            (6, 7, 3, 2),
            (1, 3, 2, 5),
            (5, 2, 5, 9),
        ] {
            let planes = 3;
            let xs: Vec<T> = (0..planes * h * w)
                .map(|_| {
                    crate::testing::lcg_step(&mut seed);
                    T::from_f64(((seed >> 40) as f64 / (1u64 << 24) as f64) * 4.0 - 2.0)
                })
                .collect();
            let xr: Vec<f64> = xs.iter().map(|v| v.to_f64()).collect();
            for ac in [false, true] {
                let want = reference(&xr, planes, h, w, oh, ow, ac, None);
                let mut o = vec![T::default(); planes * oh * ow];
                upsample_bilinear2d(&xs, &[1, planes, h, w], Some(&[oh, ow]), ac, None, &mut o).unwrap();
                for (g, wv) in o.iter().zip(&want) {
                    assert!(
                        (g.to_f64() - wv).abs() <= tol,
                        "{h}x{w}->{oh}x{ow} ac={ac}: {} vs {wv}",
                        g.to_f64()
                    );
                }
            }
            // scale factors 2.5 × 1.5 (scale used = 1/factor)
            let sz = upsample2d_output_sizes(&[1, planes, h, w], None, Some(&[2.5, 1.5])).unwrap();
            let want = reference(&xr, planes, h, w, sz[2], sz[3], false, Some((2.5, 1.5)));
            let mut o = vec![T::default(); planes * sz[2] * sz[3]];
            upsample_bilinear2d(&xs, &[1, planes, h, w], None, false, Some(&[2.5, 1.5]), &mut o).unwrap();
            for (g, wv) in o.iter().zip(&want) {
                assert!((g.to_f64() - wv).abs() <= tol);
            }
        }
    }

    #[test]
    fn bilinear_random_types() {
        random_bilinear::<f32>(1e-5);
        random_bilinear::<f64>(1e-12);
        random_bilinear::<f16>(1e-2);
        random_bilinear::<bf16>(4e-2);
    }

    #[test]
    fn nearest_random_against_formula() {
        for &(h, w, oh, ow) in &[
            (3usize, 5usize, 7usize, 4usize),
            (4, 4, 8, 8),
            (6, 7, 3, 2),
            (5, 5, 5, 11),
        ] {
            let x: Vec<i64> = (0..2 * h * w).map(|i| i as i64).collect();
            let mut o = vec![0i64; 2 * oh * ow];
            upsample_nearest2d(&x, &[2, 1, h, w], Some(&[oh, ow]), None, &mut o).unwrap();
            for p in 0..2 {
                for y in 0..oh {
                    for xx in 0..ow {
                        // src = min(⌊dst · in/out⌋, in − 1), in f64 for these small sizes
                        let sy = ((y as f64 * h as f64 / oh as f64).floor() as usize).min(h - 1);
                        let sx = ((xx as f64 * w as f64 / ow as f64).floor() as usize).min(w - 1);
                        assert_eq!(o[p * oh * ow + y * ow + xx], x[p * h * w + sy * w + sx]);
                    }
                }
            }
        }
    }

    #[test]
    fn antialiased_resize_edges() {
        let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let mut out = vec![0.0f32; 12];
        // Both dims unchanged: a copy, whatever the scales say.
        upsample_bilinear2d_aa(&x, &[1, 1, 3, 4], [3, 4], true, [Some(0.1), Some(7.0)], &mut out).unwrap();
        assert_eq!(out, x);
        // Downsampling a row 4 → 2: the triangle stretched to a support of
        // 2 around centre 1 weighs inputs 0, 1, 2 by ¾, ¾, ¼ (then
        // normalised), as eager PyTorch gives (0.7143, 2.2857).
        let mut half = vec![0.0f32; 6];
        upsample_bilinear2d_aa(&x, &[1, 1, 3, 4], [3, 2], false, [None, None], &mut half).unwrap();
        assert!((half[0] - 1.25 / 1.75).abs() < 1e-6, "{half:?}");
        assert!((half[1] - 4.0 / 1.75).abs() < 1e-6, "{half:?}");
        // A vanishing scale factor (a huge support: eager PyTorch gives 0)
        // and an empty input are handled without overflow.
        let mut one = vec![1.0f32; 3];
        upsample_bilinear2d_aa(&x, &[1, 1, 3, 4], [3, 1], false, [None, Some(1e-300)], &mut one).unwrap();
        assert_eq!(one, [0.0; 3]);
        assert_eq!(
            upsample_bilinear2d_aa(&x, &[1, 1, 0, 4], [3, 1], false, [None, None], &mut one),
            Err(KernelError::ShapeMismatch)
        );
    }
}
