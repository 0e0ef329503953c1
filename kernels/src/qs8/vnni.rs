//! The packed layers (see [`super::packed`]) on AVX-512 VNNI: each
//! instruction multiplies a broadcast quad of inputs (flipped to
//! unsigned) into the 16 sums of a block, for [`ROWS`] rows at once (7
//! for a 7 × 7 image's 49);
//! the sums are requantized 16 at a time in the scalar kernels' `f32`
//! steps.
use super::packed::{bytes, BlockParams, Job, Out, Source, COLS, MAX_TAPS};
use super::tiles::{for_each_tile, quad, Tile, PAD_ROW};
use super::{Depthwise, DwTaps, Inside, Listed, Output, TapPointers};
use core::arch::x86_64::*;

/// Rows summed at once (each one accumulator).
const ROWS: usize = 8;

pub(crate) fn available() -> bool {
    crate::cpu::has_avx512_vnni()
}

/// Weight bytes a pass over the rows reads (their blocks stay in L2).
const PASS_BYTES: usize = 256 * 1024;

/// # Safety
/// The CPU must have AVX-512 F, BW, VL and VNNI ([`available`]). The layer must fit the tiles
/// ([`tiles::fits`](super::tiles::fits), asserted).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn run(job: &Job<'_>, out: &mut Out<'_>) {
    if let Some(per) = narrow_groups(job) {
        // SAFETY: as vouched for; `narrow_groups` checked the shape.
        return unsafe {
            match sevens(job.rows - job.first) {
                true => narrow::<7>(job, out, per),
                false => narrow::<ROWS>(job, out, per),
            }
        };
    }
    // SAFETY: as vouched for.
    unsafe {
        match job.rows - job.first {
            1 => tiles::<1>(job, out),
            rows if sevens(rows) => tiles::<7>(job, out),
            _ => tiles::<ROWS>(job, out),
        }
    }
}

/// Whether `rows` go in tiles of 7 rather than [`ROWS`]: a multiple of 7
/// for which tiles of 8 would sum idle rows, a tenth as many as the rows
/// or more (a 7 × 7 image's 49 rows: seven tiles of 8 sum 56).
fn sevens(rows: usize) -> bool {
    let idle = rows.div_ceil(ROWS) * ROWS - rows;
    rows.is_multiple_of(7) && 10 * idle >= rows
}

/// [`run`]'s regular path, `R` rows a tile. Not inlined: each height a
/// function of its own, where inlined into `run` the small-K layers ran
/// 2–3 % slower (docs/performance-log.md).
///
/// # Safety
/// As for [`run`].
#[inline(never)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tiles<const R: usize>(job: &Job<'_>, out: &mut Out<'_>) {
    let l = &job.layout;
    let packed = bytes(job.packed);
    let pad = [job.xq.zero_point as i8; PAD_ROW];
    for_each_tile::<R>(job, PASS_BYTES, &pad, |t| {
        let mut i = 0;
        // One row (a fully connected layer's, a squeeze-excitation's):
        // eight blocks at a time, eight sums in flight where a pair keeps
        // two waiting on `VPDPBUSD`'s latency.
        if R == 1 {
            while i + 8 <= t.params.len() {
                // SAFETY: as for `run`.
                unsafe { blocks::<R, 8>(job, out, t, i) };
                i += 8;
            }
        }
        // Blocks two at a time: 16 sums in flight, enough to hide
        // `VPDPBUSD`'s latency (8, one block's, are not); an odd last
        // block alone.
        while i < t.params.len() {
            let b = t.blocks.start + i;
            // The pass's first tile meets each block's weights first (in
            // memory, a model's being larger than the caches): it asks
            // for the next pair's before it sums this one. Not when that
            // tile is the only one (a fully connected layer's row): the
            // weights then stream past once, and a burst of requests
            // would only queue ahead of the pair's own.
            if t.r0 == job.first && job.rows - job.first > R {
                for next in (b + 2..b + 4).filter(|&n| n < t.blocks.start + t.params.len()) {
                    crate::x86::prefetch_bytes(&l.block(packed, t.g, next)[4 * COLS..]);
                }
            }
            // SAFETY: as for `run`.
            unsafe {
                match i + 1 < t.params.len() {
                    true => blocks::<R, 2>(job, out, t, i),
                    false => blocks::<R, 1>(job, out, t, i),
                }
            }
            i += 2;
        }
    });
}

