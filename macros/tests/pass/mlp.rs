mod model {
    ptec_macros::include_pte!("../../../../tests/fixtures/mlp.pte", name = Classifier);
}

fn main() {
    let mut m = model::Classifier::boxed();
    let x = [[0.5f32; 16]; 4];
    let probs = m.forward(&x).expect("runs");
    for row in probs {
        let s: f32 = row.iter().sum();
        assert!((s - 1.0).abs() < 1e-5);
    }
}
