//! The packed layers (see [`super::packed`]) on AVX-512 VNNI: each
//! instruction multiplies a broadcast quad of inputs into the 16 sums of
//! a block (its weights stored plus 128), for [`ROWS`] rows at once;
//! the sums are requantized 16 at a time in the scalar kernels' `f32`
//! steps.
use super::packed::{bytes, BlockParams, Job, COLS, MAX_TAPS};
use super::{Depthwise, Output};
use core::arch::x86_64::*;

/// The longest input segment of a padded layer: the padding reads a row
/// of zero points this long, on the stack.
pub(crate) const PAD_ROW: usize = 2048;

/// Rows summed at once (each one accumulator).
const ROWS: usize = 8;

pub(crate) fn available() -> bool {
    crate::cpu::has_avx512_vnni()
}

/// Weight bytes a pass over the rows reads (their blocks stay in L2).
const CHUNK_BYTES: usize = 256 * 1024;

/// Blocks a pass takes at most (their parameters are on the stack).
const CHUNK_BLOCKS: usize = 32;

/// # Safety
/// The CPU must have AVX-512 F, BW, VL and VNNI ([`available`]);
/// `job.layout.gin` must be at most [`PAD_ROW`] and its taps at most
/// [`MAX_TAPS`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn run(job: &Job<'_>, out: &mut [i8], out_stride: usize) {
    let l = &job.layout;
    assert!(l.gin <= PAD_ROW && l.taps <= MAX_TAPS);
    let packed = bytes(job.packed);
    let pad = [job.xq.zero_point as i8; PAD_ROW];
    let blocks = l.blocks_per_group();
    let chunk = (CHUNK_BYTES / l.block_bytes()).clamp(1, blocks.min(CHUNK_BLOCKS));
    let mut params = [BlockParams::EMPTY; CHUNK_BLOCKS];
    let mut table = [[None; ROWS]; MAX_TAPS];
    let mut x = [[core::ptr::null::<u8>(); ROWS]; MAX_TAPS];
    for g in 0..l.groups {
        for b0 in (0..blocks).step_by(chunk) {
            let end = blocks.min(b0 + chunk);
            for b in b0..end {
                params[b - b0] = BlockParams::new(job, l.block(packed, g, b), g, b);
            }
            for r0 in (job.first..job.rows).step_by(ROWS) {
                let rows = ROWS.min(job.rows - r0);
                job.source.fill(r0, rows, g, l.gin, &mut table[..l.taps]);
                for (xt, tt) in x.iter_mut().zip(&table[..l.taps]) {
                    for (p, s) in xt.iter_mut().zip(tt) {
                        let s = s.unwrap_or(&pad);
                        assert!(s.len() >= l.gin);
                        *p = s.as_ptr().cast::<u8>();
                    }
                }
                // SAFETY: every pointer of `x` has `gin` bytes.
                let sums = unsafe { row_sums(&x[..l.taps], l.gin) };
                for b in b0..end {
                    let (block, p) = (l.block(packed, g, b), &params[b - b0]);
                    // SAFETY: as above; the block holds `taps` times
                    // `gin / 4` rounded up quads.
                    let acc = unsafe { tile(&x[..l.taps], l.gin, &block[4 * COLS..]) };
                    let o = &mut out[(r0 - job.first) * out_stride + g * l.gout + b * COLS..];
                    // SAFETY: as for `run`.
                    unsafe { store(&acc[..rows], &sums, p, job.y, o, out_stride) };
                }
            }
        }
    }
}

/// The quad of inputs `q` of a segment of `gin` bytes: the last one,
/// when partial, padded with zeros.
///
/// # Safety
/// `x` must be readable for `gin` bytes.
#[inline(always)]
unsafe fn quad(x: *const u8, q: usize, gin: usize) -> i32 {
    // SAFETY: whole quads lie within `gin`; the last is read bytewise.
    unsafe {
        if 4 * q + 4 <= gin {
            x.add(4 * q).cast::<i32>().read_unaligned()
        } else {
            let mut q4 = [0u8; 4];
            for (e, v) in q4.iter_mut().enumerate().take(gin - 4 * q) {
                *v = *x.add(4 * q + e);
            }
            i32::from_ne_bytes(q4)
        }
    }
}