/// Sums and stores tile `t`'s `B` blocks from its `i`-th.
///
/// # Safety
/// As for [`run`]; `t` comes from [`for_each_tile`] on `job`, and holds
/// `B` blocks from `i`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn blocks<const R: usize, const B: usize>(job: &Job<'_>, out: &mut Out<'_>, t: &Tile<'_, R>, i: usize) {
    let l = &job.layout;
    let packed = bytes(job.packed);
    let b = t.blocks.start + i;
    let quads: [&[u8]; B] = core::array::from_fn(|k| &l.block(packed, t.g, b + k)[4 * COLS..]);
    let start: [[__m512i; R]; B] = core::array::from_fn(|k| starts::<R>(&t.params[i + k]));
    // SAFETY: as vouched for; each block holds `taps` times `gin / 4`
    // rounded up quads.
    let acc = unsafe {
        match t.whole {
            true => tile::<R, B, true>(t.x, l.gin, quads, start),
            false => tile::<R, B, false>(t.x, l.gin, quads, start),
        }
    };
    for (k, acc) in acc.iter().enumerate() {
        // SAFETY: as for `run`.
        unsafe {
            store(
                &acc[..t.rows],
                &t.params[i + k],
                job.y,
                out,
                t.r0,
                t.g * l.gout + (b + k) * COLS,
            )
        };
    }
}

/// Weight vectors of a narrow-group layer ([`narrow`]) kept at once (on
/// the stack, 16 KiB), and the most vectors of groups among them.
const NARROW_WEIGHTS: usize = 256;
const NARROW_VECTORS: usize = 32;

/// How many groups share a vector in [`narrow`], if `job` is a grouped
/// convolution of fewer than 16 outputs a group (RegNet's 8) whose
/// groups' inputs, whole quads, fit 64 bytes for a vector's groups.
fn narrow_groups(job: &Job<'_>) -> Option<usize> {
    let l = &job.layout;
    let per = COLS / l.gout.max(1);
    let fits = l.groups > 1
        && l.gout < COLS
        && COLS.is_multiple_of(l.gout)
        && l.gin.is_multiple_of(4)
        && per * l.gin <= 64
        && l.groups * l.gin <= PAD_ROW
        && l.taps <= MAX_TAPS
        && l.taps * (l.gin / 4) <= NARROW_WEIGHTS
        && job.blocks == (0, 1)
        && matches!(job.source, Source::Conv { .. });
    fits.then_some(per)
}

