//! Depthwise convolutions on aarch64 NEON, which every aarch64 target
//! with an FPU has (so no run-time check): passes of up to
//! [`DW_VECTORS`] vectors of 16 channels over every output pixel, as the
//! AVX2 kernel does.
//!
//! Each tap multiplies 16 inputs by 16 weights with `SMULL`/`SMULL2`
//! (8 × 8 → 16 bits: exact, as `|-128 · -128| < 2^15`) and adds the
//! 16-bit products to four vectors of 32-bit sums with `SADDW`/`SADDW2`.
//! Two products of the same channel would overflow 16 bits (2 · 2^14),
//! so each is widened before the next is added. The sums wrap as the
//! portable path's do, and are requantized 4 lanes at a time in
//! [`Output::requantize`]'s `f32` steps, so the outputs are its to the bit.
//!
//! The whole file is compiled only for aarch64 with NEON.
use super::{Depthwise, DwTaps, Output, DEPTHWISE_TAPS};
use core::arch::aarch64::*;

/// Vectors of 16 channels a pass of [`depthwise`] takes at most: 16 sum
/// vectors, beside a tap's inputs, weights and products (of the 32).
const DW_VECTORS: usize = 4;

/// Output rows `rows` (over batch and height) of a depthwise convolution
/// with one output per channel and at most [`DEPTHWISE_TAPS`] taps (see
/// `super::depthwise_conv`), into `out` (those rows' outputs). The
/// shapes are checked by [`Depthwise::assert_fits`].
pub(crate) fn depthwise(d: &Depthwise<'_>, rows: (usize, usize), out: &mut [i8]) {
    d.assert_fits(rows, out);
    let c = d.g.in_c;
    let pad = [d.xq.zero_point as i8; 16 * DW_VECTORS];
    let at = DwTaps::new(d, &pad);
    let full = c.is_multiple_of(16);
    super::dw_passes(c, 16, DW_VECTORS, |nv, cb| {
        // SAFETY: NEON is on (this file's cfg); the shapes are asserted
        // and `nv` vectors from `cb` hold channels (`dw_passes`).
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
/// Per tap and vector: one load of 16 inputs, one of 16 weights, two
/// `SMULL`s and four `SADDW`s. The input zero point is folded into the
/// sums' start (`- zp · Σ w`) and taps in the padding read a row of zero
/// points, so every tap is the same.
///
/// # Safety
/// NEON; `d` passed [`Depthwise::assert_fits`] for `rows` and `out`, `at`
/// is its taps' pointers (padding of `16 · DW_VECTORS` bytes); `cb` lies
/// within the channels and `NV` vectors from it reach the last at most.
#[inline]
#[target_feature(enable = "neon")]
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
    // [vector][quarter]: channels 0–3, 4–7, 8–11, 12–15 of the vector.
    let mut scale = [[vdupq_n_f32(1.0); 4]; NV];
    let mut start = [[vdupq_n_s32(0); 4]; NV];
    // Lanes past the last channel weigh 0 (their sums are not stored).
    let mut wt = [[vdupq_n_s8(0); NV]; DEPTHWISE_TAPS];
    for j in 0..NV {
        let c0 = cb + 16 * j;
        let (mut sc, mut st) = ([1.0f32; 16], [0i32; 16]);
        for k in 0..lanes[j] {
            (sc[k], st[k]) = d.folded(c0 + k);
        }
        for (t, wt) in wt.iter_mut().enumerate().take(taps) {
            let mut w = [0i8; 16];
            w[..lanes[j]].copy_from_slice(&d.w[t * c + c0..][..lanes[j]]);
            // SAFETY: 16 lanes from an array of 16.
            wt[j] = unsafe { vld1q_s8(w.as_ptr()) };
        }
        for q in 0..4 {
            // SAFETY: 4 lanes from arrays of 16, at 4 · q.
            unsafe {
                scale[j][q] = vld1q_f32(sc.as_ptr().add(4 * q));
                start[j][q] = vld1q_s32(st.as_ptr().add(4 * q));
            }
        }
    }
    let mut ptr = [core::ptr::null(); DEPTHWISE_TAPS];
    let mut pixel = 0;
    for row in rows.0..rows.1 {
        let (n, oy) = (row / win.out_h, row % win.out_h);
        for ox in 0..win.out_w {
            at.pointers(n, oy, ox, cb, &mut ptr);
            // SAFETY: every pointer of `ptr` has the pass's channels (or
            // is the zero-point row, of 16 · DW_VECTORS bytes); a partial
            // vector is read only for its lanes.
            let load = |p: *const i8, lanes: usize| unsafe {
                match FULL || lanes == 16 {
                    true => vld1q_s8(p),
                    false => {
                        let mut part = [0i8; 16];
                        core::ptr::copy_nonoverlapping(p, part.as_mut_ptr(), lanes);
                        vld1q_s8(part.as_ptr())
                    }
                }
            };
            let mut acc = start;
            for (t, wt) in wt.iter().enumerate().take(taps) {
                for j in 0..NV {
                    // SAFETY: `ptr[t]` is readable for the pass's
                    // channels, as above; `16 · j` lies within them.
                    let xv = load(unsafe { ptr[t].add(16 * j) }, lanes[j]);
                    let lo = vmull_s8(vget_low_s8(xv), vget_low_s8(wt[j]));
                    let hi = vmull_high_s8(xv, wt[j]);
                    acc[j][0] = vaddw_s16(acc[j][0], vget_low_s16(lo));
                    acc[j][1] = vaddw_high_s16(acc[j][1], lo);
                    acc[j][2] = vaddw_s16(acc[j][2], vget_low_s16(hi));
                    acc[j][3] = vaddw_high_s16(acc[j][3], hi);
                }
            }
            for j in 0..NV {
                let q: [int32x4_t; 4] = core::array::from_fn(|q| r.apply(acc[j][q], scale[j][q]));
                // In range already: the saturating narrows only narrow.
                let bytes = vcombine_s8(
                    vqmovn_s16(vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]))),
                    vqmovn_s16(vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3]))),
                );
                let o = &mut out[pixel * c + cb + 16 * j..][..lanes[j]];
                if FULL || lanes[j] == 16 {
                    // SAFETY: `o` has 16 bytes.
                    unsafe { vst1q_s8(o.as_mut_ptr(), bytes) };
                } else {
                    let mut all = [0i8; 16];
                    // SAFETY: 16 bytes into an array of 16.
                    unsafe { vst1q_s8(all.as_mut_ptr(), bytes) };
                    o.copy_from_slice(&all[..o.len()]);
                }
            }
            pixel += 1;
        }
    }
}

/// [`Output::requantize`] on 4 lanes, in the same `f32` steps.
#[derive(Clone, Copy)]
struct Requant {
    lo: float32x4_t,
    hi: float32x4_t,
    zero_point: int32x4_t,
}

impl Requant {
    #[inline]
    #[target_feature(enable = "neon")]
    fn new(y: &Output) -> Self {
        Requant {
            lo: vdupq_n_f32((y.qmin - y.zero_point) as f32),
            hi: vdupq_n_f32((y.qmax - y.zero_point) as f32),
            zero_point: vdupq_n_s32(y.zero_point),
        }
    }

    /// 4 outputs of sums `acc` at scales `scale`, as 32-bit integers.
    #[inline]
    #[target_feature(enable = "neon")]
    fn apply(&self, acc: int32x4_t, scale: float32x4_t) -> int32x4_t {
        let v = vmulq_f32(vcvtq_f32_s32(acc), scale);
        let v = vminq_f32(vmaxq_f32(v, self.lo), self.hi);
        // `FCVTNS` rounds to nearest, ties to even: `round_even`'s
        // magic-number addition for |v| < 2^22 (after the clamp).
        vaddq_s32(vcvtnq_s32_f32(v), self.zero_point)
    }
}
