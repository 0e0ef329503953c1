//! The `f32` GEMM engine behind the matrix products and convolutions.
//!
//! All matrices are contiguous and row-major. A "transposed" operand is the
//! row-major storage of the transpose: `A` given transposed is stored as a
//! `k × m` matrix, `B` given transposed is stored `n × k` (the layout of a
//! PyTorch `Linear` weight).
//!
//! The product is cache-blocked: `KC` rows by `NC` columns of `B` at a time
//! are packed into the strips of [`crate::packed`], whose register tiles
//! (AVX-512, AVX2+FMA or portable, chosen at run time with the `std`
//! feature, else from the compile-time target features) multiply them by
//! `A` read in place and store with the epilogue. Small products skip
//! packing.
//!
//! This engine serves operands computed at run time (both are packed as it
//! goes); a constant `B`, a weight, is packed once into
//! [`crate::packed`]'s layout and multiplied by that engine instead. An
//! [`Epilogue`] adds a per-column bias and clamps the results as each
//! finished tile is stored (a fused bias and ReLU).

use crate::cpu::Isa;

// Blocks of `B` as the packed engine multiplies them: `KC` deep, `NC` wide.
use crate::packed::{KC, NC, NR};

/// Rows of `A` copied per block when it is stored transposed.
const MC: usize = 192;

/// Whether a product is small (or thin) enough that packing does not pay.
#[inline(always)]
fn use_direct(m: usize, n: usize, k: usize) -> bool {
    k == 0 || m < 4 || n < 4 || m.saturating_mul(n).saturating_mul(k) <= 4096
}

/// Scratch length, in `f32` elements, that [`sgemm`] needs for an
/// `m × k` by `k × n` product. It is at most `KC · (NC + MC)` (≈ 0.18 M
/// floats) however large the product, and 0 for small products. A shorter
/// scratch is not an error: the product then runs unpacked (correct,
/// slower).
pub fn gemm_scratch_len(m: usize, n: usize, k: usize) -> usize {
    if m == 0 || n == 0 || use_direct(m, n, k) {
        return 0;
    }
    let kc = k.min(KC);
    kc * (n.min(NC).next_multiple_of(NR) + m.min(MC))
}

/// The micro-kernel [`sgemm`] uses on this CPU, for reports.
pub fn sgemm_kernel_name() -> &'static str {
    match Isa::detect() {
        Isa::Portable => "portable 4x32",
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => "avx2+fma 6x32",
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
    blocked(p, c, scratch, e);
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
    // With one row, A is the same whether stored transposed or not.
    if p.b_trans && (p.m == 1 || !p.a_trans) {
        // SAFETY: AVX2 and FMA by the caller.
        return unsafe { rows_times_linear_avx2(p, c) };
    }
    direct(p, c)
}

/// Rows of a Linear weight a [`rows_times_linear_avx2`] step multiplies.
#[cfg(target_arch = "x86_64")]
const GEMV_ROWS: usize = 4;

/// A few rows of `A` (row-major) times a Linear weight (`B` stored `n ×
/// k`): `c[i][j] = alpha · A[i]·B[j] (+ beta · c[i][j])`, four rows of `B`
/// at a time against every row of `A` ([`rows_times_weight_avx2`]): one
/// row alone, two or three together (so that the weight is read once, not
/// once a row), more one at a time.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_times_linear_avx2(p: &Gemm<'_>, c: &mut [f32]) {
    let (m, n, k) = (p.m, p.n, p.k);
    let b = &p.b[..n * k];
    // SAFETY (all four): AVX2 and FMA by the caller.
    match m {
        2 => unsafe { rows_times_weight_avx2::<2, 1>(p, &p.a[..2 * k], b, c) },
        3 => unsafe { rows_times_weight_avx2::<3, 1>(p, &p.a[..3 * k], b, c) },
        _ => {
            for i in 0..m {
                let (a, c) = (&p.a[i * k..(i + 1) * k], &mut c[i * n..(i + 1) * n]);
                unsafe { rows_times_weight_avx2::<1, 2>(p, a, b, c) }
            }
        }
    }
}

