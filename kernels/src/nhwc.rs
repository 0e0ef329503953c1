//! Convolution and pooling over NHWC images: the layout of XNNPACK
//! subgraphs, which ptec compiles from ExecuTorch's XNNPACK delegate.
//!
//! An image is `[N, H, W, C]`, row-major, `f32`. A regular convolution's
//! filter is `[O, kH, kW, C / groups]`; a depthwise convolution's is
//! `[1, kH, kW, C · multiplier]`, where output channel `c · multiplier + m`
//! reads input channel `c`. Padding is given as `[top, right, bottom, left]`,
//! strides and dilations as `[height, width]`. Every kernel adds its bias
//! and clamps its outputs to `[min, max]` (XNNPACK's fused `output_min` and
//! `output_max`; infinities mean no clamp) as it writes them.
//!
//! Geometry is checked once, by [`Window2d::new`] and the [`Conv2dNhwc`]
//! constructors, which the compiler calls at compile time; the kernels
//! trust a checked geometry and index within the lengths it implies.
use crate::gemm::packing::{stamp, stamped};
use crate::gemm::Epilogue;
use crate::gemm::{ensure_packed, gemm_packed, is_packed, pack, pack_with, packed_len};

#[cfg(all(feature = "std", target_arch = "x86_64"))]
extern crate std;

mod chain;
mod direct;
#[cfg(target_arch = "x86_64")]
mod dw3x3;
#[cfg(target_arch = "x86_64")]
mod dw_avx2;

pub use chain::{chain_scratch_len, chain_takes_residual, conv2d_folded_chain, MAX_CHAIN_PARTS};

/// The windows of a 2-d convolution or pooling over `[N, H, W, ·]` images.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window2d {
    pub batch: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_h: usize,
    pub out_w: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride_h: usize,
    pub stride_w: usize,
    pub dilation_h: usize,
    pub dilation_w: usize,
    pub pad_top: usize,
    pub pad_left: usize,
}

/// Output length of one spatial dimension, or `None` when the (dilated)
/// window does not fit in the padded input or a parameter is zero.
fn out_len(input: usize, pad_a: usize, pad_b: usize, kernel: usize, stride: usize, dilation: usize) -> Option<usize> {
    if kernel == 0 || stride == 0 || dilation == 0 {
        return None;
    }
    let span = dilation.checked_mul(kernel - 1)?.checked_add(1)?;
    let padded = input.checked_add(pad_a)?.checked_add(pad_b)?;
    padded.checked_sub(span).map(|d| d / stride + 1)
}

/// `a · b · c · d`, or `None` on overflow.
fn product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl Window2d {
    /// The windows over `batch` images of `in_h × in_w` pixels, or `None`
    /// when they do not fit.
    pub fn new(
        batch: usize,
        in_h: usize,
        in_w: usize,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 4],
        dilation: [usize; 2],
    ) -> Option<Self> {
        let [top, right, bottom, left] = padding;
        let out_h = out_len(in_h, top, bottom, kernel[0], stride[0], dilation[0])?;
        let out_w = out_len(in_w, left, right, kernel[1], stride[1], dilation[1])?;
        // Every element count the kernels form must fit in a usize (times
        // 4 bytes and a little scratch): check the largest ones here.
        let limit = isize::MAX as usize / 64;
        for n in [product(&[batch, in_h, in_w])?, product(&[batch, out_h, out_w])?] {
            if n > limit {
                return None;
            }
        }
        Some(Window2d {
            batch,
            in_h,
            in_w,
            out_h,
            out_w,
            kernel_h: kernel[0],
            kernel_w: kernel[1],
            stride_h: stride[0],
            stride_w: stride[1],
            dilation_h: dilation[0],
            dilation_w: dilation[1],
            pad_top: top,
            pad_left: left,
        })
    }

    /// Output pixels over all images.
    pub fn out_pixels(&self) -> usize {
        self.batch * self.out_h * self.out_w
    }

    /// Input row of kernel row `ki` for output row `oh`, if inside the image.
    #[inline(always)]
    fn in_row(&self, oh: usize, ki: usize) -> Option<usize> {
        (oh * self.stride_h + ki * self.dilation_h)
            .checked_sub(self.pad_top)
            .filter(|&r| r < self.in_h)
    }

    /// Input column of kernel column `kj` for output column `ow`, if inside.
    #[inline(always)]
    fn in_col(&self, ow: usize, kj: usize) -> Option<usize> {
        (ow * self.stride_w + kj * self.dilation_w)
            .checked_sub(self.pad_left)
            .filter(|&c| c < self.in_w)
    }

    /// The output columns whose window rows lie wholly inside the image
    /// across: one range (the windows move one way), empty when none do.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn inner_cols(&self) -> core::ops::Range<usize> {
        let last = self.kernel_w - 1;
        inner_range(self.out_w, |ow| {
            self.in_col(ow, 0).is_some() && self.in_col(ow, last).is_some()
        })
    }

    /// The output rows whose windows lie wholly inside the image down, as
    /// [`Self::inner_cols`] across.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn inner_rows(&self) -> core::ops::Range<usize> {
        let last = self.kernel_h - 1;
        inner_range(self.out_h, |oh| {
            self.in_row(oh, 0).is_some() && self.in_row(oh, last).is_some()
        })
    }
}

/// The first run of `0..outs` for which `inner` holds.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn inner_range(outs: usize, inner: impl Fn(usize) -> bool) -> core::ops::Range<usize> {
    let start = (0..outs).find(|&o| inner(o)).unwrap_or(outs);
    start..(start..outs).find(|&o| !inner(o)).unwrap_or(outs)
}

/// A checked 2-d convolution over NHWC images.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dNhwc {
    pub window: Window2d,
    pub in_c: usize,
    pub out_c: usize,
    /// Channel groups; equal to `in_c` for a depthwise convolution.
    pub groups: usize,
}

impl Conv2dNhwc {
    /// A regular (possibly grouped) convolution of an `input` of sizes
    /// `[N, H, W, C]` with a `filter` of `[O, kH, kW, C / groups]`.
    pub fn regular(
        input: &[usize],
        filter: &[usize],
        stride: [usize; 2],
        padding: [usize; 4],
        dilation: [usize; 2],
        groups: usize,
    ) -> Option<Self> {
        let (&[n, h, w, c], &[o, kh, kw, cg]) = (input, filter) else {
            return None;
        };
        if groups == 0 || cg.checked_mul(groups)? != c || o % groups != 0 {
            return None;
        }
        let window = Window2d::new(n, h, w, [kh, kw], stride, padding, dilation)?;
        Self::checked(window, c, o, groups, filter)
    }

    /// A depthwise convolution of an `input` of `[N, H, W, C]` with a
    /// `filter` of `[1, kH, kW, C · multiplier]`.
    pub fn depthwise(
        input: &[usize],
        filter: &[usize],
        stride: [usize; 2],
        padding: [usize; 4],
        dilation: [usize; 2],
    ) -> Option<Self> {
        let (&[n, h, w, c], &[1, kh, kw, o]) = (input, filter) else {
            return None;
        };
        if c == 0 || o % c != 0 {
            return None;
        }
        let window = Window2d::new(n, h, w, [kh, kw], stride, padding, dilation)?;
        Self::checked(window, c, o, c, filter)
    }

    /// The convolution [`conv2d_folded`] runs for a weight of sizes
    /// `weight`, in `layout`, over an `input` of `[N, H, W, C]`: ungrouped
    /// ([`Self::regular`]) or depthwise ([`Self::depthwise`], `groups ==
    /// C`); `None` for other groupings or invalid geometry.
    pub fn folded(
        layout: FilterLayout,
        input: &[usize],
        weight: &[usize],
        stride: [usize; 2],
        padding: [usize; 4],
        dilation: [usize; 2],
        groups: usize,
    ) -> Option<Self> {
        let depthwise = groups > 1 && input.get(3) == Some(&groups);
        match (layout, weight) {
            (FilterLayout::Torch, &[o, cg, kh, kw]) if groups == 1 => {
                Self::regular(input, &[o, kh, kw, cg], stride, padding, dilation, 1)
            }
            (FilterLayout::Torch, &[o, 1, kh, kw]) if depthwise => {
                Self::depthwise(input, &[1, kh, kw, o], stride, padding, dilation)
            }
            (FilterLayout::Xnnpack, _) if groups == 1 => Self::regular(input, weight, stride, padding, dilation, 1),
            (FilterLayout::Xnnpack, _) if depthwise => Self::depthwise(input, weight, stride, padding, dilation),
            _ => None,
        }
    }

    fn checked(window: Window2d, in_c: usize, out_c: usize, groups: usize, filter: &[usize]) -> Option<Self> {
        let limit = isize::MAX as usize / 64;
        let counts = [
            product(&[window.batch, window.in_h, window.in_w, in_c])?,
            product(&[window.out_pixels(), out_c])?,
            product(filter)?,
            product(&[window.kernel_h, window.kernel_w, in_c])?,
        ];
        if counts.iter().any(|&n| n > limit) {
            return None;
        }
        Some(Conv2dNhwc {
            window,
            in_c,
            out_c,
            groups,
        })
    }

    /// `[N, OH, OW, O]`.
    pub fn output_sizes(&self) -> [usize; 4] {
        let w = &self.window;
        [w.batch, w.out_h, w.out_w, self.out_c]
    }

