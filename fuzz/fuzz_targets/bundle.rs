//! The bundle readers (BP08 `.bpte` and BP04 `.bp`) on arbitrary bytes,
//! then, for a bundle that loads and verifies, the code generator with its
//! test cases.
#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let bp08 = ptec::__fuzz::read_bp08(data, &[]);
    let bp04 = ptec::__fuzz::read_bp04(data, &[]);
    if bp08.is_err() && bp04.is_err() {
        return;
    }
    if let Ok(loaded) = ptec::load(data, &[]) {
        if !loaded.suites.is_empty() {
            let input = ptec::Input::new(data, "/fuzz/input.bpte");
            let options = ptec::Options::new().tests(1e-3, 1e-5);
            common::no_internal(ptec::compile(&input, &options));
        }
    }
});
