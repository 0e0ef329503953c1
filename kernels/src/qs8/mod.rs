//! XNNPACK's statically quantized (QS8) arithmetic, for the int8 subgraphs
//! of ExecuTorch's XNNPACK delegate.
//!
//! A quantized tensor holds `q` with `real = scale · (q - zero_point)`.
//! Weights are symmetric (zero point 0), per tensor or per output channel;
//! biases are `i32` in units of `input_scale · weight_scale`. The results
//! must be XNNPACK's to the quantum, so each operator follows XNNPACK's own
//! formula (see `docs/xnnpack.md#quantized-subgraphs`): products accumulate
//! exactly in `i32` and are requantized in `f32`, rounding half to even.
use crate::nhwc::{Conv2dNhwc, Window2d};

#[cfg(target_arch = "x86_64")]
mod avx2;
mod chain;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon;
mod packed;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod sdot;
#[cfg(any(target_arch = "x86_64", all(target_arch = "aarch64", target_feature = "neon")))]
mod tiles;
#[cfg(target_arch = "x86_64")]
mod vnni;

pub use chain::{chain_scratch_len, conv2d_chain, ChainStage};
pub use packed::{pack_conv, pack_fully_connected, Layout};

/// A per-tensor quantization: `real = scale · (q - zero_point)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quant {
    pub scale: f32,
    pub zero_point: i32,
}

/// An output's quantization and its fused clamp, in quanta (`qmin ≤
/// qmax`, both within `i8`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Output {
    pub scale: f32,
    pub zero_point: i32,
    pub qmin: i32,
    pub qmax: i32,
}

impl Output {
    /// `acc · scale`, clamped to the output range less the zero point,
    /// rounded half to even, plus the zero point (XNNPACK's `fp32`
    /// requantization).
    #[inline(always)]
    pub fn requantize(&self, acc: i32, scale: f32) -> i8 {
        let lo = (self.qmin - self.zero_point) as f32;
        let hi = (self.qmax - self.zero_point) as f32;
        let v = (acc as f32 * scale).max(lo).min(hi);
        (round_even_i32(v) + self.zero_point) as i8
    }
}

/// Round half to even of a value of magnitude below 2^22 (`lrintf` in the
/// default rounding mode, by XNNPACK's magic-number addition).
#[inline(always)]
pub fn round_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

/// [`round_even`] as an integer, read from the bits of the sum with the
/// magic number (its exponent fixed, the integer in its low bits) rather
/// than converted: a float-to-int cast saturates, and the loops of
/// element-wise kernels that do one stay scalar (10× slower for a `mul`).
#[inline(always)]
pub fn round_even_i32(v: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0;
    ((v + MAGIC).to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32)
}

/// A node's float clamp bound in quanta of its output (`xnn_qs8_quantize`:
/// `lrintf(clamp(v / scale + zero_point, -128, 127))`; infinities saturate).
pub fn quantize_bound(v: f32, scale: f32, zero_point: i32) -> i32 {
    let q = (v / scale + zero_point as f32).clamp(-128.0, 127.0);
    libm::rintf(q) as i32
}

/// `input_scale · weight_scale / output_scale`, rounded to `f32` after
/// the product and after the quotient, as XNNPACK computes a channel's
/// requantization scale.
#[inline(always)]
pub fn requant_scale(input_scale: f32, weight_scale: f32, output_scale: f32) -> f32 {
    input_scale * weight_scale / output_scale
}

/// `out[i] = clamp(round_even(x[i] · (1 / scale)) + zero_point)` to `i8`
/// (XNNPACK's `f32 → qs8` convert multiplies by the reciprocal; NaN
/// becomes 127, as on x86). Large inputs (a 224 x 224 image) are split
/// in bands across threads.
pub fn quantize(x: &[f32], q: &Quant, out: &mut [i8]) {
    in_bands(x, out, &|x, piece| quantize_run(x, q, piece));
}

/// `run(x, out)` over the common length of `x` and `out`: in bands split
/// across threads when it is long enough (an element-wise map to `i8`).
fn in_bands<X: Sync>(x: &[X], out: &mut [i8], run: &(dyn Fn(&[X], &mut [i8]) + Sync)) {
    let n = out.len().min(x.len());
    let out = &mut out[..n];
    crate::parallel::for_each_band(
        out,
        n,
        1,
        crate::parallel::band_grain(1, 1),
        crate::parallel::local_bands_for(n),
        &|rows, piece| run(&x[rows], piece),
    );
}

fn quantize_run(x: &[f32], q: &Quant, out: &mut [i8]) {
    struct Work<'a>(&'a [f32], &'a Quant, &'a mut [i8]);
    impl crate::cpu::Vectorized for Work<'_> {
        type Output = ();
        #[inline(always)]
        fn run(self) {
            let Work(x, q, out) = self;
            let inv = 1.0 / q.scale;
            let (lo, hi) = ((-128 - q.zero_point) as f32, (127 - q.zero_point) as f32);
            for (o, &v) in out.iter_mut().zip(x) {
                // `min` takes `hi` for NaN: `f` is finite, within i32.
                let f = round_even((v * inv).min(hi).max(lo));
                // SAFETY: `f` is an integer in `lo..=hi`, both finite.
                *o = (unsafe { f.to_int_unchecked::<i32>() } + q.zero_point) as i8;
            }
        }
    }
    crate::cpu::with_best_isa(Work(x, q, out))
}

/// `out[i] = table[x[i] as u8]`: a function of one `i8` (a float
/// function between a dequantize and a quantize, tabulated by the
/// compiler). Large inputs are split in bands across threads.
pub fn lut(x: &[i8], table: &[i8; 256], out: &mut [i8]) {
    in_bands(x, out, &|x, piece| lut_run(x, table, piece));
}

fn lut_run(x: &[i8], table: &[i8; 256], out: &mut [i8]) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::has_avx512_vbmi() {
        // SAFETY: the CPU has AVX-512 F, BW and VBMI.
        return unsafe { lut_vbmi(x, table, out) };
    }
    for (o, &v) in out.iter_mut().zip(x) {
        *o = table[v as u8 as usize];
    }
}

/// [`lut`] 64 bytes at a time: two 128-entry permutations (the table's
/// halves, by each byte's low 7 bits), the byte's top bit choosing.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VBMI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn lut_vbmi(x: &[i8], table: &[i8; 256], out: &mut [i8]) {
    use core::arch::x86_64::*;
    let n = out.len().min(x.len());
    // SAFETY: 64-byte loads within the 256-byte table.
    let t: [__m512i; 4] = core::array::from_fn(|i| unsafe { _mm512_loadu_si512(table[64 * i..].as_ptr().cast()) });
    let mut i = 0;
    while i < n {
        let mask = u64::MAX >> (64 - (n - i).min(64));
        // SAFETY: the masked load and store touch bytes `i..n` only.
        unsafe {
            let v = _mm512_maskz_loadu_epi8(mask, x.as_ptr().add(i));
            let low = _mm512_permutex2var_epi8(t[0], v, t[1]);
            let high = _mm512_permutex2var_epi8(t[2], v, t[3]);
            let r = _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), low, high);
            _mm512_mask_storeu_epi8(out.as_mut_ptr().add(i), mask, r);
        }
        i += 64;
    }
}

/// `out[i] = (q[i] - zero_point) · scale` (XNNPACK's `qs8 → f32` convert).
pub fn dequantize(x: &[i8], q: &Quant, out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v as i32 - q.zero_point) as f32 * q.scale;
    }
}

/// Runs `job` into `out`, on the best path this CPU has. With threads,
/// each takes a share of the rows; a layer of too few rows to share them
/// evenly (a late layer's 7 × 7 pixels would split 32 and 17, a batch of
/// a few not at all) but enough work splits its outputs' blocks instead.
/// Either way every output is summed the same way whatever the number of
/// threads.
fn run_packed(job: &packed::Job<'_>, out: &mut [i8], out_stride: usize) {
    let l = &job.layout;
    let rows = job.rows - job.first;
    let split = crate::parallel::split_even(rows, PART_ROWS, ROW_GRAIN);
    let work = rows.saturating_mul(l.taps * l.gin).saturating_mul(l.gout);
    let threads = crate::parallel::threads();
    if threads > 1 && rows < 2 * PART_ROWS * threads && l.groups == 1 && work >= PART_WORK {
        let (b0, b1) = job.blocks;
        let blocks = crate::parallel::split(b1 - b0, 1);
        if blocks.parts() >= split.parts().max(2) {
            let len = out.len();
            // SAFETY: the parts write disjoint outputs (below) and read
            // none.
            let shared = unsafe { crate::parallel::Shared::new(out.as_mut_ptr()) };
            crate::parallel::run_parts(blocks.parts(), &|p| {
                let Some((a, b)) = blocks.range(p) else { return };
                let part = packed::Job {
                    blocks: (b0 + a, b0 + b),
                    ..*job
                };
                // SAFETY: part `p` writes only its blocks' outputs
                // (`COLS` each, the layer has one group) of every row,
                // which no other part writes or reads; `out` outlives the
                // parts.
                let mut out = unsafe {
                    packed::Out::part(
                        shared.get(),
                        len,
                        out_stride,
                        job.first,
                        ((b0 + a) * packed::COLS, (b0 + b) * packed::COLS),
                    )
                };
                run_rows(&part, &mut out);
            });
            return;
        }
    }
    if split.parts() <= 1 {
        return run_rows(job, &mut packed::Out::new(out, out_stride, job.first));
    }
    let len = out.len();
    // SAFETY: each part writes only its own rows' outputs, a contiguous
    // range of `out`, and reads nothing another part writes.
    let shared = unsafe { crate::parallel::Shared::new(out.as_mut_ptr()) };
    crate::parallel::run_parts(split.parts(), &|p| {
        let Some((a, b)) = split.range(p) else { return };
        let (start, end) = (a * out_stride, (b * out_stride).min(len));
        // SAFETY: as above; `start..end` lies within `out`.
        let out = unsafe { core::slice::from_raw_parts_mut(shared.get().add(start), end - start) };
        let part = packed::Job {
            first: job.first + a,
            rows: job.first + b,
            ..*job
        };
        run_rows(&part, &mut packed::Out::new(out, out_stride, part.first));
    });
}

