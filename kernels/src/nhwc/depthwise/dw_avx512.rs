//! Depthwise convolutions with a multiplier of 1 on AVX-512, any window
//! (undilated 3×3 ones of stride 1 across go to [`super::dw3x3`]),
//! output row by output row. Compiled for x86-64 only; the caller checks
//! for AVX-512F.
use super::{row_taps, three_taps, Depthwise};
use crate::nhwc::{for_each_tap, Window2d};

/// Depthwise with multiplier 1, AVX-512, output row by output row. Runs of
/// pixels whose windows lie inside the image horizontally go 8 (or 4) at
/// a time per 16-channel block, so that many independent FMA chains share
/// each weight load; other pixels go one at a time, eight channel blocks
/// at once. Channel tails use masked loads and stores. (Undilated 3×3
/// windows of stride 1 across go to [`super::dw3x3`] instead.)
///
/// # Safety
/// The CPU must support AVX-512F; `d` must have the lengths its geometry
/// implies (see [`Depthwise`]) with `O = C`, and `out` hold `N·OH·OW·C`
/// floats.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn depthwise_avx512(d: &Depthwise<'_>, out: &mut [f32], rows: core::ops::Range<usize>) {
    use crate::x86::{lanes, load16, store16};
    use core::arch::x86_64::*;
    let (win, c, x, w, bias) = (d.win, d.c, d.x, d.w, d.bias);
    let (min, max) = (d.min, d.max);
    let sw = win.stride_w;
    // Output columns whose whole window row is inside the image.
    let core::ops::Range {
        start: first_inner,
        end: end_inner,
    } = win.inner_cols();
    let (xp, wp, op) = (x.as_ptr(), w.as_ptr(), out.as_mut_ptr());
    let lo = _mm512_set1_ps(min);
    let hi = _mm512_set1_ps(max);
    // Every load and store below: rows and columns come from the checked
    // window (`in_row`/`in_col`, or interior columns), so each pixel
    // offset is below N·H·W (for outputs, below the rows of `out`,
    // asserted above); channel offsets `c0 + lane` are below C by the
    // masks; taps are below kH·kW.
    let bias_at = |c0: usize, m: __mmask16| match bias {
        // SAFETY: lanes `c0 + lane` below C by the mask, and the bias holds
        // C floats.
        Some(b) => unsafe { _mm512_maskz_loadu_ps(m, b.as_ptr().add(c0)) },
        None => _mm512_setzero_ps(),
    };
    assert!(out.len() >= rows.len() * win.out_w * c && rows.end <= win.batch * win.out_h);
    // MobileNet's 3×3 stride-2 windows over whole channel blocks (stride 1
    // goes to `dw3x3`): the interior pixels go block by block, each
    // block's nine weights held in registers across the row. (Pixel order,
    // all blocks of a pixel at a time, ran 10-15% slower even on the 96
    // channels of the 112×112 layer.)
    let sweep = (win.kernel_h, win.kernel_w) == (3, 3)
        && (win.dilation_h, win.dilation_w) == (1, 1)
        && sw == 2
        && c % 16 == 0
        && end_inner > first_inner;
    let first_row = rows.start;
    for r in rows {
        let (n, oh) = (r / win.out_h, r % win.out_h);
        {
            // Kernel rows inside the image: a contiguous range (empty
            // when none is).
            let rows = (0..win.kernel_h)
                .filter(|&ki| win.in_row(oh, ki).is_some())
                .fold((usize::MAX, 0), |(first, _), ki| (first.min(ki), ki + 1));
            // Offset in `out`, which starts at output row `rows.start`.
            let out_row = (r - first_row) * win.out_w * c;
            let row = DwRow {
                win,
                c,
                x: xp,
                w: wp,
                out: op.wrapping_add(out_row),
                n,
                oh,
                rows,
                bias,
                lo,
                hi,
            };
            let mut ow = 0;
            while ow < win.out_w {
                if ow == first_inner && sweep {
                    for c0 in (0..c).step_by(16) {
                        // SAFETY: the pixels first_inner .. end_inner are
                        // interior; c0 + 16 <= C.
                        unsafe { dw_sweep_avx512::<2>(&row, first_inner, end_inner, c0) }
                    }
                    ow = end_inner;
                    continue;
                }
                if ow == first_inner {
                    // SAFETY: the pixels first_inner .. end_inner are
                    // interior.
                    ow = unsafe { dw_interior_avx512::<8>(&row, ow, end_inner) };
                    // SAFETY: as above; `ow` has only moved within them.
                    ow = unsafe { dw_interior_avx512::<4>(&row, ow, end_inner) };
                    if ow > first_inner {
                        continue;
                    }
                }
                // One pixel: up to eight channel blocks as independent
                // chains (plain loads for full blocks, masks for the tail).
                for c0 in (0..c).step_by(128) {
                    let blocks = (c - c0).div_ceil(16).min(8);
                    let masks: [__mmask16; 8] =
                        core::array::from_fn(|v| if v < blocks { lanes(c - c0 - v * 16) } else { 0 });
                    let mut acc: [__m512; 8] = core::array::from_fn(|v| {
                        if v < blocks {
                            bias_at(c0 + v * 16, masks[v])
                        } else {
                            _mm512_setzero_ps()
                        }
                    });
                    for_each_tap(win, oh, ow, |pix, tap| {
                        let xo = (n * win.in_h * win.in_w + pix) * c + c0;
                        let wo = tap * c + c0;
                        for (v, a) in acc.iter_mut().enumerate().take(blocks) {
                            // SAFETY: the tap's pixel is in the checked
                            // window, lanes below C by the mask (see the
                            // top of the function).
                            unsafe {
                                let xv = load16(masks[v], xp.add(xo + v * 16));
                                let wv = load16(masks[v], wp.add(wo + v * 16));
                                *a = _mm512_fmadd_ps(xv, wv, *a);
                            }
                        }
                    });
                    for (v, a) in acc.iter().enumerate().take(blocks) {
                        let r = _mm512_min_ps(_mm512_max_ps(*a, lo), hi);
                        // SAFETY: an output pixel of the rows of `out`
                        // (asserted above), lanes below C by the mask.
                        unsafe { store16(masks[v], op.add(out_row + ow * c + c0 + v * 16), r) };
                    }
                }
                ow += 1;
            }
        }
    }
}