    /// Whether this is a 1×1, stride-1, unpadded, ungrouped convolution: a
    /// plain matrix product over the pixels.
    fn is_pointwise(&self) -> bool {
        let w = &self.window;
        self.groups == 1
            && w.kernel_h == 1
            && w.kernel_w == 1
            && w.stride_h == 1
            && w.stride_w == 1
            && w.out_h == w.in_h
            && w.out_w == w.in_w
    }

    /// Depth of one group's product: `kH · kW · C / groups`.
    fn depth(&self) -> usize {
        self.window.kernel_h * self.window.kernel_w * (self.in_c / self.groups)
    }

    /// Output pixels gathered (im2col) per product: enough rows for the
    /// GEMM to run at speed, few enough that the gathered tile stays near
    /// 128 KiB.
    fn tile_rows(&self) -> usize {
        (32 * 1024 / self.depth().max(1))
            .clamp(72, 1024)
            .min(self.window.out_pixels())
            .max(1)
    }

    /// Length, in `f32`, of the packed filter (see [`crate::gemm::pack`]) that
    /// [`conv2d_nhwc`] can keep between calls of an ungrouped convolution.
    pub fn packed_filter_len(&self) -> usize {
        packed_len(self.depth(), self.out_c)
    }

    /// Scratch, in `f32` elements, that [`conv2d_nhwc`] needs; `kept_filter`:
    /// whether a kept packed filter is passed (grouped convolutions pack
    /// each group's filter into scratch regardless).
    pub fn scratch_len(&self, kept_filter: bool) -> usize {
        let og = self.out_c / self.groups;
        let pack = if kept_filter && self.groups == 1 {
            0
        } else {
            packed_len(self.depth(), og)
        };
        self.gather_len() + pack
    }

    /// Scratch for the gathered windows of one tile (none for 1×1).
    fn gather_len(&self) -> usize {
        if self.is_pointwise() {
            0
        } else {
            self.tile_rows() * self.depth()
        }
    }
}

/// Regular convolution (see [`Conv2dNhwc::regular`]): `out[N, OH, OW, O] =
/// clamp(conv(x, w) + bias)`. `packed`, when given for an ungrouped
/// convolution, is `w` packed by [`Conv2dNhwc::pack_filter`], and all the
/// call reads of the filter (`w` may be empty); otherwise each call packs
/// `w` into `scratch`: [`Conv2dNhwc::scratch_len`] floats.
///
/// A 1×1 convolution is one matrix product over the pixels (NHWC is
/// already its row-major `[pixels, C]` operand); any other gathers tiles of
/// output pixels' windows (im2col, in the filter's `kH, kW, C` order) and
/// multiplies each by the filter, group by group, writing each group's
/// columns of the output in place.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_nhwc(
    g: &Conv2dNhwc,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    min: f32,
    max: f32,
    packed: Option<&[f32]>,
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let (groups, og, depth) = (g.groups, g.out_c / g.groups, g.depth());
    let (cols, spare) = scratch.split_at_mut(g.gather_len());
    for gi in 0..groups {
        // A packed filter is all the call reads (`w` may then be empty).
        let filter: &[f32] = match packed {
            Some(p) if groups == 1 => {
                assert!(
                    is_packed(p, depth, og),
                    "the filter was not packed for this convolution"
                );
                p
            }
            _ => {
                pack(&w[gi * og * depth..][..og * depth], depth, og, true, spare);
                spare
            }
        };
        let e = Epilogue {
            bias: bias.map(|b| &b[gi * og..][..og]),
            residual: None,
            min,
            max,
        };
        conv_group(g, x, gi, filter, &e, out, cols);
    }
}

/// Group `gi` of a regular convolution, its filter packed: one matrix
/// product over the pixels for a 1×1 convolution, else products over
/// gathered tiles of windows (`cols`: [`Conv2dNhwc::gather_len`] floats).
fn conv_group(
    g: &Conv2dNhwc,
    x: &[f32],
    gi: usize,
    filter: &[f32],
    e: &Epilogue<'_>,
    out: &mut [f32],
    cols: &mut [f32],
) {
    let pixels = g.window.out_pixels();
    let o = g.out_c;
    let out = &mut out[..pixels * o];
    if g.is_pointwise() {
        gemm_packed(pixels, o, g.in_c, x, g.in_c, filter, e, out, o);
        return;
    }
    if direct::fits(g) {
        match e.residual {
            None => direct::conv(g, x, filter, e, out),
            Some(r) => {
                // The direct kernel (an image network's first layer) adds
                // no residual: the sum and the clamp take a second pass.
                direct::conv(g, x, filter, &Epilogue::new(e.bias, false), out);
                add_residual(out, r, e.min, e.max);
            }
        }
        return;
    }
    gathered(g, x, gi, filter, e, 0..pixels, out, cols);
}

/// Group `gi` of output pixels `pixels` (over all images) of a
/// convolution that is not 1×1, its filter packed, by products over
/// gathered tiles of windows (`cols`: [`Conv2dNhwc::gather_len`] floats),
/// on this thread; `out` (and the residual, if any) hold the pixels from
/// `pixels.start`. A whole convolution's path where the direct kernel does
/// not run, and a chain's stem's rows.
#[allow(clippy::too_many_arguments)]
fn gathered(
    g: &Conv2dNhwc,
    x: &[f32],
    gi: usize,
    filter: &[f32],
    e: &Epilogue<'_>,
    pixels: core::ops::Range<usize>,
    out: &mut [f32],
    cols: &mut [f32],
) {
    let o = g.out_c;
    let (cg, og, depth) = (g.in_c / g.groups, o / g.groups, g.depth());
    let tile = g.tile_rows();
    for p0 in pixels.clone().step_by(tile) {
        let t = tile.min(pixels.end - p0);
        let cols = &mut cols[..t * depth];
        im2col(g, x, p0, t, gi * cg, cg, cols);
        let at = (p0 - pixels.start) * o + gi * og;
        let e = Epilogue {
            residual: e.residual.map(|r| &r[at..]),
            ..*e
        };
        gemm_packed(t, og, depth, cols, depth, filter, &e, &mut out[at..], o);
    }
}

/// `out = clamp(out + residual)`, element by element.
fn add_residual(out: &mut [f32], residual: &[f32], min: f32, max: f32) {
    let residual = &residual[..out.len()];
    for (o, &r) in out.iter_mut().zip(residual) {
        *o += r;
    }
    clamp(out, min, max);
}

/// Gathers the windows of output pixels `p0 .. p0 + t` (channels
/// `c0 .. c0 + cg`) into `cols`, one row of `kH · kW · cg` per pixel;
/// taps outside the image are zero.
fn im2col(g: &Conv2dNhwc, x: &[f32], p0: usize, t: usize, c0: usize, cg: usize, cols: &mut [f32]) {
    let win = &g.window;
    let c = g.in_c;
    let kw = win.kernel_w;
    let depth = win.kernel_h * kw * cg;
    // With all channels and no dilation, a window row whose taps all lie
    // in the image is one contiguous run of the input (the first layer of
    // an image network gathers 3-channel pixels: copy rows, not pixels).
    let whole_rows = cg == c && win.dilation_w == 1;
    // The pixel's position, stepped rather than divided out per pixel.
    let mut ow = p0 % win.out_w;
    let mut oh = (p0 / win.out_w) % win.out_h;
    let mut n = p0 / (win.out_w * win.out_h);
    for row in cols.chunks_exact_mut(depth).take(t) {
        let first_col = win.in_col(ow, 0);
        let inside = first_col.is_some() && win.in_col(ow, kw - 1).is_some();
        for (ki, dst_row) in row.chunks_exact_mut(kw * cg).enumerate() {
            let Some(ih) = win.in_row(oh, ki) else {
                dst_row.fill(0.0);
                continue;
            };
            let line = (n * win.in_h + ih) * win.in_w;
            match first_col {
                Some(iw) if whole_rows && inside => {
                    let src = (line + iw) * c;
                    copy_run(dst_row, &x[src..src + kw * c]);
                }
                _ => {
                    for (kj, dst) in dst_row.chunks_exact_mut(cg).enumerate() {
                        match win.in_col(ow, kj) {
                            Some(iw) => {
                                let src = (line + iw) * c + c0;
                                copy_run(dst, &x[src..src + cg]);
                            }
                            None => dst.fill(0.0),
                        }
                    }
                }
            }
        }
        ow += 1;
        if ow == win.out_w {
            ow = 0;
            oh += 1;
            if oh == win.out_h {
                oh = 0;
                n += 1;
            }
        }
    }
}

/// `dst.copy_from_slice(src)` for the short runs im2col copies: lengths of
/// the first layers (3 channels, 3 or 9 floats) get copies of a known
/// size, not a call to `memcpy` each.
#[inline(always)]
fn copy_run(dst: &mut [f32], src: &[f32]) {
    fn fixed<const N: usize>(dst: &mut [f32], src: &[f32]) {
        let s: &[f32; N] = src.try_into().expect("same length");
        let d: &mut [f32; N] = dst.try_into().expect("same length");
        *d = *s;
    }
    match dst.len() {
        3 => fixed::<3>(dst, src),
        4 => fixed::<4>(dst, src),
        8 => fixed::<8>(dst, src),
        9 => fixed::<9>(dst, src),
        12 => fixed::<12>(dst, src),
        16 => fixed::<16>(dst, src),
        _ => dst.copy_from_slice(src),
    }
}

