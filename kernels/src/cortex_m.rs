//! ExecuTorch's Cortex-M backend operators (`cortex_m::*`, written by its
//! `CortexMPassManager`), with the arithmetic of their reference
//! implementations (`executorch/backends/cortex_m/ops/operators.py`, which
//! follow CMSIS-NN), to the bit:
//!
//! - requantization is `arm_nn_requantize` without saturation: the value
//!   shifted left by a positive shift, a doubling high multiply rounded
//!   half up (`(v * m + 2^30) >> 31`, in 64 bits), then a right shift for a
//!   negative shift rounded half away from zero ([`requantize`]);
//! - convolutions accumulate in `i32` (wrapping, as PyTorch's `int32`
//!   convolution does) the products of the weights and the input plus its
//!   offset, padding contributing nothing;
//! - average pooling dequantizes to `f32`, sums each window row by row,
//!   divides by the window's count inside the image and quantizes back,
//!   rounding half to even, as the reference's float path does;
//! - division and softmax compute in `f32` as the reference does, and the
//!   activations are the pass's 256-entry tables;
//! - elementwise operators broadcast through per-operand strides
//!   ([`Binary`]).
//!
//! Images are described by [`Image`], their strides in memory per logical
//! dim (n, c, h, w), so that one kernel serves the legacy operators on
//! channels-last (or contiguous) NCHW tensors and the explicit-layout
//! `_nhwc` ones.
use crate::{KernelError, KernelResult, MAX_RANK};

/// An image's sizes and the strides (in elements) of its n, c, h and w.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Image {
    pub sizes: [usize; 4],
    pub strides: [usize; 4],
}

impl Image {
    #[inline(always)]
    fn at(&self, n: usize, c: usize, h: usize, w: usize) -> usize {
        n * self.strides[0] + c * self.strides[1] + h * self.strides[2] + w * self.strides[3]
    }

    /// Elements a slice must hold for every index to be in it.
    fn span(&self) -> usize {
        if self.sizes.contains(&0) {
            return 0;
        }
        1 + (0..4).map(|d| (self.sizes[d] - 1) * self.strides[d]).sum::<usize>()
    }
}

/// CMSIS-NN's requantization as the reference computes it
/// (`requantize_cmsis`).
#[inline]
pub fn requantize(v: i64, multiplier: i32, shift: i32) -> i32 {
    // Shifts past 63 (meaningless) are cut there rather than panic.
    let left = shift.clamp(0, 63) as u32;
    let right = shift.min(0).unsigned_abs().min(63);
    let value = v.wrapping_shl(left);
    let mut result = value.wrapping_mul(i64::from(multiplier)).wrapping_add(1 << 30) >> 31;
    if right > 0 {
        let mask = (1i64 << right).wrapping_sub(1);
        let remainder = result & mask;
        result >>= right;
        let threshold = (mask >> 1) + i64::from(result < 0);
        if remainder > threshold {
            result += 1;
        }
    }
    result as i32
}

/// `clamp(v + offset, min, max)` as `i8` (the emitters check the bounds
/// are in `-128..=127`; `max` wins over `min` as in `torch.clamp`).
#[inline(always)]
fn finish(v: i32, offset: i32, act: [i32; 2]) -> i8 {
    v.wrapping_add(offset).max(act[0]).min(act[1]) as i8
}

/// How a convolution's weight is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    /// `[out, kh, kw, in / groups]` (`quantized_conv2d`).
    Ohwi,
    /// `[1, kh, kw, out]`, output channel `o` reading input channel
    /// `o / (out / in)` (`quantized_depthwise_conv2d`).
    Ihwo,
}

/// A quantized 2-d convolution's geometry and parameters.
#[derive(Clone, Copy, Debug)]
pub struct Conv2d {
    pub input: Image,
    pub output: Image,
    pub weights: Weights,
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    /// Input channels per group (`Ohwi`; 1 for `Ihwo`).
    pub group_in: usize,
    pub input_offset: i32,
    pub output_offset: i32,
    pub activation: [i32; 2],
}

