//! The `f32` GEMM engine behind the matrix products and convolutions:
//! `C = clamp(A · B + bias + residual)`, the bias, residual and clamp
//! (an [`Epilogue`]) applied as each finished tile is stored.
//!
//! All matrices are contiguous and row-major. There are two ways in:
//!
//! - [`sgemm`] multiplies operands computed at run time. A "transposed"
//!   operand is the row-major storage of the transpose: `A` given
//!   transposed is stored as a `k × m` matrix, `B` given transposed is
//!   stored `n × k` (the layout of a PyTorch `Linear` weight). Each `KC ×
//!   NC` block of `B` is packed as it goes; small products skip packing.
//! - [`gemm_packed`] multiplies by a `B` packed ahead of time by [`pack`]
//!   (a weight, rearranged once, as XNNPACK does when it creates its
//!   runtime): the engine of XNNPACK's fully-connected and convolution
//!   nodes. It reads `A` rows where they are, with any row stride, and
//!   writes `C` rows with any stride: a 1×1 convolution multiplies the
//!   NHWC pixels in place and a grouped one writes its group's columns of
//!   the output directly; 7-row tiles cover the 49 pixels of a 7×7 image
//!   exactly. (On MobileNet's convolutions this ran about twice as fast
//!   as an engine that packed `A` too.)
//!
//! Both run the same blocked product: `KC` rows of `B` by `NC` columns at
//! a time, around register-blocked micro-kernels. The files split it by
//! concern, so that another instruction set's micro-kernel (aarch64 NEON)
//! is a file beside the others and an arm in `dispatch`:
//!
//! - this one: the entry points, the blocking of [`sgemm`], how threads
//!   share a product, and which micro-kernel runs;
//! - `packing`: the layout of a packed `B` (strips of [`NR`] columns, a
//!   header that recognises a buffer packed on an earlier run);
//! - `indirect`: rows of `A` gathered from runs of a source ([`Gather`]),
//!   which [`gemm_indirect`] multiplies where the AVX-512 tiles run: a
//!   convolution's windows, read where they lie in the image;
//! - `blocks`: how a product is cut into depth and column blocks and the
//!   tiles a micro-kernel sweeps (`Product`, `Job`, `At`, `Out`, and the
//!   `Tile` trait every micro-kernel implements);
//! - `scalar`, `avx2`, `avx512`, `neon`: the micro-kernels, portable 4×32,
//!   AVX2 + FMA 6×16, AVX-512 8×32 and aarch64 NEON 8×8 (up to 1×32 for
//!   fewer rows), chosen at run time with the `std` feature, else from the
//!   compile-time target features (`crate::cpu`; NEON always at compile
//!   time).
use crate::activation::Activation;
use crate::cpu::Isa;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod blocks;
mod indirect;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon;
pub(crate) mod packing;
mod scalar;

use blocks::{Out, Product};
pub use indirect::{runs_indirect, Gather, ZERO_TAP};
pub use packing::{ensure_packed, holds_stamp, is_packed, pack, pack_with, packed_len, NR};
use packing::{pack_block, strips};

/// Rows of `B` per depth block (an `8 × KC` tile of `A` stays in L1).
const KC: usize = 256;

/// Columns per block (a `KC × NC` block of packed `B` stays in L2): the
/// block [`sgemm`] packs at a time, and the one the tile kernels multiply
/// at a time unless theirs is narrower (`Tile::COLUMNS`).
const NC: usize = 512;

/// Rows of `A` copied per block when it is stored transposed.
const MC: usize = 192;

/// What happens to each result as it is stored: `bias[j]` is added to
/// column `j`, then the residual's element at the same place, then the
/// value is clamped to `[min, max]` (NaN stays NaN, as `relu` keeps it),
/// then the activation applied.
#[derive(Clone, Copy, Debug)]
pub struct Epilogue<'a> {
    /// At least `n` elements, when present.
    pub bias: Option<&'a [f32]>,
    /// A matrix laid out as `C` (its row stride, at least as many floats):
    /// a residual connection added to the product. Only [`gemm_packed`]
    /// takes one.
    pub residual: Option<&'a [f32]>,
    pub min: f32,
    pub max: f32,
    /// Applied to rows of results soon after they are stored, while they
    /// are still in cache.
    pub activation: Activation,
}

