//! Normalizations: `aten::_native_batch_norm_legit_no_training.out`,
//! `aten::_native_batch_norm_legit.no_stats_out` (training mode),
//! `aten::native_layer_norm.out` and `aten::native_group_norm.out`.
//!
//! Statistics use the biased variance (divide by the element count), as
//! PyTorch does, computed in two passes (mean, then the mean of squared
//! deviations) with eight independent partial sums, in [`Float::Acc`]
//! (`f32` for `f32` and the half types, `f64` for `f64`). Tensors are
//! contiguous; optional affine parameters are `None` when absent.

use crate::num::{AccFloat, Element, Float, Sizes};
use crate::{KernelError, KernelResult};
use core::any::TypeId;

/// Square root in the accumulation type (`sqrtf` for `f32`).
#[inline(always)]
fn acc_sqrt<A: AccFloat>(x: A) -> A {
    if TypeId::of::<A>() == TypeId::of::<f32>() {
        A::from_f32(libm::sqrtf(x.to_f64() as f32))
    } else {
        A::from_f64(libm::sqrt(x.to_f64()))
    }
}

/// `1 / sqrt(max(var, 0) + eps)`.
#[inline(always)]
fn rstd_of<A: AccFloat>(var: A, eps: A) -> A {
    let v = if var < A::ZERO { A::ZERO } else { var };
    A::ONE / acc_sqrt(v + eps)
}

/// Sum in the accumulation type with eight lanes.
#[inline(always)]
fn sum_acc<T: Float>(x: &[T]) -> T::Acc {
    let mut lanes = [T::Acc::ZERO; 8];
    let chunks = x.chunks_exact(8);
    let rem = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            lanes[l] += c[l].to_acc();
        }
    }
    let mut s = T::Acc::ZERO;
    for &v in rem {
        s += v.to_acc();
    }
    let (a, b) = (lanes[0] + lanes[4], lanes[1] + lanes[5]);
    let (c, d) = (lanes[2] + lanes[6], lanes[3] + lanes[7]);
    (a + c) + (b + d) + s
}

/// `Σ (x − mean)²` in the accumulation type with eight lanes.
#[inline(always)]
fn sum_sq_dev<T: Float>(x: &[T], mean: T::Acc) -> T::Acc {
    let mut lanes = [T::Acc::ZERO; 8];
    let chunks = x.chunks_exact(8);
    let rem = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            let d = c[l].to_acc() - mean;
            lanes[l] += d * d;
        }
    }
    let mut s = T::Acc::ZERO;
    for &v in rem {
        let d = v.to_acc() - mean;
        s += d * d;
    }
    let (a, b) = (lanes[0] + lanes[4], lanes[1] + lanes[5]);
    let (c, d) = (lanes[2] + lanes[6], lanes[3] + lanes[7]);
    (a + c) + (b + d) + s
}

/// `(mean, biased variance)` of `x` (NaN for an empty slice).
#[inline(always)]
fn moments<T: Float>(x: &[T]) -> (T::Acc, T::Acc) {
    let n = T::Acc::from_i64(x.len() as i64);
    let mean = sum_acc(x) / n;
    (mean, sum_sq_dev(x, mean) / n)
}

/// `out = x · scale + shift`, element-wise.
#[inline(always)]
fn affine<T: Float>(x: &[T], scale: T::Acc, shift: T::Acc, out: &mut [T]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = T::from_acc(v.to_acc() * scale + shift);
    }
}

/// Output sizes of `aten::_native_batch_norm_legit_no_training` (the
/// input's sizes; the mean/rstd outputs are empty), or `None` unless the
/// input has at least two dims (`[N, C, *]`) and every given per-channel
/// parameter (`weight_len`, `bias_len`, `mean_len`, `var_len`) has `C`
/// elements.
pub fn batch_norm_output_sizes(
    input_sizes: &[usize],
    weight_len: Option<usize>,
    bias_len: Option<usize>,
    mean_len: usize,
    var_len: usize,
) -> Option<Sizes> {
    let &c = input_sizes.get(1)?;
    let ok = |l: Option<usize>| l.is_none_or(|l| l == c);
    if !(ok(weight_len) && ok(bias_len) && mean_len == c && var_len == c) {
        return None;
    }
    Sizes::new(input_sizes)
}

