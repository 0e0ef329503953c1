//! The XNNPACK delegate blob reader and lowering on arbitrary bytes.
//!
//! The input is one byte that picks an XNNPACK delegate of the fixtures
//! (`xnnpack_conv.pte`, `xnnpack_ops.pte`), then the blob that replaces
//! that delegate's: appended to the program's file, which the delegate then
//! points at. The blob is read and verified as the read stage reads it,
//! then the program is lowered (the subgraph turned into kernel calls),
//! transformed and, when that succeeds, generated.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ptec::ir::{DataRef, DataSource};
use std::sync::OnceLock;

/// One XNNPACK delegate of a fixture.
struct Call {
    file: &'static [u8],
    loaded: ptec::Loaded<'static>,
    method: usize,
    delegate: usize,
}

fn calls() -> &'static [Call] {
    static CALLS: OnceLock<Vec<Call>> = OnceLock::new();
    CALLS.get_or_init(|| {
        let files: [&'static [u8]; 2] = [
            include_bytes!("../../tests/fixtures/xnnpack_conv.pte"),
            include_bytes!("../../tests/fixtures/xnnpack_ops.pte"),
        ];
        let mut calls = Vec::new();
        for file in files {
            let loaded = ptec::load(file, &[]).expect("fixture loads");
            let program = loaded.program.as_ref().expect("fixture is a program");
            for (method, m) in program.methods.iter().enumerate() {
                for (delegate, d) in m.delegates.iter().enumerate() {
                    if d.id == ptec::XNNPACK_BACKEND_ID {
                        calls.push(Call {
                            file,
                            loaded: loaded.clone(),
                            method,
                            delegate,
                        });
                    }
                }
            }
        }
        assert!(calls.len() >= 3, "fixtures have {} XNNPACK delegates", calls.len());
        calls
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, blob)) = data.split_first() else {
        return;
    };
    let calls = calls();
    let call = &calls[pick as usize % calls.len()];
    let mut file = call.file.to_vec();
    let offset = file.len();
    file.extend_from_slice(blob);
    let mut loaded = call.loaded.clone().with_program_file(&file);
    let program = loaded.program.as_mut().expect("fixture is a program");
    program.methods[call.method].delegates[call.delegate].processed = DataRef {
        source: DataSource::Program,
        offset,
        len: blob.len(),
    };
    // The blobs are read with the program: read the new one.
    loaded.read_delegates();
    let options = ptec::Options::new();
    if ptec::transform(&mut loaded, &options).is_ok() {
        let _ = ptec::generate(&loaded, &options);
    }
});
