//! The NEON micro-kernels of the blocked product, for aarch64, where NEON
//! is part of the base instruction set (on by default for every aarch64
//! target that has an FPU, so no run-time check). A row tile is at most 8
//! rows; the fewer its rows, the wider it runs across its strip, so that
//! every tile keeps 8 to 16 sums in flight: 5 to 8 rows by 8 columns, 3
//! or 4 by 16, 1 or 2 by 32 (a batch of one through a fully-connected
//! layer: eight chains of FMAs instead of two). Four rows of `B` at a
//! time meet four floats of each row of `A`, loaded as one vector and
//! taken lane by lane (`vfmaq_laneq_f32`): one load of `A` per row for
//! four FMAs a vector. Each output sums its products in one chain, in
//! depth order, whatever its tile's shape: splitting a product's rows
//! differently (across threads) gives the same bits.
//!
//! The whole file is compiled only for aarch64 with NEON.
use super::blocks::{Job, Out, Tile};
use super::packing::NR;
use core::arch::aarch64::*;

/// The NEON tile (see the module's doc). A value exists only where NEON
/// is on: always, on the aarch64 targets the file is compiled for.
#[derive(Clone, Copy)]
pub(super) struct Neon(());

impl Neon {
    /// The tile, when [`crate::cpu::Isa::detect`] chose NEON.
    #[inline(always)]
    pub(super) fn detect() -> Option<Self> {
        (crate::cpu::Isa::detect() == crate::cpu::Isa::Neon).then_some(Neon(()))
    }
}

impl Tile for Neon {
    /// A 256 KB block of packed `B` (as AVX2's): it leaves room beside it
    /// for the rows of `A` and `C` in the 512 KB to 1 MB L2 of common
    /// aarch64 cores. Not measured on any of them yet.
    const COLUMNS: usize = 256;

    fn run(self, job: &Job<'_>, c: Out) {
        job.check(c);
        // SAFETY: `check` bounds every access of every tile.
        unsafe { tiles_neon(job, c) }
    }
}

/// What the tiles of a job do with their sums, decided once per job.
#[derive(Clone, Copy)]
struct Finish {
    /// Add to `C` (a depth block after the first).
    accumulate: bool,
    bias: bool,
    residual: bool,
    clamp: bool,
    lo: f32,
    hi: f32,
}

/// Where one tile of a job reads and writes, from its first row and
/// column: row 0 of its `A` (depth 0), its strip's row 0 of `B` at the
/// tile's column, and `C`, the residual and the bias (null when the job
/// adds none).
#[derive(Clone, Copy)]
struct TilePtrs {
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    res: *const f32,
    bias: *const f32,
}

impl TilePtrs {
    /// The same tile from `cols` columns further right.
    fn right(self, cols: usize) -> Self {
        TilePtrs {
            b: self.b.wrapping_add(cols),
            c: self.c.wrapping_add(cols),
            res: offset_unless_null(self.res, cols),
            bias: offset_unless_null(self.bias, cols),
            ..self
        }
    }
}

/// `ptr` moved `by` floats on, or null when it is null (no residual, no
/// bias).
fn offset_unless_null(ptr: *const f32, by: usize) -> *const f32 {
    if ptr.is_null() {
        ptr
    } else {
        ptr.wrapping_add(by)
    }
}

