//! Where the shared corpus is, for the tests that run over it.
use std::path::PathBuf;

/// `PTEC_CORPUS`, or `../shared/corpus` beside the repository; `None` when
/// it is absent, which is an error (a panic) when `PTEC_REQUIRE_CORPUS` is
/// set, as CI sets it: there a corpus test must never pass by skipping.
pub fn corpus() -> Option<PathBuf> {
    let dir = std::env::var_os("PTEC_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus"));
    if dir.join("manifest.json").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("PTEC_REQUIRE_CORPUS").is_none_or(|v| v.is_empty() || v == "0"),
        "PTEC_REQUIRE_CORPUS is set but there is no corpus at {} (set PTEC_CORPUS)",
        dir.display()
    );
    eprintln!("SKIPPED: no corpus at {} (set PTEC_CORPUS)", dir.display());
    None
}
