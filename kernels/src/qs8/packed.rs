//! Regular convolutions and fully connected layers over packed weights.
//!
//! A layer is `groups` groups of `gout` outputs, each the dot product of
//! `taps` input segments of `gin` channels with its weights (a 1 × 1
//! convolution or a fully connected layer has one tap). The packing puts
//! each group's outputs in blocks of [`COLS`]: first each output's weight
//! sum (`i32`), then for each tap and each 4 inputs of it (a "quad", the
//! last one zero-padded) the 4 weights of each of the block's outputs.
//! That is the order in which one AVX-512 VNNI instruction multiplies 4
//! broadcast inputs into each of 16 sums (XNNPACK's `c4` packing). The
//! weights are stored plus 128 (unsigned, as that instruction takes its
//! first operand), so the inputs are read as they are.
//!
//! The weight sums turn the raw products into centred ones:
//! `Σ (x - zp) · w = Σ x · w - zp · Σ w`, so the inputs need no centring;
//! the VNNI path flips both as it loads them (`^ 0x80`: the inputs
//! unsigned, the weights signed again) and takes `Σ (x + 128) · w` less
//! `128 · Σ w`.
//! Every sum is exact `i32` arithmetic, wrapping as the scalar kernels
//! do, so each path gives the scalar kernels' outputs to the bit.
use super::{requant_scale, Output, Quant};
use crate::nhwc::Conv2dNhwc;

/// Outputs per packed block.
pub const COLS: usize = 16;

/// Floats before the first block: the stamp (see [`Layout::header`]),
/// padded to a cache line so that blocks start on one.
const HEADER: usize = 16;

const MAGIC: u32 = u32::from_le_bytes(*b"QS8Q");

/// The shape of a packed layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub groups: usize,
    pub gout: usize,
    pub taps: usize,
    pub gin: usize,
}

impl Layout {
    /// A regular (grouped) convolution's, its filter `[O, kH, kW, C / groups]`.
    /// A window of few channels a tap (a first layer's RGB) is packed as
    /// one tap of all its inputs (a gathered layer).
    pub fn conv(g: &Conv2dNhwc) -> Self {
        let taps = g.window.kernel_h * g.window.kernel_w;
        let gin = g.in_c / g.groups.max(1);
        match gathers(g) {
            true => Layout {
                groups: 1,
                gout: g.out_c,
                taps: 1,
                gin: taps * gin,
            },
            false => Layout {
                groups: g.groups,
                gout: g.out_c / g.groups.max(1),
                taps,
                gin,
            },
        }
    }

    /// A fully connected layer's, of `k` inputs and `n` outputs.
    pub fn fully_connected(k: usize, n: usize) -> Self {
        Layout {
            groups: 1,
            gout: n,
            taps: 1,
            gin: k,
        }
    }

    pub(super) fn quads_per_tap(&self) -> usize {
        self.gin.div_ceil(4)
    }

    /// Bytes of one block: the sums, then the quads.
    pub(super) fn block_bytes(&self) -> usize {
        4 * COLS * (1 + self.taps.saturating_mul(self.quads_per_tap()))
    }

    pub(super) fn blocks_per_group(&self) -> usize {
        self.gout.div_ceil(COLS)
    }

    /// Length in `f32` of the packing (what [`pack_conv`] or
    /// [`pack_fully_connected`] fills).
    pub fn packed_len(&self) -> usize {
        let blocks = self.groups.saturating_mul(self.blocks_per_group());
        HEADER.saturating_add(blocks.saturating_mul(self.block_bytes() / 4))
    }

    fn header(&self) -> [u32; 5] {
        let w = |v: usize| v as u32;
        [MAGIC, w(self.groups), w(self.gout), w(self.taps), w(self.gin)]
    }

    /// Whether `packed` holds this layer's packing.
    pub fn is_packed(&self, packed: &[f32]) -> bool {
        packed.len() >= self.packed_len() && crate::gemm::packing::stamped(packed, &self.header())
    }

    /// Block `b` of group `g` in the packing's bytes.
    pub(super) fn block<'a>(&self, bytes: &'a [u8], g: usize, b: usize) -> &'a [u8] {
        let at = HEADER * 4 + (g * self.blocks_per_group() + b) * self.block_bytes();
        &bytes[at..at + self.block_bytes()]
    }
}

/// `packed` as the bytes it holds (any bytes are a valid `f32` and the
/// reverse, so the view is sound either way).
pub(super) fn bytes(packed: &[f32]) -> &[u8] {
    // SAFETY: same memory, `u8` has no alignment or validity needs.
    unsafe { core::slice::from_raw_parts(packed.as_ptr().cast::<u8>(), core::mem::size_of_val(packed)) }
}

fn bytes_mut(packed: &mut [f32]) -> &mut [u8] {
    // SAFETY: as in `bytes`; every byte pattern is a valid `f32`.
    unsafe { core::slice::from_raw_parts_mut(packed.as_mut_ptr().cast::<u8>(), core::mem::size_of_val(packed)) }
}