/// Rows a thread takes at least.
const PART_ROWS: usize = 32;

/// Rows the threads' shares are made of: the AVX-512 tile's 8, so that
/// no share ends in a partial tile but the last.
const ROW_GRAIN: usize = 8;

/// Products (rows · inputs · outputs) a layer has at least to split its
/// blocks among threads (few in tests, so that their small layers split).
const PART_WORK: usize = if cfg!(test) { 1 << 10 } else { 1 << 20 };

/// Runs `job`'s rows on this thread, on the best path this CPU has.
fn run_rows(job: &packed::Job<'_>, out: &mut packed::Out<'_>) {
    #[cfg(any(target_arch = "x86_64", all(target_arch = "aarch64", target_feature = "neon")))]
    if tiles::fits(job) {
        #[cfg(target_arch = "x86_64")]
        {
            if vnni::available() {
                // SAFETY: `available` found the instruction sets; the
                // layer fits the tiles.
                return unsafe { vnni::run(job, out) };
            }
            if avx2::available() {
                // SAFETY: as above.
                return unsafe { avx2::run(job, out) };
            }
        }
        #[cfg(target_arch = "aarch64")]
        if sdot::available() {
            // SAFETY: as above (FEAT_DotProd).
            return unsafe { sdot::run(job, out) };
        }
    }
    packed::portable(job, out);
}

/// The scale of weight channel `c` (one scale for all, or one each).
#[inline(always)]
pub(crate) fn weight_scale(scales: &[f32], c: usize) -> f32 {
    if scales.len() == 1 {
        scales[0]
    } else {
        scales[c]
    }
}

/// A regular (grouped) convolution of an NHWC image `x` with a filter `w`
/// of `[O, kH, kW, C / groups]` (`[1, kH, kW, O]` when `depthwise`) and an
/// optional bias; `w_scales` holds one scale, or one per output channel.
/// `packed`: a regular convolution's filter packed by [`pack_conv`] (then
/// `w` is not read).
#[allow(clippy::too_many_arguments)]
pub fn conv2d_nhwc(
    g: &Conv2dNhwc,
    depthwise: bool,
    x: &[i8],
    xq: &Quant,
    w: &[i8],
    w_scales: &[f32],
    bias: Option<&[i32]>,
    packed: Option<&[f32]>,
    y: &Output,
    out: &mut [i8],
) {
    if let Some(p) = packed.filter(|p| !depthwise && Layout::conv(g).is_packed(p)) {
        return packed::conv(g, x, xq, p, w_scales, bias, y, out);
    }
    if depthwise && g.in_c == g.out_c && g.window.kernel_h * g.window.kernel_w <= DEPTHWISE_TAPS {
        let d = Depthwise {
            g,
            x,
            xq,
            w,
            w_scales,
            bias,
            y,
        };
        return depthwise_conv(&d, out);
    }
    let c = Conv {
        g,
        x,
        xq,
        w,
        w_scales,
        bias,
        y,
    };
    let taps = g.window.kernel_h * g.window.kernel_w;
    // With `std`, longer windows keep the per-pixel path.
    if !depthwise && (taps * (g.in_c / g.groups) <= PATCH || !cfg!(feature = "std")) {
        return conv_by_patches::<PATCH>(&c, out);
    }
    conv_by_pixels(&c, depthwise, out)
}

/// [`conv2d_nhwc`] an output pixel at a time, a block of channels at a
/// time (grouped depthwise layers, and windows longer than [`PATCH`] with
/// `std`). Not inlined: its sums would take stack in `conv2d_nhwc`'s
/// frame on every path, above the depthwise and packed kernels' own.
#[inline(never)]
fn conv_by_pixels(c: &Conv<'_>, depthwise: bool, out: &mut [i8]) {
    let &Conv {
        g,
        x,
        xq,
        w,
        w_scales,
        bias,
        y,
    } = c;
    let zp = xq.zero_point;
    let win = &g.window;
    let (cin, cout) = (g.in_c, g.out_c);
    let (gin, gout) = (cin / g.groups, cout / g.groups);
    let taps = win.kernel_h * win.kernel_w;
    let mut pixel = 0;
    for n in 0..win.batch {
        for oy in 0..win.out_h {
            for ox in 0..win.out_w {
                let o = &mut out[pixel * cout..][..cout];
                pixel += 1;
                // Output channels a block at a time, their sums in a row.
                for c0 in (0..cout).step_by(BLOCK) {
                    let mut sums = [0i32; BLOCK];
                    let acc = &mut sums[..BLOCK.min(cout - c0)];
                    if let Some(b) = bias {
                        acc.copy_from_slice(&b[c0..c0 + acc.len()]);
                    }
                    for_each_tap(win, n, oy, ox, |tap, p| {
                        let xs = &x[p * cin..][..cin];
                        let ws = &w[tap * cout + c0..];
                        if depthwise && gout == 1 {
                            for ((a, &xv), &wv) in acc.iter_mut().zip(&xs[c0..]).zip(ws) {
                                *a = a.wrapping_add((xv as i32 - zp) * wv as i32);
                            }
                        } else if depthwise {
                            for (j, (a, &wv)) in acc.iter_mut().zip(ws).enumerate() {
                                let xv = xs[(c0 + j) / gout] as i32 - zp;
                                *a = a.wrapping_add(xv * wv as i32);
                            }
                        } else {
                            // Within one group at a time.
                            let mut j = 0;
                            while j < acc.len() {
                                let group = (c0 + j) / gout;
                                let end = acc.len().min((group + 1) * gout - c0);
                                let ws = &w[((c0 + j) * taps + tap) * gin..];
                                accumulate(&mut acc[j..end], &xs[group * gin..][..gin], zp, ws, taps * gin);
                                j = end;
                            }
                        }
                    });
                    for (j, (o, &a)) in o[c0..].iter_mut().zip(acc.iter()).enumerate() {
                        let scale = requant_scale(xq.scale, weight_scale(w_scales, c0 + j), y.scale);
                        *o = y.requantize(a, scale);
                    }
                }
            }
        }
    }
}

/// Channels a depthwise convolution sums at once.
const LANES: usize = 16;

/// The most taps a depthwise convolution widens the weights of (7 × 7);
/// larger windows take the general path.
pub(crate) const DEPTHWISE_TAPS: usize = 49;

/// A depthwise convolution's operands (one output per input channel).
pub(crate) struct Depthwise<'a> {
    pub g: &'a Conv2dNhwc,
    pub x: &'a [i8],
    pub xq: &'a Quant,
    pub w: &'a [i8],
    pub w_scales: &'a [f32],
    pub bias: Option<&'a [i32]>,
    pub y: &'a Output,
}

impl Depthwise<'_> {
    /// The requantization scales and biases of the [`LANES`] channels
    /// from `c0` (channels past the last: 1 and 0).
    #[inline(always)]
    pub(crate) fn lanes(&self, c0: usize) -> ([f32; LANES], [i32; LANES]) {
        let mut scale = [1.0f32; LANES];
        let mut start = [0i32; LANES];
        for j in 0..LANES.min(self.g.in_c - c0) {
            scale[j] = requant_scale(self.xq.scale, weight_scale(self.w_scales, c0 + j), self.y.scale);
            start[j] = self.bias.map_or(0, |b| b[c0 + j]);
        }
        (scale, start)
    }

    /// Channel `ch`'s requantization scale, and its bias less the input
    /// zero point's share (`zp · Σ w`): where the vector paths start its
    /// sum of raw (uncentred) inputs.
    #[cfg(any(target_arch = "x86_64", all(target_arch = "aarch64", target_feature = "neon")))]
    #[inline(always)]
    pub(crate) fn folded(&self, ch: usize) -> (f32, i32) {
        let (c, taps) = (self.g.in_c, self.g.window.kernel_h * self.g.window.kernel_w);
        let sum = (0..taps).fold(0i32, |s, t| s.wrapping_add(self.w[t * c + ch] as i32));
        self.folded_with(ch, sum)
    }

    /// [`Depthwise::folded`] for a channel whose weight sum `sum` the
    /// caller has already taken.
    #[cfg(any(target_arch = "x86_64", all(target_arch = "aarch64", target_feature = "neon")))]
    #[inline(always)]
    pub(crate) fn folded_with(&self, ch: usize, sum: i32) -> (f32, i32) {
        let scale = requant_scale(self.xq.scale, weight_scale(self.w_scales, ch), self.y.scale);
        (
            scale,
            self.bias
                .map_or(0, |b| b[ch])
                .wrapping_sub(self.xq.zero_point.wrapping_mul(sum)),
        )
    }

    /// Checks what the vector paths rely on for output rows `rows` into
    /// `out`: one output per channel, at most [`DEPTHWISE_TAPS`] taps, and
    /// the input, weights and outputs as long as the shapes say.
    #[cfg(any(target_arch = "x86_64", all(target_arch = "aarch64", target_feature = "neon")))]
    pub(crate) fn assert_fits(&self, rows: (usize, usize), out: &[i8]) {
        let (g, win) = (self.g, &self.g.window);
        let (c, taps) = (g.in_c, win.kernel_h * win.kernel_w);
        assert!(taps <= DEPTHWISE_TAPS && g.out_c == c);
        assert!(self.x.len() >= win.batch * win.in_h * win.in_w * c && self.w.len() >= taps * c);
        assert!(rows.0 <= rows.1 && rows.1 <= win.batch * win.out_h);
        assert!(out.len() >= (rows.1 - rows.0) * win.out_w * c);
    }
}

