//! Depthwise 3×3 convolutions on AVX-512, undilated, stride 1 across (any
//! stride down), any padding: MobileNet's stride-1 depthwise layers.
//!
//! Read straight from the NHWC input, a 16-channel block of a pixel is one
//! 64-byte line `4·C` bytes from the next pixel's, each input row is read
//! from L2 by the three output rows whose windows cover it, the pixels at
//! the image's edges need code of their own, and a short row (7 or 14
//! pixels) leaves the FMAs little to overlap. So, one channel block at a
//! time, each input row is copied once, its padding as zeros, into a ring
//! of three rows of 16-channel pixels on the stack, which stays in L1.
//! Every output row is then one uniform sweep over three ring rows, 8
//! pixels at a time, with the block's nine weights and its bias held in
//! registers. Long rows go in segments of at most [`SEGMENT`] outputs, so
//! that the ring's rows have a fixed length.
//!
//! At stride 2 across, the copy costs more than it saves: output rows
//! share one input row in three, not two, and twice as many input pixels
//! are copied per output (4.0 → 4.9 µs on 7 rows of 112 × 96), so those
//! layers read the input directly (see [`super::dw_avx512`]).
use super::Depthwise;
use crate::nhwc::Window2d;
use crate::x86::{lanes, load16, store16};
use core::arch::x86_64::*;
use core::mem::MaybeUninit;

/// Output columns per segment of a row.
const SEGMENT: usize = 128;
/// Rows in the ring: the three a window reads. Consecutive rows take
/// different ring rows, so a row copied in for one output row never
/// replaces another that output row reads.
const RING: usize = 3;
/// Pixels of a ring row: the most a segment's sweep reads.
const COLUMNS: usize = SEGMENT + 2;
/// About how many bytes of input a block of output rows reads: each
/// channel block sweeps the block's rows in turn, so they should stay in
/// L2 (half of it here) until the last block has read them.
const ROW_BLOCK_BYTES: usize = 512 * 1024;

/// Whether [`depthwise3x3_avx512`] takes this window.
pub(super) fn fits(win: &Window2d) -> bool {
    (win.kernel_h, win.kernel_w) == (3, 3) && (win.dilation_h, win.dilation_w) == (1, 1) && win.stride_w == 1
}

/// The ring: [`RING`] rows of [`COLUMNS`] pixels of 16 floats.
#[repr(C, align(64))]
struct Ring([f32; RING * COLUMNS * 16]);

/// A depthwise convolution whose window [`fits`], all of `out`: with
/// threads, each takes a share of the channel blocks (a share of the rows
/// would copy the rows where the shares meet twice, 2 in 9 of them on 14
/// × 14 pixels split in two).
///
/// # Safety
/// The CPU must support AVX-512F; `d` must have the lengths its geometry
/// implies (see [`Depthwise`]) with `O = C`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn depthwise3x3_avx512(d: &Depthwise<'_>, out: &mut [f32]) {
    let (win, c) = (d.win, d.c);
    let rows = win.batch * win.out_h;
    assert!(fits(win) && d.o == c && out.len() >= rows * win.out_w * c);
    let blocks = c.div_ceil(16);
    let worth_splitting = out.len() * 9 >= 1 << 17;
    let parts = crate::parallel::split(if worth_splitting { blocks } else { 1 }, 1);
    // SAFETY: each part writes only the channels of its own blocks (and
    // reads only the input); `out` outlives `run_parts`.
    let out = unsafe { crate::parallel::Shared::new(out.as_mut_ptr()) };
    crate::parallel::run_parts(parts.parts(), &|i| {
        let Some((b0, b1)) = parts.range(i) else { return };
        let blocks = if worth_splitting { b0..b1 } else { 0..blocks };
        // SAFETY: AVX-512F, and the lengths, by the caller; part `i`
        // writes only the channels of its blocks, which no other part
        // writes, and `out` outlives the parts.
        unsafe { blocks_avx512(d, out.get(), blocks) }
    });
}

