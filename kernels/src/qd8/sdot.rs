//! The blockwise 4-bit layer on aarch64's `SDOT` (FEAT_DotProd), over its
//! repacked weights (see `super::repack`), mirroring the VNNI kernel.
//!
//! A repacked 64-byte vector holds, for 16 outputs, 4 weights of two
//! quads each (low nibbles the first quad, high the second): as four
//! 16-byte NEON vectors, each 4 outputs' 4 weights one after another,
//! which is the order in which `SDOT` (by element) multiplies a quad of
//! inputs into 4 sums. The stored nibbles (`0..16`) are valid signed
//! bytes, so `SDOT` takes them signed by the signed inputs; each partial
//! starts from the row's block sum (`-8 · Σ x`), which takes the stored
//! `+8` back out: the integer sums are exact, as on x86.
//!
//! A tile is [`ROWS`] rows by 8 outputs (each of a row's four partials in
//! two vectors: 16 sum vectors), run twice for the 16 outputs, so that
//! each weight load and nibble split serves both rows. The `f32` steps
//! are those of [`super::blockwise_sum`], lane for lane: one fused
//! multiply-add (`FMLA`, rounded once like x86's) a block and partial, in
//! block order, then the same additions, final fused multiply-add and
//! x86's clamp.
//!
//! `SDOT` is issued through `asm!` (its intrinsics are unstable), in
//! functions compiled with the `dotprod` target feature.
use super::Tile;
use core::arch::aarch64::*;
use core::arch::asm;

/// Rows of inputs a tile sums at once.
pub(super) const ROWS: usize = 2;

/// Whether this CPU has `SDOT`.
pub(super) fn available() -> bool {
    crate::cpu::aarch64_features().dotprod
}

