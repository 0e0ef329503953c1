//! The packed layers (see [`super::packed`]) on AVX2, for x86 CPUs
//! without AVX-512 VNNI. AVX2 has no exact 8-bit dot product
//! (`VPMADDUBSW` saturates its pairs), so each quad's weights are widened
//! to 16 bits, their +128 taken off, and `VPMADDWD` multiplies them by a
//! quad of inputs broadcast as 16 bits: each 32-bit lane gets two of an
//! output's four products, and the lane pairs are added once at the end.
//! The sums are exact `i32`, then requantized 8 at a time in the scalar
//! kernels' `f32` steps, so the outputs are theirs to the bit.
use super::packed::{bytes, BlockParams, Job, Out, COLS};
use super::tiles::{for_each_tile, quad, PAD_ROW};
use super::{Depthwise, DwTaps, Inside, Listed, Output, TapPointers, DEPTHWISE_TAPS};
use core::arch::x86_64::*;

/// Rows summed at once: each takes 4 accumulators and a broadcast input,
/// beside one widened weight vector (15 of the 16 registers).
const ROWS: usize = 3;
/// Rows summed at once where blocks have 8 columns or fewer (narrow
/// groups): 2 accumulators and a broadcast input each.
const NARROW_ROWS: usize = 5;

/// Weight bytes a pass over the rows reads (their blocks stay in L2).
const PASS_BYTES: usize = 128 * 1024;

pub(crate) fn available() -> bool {
    crate::cpu::has_avx2_fma()
}

/// # Safety
/// The CPU must have AVX2 and FMA ([`available`]). The layer must fit the tiles
/// ([`tiles::fits`](super::tiles::fits), asserted).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn run(job: &Job<'_>, out: &mut Out<'_>) {
    // SAFETY: as vouched for.
    unsafe {
        match job.layout.gout <= COLS / 2 {
            true => rows::<NARROW_ROWS, 2>(job, out),
            false => rows::<ROWS, 4>(job, out),
        }
    }
}

/// [`run`] in tiles of `R` rows, each block's first `J` weight vectors
/// summed (all 4, or 2 where a block has 8 columns or fewer).
///
/// # Safety
/// As for [`run`].
#[inline(always)]
unsafe fn rows<const R: usize, const J: usize>(job: &Job<'_>, out: &mut Out<'_>) {
    let l = &job.layout;
    let packed = bytes(job.packed);
    let pad = [job.xq.zero_point as i8; PAD_ROW];
    // SAFETY: AVX2, as vouched for.
    let y = unsafe { Requant::new(job.y) };
    for_each_tile::<R>(job, PASS_BYTES, &pad, |t| {
        for (b, p) in t.blocks.clone().zip(t.params) {
            let quads = &l.block(packed, t.g, b)[4 * COLS..];
            // SAFETY: every pointer of `t.x` has `gin` bytes, whole quads
            // if `t.whole` (`for_each_tile`); the block holds `taps` times
            // `gin / 4` rounded up quads. A last block of 8 columns or
            // fewer multiplies only its first two weight vectors, the
            // others' weights being zeros.
            let acc = unsafe {
                match (t.whole, J == 2 || p.cols <= COLS / 2) {
                    (true, false) => tile::<true, 4, R>(t.x, l.gin, quads),
                    (false, false) => tile::<false, 4, R>(t.x, l.gin, quads),
                    (true, true) => tile::<true, 2, R>(t.x, l.gin, quads),
                    (false, true) => tile::<false, 2, R>(t.x, l.gin, quads),
                }
            };
            for (r, acc) in acc.iter().enumerate().take(t.rows) {
                // SAFETY: AVX2, as vouched for.
                unsafe { y.store(acc, p, out.at(t.r0 + r, t.g * l.gout + b * COLS, p.cols)) };
            }
        }
    });
}