/// `cortex_m::quantized_conv2d` and `quantized_depthwise_conv2d` (and their
/// `_nhwc` forms): `multipliers` and `shifts` per output channel.
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    p: &Conv2d,
    x: &[i8],
    w: &[i8],
    bias: Option<&[i32]>,
    multipliers: &[i32],
    shifts: &[i32],
    out: &mut [i8],
) -> KernelResult {
    let [n, ic, ih, iw] = p.input.sizes;
    let [on, oc, _, _] = p.output.sizes;
    let [kh, kw] = p.kernel;
    let gi = p.group_in;
    let fits = on == n
        && x.len() >= p.input.span()
        && out.len() >= p.output.span()
        && multipliers.len() == oc
        && shifts.len() == oc
        && bias.is_none_or(|b| b.len() == oc)
        && gi > 0
        && match p.weights {
            Weights::Ohwi => ic % gi == 0 && oc % (ic / gi).max(1) == 0 && w.len() == oc * kh * kw * gi,
            Weights::Ihwo => ic > 0 && oc % ic == 0 && w.len() == kh * kw * oc,
        };
    if !fits {
        return Err(KernelError::ShapeMismatch);
    }
    let groups = ic / gi;
    let per_group = oc / groups.max(1);
    each_output(p, bias, multipliers, shifts, out, |b, o, y, xo| {
        let (first_in, ins) = match p.weights {
            Weights::Ohwi => ((o / per_group) * gi, gi),
            Weights::Ihwo => (o / (oc / ic), 1),
        };
        let mut acc = 0i32;
        for ky in 0..kh {
            let iy = (y * p.stride[0] + ky * p.dilation[0]).wrapping_sub(p.padding[0]);
            if iy >= ih {
                continue;
            }
            for kx in 0..kw {
                let ix = (xo * p.stride[1] + kx * p.dilation[1]).wrapping_sub(p.padding[1]);
                if ix >= iw {
                    continue;
                }
                for ci in 0..ins {
                    let v = i32::from(x[p.input.at(b, first_in + ci, iy, ix)]) + p.input_offset;
                    let wi = match p.weights {
                        Weights::Ohwi => ((o * kh + ky) * kw + kx) * gi + ci,
                        Weights::Ihwo => (ky * kw + kx) * oc + o,
                    };
                    acc = acc.wrapping_add(v.wrapping_mul(i32::from(w[wi])));
                }
            }
        }
        acc
    });
    Ok(())
}

/// Writes every output of a convolution: the bias plus `acc(n, c, y, x)`
/// (wrapping), requantized with its channel's multiplier and shift (the
/// callers check the slices' lengths).
fn each_output(
    p: &Conv2d,
    bias: Option<&[i32]>,
    multipliers: &[i32],
    shifts: &[i32],
    out: &mut [i8],
    mut acc: impl FnMut(usize, usize, usize, usize) -> i32,
) {
    let [n, oc, oh, ow] = p.output.sizes;
    for b in 0..n {
        for o in 0..oc {
            for y in 0..oh {
                for xo in 0..ow {
                    let v = bias.map_or(0, |b| b[o]).wrapping_add(acc(b, o, y, xo));
                    let r = requantize(i64::from(v), multipliers[o], shifts[o]);
                    out[p.output.at(b, o, y, xo)] = finish(r, p.output_offset, p.activation);
                }
            }
        }
    }
}

/// A quantized average pooling's geometry and parameters (the output's
/// sizes already follow `ceil_mode`).
#[derive(Clone, Copy, Debug)]
pub struct AvgPool2d {
    pub input: Image,
    pub output: Image,
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub zero_point: i32,
    pub multiplier: i32,
    pub shift: i32,
}

/// The reference's scale of a multiplier and shift:
/// `multiplier * 2^shift / 2^31`, exact in `f64`, then an `f32` as the
/// tensor arithmetic uses it.
pub fn cmsis_scale(multiplier: i32, shift: i32) -> f32 {
    // 2^(shift - 31) built from its exponent bits (shift is in -63..=31).
    let power = f64::from_bits(((i64::from(shift) - 31 + 1023) as u64) << 52);
    (f64::from(multiplier) * power) as f32
}

/// `cortex_m::quantized_avg_pool2d` (and `_nhwc`), `count_include_pad`
/// false.
pub fn avg_pool2d(p: &AvgPool2d, x: &[i8], out: &mut [i8]) -> KernelResult {
    let [n, c, ih, iw] = p.input.sizes;
    let [on, oc, oh, ow] = p.output.sizes;
    if on != n || oc != c || x.len() < p.input.span() || out.len() < p.output.span() || p.stride.contains(&0) {
        return Err(KernelError::ShapeMismatch);
    }
    let scale = cmsis_scale(p.multiplier, p.shift);
    let zp = p.zero_point as f32;
    for b in 0..n {
        for ch in 0..c {
            for y in 0..oh {
                for xo in 0..ow {
                    // PyTorch's window: clipped to the padded image, then
                    // to the image, the count being what is inside.
                    let h0 = (y * p.stride[0]) as isize - p.padding[0] as isize;
                    let w0 = (xo * p.stride[1]) as isize - p.padding[1] as isize;
                    let h1 = (h0 + p.kernel[0] as isize)
                        .min((ih + p.padding[0]) as isize)
                        .min(ih as isize);
                    let w1 = (w0 + p.kernel[1] as isize)
                        .min((iw + p.padding[1]) as isize)
                        .min(iw as isize);
                    let (h0, w0) = (h0.max(0), w0.max(0));
                    let mut sum = 0.0f32;
                    for iy in h0..h1 {
                        for ix in w0..w1 {
                            let q = x[p.input.at(b, ch, iy as usize, ix as usize)];
                            sum += (f32::from(q) - zp) * scale;
                        }
                    }
                    let count = ((h1 - h0).max(0) * (w1 - w0).max(0)) as f32;
                    let q = (libm::rintf(sum / count / scale) + zp).clamp(-128.0, 127.0);
                    out[p.output.at(b, ch, y, xo)] = q as i8;
                }
            }
        }
    }
    Ok(())
}