/// One output row of an AVX-512 depthwise convolution.
struct DwRow<'a> {
    win: &'a Window2d,
    c: usize,
    x: *const f32,
    w: *const f32,
    /// The row's first output pixel.
    out: *mut f32,
    n: usize,
    oh: usize,
    /// Kernel rows inside the image.
    rows: (usize, usize),
    bias: Option<&'a [f32]>,
    lo: core::arch::x86_64::__m512,
    hi: core::arch::x86_64::__m512,
}

/// Channels `c0 .. c0 + 16` of the interior output pixels `ow .. end` of
/// one row, for an undilated 3×3 window with horizontal stride `SW`: the
/// weights of the kernel rows inside the image and the bias are loaded
/// once, then the pixels go 8, then 4, then 1 at a time.
///
/// # Safety
/// As [`dw_interior_avx512`], and `c0 + 16 <= C`.
#[target_feature(enable = "avx512f")]
#[inline(never)]
unsafe fn dw_sweep_avx512<const SW: usize>(r: &DwRow<'_>, ow: usize, end: usize, c0: usize) {
    use core::arch::x86_64::*;
    let (win, c) = (r.win, r.c);
    let (k0, k1) = r.rows;
    // SAFETY: as in `depthwise_avx512`: taps below kH·kW, lanes below C,
    // input rows and columns inside the image (interior pixels, kernel
    // rows `k0 .. k1`), output pixels inside the row.
    unsafe {
        let mut w = [[_mm512_setzero_ps(); 3]; 3];
        let mut x = [r.x; 3];
        for ki in k0..k1 {
            let wk = r.w.add(ki * 3 * c + c0);
            w[ki - k0] = [
                _mm512_loadu_ps(wk),
                _mm512_loadu_ps(wk.add(c)),
                _mm512_loadu_ps(wk.add(2 * c)),
            ];
            let ih = r.oh * win.stride_h + ki - win.pad_top;
            x[ki - k0] = r.x.add(((r.n * win.in_h + ih) * win.in_w) * c + c0);
        }
        let b = match r.bias {
            Some(b) => _mm512_loadu_ps(b.as_ptr().add(c0)),
            None => _mm512_setzero_ps(),
        };
        let rows = k1.saturating_sub(k0);
        let mut ow = ow;
        ow = dw_sweep_px::<8, SW>(r, &w, &x, rows, b, ow, end, c0);
        ow = dw_sweep_px::<4, SW>(r, &w, &x, rows, b, ow, end, c0);
        dw_sweep_px::<1, SW>(r, &w, &x, rows, b, ow, end, c0);
    }
}

