//! Choosing the next token from logits: greedy, or temperature with
//! top-k, top-p and min-p filters, after a repetition penalty; a seeded
//! generator of our own, so that a seed gives the same text on every
//! platform and with every version of the dependencies.

/// How the next token is chosen.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    /// 0 picks the most likely token (greedy); above, logits are divided
    /// by it before the softmax.
    pub temperature: f32,
    /// Keep the `k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the fewest most likely tokens whose probabilities sum to at
    /// least `p` (1: all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely (0: none).
    pub min_p: f32,
    /// Logits of tokens already in the context are divided by it when
    /// positive, multiplied when negative (1: off), as in CTRL and
    /// Hugging Face's `repetition_penalty`.
    pub repetition_penalty: f32,
    /// How many of the last context tokens the penalty looks at (0: all).
    pub penalty_window: usize,
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            penalty_window: 64,
            seed: 0,
        }
    }
}

impl Sampling {
    /// Greedy decoding: always the most likely token.
    pub fn greedy() -> Self {
        Self::default()
    }
}

/// xoshiro256** seeded through splitmix64: small, fast and the same
/// sequence everywhere.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Picks tokens by a [`Sampling`], with its own generator.
#[derive(Clone, Debug)]
pub struct Sampler {
    config: Sampling,
    rng: Rng,
    /// (token, logit) candidates, reused between calls.
    work: Vec<(u32, f32)>,
}

impl Sampler {
    pub fn new(config: Sampling) -> Self {
        let rng = Rng::new(config.seed);
        Sampler {
            config,
            rng,
            work: Vec::new(),
        }
    }

    pub fn config(&self) -> &Sampling {
        &self.config
    }

    /// The next token after `context` (for the repetition penalty), given
    /// the model's `logits`. NaN logits are never chosen.
    pub fn sample(&mut self, logits: &[f32], context: &[u32]) -> u32 {
        let c = &self.config;
        let penalised = c.repetition_penalty != 1.0 && c.repetition_penalty > 0.0;
        if (c.temperature <= 0.0 || c.top_k == 1) && !penalised {
            return argmax(logits);
        }
        self.work.clear();
        self.work.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, x)| !x.is_nan())
                .map(|(i, &x)| (i as u32, x)),
        );
        if self.work.is_empty() {
            return 0;
        }
        if penalised {
            let window = if c.penalty_window == 0 {
                context.len()
            } else {
                c.penalty_window.min(context.len())
            };
            let recent = &context[context.len() - window..];
            // Each token once, however often it occurs (as Hugging Face).
            let mut seen: Vec<u32> = recent.to_vec();
            seen.sort_unstable();
            seen.dedup();
            for &t in &seen {
                if let Some(x) = logits.get(t as usize).filter(|x| !x.is_nan()) {
                    let penalised = if *x > 0.0 {
                        x / c.repetition_penalty
                    } else {
                        x * c.repetition_penalty
                    };
                    // The candidates are in token order, NaNs left out.
                    if let Ok(i) = self.work.binary_search_by_key(&t, |&(id, _)| id) {
                        self.work[i].1 = penalised;
                    }
                }
            }
        }
        if c.temperature <= 0.0 || c.top_k == 1 {
            // The first of equal maxima, as argmax.
            return self
                .work
                .iter()
                .fold(self.work[0], |b, &x| if x.1 > b.1 { x } else { b })
                .0;
        }
        // Most likely first; equal logits by token id, so the order (and
        // so the seed's draw) never depends on the sort's stability.
        let work = &mut self.work;
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if c.top_k > 0 && c.top_k < work.len() {
            work.select_nth_unstable_by(c.top_k - 1, by_logit);
            work.truncate(c.top_k);
        }
        work.sort_unstable_by(by_logit);
        let inv_t = 1.0 / c.temperature as f64;
        let max = work[0].1 as f64;
        let mut probs: Vec<f64> = work.iter().map(|&(_, x)| ((x as f64 - max) * inv_t).exp()).collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        let mut keep = probs.len();
        if c.min_p > 0.0 {
            let floor = probs[0] * c.min_p as f64;
            keep = keep.min(probs.iter().take_while(|&&p| p >= floor).count().max(1));
        }
        if c.top_p < 1.0 {
            let mut sum = 0.0;
            let mut n = 0;
            for &p in &probs[..keep] {
                sum += p;
                n += 1;
                if sum >= c.top_p as f64 {
                    break;
                }
            }
            keep = n.max(1);
        }
        let total: f64 = probs[..keep].iter().sum();
        let mut r = self.rng.next_f64() * total;
        for (i, &p) in probs[..keep].iter().enumerate() {
            r -= p;
            if r < 0.0 {
                return work[i].0;
            }
        }
        work[keep - 1].0
    }
}