/// A grouped convolution of narrow groups ([`narrow_groups`]): `per`
/// groups side by side in the 16 lanes of one set of sums, so that no
/// lane sums zeros (one group a block would leave half of them idle
/// with 8 outputs a group). For each row and tap, a vector's groups'
/// inputs are loaded at once (one masked load: 16 bytes for RegNet's two
/// groups of 8), flipped to unsigned (`x + 128`), and each quad moved to
/// its group's lanes by a permutation, then multiplied by the signed
/// weights: `Σ (x + 128) · w`, less `128 · Σ w` (folded into the
/// offsets), is the same exact sum as the other paths take. The rows go
/// a tile at a time over as many vectors of groups as
/// [`NARROW_WEIGHTS`] holds, so that each tile's taps are found once.
///
/// # Safety
/// As for [`run`].
#[inline(never)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn narrow<const R: usize>(job: &Job<'_>, out: &mut Out<'_>, per: usize) {
    let l = &job.layout;
    let packed = bytes(job.packed);
    let (qpt, gout, gin) = (l.gin / 4, l.gout, l.gin);
    let quads = l.taps * qpt;
    let input = job.source.input();
    // A row of zero points for pixels in the padding, as long as a pixel.
    let pad = [job.xq.zero_point as i8; PAD_ROW];
    let r = Requant::new(job.y);
    // Quad `q` of each lane's group: lane `j` is output `j % gout` of the
    // vector's group `j / gout`, whose inputs start at dword
    // `(j / gout) · qpt`.
    let mut idx = [_mm512_setzero_si512(); 16];
    for (q, idx) in idx.iter_mut().enumerate().take(qpt) {
        let lanes: [i32; 16] = core::array::from_fn(|j| ((j / gout) * qpt + q) as i32);
        // SAFETY: a 16-lane load of an array of 16.
        *idx = unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) };
    }
    let vectors = l.groups.div_ceil(per);
    let chunk = (NARROW_WEIGHTS / quads).clamp(1, NARROW_VECTORS);
    let mut x = [[core::ptr::null::<i8>(); R]; MAX_TAPS];
    let mut w = [[0u8; 64]; NARROW_WEIGHTS];
    let mut offset = [[0i32; COLS]; NARROW_VECTORS];
    let mut scale = [[1.0f32; COLS]; NARROW_VECTORS];
    for v0 in (0..vectors).step_by(chunk) {
        let v1 = vectors.min(v0 + chunk);
        // The vectors' weights (signed again), offsets and scales.
        for v in v0..v1 {
            let (w, offset, scale) = (
                &mut w[(v - v0) * quads..][..quads],
                &mut offset[v - v0],
                &mut scale[v - v0],
            );
            for wb in w.iter_mut() {
                wb.fill(0);
            }
            for gi in 0..per.min(l.groups - v * per) {
                let g = v * per + gi;
                let block = l.block(packed, g, 0);
                let p = BlockParams::new(job, block, g, 0);
                for c in 0..gout {
                    let j = gi * gout + c;
                    offset[j] = p.flipped[c];
                    scale[j] = p.scale[c];
                }
                // A quad's weights of the group's outputs lie side by
                // side in the block (4 bytes an output), as in the
                // group's lanes: one run of `4 · gout` bytes a quad, not
                // a byte at a time (which cost RegNet's 7 × 7 layers a
                // quarter of their time, on every thread).
                for (tq, wb) in w.iter_mut().enumerate() {
                    let at = 4 * COLS + tq * COLS * 4;
                    let lanes = &mut wb[4 * gi * gout..4 * (gi + 1) * gout];
                    for (d, &s) in lanes.iter_mut().zip(&block[at..at + 4 * gout]) {
                        *d = s ^ 0x80;
                    }
                }
            }
        }
        for r0 in (job.first..job.rows).step_by(R) {
            let rows = R.min(job.rows - r0);
            // Each tap's pixel, its first channel (the padding's row of
            // zero points is a pixel long).
            // No pixel starts past the furthest: one check covers all
            // (none is read before it).
            if let Some(at) = job.source.point::<R, i8>(l.taps, r0, rows, 0, gin, &pad, &mut x) {
                assert!(at + l.groups * gin <= input.len());
            }
            for v in v0..v1 {
                let n = per.min(l.groups - v * per);
                let in_mask = u64::MAX >> (64 - n * gin);
                let out_mask = (u32::MAX >> (32 - n * gout)) as __mmask16;
                let first = v * per * gin;
                let w = &w[(v - v0) * quads..][..quads];
                // SAFETY: every pointer of `x`'s first `taps` has a
                // pixel's channels (asserted above, or the pixel of zero
                // points), of which the masked loads read the `n` groups'
                // inputs.
                let acc = unsafe {
                    match qpt {
                        2 => narrow_sums::<R, 2>(&x[..l.taps], first, in_mask, &idx, w),
                        _ => narrow_sums::<R, 0>(&x[..l.taps], first, in_mask, &idx[..qpt], w),
                    }
                };
                // SAFETY: 16-lane loads of arrays of 16.
                let (off, sc) = unsafe {
                    (
                        _mm512_loadu_si512(offset[v - v0].as_ptr().cast()),
                        _mm512_loadu_ps(scale[v - v0].as_ptr()),
                    )
                };
                for (i, &a) in acc.iter().enumerate().take(rows) {
                    let o = out.at(r0 + i, v * per * gout, n * gout);
                    // SAFETY: a store of `n · gout` bytes into a slice of
                    // that length.
                    unsafe { _mm_mask_storeu_epi8(o.as_mut_ptr(), out_mask, r.apply(_mm512_add_epi32(a, off), sc)) };
                }
            }
        }
    }
}