impl Tile<'_> {
    /// The 16 outputs of each row (its inputs in quads, `super::into_quads`;
    /// its block sums, zero point and scale); a row repeated at the end is
    /// summed once.
    pub(super) fn rows(&self, rows: &[(&[i8], &[i32], i32, f32); ROWS]) -> [[f32; 16]; ROWS] {
        let k = self.group * self.blocks;
        assert!(super::repacks(k, self.group));
        assert!(self.packed.len() * 4 >= super::repacked_tile(k, self.group));
        assert!(rows
            .iter()
            .all(|(x, s, _, _)| x.len() >= k && s.len() >= 4 * self.blocks));
        let distinct = 1
            + (1..ROWS)
                .take_while(|&i| !core::ptr::eq(rows[i].0, rows[i - 1].0))
                .count();
        let mut out = [[0.0; 16]; ROWS];
        assert!(available());
        for half in 0..2 {
            // SAFETY: the CPU has FEAT_DotProd (asserted); the lengths are
            // asserted above.
            unsafe {
                match distinct {
                    1 => self.sums::<1>(rows, half, &mut out),
                    _ => self.sums::<ROWS>(rows, half, &mut out),
                }
            }
        }
        for i in distinct..ROWS {
            out[i] = out[distinct - 1];
        }
        out
    }

    /// Outputs `8 · half..8 · half + 8` of the first `R` rows into `out`.
    ///
    /// # Safety
    /// The CPU must have FEAT_DotProd; the lengths as checked by
    /// [`Self::rows`].
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn sums<const R: usize>(
        &self,
        rows: &[(&[i8], &[i32], i32, f32); ROWS],
        half: usize,
        out: &mut [[f32; 16]; ROWS],
    ) {
        let group = self.group;
        let block = super::repacked_block(group);
        let base = self.packed.as_ptr().cast::<u8>();
        let scales = base
            .wrapping_add(super::repacked_scales_at(self.group * self.blocks, group))
            .cast::<u16>();
        let o0 = 8 * half;
        let low = vdupq_n_u8(0x0f);
        // SAFETY: reads within the lengths `rows` asserted: block `b`'s
        // `block` bytes of the repacking and its 16 scales after the
        // weights ([`super::repacked_tile`]), its 16 inputs `b · group + 16 ·
        // p2..` of each row (`group` a multiple of 16) and its 4 sums;
        // `o0 + 8 <= 16` floats of the tile's arrays and of `out`.
        unsafe {
            let ks = [
                vld1q_f32(self.ksums.as_ptr().add(o0)),
                vld1q_f32(self.ksums.as_ptr().add(o0 + 4)),
            ];
            // lanes[r][j][v]: partial j of outputs o0 + 4v..o0 + 4v + 4;
            // partial 0 starts from the zero point's share, as
            // `blockwise_sum` does.
            let mut lanes: [[[float32x4_t; 2]; 4]; R] = core::array::from_fn(|r| {
                let zp = vdupq_n_f32(rows[r].2 as f32);
                let zero = vdupq_n_f32(0.0);
                [
                    [vmulq_f32(ks[0], zp), vmulq_f32(ks[1], zp)],
                    [zero; 2],
                    [zero; 2],
                    [zero; 2],
                ]
            });
            for b in 0..self.blocks {
                let at = base.add(b * block);
                // Outputs o0..o0 + 8's bf16 scales, widened (exactly).
                let s = vld1q_u16(scales.add(16 * b + o0));
                let s = [
                    vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(s))),
                    vreinterpretq_f32_u32(vshll_high_n_u16::<16>(s)),
                ];
                // Each partial starts from its share of the weights' +8.
                let mut acc: [[[int32x4_t; 2]; 4]; R] = core::array::from_fn(|r| {
                    let sums = rows[r].1.as_ptr().add(4 * b);
                    core::array::from_fn(|j| [vdupq_n_s32(*sums.add(j)); 2])
                });
                for p2 in 0..group / 16 {
                    // Quads 4·p2 + 0..4 of each row: partials 0..4.
                    let xs: [int8x16_t; R] =
                        core::array::from_fn(|r| vld1q_s8(rows[r].0.as_ptr().add(b * group + 16 * p2)));
                    // Vector 2·p2 + pair: quads 4·p2 + 2·pair (low
                    // nibbles) and 4·p2 + 2·pair + 1 (high).
                    for pair in 0..2 {
                        let v = at.add(64 * (2 * p2 + pair) + 4 * o0);
                        for (h, w) in [vld1q_u8(v), vld1q_u8(v.add(16))].into_iter().enumerate() {
                            let (wa, wb) = (
                                vreinterpretq_s8_u8(vandq_u8(w, low)),
                                vreinterpretq_s8_u8(vshrq_n_u8::<4>(w)),
                            );
                            for r in 0..R {
                                if pair == 0 {
                                    sdot::<0>(&mut acc[r][0][h], wa, xs[r]);
                                    sdot::<1>(&mut acc[r][1][h], wb, xs[r]);
                                } else {
                                    sdot::<2>(&mut acc[r][2][h], wa, xs[r]);
                                    sdot::<3>(&mut acc[r][3][h], wb, xs[r]);
                                }
                            }
                        }
                    }
                }
                for r in 0..R {
                    for j in 0..4 {
                        for h in 0..2 {
                            lanes[r][j][h] = vfmaq_f32(lanes[r][j][h], vcvtq_f32_s32(acc[r][j][h]), s[h]);
                        }
                    }
                }
            }
            let (min, max) = (vdupq_n_f32(self.min), vdupq_n_f32(self.max));
            for r in 0..R {
                let scale = vdupq_n_f32(rows[r].3);
                for h in 0..2 {
                    let [l0, l1, l2, l3] = lanes[r].map(|l| l[h]);
                    let sum = vaddq_f32(vaddq_f32(l0, l1), vaddq_f32(l2, l3));
                    let bias = vld1q_f32(self.bias.as_ptr().add(o0 + 4 * h));
                    let y = vfmaq_f32(bias, sum, scale);
                    // x86's max(y, min) then min(y, max): a NaN becomes
                    // `min` (NEON's FMAX/FMIN would keep it).
                    let y = vbslq_f32(vcgtq_f32(y, min), y, min);
                    let y = vbslq_f32(vcltq_f32(y, max), y, max);
                    vst1q_f32(out[r].as_mut_ptr().add(o0 + 4 * h), y);
                }
            }
        }
    }
}

/// `acc += w · x.4b[L]`: each lane of `acc` the dot product of its 4 bytes
/// of `w` with quad `L` of `x`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn sdot<const L: i32>(acc: &mut int32x4_t, w: int8x16_t, x: int8x16_t) {
    // SAFETY: the CPU has FEAT_DotProd (this function's feature); the
    // instruction touches only its registers.
    unsafe {
        asm!(
            "sdot {a:v}.4s, {w:v}.16b, {x:v}.4b[{l}]",
            a = inout(vreg) *acc,
            w = in(vreg) w,
            x = in(vreg) x,
            l = const L,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
}
