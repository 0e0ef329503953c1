//! Programs compiled by `ptec::Builder` in `build.rs` (the fixtures, and the
//! corpus cases when `../shared/corpus` is present): each module's
//! `bundled::tests` runs the bundle's cases against PyTorch's outputs.
include!(concat!(env!("OUT_DIR"), "/generated_modules.rs"));

#[cfg(not(ptec_corpus))]
#[test]
fn corpus_cases() {
    // tests/build.rs refuses to build without the corpus when it is
    // required, so this only runs where skipping is allowed.
    assert!(std::env::var_os("PTEC_REQUIRE_CORPUS").is_none_or(|v| v.is_empty() || v == "0"));
    eprintln!("SKIPPED: no ../shared/corpus next to the repository; the corpus cases did not run");
}
