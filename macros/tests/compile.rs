//! How `include_pte!` fails: one case per way a user can get it wrong, each
//! with the compiler's message in its `.stderr`; and a case that compiles
//! and runs.
//!
//! trybuild builds each case in `target/tests/trybuild/ptec-macros`, which
//! is the `CARGO_MANIFEST_DIR` the macro resolves paths against; the cases
//! reach the repository's files from there (so they expect the default
//! target directory).
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/pass/*.rs");
}
