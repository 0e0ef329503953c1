//! The `Model` trait under adversarial calls (issue 59): generated
//! sequences of calls drive fixtures' generated programs through the
//! dynamic interface. Inputs of the wrong kind, dtype, rank, size, dim
//! order or data length, sizes past the bound or overflowing, indices and
//! methods out of range, `execute` before the inputs, `step` past the end,
//! `reset` mid-method, outputs read before `execute`, NaN and infinities in
//! float inputs and extreme integers. Every call must give an error or a
//! correct result and never panic:
//!
//! - a value that is wrong is refused, a valid one accepted, and a refused
//!   one changes nothing (the checks below replay the accepted ones);
//! - an output in range is always there and agrees with its method's
//!   description (dtype, rank, dim order, sizes within the bound, data
//!   exactly as long as the sizes say);
//! - `step` reaches `Done` within the method's instruction count;
//! - a "check" resets the method, sets valid inputs and executes on the
//!   model and on a reference instance that has only ever seen such checks:
//!   both give the same error or the same bits, so no earlier call leaked;
//! - at the end the bundle's cases, from a reset, still give PyTorch's
//!   outputs.
//!
//! The programs: fixtures with every kind of instruction, compiled with
//! embedded or external weights, and two whose delegate a user backend
//! serves.
//!
//! Included by `build_step.rs`, whose binary holds the generated modules.
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use ptec_runtime::harness::{CaseFailure, Tolerance};
use ptec_runtime::{Dynamism, Error, MethodMeta, Model, ScalarType, Step, Tag, TensorMeta, TensorRef, Value};

/// How a generated input departs from a valid one.
#[derive(Clone, Copy, Debug)]
enum Twist {
    /// A valid value.
    None,
    /// Another element type (its data as long as the sizes then need).
    Dtype(u8),
    /// One dim more (`true`) or one fewer.
    Rank(bool),
    /// One size (the dim picked modulo the rank) set to a bad value.
    Size { dim: u8, to: BadSize },
    /// Data longer or shorter by this many bytes.
    DataLen(i8),
    /// A dim order with a dim out of range.
    DimOrder,
    /// A value of another kind.
    Tag(u8),
    /// A byte 2 in a bool tensor.
    BoolByte,
}

#[derive(Clone, Copy, Debug)]
enum BadSize {
    /// One past the bound.
    PastBound,
    /// 2^40: the data cannot be that long.
    Huge,
    /// `usize::MAX`, whose byte count overflows.
    Max,
    /// 0: wrong for a static size, within the bound for a dynamic one.
    Zero,
}

/// What fills a tensor's data.
#[derive(Clone, Copy, Debug)]
enum Fill {
    /// Floats in [-2, 2]; integers in [0, 4) (valid indices, mostly).
    Small,
    /// Every float NaN.
    Nan,
    /// Every float +∞.
    Inf,
    /// Every float −∞.
    NegInf,
    /// Each element one of the values above, ±0, subnormals, the largest
    /// finite and integers from -8 to 64.
    Mixed,
    /// Integers at their extremes (-1, MIN, MAX, 2^40); floats ±1e30.
    Extreme,
}

#[derive(Clone, Debug)]
enum Call {
    SetInput {
        method: u8,
        index: u8,
        twist: Twist,
        fill: Fill,
        seed: u64,
    },
    Execute {
        method: u8,
    },
    Step {
        method: u8,
        times: u8,
    },
    Reset {
        method: u8,
    },
    Output {
        method: u8,
        index: u8,
    },
    OutputInto {
        method: u8,
        index: u8,
        delta: i8,
    },
    /// Reset, valid inputs and execute, on the model and the reference.
    Check {
        method: u8,
        fill: Fill,
        seed: u64,
    },
}

fn fill() -> impl Strategy<Value = Fill> {
    prop_oneof![
        3 => Just(Fill::Small),
        1 => Just(Fill::Nan),
        1 => Just(Fill::Inf),
        1 => Just(Fill::NegInf),
        2 => Just(Fill::Mixed),
        1 => Just(Fill::Extreme),
    ]
}

