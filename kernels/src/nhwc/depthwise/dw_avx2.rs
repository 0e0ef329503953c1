//! Depthwise convolutions with a multiplier of 1 on AVX2 + FMA: any
//! window, stride and dilation whose rows fit the ring below.
//!
//! As [`super::dw3x3`] does on AVX-512: one block of 32 channels at a
//! time, each input row is copied once, its padding as zeros, into a ring
//! of rows on the stack, which stays in L1. Every output row is then a
//! uniform sweep over the ring rows its window reads, 8 pixels at a time,
//! each group for the block's vectors in turn: 8 independent FMA chains
//! (the latency of 4 cycles times 2 pipes), the columns two pixels share
//! kept in registers. The pixels at the image's
//! edges, and short rows (7 or 14 pixels), need no code of their own. Long
//! rows go in segments, so that a ring row has a fixed length.
//!
//! A block is four vectors, 128 bytes of a pixel: the copy reads whole
//! lines of the input, and the four sweeps of an output row complete whole
//! lines of the output while they are in L1. (Blocks of one vector read
//! and wrote each line in four passes, 15% slower on 112 × 112 × 32.) No
//! two blocks share a line, so nothing is gained by sweeping a few rows
//! for every block in turn: each block sweeps the whole image.
//!
//! At stride 2 across, the copy costs more than it saves (twice as many
//! input pixels per output, and an input row shared by fewer output
//! rows): there the pixels whose windows lie inside the image, whole
//! groups of them, read the image directly (245 → 220 µs on 112 × 112 ×
//! 96), and only those at the edges go through the ring. Whole groups of
//! eight such pixels over whole vectors take each tap for all eight in
//! turn ([`Block::groups3`]). At stride 1 the direct reads ran no faster
//! on 112 × 112 × 32 and slower on more channels and on short rows (with
//! either order of the taps).
//!
//! Threads split the output rows when each gets at least
//! [`ROWS_PER_THREAD`] or there are fewer blocks than threads, else the
//! channel blocks: each output is computed the same way whatever the
//! thread count.
use super::{three_taps, Depthwise};
use crate::nhwc::Window2d;
use core::arch::x86_64::*;
use core::mem::MaybeUninit;
use core::ops::Range;

/// Channels per vector.
const LANES: usize = 8;
/// Vectors per block of channels, a ring pixel.
const WIDE: usize = 4;
/// Floats per ring pixel.
const PIXEL: usize = WIDE * LANES;
/// Ring pixels over all its rows: 16 KiB, half of L1 (24 KiB ran no
/// faster).
const RING_PIXELS: usize = 128;
/// Most rows in the ring.
const MAX_ROWS: usize = 16;
/// Fewest inner pixels of a row read directly from the image.
const MIN_DIRECT: usize = 16;
/// Most taps in a window: the weights of a block are held on the stack.
const MAX_TAPS: usize = 64;

/// How a window's rows are laid out in the ring.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Ring rows: the input rows one output row's window spans.
    rows: usize,
    /// Output pixels per segment of a row (the last may be shorter).
    segment: usize,
    /// Pixels per ring row.
    pitch: usize,
}

impl Plan {
    /// The ring's layout for `win`, or `None` when its window is too tall,
    /// too wide or has too many taps for the ring.
    fn new(win: &Window2d) -> Option<Plan> {
        let rows = (win.kernel_h - 1) * win.dilation_h + 1;
        if rows > MAX_ROWS || win.kernel_h * win.kernel_w > MAX_TAPS {
            return None;
        }
        let pitch = RING_PIXELS / rows;
        // The most outputs whose sweep's columns fit a ring row: n outputs
        // span (n - 1)·stride + (kW - 1)·dilation + 1 columns, and a sweep
        // rounds n up to whole groups.
        let span_w = (win.kernel_w - 1) * win.dilation_w + 1;
        let mut most = pitch.checked_sub(span_w)? / win.stride_w + 1;
        while most > 0 && columns(win, most) > pitch {
            most -= 1;
        }
        if most == 0 {
            return None;
        }
        // Even segments, no longer than `most`, so that they fit too;
        // whole groups where that fits.
        let segment = win.out_w.div_ceil(win.out_w.div_ceil(most));
        let segment = Some(segment.next_multiple_of(8))
            .filter(|&s| s <= most)
            .unwrap_or(segment);
        Some(Plan { rows, segment, pitch })
    }
}