/// A quantized linear layer's parameters: `rows × depth` by the weight's
/// `columns × depth`.
#[derive(Clone, Copy, Debug)]
pub struct Linear {
    pub rows: usize,
    pub depth: usize,
    pub columns: usize,
    pub input_offset: i32,
    pub filter_offset: i32,
    pub output_offset: i32,
    pub multiplier: i32,
    pub shift: i32,
    pub activation: [i32; 2],
}

/// `cortex_m::quantized_linear`. With a `kernel_sum` (the MVE form) the
/// products are of the raw values, plus the row's sum times the filter
/// offset and the column's kernel sum (in 64 bits, as the reference's
/// `int64` sum makes them); without, of the offset values plus the bias
/// (in wrapping `i32`).
pub fn linear(
    p: &Linear,
    x: &[i8],
    w: &[i8],
    bias: Option<&[i32]>,
    kernel_sum: Option<&[i32]>,
    out: &mut [i8],
) -> KernelResult {
    let (m, k, n) = (p.rows, p.depth, p.columns);
    if x.len() != m * k
        || w.len() != n * k
        || out.len() != m * n
        || bias.is_some_and(|b| b.len() != n)
        || kernel_sum.is_some_and(|s| s.len() != n)
    {
        return Err(KernelError::ShapeMismatch);
    }
    for r in 0..m {
        let row = &x[r * k..(r + 1) * k];
        let row_sum: i64 = row.iter().map(|&v| i64::from(v)).sum();
        for j in 0..n {
            let col = &w[j * k..(j + 1) * k];
            let acc: i64 = match kernel_sum {
                Some(sums) => {
                    let dot = row
                        .iter()
                        .zip(col)
                        .fold(0i32, |a, (&v, &f)| a.wrapping_add(i32::from(v) * i32::from(f)));
                    i64::from(dot) + row_sum * i64::from(p.filter_offset) + i64::from(sums[j])
                }
                None => {
                    let dot = row.iter().zip(col).fold(0i32, |a, (&v, &f)| {
                        let (v, f) = (i32::from(v) + p.input_offset, i32::from(f) + p.filter_offset);
                        a.wrapping_add(v.wrapping_mul(f))
                    });
                    i64::from(dot.wrapping_add(bias.map_or(0, |b| b[j])))
                }
            };
            let q = requantize(acc, p.multiplier, p.shift);
            out[r * n + j] = finish(q, p.output_offset, p.activation);
        }
    }
    Ok(())
}

/// One operand of a quantized add: its zero point and the multiplier and
/// shift that bring it to the common scale.
#[derive(Clone, Copy, Debug)]
pub struct AddOperand {
    pub zero_point: i32,
    pub multiplier: i32,
    pub shift: i32,
}

/// CMSIS-NN's left shift of int8 operands before an add.
const SHIFT_INT8: u32 = 20;

/// The geometry of an elementwise operator on tensors of rank ≤ 4: the
/// output's sizes (aligned to the last dims, leading ones padded with 1)
/// and each tensor's strides, 0 along a dim an operand is broadcast in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binary {
    pub sizes: [usize; 4],
    pub a: [usize; 4],
    pub b: [usize; 4],
    pub out: [usize; 4],
}

impl Binary {
    /// Whether every index of the three tensors is inside its slice.
    fn fits(&self, a: usize, b: usize, out: usize) -> bool {
        let span = |strides: &[usize; 4]| {
            if self.sizes.contains(&0) {
                return 0;
            }
            1 + (0..4).map(|d| (self.sizes[d] - 1) * strides[d]).sum::<usize>()
        };
        span(&self.a) <= a && span(&self.b) <= b && span(&self.out) <= out
    }