/// Every tile of `job` (block of `C`: `c`). Row tiles are balanced (9 rows
/// go as 5 + 4, not 8 + 1), so that no tile is left with a row or two
/// whose few sums wait on each FMA's latency.
///
/// # Safety
/// `job` must pass [`Job::check`] for `c`.
#[target_feature(enable = "neon")]
unsafe fn tiles_neon(job: &Job<'_>, c: Out) {
    let (lo, hi) = job.bounds();
    let f = Finish {
        accumulate: job.accumulate,
        bias: job.bias.is_some(),
        residual: job.residual,
        clamp: job.clamp.is_some(),
        lo,
        hi,
    };
    let bias = job.bias.map_or(core::ptr::null(), |b| b.as_ptr());
    let res = if job.residual { c.res } else { core::ptr::null() };
    let (a, b, kc) = (job.a.as_ptr(), job.b.as_ptr(), job.kc);
    job.for_each_tile(8, true, |at| {
        let (row, col) = (at.ir * c.ldc, at.s * NR);
        let p = TilePtrs {
            a: a.wrapping_add(at.ir * job.lda),
            lda: job.lda,
            b: b.wrapping_add(at.s * job.b_stride),
            c: c.ptr.wrapping_add(row + col),
            ldc: c.ldc,
            res: offset_unless_null(res, row + col),
            bias: offset_unless_null(bias, col),
        };
        // SAFETY: by the caller (`check` bounds the `at.mr` rows and
        // `at.nr` columns of every tile, in `A`, `B`, `C`, the residual
        // and the bias); each call gets the tile height it was compiled
        // for.
        unsafe {
            match at.mr {
                8 => strip_neon::<8, 2>(kc, &f, p, at.nr),
                7 => strip_neon::<7, 2>(kc, &f, p, at.nr),
                6 => strip_neon::<6, 2>(kc, &f, p, at.nr),
                5 => strip_neon::<5, 2>(kc, &f, p, at.nr),
                4 => strip_neon::<4, 4>(kc, &f, p, at.nr),
                3 => strip_neon::<3, 4>(kc, &f, p, at.nr),
                2 => strip_neon::<2, 8>(kc, &f, p, at.nr),
                _ => strip_neon::<1, 8>(kc, &f, p, at.nr),
            }
        }
    });
}

/// A tile of exactly `MR` rows across the `nr` columns of its strip, at
/// most `NV` vectors (4·`NV` columns) at a time; the last columns with as
/// few vectors as cover them (a power of two), so that a narrow strip
/// (a product 8 columns wide) does not pay for 32.
///
/// # Safety
/// `p` is a tile of a job that passed [`Job::check`], `kc` deep, `MR` rows
/// by `nr` (1 ..= [`NR`]) columns; `NV` is 1, 2, 4 or 8.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn strip_neon<const MR: usize, const NV: usize>(kc: usize, f: &Finish, p: TilePtrs, nr: usize) {
    let mut j = 0;
    while j < nr {
        let cols = (nr - j).min(4 * NV);
        let p = p.right(j);
        // SAFETY: by the caller: `cols` columns of the tile from column
        // `j`, and the strip's rows hold `NR` ≥ j + 4·nv floats from it.
        unsafe {
            match cols.div_ceil(4).next_power_of_two() {
                1 => tile_neon::<MR, 1>(kc, f, p, cols),
                2 if NV >= 2 => tile_neon::<MR, 2>(kc, f, p, cols),
                3..=4 if NV >= 4 => tile_neon::<MR, 4>(kc, f, p, cols),
                _ => tile_neon::<MR, NV>(kc, f, p, cols),
            }
        }
        j += cols;
    }
}

/// The first `cols` (1 ..= 4·NV) columns of an `MR`-row tile at `p`.
///
/// # Safety
/// As for [`strip_neon`], with `cols` columns of the tile left from `p`,
/// and `p.b` the strip's row 0 at `p`'s column, 4·`NV` floats of each row
/// of the strip readable from there.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn tile_neon<const MR: usize, const NV: usize>(kc: usize, f: &Finish, p: TilePtrs, cols: usize) {
    let rows: [*const f32; MR] = core::array::from_fn(|i| p.a.wrapping_add(i * p.lda));
    let mut acc = [[vdupq_n_f32(0.0); NV]; MR];
    // SAFETY: for q < kc, rows[i] + q is a float of the tile's rows of `A`
    // (and q + 3 < kc in the loop by fours), and b + q·NR + 4·NV is within
    // the strip's row q (by the caller).
    unsafe {
        // Row `q + L` of `B` into the sums, times lane `L` of each row's
        // four floats of `A` (a macro, so that `L` is a constant).
        macro_rules! lane {
            ($q:expr, $x:expr, $l:literal) => {{
                let q = $q + $l;
                let bv: [float32x4_t; NV] = core::array::from_fn(|v| vld1q_f32(p.b.add(q * NR + 4 * v)));
                for i in 0..MR {
                    for v in 0..NV {
                        acc[i][v] = vfmaq_laneq_f32::<$l>(acc[i][v], bv[v], $x[i]);
                    }
                }
            }};
        }
        let mut q = 0;
        while q + 4 <= kc {
            let x: [float32x4_t; MR] = core::array::from_fn(|i| vld1q_f32(rows[i].add(q)));
            lane!(q, x, 0);
            lane!(q, x, 1);
            lane!(q, x, 2);
            lane!(q, x, 3);
            q += 4;
        }
        // The last rows one by one: the same fused multiply-add, so each
        // sum is one chain in depth order whatever the depth.
        for q in q..kc {
            let bv: [float32x4_t; NV] = core::array::from_fn(|v| vld1q_f32(p.b.add(q * NR + 4 * v)));
            for i in 0..MR {
                let x = *rows[i].add(q);
                for v in 0..NV {
                    acc[i][v] = vfmaq_n_f32(acc[i][v], bv[v], x);
                }
            }
        }
    }
    if cols < 4 * NV {
        // SAFETY: as for this function.
        return unsafe { finish_partial_neon(f, p, cols, acc) };
    }
    let (lo, hi) = (vdupq_n_f32(f.lo), vdupq_n_f32(f.hi));
    for (i, acc_row) in acc.iter().enumerate() {
        for (v, &s) in acc_row.iter().enumerate() {
            let at = i * p.ldc + v * 4;
            let mut r = s;
            // SAFETY: the tile's 4·NV = cols floats of row i < MR of `C`,
            // of the residual when it is added, and of the bias when it
            // is.
            unsafe {
                // In `Job::finish`'s order: the old value, the bias, the
                // residual, then the clamp.
                if f.accumulate {
                    r = vaddq_f32(r, vld1q_f32(p.c.add(at)));
                }
                if f.bias {
                    r = vaddq_f32(r, vld1q_f32(p.bias.add(v * 4)));
                }
                if f.residual {
                    r = vaddq_f32(r, vld1q_f32(p.res.add(at)));
                }
                if f.clamp {
                    // FMAXNM and FMINNM, like `f32::max` and `min` (and
                    // the x86 tiles): a NaN sum becomes the bound.
                    r = vminnmq_f32(vmaxnmq_f32(r, lo), hi);
                }
                vst1q_f32(p.c.add(at), r);
            }
        }
    }
}

