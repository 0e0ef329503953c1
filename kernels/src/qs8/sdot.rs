//! The packed layers (see [`super::packed`]) on aarch64's `SDOT`
//! (FEAT_DotProd). A packed quad holds, for each 4 outputs of a block,
//! their 4 weights one after another: 16 bytes, one vector, which is the
//! order in which `SDOT` (by element) multiplies a broadcast quad of 4
//! inputs into 4 sums. So 4 instructions take a quad of one row into the
//! 16 sums of a block, and a tile of [`ROWS`] rows (4 sums a row, 20 of
//! the 32 vector registers) shares each load of weights between its rows.
//!
//! The weights are stored plus 128 (for x86's unsigned operand): an `EOR`
//! with `0x80` a weight vector, once per load for all the rows, gives the
//! signed weights back, so `SDOT` takes signed by signed products and the
//! sums are the portable path's `Σ x · w` to the bit (exact `i32`
//! arithmetic, wrapping alike), with no row sums. The inputs load 16 (4
//! quads) a row at a time, each segment's last partial run from a copy;
//! the sums are requantized by the scalar [`super::Output::requantize`].
//!
//! `SDOT` is issued through `asm!` (its intrinsics are unstable), in
//! functions compiled with the `dotprod` target feature. The whole file is
//! compiled only for aarch64 with NEON.
use super::packed::{bytes, Job, Out, COLS, MAX_TAPS};
use super::tiles::{for_each_tile, PAD_ROW};
use core::arch::aarch64::*;
use core::arch::asm;

/// Rows summed at once (4 sum vectors each).
const ROWS: usize = 5;

/// Weight bytes a pass over the rows reads (their blocks stay in L2).
const PASS_BYTES: usize = 256 * 1024;

/// Whether this CPU has `SDOT`.
pub(crate) fn available() -> bool {
    crate::cpu::aarch64_features().dotprod
}

/// # Safety
/// The CPU must have FEAT_DotProd ([`available`]). The layer must fit the
/// tiles ([`tiles::fits`](super::tiles::fits), asserted).
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn run(job: &Job<'_>, out: &mut Out<'_>) {
    let l = &job.layout;
    let packed = bytes(job.packed);
    let pad = [job.xq.zero_point as i8; PAD_ROW];
    let (gin, rest) = (l.gin, l.gin % 16);
    // Each segment's last partial run (`gin % 16` inputs), zero-padded,
    // copied once a tile.
    let mut tails = [[[0i8; 16]; ROWS]; MAX_TAPS];
    for_each_tile::<ROWS>(job, PASS_BYTES, &pad, |t| {
        for (tail, xt) in tails.iter_mut().zip(t.x) {
            for (tail, &x) in tail.iter_mut().zip(xt) {
                // SAFETY: every segment has `gin` inputs (`for_each_tile`).
                let s = unsafe { core::slice::from_raw_parts(x.cast::<i8>(), gin) };
                tail[..rest].copy_from_slice(&s[gin - rest..]);
            }
        }
        for (b, p) in t.blocks.clone().zip(t.params) {
            let block = l.block(packed, t.g, b);
            // SAFETY: every segment has `gin` inputs; the block holds
            // `taps` times `gin / 4` rounded up quads (asserted by `tile`).
            let acc = unsafe { tile(t.x, &tails[..t.x.len()], gin, &block[4 * COLS..]) };
            for (r, acc) in acc.iter().enumerate().take(t.rows) {
                let mut sums = [0i32; COLS];
                for (j, &v) in acc.iter().enumerate() {
                    // SAFETY: 4 lanes into 4 of the array's 16.
                    unsafe { vst1q_s32(sums.as_mut_ptr().add(4 * j), v) };
                }
                let o = out.at(t.r0 + r, t.g * l.gout + b * COLS, p.cols);
                for (c, o) in o.iter_mut().enumerate() {
                    *o = job.y.requantize(p.offset[c].wrapping_add(sums[c]), p.scale[c]);
                }
            }
        }
    });
}

