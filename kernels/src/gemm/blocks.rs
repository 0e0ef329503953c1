//! How a product by a packed `B` is cut up, and what a micro-kernel is
//! handed: depth and column blocks of the whole product ([`Product`]), the
//! row and strip tiles of one block ([`Job`], [`At`]), where the tiles
//! write ([`Out`]), and the [`Tile`] trait each instruction set's
//! micro-kernel implements. Kept apart from the micro-kernels so that each
//! of them depends on this vocabulary, and not on one another.
use super::indirect::Gather;
use super::packing::NR;
use super::{Epilogue, KC, NC};
use crate::activation::Activation;

/// Half a Zen 3 L2, in bytes: the largest depth block of `A` for which the
/// strips of `B` go outermost (it stays in L2 while a strip sweeps all the
/// rows), and the size beyond which a weight does not stay in cache
/// ([`outgrows_cache`]).
const STRIP_OUTER_BYTES: usize = 256 << 10;

/// An L1 data cache (32 KB on every AVX2 and AVX-512 core since 2013).
const L1_BYTES: usize = 32 << 10;

/// Rows of `C` a product with an activation stores before it applies it
/// (whole tiles of every height: 4, 6, 7 and 8): at most 336 KB of a
/// column block, in L2 when the activation reads them back.
const ACTIVATED_ROWS: usize = 168;

/// Whether a `k × n` weight is larger than what a core's cache keeps of
/// it between row tiles ([`STRIP_OUTER_BYTES`]).
pub(super) fn outgrows_cache(k: usize, n: usize) -> bool {
    k * n * 4 > STRIP_OUTER_BYTES
}

/// Whether an `m × k` by `k × n` product sweeps each strip of `B` over all
/// the row tiles (a few rows against a large weight) rather than each row
/// tile over all the strips (see [`Product::run`]).
fn strips_outermost(m: usize, n: usize, k: usize) -> bool {
    m * KC.min(k) * 4 <= STRIP_OUTER_BYTES && outgrows_cache(k, n)
}

/// Rows of `B` per depth block of an `m × k` by `k × n` product. When the
/// strips go outermost, each sweeps all of A's block: when that block
/// overflows L1 but half of it fits (33 to 64 rows: a 7×7 image), half-deep
/// blocks keep it there beside the strip. Zen 3, 49 rows against
/// MobileNetV2's 320×1280 and 960×320 weights coming from memory,
/// alternated in one process: 57 → 62 and 53 → 58 GFLOP/s on one thread,
/// 109 → 120 and 83 → 94 on two (within ±5% with the weights in cache).
pub(super) fn depth_block(m: usize, n: usize, k: usize) -> usize {
    let half_fits = m * KC.min(k) * 4 > L1_BYTES && m * (KC / 2) * 4 <= L1_BYTES;
    if strips_outermost(m, n, k) && half_fits {
        KC / 2
    } else {
        KC
    }
}

/// Where a product writes `C`: rows `ldc` floats apart within the `len`
/// floats from `ptr`; and the residual it adds, laid out alike (`res_len`
/// floats from `res`, none when null). A raw view rather than a slice
/// because the products of a column split (one per thread) write disjoint
/// columns of the same rows, so their extents interleave; each hands out
/// only its own columns as slices ([`Out::row`]).
#[derive(Clone, Copy)]
pub(super) struct Out {
    pub(super) ptr: *mut f32,
    pub(super) len: usize,
    pub(super) ldc: usize,
    pub(super) res: *const f32,
    pub(super) res_len: usize,
}

// The accessors here are `#[inline]`: the micro-kernels, in other files
// (other codegen units), call them per tile.
impl Out {
    pub(super) fn new(c: &mut [f32], ldc: usize, residual: Option<&[f32]>) -> Self {
        Out {
            ptr: c.as_mut_ptr(),
            len: c.len(),
            ldc,
            res: residual.map_or(core::ptr::null(), |r| r.as_ptr()),
            res_len: residual.map_or(0, |r| r.len()),
        }
    }

    /// The view from row `i`, column `j`.
    #[inline]
    pub(super) fn at(self, i: usize, j: usize) -> Self {
        let offset = i * self.ldc + j;
        assert!(offset <= self.len, "C offset {offset} of {}", self.len);
        let has_res = !self.res.is_null();
        assert!(
            !has_res || offset <= self.res_len,
            "residual offset {offset} of {}",
            self.res_len
        );
        Out {
            // SAFETY: inside the view (just checked).
            ptr: unsafe { self.ptr.add(offset) },
            len: self.len - offset,
            ldc: self.ldc,
            // SAFETY: inside the residual (just checked).
            res: if has_res {
                // SAFETY: inside the residual (just checked).
                unsafe { self.res.add(offset) }
            } else {
                self.res
            },
            res_len: self.res_len.saturating_sub(offset),
        }
    }

