//! Transposed 2-d convolution ("deconvolution") over NHWC images, as
//! XNNPACK's `XNNConvTranspose2d` defines it: each input pixel scatters
//! its window of the filter into the output, which is then cropped by the
//! padding (and grown by the adjustment at its bottom and right).

/// The geometry of a transposed convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deconv2dNhwc {
    pub batch: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_h: usize,
    pub out_w: usize,
    pub kernel: [usize; 2],
    /// The upsampling: input pixel `iy` lands at output row `iy · stride`.
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    /// Output rows and columns cropped at the top and left.
    pub pad_top: usize,
    pub pad_left: usize,
    pub groups: usize,
    pub group_in: usize,
    pub group_out: usize,
}

impl Deconv2dNhwc {
    /// The geometry of `x` (`[N, H, W, C]`) through a filter of `kernel`
    /// with `groups` groups of `group_in → group_out` channels; `padding`
    /// is `[top, right, bottom, left]`, `adjustment` `[height, width]`.
    /// `None` when the sizes do not fit (a channel count, or padding that
    /// crops the whole output).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        x: &[usize],
        kernel: [usize; 2],
        stride: [usize; 2],
        dilation: [usize; 2],
        padding: [usize; 4],
        adjustment: [usize; 2],
        groups: usize,
        group_in: usize,
        group_out: usize,
    ) -> Option<Self> {
        let [batch, in_h, in_w, c] = *x else { return None };
        if groups == 0 || group_in == 0 || group_out == 0 || groups.checked_mul(group_in)? != c {
            return None;
        }
        if kernel.contains(&0) || stride.contains(&0) || dilation.contains(&0) || in_h == 0 || in_w == 0 {
            return None;
        }
        let full = |i: usize, k: usize, s: usize, d: usize, a: usize| -> Option<usize> {
            (i - 1)
                .checked_mul(s)?
                .checked_add(d.checked_mul(k - 1)?)?
                .checked_add(1 + a)
        };
        let out_h =
            full(in_h, kernel[0], stride[0], dilation[0], adjustment[0])?.checked_sub(padding[0] + padding[2])?;
        let out_w =
            full(in_w, kernel[1], stride[1], dilation[1], adjustment[1])?.checked_sub(padding[1] + padding[3])?;
        if out_h == 0 || out_w == 0 {
            return None;
        }
        Some(Deconv2dNhwc {
            batch,
            in_h,
            in_w,
            out_h,
            out_w,
            kernel,
            stride,
            dilation,
            pad_top: padding[0],
            pad_left: padding[3],
            groups,
            group_in,
            group_out,
        })
    }

    /// `[N, OH, OW, groups · group_out]`.
    pub fn output_sizes(&self) -> [usize; 4] {
        [self.batch, self.out_h, self.out_w, self.groups * self.group_out]
    }

    /// Elements of the filter: `[groups · group_out, kH, kW, group_in]`.
    pub fn filter_len(&self) -> usize {
        self.groups * self.group_out * self.kernel[0] * self.kernel[1] * self.group_in
    }
}

