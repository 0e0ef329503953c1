//! The same programs through `include_pte!`, run against their bundles.
macro_rules! via_macro {
    ($($name:ident => ($($arg:tt)*))*) => {$(
        #[allow(dead_code)]
        mod $name {
            ptec_macros::include_pte!($($arg)*);
        }
    )*};
}

via_macro! {
    mlp => ("fixtures/mlp.bpte", name = Program, tests)
    mlp_bp04 => ("fixtures/mlp_bp04.bp", name = Program, tests)
    cond => ("fixtures/cond.bpte", name = Program, tests)
    multi_method => ("fixtures/multi_method.bpte", name = Program, tests)
    dynamic => ("fixtures/dynamic.bpte", name = Program, tests)
    kv_cache => ("fixtures/kv_cache.bpte", name = Program, tests)
    conv => ("fixtures/conv.bpte", name = Program, tests, rtol = 1e-4, atol = 1e-4)
    stacktrace => ("fixtures/stacktrace.bpte", name = Program, tests)
    patch_embed => ("fixtures/patch_embed.bpte", name = Program, tests, rtol = 1e-4, atol = 1e-4)
    view_aliases => ("fixtures/view_aliases.bpte", name = Program, tests, rtol = 1e-4, atol = 1e-4)
    aliased_chain => ("fixtures/aliased_chain.bpte", name = Program, tests, rtol = 1e-4, atol = 1e-4)
    xnnpack_view_aliases => ("fixtures/xnnpack_view_aliases.bpte", name = Program, tests, rtol = 1e-4, atol = 1e-4)
    llama_kv => ("fixtures/llama_kv.bpte", name = Program, tests, rtol = 1e-4, atol = 1e-4)
    external_weights => ("fixtures/external_weights.bpte", name = Program, data = ["fixtures/external_weights.ptd"], tests)
    external_weights_at_run_time => ("fixtures/external_weights.bpte", name = Program, data = ["fixtures/external_weights.ptd"], weights = external, tests)
}

/// The macro's external-weights mode agrees with the embedded build on the
/// same inputs, reading memory-mapped files.
#[test]
fn external_weights_through_the_macro() {
    use ptec_runtime::{Blob, Model};
    let dir = env!("CARGO_MANIFEST_DIR");
    let files = [
        Blob::open(format!("{dir}/fixtures/external_weights.bpte")).unwrap(),
        Blob::open(format!("{dir}/fixtures/external_weights.ptd")).unwrap(),
    ];
    let mut ext = external_weights_at_run_time::Program::boxed(files).unwrap();
    let mut emb = external_weights::Program::boxed();
    for k in 0..external_weights::bundled::CASES.len() {
        external_weights_at_run_time::bundled::run_case(&mut *ext, k, external_weights::bundled::TOLERANCE).unwrap();
        external_weights::bundled::run_case(&mut *emb, k, external_weights::bundled::TOLERANCE).unwrap();
        assert_eq!(ext.output(0, 0).unwrap(), emb.output(0, 0).unwrap(), "case {k}");
    }
}

#[cfg(ptec_corpus)]
via_macro! {
    corpus_mlp => ("../../shared/corpus/mlp.bpte", name = Program, tests)
    corpus_cond => ("../../shared/corpus/cond.bpte", name = Program, tests)
    corpus_conv_net => ("../../shared/corpus/conv_net.bpte", name = Program, tests, rtol = 1e-4, atol = 1e-4)
    corpus_kv_cache => ("../../shared/corpus/kv_cache.bpte", name = Program, tests)
    corpus_multi_method => ("../../shared/corpus/multi_method.bpte", name = Program, tests)
    corpus_dynamic => ("../../shared/corpus/dynamic.bpte", name = Program, tests, rtol = 1e-4, atol = 1e-5)
}

/// Constant methods return their values through the typed API.
#[test]
fn constant_methods() {
    let m = multi_method::Program::new();
    assert_eq!(m.get_latent_dim().unwrap(), 3);
    assert_eq!(m.get_scale().unwrap(), 0.5);
    assert!(!m.uses_cache().unwrap());
}