/// Each row's input sum (over all taps), in every lane: what the weights'
/// +128 adds to the sums, divided by 128.
///
/// # Safety
/// As for [`tile`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn row_sums(x: &[[*const u8; ROWS]], gin: usize) -> [__m512i; ROWS] {
    let ones = _mm512_set1_epi8(1);
    let mut sums = [_mm512_setzero_si512(); ROWS];
    for xt in x {
        for q in 0..gin.div_ceil(4) {
            for r in 0..ROWS {
                // SAFETY: as vouched for.
                let xq = unsafe { quad(xt[r], q, gin) };
                sums[r] = _mm512_dpbusd_epi32(sums[r], ones, _mm512_set1_epi32(xq));
            }
        }
    }
    sums
}

/// The raw sums `Σ x · (w + 128)` of [`ROWS`] rows with one block's
/// quads.
///
/// # Safety
/// As for [`run`]; each pointer of `x` must be readable for `gin` bytes,
/// and `quads` must hold `x.len()` taps of `gin.div_ceil(4)` quads.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile(x: &[[*const u8; ROWS]], gin: usize, quads: &[u8]) -> [__m512i; ROWS] {
    let qpt = gin.div_ceil(4);
    assert!(quads.len() >= x.len() * qpt * 4 * COLS);
    let mut acc = [_mm512_setzero_si512(); ROWS];
    // SAFETY: reads within the bounds asserted and vouched for.
    unsafe {
        for (t, xt) in x.iter().enumerate() {
            let w = quads.as_ptr().add(t * qpt * 4 * COLS);
            for q in 0..gin / 4 {
                let wq = _mm512_loadu_si512(w.add(q * 4 * COLS).cast());
                for r in 0..ROWS {
                    let xq = xt[r].add(4 * q).cast::<i32>().read_unaligned();
                    acc[r] = _mm512_dpbusd_epi32(acc[r], wq, _mm512_set1_epi32(xq));
                }
            }
            if !gin.is_multiple_of(4) {
                let q = gin / 4;
                let wq = _mm512_loadu_si512(w.add(q * 4 * COLS).cast());
                for r in 0..ROWS {
                    acc[r] = _mm512_dpbusd_epi32(acc[r], wq, _mm512_set1_epi32(quad(xt[r], q, gin)));
                }
            }
        }
    }
    acc
}

/// Requantizes each row's sums (plus the block's offsets, less 128 times
/// the row's input sum) into its
/// `p.cols` outputs, rows `stride` apart in `out`.
///
/// # Safety
/// As for [`run`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn store(acc: &[__m512i], sums: &[__m512i; ROWS], p: &BlockParams, y: &Output, out: &mut [i8], stride: usize) {
    // SAFETY: loads of the 16 lanes of arrays of 16; stores of `p.cols`
    // bytes into slices of that length.
    unsafe {
        let offset = _mm512_loadu_si512(p.offset.as_ptr().cast());
        let scale = _mm512_loadu_ps(p.scale.as_ptr());
        let r = Requant::new(y);
        let mask = (u32::MAX >> (32 - p.cols)) as __mmask16;
        for (i, &a) in acc.iter().enumerate() {
            let o = &mut out[i * stride..][..p.cols];
            let a = _mm512_sub_epi32(_mm512_add_epi32(a, offset), _mm512_slli_epi32::<7>(sums[i]));
            _mm_mask_storeu_epi8(o.as_mut_ptr(), mask, r.apply(a, scale));
        }
    }
}

/// [`Output::requantize`] on 16 lanes, in the same `f32` steps.
#[derive(Clone, Copy)]
struct Requant {
    lo: __m512,
    hi: __m512,
    magic: __m512,
    zero_point: __m512i,
}

impl Requant {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn new(y: &Output) -> Self {
        Requant {
            lo: _mm512_set1_ps((y.qmin - y.zero_point) as f32),
            hi: _mm512_set1_ps((y.qmax - y.zero_point) as f32),
            magic: _mm512_set1_ps(12_582_912.0),
            zero_point: _mm512_set1_epi32(y.zero_point),
        }
    }

    /// The 16 outputs of sums `acc` at scales `scale`, as bytes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn apply(&self, acc: __m512i, scale: __m512) -> __m128i {
        let v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale);
        let v = _mm512_min_ps(_mm512_max_ps(v, self.lo), self.hi);
        let v = _mm512_sub_ps(_mm512_add_ps(v, self.magic), self.magic);
        _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(v), self.zero_point))
    }
}

