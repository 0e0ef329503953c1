//! `f32` matrix products with a prepacked right operand, the left one read
//! in place, and a fused epilogue: the engine of XNNPACK's fully-connected
//! and convolution nodes.
//!
//! Unlike [`crate::gemm`] (which packs `A` too, and serves any layout),
//! this reads `A` rows where they are, with any row stride, and writes `C`
//! rows with any stride: a 1×1 convolution multiplies the NHWC pixels in
//! place and a grouped one writes its group's columns of the output
//! directly; 7-row tiles cover the 49 pixels of a 7×7 image exactly. On
//! MobileNet's convolutions this runs about twice as fast.
//!
//! `C = clamp(A · B + bias)`. `B` (`k × n`, usually a weight matrix) is
//! packed by [`pack`] into strips of [`NR`] columns, each holding all `k`
//! rows (strip `s`, row `q`, column `j` at `HEADER + s·k·NR + q·NR + j`,
//! zero past `n`, but see [`repeat_tail`]). The packing starts with a
//! header naming its shape, so a buffer packed on a model's first run is
//! recognised ([`is_packed`]) and
//! reused by later runs: weights are rearranged once, as XNNPACK does when
//! it creates its runtime. `A` is read in place, row-major with any row
//! stride, so a 1×1 convolution runs straight on NHWC pixels; `C` may have
//! a row stride too (one group's columns of a grouped convolution).
//!
//! The products are cache-blocked (`KC` rows of `B` by `NC` columns) around
//! register-blocked micro-kernels that add the bias and clamp as they
//! store: AVX-512 8×32, AVX2+FMA 6×16, portable 4×32; the SIMD ones are
//! chosen at run time (with the `std` feature) or at compile time.
use crate::gemm::Epilogue;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
extern crate std;

/// Columns per packed strip.
pub const NR: usize = 32;
/// Floats before the strips: the header.
const HEADER: usize = 16;
/// Rows of `B` per depth block (an `8 × KC` tile of `A` stays in L1).
pub(crate) const KC: usize = 256;
/// Columns per block (a `KC × NC` block of packed `B` stays in L2): the
/// block [`crate::gemm`] packs at a time, and the one the tile kernels
/// multiply at a time unless theirs is narrower ([`Tile::COLUMNS`]).
pub(crate) const NC: usize = 512;
/// Half a Zen 3 L2, in bytes: the largest depth block of `A` for which the
/// strips of `B` go outermost (it stays in L2 while a strip sweeps all the
/// rows), and the size beyond which a weight does not stay in cache
/// ([`outgrows_cache`]).
const STRIP_OUTER_BYTES: usize = 256 << 10;
/// An L1 data cache (32 KB on every AVX2 and AVX-512 core since 2013).
const L1_BYTES: usize = 32 << 10;
/// First header word of a packing ("PKP2": strips of 17 to 24 columns
/// repeat their last 8, see [`repeat_tail`]).
const MAGIC: u32 = 0x3250_4b50;

/// Length, in `f32`, of a `k × n` matrix packed by [`pack`].
pub fn packed_len(k: usize, n: usize) -> usize {
    HEADER + k * n.div_ceil(NR) * NR
}

/// The header of a `k × n` packing.
fn header(k: usize, n: usize) -> [u32; 5] {
    [
        MAGIC,
        k as u32,
        ((k as u64) >> 32) as u32,
        n as u32,
        ((n as u64) >> 32) as u32,
    ]
}

/// The strips of a packing (what follows its header).
pub(crate) fn strips(packed: &[f32]) -> &[f32] {
    &packed[HEADER.min(packed.len())..]
}

/// Whether `packed` holds a `k × n` packing made by [`pack`].
pub fn is_packed(packed: &[f32], k: usize, n: usize) -> bool {
    packed.len() >= packed_len(k, n) && stamped(packed, &header(k, n))
}

/// Whether `head` starts with the bits of `words`: the stamp that says a
/// buffer kept from run to run already holds what a kernel prepares in it.
pub(crate) fn stamped(head: &[f32], words: &[u32]) -> bool {
    head.len() >= words.len() && words.iter().zip(head).all(|(&w, v)| v.to_bits() == w)
}

/// Writes the stamp `words` into `head` (its other floats zero): last, once
/// what it vouches for is whole.
pub(crate) fn stamp(head: &mut [f32], words: &[u32]) {
    head.fill(0.0);
    for (v, &w) in head.iter_mut().zip(words) {
        *v = f32::from_bits(w);
    }
}

/// Packs `b` — `k × n` row-major, or `n × k` row-major when `b_trans` (a
/// PyTorch or XNNPACK weight) — into `packed` (at least
/// [`packed_len`]`(k, n)` floats).
pub fn pack(b: &[f32], k: usize, n: usize, b_trans: bool, packed: &mut [f32]) {
    let packed = &mut packed[..packed_len(k, n)];
    let b = &b[..k * n];
    let (head, body) = packed.split_at_mut(HEADER);
    if k > 0 {
        pack_block(b, b_trans, (k, n), 1.0, (0, n), (0, k), body);
    }
    stamp(head, &header(k, n));
}

/// Packs `alpha ·` columns `jc..jc+nc`, depth `pc..pc+kc` of `B` (`b`:
/// `k × n` row-major, or `n × k` when `b_trans`) into [`NR`]-column
/// strips: strip `s` holds `alpha · B(pc + q, jc + s·NR + j)`
/// at `s·kc·NR + q·NR + j`, zero past `nc` (but see [`repeat_tail`]).
pub(crate) fn pack_block(
    b: &[f32],
    b_trans: bool,
    (k, n): (usize, usize),
    alpha: f32,
    (jc, nc): (usize, usize),
    (pc, kc): (usize, usize),
    out: &mut [f32],
) {
    for (s, strip) in out[..nc.div_ceil(NR) * kc * NR].chunks_exact_mut(kc * NR).enumerate() {
        let j0 = jc + s * NR;
        let cols = NR.min(jc + nc - j0);
        if !b_trans {
            for (q, d) in strip.chunks_exact_mut(NR).enumerate() {
                let src = &b[(pc + q) * n + j0..][..cols];
                for (x, &v) in d.iter_mut().zip(src) {
                    *x = alpha * v;
                }
                d[cols..].fill(0.0);
            }
            repeat_tail(strip, cols);
            continue;
        }
        // Stored transposed: column j of the strip is row j0 + j of `b`.
        // Eight of those rows at a time, eight deep, go through a
        // fixed-size tile: contiguous reads, contiguous writes.
        const T: usize = 8;
        if cols < NR {
            strip.fill(0.0);
        }
        for jj0 in (0..cols).step_by(T) {
            let rows = T.min(cols - jj0);
            let src: [&[f32]; T] = core::array::from_fn(|r| {
                let row = j0 + jj0 + r.min(rows - 1);
                &b[row * k + pc..][..kc]
            });
            let mut q0 = 0;
            while q0 + T <= kc {
                let tile: [[f32; T]; T] = core::array::from_fn(|r| src[r][q0..q0 + T].try_into().expect("8 floats"));
                for t in 0..T {
                    let d: &mut [f32; T] = (&mut strip[(q0 + t) * NR + jj0..][..T]).try_into().expect("8 floats");
                    for (r, x) in d.iter_mut().enumerate().take(rows) {
                        *x = alpha * tile[r][t];
                    }
                }
                q0 += T;
            }
            for q in q0..kc {
                for r in 0..rows {
                    strip[q * NR + jj0 + r] = alpha * src[r][q];
                }
            }
        }
        repeat_tail(strip, cols);
    }
}