/// `aten::_native_batch_norm_legit_no_training.out(input, weight?, bias?,
/// running_mean, running_var, momentum, eps, out, save_mean, save_rstd)`:
/// `out = (x − running_mean[c]) / sqrt(running_var[c] + eps) · weight[c] +
/// bias[c]` for channel `c` = dim 1 of `input` (`[N, C, *]`, of
/// `input_sizes`). `momentum` has no effect in inference and is not taken;
/// the saved mean/rstd outputs are empty and not written. Per channel it
/// computes `scale = weight · rstd`, `shift = bias − mean · scale` and then
/// `out = x · scale + shift`, as PyTorch's CPU kernel does.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_no_training<T: Float>(
    input: &[T],
    input_sizes: &[usize],
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    running_mean: &[T],
    running_var: &[T],
    eps: f64,
    out: &mut [T],
) -> KernelResult {
    batch_norm_output_sizes(
        input_sizes,
        weight.map(<[T]>::len),
        bias.map(<[T]>::len),
        running_mean.len(),
        running_var.len(),
    )
    .ok_or(KernelError::ShapeMismatch)?;
    let (n, c) = (input_sizes[0], input_sizes[1]);
    let inner: usize = input_sizes[2..].iter().product();
    let total = n * c * inner;
    if input.len() < total || out.len() < total {
        return Err(KernelError::ShapeMismatch);
    }
    if total == 0 {
        return Ok(());
    }
    let eps = T::Acc::from_f64(eps);
    for ci in 0..c {
        // PyTorch does not clamp the running variance.
        let rstd = T::Acc::ONE / acc_sqrt(running_var[ci].to_acc() + eps);
        let scale = weight.map_or(T::Acc::ONE, |w| w[ci].to_acc()) * rstd;
        let shift = bias.map_or(T::Acc::ZERO, |b| b[ci].to_acc()) - running_mean[ci].to_acc() * scale;
        for ni in 0..n {
            let off = (ni * c + ci) * inner;
            affine(&input[off..off + inner], scale, shift, &mut out[off..off + inner]);
        }
    }
    Ok(())
}

/// `aten::_native_batch_norm_legit.no_stats_out(input, weight?, bias?,
/// training, momentum, eps, out, save_mean, save_invstd)` in training mode:
/// the statistics of channel `c` (dim 1 of `input`, `[N, C, *]` of
/// `input_sizes`) are those of the batch, over all `N` samples and the
/// trailing dims; `out = (x − mean[c]) · rstd[c] · weight[c] + bias[c]` with
/// `rstd = 1 / sqrt(var + eps)` and the biased variance. `save_mean` and
/// `save_invstd` receive `C` values. `momentum` only updates running
/// statistics, which this overload has none of.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_batch_stats<T: Float>(
    input: &[T],
    input_sizes: &[usize],
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    eps: f64,
    out: &mut [T],
    save_mean: &mut [T],
    save_invstd: &mut [T],
) -> KernelResult {
    batch_norm_training(
        input,
        input_sizes,
        weight,
        bias,
        None,
        0.0,
        eps,
        out,
        save_mean,
        save_invstd,
    )
}

