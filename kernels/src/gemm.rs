//! The `f32` GEMM engine behind the matrix products and convolutions.
//!
//! All matrices are contiguous and row-major. A "transposed" operand is the
//! row-major storage of the transpose: `A` given transposed is stored as a
//! `k × m` matrix, `B` given transposed is stored `n × k` (the layout of a
//! PyTorch `Linear` weight).
//!
//! The product is cache-blocked (BLIS style: `NC` columns of `B` and `KC` of
//! its rows are packed into `NR`-wide strips, then `MC × KC` blocks of `A`
//! into `MR`-tall strips) around a register-blocked `MR × NR` micro-kernel,
//! chosen at run time from what the CPU has (with the `std` feature; else
//! from the compile-time target features): 8×32 with AVX-512, 6×16 with
//! AVX2+FMA, 4×8 portable Rust otherwise. Small products skip packing.
//!
//! This engine serves operands computed at run time (both are packed as it
//! goes); a constant `B`, a weight, is packed once into
//! [`crate::packed`]'s layout and multiplied by that engine instead. An
//! [`Epilogue`] adds a per-column bias and clamps the results as each
//! finished tile is stored (a fused bias and ReLU).

use crate::cpu::Isa;

/// Rows of `B` (depth) packed per block.
const KC: usize = 256;
/// Rows of `A` packed per block (a multiple of every micro-kernel's `MR`).
const MC: usize = 192;
/// Columns of `B` packed per block (a multiple of every micro-kernel's `NR`).
const NC: usize = 2048;
/// Least common multiple of the micro-kernels' `MR` (4, 6 and 8).
const M_ALIGN: usize = 24;
/// Least common multiple of the micro-kernels' `NR` (8, 16 and 32).
const N_ALIGN: usize = 32;

#[inline(always)]
fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Whether a product is small (or thin) enough that packing does not pay.
#[inline(always)]
fn use_direct(m: usize, n: usize, k: usize) -> bool {
    k == 0 || m < 4 || n < 4 || m.saturating_mul(n).saturating_mul(k) <= 4096
}

/// Scratch length, in `f32` elements, that [`sgemm`] needs for an
/// `m × k` by `k × n` product. It is at most `KC · (NC + MC)` (≈ 0.6 M
/// floats) however large the product, and 0 for small products. A shorter
/// scratch is not an error: the product then runs unpacked (correct,
/// slower).
pub fn gemm_scratch_len(m: usize, n: usize, k: usize) -> usize {
    if m == 0 || n == 0 || use_direct(m, n, k) {
        return 0;
    }
    let kc = k.min(KC);
    kc * (round_up(n.min(NC), N_ALIGN) + round_up(m.min(MC), M_ALIGN))
}

/// The micro-kernel [`sgemm`] uses on this CPU, for reports.
pub fn sgemm_kernel_name() -> &'static str {
    match Isa::detect() {
        Isa::Portable => "portable 4x8",
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => "avx2+fma 6x16",
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => "avx512 8x32",
    }
}

/// Whether the AVX2+FMA code paths may run on this CPU.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn has_avx2_fma() -> bool {
    Isa::detect() != Isa::Portable
}

/// What happens to each result as it is stored: `bias[j]` is added to
/// column `j`, then the residual's element at the same place, then the
/// value is clamped to `[min, max]` (NaN stays NaN, as `relu` keeps it).
#[derive(Clone, Copy, Debug)]
pub struct Epilogue<'a> {
    /// At least `n` elements, when present.
    pub bias: Option<&'a [f32]>,
    /// A matrix laid out as `C` (its row stride, at least as many floats):
    /// a residual connection added to the product. Only the packed engine
    /// ([`crate::packed::gemm_packed`]) takes one.
    pub residual: Option<&'a [f32]>,
    pub min: f32,
    pub max: f32,
}