/// Depthwise convolution (see [`Conv2dNhwc::depthwise`]): `out[N, OH, OW,
/// C · multiplier] = clamp(conv(x, w) + bias)`.
///
/// With a multiplier of 1 (the usual case) each output pixel accumulates
/// its taps in registers, a block of channels at a time: vectors run
/// across channels, which NHWC keeps contiguous.
#[allow(clippy::too_many_arguments)]
pub fn depthwise_conv2d_nhwc(
    g: &Conv2dNhwc,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    min: f32,
    max: f32,
    out: &mut [f32],
) {
    let win = &g.window;
    let (c, o) = (g.in_c, g.out_c);
    let x = &x[..win.batch * win.in_h * win.in_w * c];
    let w = &w[..win.kernel_h * win.kernel_w * o];
    let out = &mut out[..win.out_pixels() * o];
    if let Some(b) = bias {
        assert!(b.len() >= o, "bias of {} for {o} channels", b.len());
    }
    let d = Depthwise {
        win,
        c,
        o,
        x,
        w,
        bias,
        min,
        max,
    };
    #[cfg(target_arch = "x86_64")]
    if c == o && crate::cpu::Isa::detect() == crate::cpu::Isa::Avx512 {
        if dw3x3::fits(win) {
            // SAFETY: AVX-512F was detected on this CPU; the slices above
            // have the lengths the geometry implies.
            unsafe { dw3x3::depthwise3x3_avx512(&d, out) };
            return;
        }
        // With threads, each takes a band of output rows.
        let worth_splitting = out.len() * win.kernel_h * win.kernel_w >= 1 << 17;
        let (rows, row_len) = (win.batch * win.out_h, win.out_w * o);
        crate::parallel::for_each_band(out, rows, row_len, 1, worth_splitting, &|rows, band| {
            // SAFETY: AVX-512F was detected on this CPU; the slices above
            // have the lengths the geometry implies, and `band` holds the
            // output rows `rows`.
            unsafe { depthwise_avx512(&d, band, rows) };
        });
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if c == o && crate::cpu::has_avx2_fma() && dw_avx2::fits(win) {
        // SAFETY: AVX2 and FMA were detected on this CPU; the slices above
        // have the lengths the geometry implies.
        unsafe { dw_avx2::depthwise_avx2(&d, out) };
        return;
    }
    depthwise_portable(&d, out);
}

/// An inference-mode batch norm after a convolution, folded into it:
/// output channel `o` becomes `(y − mean[o]) / sqrt(var[o] + eps) ·
/// weight[o] + bias[o]`, which scales the channel's filter and shifts its
/// bias.
#[derive(Clone, Copy, Debug)]
pub struct BatchNormFold<'a> {
    pub weight: Option<&'a [f32]>,
    pub bias: Option<&'a [f32]>,
    pub mean: &'a [f32],
    pub var: &'a [f32],
    pub eps: f64,
}

impl BatchNormFold<'_> {
    /// `(scale, shift)` of output channel `o`, computed as PyTorch's
    /// inference batch norm computes them.
    fn channel(&self, o: usize) -> (f64, f64) {
        let rstd = 1.0 / crate::scalar::sqrt(self.var[o] as f64 + self.eps);
        let scale = self.weight.map_or(1.0, |w| w[o] as f64) * rstd;
        (
            scale,
            self.bias.map_or(0.0, |b| b[o] as f64) - self.mean[o] as f64 * scale,
        )
    }
}

/// First words of a prepared [`conv2d_folded`] filter ("PKF1").
const FOLDED_MAGIC: u32 = 0x3146_4b50;
/// Floats before the folded bias.
const FOLDED_HEADER: usize = 16;

impl Conv2dNhwc {
    /// Whether this is the depthwise convolution [`conv2d_folded`] runs as
    /// such: one group per input channel.
    fn is_depthwise(&self) -> bool {
        self.groups == self.in_c && self.groups > 1
    }

    /// Floats that [`conv2d_folded`] keeps from call to call: a header,
    /// the folded bias, then the filter (packed for a regular convolution,
    /// `[kH, kW, O]` for a depthwise one).
    pub fn folded_len(&self) -> usize {
        let filter = if self.is_depthwise() {
            self.window.kernel_h * self.window.kernel_w * self.out_c
        } else {
            self.packed_filter_len()
        };
        FOLDED_HEADER + self.out_c.div_ceil(16) * 16 + filter
    }

    /// Packs the filter `w` (`[O, kH, kW, C]`) of this ungrouped
    /// convolution into `packed` ([`Self::packed_filter_len`] floats, serving
    /// this filter alone) for [`conv2d_nhwc`]. Does nothing when `packed`
    /// already holds it, so it can run before every call; ptec runs it at
    /// compile time when the weights are embedded.
    pub fn pack_filter(&self, w: &[f32], packed: &mut [f32]) {
        assert_eq!(self.groups, 1, "a packed filter needs an ungrouped convolution");
        ensure_packed(w, self.depth(), self.out_c, true, packed);
    }

    /// The header of a prepared filter for this geometry.
    fn folded_header(&self) -> [u32; 4] {
        [FOLDED_MAGIC, self.out_c as u32, self.depth() as u32, self.groups as u32]
    }
}

/// How the filter of a [`FoldedConv`] is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterLayout {
    /// PyTorch's: `[O, C / groups, kH, kW]`.
    Torch,
    /// XNNPACK's: `[O, kH, kW, C]` ungrouped, `[1, kH, kW, O]` depthwise.
    Xnnpack,
}

/// A convolution of NHWC images whose filter is a constant in PyTorch's
/// or XNNPACK's layout, with an optional batch norm folded in and an
/// optional residual (`[N, OH, OW, O]`, as the output) added: `out[N, OH,
/// OW, O] = clamp(bn(conv(x, w) + bias) + residual)`. Ungrouped and
/// depthwise convolutions only (see [`Conv2dNhwc::regular`] and
/// [`Conv2dNhwc::depthwise`] for the geometry).
#[derive(Clone, Copy, Debug)]
pub struct FoldedConv<'a> {
    pub geometry: Conv2dNhwc,
    pub layout: FilterLayout,
    /// The filter, bias and batch norm are read only by [`Self::prepare`]:
    /// a convolution whose filter was prepared elsewhere (by ptec, at
    /// compile time) may leave them empty.
    pub w: &'a [f32],
    pub bias: Option<&'a [f32]>,
    pub bn: Option<BatchNormFold<'a>>,
    pub residual: Option<&'a [f32]>,
    pub min: f32,
    pub max: f32,
}

impl FoldedConv<'_> {
    /// Prepares this convolution's filter in `kept` ([`Conv2dNhwc::folded_len`]
    /// floats, serving this convolution alone): rearranged into the layout
    /// the NHWC kernels read, scaled by the batch norm, with the bias
    /// shifted by it. Does nothing when `kept` already holds it, so it can
    /// run before every call; ptec runs it at compile time when the weights
    /// are embedded, and the program then holds the result as a constant.
    pub fn prepare(&self, kept: &mut [f32]) {
        let g = &self.geometry;
        assert!(
            g.groups == 1 || g.is_depthwise(),
            "{} groups of {} channels",
            g.groups,
            g.in_c
        );
        let (head, rest) = kept[..g.folded_len()].split_at_mut(FOLDED_HEADER);
        let header = g.folded_header();
        if !stamped(head, &header) {
            let (folded_bias, filter) = rest.split_at_mut(g.out_c.div_ceil(16) * 16);
            fold_filter(self, &mut folded_bias[..g.out_c], filter);
            stamp(head, &header);
        }
    }

    /// The folded bias and the filter that [`Self::prepare`] wrote in
    /// `prepared`.
    fn prepared<'k>(&self, prepared: &'k [f32]) -> (&'k [f32], &'k [f32]) {
        let g = &self.geometry;
        let (head, rest) = prepared[..g.folded_len()].split_at(FOLDED_HEADER);
        assert!(
            stamped(head, &g.folded_header()),
            "the filter was not prepared for this convolution"
        );
        let (folded_bias, filter) = rest.split_at(g.out_c.div_ceil(16) * 16);
        (&folded_bias[..g.out_c], filter)
    }
}

/// Runs a [`FoldedConv`] of `x` into `out`, its filter and bias taken from
/// `prepared` (what [`FoldedConv::prepare`] wrote). `scratch`:
/// [`Conv2dNhwc::scratch_len`]`(true)` floats.
pub fn conv2d_folded(conv: &FoldedConv<'_>, x: &[f32], prepared: &[f32], out: &mut [f32], scratch: &mut [f32]) {
    let g = &conv.geometry;
    let out = &mut out[..g.window.out_pixels() * g.out_c];
    if let Some(r) = conv.residual {
        assert!(r.len() >= out.len(), "residual of {} floats for {}", r.len(), out.len());
    }
    let (min, max) = (conv.min, conv.max);
    let (folded_bias, filter) = conv.prepared(prepared);
    if g.is_depthwise() {
        match conv.residual {
            None => depthwise_conv2d_nhwc(g, x, filter, Some(folded_bias), min, max, out),
            Some(r) => {
                // The depthwise kernels add no residual: the sum and the
                // clamp take a second pass.
                let (lo, hi) = (f32::NEG_INFINITY, f32::INFINITY);
                depthwise_conv2d_nhwc(g, x, filter, Some(folded_bias), lo, hi, out);
                add_residual(out, r, min, max);
            }
        }
    } else {
        let e = Epilogue {
            bias: Some(folded_bias),
            residual: conv.residual,
            min,
            max,
        };
        conv_group(g, x, 0, filter, &e, out, &mut scratch[..g.gather_len()]);
    }
}