/// `PX` pixels at a time from column `ow` while they fit before `end`
/// (see [`dw_sweep_avx512`]): each input column loaded once per kernel row
/// and shared by the pixels whose windows hold it. Returns the first
/// column left.
///
/// # Safety
/// As [`dw_sweep_avx512`]; `x[i]` is the first pixel (channel `c0`) of
/// the input row of kernel row `k0 + i`, for `i < rows`, and `w[i]` its
/// weights.
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn dw_sweep_px<const PX: usize, const SW: usize>(
    r: &DwRow<'_>,
    w: &[[core::arch::x86_64::__m512; 3]; 3],
    x: &[*const f32; 3],
    rows: usize,
    b: core::arch::x86_64::__m512,
    mut ow: usize,
    end: usize,
    c0: usize,
) -> usize {
    use core::arch::x86_64::*;
    let (win, c) = (r.win, r.c);
    while ow + PX <= end {
        let first = ow * SW - win.pad_left;
        let mut acc = [b; PX];
        // SAFETY: by the caller: columns first .. first + (PX-1)·SW + 3
        // are inside the image (interior pixels).
        unsafe {
            for (xk, wk) in x.iter().zip(w).take(rows) {
                let xk = xk.add(first * c);
                three_taps::<_, PX, SW>(
                    &mut acc,
                    wk,
                    |j| _mm512_loadu_ps(xk.add(j * c)),
                    |x, w, a| _mm512_fmadd_ps(x, w, a),
                );
            }
            for (p, a) in acc.iter().enumerate() {
                let v = _mm512_min_ps(_mm512_max_ps(*a, r.lo), r.hi);
                _mm512_storeu_ps(r.out.add((ow + p) * c + c0), v);
            }
        }
        ow += PX;
    }
    ow
}

/// The interior output pixels from column `ow` to `end`, `PX` at a time
/// (while `PX` remain), all channels 16 at a time: `PX` independent FMA
/// chains share each weight load. Returns the first column left.
///
/// # Safety
/// As [`depthwise_avx512`]; the windows of the pixels `ow .. end` lie
/// inside the image horizontally.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn dw_interior_avx512<const PX: usize>(r: &DwRow<'_>, mut ow: usize, end: usize) -> usize {
    while ow + PX <= end {
        // SAFETY: by the caller.
        unsafe { dw_pixels_avx512::<PX>(r, ow) };
        ow += PX;
    }
    ow
}

/// `PX` interior pixels from column `ow`.
///
/// # Safety
/// As [`dw_interior_avx512`].
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn dw_pixels_avx512<const PX: usize>(r: &DwRow<'_>, ow: usize) {
    for c0 in (0..r.c).step_by(16) {
        let left = r.c - c0;
        // SAFETY: by the caller; the mask keeps the lanes below C.
        unsafe {
            let kw = match r.win.dilation_w {
                1 => r.win.kernel_w,
                _ => 0,
            };
            match (left >= 16, kw, r.win.stride_w) {
                (true, 3, 1) => dw_block_avx512::<PX, true, 3, 1>(r, ow, c0, 0xffff),
                (true, 3, 2) => dw_block_avx512::<PX, true, 3, 2>(r, ow, c0, 0xffff),
                (true, 5, 1) => dw_block_avx512::<PX, true, 5, 1>(r, ow, c0, 0xffff),
                (true, _, _) => dw_block_avx512::<PX, true, 0, 0>(r, ow, c0, 0xffff),
                (false, _, _) => dw_block_avx512::<PX, false, 0, 0>(r, ow, c0, crate::x86::lanes(left)),
            }
        }
    }
}

