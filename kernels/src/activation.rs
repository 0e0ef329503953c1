//! Activations applied by the kernel that writes their input, on results
//! it has just written: a convolution's or a product's epilogue
//! ([`Activation`]).

/// What a convolution or a matrix product applies to each result last
/// ([`crate::nhwc::FoldedConv::activation`], [`crate::gemm::Epilogue::activation`]):
/// an activation that would otherwise take a pass of its own over the
/// output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// Nothing.
    Identity,
    /// `aten::hardswish` (MobileNetV3's), computed as
    /// [`crate::scalar::hardswish`] computes it: the same bits.
    Hardswish,
    /// `x · sigmoid(x)`, each step rounded to `f32` (EfficientNet's SiLU
    /// as its export writes it, a `sigmoid` then a `mul`), computed as
    /// [`crate::scalar::SigmoidMul`] computes it.
    SigmoidMul,
}

impl Activation {
    /// Applies this activation to each element of `v`, on this thread.
    pub(crate) fn apply(self, v: &mut [f32]) {
        struct Hardswish<'a>(&'a mut [f32]);
        impl crate::cpu::Vectorized for Hardswish<'_> {
            type Output = ();
            #[inline(always)]
            fn run(self) {
                for v in self.0 {
                    // `scalar::hardswish`'s operations in its order, as
                    // comparisons the compiler vectorizes: NaN in, NaN out.
                    let x = *v;
                    let t = x + 3.0;
                    let t = if t > 0.0 { t } else { 0.0 };
                    let t = if t < 6.0 { t } else { 6.0 };
                    *v = x * t / 6.0;
                }
            }
        }
        /// A [`crate::scalar::Lanes`] function of each element, in place.
        struct InLanes<'a, F>(&'a mut [f32], core::marker::PhantomData<F>);
        impl<F: crate::scalar::Lanes> crate::cpu::Vectorized for InLanes<'_, F> {
            type Output = ();
            #[inline(always)]
            fn run(self) {
                const L: usize = crate::scalar::LANES;
                let mut chunks = self.0.chunks_exact_mut(L);
                for chunk in &mut chunks {
                    if let Ok(chunk) = <&mut [f32; L]>::try_from(chunk) {
                        *chunk = F::lanes(chunk);
                    }
                }
                for v in chunks.into_remainder() {
                    *v = F::one(*v);
                }
            }
        }
        match self {
            Activation::Identity => {}
            Activation::Hardswish => crate::cpu::with_best_isa(Hardswish(v)),
            Activation::SigmoidMul => {
                crate::cpu::with_best_isa(InLanes::<crate::scalar::SigmoidMul>(v, core::marker::PhantomData))
            }
        }
    }

    /// [`Self::apply`] to the `rows` rows of `out`, `row_len` elements
    /// each, in bands spread over the threads when there are enough.
    pub(crate) fn apply_rows(self, out: &mut [f32], rows: usize, row_len: usize) {
        if self == Activation::Identity {
            return;
        }
        // Small outputs stay on one thread, where handing half of the
        // pass to another would cost more than it saves.
        let worth_splitting = out.len() >= 1 << 15;
        crate::parallel::for_each_band(out, rows, row_len, 1, worth_splitting, &|_, band| self.apply(band));
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    /// The fused activations give the bits of the instructions they
    /// replace (`scalar::hardswish`; `x · sigmoid(x)`, each step rounded),
    /// across their pieces, edges, infinities and NaN, in the tails of
    /// vectors too.
    #[test]
    fn activations_give_the_scalar_bits() {
        let mut xs: Vec<f32> = vec![
            -3.0,
            3.0,
            -0.0,
            0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MAX,
            f32::MIN,
        ];
        xs.extend(crate::testing::Lcg(3).vec(1000).iter().map(|v| v * 8.0));
        xs.extend((0..100).map(|i| -3.0 + i as f32 * 1e-7));
        for len in [xs.len(), 1, 15, 17, 33] {
            type Function = fn(f32) -> f32;
            let silu: Function = |x| x * crate::scalar::sigmoid(x);
            let hardswish: Function = crate::scalar::hardswish;
            for (activation, f) in [(Activation::Hardswish, hardswish), (Activation::SigmoidMul, silu)] {
                let mut got = xs[..len].to_vec();
                activation.apply(&mut got);
                for (&x, &y) in xs.iter().zip(&got) {
                    let want = f(x);
                    assert!(
                        y.to_bits() == want.to_bits() || (y.is_nan() && want.is_nan()),
                        "{activation:?}({x}) = {y}, not {want}"
                    );
                }
            }
            let mut same = xs[..len].to_vec();
            Activation::Identity.apply(&mut same);
            assert!(same.iter().zip(&xs).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }
}