/// The sums `Σ x · w` of `R` rows with one block's quads, each row's
/// 16 outputs in 4 vectors of 4 outputs × 2 halves, of which the first
/// `J` are summed (the others stay zero). `WHOLE`: the last quad of each
/// segment is read whole (its bytes past `gin` meet zero weights), else
/// zero-padded.
///
/// # Safety
/// AVX2; each pointer of `x` must be readable for `gin` bytes (`gin`
/// rounded up to a quad if `WHOLE`).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile<const WHOLE: bool, const J: usize, const R: usize>(
    x: &[[*const u8; R]],
    gin: usize,
    quads: &[u8],
) -> [[__m256i; 4]; R] {
    let qpt = gin.div_ceil(4);
    assert!(quads.len() >= x.len() * qpt * 4 * COLS);
    let mut acc = [[_mm256_setzero_si256(); 4]; R];
    let full = if WHOLE { qpt } else { gin / 4 };
    let plus = _mm256_set1_epi16(128);
    // SAFETY: reads within the bounds asserted and vouched for.
    unsafe {
        for (t, xt) in x.iter().enumerate() {
            let w = quads.as_ptr().add(t * qpt * 4 * COLS);
            for q in 0..qpt {
                // Each row's quad, as four 16-bit values in every 64 bits.
                let xs: [__m256i; R] = core::array::from_fn(|r| {
                    let v = match q < full {
                        true => xt[r].add(4 * q).cast::<i32>().read_unaligned(),
                        false => quad(xt[r], q, gin),
                    };
                    _mm256_broadcastq_epi64(_mm_cvtepi8_epi16(_mm_cvtsi32_si128(v)))
                });
                for j in 0..J {
                    let stored = _mm_loadu_si128(w.add(q * 4 * COLS + 16 * j).cast());
                    let wj = _mm256_sub_epi16(_mm256_cvtepu8_epi16(stored), plus);
                    for (acc, &x) in acc.iter_mut().zip(&xs) {
                        acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(wj, x));
                    }
                }
            }
        }
    }
    acc
}

/// Vectors of 16 channels a pass of [`depthwise`] takes at most.
const DW_VECTORS: usize = 4;

/// Output rows `rows` (over batch and height) of a depthwise convolution
/// with one output per channel and at most [`DEPTHWISE_TAPS`] taps (see
/// `super::depthwise_conv`), into `out` (those rows' outputs): passes of
/// up to [`DW_VECTORS`] vectors of 16 channels over every pixel.
///
/// # Safety
/// The CPU must have AVX2 and FMA ([`available`]).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn depthwise(d: &Depthwise<'_>, rows: (usize, usize), out: &mut [i8]) {
    d.assert_fits(rows, out);
    let c = d.g.in_c;
    let pad = [d.xq.zero_point as i8; 16 * DW_VECTORS];
    let at = DwTaps::new(d, &pad);
    let full = c.is_multiple_of(16);
    super::dw_passes(c, 16, DW_VECTORS, |nv, cb| {
        // SAFETY: as vouched for and asserted; `nv` vectors from `cb`
        // hold channels.
        unsafe {
            match (nv, full) {
                (1, false) => dw_pass::<1, false>(d, &at, rows, cb, out),
                (2, false) => dw_pass::<2, false>(d, &at, rows, cb, out),
                (3, false) => dw_pass::<3, false>(d, &at, rows, cb, out),
                (_, false) => dw_pass::<4, false>(d, &at, rows, cb, out),
                (1, true) => dw_pass::<1, true>(d, &at, rows, cb, out),
                (2, true) => dw_pass::<2, true>(d, &at, rows, cb, out),
                (3, true) => dw_pass::<3, true>(d, &at, rows, cb, out),
                (_, true) => dw_pass::<4, true>(d, &at, rows, cb, out),
            }
        }
    });
}