/// The columns 16.. of a strip holding 17 to 24 (a product 24 columns
/// wide, MobileNetV2's projections) are copied into lanes 24..32 of each
/// row: one vector of the strip then serves two rows of `A` at once (see
/// [`tile_avx512_pairs`]) instead of wasting half its lanes. The other
/// tiles never store columns past the strip's, so the copy is harmless to
/// them.
fn repeat_tail(strip: &mut [f32], cols: usize) {
    if (17..=24).contains(&cols) {
        for row in strip.chunks_exact_mut(NR) {
            row.copy_within(16..24, 24);
        }
    }
}

/// Packs the `k × n` matrix whose row `q`, column `j` is `b(q, j)` into
/// `packed` (at least [`packed_len`]`(k, n)` floats): for operands kept in
/// another layout, or rescaled as they are packed.
pub fn pack_with(k: usize, n: usize, packed: &mut [f32], b: impl Fn(usize, usize) -> f32) {
    let packed = &mut packed[..packed_len(k, n)];
    let (head, body) = packed.split_at_mut(HEADER);
    if k > 0 {
        for (s, strip) in body.chunks_exact_mut(k * NR).enumerate() {
            for (q, row) in strip.chunks_exact_mut(NR).enumerate() {
                for (jj, v) in row.iter_mut().enumerate() {
                    let j = s * NR + jj;
                    *v = if j < n { b(q, j) } else { 0.0 };
                }
            }
            repeat_tail(strip, NR.min(n - s * NR));
        }
    }
    stamp(head, &header(k, n));
}

/// `packed`, holding `b` packed: packed now unless an earlier call already
/// did. `packed` must belong to `b` alone.
pub fn ensure_packed<'p>(b: &[f32], k: usize, n: usize, b_trans: bool, packed: &'p mut [f32]) -> &'p [f32] {
    if !is_packed(packed, k, n) {
        pack(b, k, n, b_trans, packed);
    }
    packed
}

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
    multiply(m, n, k, a, lda, strips(packed), false, epilogue, c, ldc);
}

/// One depth block of a product whose `B` is packed as it goes (see
/// [`crate::gemm::sgemm`]): `C (+)= A · B`, then the epilogue, for `A`
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
    multiply(m, n, kc, a, lda, strips, accumulate, epilogue, c, ldc);
}

/// The product behind [`gemm_packed`] and [`gemm_block`]: `B`'s strips
/// hold `k` rows each.
#[allow(clippy::too_many_arguments)]
fn multiply(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
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
    assert!(a.len() >= (m - 1) * lda + k, "A of {} floats", a.len());
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
        }
        return;
    }
    // Of the whole product, not of a thread's part: every thread count
    // then sums in the same order.
    let depth = depth_block(m, n, k);
    let product = |n: usize, b: &'_ [f32], epilogue: &'_ Epilogue<'_>, rows: core::ops::Range<usize>, c: Out| {
        Product {
            m: rows.len(),
            n,
            k,
            depth,
            a: &a[rows.start * lda..],
            lda,
            b,
            accumulate,
            epilogue,
        }
        .dispatch(c)
    };
    let grain = tile_rows(m);
    // With threads, a few rows against a large weight split the tiles
    // (whole strips by whole row tiles) strip by strip, so each part reads
    // its own share of B (see `splits_by_strips`); any other product takes
    // bands of rows and its band of C. Products too small to pay for the
    // hand-off stay whole.
    let worth_splitting = m * n * k >= 1 << 18;
    if worth_splitting && splits_by_strips(m, n, k) && crate::parallel::threads() > 1 {
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
    n > m && n > NR && outgrows_cache(k, n)
}

