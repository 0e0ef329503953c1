//! Convolution by gathered windows (im2col): the windows of a tile of
//! output pixels are copied into rows, in the filter's `kH, kW, C` order
//! (zeros for taps outside the image), and the tile is multiplied by the
//! packed filter. The general path of regular convolutions; the direct
//! kernel ([`super::direct`]) gathers its border pixels here too. Where
//! the CPU has an indirect product ([`crate::gemm::gemm_indirect`]) and
//! the channels of a tap are many, the windows are multiplied where they
//! lie instead, through a table of where each tap's channels start.
use super::Conv2dNhwc;
use crate::gemm::{gemm_indirect, gemm_packed, runs_indirect, Epilogue, Gather, ZERO_TAP};

/// Entries of the table of taps an indirect tile keeps on the stack
/// (16 KB): 227 pixels of a 3 × 3 window.
const TAPS_TABLE: usize = 2048;

/// Channels of a tap from which the indirect product beats copying the
/// windows: it sweeps each tap's run apart, so short runs pay a sweep's
/// start and end each.
const INDIRECT_RUN: usize = 32;

impl Conv2dNhwc {
    /// Output pixels gathered (im2col) per product: enough rows for the
    /// GEMM to run at speed, few enough that the gathered tile stays near
    /// 128 KiB.
    pub(super) fn tile_rows(&self) -> usize {
        (32 * 1024 / self.depth().max(1))
            .clamp(72, 1024)
            .min(self.window.out_pixels())
            .max(1)
    }

    /// Scratch for the gathered windows of one tile (none for 1×1).
    pub(super) fn gather_len(&self) -> usize {
        if self.is_pointwise() {
            0
        } else {
            self.tile_rows() * self.depth()
        }
    }
}

/// Group `gi` of output pixels `pixels` (over all images) of a
/// convolution that is not 1×1, its filter packed, by products over
/// gathered tiles of windows (`cols`: [`Conv2dNhwc::gather_len`] floats),
/// on this thread; `out` (and the residual, if any) hold the pixels from
/// `pixels.start`. A whole convolution's path where the direct kernel does
/// not run, and a chain's stem's rows.
#[allow(clippy::too_many_arguments)]
pub(super) fn gathered(
    g: &Conv2dNhwc,
    x: &[f32],
    gi: usize,
    filter: &[f32],
    e: &Epilogue<'_>,
    pixels: core::ops::Range<usize>,
    out: &mut [f32],
    cols: &mut [f32],
) {
    gathered_in_tiles(g, x, gi, filter, e, pixels, out, cols, g.tile_rows());
}

