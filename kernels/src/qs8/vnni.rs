//! The packed layers (see [`super::packed`]) on AVX-512 VNNI: each
//! instruction multiplies a broadcast quad of inputs into the 16 sums of
//! a block (its weights stored plus 128), for [`ROWS`] rows at once;
//! the sums are requantized 16 at a time in the scalar kernels' `f32`
//! steps.
use super::packed::{bytes, BlockParams, Job, Source, COLS, MAX_TAPS, PATCH};
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
    let input = job.source.input();
    let mut x = [[core::ptr::null::<u8>(); ROWS]; MAX_TAPS];
    // Gathered windows (a gathered layer's `gin` is at most `PATCH`).
    let mut patches = [[0i8; PATCH]; ROWS];
    // Whole quads a tap, read where the input goes on: the bytes past
    // `gin` meet zero weights, and the row sums take them too.
    let q4 = 4 * l.quads_per_tap();
    for g in 0..l.groups {
        for b0 in (0..blocks).step_by(chunk) {
            let end = blocks.min(b0 + chunk);
            for b in b0..end {
                params[b - b0] = BlockParams::new(job, l.block(packed, g, b), g, b);
            }
            for r0 in (job.first..job.rows).step_by(ROWS) {
                let rows = ROWS.min(job.rows - r0);
                let mut whole = true;
                if let Source::Gathered { .. } = job.source {
                    job.source.gather(r0, rows, &mut patches);
                    for (p, patch) in x[0].iter_mut().zip(&patches) {
                        *p = patch.as_ptr().cast::<u8>();
                    }
                } else {
                    job.source.visit::<ROWS>(0, l.taps, r0, rows, g, l.gin, |t, r, at| {
                        x[t][r] = match at {
                            Some(at) => {
                                assert!(at + l.gin <= input.len());
                                whole &= at + q4 <= input.len();
                                input.as_ptr().wrapping_add(at).cast::<u8>()
                            }
                            None => pad.as_ptr().cast::<u8>(),
                        }
                    });
                }
                // SAFETY: every pointer of `x` has `gin` bytes, `q4` if
                // `whole`.
                let sums = unsafe {
                    match whole {
                        true => row_sums::<true>(&x[..l.taps], l.gin),
                        false => row_sums::<false>(&x[..l.taps], l.gin),
                    }
                };
                for b in b0..end {
                    let (block, p) = (l.block(packed, g, b), &params[b - b0]);
                    // SAFETY: as above; the block holds `taps` times
                    // `gin / 4` rounded up quads.
                    let acc = unsafe {
                        match whole {
                            true => tile::<true>(&x[..l.taps], l.gin, &block[4 * COLS..]),
                            false => tile::<false>(&x[..l.taps], l.gin, &block[4 * COLS..]),
                        }
                    };
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
/// +128 adds to the sums, divided by 128. `WHOLE`: every segment's last
/// quad is read whole (see [`tile`]).
///
/// # Safety
/// As for [`tile`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn row_sums<const WHOLE: bool>(x: &[[*const u8; ROWS]], gin: usize) -> [__m512i; ROWS] {
    let ones = _mm512_set1_epi8(1);
    let mut sums = [_mm512_setzero_si512(); ROWS];
    let len = if WHOLE { 4 * gin.div_ceil(4) } else { gin };
    if len >= 16 {
        // Long segments 64 bytes an instruction (each lane a partial
        // sum), added across at the end.
        for xt in x {
            for at in (0..len).step_by(64) {
                let mask = u64::MAX >> (64 - (len - at).min(64));
                for r in 0..ROWS {
                    // SAFETY: as vouched for; the masked bytes lie within.
                    let v = unsafe { _mm512_maskz_loadu_epi8(mask, xt[r].add(at).cast()) };
                    sums[r] = _mm512_dpbusd_epi32(sums[r], ones, v);
                }
            }
        }
        return sums.map(|s| _mm512_set1_epi32(_mm512_reduce_add_epi32(s)));
    }
    for xt in x {
        for q in 0..gin.div_ceil(4) {
            for r in 0..ROWS {
                // SAFETY: as vouched for.
                let xq = unsafe {
                    match WHOLE {
                        true => xt[r].add(4 * q).cast::<i32>().read_unaligned(),
                        false => quad(xt[r], q, gin),
                    }
                };
                sums[r] = _mm512_dpbusd_epi32(sums[r], ones, _mm512_set1_epi32(xq));
            }
        }
    }
    sums
}

/// The raw sums `Σ x · (w + 128)` of [`ROWS`] rows with one block's
/// quads. `WHOLE`: the last quad of each segment is read whole (its bytes
/// past `gin` meet zero weights), else zero-padded.
///
/// # Safety
/// As for [`run`]; each pointer of `x` must be readable for `gin` bytes
/// (`gin` rounded up to a quad if `WHOLE`), and `quads` must hold
/// `x.len()` taps of `gin.div_ceil(4)` quads.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile<const WHOLE: bool>(x: &[[*const u8; ROWS]], gin: usize, quads: &[u8]) -> [__m512i; ROWS] {
    let qpt = gin.div_ceil(4);
    assert!(quads.len() >= x.len() * qpt * 4 * COLS);
    let mut acc = [_mm512_setzero_si512(); ROWS];
    let full = if WHOLE { qpt } else { gin / 4 };
    // SAFETY: reads within the bounds asserted and vouched for.
    unsafe {
        for (t, xt) in x.iter().enumerate() {
            let w = quads.as_ptr().add(t * qpt * 4 * COLS);
            for q in 0..full {
                let wq = _mm512_loadu_si512(w.add(q * 4 * COLS).cast());
                for r in 0..ROWS {
                    let xq = xt[r].add(4 * q).cast::<i32>().read_unaligned();
                    acc[r] = _mm512_dpbusd_epi32(acc[r], wq, _mm512_set1_epi32(xq));
                }
            }
            if full < qpt {
                let wq = _mm512_loadu_si512(w.add(full * 4 * COLS).cast());
                for r in 0..ROWS {
                    acc[r] = _mm512_dpbusd_epi32(acc[r], wq, _mm512_set1_epi32(quad(xt[r], full, gin)));
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
    zero_point: __m512i,
}

impl Requant {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn new(y: &Output) -> Self {
        Requant {
            lo: _mm512_set1_ps((y.qmin - y.zero_point) as f32),
            hi: _mm512_set1_ps((y.qmax - y.zero_point) as f32),
            zero_point: _mm512_set1_epi32(y.zero_point),
        }
    }

    /// The 16 outputs of sums `acc` at scales `scale`, as bytes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn apply(&self, acc: __m512i, scale: __m512) -> __m128i {
        let v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale);
        let v = _mm512_min_ps(_mm512_max_ps(v, self.lo), self.hi);
        // Rounding half to even in the conversion is `round_even`'s
        // magic-number addition (|v| < 2^22 after the clamp).
        let v = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
        _mm512_cvtepi32_epi8(_mm512_add_epi32(v, self.zero_point))
    }
}

/// Vectors of 32 channels a pass of [`depthwise`] takes at most.
const DW_VECTORS: usize = 2;

/// Output rows `rows` (over batch and height) of a depthwise convolution
/// with one output per channel and at most [`super::DEPTHWISE_TAPS`]
/// taps (see `super::depthwise_conv`), into `out` (those rows' outputs):
/// passes of up to [`DW_VECTORS`] vectors of 32 channels over every
/// pixel, each tap two `VPDPWSSD` a vector.
///
/// # Safety
/// The CPU must have AVX-512 F, BW, VL and VNNI ([`available`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn depthwise(d: &Depthwise<'_>, rows: (usize, usize), out: &mut [i8]) {
    let (g, win) = (d.g, &d.g.window);
    let c = g.in_c;
    let taps = win.kernel_h * win.kernel_w;
    assert!(taps <= super::DEPTHWISE_TAPS && g.out_c == c);
    assert!(d.x.len() >= win.batch * win.in_h * win.in_w * c && d.w.len() >= taps * c);
    assert!(rows.0 <= rows.1 && rows.1 <= win.batch * win.out_h);
    assert!(out.len() >= (rows.1 - rows.0) * win.out_w * c);
    // Passes as even as can be: a lone vector would wait on its sums.
    let vectors = c.div_ceil(32);
    let passes = vectors.div_ceil(DW_VECTORS);
    let mut v0 = 0;
    for p in 0..passes {
        let nv = (vectors - v0).div_ceil(passes - p);
        // SAFETY: as vouched for and asserted; `nv` vectors from `v0`
        // hold channels.
        unsafe {
            match (nv, c.is_multiple_of(32)) {
                (1, false) => dw_pass::<1, false>(d, rows, 32 * v0, out),
                (_, false) => dw_pass::<2, false>(d, rows, 32 * v0, out),
                (1, true) => dw_pass::<1, true>(d, rows, 32 * v0, out),
                (_, true) => dw_pass::<2, true>(d, rows, 32 * v0, out),
            }
        }
        v0 += nv;
    }
}

/// One pass of [`depthwise`]: channels `cb..` in `NV` vectors of 32 (the
/// last may be partial, unless `FULL`: then every vector is whole and
/// the inputs load unmasked).
///
/// Each tap widens 32 inputs to 16 bits once and adds their products to
/// two sets of sums, the even channels' and the odd ones': `VPDPWSSD`
/// with the weights of one parity in their lanes and zeros in the
/// others gives each 32-bit lane its one exact product. The input zero
/// point is folded into the sums' start (`- zp · Σ w`) and taps in the
/// padding read a row of zero points, so every tap is the same.
///
/// # Safety
/// As for [`depthwise`], whose asserts this relies on; `cb` lies within
/// the channels and `NV` vectors from it reach the last at most.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn dw_pass<const NV: usize, const FULL: bool>(
    d: &Depthwise<'_>,
    rows: (usize, usize),
    cb: usize,
    out: &mut [i8],
) {
    let (win, c, x) = (&d.g.window, d.g.in_c, d.x);
    let taps = win.kernel_h * win.kernel_w;
    let zp = d.xq.zero_point;
    let pad = [zp as i8; 32 * DW_VECTORS];
    let r = Requant::new(d.y);
    let mut masks = [0 as __mmask32; NV];
    // [vector][parity]: even channels, then odd ones.
    let mut scale = [[_mm512_setzero_ps(); 2]; NV];
    let mut start = [[_mm512_setzero_si512(); 2]; NV];
    let mut wt = [[[_mm512_setzero_si512(); 2]; NV]; super::DEPTHWISE_TAPS];
    // SAFETY: masked loads of channels `c0..c0 + lanes` of each tap's
    // weights; 16-lane loads of arrays of 16.
    unsafe {
        for j in 0..NV {
            let c0 = cb + 32 * j;
            let lanes = 32.min(c - c0);
            masks[j] = (u64::MAX >> (64 - lanes)) as __mmask32;
            let (mut sc, mut st) = ([[1.0f32; 16]; 2], [[0i32; 16]; 2]);
            for k in 0..lanes {
                let ch = c0 + k;
                let sum = (0..taps).fold(0i32, |s, t| s.wrapping_add(d.w[t * c + ch] as i32));
                sc[k % 2][k / 2] = super::requant_scale(d.xq.scale, super::weight_scale(d.w_scales, ch), d.y.scale);
                st[k % 2][k / 2] = d.bias.map_or(0, |b| b[ch]).wrapping_sub(zp.wrapping_mul(sum));
            }
            for h in 0..2 {
                scale[j][h] = _mm512_loadu_ps(sc[h].as_ptr());
                start[j][h] = _mm512_loadu_si512(st[h].as_ptr().cast());
            }
            for (t, wt) in wt.iter_mut().enumerate().take(taps) {
                let w = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(masks[j], d.w.as_ptr().add(t * c + c0)));
                wt[j] = [
                    _mm512_maskz_mov_epi16(0x5555_5555, w),
                    _mm512_maskz_mov_epi16(0xAAAA_AAAA, w),
                ];
            }
        }
    }
    // Each tap's offset from its window's first input, and the outputs
    // whose windows lie inside the input (no tap in the padding).
    let mut off = [0usize; super::DEPTHWISE_TAPS];
    for (t, o) in off.iter_mut().enumerate().take(taps) {
        let (ky, kx) = (t / win.kernel_w, t % win.kernel_w);
        *o = (ky * win.dilation_h * win.in_w + kx * win.dilation_w) * c;
    }
    let (inner_y, inner_x) = (win.inner_rows(), win.inner_cols());
    let mut ptr = [pad.as_ptr(); super::DEPTHWISE_TAPS];
    let mut pixel = 0;
    for row in rows.0..rows.1 {
        let (n, oy) = (row / win.out_h, row % win.out_h);
        for ox in 0..win.out_w {
            if inner_y.contains(&oy) && inner_x.contains(&ox) {
                let (iy, ix) = (oy * win.stride_h - win.pad_top, ox * win.stride_w - win.pad_left);
                let first = ((n * win.in_h + iy) * win.in_w + ix) * c + cb;
                for (p, &o) in ptr.iter_mut().zip(&off[..taps]) {
                    // SAFETY: the window lies inside the input.
                    *p = unsafe { x.as_ptr().add(first + o) };
                }
            } else {
                for (t, p) in ptr.iter_mut().enumerate().take(taps) {
                    let (iy, ix) = (win.in_row(oy, t / win.kernel_w), win.in_col(ox, t % win.kernel_w));
                    *p = match (iy, ix) {
                        // SAFETY: the pixel lies inside the input.
                        (Some(iy), Some(ix)) => unsafe {
                            x.as_ptr().add(((n * win.in_h + iy) * win.in_w + ix) * c + cb)
                        },
                        _ => pad.as_ptr(),
                    };
                }
            }
            // SAFETY: every pointer of `ptr` has the pass's channels (or
            // is the zero-point row, of 32 · DW_VECTORS bytes); the output
            // pixel lies within `out`, as asserted by `depthwise`.
            unsafe {
                let load = |mask: __mmask32, p: *const i8| match FULL {
                    true => _mm256_loadu_si256(p.cast()),
                    false => _mm256_maskz_loadu_epi8(mask, p),
                };
                // Two sets of sums, even and odd taps, to overlap their
                // latency; each [vector][parity].
                let (mut a, mut b) = (start, [[_mm512_setzero_si512(); 2]; NV]);
                let mut t = 0;
                while t + 1 < taps {
                    for j in 0..NV {
                        let xa = _mm512_cvtepi8_epi16(load(masks[j], ptr[t].add(32 * j)));
                        let xb = _mm512_cvtepi8_epi16(load(masks[j], ptr[t + 1].add(32 * j)));
                        for h in 0..2 {
                            a[j][h] = _mm512_dpwssd_epi32(a[j][h], xa, wt[t][j][h]);
                            b[j][h] = _mm512_dpwssd_epi32(b[j][h], xb, wt[t + 1][j][h]);
                        }
                    }
                    t += 2;
                }
                if t < taps {
                    for j in 0..NV {
                        let xa = _mm512_cvtepi8_epi16(load(masks[j], ptr[t].add(32 * j)));
                        for h in 0..2 {
                            a[j][h] = _mm512_dpwssd_epi32(a[j][h], xa, wt[t][j][h]);
                        }
                    }
                }
                for j in 0..NV {
                    let [e, o] = [0, 1].map(|h| r.apply(_mm512_add_epi32(a[j][h], b[j][h]), scale[j][h]));
                    // Back in channel order: even, odd, even, ...
                    let v = _mm256_set_m128i(_mm_unpackhi_epi8(e, o), _mm_unpacklo_epi8(e, o));
                    _mm256_mask_storeu_epi8(out.as_mut_ptr().add(pixel * c + cb + 32 * j), masks[j], v);
                }
            }
            pixel += 1;
        }
    }
}