/// `aten::_native_batch_norm_legit` in training: [`batch_norm_batch_stats`],
/// and when `running` holds `(running_mean, running_var)` (`C` values
/// each), their update in place as PyTorch's CPU kernel does it:
/// `r = (1 − momentum) · r + momentum · s`, with the batch's mean and its
/// unbiased variance (`Σ(x − mean)² / (count − 1)`: NaN for one value per
/// channel, as in PyTorch).
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_training<T: Float>(
    input: &[T],
    input_sizes: &[usize],
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    mut running: Option<(&mut [T], &mut [T])>,
    momentum: f64,
    eps: f64,
    out: &mut [T],
    save_mean: &mut [T],
    save_invstd: &mut [T],
) -> KernelResult {
    let &c = input_sizes.get(1).ok_or(KernelError::ShapeMismatch)?;
    batch_norm_output_sizes(input_sizes, weight.map(<[T]>::len), bias.map(<[T]>::len), c, c)
        .ok_or(KernelError::ShapeMismatch)?;
    let n = input_sizes[0];
    let inner: usize = input_sizes[2..].iter().product();
    let total = n * c * inner;
    if input.len() < total || out.len() < total || save_mean.len() < c || save_invstd.len() < c {
        return Err(KernelError::ShapeMismatch);
    }
    if let Some((m, v)) = &running {
        if m.len() < c || v.len() < c {
            return Err(KernelError::ShapeMismatch);
        }
    }
    let count = T::Acc::from_i64((n * inner) as i64);
    let eps = T::Acc::from_f64(eps);
    let plane = |ni: usize, ci: usize| (ni * c + ci) * inner..(ni * c + ci + 1) * inner;
    for ci in 0..c {
        // Two passes over the channel's planes, as `moments` does for one.
        let mut sum = T::Acc::ZERO;
        for ni in 0..n {
            sum += sum_acc(&input[plane(ni, ci)]);
        }
        let mean = sum / count;
        let mut dev = T::Acc::ZERO;
        for ni in 0..n {
            dev += sum_sq_dev(&input[plane(ni, ci)], mean);
        }
        let rstd = rstd_of(dev / count, eps);
        save_mean[ci] = T::from_acc(mean);
        save_invstd[ci] = T::from_acc(rstd);
        if let Some((rm, rv)) = running.as_mut() {
            // In f64, as PyTorch's double momentum promotes the update.
            let unbiased = (dev / (count - T::Acc::ONE)).to_f64();
            rm[ci] = T::from_f64(momentum * mean.to_f64() + (1.0 - momentum) * rm[ci].to_f64());
            rv[ci] = T::from_f64(momentum * unbiased + (1.0 - momentum) * rv[ci].to_f64());
        }
        let scale = weight.map_or(T::Acc::ONE, |w| w[ci].to_acc()) * rstd;
        let shift = bias.map_or(T::Acc::ZERO, |b| b[ci].to_acc()) - mean * scale;
        for ni in 0..n {
            affine(&input[plane(ni, ci)], scale, shift, &mut out[plane(ni, ci)]);
        }
    }
    Ok(())
}

/// Output sizes of `aten::native_layer_norm`: `(out, mean_and_rstd)` where
/// `out` has the input's sizes and `mean`/`rstd` have the input's leading
/// dims followed by a 1 for each normalized dim. `None` unless
/// `normalized_shape` is non-empty and equals the input's trailing dims, and
/// `weight_len`/`bias_len` (if given) equal its element count.
pub fn layer_norm_output_sizes(
    input_sizes: &[usize],
    normalized_shape: &[usize],
    weight_len: Option<usize>,
    bias_len: Option<usize>,
) -> Option<(Sizes, Sizes)> {
    let r = input_sizes.len();
    let k = normalized_shape.len();
    if k == 0 || k > r || input_sizes[r - k..] != *normalized_shape {
        return None;
    }
    let n: usize = normalized_shape.iter().product();
    if weight_len.is_some_and(|l| l != n) || bias_len.is_some_and(|l| l != n) {
        return None;
    }
    let out = Sizes::new(input_sizes)?;
    let mut stat = out;
    for i in r - k..r {
        stat.set(i, 1);
    }
    Some((out, stat))
}