fn twist() -> impl Strategy<Value = Twist> {
    let bad = prop_oneof![
        Just(BadSize::PastBound),
        Just(BadSize::Huge),
        Just(BadSize::Max),
        Just(BadSize::Zero)
    ];
    prop_oneof![
        6 => Just(Twist::None),
        1 => any::<u8>().prop_map(Twist::Dtype),
        1 => any::<bool>().prop_map(Twist::Rank),
        2 => (any::<u8>(), bad).prop_map(|(dim, to)| Twist::Size { dim, to }),
        1 => any::<i8>().prop_filter("a change", |d| *d != 0).prop_map(Twist::DataLen),
        1 => Just(Twist::DimOrder),
        1 => any::<u8>().prop_map(Twist::Tag),
        1 => Just(Twist::BoolByte),
    ]
}

fn calls() -> impl Strategy<Value = Vec<Call>> {
    let call = prop_oneof![
        6 => (any::<u8>(), any::<u8>(), twist(), fill(), any::<u64>())
            .prop_map(|(method, index, twist, fill, seed)| Call::SetInput { method, index, twist, fill, seed }),
        2 => any::<u8>().prop_map(|method| Call::Execute { method }),
        2 => (any::<u8>(), 1..40u8).prop_map(|(method, times)| Call::Step { method, times }),
        1 => any::<u8>().prop_map(|method| Call::Reset { method }),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(method, index)| Call::Output { method, index }),
        1 => (any::<u8>(), any::<u8>(), -2..=2i8).prop_map(|(method, index, delta)| Call::OutputInto { method, index, delta }),
        2 => (any::<u8>(), fill(), any::<u64>()).prop_map(|(method, fill, seed)| Call::Check { method, fill, seed }),
    ];
    proptest::collection::vec(call, 1..20)
}

/// splitmix64: the values inside a tensor, from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// An input value with owned parts.
#[derive(Clone, Debug)]
enum Owned {
    None,
    Int(i64),
    Double(f64),
    Bool(bool),
    Tensor {
        dtype: ScalarType,
        sizes: Vec<usize>,
        dim_order: Vec<u8>,
        data: Vec<u8>,
    },
}

impl Owned {
    fn value(&self) -> Value<'_> {
        match self {
            Owned::None => Value::None,
            Owned::Int(i) => Value::Int(*i),
            Owned::Double(d) => Value::Double(*d),
            Owned::Bool(b) => Value::Bool(*b),
            Owned::Tensor {
                dtype,
                sizes,
                dim_order,
                data,
            } => Value::Tensor(TensorRef {
                dtype: *dtype,
                sizes,
                dim_order,
                data,
            }),
        }
    }
}

fn float(fill: Fill, rng: &mut Rng) -> f64 {
    match fill {
        Fill::Small => (rng.below(1 << 20) as f64 / (1 << 18) as f64) - 2.0,
        Fill::Nan => f64::NAN,
        Fill::Inf => f64::INFINITY,
        Fill::NegInf => f64::NEG_INFINITY,
        Fill::Extreme => [1e30, -1e30][rng.below(2) as usize],
        Fill::Mixed => match rng.below(9) {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => f64::NEG_INFINITY,
            3 => 0.0,
            4 => -0.0,
            5 => 1e-40,
            6 => f32::MAX as f64,
            _ => float(Fill::Small, rng),
        },
    }
}

fn int(fill: Fill, rng: &mut Rng) -> i64 {
    match fill {
        Fill::Extreme => [-1, i64::MIN, i64::MAX, 1 << 40][rng.below(4) as usize],
        Fill::Mixed => rng.below(73) as i64 - 8,
        _ => rng.below(4) as i64,
    }
}

