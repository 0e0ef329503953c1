//! Random numbers for `rand.out` (uniform on [0, 1)) and `randn.out`
//! (standard normal).
//!
//! The generator is SplitMix64 (Steele, Lea and Flood, "Fast splittable
//! pseudorandom number generators", OOPSLA 2014; Java's `SplittableRandom`):
//! a 64-bit counter advanced by the golden-ratio increment, each step's
//! value passed through a mixing function. Its state is two integers (a
//! seed and how many words were drawn since), all-zero is a valid state
//! (seed 0), it allocates nothing, and every draw continues where the last
//! one stopped. A stream (the method's) is mixed into the seed so that two
//! methods of one program seeded alike do not draw the same numbers.
//!
//! Uniform values take as many random bits as the type's significand holds
//! (53 for `f64`, 24 for `f32`, 11 for `f16`, 8 for `bf16`) times a power
//! of two, so every value is exact and below 1. Normal values come in pairs
//! from Box–Muller, computed in `f64` and rounded to the type once.
use crate::{bf16, f16};

/// The golden-ratio increment of SplitMix64.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function (the variant-13 finalizer of MurmurHash3).
#[inline(always)]
const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A generator's state: its seed and how many 64-bit words it has drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Rng {
    seed: u64,
    drawn: u64,
}

impl Rng {
    /// A generator at the start of `seed`'s sequence.
    pub const fn seeded(seed: u64) -> Self {
        Rng { seed, drawn: 0 }
    }

    /// The words of `stream` from where the last draw stopped.
    fn words(&mut self, stream: u64) -> Words<'_> {
        let start = mix(self.seed ^ mix(stream.wrapping_add(GAMMA)));
        Words {
            start,
            drawn: &mut self.drawn,
        }
    }
}

struct Words<'a> {
    start: u64,
    drawn: &'a mut u64,
}

impl Words<'_> {
    #[inline(always)]
    fn next(&mut self) -> u64 {
        *self.drawn = self.drawn.wrapping_add(1);
        mix(self.start.wrapping_add(self.drawn.wrapping_mul(GAMMA)))
    }
}

/// A float type random values are drawn in.
pub trait RandomFloat: Copy {
    /// A value uniform on [0, 1) from the high bits of `word`.
    fn uniform(word: u64) -> Self;
    /// `v` rounded to the type.
    fn from_f64(v: f64) -> Self;
}

