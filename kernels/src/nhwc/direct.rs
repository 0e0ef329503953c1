//! Regular convolutions with shallow windows (an image network's first
//! layer: 3×3×3 or 7×7×3 taps) multiplied straight from the image.
//!
//! Gathering the windows first (im2col) costs as much as the product when
//! a window holds a few dozen floats: the product is short and the gather
//! writes and rereads a copy nine times the input. Here the packed filter's
//! micro-kernel reads each window element where it lies: element `q` of
//! pixel `p`'s window is at `base(p) + offset(q)`, with one table of
//! offsets for every pixel whose window lies inside the image. Pixels at
//! the borders have their windows gathered (zeros outside, by the general
//! path's im2col) into a small block on the stack and go through the same
//! micro-kernel. One driver serves each instruction set, with its tile:
//! AVX-512 8 pixels × 32 columns, AVX2 + FMA 6 × 16 (twice per strip).
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
use super::Conv2dNhwc;
use crate::gemm::Epilogue;

/// Deepest window (`kH · kW · C`) run directly: a 7×7 RGB stem is 147.
pub(crate) const MAX_DEPTH: usize = 160;

/// Whether [`conv`] takes `g` on this CPU: ungrouped, not 1×1, a window of
/// at most [`MAX_DEPTH`] floats, and AVX-512 or AVX2 + FMA.
pub(crate) fn fits(g: &Conv2dNhwc) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        g.groups == 1
            && !g.is_pointwise()
            && g.depth() <= MAX_DEPTH
            && crate::cpu::Isa::detect() != crate::cpu::Isa::Portable
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = g;
        false
    }
}

/// `out = activation(clamp(conv(x, filter) + bias))` for a convolution [`fits`]
/// accepted; `filter` is packed by [`crate::gemm::pack`] (depth × O, depth in
/// the window's `kH, kW, C` order), `out` holds all output pixels. Output
/// rows are split across threads.
#[cfg(target_arch = "x86_64")]
pub(crate) fn conv(g: &Conv2dNhwc, x: &[f32], filter: &[f32], e: &Epilogue<'_>, out: &mut [f32]) {
    assert!(fits(g));
    conv_on(
        crate::cpu::Isa::detect() == crate::cpu::Isa::Avx512,
        g,
        x,
        filter,
        e,
        out,
    );
}

/// [`conv`] with the AVX-512 tile, or the AVX2 one, which the CPU must
/// have.
#[cfg(target_arch = "x86_64")]
pub(super) fn conv_on(avx512: bool, g: &Conv2dNhwc, x: &[f32], filter: &[f32], e: &Epilogue<'_>, out: &mut [f32]) {
    let win = &g.window;
    let rows = win.batch * win.out_h;
    let row_len = win.out_w * g.out_c;
    let out = &mut out[..rows * row_len];
    let worth_splitting = out.len() * g.depth() >= 1 << 18;
    crate::parallel::for_each_band(out, rows, row_len, 1, worth_splitting, &|rows, band| {
        conv_band(avx512, g, x, filter, e, rows, band)
    });
}

/// Output rows `rows` (over all images) of a convolution [`fits`]
/// accepted into `band`, which holds them, on this thread, with the
/// AVX-512 tile or the AVX2 one (as [`conv_on`]).
#[cfg(target_arch = "x86_64")]
pub(crate) fn conv_band(
    avx512: bool,
    g: &Conv2dNhwc,
    x: &[f32],
    filter: &[f32],
    e: &Epilogue<'_>,
    rows: core::ops::Range<usize>,
    band: &mut [f32],
) {
    let win = &g.window;
    let (c, o, depth) = (g.in_c, g.out_c, g.depth());
    let isa = crate::cpu::Isa::detect();
    assert!(if avx512 {
        isa == crate::cpu::Isa::Avx512
    } else {
        isa != crate::cpu::Isa::Portable
    });
    assert!(g.groups == 1 && depth <= MAX_DEPTH);
    assert!(
        x.len() >= win.batch * win.in_h * win.in_w * c,
        "input of {} floats",
        x.len()
    );
    assert!(
        crate::gemm::is_packed(filter, depth, o),
        "filter is not a {depth}×{o} packing"
    );
    assert!(e.bias.is_none_or(|b| b.len() >= o), "bias shorter than {o}");
    assert!(rows.start <= rows.end && rows.end <= win.batch * win.out_h);
    let band = &mut band[..rows.len() * win.out_w * o];
    // Where each window element lies, from the window's first tap.
    let mut offset = [0usize; MAX_DEPTH];
    for (q, off) in offset.iter_mut().enumerate().take(depth) {
        let (tap, ch) = (q / c, q % c);
        let (ki, kj) = (tap / win.kernel_w, tap % win.kernel_w);
        *off = (ki * win.dilation_h * win.in_w + kj * win.dilation_w) * c + ch;
    }
    let offset = &offset[..depth];
    // SAFETY: AVX-512F, else AVX2 and FMA, were detected (asserted above),
    // as were the lengths of the input, filter and bias that the geometry
    // implies; `band` holds the rows.
    unsafe {
        let f = Filter {
            strips: crate::gemm::packing::strips(filter),
            o,
            e,
        };
        if avx512 {
            conv_rows::<8>(g, x, &f, offset, rows, band, tile_avx512)
        } else {
            conv_rows::<6>(g, x, &f, offset, rows, band, tile_avx2)
        }
    }
    e.activation.apply(band);
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn conv(_: &Conv2dNhwc, _: &[f32], _: &[f32], _: &Epilogue<'_>, _: &mut [f32]) {
    unreachable!("fits() is false off x86-64")
}

/// What every tile of one convolution shares: the packed filter's strips,
/// the `o` output channels and the epilogue.
#[derive(Clone, Copy)]
struct Filter<'a> {
    strips: &'a [f32],
    o: usize,
    e: &'a Epilogue<'a>,
}