/// The raw sums of [`narrow`]'s `R` rows for one vector of groups:
/// for each tap, each row's inputs loaded once, then for each quad its
/// weights loaded once for all rows, the sums kept in registers. `Q`: the
/// quads a tap (RegNet's 2, unrolled), or 0 for `idx.len()`.
///
/// # Safety
/// As for [`run`]; each pointer of `x` must be readable where `in_mask`
/// selects from `first`; `w` holds `x.len()` taps of quads.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn narrow_sums<const R: usize, const Q: usize>(
    x: &[[*const i8; R]],
    first: usize,
    in_mask: u64,
    idx: &[__m512i],
    w: &[[u8; 64]],
) -> [__m512i; R] {
    let qpt = if Q > 0 { Q } else { idx.len() };
    assert!(idx.len() >= qpt && w.len() >= x.len() * qpt);
    let flip = _mm512_set1_epi8(-128);
    let mut acc = [_mm512_setzero_si512(); R];
    for (t, xt) in x.iter().enumerate() {
        // SAFETY: as vouched for.
        let xv: [__m512i; R] = core::array::from_fn(|r| unsafe {
            _mm512_xor_si512(_mm512_maskz_loadu_epi8(in_mask, xt[r].add(first)), flip)
        });
        for q in 0..qpt {
            // SAFETY: each of `w` is 64 bytes.
            let wv = unsafe { _mm512_loadu_si512(w[t * qpt + q].as_ptr().cast()) };
            for r in 0..R {
                acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_permutexvar_epi32(idx[q], xv[r]), wv);
            }
        }
    }
    acc
}

/// `start` plus the sums `Σ (x + 128) · w` of `R` rows with `B` blocks'
/// quads, each quad of inputs broadcast once for all of them. Both are
/// flipped as they are loaded (`^ 0x80`): the weights, stored plus 128,
/// back to signed, and the inputs to unsigned, as the instruction takes
/// them. The flips cost nothing beside the multiplications (Zen 5), where
/// summing each row's inputs, to take out what `+ 128` on the weights
/// added, cost a tenth of a 3 × 3 layer's time. `WHOLE`: the
/// last quad of each segment is read whole (its bytes past `gin` meet
/// zero weights), else zero-padded.
///
/// # Safety
/// As for [`run`]; each pointer of `x` must be readable for `gin` bytes
/// (`gin` rounded up to a quad if `WHOLE`), and each of `quads` must hold
/// `x.len()` taps of `gin.div_ceil(4)` quads.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile<const R: usize, const B: usize, const WHOLE: bool>(
    x: &[[*const u8; R]],
    gin: usize,
    quads: [&[u8]; B],
    start: [[__m512i; R]; B],
) -> [[__m512i; R]; B] {
    let qpt = gin.div_ceil(4);
    assert!(quads.iter().all(|q| q.len() >= x.len() * qpt * 4 * COLS));
    let mut acc = start;
    let flip = _mm512_set1_epi8(-128);
    let full = if WHOLE { qpt } else { gin / 4 };
    // SAFETY: reads within the bounds asserted and vouched for.
    unsafe {
        for (t, xt) in x.iter().enumerate() {
            let w = quads.map(|q| q.as_ptr().add(t * qpt * 4 * COLS));
            for q in 0..full {
                let wq = w.map(|w| _mm512_xor_si512(_mm512_loadu_si512(w.add(q * 4 * COLS).cast()), flip));
                for r in 0..R {
                    let xq = flipped_quad(xt[r].add(4 * q), flip);
                    for k in 0..B {
                        acc[k][r] = _mm512_dpbusd_epi32(acc[k][r], xq, wq[k]);
                    }
                }
            }
            if full < qpt {
                let wq = w.map(|w| _mm512_xor_si512(_mm512_loadu_si512(w.add(full * 4 * COLS).cast()), flip));
                for r in 0..R {
                    // Flipped before the broadcast: flipping the broadcast
                    // of these bytes sent LLVM 22's legalizer into an
                    // endless loop under `-C target-cpu=native`.
                    let xq = _mm512_set1_epi32(quad(xt[r], full, gin) ^ 0x8080_8080u32 as i32);
                    for k in 0..B {
                        acc[k][r] = _mm512_dpbusd_epi32(acc[k][r], xq, wq[k]);
                    }
                }
            }
        }
    }
    acc
}

/// The quad of inputs at `p` broadcast to every lane, flipped (`^ 0x80`):
/// one instruction, `VPXORD` with a broadcast operand. Written out,
/// because the compiler moves the flip before the broadcast, which then
/// takes a shuffle from a register (3 instructions, the 3 × 3 layers 3 %
/// slower than without flipping).
///
/// # Safety
/// `p` must be readable for 4 bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn flipped_quad(p: *const u8, flip: __m512i) -> __m512i {
    let v: __m512i;
    // SAFETY: reads the 4 bytes at `p`, as vouched for; writes only `v`.
    unsafe {
        core::arch::asm!(
            "vpxord {v}, {flip}, dword ptr [{p}]{{1to16}}",
            v = lateout(zmm_reg) v,
            flip = in(zmm_reg) flip,
            p = in(reg) p,
            options(pure, readonly, nostack, preserves_flags),
        )
    };
    v
}

