//! 3 × 3 convolutions of stride 1 by Winograd's minimal filtering
//! F(2 × 2, 3 × 3) (Lavin and Gray, 2015): each 2 × 2 block of output
//! pixels (a tile) comes from the 4 × 4 input pixels under it, which are
//! transformed (`Bᵀ d B`), multiplied channel by channel against the
//! transformed filter (`G g Gᵀ`, prepared once) and transformed back
//! (`Aᵀ m A`). The multiplications are 16 matrix products of tiles by
//! channels, one per point of the 4 × 4 transform: 16 products per tile and
//! channel pair where the direct convolution does 36, so ResNet's 3 × 3
//! layers, which run the direct product near the FMA peak, have 2.25×
//! less arithmetic to do. The transforms add, subtract and halve only; the
//! results differ from the direct sum's by rounding (a few units in the
//! last place of the inputs' magnitude).
//!
//! The tiles go in blocks whose transformed inputs and products stay in L2
//! while the 16 products run; with threads, each part takes an even share
//! of the tiles.
use super::Conv2dNhwc;
use crate::activation::Activation;
use crate::cpu::Isa;
use crate::gemm::{gemm_packed, pack_with, packed_len, Epilogue};

/// Tiles per block: 7 row tiles of 8 (or 8 of 7) in each of the 16
/// products; the 4 × 4 tiles of one row of a 112-pixel-wide output, two
/// rows of a 56-wide one.
const BLOCK: usize = 56;

/// Parts a convolution splits into across threads (each needs its own
/// block buffers in the scratch); past that many threads, its products no
/// longer split.
const PARTS: usize = 2;

/// Channels the transforms handle at once (a 512-bit vector).
const L: usize = 16;

impl Conv2dNhwc {
    /// Whether [`super::conv2d_folded`] runs this convolution by
    /// Winograd's F(2 × 2, 3 × 3) when asked to ([`super::Algorithm`]):
    /// ungrouped, 3 × 3, stride 1, undilated, at least 64 input and output
    /// channels (whole vectors of 16), and at least 14 × 14 outputs. Fewer
    /// channels leave the products too shallow to run at speed; on a 7 × 7
    /// image, the transformed filter (16 matrices where the direct one has
    /// 9) is read from memory for 16 tiles.
    pub fn winograd(&self) -> bool {
        let w = &self.window;
        self.groups == 1
            && (
                w.kernel_h,
                w.kernel_w,
                w.stride_h,
                w.stride_w,
                w.dilation_h,
                w.dilation_w,
            ) == (3, 3, 1, 1, 1, 1)
            && self.in_c >= 64
            && self.out_c >= 64
            && self.in_c.is_multiple_of(L)
            && self.out_c.is_multiple_of(L)
            && w.out_h >= 14
            && w.out_w >= 14
    }

    /// Floats of the transformed filter: 16 packed `C × O` matrices.
    pub(super) fn winograd_filter_len(&self) -> usize {
        16 * packed_len(self.in_c, self.out_c)
    }

    /// Scratch floats of a Winograd convolution: per part, a block's
    /// transformed inputs (16 × tiles × C) and products (16 × tiles × O).
    pub(super) fn winograd_scratch_len(&self) -> usize {
        PARTS * 16 * BLOCK * (self.in_c + self.out_c)
    }

    /// Tiles down and across an image.
    fn tiles(&self) -> (usize, usize) {
        (self.window.out_h.div_ceil(2), self.window.out_w.div_ceil(2))
    }

    /// The image, tile row and tile column of tile `tile`.
    fn tile_at(&self, tile: usize) -> (usize, usize, usize) {
        let (th, tw) = self.tiles();
        (tile / (th * tw), tile / tw % th, tile % tw)
    }
}

