//! Compiles the exported model (`export.py`'s `minilm.pte` and
//! `minilm_xnnpack.pte`, in `PTEC_MINILM_DIR` or `../../target/minilm`) in
//! external-weights mode: the generated code holds no weights and reads
//! them from the `.pte` at run time. Without the export, the crate builds
//! with `cfg(model)` unset and says how to make it.
use std::path::PathBuf;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(model)");
    println!("cargo:rerun-if-env-changed=PTEC_MINILM_DIR");
    let dir = std::env::var_os("PTEC_MINILM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../../target/minilm"));
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    println!("cargo:rerun-if-changed={}", dir.display());
    println!("cargo:rustc-env=PTEC_MINILM_DIR={}", dir.display());
    let files = [("minilm.pte", "minilm.rs"), ("minilm_xnnpack.pte", "minilm_xnnpack.rs")];
    if files.iter().any(|(pte, _)| !dir.join(pte).exists()) {
        return;
    }
    for (pte, rs) in files {
        ptec::Builder::new(dir.join(pte))
            .name("MiniLm")
            .external_weights(true)
            .generate(rs)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    println!("cargo:rustc-cfg=model");
}
