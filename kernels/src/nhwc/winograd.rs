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
    /// Winograd's F(2 × 2, 3 × 3) when asked to ([`super::Algorithm`]): ungrouped, 3 × 3, stride 1, undilated,
    /// at least 64 input and output channels (whole vectors of 16), and
    /// at least 14 × 14 outputs. Fewer channels leave the products too
    /// shallow to run at speed; on a 7 × 7 image, the transformed filter
    /// (16 matrices where the direct one has 9) is read from memory for 16
    /// tiles.
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
    let avx512 = has_avx512();
    for (i, tile) in t.clone().enumerate() {
        transform_input(g, x, tile, i, n, v, avx512);
    }
    let plain = Epilogue::new(None, false);
    for k in 0..16 {
        let (a, b) = (&v[k * n * c..][..n * c], &filter[k * len..][..len]);
        gemm_packed(n, o, c, a, c, b, &plain, &mut m[k * n * o..][..n * o], o);
    }
    for (i, tile) in t.enumerate() {
        transform_output(g, tile, i, n, m, e, out, avx512);
    }
}

/// Whether the transforms run on AVX-512 (asked once a block).
fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::cpu::Isa::detect() == crate::cpu::Isa::Avx512;
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `Bᵀ d B` of tile `tile`'s 4 × 4 input pixels `d` (zeros outside the
/// image), written as row `i` of each of the 16 matrices of `v` (`n`
/// rows of `C` each); by AVX-512 when `avx512` (the CPU has it).
fn transform_input(g: &Conv2dNhwc, x: &[f32], tile: usize, i: usize, n: usize, v: &mut [f32], avx512: bool) {
    let (win, c) = (&g.window, g.in_c);
    let (img, ty, tx) = g.tile_at(tile);
    // The 16 input pixels' channels, or None outside the image.
    let pixel = |r: usize, s: usize| -> Option<&[f32]> {
        let ih = (2 * ty + r).checked_sub(win.pad_top).filter(|&h| h < win.in_h)?;
        let iw = (2 * tx + s).checked_sub(win.pad_left).filter(|&w| w < win.in_w)?;
        Some(&x[((img * win.in_h + ih) * win.in_w + iw) * c..][..c])
    };
    let d: [Option<&[f32]>; 16] = core::array::from_fn(|k| pixel(k / 4, k % 4));
    #[cfg(target_arch = "x86_64")]
    if avx512 {
        // SAFETY: the CPU has AVX-512F.
        return unsafe { avx512::input(&d, c, i, n, v) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = avx512;
    let mut rows = [[0.0f32; L]; 16];
    for c0 in (0..c).step_by(L) {
        for (row, p) in rows.iter_mut().zip(&d) {
            match p {
                Some(p) => row.copy_from_slice(&p[c0..c0 + L]),
                None => *row = [0.0; L],
            }
        }
        // Bᵀ down the columns, then B along the rows, a vector of lanes
        // at a time.
        let mut t = [[0.0f32; L]; 16];
        for s in 0..4 {
            let [d0, d1, d2, d3] = [&rows[s], &rows[4 + s], &rows[8 + s], &rows[12 + s]];
            [t[s], t[4 + s], t[8 + s], t[12 + s]] = [sub(d0, d2), add(d1, d2), sub(d2, d1), sub(d1, d3)];
        }
        for r in 0..4 {
            let [t0, t1, t2, t3] = [&t[4 * r], &t[4 * r + 1], &t[4 * r + 2], &t[4 * r + 3]];
            let y = [sub(t0, t2), add(t1, t2), sub(t2, t1), sub(t1, t3)];
            for (s, lanes) in y.iter().enumerate() {
                let k = r * 4 + s;
                v[(k * n + i) * c + c0..][..L].copy_from_slice(lanes);
            }
        }
    }
}

/// `a + b`, lane by lane.
#[inline(always)]
fn add(a: &[f32; L], b: &[f32; L]) -> [f32; L] {
    let mut r = [0.0; L];
    for l in 0..L {
        r[l] = a[l] + b[l];
    }
    r
}

/// `a − b`, lane by lane.
#[inline(always)]
fn sub(a: &[f32; L], b: &[f32; L]) -> [f32; L] {
    let mut r = [0.0; L];
    for l in 0..L {
        r[l] = a[l] - b[l];
    }
    r
}

/// Tile `tile`'s 2 × 2 outputs from row `i` of the 16 products in `m`
/// (`n` rows of `O` each): `Aᵀ m A`, then `e`'s bias, residual, clamp and
/// activation, stored where they lie inside the image; by AVX-512 when
/// `avx512` (the CPU has it).
#[allow(clippy::too_many_arguments)]
fn transform_output(
    g: &Conv2dNhwc,
    tile: usize,
    i: usize,
    n: usize,
    m: &[f32],
    e: &Epilogue<'_>,
    out: OutView,
    avx512: bool,
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
    #[cfg(not(target_arch = "x86_64"))]
    let _ = avx512;
    for o0 in (0..o).step_by(L) {
        #[cfg(target_arch = "x86_64")]
        if avx512 {
            // SAFETY: the CPU has AVX-512F; the pixels are inside the
            // output (checked above) and this tile's alone (see `conv`).
            unsafe { avx512::output(m, i, n, o, o0, e, &pixels, out) };
            continue;
        }
        let mut rows = [[0.0f32; L]; 16];
        for (k, row) in rows.iter_mut().enumerate() {
            row.copy_from_slice(&m[(k * n + i) * o + o0..][..L]);
        }
        // Aᵀ down the columns, then A along the rows: m0 + m1 + m2 and
        // m1 − m2 − m3.
        let mut t = [[0.0f32; L]; 8];
        for s in 0..4 {
            let [m0, m1, m2, m3] = [&rows[s], &rows[4 + s], &rows[8 + s], &rows[12 + s]];
            [t[s], t[4 + s]] = [add(&add(m0, m1), m2), sub(&sub(m1, m2), m3)];
        }
        let mut bias = [0.0f32; L];
        if let Some(b) = e.bias {
            bias.copy_from_slice(&b[o0..o0 + L]);
        }
        for a in 0..2 {
            let [m0, m1, m2, m3] = [&t[4 * a], &t[4 * a + 1], &t[4 * a + 2], &t[4 * a + 3]];
            let mut y = [add(&add(&add(m0, m1), m2), &bias), add(&sub(&sub(m1, m2), m3), &bias)];
            for (b, r) in y.iter_mut().enumerate() {
                let Some(px) = pixels[a * 2 + b] else { continue };
                let at = px * o + o0;
                if let Some(res) = e.residual {
                    for (v, &x) in r.iter_mut().zip(&res[at..at + L]) {
                        *v += x;
                    }
                }
                for v in r.iter_mut() {
                    *v = v.max(e.min).min(e.max);
                }
                // SAFETY: the pixel is inside the output (checked above)
                // and this tile's alone (see `conv`).
                unsafe { core::ptr::copy_nonoverlapping(r.as_ptr(), out.0.add(at), L) };
            }
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

/// The transforms on AVX-512, a vector of 16 channels at a time: written
/// over arrays of lanes, the portable ones were vectorized across the
/// four rows with gathers and scatters (a third of the convolution's
/// time).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Epilogue, OutView, L};
    use core::arch::x86_64::*;

    /// [`super::transform_input`]'s transform of the pixels `d` (`c`
    /// channels each, or zeros) into row `i` of the 16 matrices of `v`
    /// (`n` rows of `c`).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn input(d: &[Option<&[f32]>; 16], c: usize, i: usize, n: usize, v: &mut [f32]) {
        for c0 in (0..c).step_by(L) {
            let x: [__m512; 16] = core::array::from_fn(|k| match d[k] {
                // SAFETY: 16 floats of the pixel's `c` (`c0 + 16 <= c`).
                Some(p) => unsafe { _mm512_loadu_ps(p[c0..c0 + L].as_ptr()) },
                None => _mm512_setzero_ps(),
            });
            let mut t = [_mm512_setzero_ps(); 16];
            for s in 0..4 {
                let [d0, d1, d2, d3] = [x[s], x[4 + s], x[8 + s], x[12 + s]];
                t[s] = _mm512_sub_ps(d0, d2);
                t[4 + s] = _mm512_add_ps(d1, d2);
                t[8 + s] = _mm512_sub_ps(d2, d1);
                t[12 + s] = _mm512_sub_ps(d1, d3);
            }
            for r in 0..4 {
                let [t0, t1, t2, t3] = [t[4 * r], t[4 * r + 1], t[4 * r + 2], t[4 * r + 3]];
                let y = [
                    _mm512_sub_ps(t0, t2),
                    _mm512_add_ps(t1, t2),
                    _mm512_sub_ps(t2, t1),
                    _mm512_sub_ps(t1, t3),
                ];
                for (s, &lanes) in y.iter().enumerate() {
                    let dst = &mut v[((r * 4 + s) * n + i) * c + c0..][..L];
                    // SAFETY: `dst` holds 16 floats.
                    unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), lanes) };
                }
            }
        }
    }

    /// [`super::transform_output`]'s channels `o0 .. o0 + 16`: row `i` of
    /// the 16 products in `m` (`n` rows of `o`) transformed back, finished
    /// by `e`'s bias, residual and clamp, and stored at `pixels`.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; each of `pixels` must be inside
    /// `out` (`o` floats each) and written by this call alone.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn output(
        m: &[f32],
        i: usize,
        n: usize,
        o: usize,
        o0: usize,
        e: &Epilogue<'_>,
        pixels: &[Option<usize>; 4],
        out: OutView,
    ) {
        let x: [__m512; 16] = core::array::from_fn(|k| {
            let row = &m[(k * n + i) * o + o0..][..L];
            // SAFETY: `row` holds 16 floats.
            unsafe { _mm512_loadu_ps(row.as_ptr()) }
        });
        let mut t = [_mm512_setzero_ps(); 8];
        for s in 0..4 {
            let [m0, m1, m2, m3] = [x[s], x[4 + s], x[8 + s], x[12 + s]];
            t[s] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
            t[4 + s] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
        }
        let bias = match e.bias {
            // SAFETY: 16 floats of the bias.
            Some(b) => unsafe { _mm512_loadu_ps(b[o0..o0 + L].as_ptr()) },
            None => _mm512_setzero_ps(),
        };
        let (lo, hi) = (_mm512_set1_ps(e.min), _mm512_set1_ps(e.max));
        for a in 0..2 {
            let [m0, m1, m2, m3] = [t[4 * a], t[4 * a + 1], t[4 * a + 2], t[4 * a + 3]];
            let y = [
                _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(m0, m1), m2), bias),
                _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(m1, m2), m3), bias),
            ];
            for (b, &r) in y.iter().enumerate() {
                let Some(px) = pixels[a * 2 + b] else { continue };
                let at = px * o + o0;
                let mut r = r;
                if let Some(res) = e.residual {
                    // SAFETY: 16 floats of the residual.
                    r = _mm512_add_ps(r, unsafe { _mm512_loadu_ps(res[at..at + L].as_ptr()) });
                }
                r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
                // SAFETY: by the caller, this pixel's floats are inside the
                // output and this call's alone.
                unsafe { _mm512_storeu_ps(out.0.add(at), r) };
            }
        }
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
