//! External-weights mode: programs compiled with `.external_weights(true)`
//! embed no file data and read the `.pte`/`.ptd` given at construction.
//! Each loading path (memory map, a loader, borrowed bytes) runs the bundled
//! cases; files that are not the ones compiled against are refused.
use ptec_runtime::{Blob, Error, FileLoader, Model};

mod external_weights {
    include!(concat!(env!("OUT_DIR"), "/external_external_weights.rs"));
}
mod kv_cache {
    include!(concat!(env!("OUT_DIR"), "/external_kv_cache.rs"));
}
mod multi_method {
    include!(concat!(env!("OUT_DIR"), "/external_multi_method.rs"));
}
mod xnnpack_conv {
    include!(concat!(env!("OUT_DIR"), "/external_xnnpack_conv.rs"));
}

fn fixture(name: &str) -> String {
    format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Runs every case of `$module`'s bundle on `$model` (see [`run_all`]).
macro_rules! run_bundle {
    ($module:ident, $model:expr) => {
        run_all($model, $module::bundled::CASES.len(), |m, k| {
            $module::bundled::run_case(m, k, $module::bundled::TOLERANCE).map_err(|e| e.to_string())
        })
    };
}

/// Runs every bundled case in order on one instance.
fn run_all(model: &mut dyn Model, cases: usize, run: fn(&mut dyn Model, usize) -> Result<(), String>) {
    assert!(cases > 0, "the bundle has cases");
    for k in 0..cases {
        run(model, k).unwrap_or_else(|e| panic!("case {k}: {e}"));
    }
}

#[test]
fn mapped_files_pass_the_bundle() {
    let pte = Blob::open(fixture("external_weights.bpte")).unwrap();
    let ptd = Blob::open(fixture("external_weights.ptd")).unwrap();
    let mut m = external_weights::Program::boxed([pte, ptd]).unwrap();
    run_bundle!(external_weights, &mut *m);
}

#[test]
fn loaded_files_pass_the_bundle() {
    let pte = Blob::load(&mut FileLoader::open(fixture("external_weights.bpte")).unwrap()).unwrap();
    let ptd = Blob::load(&mut FileLoader::open(fixture("external_weights.ptd")).unwrap()).unwrap();
    let mut m = external_weights::Program::new([pte, ptd]).unwrap();
    run_bundle!(external_weights, &mut m);
}

#[test]
fn state_and_constant_outputs_come_from_the_file() {
    // kv_cache initialises its mutable buffers from the file, on
    // construction and on reset.
    let mut kv = kv_cache::Program::boxed([Blob::open(fixture("kv_cache.bpte")).unwrap()]).unwrap();
    for round in 0..2 {
        run_bundle!(kv_cache, &mut *kv);
        for method in 0..kv.methods().len() {
            kv.reset(method)
                .unwrap_or_else(|e| panic!("reset after round {round}: {e}"));
        }
    }
    // multi_method's constant methods return constants read from the file.
    let mut mm = multi_method::Program::boxed([Blob::open(fixture("multi_method.bpte")).unwrap()]).unwrap();
    run_bundle!(multi_method, &mut *mm);
}

/// An XNNPACK-delegated program: its lowered convolutions (folded calls,
/// one adding a residual) read their filters from the mapped file, in
/// XNNPACK's layout, and prepare them on the first run.
#[test]
fn lowered_xnnpack_convolutions_read_their_filters_from_the_file() {
    let mut m = xnnpack_conv::Program::boxed([Blob::open(fixture("xnnpack_conv.bpte")).unwrap()]).unwrap();
    for _ in 0..2 {
        run_bundle!(xnnpack_conv, &mut *m);
    }
}

#[test]
fn other_files_are_refused() {
    // Files swapped, a truncated program, one changed byte.
    let pte = std::fs::read(fixture("external_weights.bpte")).unwrap();
    let ptd = std::fs::read(fixture("external_weights.ptd")).unwrap();
    let aligned = |b: &[u8]| {
        let mut o = ptec_runtime::OwnedBytes::zeroed(b.len());
        o.bytes_mut().copy_from_slice(b);
        Blob::Owned(o)
    };
    let swapped = external_weights::Program::boxed([aligned(&ptd), aligned(&pte)]);
    assert!(
        matches!(
            swapped,
            Err(Error::FileMismatch {
                file: "external_weights.bpte",
                ..
            })
        ),
        "{:?}",
        swapped.err()
    );
    let truncated = external_weights::Program::boxed([aligned(&pte[..pte.len() - 1]), aligned(&ptd)]);
    let e = truncated.err().expect("a truncated file is refused");
    assert!(
        e.to_string()
            .contains("bytes, but the file this program was compiled against is"),
        "{e}"
    );
    let mut changed = ptd.clone();
    let mid = changed.len() / 2;
    changed[mid] ^= 0x40;
    let e = external_weights::Program::boxed([aligned(&pte), aligned(&changed)])
        .err()
        .expect("a changed file is refused");
    assert!(
        matches!(
            e,
            Error::FileMismatch {
                file: "external_weights.ptd",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("same size, different contents"), "{e}");
    assert!(matches!(
        Blob::open(fixture("no_such_file.pte")).err(),
        Some(Error::Load { .. })
    ));
}

#[test]
fn files_are_described() {
    let files = external_weights::Program::FILES;
    assert_eq!(files[0].name, "external_weights.bpte");
    assert_eq!(files[1].name, "external_weights.ptd");
    for (f, name) in files.iter().zip(["external_weights.bpte", "external_weights.ptd"]) {
        let bytes = std::fs::read(fixture(name)).unwrap();
        assert_eq!(f.size, bytes.len());
        assert_eq!(f.hash, ptec_runtime::content_hash(&bytes));
    }
}

#[test]
fn the_weights_are_not_in_the_generated_code() {
    // The embedded build includes the files; the external one only in its
    // test module (cfg(test) of the generated crate, here never compiled
    // into the program's own code).
    let out = std::path::Path::new(env!("OUT_DIR"));
    let ext = std::fs::read_to_string(out.join("external_external_weights.rs")).unwrap();
    let emb = std::fs::read_to_string(out.join("fixture_external_weights.rs")).unwrap();
    let before_tests = |s: &str| s.split("pub mod bundled").next().unwrap_or("").to_string();
    assert!(before_tests(&emb).contains("include_bytes!"));
    assert!(
        !before_tests(&ext).contains("include_bytes!"),
        "external mode embeds file data outside the tests"
    );
}
