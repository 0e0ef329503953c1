//! Sixteen floats as a kernel holds them ([`F32x16`]): an array the
//! compiler vectorizes as it can (every CPU, and Miri), one AVX-512
//! register ([`Zmm`]) or two AVX2 ones ([`Ymm2`]). A kernel written once
//! over the trait is compiled for each in a `#[target_feature]` wrapper;
//! the NHWC convolutions of narrow groups and Winograd's transforms are.
//! Each method is the same lane-by-lane operation in every
//! implementation, in the same order: the same bits on every CPU.

/// A vector of 16 floats.
///
/// The register implementations' safe methods run their instruction set's
/// intrinsics: they may be called only where the CPU has it, that is,
/// within a function compiled for it that its caller chose after
/// checking the CPU (as for every method below).
pub(crate) trait F32x16: Copy {
    /// # Safety
    /// The 16 floats at `p` are readable.
    unsafe fn load(p: *const f32) -> Self;
    /// The first `n` floats at `p`, zeros after.
    ///
    /// # Safety
    /// The first `n.min(16)` floats at `p` are readable.
    unsafe fn load_first(p: *const f32, n: usize) -> Self;
    /// # Safety
    /// The 16 floats at `p` are writable.
    unsafe fn store(self, p: *mut f32);
    /// Stores the first `n` lanes at `p`.
    ///
    /// # Safety
    /// The first `n.min(16)` floats at `p` are writable.
    unsafe fn store_first(self, p: *mut f32, n: usize);
    fn zero() -> Self;
    fn splat(v: f32) -> Self;
    fn add(self, b: Self) -> Self;
    fn sub(self, b: Self) -> Self;
    /// `self + x · w`, rounded once.
    fn fma(self, x: Self, w: Self) -> Self;
    /// `min(max(self, lo), hi)`, lane by lane (`max` then `min`:
    /// XNNPACK's order, which decides what a NaN becomes).
    fn clamp(self, lo: Self, hi: Self) -> Self;
}

