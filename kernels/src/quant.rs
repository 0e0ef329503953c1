//! `quantized_decomposed` quantize/dequantize operators.
//!
//! The arithmetic follows PyTorch's reference implementation of the
//! decomposed ops (`torch.ao.quantization.fx._decomposed`), which produces
//! the outputs bundled with programs:
//!
//! - quantize: `clamp(round(x * (1.0 / scale)) + zero_point, quant_min,
//!   quant_max)` where `1.0 / scale` is computed in `f64` and then rounded
//!   to `f32` (a Python float multiplied into an `f32` tensor), the product
//!   and the rounding (half to even) are `f32`, and the sum and clamp happen
//!   in `f32` too. (ExecuTorch's portable kernel instead computes
//!   `1.0f / (float)scale`, which can differ by one ulp in the reciprocal.)
//! - dequantize: `(q - zero_point) * scale` in the output's accumulate type
//!   (`f32` for `f32`/half outputs, `f64` for `f64`).
//!
//! Quantized storage is any integer [`Element`] (`i8`, `u8`, `i16`, `i32`,
//! ...). Float inputs of any [`Float`] type are read as `f32`.
use crate::num::{Element, Float};

/// `round(x * inv_scale) + zp`, clamped, as PyTorch's reference computes it
/// in `f32`.
#[inline(always)]
fn quantize_one<Q: Element>(x: f32, inv_scale: f32, zp: f32, qmin: f32, qmax: f32) -> Q {
    let v = libm::rintf(x * inv_scale) + zp;
    // clamp (NaN propagates, then becomes 0 in the integer cast)
    let v = if v.is_nan() {
        v
    } else if v < qmin {
        qmin
    } else if v > qmax {
        qmax
    } else {
        v
    };
    Q::from_i64(v as i64)
}

/// `quantized_decomposed::quantize_per_tensor(input, scale, zero_point,
/// quant_min, quant_max, dtype)`: `out[i] = clamp(round_half_even(x[i] *
/// (1/scale)) + zero_point, quant_min, quant_max)` cast to `Q`.
pub fn quantize_per_tensor<X: Float, Q: Element>(
    x: &[X],
    scale: f64,
    zero_point: i64,
    quant_min: i64,
    quant_max: i64,
    out: &mut [Q],
) {
    let inv = (1.0 / scale) as f32;
    let (zp, lo, hi) = (zero_point as f32, quant_min as f32, quant_max as f32);
    for (o, &v) in out.iter_mut().zip(x) {
        *o = quantize_one(v.to_f64() as f32, inv, zp, lo, hi);
    }
}

/// `quantized_decomposed::dequantize_per_tensor(input, scale, zero_point,
/// quant_min, quant_max, dtype, out_dtype)`:
/// `out[i] = (q[i] - zero_point) * scale` computed in `O`'s accumulate type
/// (`quant_min`/`quant_max` only validate in PyTorch and are not needed).
pub fn dequantize_per_tensor<Q: Element, O: Float>(q: &[Q], scale: f64, zero_point: i64, out: &mut [O]) {
    let s = <O::Acc as Element>::from_f64(scale);
    let zp = <O::Acc as Element>::from_i64(zero_point);
    for (o, &v) in out.iter_mut().zip(q) {
        *o = O::from_acc((<O::Acc as Element>::from_i64(v.to_i64()) - zp) * s);
    }
}

/// Splits a shape around `axis`: `(outer, channels, inner)`.
#[inline(always)]
fn split_axis(sizes: &[usize], axis: usize) -> (usize, usize, usize) {
    if sizes.is_empty() {
        return (1, 1, 1);
    }
    (
        sizes[..axis].iter().product(),
        sizes[axis],
        sizes[axis + 1..].iter().product(),
    )
}