    /// The first `cols` floats of the residual's row `i`, if there is one.
    #[inline]
    pub(super) fn residual_row(&self, i: usize, cols: usize) -> Option<&[f32]> {
        if self.res.is_null() {
            return None;
        }
        let offset = i * self.ldc;
        assert!(
            offset + cols <= self.res_len,
            "residual row {i} ({cols} floats) of {}",
            self.res_len
        );
        // SAFETY: inside the residual (just checked), which `gemm_packed`'s
        // caller lends for the whole product and nothing writes.
        Some(unsafe { core::slice::from_raw_parts(self.res.add(offset), cols) })
    }

    /// The first `cols` floats of row `i`. The caller's product must be
    /// the only writer of those columns (true of every product
    /// [`super::gemm_packed`] runs), and hold no other slice of them.
    #[inline]
    pub(super) fn row(&mut self, i: usize, cols: usize) -> &mut [f32] {
        let offset = i * self.ldc;
        assert!(offset + cols <= self.len, "C row {i} ({cols} floats) of {}", self.len);
        // SAFETY: inside the view (just checked); the columns are this
        // product's alone, and the slice borrows `self` mutably.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.add(offset), cols) }
    }
}

/// The operands of one product, checked by [`super::gemm_packed`].
pub(super) struct Product<'a> {
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) k: usize,
    /// Rows of `B` per depth block ([`depth_block`]).
    pub(super) depth: usize,
    pub(super) a: &'a [f32],
    pub(super) lda: usize,
    /// Rows gathered from runs instead (`a` then empty): see [`Gather`].
    pub(super) gather: Option<Gather<'a>>,
    /// The strips (after the header).
    pub(super) b: &'a [f32],
    /// Add to `C` rather than overwrite it.
    pub(super) accumulate: bool,
    pub(super) epilogue: &'a Epilogue<'a>,
}

/// One block of a product: rows `0..m` of `A` (from `a`, stride `lda`,
/// `kc` deep) by the strips of `B` from `b` (`kc × NR` each, strip `s` at
/// `s·b_stride`) make `nr` columns of `C`: [`NR`] per strip, fewer in the
/// last. A tile kernel sweeps a whole block in one call, its tiles named
/// by row and strip ([`At`]): MobileNet's products are 16 to 32 deep, and
/// a job built and checked per tile cost a quarter of the arithmetic.
pub(super) struct Job<'a> {
    pub(super) kc: usize,
    pub(super) a: &'a [f32],
    pub(super) lda: usize,
    /// Rows gathered from runs instead of `a` (empty then), and the depth
    /// at which this block starts in them. Only [`Job::check_gathered`]
    /// passes such a job: the AVX-512 tiles alone read it.
    pub(super) gather: Option<(Gather<'a>, usize)>,
    pub(super) m: usize,
    pub(super) b: &'a [f32],
    pub(super) b_stride: usize,
    pub(super) nr: usize,
    /// Add to `C` (depth blocks after the first) instead of overwriting.
    pub(super) accumulate: bool,
    /// On the last depth block: the bias of these columns, whether to add
    /// the residual (from the block's `Out`) and the clamp.
    pub(super) bias: Option<&'a [f32]>,
    pub(super) residual: bool,
    pub(super) clamp: Option<(f32, f32)>,
    /// Strips outermost: each strip sweeps all the rows, whose row tiles
    /// share out the prefetching of the next strip (of `after`, the block
    /// the product multiplies next, for the last strip).
    pub(super) strip_outer: bool,
    pub(super) after: &'a [f32],
}

/// One tile of a [`Job`]: rows `ir .. ir + mr` by the `nr` columns of
/// strip `s`, and rows of `B` (whole rows of `NR` floats; may be none) to
/// prefetch as it goes.
#[derive(Clone, Copy)]
pub(super) struct At<'a> {
    pub(super) ir: usize,
    pub(super) s: usize,
    pub(super) mr: usize,
    pub(super) nr: usize,
    /// Read by the x86-64 micro-kernels only.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(super) prefetch: &'a [f32],
}

impl<'a> Job<'a> {
    #[inline]
    pub(super) fn strips(&self) -> usize {
        self.nr.div_ceil(NR)
    }

