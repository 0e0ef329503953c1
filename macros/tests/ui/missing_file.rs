mod model {
    ptec_macros::include_pte!("../../../../macros/tests/ui/does_not_exist.pte");
}

fn main() {}
