fn main() {
    ptec::Builder::new("../../tests/fixtures/mlp.bpte")
        .name("Mlp")
        .tests(1e-4, 1e-5)
        .generate("mlp.rs")
        .unwrap_or_else(|e| panic!("{e}"));
}