/// Writes the transformed filter of `g` (see [`Conv2dNhwc::winograd`])
/// into `filter` ([`Conv2dNhwc::winograd_filter_len`] floats): for each of
/// the 16 points `(ξ, ν)`, the `C × O` matrix of `(G g Gᵀ)[ξ][ν]` over
/// each input and output channel's 3 × 3 filter `g`, packed. `tap(o, c,
/// ki, kj)` is the filter's weight (scaled as it is to be applied).
pub(super) fn transform_filter(g: &Conv2dNhwc, filter: &mut [f32], tap: impl Fn(usize, usize, usize, usize) -> f32) {
    // G: rows of the 4 points by the 3 taps.
    const G: [[f64; 3]; 4] = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]];
    let (c, o) = (g.in_c, g.out_c);
    let len = packed_len(c, o);
    for (k, region) in filter[..16 * len].chunks_exact_mut(len).enumerate() {
        let (xi, nu) = (k / 4, k % 4);
        pack_with(c, o, region, |ci, oi| {
            let mut u = 0.0f64;
            for (ki, &gi) in G[xi].iter().enumerate() {
                for (kj, &gj) in G[nu].iter().enumerate() {
                    u += gi * gj * tap(oi, ci, ki, kj) as f64;
                }
            }
            u as f32
        });
    }
}

/// Runs `g` (see [`Conv2dNhwc::winograd`]) on `x` into `out` by
/// F(2 × 2, 3 × 3), the filter transformed by [`transform_filter`],
/// finished by `e` (bias, residual, clamp and activation);
/// `scratch`: [`Conv2dNhwc::winograd_scratch_len`] floats.
pub(super) fn conv(g: &Conv2dNhwc, x: &[f32], filter: &[f32], e: &Epilogue<'_>, out: &mut [f32], scratch: &mut [f32]) {
    let (th, tw) = g.tiles();
    let tiles = g.window.batch * th * tw;
    let share = 16 * BLOCK * (g.in_c + g.out_c);
    // Even shares of the tiles, at least a row tile of 8 each (a 14 × 14
    // output's 49 split 25 and 24, where blocks of 56 would leave the
    // second thread idle).
    let parts = crate::parallel::threads().min(PARTS).min(tiles / 8).max(1);
    let out = &mut out[..g.window.out_pixels() * g.out_c];
    // SAFETY: each part writes, through `view`, the pixels of its own
    // tiles, which no other part writes or reads; `out` outlives
    // `run_parts`.
    let view = unsafe { crate::parallel::Shared::new(OutView(out.as_mut_ptr(), out.len())) };
    let per = tiles.div_ceil(parts);
    let shares = crate::parallel::Pieces::new(&mut scratch[..parts * share], (0..parts).map(|p| p * share));
    crate::parallel::run_parts(parts, &|p| {
        let Some(buf) = shares.take(p) else { return };
        let (v, m) = buf[..share].split_at_mut(16 * BLOCK * g.in_c);
        let mine = (p * per).min(tiles)..((p + 1) * per).min(tiles);
        for t0 in mine.clone().step_by(BLOCK) {
            block(g, x, filter, e, t0..(t0 + BLOCK).min(mine.end), v, m, view.get());
        }
    });
}

/// The output as a raw view: the parts of [`conv`] write the pixels of
/// their own tiles, which interleave across rows.
#[derive(Clone, Copy)]
struct OutView(*mut f32, usize);

/// Tiles `t` of `g`: their inputs transformed into `v` (16 matrices of
/// `t.len() × C`), the 16 products into `m` (`t.len() × O` each), and
/// their outputs transformed back into `out`.
#[allow(clippy::too_many_arguments)]
fn block(
    g: &Conv2dNhwc,
    x: &[f32],
    filter: &[f32],
    e: &Epilogue<'_>,
    t: core::ops::Range<usize>,
    v: &mut [f32],
    m: &mut [f32],
    out: OutView,
) {
    let (c, o, n) = (g.in_c, g.out_c, t.len());
    let len = packed_len(c, o);
    let (v, m) = (&mut v[..16 * n * c], &mut m[..16 * n * o]);
    let isa = Isa::detect();
    for (i, tile) in t.clone().enumerate() {
        transform_input(g, x, tile, i, n, v, isa);
    }
    let plain = Epilogue::new(None, false);
    for k in 0..16 {
        let (a, b) = (&v[k * n * c..][..n * c], &filter[k * len..][..len]);
        gemm_packed(n, o, c, a, c, b, &plain, &mut m[k * n * o..][..n * o], o);
    }
    for (i, tile) in t.enumerate() {
        transform_output(g, tile, i, n, m, e, out, isa);
    }
}