/// `x` modulo `n`, for `x < 2n`.
fn wrap(x: usize, n: usize) -> usize {
    if x >= n {
        x - n
    } else {
        x
    }
}

/// Pixels a sweep of `outputs` computes: whole groups of 8, and a last
/// group of the 4 to 7 left, or of 4 for fewer. (Rounding the last group
/// up to 8 wasted an eighth of the work on rows of 7 and 14 pixels.)
fn swept(outputs: usize) -> usize {
    outputs / 8 * 8
        + match outputs % 8 {
            0 => 0,
            1..=3 => 4,
            rest => rest,
        }
}

/// Ring columns a sweep of `outputs` pixels reads.
fn columns(win: &Window2d, outputs: usize) -> usize {
    (swept(outputs) - 1) * win.stride_w + (win.kernel_w - 1) * win.dilation_w + 1
}

/// Whether [`depthwise_avx2`] takes this window.
pub(super) fn fits(win: &Window2d) -> bool {
    Plan::new(win).is_some()
}

/// The ring: [`RING_PIXELS`] pixels of [`PIXEL`] floats.
#[repr(C, align(64))]
struct Ring([f32; RING_PIXELS * PIXEL]);

/// Output rows per thread from which threads split a depthwise layer by
/// rows rather than by channel blocks.
///
/// Each thread should read what it wrote in the layer before. A 1 × 1
/// layer before a 14 × 14 depthwise one splits in bands of rows, so each
/// thread wrote those rows. A 1 × 1 layer before a 7 × 7 one splits in
/// strips of channels, which channel blocks match. Per instruction, on two
/// threads with their CPUs far apart (a 450 ns round trip), MobileNetV2's
/// 14 × 14 layers took 45 → 35 µs in rows, and the products around them
/// 5–20 µs less. Its 7 × 7 layers and their products took 10–20 µs more in
/// rows (4 + 3 of them). With the CPUs close (50 ns), the two splits
/// measured the same.
const ROWS_PER_THREAD: usize = 7;

/// A depthwise convolution whose window [`fits`], all of `out`: with
/// threads, each takes a share of the output rows when there are at least
/// [`ROWS_PER_THREAD`] each or fewer channel blocks than threads, else a
/// share of the channel blocks.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn depthwise_avx2(d: &Depthwise<'_>, out: &mut [f32]) {
    let (win, c) = (d.win, d.c);
    let plan = Plan::new(win).expect("a window that fits the ring");
    let rows = win.batch * win.out_h;
    assert!(d.o == c && out.len() >= rows * win.out_w * c);
    assert!(d.x.len() >= win.batch * win.in_h * win.in_w * c);
    assert!(d.w.len() >= win.kernel_h * win.kernel_w * c);
    assert!(d.bias.is_none_or(|b| b.len() >= c));
    let blocks = c.div_ceil(PIXEL);
    let worth_splitting = out.len() * win.kernel_h * win.kernel_w >= 1 << 17;
    let threads = crate::parallel::threads();
    let by_blocks = blocks >= threads && rows < ROWS_PER_THREAD * threads;
    let items = match (worth_splitting, by_blocks) {
        (false, _) => 1,
        (true, true) => blocks,
        (true, false) => rows,
    };
    let parts = crate::parallel::split(items, 1);
    // SAFETY: each part writes only its own blocks' channels or its own
    // rows (and reads only the input); `out` outlives `run_parts`.
    let out = unsafe { crate::parallel::Shared::new(out.as_mut_ptr()) };
    crate::parallel::run_parts(parts.parts(), &|i| {
        let Some((a, b)) = parts.range(i) else { return };
        let (blocks, rows) = match (worth_splitting, by_blocks) {
            (false, _) => (0..blocks, 0..rows),
            (true, true) => (a..b, 0..rows),
            (true, false) => (0..blocks, a..b),
        };
        // SAFETY: AVX2 and FMA by the caller, the lengths by the asserts
        // above; part `i` writes only the channels of its blocks in its
        // rows, which no other part writes, and `out` outlives the parts.
        unsafe { blocks_avx2(d, &plan, out.get(), blocks, rows) }
    });
}

