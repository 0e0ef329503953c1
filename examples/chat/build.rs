//! Compiles the SmolLM2 exports that `setup.sh` made (fp32 and 8da4w) in
//! external-weights mode: the code holds no weights and reads them from
//! the `.pte` at run time. The folder is `PTEC_CHAT_DIR`, else the one
//! setup.sh names after the pins and the export script. Without it the
//! crate builds with `cfg(chat_model)` unset and says how to make it.
use sha2::{Digest, Sha256};
use std::path::PathBuf;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(chat_model)");
    println!("cargo:rerun-if-env-changed=PTEC_CHAT_DIR");
    println!("cargo:rerun-if-changed=pins.txt");
    println!("cargo:rerun-if-changed=export.py");
    let dir = match std::env::var_os("PTEC_CHAT_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            // setup.sh's key: the first 16 hex digits of sha256(pins.txt + export.py).
            let mut h = Sha256::new();
            h.update(std::fs::read("pins.txt").expect("pins.txt"));
            h.update(std::fs::read("export.py").expect("export.py"));
            let key: String = h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_default();
            cache.join("ptec/chat").join(format!("smollm2-{key}"))
        }
    };
    let done = dir.join("done");
    println!("cargo:rerun-if-changed={}", done.display());
    println!("cargo:rustc-env=PTEC_CHAT_DIR={}", dir.display());
    if !done.exists() {
        return;
    }
    for (pte, rs, name) in [
        ("smollm2_fp32.pte", "fp32.rs", "SmolLm2Fp32"),
        ("smollm2_8da4w.pte", "q4.rs", "SmolLm2Q4"),
    ] {
        ptec::Builder::new(dir.join(pte))
            .name(name)
            .external_weights(true)
            .generate(rs)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    println!("cargo:rustc-cfg=chat_model");
}