impl<'a> Epilogue<'a> {
    /// Nothing added, nothing clamped.
    pub const NONE: Epilogue<'static> = Epilogue {
        bias: None,
        residual: None,
        min: f32::NEG_INFINITY,
        max: f32::INFINITY,
        activation: Activation::Identity,
    };

    /// A bias (if any), then `relu` when asked.
    pub fn new(bias: Option<&'a [f32]>, relu: bool) -> Self {
        Epilogue {
            bias,
            residual: None,
            min: if relu { 0.0 } else { f32::NEG_INFINITY },
            max: f32::INFINITY,
            activation: Activation::Identity,
        }
    }

    fn clamps(&self) -> bool {
        self.min > f32::NEG_INFINITY || self.max < f32::INFINITY
    }

    /// Applies the bias (when `first`, the first depth block), the clamp
    /// and the activation (when `last`) to `row`, whose first element is
    /// column `col0`.
    #[inline(always)]
    fn apply(&self, row: &mut [f32], col0: usize, first: bool, last: bool) {
        if let (true, Some(b)) = (first, self.bias) {
            for (x, &bv) in row.iter_mut().zip(&b[col0..]) {
                *x += bv;
            }
        }
        if last && self.clamps() {
            let (lo, hi) = (self.min, self.max);
            for x in row.iter_mut() {
                // Comparisons with NaN are false: NaN passes through.
                if *x < lo {
                    *x = lo;
                } else if *x > hi {
                    *x = hi;
                }
            }
        }
        if last {
            self.activation.apply(row);
        }
    }
}

// ---------------------------------------------------------------------------
// Products of run-time operands: sgemm
// ---------------------------------------------------------------------------

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
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        Isa::Neon => "neon 8x8",
    }
}

/// The operands of one product (lengths already checked).
#[derive(Clone, Copy)]
struct Gemm<'a> {
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

/// [`scalar::direct`], compiled for AVX2 + FMA where `isa` has them.
#[inline(always)]
fn direct_on(isa: Isa, p: &Gemm<'_>, c: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Portable {
        // SAFETY: the CPU has AVX2 and FMA (every x86 ISA but Portable
        // implies both).
        return unsafe { avx2::direct_avx2(p, c) };
    }
    let _ = isa;
    scalar::direct(p, c);
}

/// The cache-blocked product: each `KC × NC` block of `B` is packed (times
/// `alpha`) into [`pack`]'s strips and multiplied by [`gemm_packed`]'s
/// register tiles, `A` read in place (or, stored transposed, copied row-major
/// `MC` rows at a time). `C` is first scaled by `beta`; every depth block
/// after that adds to it, and the last applies the epilogue. `scratch` holds
/// at least [`gemm_scratch_len`] floats.
fn blocked(p: &Gemm<'_>, c: &mut [f32], scratch: &mut [f32], e: &Epilogue<'_>) {
    let (m, n, k) = (p.m, p.n, p.k);
    let keep_c = p.beta != 0.0;
    if keep_c {
        scalar::scale_row(c, p.beta);
    }
    let kc_max = k.min(KC);
    let (bpack, rest) = scratch.split_at_mut(kc_max * n.min(NC).next_multiple_of(NR));
    let apack = &mut rest[..kc_max * m.min(MC)];
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            pack_block(p.b, p.b_trans, (k, n), p.alpha, (jc, nc), (pc, kc), bpack);
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
                gemm_block(m, nc, kc, a, k, bpack, accumulate, &epilogue, c, n);
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
                gemm_block(mc, nc, kc, a, kc, bpack, accumulate, &epilogue, c, n);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Products by a packed B, and how threads and micro-kernels share them
// ---------------------------------------------------------------------------

/// `C = clamp(A · B + bias + residual)` for `A` `m × k` (row `i` at
/// `a[i·lda..]`), `B` packed by [`pack`] (`k × n`), and `C` `m × n` (row `i`
/// at `c[i·ldc..]`, and so is the residual's). `C`'s previous contents are
/// ignored.
#[allow(clippy::too_many_arguments)]
pub fn gemm_packed(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    packed: &[f32],
    epilogue: &Epilogue<'_>,
    c: &mut [f32],
    ldc: usize,
) {
    assert!(
        m == 0 || n == 0 || is_packed(packed, k, n),
        "B is not a {k}×{n} packing"
    );
    multiply(m, n, k, a, lda, None, strips(packed), false, epilogue, c, ldc);
}

/// [`gemm_packed`] with the rows of `A` gathered from runs ([`Gather`]: a
/// convolution's windows where they lie in the image), `k` deep
/// ([`Gather::depth`]). Each output is one chain of fused multiply-adds
/// over the whole depth in order, then the epilogue: the same bits on
/// any number of threads.
///
/// # Panics
/// Where [`runs_indirect`] is false for `n`; when `a` has fewer than `m`
/// rows or `packed` is not a `k × n` packing.
#[allow(clippy::too_many_arguments)]
pub fn gemm_indirect(
    m: usize,
    n: usize,
    a: &Gather<'_>,
    packed: &[f32],
    epilogue: &Epilogue<'_>,
    c: &mut [f32],
    ldc: usize,
) {
    let k = a.depth();
    assert!(runs_indirect(n), "no indirect product of {n} columns on this CPU");
    assert!(a.rows() >= m, "{} gathered rows for {m}", a.rows());
    assert!(m == 0 || is_packed(packed, k, n), "B is not a {k}×{n} packing");
    multiply(m, n, k, &[], k, Some(a), strips(packed), false, epilogue, c, ldc);
}

/// One depth block of a product whose `B` is packed as it goes (see
/// [`sgemm`]): `C (+)= A · B`, then the epilogue, for `A`
/// `m × kc` (row stride `lda`), `B`'s `kc` rows packed as [`pack`]'s strips
/// (without the header: strip `s`, row `q`, column `j` at `s·kc·NR + q·NR +
/// j`), and `C` `m × n` (row stride `ldc`). With `accumulate` the product
/// adds to `C`; without, `C`'s previous contents are ignored.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_block(
    m: usize,
    n: usize,
    kc: usize,
    a: &[f32],
    lda: usize,
    strips: &[f32],
    accumulate: bool,
    epilogue: &Epilogue<'_>,
    c: &mut [f32],
    ldc: usize,
) {
    assert!(
        strips.len() >= kc * n.div_ceil(NR) * NR,
        "strips of {} floats for {kc}×{n}",
        strips.len()
    );
    multiply(m, n, kc, a, lda, None, strips, accumulate, epilogue, c, ldc);
}