/// `numel` elements of `dtype`, little-endian.
fn data(dtype: ScalarType, numel: usize, fill: Fill, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(numel * dtype.element_size());
    for _ in 0..numel {
        match dtype {
            ScalarType::Float => out.extend((float(fill, rng) as f32).to_le_bytes()),
            ScalarType::Double => out.extend(float(fill, rng).to_le_bytes()),
            ScalarType::Half => out.extend(ptec_runtime::f16::from_f64(float(fill, rng)).to_le_bytes()),
            ScalarType::BFloat16 => out.extend(ptec_runtime::bf16::from_f64(float(fill, rng)).to_le_bytes()),
            ScalarType::Bool => out.push(rng.below(2) as u8),
            // A complex element is its two parts.
            t if t.is_complex() => out.extend(data(t.complex_part().expect("complex"), 2, fill, rng)),
            // Integers wrap to their width: extremes stay extremes.
            t => out.extend(&int(fill, rng).to_le_bytes()[..t.element_size()]),
        }
    }
    out
}

/// A valid value for an input described by `meta`; dynamic sizes anywhere
/// from 1 to the bound.
fn valid(tag: Tag, meta: Option<&TensorMeta>, fill: Fill, rng: &mut Rng) -> Owned {
    match (tag, meta) {
        (Tag::Tensor, Some(t)) => {
            let sizes: Vec<usize> = if t.dynamism == Dynamism::Static {
                t.sizes.to_vec()
            } else {
                t.sizes
                    .iter()
                    .map(|&b| (1 + rng.below(b as u64) as usize).min(b))
                    .collect()
            };
            let numel = sizes.iter().product();
            Owned::Tensor {
                dtype: t.dtype,
                sizes,
                dim_order: t.dim_order.to_vec(),
                data: data(t.dtype, numel, fill, rng),
            }
        }
        (Tag::Int, _) => Owned::Int(int(fill, rng)),
        (Tag::Double, _) => Owned::Double(float(fill, rng)),
        (Tag::Bool, _) => Owned::Bool(rng.below(2) == 1),
        _ => Owned::None,
    }
}

/// The value `twist` makes of a valid one, and whether the input must
/// refuse it (`Some(true)`), accept it (`Some(false)`), or either.
fn twisted(tag: Tag, meta: Option<&TensorMeta>, twist: Twist, fill: Fill, rng: &mut Rng) -> (Owned, Option<bool>) {
    let good = valid(tag, meta, fill, rng);
    if let Twist::Tag(k) = twist {
        let others: Vec<Owned> = [
            Owned::None,
            Owned::Int(1),
            Owned::Double(0.5),
            Owned::Bool(true),
            Owned::Tensor {
                dtype: ScalarType::Float,
                sizes: vec![1],
                dim_order: vec![0],
                data: vec![0; 4],
            },
        ]
        .into_iter()
        .filter(|o| o.value().tag() != tag)
        .collect();
        return (others[k as usize % others.len()].clone(), Some(true));
    }
    let Owned::Tensor {
        dtype,
        mut sizes,
        mut dim_order,
        mut data,
    } = good
    else {
        // Only the kind of a scalar can be wrong.
        return (good, Some(false));
    };
    let meta = meta.expect("a tensor input has a tensor description");
    let rank = sizes.len();
    let es = dtype.element_size();
    let refused = match twist {
        Twist::None | Twist::Tag(_) => Some(false),
        Twist::Dtype(k) => {
            let others: Vec<ScalarType> = ScalarType::ALL.into_iter().filter(|&t| t != dtype).collect();
            let to = others[k as usize % others.len()];
            let numel: usize = sizes.iter().product();
            return (
                Owned::Tensor {
                    dtype: to,
                    sizes,
                    dim_order,
                    data: vec![0; numel * to.element_size()],
                },
                Some(true),
            );
        }
        Twist::Rank(more) if more || rank == 0 => {
            sizes.push(1);
            dim_order.push(rank as u8);
            Some(true)
        }
        Twist::Rank(_) => {
            let last = sizes.pop().unwrap_or(1);
            dim_order.retain(|&d| (d as usize) < rank - 1);
            // The data as long as the new sizes need.
            data.truncate(data.len() / last.max(1));
            Some(true)
        }
        Twist::Size { dim, to } if rank > 0 => {
            let d = dim as usize % rank;
            let bound = meta.sizes[d];
            let (size, refused) = match to {
                BadSize::PastBound => (bound + 1, Some(true)),
                BadSize::Huge => (usize::MAX >> 8, Some(true)),
                BadSize::Max => (usize::MAX, Some(true)),
                BadSize::Zero if meta.dynamism == Dynamism::Static && bound != 0 => (0, Some(true)),
                BadSize::Zero => (0, None),
            };
            sizes[d] = size;
            // Data for sizes that fit in memory; none for the others.
            let numel = sizes.iter().try_fold(1usize, |n, &s| n.checked_mul(s));
            data = match numel.and_then(|n| n.checked_mul(es)).filter(|&n| n <= 1 << 24) {
                Some(n) => vec![0; n],
                None => Vec::new(),
            };
            refused
        }
        Twist::Size { .. } => {
            sizes.push(2);
            dim_order.push(0);
            Some(true)
        }
        Twist::DataLen(delta) => {
            let n = data.len() as isize + delta as isize;
            let n = if n < 0 {
                data.len() + delta.unsigned_abs() as usize
            } else {
                n as usize
            };
            data.resize(n, 0);
            Some(true)
        }
        Twist::DimOrder => {
            if rank == 0 {
                dim_order.push(0);
            } else {
                dim_order[rank - 1] = rank as u8;
            }
            Some(true)
        }
        Twist::BoolByte if dtype == ScalarType::Bool && !data.is_empty() => {
            let at = rng.below(data.len() as u64) as usize;
            data[at] = 2;
            Some(true)
        }
        Twist::BoolByte => {
            data.push(0);
            Some(true)
        }
    };
    (
        Owned::Tensor {
            dtype,
            sizes,
            dim_order,
            data,
        },
        refused,
    )
}

