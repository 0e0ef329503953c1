mod model {
    ptec_macros::include_pte!("../../../../macros/tests/ui/unsupported_op.pte");
}

fn main() {}