/// The product behind [`gemm_packed`], [`gemm_indirect`] and
/// [`gemm_block`]: `B`'s strips hold `k` rows each; the rows of `A` are
/// `a`'s (stride `lda`), or gathered (`a` then empty).
#[allow(clippy::too_many_arguments)]
fn multiply(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    gather: Option<&Gather<'_>>,
    body: &[f32],
    accumulate: bool,
    epilogue: &Epilogue<'_>,
    c: &mut [f32],
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    // The bounds every tile below relies on.
    assert!(
        lda >= k && ldc >= n,
        "row strides {lda}, {ldc} for a {m}×{k} by {k}×{n} product"
    );
    match gather {
        None => assert!(a.len() >= (m - 1) * lda + k, "A of {} floats", a.len()),
        Some(g) => assert!(g.rows() >= m && g.depth() == k && a.is_empty()),
    }
    assert!(c.len() >= (m - 1) * ldc + n, "C of {} floats", c.len());
    if let Some(b) = epilogue.bias {
        assert!(b.len() >= n, "bias of {} for {n} columns", b.len());
    }
    if let Some(r) = epilogue.residual {
        assert!(r.len() >= (m - 1) * ldc + n, "residual of {} floats", r.len());
    }
    if k == 0 {
        for i in 0..m {
            for (j, o) in c[i * ldc..][..n].iter_mut().enumerate() {
                let mut v = epilogue.bias.map_or(0.0, |b| b[j]);
                if accumulate {
                    v += *o;
                }
                if let Some(r) = epilogue.residual {
                    v += r[i * ldc + j];
                }
                *o = v.max(epilogue.min).min(epilogue.max);
            }
            epilogue.activation.apply(&mut c[i * ldc..][..n]);
        }
        return;
    }
    // Of the whole product, not of a thread's part: every thread count
    // then sums in the same order.
    // Gathered rows sum their whole depth in registers: their A is read
    // where it lies, so a row tile's runs stay in L1 across the strips
    // whatever the depth, and no partial sum goes through C (ResNet's
    // 3 × 3 layers: 106–109 -> 111–116 GFLOP/s against blocks of 256).
    // Longer chains round a little more (ResNet-50's logits against
    // PyTorch: 138 of 1000 off by over 2e-5, against 105 with blocks and
    // 341 through XNNPACK, which does the same): docs/performance-log.md.
    let depth = if gather.is_some() {
        k
    } else {
        blocks::depth_block(m, n, k)
    };
    let product = |n: usize, b: &'_ [f32], epilogue: &'_ Epilogue<'_>, rows: core::ops::Range<usize>, c: Out| {
        let product = Product {
            m: rows.len(),
            n,
            k,
            depth,
            a: &a[if gather.is_some() { 0 } else { rows.start * lda }..],
            lda,
            gather: gather.map(|g| g.skip_rows(rows.start)),
            b,
            accumulate,
            epilogue,
        };
        dispatch(&product, m == 1 && gather.is_none(), c)
    };
    let grain = tile_rows(m);
    // With threads, a few rows against a large weight split the tiles
    // (whole strips by whole row tiles) strip by strip, so each part reads
    // its own share of B (see `splits_by_strips`); any other product takes
    // bands of rows and its band of C. Products too small to pay for the
    // hand-off stay whole; a weight too large for the cache is worth it
    // whatever the rows (squeeze-excitation's 960 x 240 on one row: 0.9
    // MB to read, 25 us on one thread).
    let by_strips = splits_by_strips(m, n, k);
    let worth_splitting = m * n * k >= 1 << 18 || by_strips;
    if by_strips && crate::parallel::threads() > 1 {
        let tiles = m.div_ceil(grain);
        let grid = crate::parallel::split(n.div_ceil(NR) * tiles, 1);
        // SAFETY: each part below writes only its tiles of C (and reads
        // the residual, which nothing writes); C outlives `run_parts`.
        let out = unsafe { crate::parallel::Shared::new(Out::new(c, ldc, epilogue.residual)) };
        crate::parallel::run_parts(grid.parts(), &|i| {
            let Some((t0, t1)) = grid.range(i) else { return };
            for (strips, tile_rows) in grid_rectangles(t0, t1, tiles) {
                let (j0, j1) = (strips.start * NR, (strips.end * NR).min(n));
                let rows = tile_rows.start * grain..(tile_rows.end * grain).min(m);
                // The residual goes with C (`Out::at`).
                let shifted = Epilogue {
                    bias: epilogue.bias.map(|b| &b[j0..]),
                    ..*epilogue
                };
                // Part `i` writes only the tiles `t0 .. t1` of C, which no
                // other part writes.
                let c = out.get().at(rows.start, j0);
                product(j1 - j0, &body[strips.start * k * NR..], &shifted, rows, c);
            }
        });
        return;
    }
    crate::parallel::for_each_band(c, m, ldc, grain, worth_splitting && m >= 16, &|rows, c| {
        let residual = epilogue.residual.map(|r| &r[rows.start * ldc..]);
        product(n, body, epilogue, rows, Out::new(c, ldc, residual))
    });
}