/// Splits `c` channels into passes of at most `most` vectors of `width`
/// channels, as even as can be (a lone vector would wait on its sums):
/// calls `pass(vectors, first channel)` for each.
#[cfg(any(target_arch = "x86_64", all(target_arch = "aarch64", target_feature = "neon")))]
pub(crate) fn dw_passes(c: usize, width: usize, most: usize, mut pass: impl FnMut(usize, usize)) {
    let vectors = c.div_ceil(width);
    let passes = vectors.div_ceil(most);
    let mut v0 = 0;
    for p in 0..passes {
        let nv = (vectors - v0).div_ceil(passes - p);
        pass(nv, width * v0);
        v0 += nv;
    }
}

/// Where a depthwise pass reads each tap of an output pixel: the input
/// at the pass's first channel, or a row of zero points in the padding.
#[cfg(any(target_arch = "x86_64", all(target_arch = "aarch64", target_feature = "neon")))]
pub(crate) struct DwTaps<'a> {
    win: &'a Window2d,
    c: usize,
    x: &'a [i8],
    pad: &'a [i8],
    /// Each tap's offset from its window's first input.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) off: [usize; DEPTHWISE_TAPS],
    /// The output rows and columns whose windows lie inside the input.
    inner: [core::ops::Range<usize>; 2],
}

#[cfg(any(target_arch = "x86_64", all(target_arch = "aarch64", target_feature = "neon")))]
impl<'a> DwTaps<'a> {
    /// For `d`'s window (checked by [`Depthwise::assert_fits`]), `pad`
    /// holding the zero point as many times as a pass reads.
    pub(crate) fn new(d: &Depthwise<'a>, pad: &'a [i8]) -> Self {
        let (win, c) = (&d.g.window, d.g.in_c);
        let mut off = [0usize; DEPTHWISE_TAPS];
        for (t, o) in off.iter_mut().enumerate().take(win.kernel_h * win.kernel_w) {
            *o = win.tap_offset(t / win.kernel_w, t % win.kernel_w, c);
        }
        DwTaps {
            win,
            c,
            x: d.x,
            pad,
            off,
            inner: [win.inner_rows(), win.inner_cols()],
        }
    }

    /// When output pixel `(n, oy, ox)`'s window lies inside the input:
    /// where it starts, at channel `cb`, and how many pixels from `ox` on
    /// in its row have windows inside too (each `stride_w · c` further
    /// on; every tap [`Self::off`] from there is in `x`). The x86
    /// kernels step such runs; NEON's look every pixel up.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    #[inline(always)]
    pub(crate) fn inside(&self, n: usize, oy: usize, ox: usize, cb: usize) -> Option<(*const i8, usize)> {
        let win = self.win;
        if !(self.inner[0].contains(&oy) && self.inner[1].contains(&ox)) {
            return None;
        }
        let (iy, ix) = (oy * win.stride_h - win.pad_top, ox * win.stride_w - win.pad_left);
        let first = ((n * win.in_h + iy) * win.in_w + ix) * self.c + cb;
        Some((self.x[first..].as_ptr(), self.inner[1].end - ox))
    }

    /// The taps of output pixel `(n, oy, ox)` at channel `cb` into `ptr`:
    /// each readable for the channels from `cb` on (`pad`'s length for the
    /// padding's).
    #[inline(always)]
    pub(crate) fn pointers(&self, n: usize, oy: usize, ox: usize, cb: usize, ptr: &mut [*const i8; DEPTHWISE_TAPS]) {
        let (win, c) = (self.win, self.c);
        let taps = win.kernel_h * win.kernel_w;
        if self.inner[0].contains(&oy) && self.inner[1].contains(&ox) {
            let (iy, ix) = (oy * win.stride_h - win.pad_top, ox * win.stride_w - win.pad_left);
            let first = ((n * win.in_h + iy) * win.in_w + ix) * c + cb;
            for (p, &o) in ptr.iter_mut().zip(&self.off[..taps]) {
                // In bounds: the window lies inside the input.
                *p = self.x[first + o..].as_ptr();
            }
            return;
        }
        for (t, p) in ptr.iter_mut().enumerate().take(taps) {
            let (iy, ix) = (win.in_row(oy, t / win.kernel_w), win.in_col(ox, t % win.kernel_w));
            *p = match (iy, ix) {
                (Some(iy), Some(ix)) => self.x[((n * win.in_h + iy) * win.in_w + ix) * c + cb..].as_ptr(),
                _ => self.pad.as_ptr(),
            };
        }
    }
}

/// Where the taps of one pixel of a depthwise kernel read.
#[cfg(target_arch = "x86_64")]
pub(crate) trait TapPointers {
    /// Tap `t`.
    fn at(&self, t: usize) -> *const i8;
}

/// A window inside the input: its first input, and every tap's offset
/// from it.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Inside<'a>(pub *const i8, pub &'a [usize]);

#[cfg(target_arch = "x86_64")]
impl TapPointers for Inside<'_> {
    #[inline(always)]
    fn at(&self, t: usize) -> *const i8 {
        self.0.wrapping_add(self.1[t])
    }
}

/// One pixel's taps, each looked up ([`DwTaps::pointers`]).
#[cfg(target_arch = "x86_64")]
pub(crate) struct Listed<'a>(pub &'a [*const i8; DEPTHWISE_TAPS]);

#[cfg(target_arch = "x86_64")]
impl TapPointers for Listed<'_> {
    #[inline(always)]
    fn at(&self, t: usize) -> *const i8 {
        self.0[t]
    }
}

/// A depthwise convolution with one output per input channel, its output
/// rows split among the threads.
fn depthwise_conv(d: &Depthwise<'_>, out: &mut [i8]) {
    let (win, c) = (&d.g.window, d.g.in_c);
    let rows = win.batch * win.out_h;
    let row_len = win.out_w * c;
    let work = row_len * win.kernel_h * win.kernel_w;
    let split = crate::parallel::split_even(rows, DEPTHWISE_PART.div_ceil(work.max(1)), 1);
    if split.parts() <= 1 {
        return depthwise_rows(d, (0, rows), out);
    }
    let len = out.len();
    // SAFETY: each part writes only its own rows' outputs, a contiguous
    // range of `out`, and reads nothing another part writes.
    let shared = unsafe { crate::parallel::Shared::new(out.as_mut_ptr()) };
    crate::parallel::run_parts(split.parts(), &|p| {
        let Some((a, b)) = split.range(p) else { return };
        let (start, end) = ((a * row_len).min(len), (b * row_len).min(len));
        // SAFETY: as above; `start..end` lies within `out`.
        let out = unsafe { core::slice::from_raw_parts_mut(shared.get().add(start), end - start) };
        depthwise_rows(d, (a, b), out);
    });
}

/// Products (pixels · channels · taps) a thread takes at least in a
/// depthwise convolution (few in tests, so that their small layers split).
const DEPTHWISE_PART: usize = if cfg!(test) { 64 } else { 1 << 16 };

/// Output rows `rows` (over batch and height) of a depthwise convolution,
/// into `out` (those rows' outputs), on the best path this CPU has.
fn depthwise_rows(d: &Depthwise<'_>, rows: (usize, usize), out: &mut [i8]) {
    #[cfg(target_arch = "x86_64")]
    {
        if vnni::available() {
            // SAFETY: the CPU has AVX-512 F, BW, VL and VNNI.
            return unsafe { vnni::depthwise(d, rows, out) };
        }
        if avx2::available() {
            // SAFETY: the CPU has AVX2 and FMA.
            return unsafe { avx2::depthwise(d, rows, out) };
        }
    }
    // NEON is always there where it is compiled in.
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    neon::depthwise(d, rows, out);
    #[cfg(not(all(target_arch = "aarch64", target_feature = "neon")))]
    depthwise_portable(d, rows, out)
}

/// How [`depthwise_portable`] keeps a pass's weights: widened with `std`
/// (3 KB on the stack; bytes measured 3.7% more instructions on x86),
/// bytes without (784 bytes on a microcontroller's stack, with the same
/// instruction counts on the emulated boards).
#[cfg(feature = "std")]
type DwWeight = i32;
#[cfg(not(feature = "std"))]
type DwWeight = i8;