/// The `M` rows `a` of [`rows_times_linear_avx2`] into their rows `c`:
/// each group of four weight rows meets every row of `a`, in `V` vectors a
/// sum (4·`M`·`V` chains of FMAs).
///
/// One row takes two vectors a sum, eight chains: the portable loop took
/// one weight row at a time, two chains, whose latency bounded it.
/// MobileNetV2's classifier (1000 × 1280), alternated in one process on
/// Zen 3: 95–101 → 75–76 µs from L3, 448–510 → 397–423 µs with the caches
/// flushed (a software prefetch 128 to 1024 floats ahead only slowed both;
/// eight weight rows at a time ran no faster than four). Two and three
/// rows take one vector a sum (8 and 12 chains) and read the weight once:
/// against the same weight from cache, medians of 400 calls, two rows 139
/// → 80 µs and three 209 → 99 µs against the rows one by one (one row: 68
/// µs).
///
/// Each output sums its products in 8·`V` lanes, lane `l` taking `q ≡ l
/// (mod 8·V)`, then the lanes in order and the tail, whether its weight
/// row went in a group of four or alone: a split of the columns across
/// threads gives the same sums as one thread.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_times_weight_avx2<const M: usize, const V: usize>(p: &Gemm<'_>, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (n, k) = (p.n, p.k);
    let (a, c) = (&a[..M * k], &mut c[..M * n]);
    let rows_of_a: [&[f32]; M] = core::array::from_fn(|i| &a[i * k..(i + 1) * k]);
    let mut sums = [[0.0f32; GEMV_ROWS]; M];
    let mut j = 0;
    while j < n {
        let rows = GEMV_ROWS.min(n - j);
        let weight = &b[j * k..(j + rows) * k];
        // SAFETY: AVX2 and FMA by the caller; `weight` holds `rows` rows
        // of `k` floats and each row of `a` holds `k`.
        unsafe {
            if rows == GEMV_ROWS {
                dots_avx2::<M, GEMV_ROWS, V>(&rows_of_a, weight, &mut sums, 0);
            } else {
                for r in 0..rows {
                    dots_avx2::<M, 1, V>(&rows_of_a, &weight[r * k..(r + 1) * k], &mut sums, r);
                }
            }
        }
        for (i, row_sums) in sums.iter().enumerate() {
            for (cj, &s) in c[i * n + j..i * n + j + rows].iter_mut().zip(row_sums) {
                *cj = if p.beta == 0.0 {
                    p.alpha * s
                } else {
                    p.alpha * s + p.beta * *cj
                };
            }
        }
        j += rows;
    }
}

/// `sums[i][at + r] = a[i] · w[r·k ..][..k]` for the `M` rows of `a` and
/// the `R` rows of `w` (`k` the rows' length), in `V` vectors a sum.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn dots_avx2<const M: usize, const R: usize, const V: usize>(
    a: &[&[f32]; M],
    w: &[f32],
    sums: &mut [[f32; GEMV_ROWS]; M],
    at: usize,
) {
    use core::arch::x86_64::*;
    let k = a[0].len();
    assert!(a.iter().all(|x| x.len() == k) && w.len() >= R * k && at + R <= GEMV_ROWS && V <= 2);
    let step = 8 * V;
    let whole = k / step * step;
    // Weight row r's sums against every row of `a`.
    let mut acc = [[[_mm256_setzero_ps(); V]; M]; R];
    let wp = w.as_ptr();
    for q in (0..whole).step_by(step) {
        // SAFETY: q + 8·V <= whole <= k: the loads are within each row of
        // `a` and each of the `R` rows of `w` (asserted above).
        unsafe {
            let x: [[__m256; V]; M] =
                core::array::from_fn(|i| core::array::from_fn(|v| _mm256_loadu_ps(a[i].as_ptr().add(q + 8 * v))));
            for (r, against) in acc.iter_mut().enumerate() {
                for v in 0..V {
                    let wv = _mm256_loadu_ps(wp.add(r * k + q + 8 * v));
                    for (s, x) in against.iter_mut().zip(&x) {
                        s[v] = _mm256_fmadd_ps(x[v], wv, s[v]);
                    }
                }
            }
        }
    }
    for (r, against) in acc.iter().enumerate() {
        let row = &w[r * k..(r + 1) * k];
        for (i, vectors) in against.iter().enumerate() {
            let mut each = [0.0f32; 16];
            for (v, &vector) in vectors.iter().enumerate() {
                // SAFETY: `each` holds 16 ≥ 8·V floats.
                unsafe { _mm256_storeu_ps(each.as_mut_ptr().add(8 * v), vector) };
            }
            let tail: f32 = a[i][whole..]
                .iter()
                .zip(&row[whole..])
                .fold(0.0, |s, (&u, &v)| s + u * v);
            sums[i][at + r] = each[..step].iter().fold(0.0, |t, &v| t + v) + tail;
        }
    }
}

// ---------------------------------------------------------------------------
// The blocked product
// ---------------------------------------------------------------------------

