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
//!
//! One file per concern. This one holds the geometry ([`Window2d`],
//! [`Conv2dNhwc`]) and the loops over windows that the kernels share;
//! `conv` runs regular convolutions (a 1×1 one as one product, shallow
//! windows straight from the image in `direct`, any other through the
//! gathered windows of `im2col`; narrow groups, 16 outputs at a time, in
//! `grouped`), `depthwise` the depthwise ones (a file
//! per instruction set below it), `fold` those whose constant filter is
//! prepared once with a batch norm folded in, `chain` a few of those band
//! by band, and `pool` the poolings.

mod chain;
mod conv;
mod deconv;
mod depthwise;
mod direct;
mod fold;
mod grouped;
mod im2col;
mod pool;
mod winograd;

pub use crate::activation::Activation;
pub(crate) use chain::Plan as ChainPlan;
pub use chain::{chain_scratch_len, chain_takes_residual, conv2d_folded_chain, MAX_CHAIN_PARTS};
pub use conv::conv2d_nhwc;
pub use deconv::{deconv2d_nhwc, Deconv2dNhwc};
pub use depthwise::depthwise_conv2d_nhwc;
pub use fold::{conv2d_folded, Algorithm, BatchNormFold, FilterLayout, FoldedConv};
pub use pool::{avg_pool2d_nhwc, global_avg_pool_nhwc, max_pool2d_nhwc};

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

    /// How far the tap at kernel row `ky` and column `kx` reads from its
    /// window's first input, in elements of an NHWC image of `c` channels.
    #[inline(always)]
    pub(crate) fn tap_offset(&self, ky: usize, kx: usize, c: usize) -> usize {
        (ky * self.dilation_h * self.in_w + kx * self.dilation_w) * c
    }

    /// Input row of kernel row `ki` for output row `oh`, if inside the image.
    #[inline(always)]
    pub(crate) fn in_row(&self, oh: usize, ki: usize) -> Option<usize> {
        (oh * self.stride_h + ki * self.dilation_h)
            .checked_sub(self.pad_top)
            .filter(|&r| r < self.in_h)
    }

    /// Input column of kernel column `kj` for output column `ow`, if inside.
    #[inline(always)]
    pub(crate) fn in_col(&self, ow: usize, kj: usize) -> Option<usize> {
        (ow * self.stride_w + kj * self.dilation_w)
            .checked_sub(self.pad_left)
            .filter(|&c| c < self.in_w)
    }

    /// The output columns whose window rows lie wholly inside the image
    /// across: one range (the windows move one way), empty when none do.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn inner_cols(&self) -> core::ops::Range<usize> {
        let last = self.kernel_w - 1;
        inner_range(self.out_w, |ow| {
            self.in_col(ow, 0).is_some() && self.in_col(ow, last).is_some()
        })
    }

    /// The output rows whose windows lie wholly inside the image down, as
    /// [`Self::inner_cols`] across.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn inner_rows(&self) -> core::ops::Range<usize> {
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

/// So that the int8 chains plan from geometries or from their stages.
impl AsRef<Conv2dNhwc> for Conv2dNhwc {
    fn as_ref(&self) -> &Conv2dNhwc {
        self
    }
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

    /// Whether this is the depthwise convolution [`conv2d_folded`] runs as
    /// such: one group per input channel.
    fn is_depthwise(&self) -> bool {
        self.groups == self.in_c && self.groups > 1
    }
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

/// Clamps every element to `[min, max]`.
#[inline(always)]
fn clamp(v: &mut [f32], min: f32, max: f32) {
    if min > f32::NEG_INFINITY || max < f32::INFINITY {
        for x in v {
            *x = x.max(min).min(max);
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    pub(super) type Dims4 = [usize; 4];
    pub(super) type Pair = [usize; 2];

    use crate::testing::Lcg;

    pub(super) fn rng(seed: u64, n: usize) -> Vec<f32> {
        Lcg(seed).vec(n)
    }

    /// The multiply-adds of the convolution `g`, by which the tests leave
    /// cases out under Miri ([`crate::testing::too_large_for_miri`]).
    pub(super) fn work(g: &Conv2dNhwc) -> usize {
        let win = &g.window;
        win.out_pixels() * g.out_c * win.kernel_h * win.kernel_w * (g.in_c / g.groups)
    }

    /// Direct NHWC convolution in f64 (grouped or depthwise by `groups`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reference(
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

    pub(super) fn close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "at {i}: {g} vs {w}");
        }
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
