//! Matrix products: `aten::mm.out`, `aten::bmm.out`, `aten::addmm.out` and
//! `aten::linear.out`, for every float type, plus the generic GEMM that
//! convolution uses.
//!
//! All matrices are contiguous and row-major; an [`Operand`] may be the
//! row-major storage of its transpose (a `Linear` weight read in place).
//! `f32` runs on the engine in [`crate::gemm`] (cache-blocked, AVX-512 /
//! AVX2 micro-kernels, bias and ReLU fused into the stores), by
//! [`crate::gemm::gemm_packed`] for a weight packed ahead of time; other
//! float types use a simple loop that accumulates in [`Float::Acc`].

use crate::num::{AccFloat, Element, Float, Sizes};
use crate::{KernelError, KernelResult};
use core::any::TypeId;

pub use crate::gemm::{gemm_scratch_len, sgemm, sgemm_fused, sgemm_kernel_name, Epilogue};

/// Reinterprets a slice of `T` as `f32` when `T` is `f32`.
#[inline(always)]
pub(crate) fn as_f32<T: 'static>(s: &[T]) -> Option<&[f32]> {
    if TypeId::of::<T>() == TypeId::of::<f32>() {
        // SAFETY: `T` and `f32` have the same `TypeId`, so they are the same
        // type; the pointer, length and lifetime are those of `s`.
        Some(unsafe { core::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
    } else {
        None
    }
}

/// Mutable version of [`as_f32`].
#[inline(always)]
pub(crate) fn as_f32_mut<T: 'static>(s: &mut [T]) -> Option<&mut [f32]> {
    if TypeId::of::<T>() == TypeId::of::<f32>() {
        // SAFETY: as in `as_f32`; the unique borrow of `s` moves into the
        // result, so no aliasing is created.
        Some(unsafe { core::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<f32>(), s.len()) })
    } else {
        None
    }
}

// ---------------------------------------------------------------------------
// Generic element types
// ---------------------------------------------------------------------------

/// GEMM for any float type: `C = alpha · op(A) · op(B) + beta · C`, with the
/// layouts of [`sgemm`]. `f32` goes to [`sgemm`] (using `scratch`); other
/// types ignore `scratch` and accumulate each output in [`Float::Acc`].
#[allow(clippy::too_many_arguments)]
pub fn gemm<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    a: &[T],
    a_trans: bool,
    b: &[T],
    b_trans: bool,
    beta: f64,
    c: &mut [T],
    scratch: &mut [f32],
) {
    if let (Some(a32), Some(b32)) = (as_f32(a), as_f32(b)) {
        if let Some(c32) = as_f32_mut(c) {
            sgemm(
                m,
                n,
                k,
                alpha as f32,
                a32,
                a_trans,
                b32,
                b_trans,
                beta as f32,
                c32,
                scratch,
            );
            return;
        }
    }
    gemm_generic(m, n, k, alpha, a, a_trans, b, b_trans, beta, c);
}

/// The simple loop behind [`gemm`] for non-`f32` types.
#[allow(clippy::too_many_arguments)]
fn gemm_generic<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    a: &[T],
    a_trans: bool,
    b: &[T],
    b_trans: bool,
    beta: f64,
    c: &mut [T],
) {
    const CH: usize = 64;
    let zero = T::Acc::ZERO;
    let alpha = T::Acc::from_f64(alpha);
    let beta = T::Acc::from_f64(beta);
    let a_at = |i: usize, q: usize| -> T::Acc {
        if a_trans {
            a[q * m + i].to_acc()
        } else {
            a[i * k + q].to_acc()
        }
    };
    let finish = |s: T::Acc, old: T| -> T {
        if beta == zero {
            T::from_acc(alpha * s)
        } else {
            T::from_acc(alpha * s + beta * old.to_acc())
        }
    };
    for i in 0..m {
        let crow = &mut c[i * n..(i + 1) * n];
        if b_trans {
            for (j, cj) in crow.iter_mut().enumerate() {
                let brow = &b[j * k..(j + 1) * k];
                let mut s = zero;
                for (q, &bv) in brow.iter().enumerate() {
                    s += a_at(i, q) * bv.to_acc();
                }
                *cj = finish(s, *cj);
            }
        } else {
            for j0 in (0..n).step_by(CH) {
                let w = CH.min(n - j0);
                let mut acc = [zero; CH];
                for q in 0..k {
                    let av = a_at(i, q);
                    let brow = &b[q * n + j0..][..w];
                    for (x, &bv) in acc.iter_mut().zip(brow) {
                        *x += av * bv.to_acc();
                    }
                }
                for (cj, &s) in crow[j0..j0 + w].iter_mut().zip(&acc) {
                    *cj = finish(s, *cj);
                }
            }
        }
    }
}