/// Whether a `k × n` weight is larger than what a core's cache keeps of
/// it between row tiles ([`STRIP_OUTER_BYTES`]).
fn outgrows_cache(k: usize, n: usize) -> bool {
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
fn depth_block(m: usize, n: usize, k: usize) -> usize {
    let half_fits = m * KC.min(k) * 4 > L1_BYTES && m * (KC / 2) * 4 <= L1_BYTES;
    if strips_outermost(m, n, k) && half_fits {
        KC / 2
    } else {
        KC
    }
}

/// Rows per tile of the tile kernel this CPU runs, for `m` rows: bands of
/// rows split across threads are whole tiles.
fn tile_rows(m: usize) -> usize {
    // Only the x86-64 tiles depend on it.
    let _ = m;
    match crate::cpu::Isa::detect() {
        #[cfg(target_arch = "x86_64")]
        crate::cpu::Isa::Avx512 if !m.is_multiple_of(8) && m.is_multiple_of(7) => 7,
        #[cfg(target_arch = "x86_64")]
        crate::cpu::Isa::Avx512 => 8,
        #[cfg(target_arch = "x86_64")]
        crate::cpu::Isa::Avx2Fma => 6,
        crate::cpu::Isa::Portable => 4,
    }
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

/// Where a product writes `C`: rows `ldc` floats apart within the `len`
/// floats from `ptr`; and the residual it adds, laid out alike (`res_len`
/// floats from `res`, none when null). A raw view rather than a slice
/// because the products of a column split (one per thread) write disjoint
/// columns of the same rows, so their extents interleave; each hands out
/// only its own columns as slices ([`Out::row`]).
#[derive(Clone, Copy)]
struct Out {
    ptr: *mut f32,
    len: usize,
    ldc: usize,
    res: *const f32,
    res_len: usize,
}

impl Out {
    fn new(c: &mut [f32], ldc: usize, residual: Option<&[f32]>) -> Self {
        Out {
            ptr: c.as_mut_ptr(),
            len: c.len(),
            ldc,
            res: residual.map_or(core::ptr::null(), |r| r.as_ptr()),
            res_len: residual.map_or(0, |r| r.len()),
        }
    }

    /// The view from row `i`, column `j`.
    fn at(self, i: usize, j: usize) -> Self {
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
                unsafe { self.res.add(offset) }
            } else {
                self.res
            },
            res_len: self.res_len.saturating_sub(offset),
        }
    }

    /// The first `cols` floats of the residual's row `i`, if there is one.
    fn residual_row(&self, i: usize, cols: usize) -> Option<&[f32]> {
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
    /// [`gemm_packed`] runs), and hold no other slice of them.
    fn row(&mut self, i: usize, cols: usize) -> &mut [f32] {
        let offset = i * self.ldc;
        assert!(offset + cols <= self.len, "C row {i} ({cols} floats) of {}", self.len);
        // SAFETY: inside the view (just checked); the columns are this
        // product's alone, and the slice borrows `self` mutably.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.add(offset), cols) }
    }
}

/// The operands of one product, checked by [`gemm_packed`].
struct Product<'a> {
    m: usize,
    n: usize,
    k: usize,
    /// Rows of `B` per depth block ([`depth_block`]).
    depth: usize,
    a: &'a [f32],
    lda: usize,
    /// The strips (after the header).
    b: &'a [f32],
    /// Add to `C` rather than overwrite it.
    accumulate: bool,
    epilogue: &'a Epilogue<'a>,
}

/// One block of a product: rows `0..m` of `A` (from `a`, stride `lda`,
/// `kc` deep) by the strips of `B` from `b` (`kc × NR` each, strip `s` at
/// `s·b_stride`) make `nr` columns of `C`: [`NR`] per strip, fewer in the
/// last. A tile kernel sweeps a whole block in one call, its tiles named
/// by row and strip ([`At`]): MobileNet's products are 16 to 32 deep, and
/// a job built and checked per tile cost a quarter of the arithmetic.
struct Job<'a> {
    kc: usize,
    a: &'a [f32],
    lda: usize,
    m: usize,
    b: &'a [f32],
    b_stride: usize,
    nr: usize,
    /// Add to `C` (depth blocks after the first) instead of overwriting.
    accumulate: bool,
    /// On the last depth block: the bias of these columns, whether to add
    /// the residual (from the block's `Out`) and the clamp.
    bias: Option<&'a [f32]>,
    residual: bool,
    clamp: Option<(f32, f32)>,
    /// Strips outermost: each strip sweeps all the rows, whose row tiles
    /// share out the prefetching of the next strip (of `after`, the block
    /// the product multiplies next, for the last strip).
    strip_outer: bool,
    after: &'a [f32],
}

/// One tile of a [`Job`]: rows `ir .. ir + mr` by the `nr` columns of
/// strip `s`, and rows of `B` (whole rows of `NR` floats; may be none) to
/// prefetch as it goes.
#[derive(Clone, Copy)]
struct At<'a> {
    ir: usize,
    s: usize,
    mr: usize,
    nr: usize,
    /// Read by the x86-64 micro-kernels only.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    prefetch: &'a [f32],
}

impl<'a> Job<'a> {
    fn strips(&self) -> usize {
        self.nr.div_ceil(NR)
    }

