//! Programs compiled by `ptec::Builder` in `build.rs` (the fixtures, and the
//! corpus cases when `../shared/corpus` is present): each module's
//! `bundled::tests` runs the bundle's cases against PyTorch's outputs.
include!(concat!(env!("OUT_DIR"), "/generated_modules.rs"));

#[cfg(not(ptec_corpus))]
#[test]
fn corpus_cases() {
    eprintln!("SKIPPED: no ../shared/corpus next to the repository; the corpus cases did not run");
}