/// `aten::native_layer_norm.out(input, normalized_shape, weight?, bias?,
/// eps, out, mean, rstd)`: each of the `M` rows of `N` elements (`N` the
/// product of `normalized_shape`, the trailing dims of `input_sizes`; `M`
/// the product of the rest) is normalized as
/// `out = (x − mean) · rstd · weight + bias`, with
/// `rstd = 1 / sqrt(max(var, 0) + eps)` and the biased variance.
/// `weight`/`bias` have `N` elements; `mean` and `rstd` receive `M` values
/// (shape from [`layer_norm_output_sizes`]).
#[allow(clippy::too_many_arguments)]
pub fn native_layer_norm<T: Float>(
    input: &[T],
    input_sizes: &[usize],
    normalized_shape: &[usize],
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    eps: f64,
    out: &mut [T],
    mean: &mut [T],
    rstd: &mut [T],
) -> KernelResult {
    let (o, stat) = layer_norm_output_sizes(
        input_sizes,
        normalized_shape,
        weight.map(<[T]>::len),
        bias.map(<[T]>::len),
    )
    .ok_or(KernelError::ShapeMismatch)?;
    let total = o.numel();
    let m = stat.numel();
    let n: usize = normalized_shape.iter().product();
    if input.len() < total || out.len() < total || mean.len() < m || rstd.len() < m {
        return Err(KernelError::ShapeMismatch);
    }
    let rows = |r: core::ops::Range<usize>, out, mean, rstd| LayerNormRows {
        input: &input[r.start * n..r.end * n],
        n,
        weight,
        bias,
        eps: T::Acc::from_f64(eps),
        out,
        mean,
        rstd,
    };
    // Bands of rows across threads, when large: it usually follows a
    // product split in bands of rows, so each thread mostly normalizes the
    // rows it just wrote (see `parallel::for_each_band`).
    let bands = crate::parallel::split(m, crate::parallel::band_grain(n, core::mem::size_of::<T>()));
    if !crate::parallel::local_bands_for(total) || n == 0 || bands.parts() <= 1 {
        crate::cpu::with_best_isa(rows(0..m, &mut out[..total], &mut mean[..m], &mut rstd[..m]));
        return Ok(());
    }
    let starts = || bands.ranges().map(|(r0, _)| r0);
    let outs = crate::parallel::Pieces::new(&mut out[..total], starts().map(|r0| r0 * n));
    let means = crate::parallel::Pieces::new(&mut mean[..m], starts());
    let rstds = crate::parallel::Pieces::new(&mut rstd[..m], starts());
    crate::parallel::run_parts(bands.parts(), &|i| {
        if let (Some((r0, r1)), Some(out), Some(mean), Some(rstd)) =
            (bands.range(i), outs.take(i), means.take(i), rstds.take(i))
        {
            crate::cpu::with_best_isa(rows(r0..r1, out, mean, rstd));
        }
    });
    Ok(())
}

/// The rows of a layer norm, each normalized on its own (vectorized for the
/// CPU's best vector ISA; no fused multiply-adds are formed, so the results
/// do not depend on it).
struct LayerNormRows<'a, T: Float> {
    input: &'a [T],
    n: usize,
    weight: Option<&'a [T]>,
    bias: Option<&'a [T]>,
    eps: T::Acc,
    out: &'a mut [T],
    mean: &'a mut [T],
    rstd: &'a mut [T],
}

impl<T: Float> crate::cpu::Vectorized for LayerNormRows<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let n = self.n;
        let rows = self
            .out
            .chunks_exact_mut(n.max(1))
            .zip(self.input.chunks_exact(n.max(1)));
        for (i, (y, x)) in rows.enumerate().take(self.mean.len()) {
            let (mu, var) = moments(x);
            let rs = rstd_of(var, self.eps);
            self.mean[i] = T::from_acc(mu);
            self.rstd[i] = T::from_acc(rs);
            let shift = -(mu * rs);
            match (self.weight, self.bias) {
                (None, None) => affine(x, rs, shift, y),
                (Some(w), Some(b)) => {
                    for (((o, &v), &w), &b) in y.iter_mut().zip(x).zip(&w[..n]).zip(&b[..n]) {
                        *o = T::from_acc((v.to_acc() * rs + shift) * w.to_acc() + b.to_acc());
                    }
                }
                (w, b) => {
                    for j in 0..n {
                        let w = w.map_or(T::Acc::ONE, |w| w[j].to_acc());
                        let b = b.map_or(T::Acc::ZERO, |b| b[j].to_acc());
                        y[j] = T::from_acc((x[j].to_acc() * rs + shift) * w + b);
                    }
                }
            }
        }
    }
}

