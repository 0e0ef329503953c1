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
//! the VNNI path takes `Σ x · (w + 128)` less `128 · Σ x`, its rows' sums.
//! Every sum is exact `i32` arithmetic, wrapping as the scalar kernels
//! do, so each path gives the scalar kernels' outputs to the bit.
use super::{requant_scale, weight_scale, Output, Quant};
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
    pub fn conv(g: &Conv2dNhwc) -> Self {
        Layout {
            groups: g.groups,
            gout: g.out_c / g.groups.max(1),
            taps: g.window.kernel_h * g.window.kernel_w,
            gin: g.in_c / g.groups.max(1),
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
    Conv { g: &'a Conv2dNhwc, x: &'a [i8] },
    /// Rows of `k` inputs, one after another.
    Rows { x: &'a [i8], k: usize },
}

impl<'a> Source<'a> {
    /// For rows `r0..r0 + table[t].len()` and each tap `t`, the input of
    /// group `group` (`gin` values), or `None` in the padding. Rows past
    /// `rows` repeat the last one.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // `r` indexes each tap's row
    pub(crate) fn fill<const R: usize>(
        &self,
        r0: usize,
        rows: usize,
        group: usize,
        gin: usize,
        table: &mut [[Option<&'a [i8]>; R]],
    ) {
        for r in 0..R {
            let row = r0 + r.min(rows - 1);
            match *self {
                Source::Rows { x, k } => table[0][r] = Some(&x[row * k..][..k]),
                Source::Conv { g, x } => {
                    let w = &g.window;
                    let (ox, rest) = (row % w.out_w, row / w.out_w);
                    let (oy, n) = (rest % w.out_h, rest / w.out_h);
                    let (cin, at) = (g.in_c, group * gin);
                    for ky in 0..w.kernel_h {
                        let iy = (oy * w.stride_h + ky * w.dilation_h)
                            .checked_sub(w.pad_top)
                            .filter(|&i| i < w.in_h);
                        for kx in 0..w.kernel_w {
                            let ix = (ox * w.stride_w + kx * w.dilation_w)
                                .checked_sub(w.pad_left)
                                .filter(|&i| i < w.in_w);
                            table[ky * w.kernel_w + kx][r] = match (iy, ix) {
                                (Some(iy), Some(ix)) => Some(&x[((n * w.in_h + iy) * w.in_w + ix) * cin + at..][..gin]),
                                _ => None,
                            };
                        }
                    }
                }
            }
        }
    }
}

/// What a layer computes, its weights packed: output rows (pixels)
/// `first..rows` of `groups · gout` outputs, `out_stride` apart in `out`
/// (from its start), from `source`.
#[derive(Clone, Copy)]
pub(crate) struct Job<'a> {
    pub layout: Layout,
    pub first: usize,
    pub rows: usize,
    pub source: Source<'a>,
    pub xq: &'a Quant,
    pub w_scales: &'a [f32],
    pub bias: Option<&'a [i32]>,
    pub y: &'a Output,
    pub packed: &'a [f32],
}

/// A block's requantization: each output's bias less its share of the
/// input zero point (`zp` times the weight sum) and scale.
pub(super) struct BlockParams {
    pub offset: [i32; COLS],
    pub scale: [f32; COLS],
    pub cols: usize,
}

impl BlockParams {
    #[cfg(target_arch = "x86_64")]
    pub(super) const EMPTY: BlockParams = BlockParams {
        offset: [0; COLS],
        scale: [1.0; COLS],
        cols: COLS,
    };

    pub(super) fn new(job: &Job<'_>, block: &[u8], g: usize, b: usize) -> Self {
        let l = &job.layout;
        let cols = COLS.min(l.gout - b * COLS);
        let zp = job.xq.zero_point;
        let mut p = BlockParams {
            offset: [0; COLS],
            scale: [1.0; COLS],
            cols,
        };
        for c in 0..cols {
            let oc = g * l.gout + b * COLS + c;
            let sum = i32::from_le_bytes([block[4 * c], block[4 * c + 1], block[4 * c + 2], block[4 * c + 3]]);
            let bias = job.bias.map_or(0, |v| v[oc]);
            p.offset[c] = bias.wrapping_sub(zp.wrapping_mul(sum));
            p.scale[c] = requant_scale(job.xq.scale, weight_scale(job.w_scales, oc), job.y.scale);
        }
        p
    }
}

/// Taps a tile's table holds; layers with more take the portable path.
pub(crate) const MAX_TAPS: usize = 64;

/// Rows the portable path sums at once.
const ROWS: usize = 4;

/// The portable path: the same blocks, summed in plain integer code
/// (which the compiler vectorizes for this CPU where it can).
pub(super) fn portable(job: &Job<'_>, out: &mut [i8], out_stride: usize) {
    struct Work<'j, 'a> {
        job: &'j Job<'a>,
        out: &'j mut [i8],
        out_stride: usize,
    }
    impl crate::cpu::Vectorized for Work<'_, '_> {
        type Output = ();
        #[inline(always)]
        fn run(self) {
            portable_body(self.job, self.out, self.out_stride)
        }
    }
    crate::cpu::with_best_isa(Work { job, out, out_stride })
}

#[inline(always)]
fn portable_body(job: &Job<'_>, out: &mut [i8], out_stride: usize) {
    let l = &job.layout;
    let bytes = bytes(job.packed);
    let qpt = l.quads_per_tap();
    let zp = job.xq.zero_point as i8;
    for g in 0..l.groups {
        for b in 0..l.blocks_per_group() {
            let block = l.block(bytes, g, b);
            let p = BlockParams::new(job, block, g, b);
            let quads = &block[4 * COLS..];
            for r0 in (job.first..job.rows).step_by(ROWS) {
                let rows = ROWS.min(job.rows - r0);
                let mut acc = [[0i32; COLS]; ROWS];
                let mut table = [[None; ROWS]; 1];
                for t in 0..l.taps {
                    // One tap at a time: any number of them.
                    let segs = match job.source {
                        Source::Rows { .. } => {
                            job.source.fill(r0, rows, g, l.gin, &mut table);
                            table[0]
                        }
                        Source::Conv { g: geometry, x } => core::array::from_fn(|r| {
                            tap_pixel(geometry, r0 + r.min(rows - 1), t)
                                .map(|p| &x[p * geometry.in_c + g * l.gin..][..l.gin])
                        }),
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
                    let o = &mut out[(r0 - job.first + r) * out_stride + g * l.gout + b * COLS..][..p.cols];
                    for (c, o) in o.iter_mut().enumerate() {
                        *o = job.y.requantize(p.offset[c].wrapping_add(acc[c]), p.scale[c]);
                    }
                }
            }
        }
    }
}

/// Output `pixel`'s input pixel under `tap` of a convolution's window, if
/// it falls inside the input.
#[inline(always)]
pub(crate) fn tap_pixel(g: &Conv2dNhwc, pixel: usize, tap: usize) -> Option<usize> {
    let w = &g.window;
    let ox = pixel % w.out_w;
    let oy = (pixel / w.out_w) % w.out_h;
    let n = pixel / (w.out_w * w.out_h);
    let (ky, kx) = (tap / w.kernel_w, tap % w.kernel_w);
    let iy = (oy * w.stride_h + ky * w.dilation_h).checked_sub(w.pad_top)?;
    let ix = (ox * w.stride_w + kx * w.dilation_w).checked_sub(w.pad_left)?;
    (iy < w.in_h && ix < w.in_w).then_some((n * w.in_h + iy) * w.in_w + ix)
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
    let rows = win.batch * win.out_h * win.out_w;
    let patch = layout.taps * layout.quads_per_tap() * 4;
    if layout.groups == 1 && (2..=MAX_TAPS).contains(&layout.taps) && layout.gin < GATHER_BELOW && patch <= PATCH {
        // Few channels a tap (a first layer's RGB): each pixel's window is
        // gathered into one row, which the packing reads as a single tap
        // (its zero weights line up with each tap's padding to a quad).
        let flat = Layout {
            taps: 1,
            gin: patch,
            ..layout
        };
        let mut buf = [xq.zero_point as i8; PATCH_ROWS * PATCH];
        for r0 in (0..rows).step_by(PATCH_ROWS) {
            let n = PATCH_ROWS.min(rows - r0);
            for (r, row) in buf.chunks_exact_mut(patch).take(n).enumerate() {
                gather(g, x, xq.zero_point as i8, r0 + r, layout.quads_per_tap(), row);
            }
            let job = Job {
                layout: flat,
                first: 0,
                rows: n,
                source: Source::Rows {
                    x: &buf[..n * patch],
                    k: patch,
                },
                xq,
                w_scales,
                bias,
                y,
                packed,
            };
            super::run_packed(&job, &mut out[r0 * g.out_c..], g.out_c);
        }
        return;
    }
    // A pointwise convolution over every pixel reads rows of channels.
    let pointwise = layout.taps == 1
        && layout.groups == 1
        && (win.stride_h, win.stride_w, win.pad_top, win.pad_left) == (1, 1, 0, 0)
        && (win.out_h, win.out_w) == (win.in_h, win.in_w);
    let source = match pointwise {
        true => Source::Rows { x, k: g.in_c },
        false => Source::Conv { g, x },
    };
    let job = Job {
        layout,
        first: 0,
        rows,
        source,
        xq,
        w_scales,
        bias,
        y,
        packed,
    };
    super::run_packed(&job, out, g.out_c);
}

/// Gathers output pixel `pixel`'s window into `row`: each tap's channels
/// at the start of its `quads` quads, the padding's taps zero points.
/// Taps read whole quads where the input goes on (what lies past the
/// channels meets zero weights), so most copies are 4 bytes at a time.
#[inline(always)]
fn gather(g: &Conv2dNhwc, x: &[i8], zp: i8, pixel: usize, quads: usize, row: &mut [i8]) {
    let w = &g.window;
    let (ox, rest) = (pixel % w.out_w, pixel / w.out_w);
    let (oy, n) = (rest % w.out_h, rest / w.out_h);
    let (cin, q4, kw) = (g.in_c, 4 * quads, w.kernel_w);
    let step = w.dilation_w * cin;
    let ix0 = (ox * w.stride_w).checked_sub(w.pad_left);
    for (ky, dst) in row.chunks_exact_mut(kw * q4).take(w.kernel_h).enumerate() {
        let iy = (oy * w.stride_h + ky * w.dilation_h)
            .checked_sub(w.pad_top)
            .filter(|&i| i < w.in_h);
        let Some(iy) = iy else {
            dst.fill(zp);
            continue;
        };
        let base = (n * w.in_h + iy) * w.in_w;
        // The whole row of the window in one span when it lies inside.
        let span = ix0
            .filter(|&i| i + (kw - 1) * w.dilation_w < w.in_w)
            .and_then(|i| x.get((base + i) * cin..(base + i) * cin + (kw - 1) * step + q4));
        if let Some(src) = span {
            for (kx, d) in dst.chunks_exact_mut(q4).enumerate() {
                for (d, s) in d.chunks_exact_mut(4).zip(src[kx * step..].chunks_exact(4)) {
                    let v: [i8; 4] = [s[0], s[1], s[2], s[3]];
                    d.copy_from_slice(&v);
                }
            }
            continue;
        }
        for (kx, d) in dst.chunks_exact_mut(q4).enumerate() {
            let ix = (ox * w.stride_w + kx * w.dilation_w)
                .checked_sub(w.pad_left)
                .filter(|&i| i < w.in_w);
            let Some(ix) = ix else {
                d.fill(zp);
                continue;
            };
            let at = (base + ix) * cin;
            match x.get(at..at + q4) {
                Some(src) => d.copy_from_slice(src),
                None => d[..cin].copy_from_slice(&x[at..at + cin]),
            }
        }
    }
}

/// Convolutions with fewer input channels than this a tap, and windows
/// of at most [`PATCH`] bytes, are gathered (see [`conv`]).
const GATHER_BELOW: usize = 16;
const PATCH: usize = 256;
/// Rows gathered at once.
const PATCH_ROWS: usize = 64;

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
    let job = Job {
        layout: Layout::fully_connected(k, n),
        first: 0,
        rows: x.len() / k,
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
        what: &str,
    ) {
        let Some(g) = Conv2dNhwc::regular(&x_sizes, &w_sizes, stride, padding, dilation, groups) else {
            panic!("{what}: invalid geometry");
        };
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
            source: Source::Conv { g: &g, x: &x },
            xq: &xq,
            w_scales: &scales,
            bias: Some(&bias),
            y: &y,
            packed: &packed,
        };
        let mut got = vec![0i8; len];
        portable(&job, &mut got, g.out_c);
        assert_eq!(got, want, "{what}: portable path");
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
        ];
        for (i, &(xs, ws, s, p, d, grp)) in cases.iter().enumerate() {
            check_conv(&mut seed, xs, ws, s, p, d, grp, &std::format!("case {i}"));
        }
        // Random shapes.
        for i in 0..60 {
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
                &std::format!("random {i}"),
            );
        }
    }

    #[test]
    fn packed_fully_connected_layers_give_the_scalar_outputs() {
        let mut seed = 11;
        for (i, &(rows, k, n)) in [(1, 512, 1000), (3, 7, 5), (9, 64, 16), (17, 130, 33), (0, 4, 4)]
            .iter()
            .enumerate()
        {
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
            }
        }
    }
}