/// `quantized_decomposed::quantize_per_channel(input, scales, zero_points,
/// axis, quant_min, quant_max, dtype)`: like [`quantize_per_tensor`] with
/// `scales[c]`/`zero_points[c]` for channel `c` along `axis` (non-negative)
/// of the input shape `sizes`. Scales and zero points may have any dtype.
#[allow(clippy::too_many_arguments)]
pub fn quantize_per_channel<X: Float, S: Element, Z: Element, Q: Element>(
    x: &[X],
    sizes: &[usize],
    scales: &[S],
    zero_points: &[Z],
    axis: usize,
    quant_min: i64,
    quant_max: i64,
    out: &mut [Q],
) {
    let (outer, ch, inner) = split_axis(sizes, axis);
    let (lo, hi) = (quant_min as f32, quant_max as f32);
    for o in 0..outer {
        for c in 0..ch {
            let inv = (1.0 / scales[c].to_f64()) as f32;
            let zp = zero_points[c].to_i64() as f32;
            let base = (o * ch + c) * inner;
            for (d, &v) in out[base..base + inner].iter_mut().zip(&x[base..base + inner]) {
                *d = quantize_one(v.to_f64() as f32, inv, zp, lo, hi);
            }
        }
    }
}

/// `quantized_decomposed::dequantize_per_channel(input, scales,
/// zero_points, axis, quant_min, quant_max, dtype, out_dtype)`:
/// `out = (q - zero_points[c]) * scales[c]` for channel `c` along `axis`.
/// `zero_points` may be absent (`None` = all zero), as the op allows.
pub fn dequantize_per_channel<Q: Element, S: Element, Z: Element, O: Float>(
    q: &[Q],
    sizes: &[usize],
    scales: &[S],
    zero_points: Option<&[Z]>,
    axis: usize,
    out: &mut [O],
) {
    let (outer, ch, inner) = split_axis(sizes, axis);
    for o in 0..outer {
        for c in 0..ch {
            let s = <O::Acc as Element>::from_f64(scales[c].to_f64());
            let zp = <O::Acc as Element>::from_i64(zero_points.map_or(0, |z| z[c].to_i64()));
            let base = (o * ch + c) * inner;
            for (d, &v) in out[base..base + inner].iter_mut().zip(&q[base..base + inner]) {
                *d = O::from_acc((<O::Acc as Element>::from_i64(v.to_i64()) - zp) * s);
            }
        }
    }
}

/// ExecuTorch's smallest per-token scale (`SMALL_SCALE_THRESHOLD`).
const SMALL_SCALE: f32 = 6.1e-5;

/// The int8 scale and zero point ExecuTorch's
/// `calculate_scale_and_zero_point` gives a row whose extremes are `min`
/// and `max`: the range widened to hold 0, the scale in `f64` (0.1 when it
/// would be 0 or its reciprocal infinite, and at least [`SMALL_SCALE`],
/// with the range stretched to match), the zero point from whichever end
/// adds the smaller error, rounded half to even in `f32`. `None` when the
/// scale is NaN (ExecuTorch aborts there).
fn token_qparams(min: f32, max: f32) -> Option<(f64, i64)> {
    let (qmin, qmax) = (-128i32, 127i32);
    let mut min = if 0.0 < min { 0.0 } else { min };
    let mut max = if max < 0.0 { 0.0 } else { max };
    let mut scale = (max as f64 - min as f64) / (qmax - qmin) as f64;
    if scale as f32 == 0.0 || (1.0f32 / scale as f32).is_infinite() {
        scale = 0.1;
    }
    if scale.is_nan() {
        return None;
    }
    if scale < SMALL_SCALE as f64 {
        let org = scale as f32;
        scale = SMALL_SCALE as f64;
        if min == 0.0 {
            max = SMALL_SCALE * (qmax - qmin) as f32;
        } else if max == 0.0 {
            min = -SMALL_SCALE * (qmax - qmin) as f32;
        } else {
            let amplifier = SMALL_SCALE / org;
            min *= amplifier;
            max *= amplifier;
        }
    }
    let (lo, hi) = (min as f64 / scale, max as f64 / scale);
    let from_min = qmin as f64 - lo;
    let from_max = qmax as f64 - hi;
    let from_min_error = qmin.abs() as f64 - lo.abs();
    let from_max_error = qmax.abs() as f64 - hi.abs();
    let initial = if from_min_error < from_max_error {
        from_min
    } else {
        from_max
    };
    // A NaN zero point (an infinite input) becomes 0; ExecuTorch's cast of
    // it is undefined.
    let zero_point = if initial < qmin as f64 {
        qmin
    } else if initial > qmax as f64 {
        qmax
    } else {
        libm::rintf(initial as f32) as i32
    };
    Some((scale, zero_point as i64))
}