/// `Bᵀ d B` of tile `tile`'s 4 × 4 input pixels `d` (zeros outside the
/// image), written as row `i` of each of the 16 matrices of `v` (`n`
/// rows of `C` each), in the vectors of `isa` (the CPU has it).
fn transform_input(g: &Conv2dNhwc, x: &[f32], tile: usize, i: usize, n: usize, v: &mut [f32], isa: Isa) {
    let (win, c) = (&g.window, g.in_c);
    let (img, ty, tx) = g.tile_at(tile);
    // The 16 input pixels' channels, or None outside the image.
    let pixel = |r: usize, s: usize| -> Option<&[f32]> {
        let ih = (2 * ty + r).checked_sub(win.pad_top).filter(|&h| h < win.in_h)?;
        let iw = (2 * tx + s).checked_sub(win.pad_left).filter(|&w| w < win.in_w)?;
        Some(&x[((img * win.in_h + ih) * win.in_w + iw) * c..][..c])
    };
    let d: [Option<&[f32]>; 16] = core::array::from_fn(|k| pixel(k / 4, k % 4));
    assert!(c % L == 0 && v.len() >= 16 * n * c && i < n);
    // SAFETY: `isa` is the CPU's; each pixel holds `c` floats, a whole
    // number of vectors, and `v` 16 matrices of `n` rows of `c`.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => lanes::input_avx512(&d, c, i, n, v),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => lanes::input_avx2(&d, c, i, n, v),
            _ => lanes::input::<[f32; L]>(&d, c, i, n, v),
        }
    }
}

/// Tile `tile`'s 2 × 2 outputs from row `i` of the 16 products in `m`
/// (`n` rows of `O` each): `Aᵀ m A`, then `e`'s bias, residual, clamp and
/// activation, stored where they lie inside the image; in the vectors of
/// `isa` (the CPU has it).
#[allow(clippy::too_many_arguments)]
fn transform_output(
    g: &Conv2dNhwc,
    tile: usize,
    i: usize,
    n: usize,
    m: &[f32],
    e: &Epilogue<'_>,
    out: OutView,
    isa: Isa,
) {
    let (win, o) = (&g.window, g.out_c);
    let (img, ty, tx) = g.tile_at(tile);
    // The tile's pixels inside the image (the last row or column of tiles
    // may hang over an odd size).
    let pixel = |a: usize, b: usize| -> Option<usize> {
        let (oh, ow) = (2 * ty + a, 2 * tx + b);
        (oh < win.out_h && ow < win.out_w).then_some((img * win.out_h + oh) * win.out_w + ow)
    };
    let pixels: [Option<usize>; 4] = core::array::from_fn(|k| pixel(k / 2, k % 2));
    for &px in pixels.iter().flatten() {
        assert!((px + 1) * o <= out.1, "pixel {px} outside the output");
    }
    assert!(o % L == 0 && m.len() >= 16 * n * o && i < n);
    assert!(e.bias.is_none_or(|b| b.len() >= o) && e.residual.is_none_or(|r| r.len() >= out.1));
    // SAFETY: `isa` is the CPU's; the pixels are inside the output
    // (checked above) and this tile's alone (see `conv`); `m`, the bias
    // and the residual hold what the transform reads (checked above).
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => lanes::output_avx512(m, i, n, o, e, &pixels, out),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => lanes::output_avx2(m, i, n, o, e, &pixels, out),
            _ => lanes::output::<[f32; L]>(m, i, n, o, e, &pixels, out),
        }
    }
    if e.activation != Activation::Identity {
        for px in pixels.into_iter().flatten() {
            // SAFETY: as above, this tile's pixel, `o` floats inside the
            // output.
            let row = unsafe { core::slice::from_raw_parts_mut(out.0.add(px * o), o) };
            e.activation.apply(row);
        }
    }
}

