//! The vector instruction sets kernels choose between at run time.

#[cfg(all(feature = "std", target_arch = "x86_64"))]
extern crate std;

/// What the CPU offers the kernels, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Isa {
    /// The best this CPU runs: detected at run time with the `std` feature,
    /// else what the compile-time target features allow.
    #[inline(always)]
    pub(crate) fn detect() -> Isa {
        #[cfg(all(feature = "std", target_arch = "x86_64"))]
        {
            if std::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return Isa::Avx2Fma;
            }
        }
        #[cfg(all(not(feature = "std"), target_arch = "x86_64"))]
        {
            if cfg!(target_feature = "avx512f") {
                return Isa::Avx512;
            }
            if cfg!(all(target_feature = "avx2", target_feature = "fma")) {
                return Isa::Avx2Fma;
            }
        }
        Isa::Portable
    }
}

/// Runs `f` compiled for the best instruction set of this CPU: `f` must be
/// `#[inline(always)]` so each wrapper below gets its own copy of it, which
/// the compiler vectorizes for that set.
#[inline(always)]
pub(crate) fn with_best_isa<R>(f: impl FnOnce() -> R) -> R {
    match Isa::detect() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: detect() found AVX-512F.
        Isa::Avx512 => unsafe { on_avx512(f) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: detect() found AVX2 and FMA.
        Isa::Avx2Fma => unsafe { on_avx2(f) },
        Isa::Portable => f(),
    }
}

/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn on_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn on_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}