/// Whether threads split an `m × k` by `k × n` product strip by strip
/// rather than in bands of rows: when it has more columns than rows and
/// `B` does not fit in a core's cache, so that each thread reads only its
/// share of the weight from memory. A smaller `B` (MobileNetV2's 14 × 14
/// expansions: 98 and 221 KB) is read whole by both threads from cache,
/// and bands of rows keep each thread on the rows of the layers around it,
/// which it wrote itself. MobileNetV2 on two threads on Zen 3, the two
/// rules alternated in one process, 150 pairs a run: this one faster in
/// 84, 101, 105 and 113.
fn splits_by_strips(m: usize, n: usize, k: usize) -> bool {
    n > m && n > NR && blocks::outgrows_cache(k, n)
}

/// Rows per tile of the tile kernel this CPU runs, for `m` rows: bands of
/// rows split across threads are whole tiles.
fn tile_rows(m: usize) -> usize {
    // Only the AVX-512 tile depends on it.
    let _ = m;
    match Isa::detect() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if !m.is_multiple_of(8) && m.is_multiple_of(7) => 7,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => 8,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => 6,
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        Isa::Neon => 8,
        Isa::Portable => 4,
    }
}

/// Runs a product with the best micro-kernel this CPU has: a product of
/// one row (`single_row`: the whole product's, not a thread's part of a
/// larger one, whose one row would then sum in another order than with
/// one thread) strip by strip on AVX2 ([`avx2::Avx2::one_row`]), else the
/// tile of the best instruction set (NEON's takes one row itself, 32
/// columns wide).
fn dispatch(p: &Product<'_>, single_row: bool, c: Out) {
    // Only AVX2 has a one-row kernel.
    let _ = single_row;
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if let Some(t) = neon::Neon::detect() {
        return p.run(t, c);
    }
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = avx2::Avx2::detect();
        if let (true, Some(t)) = (single_row && p.m == 1, avx2) {
            t.one_row(p, c);
            let mut c = c;
            return p.epilogue.activation.apply(c.row(0, p.n));
        }
        if let Some(t) = avx512::Avx512::detect() {
            return p.run(t.for_rows(p.m), c);
        }
        if let Some(t) = avx2 {
            return p.run(t, c);
        }
    }
    p.run(scalar::Portable, c)
}