    /// Calls `f(a, b, out)` with the three offsets of every output element.
    #[inline(always)]
    fn each(&self, mut f: impl FnMut(usize, usize, usize)) {
        let [s0, s1, s2, s3] = self.sizes;
        for i in 0..s0 {
            for j in 0..s1 {
                for k in 0..s2 {
                    let at = |s: &[usize; 4]| i * s[0] + j * s[1] + k * s[2];
                    let (a, b, o) = (at(&self.a), at(&self.b), at(&self.out));
                    for l in 0..s3 {
                        f(a + l * self.a[3], b + l * self.b[3], o + l * self.out[3]);
                    }
                }
            }
        }
    }
}

/// Runs `f` over the elements of `a` and `b` (broadcast as `shape` says)
/// into `out`, after checking the slices hold every index.
fn binary<A: Copy, B: Copy, O>(shape: &Binary, a: &[A], b: &[B], out: &mut [O], f: impl Fn(A, B) -> O) -> KernelResult {
    if !shape.fits(a.len(), b.len(), out.len()) {
        return Err(KernelError::ShapeMismatch);
    }
    shape.each(|i, j, o| out[o] = f(a[i], b[j]));
    Ok(())
}

/// `cortex_m::quantized_add` of two tensors, one of them possibly
/// broadcast (the reference's channel broadcast, or any other).
#[allow(clippy::too_many_arguments)]
pub fn add(
    a: &[i8],
    pa: AddOperand,
    b: &[i8],
    pb: AddOperand,
    po: AddOperand,
    activation: [i32; 2],
    shape: &Binary,
    out: &mut [i8],
) -> KernelResult {
    let scaled = |v: i8, p: AddOperand| {
        let shifted = (i32::from(v).wrapping_sub(p.zero_point)).wrapping_shl(SHIFT_INT8);
        requantize(i64::from(shifted), p.multiplier, p.shift)
    };
    binary(shape, a, b, out, |x, y| {
        let sum = scaled(x, pa).wrapping_add(scaled(y, pb));
        finish(
            requantize(i64::from(sum), po.multiplier, po.shift),
            po.zero_point,
            activation,
        )
    })
}

/// `cortex_m::quantized_mul`: the product of the offset operands in `i32`,
/// requantized by the output's multiplier and shift.
#[allow(clippy::too_many_arguments)]
pub fn mul(
    a: &[i8],
    a_zero_point: i32,
    b: &[i8],
    b_zero_point: i32,
    output_zero_point: i32,
    multiplier: i32,
    shift: i32,
    shape: &Binary,
    out: &mut [i8],
) -> KernelResult {
    binary(shape, a, b, out, |x, y| {
        let p = (i32::from(x) - a_zero_point).wrapping_mul(i32::from(y) - b_zero_point);
        finish(
            requantize(i64::from(p), multiplier, shift),
            output_zero_point,
            [-128, 127],
        )
    })
}

/// `cortex_m::quantized_div` of int8 tensors: the quotient of the offset
/// operands in `f32` (0 for a zero divisor), times `scale` (the input's
/// over the divisor's and the output's), rounded half to even.
#[allow(clippy::too_many_arguments)]
pub fn div(
    a: &[i8],
    a_zero_point: i32,
    b: &[i8],
    b_zero_point: i32,
    output_zero_point: i32,
    scale: f32,
    shape: &Binary,
    out: &mut [i8],
) -> KernelResult {
    let zp = output_zero_point as f32;
    binary(shape, a, b, out, |x, y| {
        let (x, y) = (
            (i32::from(x) - a_zero_point) as f32,
            (i32::from(y) - b_zero_point) as f32,
        );
        let q = if y != 0.0 { x / y } else { 0.0 };
        (libm::rintf(q * scale) + zp).clamp(-128.0, 127.0) as i8
    })
}

/// `cortex_m::minimum`.
pub fn minimum<T: Copy + Ord>(a: &[T], b: &[T], shape: &Binary, out: &mut [T]) -> KernelResult {
    binary(shape, a, b, out, Ord::min)
}

/// `cortex_m::maximum`.
pub fn maximum<T: Copy + Ord>(a: &[T], b: &[T], shape: &Binary, out: &mut [T]) -> KernelResult {
    binary(shape, a, b, out, Ord::max)
}

/// `cortex_m::quantized_activation`: `lut[x + 128]` (the table is the
/// activation and both quantizations, computed ahead of time), over
/// tensors of one layout.
pub fn activation(x: &[i8], lut: &[i8], out: &mut [i8]) -> KernelResult {
    if x.len() != out.len() || lut.len() != 256 {
        return Err(KernelError::ShapeMismatch);
    }
    for (o, &v) in out.iter_mut().zip(x) {
        *o = lut[(i32::from(v) + 128) as usize];
    }
    Ok(())
}