/// Channel blocks `blocks` (of [`PIXEL`] channels) of the output rows
/// `rows` (over all images).
///
/// # Safety
/// AVX2 and FMA; `d` passed the asserts of [`depthwise_avx2`]; `plan` is
/// the plan of `d`'s window; `out` holds `N·OH·OW·C` floats, and no other
/// thread accesses the channels of `blocks` in `rows` meanwhile.
#[target_feature(enable = "avx2,fma")]
unsafe fn blocks_avx2(d: &Depthwise<'_>, plan: &Plan, out: *mut f32, blocks: Range<usize>, rows: Range<usize>) {
    let (win, c) = (d.win, d.c);
    let taps = win.kernel_h * win.kernel_w;
    let mut ring = MaybeUninit::<Ring>::uninit();
    let ring = ring.as_mut_ptr().cast::<f32>();
    // The block's weights, vector by vector, tap by tap.
    let mut weights = [[MaybeUninit::<__m256>::uninit(); MAX_TAPS]; WIDE];
    let mut r = rows.start;
    while r < rows.end {
        // Rows of one image.
        let n = r / win.out_h;
        let image_rows = r - n * win.out_h..rows.end.min((n + 1) * win.out_h) - n * win.out_h;
        let image = d.x.as_ptr().wrapping_add(n * win.in_h * win.in_w * c);
        let out_image = out.wrapping_add(n * win.out_h * win.out_w * c);
        for c0 in blocks.clone().map(|b| b * PIXEL).take_while(|&c0| c0 < c) {
            let vectors = (c - c0).div_ceil(LANES).min(WIDE);
            // Lanes of the block's last vector, when partial.
            let tail = (c - c0 < vectors * LANES).then(|| lanes((c - c0) % LANES));
            let sweeps: [Sweep<'_>; WIDE] = core::array::from_fn(|v| {
                let (cv, m) = (c0 + v * LANES, if v + 1 == vectors { tail } else { None });
                let wv = &mut weights[v];
                // SAFETY: for v < vectors, tap t's weights are w[t·C +
                // cv ..], lanes below C (by the mask in a partial vector);
                // `t < taps <= MAX_TAPS`.
                let bias = unsafe {
                    if v < vectors {
                        for (t, wt) in wv.iter_mut().enumerate().take(taps) {
                            wt.write(load8(m, d.w.as_ptr().add(t * c + cv)));
                        }
                    }
                    match d.bias {
                        Some(b) if v < vectors => load8(m, b.as_ptr().add(cv)),
                        _ => _mm256_setzero_ps(),
                    }
                };
                Sweep {
                    w: wv.as_ptr().cast(),
                    win,
                    bias,
                    lo: _mm256_set1_ps(d.min),
                    hi: _mm256_set1_ps(d.max),
                    c,
                    lane: v * LANES,
                    tail: m,
                }
            });
            let block = Block {
                win,
                plan,
                ring,
                image: image.wrapping_add(c0),
                c,
                vectors,
                tail,
            };
            // SAFETY: by the caller: the block's lanes below C, the rows
            // and pixels within the image's output, this part's.
            unsafe { block.rows(&sweeps[..vectors], image_rows.clone(), out_image.wrapping_add(c0)) };
        }
        r = n * win.out_h + image_rows.end;
    }
}

/// One channel block of one image, and the ring it is copied into.
struct Block<'a> {
    win: &'a Window2d,
    plan: &'a Plan,
    ring: *mut f32,
    /// The image's first pixel, at the block's first channel.
    image: *const f32,
    c: usize,
    vectors: usize,
    tail: Option<__m256i>,
}