/// Where a block's sums start in each row: its offsets for flipped
/// inputs ([`BlockParams::flipped`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
fn starts<const R: usize>(p: &BlockParams) -> [__m512i; R] {
    // SAFETY: a load of the 16 lanes of an array of 16.
    [unsafe { _mm512_loadu_si512(p.flipped.as_ptr().cast()) }; R]
}

/// Requantizes each row's sums (started at [`starts`]) into its `p.cols`
/// outputs from `c`, rows from `r0`.
///
/// # Safety
/// As for [`run`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn store(acc: &[__m512i], p: &BlockParams, y: &Output, out: &mut Out<'_>, r0: usize, c: usize) {
    // SAFETY: loads of the 16 lanes of arrays of 16; stores of `p.cols`
    // bytes into slices of that length.
    unsafe {
        let scale = _mm512_loadu_ps(p.scale.as_ptr());
        let r = Requant::new(y);
        let mask = (u32::MAX >> (32 - p.cols)) as __mmask16;
        for (i, &a) in acc.iter().enumerate() {
            let o = out.at(r0 + i, c, p.cols);
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
        _mm512_cvtepi32_epi8(_mm512_add_epi32(self.rounded(acc, scale), self.zero_point))
    }

    /// [`Self::apply`] before the zero point is added: the clamped,
    /// rounded values, within `qmin - zero_point ..= qmax - zero_point`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn rounded(&self, acc: __m512i, scale: __m512) -> __m512i {
        let v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale);
        let v = _mm512_min_ps(_mm512_max_ps(v, self.lo), self.hi);
        // Rounding half to even in the conversion is `round_even`'s
        // magic-number addition (|v| < 2^22 after the clamp).
        _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v)
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
    if d.g.in_c > 32 {
        // SAFETY: as vouched for.
        return unsafe { depthwise_quads(d, rows, out) };
    }
    d.assert_fits(rows, out);
    let c = d.g.in_c;
    let pad = [d.xq.zero_point as i8; 32 * DW_VECTORS];
    let at = DwTaps::new(d, &pad);
    let full = c.is_multiple_of(32);
    super::dw_passes(c, 32, DW_VECTORS, |nv, cb| {
        // SAFETY: as vouched for and asserted; `nv` vectors from `cb`
        // hold channels.
        unsafe {
            match (nv, full) {
                (1, false) => dw_pass::<1, false>(d, &at, rows, cb, out),
                (_, false) => dw_pass::<2, false>(d, &at, rows, cb, out),
                (1, true) => dw_pass::<1, true>(d, &at, rows, cb, out),
                (_, true) => dw_pass::<2, true>(d, &at, rows, cb, out),
            }
        }
    });
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
/// As for [`depthwise`], whose asserts this relies on (`at` its taps'
/// pointers); `cb` lies within the channels and `NV` vectors from it
/// reach the last at most.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
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
                (sc[k % 2][k / 2], st[k % 2][k / 2]) = d.folded(c0 + k);
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
    let mut ptr = [core::ptr::null(); super::DEPTHWISE_TAPS];
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
                                &masks,
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
                    // channels (or is the zero-point row, of 32 ·
                    // DW_VECTORS bytes); the output pixel lies within
                    // `out`, as asserted by `depthwise`.
                    unsafe {
                        dw_pixel::<NV, FULL>(Listed(&ptr), taps, &masks, &start, &wt, &scale, &r, out, pixel * c + cb)
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
/// channels readable, and `out[at..]` holds them.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn dw_pixel<const NV: usize, const FULL: bool>(
    ptr: impl TapPointers,
    taps: usize,
    masks: &[__mmask32; NV],
    start: &[[__m512i; 2]; NV],
    wt: &[[[__m512i; 2]; NV]; super::DEPTHWISE_TAPS],
    scale: &[[__m512; 2]; NV],
    r: &Requant,
    out: &mut [i8],
    at: usize,
) {
    // SAFETY: as the caller vouches.
    unsafe {
        // Two sets of sums, even and odd taps, to overlap their latency;
        // each [vector][parity].
        let (mut a, mut b) = (*start, [[_mm512_setzero_si512(); 2]; NV]);
        let mut t = 0;
        while t + 1 < taps {
            for j in 0..NV {
                let xa = _mm512_cvtepi8_epi16(dw_load::<FULL>(masks[j], ptr.at(t).add(32 * j)));
                let xb = _mm512_cvtepi8_epi16(dw_load::<FULL>(masks[j], ptr.at(t + 1).add(32 * j)));
                for h in 0..2 {
                    a[j][h] = _mm512_dpwssd_epi32(a[j][h], xa, wt[t][j][h]);
                    b[j][h] = _mm512_dpwssd_epi32(b[j][h], xb, wt[t + 1][j][h]);
                }
            }
            t += 2;
        }
        if t < taps {
            for j in 0..NV {
                let xa = _mm512_cvtepi8_epi16(dw_load::<FULL>(masks[j], ptr.at(t).add(32 * j)));
                for h in 0..2 {
                    a[j][h] = _mm512_dpwssd_epi32(a[j][h], xa, wt[t][j][h]);
                }
            }
        }
        for j in 0..NV {
            let e = r.apply(_mm512_add_epi32(a[j][0], b[j][0]), scale[j][0]);
            let o = r.apply(_mm512_add_epi32(a[j][1], b[j][1]), scale[j][1]);
            // Back in channel order: even, odd, even, ...
            let v = _mm256_set_m128i(_mm_unpackhi_epi8(e, o), _mm_unpacklo_epi8(e, o));
            _mm256_mask_storeu_epi8(out.as_mut_ptr().add(at + 32 * j), masks[j], v);
        }
    }
}

