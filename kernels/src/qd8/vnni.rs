//! The blockwise 4-bit layer on AVX-512 VNNI, over its repacked weights
//! (see `super::repack`): 16 outputs at a time, each `VPDPBUSD` adding a
//! quad of one row's inputs, broadcast, times 16 outputs' 4 weights to
//! the sums of one of the four partial products. The `f32` steps are
//! those of [`super::blockwise_sum`], lane for lane: one fused
//! multiply-add a block and partial, in block order.
use super::Tile;
use core::arch::x86_64::*;

/// Rows of inputs a tile sums at once.
pub(super) const ROWS: usize = 3;

pub(super) fn available() -> bool {
    crate::cpu::has_avx512_vnni()
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
        // SAFETY: the CPU has AVX-512 VNNI; the lengths are asserted above.
        unsafe {
            match distinct {
                1 => out[..1].copy_from_slice(&self.sums::<1>(rows)),
                2 => out[..2].copy_from_slice(&self.sums::<2>(rows)),
                _ => out = self.sums::<ROWS>(rows),
            }
        }
        for i in distinct..ROWS {
            out[i] = out[distinct - 1];
        }
        out
    }

    /// # Safety
    /// As checked by [`Self::rows`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn sums<const R: usize>(&self, rows: &[(&[i8], &[i32], i32, f32); ROWS]) -> [[f32; 16]; R] {
        let group = self.group;
        let low = _mm512_set1_epi8(0x0f);
        let block = super::repacked_block(group);
        let base = self.packed.as_ptr().cast::<u8>();
        let scales = base
            .wrapping_add(super::repacked_scales_at(self.group * self.blocks, group))
            .cast::<__m256i>();
        // SAFETY: reads within the lengths `rows` asserted (the tile's
        // weights, then its scales: `super::repacked_tile`).
        unsafe {
            let ks = _mm512_loadu_ps(self.ksums.as_ptr());
            // Partial 0 starts from the zero point's share, as
            // `blockwise_sum` does.
            let mut lanes: [[__m512; 4]; R] = core::array::from_fn(|r| {
                let first = _mm512_mul_ps(ks, _mm512_set1_ps(rows[r].2 as f32));
                [first, _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()]
            });
            for b in 0..self.blocks {
                let at = base.add(b * block);
                if R == 1 {
                    // One row: its weights a page ahead.
                    for line in (0..block).step_by(64) {
                        super::prefetch_ahead(at, line);
                    }
                }
                // The block's 16 bf16 scales, widened (exactly).
                let s = _mm256_loadu_si256(scales.add(b));
                let s = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(s)));
                // Each partial starts from its share of the weights' +8.
                let mut acc: [[__m512i; 4]; R] = core::array::from_fn(|r| {
                    let sums = rows[r].1.as_ptr().add(4 * b);
                    core::array::from_fn(|j| _mm512_set1_epi32(*sums.add(j)))
                });
                for p2 in 0..group / 16 {
                    // Quads 4·p2 + 0..4, partials 0..4, two 64-byte loads.
                    for half in 0..2 {
                        let v = _mm512_loadu_si512(at.add(64 * (2 * p2 + half)).cast());
                        let (wa, wb) = (
                            _mm512_and_si512(v, low),
                            _mm512_and_si512(_mm512_srli_epi16::<4>(v), low),
                        );
                        for r in 0..R {
                            let x = rows[r].0.as_ptr().add(b * group + 16 * p2 + 8 * half);
                            let (xa, xb) = (
                                x.cast::<i32>().read_unaligned(),
                                x.add(4).cast::<i32>().read_unaligned(),
                            );
                            let j = 2 * half;
                            acc[r][j] = _mm512_dpbusd_epi32(acc[r][j], wa, _mm512_set1_epi32(xa));
                            acc[r][j + 1] = _mm512_dpbusd_epi32(acc[r][j + 1], wb, _mm512_set1_epi32(xb));
                        }
                    }
                }
                for r in 0..R {
                    for j in 0..4 {
                        lanes[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][j]), s, lanes[r][j]);
                    }
                }
            }
            let (bias, min, max) = (
                _mm512_loadu_ps(self.bias.as_ptr()),
                _mm512_set1_ps(self.min),
                _mm512_set1_ps(self.max),
            );
            core::array::from_fn(|r| {
                let [l0, l1, l2, l3] = lanes[r];
                let sum = _mm512_add_ps(_mm512_add_ps(l0, l1), _mm512_add_ps(l2, l3));
                let y = _mm512_fmadd_ps(sum, _mm512_set1_ps(rows[r].3), bias);
                // max(y, min) then min(y, max), as x86 orders them: a NaN
                // becomes `min`.
                let y = _mm512_min_ps(_mm512_max_ps(y, min), max);
                let mut o = [0.0f32; 16];
                _mm512_storeu_ps(o.as_mut_ptr(), y);
                o
            })
        }
    }
}
