//! Runs `tests/fixtures/mlp.pte` (Linear 16→32, ReLU, Linear 32→10, softmax)
//! compiled to Rust at build time by `include_pte!`.
mod mlp {
    ptec_macros::include_pte!("../../tests/fixtures/mlp.pte");
}

fn main() -> Result<(), ptec_runtime::Error> {
    let mut model = mlp::Mlp::new();
    // The same input pattern as ExecuTorch's et_runner: sin(0.1 * i).
    let x: [[f32; 16]; 4] =
        core::array::from_fn(|r| core::array::from_fn(|c| (0.1 * (r * 16 + c) as f64).sin() as f32));
    let probs = model.forward(&x)?;
    for (r, row) in probs.iter().enumerate() {
        let (best, p) = row
            .iter()
            .enumerate()
            .fold((0, f32::MIN), |b, (i, &p)| if p > b.1 { (i, p) } else { b });
        let sum: f32 = row.iter().sum();
        println!("row {r}: class {best} with p = {p:.4} (probabilities sum to {sum:.4})");
    }
    let meta = mlp::Mlp::method_meta("forward").expect("the program has a forward method");
    println!(
        "forward: {} input(s), {} output(s), {} bytes of planned memory",
        meta.num_inputs(),
        meta.num_outputs(),
        meta.planned_buffers.iter().sum::<usize>()
    );
    Ok(())
}
