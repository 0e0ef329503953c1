//! Reader + verifier + code generator on arbitrary bytes: must never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(loaded) = ptec::load(data, &[]) {
        if loaded.program.is_some() {
            let _ = ptec::compile(data, &[], &ptec::Options::new("/fuzz/input.pte"));
        }
    }
});
