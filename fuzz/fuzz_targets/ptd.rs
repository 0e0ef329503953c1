//! The `.ptd` external-data reader on arbitrary bytes, then the same bytes
//! as the data file of `external_weights.pte`: its external tensors
//! resolved against them, and the program compiled when they resolve.
#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

const PROGRAM: &[u8] = include_bytes!("../../tests/fixtures/external_weights.pte");

fuzz_target!(|data: &[u8]| {
    if ptec::__fuzz::read_ptd(data, 0).is_err() {
        return;
    }
    if ptec::load(PROGRAM, &[data]).is_ok() {
        let input = ptec::Input::new(PROGRAM, "/fuzz/external_weights.pte").data(data, "/fuzz/input.ptd");
        common::no_internal(ptec::compile(&input, &ptec::Options::new()));
    }
});
