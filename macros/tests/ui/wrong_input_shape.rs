mod model {
    ptec_macros::include_pte!("../../../../tests/fixtures/mlp.pte");
}

fn main() {
    let mut m = model::Mlp::new();
    // The method takes [4, 16] float32: rustc rejects [4, 8].
    let x = [[0f32; 8]; 4];
    let _ = m.forward(&x);
}