/// Vectors of 64 channels a pass of [`depthwise_quads`] takes at most.
const QUAD_VECTORS: usize = 2;

/// [`depthwise`] four taps a `VPDPBUSD`: each 32-bit lane sums four taps
/// of one channel. The inputs, made unsigned by flipping their top bit
/// (`x + 128`; the `128 · Σ w` this adds is taken from the sums' start),
/// are interleaved by four bytes per lane with two rounds of unpacks,
/// which leave the channels of each 128-bit lane in four sets of four;
/// the weights are laid out likewise, and the saturating packs of the
/// requantization put the channels back in order. The last quad of taps
/// is padded with taps of zero weights (reading tap 0 again).
///
/// # Safety
/// As for [`depthwise`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn depthwise_quads(d: &Depthwise<'_>, rows: (usize, usize), out: &mut [i8]) {
    d.assert_fits(rows, out);
    let c = d.g.in_c;
    let pad = [d.xq.zero_point as i8; 64 * QUAD_VECTORS];
    let at = DwTaps::new(d, &pad);
    // A last 32 channels or fewer go two taps a vector (`dw_pass`), not in
    // a vector of 64 mostly idle: MobileNetV2's 144 and 96 channels would
    // cost 192 and 128 in quads alone.
    let rest = c % 64;
    let quads = if (1..=32).contains(&rest) { c - rest } else { c };
    if quads < c {
        // SAFETY: as vouched for and asserted; channels `quads..c` make
        // one vector of 32 at most, whole when 32.
        unsafe {
            match rest == 32 {
                true => dw_pass::<1, true>(d, &at, rows, quads, out),
                false => dw_pass::<1, false>(d, &at, rows, quads, out),
            }
        }
    }
    let full = quads.is_multiple_of(64);
    super::dw_passes(quads, 64, QUAD_VECTORS, |nv, cb| {
        // SAFETY: as vouched for and asserted; `nv` vectors from `cb`
        // hold channels.
        unsafe {
            match (nv, full) {
                (1, false) => quad_pass::<1, false>(d, &at, rows, cb, out),
                (_, false) => quad_pass::<2, false>(d, &at, rows, cb, out),
                (1, true) => quad_pass::<1, true>(d, &at, rows, cb, out),
                (_, true) => quad_pass::<2, true>(d, &at, rows, cb, out),
            }
        }
    });
}

/// Quads of taps [`depthwise_quads`] takes at most.
const TAP_QUADS: usize = super::DEPTHWISE_TAPS.div_ceil(4);

