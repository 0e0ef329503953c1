//! `aten::_softmax.out` and `aten::_log_softmax.out` along any dim of a
//! contiguous tensor.
//!
//! The tensor is seen as `outer × len × inner` (`len` the size of `dim`).
//! Each of the `outer · inner` slices along `dim` is reduced in the
//! accumulation type [`Float::Acc`]: its maximum `m` (NaN wins), then
//! `s = Σ exp(x − m)`; softmax is `exp(x − m) / s` and log-softmax
//! `x − m − ln s`. Subtracting the maximum keeps `exp` in range. As in
//! PyTorch, a slice containing NaN or `+inf`, or made only of `-inf`, gives
//! NaN everywhere.
//!
//! `half_to_float` is expressed by the output type: the output element `U`
//! may differ from the input `T` as long as both compute in the same
//! accumulation type (`f16`/`bf16` → `f32`; otherwise `U = T`).

use crate::linear::{as_f32, as_f32_mut};
use crate::num::{AccFloat, Element, Float};
use crate::scalar::exp_nonpositive;
use crate::{KernelError, KernelResult};
use core::any::TypeId;

/// `exp` in the accumulation type (`expf` for `f32`).
#[inline(always)]
fn acc_exp<A: AccFloat>(x: A) -> A {
    if TypeId::of::<A>() == TypeId::of::<f32>() {
        A::from_f32(libm::expf(x.to_f64() as f32))
    } else {
        A::from_f64(libm::exp(x.to_f64()))
    }
}

/// Natural logarithm in the accumulation type.
#[inline(always)]
fn acc_ln<A: AccFloat>(x: A) -> A {
    if TypeId::of::<A>() == TypeId::of::<f32>() {
        A::from_f32(libm::logf(x.to_f64() as f32))
    } else {
        A::from_f64(libm::log(x.to_f64()))
    }
}

/// NaN-propagating maximum: `b` replaces `a` if larger or NaN.
#[inline(always)]
#[allow(clippy::eq_op)]
fn max_nan<A: AccFloat>(a: A, b: A) -> A {
    if b > a || b != b {
        b
    } else {
        a
    }
}

/// `(outer, len, inner)` for a reduction over `dim` (negative counts from
/// the end) of a tensor of `sizes`, or `None` if `dim` is out of range. A
/// 0-d tensor accepts `dim` 0 or −1 and is one slice of length 1.
pub fn softmax_dims(sizes: &[usize], dim: i64) -> Option<(usize, usize, usize)> {
    let r = sizes.len() as i64;
    let wrap = r.max(1);
    let d = if dim < 0 { dim + wrap } else { dim };
    if d < 0 || d >= wrap {
        return None;
    }
    if r == 0 {
        return Some((1, 1, 1));
    }
    let d = d as usize;
    let outer = sizes[..d].iter().product();
    let inner = sizes[d + 1..].iter().product();
    Some((outer, sizes[d], inner))
}

/// Fewest elements of a softmax over rows that threads split: below it
/// the work (about 1.5 ns an element) is not worth a handover.
const SPLIT_ELEMENTS: usize = 1 << 14;

/// Slices processed at once when `inner > 1`.
const BLOCK: usize = 64;