/// A bias added to a product by [`gemm_bias`].
#[derive(Clone, Copy, Debug)]
pub enum Bias<'a, T> {
    /// No bias.
    None,
    /// `bias[j]` added to column `j` of every row (length `n`; the bias of
    /// `linear`).
    PerColumn(&'a [T]),
    /// `bias[i]` added to every element of row `i` (length `m`; the
    /// per-output-channel bias of a convolution).
    PerRow(&'a [T]),
}

/// Fills `c` (`m × n`) with the broadcast bias; returns whether it did.
fn fill_bias<T: Float>(m: usize, n: usize, bias: Bias<'_, T>, c: &mut [T]) -> bool {
    match bias {
        Bias::None => false,
        Bias::PerColumn(bv) => {
            for row in c[..m * n].chunks_exact_mut(n.max(1)) {
                row.copy_from_slice(&bv[..n]);
            }
            true
        }
        Bias::PerRow(bv) => {
            for (row, &v) in c[..m * n].chunks_exact_mut(n.max(1)).zip(&bv[..m]) {
                row.fill(v);
            }
            true
        }
    }
}

/// `C[m×n] = op(A) · op(B) + bias`, with the layouts of [`sgemm`] and the
/// bias broadcast along rows or columns. `c`'s previous contents are
/// ignored. `scratch`: [`gemm_scratch_len`]`(m, n, k)` floats (used for
/// `f32` only).
#[allow(clippy::too_many_arguments)]
pub fn gemm_bias<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    a_trans: bool,
    b: &[T],
    b_trans: bool,
    bias: Bias<'_, T>,
    c: &mut [T],
    scratch: &mut [f32],
) {
    if m == 0 || n == 0 {
        return;
    }
    let beta = if fill_bias(m, n, bias, c) { 1.0 } else { 0.0 };
    gemm(m, n, k, 1.0, a, a_trans, b, b_trans, beta, c, scratch);
}

// ---------------------------------------------------------------------------
// Operator entry points
// ---------------------------------------------------------------------------

/// Output sizes of `aten::mm` for `self` of `a_sizes` (`[m, k]`) and `mat2`
/// of `b_sizes` (`[k, n]`): `[m, n]`, or `None` if the shapes do not fit.
pub fn mm_output_sizes(a_sizes: &[usize], b_sizes: &[usize]) -> Option<[usize; 2]> {
    match (a_sizes, b_sizes) {
        (&[m, k], &[k2, n]) if k == k2 => Some([m, n]),
        _ => None,
    }
}

/// A matrix operand of a product: stored row-major, or (`trans`) as the
/// row-major storage of its transpose; for a constant `f32` right operand,
/// optionally also packed ahead of time by [`crate::gemm::pack`]
/// (`packed`, empty when not; a packing of another shape is ignored).
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a, T> {
    pub data: &'a [T],
    pub trans: bool,
    pub packed: &'a [f32],
}

impl<'a, T> Operand<'a, T> {
    /// A row-major matrix.
    pub fn plain(data: &'a [T]) -> Self {
        Operand {
            data,
            trans: false,
            packed: &[],
        }
    }
}

/// `C[m×n] = alpha · op(A) · op(B) + beta · C`, then `bias[j]` added to
/// column `j` (only with `beta == 0`) and `relu` when asked; `f32` fuses
/// both into the stores of the product.
#[allow(clippy::too_many_arguments)]
fn product<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    beta: f64,
    col_bias: Option<&[T]>,
    relu: bool,
    c: &mut [T],
    scratch: &mut [f32],
) {
    if m == 0 || n == 0 {
        return;
    }
    if let (Some(a32), Some(b32), Some(c32)) = (as_f32(a.data), as_f32(b.data), as_f32_mut(c)) {
        let e = Epilogue::new(col_bias.and_then(as_f32), relu);
        if !a.trans && alpha == 1.0 && beta == 0.0 && crate::gemm::is_packed(b.packed, k, n) {
            crate::gemm::gemm_packed(m, n, k, a32, k, b.packed, &e, c32, n);
            return;
        }
        sgemm_fused(
            m,
            n,
            k,
            alpha as f32,
            a32,
            a.trans,
            b32,
            b.trans,
            beta as f32,
            &e,
            c32,
            scratch,
        );
        return;
    }
    let c = &mut c[..m * n];
    let beta = match col_bias {
        Some(bias) => {
            fill_bias(m, n, Bias::PerColumn(bias), c);
            1.0
        }
        None => beta,
    };
    gemm_generic(m, n, k, alpha, a.data, a.trans, b.data, b.trans, beta, c);
    if relu {
        for x in c {
            *x = crate::scalar::relu(*x);
        }
    }
}