/// The integer bits of CMSIS-NN's softmax input (`SOFTMAX_INPUT_INTEGER_BITS`).
const SOFTMAX_INTEGER_BITS: i32 = 5;

/// `cortex_m::softmax` as the reference computes it, in `f32`: the input
/// dequantized with the scale of its multiplier and shift (over
/// 2^(31 - 5)), PyTorch's softmax along `dim` (`exp(x - max)`, summed in
/// order, times the sum's reciprocal), then `round(p × 256) - 128` (the
/// output's fixed scale 1/256 and zero point -128) rounding half to even.
/// `sizes` and the strides are those of the logical dims, padded to 4.
#[allow(clippy::too_many_arguments)]
pub fn softmax(
    x: &[i8],
    sizes: [usize; 4],
    x_strides: [usize; 4],
    out_strides: [usize; 4],
    dim: usize,
    zero_point: i32,
    multiplier: i32,
    shift: i32,
    out: &mut [i8],
) -> KernelResult {
    let shape = Binary {
        sizes,
        a: x_strides,
        b: x_strides,
        out: out_strides,
    };
    if dim >= 4 || !shape.fits(x.len(), x.len(), out.len()) {
        return Err(KernelError::ShapeMismatch);
    }
    // The reference's double scale, then f32 as the tensor arithmetic
    // uses it.
    let power = f64::from_bits(((i64::from(shift) - 31 - (31 - i64::from(SOFTMAX_INTEGER_BITS)) + 1023) as u64) << 52);
    let scale = (f64::from(multiplier) * power) as f32;
    let n = sizes[dim];
    let (xs, os) = (x_strides[dim], out_strides[dim]);
    // One row per index of the other dims: `dim` iterated apart.
    let mut rows = sizes;
    rows[dim] = 1;
    let rows = Binary {
        sizes: rows,
        a: x_strides,
        b: x_strides,
        out: out_strides,
    };
    let value = |i: usize| (i32::from(x[i]) - zero_point) as f32 * scale;
    rows.each(|xi, _, oi| {
        let max = (0..n).map(|k| value(xi + k * xs)).fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = (0..n).map(|k| libm::expf(value(xi + k * xs) - max)).sum();
        let r = 1.0 / sum;
        for k in 0..n {
            let p = libm::expf(value(xi + k * xs) - max) * r;
            out[oi + k * os] = (libm::rintf(p * 256.0) - 128.0).clamp(-128.0, 127.0) as i8;
        }
    });
    Ok(())
}

/// A quantized max pooling's geometry (no dilation, no `ceil_mode`: the
/// backend lowers no other).
#[derive(Clone, Copy, Debug)]
pub struct MaxPool2d {
    pub input: Image,
    pub output: Image,
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub activation: [i32; 2],
}

/// `cortex_m::quantized_max_pool2d` (and `_nhwc`): the largest value of
/// each window inside the image (padding takes no part), clamped to the
/// activation bounds; input and output share their quantization.
pub fn max_pool2d(p: &MaxPool2d, x: &[i8], out: &mut [i8]) -> KernelResult {
    let [n, c, ih, iw] = p.input.sizes;
    let [on, oc, oh, ow] = p.output.sizes;
    if on != n || oc != c || x.len() < p.input.span() || out.len() < p.output.span() || p.stride.contains(&0) {
        return Err(KernelError::ShapeMismatch);
    }
    for b in 0..n {
        for ch in 0..c {
            for y in 0..oh {
                for xo in 0..ow {
                    let h0 = (y * p.stride[0]).saturating_sub(p.padding[0]);
                    let w0 = (xo * p.stride[1]).saturating_sub(p.padding[1]);
                    let h1 = (y * p.stride[0] + p.kernel[0]).saturating_sub(p.padding[0]).min(ih);
                    let w1 = (xo * p.stride[1] + p.kernel[1]).saturating_sub(p.padding[1]).min(iw);
                    let mut m = i32::MIN;
                    for iy in h0..h1 {
                        for ix in w0..w1 {
                            m = m.max(i32::from(x[p.input.at(b, ch, iy, ix)]));
                        }
                    }
                    // An empty window (padding at least the kernel) is
                    // refused by the emitter; here it gives the lower bound.
                    out[p.output.at(b, ch, y, xo)] = m.max(p.activation[0]).min(p.activation[1]) as i8;
                }
            }
        }
    }
    Ok(())
}