    /// Strip `s` of the block of `B`.
    fn strip(&self, s: usize) -> &'a [f32] {
        &self.b[s * self.b_stride..][..self.kc * NR]
    }

    /// The `MR` rows of `A` that tile `at` multiplies; rows past its `mr`
    /// repeat its first (their results are not stored).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn rows<const MR: usize>(&self, at: At<'_>) -> [*const f32; MR] {
        let a = self.a[at.ir * self.lda..].as_ptr();
        core::array::from_fn(|i| if i < at.mr { a.wrapping_add(i * self.lda) } else { a })
    }

    /// The clamp's bounds (infinite when there is none).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn bounds(&self) -> (f32, f32) {
        self.clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY))
    }

    /// Checks the bounds the SIMD tiles read and write within, for every
    /// tile of the job.
    fn check(&self, c: Out) {
        assert!(self.m >= 1 && self.nr >= 1);
        assert!(self.a.len() >= (self.m - 1) * self.lda + self.kc);
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
    fn for_each_tile(&self, mr: usize, balanced: bool, mut tile: impl FnMut(At<'a>)) {
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
    fn bias_of(&self, at: At<'_>) -> Option<&'a [f32]> {
        self.bias.map(|b| &b[at.s * NR..][..at.nr])
    }

    /// The epilogue of one output: accumulate, bias `b` (when added),
    /// residual `r` (when added), clamp.
    #[inline(always)]
    fn finish(&self, acc: f32, old: f32, b: Option<f32>, r: Option<f32>) -> f32 {
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
trait Tile: Copy {
    /// Columns of `B` per block (a multiple of [`NR`], at most [`NC`]).
    const COLUMNS: usize = NC;

    /// Runs every tile of `job`, whose block of `C` is `c`.
    fn run(self, job: &Job<'_>, c: Out);
}

impl Product<'_> {
    /// Runs the product with the best tile this CPU has.
    fn dispatch(&self, c: Out) {
        #[cfg(target_arch = "x86_64")]
        {
            if self.m == 1 && crate::linear::has_avx2_fma() {
                return self.one_row_avx2(c);
            }
            if let Some(t) = Avx512::detect() {
                return self.run(t.for_rows(self.m), c);
            }
            if crate::linear::has_avx2_fma() {
                return self.run(Avx2(()), c);
            }
        }
        self.run(Portable, c)
    }

    /// A product of one row (a batch of one through a fully-connected
    /// layer): strip by strip, each in eight chains of FMAs over its whole
    /// depth ([`strip_dot_avx2`]), then the epilogue. The tiles would give
    /// one row two chains a strip half, bound by the FMA latency, and a
    /// trip through `C` per depth block. Zen 3, 1 × 1000 × 1280 from
    /// cache: 18.9 → 30.6 GFLOP/s; inside the XNNPACK-lowered MobileNetV2
    /// (its classifier, the old and new runners alternated, six rounds):
    /// 544 → 413 µs on one thread, 296 → 225 µs on two. Each column sums
    /// in the same order whatever the thread count: threads take whole
    /// strips.
    #[cfg(target_arch = "x86_64")]
    fn one_row_avx2(&self, mut c: Out) {
        let (n, k) = (self.n, self.k);
        // One job over every column and the whole depth: its epilogue is
        // the product's (`Job::finish`).
        let job = self.job(0, 0, k, n, false);
        let strips = n.div_ceil(NR);
        let (a, b) = (&self.a[..k], &self.b[..strips * k * NR]);
        let view = c;
        let residual = view.residual_row(0, n);
        let row = c.row(0, n);
        for s in 0..strips {
            let strip = &b[s * k * NR..(s + 1) * k * NR];
            // SAFETY: `has_avx2_fma` (by the caller); the strip holds `k`
            // rows of NR floats, as `strip_dot_avx2` asserts.
            let sums = unsafe { strip_dot_avx2(a, strip) };
            let j0 = s * NR;
            for (j, &sum) in sums.iter().enumerate().take(NR.min(n - j0)) {
                let at = j0 + j;
                row[at] = job.finish(sum, row[at], job.bias.map(|b| b[at]), residual.map(|r| r[at]));
            }
        }
    }

    fn run<T: Tile>(&self, tile: T, c: Out) {
        let (m, n, k) = (self.m, self.n, self.k);
        // A few rows (a 7×7 or 14×14 image) against a large weight: each
        // strip of B, read from memory once, serves every row tile in turn
        // while the tiles prefetch the next strip, so the weight streams
        // in during the arithmetic instead of stalling the first row tile.
        // Many rows keep the row tile outermost (it stays in L1 across the
        // strips).
        let strip_outer = strips_outermost(m, n, k);
        let depth = self.depth;
        for jc in (0..n).step_by(T::COLUMNS) {
            for pc in (0..k).step_by(depth) {
                tile.run(&self.job(jc, pc, depth, T::COLUMNS, strip_outer), c.at(0, jc));
            }
        }
    }

    /// The block of columns from `jc` (up to `columns`) over the depth
    /// block from `pc` (up to `depth`, at most [`KC`]).
    fn job(&self, jc: usize, pc: usize, depth: usize, columns: usize, strip_outer: bool) -> Job<'_> {
        let (m, n, k) = (self.m, self.n, self.k);
        let (kc, nc) = (depth.min(k - pc), columns.min(n - jc));
        let last = pc + kc == k;
        let e = self.epilogue;
        let clamps = e.min > f32::NEG_INFINITY || e.max < f32::INFINITY;
        Job {
            kc,
            a: &self.a[pc..],
            lda: self.lda,
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

/// Portable 4×32 tile (the compiler vectorizes the column loop).
#[derive(Clone, Copy)]
struct Portable;

impl Tile for Portable {
    fn run(self, job: &Job<'_>, c: Out) {
        job.check(c);
        job.for_each_tile(4, false, |at| Self::tile(job, at, c.at(at.ir, at.s * NR)));
    }
}

impl Portable {
    fn tile(job: &Job<'_>, at: At<'_>, mut c: Out) {
        let mut acc = [[0.0f32; NR]; 4];
        let a = &job.a[at.ir * job.lda..];
        for (q, brow) in job.strip(at.s).chunks_exact(NR).enumerate() {
            for (i, acc_row) in acc.iter_mut().enumerate().take(at.mr) {
                let x = a[i * job.lda + q];
                for (s, &bv) in acc_row.iter_mut().zip(brow) {
                    *s += x * bv;
                }
            }
        }
        let view = c;
        let bias = job.bias_of(at);
        for (i, acc_row) in acc.iter().enumerate().take(at.mr) {
            let res = view.residual_row(i, at.nr);
            let row = c.row(i, at.nr);
            for (j, (o, &s)) in row.iter_mut().zip(acc_row).enumerate() {
                *o = job.finish(s, *o, bias.map(|b| b[j]), res.map(|r| r[j]));
            }
        }
    }
}

/// The AVX2+FMA tile: up to 6 rows by 16 columns (12 accumulators, two
/// vectors of `B` and a broadcast of `A` fill the 16 registers), run on
/// each half of a strip. A value exists only when the CPU has both
/// features.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx2(());

#[cfg(target_arch = "x86_64")]
impl Tile for Avx2 {
    /// A 256 KB block, half of an AVX2 CPU's usual L2 (Zen 2/3's 512 KB):
    /// a 512 KB one (the `NC` default, for AVX-512 CPUs' 1 MB and more)
    /// is evicted by the rows of `A` and `C` that pass through beside it.
    /// On Zen 3, 512³ and 1024³ products ran 8–10% faster with 256.
    const COLUMNS: usize = 256;

    fn run(self, job: &Job<'_>, c: Out) {
        job.check(c);
        // SAFETY: `Avx2` exists only when AVX2 and FMA were detected;
        // `check` bounds every access of every tile.
        unsafe { tiles_avx2(job, c) }
    }
}

/// What the AVX2 tiles of a job do with their sums, decided once per job.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Finish {
    /// Add to `C` (a depth block after the first).
    accumulate: bool,
    /// The job adds the bias: sums start from it when the job writes `C`
    /// afresh (a product of one depth block), else it is added last.
    bias: bool,
    residual: bool,
    clamp: bool,
    lo: f32,
    hi: f32,
}

/// Where one tile of a job reads and writes, from its first row and
/// column: row 0 of its `A` (depth 0), its strip's row 0 of `B`, and `C`,
/// the residual and the bias (null when the job adds none).
#[cfg(target_arch = "x86_64")]
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

#[cfg(target_arch = "x86_64")]
impl TilePtrs {
    /// The same tile from `rows` rows further down.
    fn down(self, rows: usize) -> Self {
        TilePtrs {
            a: self.a.wrapping_add(rows * self.lda),
            c: self.c.wrapping_add(rows * self.ldc),
            res: offset_unless_null(self.res, rows * self.ldc),
            ..self
        }
    }

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
#[cfg(target_arch = "x86_64")]
fn offset_unless_null(ptr: *const f32, by: usize) -> *const f32 {
    if ptr.is_null() {
        ptr
    } else {
        ptr.wrapping_add(by)
    }
}

/// Every tile of `job` (block of `C`: `c`). Row tiles are balanced (8 rows
/// go as 4 + 4, not 6 + 2): a tile of one or two rows has too few
/// independent sums to keep both FMA units busy, and each tile computes
/// exactly its rows. The tiles take raw pointers, worked out here once
/// per tile: at MobileNet's depths (16 to 32) a tile's setup through the
/// job's slices cost as many instructions as its arithmetic.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `job` must pass [`Job::check`]
/// for `c`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tiles_avx2(job: &Job<'_>, c: Out) {
    let (lo, hi) = job.bounds();
    let finish = Finish {
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
    // Rows of `A` a multiple of 4 KB apart fall in the same L1 sets, where
    // the tile's six rows and the strip of `B` evict each other: such rows
    // are copied together, once per row tile, when the tile then sweeps
    // several strips (1024³, alternated in one process: 51 → 54 GFLOP/s
    // median on a loaded host).
    let copy_rows = !job.strip_outer && job.lda > kc && job.lda.is_multiple_of(1024) && job.strips() > 1;
    let mut panel = core::mem::MaybeUninit::<[f32; 6 * KC]>::uninit();
    let panel = panel.as_mut_ptr() as *mut f32;
    job.for_each_tile(6, true, |at| {
        let (row, col) = (at.ir * c.ldc, at.s * NR);
        let (a, lda) = if copy_rows {
            if at.s == 0 {
                for i in 0..at.mr {
                    // SAFETY: row `at.ir + i` of the job's `A` holds `kc`
                    // floats (`check`); the panel holds 6 rows of `KC`.
                    unsafe { core::ptr::copy_nonoverlapping(a.add((at.ir + i) * job.lda), panel.add(i * kc), kc) };
                }
            }
            (panel as *const f32, kc)
        } else {
            (a.wrapping_add(at.ir * job.lda), job.lda)
        };
        let p = TilePtrs {
            a,
            lda,
            b: b.wrapping_add(at.s * job.b_stride),
            c: c.ptr.wrapping_add(row + col),
            ldc: c.ldc,
            res: if res.is_null() {
                res
            } else {
                res.wrapping_add(row + col)
            },
            bias: if bias.is_null() { bias } else { bias.wrapping_add(col) },
        };
        // SAFETY: by the caller (`check` bounds the `at.mr` rows and
        // `at.nr` columns of every tile, in `A`, `B`, `C`, the residual
        // and the bias); each call gets the tile height it was compiled
        // for.
        unsafe {
            match at.mr {
                6 => strip_avx2::<6>(kc, &finish, p, at.nr, at.prefetch),
                5 => strip_avx2::<5>(kc, &finish, p, at.nr, at.prefetch),
                4 => strip_avx2::<4>(kc, &finish, p, at.nr, at.prefetch),
                3 => strip_avx2::<3>(kc, &finish, p, at.nr, at.prefetch),
                2 => strip_avx2::<2>(kc, &finish, p, at.nr, at.prefetch),
                _ => strip_avx2::<1>(kc, &finish, p, at.nr, at.prefetch),
            }
        }
    });
}

/// A tile of exactly `MR` rows across the `nr` columns of its strip: 16
/// columns at a time, 8 for a last 8 or fewer; a strip 17 to 24 wide
/// three vectors at once, three rows at a time.
///
/// # Safety
/// AVX2 and FMA; `p` is a tile of a job that passed [`Job::check`], `kc`
/// deep, `MR` rows by `nr` (1 ..= [`NR`]) columns; `prefetch` holds
/// whole rows of `NR` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn strip_avx2<const MR: usize>(kc: usize, f: &Finish, p: TilePtrs, nr: usize, prefetch: &[f32]) {
    // SAFETY: by the caller; the first half alone prefetches the tile's
    // share of the next strip.
    unsafe {
        if nr <= 8 {
            return tile_avx2::<MR, 1>(kc, f, p, nr, prefetch);
        }
        if (17..=24).contains(&nr) && matches!(MR, 3 | 5 | 6) {
            // Three vectors across, three rows at a time: an 8-column tile
            // after a 16-column one is bound by its loads (a vector of `B`
            // and six broadcasts for six FMAs; 3136 × 24 × 96: 77 → 81
            // GFLOP/s). Four rows of three vectors would need every
            // register for the sums and `B` and spill (44 GFLOP/s).
            tile_avx2::<3, 3>(kc, f, p, nr, prefetch);
            match MR {
                6 => tile_avx2::<3, 3>(kc, f, p.down(3), nr, &[]),
                5 => tile_avx2::<2, 3>(kc, f, p.down(3), nr, &[]),
                _ => {}
            }
            return;
        }
        tile_avx2::<MR, 2>(kc, f, p, nr.min(16), prefetch);
        match nr {
            25.. => tile_avx2::<MR, 2>(kc, f, p.right(16), nr - 16, &[]),
            17..=24 => tile_avx2::<MR, 1>(kc, f, p.right(16), nr - 16, &[]),
            _ => {}
        }
    }
}

/// The first `cols` (1 ..= 8·NV) columns of an `MR`-row tile at `p`.
///
/// # Safety
/// As for [`strip_avx2`], with `cols` columns of the tile left from `p`,
/// and `p.b` the strip's row 0 at `p`'s column (`NR` floats a row).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile_avx2<const MR: usize, const NV: usize>(
    kc: usize,
    f: &Finish,
    p: TilePtrs,
    cols: usize,
    prefetch: &[f32],
) {
    use core::arch::x86_64::*;
    let whole = cols == 8 * NV;
    let rows: [*const f32; MR] = core::array::from_fn(|i| p.a.wrapping_add(i * p.lda));
    // A product of one depth block starts from its bias.
    let start = if f.bias && !f.accumulate && whole {
        // SAFETY: the tile's `cols` = 8·NV floats of the bias.
        core::array::from_fn(|v| unsafe { _mm256_loadu_ps(p.bias.add(v * 8)) })
    } else {
        [_mm256_setzero_ps(); NV]
    };
    let mut acc = [start; MR];
    if f.accumulate {
        prefetch_tile(p.c, p.ldc, MR, 8 * NV);
    }
    // SAFETY: for q < kc, rows[i] + q is a float of the tile's rows of
    // `A` and b + q·NR + 8·NV is within the strip's row q (the tile's
    // column plus 8·NV is at most NR); row q of `prefetch` is inside it
    // (q < len / NR), and a prefetch reads nothing the program sees.
    unsafe {
        // One row of `B` into the sums (a macro, not a closure: a closure
        // borrowing the sums kept them in memory).
        macro_rules! step {
            ($q:expr) => {{
                let q = $q;
                let bv: [__m256; NV] = core::array::from_fn(|v| _mm256_loadu_ps(p.b.add(q * NR + v * 8)));
                for i in 0..MR {
                    let x = _mm256_broadcast_ss(&*rows[i].add(q));
                    for v in 0..NV {
                        acc[i][v] = _mm256_fmadd_ps(x, bv[v], acc[i][v]);
                    }
                }
            }};
        }
        // The first rows also fetch their row (two lines) of `prefetch`.
        let fetch = (prefetch.len() / NR).min(kc);
        for q in 0..fetch {
            let next = prefetch.as_ptr().add(q * NR);
            _mm_prefetch::<_MM_HINT_T0>(next as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(next.add(16) as *const i8);
            step!(q);
        }
        // Four rows of `B` a pass: the loop's own instructions would
        // otherwise be a fifth of a 6 × 16 tile's (MobileNetV2 on one
        // thread: 8225 → 8047 µs, 16-deep products 68 → 71 GFLOP/s).
        let mut q = fetch;
        while q + 4 <= kc {
            step!(q);
            step!(q + 1);
            step!(q + 2);
            step!(q + 3);
            q += 4;
        }
        for q in q..kc {
            step!(q);
        }
    }
    if !whole {
        // SAFETY: as for this function.
        return unsafe { finish_partial_avx2(f, p, cols, acc) };
    }
    let (lo, hi) = (_mm256_set1_ps(f.lo), _mm256_set1_ps(f.hi));
    let plain = !f.accumulate && !f.residual;
    for (i, acc_row) in acc.iter().enumerate() {
        for (v, &s) in acc_row.iter().enumerate() {
            let at = i * p.ldc + v * 8;
            let mut r = s;
            // SAFETY: the tile's 8·NV = cols floats of row i < MR of `C`,
            // of the residual when it is added, and of the bias.
            unsafe {
                // The usual case skips these: the bias is in the sums.
                if !plain {
                    if f.accumulate {
                        r = _mm256_add_ps(r, _mm256_loadu_ps(p.c.add(at)));
                        if f.bias {
                            r = _mm256_add_ps(r, _mm256_loadu_ps(p.bias.add(v * 8)));
                        }
                    }
                    if f.residual {
                        r = _mm256_add_ps(r, _mm256_loadu_ps(p.res.add(at)));
                    }
                }
                if f.clamp {
                    r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
                }
                _mm256_storeu_ps(p.c.add(at), r);
            }
        }
    }
}

/// The [`NR`] sums `a · strip` of one packed strip (`a.len()` rows of
/// [`NR`] floats): even and odd rows in separate sums, eight chains of FMAs
/// in all, added at the end.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn strip_dot_avx2(a: &[f32], strip: &[f32]) -> [f32; NR] {
    use core::arch::x86_64::*;
    const VECTORS: usize = NR / 8;
    let k = a.len();
    assert!(strip.len() >= k * NR);
    let (ap, bp) = (a.as_ptr(), strip.as_ptr());
    let mut even = [_mm256_setzero_ps(); VECTORS];
    let mut odd = even;
    for q in (0..k / 2 * 2).step_by(2) {
        // SAFETY: q + 1 < k: rows q and q + 1 of the strip (asserted) and
        // floats q, q + 1 of `a`.
        unsafe {
            let (x0, x1) = (_mm256_broadcast_ss(&*ap.add(q)), _mm256_broadcast_ss(&*ap.add(q + 1)));
            let (r0, r1) = (bp.add(q * NR), bp.add((q + 1) * NR));
            for v in 0..VECTORS {
                even[v] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(r0.add(v * 8)), even[v]);
                odd[v] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(r1.add(v * 8)), odd[v]);
            }
        }
    }
    if k % 2 == 1 {
        // SAFETY: the last row of the strip and float k - 1 of `a`.
        unsafe {
            let x = _mm256_broadcast_ss(&*ap.add(k - 1));
            let r = bp.add((k - 1) * NR);
            for (v, e) in even.iter_mut().enumerate() {
                *e = _mm256_fmadd_ps(x, _mm256_loadu_ps(r.add(v * 8)), *e);
            }
        }
    }
    let mut sums = [0.0f32; NR];
    for v in 0..VECTORS {
        // SAFETY: `sums` holds VECTORS vectors.
        unsafe { _mm256_storeu_ps(sums.as_mut_ptr().add(v * 8), _mm256_add_ps(even[v], odd[v])) };
    }
    sums
}

/// Asks for the `rows` × `cols` floats of `C` from `c` (rows `ldc` apart)
/// that a tile adds its sums to, before its products: when `C` is larger
/// than L2 (a 1024 × 1024 product, accumulated over four depth blocks)
/// they come from L3 or memory during the arithmetic instead of stalling
/// the epilogue. Zen 3, 1024³, the two variants alternated in one process
/// over 30 pairs, 5 runs: median 1–5% higher in 9 of 10 comparisons.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_tile(c: *const f32, ldc: usize, rows: usize, cols: usize) {
    use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for i in 0..rows {
        let row = c.wrapping_add(i * ldc);
        // SAFETY: a prefetch reads nothing the program sees and never
        // faults, whatever the address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(row as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(cols - 1) as *const i8);
        }
    }
}

/// The epilogue of a tile's last `cols` (fewer than 8·NV) columns, a
/// product's last: out of line, so that the whole-tile path keeps its
/// accumulators in registers. The sums started from zero.
///
/// # Safety
/// As for [`tile_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn finish_partial_avx2<const MR: usize, const NV: usize>(
    f: &Finish,
    p: TilePtrs,
    cols: usize,
    acc: [[core::arch::x86_64::__m256; NV]; MR],
) {
    use core::arch::x86_64::*;
    for (i, acc_row) in acc.iter().enumerate() {
        let mut sums = [0.0f32; 32];
        for (v, &s) in acc_row.iter().enumerate() {
            // SAFETY: `sums` holds 32 ≥ 8·NV floats.
            unsafe { _mm256_storeu_ps(sums.as_mut_ptr().add(v * 8), s) };
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

/// The AVX-512 8×32 tile (8×16 for a strip's last 16 or fewer columns),
/// or 7×32 when 7-row tiles fit the product's rows better (the 49 pixels
/// of a 7×7 image). A value exists only when the CPU has AVX-512F. Built
/// only for x86-64.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx512 {
    seven: bool,
}

#[cfg(target_arch = "x86_64")]
impl Avx512 {
    #[inline(always)]
    fn detect() -> Option<Self> {
        (crate::cpu::Isa::detect() == crate::cpu::Isa::Avx512).then_some(Avx512 { seven: false })
    }
}

/// Loads the 16 floats at `p`, or only the lanes of `m` (zero in the
/// others). A full mask takes a plain load: masked memory operations are
/// slow on some CPUs, and most vectors of a kernel are full.
///
/// # Safety
/// The CPU must support AVX-512F and the lanes of `m` at `p` be readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn load16(m: core::arch::x86_64::__mmask16, p: *const f32) -> core::arch::x86_64::__m512 {
    use core::arch::x86_64::*;
    // SAFETY: by the caller.
    unsafe {
        if m == 0xffff {
            _mm512_loadu_ps(p)
        } else {
            _mm512_maskz_loadu_ps(m, p)
        }
    }
}

/// The mask of the first `n` of 16 lanes (all of them from 16 on).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn lanes(n: usize) -> core::arch::x86_64::__mmask16 {
    if n >= 16 {
        0xffff
    } else {
        (1u16 << n) - 1
    }
}

