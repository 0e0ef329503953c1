mod model {
    ptec_macros::include_pte!("../../../../tests/fixtures/mlp.pte", colour = blue);
}

fn main() {}