/// One pass of [`depthwise`]: channels `cb..` in `NV` vectors of 16 (the
/// last may be partial, unless `FULL`: then every vector is whole and
/// the inputs load straight).
///
/// Each tap widens 16 inputs to 16 bits and `VPMADDWD` multiplies them
/// by the weights of the even channels (zeros between) and of the odd
/// ones: each 32-bit lane gets one exact product. The input zero point is
/// folded into the sums' start and taps in the padding read a row of zero
/// points, so every tap is the same.
///
/// # Safety
/// As for [`depthwise`], whose asserts this relies on (`at` its taps'
/// pointers); `cb` lies within the channels and `NV` vectors from it
/// reach the last at most.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dw_pass<const NV: usize, const FULL: bool>(
    d: &Depthwise<'_>,
    at: &DwTaps<'_>,
    rows: (usize, usize),
    cb: usize,
    out: &mut [i8],
) {
    let (win, c) = (&d.g.window, d.g.in_c);
    let taps = win.kernel_h * win.kernel_w;
    let r = Requant::new(d.y);
    let lanes: [usize; NV] = core::array::from_fn(|j| 16.min(c - (cb + 16 * j)));
    // [vector][parity]: even channels, then odd ones.
    let mut scale = [[_mm256_setzero_ps(); 2]; NV];
    let mut start = [[_mm256_setzero_si256(); 2]; NV];
    let mut wt = [[[_mm256_setzero_si256(); 2]; NV]; DEPTHWISE_TAPS];
    for j in 0..NV {
        let c0 = cb + 16 * j;
        let (mut sc, mut st) = ([[1.0f32; 8]; 2], [[0i32; 8]; 2]);
        for k in 0..lanes[j] {
            (sc[k % 2][k / 2], st[k % 2][k / 2]) = d.folded(c0 + k);
        }
        // SAFETY: 8-lane loads of arrays of 8, a 16-lane one of 16.
        unsafe {
            for h in 0..2 {
                scale[j][h] = _mm256_loadu_ps(sc[h].as_ptr());
                start[j][h] = _mm256_loadu_si256(st[h].as_ptr().cast());
            }
            for (t, wt) in wt.iter_mut().enumerate().take(taps) {
                let mut w = [0i16; 16];
                for (k, w) in w.iter_mut().enumerate().take(lanes[j]) {
                    *w = d.w[t * c + c0 + k] as i16;
                }
                let w = _mm256_loadu_si256(w.as_ptr().cast());
                let zero = _mm256_setzero_si256();
                wt[j] = [
                    _mm256_blend_epi16::<0b0101_0101>(zero, w),
                    _mm256_blend_epi16::<0b1010_1010>(zero, w),
                ];
            }
        }
    }
    let mut ptr = [core::ptr::null(); DEPTHWISE_TAPS];
    let mut pixel = 0;
    for row in rows.0..rows.1 {
        let (n, oy) = (row / win.out_h, row % win.out_h);
        let mut ox = 0;
        while ox < win.out_w {
            // A run of windows inside the input steps one pointer; the
            // others look each tap up.
            let run = match at.inside(n, oy, ox, cb) {
                Some((first, run)) => {
                    let step = win.stride_w * c;
                    for i in 0..run {
                        let taps_at = Inside(first.wrapping_add(i * step), &at.off[..taps]);
                        // SAFETY: as below; each tap of a window inside
                        // the input is in `x`.
                        unsafe {
                            dw_pixel::<NV, FULL>(
                                taps_at,
                                taps,
                                &lanes,
                                &start,
                                &wt,
                                &scale,
                                &r,
                                out,
                                (pixel + i) * c + cb,
                            )
                        };
                    }
                    run
                }
                None => {
                    at.pointers(n, oy, ox, cb, &mut ptr);
                    // SAFETY: every pointer of `ptr` has the pass's
                    // channels (or is the zero-point row, of 16 ·
                    // DW_VECTORS bytes); the output pixel lies within
                    // `out`, as asserted by `depthwise`.
                    unsafe {
                        dw_pixel::<NV, FULL>(Listed(&ptr), taps, &lanes, &start, &wt, &scale, &r, out, pixel * c + cb)
                    };
                    1
                }
            };
            ox += run;
            pixel += run;
        }
    }
}

/// One output pixel of a [`dw_pass`]: its taps read from `ptr`, its
/// bytes written at `out[at..]` (the pass's channels).
///
/// # Safety
/// As for [`dw_pass`]: each of the first `taps` taps has the pass's
/// channels readable (a partial vector is read only for its lanes), and
/// `out[at..]` holds them.
#[inline]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn dw_pixel<const NV: usize, const FULL: bool>(
    ptr: impl TapPointers,
    taps: usize,
    lanes: &[usize; NV],
    start: &[[__m256i; 2]; NV],
    wt: &[[[__m256i; 2]; NV]; DEPTHWISE_TAPS],
    scale: &[[__m256; 2]; NV],
    r: &Requant,
    out: &mut [i8],
    at: usize,
) {
    let mut acc = *start;
    for (t, wt) in wt.iter().enumerate().take(taps) {
        for j in 0..NV {
            // SAFETY: as the caller vouches.
            let xv = unsafe { dw_load::<FULL>(ptr.at(t).add(16 * j), lanes[j]) };
            for h in 0..2 {
                acc[j][h] = _mm256_add_epi32(acc[j][h], _mm256_madd_epi16(xv, wt[j][h]));
            }
        }
    }
    for j in 0..NV {
        let e = r.apply(acc[j][0], scale[j][0]);
        let o = r.apply(acc[j][1], scale[j][1]);
        // Back in channel order: 0–3 | 8–11 and 4–7 | 12–15.
        let (lo, hi) = (_mm256_unpacklo_epi32(e, o), _mm256_unpackhi_epi32(e, o));
        let bytes = narrow(_mm256_packs_epi32(lo, hi));
        store_bytes(bytes, &mut out[at + 16 * j..][..lanes[j]]);
    }
}

