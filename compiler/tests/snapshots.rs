//! Snapshots of generated code for small programs, so every change to the
//! output is reviewed as a diff. They are the modules of the
//! `ptec-snapshots` crate (`tests/output`), so they also build; the same
//! code is run by the `ptec-tests` crate. After a deliberate change,
//! `PTEC_BLESS=1 cargo test -p ptec --test snapshots` rewrites them.
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap()
}

/// Checks that `path` holds `contents`; with `PTEC_BLESS` set, makes it so.
fn assert_file(path: &Path, contents: &[u8]) {
    if std::env::var_os("PTEC_BLESS").is_some() {
        std::fs::write(path, contents).unwrap();
        return;
    }
    let old = std::fs::read(path).unwrap_or_default();
    if old == contents {
        return;
    }
    // The first line that differs, to point the reviewer at it.
    let (old, new) = (String::from_utf8_lossy(&old), String::from_utf8_lossy(contents));
    let line = old.lines().zip(new.lines()).position(|(a, b)| a != b).unwrap_or(0);
    panic!(
        "{} is out of date (first difference at line {}):\n  was: {:?}\n  now: {:?}\nrerun with PTEC_BLESS=1 to accept",
        path.display(),
        line + 1,
        old.lines().nth(line).unwrap_or(""),
        new.lines().nth(line).unwrap_or("")
    );
}

/// Compiles fixture `file` as module `module` of the snapshot crate: its
/// code, and its constants beside it (as the CLI writes them).
fn snapshot(file: &str, module: &str, external_weights: bool) {
    snapshot_with(file, module, external_weights, ptec::Options::new());
}

/// [`snapshot`] from `options`.
fn snapshot_with(file: &str, module: &str, external_weights: bool, options: ptec::Options) {
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/output/src");
    let rs = out.join(format!("{module}.rs"));
    // Fixed include paths keep the snapshot independent of the checkout.
    let mut options = options.external_weights(external_weights);
    if !external_weights {
        options = options.output_file(&rs);
    }
    let output = ptec::compile(&ptec::Input::new(fixture(file), file), &options).unwrap();
    assert_file(&rs, output.to_source().unwrap().as_bytes());
    let prepared = rs.with_extension("prepared");
    if output.prepared().is_empty() {
        assert!(!prepared.exists(), "{} is left over", prepared.display());
    } else {
        assert_file(&prepared, output.prepared());
    }
}

#[test]
fn mlp() {
    snapshot("mlp.pte", "mlp", false);
}

#[test]
fn cond() {
    snapshot("cond.pte", "cond", false);
}

#[test]
fn dynamic() {
    snapshot("dynamic.pte", "dynamic", false);
}

#[test]
fn multi_method() {
    snapshot("multi_method.pte", "multi_method", false);
}

/// The code the `trace` option adds (the rest is `mlp`'s).
#[test]
fn mlp_traced() {
    snapshot_with("mlp.pte", "mlp_traced", false, ptec::Options::new().trace(true));
}

#[test]
fn mlp_external_weights() {
    snapshot("mlp.pte", "mlp_external_weights", true);
}