impl<'a> Epilogue<'a> {
    /// Nothing added, nothing clamped.
    pub const NONE: Epilogue<'static> = Epilogue {
        bias: None,
        residual: None,
        min: f32::NEG_INFINITY,
        max: f32::INFINITY,
    };

    /// A bias (if any), then `relu` when asked.
    pub fn new(bias: Option<&'a [f32]>, relu: bool) -> Self {
        Epilogue {
            bias,
            residual: None,
            min: if relu { 0.0 } else { f32::NEG_INFINITY },
            max: f32::INFINITY,
        }
    }

    fn clamps(&self) -> bool {
        self.min > f32::NEG_INFINITY || self.max < f32::INFINITY
    }

    /// Applies the bias (when `first`, the first depth block) and the clamp
    /// (when `last`) to `row`, whose first element is column `col0`.
    #[inline(always)]
    fn apply(&self, row: &mut [f32], col0: usize, first: bool, last: bool) {
        if let (true, Some(b)) = (first, self.bias) {
            for (x, &bv) in row.iter_mut().zip(&b[col0..]) {
                *x += bv;
            }
        }
        if last && self.clamps() {
            let (lo, hi) = (self.min, self.max);
            for x in row {
                // Comparisons with NaN are false: NaN passes through.
                if *x < lo {
                    *x = lo;
                } else if *x > hi {
                    *x = hi;
                }
            }
        }
    }
}

/// The operands of one product (lengths already checked).
#[derive(Clone, Copy)]
pub(crate) struct Gemm<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: f32,
    pub a: &'a [f32],
    pub a_trans: bool,
    pub b: &'a [f32],
    pub b_trans: bool,
    pub beta: f32,
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
    sgemm_fused(
        m,
        n,
        k,
        alpha,
        a,
        a_trans,
        b,
        b_trans,
        beta,
        &Epilogue::NONE,
        c,
        scratch,
    );
}

/// [`sgemm`] followed by an [`Epilogue`].
#[allow(clippy::too_many_arguments)]
pub fn sgemm_fused(
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &[f32],
    a_trans: bool,
    b: &[f32],
    b_trans: bool,
    beta: f32,
    epilogue: &Epilogue<'_>,
    c: &mut [f32],
    scratch: &mut [f32],
) {
    if m == 0 || n == 0 {
        return;
    }
    if let Some(bias) = epilogue.bias {
        assert!(bias.len() >= n, "a bias of {} for {n} columns", bias.len());
    }
    assert!(epilogue.residual.is_none(), "sgemm adds no residual");
    let p = Gemm {
        m,
        n,
        k,
        alpha,
        a: &a[..m * k],
        a_trans,
        b: &b[..k * n],
        b_trans,
        beta,
    };
    run(&p, epilogue, &mut c[..m * n], scratch);
}

/// Picks the path and micro-kernel of one product.
fn run(p: &Gemm<'_>, e: &Epilogue<'_>, c: &mut [f32], scratch: &mut [f32]) {
    let isa = Isa::detect();
    let blocks = !use_direct(p.m, p.n, p.k) && scratch.len() >= gemm_scratch_len(p.m, p.n, p.k);
    if p.k == 0 || !blocks {
        // One row times a Linear weight (a classifier) streams the whole
        // weight for little arithmetic: with threads, each takes a share
        // of the columns, and so of the weight.
        let split = p.m == 1 && p.b_trans && p.n.saturating_mul(p.k) >= 1 << 17;
        if split {
            crate::parallel::for_each_band(c, p.n, 1, 16, true, &|cols, piece| {
                let part = Gemm {
                    n: cols.len(),
                    b: &p.b[cols.start * p.k..cols.end * p.k],
                    ..*p
                };
                direct_on(isa, &part, piece);
                e.apply(piece, cols.start, true, true);
            });
        } else {
            direct_on(isa, p, c);
            for row in c.chunks_exact_mut(p.n) {
                e.apply(row, 0, true, true);
            }
        }
        return;
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `detect` found AVX-512F.
        Isa::Avx512 => unsafe { blocked_avx512(p, c, scratch, e) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => blocked::<6, 16, _>(Avx2Fma(()), p, c, scratch, e),
        Isa::Portable => blocked::<4, 8, _>(Portable, p, c, scratch, e),
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
pub(crate) fn direct(p: &Gemm<'_>, c: &mut [f32]) {
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

/// [`direct`], compiled for AVX2 + FMA where `isa` has them.
#[inline(always)]
fn direct_on(isa: Isa, p: &Gemm<'_>, c: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Portable {
        // SAFETY: the CPU has AVX2 and FMA (every x86 ISA but Portable
        // implies both).
        return unsafe { direct_avx2(p, c) };
    }
    let _ = isa;
    direct(p, c);
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

// ---------------------------------------------------------------------------
// Micro-kernels
// ---------------------------------------------------------------------------

/// A register-blocked `MR × NR` micro-kernel over packed strips.
trait MicroKernel<const MR: usize, const NR: usize>: Copy {
    /// `acc = Σ_p a[p·MR + i] · b[p·NR + j]` for `p < kc`; `a` holds at least
    /// `kc · MR` and `b` at least `kc · NR` elements.
    fn run(self, kc: usize, a: &[f32], b: &[f32], acc: &mut [[f32; NR]; MR]);
}

/// Portable micro-kernel (the compiler vectorizes the inner `NR` loop).
#[derive(Clone, Copy)]
pub(crate) struct Portable;

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

/// The AVX2+FMA 6×16 micro-kernel; a value exists only where the CPU has
/// both features.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx2Fma(());

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
        let mut c = [[_mm256_setzero_ps(); 2]; 6];
        for q in 0..kc {
            let b0 = _mm256_loadu_ps(bp.add(q * 16));
            let b1 = _mm256_loadu_ps(bp.add(q * 16 + 8));
            let a_q = ap.add(q * 6);
            for (i, ci) in c.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*a_q.add(i));
                ci[0] = _mm256_fmadd_ps(x, b0, ci[0]);
                ci[1] = _mm256_fmadd_ps(x, b1, ci[1]);
            }
        }
        for (dst, ci) in acc.iter_mut().zip(c) {
            _mm256_storeu_ps(dst.as_mut_ptr(), ci[0]);
            _mm256_storeu_ps(dst.as_mut_ptr().add(8), ci[1]);
        }
    }
}