/// The transforms, written once over a vector of 16 channels
/// ([`F32x16`](crate::f32x16::F32x16)):
/// one AVX-512 register, two AVX2 ones, or an array the compiler
/// vectorizes as it can (other CPUs; on x86, left to it, the compiler
/// vectorized the arrays across the four rows with gathers and scatters,
/// a third of the convolution's time on AVX-512). Every one adds in the
/// same order: the same bits on every CPU.
mod lanes {
    use super::{Epilogue, OutView, L};
    use crate::f32x16::F32x16;

    /// [`super::transform_input`]'s transform of the pixels `d` (`c`
    /// channels each, or zeros) into row `i` of the 16 matrices of `v`
    /// (`n` rows of `c`).
    ///
    /// # Safety
    /// The CPU runs `V`; `c` is a multiple of 16, every pixel of `d` holds
    /// `c` floats, `i < n` and `v` holds `16 · n · c`.
    #[inline(always)]
    pub(super) unsafe fn input<V: F32x16>(d: &[Option<&[f32]>; 16], c: usize, i: usize, n: usize, v: &mut [f32]) {
        for c0 in (0..c).step_by(L) {
            let x: [V; 16] = core::array::from_fn(|k| match d[k] {
                // SAFETY: 16 floats of the pixel's `c`.
                Some(p) => unsafe { V::load(p.as_ptr().add(c0)) },
                None => V::zero(),
            });
            // Bᵀ down the columns, then B along the rows.
            let mut t = [V::zero(); 16];
            for s in 0..4 {
                let [d0, d1, d2, d3] = [x[s], x[4 + s], x[8 + s], x[12 + s]];
                [t[s], t[4 + s], t[8 + s], t[12 + s]] = [d0.sub(d2), d1.add(d2), d2.sub(d1), d1.sub(d3)];
            }
            for r in 0..4 {
                let [t0, t1, t2, t3] = [t[4 * r], t[4 * r + 1], t[4 * r + 2], t[4 * r + 3]];
                let y = [t0.sub(t2), t1.add(t2), t2.sub(t1), t1.sub(t3)];
                for (s, lanes) in y.into_iter().enumerate() {
                    // SAFETY: row `i` of matrix `4r + s`, 16 of its `c`.
                    unsafe { lanes.store(v.as_mut_ptr().add(((r * 4 + s) * n + i) * c + c0)) };
                }
            }
        }
    }

