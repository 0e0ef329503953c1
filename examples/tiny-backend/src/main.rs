//! Runs `tests/fixtures/tiny_delegate.pte`, whose multiply-add is delegated
//! to `PtecTinyBackend`, with the backend from this crate.
use example_tiny_backend::TinyBackend;
use ptec_runtime::{Backend, BackendRegistry};

mod tiny {
    ptec_macros::include_pte!("../../tests/fixtures/tiny_delegate.pte", name = TinyDelegate);
}

fn main() -> Result<(), ptec_runtime::Error> {
    let mut backend = TinyBackend::default();
    let mut backends: [&mut dyn Backend; 1] = [&mut backend];
    let mut model = tiny::TinyDelegate::new(BackendRegistry::new(&mut backends))?;
    let x: [[f32; 4]; 3] = [[1.0, -2.0, 0.5, 3.0], [0.0, 1.0, 2.0, -1.0], [4.0, 0.25, -0.5, 1.5]];
    let y: [[f32; 4]; 3] = [[0.5; 4], [1.0; 4], [-1.0; 4]];
    let (softmax, y_minus_one) = model.forward(&x, &y)?;
    println!("softmax(relu(x * y + x), -1) = {softmax:?}");
    println!("y - 1 = {y_minus_one:?}");
    Ok(())
}