/// Shape of the AVX-512 micro-kernel.
#[cfg(target_arch = "x86_64")]
const MR512: usize = 8;
#[cfg(target_arch = "x86_64")]
const NR512: usize = 32;

/// The AVX-512 micro-kernel; a value exists only where the CPU has
/// AVX-512F.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx512(());

#[cfg(target_arch = "x86_64")]
impl MicroKernel<MR512, NR512> for Avx512 {
    #[inline(always)]
    fn run(self, kc: usize, a: &[f32], b: &[f32], acc: &mut [[f32; NR512]; MR512]) {
        // SAFETY: `self` exists only if AVX-512F was detected.
        unsafe { ukr_avx512(kc, a, b, acc) }
    }
}

/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn ukr_avx512(kc: usize, a: &[f32], b: &[f32], acc: &mut [[f32; NR512]; MR512]) {
    use core::arch::x86_64::*;
    const NV: usize = NR512 / 16;
    assert!(a.len() >= kc * MR512 && b.len() >= kc * NR512);
    let ap = a.as_ptr();
    let bp = b.as_ptr();
    // SAFETY: the caller guarantees AVX-512F. Every load reads
    // `ap[q*MR512+i]` (i < MR512) or `bp[q*NR512 .. q*NR512+NR512]` with
    // `q < kc`, in bounds by the assert above; the stores write the NR512
    // floats of each row of `acc`.
    unsafe {
        let mut c = [[_mm512_setzero_ps(); NV]; MR512];
        for q in 0..kc {
            let mut bv = [_mm512_setzero_ps(); NV];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = _mm512_loadu_ps(bp.add(q * NR512 + 16 * v));
            }
            let a_q = ap.add(q * MR512);
            for (i, ci) in c.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*a_q.add(i));
                for (cv, &b) in ci.iter_mut().zip(&bv) {
                    *cv = _mm512_fmadd_ps(x, b, *cv);
                }
            }
        }
        for (dst, ci) in acc.iter_mut().zip(c) {
            for (v, &cv) in ci.iter().enumerate() {
                _mm512_storeu_ps(dst.as_mut_ptr().add(16 * v), cv);
            }
        }
    }
}

/// The blocked product with the AVX-512 micro-kernel, the whole driver
/// compiled for AVX-512 so packing and stores use it too.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn blocked_avx512(p: &Gemm<'_>, c: &mut [f32], scratch: &mut [f32], e: &Epilogue<'_>) {
    blocked::<MR512, NR512, _>(Avx512(()), p, c, scratch, e)
}