impl RandomFloat for f64 {
    fn uniform(word: u64) -> Self {
        (word >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

impl RandomFloat for f32 {
    fn uniform(word: u64) -> Self {
        (word >> 40) as f32 * (1.0 / (1u32 << 24) as f32)
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl RandomFloat for f16 {
    fn uniform(word: u64) -> Self {
        f16::from_f32((word >> 53) as f32 * (1.0 / 2048.0))
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
}

impl RandomFloat for bf16 {
    fn uniform(word: u64) -> Self {
        bf16::from_f32((word >> 56) as f32 * (1.0 / 256.0))
    }
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
}

/// `rand.out`: `out` filled with values uniform on [0, 1).
pub fn uniform<T: RandomFloat>(rng: &mut Rng, stream: u64, out: &mut [T]) {
    let mut words = rng.words(stream);
    for o in out {
        *o = T::uniform(words.next());
    }
}

/// `randn.out`: `out` filled with standard normal values (Box–Muller: two
/// uniform words make two values; an odd count drops the last one's twin).
pub fn normal<T: RandomFloat>(rng: &mut Rng, stream: u64, out: &mut [T]) {
    let mut words = rng.words(stream);
    for pair in out.chunks_mut(2) {
        // 1 - u is in (0, 1]: its logarithm is finite.
        let u1 = 1.0 - f64::uniform(words.next());
        let u2 = f64::uniform(words.next());
        let r = libm::sqrt(-2.0 * libm::log(u1));
        let theta = 2.0 * core::f64::consts::PI * u2;
        pair[0] = T::from_f64(r * libm::cos(theta));
        if let Some(second) = pair.get_mut(1) {
            *second = T::from_f64(r * libm::sin(theta));
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// The standard normal CDF (Abramowitz and Stegun 7.1.26 for erf, to
    /// 1.5e-7: far inside the bounds below).
    fn normal_cdf(x: f64) -> f64 {
        let t = 1.0 / (1.0 + 0.3275911 * x.abs() / core::f64::consts::SQRT_2);
        let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
        let erf = 1.0 - poly * libm::exp(-x * x / 2.0);
        0.5 * (1.0 + if x < 0.0 { -erf } else { erf })
    }

    /// The Kolmogorov–Smirnov statistic of `xs` against `cdf`.
    fn ks(mut xs: Vec<f64>, cdf: impl Fn(f64) -> f64) -> f64 {
        xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let n = xs.len() as f64;
        xs.iter()
            .enumerate()
            .map(|(i, &x)| {
                let f = cdf(x);
                (f - i as f64 / n).abs().max((i as f64 + 1.0) / n - f)
            })
            .fold(0.0, f64::max)
    }

    fn moments(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        (mean, xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n)
    }

    /// Draws a test makes: a tenth under Miri, which interprets each
    /// (the bounds below widen by `WIDER`, as the statistics' spread).
    const N: usize = if cfg!(miri) { 2_000 } else { 20_000 };
    /// sqrt(20 000 / N).
    const WIDER: f64 = if cfg!(miri) { 3.1623 } else { 1.0 };
    // The KS critical value at p = 0.001 is 1.95 / sqrt(n) (0.0138 for
    // 20 000 draws); the draws are fixed by the seed, so the test cannot
    // flake. For the types with few significand bits the steps of the CDF
    // count too.
    const KS: f64 = 0.0138 * WIDER;
    fn uniform_ok<T: RandomFloat + Into<f64> + Default>(bits: i32) {
        let mut rng = Rng::seeded(7);
        let mut v = std::vec![T::default(); N];
        uniform(&mut rng, 0, &mut v);
        let xs: Vec<f64> = v.into_iter().map(Into::into).collect();
        assert!(xs.iter().all(|&x| (0.0..1.0).contains(&x)));
        let (mean, var) = moments(&xs);
        assert!((mean - 0.5).abs() < 0.01 * WIDER, "{mean}");
        assert!((var - 1.0 / 12.0).abs() < 0.005 * WIDER, "{var}");
        let step = 2f64.powi(-bits);
        assert!(ks(xs, |x| (x + step).min(1.0)) < KS + step, "bits {bits}");
    }

    fn normal_ok<T: RandomFloat + Into<f64> + Default>(tol: f64) {
        let mut rng = Rng::seeded(11);
        let mut v = std::vec![T::default(); N + 1];
        normal(&mut rng, 3, &mut v);
        let xs: Vec<f64> = v.into_iter().map(Into::into).collect();
        assert!(xs.iter().all(|x| x.is_finite()));
        let (mean, var) = moments(&xs);
        assert!(mean.abs() < 0.03 * WIDER, "{mean}");
        assert!((var - 1.0).abs() < 0.04 * WIDER, "{var}");
        assert!(ks(xs, normal_cdf) < KS + tol);
    }

    #[test]
    fn uniform_values_are_uniform_on_zero_to_one() {
        uniform_ok::<f64>(53);
        uniform_ok::<f32>(24);
        uniform_ok::<f16>(11);
        uniform_ok::<bf16>(8);
    }

    #[test]
    fn normal_values_are_standard_normal() {
        normal_ok::<f64>(0.0);
        normal_ok::<f32>(0.0);
        // Rounding to 11 and 8 significand bits moves the CDF by up to
        // half a step around 1 (about 0.4 of density times the step).
        normal_ok::<f16>(0.001);
        normal_ok::<bf16>(0.004);
    }

    #[test]
    fn draws_continue_and_seeds_reproduce() {
        let mut rng = Rng::seeded(42);
        let (mut a, mut b) = ([0f32; 8], [0f32; 8]);
        uniform(&mut rng, 0, &mut a);
        uniform(&mut rng, 0, &mut b);
        assert_ne!(a, b, "a second draw goes on where the first stopped");
        let mut again = Rng::seeded(42);
        let mut c = [0f32; 16];
        uniform(&mut again, 0, &mut c);
        assert_eq!(c[..8], a);
        assert_eq!(c[8..], b);
        let mut other_stream = Rng::seeded(42);
        uniform(&mut other_stream, 1, &mut c[..8]);
        assert_ne!(c[..8], a);
        // All-zero state is seed 0.
        assert_eq!(Rng::default(), Rng::seeded(0));
    }
}