/// `aten::mm.out(self, mat2, out)`: `out[m×n] = self[m×k] · mat2[k×n]`,
/// then `relu` when it is fused in. `scratch`: [`gemm_scratch_len`]`(m, n,
/// k)` floats (used for `f32` only).
#[allow(clippy::too_many_arguments)]
pub fn mm<T: Float>(
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    m: usize,
    k: usize,
    n: usize,
    relu: bool,
    out: &mut [T],
    scratch: &mut [f32],
) {
    product(m, n, k, 1.0, a, b, 0.0, None, relu, out, scratch);
}

/// Output sizes of `aten::bmm` for `self` of `a_sizes` (`[b, m, k]`) and
/// `mat2` of `b_sizes` (`[b, k, n]`): `[b, m, n]`, or `None`.
pub fn bmm_output_sizes(a_sizes: &[usize], b_sizes: &[usize]) -> Option<[usize; 3]> {
    match (a_sizes, b_sizes) {
        (&[bt, m, k], &[bt2, k2, n]) if bt == bt2 && k == k2 => Some([bt, m, n]),
        _ => None,
    }
}

/// Most parts [`bmm`] splits its batch into across threads; each needs a
/// scratch of its own.
pub const MAX_BMM_PARTS: usize = 4;

/// Scratch length, in `f32` elements, that [`bmm`] needs: a
/// [`gemm_scratch_len`] for each part its batch may be split into.
pub fn bmm_scratch_len(batch: usize, m: usize, n: usize, k: usize) -> usize {
    gemm_scratch_len(m, n, k).saturating_mul(batch.clamp(1, MAX_BMM_PARTS))
}

/// `aten::bmm.out(self, mat2, out)`: for each of `batch` matrices,
/// `out[b] (m×n) = self[b] (m×k) · mat2[b] (k×n)`. `scratch`:
/// [`bmm_scratch_len`] floats (used for `f32` only). With threads, each
/// takes a share of the matrices: an attention's products, one per head,
/// are too small to split one by one (four 128 × 128 × 64 products ran
/// no faster on two threads than on one). Every matrix is computed the
/// same way whatever the thread count.
#[allow(clippy::too_many_arguments)]
pub fn bmm<T: Float>(a: &[T], b: &[T], batch: usize, m: usize, k: usize, n: usize, out: &mut [T], scratch: &mut [f32]) {
    if m == 0 || n == 0 {
        return;
    }
    let (a, b, out) = (&a[..batch * m * k], &b[..batch * k * n], &mut out[..batch * m * n]);
    let matrices = |from: usize, out: &mut [T], scratch: &mut [f32]| {
        for (i, ob) in out.chunks_exact_mut(m * n).enumerate() {
            let bi = from + i;
            let (ab, bb) = (&a[bi * m * k..][..m * k], &b[bi * k * n..][..k * n]);
            gemm(m, n, k, 1.0, ab, false, bb, false, 0.0, ob, scratch);
        }
    };
    let groups = crate::parallel::split(batch, batch.div_ceil(MAX_BMM_PARTS));
    let per = gemm_scratch_len(m, n, k);
    // A scratch of one product's (an older caller's) runs them in turn.
    let parts = groups.parts();
    if parts <= 1 || scratch.len() < per * parts {
        return matrices(0, out, scratch);
    }
    let outs = crate::parallel::Pieces::new(out, groups.ranges().map(|(b0, _)| b0 * m * n));
    let scratches = crate::parallel::Pieces::new(scratch, (0..parts).map(|p| p * per));
    crate::parallel::run_parts(parts, &|p| {
        if let (Some((b0, _)), Some(o), Some(s)) = (groups.range(p), outs.take(p), scratches.take(p)) {
            matrices(b0, o, &mut s[..per]);
        }
    });
}

