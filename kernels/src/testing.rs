//! Helpers shared by the unit tests of the kernel families.
extern crate std;
use std::vec::Vec;

/// A small deterministic generator of test data in `[-1, 1)`.
pub(crate) struct Lcg(pub u64);

impl Lcg {
    pub(crate) fn next(&mut self) -> f32 {
        ((lcg_step(&mut self.0) >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    pub(crate) fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// Advances the generator's `state` one step and returns the new state,
/// whose high bits are the random ones. [`Lcg`] and [`rng`] draw from it;
/// tests that map the bits their own way call it directly.
pub(crate) fn lcg_step(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state
}

/// The next 31 random bits of `seed`, for tests that draw integers.
pub(crate) fn rng(seed: &mut u64) -> u64 {
    lcg_step(seed) >> 33
}

/// Asserts an `f32` product matches its `f64` reference, within a
/// tolerance that grows with the depth `k` of the sums.
pub(crate) fn check(got: &[f32], want: &[f64], k: usize) {
    assert_eq!(got.len(), want.len());
    let tol = 1e-5 * (k as f64 + 4.0);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= tol * (1.0 + w.abs()),
            "at {i}: got {g}, want {w}"
        );
    }
}

/// Multiply-adds above which a test case is left out under Miri, where
/// each takes microseconds: the case lists keep smaller ones through the
/// same portable paths (docs/soundness.md). Tests that run each case many
/// times take a lower limit of their own.
pub(crate) const MIRI_WORK: usize = 1 << 14;

/// Whether a case of `work` multiply-adds is left out: only under Miri,
/// above `limit` ([`MIRI_WORK`] or lower).
pub(crate) fn too_large_for_miri(work: usize, limit: usize) -> bool {
    cfg!(miri) && work > limit
}
