//! XNNPACK's dynamically quantized fully connected layers (QD8), for the
//! `qdint8` subgraphs of ExecuTorch's XNNPACK delegate (the dynamic
//! quantizer's linears, the LLM export's `8da4w`).
//!
//! Each row of the `f32` input is quantized when the layer runs, to `i8`
//! with a scale and zero point of its own; the weights are `i8` or 4-bit,
//! with a scale per output channel or per block of `group` inputs. The
//! integer products are exact; the `f32` steps after them follow
//! XNNPACK's x86 (AVX2) kernels operation by operation, fused
//! multiply-adds included, so that the outputs are XNNPACK's to the bit.
use crate::bf16;
use crate::qs8::round_even;

/// The weights of a layer: `[n, k]`, row-major.
#[derive(Clone, Copy, Debug)]
pub enum Weights<'a> {
    /// `i8` with one scale per output channel (`qcint8`).
    Channelwise8 { w: &'a [i8], scales: &'a [f32] },
    /// 4-bit, stored `w + 8` two to a byte (even `k` in the low nibble),
    /// with one scale per output channel (`qcint4`).
    Channelwise4 { w: &'a [u8], scales: &'a [f32] },
    /// 4-bit as above, with a bf16 scale per block of `group` inputs of
    /// each output channel, `[n, k / group]` (`qbint4`).
    Blockwise4 {
        w: &'a [u8],
        scales: &'a [bf16],
        group: usize,
    },
}

/// A row's quantization: `q = clamp(round_even(x · multiplier) +
/// zero_point)`, `x ≈ (q - zero_point) · scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowQuant {
    pub zero_point: i32,
    pub multiplier: f32,
    /// `1 / multiplier`, rounded: the scale the outputs are multiplied by.
    pub scale: f32,
}

/// XNNPACK's asymmetric parameters of a row whose elements lie in `[min,
/// max]` (`xnn_qd8_asymmetric_quantization_params`): the range is widened
/// to hold 0 and mapped onto the 255 steps of `i8`, the zero point nudged
/// to the side with more room.
pub fn row_quant(min: f32, max: f32) -> RowQuant {
    let (lo, hi) = (min.min(0.0), max.max(0.0));
    let multiplier = if lo == hi { 1.0 } else { 255.0 / (hi - lo) };
    let (dlo, dhi) = (lo * multiplier, hi * multiplier);
    let zp = if (-128.0 + dlo) + (127.0 + dhi) > 0.0 {
        -128.0 - dlo
    } else {
        127.0 - dhi
    };
    RowQuant {
        zero_point: libm::rintf(zp.clamp(-128.0, 127.0)) as i32,
        multiplier,
        scale: 1.0 / multiplier,
    }
}

/// Quantizes one row into `out` (as long as `x`); returns its parameters.
pub fn quantize_row(x: &[f32], out: &mut [i8]) -> RowQuant {
    let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
    for &v in x {
        min = min.min(v);
        max = max.max(v);
    }
    let q = row_quant(min, max);
    for (o, &v) in out.iter_mut().zip(x) {
        // x86: min(x · m, 32767) (a NaN becomes 32767), round, then
        // saturating packs.
        let p = v * q.multiplier;
        let r = if p.is_nan() {
            32767
        } else {
            round_even(p.clamp(-32768.0, 32767.0)) as i32
        };
        *o = (r + q.zero_point).clamp(-128, 127) as i8;
    }
    q
}

/// The 4-bit weight at `i` of a packed matrix, signed.
#[inline(always)]
fn nibble(w: &[u8], i: usize) -> i32 {
    let byte = w[i / 2];
    let u = if i.is_multiple_of(2) { byte & 0xf } else { byte >> 4 };
    u as i32 - 8
}

/// A bf16 widened to `f32` (exactly).
#[inline(always)]
fn widen(s: bf16) -> f32 {
    f32::from_bits((s.to_bits() as u32) << 16)
}