/// A tile of up to `PX` output pixels, all `o` channels, into `out`
/// (see [`tile_avx512`]).
type Tile<const PX: usize> = unsafe fn(*const f32, &[usize; PX], &[usize], &Filter<'_>, usize, &mut [f32]);

/// Output rows `rows` (over all images) into `band`, `PX` pixels a `tile`.
///
/// # Safety
/// The CPU runs `tile`; `x` and the filter's strips and bias hold what `g`
/// implies (checked by [`conv`]); `offset` is `g`'s window offsets; `band`
/// holds `rows`.
#[cfg(target_arch = "x86_64")]
unsafe fn conv_rows<const PX: usize>(
    g: &Conv2dNhwc,
    x: &[f32],
    f: &Filter<'_>,
    offset: &[usize],
    rows: core::ops::Range<usize>,
    band: &mut [f32],
    tile: Tile<PX>,
) {
    let win = &g.window;
    let (c, o, depth) = (g.in_c, f.o, offset.len());
    // Columns and rows whose windows lie inside the image.
    let core::ops::Range {
        start: first_inner,
        end: end_inner,
    } = win.inner_cols();
    let inner_rows = win.inner_rows();
    // Tiles cut where the borders start and end, or tiles of `PX` along
    // the whole row, each with a border pixel gathered whole: the latter
    // where it saves two tiles a row or more. ResNet's 7 × 7 stem (2
    // border pixels, 108 inner, 2 border) then takes 14 tiles a row
    // instead of 16: 2400 -> 2160 us. MobileNet's 3 × 3 ones save only a
    // tile, which gathering 7 more windows of 27 floats outweighs (3 -> 16
    // channels: 129 -> 132 us).
    let cut = first_inner.div_ceil(PX)
        + end_inner.saturating_sub(first_inner).div_ceil(PX)
        + win.out_w.saturating_sub(end_inner.max(first_inner)).div_ceil(PX);
    let aligned = cut >= win.out_w.div_ceil(PX) + 2;
    // Identity offsets, for windows gathered onto the stack.
    let packed_offset: [usize; MAX_DEPTH] = core::array::from_fn(|q| q);
    let max_offset = offset.iter().copied().max().unwrap_or(0);
    let mut gathered = [0.0f32; MAX_PX * MAX_DEPTH];
    assert!(PX <= MAX_PX);
    let first_row = rows.start;
    for r in rows {
        let (n, oh) = (r / win.out_h, r % win.out_h);
        let inside_h = inner_rows.contains(&oh);
        let out_row = &mut band[(r - first_row) * win.out_w * o..][..win.out_w * o];
        let mut ow = 0;
        while ow < win.out_w {
            let end = if aligned || !inside_h {
                win.out_w
            } else if ow < first_inner {
                first_inner
            } else if ow < end_inner {
                end_inner
            } else {
                win.out_w
            };
            let count = PX.min(end - ow);
            let direct = inside_h && ow >= first_inner && ow + count <= end_inner;
            let tile_out = &mut out_row[ow * o..(ow + count) * o];
            if direct {
                // The window's first tap of each pixel (the last pixel
                // repeated past `count`; its results are not stored).
                let ih = win.in_row(oh, 0).unwrap_or(0);
                // Inner pixels' windows start `stride_w` columns apart.
                let first = (n * win.in_h + ih) * win.in_w + win.in_col(ow, 0).unwrap_or(0);
                let base: [usize; PX] = core::array::from_fn(|p| (first + p.min(count - 1) * win.stride_w) * c);
                // Bases grow with the pixel: this bounds every read.
                assert!(base[PX - 1] + max_offset < x.len());
                // SAFETY: bounded by the assert.
                unsafe { tile(x.as_ptr(), &base, offset, f, count, tile_out) };
            } else {
                // The windows of pixels `ow .. ow + count`, one after
                // another (the last repeated past `count`, as above).
                super::im2col::im2col(g, x, r * win.out_w + ow, count, 0, c, &mut gathered[..count * depth]);
                let base: [usize; PX] = core::array::from_fn(|p| p.min(count - 1) * depth);
                // SAFETY: each pixel reads the `depth` floats of its own
                // window, within the `count · depth` gathered.
                unsafe { tile(gathered.as_ptr(), &base, &packed_offset[..depth], f, count, tile_out) };
            }
            ow += count;
        }
    }
}

/// Most pixels per tile, of any instruction set.
const MAX_PX: usize = 8;

/// Checks a tile's arguments (see [`tile_avx512`]); returns where each
/// pixel's window starts, and whether the outputs are clamped (as in the
/// packed engine: no clamp asked, none applied, so NaN stays NaN).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tile_start<const PX: usize>(
    xp: *const f32,
    base: &[usize; PX],
    offset: &[usize],
    &Filter { strips, o, e }: &Filter<'_>,
    count: usize,
    out: &[f32],
) -> ([*const f32; PX], bool) {
    assert!((1..=PX).contains(&count) && out.len() >= count * o);
    assert!(strips.len() >= offset.len() * o.div_ceil(crate::gemm::NR) * crate::gemm::NR);
    let clamps = e.min > f32::NEG_INFINITY || e.max < f32::INFINITY;
    (core::array::from_fn(|p| xp.wrapping_add(base[p])), clamps)
}