/// Writes the filter and bias of [`conv2d_folded`]: the convolution's
/// filter rearranged for the NHWC kernels, each output channel scaled by
/// the batch norm, and the bias shifted by it.
fn fold_filter(conv: &FoldedConv<'_>, folded_bias: &mut [f32], filter: &mut [f32]) {
    let g = &conv.geometry;
    let (bias, bn) = (conv.bias, conv.bn.as_ref());
    let o = g.out_c;
    let (kh, kw) = (g.window.kernel_h, g.window.kernel_w);
    let taps = kh * kw;
    let cg = g.in_c / g.groups;
    let w = &conv.w[..o * cg * taps];
    let channel = |oc: usize| bn.map_or((1.0, 0.0), |bn| bn.channel(oc));
    // The scales, held where the bias goes until the filter is written.
    for (oc, s) in folded_bias.iter_mut().enumerate() {
        *s = channel(oc).0 as f32;
    }
    let scale = &*folded_bias;
    let torch = conv.layout == FilterLayout::Torch;
    if g.is_depthwise() {
        // Tap t of channel oc, wanted at [t · O + oc]: at w[oc · taps + t]
        // in PyTorch's layout, already there in XNNPACK's.
        for (oc, &s) in scale.iter().enumerate() {
            for t in 0..taps {
                let at = if torch { oc * taps + t } else { t * o + oc };
                filter[t * o + oc] = w[at] * s;
            }
        }
    } else {
        // Depth index q = (ki · kW + kj) · C + c of the NHWC windows, the
        // order of XNNPACK's `[O, kH, kW, C]`.
        pack_with(g.depth(), o, filter, |q, oc| {
            let at = if torch {
                let (tap, c) = (q / cg, q % cg);
                (oc * cg + c) * taps + tap
            } else {
                oc * g.depth() + q
            };
            w[at] * scale[oc]
        });
    }
    for (oc, b) in folded_bias.iter_mut().enumerate() {
        let (scale, shift) = channel(oc);
        *b = (bias.map_or(0.0, |b| b[oc] as f64) * scale + shift) as f32;
    }
}

/// The inputs of a depthwise convolution, checked against its geometry by
/// [`depthwise_conv2d_nhwc`]: `x` holds `N·H·W·C` floats, `w` `kH·kW·O`,
/// `bias` (if any) `O`, for `C` input and `O` output channels.
struct Depthwise<'a> {
    win: &'a Window2d,
    c: usize,
    o: usize,
    x: &'a [f32],
    w: &'a [f32],
    bias: Option<&'a [f32]>,
    min: f32,
    max: f32,
}

/// Calls `f(n, oh, ow, pixel)` for every output pixel of `out` (`c`
/// channels each): image `n`, row `oh`, column `ow`.
#[inline(always)]
fn for_each_output(win: &Window2d, out: &mut [f32], c: usize, mut f: impl FnMut(usize, usize, usize, &mut [f32])) {
    for (p, o) in out[..win.out_pixels() * c].chunks_exact_mut(c.max(1)).enumerate() {
        let ow = p % win.out_w;
        let oh = (p / win.out_w) % win.out_h;
        f(p / (win.out_w * win.out_h), oh, ow, o);
    }
}

/// Sets `o` to the bias, or zero.
#[inline(always)]
fn init_bias(o: &mut [f32], bias: Option<&[f32]>) {
    match bias {
        Some(b) => o.copy_from_slice(&b[..o.len()]),
        None => o.fill(0.0),
    }
}

/// The taps of output pixel `(oh, ow)` that fall inside the image, as
/// `(input pixel index within its image, tap index)`, passed to `f`.
#[inline(always)]
fn for_each_tap(win: &Window2d, oh: usize, ow: usize, mut f: impl FnMut(usize, usize)) {
    for ki in 0..win.kernel_h {
        let Some(ih) = win.in_row(oh, ki) else { continue };
        for kj in 0..win.kernel_w {
            let Some(iw) = win.in_col(ow, kj) else { continue };
            f(ih * win.in_w + iw, ki * win.kernel_w + kj);
        }
    }
}

/// Depthwise, portable, any multiplier: each pixel's channels accumulate
/// in the output row (which stays in L1), tap by tap; output channel `oc`
/// reads input channel `oc / multiplier`.
fn depthwise_portable(d: &Depthwise<'_>, out: &mut [f32]) {
    let (win, c, o, x, w, bias) = (d.win, d.c, d.o, d.x, d.w, d.bias);
    let (min, max) = (d.min, d.max);
    let image = win.in_h * win.in_w;
    let mult = o / c;
    for_each_output(win, out, o, |n, oh, ow, dst| {
        init_bias(dst, bias);
        for_each_tap(win, oh, ow, |pix, tap| {
            let xs = &x[(n * image + pix) * c..][..c];
            let ws = &w[tap * o..][..o];
            if mult == 1 {
                for ((acc, &xv), &wv) in dst.iter_mut().zip(xs).zip(ws) {
                    *acc += xv * wv;
                }
            } else {
                for (oc, (acc, &wv)) in dst.iter_mut().zip(ws).enumerate() {
                    *acc += xs[oc / mult] * wv;
                }
            }
        });
        clamp(dst, min, max);
    });
}

/// Depthwise with multiplier 1, AVX-512, output row by output row. Runs of
/// pixels whose windows lie inside the image horizontally go 8 (or 4) at
/// a time per 16-channel block, so that many independent FMA chains share
/// each weight load; other pixels go one at a time, eight channel blocks
/// at once. Channel tails use masked loads and stores. (Undilated 3×3
/// windows of stride 1 across go to [`dw3x3`] instead.)
///
/// # Safety
/// The CPU must support AVX-512F; `d` must have the lengths its geometry
/// implies (see [`Depthwise`]) with `O = C`, and `out` hold `N·OH·OW·C`
/// floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn depthwise_avx512(d: &Depthwise<'_>, out: &mut [f32], rows: core::ops::Range<usize>) {
    use crate::x86::{lanes, load16, store16};
    use core::arch::x86_64::*;
    let (win, c, x, w, bias) = (d.win, d.c, d.x, d.w, d.bias);
    let (min, max) = (d.min, d.max);
    let sw = win.stride_w;
    // Output columns whose whole window row is inside the image.
    let core::ops::Range {
        start: first_inner,
        end: end_inner,
    } = win.inner_cols();
    let (xp, wp, op) = (x.as_ptr(), w.as_ptr(), out.as_mut_ptr());
    let lo = _mm512_set1_ps(min);
    let hi = _mm512_set1_ps(max);
    // SAFETY (every load and store below): rows and columns come from the
    // checked window (`in_row`/`in_col`, or interior columns), so each
    // pixel offset is below N·H·W (for outputs, below the rows of `out`,
    // asserted above); channel offsets
    // `c0 + lane` are below C by the masks; taps are below kH·kW.
    let bias_at = |c0: usize, m: __mmask16| match bias {
        Some(b) => unsafe { _mm512_maskz_loadu_ps(m, b.as_ptr().add(c0)) },
        None => _mm512_setzero_ps(),
    };
    assert!(out.len() >= rows.len() * win.out_w * c && rows.end <= win.batch * win.out_h);
    // MobileNet's 3×3 stride-2 windows over whole channel blocks (stride 1
    // goes to `dw3x3`): the interior pixels go block by block, each
    // block's nine weights held in registers across the row. (Pixel order,
    // all blocks of a pixel at a time, ran 10-15% slower even on the 96
    // channels of the 112×112 layer.)
    let sweep = (win.kernel_h, win.kernel_w) == (3, 3)
        && (win.dilation_h, win.dilation_w) == (1, 1)
        && sw == 2
        && c % 16 == 0
        && end_inner > first_inner;
    let first_row = rows.start;
    for r in rows {
        let (n, oh) = (r / win.out_h, r % win.out_h);
        {
            // Kernel rows inside the image: a contiguous range (empty
            // when none is).
            let rows = (0..win.kernel_h)
                .filter(|&ki| win.in_row(oh, ki).is_some())
                .fold((usize::MAX, 0), |(first, _), ki| (first.min(ki), ki + 1));
            // Offset in `out`, which starts at output row `rows.start`.
            let out_row = (r - first_row) * win.out_w * c;
            let row = DwRow {
                win,
                c,
                x: xp,
                w: wp,
                out: op.wrapping_add(out_row),
                n,
                oh,
                rows,
                bias,
                lo,
                hi,
            };
            let mut ow = 0;
            while ow < win.out_w {
                if ow == first_inner && sweep {
                    for c0 in (0..c).step_by(16) {
                        // SAFETY: the pixels first_inner .. end_inner are
                        // interior; c0 + 16 <= C.
                        unsafe { dw_sweep_avx512::<2>(&row, first_inner, end_inner, c0) }
                    }
                    ow = end_inner;
                    continue;
                }
                if ow == first_inner {
                    // SAFETY: the pixels first_inner .. end_inner are
                    // interior.
                    ow = unsafe { dw_interior_avx512::<8>(&row, ow, end_inner) };
                    ow = unsafe { dw_interior_avx512::<4>(&row, ow, end_inner) };
                    if ow > first_inner {
                        continue;
                    }
                }
                // One pixel: up to eight channel blocks as independent
                // chains (plain loads for full blocks, masks for the tail).
                for c0 in (0..c).step_by(128) {
                    let blocks = (c - c0).div_ceil(16).min(8);
                    let masks: [__mmask16; 8] =
                        core::array::from_fn(|v| if v < blocks { lanes(c - c0 - v * 16) } else { 0 });
                    let mut acc: [__m512; 8] = core::array::from_fn(|v| {
                        if v < blocks {
                            bias_at(c0 + v * 16, masks[v])
                        } else {
                            _mm512_setzero_ps()
                        }
                    });
                    for_each_tap(win, oh, ow, |pix, tap| {
                        let xo = (n * win.in_h * win.in_w + pix) * c + c0;
                        let wo = tap * c + c0;
                        for (v, a) in acc.iter_mut().enumerate().take(blocks) {
                            unsafe {
                                let xv = load16(masks[v], xp.add(xo + v * 16));
                                let wv = load16(masks[v], wp.add(wo + v * 16));
                                *a = _mm512_fmadd_ps(xv, wv, *a);
                            }
                        }
                    });
                    for (v, a) in acc.iter().enumerate().take(blocks) {
                        let r = _mm512_min_ps(_mm512_max_ps(*a, lo), hi);
                        unsafe { store16(masks[v], op.add(out_row + ow * c + c0 + v * 16), r) };
                    }
                }
                ow += 1;
            }
        }
    }
}

