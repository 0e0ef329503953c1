//! Pooling over NHWC images: max and average pooling over windows, and
//! global average pooling, each output clamped as it is written.
use super::{clamp, for_each_output, for_each_tap, Window2d};

/// Max pooling: each output channel is the largest input in its window
/// (padding never wins; a NaN does, as in PyTorch), then clamped. `x` is
/// `[N, H, W, C]`, `out` `[N, OH, OW, C]`.
pub fn max_pool2d_nhwc(win: &Window2d, c: usize, x: &[f32], min: f32, max: f32, out: &mut [f32]) {
    let image = win.in_h * win.in_w;
    let x = &x[..win.batch * image * c];
    let (rows, row_len) = (win.batch * win.out_h, win.out_w * c);
    let in_row_len = win.in_w * c;
    let out = &mut out[..rows * row_len];
    // With threads, bands of output rows, as the convolution before it:
    // a large pool (ResNet's, of the 112 × 112 stem) reads megabytes.
    let split_up = crate::parallel::local_bands_for(out.len());
    crate::parallel::for_each_band(out, rows, row_len, 1, split_up, &|rows, band| {
        let mut buf = [f32::NEG_INFINITY; MAX_POOL_ROW];
        for (r, row) in rows.zip(band.chunks_exact_mut(row_len.max(1))) {
            let (n, oh) = (r / win.out_h, r % win.out_h);
            if in_row_len <= MAX_POOL_ROW {
                // Separable: the maximum over the window's rows first, a
                // long run that vectorizes, then over its columns.
                let rows_max = &mut buf[..in_row_len];
                rows_max.fill(f32::NEG_INFINITY);
                for ki in 0..win.kernel_h {
                    if let Some(ih) = win.in_row(oh, ki) {
                        max_into(rows_max, &x[(n * win.in_h + ih) * in_row_len..][..in_row_len]);
                    }
                }
                for (ow, o) in row.chunks_exact_mut(c.max(1)).enumerate() {
                    o.fill(f32::NEG_INFINITY);
                    for kj in 0..win.kernel_w {
                        if let Some(iw) = win.in_col(ow, kj) {
                            max_into(o, &rows_max[iw * c..][..c]);
                        }
                    }
                    clamp(o, min, max);
                }
                continue;
            }
            for (ow, o) in row.chunks_exact_mut(c.max(1)).enumerate() {
                o.fill(f32::NEG_INFINITY);
                for_each_tap(win, oh, ow, |pix, _| max_into(o, &x[(n * image + pix) * c..][..c]));
                clamp(o, min, max);
            }
        }
    });
}

/// Input rows (`W · C` elements) up to this long take max pooling's
/// separable path, with the maximum of a window's rows on the stack
/// (ResNet's 112 × 64 stem rows fit); small on 32-bit targets, whose
/// stacks are a few KB.
const MAX_POOL_ROW: usize = if cfg!(target_pointer_width = "64") {
    8 * 1024
} else {
    256
};

/// `acc[i] = max(acc[i], v[i])`, where a NaN in `v` wins and one in `acc`
/// stays (PyTorch's max pooling): a compare and a select, which vectorize.
#[inline(always)]
fn max_into(acc: &mut [f32], v: &[f32]) {
    for (a, &b) in acc.iter_mut().zip(v) {
        *a = if b > *a || b.is_nan() { b } else { *a };
    }
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
/// channels) of one image `x`, clamped, into `o`. Each channel sums its
/// pixels in order from 0 (the same bits however its channels are
/// grouped), 64 or 16 channels at a time in registers: summed in `o`
/// itself, each add waited for the store of the one before (MobileNetV3's
/// 56 x 56 x 16 took 9.3 us).
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
    let x = &x[..pixels * c];
    let mut done = 0;
    while done < o.len() {
        let c0 = channels.start + done;
        let w = match o.len() - done {
            64.. => sum_pixels::<64>(x, c, c0, 64, &mut o[done..]),
            16.. => sum_pixels::<16>(x, c, c0, 16, &mut o[done..]),
            rest => sum_pixels::<16>(x, c, c0, rest, &mut o[done..]),
        };
        done += w;
    }
    let scale = if pixels == 0 { 0.0 } else { 1.0 / pixels as f32 };
    for v in o.iter_mut() {
        *v *= scale;
    }
    clamp(o, min, max);
}