/// The cache-blocked product: each `KC × NC` block of `B` is packed (times
/// `alpha`) into [`crate::packed`]'s strips and multiplied by that engine's
/// register tiles, `A` read in place (or, stored transposed, copied row-major
/// `MC` rows at a time). `C` is first scaled by `beta`; every depth block
/// after that adds to it, and the last applies the epilogue. `scratch` holds
/// at least [`gemm_scratch_len`] floats.
fn blocked(p: &Gemm<'_>, c: &mut [f32], scratch: &mut [f32], e: &Epilogue<'_>) {
    let (m, n, k) = (p.m, p.n, p.k);
    let keep_c = p.beta != 0.0;
    if keep_c {
        scale_row(c, p.beta);
    }
    let kc_max = k.min(KC);
    let (bpack, rest) = scratch.split_at_mut(kc_max * n.min(NC).next_multiple_of(NR));
    let apack = &mut rest[..kc_max * m.min(MC)];
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            crate::packed::pack_block(p.b, p.b_trans, (k, n), p.alpha, (jc, nc), (pc, kc), bpack);
            let accumulate = keep_c || pc > 0;
            let epilogue = if pc + kc == k {
                Epilogue {
                    bias: e.bias.map(|b| &b[jc..]),
                    ..*e
                }
            } else {
                Epilogue::NONE
            };
            let c = &mut c[jc..];
            if !p.a_trans {
                let a = &p.a[pc..];
                crate::packed::gemm_block(m, nc, kc, a, k, bpack, accumulate, &epilogue, c, n);
                continue;
            }
            for ic in (0..m).step_by(MC) {
                let mc = MC.min(m - ic);
                // Row i of the copy: A(ic + i, pc .. pc + kc).
                let a = &mut apack[..mc * kc];
                for (q, src) in p.a[pc * m..].chunks_exact(m).take(kc).enumerate() {
                    for (i, &v) in src[ic..ic + mc].iter().enumerate() {
                        a[i * kc + q] = v;
                    }
                }
                let c = &mut c[ic * n..];
                crate::packed::gemm_block(mc, nc, kc, a, kc, bpack, accumulate, &epilogue, c, n);
            }
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

    /// `(alpha, beta)` pairs the products are checked with.
    const SCALES: [(f32, f32); 3] = [(1.0, 0.0), (0.5, 1.0), (-2.0, 0.25)];

    /// Random `A` (`m × k`), `B` (`k × n`) and starting `C` (`m × n`).
    fn operands(rng: &mut Lcg, m: usize, n: usize, k: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        (rng.vec(m * k), rng.vec(k * n), rng.vec(m * n))
    }

    /// The product of `A` and `B`, each with whether it is stored
    /// transposed.
    fn product<'a>(
        (m, n, k): (usize, usize, usize),
        alpha: f32,
        beta: f32,
        (a, a_trans): (&'a [f32], bool),
        (b, b_trans): (&'a [f32], bool),
    ) -> Gemm<'a> {
        Gemm {
            m,
            n,
            k,
            alpha,
            a,
            a_trans,
            b,
            b_trans,
            beta,
        }
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
                    for &(alpha, beta) in &SCALES {
                        let (a, b, c0) = operands(&mut rng, m, n, k);
                        let p = product((m, n, k), alpha, beta, (&a, at), (&b, bt));
                        let want = reference(&p, &c0);
                        let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
                        let mut c = c0.clone();
                        sgemm(m, n, k, alpha, &a, at, &b, bt, beta, &mut c, &mut scratch);
                        check(&c, &want, k);
                        // The blocked path whatever sgemm picked (tiny
                        // products go direct), and the unpacked path.
                        let mut big = vec![0.0f32; KC * (NC + MC)];
                        let mut c = c0.clone();
                        blocked(&p, &mut c, &mut big, &Epilogue::NONE);
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

    /// One to three rows times a Linear weight on AVX2 (one row alone, two
    /// and three together): right for any width and depth (groups of four
    /// weight rows and the rows left over, whole vectors and a tail), with
    /// and without `beta`; and a split of the columns gives the same bits
    /// as the whole (threads split one row so).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn rows_times_linear_weight() {
        if !has_avx2_fma() {
            std::eprintln!("rows_times_linear_weight: no AVX2 + FMA here, nothing to check");
            return;
        }
        let mut rng = Lcg(11);
        for m in 1..=3 {
            for &(n, k) in &[(1, 1), (3, 15), (4, 16), (5, 17), (37, 300), (1000, 1280), (9, 33)] {
                for &(alpha, beta) in &SCALES {
                    let (a, b, c0) = operands(&mut rng, m, n, k);
                    let p = product((m, n, k), alpha, beta, (&a, false), (&b, true));
                    let mut whole = c0.clone();
                    // SAFETY: AVX2 and FMA checked above.
                    unsafe { rows_times_linear_avx2(&p, &mut whole) };
                    check(&whole, &reference(&p, &c0), k);
                    // Each part's columns of every row, gathered into an
                    // m × width block and put back.
                    let cut = n / 2 + 1;
                    let mut parts = c0.clone();
                    for cols in [0..cut.min(n), cut.min(n)..n] {
                        let part = Gemm {
                            n: cols.len(),
                            b: &b[cols.start * k..cols.end * k],
                            ..p
                        };
                        let mut block: Vec<f32> = (0..m).flat_map(|i| parts[i * n..][cols.clone()].to_vec()).collect();
                        // SAFETY: as above.
                        unsafe { rows_times_linear_avx2(&part, &mut block) };
                        for (i, row) in block.chunks(cols.len().max(1)).enumerate().take(m) {
                            parts[i * n..][cols.clone()].copy_from_slice(row);
                        }
                    }
                    assert!(
                        whole.iter().zip(&parts).all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{n} × {k}: a split of the columns changed the sums"
                    );
                }
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
