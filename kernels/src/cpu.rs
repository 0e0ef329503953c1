//! The vector instruction sets kernels choose between at run time, and
//! the optional aarch64 extensions some kernels use ([`aarch64_features`]).

#[cfg(all(feature = "std", any(target_arch = "x86_64", target_arch = "aarch64")))]
extern crate std;

/// What the CPU offers the kernels, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    // Never the answer on aarch64 with NEON.
    #[cfg_attr(all(target_arch = "aarch64", target_feature = "neon"), allow(dead_code))]
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// aarch64's Advanced SIMD, part of the base instruction set (on by
    /// default for every aarch64 target with an FPU): known at compile
    /// time, never detected.
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    Neon,
}

/// What `PTEC_ISA` allows the x86 kernels (with `std`): `avx2` no
/// AVX-512, `portable` no vector extension, unset or `native` all the CPU
/// has. It is read once. It exists to benchmark and test the other paths
/// on a CPU that has more (CI runs the kernels' and fixtures' tests under
/// both); another value is ignored, with a warning.
#[cfg(all(feature = "std", target_arch = "x86_64"))]
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Cap {
    Native = 1,
    Avx2 = 2,
    Portable = 3,
}

#[cfg(all(feature = "std", target_arch = "x86_64"))]
impl Cap {
    #[inline(always)]
    pub(crate) fn get() -> Cap {
        use core::sync::atomic::{AtomicU8, Ordering};
        static CAP: AtomicU8 = AtomicU8::new(0);
        match CAP.load(Ordering::Relaxed) {
            2 => Cap::Avx2,
            3 => Cap::Portable,
            1 => Cap::Native,
            _ => {
                let cap = Cap::read();
                CAP.store(cap as u8, Ordering::Relaxed);
                cap
            }
        }
    }

    #[cold]
    fn read() -> Cap {
        Cap::with_variable(|value| match value {
            Some(b"avx2") => Cap::Avx2,
            Some(b"portable") => Cap::Portable,
            None | Some(b"" | b"native") => Cap::Native,
            Some(other) => {
                let other = std::string::String::from_utf8_lossy(other);
                std::eprintln!("ptec: PTEC_ISA={other:?} is none of native, avx2, portable: ignored");
                Cap::Native
            }
        })
    }

    /// Calls `f` with `PTEC_ISA`'s value, read without allocating: it is
    /// read on a first kernel call, and inference never allocates.
    #[cfg(unix)]
    fn with_variable(f: impl FnOnce(Option<&[u8]>) -> Cap) -> Cap {
        unsafe extern "C" {
            fn getenv(name: *const core::ffi::c_char) -> *const core::ffi::c_char;
        }
        // SAFETY: the name is NUL-terminated. `getenv` returns null or a
        // NUL-terminated string of the environment, valid until the
        // environment changes, and `f` is done with it before this returns
        // (changing the environment while other threads read it is what
        // makes `std::env::set_var` unsafe).
        unsafe {
            let value = getenv(c"PTEC_ISA".as_ptr());
            f((!value.is_null()).then(|| core::ffi::CStr::from_ptr(value).to_bytes()))
        }
    }

    /// As above (`std` reads it into an allocation, off unix).
    #[cfg(not(unix))]
    fn with_variable(f: impl FnOnce(Option<&[u8]>) -> Cap) -> Cap {
        let value = std::env::var_os("PTEC_ISA");
        f(value.as_ref().map(|v| v.as_encoded_bytes()))
    }
}

impl Isa {
    /// The best this CPU runs: detected at run time with the `std` feature
    /// (within `PTEC_ISA`'s cap, see [`Cap`]), else what the compile-time
    /// target features allow. Always [`Isa::Portable`] under Miri, which
    /// runs neither inline assembly nor most vector intrinsics: there the
    /// portable paths are what it checks.
    #[inline(always)]
    pub(crate) fn detect() -> Isa {
        if cfg!(miri) {
            return Isa::Portable;
        }
        #[cfg(all(feature = "std", target_arch = "x86_64"))]
        {
            let cap = Cap::get();
            if cap == Cap::Portable {
                return Isa::Portable;
            }
            if cap == Cap::Native && std::is_x86_feature_detected!("avx512f") {
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
        // Nothing to detect on aarch64: NEON is there or not for the
        // whole build.
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        let best = Isa::Neon;
        #[cfg(not(all(target_arch = "aarch64", target_feature = "neon")))]
        let best = Isa::Portable;
        best
    }
}

/// Whether the AVX2 + FMA code paths may run on this CPU (every x86 set
/// above [`Isa::Portable`] implies both).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn has_avx2_fma() -> bool {
    Isa::detect() != Isa::Portable
}

/// Whether this CPU has every AVX-512 feature named: detected when the
/// program runs with `std` (and `PTEC_ISA` allows AVX-512), as compiled
/// for without; never under Miri, which runs the portable paths only (see
/// `Isa::detect`).
#[cfg(target_arch = "x86_64")]
macro_rules! x86_has {
    ($($feature:tt),+) => {{
        if cfg!(miri) {
            false
        } else {
            #[cfg(feature = "std")]
            {
                Cap::get() == Cap::Native && $(std::is_x86_feature_detected!($feature))&&+
            }
            #[cfg(not(feature = "std"))]
            {
                cfg!(all($(target_feature = $feature),+))
            }
        }
    }};
}

/// Whether AVX-512 with byte and word lanes, vector lengths and VNNI may
/// run on this CPU (the int8 dot products' set).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn has_avx512_vnni() -> bool {
    x86_has!("avx512f", "avx512bw", "avx512vl", "avx512vnni")
}