/// An output in range must be there and agree with its description.
fn check_output(meta: &MethodMeta, index: usize, got: &Value<'_>) -> Result<(), TestCaseError> {
    let want = &meta.outputs[index];
    prop_assert_eq!(got.tag(), want.tag, "output {} of {}", index, meta.name);
    if let (Value::Tensor(t), Some(m)) = (got, want.tensor.as_ref()) {
        prop_assert_eq!(t.dtype, m.dtype);
        prop_assert_eq!(t.dim_order, m.dim_order);
        prop_assert_eq!(t.sizes.len(), m.sizes.len());
        for (s, b) in t.sizes.iter().zip(m.sizes) {
            if m.dynamism == Dynamism::Static {
                prop_assert_eq!(s, b);
            } else {
                prop_assert!(
                    s <= b,
                    "output {} of {}: size {} past its bound {}",
                    index,
                    meta.name,
                    s,
                    b
                );
            }
        }
        prop_assert_eq!(t.data.len(), t.numel() * t.dtype.element_size());
    }
    Ok(())
}

/// The same value, to the bit.
fn same_bits(a: &Value<'_>, b: &Value<'_>) -> bool {
    match (a, b) {
        (Value::Double(x), Value::Double(y)) => x.to_bits() == y.to_bits(),
        // Tensors compare their data as bytes.
        _ => a == b,
    }
}

/// `method` of `calls` modulo one past the methods: the last is out of range.
fn pick(n: usize, k: u8) -> usize {
    k as usize % (n + 1)
}

/// How many checks compared results, and how many of those executed.
#[derive(Default, Clone, Copy)]
struct Tally {
    checks: usize,
    executed: usize,
}