/// The broadcast shape `(rows, cols)` of an `addmm` bias of `bias_sizes`
/// against an `m × n` result (each 1 or the full size), or `None`.
fn addmm_bias_dims(bias_sizes: &[usize], m: usize, n: usize) -> Option<(usize, usize)> {
    let (bm, bn) = match *bias_sizes {
        [] => (1, 1),
        [s] => (1, s),
        [r, s] => (r, s),
        _ => return None,
    };
    ((bm == 1 || bm == m) && (bn == 1 || bn == n)).then_some((bm, bn))
}

/// Output sizes of `aten::addmm` for `self` (the bias) of `bias_sizes`,
/// `mat1` of `[m, k]` and `mat2` of `[k, n]`: `[m, n]`, or `None` when the
/// matrices do not fit or the bias does not broadcast to `[m, n]` (it may
/// be a scalar, `[1]`, `[n]`, `[1, n]`, `[m, 1]` or `[m, n]`).
pub fn addmm_output_sizes(bias_sizes: &[usize], mat1_sizes: &[usize], mat2_sizes: &[usize]) -> Option<[usize; 2]> {
    let [m, n] = mm_output_sizes(mat1_sizes, mat2_sizes)?;
    addmm_bias_dims(bias_sizes, m, n)?;
    Some([m, n])
}