/// One output row of an AVX-512 depthwise convolution.
#[cfg(target_arch = "x86_64")]
struct DwRow<'a> {
    win: &'a Window2d,
    c: usize,
    x: *const f32,
    w: *const f32,
    /// The row's first output pixel.
    out: *mut f32,
    n: usize,
    oh: usize,
    /// Kernel rows inside the image.
    rows: (usize, usize),
    bias: Option<&'a [f32]>,
    lo: core::arch::x86_64::__m512,
    hi: core::arch::x86_64::__m512,
}

/// Adds one undilated 3-wide kernel row (weights `w`) to the accumulators
/// of `PX` pixels `SW` input columns apart, vectors of any width;
/// `column(j)` loads input column `j` counted from the first pixel's
/// window, `fma(x, w, acc)` is `x · w + acc`. Neighbouring windows share
/// columns (two at stride 1, one at stride 2): each is loaded once and
/// kept in a register for the pixels that read it, so that only three are
/// live at a time.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn three_taps<V: Copy, const PX: usize, const SW: usize>(
    acc: &mut [V; PX],
    w: &[V; 3],
    column: impl Fn(usize) -> V,
    fma: impl Fn(V, V, V) -> V,
) {
    let (mut left, mut mid) = (column(0), column(1));
    for (p, a) in acc.iter_mut().enumerate() {
        let right = column(p * SW + 2);
        *a = fma(left, w[0], *a);
        *a = fma(mid, w[1], *a);
        *a = fma(right, w[2], *a);
        if SW == 1 {
            (left, mid) = (mid, right);
        } else if p + 1 < PX {
            (left, mid) = (right, column(p * SW + 3));
        }
    }
}

/// Channels `c0 .. c0 + 16` of the interior output pixels `ow .. end` of
/// one row, for an undilated 3×3 window with horizontal stride `SW`: the
/// weights of the kernel rows inside the image and the bias are loaded
/// once, then the pixels go 8, then 4, then 1 at a time.
///
/// # Safety
/// As [`dw_interior_avx512`], and `c0 + 16 <= C`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline(never)]
unsafe fn dw_sweep_avx512<const SW: usize>(r: &DwRow<'_>, ow: usize, end: usize, c0: usize) {
    use core::arch::x86_64::*;
    let (win, c) = (r.win, r.c);
    let (k0, k1) = r.rows;
    // SAFETY: as in `depthwise_avx512`: taps below kH·kW, lanes below C,
    // input rows and columns inside the image (interior pixels, kernel
    // rows `k0 .. k1`), output pixels inside the row.
    unsafe {
        let mut w = [[_mm512_setzero_ps(); 3]; 3];
        let mut x = [r.x; 3];
        for ki in k0..k1 {
            let wk = r.w.add(ki * 3 * c + c0);
            w[ki - k0] = [
                _mm512_loadu_ps(wk),
                _mm512_loadu_ps(wk.add(c)),
                _mm512_loadu_ps(wk.add(2 * c)),
            ];
            let ih = r.oh * win.stride_h + ki - win.pad_top;
            x[ki - k0] = r.x.add(((r.n * win.in_h + ih) * win.in_w) * c + c0);
        }
        let b = match r.bias {
            Some(b) => _mm512_loadu_ps(b.as_ptr().add(c0)),
            None => _mm512_setzero_ps(),
        };
        let rows = k1.saturating_sub(k0);
        let mut ow = ow;
        ow = dw_sweep_px::<8, SW>(r, &w, &x, rows, b, ow, end, c0);
        ow = dw_sweep_px::<4, SW>(r, &w, &x, rows, b, ow, end, c0);
        dw_sweep_px::<1, SW>(r, &w, &x, rows, b, ow, end, c0);
    }
}

/// `PX` pixels at a time from column `ow` while they fit before `end`
/// (see [`dw_sweep_avx512`]): each input column loaded once per kernel row
/// and shared by the pixels whose windows hold it. Returns the first
/// column left.
///
/// # Safety
/// As [`dw_sweep_avx512`]; `x[i]` is the first pixel (channel `c0`) of
/// the input row of kernel row `k0 + i`, for `i < rows`, and `w[i]` its
/// weights.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn dw_sweep_px<const PX: usize, const SW: usize>(
    r: &DwRow<'_>,
    w: &[[core::arch::x86_64::__m512; 3]; 3],
    x: &[*const f32; 3],
    rows: usize,
    b: core::arch::x86_64::__m512,
    mut ow: usize,
    end: usize,
    c0: usize,
) -> usize {
    use core::arch::x86_64::*;
    let (win, c) = (r.win, r.c);
    while ow + PX <= end {
        let first = ow * SW - win.pad_left;
        let mut acc = [b; PX];
        // SAFETY: by the caller: columns first .. first + (PX-1)·SW + 3
        // are inside the image (interior pixels).
        unsafe {
            for (xk, wk) in x.iter().zip(w).take(rows) {
                let xk = xk.add(first * c);
                three_taps::<_, PX, SW>(
                    &mut acc,
                    wk,
                    |j| _mm512_loadu_ps(xk.add(j * c)),
                    |x, w, a| _mm512_fmadd_ps(x, w, a),
                );
            }
            for (p, a) in acc.iter().enumerate() {
                let v = _mm512_min_ps(_mm512_max_ps(*a, r.lo), r.hi);
                _mm512_storeu_ps(r.out.add((ow + p) * c + c0), v);
            }
        }
        ow += PX;
    }
    ow
}

/// The interior output pixels from column `ow` to `end`, `PX` at a time
/// (while `PX` remain), all channels 16 at a time: `PX` independent FMA
/// chains share each weight load. Returns the first column left.
///
/// # Safety
/// As [`depthwise_avx512`]; the windows of the pixels `ow .. end` lie
/// inside the image horizontally.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn dw_interior_avx512<const PX: usize>(r: &DwRow<'_>, mut ow: usize, end: usize) -> usize {
    while ow + PX <= end {
        // SAFETY: by the caller.
        unsafe { dw_pixels_avx512::<PX>(r, ow) };
        ow += PX;
    }
    ow
}

/// `PX` interior pixels from column `ow`.
///
/// # Safety
/// As [`dw_interior_avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn dw_pixels_avx512<const PX: usize>(r: &DwRow<'_>, ow: usize) {
    for c0 in (0..r.c).step_by(16) {
        let left = r.c - c0;
        // SAFETY: by the caller; the mask keeps the lanes below C.
        unsafe {
            let three = r.win.kernel_w == 3 && r.win.dilation_w == 1;
            match (left >= 16, three, r.win.stride_w) {
                (true, true, 1) => dw_block_avx512::<PX, true, 1>(r, ow, c0, 0xffff),
                (true, true, 2) => dw_block_avx512::<PX, true, 2>(r, ow, c0, 0xffff),
                (true, _, _) => dw_block_avx512::<PX, true, 0>(r, ow, c0, 0xffff),
                (false, _, _) => dw_block_avx512::<PX, false, 0>(r, ow, c0, crate::x86::lanes(left)),
            }
        }
    }
}