impl Block<'_> {
    /// The output rows `rows` of the image (row `oh` at `out + oh·OW·C`):
    /// the pixels whose windows lie inside the image read it directly,
    /// whole groups at a time; the others, at its edges, go through the
    /// ring.
    ///
    /// # Safety
    /// As [`Self::segment`].
    #[target_feature(enable = "avx2,fma")]
    unsafe fn rows(&self, sweeps: &[Sweep<'_>], rows: Range<usize>, out: *mut f32) {
        let (win, plan) = (self.win, self.plan);
        let (inner_rows, inner) = (win.inner_rows(), win.inner_cols());
        let mid = rows.start.max(inner_rows.start)..rows.end.min(inner_rows.end).max(rows.start);
        // Whole groups of the inner columns, read directly.
        let n = inner.len();
        let direct = inner.start..inner.start + n / 8 * 8 + if n % 8 >= 4 { n % 8 } else { 0 };
        let ring = |rows: Range<usize>, cols: Range<usize>| {
            for s0 in cols.clone().step_by(plan.segment) {
                let outputs = plan.segment.min(cols.end - s0);
                // SAFETY: by the caller.
                unsafe { self.segment(sweeps, rows.clone(), s0, outputs, out.wrapping_add(s0 * self.c)) };
            }
        };
        if mid.is_empty() || direct.len() < MIN_DIRECT || win.stride_w == 1 {
            return ring(rows, 0..win.out_w);
        }
        ring(rows.start..mid.start, 0..win.out_w);
        ring(mid.clone(), 0..direct.start);
        // Segments of whole groups, which keep the input rows they read
        // in L1 from one output row to the next.
        for s0 in direct.clone().step_by((plan.segment / 8 * 8).max(8)) {
            let outputs = (plan.segment / 8 * 8).max(8).min(direct.end - s0);
            // SAFETY: by the caller; the pixels are inner ones, their
            // windows inside the image.
            unsafe { self.direct(sweeps, mid.clone(), s0, outputs, out.wrapping_add(s0 * self.c)) };
        }
        ring(mid.clone(), direct.end..win.out_w);
        ring(mid.end..rows.end, 0..win.out_w);
    }

    /// Output pixels `s0 .. s0 + outputs` (whole groups of 8, then one of
    /// 4 to 7) of the output rows `rows`, read from the image: pixel `s0`
    /// of row `oh` at `out + oh·OW·C`.
    ///
    /// # Safety
    /// As [`Self::segment`]; the windows of the pixels lie inside the
    /// image.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn direct(&self, sweeps: &[Sweep<'_>], rows: Range<usize>, s0: usize, outputs: usize, out: *mut f32) {
        let win = self.win;
        assert!(swept(outputs) == outputs);
        let first = s0 * win.stride_w - win.pad_left;
        // Whole groups of MobileNet's windows over whole vectors go
        // through `groups3`.
        let three = (win.kernel_h, win.kernel_w, win.dilation_h, win.dilation_w) == (3, 3, 1, 1);
        let whole = if three && win.stride_w == 2 && self.tail.is_none() {
            outputs / 8 * 8
        } else {
            0
        };
        let mut src = [self.image; MAX_ROWS];
        for oh in rows {
            for (ki, s) in src.iter_mut().enumerate().take(win.kernel_h) {
                let ih = oh * win.stride_h + ki * win.dilation_h - win.pad_top;
                *s = self.image.wrapping_add((ih * win.in_w + first) * self.c);
            }
            let o = out.wrapping_add(oh * win.out_w * self.c);
            if whole > 0 {
                // SAFETY: the pixels' windows lie inside the image, so
                // every column a group reads is a pixel of the row; the
                // outputs are within the row, lanes below C.
                unsafe { self.groups3(sweeps, &src, o, whole) }
            }
            if whole < outputs {
                let rest: [*const f32; MAX_ROWS] =
                    core::array::from_fn(|ki| src[ki].wrapping_add(whole * win.stride_w * self.c));
                // SAFETY: as above.
                unsafe {
                    Sweep::row::<true>(
                        sweeps,
                        &rest[..win.kernel_h],
                        o.wrapping_add(whole * self.c),
                        outputs - whole,
                    )
                }
            }
        }
    }

    /// `outputs` (a multiple of 8) pixels of one output row from `out`, of
    /// a 3 × 3 undilated window of stride 2 across over whole vectors, its
    /// rows at `src` in the image: eight pixels at a time, each tap for
    /// all eight in turn (an FMA eight apart from the one before on the
    /// same sum), loaded where it lies. [`Sweep::group`] takes the taps
    /// pixel by pixel, keeping the columns two pixels share in registers;
    /// this order ran 10–12% faster on 112 × 112 × 96 and on a chain's
    /// band of it. The sums are added in the same order, so the results
    /// are the same.
    ///
    /// # Safety
    /// AVX2 and FMA; as [`Self::direct`], with no partial vector.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn groups3(&self, sweeps: &[Sweep<'_>], src: &[*const f32; MAX_ROWS], out: *mut f32, outputs: usize) {
        const SW: usize = 2;
        let c = self.c;
        for sweep in sweeps {
            let w = sweep.w;
            for g in (0..outputs).step_by(8) {
                let mut acc = [sweep.bias; 8];
                // SAFETY: by the caller: pixel g + p reads columns
                // (g + p)·SW + kj of each row, inside the image; taps
                // below 9.
                unsafe {
                    for (k, row) in src.iter().take(3).enumerate() {
                        let row = row.add(g * SW * c + sweep.lane);
                        for kj in 0..3 {
                            let wv = *w.add(3 * k + kj);
                            for (p, a) in acc.iter_mut().enumerate() {
                                *a = _mm256_fmadd_ps(_mm256_loadu_ps(row.add((p * SW + kj) * c)), wv, *a);
                            }
                        }
                    }
                    for (p, a) in acc.iter().enumerate() {
                        let v = _mm256_min_ps(_mm256_max_ps(*a, sweep.lo), sweep.hi);
                        _mm256_storeu_ps(out.add((g + p) * c + sweep.lane), v);
                    }
                }
            }
        }
    }

    /// Output pixels `s0 .. s0 + outputs` of the output rows `rows`: pixel
    /// `s0` of row `oh` at `out + oh·OW·C`, one vector per sweep.
    ///
    /// # Safety
    /// AVX2; the block's lanes of `in_h` rows of `in_w` pixels from
    /// `image` are readable, the sweeps' lanes of the outputs writable;
    /// `outputs` is at most the plan's segment.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn segment(&self, sweeps: &[Sweep<'_>], rows: Range<usize>, s0: usize, outputs: usize, out: *mut f32) {
        let (win, plan) = (self.win, self.plan);
        let first = (s0 * win.stride_w) as isize - win.pad_left as isize;
        let columns = columns(win, outputs);
        assert!(columns <= plan.pitch && plan.rows * plan.pitch <= RING_PIXELS);
        // Padded input row held by each ring row.
        let mut held = [usize::MAX; MAX_ROWS];
        let mut src = [self.ring.cast_const(); MAX_ROWS];
        // Ring rows go by padded row modulo `plan.rows`, stepped rather
        // than divided per row (a division costs as much as a few groups
        // on a row of 7 pixels): the ring row of the output row's first
        // padded row, and the offsets of the kernel rows from it.
        let step = win.stride_h % plan.rows;
        let mut slot0 = rows.start * win.stride_h % plan.rows;
        let mut offsets = [0; MAX_ROWS];
        for (ki, off) in offsets.iter_mut().enumerate().take(win.kernel_h) {
            *off = ki * win.dilation_h % plan.rows;
        }
        for oh in rows {
            for (ki, s) in src.iter_mut().enumerate().take(win.kernel_h) {
                let padded = oh * win.stride_h + ki * win.dilation_h;
                let slot = wrap(slot0 + offsets[ki], plan.rows);
                let to = self.ring.wrapping_add(slot * plan.pitch * PIXEL);
                if held[slot] != padded {
                    held[slot] = padded;
                    let ih = padded.checked_sub(win.pad_top).filter(|&ih| ih < win.in_h);
                    let from = ih.map(|ih| self.image.wrapping_add(ih * win.in_w * self.c));
                    // SAFETY: `to` is a ring row of `pitch` ≥ `columns`
                    // pixels; `from` an input row of the image.
                    unsafe { self.copy_row(to, from, first, columns) };
                }
                *s = to;
            }
            let o = out.wrapping_add(oh * win.out_w * self.c);
            // SAFETY: the window's rows are `rows` consecutive padded rows
            // at most, so they sit in distinct ring rows, each holding the
            // `columns` pixels a sweep of `outputs` pixels reads; the
            // outputs are within the row, lanes below C.
            unsafe { Sweep::row::<false>(sweeps, &src[..win.kernel_h], o, outputs) }
            slot0 = wrap(slot0 + step, plan.rows);
        }
    }

    /// Copies `columns` pixels of input row `from` (`None`: a row of
    /// padding) from column `first` into the ring row `to`, zeros where
    /// the columns fall outside the image.
    ///
    /// # Safety
    /// AVX2; `to` holds `columns` ring pixels, 32-byte aligned; `from`, if
    /// any, the block's lanes of `in_w` pixels `c` floats apart.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn copy_row(&self, to: *mut f32, from: Option<*const f32>, first: isize, columns: usize) {
        // Ring columns lead .. inside are the image's columns first + j.
        let lead = first.min(0).unsigned_abs().min(columns);
        let inside = match from {
            Some(_) => (self.win.in_w as isize - first).clamp(lead as isize, columns as isize) as usize,
            None => lead,
        };
        for j in 0..lead {
            // SAFETY: by the caller, ring columns below `columns` are in
            // the ring.
            unsafe { self.zero_pixel(to.add(j * PIXEL)) };
        }
        if let Some(row) = from {
            let row = row.wrapping_offset(first * self.c as isize);
            for j in lead..inside {
                // SAFETY: by the caller, ring columns below `columns` are
                // in the ring and input columns `lead..inside` in the row.
                unsafe { self.copy_pixel(to.add(j * PIXEL), row.add(j * self.c)) };
            }
        }
        for j in inside..columns {
            // SAFETY: ring columns below `columns`, as above.
            unsafe { self.zero_pixel(to.add(j * PIXEL)) };
        }
    }

    /// Copies the block's lanes of the pixel at `from` to the ring pixel
    /// `to` (zeros in a partial vector's other lanes).
    ///
    /// # Safety
    /// AVX2; `to` holds a ring pixel, 32-byte aligned; the block's lanes
    /// at `from` are readable.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn copy_pixel(&self, to: *mut f32, from: *const f32) {
        // SAFETY: by the caller.
        unsafe {
            if self.vectors == WIDE && self.tail.is_none() {
                for v in 0..WIDE {
                    _mm256_store_ps(to.add(v * LANES), _mm256_loadu_ps(from.add(v * LANES)));
                }
            } else {
                for v in 0..self.vectors {
                    let m = if v + 1 == self.vectors { self.tail } else { None };
                    _mm256_store_ps(to.add(v * LANES), load8(m, from.add(v * LANES)));
                }
            }
        }
    }

    /// Zeros the block's vectors of the ring pixel `to`.
    ///
    /// # Safety
    /// AVX2; `to` holds a ring pixel, 32-byte aligned.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn zero_pixel(&self, to: *mut f32) {
        for v in 0..self.vectors {
            // SAFETY: by the caller. Volatile, so that runs of zeros do
            // not become calls to `memset`.
            unsafe { to.add(v * LANES).cast::<__m256>().write_volatile(_mm256_setzero_ps()) }
        }
    }
}

