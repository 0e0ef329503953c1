//! How `include_pte!` fails: one case per way a user can get it wrong, each
//! with the compiler's message in its `.stderr`; and a case that compiles
//! and runs.
//!
//! trybuild builds each case in `target/tests/trybuild/ptec-macros`, which
//! is the `CARGO_MANIFEST_DIR` the macro resolves paths against; the cases
//! reach the repository's files from there (so they expect the default
//! target directory). It builds the macro, the compiler and the runtime
//! again there (a minute or two), so it is in the slow set
//! (docs/testing.md), which CI runs.
#[test]
#[ignore = "slow: run with `cargo test --workspace --tests -- --ignored`"]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/pass/*.rs");
}