/// `out[r, c] = clamp(x[r, :] · w[c, :] + bias[c], min, max)` over `rows`
/// rows of `k` inputs and `n` outputs, with each input row quantized as
/// XNNPACK does (into `xq`, `k` bytes of scratch).
#[allow(clippy::too_many_arguments)]
pub fn fully_connected(
    x: &[f32],
    rows: usize,
    k: usize,
    n: usize,
    weights: &Weights<'_>,
    bias: Option<&[f32]>,
    min: f32,
    max: f32,
    xq: &mut [i8],
    out: &mut [f32],
) {
    let xq = &mut xq[..k];
    for r in 0..rows {
        let q = quantize_row(&x[r * k..][..k], xq);
        let o = &mut out[r * n..][..n];
        for (c, o) in o.iter_mut().enumerate() {
            let b = bias.map_or(0.0, |b| b[c]);
            let y = match *weights {
                Weights::Channelwise8 { w, scales } => {
                    let acc = centred_dot(xq, q.zero_point, |i| w[c * k + i] as i32);
                    libm::fmaf(acc as f32 * q.scale, scales[c], b)
                }
                Weights::Channelwise4 { w, scales } => {
                    let acc = centred_dot(xq, q.zero_point, |i| nibble(w, c * k + i));
                    libm::fmaf(acc as f32 * q.scale, scales[c], b)
                }
                Weights::Blockwise4 { w, scales, group } => {
                    let blocks = k / group;
                    let s = &scales[c * blocks..][..blocks];
                    let sum = blockwise_sum(xq, q.zero_point, |i| nibble(w, c * k + i), s, group);
                    libm::fmaf(sum, q.scale, b)
                }
            };
            // x86's max_ps(y, min) then min_ps: a NaN becomes `min`.
            let y = if y > min { y } else { min };
            *o = if y < max { y } else { max };
        }
    }
}

/// `Σ (xq[i] - zero_point) · w(i)`, wrapping as `i32`.
#[inline(always)]
fn centred_dot(xq: &[i8], zero_point: i32, w: impl Fn(usize) -> i32) -> i32 {
    let mut acc = 0i32;
    let mut wsum = 0i32;
    for (i, &v) in xq.iter().enumerate() {
        let wi = w(i);
        acc = acc.wrapping_add(v as i32 * wi);
        wsum = wsum.wrapping_add(wi);
    }
    acc.wrapping_sub(zero_point.wrapping_mul(wsum))
}