/// [`depthwise_rows`] without VNNI: for each [`LANES`] channels, the
/// weights copied once ([`DwWeight`]; zeros past the last channel), then
/// every output pixel in plain integer code
/// that the compiler vectorizes for this CPU. On aarch64 with NEON, only
/// the tests' reference.
#[cfg_attr(all(target_arch = "aarch64", target_feature = "neon"), allow(dead_code))]
fn depthwise_portable(d: &Depthwise<'_>, rows: (usize, usize), out: &mut [i8]) {
    /// `TAPS`: the most taps its weights array holds. A 3 × 3 window's
    /// (the common one) keeps 144 of the 784 bytes on the stack
    /// without `std`.
    struct Work<'d, 'a, const TAPS: usize>(&'d Depthwise<'a>, (usize, usize), &'d mut [i8]);
    impl<const TAPS: usize> crate::cpu::Vectorized for Work<'_, '_, TAPS> {
        type Output = ();
        #[inline(always)]
        // `DwWeight` is `i32` with `std`.
        #[allow(clippy::useless_conversion)]
        fn run(self) {
            let Work(d, rows, out) = self;
            let (win, c, x, zp) = (&d.g.window, d.g.in_c, d.x, d.xq.zero_point);
            let taps = win.kernel_h * win.kernel_w;
            for c0 in (0..c).step_by(LANES) {
                let lanes = LANES.min(c - c0);
                let (scale, start) = d.lanes(c0);
                let mut wt = [[0 as DwWeight; LANES]; TAPS];
                for (t, wt) in wt.iter_mut().enumerate().take(taps) {
                    for (v, &w) in wt.iter_mut().zip(&d.w[t * c + c0..][..lanes]) {
                        *v = DwWeight::from(w);
                    }
                }
                let mut pixel = 0;
                for row in rows.0..rows.1 {
                    let (n, oy) = (row / win.out_h, row % win.out_h);
                    for ox in 0..win.out_w {
                        let mut acc = start;
                        for_each_tap(win, n, oy, ox, |tap, p| {
                            let xs = &x[p * c + c0..][..lanes];
                            for j in 0..LANES {
                                // Lanes past the last channel sum zeros.
                                let xv = xs.get(j).map_or(zp, |&v| v as i32);
                                acc[j] = acc[j].wrapping_add((xv - zp).wrapping_mul(i32::from(wt[tap][j])));
                            }
                        });
                        let o = &mut out[pixel * c + c0..][..lanes];
                        pixel += 1;
                        for (j, o) in o.iter_mut().enumerate() {
                            *o = d.y.requantize(acc[j], scale[j]);
                        }
                    }
                }
            }
        }
    }
    // Each in a function of its own, so that the smaller one's frame is
    // not the larger one's.
    #[inline(never)]
    fn run<const TAPS: usize>(d: &Depthwise<'_>, rows: (usize, usize), out: &mut [i8]) {
        crate::cpu::with_best_isa(Work::<TAPS>(d, rows, out))
    }
    // A 3 × 3 window's.
    const SMALL_TAPS: usize = 9;
    if d.g.window.kernel_h * d.g.window.kernel_w <= SMALL_TAPS {
        run::<SMALL_TAPS>(d, rows, out)
    } else {
        run::<DEPTHWISE_TAPS>(d, rows, out)
    }
}

/// A regular convolution's operands, as [`conv2d_nhwc`] takes them.
#[derive(Clone, Copy)]
struct Conv<'a> {
    g: &'a Conv2dNhwc,
    x: &'a [i8],
    xq: &'a Quant,
    w: &'a [i8],
    w_scales: &'a [f32],
    bias: Option<&'a [i32]>,
    y: &'a Output,
}

/// Inputs of each output pixel's window a convolution gathers at once,
/// as `i16` on the stack ([`TILE`] rows of them): most windows whole with
/// `std`, a microcontroller's stack's worth without, longer windows a
/// chunk at a time.
const PATCH: usize = if cfg!(feature = "std") { 2048 } else { 256 };

/// Output pixels whose windows are gathered together, to share each
/// filter row's loads.
const TILE: usize = 4;

/// Output channels whose sums a convolution keeps across the chunks of a
/// window longer than its patch (each chunk is gathered once per block).
const CHUNKED_BLOCK: usize = 32;

/// A regular convolution by gathered windows: each output pixel's window
/// (`[kH, kW, C / groups]`, centred, zero where it falls in the padding)
/// in a row, then for each output channel one dot product of that row
/// with the filter's (whose layout is the same) for up to [`TILE`] pixels
/// at once. A window longer than `P` is gathered and summed `P` inputs at
/// a time; the integer sums are the same. Not inlined: its buffers would
/// weigh on the stack of every convolution, packed ones too.
#[inline(never)]
fn conv_by_patches<const P: usize>(c: &Conv<'_>, out: &mut [i8]) {
    let Conv {
        g,
        xq,
        w,
        w_scales,
        bias,
        y,
        ..
    } = *c;
    let win = &g.window;
    let cout = g.out_c;
    let gout = cout / g.groups;
    let len = win.kernel_h * win.kernel_w * (g.in_c / g.groups);
    let mut patches = [[0i16; P]; TILE];
    let mut write = |first: usize, tile: usize, oc: usize, sums: [i32; TILE]| {
        let b = bias.map_or(0, |b| b[oc]);
        let scale = requant_scale(xq.scale, weight_scale(w_scales, oc), y.scale);
        for (t, &s) in sums[..tile].iter().enumerate() {
            out[(first + t) * cout + oc] = y.requantize(b.wrapping_add(s), scale);
        }
    };
    for n in 0..win.batch {
        for oy in 0..win.out_h {
            for ox0 in (0..win.out_w).step_by(TILE) {
                let tile = TILE.min(win.out_w - ox0);
                let first = (n * win.out_h + oy) * win.out_w + ox0;
                let at = (n, oy, ox0, tile);
                for group in 0..g.groups {
                    let ocs = group * gout..(group + 1) * gout;
                    if len <= P {
                        gather(c, at, group, (0, len), &mut patches);
                        for oc in ocs {
                            write(first, tile, oc, dot_tile(&patches, &w[oc * len..][..len]));
                        }
                        continue;
                    }
                    for oc0 in ocs.clone().step_by(CHUNKED_BLOCK) {
                        let block = CHUNKED_BLOCK.min(ocs.end - oc0);
                        let mut sums = [[0i32; TILE]; CHUNKED_BLOCK];
                        for k0 in (0..len).step_by(P) {
                            let k = P.min(len - k0);
                            gather(c, at, group, (k0, k), &mut patches);
                            for (j, sums) in sums[..block].iter_mut().enumerate() {
                                let d = dot_tile(&patches, &w[(oc0 + j) * len + k0..][..k]);
                                for (s, d) in sums.iter_mut().zip(d) {
                                    *s = s.wrapping_add(d);
                                }
                            }
                        }
                        for (j, &sums) in sums[..block].iter().enumerate() {
                            write(first, tile, oc0 + j, sums);
                        }
                    }
                }
            }
        }
    }
}

/// Inputs `k0..k0 + k` of the windows of output pixels `ox0..ox0 + tile`
/// of row `oy` of image `n` (`at`), group `group`, centred, into the
/// first `k` of each row of `patches` (zeros in the padding and in the
/// rows past `tile`).
#[inline(always)]
fn gather<const P: usize>(
    c: &Conv<'_>,
    (n, oy, ox0, tile): (usize, usize, usize, usize),
    group: usize,
    (k0, k): (usize, usize),
    patches: &mut [[i16; P]; TILE],
) {
    let (g, x, zp) = (c.g, c.x, c.xq.zero_point);
    let (cin, gin) = (g.in_c, g.in_c / g.groups);
    for (t, row) in patches.iter_mut().enumerate() {
        let row = &mut row[..k];
        row.fill(0);
        if t >= tile {
            continue;
        }
        for_each_tap(&g.window, n, oy, ox0 + t, |tap, p| {
            // The part of this tap's inputs that falls in the chunk.
            let (a, b) = ((tap * gin).max(k0), ((tap + 1) * gin).min(k0 + k));
            if a < b {
                let xs = &x[p * cin + group * gin + a - tap * gin..][..b - a];
                for (c, &v) in row[a - k0..b - k0].iter_mut().zip(xs) {
                    *c = (v as i32 - zp) as i16;
                }
            }
        });
    }
}

/// The dot products of the first `w.len()` of each of the [`TILE`] rows
/// of `patches` with `w` (exact: `len · 255 · 128` fits in `i32`).
#[inline]
fn dot_tile<const P: usize>(patches: &[[i16; P]; TILE], w: &[i8]) -> [i32; TILE] {
    let len = w.len();
    let [p0, p1, p2, p3] = patches;
    let (p0, p1, p2, p3) = (&p0[..len], &p1[..len], &p2[..len], &p3[..len]);
    let mut s = [0i32; TILE];
    for i in 0..len {
        let wv = w[i] as i32;
        s[0] += p0[i] as i32 * wv;
        s[1] += p1[i] as i32 * wv;
        s[2] += p2[i] as i32 * wv;
        s[3] += p3[i] as i32 * wv;
    }
    s
}

/// Output channels whose sums a convolution keeps at once.
const BLOCK: usize = 64;

/// Inputs centred at once (as `i16`, on the stack).
const CHUNK: usize = 256;