/// Packs the weights `w(output, k)` (`k = tap · gin + channel`, outputs
/// numbered across groups) into `packed` (at least
/// [`Layout::packed_len`] floats), unless it already holds them, so that
/// it can run before every call.
pub fn pack(l: &Layout, w: impl Fn(usize, usize) -> i8, packed: &mut [f32]) {
    let len = l.packed_len();
    let packed = &mut packed[..len];
    if l.is_packed(packed) {
        return;
    }
    let (head, body) = packed.split_at_mut(HEADER);
    let body = bytes_mut(body);
    let (qpt, k) = (l.quads_per_tap(), l.taps * l.gin);
    for (i, block) in body.chunks_exact_mut(l.block_bytes()).enumerate() {
        let (g, b) = (i / l.blocks_per_group(), i % l.blocks_per_group());
        let (sums, quads) = block.split_at_mut(4 * COLS);
        for c in 0..COLS {
            let j = b * COLS + c;
            let oc = g * l.gout + j;
            let valid = j < l.gout;
            let sum = if valid {
                (0..k).fold(0i32, |s, kk| s.wrapping_add(w(oc, kk) as i32))
            } else {
                0
            };
            sums[4 * c..4 * c + 4].copy_from_slice(&sum.to_le_bytes());
            for t in 0..l.taps {
                for q in 0..qpt {
                    for e in 0..4 {
                        let ch = 4 * q + e;
                        let v = if valid && ch < l.gin { w(oc, t * l.gin + ch) } else { 0 };
                        quads[((t * qpt + q) * COLS + c) * 4 + e] = v as u8 ^ 0x80;
                    }
                }
            }
        }
    }
    crate::gemm::packing::stamp(head, &l.header());
}

/// Packs a convolution's filter `[O, kH, kW, C / groups]`.
pub fn pack_conv(g: &Conv2dNhwc, w: &[i8], packed: &mut [f32]) {
    let l = Layout::conv(g);
    let k = l.taps * l.gin;
    pack(&l, |oc, kk| w[oc * k + kk], packed);
}

/// Packs a fully connected layer's weight, `[n, k]` (`[k, n]` when
/// `transposed`).
pub fn pack_fully_connected(w: &[i8], k: usize, n: usize, transposed: bool, packed: &mut [f32]) {
    let l = Layout::fully_connected(k, n);
    if transposed {
        pack(&l, |oc, kk| w[kk * n + oc], packed);
    } else {
        pack(&l, |oc, kk| w[oc * k + kk], packed);
    }
}

/// Where a layer's input rows come from.
#[derive(Clone, Copy)]
pub(crate) enum Source<'a> {
    /// An NHWC image under a convolution's window: row = output pixel.
    /// `inner`: the output rows and columns (`start..end`) whose windows
    /// lie inside the image.
    Conv {
        g: &'a Conv2dNhwc,
        x: &'a [i8],
        inner: [(usize, usize); 2],
    },
    /// Rows of `k` inputs, one after another.
    Rows { x: &'a [i8], k: usize },
    /// An NHWC image of few channels under a convolution's window, each
    /// output pixel's window gathered into one row (see [`gathers`]);
    /// `zp`, the input zero point, fills the padding.
    /// `inner`: the output rows and columns whose windows lie inside.
    Gathered {
        g: &'a Conv2dNhwc,
        x: &'a [i8],
        zp: i8,
        inner: [(usize, usize); 2],
    },
}

impl<'a> Source<'a> {
    /// What a convolution's packed layer ([`Layout::conv`]) reads, from
    /// its input `x` of zero point `zp`.
    pub(crate) fn of_conv(g: &'a Conv2dNhwc, x: &'a [i8], zp: i8) -> Self {
        let win = &g.window;
        // A pointwise convolution over every pixel reads rows of channels.
        let pointwise = win.kernel_h * win.kernel_w == 1
            && g.groups == 1
            && (win.stride_h, win.stride_w, win.pad_top, win.pad_left) == (1, 1, 0, 0)
            && (win.out_h, win.out_w) == (win.in_h, win.in_w);
        if gathers(g) {
            Source::Gathered {
                g,
                x,
                zp,
                inner: inner(g),
            }
        } else if pointwise {
            Source::Rows { x, k: g.in_c }
        } else {
            Source::conv(g, x)
        }
    }

    /// An image under a convolution's window.
    pub(crate) fn conv(g: &'a Conv2dNhwc, x: &'a [i8]) -> Self {
        Source::Conv { g, x, inner: inner(g) }
    }