/// The sums `Σ x · w` of [`ROWS`] rows with one block's quads: the 16
/// sums of a row in 4 vectors, each lane the sum of its output.
///
/// # Safety
/// The CPU must have FEAT_DotProd; each pointer of `x` must be readable
/// for `gin` bytes; `tails` holds each segment's last `gin % 16` inputs,
/// zero-padded; `x` and `tails` are as long (asserted), and `quads` holds
/// `x.len()` taps of `gin.div_ceil(4)` quads (asserted).
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn tile(
    x: &[[*const u8; ROWS]],
    tails: &[[[i8; 16]; ROWS]],
    gin: usize,
    quads: &[u8],
) -> [[int32x4_t; 4]; ROWS] {
    let qpt = gin.div_ceil(4);
    assert!(x.len() == tails.len() && quads.len() >= x.len() * qpt * 4 * COLS);
    let whole = gin / 16;
    // Quads in the last, partial run (0 to 4).
    let last = qpt - 4 * whole;
    let mut acc = [[vdupq_n_s32(0); 4]; ROWS];
    let mut xs = [vdupq_n_s8(0); ROWS];
    // SAFETY: reads within the bounds asserted and vouched for: run `k`
    // of a segment's inputs and quads `4k..4k + 4` of its tap's weights,
    // `k < whole`; the tail's quads are the tap's last `last`.
    unsafe {
        for (t, (xt, tail)) in x.iter().zip(tails).enumerate() {
            let w = quads.as_ptr().add(t * qpt * 4 * COLS);
            for k in 0..whole {
                for (v, &s) in xs.iter_mut().zip(xt) {
                    *v = vld1q_s8(s.cast::<i8>().add(16 * k));
                }
                let w = w.add(k * 16 * COLS);
                quad::<0>(&mut acc, w, &xs);
                quad::<1>(&mut acc, w, &xs);
                quad::<2>(&mut acc, w, &xs);
                quad::<3>(&mut acc, w, &xs);
            }
            if last > 0 {
                for (v, s) in xs.iter_mut().zip(tail) {
                    *v = vld1q_s8(s.as_ptr());
                }
                let w = w.add(whole * 16 * COLS);
                quad::<0>(&mut acc, w, &xs);
                if last > 1 {
                    quad::<1>(&mut acc, w, &xs);
                }
                if last > 2 {
                    quad::<2>(&mut acc, w, &xs);
                }
                if last > 3 {
                    quad::<3>(&mut acc, w, &xs);
                }
            }
        }
    }
    acc
}

/// Quad `Q` of a run of 4 (`w`: the run's weights, 4 quads of 64 bytes;
/// `xs`: each row's 16 inputs) into the sums: its 4 weight vectors loaded
/// and made signed once, then one `SDOT` each a row.
///
/// # Safety
/// The CPU must have FEAT_DotProd; `w` must be readable for `64 · (Q + 1)`
/// bytes.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn quad<const Q: i32>(acc: &mut [[int32x4_t; 4]; ROWS], w: *const u8, xs: &[int8x16_t; ROWS]) {
    let flip = vdupq_n_u8(0x80);
    let mut wv = [vdupq_n_s8(0); 4];
    for (j, v) in wv.iter_mut().enumerate() {
        // SAFETY: within the quad's 64 bytes, as vouched for.
        *v = vreinterpretq_s8_u8(veorq_u8(unsafe { vld1q_u8(w.add(64 * Q as usize + 16 * j)) }, flip));
    }
    for (a, &x) in acc.iter_mut().zip(xs) {
        for (a, &w) in a.iter_mut().zip(&wv) {
            // SAFETY: the CPU has FEAT_DotProd (this function's
            // feature); the instruction touches only its registers.
            unsafe {
                asm!(
                    "sdot {a:v}.4s, {w:v}.16b, {x:v}.4b[{q}]",
                    a = inout(vreg) *a,
                    w = in(vreg) w,
                    x = in(vreg) x,
                    q = const Q,
                    options(pure, nomem, nostack, preserves_flags),
                );
            }
        }
    }
}