/// `quantized_decomposed::choose_qparams_per_token_asymmetric` as
/// ExecuTorch's kernel computes it (its arithmetic differs from PyTorch's
/// Python reference: an `f64` scale, no `eps`, a floor of 6.1e-5): for
/// each row of `row` elements, an int8 (`[-128, 127]`) scale and zero
/// point. A row's extremes are found as `std::min_element` and
/// `std::max_element` do (a NaN is skipped unless it comes first).
pub fn choose_qparams_per_token_asymmetric(
    x: &[f32],
    row: usize,
    scales: &mut [f64],
    zero_points: &mut [i64],
) -> crate::KernelResult {
    if row == 0 || !x.len().is_multiple_of(row) || scales.len() != x.len() / row || zero_points.len() != scales.len() {
        return Err(crate::KernelError::ShapeMismatch);
    }
    for ((r, s), z) in x.chunks_exact(row).zip(scales).zip(zero_points) {
        let (mut min, mut max) = (r[0], r[0]);
        for &v in &r[1..] {
            if v < min {
                min = v;
            }
            if max < v {
                max = v;
            }
        }
        (*s, *z) = token_qparams(min, max).ok_or(crate::KernelError::InvalidQuantization)?;
    }
    Ok(())
}

/// The rows of `row` in `len` elements, checked to be whole, as many as
/// the output's elements and one per scale and zero point.
fn token_count(len: usize, row: usize, out_len: usize, params: [usize; 2]) -> Result<usize, crate::KernelError> {
    let tokens = len.checked_div(row).unwrap_or(0);
    if len != tokens * row || out_len != len || params != [tokens; 2] {
        return Err(crate::KernelError::ShapeMismatch);
    }
    Ok(tokens)
}

/// `quantized_decomposed::quantize_per_token` as ExecuTorch computes it:
/// row `t` (of `row` elements) quantized with `scales[t]` and
/// `zero_points[t]`: `clamp(zero_point + round_half_even(x * (1.0f /
/// (float)scale)), quant_min, quant_max)`, all in `f32`.
pub fn quantize_per_token<S: Element, Z: Element, Q: Element>(
    x: &[f32],
    row: usize,
    scales: &[S],
    zero_points: &[Z],
    quant_min: i64,
    quant_max: i64,
    out: &mut [Q],
) -> crate::KernelResult {
    let tokens = token_count(x.len(), row, out.len(), [scales.len(), zero_points.len()])?;
    let (lo, hi) = (quant_min as f32, quant_max as f32);
    for t in 0..tokens {
        let inv = 1.0f32 / scales[t].to_f64() as f32;
        let zp = zero_points[t].to_i64() as i32 as f32;
        let span = t * row..(t + 1) * row;
        for (o, &v) in out[span.clone()].iter_mut().zip(&x[span]) {
            *o = quantize_one(v, inv, zp, lo, hi);
        }
    }
    Ok(())
}

/// `quantized_decomposed::dequantize_per_token` as ExecuTorch computes it:
/// `(q - zero_points[t]) * (float)scales[t]` for row `t` (of `row`
/// elements), one `f32` rounding. As ExecuTorch's kernel checks, each
/// zero point must lie in `[quant_min, quant_max]`.
#[allow(clippy::too_many_arguments)]
pub fn dequantize_per_token<Q: Element, S: Element, Z: Element, O: Float>(
    q: &[Q],
    row: usize,
    scales: &[S],
    zero_points: &[Z],
    quant_min: i64,
    quant_max: i64,
    out: &mut [O],
) -> crate::KernelResult {
    let tokens = token_count(q.len(), row, out.len(), [scales.len(), zero_points.len()])?;
    if zero_points
        .iter()
        .any(|z| !(quant_min..=quant_max).contains(&z.to_i64()))
    {
        return Err(crate::KernelError::InvalidQuantization);
    }
    dequantize_per_channel(q, &[tokens, row], scales, Some(zero_points), 0, out);
    Ok(())
}