/// Channel blocks `blocks` (of 16 channels) of every output pixel.
///
/// # Safety
/// As [`depthwise3x3_avx512`]; `out` holds `N·OH·OW·C` floats, and no
/// other thread accesses the channels of `blocks` meanwhile.
#[target_feature(enable = "avx512f")]
unsafe fn blocks_avx512(d: &Depthwise<'_>, out: *mut f32, blocks: core::ops::Range<usize>) {
    let (win, c) = (d.win, d.c);
    let rows = win.batch * win.out_h;
    assert!(d.x.len() >= win.batch * win.in_h * win.in_w * c && d.w.len() >= 9 * c);
    assert!(d.bias.is_none_or(|b| b.len() >= c));
    let mut ring = MaybeUninit::<Ring>::uninit();
    let ring = ring.as_mut_ptr().cast::<f32>();
    let segments = win.out_w.div_ceil(SEGMENT);
    let segment = win.out_w.div_ceil(segments).next_multiple_of(8);
    // The lines of an input row this part reads.
    let in_row_bytes = (win.in_w * c.min(blocks.len() * 16) * 4).max(1);
    let block_rows = ((ROW_BLOCK_BYTES / in_row_bytes).saturating_sub(2) / win.stride_h).max(1);
    let mut r = 0;
    while r < rows {
        // Rows of one image, at most a row block.
        let n = r / win.out_h;
        let end = rows.min((n + 1) * win.out_h).min(r + block_rows);
        let image = d.x.as_ptr().wrapping_add(n * win.in_h * win.in_w * c);
        for c0 in blocks.clone().map(|b| b * 16).take_while(|&c0| c0 < c) {
            let m = lanes(c - c0);
            // SAFETY: taps below 9, lanes below C by the mask.
            let sweep = unsafe {
                Sweep {
                    w: core::array::from_fn(|k| {
                        core::array::from_fn(|j| load16(m, d.w.as_ptr().add((k * 3 + j) * c + c0)))
                    }),
                    bias: match d.bias {
                        Some(b) => load16(m, b.as_ptr().add(c0)),
                        None => _mm512_setzero_ps(),
                    },
                    lo: _mm512_set1_ps(d.min),
                    hi: _mm512_set1_ps(d.max),
                    c,
                    m,
                }
            };
            for s0 in (0..win.out_w).step_by(segment) {
                let outputs = segment.min(win.out_w - s0);
                let first = s0 as isize - win.pad_left as isize;
                let columns = swept(outputs) + 2;
                assert!(columns <= COLUMNS);
                // Padded input row held by each ring row.
                let mut held = [usize::MAX; RING];
                for oh_all in r..end {
                    let oh = oh_all - n * win.out_h;
                    let mut src = [ring.cast_const(); 3];
                    for (k, s) in src.iter_mut().enumerate() {
                        let padded = oh * win.stride_h + k;
                        let slot = padded % RING;
                        let dst = ring.wrapping_add(slot * COLUMNS * 16);
                        if held[slot] != padded {
                            let ih = padded.checked_sub(win.pad_top).filter(|&ih| ih < win.in_h);
                            let row = ih.map(|ih| image.wrapping_add(ih * win.in_w * c + c0));
                            // SAFETY: `dst` is a ring row of COLUMNS ≥
                            // `columns` pixels; `row` an input row of the
                            // image, read at its columns 0 .. in_w.
                            unsafe { copy_row(dst, row, win.in_w, first, columns, c, m) };
                            held[slot] = padded;
                        }
                        *s = dst;
                    }
                    let o = out.wrapping_add((oh_all * win.out_w + s0) * c + c0);
                    // SAFETY: the ring rows hold `columns` written pixels,
                    // all a sweep of `outputs` pixels reads; the outputs
                    // are pixels s0 .. s0 + outputs of an output row of
                    // `out`, lanes below C by the mask, in this part's
                    // blocks.
                    unsafe { sweep.row(&src, o, outputs) }
                }
            }
        }
        r = end;
    }
}