    /// Strip `s` of the block of `B`.
    #[inline]
    pub(super) fn strip(&self, s: usize) -> &'a [f32] {
        &self.b[s * self.b_stride..][..self.kc * NR]
    }

    /// The `MR` rows of `A` that tile `at` multiplies; rows past its `mr`
    /// repeat its first (their results are not stored).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    #[inline]
    pub(super) fn rows<const MR: usize>(&self, at: At<'_>) -> [*const f32; MR] {
        assert!(self.gather.is_none(), "gathered rows have no stride");
        let a = self.a[at.ir * self.lda..].as_ptr();
        core::array::from_fn(|i| if i < at.mr { a.wrapping_add(i * self.lda) } else { a })
    }

    /// Rows `r0 .. r0 + m` of this job, as a job of their own.
    fn rows_from(&self, r0: usize, m: usize) -> Self {
        assert!(r0 + m <= self.m, "rows {r0}..{} of {}", r0 + m, self.m);
        Job {
            a: if self.gather.is_some() {
                &[]
            } else {
                &self.a[r0 * self.lda..]
            },
            gather: self.gather.map(|(g, pc)| (g.skip_rows(r0), pc)),
            m,
            ..*self
        }
    }

    /// The clamp's bounds (infinite when there is none).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    #[inline]
    pub(super) fn bounds(&self) -> (f32, f32) {
        self.clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY))
    }

    /// Checks the bounds the SIMD tiles read and write within, for every
    /// tile of the job.
    pub(super) fn check(&self, c: Out) {
        assert!(self.gather.is_none(), "a micro-kernel without gathered rows");
        assert!(self.m >= 1 && self.nr >= 1);
        assert!(self.a.len() >= (self.m - 1) * self.lda + self.kc);
        self.check_rest(c);
    }

    /// [`Self::check`] for a job whose rows are gathered: every row's runs
    /// of this depth block exist ([`Gather::new`] checked each run), and
    /// the strips are whole (the tiles that read gathered rows are 32
    /// columns wide).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(super) fn check_gathered(&self, c: Out) {
        let Some((g, pc)) = self.gather else {
            return self.check(c);
        };
        assert!(self.m >= 1 && self.nr >= 1 && self.nr.is_multiple_of(NR));
        assert!(g.rows() >= self.m && pc + self.kc <= g.depth());
        self.check_rest(c);
    }

    /// The bounds of `B`, `C`, the bias and the residual.
    fn check_rest(&self, c: Out) {
        assert!(self.b_stride >= self.kc * NR);
        assert!(self.b.len() >= (self.strips() - 1) * self.b_stride + self.kc * NR);
        assert!(c.len >= (self.m - 1) * c.ldc + self.nr);
        assert!(self.bias.is_none_or(|b| b.len() >= self.nr));
        assert!(!self.residual || (!c.res.is_null() && c.res_len >= (self.m - 1) * c.ldc + self.nr));
    }

    /// Calls `tile` with each tile of `mr` rows, row tile by row tile (a
    /// row tile stays in L1 across the strips) or, for a strip-outer job,
    /// strip by strip. The last row tile has fewer rows; or, `balanced`,
    /// the `⌈m / mr⌉` row tiles differ in height by one at most.
    #[inline(always)]
    pub(super) fn for_each_tile(&self, mr: usize, balanced: bool, mut tile: impl FnMut(At<'a>)) {
        let (m, nr) = (self.m, self.nr);
        let tiles = m.div_ceil(mr);
        // Row tile `t`: its first row and height.
        let row_tile = |t: usize| {
            if balanced {
                let (height, taller) = (m / tiles, m % tiles);
                (t * height + t.min(taller), height + usize::from(t < taller))
            } else {
                (t * mr, mr.min(m - t * mr))
            }
        };
        let at = |t: usize, s: usize, prefetch| {
            let (ir, mr) = row_tile(t);
            At {
                ir,
                s,
                mr,
                nr: NR.min(nr - s * NR),
                prefetch,
            }
        };
        if !self.strip_outer {
            for t in 0..tiles {
                for s in 0..self.strips() {
                    tile(at(t, s, &[]));
                }
            }
            return;
        }
        for s in 0..self.strips() {
            let next = if s + 1 < self.strips() {
                self.strip(s + 1)
            } else {
                self.after
            };
            for t in 0..tiles {
                let rows = next.len() / NR;
                let share = if tiles > 1 {
                    &next[t * rows / tiles * NR..(t + 1) * rows / tiles * NR]
                } else {
                    &[]
                };
                tile(at(t, s, share));
            }
        }
    }

    /// The bias of tile `at`'s columns, on the last depth block.
    #[inline]
    pub(super) fn bias_of(&self, at: At<'_>) -> Option<&'a [f32]> {
        self.bias.map(|b| &b[at.s * NR..][..at.nr])
    }

    /// The epilogue of one output: accumulate, bias `b` (when added),
    /// residual `r` (when added), clamp.
    #[inline(always)]
    pub(super) fn finish(&self, acc: f32, old: f32, b: Option<f32>, r: Option<f32>) -> f32 {
        let mut v = if self.accumulate { acc + old } else { acc };
        if let Some(b) = b {
            v += b;
        }
        if let Some(r) = r.filter(|_| self.residual) {
            v += r;
        }
        if let Some((lo, hi)) = self.clamp {
            v = v.max(lo).min(hi);
        }
        v
    }
}

/// A register-blocked tile kernel: rows by up to [`NR`] columns.
pub(super) trait Tile: Copy {
    /// Columns of `B` per block (a multiple of [`NR`], at most [`NC`]).
    const COLUMNS: usize = NC;

    /// Runs every tile of `job`, whose block of `C` is `c`.
    fn run(self, job: &Job<'_>, c: Out);
}

impl Product<'_> {
    pub(super) fn run<T: Tile>(&self, tile: T, c: Out) {
        let (m, n, k) = (self.m, self.n, self.k);
        // A few rows (a 7×7 or 14×14 image) against a large weight: each
        // strip of B, read from memory once, serves every row tile in turn
        // while the tiles prefetch the next strip, so the weight streams
        // in during the arithmetic instead of stalling the first row tile.
        // Many rows keep the row tile outermost (it stays in L1 across the
        // strips).
        let strip_outer = strips_outermost(m, n, k);
        let depth = self.depth;
        let activation = self.epilogue.activation;
        for jc in (0..n).step_by(T::COLUMNS) {
            for pc in (0..k).step_by(depth) {
                let job = self.job(jc, pc, depth, T::COLUMNS, strip_outer);
                if pc + job.kc < k || activation == Activation::Identity {
                    tile.run(&job, c.at(0, jc));
                    continue;
                }
                // The last depth block in bands of rows, each activated
                // while it is still in cache (a strip-outer job's few
                // rows are one band).
                let band_rows = if strip_outer { m } else { ACTIVATED_ROWS };
                for r0 in (0..m).step_by(band_rows) {
                    let band = job.rows_from(r0, band_rows.min(m - r0));
                    let mut out = c.at(r0, jc);
                    tile.run(&band, out);
                    if out.ldc == band.nr {
                        // Rows one after another: one pass over them all.
                        activation.apply(out.row(0, band.m * band.nr));
                    } else {
                        for i in 0..band.m {
                            activation.apply(out.row(i, band.nr));
                        }
                    }
                }
            }
        }
    }

    /// The block of columns from `jc` (up to `columns`) over the depth
    /// block from `pc` (up to `depth`, at most [`KC`]).
    pub(super) fn job(&self, jc: usize, pc: usize, depth: usize, columns: usize, strip_outer: bool) -> Job<'_> {
        let (m, n, k) = (self.m, self.n, self.k);
        let (kc, nc) = (depth.min(k - pc), columns.min(n - jc));
        let last = pc + kc == k;
        let e = self.epilogue;
        let clamps = e.min > f32::NEG_INFINITY || e.max < f32::INFINITY;
        Job {
            kc,
            a: if self.gather.is_some() { &[] } else { &self.a[pc..] },
            lda: self.lda,
            gather: self.gather.map(|g| (g, pc)),
            m,
            b: self.block(jc, pc),
            b_stride: k * NR,
            nr: nc,
            accumulate: pc > 0 || self.accumulate,
            bias: e.bias.filter(|_| last).map(|b| &b[jc..jc + nc]),
            residual: last && e.residual.is_some(),
            clamp: (last && clamps).then_some((e.min, e.max)),
            strip_outer,
            // The block after this one: the next depth block, else the
            // next column block.
            after: if !strip_outer {
                &[]
            } else if pc + depth < k {
                &self.block(jc, pc + depth)[..depth.min(k - pc - depth) * NR]
            } else if jc + columns < n {
                &self.block(jc + columns, 0)[..depth.min(k) * NR]
            } else {
                &[]
            },
        }
    }

    /// The strips of `B` from column `jc`, from depth `pc`.
    fn block(&self, jc: usize, pc: usize) -> &[f32] {
        &self.b[(jc / NR) * self.k * NR + pc * NR..]
    }
}