/// Whether AVX-512 with byte lanes and VBMI's byte permutations may run on
/// this CPU (the table lookups of `qs8::lut`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn has_avx512_vbmi() -> bool {
    x86_has!("avx512f", "avx512bw", "avx512vbmi")
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
        // The whole crate is compiled with NEON already.
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        Isa::Neon => work.run(),
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

/// The optional aarch64 extensions that kernels (int8 and `f16`
/// products) may use, as [`aarch64_features`] finds them. Every field is
/// false on other architectures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Aarch64Features {
    /// `SDOT`/`UDOT` (FEAT_DotProd): four 8-bit products summed into each
    /// 32-bit lane.
    pub dotprod: bool,
    /// Half-precision arithmetic in the vector registers (FEAT_FP16).
    pub fp16: bool,
    /// `SMMLA`/`UMMLA` (FEAT_I8MM): 8-bit matrix multiply-accumulate.
    pub i8mm: bool,
}

/// The optional aarch64 extensions of this CPU: detected at run time with
/// the `std` feature (the operating system's report), else those the
/// target enables at compile time (`-C target-feature`, `-C target-cpu`).
/// All false on other architectures. The static int8 layers over packed
/// weights (convolutions and fully connected layers) take `dotprod`
/// (`SDOT`); no kernel uses `fp16` or `i8mm` yet.
pub fn aarch64_features() -> Aarch64Features {
    #[cfg(all(feature = "std", target_arch = "aarch64"))]
    {
        Aarch64Features {
            dotprod: std::arch::is_aarch64_feature_detected!("dotprod"),
            fp16: std::arch::is_aarch64_feature_detected!("fp16"),
            i8mm: std::arch::is_aarch64_feature_detected!("i8mm"),
        }
    }
    #[cfg(not(all(feature = "std", target_arch = "aarch64")))]
    {
        compiled_aarch64_features()
    }
}

/// The optional aarch64 extensions the target enables at compile time
/// (none off aarch64): what a CPU that runs this build must have.
#[cfg(any(test, not(all(feature = "std", target_arch = "aarch64"))))]
fn compiled_aarch64_features() -> Aarch64Features {
    let on = cfg!(target_arch = "aarch64");
    Aarch64Features {
        dotprod: on && cfg!(target_feature = "dotprod"),
        fp16: on && cfg!(target_feature = "fp16"),
        i8mm: on && cfg!(target_feature = "i8mm"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Detection runs (on a CPU, or under an emulator, whatever it
    /// reports), finds at least what the build requires, and without
    /// `std` is exactly what the build requires.
    #[test]
    fn aarch64_features_include_the_compiled_ones() {
        let found = aarch64_features();
        let compiled = compiled_aarch64_features();
        assert!(!compiled.dotprod || found.dotprod);
        assert!(!compiled.fp16 || found.fp16);
        assert!(!compiled.i8mm || found.i8mm);
        if cfg!(not(all(feature = "std", target_arch = "aarch64"))) {
            assert_eq!(found, compiled);
        }
        if cfg!(not(target_arch = "aarch64")) {
            assert_eq!(found, Aarch64Features::default());
        }
    }

    /// `PTEC_ISA` caps what the x86 kernels choose (CI runs the tests
    /// under each cap; natively, unset, all the CPU has is allowed).
    #[cfg(all(feature = "std", target_arch = "x86_64", not(miri)))]
    #[test]
    fn the_instruction_set_is_capped_as_ptec_isa_says() {
        let avx512 = std::is_x86_feature_detected!("avx512f");
        match std::env::var("PTEC_ISA").as_deref() {
            Ok("portable") => {
                assert_eq!(Isa::detect(), Isa::Portable);
                assert!(!has_avx2_fma() && !has_avx512_vnni() && !has_avx512_vbmi());
            }
            Ok("avx2") => {
                assert_ne!(Isa::detect(), Isa::Avx512);
                assert!(!has_avx512_vnni() && !has_avx512_vbmi());
            }
            _ => assert_eq!(Isa::detect() == Isa::Avx512, avx512),
        }
    }

    /// aarch64 builds with NEON run it; other non-x86 builds are portable.
    #[test]
    fn neon_on_aarch64() {
        #[cfg(all(not(miri), target_arch = "aarch64", target_feature = "neon"))]
        assert_eq!(Isa::detect(), Isa::Neon);
        #[cfg(not(any(target_arch = "x86_64", all(target_arch = "aarch64", target_feature = "neon"))))]
        assert_eq!(Isa::detect(), Isa::Portable);
    }
}