    /// [`super::transform_output`]'s transform: row `i` of the 16
    /// products in `m` (`n` rows of `o`) transformed back, finished by
    /// `e`'s bias, residual and clamp, and stored at `pixels`.
    ///
    /// # Safety
    /// The CPU runs `V`; `o` is a multiple of 16, `i < n`, `m` holds
    /// `16 · n · o`, the bias `o` floats and the residual the output's;
    /// each of `pixels` is inside `out` (`o` floats each) and written by
    /// this call alone.
    #[inline(always)]
    pub(super) unsafe fn output<V: F32x16>(
        m: &[f32],
        i: usize,
        n: usize,
        o: usize,
        e: &Epilogue<'_>,
        pixels: &[Option<usize>; 4],
        out: OutView,
    ) {
        let (lo, hi) = (V::splat(e.min), V::splat(e.max));
        for o0 in (0..o).step_by(L) {
            // SAFETY: row `i` of each product, 16 of its `o`.
            let x: [V; 16] = core::array::from_fn(|k| unsafe { V::load(m.as_ptr().add((k * n + i) * o + o0)) });
            // Aᵀ down the columns, then A along the rows: m0 + m1 + m2 and
            // m1 − m2 − m3.
            let mut t = [V::zero(); 8];
            for s in 0..4 {
                let [m0, m1, m2, m3] = [x[s], x[4 + s], x[8 + s], x[12 + s]];
                [t[s], t[4 + s]] = [m0.add(m1).add(m2), m1.sub(m2).sub(m3)];
            }
            let bias = match e.bias {
                // SAFETY: 16 of the bias's `o` floats.
                Some(b) => unsafe { V::load(b.as_ptr().add(o0)) },
                None => V::zero(),
            };
            for a in 0..2 {
                let [m0, m1, m2, m3] = [t[4 * a], t[4 * a + 1], t[4 * a + 2], t[4 * a + 3]];
                let y = [m0.add(m1).add(m2).add(bias), m1.sub(m2).sub(m3).add(bias)];
                for (b, mut r) in y.into_iter().enumerate() {
                    let Some(px) = pixels[a * 2 + b] else { continue };
                    let at = px * o + o0;
                    if let Some(res) = e.residual {
                        // SAFETY: 16 floats of the residual, at the pixel.
                        r = r.add(unsafe { V::load(res.as_ptr().add(at)) });
                    }
                    // SAFETY: by the caller, this pixel's floats are
                    // inside the output and this call's alone.
                    unsafe { r.clamp(lo, hi).store(out.0.add(at)) };
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    pub(super) use x86::*;

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use super::{input, output, Epilogue, OutView};
        use crate::f32x16::{Ymm2, Zmm};

        /// [`input`] and [`output`] compiled for one instruction set, on
        /// its lanes.
        macro_rules! on {
            ($feature:literal, $lanes:ty, $input:ident, $output:ident) => {
                /// [`input`] on `$lanes`.
                ///
                /// # Safety
                /// The CPU supports the instruction set; as for [`input`].
                #[target_feature(enable = $feature)]
                pub(in super::super) unsafe fn $input(
                    d: &[Option<&[f32]>; 16],
                    c: usize,
                    i: usize,
                    n: usize,
                    v: &mut [f32],
                ) {
                    // SAFETY: by the caller.
                    unsafe { input::<$lanes>(d, c, i, n, v) }
                }

                /// [`output`] on `$lanes`.
                ///
                /// # Safety
                /// The CPU supports the instruction set; as for [`output`].
                #[target_feature(enable = $feature)]
                pub(in super::super) unsafe fn $output(
                    m: &[f32],
                    i: usize,
                    n: usize,
                    o: usize,
                    e: &Epilogue<'_>,
                    pixels: &[Option<usize>; 4],
                    out: OutView,
                ) {
                    // SAFETY: by the caller.
                    unsafe { output::<$lanes>(m, i, n, o, e, pixels, out) }
                }
            };
        }
        on!("avx512f", Zmm, input_avx512, output_avx512);
        on!("avx2", Ymm2, input_avx2, output_avx2);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::nhwc::tests::{reference, rng, work, Dims4};
    use crate::nhwc::{conv2d_folded, Algorithm, BatchNormFold, FilterLayout, FoldedConv};
    use std::vec;
    use std::vec::Vec;

    /// `conv2d_folded` by F(2 × 2, 3 × 3) against the direct sum in f64:
    /// both filter layouts, a batch norm, a residual, a clamp and an
    /// activation; zero padding on every side, none, and lopsided; odd
    /// output sizes (the last tiles hang over), two images, 80 outputs
    /// (vectors of 16 past the strips of 32); on one thread and two (an
    /// even share of the tiles each), which give the same bits. The direct
    /// sum on the same convolutions ([`Algorithm::Direct`]) too.
    #[test]
    fn winograd_convolutions_match_the_direct_sum() {
        // (input, outputs, padding top, bottom, left, right)
        let cases: &[(Dims4, usize, [usize; 4])] = &[
            ([1, 14, 14, 64], 64, [1, 1, 1, 1]),
            ([2, 15, 17, 64], 80, [1, 1, 1, 1]),
            ([1, 16, 17, 96], 64, [0, 0, 0, 0]),
            ([1, 15, 16, 64], 64, [2, 0, 0, 1]),
        ];
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        for (i, &(input, o, pad)) in cases.iter().enumerate() {
            let c = input[3];
            let g = Conv2dNhwc::regular(&input, &[o, 3, 3, c], [1, 1], pad, [1, 1], 1).unwrap();
            assert!(g.winograd(), "case {i} is not a Winograd convolution");
            if crate::testing::too_large_for_miri(work(&g), 1 << 22) {
                continue;
            }
            let seed = 40 + i as u64;
            // XNNPACK's [O, kH, kW, C], and the same filter as PyTorch's
            // [O, C, kH, kW].
            let w = rng(seed, o * 9 * c);
            let mut torch = vec![0.0f32; w.len()];
            for oc in 0..o {
                for tap in 0..9 {
                    for ci in 0..c {
                        torch[(oc * c + ci) * 9 + tap] = w[(oc * 9 + tap) * c + ci];
                    }
                }
            }
            let x = rng(seed + 1, input.iter().product());
            let bias = rng(seed + 2, o);
            let residual = rng(seed + 3, g.window.out_pixels() * o);
            let bn_weight = rng(seed + 4, o);
            let bn_bias = rng(seed + 5, o);
            let mean = rng(seed + 6, o);
            let var: Vec<f32> = rng(seed + 7, o).iter().map(|v| v.abs() + 0.5).collect();
            let bn = BatchNormFold {
                weight: Some(&bn_weight),
                bias: Some(&bn_bias),
                mean: &mean,
                var: &var,
                eps: 1e-5,
            };
            let (min, max) = (-1.0, 1.5);
            let sums = reference(&g, &x, &w, false, Some(&bias), f32::NEG_INFINITY, f32::INFINITY);
            let activation = if i % 2 == 0 {
                Activation::Identity
            } else {
                Activation::Hardswish
            };
            let want: Vec<f32> = sums
                .iter()
                .zip(&residual)
                .enumerate()
                .map(|(at, (&s, &r))| {
                    let oc = at % o;
                    let rstd = 1.0 / (var[oc] as f64 + 1e-5).sqrt();
                    let y = (s as f64 - mean[oc] as f64) * rstd * bn_weight[oc] as f64 + bn_bias[oc] as f64;
                    let mut v = [((y + r as f64) as f32).max(min).min(max)];
                    activation.apply(&mut v);
                    v[0]
                })
                .collect();
            // Each algorithm's results, which must not depend on the
            // layout or the thread count.
            let mut outs: [Vec<Vec<f32>>; 2] = [vec![], vec![]];
            let algorithms = [Algorithm::Winograd, Algorithm::Direct];
            assert!(g.folded_len(Algorithm::Winograd) > g.folded_len(Algorithm::Direct));
            for (layout, filter) in [(FilterLayout::Xnnpack, &w), (FilterLayout::Torch, &torch)] {
                for (a, &algorithm) in algorithms.iter().enumerate() {
                    let conv = FoldedConv {
                        geometry: g,
                        algorithm,
                        layout,
                        w: filter,
                        bias: Some(&bias),
                        bn: Some(bn),
                        residual: Some(&residual),
                        min,
                        max,
                        activation,
                    };
                    let mut kept = vec![0.0f32; g.folded_len(algorithm)];
                    conv.prepare(&mut kept);
                    for threads in [1, 2] {
                        crate::parallel::set_threads(threads);
                        let mut out = vec![f32::NAN; want.len()];
                        let mut scratch = vec![f32::NAN; g.folded_scratch_len(algorithm)];
                        conv2d_folded(&conv, &x, &kept, &mut out, &mut scratch);
                        crate::parallel::set_threads(1);
                        for (at, (got, want)) in out.iter().zip(&want).enumerate() {
                            assert!(
                                (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                                "case {i}, {algorithm:?}, {layout:?}, {threads} thread(s), at {at}: {got} vs {want}"
                            );
                        }
                        outs[a].push(out);
                    }
                }
            }
            for (outs, algorithm) in outs.iter().zip(algorithms) {
                for out in &outs[1..] {
                    assert!(
                        out.iter().zip(&outs[0]).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "case {i}, {algorithm:?}: layouts or thread counts differ"
                    );
                }
            }
            // The two algorithms round differently: if they agreed to the
            // bit, the direct one would not have run.
            assert!(
                outs[0][0]
                    .iter()
                    .zip(&outs[1][0])
                    .any(|(a, b)| a.to_bits() != b.to_bits()),
                "case {i}: Winograd's results are the direct sum's, bit for bit"
            );
        }
    }
}
