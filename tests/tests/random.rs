//! `rand` and `randn` in a compiled program (`fixtures/random.pte`): the
//! sizes and dtypes the program gives, uniform values on [0, 1) and
//! standard normal ones (moments and a Kolmogorov–Smirnov bound, at fixed
//! seeds so nothing can flake), a generator that goes on from call to
//! call, and seeds that reproduce. No reference generator is matched: see
//! docs/operator-coverage.md.
use ptec_runtime::{bf16, f16, Model, ScalarType};

mod random {
    ptec_macros::include_pte!("fixtures/random.pte", name = Program);
}
use random::Program;

/// One call's outputs, as f64s: rand [64, 32] f32, randn [4001] f64,
/// rand [40, 50] f16, randn [2000] bf16, x + randn [3, 4] f32.
fn draw(p: &mut Program, x: f32) -> [Vec<f64>; 5] {
    let (a, b, c, d, e) = p.forward(&[[x; 4]; 3]).unwrap();
    [
        a.iter().flatten().map(|&v| v as f64).collect(),
        b.to_vec(),
        c.iter().flatten().map(|v| v.to_f64()).collect(),
        d.iter().map(|v| v.to_f64()).collect(),
        e.iter().flatten().map(|&v| v as f64 - x as f64).collect(),
    ]
}

fn moments(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    (mean, xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n)
}

/// The Kolmogorov–Smirnov statistic of `xs` against `cdf`.
fn ks(xs: &[f64], cdf: impl Fn(f64) -> f64) -> f64 {
    let mut xs = xs.to_vec();
    xs.sort_by(f64::total_cmp);
    let n = xs.len() as f64;
    xs.iter()
        .enumerate()
        .map(|(i, &x)| (cdf(x) - i as f64 / n).abs().max((i as f64 + 1.0) / n - cdf(x)))
        .fold(0.0, f64::max)
}

/// Φ, through erf (Abramowitz and Stegun 7.1.26, to 1.5e-7).
fn normal_cdf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.3275911 * x.abs() / std::f64::consts::SQRT_2);
    let p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let erf = 1.0 - p * (-x * x / 2.0).exp();
    0.5 * (1.0 + erf.copysign(x))
}

/// The KS critical value at p = 0.001 (1.95 / √n), widened by the steps of
/// a type with `bits` significand bits.
fn bound(n: usize, step: f64) -> f64 {
    1.95 / (n as f64).sqrt() + step
}

fn check_distributions(outs: &[Vec<f64>; 5]) {
    let [u32s, n64, u16s, nbf, shifted] = outs;
    for (u, bits) in [(u32s, 24), (u16s, 11)] {
        assert!(u.iter().all(|v| (0.0..1.0).contains(v)), "uniform values lie in [0, 1)");
        let (mean, var) = moments(u);
        assert!(
            (mean - 0.5).abs() < 0.03 && (var - 1.0 / 12.0).abs() < 0.01,
            "{mean} {var}"
        );
        let step = 2f64.powi(-bits);
        let d = ks(u, |x| (x + step).min(1.0));
        assert!(d < bound(u.len(), step), "KS {d} for {bits} bits");
    }
    for (n, tol) in [(n64, 0.0), (nbf, 0.004)] {
        let (mean, var) = moments(n);
        assert!(mean.abs() < 0.1 && (var - 1.0).abs() < 0.1, "{mean} {var}");
        let d = ks(n, normal_cdf);
        assert!(d < bound(n.len(), tol), "KS {d}");
    }
    assert!(shifted.iter().all(|v| v.abs() < 6.0));
}

/// What the typed `forward` returns.
type Outputs<'a> = (
    &'a [[f32; 32]; 64],
    &'a [f64; 4001],
    &'a [[f16; 50]; 40],
    &'a [bf16; 2000],
    &'a [[f32; 4]; 3],
);

#[test]
fn sizes_and_dtypes_are_the_programs() {
    let outs = &Program::METHODS[0].outputs;
    let got: Vec<(ScalarType, &[usize])> = outs
        .iter()
        .map(|o| o.tensor.map(|t| (t.dtype, t.sizes)).unwrap())
        .collect();
    assert_eq!(
        got,
        [
            (ScalarType::Float, &[64, 32][..]),
            (ScalarType::Double, &[4001][..]),
            (ScalarType::Half, &[40, 50][..]),
            (ScalarType::BFloat16, &[2000][..]),
            (ScalarType::Float, &[3, 4][..]),
        ]
    );
    // The typed function's types say the same (this compiles only so).
    let mut p = Program::new();
    let outs: Outputs<'_> = p.forward(&[[0.0; 4]; 3]).unwrap();
    let (_, _, c, d, _) = outs;
    assert!(c[0][0].to_f32() < 1.0 && d[0].is_finite());
}

#[test]
fn draws_are_uniform_and_normal_at_the_default_seed_and_others() {
    let mut p = Program::new();
    check_distributions(&draw(&mut p, 0.0));
    check_distributions(&draw(&mut p, 1.5));
    for seed in [1, 0xdead_beef] {
        p.manual_seed(seed);
        check_distributions(&draw(&mut p, -2.0));
    }
}

#[test]
fn calls_differ_and_seeds_reproduce() {
    let mut p = Program::new();
    let first = draw(&mut p, 0.0);
    let second = draw(&mut p, 0.0);
    for k in 0..5 {
        assert_ne!(
            first[k], second[k],
            "output {k}: the generator goes on from call to call"
        );
    }
    // Another instance starts at the default seed, 0: the same numbers.
    let mut q = Program::new();
    assert_eq!(draw(&mut q, 0.0), first);
    // `reset` leaves the generator be; seeding starts it again.
    q.reset(0).unwrap();
    assert_eq!(draw(&mut q, 0.0), second);
    q.manual_seed(0);
    assert_eq!(draw(&mut q, 0.0), first);
    q.manual_seed(7);
    let seven = draw(&mut q, 0.0);
    assert_ne!(seven, first);
    p.manual_seed(7);
    assert_eq!(draw(&mut p, 0.0), seven);
    // Through the dynamic interface too.
    let dynamic: &mut dyn Model = &mut p;
    dynamic.manual_seed(7);
    dynamic.execute(0).unwrap();
    match dynamic.output(0, 1).unwrap() {
        ptec_runtime::Value::Tensor(t) => assert_eq!(t.as_slice::<f64>().unwrap(), &seven[1][..]),
        other => panic!("{other:?}"),
    }
}