/// [`gathered`] in tiles of `tile` pixels (`cols`: `tile` windows).
#[allow(clippy::too_many_arguments)]
pub(super) fn gathered_in_tiles(
    g: &Conv2dNhwc,
    x: &[f32],
    gi: usize,
    filter: &[f32],
    e: &Epilogue<'_>,
    pixels: core::ops::Range<usize>,
    out: &mut [f32],
    cols: &mut [f32],
    tile: usize,
) {
    let o = g.out_c;
    let (cg, og, depth) = (g.in_c / g.groups, o / g.groups, g.depth());
    let taps = g.window.kernel_h * g.window.kernel_w;
    if multiplies_in_place(g) {
        // A band the table holds whole is one product, which reads the
        // weight once (ResNet's 256 at 14 × 14, a 2.4 MB weight: 108 ->
        // 112 GFLOP/s against tiles of 72); larger ones keep their tiles,
        // whose outputs stay in L1 (64 at 56 × 56 lost 2 % in tiles of 227).
        let tile = if pixels.len() * taps <= TAPS_TABLE {
            pixels.len()
        } else {
            tile.min(TAPS_TABLE / taps)
        }
        .max(1);
        let mut table = [0usize; TAPS_TABLE];
        let zeros = &mut cols[..cg];
        zeros.fill(0.0);
        for p0 in pixels.clone().step_by(tile) {
            let t = tile.min(pixels.end - p0);
            let offsets = &mut table[..t * taps];
            tap_offsets(g, p0, gi * cg, offsets);
            let a = Gather::new(x, offsets, taps, cg, zeros).expect("the taps lie in the image");
            let at = (p0 - pixels.start) * o + gi * og;
            let e = Epilogue {
                residual: e.residual.map(|r| &r[at..]),
                ..*e
            };
            gemm_indirect(t, og, &a, filter, &e, &mut out[at..], o);
        }
        return;
    }
    for p0 in pixels.clone().step_by(tile.max(1)) {
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

/// Whether [`gathered_in_tiles`] multiplies `g`'s windows where they lie
/// (an indirect product) rather than gathering them: it needs no scratch
/// but a run of zeros.
fn multiplies_in_place(g: &Conv2dNhwc) -> bool {
    let cg = g.in_c / g.groups;
    cg >= INDIRECT_RUN && g.window.kernel_h * g.window.kernel_w <= TAPS_TABLE && runs_indirect(g.out_c / g.groups)
}

/// A whole group `gi` of a convolution by [`gathered`], its pixels split
/// in one band per thread, each gathering into its share of `cols`
/// ([`Conv2dNhwc::gather_len`] floats): on one thread, the gathering
/// would stay serial while each tile's product split (ResNet-18's
/// 56 × 56 layers gained 1.4× from a second thread, its others 1.8×).
#[allow(clippy::too_many_arguments)]
pub(super) fn gathered_split(
    g: &Conv2dNhwc,
    x: &[f32],
    gi: usize,
    filter: &[f32],
    e: &Epilogue<'_>,
    out: &mut [f32],
    cols: &mut [f32],
) {
    let (pixels, o, depth, tile) = (g.window.out_pixels(), g.out_c, g.depth(), g.tile_rows());
    // Each part at least a tile of pixels, its tiles at least 16 rows.
    let parts = crate::parallel::threads().min(pixels / tile).min(tile / 16).max(1);
    if parts == 1 {
        return gathered(g, x, gi, filter, e, 0..pixels, out, cols);
    }
    // Windows multiplied in place need only a run of zeros each: their
    // tiles stay whole (halved, 36 pixels are four tiles of 8 rows and one
    // of 4).
    let (sub, share) = if multiplies_in_place(g) {
        (tile, g.in_c / g.groups)
    } else {
        (tile / parts, tile / parts * depth)
    };
    let per = pixels.div_ceil(parts);
    let bands = |p: usize| (p * per).min(pixels)..((p + 1) * per).min(pixels);
    let outs = crate::parallel::Pieces::new(out, (0..parts).map(|p| bands(p).start * o));
    let tiles = crate::parallel::Pieces::new(cols, (0..parts).map(|p| p * share));
    crate::parallel::run_parts(parts, &|p| {
        let band = bands(p);
        if let (false, Some(out), Some(cols)) = (band.is_empty(), outs.take(p), tiles.take(p)) {
            let e = Epilogue {
                residual: e.residual.map(|r| &r[band.start * o..]),
                ..*e
            };
            gathered_in_tiles(g, x, gi, filter, &e, band, out, &mut cols[..share], sub);
        }
    });
}

/// Gathers the windows of output pixels `p0 .. p0 + t` (channels
/// `c0 .. c0 + cg`) into `cols`, one row of `kH · kW · cg` per pixel;
/// taps outside the image are zero.
pub(super) fn im2col(g: &Conv2dNhwc, x: &[f32], p0: usize, t: usize, c0: usize, cg: usize, cols: &mut [f32]) {
    let win = &g.window;
    let c = g.in_c;
    let kw = win.kernel_w;
    let depth = win.kernel_h * kw * cg;
    // With all channels and no dilation, a window row whose taps all lie
    // in the image is one contiguous run of the input (the first layer of
    // an image network gathers 3-channel pixels: copy rows, not pixels).
    let whole_rows = cg == c && win.dilation_w == 1;
    for (row, (n, oh, ow)) in cols.chunks_exact_mut(depth).take(t).zip(positions(g, p0)) {
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
    }
}

/// Where each tap of the windows of output pixels `p0 ..` starts in the
/// image (channel `c0`), `kH · kW` per pixel, in the filter's order, for
/// as many pixels as `offsets` holds; [`ZERO_TAP`] for a tap outside the
/// image.
fn tap_offsets(g: &Conv2dNhwc, p0: usize, c0: usize, offsets: &mut [usize]) {
    let win = &g.window;
    let (c, kw) = (g.in_c, win.kernel_w);
    for (row, (n, oh, ow)) in offsets.chunks_exact_mut(win.kernel_h * kw).zip(positions(g, p0)) {
        for (ki, taps) in row.chunks_exact_mut(kw).enumerate() {
            let ih = win.in_row(oh, ki);
            for (kj, tap) in taps.iter_mut().enumerate() {
                *tap = match (ih, win.in_col(ow, kj)) {
                    (Some(ih), Some(iw)) => ((n * win.in_h + ih) * win.in_w + iw) * c + c0,
                    _ => ZERO_TAP,
                };
            }
        }
    }
}

/// The positions `(image, row, column)` of output pixels `p0, p0 + 1, ...`,
/// stepped rather than divided out per pixel.
fn positions(g: &Conv2dNhwc, p0: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    let (w, h) = (g.window.out_w, g.window.out_h);
    let first = (p0 / (w * h), (p0 / w) % h, p0 % w);
    core::iter::successors(Some(first), move |&(n, oh, ow)| {
        Some(match (ow + 1 == w, oh + 1 == h) {
            (false, _) => (n, oh, ow + 1),
            (true, false) => (n, oh + 1, 0),
            (true, true) => (n + 1, 0, 0),
        })
    })
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

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::nhwc::tests::{close, reference, rng, Dims4, Pair};
    use std::vec;

    /// The windows multiplied where they lie (on CPUs with the indirect
    /// product) and copied first (elsewhere): both the reference's values;
    /// the indirect product exactly one in-order chain of fused
    /// multiply-adds over the window, then bias, residual and clamp. Runs
    /// of 32 to 96 channels, 32 and 64 outputs per group, zero taps at
    /// every border, stride and dilation, two images, groups, a residual,
    /// and tiles that end inside a row.
    #[test]
    fn indirect_windows_sum_each_window_in_order() {
        // (input, filter, stride, padding, dilation, groups)
        let cases: &[(Dims4, Dims4, Pair, Dims4, Pair, usize)] = &[
            ([1, 9, 11, 32], [32, 3, 3, 32], [1, 1], [1, 1, 1, 1], [1, 1], 1),
            ([2, 7, 6, 64], [64, 3, 3, 64], [2, 2], [1, 1, 1, 1], [1, 1], 1),
            ([1, 8, 9, 40], [96, 3, 2, 40], [1, 2], [0, 2, 1, 1], [2, 1], 1),
            ([1, 6, 7, 64], [64, 3, 3, 32], [1, 1], [1, 1, 1, 1], [1, 1], 2),
            ([1, 5, 5, 96], [32, 5, 5, 96], [1, 1], [2, 2, 2, 2], [1, 1], 1),
        ];
        let indirect = runs_indirect(32);
        for (i, &(input, filter, stride, padding, dilation, groups)) in cases.iter().enumerate() {
            let g = Conv2dNhwc::regular(&input, &filter, stride, padding, dilation, groups).unwrap();
            let (o, og, cg, depth) = (g.out_c, g.out_c / groups, g.in_c / groups, g.depth());
            let x = rng(i as u64, input.iter().product());
            let w = rng(100 + i as u64, filter.iter().product());
            let b = rng(200 + i as u64, o);
            let pixels = g.window.out_pixels();
            let residual = rng(300 + i as u64, pixels * o);
            let (min, max) = (-1.0, 1.5);
            let mut want = reference(&g, &x, &w, false, Some(&b), f32::NEG_INFINITY, f32::INFINITY);
            for (v, r) in want.iter_mut().zip(&residual) {
                *v = (*v + r).clamp(min, max);
            }
            // The in-order chain, on windows copied by `im2col`.
            let mut chain = vec![0.0f32; pixels * o];
            let mut window = vec![0.0f32; depth];
            for p in 0..pixels {
                for gi in 0..groups {
                    im2col(&g, &x, p, 1, gi * cg, cg, &mut window);
                    for j in 0..og {
                        let oc = gi * og + j;
                        let wr = &w[oc * depth..][..depth];
                        let s = window.iter().zip(wr).fold(0.0f32, |s, (&a, &b)| a.mul_add(b, s));
                        chain[p * o + oc] = (s + b[oc] + residual[p * o + oc]).max(min).min(max);
                    }
                }
            }
            // Tiles of 5 pixels end inside rows; the whole image is one.
            for tile in [5, pixels] {
                let mut out = vec![f32::NAN; pixels * o];
                for gi in 0..groups {
                    let mut packed = vec![0.0f32; crate::gemm::packed_len(depth, og)];
                    crate::gemm::pack(&w[gi * og * depth..][..og * depth], depth, og, true, &mut packed);
                    let e = Epilogue {
                        bias: Some(&b[gi * og..][..og]),
                        residual: Some(&residual),
                        min,
                        max,
                        activation: crate::activation::Activation::Identity,
                    };
                    let mut cols = vec![f32::NAN; tile * depth];
                    gathered_in_tiles(&g, &x, gi, &packed, &e, 0..pixels, &mut out, &mut cols, tile);
                }
                close(&out, &want);
                if indirect {
                    let same = out.iter().zip(&chain).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "case {i}, tiles of {tile}: not the in-order chain");
                }
            }
        }
    }

    /// Split across threads, the windows give the same bits as on one:
    /// a 7 × 7 image whose product splits its weight's strips (a 288 KB
    /// weight against 49 rows), and a larger image in bands of pixels.
    #[test]
    fn windows_split_across_threads_give_the_same_bits() {
        let cases: &[(Dims4, Dims4)] = &[([1, 7, 7, 64], [128, 3, 3, 64]), ([1, 20, 21, 32], [64, 3, 3, 32])];
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        for (i, &(input, filter)) in cases.iter().enumerate() {
            let g = Conv2dNhwc::regular(&input, &filter, [1, 1], [1, 1, 1, 1], [1, 1], 1).unwrap();
            let x = rng(i as u64, input.iter().product());
            let w = rng(100 + i as u64, filter.iter().product());
            let b = rng(200 + i as u64, g.out_c);
            let want = reference(&g, &x, &w, false, Some(&b), 0.0, f32::INFINITY);
            let mut packed = vec![0.0f32; g.packed_filter_len()];
            g.pack_filter(&w, &mut packed);
            let e = Epilogue::new(Some(&b), true);
            let mut outs = vec![];
            for threads in [1, 2, 3] {
                crate::parallel::set_threads(threads);
                let mut out = vec![f32::NAN; want.len()];
                let mut cols = vec![f32::NAN; g.gather_len()];
                gathered_split(&g, &x, 0, &packed, &e, &mut out, &mut cols);
                close(&out, &want);
                outs.push(out);
            }
            crate::parallel::set_threads(1);
            for (t, out) in outs.iter().enumerate().skip(1) {
                let same = out.iter().zip(&outs[0]).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "case {i}: {} threads differ from one", t + 1);
            }
        }
    }

    #[test]
    fn gathered_rows_out_of_the_source_are_refused() {
        let x = [0.0f32; 10];
        let zeros = [0.0f32; 4];
        let ok = Gather::new(&x, &[0, 6, ZERO_TAP, 2], 2, 4, &zeros).expect("rows inside");
        assert_eq!((ok.rows(), ok.depth()), (2, 8));
        assert!(
            Gather::new(&x, &[0, 7], 2, 4, &zeros).is_none(),
            "a run past the source"
        );
        let wrapping = Gather::new(&x, &[usize::MAX - 1, 0], 2, 4, &zeros);
        assert!(wrapping.is_none(), "an offset whose run wraps");
        assert!(Gather::new(&x, &[0, 1, 2], 2, 4, &zeros).is_none(), "not whole rows");
        assert!(Gather::new(&x, &[0, 1], 0, 4, &zeros).is_none(), "no taps");
        assert!(Gather::new(&x, &[0, 1], 2, 5, &zeros).is_none(), "a zero run too short");
        let nonzero = Gather::new(&x, &[0, 1], 2, 4, &[0.0, 1.0, 0.0, 0.0]);
        assert!(nonzero.is_none(), "a zero run with a non-zero");
    }
}