/// One output of a blockwise 4-bit layer before its row scale and bias,
/// summed as XNNPACK's AVX2 kernel sums it: the zero point's share first
/// (the weight sums of each 16 inputs times their block's scale,
/// subtracted in order), then per block four partial products (inputs `i`
/// with `i mod 8` in `{2j, 2j + 1}`), each fused into a lane of its own,
/// and the lanes added in pairs.
fn blockwise_sum(xq: &[i8], zero_point: i32, w: impl Fn(usize) -> i32, scales: &[bf16], group: usize) -> f32 {
    let k = xq.len();
    let mut ksum = 0.0f32;
    let mut start = 0;
    while start < k {
        let chunk: i32 = (start..(start + 16).min(k)).map(&w).sum();
        ksum -= chunk as f32 * widen(scales[start / group]);
        start += 16;
    }
    let mut lanes = [ksum * zero_point as f32, 0.0, 0.0, 0.0];
    for (b, &s) in scales.iter().enumerate() {
        let s = widen(s);
        let mut m = [0i32; 4];
        for i in b * group..(b + 1) * group {
            m[(i % 8) / 2] += xq[i] as i32 * w(i);
        }
        for (lane, &mj) in lanes.iter_mut().zip(&m) {
            *lane = libm::fmaf(mj as f32, s, *lane);
        }
    }
    (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_quantized_over_a_range_holding_zero() {
        // [0.5, 2.0] widens to [0, 2]: 255 / 2 per unit, zero point -128.
        let q = row_quant(0.5, 2.0);
        assert_eq!(q.multiplier, 127.5);
        assert_eq!(q.zero_point, -128);
        assert_eq!(q.scale, 1.0 / 127.5);
        // A row of zeros.
        assert_eq!(
            row_quant(0.0, 0.0),
            RowQuant {
                zero_point: 127,
                multiplier: 1.0,
                scale: 1.0
            }
        );
        let mut xq = [0i8; 4];
        let q = quantize_row(&[-1.0, 1.0, 0.0, 0.25], &mut xq);
        assert_eq!(q.multiplier, 127.5);
        // zero point: -128 + 127.5 = -0.5 → -0 (half to even).
        assert_eq!(q.zero_point, 0);
        assert_eq!(xq, [-128, 127, 0, 32]);
    }

    #[test]
    fn channelwise_outputs_are_the_exact_sum_scaled() {
        let x = [0.3f32, -0.7, 1.1, 0.0, 2.0, -2.0, 0.5, 0.25];
        let w: [i8; 8] = [3, -5, 7, 1, -2, 4, 0, 6];
        let run = |weights: Weights<'_>| {
            let (mut xq, mut out) = ([0i8; 4], [0f32; 4]);
            fully_connected(
                &x,
                2,
                4,
                2,
                &weights,
                Some(&[1.0, -1.0]),
                -100.0,
                100.0,
                &mut xq,
                &mut out,
            );
            out
        };
        let out = run(Weights::Channelwise8 {
            w: &w,
            scales: &[0.5, 0.25],
        });
        for r in 0..2 {
            let mut q8 = [0i8; 4];
            let q = quantize_row(&x[r * 4..][..4], &mut q8);
            for c in 0..2 {
                let acc: i32 = (0..4)
                    .map(|i| (q8[i] as i32 - q.zero_point) * w[c * 4 + i] as i32)
                    .sum();
                let want = libm::fmaf(acc as f32 * q.scale, [0.5, 0.25][c], [1.0, -1.0][c]);
                assert_eq!(out[r * 2 + c], want);
            }
        }
        // The same weights as nibbles (w + 8, even k low) give the same.
        let packed: [u8; 4] = core::array::from_fn(|j| ((w[2 * j] + 8) as u8) | (((w[2 * j + 1] + 8) as u8) << 4));
        let out4 = run(Weights::Channelwise4 {
            w: &packed,
            scales: &[0.5, 0.25],
        });
        assert_eq!(out, out4);
    }

    #[test]
    fn blockwise_outputs_approximate_the_real_product() {
        // One output of k = 64 in two blocks of 32.
        let x: [f32; 64] = core::array::from_fn(|i| ((i * 37 % 17) as f32 - 8.0) / 8.0);
        let wv: [i32; 64] = core::array::from_fn(|i| (i * 5 % 16) as i32 - 8);
        let packed: [u8; 32] = core::array::from_fn(|j| ((wv[2 * j] + 8) as u8) | (((wv[2 * j + 1] + 8) as u8) << 4));
        let scales = [bf16::from_f32(0.25), bf16::from_f32(0.5)];
        let mut xq = [0i8; 64];
        let mut out = [0f32; 1];
        let weights = Weights::Blockwise4 {
            w: &packed,
            scales: &scales,
            group: 32,
        };
        fully_connected(
            &x,
            1,
            64,
            1,
            &weights,
            None,
            f32::NEG_INFINITY,
            f32::INFINITY,
            &mut xq,
            &mut out,
        );
        let real: f32 = (0..64)
            .map(|i| x[i] * wv[i] as f32 * if i < 32 { 0.25 } else { 0.5 })
            .sum();
        // Within the activations' quantization error.
        assert!((out[0] - real).abs() < 0.1, "{} vs {real}", out[0]);
    }
}
