//! 2-d and 3-d pooling: `aten::max_pool2d_with_indices.out`,
//! `aten::max_pool2d`, `aten::avg_pool2d.out`,
//! `aten::_adaptive_avg_pool2d.out`, `aten::max_pool3d_with_indices.out`
//! and `aten::avg_pool3d.out`.
//!
//! Inputs are contiguous `[N, C, H, W]` or `[C, H, W]` (3-d: `[N, C, T, H,
//! W]` or `[C, T, H, W]`); every `H × W` plane (`T × H × W` volume) is
//! pooled independently into an `H_out × W_out` plane of the output.
//! `kernel_size`, `stride`, `padding` and `dilation` hold one value (for
//! every dim) or one per dim; an empty `stride` means `kernel_size`. A 2-d
//! pooling is a 3-d one with a window of depth 1.

use crate::num::{AccFloat, Element, Float, Sizes};
use crate::{KernelError, KernelResult};

/// Window parameters of one spatial dimension.
#[derive(Clone, Copy, Debug)]
struct Dim {
    inp: usize,
    out: usize,
    k: usize,
    s: usize,
    p: usize,
    d: usize,
}

/// The resolved geometry of a pooling: `planes` independent planes (or
/// volumes; `t` is the identity in 2-d).
#[derive(Clone, Copy, Debug)]
struct Geom {
    planes: usize,
    t: Dim,
    h: Dim,
    w: Dim,
}

/// PyTorch's `pooling_output_shape`: the number of windows along one dim,
/// `⌊(in + 2·pad − dil·(k − 1) − 1 [+ stride − 1 if ceil_mode]) / stride⌋ + 1`,
/// minus one in ceil mode if the last window would start at or past
/// `in + pad` (a window must start inside the input or the left padding).
/// `None` if the result is below 1 or a parameter is zero.
pub fn pooling_output_len(
    inp: usize,
    k: usize,
    stride: usize,
    pad: usize,
    dilation: usize,
    ceil_mode: bool,
) -> Option<usize> {
    if k == 0 || stride == 0 || dilation == 0 {
        return None;
    }
    let (i, k, s, p, d) = (inp as i128, k as i128, stride as i128, pad as i128, dilation as i128);
    let num = i + 2 * p - d * (k - 1) - 1 + if ceil_mode { s - 1 } else { 0 };
    let mut out = num.div_euclid(s) + 1;
    if ceil_mode && (out - 1) * s >= i + p {
        out -= 1;
    }
    if out < 1 {
        return None;
    }
    usize::try_from(out).ok()
}

/// A parameter list for `n` (2 or 3) spatial dims to `[t, h, w]`: one
/// value for every dim or one per dim; empty gives `default`. In 2-d, `t`
/// is `identity`.
fn dims(list: &[usize], n: usize, identity: usize, default: Option<[usize; 3]>) -> Option<[usize; 3]> {
    match (n, list) {
        (_, []) => default,
        (2, [v]) => Some([identity, *v, *v]),
        (2, [h, w]) => Some([identity, *h, *w]),
        (3, [v]) => Some([*v, *v, *v]),
        (3, [t, h, w]) => Some([*t, *h, *w]),
        _ => None,
    }
}

/// `(planes, [T, H, W])` of an input of `n` (2 or 3) spatial dims, with or
/// without a batch, with non-empty planes (`T` is 1 in 2-d).
fn planes_of(input_sizes: &[usize], n: usize) -> Option<(usize, [usize; 3])> {
    let r = input_sizes.len();
    if r != n + 1 && r != n + 2 {
        return None;
    }
    let planes = input_sizes[..r - n].iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    let mut thw = [1usize; 3];
    thw[3 - n..].copy_from_slice(&input_sizes[r - n..]);
    // PyTorch requires non-zero dims except the batch.
    if input_sizes[r - n - 1] == 0 || thw.contains(&0) {
        return None;
    }
    Some((planes, thw))
}

fn geometry(
    input_sizes: &[usize],
    n: usize,
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    ceil_mode: bool,
) -> Option<Geom> {
    let (planes, inp) = planes_of(input_sizes, n)?;
    let k = dims(kernel_size, n, 1, None)?;
    let s = dims(stride, n, 1, Some(k))?;
    let p = dims(padding, n, 0, None)?;
    let d = dims(dilation, n, 1, None)?;
    let dim = |i: usize| -> Option<Dim> {
        // "pad should be at most half of effective kernel size"
        if p[i] > k[i] / 2 {
            return None;
        }
        let out = pooling_output_len(inp[i], k[i], s[i], p[i], d[i], ceil_mode)?;
        Some(Dim {
            inp: inp[i],
            out,
            k: k[i],
            s: s[i],
            p: p[i],
            d: d[i],
        })
    };
    Some(Geom {
        planes,
        t: dim(0)?,
        h: dim(1)?,
        w: dim(2)?,
    })
}

/// The input's sizes with the last `spatial.len()` replaced.
fn out_sizes(input_sizes: &[usize], spatial: &[usize]) -> Option<Sizes> {
    let mut s = Sizes::new(input_sizes)?;
    let r = s.rank();
    for (i, &v) in spatial.iter().enumerate() {
        s.set(r - spatial.len() + i, v);
    }
    Some(s)
}

/// Output sizes of `aten::max_pool2d(_with_indices)` (the indices have the
/// same shape), or `None` for invalid arguments: input not 3-d/4-d or with
/// an empty channel/spatial dim, zero kernel/stride/dilation, padding above
/// half the kernel size, or an output size below 1. See
/// [`pooling_output_len`] for the formula.
pub fn max_pool2d_output_sizes(
    input_sizes: &[usize],
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    ceil_mode: bool,
) -> Option<Sizes> {
    let g = geometry(input_sizes, 2, kernel_size, stride, padding, dilation, ceil_mode)?;
    out_sizes(input_sizes, &[g.h.out, g.w.out])
}

