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

/// Whether the AVX2 + FMA code paths may run on this CPU (every x86 set
/// above [`Isa::Portable`] implies both).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn has_avx2_fma() -> bool {
    Isa::detect() != Isa::Portable
}

/// Work to be compiled once per instruction set: `run` must be
/// `#[inline(always)]`, so that each wrapper below gets its own copy of it,
/// which the compiler vectorizes for that set. (A closure would not do: the
/// compiler may keep one copy of it, compiled for none.)
pub(crate) trait Vectorized {
    type Output;
    fn run(self) -> Self::Output;
}

/// Runs `work` compiled for the best instruction set of this CPU.
#[inline(always)]
pub(crate) fn with_best_isa<W: Vectorized>(work: W) -> W::Output {
    match Isa::detect() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: detect() found AVX-512F.
        Isa::Avx512 => unsafe { on_avx512(work) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: detect() found AVX2 and FMA.
        Isa::Avx2Fma => unsafe { on_avx2(work) },
        Isa::Portable => work.run(),
    }
}

/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn on_avx512<W: Vectorized>(work: W) -> W::Output {
    work.run()
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn on_avx2<W: Vectorized>(work: W) -> W::Output {
    work.run()
}
