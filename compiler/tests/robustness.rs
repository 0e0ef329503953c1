//! Bad input never panics: every truncation of every fixture, and single-byte
//! corruptions of small ones, either load (and then compile) or give a
//! located error. The default run corrupts every 7th byte (a prime, so the
//! bytes hit fall at every offset within fields); the full run every byte.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

fn fixtures() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pte" | "bpte" | "bp" | "ptd")
            )
        })
        .collect();
    files.sort();
    assert!(files.len() >= 15, "fixtures missing in {}", dir.display());
    files
}

/// Loads (and compiles, when it loads) `bytes`; panics are caught and
/// reported with `what`.
fn exercise(bytes: &[u8], what: &str) -> bool {
    let r = catch_unwind(AssertUnwindSafe(|| match ptec::load(bytes, &[]) {
        Ok(loaded) => {
            if loaded.program.is_some() {
                let input = ptec::Input::new(bytes, "/nonexistent/program.pte");
                if let Err(e) = ptec::compile(&input, &ptec::Options::new()) {
                    assert!(!matches!(e.first().kind, ptec::ErrorKind::Internal { .. }), "{e}");
                }
            }
            true
        }
        Err(e) => {
            // Every error says something.
            assert!(!e.to_string().is_empty());
            false
        }
    }));
    match r {
        Ok(ok) => ok,
        Err(_) => panic!("panicked on {what}"),
    }
}

#[test]
fn every_truncation_is_handled() {
    let mut n = 0;
    for f in fixtures() {
        let bytes = std::fs::read(&f).unwrap();
        let step = (bytes.len() / 2000).max(1);
        let mut cut = 0;
        while cut < bytes.len() {
            let ok = exercise(&bytes[..cut], &format!("{} truncated to {cut} bytes", f.display()));
            // A .pte cut inside its flatbuffer can never load.
            if cut < 16 {
                assert!(!ok, "{} truncated to {cut} bytes loaded", f.display());
            }
            n += 1;
            cut += step;
        }
    }
    eprintln!("{n} truncations handled");
}

#[test]
fn single_byte_corruptions_are_handled() {
    single_byte_corruptions(7);
}

/// Every byte compiles thousands of programs unoptimized (minutes).
#[test]
#[ignore = "slow: run with `cargo test --workspace --tests -- --ignored`"]
fn every_single_byte_corruption_is_handled() {
    single_byte_corruptions(1);
}

/// Corrupts every `step`th byte of the small fixtures three ways.
fn single_byte_corruptions(step: usize) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let mut n = 0;
    for name in [
        "mlp.pte",
        "cond.pte",
        "kv_cache.pte",
        "external_weights.ptd",
        "mlp_bp04.bp",
        // Complex dtypes (a corrupted code may name one anywhere).
        "complex.pte",
    ] {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        for pos in (0..bytes.len()).step_by(step) {
            for flip in [0xffu8, 0x01, 0x80] {
                let mut b = bytes.clone();
                b[pos] ^= flip;
                exercise(&b, &format!("{name} with byte {pos} ^ {flip:#x}"));
                n += 1;
            }
        }
    }
    eprintln!("{n} corruptions handled");
}

#[test]
fn non_executorch_files_are_named() {
    let mut tflite = vec![0u8; 64];
    tflite[4..8].copy_from_slice(b"TFL3");
    let e = ptec::load(&tflite, &[]).unwrap_err().to_string();
    assert!(e.contains("TensorFlow Lite"), "{e}");
    let e = ptec::load(b"", &[]).unwrap_err().to_string();
    assert!(e.contains("empty"), "{e}");
    let random: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let e = ptec::load(&random, &[]).unwrap_err().to_string();
    assert!(e.contains("not an ExecuTorch"), "{e}");
}

/// The XNNPACK subgraph of `xnnpack_conv.pte`, and those of the static
/// int8 and the 4-bit dynamically quantized fixtures: every byte of each
/// blob corrupted, and the blob cut at every length, either lowers and
/// compiles or gives an error located at the delegate call — never a
/// panic.
#[test]
fn xnnpack_blob_corruptions_are_handled() {
    for name in XNNPACK {
        blob_corruptions_are_handled(name, 7);
    }
}