/// `aten::addmm.out(self, mat1, mat2, beta, alpha, out)`:
/// `out = beta · self + alpha · (mat1 · mat2)` where `mat1` is `m × k`,
/// `mat2` is `k × n` and `self` (`bias`, of `bias_sizes`) broadcasts to
/// `[m, n]` (see [`addmm_output_sizes`]); then `relu` when it is fused in.
/// With `beta == 0` the bias is ignored, NaNs included, as in PyTorch.
/// `scratch`: [`gemm_scratch_len`]`(m, n, k)` floats (used for `f32`
/// only). Returns [`KernelError::ShapeMismatch`] if the bias does not
/// broadcast.
#[allow(clippy::too_many_arguments)]
pub fn addmm<T: Float>(
    bias: &[T],
    bias_sizes: &[usize],
    mat1: Operand<'_, T>,
    mat2: Operand<'_, T>,
    m: usize,
    k: usize,
    n: usize,
    beta: f64,
    alpha: f64,
    relu: bool,
    out: &mut [T],
    scratch: &mut [f32],
) -> KernelResult {
    let (bm, bn) = addmm_bias_dims(bias_sizes, m, n).ok_or(KernelError::ShapeMismatch)?;
    if bias.len() < bm * bn {
        return Err(KernelError::ShapeMismatch);
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if beta == 1.0 && bm == 1 && bn == n {
        // The bias of a linear layer: added as the results are stored.
        product(m, n, k, alpha, mat1, mat2, 0.0, Some(&bias[..n]), relu, out, scratch);
        return Ok(());
    }
    if beta != 0.0 {
        for (i, row) in out[..m * n].chunks_exact_mut(n).enumerate() {
            let r = if bm == 1 { 0 } else { i };
            if bn == 1 {
                row.fill(bias[r]);
            } else {
                row.copy_from_slice(&bias[r * n..(r + 1) * n]);
            }
        }
    }
    product(m, n, k, alpha, mat1, mat2, beta, None, relu, out, scratch);
    Ok(())
}

/// Output sizes of `aten::linear` for `input` of `x_sizes` (`[*, k]`),
/// `weight` of `w_sizes` (`[n, k]`) and an optional bias of length
/// `bias_len` (must be `n`): `[*, n]`, or `None`.
pub fn linear_output_sizes(x_sizes: &[usize], w_sizes: &[usize], bias_len: Option<usize>) -> Option<Sizes> {
    let (&k, lead) = x_sizes.split_last()?;
    let &[n, k2] = w_sizes else { return None };
    if k != k2 || bias_len.is_some_and(|l| l != n) {
        return None;
    }
    let mut s = Sizes::new(x_sizes)?;
    s.set(lead.len(), n);
    Some(s)
}

/// `aten::linear.out(input, weight, bias?, out)`:
/// `out[m×n] = input[m×k] · weight[n×k]ᵀ + bias[n]`, then `relu` when it is
/// fused in, where `m` is the product of `input`'s leading dimensions and
/// `weight` is row-major `n × k` (a PyTorch `Linear` weight; `packed`: its
/// copy packed by [`crate::gemm::pack`], or empty). `scratch`:
/// [`gemm_scratch_len`]`(m, n, k)` floats (used for `f32` only).
#[allow(clippy::too_many_arguments)]
pub fn linear<T: Float>(
    x: &[T],
    weight: &[T],
    packed: &[f32],
    bias: Option<&[T]>,
    m: usize,
    k: usize,
    n: usize,
    relu: bool,
    out: &mut [T],
    scratch: &mut [f32],
) {
    let w = Operand {
        data: weight,
        trans: true,
        packed,
    };
    product(m, n, k, 1.0, Operand::plain(x), w, 0.0, bias, relu, out, scratch);
}

/// XNNPACK's fully-connected node: `out[m×n] = clamp(x[m×k] · Wᵀ + bias)`
/// with the weight `n × k` row-major, or `k × n` when `weight_transposed`
/// (XNNPACK's `XNN_FLAG_TRANSPOSE_WEIGHTS`). `packed`, when given, is the
/// weight packed by [`pack_fully_connected`]; otherwise `scratch` holds
/// [`gemm_scratch_len`]`(m, n, k)` floats.
#[allow(clippy::too_many_arguments)]
pub fn fully_connected(
    x: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    m: usize,
    k: usize,
    n: usize,
    weight_transposed: bool,
    min: f32,
    max: f32,
    packed: Option<&[f32]>,
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let e = Epilogue {
        bias,
        residual: None,
        min,
        max,
        activation: crate::activation::Activation::Identity,
    };
    let b_trans = !weight_transposed;
    match packed {
        Some(p) => crate::gemm::gemm_packed(m, n, k, x, k, p, &e, out, n),
        None => sgemm_fused(m, n, k, 1.0, x, false, weight, b_trans, 0.0, &e, out, scratch),
    }
}

/// Packs the weight of a [`fully_connected`] (`k` inputs, `n` outputs,
/// laid out as `weight_transposed` says) into `packed`
/// ([`crate::gemm::packed_len`]`(k, n)` floats, serving this weight
/// alone). Does nothing when `packed` already holds it, so it can run before
/// every call; ptec runs it at compile time when the weights are embedded.
pub fn pack_fully_connected(weight: &[f32], k: usize, n: usize, weight_transposed: bool, packed: &mut [f32]) {
    crate::gemm::ensure_packed(weight, k, n, !weight_transposed, packed);
}

/// XNNPACK's batch matrix multiply: for every index of the output's batch
/// dimensions `batch` (row-major), `out = a · op(b)` with `a` `m × k` and
/// `b` `k × n` (or `n × k` when `b_transposed`). `a_strides`/`b_strides`
/// give each operand's step, in matrices, per batch dimension (0 where it
/// is broadcast). `scratch`: [`gemm_scratch_len`]`(m, n, k)` floats.
#[allow(clippy::too_many_arguments)]
pub fn batch_matmul(
    a: &[f32],
    b: &[f32],
    batch: &[usize],
    a_strides: &[usize],
    b_strides: &[usize],
    m: usize,
    k: usize,
    n: usize,
    b_transposed: bool,
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let count: usize = batch.iter().product();
    let mut index = [0usize; crate::MAX_RANK];
    let rank = batch.len();
    for bi in 0..count {
        let (mut ao, mut bo) = (0, 0);
        for d in 0..rank {
            ao += index[d] * a_strides[d];
            bo += index[d] * b_strides[d];
        }
        let am = &a[ao * m * k..][..m * k];
        let bm = &b[bo * k * n..][..k * n];
        let om = &mut out[bi * m * n..][..m * n];
        sgemm_fused(
            m,
            n,
            k,
            1.0,
            am,
            false,
            bm,
            b_transposed,
            0.0,
            &Epilogue::NONE,
            om,
            scratch,
        );
        // Next batch index, last dimension fastest.
        for d in (0..rank).rev() {
            index[d] += 1;
            if index[d] < batch[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::testing::{check, Lcg};
    use crate::{bf16, f16};
    use std::vec;
    use std::vec::Vec;

    /// Triple-loop reference in f64.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        m: usize,
        n: usize,
        k: usize,
        alpha: f64,
        a: &[f32],
        at: bool,
        b: &[f32],
        bt: bool,
        beta: f64,
        c: &[f32],
    ) -> Vec<f64> {
        let mut r = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for p in 0..k {
                    let av = if at { a[p * m + i] } else { a[i * k + p] };
                    let bv = if bt { b[j * k + p] } else { b[p * n + j] };
                    s += av as f64 * bv as f64;
                }
                r[i * n + j] = alpha * s + if beta == 0.0 { 0.0 } else { beta * c[i * n + j] as f64 };
            }
        }
        r
    }

    #[test]
    fn hand_computed() {
        // A = [[1,2,3],[4,5,6]], B = [[1,0],[0,1],[1,1]]
        // A·B = [[1+3, 2+3], [4+6, 5+6]] = [[4,5],[10,11]]
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
        let (pa, pb) = (Operand::plain(&a[..]), Operand::plain(&b[..]));
        let mut c = [0.0f32; 4];
        mm(
            Operand::plain(&a[..]),
            Operand::plain(&b[..]),
            2,
            3,
            2,
            false,
            &mut c,
            &mut [],
        );
        assert_eq!(c, [4.0, 5.0, 10.0, 11.0]);
        // addmm with bias [10, 20] (shape [2]), beta 2, alpha 0.5:
        // 2·[10,20] + 0.5·[[4,5],[10,11]] = [[22,42.5],[25,45.5]]
        addmm(
            &[10.0f32, 20.0],
            &[2],
            pa,
            pb,
            2,
            3,
            2,
            2.0,
            0.5,
            false,
            &mut c,
            &mut [],
        )
        .unwrap();
        assert_eq!(c, [22.0, 42.5, 25.0, 45.5]);
        // linear: x = [1,2,3] (m=1,k=3), weight rows [1,1,1], [0,1,0]; bias [1,-1]
        // → [6+1, 2-1] = [7, 1]
        let mut o = [0.0f32; 2];
        linear(
            &[1.0f32, 2.0, 3.0],
            &[1.0, 1.0, 1.0, 0.0, 1.0, 0.0],
            &[],
            Some(&[1.0, -1.0]),
            1,
            3,
            2,
            false,
            &mut o,
            &mut [],
        );
        assert_eq!(o, [7.0, 1.0]);
        // beta = 0 ignores a NaN bias.
        addmm(&[f32::NAN], &[], pa, pb, 2, 3, 2, 0.0, 1.0, false, &mut c, &mut []).unwrap();
        // a bias that does not broadcast is rejected
        assert!(addmm(&[1.0f32; 3], &[3], pa, pb, 2, 3, 2, 1.0, 1.0, false, &mut c, &mut []).is_err());
        assert_eq!(c, [4.0, 5.0, 10.0, 11.0]);
        // k = 0: out = beta · bias ([m,1] bias broadcast along columns).
        addmm(
            &[1.0f32, 2.0],
            &[2, 1],
            Operand::plain(&[]),
            Operand::plain(&[]),
            2,
            0,
            2,
            3.0,
            1.0,
            false,
            &mut c,
            &mut [],
        )
        .unwrap();
        assert_eq!(c, [3.0, 3.0, 6.0, 6.0]);
    }

    #[test]
    fn bmm_and_linear_random() {
        let mut rng = Lcg(3);
        let (bt, m, k, n) = (3, 9, 21, 11);
        let a = rng.vec(bt * m * k);
        let b = rng.vec(bt * k * n);
        let mut out = vec![0.0f32; bt * m * n];
        let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
        bmm(&a, &b, bt, m, k, n, &mut out, &mut scratch);
        for i in 0..bt {
            let want = reference(m, n, k, 1.0, &a[i * m * k..], false, &b[i * k * n..], false, 0.0, &[]);
            check(&out[i * m * n..(i + 1) * m * n], &want, k);
        }
        let (m, k, n) = (10, 50, 23);
        let x = rng.vec(m * k);
        let w = rng.vec(n * k);
        let bias = rng.vec(n);
        let mut out = vec![0.0f32; m * n];
        let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
        linear(&x, &w, &[], Some(&bias), m, k, n, false, &mut out, &mut scratch);
        let mut want = reference(m, n, k, 1.0, &x, false, &w, true, 0.0, &[]);
        for (i, v) in want.iter_mut().enumerate() {
            *v += bias[i % n] as f64;
        }
        check(&out, &want, k);
    }

    fn generic_case<T: Float>(tol: f64) {
        let mut rng = Lcg(11);
        let (m, k, n) = (5, 19, 7);
        let a32 = rng.vec(m * k);
        let b32 = rng.vec(k * n);
        let bias32 = rng.vec(n);
        let conv = |v: &[f32]| v.iter().map(|&x| T::from_f64(x as f64)).collect::<Vec<T>>();
        let back = |v: &[T]| v.iter().map(|&x| T::to_f64(x) as f32).collect::<Vec<f32>>();
        // Reference on the rounded inputs.
        let (a, b, bias) = (conv(&a32), conv(&b32), conv(&bias32));
        let (ar, br, biasr) = (back(&a), back(&b), back(&bias));
        let mut out = vec![T::default(); m * n];
        addmm(
            &bias,
            &[1, n],
            Operand::plain(&a),
            Operand::plain(&b),
            m,
            k,
            n,
            0.5,
            2.0,
            false,
            &mut out,
            &mut [],
        )
        .unwrap();
        let mut want = reference(m, n, k, 2.0, &ar, false, &br, false, 0.0, &[]);
        for (i, v) in want.iter_mut().enumerate() {
            *v += 0.5 * biasr[i % n] as f64;
        }
        for (g, w) in out.iter().zip(&want) {
            assert!(
                (g.to_f64() - w).abs() <= tol * (1.0 + w.abs()),
                "{} vs {}",
                g.to_f64(),
                w
            );
        }
        // Transposed B through linear.
        let w_t: Vec<T> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        linear(&a, &w_t, &[], None, m, k, n, false, &mut out, &mut []);
        let want = reference(m, n, k, 1.0, &ar, false, &br, false, 0.0, &[]);
        for (g, w) in out.iter().zip(&want) {
            assert!((g.to_f64() - w).abs() <= tol * (1.0 + w.abs()));
        }
    }

    #[test]
    fn addmm_fuses_bias_and_relu_for_every_type() {
        // A = [[1, -2]], B = [[1, 0, -2], [1, 1, -4]], bias = [0.5, 1, -1].
        fn case<T: Float>() {
            let t = |v: &[f64]| v.iter().map(|&x| T::from_f64(x)).collect::<Vec<T>>();
            let (a, b, bias) = (
                t(&[1.0, -2.0]),
                t(&[1.0, 0.0, -2.0, 1.0, 1.0, -4.0]),
                t(&[0.5, 1.0, -1.0]),
            );
            let mut out = vec![T::default(); 3];
            addmm(
                &bias,
                &[3],
                Operand::plain(&a),
                Operand::plain(&b),
                1,
                2,
                3,
                1.0,
                1.0,
                true,
                &mut out,
                &mut [],
            )
            .unwrap();
            // A·B = [-1, -2, 6]; + bias = [-0.5, -1, 5]; relu = [0, 0, 5].
            assert_eq!(out.iter().map(|x| x.to_f64()).collect::<Vec<_>>(), [0.0, 0.0, 5.0]);
        }
        case::<f32>();
        case::<f64>();
        case::<f16>();
    }

    #[test]
    fn a_packed_weight_gives_the_unpacked_product() {
        let mut rng = Lcg(11);
        // Under Miri smaller: still a whole row tile and a partial one,
        // a whole strip of columns and a partial one.
        let shapes: &[(usize, usize, usize)] = if cfg!(miri) {
            &[(1, 20, 37), (5, 9, 33)]
        } else {
            &[(1, 300, 37), (8, 64, 70), (130, 257, 40)]
        };
        for &(m, k, n) in shapes {
            let x = rng.vec(m * k);
            let w = rng.vec(n * k); // a Linear weight, n × k
            let bias = rng.vec(n);
            let mut want = reference(m, n, k, 1.0, &x, false, &w, true, 0.0, &[]);
            for (i, v) in want.iter_mut().enumerate() {
                *v = (*v + bias[i % n] as f64).max(0.0);
            }
            let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
            let mut packed = vec![0.0f32; crate::gemm::packed_len(k, n)];
            crate::gemm::pack(&w, k, n, true, &mut packed);
            // A packing of another shape (n × k) must be ignored, not read.
            let mut other = vec![0.0f32; crate::gemm::packed_len(n, k)];
            crate::gemm::pack(&w, n, k, false, &mut other);
            // The last: the packing alone, as ptec passes a weight it packed
            // at compile time to a plain product, which needs no scratch.
            let cases: [(&[f32], &[f32]); 4] = [(&w, &packed), (&w, &other), (&w, &[]), (&[], &packed)];
            for (data, p) in cases {
                let scratch = if data.is_empty() { &mut [][..] } else { &mut scratch[..] };
                let mut out = vec![f32::NAN; m * n];
                let b = Operand {
                    data,
                    trans: true,
                    packed: p,
                };
                addmm(
                    &bias,
                    &[n],
                    Operand::plain(&x),
                    b,
                    m,
                    k,
                    n,
                    1.0,
                    1.0,
                    true,
                    &mut out,
                    scratch,
                )
                .unwrap();
                check(&out, &want, k);
                let mut out = vec![f32::NAN; m * n];
                linear(&x, data, p, Some(&bias), m, k, n, true, &mut out, scratch);
                check(&out, &want, k);
            }
        }
    }

    #[test]
    fn fully_connected_keeps_its_packed_weight_and_clamps() {
        let mut rng = Lcg(5);
        // Under Miri smaller, as above.
        let shapes: &[(usize, usize, usize)] = if cfg!(miri) {
            &[(1, 20, 37), (5, 9, 33), (4, 9, 5)]
        } else {
            &[(1, 300, 37), (8, 64, 70), (4, 9, 5)]
        };
        for &(m, k, n) in shapes {
            for transposed in [false, true] {
                let x = rng.vec(m * k);
                let w = rng.vec(k * n);
                let bias = rng.vec(n);
                let mut want = reference(m, n, k, 1.0, &x, false, &w, !transposed, 0.0, &[]);
                for (i, v) in want.iter_mut().enumerate() {
                    *v = (*v + bias[i % n] as f64).clamp(-0.5, 0.75);
                }
                let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
                let mut kept = vec![0.0f32; crate::gemm::packed_len(k, n)];
                let mut run = |packed: Option<&[f32]>| {
                    let mut out = vec![f32::NAN; m * n];
                    let b = Some(&bias[..]);
                    fully_connected(
                        &x,
                        &w,
                        b,
                        m,
                        k,
                        n,
                        transposed,
                        -0.5,
                        0.75,
                        packed,
                        &mut out,
                        &mut scratch,
                    );
                    check(&out, &want, k);
                };
                run(None);
                pack_fully_connected(&w, k, n, transposed, &mut kept);
                run(Some(&kept));
                // Packing again finds the packing there and keeps it.
                pack_fully_connected(&w, k, n, transposed, &mut kept);
                run(Some(&kept));
                // The packing alone (as when it was made at compile time).
                let mut out = vec![f32::NAN; m * n];
                let b = Some(&bias[..]);
                fully_connected(
                    &x,
                    &[],
                    b,
                    m,
                    k,
                    n,
                    transposed,
                    -0.5,
                    0.75,
                    Some(&kept),
                    &mut out,
                    &mut [],
                );
                check(&out, &want, k);
            }
        }
    }

    #[test]
    fn batch_matmul_broadcasts_batches() {
        let mut rng = Lcg(9);
        // a: [2, 3, m, k]; b: [1, 3, n, k] (transposed), broadcast over dim 0.
        let (m, k, n) = (4, 6, 5);
        let a = rng.vec(6 * m * k);
        let b = rng.vec(3 * n * k);
        let mut out = vec![0.0f32; 6 * m * n];
        let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
        batch_matmul(&a, &b, &[2, 3], &[3, 1], &[0, 1], m, k, n, true, &mut out, &mut scratch);
        for i in 0..2 {
            for j in 0..3 {
                let bi = i * 3 + j;
                let want = reference(m, n, k, 1.0, &a[bi * m * k..], false, &b[j * n * k..], true, 0.0, &[]);
                check(&out[bi * m * n..(bi + 1) * m * n], &want, k);
            }
        }
    }

    #[test]
    fn generic_types() {
        generic_case::<f64>(1e-12);
        generic_case::<f16>(4e-3);
        generic_case::<bf16>(2e-2);
    }

    #[test]
    fn output_sizes() {
        assert_eq!(mm_output_sizes(&[2, 3], &[3, 4]), Some([2, 4]));
        assert_eq!(mm_output_sizes(&[2, 3], &[2, 4]), None);
        assert_eq!(bmm_output_sizes(&[5, 2, 3], &[5, 3, 4]), Some([5, 2, 4]));
        assert_eq!(bmm_output_sizes(&[5, 2, 3], &[4, 3, 4]), None);
        assert_eq!(addmm_output_sizes(&[4], &[2, 3], &[3, 4]), Some([2, 4]));
        assert_eq!(addmm_output_sizes(&[2, 1], &[2, 3], &[3, 4]), Some([2, 4]));
        assert_eq!(addmm_output_sizes(&[3], &[2, 3], &[3, 4]), None);
        assert_eq!(
            linear_output_sizes(&[2, 5, 3], &[4, 3], Some(4)).as_deref(),
            Some(&[2, 5, 4][..])
        );
        assert_eq!(linear_output_sizes(&[2, 5, 3], &[4, 2], None), None);
    }
}
