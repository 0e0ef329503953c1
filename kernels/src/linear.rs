//! Matrix products: `aten::mm.out`, `aten::bmm.out`, `aten::addmm.out` and
//! `aten::linear.out`, plus the `f32` GEMM they (and convolution) use.
//!
//! All matrices are contiguous and row-major. A "transposed" operand is the
//! row-major storage of the transpose: `A` given transposed is stored as a
//! `k × m` matrix, `B` given transposed is stored `n × k` (the layout of a
//! PyTorch `Linear` weight).
//!
//! The `f32` GEMM is cache-blocked (BLIS style: `NC` columns of `B` and `KC`
//! of its rows are packed into the caller's scratch, then `MC × KC` blocks of
//! `A`) around a register-blocked micro-kernel: 6×16 with AVX2+FMA when the
//! CPU has them (detected at run time with the `std` feature, or enabled at
//! compile time), 4×8 portable Rust otherwise. Small products skip packing.
//! Other float types use a simple loop that accumulates in [`Float::Acc`].

use crate::conv::Sizes;
use crate::num::{AccFloat, Element, Float};
use crate::{KernelError, KernelResult};
use core::any::TypeId;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
extern crate std;

/// Rows of `B` (depth) packed per block.
const KC: usize = 256;
/// Rows of `A` packed per block (a multiple of every micro-kernel's `MR`).
const MC: usize = 72;
/// Columns of `B` packed per block (a multiple of every micro-kernel's `NR`).
const NC: usize = 2048;
/// Least common multiple of the micro-kernels' `MR` (4 and 6).
const M_ALIGN: usize = 12;
/// Least common multiple of the micro-kernels' `NR` (8 and 16).
const N_ALIGN: usize = 16;

#[inline(always)]
fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Whether a product is small (or thin) enough that packing does not pay.
#[inline(always)]
fn use_direct(m: usize, n: usize, k: usize) -> bool {
    k == 0 || m < 4 || n < 4 || m.saturating_mul(n).saturating_mul(k) <= 4096
}

/// Scratch length, in `f32` elements, that [`sgemm`] (and every entry point
/// of this module for `f32`) needs for an `m × k` by `k × n` product. It is
/// at most `KC · (NC + MC)` (≈ 2.1 M floats) however large the product, and
/// 0 for small products. A shorter scratch is not an error: the product then
/// runs unpacked (correct, slower).
pub fn gemm_scratch_len(m: usize, n: usize, k: usize) -> usize {
    if m == 0 || n == 0 || use_direct(m, n, k) {
        return 0;
    }
    let kc = k.min(KC);
    kc * (round_up(n.min(NC), N_ALIGN) + round_up(m.min(MC), M_ALIGN))
}

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
// f32 GEMM
// ---------------------------------------------------------------------------

/// `f32` GEMM: `C[m×n] = alpha · op(A) · op(B) + beta · C`.
///
/// - `a`: `m × k` row-major, or (`a_trans`) `k × m` row-major.
/// - `b`: `k × n` row-major, or (`b_trans`) `n × k` row-major.
/// - `c`: `m × n` row-major. When `beta == 0` its previous contents are
///   ignored (NaN/inf in it do not propagate), as in BLAS and PyTorch.
/// - `scratch`: at least [`gemm_scratch_len`]`(m, n, k)` floats for full
///   speed; any length is accepted.
///
/// Works for every `m, n, k ≥ 0` (`k == 0` gives `beta · C`).
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &[f32],
    a_trans: bool,
    b: &[f32],
    b_trans: bool,
    beta: f32,
    c: &mut [f32],
    scratch: &mut [f32],
) {
    if m == 0 || n == 0 {
        return;
    }
    let a = &a[..m * k];
    let b = &b[..k * n];
    let c = &mut c[..m * n];
    let p = Gemm {
        m,
        n,
        k,
        alpha,
        a,
        a_trans,
        b,
        b_trans,
        beta,
    };
    if use_direct(m, n, k) || scratch.len() < gemm_scratch_len(m, n, k) {
        #[cfg(target_arch = "x86_64")]
        if Avx2Fma::detect().is_some() {
            // SAFETY: `detect` returned `Some`, so the CPU supports AVX2 and
            // FMA, the features `direct_avx2` is compiled for.
            unsafe { direct_avx2(&p, c) };
            return;
        }
        direct(&p, c);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(ukr) = Avx2Fma::detect() {
        blocked::<6, 16, _>(ukr, &p, c, scratch);
        return;
    }
    blocked::<4, 8, _>(Portable, &p, c, scratch);
}

/// The micro-kernel [`sgemm`] uses on this CPU, for reports.
pub fn sgemm_kernel_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if Avx2Fma::detect().is_some() {
        return "avx2+fma 6x16";
    }
    "portable 4x8"
}

