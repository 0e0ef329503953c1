//! Matrix transposes in register tiles: columns `band` of a row-major
//! `rows × cols` matrix `s` into `d`, column `c` as row `c - band.start`
//! (`d[(c - band.start) · rows + r] = s[r · cols + c]`).
//!
//! Bytes (int8 channel shuffles between NHWC and NCHW) go 16 × 16 at a
//! time and 4-byte words (`f32`, `i32`) 4 × 4, through SSE2's unpack
//! instructions on x86-64: each tile is 16 or 4 loads, the same number of
//! stores and a few shuffles, where an element at a time is a load and a
//! strided store each. Other sizes and targets, and the edges that make no
//! whole tile, go an element at a time.
use core::ops::Range;

/// Columns `band` of the `rows × cols` matrix `s`, transposed into `d`
/// (see the module docs).
pub(crate) fn columns<T: Copy>(s: &[T], rows: usize, cols: usize, band: Range<usize>, d: &mut [T]) {
    assert!(
        band.start <= band.end
            && band.end <= cols
            && rows.checked_mul(cols).is_some_and(|n| s.len() >= n)
            && d.len() >= band.len() * rows
    );
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if let Some((tile, done)) = tiles_for::<T>() {
        let (full_cols, full_rows) = (band.len() / tile * tile, rows / tile * tile);
        // SAFETY: `T` is `Copy` of the size the tiles move (1 or 4 bytes,
        // aligned as a word for 4); they copy whole elements within the
        // bounds asserted above (see `Tiles`).
        unsafe {
            done(
                s.as_ptr().cast(),
                cols,
                band.start,
                full_cols,
                full_rows,
                rows,
                d.as_mut_ptr().cast(),
            )
        };
        edges(s, rows, cols, band.clone(), full_cols, full_rows, d);
        return;
    }
    edges(s, rows, cols, band, 0, 0, d);
}

/// A `rows × cols` block read across rows `s_stride` apart and written
/// across columns `d_stride` apart: `d[d_at + c · d_stride + r] =
/// s[s_at + r · s_stride + c]`. A gather's transposition out of a larger
/// image (an NHWC image's channel half into NCHW).
#[allow(clippy::too_many_arguments)]
pub(crate) fn strided<T: Copy>(
    s: &[T],
    s_at: usize,
    s_stride: usize,
    rows: usize,
    cols: usize,
    d: &mut [T],
    d_at: usize,
    d_stride: usize,
) {
    if rows == 0 || cols == 0 {
        return;
    }
    let end = |at: usize, n: usize, stride: usize, len: usize| {
        (n - 1)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(at))
            .and_then(|x| x.checked_add(len))
    };
    assert!(
        end(s_at, rows, s_stride, cols).is_some_and(|e| e <= s.len())
            && end(d_at, cols, d_stride, rows).is_some_and(|e| e <= d.len())
    );
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    let (full_cols, full_rows) = match tiles_for::<T>() {
        Some((tile, done)) => {
            let (full_cols, full_rows) = (cols / tile * tile, rows / tile * tile);
            // SAFETY: `T` is `Copy` of the size the tiles move (1 or 4
            // bytes, aligned as a word for 4). They read `s_at + r ·
            // s_stride + c` and write `d_at + c · d_stride + r` for `r <
            // full_rows <= rows`, `c < full_cols <= cols`: in bounds by the
            // assertion above (see `Tiles`, whose `cols` and `rows` are
            // these strides).
            unsafe {
                done(
                    s.as_ptr().add(s_at).cast(),
                    s_stride,
                    0,
                    full_cols,
                    full_rows,
                    d_stride,
                    d.as_mut_ptr().add(d_at).cast(),
                )
            };
            (full_cols, full_rows)
        }
        None => (0, 0),
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let (full_cols, full_rows) = (0, 0);
    for c in 0..cols {
        let skip = if c < full_cols { full_rows } else { 0 };
        for r in skip..rows {
            d[d_at + c * d_stride + r] = s[s_at + r * s_stride + c];
        }
    }
}

/// What the tiles leave: for the first `full_cols` columns of the band the
/// rows from `full_rows` on, and for the rest every row.
fn edges<T: Copy>(
    s: &[T],
    rows: usize,
    cols: usize,
    band: Range<usize>,
    full_cols: usize,
    full_rows: usize,
    d: &mut [T],
) {
    let split = band.start + full_cols;
    for c in band.start..split {
        let out = &mut d[(c - band.start) * rows..][..rows];
        for (r, o) in out.iter_mut().enumerate().skip(full_rows) {
            *o = s[r * cols + c];
        }
    }
    // 16 columns at a time, so that each group's writes stay within a few
    // cache lines.
    const BLOCK: usize = 16;
    for c0 in (split..band.end).step_by(BLOCK) {
        let w = BLOCK.min(band.end - c0);
        for r in 0..rows {
            for (i, &v) in s[r * cols + c0..][..w].iter().enumerate() {
                d[(c0 - band.start + i) * rows + r] = v;
            }
        }
    }
}

