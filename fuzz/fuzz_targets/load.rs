//! Reader + verifier + passes + code generator on arbitrary bytes: must
//! never panic. `ptec::compile` loads (reads and verifies) the file, then
//! generates code when it holds a program; a panic anywhere becomes an
//! `Internal` error (so that a proc macro or build script survives it),
//! which here is a crash too.
#![no_main]
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let input = ptec::Input::new(data, "/fuzz/input.pte");
    common::no_internal(ptec::compile(&input, &ptec::Options::new()));
});