// ---------------------------------------------------------------------------
// Packing and the blocked driver
// ---------------------------------------------------------------------------

/// Packs rows `ic..ic+mc`, depth `pc..pc+kc` of `A` into `MR`-row strips:
/// strip `s` holds `A(ic + s·MR + i, pc + q)` at `s·kc·MR + q·MR + i`,
/// zero-padded past `mc`.
#[inline(always)]
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

/// Packs columns `jc..jc+nc`, depth `pc..pc+kc` of `B` (stored as `b`,
/// transposed or not, `k × n`) into `nr`-column strips: strip `s` holds
/// `B(pc + q, jc + s·nr + j)` at `s·kc·nr + q·nr + j`, zero-padded past `nc`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pack_b_block(
    b: &[f32],
    b_trans: bool,
    k: usize,
    n: usize,
    nr: usize,
    (jc, nc): (usize, usize),
    (pc, kc): (usize, usize),
    out: &mut [f32],
) {
    for (s, j0) in (0..nc).step_by(nr).enumerate() {
        let dst = &mut out[s * kc * nr..(s + 1) * kc * nr];
        let cols = nr.min(nc - j0);
        if b_trans {
            // 8 × 8 tiles: contiguous reads along rows of the stored
            // transpose, contiguous writes along the strip (every `nr` is a
            // multiple of 8).
            const T: usize = 8;
            for jj0 in (0..nr).step_by(T) {
                let rows = cols.saturating_sub(jj0).min(T);
                for q0 in (0..kc).step_by(T) {
                    let qn = T.min(kc - q0);
                    let mut tile = [[0.0f32; T]; T];
                    for (r, tr) in tile.iter_mut().enumerate().take(rows) {
                        tr[..qn].copy_from_slice(&b[(jc + j0 + jj0 + r) * k + pc + q0..][..qn]);
                    }
                    for t in 0..qn {
                        let d: &mut [f32; T] = (&mut dst[(q0 + t) * nr + jj0..][..T]).try_into().expect("8 floats");
                        for (r, x) in d.iter_mut().enumerate() {
                            *x = tile[r][t];
                        }
                    }
                }
            }
        } else {
            for (q, d) in dst.chunks_exact_mut(nr).enumerate() {
                let src = &b[(pc + q) * n + jc + j0..][..cols];
                d[..cols].copy_from_slice(src);
                d[cols..].fill(0.0);
            }
        }
    }
}