/// The sums over the pixels of `x` (each `c` channels) of channels `c0 ..
/// c0 + w`, into `o[..w]`, for `w <= W`; returns `w`. Inlined, a constant
/// `w` keeps the sums in registers.
#[inline(always)]
fn sum_pixels<const W: usize>(x: &[f32], c: usize, c0: usize, w: usize, o: &mut [f32]) -> usize {
    let mut acc = [0.0f32; W];
    let acc = &mut acc[..w];
    for px in x.chunks_exact(c) {
        for (a, &v) in acc.iter_mut().zip(&px[c0..c0 + w]) {
            *a += v;
        }
    }
    o[..w].copy_from_slice(acc);
    w
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

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
    fn global_averages_sum_each_channel_in_pixel_order() {
        // 64-, 16-channel and ragged groups (100 = 64 + 16 + 16 + 4), one
        // channel, and MobileNetV3's 56 x 56 x 16 and 7 x 7 x 576 (bands
        // of channels on two threads): each channel's sum in pixel order
        // from 0, to the bit.
        let cases: &[(usize, usize)] = if cfg!(miri) {
            &[(5, 100), (3, 1)]
        } else {
            &[(5, 100), (3, 1), (3136, 16), (49, 576)]
        };
        for &(pixels, c) in cases {
            let mut seed = 3u32;
            let x: Vec<f32> = (0..pixels * c)
                .map(|_| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (seed >> 8) as f32 / 4096.0 - 2048.0
                })
                .collect();
            let want: Vec<f32> = (0..c)
                .map(|ch| {
                    let sum = (0..pixels).fold(0.0f32, |s, p| s + x[p * c + ch]);
                    (sum * (1.0 / pixels as f32)).clamp(-1000.0, 1000.0)
                })
                .collect();
            for threads in [1, 2] {
                #[cfg(not(target_os = "wasi"))]
                let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
                crate::parallel::set_threads(threads);
                let mut out = vec![f32::NAN; c];
                global_avg_pool_nhwc(1, pixels, c, &x, -1000.0, 1000.0, &mut out);
                crate::parallel::set_threads(1);
                let same = out.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{pixels} pixels of {c} channels on {threads} threads");
            }
        }
    }

    #[test]
    fn max_pools_in_bands_on_two_threads_as_on_one() {
        // 56 × 56 outputs of 24 channels (split in bands on two threads),
        // a 3 × 3 window of stride 2 and padding 1, NaNs here and there:
        // each output is its window's largest input, or NaN if it holds one.
        // (Under Miri, a small image, which stays whole.)
        let (h, c) = if cfg!(miri) { (12, 5) } else { (112, 24) };
        let win = Window2d::new(1, h, h, [3, 3], [2, 2], [1, 1, 1, 1], [1, 1]).unwrap();
        let mut seed = 11u32;
        let x: Vec<f32> = (0..h * h * c)
            .map(|i| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                if i % 97 == 0 {
                    f32::NAN
                } else {
                    (seed >> 8) as f32 / 65536.0 - 128.0
                }
            })
            .collect();
        let pooled = |threads: usize| {
            #[cfg(not(target_os = "wasi"))]
            let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
            crate::parallel::set_threads(threads);
            let mut out = vec![0.0f32; win.out_pixels() * c];
            max_pool2d_nhwc(&win, c, &x, f32::NEG_INFINITY, f32::INFINITY, &mut out);
            crate::parallel::set_threads(1);
            out
        };
        let (one, two) = (pooled(1), pooled(2));
        for (p, (o1, o2)) in one.chunks(c).zip(two.chunks(c)).enumerate() {
            let (oh, ow) = (p / win.out_w, p % win.out_w);
            for ch in 0..c {
                let mut want = f32::NEG_INFINITY;
                for_each_tap(&win, oh, ow, |pix, _| {
                    let v = x[pix * c + ch];
                    if v.is_nan() || want.is_nan() {
                        want = f32::NAN;
                    } else {
                        want = want.max(v);
                    }
                });
                for got in [o1[ch], o2[ch]] {
                    assert!(
                        got == want || (got.is_nan() && want.is_nan()),
                        "pixel {p} channel {ch}: {got} for {want}"
                    );
                }
            }
        }
    }
}