/// `out = clamp(deconv(x, w) + bias, min, max)`; `w` is laid out
/// `[groups · group_out, kH, kW, group_in]` (XNNPACK's order).
pub fn deconv2d_nhwc(
    g: &Deconv2dNhwc,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    min: f32,
    max: f32,
    out: &mut [f32],
) {
    let (ci, co) = (g.groups * g.group_in, g.groups * g.group_out);
    let [kh, kw] = g.kernel;
    let x = &x[..g.batch * g.in_h * g.in_w * ci];
    let w = &w[..g.filter_len()];
    let out = &mut out[..g.batch * g.out_h * g.out_w * co];
    for px in out.chunks_exact_mut(co) {
        match bias {
            Some(b) => px.copy_from_slice(&b[..co]),
            None => px.fill(0.0),
        }
    }
    for n in 0..g.batch {
        for iy in 0..g.in_h {
            for ix in 0..g.in_w {
                let xp = &x[((n * g.in_h + iy) * g.in_w + ix) * ci..][..ci];
                for ky in 0..kh {
                    // The output row this tap reaches, before the crop.
                    let Some(oy) = (iy * g.stride[0] + ky * g.dilation[0]).checked_sub(g.pad_top) else {
                        continue;
                    };
                    if oy >= g.out_h {
                        continue;
                    }
                    for kx in 0..kw {
                        let Some(ox) = (ix * g.stride[1] + kx * g.dilation[1]).checked_sub(g.pad_left) else {
                            continue;
                        };
                        if ox >= g.out_w {
                            continue;
                        }
                        let op = &mut out[((n * g.out_h + oy) * g.out_w + ox) * co..][..co];
                        for grp in 0..g.groups {
                            let xs = &xp[grp * g.group_in..][..g.group_in];
                            for o in 0..g.group_out {
                                let oc = grp * g.group_out + o;
                                let wr = &w[((oc * kh + ky) * kw + kx) * g.group_in..][..g.group_in];
                                let dot: f32 = xs.iter().zip(wr).map(|(a, b)| a * b).sum();
                                op[oc] += dot;
                            }
                        }
                    }
                }
            }
        }
    }
    if min != f32::NEG_INFINITY || max != f32::INFINITY {
        for v in out.iter_mut() {
            *v = v.max(min).min(max);
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::testing::Lcg;
    use std::{vec, vec::Vec};

    /// The definition, gathered the other way: each output sums the input
    /// pixels whose window reaches it.
    fn reference(g: &Deconv2dNhwc, x: &[f32], w: &[f32], bias: &[f32]) -> Vec<f32> {
        let (ci, co) = (g.groups * g.group_in, g.groups * g.group_out);
        let mut out = vec![0.0f32; g.batch * g.out_h * g.out_w * co];
        for n in 0..g.batch {
            for oy in 0..g.out_h {
                for ox in 0..g.out_w {
                    for oc in 0..co {
                        let grp = oc / g.group_out;
                        let mut acc = bias[oc] as f64;
                        for ky in 0..g.kernel[0] {
                            for kx in 0..g.kernel[1] {
                                let ry = (oy + g.pad_top) as isize - (ky * g.dilation[0]) as isize;
                                let rx = (ox + g.pad_left) as isize - (kx * g.dilation[1]) as isize;
                                if ry < 0
                                    || rx < 0
                                    || !(ry as usize).is_multiple_of(g.stride[0])
                                    || !(rx as usize).is_multiple_of(g.stride[1])
                                {
                                    continue;
                                }
                                let (iy, ix) = (ry as usize / g.stride[0], rx as usize / g.stride[1]);
                                if iy >= g.in_h || ix >= g.in_w {
                                    continue;
                                }
                                for ic in 0..g.group_in {
                                    let xv = x[((n * g.in_h + iy) * g.in_w + ix) * ci + grp * g.group_in + ic];
                                    let wv = w[((oc * g.kernel[0] + ky) * g.kernel[1] + kx) * g.group_in + ic];
                                    acc += xv as f64 * wv as f64;
                                }
                            }
                        }
                        out[((n * g.out_h + oy) * g.out_w + ox) * co + oc] = acc as f32;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn matches_the_gathered_definition() {
        let mut rng = Lcg(7);
        let mut checked = 0;
        // Under Miri every 19th case: 19 is prime to the periods of the
        // choices below, so each still takes all its values (12 cases fit).
        let (step, least) = if cfg!(miri) { (19, 10) } else { (1, 200) };
        for case in (0..300).step_by(step) {
            let groups = 1 + case % 3;
            let (gi, go) = (1 + (case / 3) % 3, 1 + (case / 9) % 3);
            let kernel = [1 + case % 4, 1 + (case / 4) % 3];
            let stride = [1 + case % 3, 1 + (case / 5) % 3];
            let dilation = [1 + (case / 7) % 2, 1 + (case / 11) % 2];
            let padding = [case % 2, (case / 2) % 3, (case / 3) % 2, case % 3];
            let adjustment = [(case / 13) % stride[0], (case / 17) % stride[1]];
            let x_sizes = [1 + case % 2, 1 + case % 5, 1 + (case / 3) % 4, groups * gi];
            let Some(g) = Deconv2dNhwc::new(&x_sizes, kernel, stride, dilation, padding, adjustment, groups, gi, go)
            else {
                continue;
            };
            let x: Vec<f32> = (0..x_sizes.iter().product::<usize>()).map(|_| rng.next()).collect();
            let w: Vec<f32> = (0..g.filter_len()).map(|_| rng.next()).collect();
            let bias: Vec<f32> = (0..groups * go).map(|_| rng.next()).collect();
            let want = reference(&g, &x, &w, &bias);
            let mut got = vec![f32::NAN; want.len()];
            // Under Miri unclamped or clamped, in turn.
            if !cfg!(miri) || checked % 2 == 0 {
                deconv2d_nhwc(&g, &x, &w, Some(&bias), f32::NEG_INFINITY, f32::INFINITY, &mut got);
                for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                        "case {case} {g:?}: [{k}] {a} vs {b}"
                    );
                }
            }
            // And clamped.
            if !cfg!(miri) || checked % 2 == 1 {
                deconv2d_nhwc(&g, &x, &w, Some(&bias), -0.25, 0.5, &mut got);
                for (a, b) in got.iter().zip(&want) {
                    assert!((a - b.clamp(-0.25, 0.5)).abs() <= 1e-4 * (1.0 + b.abs()));
                }
            }
            checked += 1;
        }
        assert!(checked > least, "only {checked} geometries fit");
    }

    #[test]
    fn sizes_that_do_not_fit_are_refused() {
        assert!(Deconv2dNhwc::new(&[1, 2, 2, 3], [2, 2], [1, 1], [1, 1], [0; 4], [0, 0], 2, 1, 1).is_none());
        assert!(Deconv2dNhwc::new(&[1, 1, 1, 1], [1, 1], [1, 1], [1, 1], [1, 0, 0, 0], [0, 0], 1, 1, 1).is_none());
        let g = Deconv2dNhwc::new(&[1, 3, 4, 2], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1], [1, 0], 1, 2, 5).unwrap();
        // (3 - 1) · 2 + 3 + 1 - 2 = 6; (4 - 1) · 2 + 3 - 2 = 7.
        assert_eq!(g.output_sizes(), [1, 6, 7, 5]);
    }
}
