//! The AVX2 + FMA micro-kernels: the 6×16 tile of the blocked product
//! (twice per strip), one row against a packed `B` strip by strip, and one
//! to three rows against a `Linear` weight read in place (the unpacked
//! product's common thin case). The whole file is compiled for x86-64
//! only, and its `unsafe` kernels run only where [`Avx2::detect`] found
//! both features.
use super::blocks::{Job, Out, Product, Tile};
use super::packing::NR;
use super::{Gemm, KC};
use crate::x86::prefetch_tile;

/// The AVX2+FMA tile: up to 6 rows by 16 columns (12 accumulators, two
/// vectors of `B` and a broadcast of `A` fill the 16 registers), run on
/// each half of a strip. A value exists only when the CPU has both
/// features.
#[derive(Clone, Copy)]
pub(super) struct Avx2(());

impl Avx2 {
    /// The tile, when this CPU has AVX2 and FMA.
    #[inline(always)]
    pub(super) fn detect() -> Option<Self> {
        crate::cpu::has_avx2_fma().then_some(Avx2(()))
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
    pub(super) fn one_row(self, p: &Product<'_>, mut c: Out) {
        let (n, k) = (p.n, p.k);
        // One job over every column and the whole depth: its epilogue is
        // the product's (`Job::finish`).
        let job = p.job(0, 0, k, n, false);
        let strips = n.div_ceil(NR);
        let (a, b) = (&p.a[..k], &p.b[..strips * k * NR]);
        let view = c;
        let residual = view.residual_row(0, n);
        let row = c.row(0, n);
        for s in 0..strips {
            let strip = &b[s * k * NR..(s + 1) * k * NR];
            // SAFETY: `Avx2` exists only when AVX2 and FMA were detected;
            // the strip holds `k` rows of NR floats, as `strip_dot_avx2`
            // asserts.
            let sums = unsafe { strip_dot_avx2(a, strip) };
            let j0 = s * NR;
            for (j, &sum) in sums.iter().enumerate().take(NR.min(n - j0)) {
                let at = j0 + j;
                row[at] = job.finish(sum, row[at], job.bias.map(|b| b[at]), residual.map(|r| r[at]));
            }
        }
    }
}

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

/// The epilogue of a tile's last `cols` (fewer than 8·NV) columns, a
/// product's last: out of line, so that the whole-tile path keeps its
/// accumulators in registers. The sums started from zero.
///
/// # Safety
/// As for [`tile_avx2`].
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

/// [`super::scalar::direct`] compiled for AVX2 + FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn direct_avx2(p: &Gemm<'_>, c: &mut [f32]) {
    // With one row, A is the same whether stored transposed or not.
    if p.b_trans && (p.m == 1 || !p.a_trans) {
        // SAFETY: AVX2 and FMA by the caller.
        return unsafe { rows_times_linear_avx2(p, c) };
    }
    super::scalar::direct(p, c)
}

/// Rows of a Linear weight a [`rows_times_linear_avx2`] step multiplies.
const GEMV_ROWS: usize = 4;

/// A few rows of `A` (row-major) times a Linear weight (`B` stored `n ×
/// k`): `c[i][j] = alpha · A[i]·B[j] (+ beta · c[i][j])`, four rows of `B`
/// at a time against every row of `A` ([`rows_times_weight_avx2`]): one
/// row alone, two or three together (so that the weight is read once, not
/// once a row), more one at a time.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_times_linear_avx2(p: &Gemm<'_>, c: &mut [f32]) {
    let (m, n, k) = (p.m, p.n, p.k);
    let b = &p.b[..n * k];
    match m {
        // SAFETY: AVX2 and FMA by the caller; the rows are slices of `a`.
        2 => unsafe { rows_times_weight_avx2::<2, 1>(p, &p.a[..2 * k], b, c) },
        // SAFETY: as above.
        3 => unsafe { rows_times_weight_avx2::<3, 1>(p, &p.a[..3 * k], b, c) },
        _ => {
            for i in 0..m {
                let (a, c) = (&p.a[i * k..(i + 1) * k], &mut c[i * n..(i + 1) * n]);
                // SAFETY: AVX2 and FMA by the caller; one row of `a` and
                // of `c`, slices checked by their indexing.
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

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::gemm::tests::{operands, product, reference, SCALES};
    use crate::testing::{check, Lcg};
    use std::vec::Vec;

    /// One to three rows times a Linear weight on AVX2 (one row alone, two
    /// and three together): right for any width and depth (groups of four
    /// weight rows and the rows left over, whole vectors and a tail), with
    /// and without `beta`; and a split of the columns gives the same bits
    /// as the whole (threads split one row so).
    #[test]
    fn rows_times_linear_weight() {
        if Avx2::detect().is_none() {
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
}