/// Output sizes of `aten::max_pool3d(_with_indices)`: as
/// [`max_pool2d_output_sizes`] over `[N, C, T, H, W]` or `[C, T, H, W]`.
pub fn max_pool3d_output_sizes(
    input_sizes: &[usize],
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    ceil_mode: bool,
) -> Option<Sizes> {
    let g = geometry(input_sizes, 3, kernel_size, stride, padding, dilation, ceil_mode)?;
    out_sizes(input_sizes, &[g.t.out, g.h.out, g.w.out])
}

/// Output sizes of `aten::avg_pool3d`: as [`avg_pool2d_output_sizes`] in 3-d.
pub fn avg_pool3d_output_sizes(
    input_sizes: &[usize],
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    ceil_mode: bool,
    divisor_override: Option<i64>,
) -> Option<Sizes> {
    if divisor_override == Some(0) {
        return None;
    }
    max_pool3d_output_sizes(input_sizes, kernel_size, stride, padding, &[1], ceil_mode)
}

/// Output sizes of `aten::avg_pool2d` (as [`max_pool2d_output_sizes`] with
/// a dilation of 1), or `None`; a `divisor_override` of 0 is invalid.
pub fn avg_pool2d_output_sizes(
    input_sizes: &[usize],
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    ceil_mode: bool,
    divisor_override: Option<i64>,
) -> Option<Sizes> {
    if divisor_override == Some(0) {
        return None;
    }
    max_pool2d_output_sizes(input_sizes, kernel_size, stride, padding, &[1], ceil_mode)
}

/// The taps of a (dilated) window along one dim that lie inside the
/// input: `first, first + d, …` below `end`.
fn taps(dim: &Dim, o: usize) -> (isize, isize) {
    let start = (o * dim.s) as isize - dim.p as isize;
    let end = (start + ((dim.k - 1) * dim.d) as isize + 1).min(dim.inp as isize);
    let mut first = start;
    while first < 0 {
        first += dim.d as isize;
    }
    (first, end)
}

/// Shared max-pool loop over `n` (2 or 3) spatial dims; `indices` is
/// written when given.
fn max_pool_impl<T: Element>(
    input: &[T],
    input_sizes: &[usize],
    n: usize,
    (kernel_size, stride, padding, dilation, ceil_mode): (&[usize], &[usize], &[usize], &[usize], bool),
    out: &mut [T],
    mut indices: Option<&mut [i64]>,
) -> KernelResult {
    let g = geometry(input_sizes, n, kernel_size, stride, padding, dilation, ceil_mode)
        .ok_or(KernelError::ShapeMismatch)?;
    let (t, h, w) = (g.t, g.h, g.w);
    let (ivol, ovol) = (t.inp * h.inp * w.inp, t.out * h.out * w.out);
    if input.len() < g.planes * ivol
        || out.len() < g.planes * ovol
        || indices.as_ref().is_some_and(|ix| ix.len() < g.planes * ovol)
    {
        return Err(KernelError::ShapeMismatch);
    }
    let neg_inf = T::from_f64(f64::NEG_INFINITY);
    let (hi, wi) = (h.inp as isize, w.inp as isize);
    let mut o = 0;
    for pl in 0..g.planes {
        let volume = &input[pl * ivol..(pl + 1) * ivol];
        for oz in 0..t.out {
            let (zs, zend) = taps(&t, oz);
            for oy in 0..h.out {
                let (ys, yend) = taps(&h, oy);
                for ox in 0..w.out {
                    let (xs, xend) = taps(&w, ox);
                    let mut best = neg_inf;
                    let mut best_ix = (zs * hi + ys) * wi + xs;
                    let mut z = zs;
                    while z < zend {
                        let mut y = ys;
                        while y < yend {
                            let at = (z * hi + y) * wi;
                            let row = &volume[at as usize..(at + wi) as usize];
                            let mut x = xs;
                            while x < xend {
                                let v = row[x as usize];
                                // `v != v` is NaN: a NaN always wins (the last one).
                                #[allow(clippy::eq_op)]
                                if v > best || v != v {
                                    best = v;
                                    best_ix = at + x;
                                }
                                x += w.d as isize;
                            }
                            y += h.d as isize;
                        }
                        z += t.d as isize;
                    }
                    out[o] = best;
                    if let Some(ix) = indices.as_deref_mut() {
                        ix[o] = best_ix as i64;
                    }
                    o += 1;
                }
            }
        }
    }
    Ok(())
}

/// `aten::max_pool2d_with_indices.out(self, kernel_size, stride, padding,
/// dilation, ceil_mode, out, indices)`.
///
/// `input` has shape `input_sizes` (`[N, C, H, W]` or `[C, H, W]`); `out`
/// and `indices` have the shape of [`max_pool2d_output_sizes`]. Each output
/// is the maximum over its (dilated) window, padding counting as −∞; NaN
/// wins over everything (the last NaN of the window, in row-major order).
/// `indices` holds the position of the maximum in its flattened `H × W`
/// input plane (`y · W + x`); a window whose elements all equal −∞ reports
/// its first in-bounds position. Works for any element type (integers use
/// their minimum for −∞).
#[allow(clippy::too_many_arguments)]
pub fn max_pool2d_with_indices<T: Element>(
    input: &[T],
    input_sizes: &[usize],
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    ceil_mode: bool,
    out: &mut [T],
    indices: &mut [i64],
) -> KernelResult {
    let window = (kernel_size, stride, padding, dilation, ceil_mode);
    max_pool_impl(input, input_sizes, 2, window, out, Some(indices))
}