/// Pixels a sweep of `outputs` computes: whole groups of 8, and a last
/// group of 8 or 4.
fn swept(outputs: usize) -> usize {
    match outputs % 8 {
        0 => outputs,
        1..=4 => outputs / 8 * 8 + 4,
        _ => outputs.next_multiple_of(8),
    }
}

/// Copies `columns` pixels (lanes `m` of 16 channels) of input row `row`
/// from column `first` into the ring row `dst`: zeros where the columns
/// fall outside the image, or everywhere for a row of padding (`None`).
///
/// # Safety
/// `dst` holds `columns` pixels, 64-byte aligned; `row`, if any, points at
/// the first of `in_w` pixels `c` floats apart, lanes `m` readable.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn copy_row(
    dst: *mut f32,
    row: Option<*const f32>,
    in_w: usize,
    first: isize,
    columns: usize,
    c: usize,
    m: __mmask16,
) {
    let (lead, inside) = match row {
        Some(_) => {
            let lead = if first < 0 {
                first.unsigned_abs().min(columns)
            } else {
                0
            };
            (
                lead,
                (in_w as isize - first).clamp(lead as isize, columns as isize) as usize,
            )
        }
        None => (columns, columns),
    };
    // Volatile, so that the few zeros do not become calls to `memset`
    // (7% of the time on 14 × 14 pixels). Masked loads of every column
    // instead, empty outside the image, ran 15-20% slower.
    let zero = |j: usize| {
        // SAFETY: j < columns, by the caller.
        unsafe { dst.add(j * 16).cast::<__m512>().write_volatile(_mm512_setzero_ps()) }
    };
    (0..lead).for_each(zero);
    if let Some(row) = row {
        for j in lead..inside {
            // SAFETY: by the caller; columns lead .. inside are the
            // image's columns first + j in 0 .. in_w.
            unsafe {
                let col = (first + j as isize) as usize;
                _mm512_store_ps(dst.add(j * 16), load16(m, row.add(col * c)));
            }
        }
    }
    (inside..columns).for_each(zero);
}

/// What the sweeps of a channel block's output rows share.
struct Sweep {
    /// The block's weights, `[kernel row][kernel column]`.
    w: [[__m512; 3]; 3],
    bias: __m512,
    lo: __m512,
    hi: __m512,
    /// Floats from one output pixel to the next.
    c: usize,
    /// The block's channels.
    m: __mmask16,
}

impl Sweep {
    /// `outputs` pixels of one output row (from `out`) from the ring rows
    /// `src` (one per kernel row), 8 at a time.
    ///
    /// # Safety
    /// Each `src` row holds `swept(outputs) + 2` pixels; `out`
    /// holds `outputs` pixels `c` floats apart, lanes `m` writable.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn row(&self, src: &[*const f32; 3], out: *mut f32, outputs: usize) {
        let mut g = 0;
        while g < outputs {
            let left = outputs - g;
            // SAFETY: by the caller; the group's pixels lie within
            // `swept(outputs)`, its stores within `outputs`.
            unsafe {
                if left > 4 {
                    self.group::<8>(src, out, g, left.min(8));
                    g += 8;
                } else {
                    self.group::<4>(src, out, g, left);
                    g += 4;
                }
            }
        }
    }

    /// Output pixels `g .. g + PX`, of which the first `valid` are stored.
    ///
    /// # Safety
    /// As [`Self::row`], for pixels `g .. g + PX`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn group<const PX: usize>(&self, src: &[*const f32; 3], out: *mut f32, g: usize, valid: usize) {
        let mut acc = [self.bias; PX];
        // SAFETY: by the caller.
        unsafe {
            for (row, wk) in src.iter().zip(&self.w) {
                let row = row.add(g * 16);
                super::three_taps::<_, PX, 1>(
                    &mut acc,
                    wk,
                    |j| _mm512_load_ps(row.add(j * 16)),
                    |x, w, a| _mm512_fmadd_ps(x, w, a),
                );
            }
            for (p, a) in acc.iter().enumerate().take(valid) {
                let v = _mm512_min_ps(_mm512_max_ps(*a, self.lo), self.hi);
                store16(self.m, out.add((g + p) * self.c), v);
            }
        }
    }
}
