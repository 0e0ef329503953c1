//! A program run on two threads: the attention fixture's products, batched
//! products, softmax and copies are large enough to be split between
//! threads. Its bundled case must pass on two threads as on one, with
//! outputs bit-identical (every element is computed the same way whatever
//! thread computes it).

mod attention {
    ptec_macros::include_pte!("fixtures/attention.bpte", name = Program, tests);
}

type Input = [[[f32; 32]; 128]; 1];

fn forward(model: &mut attention::Program, x: &Input) -> Vec<f32> {
    let out = model.forward(x).expect("forward");
    out.iter().flatten().flatten().copied().collect()
}

#[test]
fn attention_on_two_threads_matches_one_thread_and_pytorch() {
    let mut x: Input = [[[0.0; 32]; 128]; 1];
    for (i, v) in x.iter_mut().flatten().flatten().enumerate() {
        *v = (0.1 * i as f32).sin();
    }
    let mut model = attention::Program::boxed();
    ptec_runtime::set_threads(1);
    let one = forward(&mut model, &x);
    ptec_runtime::set_threads(2);
    let two = forward(&mut model, &x);
    for case in 0..attention::bundled::CASES.len() {
        attention::bundled::run_case(&mut *model, case, attention::bundled::TOLERANCE)
            .unwrap_or_else(|e| panic!("case {case} on two threads: {e}"));
    }
    ptec_runtime::set_threads(1);
    assert!(one.iter().all(|v| v.is_finite()));
    assert_eq!(one.len(), 128 * 32);
    assert!(
        one.iter().zip(&two).all(|(a, b)| a.to_bits() == b.to_bits()),
        "outputs differ between one and two threads"
    );
}