/// One pass of [`depthwise_quads`]: channels `cb..` in `NV` vectors of
/// 64 (the last may be partial, unless `FULL`).
///
/// # Safety
/// As for [`depthwise_quads`], whose asserts this relies on; `cb` lies
/// within the channels and `NV` vectors from it reach the last at most.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn quad_pass<const NV: usize, const FULL: bool>(
    d: &Depthwise<'_>,
    at: &DwTaps<'_>,
    rows: (usize, usize),
    cb: usize,
    out: &mut [i8],
) {
    let (win, c) = (&d.g.window, d.g.in_c);
    let taps = win.kernel_h * win.kernel_w;
    let quads = taps.div_ceil(4);
    let r = Requant::new(d.y);
    let zp = _mm512_set1_epi16(d.y.zero_point as i16);
    let mut masks = [0 as __mmask64; NV];
    // [vector][set]: set `k` holds channels `16 l + 4 k ..` of lane `l`.
    let mut scale = [[_mm512_setzero_ps(); 4]; NV];
    let mut start = [[_mm512_setzero_si512(); 4]; NV];
    let mut wt = [[[_mm512_setzero_si512(); 4]; NV]; TAP_QUADS];
    for j in 0..NV {
        let c0 = cb + 64 * j;
        let lanes = 64.min(c - c0);
        masks[j] = u64::MAX >> (64 - lanes);
        // The weights interleaved as the inputs are (`quad_sets`), taps
        // past the last zero, and each channel's sum of them: vector work,
        // where byte by byte it took a few microseconds a call, once a
        // band of a few rows in a chain.
        let mut sums = [_mm512_setzero_si512(); 4];
        // SAFETY: masked loads of channels `c0..c0 + lanes` of taps within
        // the weights (`assert_fits`).
        unsafe {
            let ones = _mm512_set1_epi8(1);
            for (q, wt) in wt.iter_mut().enumerate().take(quads) {
                let rows: [__m512i; 4] = core::array::from_fn(|i| match 4 * q + i < taps {
                    true => _mm512_maskz_loadu_epi8(masks[j], d.w.as_ptr().add((4 * q + i) * c + c0)),
                    false => _mm512_setzero_si512(),
                });
                wt[j] = quad_sets(rows);
                for (s, w) in sums.iter_mut().zip(&wt[j]) {
                    *s = _mm512_dpbusd_epi32(*s, ones, *w);
                }
            }
        }
        let mut sum = [[0i32; 16]; 4];
        // SAFETY: stores into arrays of 16 lanes.
        unsafe {
            for (s, v) in sum.iter_mut().zip(&sums) {
                _mm512_storeu_si512(s.as_mut_ptr().cast(), *v);
            }
        }
        let (mut sc, mut st) = ([[1.0f32; 16]; 4], [[0i32; 16]; 4]);
        for ch in 0..lanes {
            // Channel `16 l + 4 k + m` is lane `4 l + m` of set `k`.
            let (l, k, m) = (ch / 16, ch % 16 / 4, ch % 4);
            let sum = sum[k][4 * l + m];
            let (scale, folded) = d.folded_with(c0 + ch, sum);
            sc[k][4 * l + m] = scale;
            st[k][4 * l + m] = folded.wrapping_sub(sum.wrapping_mul(128));
        }
        // SAFETY: loads of arrays of 16 lanes.
        unsafe {
            for k in 0..4 {
                scale[j][k] = _mm512_loadu_ps(sc[k].as_ptr());
                start[j][k] = _mm512_loadu_si512(st[k].as_ptr().cast());
            }
        }
    }
    let mut ptr = [core::ptr::null(); TAP_QUADS * 4];
    let mut off = [0usize; TAP_QUADS * 4];
    off[..taps].copy_from_slice(&at.off[..taps]);
    let mut pixel = 0;
    for row in rows.0..rows.1 {
        let (n, oy) = (row / win.out_h, row % win.out_h);
        let mut ox = 0;
        while ox < win.out_w {
            // A run of windows inside the input steps one pointer; the
            // others look each tap up. Padding taps read tap 0 again.
            let run = match at.inside(n, oy, ox, cb) {
                Some((first, run)) => {
                    let step = win.stride_w * c;
                    for i in 0..run {
                        let base = first.wrapping_add(i * step);
                        // SAFETY: as below; each tap of a window inside
                        // the input is in `x`.
                        unsafe {
                            quad_pixel::<NV, FULL>(
                                Inside(base, &off),
                                quads,
                                &masks,
                                &start,
                                &wt,
                                &scale,
                                &r,
                                zp,
                                out,
                                (pixel + i) * c + cb,
                            )
                        };
                    }
                    run
                }
                None => {
                    let listed: &mut [_; super::DEPTHWISE_TAPS] =
                        (&mut ptr[..super::DEPTHWISE_TAPS]).try_into().expect("taps");
                    at.pointers(n, oy, ox, cb, listed);
                    for t in taps..4 * quads {
                        ptr[t] = ptr[0];
                    }
                    // SAFETY: every pointer of `ptr` has the pass's
                    // channels (or is the zero-point row, of 64 ·
                    // QUAD_VECTORS bytes); the output pixel lies within
                    // `out`, as asserted by `depthwise_quads`.
                    unsafe {
                        quad_pixel::<NV, FULL>(
                            Quads(&ptr),
                            quads,
                            &masks,
                            &start,
                            &wt,
                            &scale,
                            &r,
                            zp,
                            out,
                            pixel * c + cb,
                        )
                    };
                    1
                }
            };
            ox += run;
            pixel += run;
        }
    }
}