/// A depthwise convolution with one output per channel and at most
/// [`super::DEPTHWISE_TAPS`] taps (see `super::depthwise_conv`): 16
/// channels at a time, their weights widened once, each tap's product
/// exact in `i32`.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn depthwise(d: &Depthwise<'_>, out: &mut [i8]) {
    let (g, x, w) = (d.g, d.x, d.w);
    let win = &g.window;
    let c = g.in_c;
    let taps = win.kernel_h * win.kernel_w;
    assert!(taps <= super::DEPTHWISE_TAPS && g.out_c == c);
    assert!(x.len() >= win.batch * win.in_h * win.in_w * c && w.len() >= taps * c);
    assert!(out.len() >= win.batch * win.out_h * win.out_w * c);
    let r = Requant::new(d.y);
    for c0 in (0..c).step_by(16) {
        let lanes = 16.min(c - c0);
        let mask = (u32::MAX >> (32 - lanes)) as __mmask16;
        let (scale, start) = d.lanes(c0);
        // SAFETY: masked loads and stores of the `lanes` channels from
        // `c0` of pixels and taps inside the sizes asserted above.
        unsafe {
            let scale = _mm512_loadu_ps(scale.as_ptr());
            let start = _mm512_loadu_si512(start.as_ptr().cast());
            // Products of centred inputs (|x - zp| <= 255) and weights
            // (|w| <= 128) fit in 16 bits; their sums widen to 32.
            let mut wt = [_mm256_setzero_si256(); super::DEPTHWISE_TAPS];
            for (t, v) in wt.iter_mut().enumerate().take(taps) {
                *v = _mm256_cvtepi8_epi16(_mm_maskz_loadu_epi8(mask, w.as_ptr().add(t * c + c0)));
            }
            let zp = _mm256_set1_epi16(d.xq.zero_point as i16);
            let tap = |acc: __m512i, p: usize, t: usize| {
                let xv = _mm256_cvtepi8_epi16(_mm_maskz_loadu_epi8(mask, x.as_ptr().add(p * c + c0)));
                let prod = _mm256_mullo_epi16(_mm256_sub_epi16(xv, zp), wt[t]);
                _mm512_add_epi32(acc, _mm512_cvtepi16_epi32(prod))
            };
            // The window's columns lie inside the input for output
            // columns `inner`.
            let span = (win.kernel_w - 1) * win.dilation_w;
            let first = win.pad_left.div_ceil(win.stride_w);
            let inner = first
                ..(win.in_w + win.pad_left)
                    .checked_sub(span)
                    .map_or(0, |e| e.div_ceil(win.stride_w))
                    .min(win.out_w);
            let mut rows = [(0usize, 0usize); super::DEPTHWISE_TAPS];
            let mut pixel = 0;
            for n in 0..win.batch {
                for oy in 0..win.out_h {
                    // The window's rows inside the input: (first tap, first pixel).
                    let mut nrows = 0;
                    for ky in 0..win.kernel_h {
                        let iy = (oy * win.stride_h + ky * win.dilation_h).checked_sub(win.pad_top);
                        if let Some(iy) = iy.filter(|&i| i < win.in_h) {
                            rows[nrows] = (ky * win.kernel_w, (n * win.in_h + iy) * win.in_w);
                            nrows += 1;
                        }
                    }
                    for ox in 0..win.out_w {
                        let mut acc = start;
                        if inner.contains(&ox) {
                            let ix = ox * win.stride_w - win.pad_left;
                            for &(t0, row) in &rows[..nrows] {
                                for kx in 0..win.kernel_w {
                                    acc = tap(acc, row + ix + kx * win.dilation_w, t0 + kx);
                                }
                            }
                        } else {
                            for &(t0, row) in &rows[..nrows] {
                                for kx in 0..win.kernel_w {
                                    let ix = (ox * win.stride_w + kx * win.dilation_w).checked_sub(win.pad_left);
                                    if let Some(ix) = ix.filter(|&i| i < win.in_w) {
                                        acc = tap(acc, row + ix, t0 + kx);
                                    }
                                }
                            }
                        }
                        _mm_mask_storeu_epi8(out.as_mut_ptr().add(pixel * c + c0), mask, r.apply(acc, scale));
                        pixel += 1;
                    }
                }
            }
        }
    }
}