/// The operands of one product (lengths already checked).
struct Gemm<'a> {
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &'a [f32],
    a_trans: bool,
    b: &'a [f32],
    b_trans: bool,
    beta: f32,
}

impl Gemm<'_> {
    #[inline(always)]
    fn a_at(&self, i: usize, p: usize) -> f32 {
        if self.a_trans {
            self.a[p * self.m + i]
        } else {
            self.a[i * self.k + p]
        }
    }
}

/// Dot product with 16 independent lanes, so it vectorizes.
#[inline(always)]
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &y[..n]);
    let mut acc = [0.0f32; 16];
    let xc = x.chunks_exact(16);
    let yc = y.chunks_exact(16);
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (xs, ys) in xc.zip(yc) {
        for l in 0..16 {
            acc[l] += xs[l] * ys[l];
        }
    }
    let mut s = 0.0f32;
    for (&u, &v) in xr.iter().zip(yr) {
        s += u * v;
    }
    let mut t = 0.0f32;
    for v in acc {
        t += v;
    }
    t + s
}

/// `c = beta · c` with `beta == 0` meaning "overwrite with 0".
#[inline(always)]
fn scale_row(c: &mut [f32], beta: f32) {
    if beta == 0.0 {
        c.fill(0.0);
    } else if beta != 1.0 {
        for x in c {
            *x *= beta;
        }
    }
}

/// Unpacked product, for small or thin shapes.
#[inline(always)]
fn direct(p: &Gemm<'_>, c: &mut [f32]) {
    let (m, n, k) = (p.m, p.n, p.k);
    for i in 0..m {
        let crow = &mut c[i * n..(i + 1) * n];
        if p.b_trans || n == 1 {
            // Each output is a dot product of A's row i with a contiguous
            // row of B (for n == 1 and B not transposed, ldb == 1).
            for (j, cj) in crow.iter_mut().enumerate() {
                let brow = &p.b[j * k..(j + 1) * k];
                let s = if p.a_trans {
                    let mut s = 0.0f32;
                    for (q, &bv) in brow.iter().enumerate() {
                        s += p.a[q * m + i] * bv;
                    }
                    s
                } else {
                    dot(&p.a[i * k..(i + 1) * k], brow)
                };
                *cj = if p.beta == 0.0 {
                    p.alpha * s
                } else {
                    p.alpha * s + p.beta * *cj
                };
            }
        } else {
            scale_row(crow, p.beta);
            for q in 0..k {
                let av = p.alpha * p.a_at(i, q);
                let brow = &p.b[q * n..(q + 1) * n];
                for (x, &bv) in crow.iter_mut().zip(brow) {
                    *x += av * bv;
                }
            }
        }
    }
}

/// [`direct`] compiled for AVX2 + FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn direct_avx2(p: &Gemm<'_>, c: &mut [f32]) {
    direct(p, c)
}

/// Whether the AVX2+FMA code paths may run on this CPU.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn has_avx2_fma() -> bool {
    Avx2Fma::detect().is_some()
}