/// The cache-blocked product. `scratch` holds at least
/// [`gemm_scratch_len`] floats.
#[inline(always)]
fn blocked<const MR: usize, const NR: usize, U: MicroKernel<MR, NR>>(
    ukr: U,
    p: &Gemm<'_>,
    c: &mut [f32],
    scratch: &mut [f32],
    e: &Epilogue<'_>,
) {
    let (m, n, k) = (p.m, p.n, p.k);
    let kc_max = k.min(KC);
    let (bpack, rest) = scratch.split_at_mut(kc_max * round_up(n.min(NC), NR));
    let apack = &mut rest[..kc_max * round_up(m.min(MC), MR)];
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            pack_b_block(p.b, p.b_trans, k, n, NR, (jc, nc), (pc, kc), bpack);
            let (first, last) = (pc == 0, pc + kc == k);
            let beta = if first { p.beta } else { 1.0 };
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
                            e.apply(row, jc + jr, first, last);
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

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::testing::{check, Lcg};
    use std::vec;
    use std::vec::Vec;

    /// Triple-loop reference in f64.
    pub(crate) fn reference(p: &Gemm<'_>, c: &[f32]) -> Vec<f64> {
        let mut r = vec![0.0f64; p.m * p.n];
        for i in 0..p.m {
            for j in 0..p.n {
                let mut s = 0.0f64;
                for q in 0..p.k {
                    let bv = if p.b_trans { p.b[j * p.k + q] } else { p.b[q * p.n + j] };
                    s += p.a_at(i, q) as f64 * bv as f64;
                }
                let old = if p.beta == 0.0 {
                    0.0
                } else {
                    p.beta as f64 * c[i * p.n + j] as f64
                };
                r[i * p.n + j] = p.alpha as f64 * s + old;
            }
        }
        r
    }

    const SHAPES: [(usize, usize, usize); 13] = [
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
        (8, 40, 513),
        (80, 40, 513),
        (4, 2100, 5),
    ];

    #[test]
    fn every_kernel_and_layout() {
        let mut rng = Lcg(1);
        for &(m, n, k) in &SHAPES {
            for at in [false, true] {
                for bt in [false, true] {
                    for &(alpha, beta) in &[(1.0f32, 0.0f32), (0.5, 1.0), (-2.0, 0.25)] {
                        let a = rng.vec(m * k);
                        let b = rng.vec(k * n);
                        let c0 = rng.vec(m * n);
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
                        let want = reference(&p, &c0);
                        let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
                        let mut c = c0.clone();
                        sgemm(m, n, k, alpha, &a, at, &b, bt, beta, &mut c, &mut scratch);
                        check(&c, &want, k);
                        // Every micro-kernel this CPU has, whatever sgemm
                        // picked, and the unpacked path.
                        let mut big = vec![0.0f32; KC * (NC + MC)];
                        let mut c = c0.clone();
                        blocked::<4, 8, _>(Portable, &p, &mut c, &mut big, &Epilogue::NONE);
                        check(&c, &want, k);
                        #[cfg(target_arch = "x86_64")]
                        {
                            let isa = Isa::detect();
                            if isa != Isa::Portable {
                                let mut c = c0.clone();
                                blocked::<6, 16, _>(Avx2Fma(()), &p, &mut c, &mut big, &Epilogue::NONE);
                                check(&c, &want, k);
                            }
                            if isa == Isa::Avx512 {
                                let mut c = c0.clone();
                                // SAFETY: the CPU has AVX-512F.
                                unsafe { blocked_avx512(&p, &mut c, &mut big, &Epilogue::NONE) };
                                check(&c, &want, k);
                            }
                        }
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

    #[test]
    fn beta_zero_ignores_nan_in_c() {
        let (m, n, k) = (20, 30, 40);
        let mut rng = Lcg(7);
        let a = rng.vec(m * k);
        let b = rng.vec(k * n);
        let mut c = vec![f32::NAN; m * n];
        let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
        sgemm(m, n, k, 1.0, &a, false, &b, false, 0.0, &mut c, &mut scratch);
        let p = Gemm {
            m,
            n,
            k,
            alpha: 1.0,
            a: &a,
            a_trans: false,
            b: &b,
            b_trans: false,
            beta: 0.0,
        };
        check(&c, &reference(&p, &[]), k);
    }

    /// The reference with a bias and a ReLU.
    fn with_epilogue(mut want: Vec<f64>, n: usize, bias: &[f32]) -> Vec<f64> {
        for (i, v) in want.iter_mut().enumerate() {
            *v = (*v + bias[i % n] as f64).max(0.0);
        }
        want
    }

    #[test]
    fn fused_bias_relu() {
        let mut rng = Lcg(5);
        // Depths above KC so the bias and ReLU must wait for the last block;
        // widths above NC so there are several column blocks.
        for &(m, n, k) in &[
            (1, 37, 300),
            (1, 1000, 300),
            (8, 64, 1024),
            (3, 3, 3),
            (40, 33, 70),
            (30, 2100, 600),
            (9, 5, 0),
        ] {
            for bt in [false, true] {
                let a = rng.vec(m * k);
                let b = rng.vec(k * n);
                let bias = rng.vec(n);
                let p = Gemm {
                    m,
                    n,
                    k,
                    alpha: 1.0,
                    a: &a,
                    a_trans: false,
                    b: &b,
                    b_trans: bt,
                    beta: 0.0,
                };
                let want = with_epilogue(reference(&p, &[]), n, &bias);
                let e = Epilogue::new(Some(&bias), true);
                let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
                let mut c = vec![f32::NAN; m * n];
                sgemm_fused(m, n, k, 1.0, &a, false, &b, bt, 0.0, &e, &mut c, &mut scratch);
                check(&c, &want, k);
            }
        }
    }

    #[test]
    fn relu_epilogue_keeps_nan() {
        let e = Epilogue::new(None, true);
        let mut row = [f32::NAN, -1.0, 2.0];
        e.apply(&mut row, 0, true, true);
        assert!(row[0].is_nan());
        assert_eq!(&row[1..], &[0.0, 2.0]);
    }
}