fn run<T: Float, U: Float<Acc = T::Acc>, const LOG: bool>(
    x: &[T],
    sizes: &[usize],
    dim: i64,
    out: &mut [U],
) -> KernelResult {
    let (outer, len, inner) = softmax_dims(sizes, dim).ok_or(KernelError::ShapeMismatch)?;
    let total = outer * len * inner;
    if x.len() < total || out.len() < total {
        return Err(KernelError::ShapeMismatch);
    }
    if total == 0 {
        return Ok(());
    }
    // Whether `out` can hold the exponentials exactly (U is its own Acc).
    let exact_out = TypeId::of::<U>() == TypeId::of::<U::Acc>();
    if inner == 1 {
        if let (false, Some(x), Some(out)) = (LOG, as_f32(&x[..total]), as_f32_mut(&mut out[..total])) {
            // Bands of rows across threads, when there is enough work: an
            // attention's 4 × 128 rows of 128 took 100 µs on one thread.
            let split_up = total >= SPLIT_ELEMENTS;
            crate::parallel::for_each_band(out, outer, len, 1, split_up, &|rows, out| {
                let x = &x[rows.start * len..rows.end * len];
                crate::cpu::with_best_isa(SoftmaxRows { x, out, len });
            });
            return Ok(());
        }
        for (xr, or) in x[..total].chunks_exact(len).zip(out[..total].chunks_exact_mut(len)) {
            row::<T, U, LOG>(xr, or, exact_out);
        }
        return Ok(());
    }
    let neg_inf = T::Acc::from_f64(f64::NEG_INFINITY);
    for o in 0..outer {
        let base = o * len * inner;
        let xs = &x[base..base + len * inner];
        let os = &mut out[base..base + len * inner];
        for i0 in (0..inner).step_by(BLOCK) {
            let w = BLOCK.min(inner - i0);
            let mut mx = [neg_inf; BLOCK];
            for d in 0..len {
                for (m, &v) in mx[..w].iter_mut().zip(&xs[d * inner + i0..][..w]) {
                    *m = max_nan(*m, v.to_acc());
                }
            }
            let mut sum = [T::Acc::ZERO; BLOCK];
            for d in 0..len {
                let xv = &xs[d * inner + i0..][..w];
                let ov = &mut os[d * inner + i0..][..w];
                for j in 0..w {
                    let e = acc_exp(xv[j].to_acc() - mx[j]);
                    sum[j] += e;
                    if !LOG && exact_out {
                        ov[j] = U::from_acc(e);
                    }
                }
            }
            let mut lse = [T::Acc::ZERO; BLOCK];
            if LOG {
                for j in 0..w {
                    lse[j] = mx[j] + acc_ln(sum[j]);
                }
            }
            for d in 0..len {
                let xv = &xs[d * inner + i0..][..w];
                let ov = &mut os[d * inner + i0..][..w];
                for j in 0..w {
                    ov[j] = if LOG {
                        U::from_acc(xv[j].to_acc() - lse[j])
                    } else if exact_out {
                        U::from_acc(ov[j].to_acc() / sum[j])
                    } else {
                        U::from_acc(acc_exp(xv[j].to_acc() - mx[j]) / sum[j])
                    };
                }
            }
        }
    }
    Ok(())
}

/// One contiguous slice (`inner == 1`).
#[inline(always)]
fn row<T: Float, U: Float<Acc = T::Acc>, const LOG: bool>(x: &[T], out: &mut [U], exact_out: bool) {
    let neg_inf = T::Acc::from_f64(f64::NEG_INFINITY);
    let mut lanes = [neg_inf; 8];
    let chunks = x.chunks_exact(8);
    let mut m = neg_inf;
    for &v in chunks.remainder() {
        m = max_nan(m, v.to_acc());
    }
    for c in chunks {
        for l in 0..8 {
            lanes[l] = max_nan(lanes[l], c[l].to_acc());
        }
    }
    for l in lanes {
        m = max_nan(m, l);
    }
    let mut sum = T::Acc::ZERO;
    if LOG || !exact_out {
        for &v in x {
            sum += acc_exp(v.to_acc() - m);
        }
    } else {
        for (o, &v) in out.iter_mut().zip(x) {
            let e = acc_exp(v.to_acc() - m);
            sum += e;
            *o = U::from_acc(e);
        }
    }
    if LOG {
        let lse = m + acc_ln(sum);
        for (o, &v) in out.iter_mut().zip(x) {
            *o = U::from_acc(v.to_acc() - lse);
        }
    } else if exact_out {
        for o in out.iter_mut() {
            *o = U::from_acc(o.to_acc() / sum);
        }
    } else {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = U::from_acc(acc_exp(v.to_acc() - m) / sum);
        }
    }
}

/// Softmax of one contiguous `f32` slice, vectorized: the maximum, then
/// `exp(x − max)` and its sum ([`exp_sum_in_place`]), then one division
/// each. NaN anywhere (or `+inf`, or only `-inf`) gives NaN, as the
/// generic path.
#[inline(always)]
fn softmax_row_f32(x: &[f32], out: &mut [f32]) {
    const L: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; L];
    let chunks = x.chunks_exact(L);
    let mut m = f32::NEG_INFINITY;
    for &v in chunks.remainder() {
        m = max_nan(m, v);
    }
    for c in chunks {
        for l in 0..L {
            lanes[l] = max_nan(lanes[l], c[l]);
        }
    }
    for l in lanes {
        m = max_nan(m, l);
    }
    out.copy_from_slice(x);
    let sum = exp_sum_in_place(out, m);
    for o in out.iter_mut() {
        *o /= sum;
    }
}