/// `cortex_m::quantized_transpose_conv2d` (and `_nhwc`), one group:
/// weights `[out, kh, kw, in]`, each output the bias plus the products of
/// the offset inputs whose scattered window covers it, accumulated in
/// wrapping `i32` (the reference's `f32` accumulation is exact while the
/// sums stay below 2^24), requantized per output channel. `p.output`'s
/// sizes already include the output padding.
#[allow(clippy::too_many_arguments)]
pub fn transpose_conv2d(
    p: &Conv2d,
    x: &[i8],
    w: &[i8],
    bias: Option<&[i32]>,
    multipliers: &[i32],
    shifts: &[i32],
    out: &mut [i8],
) -> KernelResult {
    let [n, ic, ih, iw] = p.input.sizes;
    let [on, oc, _, _] = p.output.sizes;
    let [kh, kw] = p.kernel;
    let fits = on == n
        && x.len() >= p.input.span()
        && out.len() >= p.output.span()
        && multipliers.len() == oc
        && shifts.len() == oc
        && bias.is_none_or(|b| b.len() == oc)
        && w.len() == oc * kh * kw * ic
        && !p.stride.contains(&0);
    if !fits {
        return Err(KernelError::ShapeMismatch);
    }
    each_output(p, bias, multipliers, shifts, out, |b, o, y, xo| {
        let mut acc = 0i32;
        for ky in 0..kh {
            // y = iy * stride - padding + ky * dilation.
            let Some(ty) = (y + p.padding[0]).checked_sub(ky * p.dilation[0]) else {
                continue;
            };
            let iy = ty / p.stride[0];
            if ty % p.stride[0] != 0 || iy >= ih {
                continue;
            }
            for kx in 0..kw {
                let Some(tx) = (xo + p.padding[1]).checked_sub(kx * p.dilation[1]) else {
                    continue;
                };
                let ix = tx / p.stride[1];
                if tx % p.stride[1] != 0 || ix >= iw {
                    continue;
                }
                let row = ((o * kh + ky) * kw + kx) * ic;
                for ci in 0..ic {
                    let v = i32::from(x[p.input.at(b, ci, iy, ix)]) + p.input_offset;
                    acc = acc.wrapping_add(v.wrapping_mul(i32::from(w[row + ci])));
                }
            }
        }
        acc
    });
    Ok(())
}

/// A quantized batch matrix product's sizes and parameters: `batches` of
/// `rows × depth` by the transposed right-hand side's `columns × depth`.
#[derive(Clone, Copy, Debug)]
pub struct BatchMatmul {
    pub batches: usize,
    pub rows: usize,
    pub depth: usize,
    pub columns: usize,
    pub lhs_offset: i32,
    pub rhs_offset: i32,
    pub output_zero_point: i32,
    pub multiplier: i32,
    pub shift: i32,
}

/// `cortex_m::quantized_batch_matmul`: `Σ (l + lhs_offset)(r + rhs_offset)`
/// in wrapping `i32` (the reference's `f32` product is exact while the sums
/// stay below 2^24), requantized, plus the output zero point.
pub fn batch_matmul(p: &BatchMatmul, lhs: &[i8], rhs_t: &[i8], out: &mut [i8]) -> KernelResult {
    let (m, k, n) = (p.rows, p.depth, p.columns);
    let per = |a: usize, b: usize| a.checked_mul(b).and_then(|v| v.checked_mul(p.batches));
    if per(m, k) != Some(lhs.len()) || per(n, k) != Some(rhs_t.len()) || per(m, n) != Some(out.len()) {
        return Err(KernelError::ShapeMismatch);
    }
    for b in 0..p.batches {
        for r in 0..m {
            let row = &lhs[(b * m + r) * k..(b * m + r + 1) * k];
            for j in 0..n {
                let col = &rhs_t[(b * n + j) * k..(b * n + j + 1) * k];
                let acc = row.iter().zip(col).fold(0i32, |a, (&u, &v)| {
                    let (u, v) = (i32::from(u) + p.lhs_offset, i32::from(v) + p.rhs_offset);
                    a.wrapping_add(u.wrapping_mul(v))
                });
                let q = requantize(i64::from(acc), p.multiplier, p.shift);
                out[(b * m + r) * n + j] = finish(q, p.output_zero_point, [-128, 127]);
            }
        }
    }
    Ok(())
}