/// A register-blocked `MR × NR` micro-kernel over packed panels.
trait MicroKernel<const MR: usize, const NR: usize>: Copy {
    /// `acc = Σ_p a[p·MR + i] · b[p·NR + j]` for `p < kc`; `a` holds at least
    /// `kc · MR` and `b` at least `kc · NR` elements.
    fn run(self, kc: usize, a: &[f32], b: &[f32], acc: &mut [[f32; NR]; MR]);
}

/// Portable micro-kernel (the compiler vectorizes the inner `NR` loop).
#[derive(Clone, Copy)]
struct Portable;

impl<const MR: usize, const NR: usize> MicroKernel<MR, NR> for Portable {
    #[inline(always)]
    fn run(self, kc: usize, a: &[f32], b: &[f32], acc: &mut [[f32; NR]; MR]) {
        let mut c = [[0.0f32; NR]; MR];
        for (ap, bp) in a[..kc * MR].chunks_exact(MR).zip(b[..kc * NR].chunks_exact(NR)) {
            for i in 0..MR {
                let av = ap[i];
                for j in 0..NR {
                    c[i][j] += av * bp[j];
                }
            }
        }
        *acc = c;
    }
}

/// The AVX2+FMA 6×16 micro-kernel. A value exists only when the CPU
/// supports both features (see [`Avx2Fma::detect`]).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx2Fma(());