/// `x = exp(x − m)` over `row` with [`exp_nonpositive`] (`m` at least
/// every element, or NaN), and the sum of the results, taken over 16
/// lanes. Vectorizes where inlined into [`crate::cpu::Vectorized`] work.
#[inline(always)]
pub(crate) fn exp_sum_in_place(row: &mut [f32], m: f32) -> f32 {
    const L: usize = 16;
    let mut sums = [0.0f32; L];
    let mut chunks = row.chunks_exact_mut(L);
    for xs in &mut chunks {
        for l in 0..L {
            let e = exp_nonpositive(xs[l] - m);
            xs[l] = e;
            sums[l] += e;
        }
    }
    let mut tail = 0.0f32;
    for x in chunks.into_remainder() {
        *x = exp_nonpositive(*x - m);
        tail += *x;
    }
    sums.iter().sum::<f32>() + tail
}

/// Softmax of the contiguous `f32` rows of length `len` of `x`.
struct SoftmaxRows<'a> {
    x: &'a [f32],
    out: &'a mut [f32],
    len: usize,
}

impl crate::cpu::Vectorized for SoftmaxRows<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for (xr, or) in self.x.chunks_exact(self.len).zip(self.out.chunks_exact_mut(self.len)) {
            softmax_row_f32(xr, or);
        }
    }
}

/// `aten::_softmax.out(self, dim, half_to_float, out)`: softmax of `x`
/// (contiguous, shape `sizes`) along `dim` (negative counts from the end)
/// into `out` (same shape). With `half_to_float`, instantiate with
/// `U = f32` for a half input; otherwise `U = T`. Returns
/// [`KernelError::ShapeMismatch`] if `dim` is out of range or a buffer is
/// too short.
pub fn softmax<T: Float, U: Float<Acc = T::Acc>>(x: &[T], sizes: &[usize], dim: i64, out: &mut [U]) -> KernelResult {
    run::<T, U, false>(x, sizes, dim, out)
}