/// Every byte and every cut: minutes, as above.
#[test]
#[ignore = "slow: run with `cargo test --workspace --tests -- --ignored`"]
fn every_xnnpack_blob_corruption_is_handled() {
    for name in XNNPACK {
        blob_corruptions_are_handled(name, 1);
    }
}

const XNNPACK: [&str; 3] = [
    "xnnpack_conv.pte",
    "xnnpack_qs8_cnn_runtime.pte",
    "xnnpack_qb4_linear.pte",
];

/// Corrupts every `step`th byte of `name`'s blob three ways, and cuts it
/// at every `step`th length.
fn blob_corruptions_are_handled(name: &str, step: usize) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    let bytes = std::fs::read(&path).unwrap();
    let loaded = ptec::load(&bytes, &[]).unwrap();
    let method = &loaded.program.as_ref().unwrap().methods[0];
    assert_eq!(method.delegates[0].id, "XnnpackBackend");
    let blob = method.delegates[0].processed;
    let mut n = 0;
    for pos in (blob.offset..blob.offset + blob.len).step_by(step) {
        for flip in [0xffu8, 0x01, 0x80] {
            let mut b = bytes.clone();
            b[pos] ^= flip;
            exercise(&b, &format!("{name} with blob byte {pos} ^ {flip:#x}"));
            n += 1;
        }
    }
    let (mut lowered, mut refused) = (0, 0);
    let cuts = (0..blob.len).step_by(step);
    let tried = cuts.len();
    for cut in cuts {
        let mut l = loaded.clone();
        l.program.as_mut().unwrap().methods[0].delegates[0].processed.len = cut;
        // The blob is read with the program: read the cut one.
        l.read_delegates();
        let r = catch_unwind(AssertUnwindSafe(|| {
            match ptec::lower_delegates(&mut l, &ptec::Options::new()) {
                Ok(()) => {
                    if let Err(e) = ptec::generate(&l, &ptec::Options::new()) {
                        assert!(!matches!(e.first().kind, ptec::ErrorKind::Internal { .. }), "{e}");
                    }
                    lowered += 1;
                }
                Err(e) => {
                    let d = e.first();
                    assert_eq!(
                        (d.at.method.as_deref(), d.at.instruction),
                        (Some("forward"), Some(0)),
                        "{d}"
                    );
                    refused += 1;
                }
            }
        }));
        assert!(r.is_ok(), "{name}: panicked on the blob cut to {cut} bytes");
        n += 1;
    }
    // A cut blob loses its constants' offsets or its flatbuffer's end.
    assert!(refused > tried / 2, "{name}: {refused} of {tried} cuts refused");
    eprintln!("{name}: {n} blob corruptions handled ({lowered} cuts still lowered)");
}

/// A blob that cannot be read is an error of the lowering, located at the
/// call and the bad bytes; a program whose delegates stay calls through the
/// runtime never needs its blobs, and compiles.
#[test]
fn a_bad_blob_is_an_error_only_when_lowered() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/xnnpack_conv.pte");
    let mut bytes = std::fs::read(&path).unwrap();
    let loaded = ptec::load(&bytes, &[]).unwrap();
    let blob = loaded.program.as_ref().unwrap().methods[0].delegates[0].processed;
    // The `XH00` header gives the flatbuffer's offset in the blob.
    assert_eq!(&bytes[blob.offset + 4..blob.offset + 8], b"XH00");
    let fb_offset = u32::from_le_bytes(bytes[blob.offset + 10..blob.offset + 14].try_into().unwrap()) as usize;
    let ident = blob.offset + fb_offset + 4;
    bytes[ident..ident + 4].copy_from_slice(b"ZZZZ");
    let input = ptec::Input::new(&bytes[..], "/nonexistent/program.pte");
    let e = ptec::compile(&input, &ptec::Options::new()).unwrap_err();
    let d = e.first();
    assert_eq!(
        d.kind.to_string(),
        "bad header: XNNPACK flatbuffer identifier is \"ZZZZ\", not XN01 or XN00",
        "{d}"
    );
    assert_eq!(
        (d.at.method.as_deref(), d.at.instruction, d.at.offset),
        (Some("forward"), Some(0), Some(ident))
    );
    let kept = ptec::Options::new().lower_xnnpack(false);
    assert!(ptec::compile(&input, &kept).is_ok());
}