/// `(s, cols, first, full_cols, full_rows, rows, d)`: the whole tiles of
/// columns `first..first + full_cols` and rows `0..full_rows` (both whole
/// tiles) of `s` (`rows × cols` elements) into `d` (`rows` elements a
/// column of the band). `cols` and `rows` serve only as the strides of
/// `s`'s rows and `d`'s columns.
///
/// # Safety
/// Element `r · cols + first + c` of `s` and `c · rows + r` of `d` are in
/// bounds for every `r < full_rows`, `c < full_cols` (with `s` holding
/// `rows · cols` elements and `d` `full_cols · rows`, `first + full_cols
/// <= cols` and `full_rows <= rows` suffice).
#[cfg(all(target_arch = "x86_64", not(miri)))]
type Tiles = unsafe fn(*const u8, usize, usize, usize, usize, usize, *mut u8);

/// The side of `T`'s tiles and the function moving them: bytes and
/// 4-byte words (aligned as words); none for other elements.
#[cfg(all(target_arch = "x86_64", not(miri)))]
fn tiles_for<T>() -> Option<(usize, Tiles)> {
    match (core::mem::size_of::<T>(), core::mem::align_of::<T>()) {
        (1, _) => Some((16, tiles_of_bytes as Tiles)),
        (4, 4) => Some((4, tiles_of_words as Tiles)),
        _ => None,
    }
}

/// [`Tiles`] of bytes, 16 × 16.
///
/// # Safety
/// As [`Tiles`], elements being bytes.
#[cfg(all(target_arch = "x86_64", not(miri)))]
unsafe fn tiles_of_bytes(
    s: *const u8,
    cols: usize,
    first: usize,
    full_cols: usize,
    full_rows: usize,
    rows: usize,
    d: *mut u8,
) {
    use core::arch::x86_64::*;
    for c in (0..full_cols).step_by(16) {
        for r0 in (0..full_rows).step_by(16) {
            // SAFETY: rows `r0..r0 + 16` of columns `first + c..+ 16` lie
            // within `s` (the caller's bounds); SSE2 is x86-64's baseline.
            let a: [__m128i; 16] =
                core::array::from_fn(|i| unsafe { _mm_loadu_si128(s.add((r0 + i) * cols + first + c).cast()) });
            // Four rounds of interleaving: pairs of rows into 16-bit
            // pairs, then 4-row, 8-row and 16-row columns. After round
            // one, b[2k + h] holds rows 2k, 2k + 1 at columns 8h..8h + 8.
            let b = round(|k| (a[2 * k], a[2 * k + 1]), sse2::unpacklo_epi8, sse2::unpackhi_epi8);
            // cc[(2m + h) · 2 + g]: rows 4m..4m + 4, columns 8h + 4g..+ 4.
            let cc = round(
                |mh| (b[4 * (mh / 2) + mh % 2], b[4 * (mh / 2) + 2 + mh % 2]),
                sse2::unpacklo_epi16,
                sse2::unpackhi_epi16,
            );
            // dd[((2n + h) · 2 + g) · 2 + f]: rows 8n..8n + 8, columns
            // 8h + 4g + 2f..+ 2.
            let dd = round(
                |nhg| (cc[2 * (nhg / 4) * 4 + nhg % 4], cc[(2 * (nhg / 4) + 1) * 4 + nhg % 4]),
                sse2::unpacklo_epi32,
                sse2::unpackhi_epi32,
            );
            for j in 0..16 {
                // Column j = 8h + 4g + 2f + e: rows 0..8 from dd[hgf],
                // rows 8..16 from dd[8 + hgf].
                let (hgf, e) = (j / 2, j % 2);
                // SAFETY: column `c + j` of the band holds `rows` elements
                // of `d`, of which rows `r0..r0 + 16` are in bounds.
                unsafe {
                    let (x, y) = (dd[hgf], dd[8 + hgf]);
                    let v = if e == 0 {
                        _mm_unpacklo_epi64(x, y)
                    } else {
                        _mm_unpackhi_epi64(x, y)
                    };
                    _mm_storeu_si128(d.add((c + j) * rows + r0).cast(), v);
                }
            }
        }
    }
}