    /// The input the rows are read from.
    pub(crate) fn input(&self) -> &'a [i8] {
        match *self {
            Source::Conv { x, .. } | Source::Rows { x, .. } | Source::Gathered { x, .. } => x,
        }
    }

    /// [`Self::visit`] of taps `0..taps` that points `x[tap][row]` at each
    /// segment's first input (`pad`, at least `gin` long, in the
    /// padding), and returns the
    /// furthest segment's offset: checking it covers every segment, once a
    /// tile rather than once a segment (a tenth of a 3 x 3 layer's time
    /// went to finding its segments).
    #[cfg(any(target_arch = "x86_64", all(target_arch = "aarch64", target_feature = "neon")))]
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn point<const R: usize, T>(
        &self,
        taps: usize,
        r0: usize,
        rows: usize,
        group: usize,
        gin: usize,
        pad: &[i8],
        x: &mut [[*const T; R]],
    ) -> Option<usize> {
        let input = self.input().as_ptr();
        let mut furthest = None;
        self.visit::<R>(0, taps, r0, rows, group, gin, |t, r, at| {
            x[t][r] = match at {
                Some(at) => {
                    furthest = furthest.max(Some(at));
                    input.wrapping_add(at).cast::<T>()
                }
                None => pad[..gin].as_ptr().cast::<T>(),
            }
        });
        furthest
    }

    /// For rows `r0..r0 + R` (those past `rows` repeat the last one) and
    /// taps `first..first + taps`, calls `f(tap - first, row - r0, at)`
    /// with `at` the offset in [`Self::input`] of the group `group`'s
    /// first input (`gin` of them), or `None` in the padding (possibly
    /// after a call for the same tap and row). At most [`MAX_TAPS`] taps a
    /// call. Not for a gathered source (see [`Self::gather`]).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn visit<const R: usize>(
        &self,
        first: usize,
        taps: usize,
        r0: usize,
        rows: usize,
        group: usize,
        gin: usize,
        mut f: impl FnMut(usize, usize, Option<usize>),
    ) {
        match *self {
            Source::Gathered { .. } => unreachable!("gathered rows are not visited"),
            Source::Rows { k, .. } => {
                for r in 0..R {
                    f(0, r, Some((r0 + r.min(rows - 1)) * k));
                }
            }
            Source::Conv { g, inner, .. } => {
                let w = &g.window;
                let (mut ox, rest) = (r0 % w.out_w, r0 / w.out_w);
                let (mut oy, mut n) = (rest % w.out_h, rest / w.out_h);
                // Each tap's step from a window's first input, found once
                // a tile (a pixel's multiplications, tap by tap, took a
                // third of a grouped layer's time).
                assert!(taps <= MAX_TAPS, "{taps} taps a visit");
                let mut steps = [0usize; MAX_TAPS];
                let (mut ky, mut kx) = (first / w.kernel_w, first % w.kernel_w);
                for step in &mut steps[..taps] {
                    *step = w.tap_offset(ky, kx, g.in_c);
                    kx += 1;
                    if kx == w.kernel_w {
                        (ky, kx) = (ky + 1, 0);
                    }
                }
                for r in 0..R {
                    if inside(oy, inner[0]) && inside(ox, inner[1]) {
                        // The window inside the image: each tap a step
                        // from its first input.
                        let (iy, ix) = (oy * w.stride_h - w.pad_top, ox * w.stride_w - w.pad_left);
                        let at = ((n * w.in_h + iy) * w.in_w + ix) * g.in_c + group * gin;
                        for (t, &step) in steps[..taps].iter().enumerate() {
                            f(t, r, Some(at + step));
                        }
                    } else {
                        for t in 0..taps {
                            f(t, r, None);
                        }
                        super::for_each_tap(w, n, oy, ox, |t, p| {
                            if (first..first + taps).contains(&t) {
                                f(t - first, r, Some(p * g.in_c + group * gin));
                            }
                        });
                    }
                    if r + 1 < rows {
                        ox += 1;
                        if ox == w.out_w {
                            (ox, oy) = (0, oy + 1);
                            if oy == w.out_h {
                                (oy, n) = (0, n + 1);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Rows `r0..` of a gathered source, one per row of `rows_out` (those
    /// past `rows` repeat the last one): each output pixel's window, tap
    /// after tap, the padding's taps zero points. Bytes past the window
    /// are left as they are (they meet zero weights).
    #[inline(always)]
    pub(crate) fn gather(&self, r0: usize, rows: usize, rows_out: &mut [Patch]) {
        let Source::Gathered { g, x, zp, inner } = *self else {
            unreachable!("only a gathered source gathers")
        };
        let w = &g.window;
        let (cin, kw) = (g.in_c, w.kernel_w);
        let span = kw * cin;
        // The word a window inside the image copies its rows as (see
        // `copy_rows`), none if the last would pass the patch.
        let fits = |word: usize| span <= word && (w.kernel_h - 1) * span + word <= PATCH;
        let word = [16, 32].into_iter().find(|&word| fits(word)).unwrap_or(0);
        // The pixel's position, divided out once a tile and then stepped
        // (three divisions a pixel took most of a stem's time); rows past
        // `rows` repeat the last.
        let (mut ox, rest) = (r0 % w.out_w, r0 / w.out_w);
        let (mut oy, mut n) = (rest % w.out_h, rest / w.out_h);
        for (r, row) in rows_out.iter_mut().enumerate() {
            if r > 0 && r < rows {
                ox += 1;
                if ox == w.out_w {
                    ox = 0;
                    oy += 1;
                    if oy == w.out_h {
                        oy = 0;
                        n += 1;
                    }
                }
            }
            let across = w.dilation_w == 1 && inside(ox, inner[1]);
            if across && inside(oy, inner[0]) && word > 0 {
                // A window inside the image (most of them): its rows are
                // runs of the image `step` apart, each copied as a word
                // (see below), no row checked on its own.
                let first = ((n * w.in_h + oy * w.stride_h - w.pad_top) * w.in_w + ox * w.stride_w - w.pad_left) * cin;
                let step = w.dilation_h * w.in_w * cin;
                let copied = match word {
                    16 => copy_rows::<16>(row, x, first, step, w.kernel_h, span),
                    _ => copy_rows::<32>(row, x, first, step, w.kernel_h, span),
                };
                if copied {
                    continue;
                }
            }
            for ky in 0..w.kernel_h {
                let Some(iy) = w.in_row(oy, ky) else {
                    row[ky * span..][..span].fill(zp);
                    continue;
                };
                let base = (n * w.in_h + iy) * w.in_w;
                if across {
                    // The window's row, one run of the image's.
                    let at = (base + ox * w.stride_w - w.pad_left) * cin;
                    copy_row(row, ky * span, x, at, span);
                    continue;
                }
                let dst = &mut row[ky * span..][..span];
                for (kx, d) in dst.chunks_exact_mut(cin).enumerate() {
                    match w.in_col(ox, kx) {
                        Some(ix) => d.copy_from_slice(&x[(base + ix) * cin..][..cin]),
                        None => d.fill(zp),
                    }
                }
            }
        }
    }
}

/// Copies the `rows` rows of a window, `span` bytes each and `step` apart
/// in `x` from `first`, one after another into `row`, each as a word of
/// `W` bytes (`span` at most): a fixed-length copy, where a call to
/// `memcpy` for 9 or 21 bytes took longer than the sums. The bytes a word
/// takes past its row are the next row's, written next, or past the
/// window, where the weights are zero and the row sums count them alike.
/// `false` (nothing copied) when the last word would pass the end of `x`
/// or of `row`.
/// The caller has checked that the last word fits in `row`.
#[inline(always)]
fn copy_rows<const W: usize>(row: &mut Patch, x: &[i8], first: usize, step: usize, rows: usize, span: usize) -> bool {
    if first + (rows - 1) * step + W > x.len() {
        return false;
    }
    for ky in 0..rows {
        let at = first + ky * step;
        row[ky * span..][..W].copy_from_slice(&x[at..at + W]);
    }
    true
}

/// Copies one window row, `span` bytes of `x` from `at`, to `row` at `d`:
/// as a word of 16 or 32 bytes where both have room (see `copy_rows`),
/// else byte by byte.
#[inline(always)]
fn copy_row(row: &mut Patch, d: usize, x: &[i8], at: usize, span: usize) {
    let fits = |w: usize| span <= w && at + w <= x.len() && d + w <= PATCH;
    if fits(16) {
        row[d..d + 16].copy_from_slice(&x[at..at + 16]);
    } else if fits(32) {
        row[d..d + 32].copy_from_slice(&x[at..at + 32]);
    } else {
        row[d..d + span].copy_from_slice(&x[at..at + span]);
    }
}

/// The output rows and columns (`start..end`) of `g` whose windows lie
/// inside its input.
fn inner(g: &Conv2dNhwc) -> [(usize, usize); 2] {
    let (ys, xs) = (g.window.inner_rows(), g.window.inner_cols());
    [(ys.start, ys.end), (xs.start, xs.end)]
}

/// Whether `o` is in `start..end`.
#[inline(always)]
fn inside(o: usize, (start, end): (usize, usize)) -> bool {
    start <= o && o < end
}

/// What a layer computes, its weights packed: output rows (pixels)
/// `first..rows` of `groups · gout` outputs, `out_stride` apart in `out`
/// (from its start), from `source`.
#[derive(Clone, Copy)]
pub(crate) struct Job<'a> {
    pub layout: Layout,
    pub first: usize,
    pub rows: usize,
    /// The blocks of each group summed, `0..blocks_per_group()` unless
    /// the blocks are split among threads.
    pub blocks: (usize, usize),
    pub source: Source<'a>,
    pub xq: &'a Quant,
    pub w_scales: &'a [f32],
    pub bias: Option<&'a [i32]>,
    pub y: &'a Output,
    pub packed: &'a [f32],
}

/// Where a part of a packed layer writes: its rows' outputs, `stride`
/// apart from `ptr`, row `first` at `ptr`. A part owns outputs `cols` of
/// each of its rows (all of them unless the layer's blocks are split among
/// threads) and only those are made into slices, so that parts writing
/// the same rows never alias.
pub(crate) struct Out<'a> {
    ptr: *mut i8,
    len: usize,
    stride: usize,
    first: usize,
    cols: (usize, usize),
    _out: core::marker::PhantomData<&'a mut [i8]>,
}

impl<'a> Out<'a> {
    /// Every output of `out`, whose first row is `first`.
    pub(crate) fn new(out: &'a mut [i8], stride: usize, first: usize) -> Self {
        // SAFETY: `out` is borrowed uniquely for `'a`.
        unsafe { Out::part(out.as_mut_ptr(), out.len(), stride, first, (0, usize::MAX)) }
    }

    /// Outputs `cols` of the rows in `len` bytes from `ptr`.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes for `'a`, and nothing
    /// else may read or write outputs `cols` of these rows meanwhile.
    pub(crate) unsafe fn part(ptr: *mut i8, len: usize, stride: usize, first: usize, cols: (usize, usize)) -> Self {
        Out {
            ptr,
            len,
            stride,
            first,
            cols,
            _out: core::marker::PhantomData,
        }
    }

    /// Outputs `c..c + n` of row `r`, which must be this part's.
    #[inline(always)]
    pub(crate) fn at(&mut self, r: usize, c: usize, n: usize) -> &mut [i8] {
        assert!(self.cols.0 <= c && c + n <= self.cols.1 && r >= self.first);
        let at = (r - self.first) * self.stride + c;
        assert!(at + n <= self.len);
        // SAFETY: within the `len` bytes `ptr` is valid for, and within
        // this part's outputs (`Out::part`), borrowed from `self`.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.add(at), n) }
    }
}

/// A block's requantization: each output's bias less its share of the
/// input zero point (`zp` times the weight sum) and scale.
pub(super) struct BlockParams {
    pub offset: [i32; COLS],
    /// The offsets for sums of inputs flipped to unsigned (`x + 128`, as
    /// the VNNI paths load them): each less the `128 · Σ w` that adds.
    pub flipped: [i32; COLS],
    pub scale: [f32; COLS],
    pub cols: usize,
}

impl BlockParams {
    #[cfg(any(target_arch = "x86_64", all(target_arch = "aarch64", target_feature = "neon")))]
    pub(super) const EMPTY: BlockParams = BlockParams {
        offset: [0; COLS],
        flipped: [0; COLS],
        scale: [1.0; COLS],
        cols: COLS,
    };

    /// Block `b` of group `g`'s parameters. Each a loop of its own over
    /// the columns, which the compiler vectorizes: a layer of one row (a
    /// squeeze-excitation's 240 -> 960) spent as long making them, a
    /// column at a time, as summing.
    pub(super) fn new(job: &Job<'_>, block: &[u8], g: usize, b: usize) -> Self {
        let l = &job.layout;
        let cols = COLS.min(l.gout - b * COLS);
        let oc = g * l.gout + b * COLS;
        let zp = job.xq.zero_point;
        let mut p = BlockParams {
            offset: [0; COLS],
            flipped: [0; COLS],
            scale: [1.0; COLS],
            cols,
        };
        let sums: [i32; COLS] = core::array::from_fn(|c| {
            i32::from_le_bytes([block[4 * c], block[4 * c + 1], block[4 * c + 2], block[4 * c + 3]])
        });
        if let Some(bias) = job.bias {
            p.offset[..cols].copy_from_slice(&bias[oc..oc + cols]);
        }
        for ((offset, flipped), &sum) in p.offset.iter_mut().zip(&mut p.flipped).zip(&sums) {
            *offset = offset.wrapping_sub(zp.wrapping_mul(sum));
            *flipped = offset.wrapping_sub(sum.wrapping_mul(128));
        }
        let (xs, ys) = (job.xq.scale, job.y.scale);
        match job.w_scales {
            [w] => p.scale[..cols].fill(requant_scale(xs, *w, ys)),
            ws => {
                for (s, &w) in p.scale[..cols].iter_mut().zip(&ws[oc..oc + cols]) {
                    *s = requant_scale(xs, w, ys);
                }
            }
        }
        p
    }
}

/// Taps a tile's table holds, and a [`Source::visit`] takes at most;
/// layers with more take the portable path.
pub(crate) const MAX_TAPS: usize = 64;

/// Rows the portable path sums at once.
const ROWS: usize = 4;

/// Taps whose inputs the portable path finds at once (the table is on the
/// stack: 512 bytes on a 32-bit microcontroller).
const TABLE_TAPS: usize = 16;

/// The portable path: the same blocks, summed in plain integer code
/// (which the compiler vectorizes for this CPU where it can).
pub(super) fn portable(job: &Job<'_>, out: &mut Out<'_>) {
    struct Work<'j, 'a, 'o> {
        job: &'j Job<'a>,
        out: &'j mut Out<'o>,
    }
    impl crate::cpu::Vectorized for Work<'_, '_, '_> {
        type Output = ();
        #[inline(always)]
        fn run(self) {
            // A gathered layer's windows or the others' table of inputs,
            // not both: in disjoint scopes, they share the stack.
            if let Source::Gathered { .. } = self.job.source {
                portable_body::<0, ROWS>(self.job, self.out, &mut [], &mut [[0; PATCH]; ROWS]);
            } else {
                portable_body::<TABLE_TAPS, 0>(self.job, self.out, &mut [[None; ROWS]; TABLE_TAPS], &mut []);
            }
        }
    }
    crate::cpu::with_best_isa(Work { job, out })
}

/// [`portable`] with `table` (`T` = [`TABLE_TAPS`] long) for a visited
/// source, `patches` (`P` = [`ROWS`] of them) for a gathered one.
#[inline(always)]
fn portable_body<'a, const T: usize, const P: usize>(
    job: &Job<'a>,
    out: &mut Out<'_>,
    table: &mut [[Option<&'a [i8]>; ROWS]; T],
    patches: &mut [Patch; P],
) {
    let l = &job.layout;
    let bytes = bytes(job.packed);
    let qpt = l.quads_per_tap();
    let zp = job.xq.zero_point as i8;
    let input = job.source.input();
    for g in 0..l.groups {
        for b in job.blocks.0..job.blocks.1 {
            let block = l.block(bytes, g, b);
            let p = BlockParams::new(job, block, g, b);
            let quads = &block[4 * COLS..];
            for r0 in (job.first..job.rows).step_by(ROWS) {
                let rows = ROWS.min(job.rows - r0);
                let mut acc = [[0i32; COLS]; ROWS];
                // Taps a table at a time: any number of them.
                for t in 0..l.taps {
                    if t % TABLE_TAPS == 0 && !matches!(job.source, Source::Gathered { .. }) {
                        let taps = TABLE_TAPS.min(l.taps - t);
                        job.source.visit::<ROWS>(t, taps, r0, rows, g, l.gin, |t, r, at| {
                            table[t][r] = at.map(|at| &input[at..at + l.gin]);
                        });
                    }
                    let segs = match job.source {
                        Source::Gathered { .. } => {
                            job.source.gather(r0, rows, patches);
                            core::array::from_fn(|r| Some(&patches[r][..l.gin]))
                        }
                        _ => table[t % TABLE_TAPS],
                    };
                    for q in 0..qpt {
                        let w = &quads[(t * qpt + q) * COLS * 4..][..COLS * 4];
                        for (r, acc) in acc.iter_mut().enumerate().take(rows) {
                            let x: [i32; 4] = core::array::from_fn(|e| match segs[r] {
                                Some(s) => s.get(4 * q + e).map_or(0, |&v| v as i32),
                                None => zp as i32,
                            });
                            for (c, a) in acc.iter_mut().enumerate() {
                                let wc = &w[4 * c..4 * c + 4];
                                let w = |e: usize| (wc[e] ^ 0x80) as i8 as i32;
                                let s = x[0] * w(0) + x[1] * w(1) + x[2] * w(2) + x[3] * w(3);
                                *a = a.wrapping_add(s);
                            }
                        }
                    }
                }
                for (r, acc) in acc.iter().enumerate().take(rows) {
                    let o = out.at(r0 + r, g * l.gout + b * COLS, p.cols);
                    for (c, o) in o.iter_mut().enumerate() {
                        *o = job.y.requantize(p.offset[c].wrapping_add(acc[c]), p.scale[c]);
                    }
                }
            }
        }
    }
}

/// A regular (grouped) convolution over its packed filter (see
/// [`super::conv2d_nhwc`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv(
    g: &Conv2dNhwc,
    x: &[i8],
    xq: &Quant,
    packed: &[f32],
    w_scales: &[f32],
    bias: Option<&[i32]>,
    y: &Output,
    out: &mut [i8],
) {
    let layout = Layout::conv(g);
    let win = &g.window;
    let source = Source::of_conv(g, x, xq.zero_point as i8);
    let job = Job {
        layout,
        first: 0,
        rows: win.out_pixels(),
        blocks: (0, layout.blocks_per_group()),
        source,
        xq,
        w_scales,
        bias,
        y,
        packed,
    };
    super::run_packed(&job, out, g.out_c);
}

/// Whether a convolution is packed and run as one tap of its whole window
/// ([`Source::Gathered`]): a regular one of several taps whose channels
/// would leave most of each tap's last quad empty (3 of an RGB image:
/// `kH · kW · 3` inputs take `kH · kW · 3 / 4` quads gathered, instead of
/// `kH · kW`), and whose window fits a [`Patch`].
pub(crate) fn gathers(g: &Conv2dNhwc) -> bool {
    let taps = g.window.kernel_h * g.window.kernel_w;
    g.groups == 1 && taps > 1 && g.in_c < GATHER_BELOW && !g.in_c.is_multiple_of(4) && taps * g.in_c <= PATCH
}

/// Convolutions with fewer input channels than this may be gathered.
const GATHER_BELOW: usize = 16;

/// The longest window gathered, in bytes.
pub(crate) const PATCH: usize = 256;

/// A row of gathered windows ([`Source::Gathered`]).
pub(crate) type Patch = [i8; PATCH];

/// A fully connected layer over its packed weight (see
/// [`super::fully_connected`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn fully_connected(
    x: &[i8],
    xq: &Quant,
    packed: &[f32],
    w_scales: &[f32],
    bias: Option<&[i32]>,
    k: usize,
    n: usize,
    y: &Output,
    out: &mut [i8],
) {
    let layout = Layout::fully_connected(k, n);
    let job = Job {
        layout,
        first: 0,
        rows: x.len() / k,
        blocks: (0, layout.blocks_per_group()),
        source: Source::Rows { x, k },
        xq,
        w_scales,
        bias,
        y,
        packed,
    };
    super::run_packed(&job, out, n);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rng;
    use std::vec;
    use std::vec::Vec;
    extern crate std;

    fn bytes_of(seed: &mut u64, n: usize) -> Vec<i8> {
        (0..n).map(|_| rng(seed) as u8 as i8).collect()
    }

    /// The scalar kernel's outputs, the packed layer's on the best path,
    /// and on the portable path, for one convolution.
    #[allow(clippy::too_many_arguments)]
    fn check_conv(
        seed: &mut u64,
        x_sizes: [usize; 4],
        w_sizes: [usize; 4],
        stride: [usize; 2],
        padding: [usize; 4],
        dilation: [usize; 2],
        groups: usize,
        miri_limit: usize,
        what: &str,
    ) {
        let Some(g) = Conv2dNhwc::regular(&x_sizes, &w_sizes, stride, padding, dilation, groups) else {
            panic!("{what}: invalid geometry");
        };
        // Under Miri only the smaller layers (by multiply-adds).
        let win = &g.window;
        let work = win.out_pixels() * g.out_c * win.kernel_h * win.kernel_w * w_sizes[3];
        if crate::testing::too_large_for_miri(work, miri_limit) {
            return;
        }
        let x = bytes_of(seed, x_sizes.iter().product());
        let w = bytes_of(seed, w_sizes.iter().product());
        let bias: Vec<i32> = (0..g.out_c).map(|_| rng(seed) as i32 % 4000 - 2000).collect();
        let scales: Vec<f32> = (0..g.out_c).map(|_| 0.002 + (rng(seed) % 100) as f32 * 1e-5).collect();
        let xq = Quant {
            scale: 0.05,
            zero_point: (rng(seed) % 256) as i32 - 128,
        };
        let y = Output {
            scale: 0.9,
            zero_point: (rng(seed) % 40) as i32 - 20,
            qmin: -128 + (rng(seed) % 3) as i32,
            qmax: 127,
        };
        let len: usize = g.output_sizes().iter().product();
        let mut want = vec![0i8; len];
        super::super::conv2d_nhwc(&g, false, &x, &xq, &w, &scales, Some(&bias), None, &y, &mut want);
        let l = Layout::conv(&g);
        let mut packed = vec![0f32; l.packed_len()];
        pack_conv(&g, &w, &mut packed);
        assert!(l.is_packed(&packed));
        for threads in [1, 2] {
            // Under Miri the best path is the portable one, which on one
            // thread is the call below.
            if cfg!(miri) && threads == 1 {
                continue;
            }
            crate::parallel::set_threads(threads);
            let mut got = vec![0i8; len];
            let b = Some(&bias[..]);
            super::super::conv2d_nhwc(&g, false, &x, &xq, &[], &scales, b, Some(&packed), &y, &mut got);
            crate::parallel::set_threads(1);
            assert_eq!(got, want, "{what}: best path, {threads} threads");
        }
        let job = Job {
            layout: l,
            first: 0,
            rows: len / g.out_c,
            blocks: (0, l.blocks_per_group()),
            source: Source::of_conv(&g, &x, xq.zero_point as i8),
            xq: &xq,
            w_scales: &scales,
            bias: Some(&bias),
            y: &y,
            packed: &packed,
        };
        let mut got = vec![0i8; len];
        portable(&job, &mut Out::new(&mut got, g.out_c, 0));
        assert_eq!(got, want, "{what}: portable path");
        check_avx2(&job, &want, g.out_c, what);
    }

    /// The AVX2 path's outputs of `job` (whatever the best path is), where
    /// the CPU has it and the layer fits its tiles.
    fn check_avx2(job: &Job<'_>, want: &[i8], out_stride: usize, what: &str) {
        #[cfg(target_arch = "x86_64")]
        if super::super::avx2::available() && super::super::tiles::fits(job) {
            let mut got = vec![0i8; want.len()];
            // SAFETY: the CPU has AVX2 and FMA; the layer fits the tiles.
            unsafe { super::super::avx2::run(job, &mut Out::new(&mut got, out_stride, job.first)) };
            assert_eq!(got, want, "{what}: AVX2 path");
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (job, want, out_stride, what);
    }

    #[test]
    fn packed_convolutions_give_the_scalar_outputs() {
        // WASI has no threads (nor the turn): two threads run as one there.
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut seed = 7;
        // (input, filter, stride, padding, dilation, groups)
        type Case = ([usize; 4], [usize; 4], [usize; 2], [usize; 4], [usize; 2], usize);
        let cases: &[Case] = &[
            ([1, 9, 9, 3], [32, 3, 3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 1),
            ([1, 6, 5, 16], [96, 1, 1, 16], [1, 1], [0, 0, 0, 0], [1, 1], 1),
            ([2, 7, 7, 24], [20, 3, 3, 24], [1, 1], [1, 1, 1, 1], [1, 1], 1),
            ([1, 5, 6, 8], [12, 3, 2, 4], [1, 2], [2, 0, 1, 1], [2, 1], 2),
            ([1, 4, 4, 70], [17, 2, 2, 70], [1, 1], [0, 1, 1, 0], [1, 1], 1),
            ([1, 3, 3, 5], [33, 1, 1, 5], [1, 1], [0, 0, 0, 0], [1, 1], 1),
            ([1, 8, 8, 64], [64, 1, 1, 64], [2, 2], [0, 0, 0, 0], [1, 1], 1),
            ([2, 12, 11, 20], [24, 1, 1, 20], [1, 1], [0, 0, 0, 0], [1, 1], 1),
            ([1, 30, 30, 3], [16, 3, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 1),
            // Gathered windows whose rows are copied as 32-byte words
            // (ResNet's 7 × 7 stem; 5 × 5 of 5 channels), the last ones
            // too near the input's end for a word; and a dilated one.
            ([1, 16, 16, 3], [64, 7, 7, 3], [2, 2], [3, 3, 3, 3], [1, 1], 1),
            ([2, 11, 10, 5], [8, 5, 5, 5], [1, 1], [2, 2, 2, 2], [1, 1], 1),
            ([1, 12, 12, 3], [8, 3, 3, 3], [1, 1], [2, 2, 2, 2], [2, 1], 1),
            // 7 × 7 images (49 rows: tiles of 7 on AVX-512), a pointwise
            // layer of several pairs of blocks (the first tile prefetches
            // the next pair's) and one of narrow groups.
            ([1, 7, 7, 72], [88, 1, 1, 72], [1, 1], [0, 0, 0, 0], [1, 1], 1),
            ([1, 7, 7, 32], [32, 3, 3, 8], [1, 1], [1, 1, 1, 1], [1, 1], 4),
        ];
        for (i, &(xs, ws, s, p, d, grp)) in cases.iter().enumerate() {
            check_conv(
                &mut seed,
                xs,
                ws,
                s,
                p,
                d,
                grp,
                crate::testing::MIRI_WORK,
                &std::format!("case {i}"),
            );
        }
        // Random shapes; under Miri those of the first 20 of at most 2^12
        // multiply-adds (pointwise and gathered ones among them; the
        // cases above have the portable path's edges).
        for i in 0..if cfg!(miri) { 20 } else { 60 } {
            let r = |seed: &mut u64, n: u64| 1 + (rng(seed) % n) as usize;
            let groups = if rng(&mut seed).is_multiple_of(4) {
                r(&mut seed, 3)
            } else {
                1
            };
            let (gin, gout) = (r(&mut seed, 40), r(&mut seed, 40));
            let (kh, kw) = (r(&mut seed, 3), r(&mut seed, 3));
            let (h, w) = (kh + r(&mut seed, 6), kw + r(&mut seed, 6));
            let pad = [
                rng(&mut seed) as usize % 2,
                rng(&mut seed) as usize % 2,
                rng(&mut seed) as usize % 2,
                rng(&mut seed) as usize % 2,
            ];
            let stride = [r(&mut seed, 2), r(&mut seed, 2)];
            let batch = r(&mut seed, 2);
            check_conv(
                &mut seed,
                [batch, h, w, gin * groups],
                [gout * groups, kh, kw, gin],
                stride,
                pad,
                [1, 1],
                groups,
                1 << 12,
                &std::format!("random {i}"),
            );
        }
    }

    /// The edges of the vector paths' tiles: segments whose last run of
    /// 16 inputs holds 1 to 4 quads (or none), row counts past whole tiles
    /// and single rows, outputs past whole blocks, padded and grouped
    /// windows, gathered ones, and more taps than a tile's table holds
    /// (the portable path's).
    #[test]
    fn packed_convolutions_at_the_tiles_edges_give_the_scalar_outputs() {
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut seed = 23;
        // (input, filter, stride, padding, dilation, groups)
        type Case = ([usize; 4], [usize; 4], [usize; 2], [usize; 4], [usize; 2], usize);
        let cases: &[Case] = &[
            ([1, 1, 1, 13], [17, 1, 1, 13], [1, 1], [0, 0, 0, 0], [1, 1], 1),
            ([1, 1, 6, 15], [16, 1, 1, 15], [1, 1], [0, 0, 0, 0], [1, 1], 1),
            ([1, 1, 11, 31], [1, 1, 1, 31], [1, 1], [0, 0, 0, 0], [1, 1], 1),
            ([1, 4, 3, 14], [33, 3, 3, 14], [1, 1], [1, 1, 1, 1], [1, 1], 1),
            ([2, 5, 4, 48], [51, 2, 3, 16], [1, 1], [1, 0, 2, 1], [1, 2], 3),
            ([1, 6, 7, 39], [18, 3, 3, 13], [2, 1], [1, 1, 1, 1], [1, 1], 3),
            ([1, 7, 9, 1], [20, 3, 3, 1], [1, 1], [1, 1, 1, 1], [1, 1], 1),
            ([1, 9, 8, 3], [8, 5, 5, 3], [2, 2], [2, 2, 2, 2], [1, 1], 1),
            ([2, 8, 8, 3], [24, 7, 7, 3], [2, 2], [3, 3, 3, 3], [1, 1], 1),
            ([1, 10, 10, 5], [9, 9, 9, 5], [1, 1], [4, 4, 4, 4], [1, 1], 1),
            // Narrow groups, several to a vector on AVX-512 VNNI: RegNet's
            // 8 channels a group, an odd count (the last vector half
            // full), 4 a group, wider inputs than outputs, a pointwise
            // grouped layer, dilation, and more groups than one pass of
            // weights holds.
            ([1, 9, 9, 48], [48, 3, 3, 8], [2, 2], [1, 1, 1, 1], [1, 1], 6),
            ([1, 7, 6, 104], [104, 3, 3, 8], [1, 1], [1, 1, 1, 1], [1, 1], 13),
            ([2, 5, 5, 20], [20, 3, 3, 4], [1, 1], [1, 0, 1, 2], [1, 1], 5),
            ([1, 6, 6, 64], [32, 3, 3, 16], [1, 2], [1, 1, 1, 1], [1, 1], 4),
            ([1, 5, 5, 32], [16, 1, 1, 8], [1, 1], [0, 0, 0, 0], [1, 1], 4),
            ([1, 9, 9, 24], [24, 3, 3, 8], [1, 1], [2, 2, 2, 2], [2, 2], 3),
            ([1, 4, 5, 320], [320, 3, 3, 8], [1, 1], [1, 1, 1, 1], [1, 1], 40),
        ];
        // Under Miri (the portable path) the edges of at most 2^12
        // multiply-adds: a single row and pixel, partial tiles of rows,
        // blocks of outputs and quads of inputs, grouped layers (the test
        // above has gathered ones, and blocks split across threads).
        for (i, &(xs, ws, s, p, d, grp)) in cases.iter().enumerate() {
            check_conv(&mut seed, xs, ws, s, p, d, grp, 1 << 12, &std::format!("edge {i}"));
        }
    }

    #[test]
    fn packed_fully_connected_layers_give_the_scalar_outputs() {
        let mut seed = 11;
        for (i, &(rows, k, n)) in [
            (1, 512, 1000),
            (3, 7, 5),
            (9, 64, 16),
            (17, 130, 33),
            (0, 4, 4),
            (5, 13, 17),
            (6, 15, 48),
            (11, 16, 1),
            (1, 3, 16),
            (1, 37, 200),
            (10, 2100, 20),
        ]
        .iter()
        .enumerate()
        {
            // Under Miri only the layers of at most 2^12 multiply-adds:
            // still whole and partial tiles of rows, blocks of outputs and
            // quads of inputs, and no rows.
            if crate::testing::too_large_for_miri(rows * k * n, 1 << 12) {
                continue;
            }
            for transposed in [false, true] {
                let x = bytes_of(&mut seed, rows * k);
                let w = bytes_of(&mut seed, k * n);
                let bias: Vec<i32> = (0..n).map(|_| rng(&mut seed) as i32 % 4000 - 2000).collect();
                let scales = [0.003f32];
                let xq = Quant {
                    scale: 0.04,
                    zero_point: -5,
                };
                let y = Output {
                    scale: 0.5,
                    zero_point: 3,
                    qmin: -128,
                    qmax: 100,
                };
                let mut want = vec![0i8; rows * n];
                super::super::fully_connected(&x, &xq, &w, &scales, transposed, Some(&bias), k, n, None, &y, &mut want);
                let mut packed = vec![0f32; Layout::fully_connected(k, n).packed_len()];
                pack_fully_connected(&w, k, n, transposed, &mut packed);
                let mut got = vec![0i8; rows * n];
                super::super::fully_connected(
                    &x,
                    &xq,
                    &[],
                    &scales,
                    transposed,
                    Some(&bias),
                    k,
                    n,
                    Some(&packed),
                    &y,
                    &mut got,
                );
                assert_eq!(got, want, "case {i}, transposed {transposed}");
                let layout = Layout::fully_connected(k, n);
                let job = Job {
                    layout,
                    first: 0,
                    rows,
                    blocks: (0, layout.blocks_per_group()),
                    source: Source::Rows { x: &x, k },
                    xq: &xq,
                    w_scales: &scales,
                    bias: Some(&bias),
                    y: &y,
                    packed: &packed,
                };
                check_avx2(&job, &want, n, &std::format!("case {i}, transposed {transposed}"));
            }
        }
    }
}