/// `aten::max_pool3d_with_indices.out(self, kernel_size, stride, padding,
/// dilation, ceil_mode, out, indices)`: [`max_pool2d_with_indices`] over
/// `[N, C, T, H, W]` or `[C, T, H, W]`, `indices` holding the position in
/// the flattened `T × H × W` volume (`(z · H + y) · W + x`).
#[allow(clippy::too_many_arguments)]
pub fn max_pool3d_with_indices<T: Element>(
    input: &[T],
    input_sizes: &[usize],
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    ceil_mode: bool,
    out: &mut [T],
    indices: &mut [i64],
) -> KernelResult {
    let window = (kernel_size, stride, padding, dilation, ceil_mode);
    max_pool_impl(input, input_sizes, 3, window, out, Some(indices))
}

/// `aten::max_pool2d(self, kernel_size, stride, padding, dilation,
/// ceil_mode)`: the values of [`max_pool2d_with_indices`] without indices.
#[allow(clippy::too_many_arguments)]
pub fn max_pool2d<T: Element>(
    input: &[T],
    input_sizes: &[usize],
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    ceil_mode: bool,
    out: &mut [T],
) -> KernelResult {
    let window = (kernel_size, stride, padding, dilation, ceil_mode);
    max_pool_impl(input, input_sizes, 2, window, out, None)
}

/// `aten::avg_pool2d.out(self, kernel_size, stride, padding, ceil_mode,
/// count_include_pad, divisor_override, out)`.
///
/// `input` has shape `input_sizes` (`[N, C, H, W]` or `[C, H, W]`), `out`
/// that of [`avg_pool2d_output_sizes`]. Each output is the sum of the
/// window's in-bounds elements (accumulated in [`Float::Acc`]) divided by
/// `divisor_override` if given, else by the window's size clipped to the
/// padded input (`count_include_pad`) or to the input itself (otherwise).
/// A window with no in-bounds element (possible in ceil mode) gives 0.
#[allow(clippy::too_many_arguments)]
pub fn avg_pool2d<T: Float>(
    input: &[T],
    input_sizes: &[usize],
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Option<i64>,
    out: &mut [T],
) -> KernelResult {
    let window = (kernel_size, stride, padding, ceil_mode);
    avg_pool_impl(input, input_sizes, 2, window, count_include_pad, divisor_override, out)
}

/// `aten::avg_pool3d.out(self, kernel_size, stride, padding, ceil_mode,
/// count_include_pad, divisor_override, out)`: [`avg_pool2d`] over `[N, C,
/// T, H, W]` or `[C, T, H, W]`, the window's size being its volume.
#[allow(clippy::too_many_arguments)]
pub fn avg_pool3d<T: Float>(
    input: &[T],
    input_sizes: &[usize],
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Option<i64>,
    out: &mut [T],
) -> KernelResult {
    let window = (kernel_size, stride, padding, ceil_mode);
    avg_pool_impl(input, input_sizes, 3, window, count_include_pad, divisor_override, out)
}

/// The in-bounds range of one window along `dim` and the size of its part
/// inside the padded input.
fn avg_range(dim: &Dim, o: usize) -> (isize, isize, isize) {
    let (inp, p) = (dim.inp as isize, dim.p as isize);
    let start = (o * dim.s) as isize - p;
    let end = (start + dim.k as isize).min(inp + p);
    (start.max(0), end.min(inp), end - start)
}

fn avg_pool_impl<T: Float>(
    input: &[T],
    input_sizes: &[usize],
    n: usize,
    (kernel_size, stride, padding, ceil_mode): (&[usize], &[usize], &[usize], bool),
    count_include_pad: bool,
    divisor_override: Option<i64>,
    out: &mut [T],
) -> KernelResult {
    if divisor_override == Some(0) {
        return Err(KernelError::ShapeMismatch);
    }
    let g =
        geometry(input_sizes, n, kernel_size, stride, padding, &[1], ceil_mode).ok_or(KernelError::ShapeMismatch)?;
    let (t, h, w) = (g.t, g.h, g.w);
    let (ivol, ovol) = (t.inp * h.inp * w.inp, t.out * h.out * w.out);
    if input.len() < g.planes * ivol || out.len() < g.planes * ovol {
        return Err(KernelError::ShapeMismatch);
    }
    let mut o = 0;
    for pl in 0..g.planes {
        let volume = &input[pl * ivol..(pl + 1) * ivol];
        for oz in 0..t.out {
            let (z0, z1, pt_size) = avg_range(&t, oz);
            for oy in 0..h.out {
                let (y0, y1, ph_size) = avg_range(&h, oy);
                for ox in 0..w.out {
                    let (x0, x1, pw_size) = avg_range(&w, ox);
                    let dst = &mut out[o];
                    o += 1;
                    if z0 >= z1 || y0 >= y1 || x0 >= x1 {
                        *dst = T::from_acc(T::Acc::ZERO);
                        continue;
                    }
                    let mut sum = T::Acc::ZERO;
                    for z in z0..z1 {
                        for y in y0..y1 {
                            let at = (z as usize * h.inp + y as usize) * w.inp;
                            for &v in &volume[at + x0 as usize..at + x1 as usize] {
                                sum += v.to_acc();
                            }
                        }
                    }
                    let div = match divisor_override {
                        Some(d) => d,
                        None if count_include_pad => (pt_size * ph_size * pw_size) as i64,
                        None => ((z1 - z0) * (y1 - y0) * (x1 - x0)) as i64,
                    };
                    *dst = T::from_acc(sum / T::Acc::from_i64(div));
                }
            }
        }
    }
    Ok(())
}

