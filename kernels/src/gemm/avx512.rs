//! The AVX-512 micro-kernels of the blocked product: 8×32 tiles (8×16 for
//! a strip's last 16 or fewer columns), 7×32 where 7-row tiles fit the
//! rows better (the 49 pixels of a 7×7 image), and strips of 17 to 24
//! columns two rows to a vector. Compiled for x86-64 only; the kernels run
//! only where [`Avx512::detect`] found AVX-512F.
use super::blocks::{At, Job, Out, Tile};
use super::packing::NR;
use crate::x86::{lanes, load16, prefetch_tile, store16};

/// The AVX-512 8×32 tile (8×16 for a strip's last 16 or fewer columns),
/// or 7×32 when 7-row tiles fit the product's rows better (the 49 pixels
/// of a 7×7 image). A value exists only when the CPU has AVX-512F. Built
/// only for x86-64.
#[derive(Clone, Copy)]
pub(super) struct Avx512 {
    pub(super) seven: bool,
}

impl Avx512 {
    /// The tile, when this CPU has AVX-512F.
    #[inline(always)]
    pub(super) fn detect() -> Option<Self> {
        (crate::cpu::Isa::detect() == crate::cpu::Isa::Avx512).then_some(Avx512 { seven: false })
    }

    /// The tile height for `m` rows: 7 when it wastes fewer rows than 8.
    pub(super) fn for_rows(self, m: usize) -> Self {
        let waste = |mr: usize| m.div_ceil(mr) * mr - m;
        Avx512 {
            seven: waste(7) < waste(8),
        }
    }
}