/// The mask of the first `n` (< 8) lanes of a partial vector.
#[inline]
fn lanes(n: usize) -> __m256i {
    let bits: [i32; LANES] = core::array::from_fn(|j| if j < n { -1 } else { 0 });
    // SAFETY: `bits` holds 8 i32s.
    unsafe { _mm256_loadu_si256(bits.as_ptr().cast()) }
}

/// Loads the 8 floats at `p`, or only the lanes of `tail` (zero in the
/// others).
///
/// # Safety
/// AVX2; the lanes loaded at `p` are readable.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn load8(tail: Option<__m256i>, p: *const f32) -> __m256 {
    // SAFETY: by the caller; a masked load reads only the mask's lanes.
    unsafe {
        match tail {
            None => _mm256_loadu_ps(p),
            Some(m) => _mm256_maskload_ps(p, m),
        }
    }
}

/// What the sweeps of one vector of a channel block share.
struct Sweep<'a> {
    /// The vector's weights, tap by tap (`kernel row · kW + kernel column`).
    w: *const __m256,
    win: &'a Window2d,
    bias: __m256,
    lo: __m256,
    hi: __m256,
    /// Floats from one output pixel to the next.
    c: usize,
    /// The vector's first lane in a ring pixel (and channel in the block).
    lane: usize,
    /// The lanes of a partial vector.
    tail: Option<__m256i>,
}

