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
//!   rounding half to even, as the reference's float path does.
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
    let [on, oc, oh, ow] = p.output.sizes;
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
    for b in 0..n {
        for o in 0..oc {
            let (first_in, ins) = match p.weights {
                Weights::Ohwi => ((o / per_group) * gi, gi),
                Weights::Ihwo => (o / (oc / ic), 1),
            };
            for y in 0..oh {
                for xo in 0..ow {
                    let mut acc: i32 = bias.map_or(0, |b| b[o]);
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
                    let r = requantize(i64::from(acc), multipliers[o], shifts[o]);
                    out[p.output.at(b, o, y, xo)] = finish(r, p.output_offset, p.activation);
                }
            }
        }
    }
    Ok(())
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

/// `cortex_m::quantized_add` of two tensors of one shape and layout.
pub fn add(
    a: &[i8],
    pa: AddOperand,
    b: &[i8],
    pb: AddOperand,
    po: AddOperand,
    activation: [i32; 2],
    out: &mut [i8],
) -> KernelResult {
    if a.len() != out.len() || b.len() != out.len() {
        return Err(KernelError::ShapeMismatch);
    }
    let scaled = |v: i8, p: AddOperand| {
        let shifted = (i32::from(v).wrapping_sub(p.zero_point)).wrapping_shl(SHIFT_INT8);
        requantize(i64::from(shifted), p.multiplier, p.shift)
    };
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        let sum = scaled(x, pa).wrapping_add(scaled(y, pb));
        *o = finish(
            requantize(i64::from(sum), po.multiplier, po.shift),
            po.zero_point,
            activation,
        );
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
}
