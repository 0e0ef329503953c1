//! The pinned Python environment that `examples/chat/setup.sh` makes (or
//! `PTEC_VENV`), for tests that run ExecuTorch or read its wheel.
use sha2::{Digest, Sha256};
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The pinned Python environment: `PTEC_VENV`, else the one setup.sh
/// names after `examples/chat/pins.txt`, once its `pins.ok` says it is
/// complete.
pub fn venv() -> Result<PathBuf, String> {
    let pins = std::fs::read(repo().join("examples/chat/pins.txt")).expect("pins.txt");
    if let Some(v) = std::env::var_os("PTEC_VENV") {
        let v = PathBuf::from(v);
        return match v.join("bin/python").exists() {
            true => Ok(v),
            false => Err(format!("PTEC_VENV={} has no bin/python", v.display())),
        };
    }
    let v = cache_dir()
        .join("ptec/chat")
        .join(format!("venv-{}", short_hash(&[&pins])));
    match std::fs::read(v.join("pins.ok")) {
        Ok(ok) if ok == pins => Ok(v),
        _ => Err(format!(
            "no complete pinned Python environment at {}: run examples/chat/setup.sh (or set PTEC_VENV)",
            v.display()
        )),
    }
}

/// The pinned environment, or `None` (with `NOT RUN`) where CI does not
/// require it.
pub fn venv_or_not_run() -> Option<PathBuf> {
    match venv() {
        Ok(v) => Some(v),
        Err(msg) => {
            assert!(std::env::var_os("PTEC_REQUIRE_CHAT").is_none(), "{msg}");
            eprintln!("NOT RUN: {msg}");
            None
        }
    }
}

/// The user's cache directory as the setup scripts name it
/// (`${XDG_CACHE_HOME:-$HOME/.cache}`).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_default()
}

/// The first 8 bytes of the SHA-256 of `parts`, in hex: how the setup
/// scripts name an environment after its pins.
pub fn short_hash(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}