/// Output sizes of `aten::_adaptive_avg_pool2d` for `output_size`
/// (`[H_out, W_out]`): the input's sizes with the last two replaced, or
/// `None` if the input is not 3-d/4-d with non-empty channel and spatial
/// dims or `output_size` does not have two elements.
pub fn adaptive_avg_pool2d_output_sizes(input_sizes: &[usize], output_size: &[usize]) -> Option<Sizes> {
    planes_of(input_sizes, 2)?;
    let &[oh, ow] = output_size else { return None };
    out_sizes(input_sizes, &[oh, ow])
}

/// `aten::_adaptive_avg_pool2d.out(self, output_size, out)`: output cell
/// `(i, j)` averages input rows `⌊i·H/H_out⌋ .. ⌈(i+1)·H/H_out⌉` and columns
/// likewise (accumulating in [`Float::Acc`]). `input` is `[N, C, H, W]` or
/// `[C, H, W]`; `out` has the shape of [`adaptive_avg_pool2d_output_sizes`].
pub fn adaptive_avg_pool2d<T: Float>(
    input: &[T],
    input_sizes: &[usize],
    output_size: &[usize],
    out: &mut [T],
) -> KernelResult {
    adaptive_avg_pool2d_output_sizes(input_sizes, output_size).ok_or(KernelError::ShapeMismatch)?;
    let (planes, [_, ih, iw]) = planes_of(input_sizes, 2).ok_or(KernelError::ShapeMismatch)?;
    let (oh, ow) = (output_size[0], output_size[1]);
    let (ihw, ohw) = (ih * iw, oh * ow);
    if input.len() < planes * ihw || out.len() < planes * ohw {
        return Err(KernelError::ShapeMismatch);
    }
    let start = |a: usize, o: usize, i: usize| a * i / o;
    let end = |a: usize, o: usize, i: usize| ((a + 1) * i).div_ceil(o);
    for pl in 0..planes {
        let plane = &input[pl * ihw..(pl + 1) * ihw];
        for oy in 0..oh {
            let (y0, y1) = (start(oy, oh, ih), end(oy, oh, ih));
            for ox in 0..ow {
                let (x0, x1) = (start(ox, ow, iw), end(ox, ow, iw));
                let mut sum = T::Acc::ZERO;
                for y in y0..y1 {
                    for &v in &plane[y * iw + x0..y * iw + x1] {
                        sum += v.to_acc();
                    }
                }
                let cnt = ((y1 - y0) * (x1 - x0)) as i64;
                out[pl * ohw + oy * ow + ox] = T::from_acc(sum / T::Acc::from_i64(cnt));
            }
        }
    }
    Ok(())
}

