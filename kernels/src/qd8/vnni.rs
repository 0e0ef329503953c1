//! The blockwise 4-bit layer on AVX-512 VNNI, over its repacked weights
//! (see `super::repack`), summed as XNNPACK's VNNI kernels sum it
//! ([`super::BlockwiseOrder::Blocks`], [`super::blockwise_sum`]):
//! 16 outputs at a time, each `VPDPBUSD` adding a quad of one row's
//! inputs plus 128 (`u8`), broadcast, times 16 outputs' 4 weights shifted
//! up a nibble (`16 · w`, signed) to the row's block sums; then one
//! conversion and fused multiply-add a block and row.
use super::{Tile, Tiles};
use core::arch::x86_64::*;

/// Rows of inputs a tile sums at once: each takes two sums and its `f32`
/// lanes, 24 of the 32 registers. Eight rather than six: SmolLM2's layers
/// over 128 rows went from 120 to 127 GMAC/s on a Zen 4 thread,
/// Llama-3.2-1B's from 157 to 161.
pub(super) const ROWS: usize = 8;

pub(super) fn available() -> bool {
    crate::cpu::has_avx512_vnni()
}

impl Tile<'_> {
    /// The 16 outputs of each row (its inputs in quads, plus 128,
    /// `super::RowLayout::UnsignedQuads`; its zero point and scale); a row
    /// repeated at the end is summed once.
    pub(super) fn rows(&self, rows: &[(&[i8], &[i32], i32, f32); ROWS]) -> [[f32; 16]; ROWS] {
        let k = self.group * self.blocks;
        assert!(super::repacks(k, self.group));
        assert!(self.packed.len() * 4 >= super::repacked_tile(k, self.group));
        assert!(rows.iter().all(|(x, _, _, _)| x.len() >= k));
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
                3 => out[..3].copy_from_slice(&self.sums::<3>(rows)),
                4 => out[..4].copy_from_slice(&self.sums::<4>(rows)),
                5 => out[..5].copy_from_slice(&self.sums::<5>(rows)),
                6 => out[..6].copy_from_slice(&self.sums::<6>(rows)),
                7 => out[..7].copy_from_slice(&self.sums::<7>(rows)),
                _ => out = self.sums::<ROWS>(rows),
            }
        }
        for i in distinct..ROWS {
            out[i] = out[distinct - 1];
        }
        out
    }
}

impl Tiles<'_> {
    /// The `16 · T` outputs of the tiles for a single row (a decoded
    /// token) into `out`, the tiles' sums interleaved: one row leaves a
    /// tile two chains of additions, too few to hide `VPDPBUSD`'s latency,
    /// and every tile more adds two. Each output is summed as
    /// [`Tile::rows`] sums it.
    pub(super) fn one_row<const T: usize>(&self, row: &(&[i8], &[i32], i32, f32), out: &mut [f32]) {
        let k = self.group * self.blocks;
        assert!(super::repacks(k, self.group));
        assert!(self.packed.len() * 4 >= T * super::repacked_tile(k, self.group));
        assert!(row.0.len() >= k && out.len() >= 16 * T && self.ksums.len() >= 16 * T);
        assert!(self.bias.is_none_or(|b| b.len() >= 16 * T));
        assert!(available());
        // SAFETY: the CPU has AVX-512 VNNI; the lengths are asserted above.
        unsafe { self.one_row_sums::<T>(row, out) }
    }

    /// # Safety
    /// As checked by [`Self::one_row`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn one_row_sums<const T: usize>(&self, row: &(&[i8], &[i32], i32, f32), out: &mut [f32]) {
        let (group, blocks) = (self.group, self.blocks);
        let block = super::repacked_block(group);
        let tile = super::repacked_tile(group * blocks, group);
        let bases: [*const u8; T] = core::array::from_fn(|t| self.packed.as_ptr().cast::<u8>().wrapping_add(t * tile));
        let scales: [*const __m256i; T] = core::array::from_fn(|t| {
            bases[t]
                .wrapping_add(super::repacked_scales_at(group * blocks, group))
                .cast::<__m256i>()
        });
        const HIGH_LESS_128: i32 = 0x6a;
        let (high, sign) = (_mm512_set1_epi8(0xf0u8 as i8), _mm512_set1_epi8(i8::MIN));
        // SAFETY: reads within the lengths `one_row` asserted.
        unsafe {
            let zp = _mm512_set1_ps((row.2 + 128) as f32);
            let mut lanes: [__m512; T] =
                core::array::from_fn(|t| _mm512_mul_ps(_mm512_loadu_ps(self.ksums.as_ptr().add(16 * t)), zp));
            // The next T tiles follow these: each block prefetches its
            // share of them into L2, a whole group of tiles ahead. Small
            // layers (576 inputs: 18 blocks a tile) have tiles too short
            // for a prefetch a fixed distance ahead within each; on a Zen
            // 4 thread this took SmolLM2's layers from 12 to 19 GB/s, and
            // Llama-3.2-1B's from 18 to 21.
            let region = T * tile;
            let chunk = region.div_ceil(blocks).next_multiple_of(64);
            let next = bases[0].wrapping_add(region);
            for b in 0..blocks {
                let mut acc = [[_mm512_setzero_si512(); 2]; T];
                let ahead = next.wrapping_add(b * chunk);
                for line in (0..chunk).step_by(64) {
                    // Never faults, whatever the address.
                    _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(line).cast());
                }
                for p in 0..group / 16 {
                    #[allow(clippy::needless_range_loop)]
                    for half in 0..2 {
                        let v = 2 * p + half;
                        let x = row.0.as_ptr().add(b * group + 8 * v);
                        let (xa, xb) = (
                            _mm512_set1_epi32(x.cast::<i32>().read_unaligned()),
                            _mm512_set1_epi32(x.add(4).cast::<i32>().read_unaligned()),
                        );
                        for t in 0..T {
                            let w = _mm512_loadu_si512(bases[t].add(b * block + 64 * v).cast());
                            let wa = _mm512_ternarylogic_epi32::<HIGH_LESS_128>(_mm512_slli_epi16::<4>(w), high, sign);
                            let wb = _mm512_ternarylogic_epi32::<HIGH_LESS_128>(w, high, sign);
                            let sums = &mut acc[t][half];
                            *sums = _mm512_dpbusd_epi32(*sums, xa, wa);
                            *sums = _mm512_dpbusd_epi32(*sums, xb, wb);
                        }
                    }
                }
                for t in 0..T {
                    let s = _mm256_loadu_si256(scales[t].add(b));
                    let s = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(s)));
                    let s = _mm512_mul_ps(s, _mm512_set1_ps(1.0 / 16.0));
                    let sum = _mm512_add_epi32(acc[t][0], acc[t][1]);
                    lanes[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), s, lanes[t]);
                }
            }
            let (min, max) = (_mm512_set1_ps(self.min), _mm512_set1_ps(self.max));
            for (t, lanes) in lanes.iter().enumerate() {
                let bias = match self.bias {
                    Some(b) => _mm512_loadu_ps(b.as_ptr().add(16 * t)),
                    None => _mm512_setzero_ps(),
                };
                let y = _mm512_add_ps(_mm512_mul_ps(*lanes, _mm512_set1_ps(row.3)), bias);
                let y = _mm512_min_ps(_mm512_max_ps(y, min), max);
                _mm512_storeu_ps(out.as_mut_ptr().add(16 * t), y);
            }
        }
    }
}