/// `acc[j] += Σ_i (x[i] - zp) · w[j · stride + i]`, wrapping: the inputs
/// centred a chunk at a time, then one dot product per output over it
/// (which vectorizes as 16-bit multiply-adds).
#[inline]
fn accumulate(acc: &mut [i32], x: &[i8], zp: i32, w: &[i8], stride: usize) {
    let mut centred = [0i16; CHUNK];
    for k0 in (0..x.len()).step_by(CHUNK) {
        let xs = &x[k0..x.len().min(k0 + CHUNK)];
        let c = &mut centred[..xs.len()];
        for (c, &v) in c.iter_mut().zip(xs) {
            *c = (v as i32 - zp) as i16;
        }
        for (j, a) in acc.iter_mut().enumerate() {
            let ws = &w[j * stride + k0..][..c.len()];
            let mut s = 0i32;
            for (&cv, &wv) in c.iter().zip(ws) {
                s = s.wrapping_add(cv as i32 * wv as i32);
            }
            *a = a.wrapping_add(s);
        }
    }
}

/// Calls `f(tap, pixel)` for each tap of output pixel `(oy, ox)` of image
/// `n` that falls inside the input: its index in the window (row-major)
/// and the input pixel's index.
#[inline(always)]
pub(crate) fn for_each_tap(win: &Window2d, n: usize, oy: usize, ox: usize, mut f: impl FnMut(usize, usize)) {
    for ky in 0..win.kernel_h {
        let Some(iy) = win.in_row(oy, ky) else { continue };
        for kx in 0..win.kernel_w {
            if let Some(ix) = win.in_col(ox, kx) {
                f(ky * win.kernel_w + kx, (n * win.in_h + iy) * win.in_w + ix);
            }
        }
    }
}

/// `out[m, n] = requant(bias[n] + Σ_k (x[m, k] - x_zero_point) · w[n, k])`
/// over `m` rows of `k` inputs; `w` is `[n, k]`, or `[k, n]` when
/// `transposed`. `packed`: the weight packed by [`pack_fully_connected`]
/// (then `w` is not read).
#[allow(clippy::too_many_arguments)]
pub fn fully_connected(
    x: &[i8],
    xq: &Quant,
    w: &[i8],
    w_scales: &[f32],
    transposed: bool,
    bias: Option<&[i32]>,
    k: usize,
    n: usize,
    packed: Option<&[f32]>,
    y: &Output,
    out: &mut [i8],
) {
    if let Some(p) = packed.filter(|p| k > 0 && Layout::fully_connected(k, n).is_packed(p)) {
        return packed::fully_connected(x, xq, p, w_scales, bias, k, n, y, out);
    }
    if k == 0 {
        for or in out.chunks_exact_mut(n) {
            for (j, o) in or.iter_mut().enumerate() {
                *o = y.requantize(
                    bias.map_or(0, |b| b[j]),
                    requant_scale(xq.scale, weight_scale(w_scales, j), y.scale),
                );
            }
        }
        return;
    }
    for (xr, or) in x.chunks_exact(k).zip(out.chunks_exact_mut(n)) {
        for c0 in (0..n).step_by(BLOCK) {
            let mut sums = [0i32; BLOCK];
            let acc = &mut sums[..BLOCK.min(n - c0)];
            if let Some(b) = bias {
                acc.copy_from_slice(&b[c0..c0 + acc.len()]);
            }
            if transposed {
                for (kk, &a) in xr.iter().enumerate() {
                    let xv = a as i32 - xq.zero_point;
                    for (s, &wv) in acc.iter_mut().zip(&w[kk * n + c0..]) {
                        *s = s.wrapping_add(xv * wv as i32);
                    }
                }
            } else {
                accumulate(acc, xr, xq.zero_point, &w[c0 * k..], k);
            }
            for (j, (o, &a)) in or[c0..].iter_mut().zip(acc.iter()).enumerate() {
                *o = y.requantize(a, requant_scale(xq.scale, weight_scale(w_scales, c0 + j), y.scale));
            }
        }
    }
}

/// Max pooling of an NHWC image with `c` channels, clamped to
/// `[y.qmin, y.qmax]` (input and output share their quantization).
pub fn max_pool2d_nhwc(win: &Window2d, c: usize, x: &[i8], y: &Output, out: &mut [i8]) {
    let rows = win.batch * win.out_h;
    let row_len = win.out_w * c;
    let out = &mut out[..rows * row_len];
    let (lo, hi) = (y.qmin.clamp(-128, 127) as i8, y.qmax.clamp(-128, 127) as i8);
    // Bands of output rows across threads, as other memory-bound kernels.
    //
    // Separable: each output row takes the maximum over its window's input
    // rows first (long contiguous runs, vectorized), then over the
    // window's columns of that row.
    let split_up = crate::parallel::local_bands_for(out.len());
    let grain = crate::parallel::band_grain(row_len, 1);
    crate::parallel::for_each_band(out, rows, row_len, grain, split_up, &|band, piece| {
        let mut buf = [i8::MIN; MAX_POOL_ROW];
        let in_row_len = win.in_w * c;
        for (row, o_row) in band.zip(piece.chunks_exact_mut(row_len.max(1))) {
            let (n, oy) = (row / win.out_h, row % win.out_h);
            let mut taps = [0usize; MAX_POOL_TAPS];
            if in_row_len <= MAX_POOL_ROW && win.kernel_w <= MAX_POOL_TAPS {
                let rows_max = &mut buf[..in_row_len];
                rows_max.fill(i8::MIN);
                for ky in 0..win.kernel_h {
                    if let Some(iy) = win.in_row(oy, ky) {
                        let x_row = &x[(n * win.in_h + iy) * in_row_len..][..in_row_len];
                        for (a, &b) in rows_max.iter_mut().zip(x_row) {
                            *a = (*a).max(b);
                        }
                    }
                }
                for (ox, o) in o_row.chunks_exact_mut(c.max(1)).enumerate().take(win.out_w) {
                    let mut count = 0;
                    for kx in 0..win.kernel_w {
                        if let Some(ix) = win.in_col(ox, kx) {
                            taps[count] = ix * c;
                            count += 1;
                        }
                    }
                    max_of_taps(&taps[..count], rows_max, o);
                    clamp_to(o, lo, hi);
                }
                continue;
            }
            // Rows too long for the buffer: each window's pixels at once.
            for (ox, o) in o_row.chunks_exact_mut(c.max(1)).enumerate().take(win.out_w) {
                o.fill(i8::MIN);
                for_each_tap(win, n, oy, ox, |_, pixel| {
                    for (a, &b) in o.iter_mut().zip(&x[pixel * c..][..c]) {
                        *a = (*a).max(b);
                    }
                });
                clamp_to(o, lo, hi);
            }
        }
    });
}

fn clamp_to(o: &mut [i8], lo: i8, hi: i8) {
    for v in o.iter_mut() {
        *v = (*v).clamp(lo, hi);
    }
}

/// Bytes of an input row (`W · C`) that max pooling keeps the maximum of
/// a window's rows in, on the stack (ResNet's 112 × 64 stem rows fit);
/// wider rows go pixel by pixel. Small on 32-bit targets, whose stacks
/// are a few KB.
const MAX_POOL_ROW: usize = if cfg!(target_pointer_width = "64") {
    8 * 1024
} else {
    1024
};

/// Window widths up to this take [`max_of_taps`].
const MAX_POOL_TAPS: usize = 64;

/// `o[i] = max over taps t of x[t + i]` (`i8::MIN` with no taps), 16
/// channels at a time held in a register.
#[inline(always)]
fn max_of_taps(taps: &[usize], x: &[i8], o: &mut [i8]) {
    let block = |i: usize| {
        let mut acc = [i8::MIN; 16];
        for &t in taps {
            let v: &[i8; 16] = x[t + i..][..16].try_into().unwrap();
            for k in 0..16 {
                acc[k] = acc[k].max(v[k]);
            }
        }
        acc
    };
    let c = o.len();
    let mut i = 0;
    while i + 16 <= c {
        o[i..i + 16].copy_from_slice(&block(i));
        i += 16;
    }
    if i == c {
        return;
    }
    // The last few channels: a whole block's read where the input goes on
    // past them (all but the last pixels), keeping what is asked for.
    if taps.iter().all(|&t| t + i + 16 <= x.len()) {
        o[i..].copy_from_slice(&block(i)[..c - i]);
    } else {
        for (j, o) in o.iter_mut().enumerate().skip(i) {
            *o = taps.iter().map(|&t| x[t + j]).max().unwrap_or(i8::MIN);
        }
    }
}