impl Tile for Avx512 {
    fn run(self, job: &Job<'_>, c: Out) {
        job.check_gathered(c);
        // SAFETY: `Avx512` exists only when AVX-512F was detected; the
        // check bounds every access of every tile.
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
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512<const MR: usize, const NV: usize>(job: &Job<'_>, at: At<'_>, c: Out) {
    use core::arch::x86_64::*;
    let b = job.strip(at.s).as_ptr();
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    if job.accumulate {
        prefetch_tile(c.ptr, c.ldc, at.mr, at.nr);
    }
    // Tiles whose depth sweep is in assembly (see `sweep_asm`).
    let asm = NV == 2 && (MR == 7 || MR == 8);
    if let Some((g, pc)) = job.gather {
        // One sweep per run of the gathered rows, the accumulators kept.
        assert!(asm, "gathered rows need a 32-column sweep");
        let (mut q, mut prefetch) = (0, at.prefetch);
        while q < job.kc {
            let (rows, len) = g.rows_at::<MR>(at.ir, at.mr, pc + q, job.kc - q);
            // SAFETY: as below; each of `rows` is readable for `len` floats
            // (`rows_at`), and q + len <= kc rows of the strip.
            unsafe { sweep_32::<MR, NV>(&rows, b.add(q * NR), len, prefetch, &mut acc) };
            prefetch = &prefetch[(len * NR).min(prefetch.len())..];
            q += len;
        }
    } else if asm {
        let rows = job.rows::<MR>(at);
        // SAFETY: for q < kc, rows[i] + q is inside `a` and b + q·NR + 32
        // <= kc·NR floats of the strip (`check`).
        unsafe { sweep_32::<MR, NV>(&rows, b, job.kc, at.prefetch, &mut acc) };
    } else {
        let rows = job.rows::<MR>(at);
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
    }
    let (lo, hi) = job.bounds();
    let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
    // A whole tile (the common case; at small depth the epilogue costs as
    // much as the products): straight-line code over constant trip counts
    // keeps the accumulators in registers. Depth blocks after the first
    // add what C holds here only after the assembly sweeps: after the
    // intrinsics loop, the compiler then kept the accumulators in memory
    // throughout it when built for the host's CPU (43 instead of 106
    // GFLOP/s); out of line (`finish_avx512`), they cost 3 % of a 3 × 3
    // convolution's time.
    if at.mr == MR && at.nr == 16 * NV && (asm || !job.accumulate) {
        let (res, ldc, accumulate) = (c.res, c.ldc, job.accumulate);
        let c = c.ptr;
        let bias = job.bias.map(|b| b.as_ptr().wrapping_add(at.s * NR));
        // SAFETY: `check` bounds the `MR` rows of `nr = 16·NV` columns at
        // `c` (stride `ldc`), this product's alone (read back when
        // accumulating), those of the residual when added, and the `nr`
        // floats of the bias.
        unsafe {
            let bias: [__m512; NV] = core::array::from_fn(|v| match bias {
                Some(b) => _mm512_loadu_ps(b.add(v * 16)),
                None => _mm512_setzero_ps(),
            });
            let (has_bias, clamp) = (job.bias.is_some(), job.clamp.is_some());
            for (i, acc_row) in acc.iter().enumerate() {
                for (v, &s) in acc_row.iter().enumerate() {
                    let mut r = s;
                    // The order of `finish_avx512`.
                    if accumulate {
                        r = _mm512_add_ps(r, _mm512_loadu_ps(c.add(i * ldc + v * 16)));
                    }
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

/// [`sweep_8x32`] or [`sweep_7x32`] for a tile of `MR` rows by `16·NV`
/// columns.
///
/// # Safety
/// AVX-512F; `MR` is 7 or 8 and `NV` 2; `rows[i] + q` and `b + q·NR ..
/// + 32` readable for every `q < kc`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn sweep_32<const MR: usize, const NV: usize>(
    rows: &[*const f32; MR],
    b: *const f32,
    kc: usize,
    prefetch: &[f32],
    acc: &mut [[core::arch::x86_64::__m512; NV]; MR],
) {
    assert!(NV == 2 && (MR == 7 || MR == 8));
    // SAFETY: the same arrays at the sizes just checked; the rest is the
    // caller's.
    unsafe {
        let (acc, rows) = (acc.as_mut_ptr(), rows.as_ptr());
        match MR {
            8 => sweep_8x32(&*rows.cast(), b, kc, prefetch, &mut *acc.cast()),
            _ => sweep_7x32(&*rows.cast(), b, kc, prefetch, &mut *acc.cast()),
        }
    }
}

/// One row of a 32-column tile's step in [`sweep_8x32`] and
/// [`sweep_7x32`]: the row's element of `A` broadcast (row pointer `r`),
/// times the strip's two vectors into accumulators `lo` and `hi`.
macro_rules! row_step {
    ($r:ident, $lo:ident, $hi:ident) => {
        concat!(
            "vbroadcastss {x:z}, dword ptr [{",
            stringify!($r),
            "} + {q}*4]\n",
            "vfmadd231ps {",
            stringify!($lo),
            ":z}, {x:z}, {w0:z}\n",
            "vfmadd231ps {",
            stringify!($hi),
            ":z}, {x:z}, {w1:z}\n",
        )
    };
}

/// The depth sweep of a tile of `MR` rows by 32 columns, `acc += rows · b`
/// over `kc` rows of the strip `b`, in assembly: written with intrinsics,
/// the loop's code depended on the target the whole crate was built for.
/// Built for the host's CPU (as ptec builds a model) it ran 4 % slower
/// than for the baseline, or kept the accumulators in memory (see
/// `tile_avx512`). The first rows also fetch a row (two lines) each of
/// `prefetch`, as [`sweep_depth`] does. The row index counts up from
/// `-kc` to 0 from the rows' ends, which leaves a register for each row.
macro_rules! sweep_asm {
    ($name:ident, $mr:literal, [$(($r:ident, $lo:ident, $hi:ident)),*]) => {
        /// See [`sweep_asm`].
        ///
        /// # Safety
        /// AVX-512F; `rows[i] + q` and `b + q·NR .. + 32` readable for
        /// every `q < kc`.
        #[target_feature(enable = "avx512f")]
        #[inline]
        unsafe fn $name(
            rows: &[*const f32; $mr],
            b: *const f32,
            kc: usize,
            prefetch: &[f32],
            acc: &mut [[core::arch::x86_64::__m512; 2]; $mr],
        ) {
            use core::arch::x86_64::__m512;
            if kc == 0 {
                return;
            }
            let fetch = (prefetch.len() / NR).min(kc);
            let [$($r),*] = rows.map(|r| r.wrapping_add(kc));
            let [$([$lo, $hi]),*] = acc;
            let (_w0, _w1, _x): (__m512, __m512, __m512);
            // SAFETY: by the caller; a prefetch reads nothing the program
            // sees.
            unsafe {
                core::arch::asm!(
                    "test {fetch}, {fetch}",
                    "jz 3f",
                    "2:",
                    "vmovups {w0:z}, zmmword ptr [{b}]",
                    "vmovups {w1:z}, zmmword ptr [{b} + 64]",
                    "prefetcht0 byte ptr [{next}]",
                    "prefetcht0 byte ptr [{next} + 64]",
                    $(row_step!($r, $lo, $hi),)*
                    "add {b}, 128",
                    "add {next}, 128",
                    "inc {q}",
                    "dec {fetch}",
                    "jnz 2b",
                    "3:",
                    "test {q}, {q}",
                    "jz 5f",
                    "4:",
                    "vmovups {w0:z}, zmmword ptr [{b}]",
                    "vmovups {w1:z}, zmmword ptr [{b} + 64]",
                    $(row_step!($r, $lo, $hi),)*
                    "add {b}, 128",
                    "inc {q}",
                    "jnz 4b",
                    "5:",
                    b = inout(reg) b => _,
                    q = inout(reg) kc.wrapping_neg() => _,
                    fetch = inout(reg) fetch => _,
                    next = inout(reg) prefetch.as_ptr() => _,
                    $($r = in(reg) $r,)*
                    w0 = out(zmm_reg) _w0,
                    w1 = out(zmm_reg) _w1,
                    x = out(zmm_reg) _x,
                    $($lo = inout(zmm_reg) *$lo, $hi = inout(zmm_reg) *$hi,)*
                    options(nostack, readonly),
                );
            }
        }
    };
}

/// [`sweep_asm`]'s 7- and 8-row sweeps: the 7 rows, and the eighth.
macro_rules! sweeps {
    ([$($row:tt),*], $eighth:tt) => {
        sweep_asm!(sweep_7x32, 7, [$($row),*]);
        sweep_asm!(sweep_8x32, 8, [$($row,)* $eighth]);
    };
}

sweeps!(
    [
        (r0, a00, a01),
        (r1, a10, a11),
        (r2, a20, a21),
        (r3, a30, a31),
        (r4, a40, a41),
        (r5, a50, a51),
        (r6, a60, a61)
    ],
    (r7, a70, a71)
);

/// Runs `step` for each row `q < kc` of a strip's depth block; the first
/// rows also fetch a row (two lines) each of `prefetch`.
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
/// which hold those columns twice (`repeat_tail` in `packing`).
/// Twelve vectors of products instead of sixteen, none of them wasted.
///
/// # Safety
/// As for [`tile_avx512`], with `17 <= at.nr <= 24` and `MR <= 8`.
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

/// The epilogue of a partial tile, of a depth block after the first of a
/// tile the sweeps in assembly do not take, or of
/// [`tile_avx512_pairs`]: kept out of line so the whole-tile path keeps
/// its accumulators in registers.
///
/// # Safety
/// As for [`tile_avx512`].
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