/// `count` (≤ 8) output pixels, all `o` channels, into `out`: pixel `p`'s
/// window element `q` is `xp[base[p] + offset[q]]`. Eight independent
/// rows of accumulators, 32 columns each.
///
/// # Safety
/// AVX-512F; every `xp[base[p] + offset[q]]` is readable; `f.strips`
/// holds the packed filter (`offset.len()` deep, `f.o` wide) and the bias
/// (if any) `f.o` floats; `out` holds `count · f.o`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512(
    xp: *const f32,
    base: &[usize; 8],
    offset: &[usize],
    f: &Filter<'_>,
    count: usize,
    out: &mut [f32],
) {
    use crate::gemm::NR;
    use crate::x86::{lanes, load16, store16};
    use core::arch::x86_64::*;
    let (xs, clamps) = tile_start(xp, base, offset, f, count, out);
    let Filter { strips, o, e } = *f;
    let depth = offset.len();
    let (lo, hi) = (_mm512_set1_ps(e.min), _mm512_set1_ps(e.max));
    for j0 in (0..o).step_by(NR) {
        let strip = strips.as_ptr().wrapping_add(j0 * depth);
        let masks = [lanes(o.saturating_sub(j0)), lanes(o.saturating_sub(j0 + 16))];
        // SAFETY: by the caller: the strip holds `depth` rows of NR floats,
        // the window elements are readable, the bias lanes below `o`
        // (masked), and the stores write pixels below `count`, lanes
        // below `o`.
        unsafe {
            let b: [__m512; 2] = match e.bias {
                Some(b) => core::array::from_fn(|v| {
                    if masks[v] == 0 {
                        _mm512_setzero_ps()
                    } else {
                        load16(masks[v], b.as_ptr().add(j0 + 16 * v))
                    }
                }),
                None => [_mm512_setzero_ps(); 2],
            };
            // A strip of 16 columns or fewer (the last of 16 or 48
            // channels, MobileNetV3's 3 → 16 stem) takes half the FMAs.
            let acc = match masks[1] {
                0 => strip_avx512::<1>(&xs, strip, offset, [b[0]]).map(|a| [a[0], a[0]]),
                _ => strip_avx512::<2>(&xs, strip, offset, b),
            };
            for (p, a) in acc.iter().enumerate().take(count) {
                for (v, &m) in masks.iter().enumerate() {
                    if m != 0 {
                        let r = if clamps {
                            _mm512_min_ps(_mm512_max_ps(a[v], lo), hi)
                        } else {
                            a[v]
                        };
                        store16(m, out.as_mut_ptr().add(p * o + j0 + 16 * v), r);
                    }
                }
            }
        }
    }
}