/// 16 inputs of a depthwise tap from `p`, widened to 16 bits: `lanes` of
/// them (all 16 when `FULL`), the rest zero.
///
/// # Safety
/// `lanes` bytes from `p` are readable (16 when `FULL`).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dw_load<const FULL: bool>(p: *const i8, lanes: usize) -> __m256i {
    // SAFETY: as the caller vouches.
    let v = unsafe {
        match FULL || lanes == 16 {
            true => _mm_loadu_si128(p.cast()),
            false => {
                let mut part = [0i8; 16];
                core::ptr::copy_nonoverlapping(p, part.as_mut_ptr(), lanes);
                _mm_loadu_si128(part.as_ptr().cast())
            }
        }
    };
    _mm256_cvtepi8_epi16(v)
}

/// 16 words of 16 bits, each lane's 8 in order, as their 16 low bytes
/// (in range already: the pack only narrows).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn narrow(words: __m256i) -> __m128i {
    let b = _mm256_packs_epi16(words, words);
    _mm_unpacklo_epi64(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b))
}

/// The first `out.len()` (at most 16) of `bytes` into `out`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn store_bytes(bytes: __m128i, out: &mut [i8]) {
    let mut all = [0i8; 16];
    // SAFETY: 16 bytes into an array of 16.
    unsafe { _mm_storeu_si128(all.as_mut_ptr().cast(), bytes) };
    out.copy_from_slice(&all[..out.len()]);
}

/// [`Output::requantize`] on 8 lanes, in the same `f32` steps.
#[derive(Clone, Copy)]
struct Requant {
    lo: __m256,
    hi: __m256,
    zero_point: __m256i,
}

impl Requant {
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn new(y: &Output) -> Self {
        Requant {
            lo: _mm256_set1_ps((y.qmin - y.zero_point) as f32),
            hi: _mm256_set1_ps((y.qmax - y.zero_point) as f32),
            zero_point: _mm256_set1_epi32(y.zero_point),
        }
    }

    /// 8 outputs of sums `acc` at scales `scale`, as 32-bit integers.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn apply(&self, acc: __m256i, scale: __m256) -> __m256i {
        let v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale);
        let v = _mm256_min_ps(_mm256_max_ps(v, self.lo), self.hi);
        // The conversion rounds half to even (the default rounding
        // mode): `round_even`'s magic-number addition for |v| < 2^22.
        _mm256_add_epi32(_mm256_cvtps_epi32(v), self.zero_point)
    }

    /// One row's outputs of a block: its 4 vectors of lane pairs
    /// ([`tile`]) added, plus the block's offsets, requantized into `out`
    /// (`p.cols` bytes).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn store(&self, acc: &[__m256i; 4], p: &BlockParams, out: &mut [i8]) {
        // SAFETY: loads of 8 lanes from arrays of 16.
        let (offset, scale) = unsafe {
            let o = p.offset.as_ptr().cast::<__m256i>();
            let s = p.scale.as_ptr();
            (
                [_mm256_loadu_si256(o), _mm256_loadu_si256(o.add(1))],
                [_mm256_loadu_ps(s), _mm256_loadu_ps(s.add(8))],
            )
        };
        // `hadd` of outputs 0–3 and 4–7 gives 0 1 4 5 | 2 3 6 7.
        let halves: [__m256i; 2] = core::array::from_fn(|h| {
            let pairs = _mm256_hadd_epi32(acc[2 * h], acc[2 * h + 1]);
            let sums = _mm256_permute4x64_epi64::<0b11_01_10_00>(pairs);
            self.apply(_mm256_add_epi32(sums, offset[h]), scale[h])
        });
        // 16 bits: 0–3 8–11 | 4–7 12–15, put in order.
        let words = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(halves[0], halves[1]));
        store_bytes(narrow(words), out);
    }
}