/// The tiles `t0 .. t1` of a product, counted strip by strip (`tiles` row
/// tiles each), as at most three rectangles `(strips, row tiles)`: the
/// rest of a first strip begun, whole strips, the start of a last one.
fn grid_rectangles(
    t0: usize,
    t1: usize,
    tiles: usize,
) -> impl Iterator<Item = (core::ops::Range<usize>, core::ops::Range<usize>)> {
    let (s0, r0, s1, r1) = (t0 / tiles, t0 % tiles, t1 / tiles, t1 % tiles);
    let rectangles = if s0 == s1 {
        [(s0..s0 + 1, r0..r1), (0..0, 0..0), (0..0, 0..0)]
    } else {
        let whole = s0 + usize::from(r0 > 0)..s1;
        [(s0..s0 + 1, r0..tiles), (whole, 0..tiles), (s1..s1 + 1, 0..r1)]
    };
    rectangles.into_iter().enumerate().filter_map(move |(i, (s, r))| {
        // The first rectangle is whole strips' business when it starts at
        // row tile 0.
        let skip = s.is_empty() || r.is_empty() || (i == 0 && s0 != s1 && r0 == 0);
        (!skip).then_some((s, r))
    })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::testing::{check, Lcg};
    use std::vec;
    use std::vec::Vec;

    /// Triple-loop reference in f64.
    pub(super) fn reference(p: &Gemm<'_>, c: &[f32]) -> Vec<f64> {
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
    pub(super) const SCALES: [(f32, f32); 3] = [(1.0, 0.0), (0.5, 1.0), (-2.0, 0.25)];

    /// Random `A` (`m × k`), `B` (`k × n`) and starting `C` (`m × n`).
    pub(super) fn operands(rng: &mut Lcg, m: usize, n: usize, k: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        (rng.vec(m * k), rng.vec(k * n), rng.vec(m * n))
    }

    /// The product of `A` and `B`, each with whether it is stored
    /// transposed.
    pub(super) fn product<'a>(
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

    /// Under Miri (whose portable tiles are 4 × 32) a few small shapes,
    /// one with a whole tile and strip and partial ones; `fused_bias_relu`
    /// takes two depth blocks (`KC`) and two column blocks (`NC`).
    const MIRI_SHAPES: [(usize, usize, usize); 5] = [(1, 1, 1), (1, 37, 3), (3, 1, 5), (5, 7, 3), (5, 33, 4)];

    #[test]
    fn every_kernel_and_layout() {
        let mut rng = Lcg(1);
        let shapes = if cfg!(miri) { &MIRI_SHAPES[..] } else { &SHAPES[..] };
        for (shape, &(m, n, k)) in shapes.iter().enumerate() {
            for at in [false, true] {
                for bt in [false, true] {
                    for (scale, &(alpha, beta)) in SCALES.iter().enumerate() {
                        // Under Miri one scaling a layout, in turn: each
                        // shape still takes all three, and each layout
                        // all three over the shapes.
                        let layout = 2 * usize::from(at) + usize::from(bt);
                        if cfg!(miri) && scale != (shape + layout) % SCALES.len() {
                            continue;
                        }
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
                        scalar::direct(&p, &mut c);
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
        // Under Miri smaller, still a partial tile and strip.
        let (m, n, k) = if cfg!(miri) { (5, 30, 4) } else { (20, 30, 40) };
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
        let shapes: &[(usize, usize, usize)] = if cfg!(miri) {
            // Smaller, through the same blocks.
            &[(1, 5, 257), (1, 513, 2), (3, 3, 3), (5, 33, 4), (9, 5, 0)]
        } else {
            &[
                (1, 37, 300),
                (1, 1000, 300),
                (8, 64, 1024),
                (3, 3, 3),
                (40, 33, 70),
                (30, 2100, 600),
                (9, 5, 0),
            ]
        };
        for &(m, n, k) in shapes {
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

    /// Threads split by strips only a weight larger than a core's cache
    /// that has more columns than the product has rows.
    #[test]
    fn only_large_weights_against_few_rows_split_by_strips() {
        // MobileNetV2's 7 × 7 layers and classifier, the MLP's batch of 8.
        for (m, n, k) in [
            (49, 960, 160),
            (49, 160, 960),
            (49, 1280, 320),
            (1, 1000, 1280),
            (8, 1024, 1024),
        ] {
            assert!(splits_by_strips(m, n, k), "{m}x{n}x{k}");
        }
        // Its 14 × 14 expansions (a weight that stays in cache), products
        // with more rows than columns, a single strip.
        for (m, n, k) in [
            (196, 384, 64),
            (196, 576, 96),
            (196, 64, 384),
            (3136, 144, 24),
            (4, 32, 4096),
        ] {
            assert!(!splits_by_strips(m, n, k), "{m}x{n}x{k}");
        }
    }

    fn rng(seed: u64, n: usize) -> Vec<f32> {
        Lcg(seed).vec(n)
    }

    /// Whole tiles (16 rows by 64 columns, one depth block) under each
    /// epilogue: the straight-line store path must add the bias and the
    /// residual only when there are some and clamp only when asked.
    #[test]
    fn whole_tiles_apply_exactly_their_epilogue() {
        // Under Miri whole tiles of the portable kernel (4 × 32), shallower.
        let (m, n, k) = if cfg!(miri) { (8, 64, 4) } else { (16, 64, 24) };
        let a = rng(4, m * k);
        let b = rng(5, k * n);
        let bias = rng(6, n);
        let residual = rng(7, m * n);
        let mut packed = vec![0.0f32; packed_len(k, n)];
        pack(&b, k, n, false, &mut packed);
        let unclamped = (f32::NEG_INFINITY, f32::INFINITY);
        for (with_bias, with_residual, (min, max)) in [
            (false, false, unclamped),
            (true, false, unclamped),
            (false, true, unclamped),
            (false, false, (-0.5, 0.5)),
            (true, false, (0.0, 6.0)),
            (true, true, (-0.5, 0.5)),
        ] {
            let e = Epilogue {
                bias: with_bias.then_some(&bias[..]),
                residual: with_residual.then_some(&residual[..]),
                min,
                max,
                activation: Activation::Identity,
            };
            let mut c = vec![f32::NAN; m * n];
            gemm_packed(m, n, k, &a, k, &packed, &e, &mut c, n);
            for i in 0..m {
                for j in 0..n {
                    let dot: f64 = (0..k).map(|q| a[i * k + q] as f64 * b[q * n + j] as f64).sum();
                    let added = if with_bias { bias[j] as f64 } else { 0.0 }
                        + if with_residual { residual[i * n + j] as f64 } else { 0.0 };
                    let want = ((dot + added) as f32).clamp(min, max);
                    let got = c[i * n + j];
                    assert!(
                        (got - want).abs() <= 1e-4,
                        "bias {with_bias}, residual {with_residual}, clamp {min}..{max}, ({i},{j}): {got} vs {want}"
                    );
                }
            }
        }
    }

    /// A product with an activation stores what the product without one
    /// stores, then activated, bit for bit, on every path: one row, rows
    /// past a band of activated rows, strips outermost (split by strips
    /// on two threads), two depth blocks, two column blocks, no depth,
    /// gathered rows, and `sgemm_fused`'s direct, split and blocked paths.
    #[test]
    fn activations_apply_to_what_the_product_stores() {
        let packed_shapes: &[(usize, usize, usize)] = if cfg!(miri) {
            &[(1, 37, 3), (5, 33, 4), (3, 5, 0)]
        } else {
            &[
                (1, 300, 40),
                (3, 37, 5),
                (200, 72, 24),
                (49, 960, 320),
                (400, 40, 513),
                (20, 600, 8),
                (5, 7, 0),
            ]
        };
        let sgemm_shapes: &[(usize, usize, usize)] = if cfg!(miri) {
            &[(3, 5, 4)]
        } else {
            &[(3, 5, 4), (1, 1100, 128), (64, 70, 300)]
        };
        let activations = [Activation::Hardswish, Activation::SigmoidMul];
        // Each product with its epilogue's activation, and without it
        // then activated: the same bits.
        let same = |label: &str, run: &dyn Fn(&Epilogue<'_>, &mut [f32]), e: &Epilogue<'_>, len: usize| {
            for activation in activations {
                let mut want = vec![f32::NAN; len];
                run(e, &mut want);
                activation.apply(&mut want);
                let mut got = vec![f32::NAN; len];
                run(&Epilogue { activation, ..*e }, &mut got);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                        "{label} {activation:?} [{i}]: {g} vs {w}"
                    );
                }
            }
        };
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        for threads in [1, 2] {
            crate::parallel::set_threads(threads);
            for (i, &(m, n, k)) in packed_shapes.iter().enumerate() {
                let seed = 10 * i as u64;
                let ldc = n + 3;
                let (a, b, bias) = (rng(seed, m * k), rng(seed + 1, k * n), rng(seed + 2, n));
                let residual: Vec<f32> = rng(seed + 3, m * ldc).iter().map(|v| v * 4.0).collect();
                let mut packed = vec![0.0f32; packed_len(k, n)];
                pack(&b, k, n, false, &mut packed);
                let e = Epilogue {
                    bias: Some(&bias),
                    residual: (i % 2 == 0).then_some(&residual[..]),
                    min: if i % 3 == 0 { -2.0 } else { f32::NEG_INFINITY },
                    max: f32::INFINITY,
                    activation: Activation::Identity,
                };
                let label = std::format!("{threads} thread(s), {m}x{n}x{k}");
                let run = |e: &Epilogue<'_>, c: &mut [f32]| gemm_packed(m, n, k, &a, k, &packed, e, c, ldc);
                same(&label, &run, &e, m * ldc);
            }
            for (i, &(m, n, k)) in sgemm_shapes.iter().enumerate() {
                let seed = 100 + 10 * i as u64;
                let (a, b, bias) = (rng(seed, m * k), rng(seed + 1, k * n), rng(seed + 2, n));
                let e = Epilogue::new(Some(&bias), false);
                let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
                let scratch = core::cell::RefCell::new(&mut scratch[..]);
                let label = std::format!("sgemm, {threads} thread(s), {m}x{n}x{k}");
                let run = |e: &Epilogue<'_>, c: &mut [f32]| {
                    sgemm_fused(m, n, k, 0.5, &a, false, &b, true, 0.0, e, c, &mut scratch.borrow_mut())
                };
                same(&label, &run, &e, m * n);
            }
            // Gathered rows (each of 3 runs of 40 of the source), more
            // than a band of them.
            let (m, n, taps, run) = (300, 64, 3, 40);
            if runs_indirect(n) && !cfg!(miri) {
                let x = rng(7, 1000);
                let offsets: Vec<usize> = (0..m * taps)
                    .map(|t| if t % 7 == 3 { ZERO_TAP } else { (t * 37) % (1000 - run) })
                    .collect();
                let zeros = vec![0.0f32; run];
                let gather = Gather::new(&x, &offsets, taps, run, &zeros).unwrap();
                let (b, bias) = (rng(8, taps * run * n), rng(9, n));
                let mut packed = vec![0.0f32; packed_len(taps * run, n)];
                pack(&b, taps * run, n, false, &mut packed);
                let e = Epilogue::new(Some(&bias), true);
                let label = std::format!("gathered, {threads} thread(s)");
                let product = |e: &Epilogue<'_>, c: &mut [f32]| gemm_indirect(m, n, &gather, &packed, e, c, n);
                same(&label, &product, &e, m * n);
            }
        }
        crate::parallel::set_threads(1);
    }

    #[test]
    fn grid_rectangles_cover_each_tile_once() {
        for tiles in 1..5 {
            let all = 4 * tiles;
            for t0 in 0..=all {
                for t1 in t0..=all {
                    let mut seen = vec![0u8; all];
                    for (strips, rows) in grid_rectangles(t0, t1, tiles) {
                        assert!(strips.end <= 4 && rows.end <= tiles && !strips.is_empty() && !rows.is_empty());
                        for s in strips {
                            for r in rows.clone() {
                                seen[s * tiles + r] += 1;
                            }
                        }
                    }
                    let want: Vec<u8> = (0..all).map(|t| u8::from(t0 <= t && t < t1)).collect();
                    assert_eq!(seen, want, "tiles {t0}..{t1} of {tiles} per strip");
                }
            }
        }
    }

    /// Every tile kind on shapes with ragged rows, columns and depth
    /// blocks, strided A and C, transposed and plain B (the latter with a
    /// residual, strided as C).
    #[test]
    fn products_match_a_reference() {
        // Under Miri (portable kernels) the shapes whose 4 × 32 tiles take
        // at most 2^13 multiply-adds, and a smaller strided one: still
        // whole and ragged row tiles, ragged strips and depth blocks.
        let strided = if cfg!(miri) {
            (2, 3, 257, 1024)
        } else {
            (300, 70, 300, 1024)
        };
        for (m, n, k, lda) in [
            (1, 1, 1),
            (3, 17, 5),
            (9, 33, 300),
            (13, 70, 64),
            (2, 600, 20),
            (17, 48, 513),
            // Few rows against a large B: strips outermost, prefetching
            // across column and depth blocks (the last strip 24 wide).
            (20, 600, 300),
            // Strips 17 to 24 wide, two rows to a vector: whole pairs,
            // an odd row left over (7-row tiles), after a whole strip.
            (16, 24, 10),
            (7, 20, 3),
            (15, 56, 33),
            (49, 24, 144),
            // 49 rows against a large B, in half-deep blocks (three, the
            // last ragged) over two column blocks.
            (49, 300, 330),
            // A batch of 8 (two row tiles of 4 on AVX2) against a last
            // strip of 8 columns, and products 8 and fewer wide.
            (8, 1000, 70),
            (11, 8, 40),
            (6, 5, 9),
            // One row (AVX2: strip by strip over the whole depth): ragged
            // last strips, 17 to 24 wide among them, odd and even depths,
            // a weight larger than a depth block.
            (1, 24, 9),
            (1, 37, 1),
            (1, 1000, 70),
            (1, 70, 600),
        ]
        .iter()
        .filter(|&&(m, n, k): &&(usize, usize, usize)| {
            !crate::testing::too_large_for_miri(m.next_multiple_of(4) * n.next_multiple_of(32) * k, 1 << 13)
        })
        .map(|&(m, n, k)| (m, n, k, k + 3))
        // Rows of A 4 KB apart, many of them, two depth blocks: the AVX2
        // tiles copy each row tile together.
        .chain([strided])
        {
            for b_trans in [false, true] {
                // Under Miri the strided product with a plain B only (and
                // so a residual): B transposed is packed in the other
                // shapes, and taken in two depth blocks by
                // `fused_bias_relu`.
                if cfg!(miri) && b_trans && lda != k + 3 {
                    continue;
                }
                let ldc = n + 5;
                let a = rng(1, m * lda);
                let b = rng(2, k * n);
                let bias = rng(3, n);
                let residual = (!b_trans).then(|| rng(4, m * ldc));
                let mut packed = vec![0.0f32; packed_len(k, n)];
                assert!(!is_packed(&packed, k, n));
                pack(&b, k, n, b_trans, &mut packed);
                assert!(is_packed(&packed, k, n) && !is_packed(&packed, k + 1, n));
                let mut want = vec![0.0f32; m * n];
                for i in 0..m {
                    for j in 0..n {
                        let mut s = bias[j] as f64 + residual.as_ref().map_or(0.0, |r| r[i * ldc + j] as f64);
                        for q in 0..k {
                            let bv = if b_trans { b[j * k + q] } else { b[q * n + j] };
                            s += a[i * lda + q] as f64 * bv as f64;
                        }
                        want[i * n + j] = (s as f32).clamp(-1.0, 2.0);
                    }
                }
                let e = Epilogue {
                    bias: Some(&bias),
                    residual: residual.as_deref(),
                    min: -1.0,
                    max: 2.0,
                    activation: Activation::Identity,
                };
                let check = |c: &[f32]| {
                    for i in 0..m {
                        for j in 0..n {
                            let (g, w) = (c[i * ldc + j], want[i * n + j]);
                            assert!(
                                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                                "{m}×{n}×{k} ({i},{j}): {g} vs {w}"
                            );
                        }
                    }
                };
                let mut c = vec![f32::NAN; m * ldc];
                gemm_packed(m, n, k, &a, lda, &packed, &e, &mut c, ldc);
                check(&c);
                let p = Product {
                    m,
                    n,
                    k,
                    depth: blocks::depth_block(m, n, k),
                    a: &a,
                    lda,
                    gather: None,
                    b: strips(&packed),
                    accumulate: false,
                    epilogue: &e,
                };
                let mut c = vec![f32::NAN; m * ldc];
                p.run(scalar::Portable, Out::new(&mut c, ldc, e.residual));
                check(&c);
                #[cfg(target_arch = "x86_64")]
                if let Some(t) = avx2::Avx2::detect() {
                    let mut c = vec![f32::NAN; m * ldc];
                    p.run(t, Out::new(&mut c, ldc, e.residual));
                    check(&c);
                }
                #[cfg(target_arch = "x86_64")]
                if let Some(t) = avx512::Avx512::detect() {
                    for seven in [false, true] {
                        let mut c = vec![f32::NAN; m * ldc];
                        p.run(avx512::Avx512 { seven }, Out::new(&mut c, ldc, e.residual));
                        check(&c);
                    }
                    assert!(t.for_rows(49).seven && !t.for_rows(64).seven && !t.for_rows(12544).seven);
                }
                #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
                if let Some(t) = neon::Neon::detect() {
                    let mut c = vec![f32::NAN; m * ldc];
                    p.run(t, Out::new(&mut c, ldc, e.residual));
                    check(&c);
                }
            }
        }
    }
}