/// The mean over `pixels` pixels of each of `n` NHWC images' `c` channels,
/// as XNNPACK's quantized mean computes it: the exact sum `S`, then
/// `round_even(S · m + b)` with `m = (in_scale / out_scale) · (1 / N)` and
/// `b = out_zero_point - N · in_zero_point · m`, each step in `f32`;
/// clamped to `[y.qmin, y.qmax]`.
pub fn global_avg_pool_nhwc(n: usize, pixels: usize, c: usize, x: &[i8], xq: &Quant, y: &Output, out: &mut [i8]) {
    let count = pixels as f32;
    let m = (xq.scale / y.scale) * (1.0 / count);
    let b = y.zero_point as f32 - (count * xq.zero_point as f32) * m;
    // The sums of a run of channels at a time, pixel after pixel: the
    // image is read in order (a channel at a time would stride through
    // it once per channel), and the additions vectorize.
    const RUN: usize = 256;
    let mut sums = [0i32; RUN];
    for img in 0..n {
        let image = &x[img * pixels * c..][..pixels * c];
        for c0 in (0..c).step_by(RUN) {
            let sums = &mut sums[..RUN.min(c - c0)];
            // Groups of 64 channels and fewer, summed in registers; then
            // the last few (fewer than 16) channel by channel.
            let whole = sums.len() / 16 * 16;
            for g0 in (0..whole).step_by(64) {
                let s = &mut sums[g0..whole.min(g0 + 64)];
                match s.len() / 16 {
                    1 => column_sums::<1>(image, c, c0 + g0, s),
                    2 => column_sums::<2>(image, c, c0 + g0, s),
                    3 => column_sums::<3>(image, c, c0 + g0, s),
                    _ => column_sums::<4>(image, c, c0 + g0, s),
                }
            }
            let tail = &mut sums[whole..];
            tail.fill(0);
            for pixel in image.chunks_exact(c) {
                for (s, &v) in tail.iter_mut().zip(&pixel[c0 + whole..]) {
                    *s = s.wrapping_add(v as i32);
                }
            }
            for (o, &sum) in out[img * c + c0..].iter_mut().zip(sums.iter()) {
                // Two roundings: XNNPACK's x86 build does not fuse them.
                let v = libm::rintf(sum as f32 * m + b);
                *o = (v.clamp(-128.0, 127.0) as i32).clamp(y.qmin, y.qmax) as i8;
            }
        }
    }
}

/// The sums over the pixels of `image` (`c` channels a pixel) of channels
/// `c0 .. c0 + 16·K`, into `sums` (`16·K` of them). The sums stay in
/// registers across the pixels: accumulated in memory, a run of 48
/// channels took 17 ns a pixel (RegNetY's first squeeze, 3136 pixels:
/// 53 µs).
fn column_sums<const K: usize>(image: &[i8], c: usize, c0: usize, sums: &mut [i32]) {
    let mut acc = [[0i32; 16]; K];
    for pixel in image.chunks_exact(c) {
        let run = &pixel[c0..c0 + 16 * K];
        for (a, chunk) in acc.iter_mut().zip(run.chunks_exact(16)) {
            for (s, &v) in a.iter_mut().zip(chunk) {
                *s = s.wrapping_add(v as i32);
            }
        }
    }
    for (s, a) in sums.chunks_exact_mut(16).zip(&acc) {
        s.copy_from_slice(a);
    }
}

/// XNNPACK's quantized addition (`qs8` `vadd`): both operands scaled to
/// the output by integer multipliers of 20 significant bits, summed with
/// a bias that holds the zero points and the rounding, shifted
/// arithmetically (rounding half up), plus the output zero point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddParams {
    pub bias: i32,
    pub a_multiplier: i32,
    pub b_multiplier: i32,
    pub shift: u32,
    pub zero_point: i32,
    pub qmin: i32,
    pub qmax: i32,
}

impl AddParams {
    /// The parameters of `a + b` (`a - b` with `subtract`) into `y`, or
    /// `None` where XNNPACK's scale ratios are out of its range (the
    /// larger of `a.scale / y.scale` and `b.scale / y.scale` must lie in
    /// `[2^-10, 2^8)`).
    pub fn new(a: &Quant, b: &Quant, y: &Output, subtract: bool) -> Option<Self> {
        let a_os = a.scale / y.scale;
        let b_os = if subtract { -b.scale } else { b.scale } / y.scale;
        let max = a_os.abs().max(b_os.abs());
        let exponent = ((max.to_bits() >> 23) & 0xff) as i32 - 127;
        let shift = 20 - exponent;
        if !(12..=30).contains(&shift) {
            return None;
        }
        // |ratio| · 2^shift by adding to the exponent, then rounded.
        let multiplier = |r: f32| -> i32 {
            let scaled = f32::from_bits((r.abs().to_bits() as i32 + (shift << 23)) as u32);
            let m = libm::rintf(scaled) as i32;
            if r < 0.0 {
                -m
            } else {
                m
            }
        };
        let (am, bm) = (multiplier(a_os), multiplier(b_os));
        let rounding = 1i32 << (shift - 1);
        let bias = rounding
            .wrapping_sub(am.wrapping_mul(a.zero_point))
            .wrapping_sub(bm.wrapping_mul(b.zero_point));
        Some(AddParams {
            bias,
            a_multiplier: am,
            b_multiplier: bm,
            shift: shift as u32,
            zero_point: y.zero_point,
            qmin: y.qmin,
            qmax: y.qmax,
        })
    }

    #[inline(always)]
    pub fn apply(&self, a: i8, b: i8) -> i8 {
        let acc = self
            .bias
            .wrapping_add((a as i32).wrapping_mul(self.a_multiplier))
            .wrapping_add((b as i32).wrapping_mul(self.b_multiplier));
        let v = (acc >> self.shift) + self.zero_point;
        v.clamp(-128, 127).clamp(self.qmin, self.qmax) as i8
    }
}

/// XNNPACK's quantized multiplication (`qs8` `vmul`): the exact product of
/// the centred operands, requantized with `(a.scale · b.scale) /
/// y.scale`, in `f32` as its x86 kernels do (its ARM kernels use a
/// fixed-point multiplier, which can differ by one quantum).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MulParams {
    pub a_zero_point: i32,
    pub b_zero_point: i32,
    pub scale: f32,
    pub y: Output,
}

impl MulParams {
    pub fn new(a: &Quant, b: &Quant, y: &Output) -> Self {
        MulParams {
            a_zero_point: a.zero_point,
            b_zero_point: b.zero_point,
            scale: a.scale * b.scale / y.scale,
            y: *y,
        }
    }