impl Tile<'_> {
    /// # Safety
    /// As checked by [`Self::rows`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn sums<const R: usize>(&self, rows: &[(&[i8], &[i32], i32, f32); ROWS]) -> [[f32; 16]; R] {
        let group = self.group;
        let block = super::repacked_block(group);
        let base = self.packed.as_ptr().cast::<u8>();
        let scales = base
            .wrapping_add(super::repacked_scales_at(self.group * self.blocks, group))
            .cast::<__m256i>();
        // `(a & b) ^ c`, for VPTERNLOGD.
        const HIGH_LESS_128: i32 = 0x6a;
        let (high, sign) = (_mm512_set1_epi8(0xf0u8 as i8), _mm512_set1_epi8(i8::MIN));
        // SAFETY: reads within the lengths `rows` asserted (the tile's
        // weights, then its scales: `super::repacked_tile`).
        unsafe {
            let ks = _mm512_loadu_ps(self.ksums.as_ptr());
            // The zero point's share first.
            let mut lanes: [__m512; R] =
                core::array::from_fn(|r| _mm512_mul_ps(ks, _mm512_set1_ps((rows[r].2 + 128) as f32)));
            for b in 0..self.blocks {
                let at = base.add(b * block);
                if R == 1 {
                    // One row: its weights a page ahead.
                    for line in (0..block).step_by(64) {
                        super::prefetch_ahead(at, line);
                    }
                }
                // The block's 16 bf16 scales, widened (exactly), over 16
                // for the weights' shift.
                let s = _mm256_loadu_si256(scales.add(b));
                let s = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(s)));
                let s = _mm512_mul_ps(s, _mm512_set1_ps(1.0 / 16.0));
                // Two sums a row, for two chains of additions.
                let mut acc = [[_mm512_setzero_si512(); 2]; R];
                for p in 0..group / 16 {
                    // Quads 4p + 2·half (low nibbles) and 4p + 2·half + 1
                    // (high) in each vector: the stored nibble `w + 8` in
                    // a byte's high half, less 128, is `16 · w`.
                    // `half` picks the vector as well as the sums.
                    #[allow(clippy::needless_range_loop)]
                    for half in 0..2 {
                        let v = 2 * p + half;
                        let w = _mm512_loadu_si512(at.add(64 * v).cast());
                        let wa = _mm512_ternarylogic_epi32::<HIGH_LESS_128>(_mm512_slli_epi16::<4>(w), high, sign);
                        let wb = _mm512_ternarylogic_epi32::<HIGH_LESS_128>(w, high, sign);
                        for r in 0..R {
                            let x = rows[r].0.as_ptr().add(b * group + 8 * v);
                            let (xa, xb) = (
                                x.cast::<i32>().read_unaligned(),
                                x.add(4).cast::<i32>().read_unaligned(),
                            );
                            let sums = &mut acc[r][half];
                            *sums = _mm512_dpbusd_epi32(*sums, _mm512_set1_epi32(xa), wa);
                            *sums = _mm512_dpbusd_epi32(*sums, _mm512_set1_epi32(xb), wb);
                        }
                    }
                }
                for r in 0..R {
                    let sum = _mm512_add_epi32(acc[r][0], acc[r][1]);
                    lanes[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), s, lanes[r]);
                }
            }
            let (bias, min, max) = (
                _mm512_loadu_ps(self.bias.as_ptr()),
                _mm512_set1_ps(self.min),
                _mm512_set1_ps(self.max),
            );
            core::array::from_fn(|r| {
                // Scaled, then the bias added: two roundings, as XNNPACK.
                let y = _mm512_add_ps(_mm512_mul_ps(lanes[r], _mm512_set1_ps(rows[r].3)), bias);
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