/// Channels `c0 ..` (the lanes of `m`) of `PX` interior pixels from column
/// `ow`. `FULL` (all 16 lanes) takes plain loads and stores, which fold
/// into the FMAs; masked ones do not, and cost more on some CPUs. `SW` > 0
/// says the kernel is 3 wide, undilated, with horizontal stride `SW`
/// (MobileNet's 3×3 stride 1 and 2): known at compile time, the taps
/// unroll and every address is a constant offset (2.5× faster); 0 reads
/// the geometry at run time.
///
/// # Safety
/// As [`dw_interior_avx512`]; the lanes of `m` lie below C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn dw_block_avx512<const PX: usize, const FULL: bool, const SW: usize>(
    r: &DwRow<'_>,
    ow: usize,
    c0: usize,
    m: core::arch::x86_64::__mmask16,
) {
    use core::arch::x86_64::*;
    let win = r.win;
    let c = r.c;
    let (kw, sw, dw) = if SW > 0 {
        (3, SW, 1)
    } else {
        (win.kernel_w, win.stride_w, win.dilation_w)
    };
    // Offsets of the pixels from the first, and of a kernel row's taps:
    // loop invariants, so every load is base + one register.
    let pixel: [usize; PX] = core::array::from_fn(|p| p * sw * c);
    let tap_step = dw * c;
    // SAFETY: as in `depthwise_avx512`: offsets come from the checked
    // window and the lanes stay below C.
    unsafe {
        let load = |p: *const f32| {
            if FULL {
                _mm512_loadu_ps(p)
            } else {
                _mm512_maskz_loadu_ps(m, p)
            }
        };
        let b = match r.bias {
            Some(b) => load(b.as_ptr().add(c0)),
            None => _mm512_setzero_ps(),
        };
        let mut acc = [b; PX];
        for ki in r.rows.0..r.rows.1 {
            let ih = r.oh * win.stride_h + ki * win.dilation_h - win.pad_top;
            let mut xk =
                r.x.add(((r.n * win.in_h + ih) * win.in_w + ow * sw - win.pad_left) * c + c0);
            let mut wk = r.w.add(ki * kw * c + c0);
            if SW == 1 || SW == 2 {
                let w = [load(wk), load(wk.add(c)), load(wk.add(2 * c))];
                three_taps::<_, PX, SW>(
                    &mut acc,
                    &w,
                    |j| load(xk.add(j * c)),
                    |x, w, a| _mm512_fmadd_ps(x, w, a),
                );
                continue;
            }
            for _ in 0..kw {
                let wv = load(wk);
                for (a, &off) in acc.iter_mut().zip(&pixel) {
                    *a = _mm512_fmadd_ps(load(xk.add(off)), wv, *a);
                }
                xk = xk.wrapping_add(tap_step);
                wk = wk.wrapping_add(c);
            }
        }
        for (p, a) in acc.iter().enumerate() {
            let v = _mm512_min_ps(_mm512_max_ps(*a, r.lo), r.hi);
            let dst = r.out.add((ow + p) * c + c0);
            if FULL {
                _mm512_storeu_ps(dst, v)
            } else {
                _mm512_mask_storeu_ps(dst, m, v)
            }
        }
    }
}

/// Clamps every element to `[min, max]`.
#[inline(always)]
fn clamp(v: &mut [f32], min: f32, max: f32) {
    if min > f32::NEG_INFINITY || max < f32::INFINITY {
        for x in v {
            *x = x.max(min).min(max);
        }
    }
}

/// Max pooling: each output channel is the largest input in its window
/// (padding never wins; a NaN does, as in PyTorch), then clamped. `x` is
/// `[N, H, W, C]`, `out` `[N, OH, OW, C]`.
pub fn max_pool2d_nhwc(win: &Window2d, c: usize, x: &[f32], min: f32, max: f32, out: &mut [f32]) {
    let image = win.in_h * win.in_w;
    let x = &x[..win.batch * image * c];
    for_each_output(win, out, c, |n, oh, ow, o| {
        o.fill(f32::NEG_INFINITY);
        for_each_tap(win, oh, ow, |pix, _| {
            for (acc, &v) in o.iter_mut().zip(&x[(n * image + pix) * c..][..c]) {
                if v > *acc || v.is_nan() {
                    *acc = v;
                }
            }
        });
        clamp(o, min, max);
    });
}

/// Average pooling: each output channel is the mean of the inputs of its
/// window that lie inside the image (padding is not counted, as in
/// XNNPACK), then clamped.
pub fn avg_pool2d_nhwc(win: &Window2d, c: usize, x: &[f32], min: f32, max: f32, out: &mut [f32]) {
    let image = win.in_h * win.in_w;
    let x = &x[..win.batch * image * c];
    for_each_output(win, out, c, |n, oh, ow, o| {
        o.fill(0.0);
        let mut count = 0usize;
        for_each_tap(win, oh, ow, |pix, _| {
            count += 1;
            for (acc, &v) in o.iter_mut().zip(&x[(n * image + pix) * c..][..c]) {
                *acc += v;
            }
        });
        let scale = if count == 0 { 0.0 } else { 1.0 / count as f32 };
        for v in o.iter_mut() {
            *v *= scale;
        }
        clamp(o, min, max);
    });
}

/// Global average pooling: `out[n, c]` (any output shape with `N · C`
/// elements) is the mean over the `pixels` pixels of image `n`, clamped.
/// With threads, one image splits in bands of 16 channels: the product
/// before it (a few pixels by many channels) split in strips of 16
/// columns, so each thread mostly sums what it wrote.
pub fn global_avg_pool_nhwc(batch: usize, pixels: usize, c: usize, x: &[f32], min: f32, max: f32, out: &mut [f32]) {
    let x = &x[..batch * pixels * c];
    if batch == 1 {
        let split_up = crate::parallel::local_bands_for(x.len());
        return crate::parallel::for_each_band(&mut out[..c], c, 1, 16, split_up, &|channels, o| {
            average_pixels(x, pixels, c, channels, min, max, o);
        });
    }
    for (n, o) in out[..batch * c].chunks_exact_mut(c.max(1)).enumerate().take(batch) {
        average_pixels(&x[n * pixels * c..], pixels, c, 0..c, min, max, o);
    }
}

