mod model {
    ptec_macros::include_pte!("../../../../macros/tests/ui/not_a_program.pte");
}

fn main() {}