/// The typed API of a static program: arrays in, arrays out, equal to the
/// dynamic interface's view of the same outputs.
#[test]
fn typed_and_dynamic_interfaces_agree() {
    use ptec_runtime::Model;
    let mut m = mlp::Program::boxed();
    let x: [[f32; 16]; 4] = core::array::from_fn(|r| core::array::from_fn(|c| (r * 16 + c) as f32 / 64.0 - 0.5));
    let typed = *m.forward(&x).unwrap();
    for row in &typed {
        let s: f32 = row.iter().sum();
        assert!((s - 1.0).abs() < 1e-5, "softmax rows sum to 1, got {s}");
    }
    let meta = &m.methods()[0];
    assert_eq!(meta.name, "forward");
    assert_eq!(meta.input_tensor_meta(0).unwrap().sizes, &[4, 16]);
    let sizes = [4usize, 16];
    let flat: Vec<f32> = x.iter().flatten().copied().collect();
    m.set_input(
        0,
        0,
        ptec_runtime::Value::Tensor(ptec_runtime::TensorRef::from_slice(&sizes, &flat)),
    )
    .unwrap();
    m.execute(0).unwrap();
    let out = m.output(0, 0).unwrap();
    let got = out.as_tensor().unwrap().as_slice::<f32>().unwrap();
    assert_eq!(got, typed.iter().flatten().copied().collect::<Vec<_>>().as_slice());
    // The output copied into the caller's own memory.
    let mut mine = [0u8; 4 * 10 * 4];
    m.output_into(0, 0, &mut mine).unwrap();
    let expected: Vec<u8> = typed.iter().flatten().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(&mine[..], &expected[..]);
    let mut short = [0u8; 12];
    assert_eq!(
        m.output_into(0, 0, &mut short),
        Err(ptec_runtime::Error::WrongDataLength {
            index: 0,
            expected: 160,
            got: 12
        })
    );
}

/// Wrong inputs are errors, not panics.
#[test]
fn bad_inputs_are_errors() {
    use ptec_runtime::{Error, Model, ScalarType, TensorRef, Value};
    let mut m = mlp::Program::boxed();
    let sizes = [4usize, 15];
    let data = vec![0f32; 60];
    assert_eq!(
        m.set_input(0, 0, Value::Tensor(TensorRef::from_slice(&sizes, &data))),
        Err(Error::WrongSizes { index: 0 })
    );
    let sizes = [4usize, 16];
    let ints = vec![0i32; 64];
    assert!(matches!(
        m.set_input(0, 0, Value::Tensor(TensorRef::from_slice(&sizes, &ints))),
        Err(Error::WrongDtype {
            expected: ScalarType::Float,
            got: ScalarType::Int,
            ..
        })
    ));
    assert!(matches!(
        m.set_input(0, 1, Value::Int(1)),
        Err(Error::IndexOutOfRange { .. })
    ));
    assert!(matches!(m.execute(7), Err(Error::IndexOutOfRange { .. })));
    let short = TensorRef {
        dtype: ScalarType::Float,
        sizes: &sizes,
        dim_order: &[0, 1],
        data: &[0u8; 10],
    };
    assert!(matches!(
        m.set_input(0, 0, Value::Tensor(short)),
        Err(Error::WrongDataLength { .. })
    ));
}

/// `step` runs one instruction at a time and ends where `execute` ends.
#[test]
fn stepping_matches_execute() {
    use ptec_runtime::{Model, Step};
    let mut a = cond::Program::boxed();
    let mut b = cond::Program::boxed();
    let x = [[0.5f32; 4]; 3];
    let y = [[0.25f32; 4]; 3];
    let want = *a.forward(&x, &y).unwrap();
    b.forward(&x, &y).unwrap(); // sets the inputs
    let mut steps = 0;
    while b.step(0).unwrap() == Step::Continue {
        steps += 1;
        assert!(steps < 100);
    }
    let got = b.output(0, 0).unwrap();
    assert_eq!(
        got.as_tensor().unwrap().as_slice::<f32>().unwrap(),
        want.iter().flatten().copied().collect::<Vec<_>>().as_slice()
    );
}

/// Mutable state persists across calls and `reset` restores its initial
/// value.
#[test]
fn reset_restores_mutable_state() {
    use ptec_runtime::Model;
    let tol = kv_cache::bundled::TOLERANCE;
    let mut m = kv_cache::Program::boxed();
    kv_cache::bundled::run_case(&mut *m, 0, tol).unwrap();
    // The state advanced, so the first case's expectations no longer hold.
    assert!(kv_cache::bundled::run_case(&mut *m, 0, tol).is_err());
    m.reset(0).unwrap();
    kv_cache::bundled::run_case(&mut *m, 0, tol).unwrap();
}
