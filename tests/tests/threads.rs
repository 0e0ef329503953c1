//! Programs run on two threads: the attention fixture's products, batched
//! products, softmax and copies are large enough to be split between
//! threads. Its bundled case must pass on two threads as on one, with
//! outputs bit-identical (every element is computed the same way whatever
//! thread computes it). The small_heads fixture's batched products are
//! split by head with no scratch to share out. The conv_chains fixture's
//! two inverted residual blocks run as chains, each thread's band buffers
//! in its own share of the thread scratch, as do the xnnpack_hardswish
//! fixture's, whose stages apply hardswish. The xnnpack_qs8_chains
//! fixture's two int8 blocks run as int8 chains, and must give ExecuTorch's
//! runtime's outputs to the bit on two threads as on one. The
//! xnnpack_winograd fixture's convolution splits its Winograd tiles.

mod attention {
    ptec_macros::include_pte!("fixtures/attention.bpte", name = Program, tests);
}

mod small_heads {
    ptec_macros::include_pte!("fixtures/small_heads.bpte", name = Program, tests);
}

mod conv_chains {
    ptec_macros::include_pte!("fixtures/conv_chains.bpte", name = Program, tests);
}

mod xnnpack_hardswish {
    ptec_macros::include_pte!("fixtures/xnnpack_hardswish.bpte", name = Program, tests);
}

mod winograd {
    ptec_macros::include_pte!("fixtures/xnnpack_winograd.bpte", name = Program, tests);
}

mod qs8_chains {
    ptec_macros::include_pte!(
        "fixtures/xnnpack_qs8_chains.bpte",
        name = Program,
        tests,
        rtol = 0.0,
        atol = 0.0
    );
}

type Input = [[[f32; 32]; 128]; 1];

/// The thread count is the process's: one test sets it at a time.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
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

#[test]
fn small_heads_on_two_threads_match_pytorch() {
    let mut model = small_heads::Program::boxed();
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    ptec_runtime::set_threads(2);
    let results: Vec<Result<(), String>> = (0..small_heads::bundled::CASES.len())
        .map(|case| {
            small_heads::bundled::run_case(&mut *model, case, small_heads::bundled::TOLERANCE)
                .map_err(|e| e.to_string())
        })
        .collect();
    ptec_runtime::set_threads(1);
    assert_eq!(results.len(), 2);
    for (case, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("case {case} on two threads: {e}"));
    }
}

/// Runs `run` (the model's output for an input, and its bundled case) on
/// one thread, then two: the case passes on both, and the five outputs
/// are finite and the same bits.
fn chains_on_one_and_two_threads(mut run: impl FnMut() -> (Vec<f32>, Result<(), String>)) {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut on = |threads| {
        ptec_runtime::set_threads(threads);
        run()
    };
    let (one, case_one) = on(1);
    let (two, case_two) = on(2);
    ptec_runtime::set_threads(1);
    case_one.unwrap_or_else(|e| panic!("on one thread: {e}"));
    case_two.unwrap_or_else(|e| panic!("on two threads: {e}"));
    assert_eq!(one.len(), 5);
    assert!(one.iter().all(|v| v.is_finite()));
    assert!(
        one.iter().zip(&two).all(|(a, b)| a.to_bits() == b.to_bits()),
        "outputs differ between one and two threads: {one:?} vs {two:?}"
    );
}

#[test]
fn conv_chains_on_two_threads_match_one_thread_and_pytorch() {
    let mut x = Box::new([[[[0.0f32; 56]; 56]; 4]; 1]);
    for (i, v) in x.iter_mut().flatten().flatten().flatten().enumerate() {
        *v = (0.1 * i as f32).sin();
    }
    let mut model = conv_chains::Program::boxed();
    chains_on_one_and_two_threads(|| {
        let out: Vec<f32> = model.forward(&x).expect("forward").iter().flatten().copied().collect();
        let tolerance = conv_chains::bundled::TOLERANCE;
        (
            out,
            conv_chains::bundled::run_case(&mut *model, 0, tolerance).map_err(|e| e.to_string()),
        )
    });
}

#[test]
fn hardswish_chains_on_two_threads_match_one_thread_and_pytorch() {
    let mut x = Box::new([[[[0.0f32; 96]; 96]; 3]; 1]);
    for (i, v) in x.iter_mut().flatten().flatten().flatten().enumerate() {
        *v = 3.0 * (0.37 * i as f32).sin();
    }
    let mut model = xnnpack_hardswish::Program::boxed();
    chains_on_one_and_two_threads(|| {
        let out: Vec<f32> = model.forward(&x).expect("forward").iter().flatten().copied().collect();
        let tolerance = xnnpack_hardswish::bundled::TOLERANCE;
        (
            out,
            xnnpack_hardswish::bundled::run_case(&mut *model, 0, tolerance).map_err(|e| e.to_string()),
        )
    });
}

/// The xnnpack_winograd fixture's 3 × 3 convolution, run by Winograd's
/// method, splits its tiles between two threads: the cases pass on one
/// thread and on two, and the outputs are the same bits.
#[test]
fn winograd_on_two_threads_matches_one_thread_and_pytorch() {
    let mut x = [[[[0.0f32; 15]; 15]; 8]; 2];
    for (i, v) in x.iter_mut().flatten().flatten().flatten().enumerate() {
        *v = (0.23 * i as f32).sin();
    }
    let mut model = winograd::Program::boxed();
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut on = |threads| {
        ptec_runtime::set_threads(threads);
        let out: Vec<f32> = model.forward(&x).expect("forward").iter().flatten().copied().collect();
        let cases: Vec<Result<(), String>> = (0..winograd::bundled::CASES.len())
            .map(|case| {
                winograd::bundled::run_case(&mut *model, case, winograd::bundled::TOLERANCE).map_err(|e| e.to_string())
            })
            .collect();
        (out, cases)
    };
    let (one, cases_one) = on(1);
    let (two, cases_two) = on(2);
    ptec_runtime::set_threads(1);
    assert_eq!(cases_one.len(), 2);
    for (threads, cases) in [(1, cases_one), (2, cases_two)] {
        for (case, r) in cases.into_iter().enumerate() {
            r.unwrap_or_else(|e| panic!("case {case} on {threads} thread(s): {e}"));
        }
    }
    assert_eq!(one.len(), 20);
    assert!(one.iter().all(|v| v.is_finite()));
    assert!(
        one.iter().zip(&two).all(|(a, b)| a.to_bits() == b.to_bits()),
        "outputs differ between one and two threads: {one:?} vs {two:?}"
    );
}

#[test]
fn int8_chains_on_one_and_two_threads_match_executorch_to_the_bit() {
    let mut model = qs8_chains::Program::boxed();
    let cases = qs8_chains::bundled::CASES.len();
    assert_eq!(cases, 2);
    assert_eq!(qs8_chains::bundled::TOLERANCE.atol, 0.0);
    assert_eq!(qs8_chains::bundled::TOLERANCE.rtol, 0.0);
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut results = Vec::new();
    for threads in [1, 2] {
        ptec_runtime::set_threads(threads);
        for case in 0..cases {
            let r = qs8_chains::bundled::run_case(&mut *model, case, qs8_chains::bundled::TOLERANCE);
            results.push((threads, case, r.map_err(|e| e.to_string())));
        }
    }
    ptec_runtime::set_threads(1);
    for (threads, case, r) in results {
        r.unwrap_or_else(|e| panic!("case {case} on {threads} thread(s): {e}"));
    }
}