/// Stores the lanes of `m` of `v` at `p` (see [`load16`]).
///
/// # Safety
/// The CPU must support AVX-512F and the lanes of `m` at `p` be writable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn store16(m: core::arch::x86_64::__mmask16, p: *mut f32, v: core::arch::x86_64::__m512) {
    use core::arch::x86_64::*;
    // SAFETY: by the caller.
    unsafe {
        if m == 0xffff {
            _mm512_storeu_ps(p, v)
        } else {
            _mm512_mask_storeu_ps(p, m, v)
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Avx512 {
    /// The tile height for `m` rows: 7 when it wastes fewer rows than 8.
    fn for_rows(self, m: usize) -> Self {
        let waste = |mr: usize| m.div_ceil(mr) * mr - m;
        Avx512 {
            seven: waste(7) < waste(8),
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Tile for Avx512 {
    fn run(self, job: &Job<'_>, c: Out) {
        job.check(c);
        // SAFETY: `Avx512` exists only when AVX-512F was detected; `check`
        // bounds every access of every tile.
        unsafe {
            if self.seven {
                tiles_avx512::<7>(job, c)
            } else {
                tiles_avx512::<8>(job, c)
            }
        }
    }
}

/// Every tile of `job` (block of `C`: `c`), each strip with the tile that
/// fits its width.
///
/// # Safety
/// The CPU must support AVX-512F, and `job` must pass [`Job::check`] for
/// `c`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tiles_avx512<const MR: usize>(job: &Job<'_>, c: Out) {
    job.for_each_tile(MR, false, |at| {
        let c = c.at(at.ir, at.s * NR);
        // SAFETY: by the caller (`check` bounds every tile).
        unsafe {
            match at.nr {
                25.. => tile_avx512::<MR, 2>(job, at, c),
                17..=24 => tile_avx512_pairs::<MR>(job, at, c),
                _ => tile_avx512::<MR, 1>(job, at, c),
            }
        }
    });
}

/// Tile `at` of `job`, `NV` vectors of 16 columns by `MR` rows; `c` is
/// its view of `C`.
///
/// # Safety
/// The CPU must support AVX-512F, `job` must pass [`Job::check`] for the
/// block of `C` that `c` is tile `at`'s part of, `at.mr <= MR` and
/// `at.nr <= 16·NV`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512<const MR: usize, const NV: usize>(job: &Job<'_>, at: At<'_>, c: Out) {
    use core::arch::x86_64::*;
    let rows = job.rows::<MR>(at);
    let b = job.strip(at.s).as_ptr();
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    if job.accumulate {
        prefetch_tile(c.ptr, c.ldc, at.mr, at.nr);
    }
    sweep_depth(job.kc, at.prefetch, |q| {
        // SAFETY: for q < kc, rows[i] + q is inside `a` and b + q·NR + 16·NV
        // <= kc·NR floats of the strip (`check`).
        unsafe {
            let bv: [__m512; NV] = core::array::from_fn(|v| _mm512_loadu_ps(b.add(q * NR + v * 16)));
            for i in 0..MR {
                let x = _mm512_set1_ps(*rows[i].add(q));
                for v in 0..NV {
                    acc[i][v] = _mm512_fmadd_ps(x, bv[v], acc[i][v]);
                }
            }
        }
    });
    let (lo, hi) = job.bounds();
    let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
    if at.mr == MR && at.nr == 16 * NV && !job.accumulate {
        // A whole tile written once (the common case at small depth, where
        // the epilogue costs as much as the products): straight-line code
        // over constant trip counts keeps the accumulators in registers.
        let (res, ldc) = (c.res, c.ldc);
        let c = c.ptr;
        let bias = job.bias.map(|b| b.as_ptr().wrapping_add(at.s * NR));
        // SAFETY: `check` bounds the `MR` rows of `nr = 16·NV` columns at
        // `c` (stride `ldc`), this product's alone, those of the residual
        // when added, and the `nr` floats of the bias.
        unsafe {
            let bias: [__m512; NV] = core::array::from_fn(|v| match bias {
                Some(b) => _mm512_loadu_ps(b.add(v * 16)),
                None => _mm512_setzero_ps(),
            });
            let (has_bias, clamp) = (job.bias.is_some(), job.clamp.is_some());
            for (i, acc_row) in acc.iter().enumerate() {
                for (v, &s) in acc_row.iter().enumerate() {
                    let mut r = s;
                    if has_bias {
                        r = _mm512_add_ps(r, bias[v]);
                    }
                    if job.residual {
                        r = _mm512_add_ps(r, _mm512_loadu_ps(res.add(i * ldc + v * 16)));
                    }
                    if clamp {
                        r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
                    }
                    _mm512_storeu_ps(c.add(i * ldc + v * 16), r);
                }
            }
        }
        return;
    }
    // SAFETY: as for this function.
    unsafe { finish_avx512(job, at, acc, lo, hi, c) }
}

/// Runs `step` for each row `q < kc` of a strip's depth block; the first
/// rows also fetch a row (two lines) each of `prefetch`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn sweep_depth(kc: usize, prefetch: &[f32], mut step: impl FnMut(usize)) {
    use core::arch::x86_64::*;
    let fetch = (prefetch.len() / NR).min(kc);
    let next = prefetch.as_ptr();
    for q in 0..fetch {
        // SAFETY: row q of `prefetch` is inside it (q < len / NR); a
        // prefetch reads nothing the program sees.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(next.add(q * NR) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(next.add(q * NR + 16) as *const i8);
        }
        step(q);
    }
    for q in fetch..kc {
        step(q);
    }
}

/// Tile `at` of a strip of 17 to 24 columns (a product 24 wide:
/// MobileNetV2's projections), `MR` rows: columns 0..16 as
/// [`tile_avx512`] does them; columns 16.. of rows `2p` and `2p + 1` share
/// one vector (lanes 0..8 and 8..16) against the strip's lanes 16..32,
/// which hold those columns twice ([`repeat_tail`]). Twelve vectors of
/// products instead of sixteen, none of them wasted.
///
/// # Safety
/// As for [`tile_avx512`], with `17 <= at.nr <= 24` and `MR <= 8`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512_pairs<const MR: usize>(job: &Job<'_>, at: At<'_>, c: Out) {
    use core::arch::x86_64::*;
    const PAIRS: usize = 4;
    debug_assert!(MR <= 2 * PAIRS && (17..=24).contains(&at.nr));
    let rows = job.rows::<MR>(at);
    let b = job.strip(at.s).as_ptr();
    let mut acc = [_mm512_setzero_ps(); MR];
    let mut pairs = [_mm512_setzero_ps(); PAIRS];
    sweep_depth(job.kc, at.prefetch, |q| {
        // SAFETY: as in `tile_avx512` (two vectors of the strip's row q).
        unsafe {
            let head = _mm512_loadu_ps(b.add(q * NR));
            let tail = _mm512_loadu_ps(b.add(q * NR + 16));
            let x: [__m512; MR] = core::array::from_fn(|i| _mm512_set1_ps(*rows[i].add(q)));
            for i in 0..MR {
                acc[i] = _mm512_fmadd_ps(x[i], head, acc[i]);
            }
            for (p, pair) in pairs.iter_mut().enumerate().take(MR.div_ceil(2)) {
                let both = _mm512_mask_blend_ps(0xff00, x[2 * p], x[(2 * p + 1).min(MR - 1)]);
                *pair = _mm512_fmadd_ps(both, tail, *pair);
            }
        }
    });
    // Rows of 16 + 8 lanes, for the shared epilogue: the odd rows' lanes
    // 8..16 move down to 0..8.
    let tiles: [[__m512; 2]; MR] = core::array::from_fn(|i| {
        let pair = pairs[i / 2];
        let tail = if i % 2 == 0 {
            pair
        } else {
            _mm512_shuffle_f32x4::<0b01_00_11_10>(pair, pair)
        };
        [acc[i], tail]
    });
    let (lo, hi) = job.bounds();
    let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
    // SAFETY: as for this function.
    unsafe { finish_avx512(job, at, tiles, lo, hi, c) }
}