/// `aten::_log_softmax.out(self, dim, half_to_float, out)`: log-softmax of
/// `x` along `dim`, computed as `x − max − ln Σ exp(x − max)`; arguments as
/// in [`softmax`].
pub fn log_softmax<T: Float, U: Float<Acc = T::Acc>>(
    x: &[T],
    sizes: &[usize],
    dim: i64,
    out: &mut [U],
) -> KernelResult {
    run::<T, U, true>(x, sizes, dim, out)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::testing::Lcg;
    use crate::{bf16, f16};
    use std::vec;
    use std::vec::Vec;

    /// `n` logits in `[-8, 8)`.
    fn logits(rng: &mut Lcg, n: usize) -> Vec<f32> {
        rng.vec(n).iter().map(|v| v * 8.0).collect()
    }

    #[test]
    fn hand_computed() {
        // softmax([0, ln 3]) = [1/4, 3/4]; log: [ln(1/4), ln(3/4)].
        // libm, not std: Miri perturbs std's ln by a few ulp (as a libm
        // may), which is more than these bounds allow.
        let x = [0.0f32, libm::logf(3.0)];
        let mut o = [0.0f32; 2];
        softmax(&x, &[2], 0, &mut o).unwrap();
        assert!((o[0] - 0.25).abs() < 1e-7 && (o[1] - 0.75).abs() < 1e-7);
        log_softmax(&x, &[2], -1, &mut o).unwrap();
        assert!((o[0] - libm::logf(0.25)).abs() < 1e-6 && (o[1] - libm::logf(0.75)).abs() < 1e-6);
        // Large values do not overflow: softmax([1000, 1000]) = [0.5, 0.5]
        softmax(&[1000.0f32, 1000.0], &[1, 2], 1, &mut o).unwrap();
        assert_eq!(o, [0.5, 0.5]);
        // -inf entries get 0 (log: -inf).
        softmax(&[f32::NEG_INFINITY, 1.0], &[2], 0, &mut o).unwrap();
        assert_eq!(o, [0.0, 1.0]);
        log_softmax(&[f32::NEG_INFINITY, 1.0], &[2], 0, &mut o).unwrap();
        assert_eq!(o, [f32::NEG_INFINITY, 0.0]);
        // 0-d tensor
        let mut s = [0.0f32];
        softmax(&[5.0f32], &[], -1, &mut s).unwrap();
        assert_eq!(s, [1.0]);
        assert!(softmax(&[5.0f32], &[1], 1, &mut s).is_err());
    }

    #[test]
    fn nan_and_inf_rows() {
        // all -inf, a NaN, a +inf: whole slice NaN (also with inner > 1)
        for (row, dims) in [
            ([f32::NEG_INFINITY; 3], [3usize, 1usize]),
            ([1.0, f32::NAN, 2.0], [3, 1]),
            ([1.0, f32::INFINITY, 2.0], [3, 1]),
            ([f32::NEG_INFINITY; 3], [1, 3]),
            ([1.0, f32::NAN, 2.0], [1, 3]),
        ] {
            let mut o = [0.0f32; 3];
            softmax(&row, &dims, if dims[0] == 3 { 0 } else { 1 }, &mut o).unwrap();
            assert!(o.iter().all(|v| v.is_nan()), "{row:?} {o:?}");
            log_softmax(&row, &dims, if dims[0] == 3 { 0 } else { 1 }, &mut o).unwrap();
            assert!(o.iter().all(|v| v.is_nan()), "{row:?} {o:?}");
        }
    }

    /// Direct reference along `dim`.
    fn reference(x: &[f64], sizes: &[usize], dim: usize, log: bool) -> Vec<f64> {
        let outer: usize = sizes[..dim].iter().product();
        let len = sizes[dim];
        let inner: usize = sizes[dim + 1..].iter().product();
        let mut r = vec![0.0; x.len()];
        for o in 0..outer {
            for i in 0..inner {
                let at = |d: usize| (o * len + d) * inner + i;
                let m = (0..len).map(|d| x[at(d)]).fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = (0..len).map(|d| (x[at(d)] - m).exp()).sum();
                for d in 0..len {
                    r[at(d)] = if log {
                        x[at(d)] - m - s.ln()
                    } else {
                        (x[at(d)] - m).exp() / s
                    };
                }
            }
        }
        r
    }

    fn random_case<T: Float, U: Float<Acc = T::Acc>>(tol: f64) {
        let mut rng = Lcg(21);
        // Under Miri, smaller tensors through the same paths: rows with
        // 16-wide chunks and a tail, strided slices in a full block of
        // `BLOCK` and a partial one.
        let cases: &[(&[usize], usize)] = if cfg!(miri) {
            &[
                (&[2, 17], 1),
                (&[2, 3, 4], 0),
                (&[2, 3, 4], 1),
                (&[1, 5, 3], 2),
                (&[1, 2, 70], 1),
                (&[1, 9, 1], 1),
            ]
        } else {
            &[
                (&[3, 17], 1),
                (&[4, 5, 6], 0),
                (&[4, 5, 6], 1),
                (&[2, 70, 3], 2),
                (&[2, 3, 130], 1),
                (&[1, 9, 1], 1),
            ]
        };
        for &(sizes, dim) in cases {
            let n: usize = sizes.iter().product();
            let x: Vec<T> = logits(&mut rng, n).iter().map(|&v| T::from_f64(v as f64)).collect();
            let xr: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
            for log in [false, true] {
                let want = reference(&xr, sizes, dim, log);
                let mut o = vec![U::default(); n];
                let d = if dim % 2 == 0 {
                    dim as i64
                } else {
                    dim as i64 - sizes.len() as i64
                };
                if log {
                    log_softmax(&x, sizes, d, &mut o).unwrap();
                } else {
                    softmax(&x, sizes, d, &mut o).unwrap();
                }
                for (g, w) in o.iter().zip(&want) {
                    let g = g.to_f64();
                    assert!(
                        (g - w).abs() <= tol * (1.0 + w.abs()),
                        "{sizes:?} {dim} {log}: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn vectorized_rows_match_the_generic_path() {
        let mut rng = Lcg(9);
        for len in [1, 7, 16, 33, 128] {
            let x = logits(&mut rng, 3 * len);
            let mut fast = vec![0.0f32; x.len()];
            softmax(&x, &[3, len], 1, &mut fast).unwrap();
            for (xr, fr) in x.chunks(len).zip(fast.chunks(len)) {
                let mut generic = vec![0.0f32; len];
                row::<f32, f32, false>(xr, &mut generic, true);
                for (f, g) in fr.iter().zip(&generic) {
                    assert!((f - g).abs() <= 4e-7 * g.abs().max(1e-30), "{f} vs {g}");
                }
            }
        }
    }

    #[test]
    fn random_against_reference() {
        random_case::<f32, f32>(1e-6);
        random_case::<f64, f64>(1e-13);
        random_case::<f16, f16>(2e-3);
        random_case::<bf16, bf16>(1e-2);
        // half_to_float
        random_case::<f16, f32>(1e-6);
        random_case::<bf16, f32>(1e-6);
    }
}
