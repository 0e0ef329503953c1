//! `aten::grid_sampler_2d.out`: samples `input` `[N, C, H, W]` at the
//! points of `grid` `[N, H_out, W_out, 2]` (x then y, normalized to
//! `[-1, 1]`) into `[N, C, H_out, W_out]`, bilinearly or from the nearest
//! pixel, with zeros, border or reflection padding (PyTorch's
//! `interpolation_mode` 0 and 1, `padding_mode` 0, 1 and 2; bicubic, mode
//! 2, is refused). Coordinates are computed in [`Float::Acc`] the way
//! PyTorch's CPU kernel does, so that nearest sampling picks the same
//! pixel at ties.

use crate::num::{AccFloat, Element, Float};
use crate::scalar::FloatMath;
use crate::{KernelError, KernelResult};

/// Output sizes `[N, C, H_out, W_out]`, or `None` unless `input` is 4-d
/// with non-empty planes, `grid` is `[N, H_out, W_out, 2]` for the same
/// `N`, and the modes are bilinear or nearest with a known padding.
pub fn grid_sampler_2d_output_sizes(
    input_sizes: &[usize],
    grid_sizes: &[usize],
    interpolation_mode: i64,
    padding_mode: i64,
) -> Option<[usize; 4]> {
    let (&[n, c, h, w], &[gn, oh, ow, 2]) = (input_sizes, grid_sizes) else {
        return None;
    };
    let known = (0..=1).contains(&interpolation_mode) && (0..=2).contains(&padding_mode);
    (known && gn == n && h > 0 && w > 0).then_some([n, c, oh, ow])
}

/// PyTorch's `reflect_coordinates`: `x` reflected into `[low, high]`, given
/// as twice their values.
fn reflect<A: AccFloat + FloatMath + PartialOrd>(x: A, twice_low: i64, twice_high: i64) -> A {
    if twice_low == twice_high {
        return A::ZERO;
    }
    let half = A::from_f32(0.5);
    let min = A::from_f64(twice_low as f64) * half;
    let span = A::from_f64((twice_high - twice_low) as f64) * half;
    let x = (x - min).abs_();
    let extra = x.fmod_(span);
    let flips = (x / span).floor_();
    if flips.fmod_(A::from_f32(2.0)) == A::ZERO {
        extra + min
    } else {
        span - extra + min
    }
}

/// The source coordinate of normalized `x` along a dim of `size`.
fn source<A: AccFloat + FloatMath + PartialOrd>(x: A, size: usize, padding_mode: i64, align_corners: bool) -> A {
    let one = A::ONE;
    let half = A::from_f32(0.5);
    let s = A::from_f64(size as f64);
    let mut c = if align_corners {
        (x + one) * ((s - one) * half)
    } else {
        (x + one) * (s * half) - half
    };
    let clip = |c: A| {
        let hi = s - one;
        if c < A::ZERO {
            A::ZERO
        } else if c > hi {
            hi
        } else {
            c
        }
    };
    match padding_mode {
        1 => c = clip(c),
        2 => {
            let size = size as i64;
            c = if align_corners {
                reflect(c, 0, 2 * (size - 1))
            } else {
                reflect(c, -1, 2 * size - 1)
            };
            c = clip(c);
        }
        _ => {}
    }
    c
}

/// A whole coordinate as an index, far coordinates brought within 2 of
/// the edge (their taps read zeros all the same) so that a neighbour's
/// index cannot overflow.
fn index<A: Element>(v: A, size: usize) -> i64 {
    v.to_f64().clamp(-2.0, size as f64 + 1.0) as i64
}

