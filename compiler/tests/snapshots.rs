//! Snapshots of generated code for small programs, so every change to the
//! output is reviewed (`cargo insta review`). The same code is compiled and
//! run by the `ptec-tests` crate.
use std::path::PathBuf;

fn generate(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    let bytes = std::fs::read(&path).unwrap();
    // Fixed include paths keep the snapshot independent of the checkout,
    // and the constants out of it (as the CLI writes them).
    let options = ptec::Options::new().output_file(name);
    let input = ptec::Input::new(bytes, name);
    ptec::compile(&input, &options).unwrap().to_source().unwrap()
}

#[test]
fn mlp() {
    insta::assert_snapshot!(generate("mlp.pte"));
}

#[test]
fn cond() {
    insta::assert_snapshot!(generate("cond.pte"));
}

#[test]
fn dynamic() {
    insta::assert_snapshot!(generate("dynamic.pte"));
}

#[test]
fn multi_method() {
    insta::assert_snapshot!(generate("multi_method.pte"));
}

#[test]
fn mlp_external_weights() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/mlp.pte");
    let bytes = std::fs::read(&path).unwrap();
    let options = ptec::Options::new().external_weights(true);
    let input = ptec::Input::new(bytes, "mlp.pte");
    insta::assert_snapshot!(ptec::compile(&input, &options).unwrap().to_source().unwrap());
}
