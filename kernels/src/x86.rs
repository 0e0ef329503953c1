//! Small x86-64 helpers that more than one kernel family or instruction
//! set uses: masked AVX-512 loads and stores (the GEMM tiles, the NHWC
//! convolutions), a prefetch of a tile of `C` (the AVX2 and AVX-512
//! GEMM tiles) and one of a run of bytes (the int8 VNNI tiles). Here so
//! that none of those files imports another for them, and the prefetches
//! sit together. Compiled for x86-64 only.

/// Loads the 16 floats at `p`, or only the lanes of `m` (zero in the
/// others). A full mask takes a plain load: masked memory operations are
/// slow on some CPUs, and most vectors of a kernel are full.
///
/// # Safety
/// The CPU must support AVX-512F and the lanes of `m` at `p` be readable.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn load16(m: core::arch::x86_64::__mmask16, p: *const f32) -> core::arch::x86_64::__m512 {
    use core::arch::x86_64::*;
    // SAFETY: by the caller.
    unsafe {
        if m == 0xffff {
            _mm512_loadu_ps(p)
        } else {
            _mm512_maskz_loadu_ps(m, p)
        }
    }
}

/// The mask of the first `n` of 16 lanes (all of them from 16 on).
#[inline]
pub(crate) fn lanes(n: usize) -> core::arch::x86_64::__mmask16 {
    if n >= 16 {
        0xffff
    } else {
        (1u16 << n) - 1
    }
}

/// Stores the lanes of `m` of `v` at `p` (see [`load16`]).
///
/// # Safety
/// The CPU must support AVX-512F and the lanes of `m` at `p` be writable.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn store16(m: core::arch::x86_64::__mmask16, p: *mut f32, v: core::arch::x86_64::__m512) {
    use core::arch::x86_64::*;
    // SAFETY: by the caller.
    unsafe {
        if m == 0xffff {
            _mm512_storeu_ps(p, v)
        } else {
            _mm512_mask_storeu_ps(p, m, v)
        }
    }
}

/// Asks for the `rows` × `cols` floats of `C` from `c` (rows `ldc` apart)
/// that a GEMM tile adds its sums to, before its products: when `C` is larger
/// than L2 (a 1024 × 1024 product, accumulated over four depth blocks)
/// they come from L3 or memory during the arithmetic instead of stalling
/// the epilogue. Zen 3, 1024³, the two variants alternated in one process
/// over 30 pairs, 5 runs: median 1–5% higher in 9 of 10 comparisons.
#[inline(always)]
pub(crate) fn prefetch_tile(c: *const f32, ldc: usize, rows: usize, cols: usize) {
    use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for i in 0..rows {
        let row = c.wrapping_add(i * ldc);
        // SAFETY: a prefetch reads nothing the program sees and never
        // faults, whatever the address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(row as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(cols - 1) as *const i8);
        }
    }
}

/// Asks for `bytes` in L1, a cache line at a time (the int8 VNNI tiles,
/// for the next pair's weights). Not inlined: out of the tiles' loops,
/// which it would crowd.
#[inline(never)]
pub(crate) fn prefetch_bytes(bytes: &[u8]) {
    use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for line in bytes.chunks(64) {
        // SAFETY: a prefetch reads nothing the program sees (and the
        // line is within `bytes`).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
    }
}