/// The epilogue of a tile's last `cols` (fewer than 4·NV) columns, a
/// strip's last: out of line, so that the whole-tile path keeps its
/// accumulators in registers.
///
/// # Safety
/// As for [`tile_neon`].
#[target_feature(enable = "neon")]
#[inline(never)]
unsafe fn finish_partial_neon<const MR: usize, const NV: usize>(
    f: &Finish,
    p: TilePtrs,
    cols: usize,
    acc: [[float32x4_t; NV]; MR],
) {
    for (i, acc_row) in acc.iter().enumerate() {
        let mut sums = [0.0f32; NR];
        for (v, &s) in acc_row.iter().enumerate() {
            // SAFETY: `sums` holds NR = 32 ≥ 4·NV floats.
            unsafe { vst1q_f32(sums.as_mut_ptr().add(v * 4), s) };
        }
        for (j, &sum) in sums.iter().enumerate().take(cols) {
            let at = i * p.ldc + j;
            // SAFETY: column j < cols of row i of the tile, in `C`, the
            // residual when added and the bias when added.
            unsafe {
                let mut v = sum;
                if f.accumulate {
                    v += *p.c.add(at);
                }
                if f.bias {
                    v += *p.bias.add(j);
                }
                if f.residual {
                    v += *p.res.add(at);
                }
                if f.clamp {
                    v = v.max(f.lo).min(f.hi);
                }
                *p.c.add(at) = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::blocks::Product;
    use super::super::scalar::Portable;
    use super::super::{gemm_packed, pack, packed_len, strips, Epilogue};
    use super::*;
    use crate::testing::Lcg;
    use std::vec;
    use std::vec::Vec;

    /// One product of the tests: `A` `m × k` (row stride `lda`), `B` packed,
    /// `C`'s starting values and the epilogue's operands (`C` and the
    /// residual with row stride `ldc`).
    struct Case {
        m: usize,
        n: usize,
        k: usize,
        lda: usize,
        ldc: usize,
        a: Vec<f32>,
        b: Vec<f32>,
        packed: Vec<f32>,
        c0: Vec<f32>,
        bias: Vec<f32>,
        residual: Vec<f32>,
    }

    impl Case {
        fn new(seed: u64, m: usize, n: usize, k: usize) -> Case {
            let mut rng = Lcg(seed);
            let (lda, ldc) = (k + 3, n + 5);
            let b = rng.vec(k * n);
            let mut packed = vec![0.0f32; packed_len(k, n)];
            pack(&b, k, n, false, &mut packed);
            Case {
                m,
                n,
                k,
                lda,
                ldc,
                a: rng.vec(m * lda),
                b,
                packed,
                c0: rng.vec(m * ldc),
                bias: rng.vec(n),
                residual: rng.vec(m * ldc),
            }
        }

        fn epilogue(&self, bias: bool, residual: bool, clamp: bool) -> Epilogue<'_> {
            Epilogue {
                bias: bias.then_some(&self.bias[..]),
                residual: residual.then_some(&self.residual[..]),
                min: if clamp { -0.75 } else { f32::NEG_INFINITY },
                max: if clamp { 0.5 } else { f32::INFINITY },
                activation: crate::activation::Activation::Identity,
            }
        }

        /// Rows `rows` of the product through `tile`, `depth` rows of `B`
        /// a block, into `c` (which starts as `c0`).
        fn run<T: Tile>(
            &self,
            tile: T,
            e: &Epilogue<'_>,
            accumulate: bool,
            depth: usize,
            rows: core::ops::Range<usize>,
            c: &mut [f32],
        ) {
            let p = Product {
                m: rows.len(),
                n: self.n,
                k: self.k,
                depth,
                a: &self.a[rows.start * self.lda..],
                lda: self.lda,
                gather: None,
                b: strips(&self.packed),
                accumulate,
                epilogue: e,
            };
            let residual = e.residual.map(|r| &r[rows.start * self.ldc..]);
            p.run(tile, Out::new(&mut c[rows.start * self.ldc..], self.ldc, residual));
        }

        /// Checks `c` against the product in `f64`, with the epilogue
        /// `e`, `C`'s old values added when `accumulate`.
        fn check(&self, c: &[f32], e: &Epilogue<'_>, accumulate: bool, what: &str) {
            let (m, n, k) = (self.m, self.n, self.k);
            for i in 0..m {
                for j in 0..n {
                    let mut s: f64 = (0..k)
                        .map(|q| self.a[i * self.lda + q] as f64 * self.b[q * n + j] as f64)
                        .sum();
                    if accumulate {
                        s += self.c0[i * self.ldc + j] as f64;
                    }
                    s += e.bias.map_or(0.0, |b| b[j] as f64);
                    s += e.residual.map_or(0.0, |r| r[i * self.ldc + j] as f64);
                    let want = (s as f32).max(e.min).min(e.max);
                    let got = c[i * self.ldc + j];
                    assert!(
                        (got - want).abs() <= 1e-5 * (k as f32 + 4.0) * (1.0 + want.abs()),
                        "{what}: {m}×{n}×{k} ({i},{j}): {got} vs {want}"
                    );
                }
                // Past the row's `n` columns, `C` is untouched.
                let pad = &c[i * self.ldc + n..((i + 1) * self.ldc).min(c.len())];
                assert!(
                    pad.iter()
                        .zip(&self.c0[i * self.ldc + n..])
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{what}: {m}×{n}×{k}: row {i} written past its {n} columns"
                );
            }
        }
    }

    /// Every tile height (1 to 8 rows, in one and two row tiles and more),
    /// every way a strip ends (widths around 4, 8, 16 and 32, and several
    /// strips), depths around the four `A` floats a vector holds, under
    /// every combination of the epilogue's parts, with and without
    /// accumulating; depth blocks of 5 make most products several blocks
    /// deep (the bias and clamp only on the last).
    #[test]
    fn every_edge_shape_and_epilogue() {
        let widths = [
            1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 20, 24, 25, 31, 32, 33, 40, 63, 64, 65,
        ];
        let depths = [1, 2, 3, 4, 5, 7, 8, 9, 13, 16];
        let mut seed = 0;
        for m in 1..=19 {
            for &n in &widths {
                for &k in &depths {
                    seed += 1;
                    let case = Case::new(seed, m, n, k);
                    // Two of the 16 combinations a shape, in turn, and
                    // all four parts together.
                    let turn = seed as usize;
                    for bits in [turn % 16, (turn + 7) % 16, 15] {
                        let (bias, residual, clamp, accumulate) =
                            (bits & 1 != 0, bits & 2 != 0, bits & 4 != 0, bits & 8 != 0);
                        let e = case.epilogue(bias, residual, clamp);
                        for depth in [256, 5] {
                            let mut c = case.c0.clone();
                            case.run(Neon(()), &e, accumulate, depth, 0..m, &mut c);
                            case.check(&c, &e, accumulate, &std::format!("epilogue {bits:04b}, depth {depth}"));
                        }
                    }
                }
            }
        }
    }

    /// Products larger than a block: over 256 columns (two column blocks),
    /// over 256 deep (two depth blocks), strided, through `gemm_packed`
    /// (the dispatch) and the tile.
    #[test]
    fn products_of_several_blocks() {
        for (m, n, k) in [
            (1, 300, 20),
            (9, 300, 7),
            (3, 70, 300),
            (17, 260, 513),
            (49, 24, 144),
            (8, 1000, 9),
        ] {
            let case = Case::new((m * n + k) as u64, m, n, k);
            let e = case.epilogue(true, true, true);
            let mut c = vec![f32::NAN; m * case.ldc];
            c.copy_from_slice(&case.c0);
            gemm_packed(m, n, k, &case.a, case.lda, &case.packed, &e, &mut c, case.ldc);
            case.check(&c, &e, false, "gemm_packed");
            let mut c = case.c0.clone();
            case.run(Neon(()), &e, true, 256, 0..m, &mut c);
            case.check(&c, &e, true, "tile");
        }
    }

    /// A product's rows split anywhere (as threads split them) give the
    /// same bits as the whole: each sum is one chain in depth order
    /// whatever the height and width of its tile.
    #[test]
    fn any_split_of_the_rows_gives_the_same_bits() {
        for (m, n, k) in [(11, 40, 37), (17, 33, 9), (9, 8, 300)] {
            let case = Case::new(3, m, n, k);
            let e = case.epilogue(true, true, true);
            let mut whole = case.c0.clone();
            case.run(Neon(()), &e, false, 256, 0..m, &mut whole);
            for cut in 1..m {
                let mut parts = case.c0.clone();
                case.run(Neon(()), &e, false, 256, 0..cut, &mut parts);
                case.run(Neon(()), &e, false, 256, cut..m, &mut parts);
                assert!(
                    whole.iter().zip(&parts).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{m}×{n}×{k} cut at row {cut}"
                );
            }
        }
    }

    /// Through `gemm_packed` on one thread and on two (bands of rows, and a
    /// large weight split by strips down to a single row, 9 = 8 + 1): the
    /// same bits.
    #[cfg(feature = "std")]
    #[test]
    fn threads_give_the_same_bits() {
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        for (m, n, k) in [(9, 300, 300), (100, 70, 300), (1, 1000, 300)] {
            let case = Case::new(5, m, n, k);
            let e = case.epilogue(true, true, true);
            let run = |threads| {
                crate::parallel::set_threads(threads);
                let mut c = case.c0.clone();
                gemm_packed(m, n, k, &case.a, case.lda, &case.packed, &e, &mut c, case.ldc);
                c
            };
            let (one, two) = (run(1), run(2));
            crate::parallel::set_threads(1);
            case.check(&one, &e, false, "one thread");
            assert!(
                one.iter().zip(&two).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{m}×{n}×{k}: two threads changed the bits"
            );
        }
    }

    /// NaN and infinite sums go through the epilogue as the portable
    /// tile's: NaN stays NaN unclamped and becomes the lower bound
    /// clamped (as `f32::max`), infinities clamp to the bounds.
    #[test]
    fn nan_and_infinities_as_the_portable_tile() {
        let (m, n, k) = (10, 37, 6);
        let mut case = Case::new(9, m, n, k);
        case.a[case.lda + 2] = f32::NAN;
        case.a[3 * case.lda] = f32::INFINITY;
        case.a[5 * case.lda + 1] = f32::NEG_INFINITY;
        let b_inf = 4 * n + 30;
        case.b[b_inf] = f32::INFINITY;
        pack(&case.b.clone(), k, n, false, &mut case.packed);
        for clamp in [false, true] {
            let e = case.epilogue(true, false, clamp);
            let mut neon = case.c0.clone();
            case.run(Neon(()), &e, false, 256, 0..m, &mut neon);
            let mut portable = case.c0.clone();
            case.run(Portable, &e, false, 256, 0..m, &mut portable);
            let mut specials = 0;
            for (i, (&x, &y)) in neon.iter().zip(&portable).enumerate() {
                if !x.is_finite() || !y.is_finite() || x == e.min || x == e.max {
                    specials += 1;
                    assert!(
                        x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                        "at {i}: {x} vs {y}"
                    );
                } else {
                    assert!((x - y).abs() <= 1e-4, "at {i}: {x} vs {y}");
                }
            }
            assert!(specials > n, "clamp {clamp}: {specials} special values");
        }
    }
}
