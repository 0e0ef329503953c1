//! The MLP of `tests/fixtures/mlp.bpte`, generated into `OUT_DIR` by
//! `build.rs` with `ptec::Builder`, run on its bundled test cases.
mod mlp {
    include!(concat!(env!("OUT_DIR"), "/mlp.rs"));
}

fn main() {
    let mut model = mlp::Mlp::boxed();
    let tol = mlp::bundled::TOLERANCE;
    for (k, (method, index)) in mlp::bundled::CASES.iter().enumerate() {
        match mlp::bundled::run_case(&mut *model, k, tol) {
            Ok(()) => println!("{method}[{index}]: ok"),
            Err(e) => println!("{method}[{index}]: {e}"),
        }
    }
}