#[cfg(target_arch = "x86_64")]
impl Avx2Fma {
    #[inline(always)]
    fn detect() -> Option<Self> {
        #[cfg(feature = "std")]
        {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return Some(Avx2Fma(()));
            }
            None
        }
        #[cfg(not(feature = "std"))]
        {
            if cfg!(all(target_feature = "avx2", target_feature = "fma")) {
                Some(Avx2Fma(()))
            } else {
                None
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl MicroKernel<6, 16> for Avx2Fma {
    #[inline(always)]
    fn run(self, kc: usize, a: &[f32], b: &[f32], acc: &mut [[f32; 16]; 6]) {
        // SAFETY: `self` exists only if AVX2 and FMA were detected.
        unsafe { ukr_avx2_6x16(kc, a, b, acc) }
    }
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn ukr_avx2_6x16(kc: usize, a: &[f32], b: &[f32], acc: &mut [[f32; 16]; 6]) {
    use core::arch::x86_64::*;
    assert!(a.len() >= kc * 6 && b.len() >= kc * 16);
    let ap = a.as_ptr();
    let bp = b.as_ptr();
    // SAFETY: the caller guarantees AVX2+FMA. Every load reads `ap[q*6+i]`
    // (i < 6) or `bp[q*16 .. q*16+16]` with `q < kc`, in bounds by the assert
    // above; the stores write the 16 floats of each row of `acc`.
    unsafe {
        let mut c00 = _mm256_setzero_ps();
        let mut c01 = _mm256_setzero_ps();
        let mut c10 = _mm256_setzero_ps();
        let mut c11 = _mm256_setzero_ps();
        let mut c20 = _mm256_setzero_ps();
        let mut c21 = _mm256_setzero_ps();
        let mut c30 = _mm256_setzero_ps();
        let mut c31 = _mm256_setzero_ps();
        let mut c40 = _mm256_setzero_ps();
        let mut c41 = _mm256_setzero_ps();
        let mut c50 = _mm256_setzero_ps();
        let mut c51 = _mm256_setzero_ps();
        for q in 0..kc {
            let b0 = _mm256_loadu_ps(bp.add(q * 16));
            let b1 = _mm256_loadu_ps(bp.add(q * 16 + 8));
            let a_q = ap.add(q * 6);
            let x = _mm256_broadcast_ss(&*a_q);
            c00 = _mm256_fmadd_ps(x, b0, c00);
            c01 = _mm256_fmadd_ps(x, b1, c01);
            let x = _mm256_broadcast_ss(&*a_q.add(1));
            c10 = _mm256_fmadd_ps(x, b0, c10);
            c11 = _mm256_fmadd_ps(x, b1, c11);
            let x = _mm256_broadcast_ss(&*a_q.add(2));
            c20 = _mm256_fmadd_ps(x, b0, c20);
            c21 = _mm256_fmadd_ps(x, b1, c21);
            let x = _mm256_broadcast_ss(&*a_q.add(3));
            c30 = _mm256_fmadd_ps(x, b0, c30);
            c31 = _mm256_fmadd_ps(x, b1, c31);
            let x = _mm256_broadcast_ss(&*a_q.add(4));
            c40 = _mm256_fmadd_ps(x, b0, c40);
            c41 = _mm256_fmadd_ps(x, b1, c41);
            let x = _mm256_broadcast_ss(&*a_q.add(5));
            c50 = _mm256_fmadd_ps(x, b0, c50);
            c51 = _mm256_fmadd_ps(x, b1, c51);
        }
        let rows = [(c00, c01), (c10, c11), (c20, c21), (c30, c31), (c40, c41), (c50, c51)];
        for (dst, (lo, hi)) in acc.iter_mut().zip(rows) {
            _mm256_storeu_ps(dst.as_mut_ptr(), lo);
            _mm256_storeu_ps(dst.as_mut_ptr().add(8), hi);
        }
    }
}

/// Packs rows `ic..ic+mc`, depth `pc..pc+kc` of `A` into `MR`-row strips:
/// strip `s` holds `A(ic + s·MR + i, pc + q)` at `s·kc·MR + q·MR + i`,
/// zero-padded past `mc`.
fn pack_a<const MR: usize>(p: &Gemm<'_>, ic: usize, mc: usize, pc: usize, kc: usize, out: &mut [f32]) {
    for (s, i0) in (0..mc).step_by(MR).enumerate() {
        let dst = &mut out[s * kc * MR..(s + 1) * kc * MR];
        let rows = MR.min(mc - i0);
        if p.a_trans {
            for (q, d) in dst.chunks_exact_mut(MR).enumerate() {
                let src = &p.a[(pc + q) * p.m + ic + i0..][..rows];
                d[..rows].copy_from_slice(src);
                d[rows..].fill(0.0);
            }
        } else {
            for ii in 0..MR {
                if ii < rows {
                    let src = &p.a[(ic + i0 + ii) * p.k + pc..][..kc];
                    for (d, &v) in dst[ii..].iter_mut().step_by(MR).zip(src) {
                        *d = v;
                    }
                } else {
                    for d in dst[ii..].iter_mut().step_by(MR) {
                        *d = 0.0;
                    }
                }
            }
        }
    }
}

/// Packs columns `jc..jc+nc`, depth `pc..pc+kc` of `B` into `NR`-column
/// strips: strip `s` holds `B(pc + q, jc + s·NR + j)` at
/// `s·kc·NR + q·NR + j`, zero-padded past `nc`.
fn pack_b<const NR: usize>(p: &Gemm<'_>, jc: usize, nc: usize, pc: usize, kc: usize, out: &mut [f32]) {
    for (s, j0) in (0..nc).step_by(NR).enumerate() {
        let dst = &mut out[s * kc * NR..(s + 1) * kc * NR];
        let cols = NR.min(nc - j0);
        if p.b_trans {
            for jj in 0..NR {
                if jj < cols {
                    let src = &p.b[(jc + j0 + jj) * p.k + pc..][..kc];
                    for (d, &v) in dst[jj..].iter_mut().step_by(NR).zip(src) {
                        *d = v;
                    }
                } else {
                    for d in dst[jj..].iter_mut().step_by(NR) {
                        *d = 0.0;
                    }
                }
            }
        } else {
            for (q, d) in dst.chunks_exact_mut(NR).enumerate() {
                let src = &p.b[(pc + q) * p.n + jc + j0..][..cols];
                d[..cols].copy_from_slice(src);
                d[cols..].fill(0.0);
            }
        }
    }
}

/// The cache-blocked product. `scratch` holds at least
/// [`gemm_scratch_len`] floats.
fn blocked<const MR: usize, const NR: usize, U: MicroKernel<MR, NR>>(
    ukr: U,
    p: &Gemm<'_>,
    c: &mut [f32],
    scratch: &mut [f32],
) {
    let (m, n, k) = (p.m, p.n, p.k);
    let kc_max = k.min(KC);
    let (bpack, rest) = scratch.split_at_mut(kc_max * round_up(n.min(NC), NR));
    let apack = &mut rest[..kc_max * round_up(m.min(MC), MR)];
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            pack_b::<NR>(p, jc, nc, pc, kc, bpack);
            let beta = if pc == 0 { p.beta } else { 1.0 };
            for ic in (0..m).step_by(MC) {
                let mc = MC.min(m - ic);
                pack_a::<MR>(p, ic, mc, pc, kc, apack);
                for jr in (0..nc).step_by(NR) {
                    let nr = NR.min(nc - jr);
                    let bp = &bpack[(jr / NR) * kc * NR..][..kc * NR];
                    for ir in (0..mc).step_by(MR) {
                        let mr = MR.min(mc - ir);
                        let ap = &apack[(ir / MR) * kc * MR..][..kc * MR];
                        let mut acc = [[0.0f32; NR]; MR];
                        ukr.run(kc, ap, bp, &mut acc);
                        for (ii, accr) in acc.iter().enumerate().take(mr) {
                            let row = &mut c[(ic + ir + ii) * n + jc + jr..][..nr];
                            store_row(row, &accr[..nr], p.alpha, beta);
                        }
                    }
                }
            }
        }
    }
}

#[inline(always)]
fn store_row(row: &mut [f32], acc: &[f32], alpha: f32, beta: f32) {
    if beta == 0.0 {
        for (x, &v) in row.iter_mut().zip(acc) {
            *x = alpha * v;
        }
    } else if beta == 1.0 && alpha == 1.0 {
        for (x, &v) in row.iter_mut().zip(acc) {
            *x += v;
        }
    } else {
        for (x, &v) in row.iter_mut().zip(acc) {
            *x = alpha * v + beta * *x;
        }
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

/// `aten::mm.out(self, mat2, out)`: `out[m×n] = self[m×k] · mat2[k×n]`, all
/// row-major. `scratch`: [`gemm_scratch_len`]`(m, n, k)` floats (used for
/// `f32` only).
pub fn mm<T: Float>(a: &[T], b: &[T], m: usize, k: usize, n: usize, out: &mut [T], scratch: &mut [f32]) {
    gemm(m, n, k, 1.0, a, false, b, false, 0.0, out, scratch);
}

/// Output sizes of `aten::bmm` for `self` of `a_sizes` (`[b, m, k]`) and
/// `mat2` of `b_sizes` (`[b, k, n]`): `[b, m, n]`, or `None`.
pub fn bmm_output_sizes(a_sizes: &[usize], b_sizes: &[usize]) -> Option<[usize; 3]> {
    match (a_sizes, b_sizes) {
        (&[bt, m, k], &[bt2, k2, n]) if bt == bt2 && k == k2 => Some([bt, m, n]),
        _ => None,
    }
}

/// `aten::bmm.out(self, mat2, out)`: for each of `batch` matrices,
/// `out[b] (m×n) = self[b] (m×k) · mat2[b] (k×n)`. `scratch`:
/// [`gemm_scratch_len`]`(m, n, k)` floats (used for `f32` only).
#[allow(clippy::too_many_arguments)]
pub fn bmm<T: Float>(a: &[T], b: &[T], batch: usize, m: usize, k: usize, n: usize, out: &mut [T], scratch: &mut [f32]) {
    if m == 0 || n == 0 {
        return;
    }
    for bi in 0..batch {
        let ab = &a[bi * m * k..(bi + 1) * m * k];
        let bb = &b[bi * k * n..(bi + 1) * k * n];
        let ob = &mut out[bi * m * n..(bi + 1) * m * n];
        gemm(m, n, k, 1.0, ab, false, bb, false, 0.0, ob, scratch);
    }
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
/// `mat2` is `k × n` (row-major) and `self` (`bias`, of `bias_sizes`)
/// broadcasts to `[m, n]` (see [`addmm_output_sizes`]). With `beta == 0`
/// the bias is ignored, NaNs included, as in PyTorch. `scratch`:
/// [`gemm_scratch_len`]`(m, n, k)` floats (used for `f32` only). Returns
/// [`KernelError::ShapeMismatch`] if the bias does not broadcast.
#[allow(clippy::too_many_arguments)]
pub fn addmm<T: Float>(
    bias: &[T],
    bias_sizes: &[usize],
    mat1: &[T],
    mat2: &[T],
    m: usize,
    k: usize,
    n: usize,
    beta: f64,
    alpha: f64,
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
    gemm(m, n, k, alpha, mat1, false, mat2, false, beta, out, scratch);
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
/// `out[m×n] = input[m×k] · weight[n×k]ᵀ + bias[n]`, where `m` is the product
/// of `input`'s leading dimensions and `weight` is row-major `n × k` (a
/// PyTorch `Linear` weight, or a folded constant transpose). `scratch`:
/// [`gemm_scratch_len`]`(m, n, k)` floats (used for `f32` only).
#[allow(clippy::too_many_arguments)]
pub fn linear<T: Float>(
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    m: usize,
    k: usize,
    n: usize,
    out: &mut [T],
    scratch: &mut [f32],
) {
    let bias = match bias {
        Some(b) => Bias::PerColumn(b),
        None => Bias::None,
    };
    gemm_bias(m, n, k, x, false, weight, true, bias, out, scratch);
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::{bf16, f16};
    use std::vec;
    use std::vec::Vec;

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> f32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
        fn vec(&mut self, n: usize) -> Vec<f32> {
            (0..n).map(|_| self.next()).collect()
        }
    }

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

    fn check(got: &[f32], want: &[f64], k: usize) {
        assert_eq!(got.len(), want.len());
        let tol = 1e-5 * (k as f64 + 4.0);
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g as f64 - w).abs() <= tol * (1.0 + w.abs()),
                "at {i}: got {g}, want {w}"
            );
        }
    }

    #[test]
    fn hand_computed() {
        // A = [[1,2,3],[4,5,6]], B = [[1,0],[0,1],[1,1]]
        // A·B = [[1+3, 2+3], [4+6, 5+6]] = [[4,5],[10,11]]
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
        let mut c = [0.0f32; 4];
        mm(&a, &b, 2, 3, 2, &mut c, &mut []);
        assert_eq!(c, [4.0, 5.0, 10.0, 11.0]);
        // addmm with bias [10, 20] (shape [2]), beta 2, alpha 0.5:
        // 2·[10,20] + 0.5·[[4,5],[10,11]] = [[22,42.5],[25,45.5]]
        addmm(&[10.0f32, 20.0], &[2], &a, &b, 2, 3, 2, 2.0, 0.5, &mut c, &mut []).unwrap();
        assert_eq!(c, [22.0, 42.5, 25.0, 45.5]);
        // linear: x = [1,2,3] (m=1,k=3), weight rows [1,1,1], [0,1,0]; bias [1,-1]
        // → [6+1, 2-1] = [7, 1]
        let mut o = [0.0f32; 2];
        linear(
            &[1.0f32, 2.0, 3.0],
            &[1.0, 1.0, 1.0, 0.0, 1.0, 0.0],
            Some(&[1.0, -1.0]),
            1,
            3,
            2,
            &mut o,
            &mut [],
        );
        assert_eq!(o, [7.0, 1.0]);
        // beta = 0 ignores a NaN bias.
        addmm(&[f32::NAN], &[], &a, &b, 2, 3, 2, 0.0, 1.0, &mut c, &mut []).unwrap();
        // a bias that does not broadcast is rejected
        assert!(addmm(&[1.0f32; 3], &[3], &a, &b, 2, 3, 2, 1.0, 1.0, &mut c, &mut []).is_err());
        assert_eq!(c, [4.0, 5.0, 10.0, 11.0]);
        // k = 0: out = beta · bias ([m,1] bias broadcast along columns).
        addmm(&[1.0f32, 2.0], &[2, 1], &[], &[], 2, 0, 2, 3.0, 1.0, &mut c, &mut []).unwrap();
        assert_eq!(c, [3.0, 3.0, 6.0, 6.0]);
    }

    #[test]
    fn random_sgemm_all_layouts() {
        let mut rng = Lcg(1);
        let shapes = [
            (1, 1, 1),
            (1, 3, 3),
            (1, 37, 3),
            (3, 1, 5),
            (5, 7, 3),
            (7, 17, 9),
            (13, 33, 70),
            (25, 19, 300),
            (73, 45, 31),
            (6, 16, 256),
            (80, 40, 513),
            (4, 2100, 5),
        ];
        for &(m, n, k) in &shapes {
            for at in [false, true] {
                for bt in [false, true] {
                    for &(alpha, beta) in &[(1.0f32, 0.0f32), (0.5, 1.0), (-2.0, 0.25)] {
                        let a = rng.vec(m * k);
                        let b = rng.vec(k * n);
                        let c0 = rng.vec(m * n);
                        let want = reference(m, n, k, alpha as f64, &a, at, &b, bt, beta as f64, &c0);
                        let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
                        let mut c = c0.clone();
                        sgemm(m, n, k, alpha, &a, at, &b, bt, beta, &mut c, &mut scratch);
                        check(&c, &want, k);
                        // Portable blocked kernel too (and the unpacked path).
                        if gemm_scratch_len(m, n, k) > 0 {
                            let mut c = c0.clone();
                            let p = Gemm {
                                m,
                                n,
                                k,
                                alpha,
                                a: &a,
                                a_trans: at,
                                b: &b,
                                b_trans: bt,
                                beta,
                            };
                            blocked::<4, 8, _>(Portable, &p, &mut c, &mut scratch);
                            check(&c, &want, k);
                            let mut c = c0.clone();
                            direct(&p, &mut c);
                            check(&c, &want, k);
                            // Too-short scratch falls back, still correct.
                            let mut c = c0.clone();
                            sgemm(m, n, k, alpha, &a, at, &b, bt, beta, &mut c, &mut []);
                            check(&c, &want, k);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn beta_zero_ignores_nan_in_c() {
        let (m, n, k) = (20, 30, 40);
        let mut rng = Lcg(7);
        let a = rng.vec(m * k);
        let b = rng.vec(k * n);
        let mut c = vec![f32::NAN; m * n];
        let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
        sgemm(m, n, k, 1.0, &a, false, &b, false, 0.0, &mut c, &mut scratch);
        check(&c, &reference(m, n, k, 1.0, &a, false, &b, false, 0.0, &c), k);
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
        linear(&x, &w, Some(&bias), m, k, n, &mut out, &mut scratch);
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
        addmm(&bias, &[1, n], &a, &b, m, k, n, 0.5, 2.0, &mut out, &mut []).unwrap();
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
        linear(&a, &w_t, None, m, k, n, &mut out, &mut []);
        let want = reference(m, n, k, 1.0, &ar, false, &br, false, 0.0, &[]);
        for (g, w) in out.iter().zip(&want) {
            assert!((g.to_f64() - w).abs() <= tol * (1.0 + w.abs()));
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