/// The sums of [`tile_avx512`] for one strip: `V` vectors of its columns
/// (the first `16 · V`), from the bias `b`.
///
/// # Safety
/// As [`tile_avx512`], `strip` the strip's first row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn strip_avx512<const V: usize>(
    xs: &[*const f32; 8],
    strip: *const f32,
    offset: &[usize],
    b: [core::arch::x86_64::__m512; V],
) -> [[core::arch::x86_64::__m512; V]; 8] {
    use crate::gemm::NR;
    use core::arch::x86_64::*;
    let mut acc = [b; 8];
    for (q, &off) in offset.iter().enumerate() {
        // SAFETY: by the caller.
        unsafe {
            let w: [__m512; V] = core::array::from_fn(|v| _mm512_loadu_ps(strip.add(q * NR + 16 * v)));
            for (a, x) in acc.iter_mut().zip(xs) {
                let x = _mm512_set1_ps(*x.add(off));
                for (a, w) in a.iter_mut().zip(&w) {
                    *a = _mm512_fmadd_ps(x, *w, *a);
                }
            }
        }
    }
    acc
}

/// As [`tile_avx512`], on AVX2 + FMA: `count` (≤ 6) pixels, 6 rows of
/// accumulators 16 columns wide (12 registers), run twice per strip; each
/// window element is broadcast from the image and meets two vectors of
/// the filter.
///
/// # Safety
/// AVX2 and FMA; otherwise as [`tile_avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2(
    xp: *const f32,
    base: &[usize; 6],
    offset: &[usize],
    f: &Filter<'_>,
    count: usize,
    out: &mut [f32],
) {
    use crate::gemm::NR;
    use core::arch::x86_64::*;
    let (xs, clamps) = tile_start(xp, base, offset, f, count, out);
    let Filter { strips, o, e } = *f;
    let depth = offset.len();
    let (lo, hi) = (_mm256_set1_ps(e.min), _mm256_set1_ps(e.max));
    for j0 in (0..o).step_by(16) {
        let strip = strips.as_ptr().wrapping_add((j0 / NR) * NR * depth + j0 % NR);
        let cols = (o - j0).min(16);
        let bias = e.bias.map(|b| &b[j0..j0 + cols]);
        // SAFETY: by the caller: the strip holds `depth` rows of NR floats
        // (this half's 16 at `strip`), the window elements are readable,
        // and a full half's bias and outputs hold 16 floats.
        unsafe {
            // A full half starts from its bias; a partial one adds it as
            // it stores.
            let b = match bias {
                Some(b) if cols == 16 => [_mm256_loadu_ps(b.as_ptr()), _mm256_loadu_ps(b.as_ptr().add(8))],
                _ => [_mm256_setzero_ps(); 2],
            };
            let mut acc = [b; 6];
            for (q, &off) in offset.iter().enumerate() {
                let w0 = _mm256_loadu_ps(strip.add(q * NR));
                let w1 = _mm256_loadu_ps(strip.add(q * NR + 8));
                for (a, x) in acc.iter_mut().zip(&xs) {
                    let v = _mm256_broadcast_ss(&*x.add(off));
                    a[0] = _mm256_fmadd_ps(v, w0, a[0]);
                    a[1] = _mm256_fmadd_ps(v, w1, a[1]);
                }
            }
            if cols == 16 {
                // Every pixel is stored, those past `count` into `spare`:
                // storing only `count` of them kept the sums in memory
                // (MobileNetV2's stem alone: 343 → 324 µs).
                let mut spare = [_mm256_setzero_ps(); 2];
                let spare = spare.as_mut_ptr().cast::<f32>();
                for (p, a) in acc.iter().enumerate() {
                    // Pixel p < count's 16 outputs from j0 lie within `out`
                    // (`count · o` floats, j0 + 16 ≤ o).
                    let dst = if p < count {
                        out.as_mut_ptr().add(p * o + j0)
                    } else {
                        spare
                    };
                    for (h, &a) in a.iter().enumerate() {
                        let r = if clamps {
                            _mm256_min_ps(_mm256_max_ps(a, lo), hi)
                        } else {
                            a
                        };
                        _mm256_storeu_ps(dst.add(8 * h), r);
                    }
                }
                continue;
            }
            for (p, a) in acc.iter().enumerate().take(count) {
                let dst = &mut out[p * o + j0..p * o + j0 + cols];
                let mut v = [0.0f32; 16];
                _mm256_storeu_ps(v.as_mut_ptr(), a[0]);
                _mm256_storeu_ps(v.as_mut_ptr().add(8), a[1]);
                for (j, d) in dst.iter_mut().enumerate() {
                    let r = v[j] + bias.map_or(0.0, |b| b[j]);
                    *d = if clamps { r.max(e.min).min(e.max) } else { r };
                }
            }
        }
    }
}