/// Plays `calls` on `model`, with `reference` for the checks.
fn play(
    model: &mut dyn Model,
    reference: &mut dyn Model,
    calls: &[Call],
    tally: &mut Tally,
) -> Result<(), TestCaseError> {
    let methods = model.methods();
    // Instructions run by `step` since the method last started.
    let mut continues = vec![0usize; methods.len()];
    for call in calls {
        match *call {
            Call::SetInput {
                method,
                index,
                twist,
                fill,
                seed,
            } => {
                let m = pick(methods.len(), method);
                let Some(meta) = methods.get(m) else {
                    let r = model.set_input(m, 0, Value::Int(0));
                    prop_assert!(matches!(r, Err(Error::IndexOutOfRange { .. })), "{:?}", r);
                    continue;
                };
                let i = index as usize % (meta.inputs.len() + 1);
                let Some(input) = meta.inputs.get(i) else {
                    let r = model.set_input(m, i, Value::None);
                    prop_assert!(matches!(r, Err(Error::IndexOutOfRange { .. })), "{:?}", r);
                    continue;
                };
                let (value, refused) = twisted(input.tag, input.tensor.as_ref(), twist, fill, &mut Rng(seed));
                let r = model.set_input(m, i, value.value());
                if let Some(refused) = refused {
                    prop_assert_eq!(
                        r.is_err(),
                        refused,
                        "input {} of {} given {:?}: {:?}",
                        i,
                        meta.name,
                        value,
                        r
                    );
                }
            }
            Call::Execute { method } => {
                let m = pick(methods.len(), method);
                let r = model.execute(m);
                if m >= methods.len() {
                    prop_assert!(r.is_err());
                } else {
                    continues[m] = 0;
                }
            }
            Call::Step { method, times } => {
                let m = pick(methods.len(), method);
                for _ in 0..times {
                    match model.step(m) {
                        Ok(Step::Continue) => {
                            prop_assert!(m < methods.len());
                            continues[m] += 1;
                            prop_assert!(
                                continues[m] < methods[m].num_instructions.max(1),
                                "{} stepped {} times without finishing",
                                methods[m].name,
                                continues[m]
                            );
                        }
                        Ok(Step::Done) => {
                            prop_assert!(m < methods.len());
                            continues[m] = 0;
                        }
                        // An instruction that fails leaves the counter where
                        // it was: the next step runs it again.
                        Err(_) => {}
                    }
                }
            }
            Call::Reset { method } => {
                let m = pick(methods.len(), method);
                let r = model.reset(m);
                prop_assert_eq!(r.is_ok(), m < methods.len());
                if m < methods.len() {
                    continues[m] = 0;
                }
            }
            Call::Output { method, index } => {
                let m = pick(methods.len(), method);
                let n = methods.get(m).map_or(0, |meta| meta.outputs.len());
                let i = index as usize % (n + 1);
                let r = model.output(m, i);
                match (methods.get(m), &r) {
                    (Some(meta), Ok(v)) if i < n => check_output(meta, i, v)?,
                    (_, Ok(v)) => prop_assert!(false, "output {} of method {} is out of range, got {:?}", i, m, v),
                    (Some(_), Err(e)) if i < n => prop_assert!(false, "output {} of method {}: {:?}", i, m, e),
                    (_, Err(_)) => {}
                }
            }
            Call::OutputInto { method, index, delta } => {
                let m = pick(methods.len(), method);
                let n = methods.get(m).map_or(0, |meta| meta.outputs.len());
                let i = index as usize % (n + 1);
                let live = match model.output(m, i) {
                    Ok(Value::Tensor(t)) => Some(t.data.len()),
                    _ => None,
                };
                let len = (live.unwrap_or(4) as isize + delta as isize).max(0) as usize;
                let mut dst = vec![0u8; len];
                let r = model.output_into(m, i, &mut dst);
                prop_assert_eq!(r.is_ok(), live == Some(len), "{} bytes for {:?}: {:?}", len, live, r);
            }
            Call::Check { method, fill, seed } => {
                let m = pick(methods.len(), method);
                let Some(meta) = methods.get(m) else { continue };
                let mut rng = Rng(seed);
                let inputs: Vec<Owned> = meta
                    .inputs
                    .iter()
                    .map(|v| valid(v.tag, v.tensor.as_ref(), fill, &mut rng))
                    .collect();
                let run = |target: &mut dyn Model| -> Result<Result<(), Error>, TestCaseError> {
                    prop_assert!(target.reset(m).is_ok());
                    for (i, v) in inputs.iter().enumerate() {
                        let r = target.set_input(m, i, v.value());
                        prop_assert!(r.is_ok(), "input {} of {} given {:?}: {:?}", i, meta.name, v, r);
                    }
                    Ok(target.execute(m))
                };
                let results = [run(&mut *model)?, run(&mut *reference)?];
                continues[m] = 0;
                tally.checks += 1;
                tally.executed += results[0].is_ok() as usize;
                prop_assert_eq!(
                    &results[0],
                    &results[1],
                    "{} after the calls before, and fresh",
                    meta.name
                );
                if results[0].is_ok() {
                    for o in 0..meta.outputs.len() {
                        let (a, b) = (model.output(m, o), reference.output(m, o));
                        match (&a, &b) {
                            (Ok(a), Ok(b)) => {
                                check_output(meta, o, a)?;
                                prop_assert!(
                                    same_bits(a, b),
                                    "output {} of {}: {:?} and fresh {:?}",
                                    o,
                                    meta.name,
                                    a,
                                    b
                                );
                            }
                            _ => prop_assert!(false, "output {} of {}: {:?}, {:?}", o, meta.name, a, b),
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// The number of call sequences a test runs: its own, unless
/// PROPTEST_CASES asks for another.
fn cases_to_run(default: u32) -> u32 {
    match std::env::var("PROPTEST_CASES") {
        Ok(n) => n
            .parse()
            .unwrap_or_else(|_| panic!("PROPTEST_CASES={n} is not a number")),
        Err(_) => default,
    }
}

type RunCase = fn(&mut dyn Model, usize, Tolerance) -> Result<(), CaseFailure>;

/// `cases` generated call sequences on fresh instances of a program from
/// `make`; after each, the bundle's `bundled` cases from a reset.
fn drive<M: Model>(make: impl Fn() -> M, bundled: usize, run_case: RunCase, tol: Tolerance, cases: u32) {
    // A fixed seed, so that CI runs the same cases every time; by hand,
    // PROPTEST_RNG_SEED and PROPTEST_CASES explore more.
    let mut config = Config {
        failure_persistence: None,
        ..Config::default()
    };
    config.cases = cases_to_run(cases);
    if config.rng_seed == RngSeed::Random {
        config.rng_seed = RngSeed::Fixed(59);
    }
    let tally = core::cell::Cell::new(Tally::default());
    TestRunner::new(config)
        .run(&calls(), |calls| {
            let (mut model, mut reference) = (make(), make());
            let mut t = tally.get();
            play(&mut model, &mut reference, &calls, &mut t)?;
            tally.set(t);
            for m in 0..model.methods().len() {
                prop_assert!(model.reset(m).is_ok());
            }
            for case in 0..bundled {
                let r = run_case(&mut model, case, tol);
                prop_assert!(
                    r.is_ok(),
                    "bundled case {} after the calls and a reset: {}",
                    case,
                    r.unwrap_err()
                );
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    // Some checks must have run the method to its end, or no result was
    // compared.
    let t = tally.get();
    eprintln!("{} checks, {} executed", t.checks, t.executed);
    assert!(t.executed > 0, "none of {} checks executed", t.checks);
}

macro_rules! adversarial {
    ($($test:ident: $module:ident, $cases:expr;)*) => {$(
        #[test]
        fn $test() {
            use crate::$module::{bundled, Program};
            drive(
                || Program::try_boxed().expect("the heap holds the program"),
                bundled::CASES.len(),
                bundled::run_case,
                bundled::TOLERANCE,
                $cases,
            );
        }
    )*};
}

adversarial! {
    static_shapes: fixture_mlp, 32;
    dynamic_shapes: fixture_dynamic, 32;
    multi_method: fixture_multi_method, 32;
    stateful_kv_cache: fixture_kv_cache, 32;
    control_flow: fixture_cond, 32;
    compiled_delegate: fixture_xnnpack_conv, 16;
    llama_kv_cache: fixture_llama_kv, 12;
    llama_dynamic_prompt: fixture_llama_dynamic, 12;
    indices_from_inputs: fixture_dynamic_scatter, 24;
    data_dependent_sizes: fixture_selections, 24;
    nan_in_sorts: fixture_topk, 24;
    nan_in_coordinates: fixture_grid_sample, 24;
    mixed_dtypes: fixture_ops_mix, 24;
    complex_values: fixture_complex, 24;
}

/// The same for programs compiled with external weights: each instance is
/// made from the files it reads (mapped, or read where mapping is not
/// available), keeps its mutable state's initial values there, and
/// prepares its kernels' filters on its first run, which the calls may make
/// any of them.
macro_rules! adversarial_external {
    ($($test:ident: $module:ident, [$($file:literal),+], $cases:expr;)*) => {$(
        #[test]
        fn $test() {
            use crate::$module::{bundled, Program};
            let open = |name: &str| {
                let path = format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
                ptec_runtime::Blob::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
            };
            drive(
                || Program::boxed([$(open($file)),+]).expect("the files are the ones compiled against"),
                bundled::CASES.len(),
                bundled::run_case,
                bundled::TOLERANCE,
                $cases,
            );
        }
    )*};
}

adversarial_external! {
    external_weights_and_data: external_external_weights, ["external_weights.bpte", "external_weights.ptd"], 16;
    external_state: external_kv_cache, ["kv_cache.bpte"], 16;
    external_several_methods: external_multi_method, ["multi_method.bpte"], 16;
    external_prepared_delegate: external_xnnpack_conv, ["xnnpack_conv.bpte"], 12;
}

/// The same for programs whose delegates a user backend serves
/// (`examples/tiny-backend`'s `TinyBackend`): each instance gets a backend
/// of its own, which `init` hands the delegate's blob at construction and
/// every run calls, whatever came before. The backends come from a pool
/// made up front, two per call sequence (the instance and its reference),
/// and outlive the instances; only a failing case's shrinking, which makes
/// more, leaks the rest (LeakSanitizer reports leaks, `.ci/sanitizers`).
macro_rules! adversarial_user_backend {
    ($($test:ident: $module:ident, $cases:expr;)*) => {$(
        #[test]
        fn $test() {
            use crate::$module::{bundled, Program};
            use ptec_runtime::{Backend, BackendRegistry};
            use example_tiny_backend::TinyBackend;
            let cases = cases_to_run($cases);
            let mut owned: Vec<TinyBackend> = (0..2 * cases).map(|_| TinyBackend::default()).collect();
            let mut slots: Vec<[&mut dyn Backend; 1]> =
                owned.iter_mut().map(|b| [b as &mut dyn Backend]).collect();
            let pool = core::cell::RefCell::new(slots.iter_mut());
            drive(
                || {
                    let next = pool.borrow_mut().next();
                    let slot = next.unwrap_or_else(|| {
                        let backend: &mut dyn Backend = Box::leak(Box::<TinyBackend>::default());
                        Box::leak(Box::new([backend]))
                    });
                    Program::boxed(BackendRegistry::new(slot)).expect("the backend takes the delegate")
                },
                bundled::CASES.len(),
                bundled::run_case,
                bundled::TOLERANCE,
                cases,
            );
        }
    )*};
}

adversarial_user_backend! {
    user_backend_delegate: user_backend_tiny_delegate, 24;
    user_backend_with_device_copies: user_backend_device_copies, 24;
}

/// Programs without user backends are `Send` and `Sync` (docs/soundness.md;
/// those that must not be are `macros/tests/ui`'s compile-fail cases), and
/// one moved to another thread runs there.
#[test]
fn programs_without_user_backends_are_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<crate::fixture_mlp::Program>();
    both::<crate::fixture_xnnpack_conv::Program>();
    both::<crate::external_mlp::Program<'static>>();
    both::<ptec_runtime::Boxed<crate::fixture_llama_kv::Program>>();
    both::<ptec_runtime::Blob<'static>>();
    both::<Value<'static>>();
    both::<Error>();
    use crate::fixture_kv_cache::{bundled, Program};
    let mut model = Program::try_boxed().expect("the heap holds the program");
    bundled::run_case(&mut *model, 0, bundled::TOLERANCE).expect("case 0");
    // The state it carries goes along: case 1 follows case 0.
    #[cfg(not(target_os = "wasi"))]
    {
        let run = std::thread::spawn(move || {
            bundled::run_case(&mut *model, 1, bundled::TOLERANCE).map_err(|e| e.to_string())
        });
        run.join().expect("no panic").expect("case 1 on another thread");
    }
    // wasm32-wasip1 has no threads: the types are still checked above.
    #[cfg(target_os = "wasi")]
    bundled::run_case(&mut *model, 1, bundled::TOLERANCE).expect("case 1");
}