impl F32x16 for [f32; 16] {
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: by the caller.
        unsafe { p.cast::<[f32; 16]>().read_unaligned() }
    }
    #[inline(always)]
    unsafe fn load_first(p: *const f32, n: usize) -> Self {
        let mut a = [0.0; 16];
        for (l, v) in a.iter_mut().enumerate().take(n) {
            // SAFETY: by the caller, lane `l < n` is readable.
            *v = unsafe { *p.add(l) };
        }
        a
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: by the caller.
        unsafe { p.cast::<[f32; 16]>().write_unaligned(self) }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, n: usize) {
        for (l, &v) in self.iter().enumerate().take(n) {
            // SAFETY: by the caller, lane `l < n` is writable.
            unsafe { *p.add(l) = v };
        }
    }
    #[inline(always)]
    fn zero() -> Self {
        [0.0; 16]
    }
    #[inline(always)]
    fn splat(v: f32) -> Self {
        [v; 16]
    }
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        core::array::from_fn(|l| self[l] + b[l])
    }
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        core::array::from_fn(|l| self[l] - b[l])
    }
    #[inline(always)]
    fn fma(self, x: Self, w: Self) -> Self {
        // Multiplied and added as two roundings where the target has no
        // FMA instruction wired in: what the portable kernels did before
        // this trait (`mul_add` would call libm's software fma).
        core::array::from_fn(|l| self[l] + x[l] * w[l])
    }
    #[inline(always)]
    fn clamp(self, lo: Self, hi: Self) -> Self {
        core::array::from_fn(|l| self[l].max(lo[l]).min(hi[l]))
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Ymm2, Zmm};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::F32x16;
    use core::arch::x86_64::*;

    /// One AVX-512 register. Its methods need AVX-512F (see [`F32x16`]).
    #[derive(Clone, Copy)]
    pub(crate) struct Zmm(pub(crate) __m512);

    // SAFETY (each safe method): run only where the CPU has AVX-512F, as
    // the trait asks.
    impl F32x16 for Zmm {
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: by the caller.
            Zmm(unsafe { _mm512_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn load_first(p: *const f32, n: usize) -> Self {
            // SAFETY: by the caller (`lanes` takes 16 from 16 on).
            Zmm(unsafe { crate::x86::load16(crate::x86::lanes(n), p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: by the caller.
            unsafe { _mm512_storeu_ps(p, self.0) }
        }
        #[inline(always)]
        unsafe fn store_first(self, p: *mut f32, n: usize) {
            // SAFETY: by the caller.
            unsafe { crate::x86::store16(crate::x86::lanes(n), p, self.0) }
        }
        #[inline(always)]
        fn zero() -> Self {
            // SAFETY: as above.
            Zmm(unsafe { _mm512_setzero_ps() })
        }
        #[inline(always)]
        fn splat(v: f32) -> Self {
            // SAFETY: as above.
            Zmm(unsafe { _mm512_set1_ps(v) })
        }
        #[inline(always)]
        fn add(self, b: Self) -> Self {
            // SAFETY: as above.
            Zmm(unsafe { _mm512_add_ps(self.0, b.0) })
        }
        #[inline(always)]
        fn sub(self, b: Self) -> Self {
            // SAFETY: as above.
            Zmm(unsafe { _mm512_sub_ps(self.0, b.0) })
        }
        #[inline(always)]
        fn fma(self, x: Self, w: Self) -> Self {
            // SAFETY: as above.
            Zmm(unsafe { _mm512_fmadd_ps(x.0, w.0, self.0) })
        }
        #[inline(always)]
        fn clamp(self, lo: Self, hi: Self) -> Self {
            // SAFETY: as above.
            Zmm(unsafe { _mm512_min_ps(_mm512_max_ps(self.0, lo.0), hi.0) })
        }
    }

    /// Two AVX2 registers of 8 lanes. Its methods need AVX2, and `fma`
    /// FMA too (see [`F32x16`]).
    #[derive(Clone, Copy)]
    pub(crate) struct Ymm2(pub(crate) [__m256; 2]);

    // SAFETY (each safe method): run only where the CPU has AVX2 (and FMA
    // for `fma`), as the trait asks.
    impl Ymm2 {
        /// The masks of the first `n` lanes (`n` ≤ 16) of each half: a
        /// lane is selected when its index is below `n`.
        #[inline(always)]
        pub(crate) fn first(n: usize) -> [__m256i; 2] {
            // SAFETY: AVX2, as above.
            unsafe {
                let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                let n = n.min(16) as i32;
                [
                    _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes),
                    _mm256_cmpgt_epi32(_mm256_set1_epi32(n - 8), lanes),
                ]
            }
        }
    }

    impl F32x16 for Ymm2 {
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: by the caller, 16 floats.
            Ymm2(unsafe { [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))] })
        }
        #[inline(always)]
        unsafe fn load_first(p: *const f32, n: usize) -> Self {
            // SAFETY: by the caller, `n` floats; a masked load reads only
            // the lanes its mask selects and zeroes the others.
            unsafe {
                let m = Self::first(n);
                Ymm2([_mm256_maskload_ps(p, m[0]), _mm256_maskload_ps(p.add(8), m[1])])
            }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: by the caller, 16 floats.
            unsafe {
                _mm256_storeu_ps(p, self.0[0]);
                _mm256_storeu_ps(p.add(8), self.0[1]);
            }
        }
        #[inline(always)]
        unsafe fn store_first(self, p: *mut f32, n: usize) {
            // SAFETY: by the caller, `n` floats; a masked store writes only
            // the lanes its mask selects.
            unsafe {
                let m = Self::first(n);
                _mm256_maskstore_ps(p, m[0], self.0[0]);
                _mm256_maskstore_ps(p.add(8), m[1], self.0[1]);
            }
        }
        #[inline(always)]
        fn zero() -> Self {
            // SAFETY: as above.
            Ymm2([unsafe { _mm256_setzero_ps() }; 2])
        }
        #[inline(always)]
        fn splat(v: f32) -> Self {
            // SAFETY: as above.
            Ymm2([unsafe { _mm256_set1_ps(v) }; 2])
        }
        #[inline(always)]
        fn add(self, b: Self) -> Self {
            // SAFETY: as above.
            Ymm2(core::array::from_fn(|h| unsafe { _mm256_add_ps(self.0[h], b.0[h]) }))
        }
        #[inline(always)]
        fn sub(self, b: Self) -> Self {
            // SAFETY: as above.
            Ymm2(core::array::from_fn(|h| unsafe { _mm256_sub_ps(self.0[h], b.0[h]) }))
        }
        #[inline(always)]
        fn fma(self, x: Self, w: Self) -> Self {
            // SAFETY: as above, with FMA.
            Ymm2(core::array::from_fn(|h| unsafe {
                _mm256_fmadd_ps(x.0[h], w.0[h], self.0[h])
            }))
        }
        #[inline(always)]
        fn clamp(self, lo: Self, hi: Self) -> Self {
            // SAFETY: as above.
            Ymm2(core::array::from_fn(|h| unsafe {
                _mm256_min_ps(_mm256_max_ps(self.0[h], lo.0[h]), hi.0[h])
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::F32x16;

    /// `reference`'s computation, and a partial load and store, on `V`.
    ///
    /// # Safety
    /// The CPU runs `V`.
    #[inline(always)]
    unsafe fn check<V: F32x16>(a: &[f32; 16], b: &[f32; 16], w: &[f32; 16], reference: &[f32; 16]) {
        // SAFETY: 16 floats each; the CPU by the caller.
        unsafe {
            let [a, b, w] = [a, b, w].map(|v| V::load(v.as_ptr()));
            let mut out = [9.0f32; 16];
            a.fma(b, w)
                .sub(a)
                .add(b)
                .clamp(V::splat(-1.0), V::splat(1.5))
                .store(out.as_mut_ptr());
            // `fma` rounds once on the registers, twice on the array:
            // within an ulp of the sum's size.
            for (x, y) in out.iter().zip(reference) {
                assert!((x - y).abs() <= 1e-5, "{x} against {y}");
            }
            // In one half, across the halves, none, all.
            for (loaded, stored) in [(5, 7), (11, 13), (0, 3), (9, 8), (16, 16)] {
                let mut part = [9.0f32; 16];
                V::load_first(reference.as_ptr(), loaded).store_first(part.as_mut_ptr(), stored);
                for (l, &x) in part.iter().enumerate() {
                    let want = if l >= stored {
                        9.0
                    } else if l >= loaded {
                        0.0
                    } else {
                        reference[l]
                    };
                    assert_eq!(x, want, "lane {l} of {loaded} loaded, {stored} stored");
                }
            }
        }
    }

    /// Every implementation this CPU runs gives the array's bits, the
    /// partial loads and stores touching only their lanes.
    #[test]
    fn every_implementation_gives_the_arrays_bits() {
        let a: [f32; 16] = core::array::from_fn(|l| l as f32 * 0.37 - 2.0);
        let b: [f32; 16] = core::array::from_fn(|l| 1.5 - l as f32 * 0.21);
        let w: [f32; 16] = core::array::from_fn(|l| (l as f32).sin());
        let reference = a
            .fma(b, w)
            .sub(a)
            .add(b)
            .clamp(<[f32; 16]>::splat(-1.0), <[f32; 16]>::splat(1.5));
        // SAFETY: the array runs on every CPU.
        unsafe { check::<[f32; 16]>(&a, &b, &w, &reference) };
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            use crate::cpu::Isa;
            #[target_feature(enable = "avx512f")]
            unsafe fn on_avx512(a: &[f32; 16], b: &[f32; 16], w: &[f32; 16], r: &[f32; 16]) {
                // SAFETY: by the caller.
                unsafe { check::<super::Zmm>(a, b, w, r) }
            }
            #[target_feature(enable = "avx2,fma")]
            unsafe fn on_avx2(a: &[f32; 16], b: &[f32; 16], w: &[f32; 16], r: &[f32; 16]) {
                // SAFETY: by the caller.
                unsafe { check::<super::Ymm2>(a, b, w, r) }
            }
            let isa = Isa::detect();
            if isa == Isa::Avx512 {
                // SAFETY: the CPU has AVX-512F.
                unsafe { on_avx512(&a, &b, &w, &reference) };
            }
            if matches!(isa, Isa::Avx512 | Isa::Avx2Fma) {
                // SAFETY: the CPU has AVX2 and FMA.
                unsafe { on_avx2(&a, &b, &w, &reference) };
            }
        }
    }
}