/// `aten::grid_sampler_2d.out(input, grid, interpolation_mode,
/// padding_mode, align_corners, out)`; see the module docs. Points outside
/// the input read zeros (with border or reflection padding they were
/// clipped inside first). [`KernelError::ShapeMismatch`] for shapes or
/// modes [`grid_sampler_2d_output_sizes`] refuses or short buffers.
#[allow(clippy::too_many_arguments)]
pub fn grid_sampler_2d<T: Float>(
    input: &[T],
    input_sizes: &[usize],
    grid: &[T],
    grid_sizes: &[usize],
    interpolation_mode: i64,
    padding_mode: i64,
    align_corners: bool,
    out: &mut [T],
) -> KernelResult
where
    T::Acc: FloatMath + PartialOrd,
{
    let [n, c, oh, ow] = grid_sampler_2d_output_sizes(input_sizes, grid_sizes, interpolation_mode, padding_mode)
        .ok_or(KernelError::ShapeMismatch)?;
    let (h, w) = (input_sizes[2], input_sizes[3]);
    let (hw, ohw) = (h * w, oh * ow);
    if input.len() < n * c * hw || grid.len() < n * ohw * 2 || out.len() < n * c * ohw {
        return Err(KernelError::ShapeMismatch);
    }
    let at = |plane: &[T], y: i64, x: i64| -> T::Acc {
        if y >= 0 && y < h as i64 && x >= 0 && x < w as i64 {
            plane[y as usize * w + x as usize].to_acc()
        } else {
            T::Acc::ZERO
        }
    };
    for b in 0..n {
        for p in 0..ohw {
            let g = &grid[(b * ohw + p) * 2..][..2];
            let ix = source(g[0].to_acc(), w, padding_mode, align_corners);
            let iy = source(g[1].to_acc(), h, padding_mode, align_corners);
            for ch in 0..c {
                let plane = &input[(b * c + ch) * hw..][..hw];
                let v = if interpolation_mode == 1 {
                    at(plane, index(iy.rint_(), h), index(ix.rint_(), w))
                } else {
                    let (x0, y0) = (ix.floor_(), iy.floor_());
                    let (fx, fy) = (ix - x0, iy - y0);
                    let (gx, gy) = (T::Acc::ONE - fx, T::Acc::ONE - fy);
                    let (x0, y0) = (index(x0, w), index(y0, h));
                    at(plane, y0, x0) * gx * gy
                        + at(plane, y0, x0 + 1) * fx * gy
                        + at(plane, y0 + 1, x0) * gx * fy
                        + at(plane, y0 + 1, x0 + 1) * fx * fy
                };
                out[(b * c + ch) * ohw + p] = T::from_acc(v);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::testing::Lcg;
    use std::vec;

    /// PyTorch's own values (torch 2.14.1, `F.grid_sample` on
    /// `arange(12).view(1, 1, 3, 4)`) at hand-picked points, every mode.
    #[test]
    fn matches_pytorch_at_hand_picked_points() {
        let input: std::vec::Vec<f32> = (0..12).map(|v| v as f32).collect();
        // (x, y) pairs: inside; on a tie for nearest without aligned
        // corners (x = 2.5: half to even gives 2, half away 3); outside
        // left/top; far outside right/bottom.
        let grid = [0.3f32, -0.2, 0.5, 0.0, -1.3, -1.1, 1.7, 2.9];
        let cases: [(i64, i64, bool, [f32; 4]); 6] = [
            (0, 0, true, [5.15, 6.25, 0.0, 0.0]),
            (0, 0, false, [4.9, 6.5, 0.0, 0.0]),
            (1, 1, false, [6.0, 6.0, 0.0, 11.0]),
            (0, 2, true, [5.15, 6.25, 0.85, 2.35]),
            (1, 2, false, [6.0, 6.0, 0.0, 2.0]),
            (0, 1, false, [4.9, 6.5, 0.0, 11.0]),
        ];
        for (mode, padding, align, want) in cases {
            let mut out = [f32::NAN; 4];
            grid_sampler_2d(
                &input,
                &[1, 1, 3, 4],
                &grid,
                &[1, 1, 4, 2],
                mode,
                padding,
                align,
                &mut out,
            )
            .unwrap();
            for (g, w) in out.iter().zip(want) {
                assert!(
                    (g - w).abs() < 1e-5,
                    "mode {mode} padding {padding} align {align}: {out:?} vs {want:?}"
                );
            }
        }
    }

    /// Bilinear sampling at grid points that hit pixel centers reproduces
    /// the input, for either corner convention; bicubic is refused.
    #[test]
    fn pixel_centers_reproduce_the_input() {
        let mut rng = Lcg(4);
        let (h, w) = (5usize, 7usize);
        let input = rng.vec(2 * 3 * h * w);
        for align in [true, false] {
            let norm = |i: usize, size: usize| -> f32 {
                if align {
                    2.0 * i as f32 / (size - 1) as f32 - 1.0
                } else {
                    (2.0 * i as f32 + 1.0) / size as f32 - 1.0
                }
            };
            let mut grid = vec![];
            for _ in 0..2 {
                for y in 0..h {
                    for x in 0..w {
                        grid.extend([norm(x, w), norm(y, h)]);
                    }
                }
            }
            for padding in 0..3 {
                let mut out = vec![0.0f32; input.len()];
                grid_sampler_2d(&input, &[2, 3, h, w], &grid, &[2, h, w, 2], 0, padding, align, &mut out).unwrap();
                for (g, x) in out.iter().zip(&input) {
                    assert!((g - x).abs() < 1e-5, "{g} vs {x}");
                }
            }
        }
        let mut out = vec![0.0f32; input.len()];
        assert!(grid_sampler_2d(&input, &[2, 3, h, w], &input, &[2, h, w, 2], 2, 0, true, &mut out).is_err());
        // Points far outside overflow no index. As in PyTorch (torch
        // 2.14.1 on the same grid), nearest reads zeros and bilinear gives
        // NaN (its weights are inf − inf).
        let far = [f32::MAX, -f32::MAX, 1e30, f32::INFINITY];
        let mut out = [0.0f32; 6];
        grid_sampler_2d(&input, &[2, 3, h, w], &far, &[2, 1, 1, 2], 1, 0, false, &mut out).unwrap();
        assert_eq!(out, [0.0; 6]);
        grid_sampler_2d(&input, &[2, 3, h, w], &far, &[2, 1, 1, 2], 0, 0, false, &mut out).unwrap();
        assert!(out.iter().all(|v| v.is_nan()), "{out:?}");
    }
}
