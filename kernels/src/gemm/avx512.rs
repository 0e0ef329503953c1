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

/// The epilogue of a partial tile, of a depth block after the first, or of
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
