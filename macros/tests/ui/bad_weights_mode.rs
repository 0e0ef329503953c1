fn main() {
    ptec_macros::include_pte!("../../../../tests/fixtures/mlp.pte", weights = remote);
}