impl Sweep<'_> {
    /// `outputs` pixels of one output row (from `out`) for every vector
    /// of a block, `sweeps`, from the rows `src` (of the ring, or with
    /// `DIRECT` of the image; one per kernel row): group by group, each
    /// group for the block's vectors in turn. MobileNet's windows, 3×3,
    /// undilated, stride 1 or 2 across, get code with every offset known.
    /// (One vector's whole row, then the next's, took 6–7% longer in a
    /// probe: the loop over the groups ended four times as often.)
    ///
    /// # Safety
    /// AVX2 and FMA; `sweeps` share one window; each `src` row holds the
    /// [`columns`] pixels a sweep of `outputs` reads; `out` holds
    /// `outputs` pixels `c` floats apart, whose lanes stored are writable.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn row<const DIRECT: bool>(sweeps: &[Sweep<'_>], src: &[*const f32], out: *mut f32, outputs: usize) {
        let Some(win) = sweeps.first().map(|s| s.win) else {
            return;
        };
        let three = (win.kernel_h, win.kernel_w, win.dilation_h, win.dilation_w) == (3, 3, 1, 1);
        // SAFETY: by the caller.
        unsafe {
            match (three, win.stride_w) {
                (true, 1) => Self::row_of::<3, 1, DIRECT>(sweeps, src, out, outputs),
                (true, 2) => Self::row_of::<3, 2, DIRECT>(sweeps, src, out, outputs),
                _ => Self::row_of::<0, 0, DIRECT>(sweeps, src, out, outputs),
            }
        }
    }

    /// [`Self::row`] for a window `K`×`K`, undilated, of stride `SW`
    /// across, or (`K` = 0) any window.
    ///
    /// # Safety
    /// As [`Self::row`].
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn row_of<const K: usize, const SW: usize, const DIRECT: bool>(
        sweeps: &[Sweep<'_>],
        src: &[*const f32],
        out: *mut f32,
        outputs: usize,
    ) {
        let mut g = 0;
        while g < outputs {
            let left = outputs - g;
            // SAFETY: by the caller; the group's pixels lie within
            // `swept(outputs)`, its stores within `outputs`.
            unsafe {
                match left {
                    8.. => sweeps.iter().for_each(|s| s.group::<8, K, SW, DIRECT>(src, out, g, 8)),
                    7 => sweeps.iter().for_each(|s| s.group::<7, K, SW, DIRECT>(src, out, g, 7)),
                    6 => sweeps.iter().for_each(|s| s.group::<6, K, SW, DIRECT>(src, out, g, 6)),
                    5 => sweeps.iter().for_each(|s| s.group::<5, K, SW, DIRECT>(src, out, g, 5)),
                    _ => sweeps
                        .iter()
                        .for_each(|s| s.group::<4, K, SW, DIRECT>(src, out, g, left)),
                }
            }
            g += left.clamp(4, 8);
        }
    }

    /// Output pixels `g .. g + N`, of which the first `valid` are stored.
    ///
    /// # Safety
    /// As [`Self::row`], for pixels `g .. g + N`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn group<const N: usize, const K: usize, const SW: usize, const DIRECT: bool>(
        &self,
        src: &[*const f32],
        out: *mut f32,
        g: usize,
        valid: usize,
    ) {
        let win = self.win;
        let (kh, kw, sw, dw) = if K > 0 {
            (K, K, SW, 1)
        } else {
            (src.len(), win.kernel_w, win.stride_w, win.dilation_w)
        };
        // Floats from one column to the next: of the ring, or the image.
        let pitch = if DIRECT { self.c } else { PIXEL };
        let mut acc = [self.bias; N];
        // SAFETY: by the caller: pixel p of the group reads columns
        // (g + p)·sw + kj·dw of each ring row, within those a sweep reads;
        // taps below kH·kW.
        unsafe {
            // The ring's pixels are aligned and zero past C; the image's
            // are neither, and a partial vector of its last pixel is its
            // last floats.
            let load = |p: *const f32| if DIRECT { load8(self.tail, p) } else { _mm256_load_ps(p) };
            let mut w = self.w;
            for row in &src[..kh] {
                let row = row.add(g * sw * pitch + self.lane);
                if K == 3 {
                    let wk = [*w, *w.add(1), *w.add(2)];
                    three_taps::<_, N, SW>(
                        &mut acc,
                        &wk,
                        |j| load(row.add(j * pitch)),
                        |x, w, a| _mm256_fmadd_ps(x, w, a),
                    );
                    w = w.add(3);
                    continue;
                }
                for kj in 0..kw {
                    let wv = *w;
                    let col = row.add(kj * dw * pitch);
                    for (p, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(load(col.add(p * sw * pitch)), wv, *a);
                    }
                    w = w.add(1);
                }
            }
            // Every pixel is stored, those past `valid` into `spare`:
            // with a branch on `valid`, the compiler sank the last pixels'
            // FMAs past it, a chain of nine FMAs after the others.
            let mut spare = _mm256_setzero_ps();
            let spare = (&raw mut spare).cast::<f32>();
            for (p, a) in acc.iter().enumerate() {
                let v = _mm256_min_ps(_mm256_max_ps(*a, self.lo), self.hi);
                let dst = if p < valid {
                    out.add((g + p) * self.c + self.lane)
                } else {
                    spare
                };
                match self.tail {
                    None => _mm256_storeu_ps(dst, v),
                    Some(m) => _mm256_maskstore_ps(dst, m, v),
                }
            }
        }
    }
}
