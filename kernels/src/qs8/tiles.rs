//! The walk the vector paths take over a packed layer (see
//! [`super::packed`]): passes of blocks whose weights stay in cache, and
//! in each the rows a tile at a time, with every tap's input segment
//! found once per tile.
use super::packed::{bytes, BlockParams, Job, Source, MAX_TAPS, PATCH};

/// The longest input segment of a padded layer on the vector paths: the
/// padding reads a row of zero points this long, on the stack.
pub(crate) const PAD_ROW: usize = 2048;

/// Whether the vector paths take `job`: at most [`MAX_TAPS`] taps, and
/// segments within [`PAD_ROW`] where the source has padding.
pub(crate) fn fits(job: &Job<'_>) -> bool {
    let l = &job.layout;
    l.taps <= MAX_TAPS && (l.gin <= PAD_ROW || matches!(job.source, Source::Rows { .. }))
}

/// Blocks a pass of [`for_each_tile`] takes at most (their parameters
/// are on the stack).
const CHUNK_BLOCKS: usize = 32;

/// Rows `r0..r0 + rows` of a layer, as [`for_each_tile`] hands them to a
/// vector path, with blocks `blocks` of group `g` to sum over them.
pub(crate) struct Tile<'t, const R: usize> {
    /// For each tap, each row's input segment: its first byte, readable
    /// for `gin` bytes (whole quads, `4 · quads_per_tap`, if `whole`);
    /// a row of zero points in the padding. Rows past `rows` repeat the
    /// last.
    pub x: &'t [[*const u8; R]],
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub whole: bool,
    pub r0: usize,
    pub rows: usize,
    pub g: usize,
    pub blocks: core::ops::Range<usize>,
    /// The parameters of `blocks`, in order.
    pub params: &'t [BlockParams],
}

/// Walks `job` as the vector paths sum it: each group's blocks (those of
/// `job.blocks`) in passes
/// of at most `pass_bytes` of weights (which stay in cache meanwhile),
/// their parameters made once; in each pass the rows `R` at a time, their
/// segments found once ([`Source::visit`], or gathered) and handed to
/// `tile`. `pad` is a row of the input zero point, at least `gin` long if
/// the source has padding ([`fits`]).
#[inline(always)]
pub(crate) fn for_each_tile<const R: usize>(
    job: &Job<'_>,
    pass_bytes: usize,
    pad: &[i8],
    mut tile: impl FnMut(&Tile<'_, R>),
) {
    let l = &job.layout;
    assert!(fits(job));
    let packed = bytes(job.packed);
    let (first, blocks) = job.blocks;
    // An even number of blocks a pass where there are two or more: the
    // VNNI path sums blocks in pairs, and a block alone (a 7 x 7 layer's
    // passes of 3 blocks of 512 channels) at half its speed.
    let pass = (pass_bytes / l.block_bytes())
        .min(blocks - first)
        .clamp(1, CHUNK_BLOCKS);
    let pass = if pass > 1 { pass & !1 } else { pass };
    let mut params = [BlockParams::EMPTY; CHUNK_BLOCKS];
    let input = job.source.input();
    let mut x = [[core::ptr::null::<u8>(); R]; MAX_TAPS];
    // Gathered windows (a gathered layer's `gin` is at most `PATCH`).
    let mut patches = [[0i8; PATCH]; R];
    // Whole quads a tap, read where the input goes on: the bytes past
    // `gin` meet zero weights.
    let q4 = 4 * l.quads_per_tap();
    for g in 0..l.groups {
        for b0 in (first..blocks).step_by(pass) {
            let end = blocks.min(b0 + pass);
            // Each block's sums head it, a stride of a whole block apart
            // (cold weights: a miss each): asked for together first.
            #[cfg(target_arch = "x86_64")]
            for b in b0..end {
                let head = l.block(packed, g, b).as_ptr();
                // SAFETY: a prefetch reads nothing the program sees.
                unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(head.cast()) };
            }
            for b in b0..end {
                params[b - b0] = BlockParams::new(job, l.block(packed, g, b), g, b);
            }
            for r0 in (job.first..job.rows).step_by(R) {
                let rows = R.min(job.rows - r0);
                let mut whole = true;
                if let Source::Gathered { .. } = job.source {
                    job.source.gather(r0, rows, &mut patches);
                    for (p, patch) in x[0].iter_mut().zip(&patches) {
                        *p = patch.as_ptr().cast::<u8>();
                    }
                } else {
                    if let Some(last) = job.source.point::<R, u8>(l.taps, r0, rows, g, l.gin, pad, &mut x) {
                        assert!(last + l.gin <= input.len());
                        whole = last + q4 <= input.len();
                    }
                }
                tile(&Tile {
                    x: &x[..l.taps],
                    whole,
                    r0,
                    rows,
                    g,
                    blocks: b0..end,
                    params: &params[..end - b0],
                });
            }
        }
    }
}

/// The quad of inputs `q` of a segment of `gin` bytes: the last one,
/// when partial, padded with zeros.
///
/// # Safety
/// `x` must be readable for `gin` bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn quad(x: *const u8, q: usize, gin: usize) -> i32 {
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