/// Output sizes of `aten::native_group_norm` for an input of
/// `input_sizes` (`[N, C, *]`): `(out, [N, group])`, the second being the
/// shape of `mean` and `rstd`. `None` unless `input_sizes` has at least two
/// dims, `n`/`c`/`hxw` agree with it, `group > 0` divides `C`, and
/// `weight_len`/`bias_len` (if given) are `C`.
pub fn group_norm_output_sizes(
    input_sizes: &[usize],
    weight_len: Option<usize>,
    bias_len: Option<usize>,
    n: usize,
    c: usize,
    hxw: usize,
    group: usize,
) -> Option<(Sizes, [usize; 2])> {
    if input_sizes.len() < 2 || input_sizes[0] != n || input_sizes[1] != c {
        return None;
    }
    if input_sizes[2..].iter().product::<usize>() != hxw || group == 0 || !c.is_multiple_of(group) {
        return None;
    }
    if weight_len.is_some_and(|l| l != c) || bias_len.is_some_and(|l| l != c) {
        return None;
    }
    Some((Sizes::new(input_sizes)?, [n, group]))
}

/// `aten::native_group_norm.out(input, weight?, bias?, N, C, HxW, group,
/// eps, out, mean, rstd)`: `input` is contiguous `[N, C, *]` with `HxW`
/// elements per channel; the `C / group` channels of each group of each
/// sample are normalized together:
/// `out = (x − mean) · rstd · weight[c] + bias[c]` with
/// `rstd = 1 / sqrt(max(var, 0) + eps)` (biased variance). `mean` and
/// `rstd` receive `N · group` values (`[N, group]`).
#[allow(clippy::too_many_arguments)]
pub fn native_group_norm<T: Float>(
    input: &[T],
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    n: usize,
    c: usize,
    hxw: usize,
    group: usize,
    eps: f64,
    out: &mut [T],
    mean: &mut [T],
    rstd: &mut [T],
) -> KernelResult {
    if group == 0
        || !c.is_multiple_of(group)
        || weight.is_some_and(|w| w.len() != c)
        || bias.is_some_and(|b| b.len() != c)
    {
        return Err(KernelError::ShapeMismatch);
    }
    let total = n * c * hxw;
    if input.len() < total || out.len() < total || mean.len() < n * group || rstd.len() < n * group {
        return Err(KernelError::ShapeMismatch);
    }
    let d = c / group;
    let eps = T::Acc::from_f64(eps);
    for ni in 0..n {
        for g in 0..group {
            let base = (ni * c + g * d) * hxw;
            let x = &input[base..base + d * hxw];
            let (mu, var) = moments(x);
            let rs = rstd_of(var, eps);
            mean[ni * group + g] = T::from_acc(mu);
            rstd[ni * group + g] = T::from_acc(rs);
            for k in 0..d {
                let ch = g * d + k;
                let scale = weight.map_or(T::Acc::ONE, |w| w[ch].to_acc()) * rs;
                let shift = bias.map_or(T::Acc::ZERO, |b| b[ch].to_acc()) - mu * scale;
                let off = base + k * hxw;
                affine(&input[off..off + hxw], scale, shift, &mut out[off..off + hxw]);
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
    use crate::{bf16, f16};
    use std::vec;
    use std::vec::Vec;

    fn conv<T: Float>(v: &[f32]) -> Vec<T> {
        v.iter().map(|&x| T::from_f64(x as f64)).collect()
    }
    fn back<T: Float>(v: &[T]) -> Vec<f64> {
        v.iter().map(|x| x.to_f64()).collect()
    }

    #[test]
    fn layer_norm_hand() {
        // row [1, 2, 3, 6]: mean 3, deviations [-2,-1,0,3], var (4+1+0+9)/4 = 3.5
        // eps 0.5 → rstd = 1/sqrt(4) = 0.5; out = [-1, -0.5, 0, 1.5]
        // weight [1,2,1,2], bias [0,0,1,1] → [-1, -1, 1, 4]
        let mut out = [0.0f32; 4];
        let (mut mean, mut rstd) = ([0.0f32], [0.0f32]);
        native_layer_norm(
            &[1.0f32, 2.0, 3.0, 6.0],
            &[1, 4],
            &[4],
            Some(&[1.0, 2.0, 1.0, 2.0]),
            Some(&[0.0, 0.0, 1.0, 1.0]),
            0.5,
            &mut out,
            &mut mean,
            &mut rstd,
        )
        .unwrap();
        assert_eq!(out, [-1.0, -1.0, 1.0, 4.0]);
        assert_eq!((mean[0], rstd[0]), (3.0, 0.5));
        let (o, s) = layer_norm_output_sizes(&[2, 3, 4], &[3, 4], Some(12), None).unwrap();
        assert_eq!((o.as_slice(), s.as_slice()), (&[2, 3, 4][..], &[2, 1, 1][..]));
        assert!(layer_norm_output_sizes(&[2, 3, 4], &[4, 3], None, None).is_none());
        assert!(layer_norm_output_sizes(&[2, 3, 4], &[], None, None).is_none());
    }

    #[test]
    fn batch_norm_hand() {
        // x [N=1, C=2, 2], weight [2, 3], bias [1, -1]:
        // ch0 [1, 3], mean 1, var 3, eps 1 → rstd 0.5 → [0, 1] · 2 + 1 = [1, 3]
        // ch1 [4, 4], mean 2, var 0, eps 1 → rstd 1 → [2, 2] · 3 − 1 = [5, 5]
        let mut out = [0.0f32; 4];
        batch_norm_no_training(
            &[1.0f32, 3.0, 4.0, 4.0],
            &[1, 2, 2],
            Some(&[2.0, 3.0]),
            Some(&[1.0, -1.0]),
            &[1.0, 2.0],
            &[3.0, 0.0],
            1.0,
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [1.0, 3.0, 5.0, 5.0]);
        assert!(batch_norm_output_sizes(&[2, 3, 4], Some(3), None, 3, 2).is_none());
    }

    #[test]
    fn group_norm_hand() {
        // N=1, C=2, HxW=2, one group: values [1, 3, 5, 7], mean 4,
        // var (9+1+1+9)/4 = 5, eps 4 → rstd 1/3 → [-1, -1/3, 1/3, 1]
        let mut out = [0.0f32; 4];
        let (mut mean, mut rstd) = ([0.0f32], [0.0f32]);
        native_group_norm(
            &[1.0f32, 3.0, 5.0, 7.0],
            None,
            None,
            1,
            2,
            2,
            1,
            4.0,
            &mut out,
            &mut mean,
            &mut rstd,
        )
        .unwrap();
        let want = [-1.0f32, -1.0 / 3.0, 1.0 / 3.0, 1.0];
        for (g, w) in out.iter().zip(want) {
            assert!((g - w).abs() < 1e-6);
        }
        assert_eq!(mean[0], 4.0);
        assert!((rstd[0] - 1.0 / 3.0).abs() < 1e-7);
    }

    /// Reference normalization of one group of values in f64.
    fn ref_stats(x: &[f64]) -> (f64, f64) {
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        (mean, var)
    }

    fn random_layer_norm<T: Float>(tol: f64) {
        let mut rng = Lcg(8);
        for (sizes, k) in [
            (vec![3usize, 5, 7], 1usize),
            (vec![2, 3, 37], 2),
            (vec![4, 100], 1),
            (vec![19], 1),
        ] {
            let total: usize = sizes.iter().product();
            let nshape = &sizes[sizes.len() - k..];
            let n: usize = nshape.iter().product();
            // offset the data to exercise accuracy of the two-pass variance
            let xs: Vec<f32> = rng.vec(total).iter().map(|v| v * 3.0 + 10.0).collect();
            let (x, w, b) = (conv::<T>(&xs), conv::<T>(&rng.vec(n)), conv::<T>(&rng.vec(n)));
            let (xr, wr, br) = (back(&x), back(&w), back(&b));
            let m = total / n;
            let mut out = vec![T::default(); total];
            let (mut mean, mut rstd) = (vec![T::default(); m], vec![T::default(); m]);
            native_layer_norm(
                &x,
                &sizes,
                nshape,
                Some(&w),
                Some(&b),
                1e-5,
                &mut out,
                &mut mean,
                &mut rstd,
            )
            .unwrap();
            for i in 0..m {
                let (mu, var) = ref_stats(&xr[i * n..(i + 1) * n]);
                let rs = 1.0 / (var + 1e-5).sqrt();
                assert!((mean[i].to_f64() - mu).abs() <= tol * mu.abs());
                assert!((rstd[i].to_f64() - rs).abs() <= tol * rs * 4.0);
                for j in 0..n {
                    let want = (xr[i * n + j] - mu) * rs * wr[j] + br[j];
                    let got = out[i * n + j].to_f64();
                    assert!((got - want).abs() <= tol * 8.0 * (1.0 + want.abs()), "{got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn layer_norm_random_types() {
        random_layer_norm::<f32>(1e-5);
        random_layer_norm::<f64>(1e-12);
        random_layer_norm::<f16>(2e-3);
        random_layer_norm::<bf16>(1e-2);
    }

    fn random_group_norm<T: Float>(tol: f64) {
        let mut rng = Lcg(12);
        for &(n, c, hxw, group) in &[
            (2usize, 6usize, 5usize, 3usize),
            (1, 4, 9, 1),
            (3, 8, 1, 8),
            (1, 10, 13, 2),
        ] {
            let total = n * c * hxw;
            let (x, w, b) = (
                conv::<T>(&rng.vec(total)),
                conv::<T>(&rng.vec(c)),
                conv::<T>(&rng.vec(c)),
            );
            let (xr, wr, br) = (back(&x), back(&w), back(&b));
            let mut out = vec![T::default(); total];
            let (mut mean, mut rstd) = (vec![T::default(); n * group], vec![T::default(); n * group]);
            let sizes = [n, c, hxw];
            assert!(group_norm_output_sizes(&sizes, Some(c), Some(c), n, c, hxw, group).is_some());
            native_group_norm(
                &x,
                Some(&w),
                Some(&b),
                n,
                c,
                hxw,
                group,
                1e-5,
                &mut out,
                &mut mean,
                &mut rstd,
            )
            .unwrap();
            let d = c / group;
            for ni in 0..n {
                for g in 0..group {
                    let base = (ni * c + g * d) * hxw;
                    let (mu, var) = ref_stats(&xr[base..base + d * hxw]);
                    let rs = 1.0 / (var + 1e-5).sqrt();
                    assert!((mean[ni * group + g].to_f64() - mu).abs() <= tol * 4.0);
                    for ch in g * d..(g + 1) * d {
                        for s in 0..hxw {
                            let i = (ni * c + ch) * hxw + s;
                            let want = (xr[i] - mu) * rs * wr[ch] + br[ch];
                            let got = out[i].to_f64();
                            // hxw = 1 with d = 1 gives var 0 and rstd ~316: scale tolerance by rstd
                            assert!(
                                (got - want).abs() <= tol * 8.0 * (1.0 + want.abs()) * rs.max(1.0),
                                "{got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn group_norm_random_types() {
        random_group_norm::<f32>(1e-5);
        random_group_norm::<f64>(1e-12);
        random_group_norm::<f16>(2e-3);
        random_group_norm::<bf16>(1e-2);
    }

    #[test]
    fn batch_norm_batch_stats_hand() {
        // x [N=2, C=2, 1]: ch0 {1, 3} mean 2, var 1; ch1 {5, 5} mean 5, var 0.
        // eps 3: rstd 1/2 and 1/√3; weight [2, 1], bias [0, 1]:
        // ch0 (x − 2) · ½ · 2 = [−1, 1]; ch1 0 · rstd + 1 = [1, 1].
        let (mut out, mut mean, mut invstd) = ([0.0f32; 4], [0.0f32; 2], [0.0f32; 2]);
        batch_norm_batch_stats(
            &[1.0f32, 5.0, 3.0, 5.0],
            &[2, 2, 1],
            Some(&[2.0, 1.0]),
            Some(&[0.0, 1.0]),
            3.0,
            &mut out,
            &mut mean,
            &mut invstd,
        )
        .unwrap();
        assert_eq!(out, [-1.0, 1.0, 1.0, 1.0]);
        assert_eq!(mean, [2.0, 5.0]);
        assert_eq!(invstd[0], 0.5);
        assert!((invstd[1] - 1.0 / 3.0f32.sqrt()).abs() < 1e-7);
        // Statistics outputs shorter than C.
        let err = batch_norm_batch_stats(
            &[1.0f32; 4],
            &[2, 2, 1],
            None,
            None,
            1e-5,
            &mut out,
            &mut [0.0; 1],
            &mut [0.0; 2],
        );
        assert_eq!(err, Err(KernelError::ShapeMismatch));
    }

    #[test]
    fn batch_norm_batch_stats_random_4d() {
        let mut rng = Lcg(29);
        let sizes = [3usize, 2, 3, 5];
        let x = rng.vec(90);
        let w = rng.vec(2);
        let (mut out, mut mean, mut invstd) = (vec![0.0f32; 90], [0.0f32; 2], [0.0f32; 2]);
        batch_norm_batch_stats(&x, &sizes, Some(&w), None, 1e-5, &mut out, &mut mean, &mut invstd).unwrap();
        for ch in 0..2 {
            let xs: Vec<f64> = (0..90).filter(|i| (i / 15) % 2 == ch).map(|i| x[i] as f64).collect();
            let (m, v) = ref_stats(&xs);
            let rstd = 1.0 / (v + 1e-5).sqrt();
            assert!((mean[ch] as f64 - m).abs() < 1e-6);
            assert!((invstd[ch] as f64 - rstd).abs() < 1e-5 * rstd);
            for i in (0..90).filter(|i| (i / 15) % 2 == ch) {
                let want = (x[i] as f64 - m) * rstd * w[ch] as f64;
                assert!((out[i] as f64 - want).abs() < 1e-5 * (1.0 + want.abs()));
            }
        }
    }

    #[test]
    fn batch_norm_random_4d() {
        let mut rng = Lcg(13);
        let sizes = [2usize, 3, 4, 5];
        let x = rng.vec(120);
        let mean = rng.vec(3);
        let var: Vec<f32> = rng.vec(3).iter().map(|v| v.abs() + 0.1).collect();
        let b = rng.vec(3);
        let mut out = vec![0.0f32; 120];
        batch_norm_no_training(&x, &sizes, None, Some(&b), &mean, &var, 1e-5, &mut out).unwrap();
        for i in 0..120 {
            let ch = (i / 20) % 3;
            let want = (x[i] as f64 - mean[ch] as f64) / (var[ch] as f64 + 1e-5).sqrt() + b[ch] as f64;
            assert!((out[i] as f64 - want).abs() < 1e-5 * (1.0 + want.abs()));
        }
    }
}
