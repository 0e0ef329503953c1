//! Depthwise convolutions with a multiplier of 1 on aarch64 NEON: any
//! window, stride and dilation, output pixel by output pixel. The portable
//! kernel adds each tap into the output in memory (a load and a store of
//! every sum per tap); here a pixel's sums stay in registers across its
//! taps, 32 channels at a time (eight vectors: eight independent FMA
//! chains, enough for the FMA latency of two pipes), then 16, 8 and 4, and
//! are clamped and stored once. Channels past the last whole vector go
//! one by one. Compiled for aarch64 with NEON only.
use super::Depthwise;
use crate::nhwc::for_each_tap;
use core::arch::aarch64::*;
use core::ops::Range;

/// Depthwise with multiplier 1 on NEON: the output rows `rows` (counted
/// over all images) into `out`, which holds them.
///
/// # Safety
/// `d` must have the lengths its geometry implies (see [`Depthwise`])
/// with `O = C`.
#[target_feature(enable = "neon")]
pub(super) unsafe fn depthwise_neon(d: &Depthwise<'_>, out: &mut [f32], rows: Range<usize>) {
    let (win, c) = (d.win, d.c);
    assert!(d.o == c && out.len() >= rows.len() * win.out_w * c && rows.end <= win.batch * win.out_h);
    let whole = c / 4 * 4;
    let clamps = d.min > f32::NEG_INFINITY || d.max < f32::INFINITY;
    let first_row = rows.start;
    for r in rows {
        let (n, oh) = (r / win.out_h, r % win.out_h);
        for ow in 0..win.out_w {
            let px = Pixel {
                d,
                image: n * win.in_h * win.in_w,
                oh,
                ow,
                clamps,
                out: out[((r - first_row) * win.out_w + ow) * c..][..c].as_mut_ptr(),
            };
            // Eight vectors at a time, then the rest in blocks of 4, 2
            // and 1 (each a power of two below eight).
            let mut c0 = 0;
            while whole - c0 >= 32 {
                // SAFETY: c0 + 32 <= C (whole ≤ C), and `px` is a pixel
                // of the checked window whose C outputs `out` holds.
                unsafe { px.block::<8>(c0) };
                c0 += 32;
            }
            for v in [4, 2, 1] {
                if whole - c0 >= 4 * v {
                    // SAFETY: as above, c0 + 4·v <= C.
                    unsafe {
                        match v {
                            4 => px.block::<4>(c0),
                            2 => px.block::<2>(c0),
                            _ => px.block::<1>(c0),
                        }
                    }
                    c0 += 4 * v;
                }
            }
            // SAFETY: as above, channels whole .. C.
            unsafe { px.tail(whole) };
        }
    }
}

/// One output pixel of a depthwise convolution: image `image` (its first
/// pixel's index), row `oh`, column `ow`, its `C` outputs at `out`.
struct Pixel<'a> {
    d: &'a Depthwise<'a>,
    image: usize,
    oh: usize,
    ow: usize,
    clamps: bool,
    out: *mut f32,
}

impl Pixel<'_> {
    /// Channels `c0 .. c0 + 4·V` of the pixel.
    ///
    /// # Safety
    /// `c0 + 4·V <= C`; the pixel is inside the checked output and `out`
    /// holds its `C` floats.
    #[target_feature(enable = "neon")]
    #[inline]
    unsafe fn block<const V: usize>(&self, c0: usize) {
        let (d, c) = (self.d, self.d.c);
        let (xp, wp) = (d.x.as_ptr(), d.w.as_ptr());
        // Every load and store: the taps' pixels come from the
        // checked window (`for_each_tap`), so `(image + pix)·C` is below
        // N·H·W·C and `tap·C` below kH·kW·C, and the channels c0 + 4·V
        // are at most C (by the caller), as are the bias's.
        let mut acc: [float32x4_t; V] = core::array::from_fn(|v| match d.bias {
            // SAFETY: channels c0 + 4·V at most C (above).
            Some(b) => unsafe { vld1q_f32(b.as_ptr().add(c0 + 4 * v)) },
            None => vdupq_n_f32(0.0),
        });
        for_each_tap(d.win, self.oh, self.ow, |pix, tap| {
            let (xo, wo) = ((self.image + pix) * c + c0, tap * c + c0);
            for (v, a) in acc.iter_mut().enumerate() {
                // SAFETY: a tap of the checked window, channels below C
                // (above).
                unsafe {
                    let (xv, wv) = (vld1q_f32(xp.add(xo + 4 * v)), vld1q_f32(wp.add(wo + 4 * v)));
                    *a = vfmaq_f32(*a, xv, wv);
                }
            }
        });
        let (lo, hi) = (vdupq_n_f32(d.min), vdupq_n_f32(d.max));
        for (v, &a) in acc.iter().enumerate() {
            // FMAXNM and FMINNM, as `f32::max` and `min` in the portable
            // kernel's clamp; unclamped, a NaN stays NaN as it does there.
            let r = if self.clamps {
                vminnmq_f32(vmaxnmq_f32(a, lo), hi)
            } else {
                a
            };
            // SAFETY: `out` holds the pixel's C floats (by the caller).
            unsafe { vst1q_f32(self.out.add(c0 + 4 * v), r) };
        }
    }

    /// Channels `c0 .. C` (fewer than four) one by one.
    ///
    /// # Safety
    /// As for [`Pixel::block`], with `c0 <= C`.
    #[inline]
    unsafe fn tail(&self, c0: usize) {
        let (d, c) = (self.d, self.d.c);
        for ch in c0..c {
            let mut acc = d.bias.map_or(0.0, |b| b[ch]);
            for_each_tap(d.win, self.oh, self.ow, |pix, tap| {
                acc += d.x[(self.image + pix) * c + ch] * d.w[tap * c + ch];
            });
            if self.clamps {
                acc = acc.max(d.min).min(d.max);
            }
            // SAFETY: `ch < C` floats of the pixel's outputs.
            unsafe { *self.out.add(ch) = acc };
        }
    }
}