    #[inline(always)]
    pub fn apply(&self, a: i8, b: i8) -> i8 {
        let p = (a as i32 - self.a_zero_point) * (b as i32 - self.b_zero_point);
        self.y.requantize(p, self.scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Y: Output = Output {
        scale: 0.5,
        zero_point: -3,
        qmin: -128,
        qmax: 127,
    };

    #[test]
    fn a_table_maps_each_byte() {
        extern crate std;
        let table: [i8; 256] = core::array::from_fn(|i| (i as i32 * 37 % 251 - 120) as i8);
        for n in [0, 1, 63, 64, 65, 200, 70_000] {
            let x: std::vec::Vec<i8> = (0..n).map(|i| (i * 7919 % 256) as u8 as i8).collect();
            let mut out = std::vec![0i8; n];
            lut(&x, &table, &mut out);
            for (i, (&o, &v)) in out.iter().zip(&x).enumerate() {
                assert_eq!(o, table[v as u8 as usize], "n {n}, element {i}");
            }
        }
    }

    #[test]
    fn max_pooling_takes_each_windows_largest_clamped() {
        extern crate std;
        let mut seed = 5;
        // Channels below, at and past a vector of 16; padded and
        // unpadded, strided windows; an output that splits in bands on two
        // threads (32 × 32 × 24); input rows too long for the row buffer
        // (300 × 64).
        for (case, &(batch, h, w, c, k, stride, pad)) in [
            (1, 9, 7, 3, 3, 2, 1),
            (2, 8, 8, 16, 2, 2, 0),
            (1, 64, 64, 24, 3, 2, 1),
            (1, 12, 12, 37, 3, 1, 1),
        ]
        .iter()
        .enumerate()
        {
            let win = Window2d::new(batch, h, w, [k, k], [stride, stride], [pad; 4], [1, 1]).unwrap();
            let work = batch * win.out_h * win.out_w * c * k * k;
            if crate::testing::too_large_for_miri(work, crate::testing::MIRI_WORK) {
                continue;
            }
            let x: std::vec::Vec<i8> = (0..batch * h * w * c)
                .map(|_| crate::testing::rng(&mut seed) as u8 as i8)
                .collect();
            let y = Output {
                qmin: -100,
                qmax: 90,
                ..Y
            };
            let mut want = std::vec::Vec::new();
            for n in 0..batch {
                for oy in 0..win.out_h {
                    for ox in 0..win.out_w {
                        for ch in 0..c {
                            let mut m = i8::MIN;
                            for ky in 0..k {
                                for kx in 0..k {
                                    let (iy, ix) = (
                                        (oy * stride + ky) as isize - pad as isize,
                                        (ox * stride + kx) as isize - pad as isize,
                                    );
                                    if (0..h as isize).contains(&iy) && (0..w as isize).contains(&ix) {
                                        m = m.max(x[((n * h + iy as usize) * w + ix as usize) * c + ch]);
                                    }
                                }
                            }
                            want.push(m.clamp(-100, 90));
                        }
                    }
                }
            }
            for threads in [1, 2] {
                crate::parallel::set_threads(threads);
                let mut out = std::vec![0i8; want.len()];
                max_pool2d_nhwc(&win, c, &x, &y, &mut out);
                crate::parallel::set_threads(1);
                assert_eq!(out, want, "case {case}, {threads} threads");
            }
        }
    }

    #[test]
    fn rounding_by_the_bits_is_round_half_to_even() {
        for v in [
            0.0f32,
            -0.0,
            0.5,
            1.5,
            2.5,
            -0.5,
            -1.5,
            -2.5,
            254.49,
            -255.0,
            255.0,
            1e-30,
            -3.7,
            4_194_303.5,
            -4_194_303.0,
        ] {
            assert_eq!(round_even_i32(v), round_even(v) as i32, "{v}");
            assert_eq!(round_even_i32(v), libm::rintf(v) as i32, "{v}");
        }
        let mut s = 1u32;
        for _ in 0..100_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let v = (s as f32 / u32::MAX as f32 - 0.5) * 600.0;
            assert_eq!(round_even_i32(v), libm::rintf(v) as i32, "{v}");
        }
    }

    #[test]
    fn requantization_rounds_half_to_even_then_clamps() {
        // acc · 0.5: 2.5 → 2, 3.5 → 4, -2.5 → -2 (then + zp -3).
        assert_eq!(Y.requantize(5, 0.5), -1);
        assert_eq!(Y.requantize(7, 0.5), 1);
        assert_eq!(Y.requantize(-5, 0.5), -5);
        assert_eq!(Y.requantize(i32::MAX, 1.0), 127);
        assert_eq!(Y.requantize(i32::MIN, 1.0), -128);
        let relu = Output { qmin: -3, ..Y };
        assert_eq!(relu.requantize(-40, 1.0), -3);
    }

    #[test]
    fn bounds_and_converts_saturate() {
        assert_eq!(quantize_bound(f32::NEG_INFINITY, 0.1, 5), -128);
        assert_eq!(quantize_bound(f32::INFINITY, 0.1, 5), 127);
        assert_eq!(quantize_bound(0.0, 0.1, 5), 5);
        // 6 / 0.25 + 0.5 = 24.5 → 24 (half to even).
        assert_eq!(quantize_bound(6.0, 0.25, 0) + quantize_bound(0.125, 0.25, 0), 24);
        let q = Quant {
            scale: 0.25,
            zero_point: 10,
        };
        let mut out = [0i8; 6];
        quantize(&[0.375, 0.625, 1e9, -1e9, f32::NAN, -0.125], &q, &mut out);
        // 1.5 → 2, 2.5 → 2, saturated, NaN → 127 as on x86, -0.5 → -0.
        assert_eq!(out, [12, 12, 127, -128, 127, 10]);
        // The same values in a run long enough for the vectorized loop.
        let x: [f32; 6 * 13] = core::array::from_fn(|i| [0.375, 0.625, 1e9, -1e9, f32::NAN, -0.125][i % 6]);
        let mut long = [0i8; 6 * 13];
        quantize(&x, &q, &mut long);
        assert!(long.chunks(6).all(|c| c == [12, 12, 127, -128, 127, 10]), "{long:?}");
        // An image's worth on two threads, split in bands (an odd length:
        // the last band partial).
        {
            extern crate std;
            #[cfg(not(target_os = "wasi"))]
            let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
            let n = 6 * 12_545;
            let x: std::vec::Vec<f32> = (0..n).map(|i| x[i % 6]).collect();
            let mut image = std::vec![0i8; n - 1];
            crate::parallel::set_threads(2);
            quantize(&x, &q, &mut image);
            crate::parallel::set_threads(1);
            assert!(image
                .chunks(6)
                .all(|c| c[..] == [12, 12, 127, -128, 127, 10][..c.len()]));
        }
        let mut back = [0f32; 2];
        dequantize(&[12, -128], &q, &mut back);
        assert_eq!(back, [0.5, -34.5]);
    }

    #[test]
    fn add_matches_xnnpacks_integer_formula() {
        let (a, b) = (
            Quant {
                scale: 0.02,
                zero_point: 3,
            },
            Quant {
                scale: 0.05,
                zero_point: -7,
            },
        );
        let y = Output {
            scale: 0.04,
            zero_point: 1,
            qmin: -128,
            qmax: 127,
        };
        let p = AddParams::new(&a, &b, &y, false).unwrap();
        // The largest ratio, 1.25, has exponent 0: a shift of 20.
        assert_eq!(p.shift, 20);
        assert_eq!(p.b_multiplier, 1_310_720);
        for (qa, qb) in [(0i8, 0i8), (100, -100), (-128, 127), (127, 127), (-128, -128), (17, -7)] {
            let real = 0.02 * (qa as f64 - 3.0) + 0.05 * (qb as f64 + 7.0);
            let want = (real / 0.04 + 1.0).clamp(-128.0, 127.0);
            let got = p.apply(qa, qb) as f64;
            assert!((got - want).abs() <= 0.5 + 1e-6, "{qa} + {qb}: {got} vs {want}");
        }
        let s = AddParams::new(&a, &b, &y, true).unwrap();
        assert_eq!(s.b_multiplier, -p.b_multiplier);
        // Ratios out of XNNPACK's range are refused.
        let tiny = Output { scale: 1e6, ..y };
        assert!(AddParams::new(&a, &b, &tiny, false).is_none());
    }

    #[test]
    fn convolution_is_the_exact_integer_sum() {
        // 1 image 3×3, 2 channels; 2×2 filter, 1 output channel, padding 1.
        let g = Conv2dNhwc::regular(&[1, 3, 3, 2], &[1, 2, 2, 2], [1, 1], [1, 1, 1, 1], [1, 1], 1).unwrap();
        let x: [i8; 18] = core::array::from_fn(|i| (i as i32 * 7 % 23 - 11) as i8);
        let w: [i8; 8] = [3, -1, 2, 5, -4, 1, 0, 2];
        let xq = Quant {
            scale: 0.1,
            zero_point: 2,
        };
        let y = Output {
            scale: 0.7,
            zero_point: 0,
            qmin: -128,
            qmax: 127,
        };
        let mut out = [0i8; 16];
        conv2d_nhwc(&g, false, &x, &xq, &w, &[0.3], Some(&[5]), None, &y, &mut out);
        let scale = 0.1f32 * 0.3 / 0.7;
        for oy in 0..4 {
            for ox in 0..4 {
                let mut acc = 5i32;
                for ky in 0..2 {
                    for kx in 0..2 {
                        let (iy, ix) = ((oy + ky) as isize - 1, (ox + kx) as isize - 1);
                        if (0..3).contains(&iy) && (0..3).contains(&ix) {
                            for c in 0..2 {
                                let xv = x[((iy * 3 + ix) * 2) as usize + c] as i32 - 2;
                                acc += xv * w[(ky * 2 + kx) * 2 + c] as i32;
                            }
                        }
                    }
                }
                let want = ((acc as f32 * scale).round_ties_even() as i32).clamp(-128, 127) as i8;
                assert_eq!(out[oy * 4 + ox], want, "pixel {oy},{ox}");
            }
        }
    }

    #[test]
    fn gathered_windows_give_the_exact_sum_in_chunks_of_any_length() {
        extern crate std;
        use crate::testing::rng;
        use std::vec::Vec;
        let mut seed = 11;
        // Under Miri 3 random layers (grouped and not), on smaller
        // images of fewer outputs (`most` picks the bound of a size,
        // natively or under Miri; still windows of up to 360 inputs and
        // more outputs than a chunk's block of 32).
        let most = |native: u64, miri: u64| if cfg!(miri) { miri } else { native };
        for case in 0..if cfg!(miri) { 3 } else { 24 } {
            let r = |seed: &mut u64, n: u64| 1 + (rng(seed) % n) as usize;
            let groups = if case % 3 == 2 { 2 } else { 1 };
            let (gin, gout) = (r(&mut seed, 40), r(&mut seed, most(70, 40)));
            let (cin, cout) = (gin * groups, gout * groups);
            let k = [r(&mut seed, 3), r(&mut seed, 3)];
            let (h, w_) = (k[0] + r(&mut seed, most(5, 3)), k[1] + r(&mut seed, most(9, 4)));
            let pad = [0, 1, 2, 3].map(|_| rng(&mut seed) as usize % 2);
            let stride = [r(&mut seed, 2), r(&mut seed, 2)];
            let g =
                Conv2dNhwc::regular(&[1, h, w_, cin], &[cout, k[0], k[1], gin], stride, pad, [1, 1], groups).unwrap();
            let x: Vec<i8> = (0..h * w_ * cin).map(|_| rng(&mut seed) as u8 as i8).collect();
            let w: Vec<i8> = (0..cout * k[0] * k[1] * gin)
                .map(|_| rng(&mut seed) as u8 as i8)
                .collect();
            let bias: Vec<i32> = (0..cout).map(|_| rng(&mut seed) as i32 % 3000 - 1500).collect();
            let scales: Vec<f32> = (0..cout)
                .map(|_| 0.001 + (rng(&mut seed) % 100) as f32 * 1e-5)
                .collect();
            let xq = Quant {
                scale: 0.05,
                zero_point: (rng(&mut seed) % 256) as i32 - 128,
            };
            let y = Output {
                scale: 0.4,
                zero_point: -3,
                qmin: -128,
                qmax: 120,
            };
            let win = g.window;
            let mut want = std::vec![0i8; win.out_h * win.out_w * cout];
            for oy in 0..win.out_h {
                for ox in 0..win.out_w {
                    for oc in 0..cout {
                        let (group, mut acc) = (oc / gout, bias[oc]);
                        for ky in 0..k[0] {
                            for kx in 0..k[1] {
                                let iy = (oy * stride[0] + ky) as isize - pad[0] as isize;
                                let ix = (ox * stride[1] + kx) as isize - pad[3] as isize;
                                if (0..h as isize).contains(&iy) && (0..w_ as isize).contains(&ix) {
                                    let at = (iy as usize * w_ + ix as usize) * cin + group * gin;
                                    for i in 0..gin {
                                        let wv = w[((oc * k[0] + ky) * k[1] + kx) * gin + i] as i32;
                                        acc += (x[at + i] as i32 - xq.zero_point) * wv;
                                    }
                                }
                            }
                        }
                        let scale = requant_scale(xq.scale, scales[oc], y.scale);
                        want[(oy * win.out_w + ox) * cout + oc] = y.requantize(acc, scale);
                    }
                }
            }
            let c = Conv {
                g: &g,
                x: &x,
                xq: &xq,
                w: &w,
                w_scales: &scales,
                bias: Some(&bias),
                y: &y,
            };
            // Windows of up to 360 inputs: whole, and in chunks that split
            // taps and end anywhere.
            let mut got = std::vec![0i8; want.len()];
            conv_by_patches::<7>(&c, &mut got);
            assert_eq!(got, want, "case {case}: chunks of 7");
            conv_by_patches::<64>(&c, &mut got);
            assert_eq!(got, want, "case {case}: chunks of 64");
            conv_by_patches::<PATCH>(&c, &mut got);
            assert_eq!(got, want, "case {case}: chunks of {PATCH}");
            conv2d_nhwc(&g, false, &x, &xq, &w, &scales, Some(&bias), None, &y, &mut got);
            assert_eq!(got, want, "case {case}: conv2d_nhwc");
        }
    }

    #[test]
    fn depthwise_convolution_is_the_exact_integer_sum() {
        extern crate std;
        use crate::testing::rng;
        use std::vec::Vec;
        // WASI has no threads (nor the turn): two threads run as one there.
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut seed = 5;
        // Under Miri 5 random layers: still every kind of channel count,
        // dilation and rounding below (their periods 5, 4, 2); and smaller (`most` picks the bound of a size, natively or under
        // Miri), the portable kernel's 16 lanes whole and not, windows of
        // up to 9 taps and more.
        let most = |native: u64, miri: u64| if cfg!(miri) { miri } else { native };
        for case in 0..if cfg!(miri) { 5 } else { 40 } {
            let r = |seed: &mut u64, n: u64| 1 + (rng(seed) % n) as usize;
            // Up to 10 vectors of 16 channels: passes of 1 to 4 of them,
            // some all whole.
            let c = match case % 5 {
                0 => 16 * r(&mut seed, most(10, 2)),
                1 | 2 => r(&mut seed, most(160, 40)),
                _ => r(&mut seed, most(40, 20)),
            };
            let batch = r(&mut seed, 2);
            let k = [r(&mut seed, most(7, 4)), r(&mut seed, most(7, 4))];
            let (h, w_) = (k[0] + r(&mut seed, most(6, 3)), k[1] + r(&mut seed, most(6, 3)));
            let pad = [0, 1, 2, 3].map(|_| rng(&mut seed) as usize % 3);
            let stride = [r(&mut seed, 2), r(&mut seed, 2)];
            let dil = if case % 4 == 3 { [2, 2] } else { [1, 1] };
            let (h, w_) = (h + (dil[0] - 1) * k[0], w_ + (dil[1] - 1) * k[1]);
            let g = Conv2dNhwc::depthwise(&[batch, h, w_, c], &[1, k[0], k[1], c], stride, pad, dil).unwrap();
            let x: Vec<i8> = (0..batch * h * w_ * c).map(|_| rng(&mut seed) as u8 as i8).collect();
            let w: Vec<i8> = (0..k[0] * k[1] * c).map(|_| rng(&mut seed) as u8 as i8).collect();
            let bias: Vec<i32> = (0..c).map(|_| rng(&mut seed) as i32 % 3000 - 1500).collect();
            let mut scales: Vec<f32> = (0..c).map(|_| 0.001 + (rng(&mut seed) % 100) as f32 * 1e-5).collect();
            if case % 2 == 1 {
                // Every other channel at a requantization scale of exactly
                // 2^-7 (0.05 · 2^-4 / 0.4): one sum in 128 lands on a half,
                // which must round to even.
                scales.iter_mut().step_by(2).for_each(|s| *s = 0.0625);
            }
            let xq = Quant {
                scale: 0.05,
                zero_point: (rng(&mut seed) % 256) as i32 - 128,
            };
            let y = Output {
                scale: 0.4,
                zero_point: 7,
                qmin: -120,
                qmax: 127,
            };
            let win = g.window;
            let len = batch * win.out_h * win.out_w * c;
            let mut want = std::vec![0i8; len];
            let mut i = 0;
            for n in 0..batch {
                for oy in 0..win.out_h {
                    for ox in 0..win.out_w {
                        for ch in 0..c {
                            let mut acc = bias[ch];
                            for ky in 0..k[0] {
                                for kx in 0..k[1] {
                                    let iy = (oy * stride[0] + ky * dil[0]) as isize - pad[0] as isize;
                                    let ix = (ox * stride[1] + kx * dil[1]) as isize - pad[3] as isize;
                                    if (0..h as isize).contains(&iy) && (0..w_ as isize).contains(&ix) {
                                        let at = ((n * h + iy as usize) * w_ + ix as usize) * c + ch;
                                        acc += (x[at] as i32 - xq.zero_point) * w[(ky * k[1] + kx) * c + ch] as i32;
                                    }
                                }
                            }
                            want[i] = y.requantize(acc, requant_scale(xq.scale, scales[ch], y.scale));
                            i += 1;
                        }
                    }
                }
            }
            for threads in [1, 2] {
                // Under Miri the best path is the portable one, which on
                // one thread is the call below.
                if cfg!(miri) && threads == 1 {
                    continue;
                }
                crate::parallel::set_threads(threads);
                let mut out = std::vec![0i8; len];
                conv2d_nhwc(&g, true, &x, &xq, &w, &scales, Some(&bias), None, &y, &mut out);
                crate::parallel::set_threads(1);
                assert_eq!(out, want, "case {case}: best path, {threads} threads");
            }
            let d = Depthwise {
                g: &g,
                x: &x,
                xq: &xq,
                w: &w,
                w_scales: &scales,
                bias: Some(&bias),
                y: &y,
            };
            let mut out = std::vec![0i8; len];
            depthwise_portable(&d, (0, batch * win.out_h), &mut out);
            assert_eq!(out, want, "case {case}: portable path");
            #[cfg(target_arch = "x86_64")]
            if avx2::available() {
                // Two parts of the rows, as threads would take them.
                let (rows, mid) = (batch * win.out_h, batch * win.out_h / 2);
                let mut out = std::vec![0i8; len];
                let (a, b) = out.split_at_mut(mid * win.out_w * g.out_c);
                // SAFETY: the CPU has AVX2 and FMA.
                unsafe {
                    avx2::depthwise(&d, (0, mid), a);
                    avx2::depthwise(&d, (mid, rows), b);
                }
                assert_eq!(out, want, "case {case}: AVX2 path");
            }
            #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
            {
                let (rows, mid) = (batch * win.out_h, batch * win.out_h / 2);
                let mut out = std::vec![0i8; len];
                let (a, b) = out.split_at_mut(mid * win.out_w * g.out_c);
                neon::depthwise(&d, (0, mid), a);
                neon::depthwise(&d, (mid, rows), b);
                assert_eq!(out, want, "case {case}: NEON path");
            }
        }
    }

    #[test]
    fn global_mean_follows_xnnpacks_float_steps() {
        let x: [i8; 8] = [10, -20, 30, 41, -128, 127, 5, 6];
        let xq = Quant {
            scale: 0.05,
            zero_point: -4,
        };
        let mut out = [0i8; 2];
        global_avg_pool_nhwc(1, 4, 2, &x, &xq, &Output { scale: 0.05, ..Y }, &mut out);
        // Same scales: m = 1/4, b = -3 - (4 · -4) · m.
        // sums 10 + 30 - 128 + 5 = -83 and -20 + 41 + 127 + 6 = 154.
        let want = |s: f32| ((s * 0.25 + (-3.0 - (4.0 * -4.0) * 0.25)).round_ties_even()) as i8;
        assert_eq!(out, [want(-83.0), want(154.0)]);
    }

    #[test]
    fn global_mean_of_many_channels_sums_each_one() {
        // More channels than one run of sums (300), and runs of 16 to 64
        // channels with and without a remainder, summed in registers: two
        // images of 5 pixels.
        for c in [300, 48, 16, 64, 57, 7, 130] {
            many_channels(c);
        }
    }

    fn many_channels(c: usize) {
        extern crate std;
        use std::vec::Vec;
        let (n, pixels) = (2, 5);
        let x: Vec<i8> = (0..n * pixels * c).map(|i| (i * 37 % 251) as u8 as i8).collect();
        let xq = Quant {
            scale: 0.1,
            zero_point: 3,
        };
        let y = Output { scale: 0.07, ..Y };
        let mut out = std::vec![0i8; n * c];
        global_avg_pool_nhwc(n, pixels, c, &x, &xq, &y, &mut out);
        let m = (0.1f32 / 0.07) * (1.0 / 5.0);
        let b = -3.0 - (5.0 * 3.0) * m;
        for img in 0..n {
            for ch in 0..c {
                let sum: i32 = (0..pixels).map(|p| x[(img * pixels + p) * c + ch] as i32).sum();
                let want = ((sum as f32 * m + b).round_ties_even().clamp(-128.0, 127.0)) as i8;
                assert_eq!(out[img * c + ch], want, "{c} channels: image {img}, channel {ch}");
            }
        }
    }
}