/// SSE2's interleaving shuffles, safe: x86-64 always has SSE2.
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod sse2 {
    use core::arch::x86_64::{self as arch, __m128i};
    macro_rules! shuffles {
        ($($name:ident = $intrinsic:ident),*) => {$(
            #[inline(always)]
            pub(super) fn $name(x: __m128i, y: __m128i) -> __m128i {
                // SAFETY: a register shuffle; SSE2 is x86-64's baseline.
                unsafe { arch::$intrinsic(x, y) }
            }
        )*};
    }
    shuffles!(
        unpacklo_epi8 = _mm_unpacklo_epi8,
        unpackhi_epi8 = _mm_unpackhi_epi8,
        unpacklo_epi16 = _mm_unpacklo_epi16,
        unpackhi_epi16 = _mm_unpackhi_epi16,
        unpacklo_epi32 = _mm_unpacklo_epi32,
        unpackhi_epi32 = _mm_unpackhi_epi32
    );
}

/// One round of [`tiles_of_bytes`]: register `i` is the low (`i` even)
/// or high (odd) interleaving of the pair `pair(i / 2)`.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline(always)]
fn round(
    pair: impl Fn(usize) -> (core::arch::x86_64::__m128i, core::arch::x86_64::__m128i),
    lo: impl Fn(core::arch::x86_64::__m128i, core::arch::x86_64::__m128i) -> core::arch::x86_64::__m128i,
    hi: impl Fn(core::arch::x86_64::__m128i, core::arch::x86_64::__m128i) -> core::arch::x86_64::__m128i,
) -> [core::arch::x86_64::__m128i; 16] {
    core::array::from_fn(|i| {
        let (x, y) = pair(i / 2);
        if i % 2 == 0 {
            lo(x, y)
        } else {
            hi(x, y)
        }
    })
}

/// [`Tiles`] of 4-byte words, 4 × 4.
///
/// # Safety
/// As [`Tiles`], elements being 4-byte words (counted in words).
#[cfg(all(target_arch = "x86_64", not(miri)))]
unsafe fn tiles_of_words(
    s: *const u8,
    cols: usize,
    first: usize,
    full_cols: usize,
    full_rows: usize,
    rows: usize,
    d: *mut u8,
) {
    use core::arch::x86_64::*;
    let (s, d) = (s.cast::<u32>(), d.cast::<u32>());
    for c in (0..full_cols).step_by(4) {
        for r0 in (0..full_rows).step_by(4) {
            // SAFETY: rows `r0..r0 + 4` of columns `first + c..+ 4` lie
            // within `s`, and rows `r0..r0 + 4` of columns `c..c + 4` of
            // the band within `d` (the caller's bounds); SSE2 is x86-64's
            // baseline.
            unsafe {
                let a: [__m128i; 4] =
                    core::array::from_fn(|i| _mm_loadu_si128(s.add((r0 + i) * cols + first + c).cast()));
                let t0 = _mm_unpacklo_epi32(a[0], a[1]);
                let t1 = _mm_unpackhi_epi32(a[0], a[1]);
                let t2 = _mm_unpacklo_epi32(a[2], a[3]);
                let t3 = _mm_unpackhi_epi32(a[2], a[3]);
                let out = [
                    _mm_unpacklo_epi64(t0, t2),
                    _mm_unpackhi_epi64(t0, t2),
                    _mm_unpacklo_epi64(t1, t3),
                    _mm_unpackhi_epi64(t1, t3),
                ];
                for (j, v) in out.into_iter().enumerate() {
                    _mm_storeu_si128(d.add((c + j) * rows + r0).cast(), v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    /// Every band of several shapes, against the definition, for bytes,
    /// words and 2-byte elements (no tiles).
    fn check<T: Copy + PartialEq + core::fmt::Debug + Default>(of: fn(usize) -> T) {
        for (rows, cols) in [
            (1, 1),
            (5, 3),
            (16, 16),
            (17, 33),
            (32, 48),
            (116, 784),
            (784, 116),
            (4, 9),
            (40, 20),
        ] {
            if crate::testing::too_large_for_miri(rows * cols, crate::testing::MIRI_WORK) {
                continue;
            }
            let s: Vec<T> = (0..rows * cols).map(of).collect();
            for band in [
                0..cols,
                cols / 3..cols,
                0..cols / 2,
                cols / 5..cols / 5 + (cols / 2).max(1).min(cols - cols / 5),
            ] {
                let mut d = vec![T::default(); band.len() * rows + 3];
                columns(&s, rows, cols, band.clone(), &mut d);
                for c in band.clone() {
                    for r in 0..rows {
                        assert_eq!(
                            d[(c - band.start) * rows + r],
                            s[r * cols + c],
                            "{rows}x{cols} {band:?} at {r},{c}"
                        );
                    }
                }
                assert!(
                    d[band.len() * rows..].iter().all(|&v| v == T::default()),
                    "wrote past the band"
                );
            }
        }
    }

    #[test]
    fn tiles_transpose_every_shape_and_band() {
        check(|i| (i % 251) as u8 + 1);
        check(|i| i as u32 + 1);
        check(|i| i as f32 + 0.5);
        check(|i| (i % 30000) as u16 + 1);
    }
}