/// The epilogue of a partial tile, of a depth block after the first, or of
/// [`tile_avx512_pairs`]: kept out of line so the whole-tile path keeps
/// its accumulators in registers.
///
/// # Safety
/// As for [`tile_avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline(never)]
unsafe fn finish_avx512<const MR: usize, const NV: usize>(
    job: &Job<'_>,
    at: At<'_>,
    acc: [[core::arch::x86_64::__m512; NV]; MR],
    lo: core::arch::x86_64::__m512,
    hi: core::arch::x86_64::__m512,
    mut c: Out,
) {
    use core::arch::x86_64::*;
    let view = c;
    let bias = job.bias_of(at);
    for (i, acc_row) in acc.iter().enumerate().take(at.mr) {
        let res = view.residual_row(i, at.nr).filter(|_| job.residual);
        let row = c.row(i, at.nr);
        for (v, &s) in acc_row.iter().enumerate() {
            let cols = at.nr.saturating_sub(v * 16).min(16);
            if cols == 0 {
                continue;
            }
            let mask = lanes(cols);
            let dst = row[v * 16..v * 16 + cols].as_mut_ptr();
            // SAFETY: the masked loads and stores touch only the `cols`
            // floats of `dst` and of the bias slice (`check`: nr of each).
            unsafe {
                let mut r = s;
                if job.accumulate {
                    r = _mm512_add_ps(r, load16(mask, dst));
                }
                if let Some(bias) = bias {
                    r = _mm512_add_ps(r, load16(mask, bias[v * 16..v * 16 + cols].as_ptr()));
                }
                if let Some(res) = res {
                    r = _mm512_add_ps(r, load16(mask, res[v * 16..v * 16 + cols].as_ptr()));
                }
                if job.clamp.is_some() {
                    r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
                }
                store16(mask, dst, r);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;

    use crate::testing::Lcg;

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

    fn rng(seed: u64, n: usize) -> std::vec::Vec<f32> {
        Lcg(seed).vec(n)
    }

    /// Whole tiles (16 rows by 64 columns, one depth block) under each
    /// epilogue: the straight-line store path must add the bias and the
    /// residual only when there are some and clamp only when asked.
    #[test]
    fn whole_tiles_apply_exactly_their_epilogue() {
        let (m, n, k) = (16, 64, 24);
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
                    let want: std::vec::Vec<u8> = (0..all).map(|t| u8::from(t0 <= t && t < t1)).collect();
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
        .map(|&(m, n, k)| (m, n, k, k + 3))
        // Rows of A 4 KB apart, many of them, two depth blocks: the AVX2
        // tiles copy each row tile together.
        .chain([(300, 70, 300, 1024)])
        {
            for b_trans in [false, true] {
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
                    depth: depth_block(m, n, k),
                    a: &a,
                    lda,
                    b: &packed[HEADER..],
                    accumulate: false,
                    epilogue: &e,
                };
                let mut c = vec![f32::NAN; m * ldc];
                p.run(Portable, Out::new(&mut c, ldc, e.residual));
                check(&c);
                #[cfg(target_arch = "x86_64")]
                if crate::linear::has_avx2_fma() {
                    let mut c = vec![f32::NAN; m * ldc];
                    p.run(Avx2(()), Out::new(&mut c, ldc, e.residual));
                    check(&c);
                }
                #[cfg(target_arch = "x86_64")]
                if let Some(t) = Avx512::detect() {
                    for seven in [false, true] {
                        let mut c = vec![f32::NAN; m * ldc];
                        p.run(Avx512 { seven }, Out::new(&mut c, ldc, e.residual));
                        check(&c);
                    }
                    assert!(t.for_rows(49).seven && !t.for_rows(64).seven && !t.for_rows(12544).seven);
                }
            }
        }
    }
}
