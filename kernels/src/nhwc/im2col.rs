//! Convolution by gathered windows (im2col): the windows of a tile of
//! output pixels are copied into rows, in the filter's `kH, kW, C` order
//! (zeros for taps outside the image), and the tile is multiplied by the
//! packed filter. The general path of regular convolutions; the direct
//! kernel ([`super::direct`]) gathers its border pixels here too.
use super::Conv2dNhwc;
use crate::gemm::{gemm_packed, Epilogue};

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
    let (per, sub) = (pixels.div_ceil(parts), tile / parts);
    let bands = |p: usize| (p * per).min(pixels)..((p + 1) * per).min(pixels);
    let outs = crate::parallel::Pieces::new(out, (0..parts).map(|p| bands(p).start * o));
    let tiles = crate::parallel::Pieces::new(cols, (0..parts).map(|p| p * sub * depth));
    crate::parallel::run_parts(parts, &|p| {
        let band = bands(p);
        if let (false, Some(out), Some(cols)) = (band.is_empty(), outs.take(p), tiles.take(p)) {
            let e = Epilogue {
                residual: e.residual.map(|r| &r[band.start * o..]),
                ..*e
            };
            gathered_in_tiles(g, x, gi, filter, &e, band, out, &mut cols[..sub * depth], sub);
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
    // The pixel's position, stepped rather than divided out per pixel.
    let mut ow = p0 % win.out_w;
    let mut oh = (p0 / win.out_w) % win.out_h;
    let mut n = p0 / (win.out_w * win.out_h);
    for row in cols.chunks_exact_mut(depth).take(t) {
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
        ow += 1;
        if ow == win.out_w {
            ow = 0;
            oh += 1;
            if oh == win.out_h {
                oh = 0;
                n += 1;
            }
        }
    }
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