/// `aten::max_pool2d_with_indices_backward.grad_input(grad_output, self,
/// kernel_size, stride, padding, dilation, ceil_mode, indices)`:
/// `grad_input` (`planes` planes of `in_plane` elements, the input's
/// shape) is zeroed, then each element of `grad_output` (planes of
/// `out_plane`) is added at the position in its plane that its index names,
/// in order (a position several windows chose collects each of their
/// gradients). An index of -1 adds nothing (as in PyTorch's CPU kernel);
/// any other outside the plane is an error.
pub fn max_pool2d_with_indices_backward<T: Float>(
    grad_output: &[T],
    indices: &[i64],
    planes: usize,
    out_plane: usize,
    in_plane: usize,
    grad_input: &mut [T],
) -> KernelResult {
    let (olen, ilen) = (planes * out_plane, planes * in_plane);
    if grad_output.len() < olen || indices.len() < olen || grad_input.len() < ilen {
        return Err(KernelError::ShapeMismatch);
    }
    grad_input[..ilen].fill(T::from_acc(T::Acc::ZERO));
    for p in 0..planes {
        let gi = &mut grad_input[p * in_plane..][..in_plane];
        let span = p * out_plane..(p + 1) * out_plane;
        for (&g, &i) in grad_output[span.clone()].iter().zip(&indices[span]) {
            if i == -1 {
                continue;
            }
            let at = usize::try_from(i)
                .ok()
                .filter(|&at| at < in_plane)
                .ok_or(KernelError::IndexOutOfRange {
                    index: i,
                    size: in_plane,
                })?;
            gi[at] = T::from_acc(gi[at].to_acc() + g.to_acc());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::testing::Lcg;
    use crate::{bf16, f16};
    use std::vec;
    use std::vec::Vec;

    #[test]
    fn output_len_formula() {
        // floor((5 + 0 - 2 - 1)/2) + 1 = 2; ceil: floor((2 + 1)/2) + 1 = 2
        assert_eq!(pooling_output_len(5, 2, 2, 0, 1, false), Some(2));
        // in 6, k 3, s 2: floor(3/2)+1 = 2; ceil: floor(4/2)+1 = 3, (3-1)·2 = 4 < 6 → 3
        assert_eq!(pooling_output_len(6, 3, 2, 0, 1, false), Some(2));
        assert_eq!(pooling_output_len(6, 3, 2, 0, 1, true), Some(3));
        // in 4, k 2, s 2, pad 1, ceil: floor((4+2-1-1+1)/2)+1 = 3; (3-1)·2 = 4 ≥ 4+1? no → 3
        assert_eq!(pooling_output_len(4, 2, 2, 1, 1, true), Some(3));
        // in 4, k 3, s 3, pad 1, ceil: floor((4+2-2-1+2)/3)+1 = 2 ... (2-1)·3 = 3 < 5 → 2
        assert_eq!(pooling_output_len(4, 3, 3, 1, 1, true), Some(2));
        // in 5, k 1, s 2, pad 0, ceil: floor((5-1+1)/2)+1 = 3, (3-1)·2 = 4 < 5 → 3
        assert_eq!(pooling_output_len(5, 1, 2, 0, 1, true), Some(3));
        // in 2, k 2, s 3, ceil: floor((2-1-1+2)/3)+1 = 1
        assert_eq!(pooling_output_len(2, 2, 3, 0, 1, true), Some(1));
        // the ceil rule trims: in 3, k 2, s 2, pad 1, ceil:
        // floor((3+2-1-1+1)/2)+1 = 3; (3-1)·2 = 4 ≥ 3+1 → 2
        assert_eq!(pooling_output_len(3, 2, 2, 1, 1, true), Some(2));
        assert_eq!(pooling_output_len(2, 3, 1, 0, 1, false), None);
        // padding above half the kernel is rejected
        assert_eq!(max_pool2d_output_sizes(&[1, 4, 4], &[2], &[], &[2], &[1], false), None);
        // in 6, k 3, stride 3 (default), pad 1, ceil: floor((6+2-2-1+2)/3)+1 = 3;
        // (3-1)·3 = 6 < 6+1, so the third window (starting at 5) stays.
        assert_eq!(
            max_pool2d_output_sizes(&[2, 3, 6, 6], &[3, 3], &[], &[1], &[1], true).as_deref(),
            Some(&[2, 3, 3, 3][..])
        );
    }

    #[test]
    fn max_pool_hand() {
        // 3×3 plane, kernel 2, stride 1:
        // [1 5 2]      windows: max(1,5,3,4)=5 @1, max(5,2,4,9)=9 @5
        // [3 4 9]               max(3,4,0,6)=6 @7, max(4,9,6,6)=9 @5
        // [0 6 6]
        let x = [1.0f32, 5.0, 2.0, 3.0, 4.0, 9.0, 0.0, 6.0, 6.0];
        let mut o = [0.0f32; 4];
        let mut ix = [0i64; 4];
        max_pool2d_with_indices(&x, &[1, 3, 3], &[2], &[1], &[0], &[1], false, &mut o, &mut ix).unwrap();
        assert_eq!(o, [5.0, 9.0, 6.0, 9.0]);
        assert_eq!(ix, [1, 5, 7, 5]);
        // NaN propagates, the last NaN's index wins; ties keep the first.
        // [NaN 1 7]   TL {NaN,1,NaN,2} → NaN @3   TR {1,7,2,2} → 7 @2
        // [NaN 2 2]   BL {NaN,2,1,1}   → NaN @3   BR {2,2,1,1} → 2 @4 (first 2)
        // [1   1 1]
        let x = [f32::NAN, 1.0, 7.0, f32::NAN, 2.0, 2.0, 1.0, 1.0, 1.0];
        max_pool2d_with_indices(&x, &[1, 3, 3], &[2], &[1], &[0], &[1], false, &mut o, &mut ix).unwrap();
        assert!(o[0].is_nan() && o[2].is_nan());
        assert_eq!((o[1], o[3]), (7.0, 2.0));
        assert_eq!(ix, [3, 2, 3, 4]);
        // All -inf window with padding: index is the first in-bounds tap.
        let x = [f32::NEG_INFINITY; 4];
        let mut o = [0.0f32; 4];
        max_pool2d_with_indices(&x, &[1, 2, 2], &[2], &[2], &[1], &[1], false, &mut o, &mut ix).unwrap();
        assert_eq!(ix, [0, 1, 2, 3]);
        assert!(o.iter().all(|v| *v == f32::NEG_INFINITY));
    }

    #[test]
    fn avg_pool_hand() {
        // 2×2 plane [1 2; 3 4], kernel 2, stride 2, pad 1 → 2×2 output windows
        // each containing one input value and three pads:
        // include pad: v/4; exclude: v/1; override 2: v/2.
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let mut o = [0.0f32; 4];
        avg_pool2d(&x, &[1, 2, 2], &[2], &[2], &[1], false, true, None, &mut o).unwrap();
        assert_eq!(o, [0.25, 0.5, 0.75, 1.0]);
        avg_pool2d(&x, &[1, 2, 2], &[2], &[2], &[1], false, false, None, &mut o).unwrap();
        assert_eq!(o, [1.0, 2.0, 3.0, 4.0]);
        avg_pool2d(&x, &[1, 2, 2], &[2], &[2], &[1], false, true, Some(2), &mut o).unwrap();
        assert_eq!(o, [0.5, 1.0, 1.5, 2.0]);
        // ceil mode, 3 wide row [1 2 3], kernel (1,2), stride 2, no pad:
        // windows [1 2] → 1.5 and [3] (clipped; pool size clipped to input+pad = 1) → 3
        let mut o = [0.0f32; 2];
        avg_pool2d(
            &[1.0f32, 2.0, 3.0],
            &[1, 1, 3],
            &[1, 2],
            &[1, 2],
            &[0],
            true,
            true,
            None,
            &mut o,
        )
        .unwrap();
        assert_eq!(o, [1.5, 3.0]);
    }

    #[test]
    fn adaptive_hand() {
        // 1×5 row [1 2 3 4 5] → width 3: windows [0,2) [1,4) [3,5)
        // → 1.5, 3, 4.5
        let mut o = [0.0f32; 3];
        adaptive_avg_pool2d(&[1.0f32, 2.0, 3.0, 4.0, 5.0], &[1, 1, 5], &[1, 3], &mut o).unwrap();
        assert_eq!(o, [1.5, 3.0, 4.5]);
    }

    /// Naive max pool: enumerate every tap of the (padded) window.
    #[allow(clippy::too_many_arguments)]
    fn naive_max(
        x: &[f32],
        planes: usize,
        ih: usize,
        iw: usize,
        k: (usize, usize),
        s: (usize, usize),
        p: (usize, usize),
        d: (usize, usize),
        oh: usize,
        ow: usize,
    ) -> (Vec<f32>, Vec<i64>) {
        let mut vals = vec![];
        let mut idx = vec![];
        for pl in 0..planes {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut best = f32::NEG_INFINITY;
                    let mut bi: Option<i64> = None;
                    for a in 0..k.0 {
                        for b in 0..k.1 {
                            let y = (oy * s.0 + a * d.0) as i64 - p.0 as i64;
                            let xx = (ox * s.1 + b * d.1) as i64 - p.1 as i64;
                            if y < 0 || xx < 0 || y >= ih as i64 || xx >= iw as i64 {
                                continue;
                            }
                            let v = x[pl * ih * iw + (y as usize) * iw + xx as usize];
                            let here = y * iw as i64 + xx;
                            if bi.is_none() {
                                bi = Some(here);
                            }
                            if v > best || v.is_nan() {
                                best = v;
                                bi = Some(here);
                            }
                        }
                    }
                    vals.push(best);
                    idx.push(bi.unwrap());
                }
            }
        }
        (vals, idx)
    }

    #[test]
    fn random_max_pool() {
        let mut rng = Lcg(2);
        let configs = [
            ((3, 3), (2, 2), (1, 1), (1, 1), true),
            ((3, 3), (2, 2), (1, 1), (1, 1), false),
            ((2, 3), (1, 2), (0, 1), (2, 1), false),
            ((3, 2), (3, 1), (1, 0), (2, 2), true),
            ((4, 4), (3, 3), (2, 1), (1, 1), true),
            ((1, 1), (2, 2), (0, 0), (1, 1), true),
        ];
        // Under Miri one image of one plane, through every configuration.
        let (sizes, planes): (&[(usize, usize)], usize) = if cfg!(miri) {
            (&[(9, 5)], 1)
        } else {
            (&[(7, 8), (9, 5), (6, 6)], 3)
        };
        for &(ih, iw) in sizes {
            for &(k, s, p, d, ceil) in &configs {
                let mut x = rng.vec(planes * ih * iw);
                x[5] = f32::NAN;
                x[planes * ih * iw - 3] = f32::NAN;
                let Some(sz) = max_pool2d_output_sizes(
                    &[1, planes, ih, iw],
                    &[k.0, k.1],
                    &[s.0, s.1],
                    &[p.0, p.1],
                    &[d.0, d.1],
                    ceil,
                ) else {
                    continue;
                };
                let (oh, ow) = (sz[2], sz[3]);
                assert_eq!(Some(oh), pooling_output_len(ih, k.0, s.0, p.0, d.0, ceil));
                let (wv, wi) = naive_max(&x, planes, ih, iw, k, s, p, d, oh, ow);
                let mut o = vec![0.0f32; sz.numel()];
                let mut ix = vec![0i64; sz.numel()];
                max_pool2d_with_indices(
                    &x,
                    &sz_in(planes, ih, iw),
                    &[k.0, k.1],
                    &[s.0, s.1],
                    &[p.0, p.1],
                    &[d.0, d.1],
                    ceil,
                    &mut o,
                    &mut ix,
                )
                .unwrap();
                for i in 0..o.len() {
                    assert!(o[i] == wv[i] || (o[i].is_nan() && wv[i].is_nan()), "{i}");
                }
                assert_eq!(ix, wi);
                let mut o2 = vec![0.0f32; sz.numel()];
                max_pool2d(
                    &x,
                    &sz_in(planes, ih, iw),
                    &[k.0, k.1],
                    &[s.0, s.1],
                    &[p.0, p.1],
                    &[d.0, d.1],
                    ceil,
                    &mut o2,
                )
                .unwrap();
                assert_eq!(
                    o.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    o2.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                );
            }
        }
        // integer elements
        let x: Vec<i32> = (0..16).map(|i| (i * 7) % 11).collect();
        let mut o = [0i32; 4];
        let mut ix = [0i64; 4];
        max_pool2d_with_indices(&x, &[1, 4, 4], &[2], &[], &[0], &[1], false, &mut o, &mut ix).unwrap();
        // rows: [0 7 3 10] [6 2 9 5] [1 8 4 0] [7 3 10 6]
        assert_eq!(o, [7, 10, 8, 10]);
        assert_eq!(ix, [1, 3, 9, 14]);
    }

    fn sz_in(planes: usize, ih: usize, iw: usize) -> [usize; 4] {
        [1, planes, ih, iw]
    }

    /// Naive avg pool over the window taps, with PyTorch's divisor rules
    /// restated: the divisor counts taps inside the padded input (include
    /// pad) or inside the input (exclude pad).
    #[allow(clippy::too_many_arguments)]
    fn naive_avg(
        x: &[f32],
        planes: usize,
        ih: usize,
        iw: usize,
        k: (usize, usize),
        s: (usize, usize),
        p: (usize, usize),
        oh: usize,
        ow: usize,
        include: bool,
        div: Option<i64>,
    ) -> Vec<f64> {
        let mut r = vec![];
        for pl in 0..planes {
            for oy in 0..oh {
                for ox in 0..ow {
                    let (mut sum, mut n_in, mut n_pad) = (0.0f64, 0, 0);
                    for a in 0..k.0 {
                        for b in 0..k.1 {
                            let y = (oy * s.0 + a) as i64 - p.0 as i64;
                            let xx = (ox * s.1 + b) as i64 - p.1 as i64;
                            if y < ih as i64 + p.0 as i64 && xx < iw as i64 + p.1 as i64 {
                                n_pad += 1;
                            }
                            if y < 0 || xx < 0 || y >= ih as i64 || xx >= iw as i64 {
                                continue;
                            }
                            n_in += 1;
                            sum += x[pl * ih * iw + y as usize * iw + xx as usize] as f64;
                        }
                    }
                    r.push(if n_in == 0 {
                        0.0
                    } else {
                        sum / div.unwrap_or(if include { n_pad } else { n_in }) as f64
                    });
                }
            }
        }
        r
    }

    fn avg_case<T: Float>(rng: &mut Lcg, tol: f64) {
        // Under Miri one image of one plane, through every configuration.
        let (sizes, planes): (&[(usize, usize)], usize) = if cfg!(miri) {
            (&[(5, 9)], 1)
        } else {
            (&[(7, 8), (5, 9)], 2)
        };
        for &(ih, iw) in sizes {
            for &(k, s, p) in &[
                ((3, 3), (2, 2), (1, 1)),
                ((2, 3), (2, 1), (1, 1)),
                ((3, 2), (3, 3), (0, 1)),
                ((4, 4), (3, 2), (2, 2)),
            ] {
                for ceil in [false, true] {
                    for (include, div) in [(true, None), (false, None), (true, Some(3))] {
                        let x32 = rng.vec(planes * ih * iw);
                        let x: Vec<T> = x32.iter().map(|&v| T::from_f64(v as f64)).collect();
                        let xr: Vec<f32> = x.iter().map(|v| v.to_f64() as f32).collect();
                        let Some(sz) = avg_pool2d_output_sizes(
                            &[planes, ih, iw],
                            &[k.0, k.1],
                            &[s.0, s.1],
                            &[p.0, p.1],
                            ceil,
                            div,
                        ) else {
                            continue;
                        };
                        let want = naive_avg(&xr, planes, ih, iw, k, s, p, sz[1], sz[2], include, div);
                        let mut o = vec![T::default(); sz.numel()];
                        avg_pool2d(
                            &x,
                            &[planes, ih, iw],
                            &[k.0, k.1],
                            &[s.0, s.1],
                            &[p.0, p.1],
                            ceil,
                            include,
                            div,
                            &mut o,
                        )
                        .unwrap();
                        for (g, w) in o.iter().zip(&want) {
                            assert!((g.to_f64() - w).abs() <= tol, "{} vs {w}", g.to_f64());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn random_avg_pool() {
        let mut rng = Lcg(4);
        avg_case::<f32>(&mut rng, 1e-6);
        avg_case::<f64>(&mut rng, 1e-12);
        avg_case::<f16>(&mut rng, 2e-3);
        avg_case::<bf16>(&mut rng, 1e-2);
    }

    #[test]
    fn random_adaptive() {
        let mut rng = Lcg(6);
        for &(ih, iw, oh, ow) in &[
            (7usize, 9usize, 3usize, 4usize),
            (5, 5, 5, 5),
            (4, 6, 7, 3),
            (8, 8, 1, 1),
        ] {
            let x = rng.vec(2 * ih * iw);
            let mut o = vec![0.0f32; 2 * oh * ow];
            adaptive_avg_pool2d(&x, &[2, ih, iw], &[oh, ow], &mut o).unwrap();
            for pl in 0..2 {
                for i in 0..oh {
                    for j in 0..ow {
                        // start = floor(i·H/Ho), end = ceil((i+1)·H/Ho), in f64
                        let y0 = (i as f64 * ih as f64 / oh as f64).floor() as usize;
                        let y1 = ((i + 1) as f64 * ih as f64 / oh as f64).ceil() as usize;
                        let x0 = (j as f64 * iw as f64 / ow as f64).floor() as usize;
                        let x1 = ((j + 1) as f64 * iw as f64 / ow as f64).ceil() as usize;
                        let mut s = 0.0f64;
                        for y in y0..y1 {
                            for xx in x0..x1 {
                                s += x[pl * ih * iw + y * iw + xx] as f64;
                            }
                        }
                        let want = s / ((y1 - y0) * (x1 - x0)) as f64;
                        assert!((o[pl * oh * ow + i * ow + j] as f64 - want).abs() < 1e-6);
                    }
                }
            }
        }
        assert_eq!(
            adaptive_avg_pool2d_output_sizes(&[2, 3, 4, 5], &[2, 2]).as_deref(),
            Some(&[2, 3, 2, 2][..])
        );
        assert_eq!(adaptive_avg_pool2d_output_sizes(&[3, 0, 5], &[2, 2]), None);
    }

    /// 3-d max and average pooling against an independent loop nest over
    /// random windows (stride, padding, dilation, ceil mode, both padding
    /// counts, a divisor override), NaNs included for the max.
    #[test]
    fn three_d_pools_match_a_direct_loop_nest() {
        let mut seed = 17u64;
        let mut pick = |n: u64| crate::testing::rng(&mut seed) % n;
        let mut rng = Lcg(3);
        let mut checked = 0;
        // Under Miri a tenth of the cases, smaller: still NaN, ceil and
        // floor.
        let (cases, most) = if cfg!(miri) { (20, 5) } else { (200, 7) };
        for case in 0..cases {
            let k: [usize; 3] = core::array::from_fn(|_| 1 + pick(3) as usize);
            let st: [usize; 3] = core::array::from_fn(|_| 1 + pick(3) as usize);
            let p: [usize; 3] = core::array::from_fn(|i| pick(k[i] as u64 / 2 + 1) as usize);
            let d: [usize; 3] = core::array::from_fn(|_| 1 + pick(2) as usize);
            let inp: [usize; 3] = core::array::from_fn(|_| 1 + pick(most) as usize);
            let ceil = case % 2 == 1;
            let planes = 1 + pick(3) as usize;
            let isz = [1, planes, inp[0], inp[1], inp[2]];
            let mut x = rng.vec(planes * inp.iter().product::<usize>());
            if case % 5 == 0 {
                let at = pick(x.len() as u64) as usize;
                x[at] = f32::NAN;
            }
            // Windows along one dim: their taps' input positions (in bounds
            // only), their padded-input size and their first tap at or past
            // 0 (PyTorch's index for a window with no maximum), for
            // dilation `dil`.
            let windows = |i: usize, dil: usize| -> Option<Vec<(Vec<usize>, usize, i64)>> {
                let o = pooling_output_len(inp[i], k[i], st[i], p[i], dil, ceil)?;
                Some(
                    (0..o)
                        .map(|o| {
                            let start = (o * st[i]) as i64 - p[i] as i64;
                            let taps = (0..k[i])
                                .map(|j| start + (j * dil) as i64)
                                .filter(|&v| v >= 0 && v < inp[i] as i64)
                                .map(|v| v as usize)
                                .collect();
                            let end = (start + k[i] as i64).min((inp[i] + p[i]) as i64);
                            let first = (0..).map(|j| start + j * dil as i64).find(|&v| v >= 0).unwrap();
                            (taps, (end - start) as usize, first)
                        })
                        .collect(),
                )
            };
            let Some(sz) = max_pool3d_output_sizes(&isz, &k, &st, &p, &d, ceil) else {
                assert!(
                    (0..3).any(|i| windows(i, d[i]).is_none()),
                    "{k:?} {st:?} {p:?} {d:?} {inp:?}"
                );
                continue;
            };
            let wins: Vec<_> = (0..3).map(|i| windows(i, d[i]).unwrap()).collect();
            assert_eq!(&sz[2..], &[wins[0].len(), wins[1].len(), wins[2].len()]);
            let (mut vals, mut idx) = (vec![0.0f32; sz.numel()], vec![0i64; sz.numel()]);
            max_pool3d_with_indices(&x, &isz, &k, &st, &p, &d, ceil, &mut vals, &mut idx).unwrap();
            let vol = inp[0] * inp[1] * inp[2];
            let mut o = 0;
            for pl in 0..planes {
                for (tz, _, fz) in &wins[0] {
                    for (ty, _, fy) in &wins[1] {
                        for (tx, _, fx) in &wins[2] {
                            let mut best = f32::NEG_INFINITY;
                            let mut bi = (fz * inp[1] as i64 + fy) * inp[2] as i64 + fx;
                            for &z in tz {
                                for &y in ty {
                                    for &xx in tx {
                                        let here = (z * inp[1] + y) * inp[2] + xx;
                                        let v = x[pl * vol + here];
                                        if v > best || v.is_nan() {
                                            (best, bi) = (v, here as i64);
                                        }
                                    }
                                }
                            }
                            assert!(
                                vals[o] == best || vals[o].is_nan() && best.is_nan(),
                                "{case}: {} vs {best}",
                                vals[o]
                            );
                            assert_eq!(idx[o], bi, "{case}");
                            o += 1;
                        }
                    }
                }
            }
            // Average pooling: no dilation.
            let Some(asz) = avg_pool3d_output_sizes(&isz, &k, &st, &p, ceil, None) else {
                continue;
            };
            let wins: Vec<_> = (0..3).map(|i| windows(i, 1).unwrap()).collect();
            for (include, divisor) in [(true, None), (false, None), (false, Some(3))] {
                let mut got = vec![0.0f32; asz.numel()];
                avg_pool3d(&x, &isz, &k, &st, &p, ceil, include, divisor, &mut got).unwrap();
                let mut o = 0;
                for pl in 0..planes {
                    for (tz, pz, _) in &wins[0] {
                        for (ty, py, _) in &wins[1] {
                            for (tx, px, _) in &wins[2] {
                                let mut sum = 0.0f64;
                                for &z in tz {
                                    for &y in ty {
                                        for &xx in tx {
                                            sum += x[pl * vol + (z * inp[1] + y) * inp[2] + xx] as f64;
                                        }
                                    }
                                }
                                let n = tz.len() * ty.len() * tx.len();
                                let div = match divisor {
                                    Some(v) => v as f64,
                                    None if include => (pz * py * px) as f64,
                                    None => n as f64,
                                };
                                let want = if n == 0 { 0.0 } else { sum / div };
                                let g = got[o] as f64;
                                assert!(
                                    (g - want).abs() <= 1e-5 || g.is_nan() && want.is_nan(),
                                    "{case}: {g} vs {want}"
                                );
                                o += 1;
                            }
                        }
                    }
                }
            }
            checked += 1;
        }
        assert!(checked > cases / 4, "{checked}");
    }

    #[test]
    fn max_pool_backward_scatters_sums_and_refuses_bad_indices() {
        // Two planes of 4 inputs, 2 gradients each; plane 0 sends both to
        // position 1, plane 1 skips one (-1).
        let gy = [1.0f32, 2.0, 3.0, 4.0];
        let mut gi = [9.0f32; 8];
        max_pool2d_with_indices_backward(&gy, &[1, 1, 3, -1], 2, 2, 4, &mut gi).unwrap();
        assert_eq!(gi, [0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0]);
        for bad in [4, -2] {
            let err = max_pool2d_with_indices_backward(&gy, &[0, bad, 0, 0], 2, 2, 4, &mut gi);
            assert_eq!(err, Err(KernelError::IndexOutOfRange { index: bad, size: 4 }));
        }
        let short = max_pool2d_with_indices_backward(&gy, &[0, 0, 0], 2, 2, 4, &mut gi);
        assert_eq!(short, Err(KernelError::ShapeMismatch));
    }
}