/// The means of channels `channels` over the `pixels` pixels (of `c`
/// channels) of one image `x`, clamped, into `o`.
fn average_pixels(
    x: &[f32],
    pixels: usize,
    c: usize,
    channels: core::ops::Range<usize>,
    min: f32,
    max: f32,
    o: &mut [f32],
) {
    let o = &mut o[..channels.len()];
    o.fill(0.0);
    for px in x[..pixels * c].chunks_exact(c.max(1)) {
        for (acc, &v) in o.iter_mut().zip(&px[channels.clone()]) {
            *acc += v;
        }
    }
    let scale = if pixels == 0 { 0.0 } else { 1.0 / pixels as f32 };
    for v in o.iter_mut() {
        *v *= scale;
    }
    clamp(o, min, max);
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    type Dims4 = [usize; 4];
    type Pair = [usize; 2];

    use crate::testing::Lcg;

    fn rng(seed: u64, n: usize) -> Vec<f32> {
        Lcg(seed).vec(n)
    }

    /// Direct NHWC convolution in f64 (grouped or depthwise by `groups`).
    #[allow(clippy::too_many_arguments)]
    fn reference(
        g: &Conv2dNhwc,
        x: &[f32],
        w: &[f32],
        depthwise: bool,
        bias: Option<&[f32]>,
        min: f32,
        max: f32,
    ) -> Vec<f32> {
        let win = &g.window;
        let (c, o) = (g.in_c, g.out_c);
        let mut out = vec![0.0f32; win.out_pixels() * o];
        for n in 0..win.batch {
            for oh in 0..win.out_h {
                for ow in 0..win.out_w {
                    for oc in 0..o {
                        let mut s = bias.map_or(0.0, |b| b[oc] as f64);
                        for ki in 0..win.kernel_h {
                            for kj in 0..win.kernel_w {
                                let ih = (oh * win.stride_h + ki * win.dilation_h) as isize - win.pad_top as isize;
                                let iw = (ow * win.stride_w + kj * win.dilation_w) as isize - win.pad_left as isize;
                                if ih < 0 || iw < 0 || ih >= win.in_h as isize || iw >= win.in_w as isize {
                                    continue;
                                }
                                let base = ((n * win.in_h + ih as usize) * win.in_w + iw as usize) * c;
                                if depthwise {
                                    let ci = oc / (o / c);
                                    s += x[base + ci] as f64 * w[(ki * win.kernel_w + kj) * o + oc] as f64;
                                } else {
                                    let (cg, og) = (c / g.groups, o / g.groups);
                                    let gi = oc / og;
                                    for ci in 0..cg {
                                        let wv = w[((oc * win.kernel_h + ki) * win.kernel_w + kj) * cg + ci];
                                        s += x[base + gi * cg + ci] as f64 * wv as f64;
                                    }
                                }
                            }
                        }
                        out[((n * win.out_h + oh) * win.out_w + ow) * o + oc] = (s as f32).max(min).min(max);
                    }
                }
            }
        }
        out
    }

    fn close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "at {i}: {g} vs {w}");
        }
    }

    #[test]
    fn regular_convolutions_match_the_reference() {
        // (input, filter, stride, padding, dilation, groups)
        let cases: &[(Dims4, Dims4, Pair, Dims4, Pair, usize)] = &[
            ([1, 9, 9, 3], [8, 3, 3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 1),
            ([2, 5, 6, 16], [24, 1, 1, 16], [1, 1], [0, 0, 0, 0], [1, 1], 1),
            ([1, 7, 7, 8], [6, 3, 2, 4], [1, 2], [0, 1, 2, 1], [2, 1], 2),
            ([1, 4, 4, 5], [7, 1, 1, 5], [2, 2], [0, 0, 0, 0], [1, 1], 1),
            ([1, 30, 30, 4], [9, 3, 3, 4], [1, 1], [1, 1, 1, 1], [1, 1], 1),
            // Shallow windows, multiplied from the image where they lie
            // inside it: a 7×7 stem over two images with a partial second
            // strip of 32 channels, dilation with uneven padding, windows
            // never wholly inside, and a window too deep for that path.
            ([2, 23, 21, 3], [40, 7, 7, 3], [2, 2], [3, 3, 3, 3], [1, 1], 1),
            ([1, 11, 10, 2], [5, 3, 3, 2], [1, 2], [2, 0, 1, 2], [2, 2], 1),
            ([1, 3, 3, 3], [33, 3, 3, 3], [1, 1], [2, 2, 2, 2], [1, 1], 1),
            ([1, 6, 6, 20], [16, 3, 3, 20], [1, 1], [1, 1, 1, 1], [1, 1], 1),
            // MobileNet's 3×3 stride-2 stem: one border pixel per row
            // (gathered), the rest multiplied in place, 8 then fewer.
            ([1, 20, 36, 3], [32, 3, 3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 1),
        ];
        for (i, &(input, filter, stride, padding, dilation, groups)) in cases.iter().enumerate() {
            let g = Conv2dNhwc::regular(&input, &filter, stride, padding, dilation, groups).unwrap();
            let x = rng(i as u64, input.iter().product());
            let w = rng(100 + i as u64, filter.iter().product());
            let b = rng(200 + i as u64, filter[0]);
            for (bias, min, max) in [(None, f32::NEG_INFINITY, f32::INFINITY), (Some(&b[..]), 0.0, 0.5)] {
                let want = reference(&g, &x, &w, false, bias, min, max);
                // Filter packed into scratch, and kept packed between calls.
                let mut out = vec![f32::NAN; want.len()];
                let mut scratch = vec![0.0f32; g.scratch_len(false)];
                conv2d_nhwc(&g, &x, &w, bias, min, max, None, &mut out, &mut scratch);
                close(&out, &want);
                let mut kept = vec![0.0f32; g.packed_filter_len()];
                let mut scratch = vec![0.0f32; g.scratch_len(true)];
                for _ in 0..2 {
                    let mut out = vec![f32::NAN; want.len()];
                    // Grouped convolutions pack each group as they go.
                    let packed = (groups == 1).then(|| {
                        g.pack_filter(&w, &mut kept);
                        &kept[..]
                    });
                    conv2d_nhwc(&g, &x, &w, bias, min, max, packed, &mut out, &mut scratch);
                    close(&out, &want);
                }
                // The packing alone, as when ptec made it at compile time.
                if groups == 1 {
                    let mut out = vec![f32::NAN; want.len()];
                    conv2d_nhwc(&g, &x, &[], bias, min, max, Some(&kept), &mut out, &mut scratch);
                    close(&out, &want);
                }
                // A band of rows across the images, on this thread (as a
                // chain computes its stem): gathered, as CPUs without AVX2
                // do, and directly.
                if groups == 1 && !g.is_pointwise() {
                    let e = Epilogue {
                        bias,
                        residual: None,
                        min,
                        max,
                    };
                    let row_len = g.window.out_w * g.out_c;
                    let rows = 1..g.window.batch * g.window.out_h - 1;
                    let want = &want[rows.start * row_len..rows.end * row_len];
                    let mut cols = vec![f32::NAN; g.gather_len()];
                    let mut band = vec![f32::NAN; want.len()];
                    let pixels = rows.start * g.window.out_w..rows.end * g.window.out_w;
                    gathered(&g, &x, 0, &kept, &e, pixels, &mut band, &mut cols);
                    close(&band, want);
                    #[cfg(target_arch = "x86_64")]
                    if direct::fits(&g) {
                        let mut band = vec![f32::NAN; want.len()];
                        let avx512 = crate::cpu::Isa::detect() == crate::cpu::Isa::Avx512;
                        direct::conv_band(avx512, &g, &x, &kept, &e, rows, &mut band);
                        close(&band, want);
                    }
                }
                // The AVX2 tile of the direct path, on a CPU that would
                // take the AVX-512 one too.
                #[cfg(target_arch = "x86_64")]
                if direct::fits(&g) {
                    let mut out = vec![f32::NAN; want.len()];
                    let e = Epilogue {
                        bias,
                        residual: None,
                        min,
                        max,
                    };
                    direct::conv_on(false, &g, &x, &kept, &e, &mut out);
                    close(&out, &want);
                }
            }
        }
    }

    #[test]
    fn depthwise_convolutions_match_the_reference() {
        let cases: &[(Dims4, Dims4, Pair, Dims4, Pair)] = &[
            ([1, 8, 8, 48], [1, 3, 3, 48], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([2, 9, 7, 13], [1, 3, 3, 13], [2, 2], [1, 1, 1, 1], [1, 1]),
            ([1, 6, 6, 3], [1, 3, 3, 6], [1, 1], [0, 0, 0, 0], [1, 1]),
            ([1, 12, 12, 8], [1, 9, 9, 8], [1, 1], [4, 4, 4, 4], [1, 1]),
            ([1, 10, 10, 16], [1, 3, 3, 16], [1, 1], [2, 2, 2, 2], [2, 2]),
            // Long rows: runs of 8 interior pixels, strided too.
            ([1, 5, 21, 40], [1, 3, 3, 40], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([2, 7, 37, 19], [1, 3, 3, 19], [2, 2], [1, 1, 1, 1], [1, 1]),
            ([1, 6, 30, 70], [1, 5, 5, 70], [1, 1], [0, 2, 0, 2], [1, 1]),
            // Many whole channel blocks: at stride 1 through the ring (see
            // `dw3x3`), at stride 2 swept block by block along the row, 8,
            // 4 and 1 pixels at a time.
            ([1, 5, 23, 128], [1, 3, 3, 128], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([2, 7, 30, 144], [1, 3, 3, 144], [2, 2], [0, 1, 1, 0], [1, 1]),
            // Stride 1 across, through the ring of copied rows: rows in
            // three segments and two images; a block of one output row at
            // a time, stride 2 down, a partial channel block; padding of
            // two and none.
            ([2, 6, 300, 40], [1, 3, 3, 40], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([1, 7, 150, 200], [1, 3, 3, 200], [2, 1], [2, 0, 1, 1], [1, 1]),
            ([1, 4, 9, 17], [1, 3, 3, 17], [1, 1], [0, 2, 2, 2], [1, 1]),
            ([1, 7, 7, 960], [1, 3, 3, 960], [1, 1], [1, 1, 1, 1], [1, 1]),
            // The AVX2 ring (`dw_avx2`): stride 2, the top and bottom rows
            // in three segments of 15; dilation with strides apart and
            // padding of three; partial blocks of one and of five vectors,
            // one short; three images; bands of two and three rows
            // (padding above, none below, as `chain` cuts them); a 7×7
            // window of stride 2; a window of 70 taps, too many for the
            // ring (the portable path).
            ([1, 5, 90, 64], [1, 3, 3, 64], [2, 2], [1, 1, 1, 1], [1, 1]),
            ([1, 13, 40, 24], [1, 3, 3, 24], [1, 2], [2, 3, 2, 3], [2, 3]),
            ([3, 5, 9, 36], [1, 3, 3, 36], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([1, 6, 11, 5], [1, 3, 3, 5], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([1, 2, 15, 32], [1, 3, 3, 32], [1, 1], [1, 1, 1, 1], [1, 1]),
            ([1, 3, 20, 48], [1, 3, 3, 48], [1, 1], [2, 1, 0, 1], [1, 1]),
            ([1, 20, 19, 16], [1, 7, 7, 16], [2, 2], [3, 3, 3, 3], [1, 1]),
            ([1, 3, 80, 8], [1, 1, 70, 8], [1, 1], [0, 0, 0, 0], [1, 1]),
            // Windows so wide that a segment of 4 outputs fills a ring
            // row, and one column wider (the portable path).
            ([1, 2, 200, 8], [1, 1, 2, 8], [1, 1], [0, 0, 0, 0], [1, 124]),
            ([1, 2, 200, 8], [1, 1, 2, 8], [1, 1], [0, 0, 0, 0], [1, 125]),
            // Stride 2 across, read from the image where the windows lie
            // inside it: a partial vector up to the image's last float,
            // and rows with padding on either side.
            ([1, 9, 41, 13], [1, 3, 3, 13], [2, 2], [0, 0, 0, 0], [1, 1]),
            ([2, 8, 45, 40], [1, 3, 3, 40], [2, 2], [1, 1, 1, 1], [1, 1]),
        ];
        for (i, &(input, filter, stride, padding, dilation)) in cases.iter().enumerate() {
            let g = Conv2dNhwc::depthwise(&input, &filter, stride, padding, dilation).unwrap();
            let x = rng(i as u64, input.iter().product());
            let w = rng(100 + i as u64, filter.iter().product());
            let b = rng(200 + i as u64, filter[3]);
            for (bias, min, max) in [(None, f32::NEG_INFINITY, f32::INFINITY), (Some(&b[..]), -0.2, 6.0)] {
                let want = reference(&g, &x, &w, true, bias, min, max);
                let mut out = vec![f32::NAN; want.len()];
                depthwise_conv2d_nhwc(&g, &x, &w, bias, min, max, &mut out);
                close(&out, &want);
                let mut out = vec![f32::NAN; want.len()];
                let d = Depthwise {
                    win: &g.window,
                    c: g.in_c,
                    o: g.out_c,
                    x: &x,
                    w: &w,
                    bias,
                    min,
                    max,
                };
                depthwise_portable(&d, &mut out);
                close(&out, &want);
                #[cfg(target_arch = "x86_64")]
                if g.in_c == g.out_c && crate::cpu::has_avx2_fma() && dw_avx2::fits(&g.window) {
                    let mut out = vec![f32::NAN; want.len()];
                    // SAFETY: AVX2 and FMA are present; the lengths fit the geometry.
                    unsafe { dw_avx2::depthwise_avx2(&d, &mut out) };
                    close(&out, &want);
                }
            }
        }
    }

    /// NCHW ↔ NHWC of an `[n, a, b, c]` array: element `(i, j, k, l)` to
    /// `(i, k, l, j)`.
    fn to_last(x: &[f32], [n, a, b, c]: Dims4) -> Vec<f32> {
        let mut out = vec![0.0; x.len()];
        for i in 0..n {
            for j in 0..a {
                for k in 0..b * c {
                    out[(i * b * c + k) * a + j] = x[(i * a + j) * b * c + k];
                }
            }
        }
        out
    }

    /// `conv2d_folded` against aten's NCHW convolution then batch norm
    /// (then a residual added), ungrouped (multiplied from the image, 1×1,
    /// gathered) and depthwise, with and without bias, batch norm and
    /// residual; the second call reuses what the first kept.
    #[test]
    fn folded_convolutions_match_convolution_then_batch_norm() {
        use crate::conv::{conv_scratch_len, convolution};
        use crate::norm::batch_norm_no_training;
        // (NCHW input, OIHW weight, stride, padding (h, w), groups)
        let cases: &[(Dims4, Dims4, Pair, Pair, usize)] = &[
            ([1, 3, 9, 11], [8, 3, 3, 3], [2, 2], [1, 1], 1),
            ([2, 16, 5, 5], [40, 16, 1, 1], [1, 1], [0, 0], 1),
            ([1, 24, 7, 6], [24, 1, 3, 3], [1, 1], [1, 1], 24),
            ([1, 32, 8, 8], [32, 1, 3, 3], [2, 2], [1, 1], 32),
            ([1, 4, 6, 6], [8, 1, 3, 3], [1, 1], [0, 1], 4),
            ([1, 24, 6, 7], [16, 24, 3, 3], [1, 1], [1, 1], 1),
        ];
        for (ci, &(xs, ws, stride, [ph, pw], groups)) in cases.iter().enumerate() {
            let combinations = [
                (true, true, false),
                (false, true, false),
                (true, false, false),
                (true, true, true),
            ];
            for (with_bias, with_bn, with_residual) in combinations {
                let o = ws[0];
                let x = rng(ci as u64, xs.iter().product());
                let w = rng(10 + ci as u64, ws.iter().product());
                let bias = with_bias.then(|| rng(20, o));
                let (bw, bb, mean) = (rng(21, o), rng(22, o), rng(23, o));
                let var: Vec<f32> = rng(24, o).iter().map(|v| v.abs() + 0.1).collect();
                let eps = 1e-5;
                // aten: convolution, then batch norm, NCHW.
                let out_sizes = crate::conv::conv_output_sizes(
                    &xs,
                    &ws,
                    bias.as_ref().map(Vec::len),
                    &stride,
                    &[ph, pw],
                    &[1, 1],
                    false,
                    &[0, 0],
                    groups,
                )
                .unwrap();
                let mut scratch =
                    vec![0.0; conv_scratch_len(&xs, &ws, &stride, &[ph, pw], &[1, 1], false, &[0, 0], groups)];
                let mut y = vec![0.0f32; out_sizes.iter().product()];
                convolution(
                    &x,
                    &xs,
                    &w,
                    &ws,
                    bias.as_deref(),
                    &stride,
                    &[ph, pw],
                    &[1, 1],
                    false,
                    &[0, 0],
                    groups,
                    &mut y,
                    &mut scratch,
                )
                .unwrap();
                let want = if with_bn {
                    let mut z = vec![0.0f32; y.len()];
                    batch_norm_no_training(&y, &out_sizes, Some(&bw), Some(&bb), &mean, &var, eps, &mut z).unwrap();
                    z
                } else {
                    y
                };
                let mut want = to_last(&want, out_sizes.as_slice().try_into().unwrap());
                let residual = with_residual.then(|| rng(25, want.len()));
                if let Some(r) = &residual {
                    for (w, r) in want.iter_mut().zip(r) {
                        *w += r;
                    }
                }
                // NHWC, folded.
                let nhwc = [xs[0], xs[2], xs[3], xs[1]];
                let pad = [ph, pw, ph, pw];
                let g = if groups == 1 {
                    Conv2dNhwc::regular(&nhwc, &[o, ws[2], ws[3], ws[1]], stride, pad, [1, 1], 1)
                } else {
                    Conv2dNhwc::depthwise(&nhwc, &[1, ws[2], ws[3], o], stride, pad, [1, 1])
                }
                .unwrap();
                let bn = BatchNormFold {
                    weight: Some(&bw),
                    bias: Some(&bb),
                    mean: &mean,
                    var: &var,
                    eps,
                };
                let xl = to_last(&x, xs);
                // The weight in XNNPACK's layout: `[O, kH, kW, C]`, or
                // `[1, kH, kW, O]` depthwise.
                let [_, cg, kh, kw] = ws;
                let (mut wx, wx_sizes) = (
                    vec![0.0f32; w.len()],
                    if groups == 1 { [o, kh, kw, cg] } else { [1, kh, kw, o] },
                );
                for (at, &v) in w.iter().enumerate() {
                    let (oc, c, t) = (at / (cg * kh * kw), at / (kh * kw) % cg, at % (kh * kw));
                    wx[if groups == 1 {
                        (oc * kh * kw + t) * cg + c
                    } else {
                        t * o + oc
                    }] = v;
                }
                for (layout, w, w_sizes) in [(FilterLayout::Torch, &w, ws), (FilterLayout::Xnnpack, &wx, wx_sizes)] {
                    assert_eq!(
                        Conv2dNhwc::folded(layout, &nhwc, &w_sizes, stride, pad, [1, 1], groups),
                        Some(g)
                    );
                    let mut kept = vec![0.0f32; g.folded_len()];
                    let mut scratch = vec![0.0f32; g.scratch_len(true)];
                    let conv = FoldedConv {
                        geometry: g,
                        layout,
                        w,
                        bias: bias.as_deref(),
                        bn: with_bn.then_some(bn),
                        residual: residual.as_deref(),
                        min: -1.5,
                        max: 2.0,
                    };
                    // The third call runs as ptec's code does when it
                    // prepared the filter at compile time: without the
                    // filter, bias and batch norm it was made from.
                    let prepared_elsewhere = FoldedConv {
                        w: &[],
                        bias: None,
                        bn: None,
                        ..conv
                    };
                    for call in 0..3 {
                        let mut got = vec![f32::NAN; want.len()];
                        let conv = if call < 2 {
                            conv.prepare(&mut kept);
                            &conv
                        } else {
                            &prepared_elsewhere
                        };
                        conv2d_folded(conv, &xl, &kept, &mut got, &mut scratch);
                        for (k, (&a, &b)) in got.iter().zip(&want).enumerate() {
                            let b = b.clamp(-1.5, 2.0);
                            assert!(
                                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                                "case {ci} {layout:?} ({with_bias}, {with_bn}, {with_residual}) call {call} [{k}]: {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn pooling_by_hand() {
        // One 3×3 image, 1 channel: 1..9; 2×2 windows, stride 1, padding 1
        // on the bottom/right only.
        let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let win = Window2d::new(1, 3, 3, [2, 2], [1, 1], [0, 1, 1, 0], [1, 1]).unwrap();
        assert_eq!((win.out_h, win.out_w), (3, 3));
        let mut out = vec![0.0; 9];
        max_pool2d_nhwc(&win, 1, &x, f32::NEG_INFINITY, f32::INFINITY, &mut out);
        assert_eq!(out, [5.0, 6.0, 6.0, 8.0, 9.0, 9.0, 8.0, 9.0, 9.0]);
        avg_pool2d_nhwc(&win, 1, &x, f32::NEG_INFINITY, 7.0, &mut out);
        // Bottom-right windows average only their in-image pixels.
        assert_eq!(out, [3.0, 4.0, 4.5, 6.0, 7.0, 7.0, 7.0, 7.0, 9.0f32.min(7.0)]);
        let mut g = [0.0f32; 2];
        // Two channels over 3 pixels.
        global_avg_pool_nhwc(1, 3, 2, &[1.0, 10.0, 2.0, 20.0, 3.0, 30.0], 0.0, 15.0, &mut g);
        assert_eq!(g, [2.0, 15.0]);
    }

    #[test]
    fn bad_geometry_is_rejected() {
        // Kernel larger than the padded input.
        assert!(Conv2dNhwc::regular(&[1, 2, 2, 1], &[1, 3, 3, 1], [1, 1], [0; 4], [1, 1], 1).is_none());
        // Channels not divisible by groups, zero stride, zero groups.
        assert!(Conv2dNhwc::regular(&[1, 4, 4, 3], &[2, 1, 1, 1], [1, 1], [0; 4], [1, 1], 2).is_none());
        assert!(Conv2dNhwc::regular(&[1, 4, 4, 1], &[1, 1, 1, 1], [0, 1], [0; 4], [1, 1], 1).is_none());
        assert!(Conv2dNhwc::regular(&[1, 4, 4, 1], &[1, 1, 1, 1], [1, 1], [0; 4], [1, 1], 0).is_none());
        // Overflowing sizes.
        assert!(Conv2dNhwc::regular(&[usize::MAX, 4, 4, 1], &[1, 1, 1, 1], [1, 1], [0; 4], [1, 1], 1).is_none());
        assert!(Window2d::new(1, usize::MAX, 1, [1, 1], [1, 1], [1, 0, 0, 0], [1, 1]).is_none());
        // Depthwise output channels must be a multiple of the input's.
        assert!(Conv2dNhwc::depthwise(&[1, 4, 4, 3], &[1, 3, 3, 4], [1, 1], [1; 4], [1, 1]).is_none());
    }
}