/// The first of the largest logits that are not NaN (0 if all are): the
/// greedy choice, in two passes that vectorize (a vocabulary's logits a
/// token, where the candidate list takes several times as long).
fn argmax(logits: &[f32]) -> u32 {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let mut max = chunks.remainder().iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    for c in chunks {
        for l in 0..LANES {
            lanes[l] = lanes[l].max(c[l]);
        }
    }
    max = lanes.iter().fold(max, |m, &l| m.max(l));
    logits.iter().position(|&x| x == max).map_or(0, |i| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(temperature: f32) -> Sampling {
        Sampling {
            temperature,
            ..Sampling::default()
        }
    }

    #[test]
    fn greedy_takes_the_first_maximum_and_skips_nan() {
        let mut s = Sampler::new(config(0.0));
        assert_eq!(s.sample(&[0.5, 2.0, f32::NAN, 2.0, -1.0], &[]), 1);
        assert_eq!(s.sample(&[f32::NAN, -3.0], &[]), 1);
    }

    /// Greedy's fast path is the candidate list's fold: the first
    /// maximum, NaNs and infinities among the logits, ties, all NaN.
    #[test]
    fn greedy_is_the_first_maximum_of_the_candidates() {
        let mut seed = 5u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for len in [1, 7, 16, 17, 49, 300] {
            for _ in 0..50 {
                let logits: Vec<f32> = (0..len)
                    .map(|_| match next() % 10 {
                        0 => f32::NAN,
                        1 => f32::NEG_INFINITY,
                        2 => f32::INFINITY,
                        _ => (next() % 7) as f32 - 3.0,
                    })
                    .collect();
                let want = logits
                    .iter()
                    .enumerate()
                    .filter(|(_, x)| !x.is_nan())
                    .fold(None, |b: Option<(usize, f32)>, (i, &x)| match b {
                        Some((_, y)) if x <= y => b,
                        _ => Some((i, x)),
                    })
                    .map_or(0, |(i, _)| i as u32);
                assert_eq!(argmax(&logits), want, "{logits:?}");
            }
        }
        assert_eq!(argmax(&[f32::NAN; 20]), 0);
        assert_eq!(argmax(&[]), 0);
    }

    #[test]
    fn repetition_penalty_moves_the_choice() {
        let mut s = Sampler::new(Sampling {
            repetition_penalty: 2.0,
            ..config(0.0)
        });
        // 3.0 / 2 = 1.5 < 2.0, so token 1 wins once token 0 was seen.
        assert_eq!(s.sample(&[3.0, 2.0], &[]), 0);
        assert_eq!(s.sample(&[3.0, 2.0], &[0]), 1);
        // Negative logits are multiplied: -1 * 2 = -2 < -1.5.
        assert_eq!(s.sample(&[-1.0, -1.5], &[0, 0, 0]), 1);
        // Outside the window, no penalty.
        let mut s = Sampler::new(Sampling {
            repetition_penalty: 2.0,
            penalty_window: 1,
            ..config(0.0)
        });
        assert_eq!(s.sample(&[3.0, 2.0], &[0, 1]), 0);
    }

    #[test]
    fn a_seed_reproduces_draws_and_another_seed_differs() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let draw = |seed| {
            let mut s = Sampler::new(Sampling { seed, ..config(1.0) });
            (0..64).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn filters_keep_only_their_tokens() {
        // Probabilities after softmax at T=1: token 3 > 0 > 1 > 2 > 4.
        let logits = [2.0f32, 1.0, 0.0, 3.0, -5.0];
        let seen = |c: Sampling| {
            let mut s = Sampler::new(c);
            let mut hit = [false; 5];
            for _ in 0..2000 {
                hit[s.sample(&logits, &[]) as usize] = true;
            }
            hit
        };
        assert_eq!(
            seen(Sampling {
                top_k: 2,
                ..config(1.0)
            }),
            [true, false, false, true, false]
        );
        // p(3) = 0.66, p(0) = 0.24: top-p 0.8 keeps those two.
        assert_eq!(
            seen(Sampling {
                top_p: 0.8,
                ..config(1.0)
            }),
            [true, false, false, true, false]
        );
        // min-p 0.3 of p(3) = 0.2: keeps 3 and 0 (0.24) only.
        assert_eq!(
            seen(Sampling {
                min_p: 0.3,
                ..config(1.0)
            }),
            [true, false, false, true, false]
        );
        assert_eq!(
            seen(Sampling {
                top_k: 1,
                ..config(1.0)
            }),
            [false, false, false, true, false]
        );
        // Unfiltered at a high temperature, every token turns up.
        assert_eq!(seen(config(5.0)), [true; 5]);
    }

    #[test]
    fn frequencies_follow_the_softmax() {
        let logits = [0.0f32, (3.0f32).ln()];
        let mut s = Sampler::new(Sampling { seed: 1, ..config(1.0) });
        let n = 20000;
        let ones = (0..n).filter(|_| s.sample(&logits, &[]) == 1).count();
        // p(1) = 0.75; 4 standard deviations is 0.012.
        assert!((ones as f64 / n as f64 - 0.75).abs() < 0.012, "{ones}");
    }
}