/// The weight of a quantized embedding table, `[rows, dim]`: one byte per
/// element (`embedding_byte`, `i8` or `u8`), or `nbit` of 2 or 4 packed
/// into bytes and stored offset by `2^(nbit - 1)` (`embedding_2bit`,
/// `embedding_4bit`): with 4 bits the even element is the high half, with
/// 2 bits element `k` of a byte is its bits `2k` and `2k + 1`.
#[derive(Clone, Copy, Debug)]
pub enum QuantizedTable<'a, W> {
    Bytes(&'a [W]),
    Packed { bytes: &'a [u8], nbit: u32 },
}

/// `quantized_decomposed::embedding_{byte,2bit,4bit}`: for each index, the
/// table's row dequantized, `(w - zero_point) * scale` in `f32` with the
/// scale (and zero point) of the element's group (`groups` per row, each
/// `dim / groups` wide; 1 for per-row). The zero points are optional, as
/// the op allows. An index outside the table is an error.
#[allow(clippy::too_many_arguments)]
pub fn embedding_quantized<W: Element, P: Element, O: Float>(
    table: QuantizedTable<'_, W>,
    rows: usize,
    dim: usize,
    scales: &[P],
    zero_points: Option<&[P]>,
    groups: usize,
    indices: &[i64],
    out: &mut [O],
) -> crate::KernelResult {
    let group = dim / groups.max(1);
    for (k, &index) in indices.iter().enumerate() {
        let row = usize::try_from(index)
            .ok()
            .filter(|&r| r < rows)
            .ok_or(crate::KernelError::IndexOutOfRange { index, size: rows })?;
        let params = row * groups;
        for (j, o) in out[k * dim..(k + 1) * dim].iter_mut().enumerate() {
            let g = params + j / group.max(1);
            let w = match table {
                QuantizedTable::Bytes(w) => w[row * dim + j].to_f64() as f32,
                QuantizedTable::Packed { bytes, nbit } => {
                    let per_byte = (8 / nbit) as usize;
                    let byte = bytes[row * (dim / per_byte) + j / per_byte];
                    let value = if nbit == 4 {
                        if j % 2 == 1 {
                            byte & 0x0f
                        } else {
                            byte >> 4
                        }
                    } else {
                        (byte >> (2 * (j % 4))) & 3
                    };
                    value as f32 - (1u32 << (nbit - 1)) as f32
                }
            };
            let zp = zero_points.map_or(0.0, |z| z[g].to_f64() as f32);
            *o = O::from_f64(((w - zp) * scales[g].to_f64() as f32) as f64);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::f16;
    use std::vec;

    /// Rows worked by hand through ExecuTorch's arithmetic.
    #[test]
    fn per_token_parameters_follow_executorch() {
        let x = [
            0.0, 0.0, 0.0, // all zero: scale 0.1, zero point 127
            -1.0, 0.5, 2.0, // range 3: zero point -43
            1e-6, 2e-6, 1e-6, // tiny, non-negative: the scale floor, zero point -128
            -2e-6, 1e-6, 0.0, // tiny, both signs: the range stretched
        ];
        let (mut s, mut z) = ([0.0f64; 4], [0i64; 4]);
        choose_qparams_per_token_asymmetric(&x, 3, &mut s, &mut z).unwrap();
        assert_eq!(s[..3], [0.1, 3.0 / 255.0, 6.1e-5f32 as f64]);
        assert_eq!(z[..3], [127, -43, -128]);
        // Stretched to a range of 255 steps of 6.1e-5 with the same
        // proportions: 0 sits 170 steps up, at -128 + 170.
        assert_eq!(s[3], 6.1e-5f32 as f64);
        assert_eq!(z[3], 42);
        // A NaN first in its row is an error, later it is skipped.
        assert!(choose_qparams_per_token_asymmetric(&[f32::NAN, 1.0], 2, &mut s[..1], &mut z[..1]).is_err());
        choose_qparams_per_token_asymmetric(&[1.0, f32::NAN], 2, &mut s[..1], &mut z[..1]).unwrap();
        assert_eq!((s[0], z[0]), (1.0 / 255.0, -128));
        assert!(choose_qparams_per_token_asymmetric(&x, 0, &mut s, &mut z).is_err());
    }

    #[test]
    fn per_token_quantization_rounds_half_to_even_and_clamps() {
        // Scale 0.5: x / 0.5 = 1.5 -> 2, 2.5 -> 2, -0.5 -> -0; then + zp.
        let x = [0.75f32, 1.25, -0.25, 100.0, 1.0, -1.0];
        let mut q = [0i8; 6];
        quantize_per_token(&x, 3, &[0.5f64, 0.25], &[1i64, -3], -128, 127, &mut q).unwrap();
        assert_eq!(q, [3, 3, 1, 127, 1, -7]);
        let mut back = [0.0f32; 6];
        dequantize_per_token(&q, 3, &[0.5f32, 0.25], &[1i8, -3], -128, 127, &mut back).unwrap();
        assert_eq!(back, [1.0, 1.0, 0.0, 32.5, 1.0, -1.0]);
        // A zero point outside the range is refused, as ExecuTorch does.
        assert!(dequantize_per_token(&q, 3, &[0.5f32, 0.25], &[1i64, 200], -128, 127, &mut back).is_err());
        assert!(quantize_per_token(&x, 4, &[0.5f64, 0.25], &[1i64, -3], -128, 127, &mut q).is_err());
    }

    #[test]
    fn quantized_embeddings_follow_executorch() {
        // Two rows of 4, two groups per row, zero points given.
        let w: [i8; 8] = [1, -2, 3, 4, 5, 6, -7, 8];
        let scales = [0.5f32, 2.0, 1.0, 0.25];
        let zps = [1.0f32, 0.0, -1.0, 2.0];
        let mut out = [0.0f32; 8];
        embedding_quantized(
            QuantizedTable::Bytes(&w),
            2,
            4,
            &scales,
            Some(&zps),
            2,
            &[1, 0],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [6.0, 7.0, -2.25, 1.5, 0.0, -1.5, 6.0, 8.0]);
        // 4 bits: bytes 0x1f, 0x80 hold 1, 15, 8, 0, offset by 8; one
        // group, no zero points, into f16.
        let mut half = [f16::ZERO; 4];
        let packed: QuantizedTable<'_, u8> = QuantizedTable::Packed {
            bytes: &[0x1f, 0x80],
            nbit: 4,
        };
        embedding_quantized(packed, 1, 4, &[f16::from_f32(2.0)], None, 1, &[0], &mut half).unwrap();
        assert_eq!(half.map(f16::to_f32), [-14.0, 14.0, 0.0, -16.0]);
        // 2 bits: 0b11_10_01_00 holds 0, 1, 2, 3 from the low bits, offset by 2.
        let packed: QuantizedTable<'_, u8> = QuantizedTable::Packed {
            bytes: &[0b1110_0100],
            nbit: 2,
        };
        let mut out = [0.0f32; 4];
        embedding_quantized(packed, 1, 4, &[1.0f32], None, 1, &[0], &mut out).unwrap();
        assert_eq!(out, [-2.0, -1.0, 0.0, 1.0]);
        let e = embedding_quantized(packed, 1, 4, &[1.0f32], None, 1, &[1], &mut out);
        assert_eq!(e, Err(crate::KernelError::IndexOutOfRange { index: 1, size: 1 }));
    }
    use std::vec::Vec;

    #[test]
    fn per_tensor_rounding_and_clamp() {
        // scale 0.5: x*2 = [1.0, 2.5->2, 3.5->4, -2.5->-2, 1000->clamp 127, -1000 -> -128]
        let x = [0.5f32, 1.25, 1.75, -1.25, 500.0, -500.0];
        let mut q = [0i8; 6];
        quantize_per_tensor(&x, 0.5, 0, -128, 127, &mut q);
        assert_eq!(q, [1, 2, 4, -2, 127, -128]);
        // zero point 10, u8: 0.5*2+10 = 11 ; -1.25*2 = -2.5 -> -2 + 10 = 8
        let mut u = [0u8; 2];
        quantize_per_tensor(&[0.5f32, -1.25], 0.5, 10, 0, 255, &mut u);
        assert_eq!(u, [11, 8]);
        let mut back = [0.0f32; 2];
        dequantize_per_tensor(&u, 0.5, 10, &mut back);
        assert_eq!(back, [0.5, -1.0]);
        // half input/output
        let h = [f16::from_f32(0.75)];
        let mut q16 = [0i16];
        quantize_per_tensor(&h, 0.25, 0, -32768, 32767, &mut q16);
        assert_eq!(q16, [3]);
        let mut ho = [f16::ZERO];
        dequantize_per_tensor(&q16, 0.25, 0, &mut ho);
        assert_eq!(ho[0].to_f32(), 0.75);
        let mut d64 = [0.0f64];
        dequantize_per_tensor(&[-3i32], 0.1, 2, &mut d64);
        assert_eq!(d64[0], (-5.0f64) * 0.1);
    }

    #[test]
    fn per_tensor_vs_reference_formula() {
        // Independent reference: f64 reciprocal rounded to f32, f32 product,
        // round-half-even by hand.
        fn rhe(v: f32) -> f32 {
            let f = v.floor();
            let d = v - f;
            if d > 0.5 || (d == 0.5 && (f as i64) % 2 != 0) {
                f + 1.0
            } else {
                f
            }
        }
        let mut s = 1u64;
        let xs: Vec<f32> = (0..5000)
            .map(|_| {
                crate::testing::lcg_step(&mut s);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 40.0
            })
            .collect();
        for &(scale, zp) in &[(0.1f64, 3i64), (0.07, -5), (0.3333, 0)] {
            let mut q = vec![0i8; xs.len()];
            quantize_per_tensor(&xs, scale, zp, -128, 127, &mut q);
            let inv = (1.0 / scale) as f32;
            for (&x, &got) in xs.iter().zip(&q) {
                let want = (rhe(x * inv) + zp as f32).clamp(-128.0, 127.0) as i8;
                assert_eq!(got, want, "x={x} scale={scale}");
            }
        }
    }

    #[test]
    fn per_channel() {
        // [2, 3] with axis 1: scales [1, 0.5, 0.25], zps [0, 1, -1]
        let x = [1.0f32, 1.0, 1.0, -2.0, 0.25, 0.125];
        let scales = [1.0f32, 0.5, 0.25];
        let zps = [0i64, 1, -1];
        let mut q = [0i8; 6];
        quantize_per_channel(&x, &[2, 3], &scales, &zps, 1, -128, 127, &mut q);
        // row0: 1/1=1 ; 1/0.5=2+1=3 ; 1/0.25=4-1=3
        // row1: -2 ; 0.5 -> 0 (half even) +1 = 1 ; 0.5 -> 0 - 1 = -1
        assert_eq!(q, [1, 3, 3, -2, 1, -1]);
        let mut d = [0.0f32; 6];
        dequantize_per_channel(&q, &[2, 3], &scales, Some(&zps[..]), 1, &mut d);
        assert_eq!(d, [1.0, 1.0, 1.0, -2.0, 0.0, 0.0]);
        // axis 0, no zero points
        let mut d = [0.0f32; 6];
        dequantize_per_channel::<i8, f64, i64, f32>(&q, &[2, 3], &[2.0, 3.0], None, 0, &mut d);
        assert_eq!(d, [2.0, 6.0, 6.0, -6.0, 3.0, -3.0]);
        // zero-size
        let e: [f32; 0] = [];
        let mut eq: [u8; 0] = [];
        quantize_per_channel(&e, &[0, 3], &scales, &zps, 1, 0, 255, &mut eq);
    }
}