/// One output pixel of a [`quad_pass`], its taps read from `ptr`, its
/// bytes written at `out[at..]`.
///
/// # Safety
/// As for [`quad_pass`]: each of the first `4 · quads` taps has the
/// pass's channels readable, and `out[at..]` holds them.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn quad_pixel<const NV: usize, const FULL: bool>(
    ptr: impl TapPointers,
    quads: usize,
    masks: &[__mmask64; NV],
    start: &[[__m512i; 4]; NV],
    wt: &[[[__m512i; 4]; NV]; TAP_QUADS],
    scale: &[[__m512; 4]; NV],
    r: &Requant,
    zp: __m512i,
    out: &mut [i8],
    at: usize,
) {
    // SAFETY: as the caller vouches.
    unsafe {
        let flip = _mm512_set1_epi8(-128);
        let mut acc = *start;
        for (q, wt) in wt.iter().enumerate().take(quads) {
            for j in 0..NV {
                let mut x = [flip; 4];
                for (i, x) in x.iter_mut().enumerate() {
                    let p = ptr.at(4 * q + i).add(64 * j);
                    let v = match FULL {
                        true => _mm512_loadu_si512(p.cast()),
                        false => _mm512_maskz_loadu_epi8(masks[j], p),
                    };
                    *x = _mm512_xor_si512(v, flip);
                }
                let sets = quad_sets(x);
                for k in 0..4 {
                    acc[j][k] = _mm512_dpbusd_epi32(acc[j][k], sets[k], wt[j][k]);
                }
            }
        }
        for j in 0..NV {
            let mut v = acc[j];
            for (v, s) in v.iter_mut().zip(&scale[j]) {
                *v = r.rounded(*v, *s);
            }
            // Channels 16 l + 0..8, then 8..16, in 16 bits; then all 16 of
            // each lane in order, in bytes.
            let lo = _mm512_adds_epi16(_mm512_packs_epi32(v[0], v[1]), zp);
            let hi = _mm512_adds_epi16(_mm512_packs_epi32(v[2], v[3]), zp);
            let b = _mm512_packs_epi16(lo, hi);
            _mm512_mask_storeu_epi8(out.as_mut_ptr().add(at + 64 * j), masks[j], b);
        }
    }
}

/// Four taps' 64 channels interleaved into [`depthwise_quads`]' four sets
/// of sums: set `k` holds, in lane `4 l + m`, the four taps' bytes of
/// channel `16 l + 4 k + m`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
fn quad_sets(x: [__m512i; 4]) -> [__m512i; 4] {
    let (lo01, hi01) = (_mm512_unpacklo_epi8(x[0], x[1]), _mm512_unpackhi_epi8(x[0], x[1]));
    let (lo23, hi23) = (_mm512_unpacklo_epi8(x[2], x[3]), _mm512_unpackhi_epi8(x[2], x[3]));
    [
        _mm512_unpacklo_epi16(lo01, lo23),
        _mm512_unpackhi_epi16(lo01, lo23),
        _mm512_unpacklo_epi16(hi01, hi23),
        _mm512_unpackhi_epi16(hi01, hi23),
    ]
}

/// Taps listed one by one, padded to whole quads.
struct Quads<'a>(&'a [*const i8; TAP_QUADS * 4]);

impl TapPointers for Quads<'_> {
    #[inline(always)]
    fn at(&self, t: usize) -> *const i8 {
        self.0[t]
    }
}

/// 32 input bytes of a depthwise tap: unmasked when `FULL` (every vector
/// of the pass whole).
///
/// # Safety
/// The bytes `mask` selects from `p` (all 32 when `FULL`) are readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn dw_load<const FULL: bool>(mask: __mmask32, p: *const i8) -> __m256i {
    // SAFETY: as the caller vouches.
    unsafe {
        match FULL {
            true => _mm256_loadu_si256(p.cast()),
            false => _mm256_maskz_loadu_epi8(mask, p),
        }
    }
}