/// Channels `c0 ..` (the lanes of `m`) of `PX` interior pixels from column
/// `ow`. `FULL` (all 16 lanes) takes plain loads and stores, which fold
/// into the FMAs; masked ones do not, and cost more on some CPUs. `K` > 0
/// says the kernel is `K` wide, undilated, with horizontal stride `SW`
/// (MobileNet's and EfficientNet's 3×3 at strides 1 and 2, 5×5 at 1;
/// at stride 2 the 5×5 one ran slower than the generic form): known
/// at compile time, the taps unroll, every address is a constant offset
/// (2.5× faster at 3×3) and neighbouring pixels share each column's load
/// ([`row_taps`]); 0 reads the geometry at run time.
///
/// # Safety
/// As [`dw_interior_avx512`]; the lanes of `m` lie below C.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn dw_block_avx512<const PX: usize, const FULL: bool, const K: usize, const SW: usize>(
    r: &DwRow<'_>,
    ow: usize,
    c0: usize,
    m: core::arch::x86_64::__mmask16,
) {
    use core::arch::x86_64::*;
    let win = r.win;
    let c = r.c;
    let (kw, sw, dw) = if K > 0 {
        (K, SW, 1)
    } else {
        (win.kernel_w, win.stride_w, win.dilation_w)
    };
    // Offsets of the pixels from the first, and of a kernel row's taps:
    // loop invariants, so every load is base + one register.
    let pixel: [usize; PX] = core::array::from_fn(|p| p * sw * c);
    let tap_step = dw * c;
    // SAFETY: as in `depthwise_avx512`: offsets come from the checked
    // window and the lanes stay below C.
    unsafe {
        let load = |p: *const f32| {
            if FULL {
                _mm512_loadu_ps(p)
            } else {
                _mm512_maskz_loadu_ps(m, p)
            }
        };
        let b = match r.bias {
            Some(b) => load(b.as_ptr().add(c0)),
            None => _mm512_setzero_ps(),
        };
        let mut acc = [b; PX];
        for ki in r.rows.0..r.rows.1 {
            let ih = r.oh * win.stride_h + ki * win.dilation_h - win.pad_top;
            let mut xk =
                r.x.add(((r.n * win.in_h + ih) * win.in_w + ow * sw - win.pad_left) * c + c0);
            let mut wk = r.w.add(ki * kw * c + c0);
            if K > 0 {
                let w: [__m512; K] = core::array::from_fn(|t| load(wk.add(t * c)));
                row_taps::<_, K, PX, SW>(
                    &mut acc,
                    &w,
                    |j| load(xk.add(j * c)),
                    |x, w, a| _mm512_fmadd_ps(x, w, a),
                );
                continue;
            }
            for _ in 0..kw {
                let wv = load(wk);
                for (a, &off) in acc.iter_mut().zip(&pixel) {
                    *a = _mm512_fmadd_ps(load(xk.add(off)), wv, *a);
                }
                xk = xk.wrapping_add(tap_step);
                wk = wk.wrapping_add(c);
            }
        }
        for (p, a) in acc.iter().enumerate() {
            let v = _mm512_min_ps(_mm512_max_ps(*a, r.lo), r.hi);
            let dst = r.out.add((ow + p) * c + c0);
            if FULL {
                _mm512_storeu_ps(dst, v)
            } else {
                _mm512_mask_storeu_ps(dst, m, v)
            }
        }
    }
}