/// Copies the elements of a tensor of `sizes` at `src_strides` in `x` to
/// `dst_strides` from `dst_offset` in `out` (a transpose, or the inside of
/// a pad).
pub fn strided_copy<T: Copy>(
    x: &[T],
    sizes: &[usize],
    src_strides: &[usize],
    dst_strides: &[usize],
    dst_offset: usize,
    out: &mut [T],
) -> KernelResult {
    let rank = sizes.len();
    if rank > MAX_RANK || src_strides.len() != rank || dst_strides.len() != rank {
        return Err(KernelError::ShapeMismatch);
    }
    if sizes.contains(&0) {
        return Ok(());
    }
    let last = |strides: &[usize]| (0..rank).map(|d| (sizes[d] - 1) * strides[d]).sum::<usize>();
    if last(src_strides) >= x.len() || dst_offset + last(dst_strides) >= out.len() {
        return Err(KernelError::ShapeMismatch);
    }
    let mut index = [0usize; MAX_RANK];
    let (mut src, mut dst) = (0usize, dst_offset);
    loop {
        out[dst] = x[src];
        // The next index, last dim fastest.
        let mut d = rank;
        loop {
            if d == 0 {
                return Ok(());
            }
            d -= 1;
            index[d] += 1;
            src += src_strides[d];
            dst += dst_strides[d];
            if index[d] < sizes[d] {
                break;
            }
            src -= sizes[d] * src_strides[d];
            dst -= sizes[d] * dst_strides[d];
            index[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `requantize_cmsis` evaluated by hand: 1000 · 2^30 / 2^31 = 500, then
    /// shifts and the rounding of ties either way.
    #[test]
    fn requantize_rounds_as_the_reference() {
        let half = 1 << 30; // a multiplier of 0.5
        assert_eq!(requantize(1000, half, 0), 500);
        assert_eq!(requantize(1000, half, 1), 1000);
        // 500 / 8 = 62.5: a tie, rounded up for positive values...
        assert_eq!(requantize(1000, half, -3), 63);
        // ... and -62.5 rounded away from zero too.
        assert_eq!(requantize(-1000, half, -3), -63);
        // 500 / 16 = 31.25 and -31.25.
        assert_eq!(requantize(1000, half, -4), 31);
        assert_eq!(requantize(-1000, half, -4), -31);
        // The high multiply's own rounding: 3 · 0.5 = 1.5 → 2, -1.5 → -1.
        assert_eq!(requantize(3, half, 0), 2);
        assert_eq!(requantize(-3, half, 0), -1);
    }

    #[test]
    fn strided_copy_transposes() {
        // [2, 3] → [3, 2].
        let x = [1, 2, 3, 4, 5, 6];
        let mut out = [0; 6];
        strided_copy(&x, &[3, 2], &[1, 3], &[2, 1], 0, &mut out).unwrap();
        assert_eq!(out, [1, 4, 2, 5, 3, 6]);
        assert_eq!(
            strided_copy(&x, &[3, 3], &[1, 3], &[3, 1], 0, &mut out),
            Err(KernelError::ShapeMismatch)
        );
    }

    #[test]
    fn depthwise_multiplier_reads_its_input_channel() {
        // One input channel, two outputs (weights 1 and -1), 1 × 1 kernel.
        let img = |c| Image {
            sizes: [1, c, 1, 2],
            strides: [2 * c, 1, 2 * c, c],
        };
        let p = Conv2d {
            input: img(1),
            output: img(2),
            weights: Weights::Ihwo,
            kernel: [1, 1],
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            group_in: 1,
            input_offset: 1,
            output_offset: 0,
            activation: [-128, 127],
        };
        let mut out = [0i8; 4];
        let one = 1 << 30; // × 0.5, shift 1: × 1
        conv2d(&p, &[3, -5], &[1, -1], None, &[one, one], &[1, 1], &mut out).unwrap();
        assert_eq!(out, [4, -4, -4, 4]);
    }

    /// The identity (× 0.5, shift 1) requantization.
    const ONE: (i32, i32) = (1 << 30, 1);

    #[test]
    fn div_rounds_half_to_even_and_a_zero_divisor_gives_zero() {
        let shape = Binary {
            sizes: [1, 1, 1, 3],
            a: [0, 0, 0, 1],
            b: [0, 0, 0, 1],
            out: [0, 0, 0, 1],
        };
        let mut out = [0i8; 3];
        // 3 / 2 = 1.5 → 2, 5 / 2 = 2.5 → 2, 10 / 0 → 0; plus 5.
        div(&[3, 5, 10], 0, &[2, 2, 0], 0, 5, 1.0, &shape, &mut out).unwrap();
        assert_eq!(out, [7, 7, 5]);
    }

    #[test]
    fn binary_broadcasts_a_channel_and_checks_its_slices() {
        // a: [1, 2, 1, 2] contiguous; b: one value per channel.
        let shape = Binary {
            sizes: [1, 2, 1, 2],
            a: [4, 2, 2, 1],
            b: [0, 1, 0, 0],
            out: [4, 2, 2, 1],
        };
        let mut out = [0i8; 4];
        minimum(&[1, 5, 3, 7], &[2, 4], &shape, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4]);
        assert_eq!(
            maximum(&[1, 5, 3], &[2, 4], &shape, &mut out),
            Err(KernelError::ShapeMismatch)
        );
    }

    #[test]
    fn max_pool_ignores_padding_and_clamps() {
        let img = |h, w| Image {
            sizes: [1, 1, h, w],
            strides: [h * w, h * w, w, 1],
        };
        let mut p = MaxPool2d {
            input: img(2, 2),
            output: img(2, 2),
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
            activation: [-128, 127],
        };
        let mut out = [0i8; 4];
        // Every window covers the whole (negative) image, not the padding.
        max_pool2d(&p, &[-5, -3, -7, -9], &mut out).unwrap();
        assert_eq!(out, [-3; 4]);
        p.activation = [-128, -4];
        max_pool2d(&p, &[-5, -3, -7, -9], &mut out).unwrap();
        assert_eq!(out, [-4; 4]);
    }

    #[test]
    fn transpose_conv_scatters_each_input_over_its_window() {
        let img = |w| Image {
            sizes: [1, 1, 1, w],
            strides: [w, w, w, 1],
        };
        let conv = |w, stride| Conv2d {
            input: img(2),
            output: img(w),
            weights: Weights::Ohwi,
            kernel: [1, 2],
            stride: [1, stride],
            padding: [0, 0],
            dilation: [1, 1],
            group_in: 1,
            input_offset: 1,
            output_offset: 0,
            activation: [-128, 127],
        };
        // Inputs 0 and 1 plus the offset 1: 1 and 2; weights 1 and 10.
        let (m, s) = ONE;
        let mut out = [0i8; 4];
        transpose_conv2d(&conv(4, 2), &[0, 1], &[1, 10], None, &[m], &[s], &mut out).unwrap();
        assert_eq!(out, [1, 10, 2, 20]);
        // Stride 1: the windows overlap in the middle.
        let mut out = [0i8; 3];
        transpose_conv2d(&conv(3, 1), &[0, 1], &[1, 10], Some(&[5]), &[m], &[s], &mut out).unwrap();
        assert_eq!(out, [6, 17, 25]);
    }

    #[test]
    fn softmax_of_a_row() {
        let row = |n| ([1, 1, 1, n], [n, n, n, 1]);
        let (m, s) = (1 << 30, -20); // a scale of 2^(30 - 20 - 57): tiny
        let mut out = [0i8; 4];
        let (sizes, st) = row(4);
        softmax(&[9, 9, 9, 9], sizes, st, st, 3, 0, m, s, &mut out).unwrap();
        assert_eq!(out, [-64; 4]); // 0.25 · 256 - 128
                                   // Shift 28, a scale of 2: exp(-20) against 1, the first value
                                   // takes everything.
        let mut out = [0i8; 2];
        let (sizes, st) = row(2);
        softmax(&[10, 0], sizes, st, st, 3, 0, m, 28, &mut out).unwrap();
        assert_eq!(out, [127, -128]);
        assert_eq!(
            softmax(&[10, 0], sizes, st, st, 4, 0, m, 28, &mut out),
            Err(KernelError::ShapeMismatch)
        );
    }

    #[test]
    fn batch_matmul_offsets_both_sides() {
        let p = BatchMatmul {
            batches: 1,
            rows: 1,
            depth: 2,
            columns: 1,
            lhs_offset: 1,
            rhs_offset: 0,
            output_zero_point: -3,
            multiplier: ONE.0,
            shift: ONE.1,
        };
        let mut out = [0i8; 1];
        // (1 + 1) · 3 + (2 + 1) · 4 = 18, minus 3.
        batch_matmul(&p, &[1, 2], &[3, 4], &mut out).unwrap();
        assert_eq!(out, [15]);
        assert_eq!(
            batch_matmul(&p, &[1, 2, 3], &[3, 4], &mut out),
            Err(KernelError::ShapeMismatch)
        );
    }

    #[test]
    fn activation_reads_the_table_at_the_value_plus_128() {
        let lut: [i8; 256] = core::array::from_fn(|i| (255 - i) as u8 as i8);
        let mut out = [0i8; 3];
        activation(&[-128, 0, 127], &lut, &mut out).unwrap();
        assert_eq!(out, [-1, 127, 0]);
        assert_eq!(
            activation(&[0], &lut[..255], &mut out[..1]),
            Err(KernelError::ShapeMismatch)
        );
    }
}
