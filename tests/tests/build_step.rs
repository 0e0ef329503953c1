//! Programs compiled by `ptec::Builder` in `build.rs` (the fixtures, and the
//! corpus cases when `../shared/corpus` is present): each module's
//! `bundled::tests` runs the bundle's cases against PyTorch's outputs.
include!(concat!(env!("OUT_DIR"), "/generated_modules.rs"));

// Here rather than a test binary of its own, which would build the
// generated modules again.
#[path = "api/model_api.rs"]
mod model_api;

#[cfg(not(ptec_corpus))]
#[test]
fn corpus_cases() {
    // tests/build.rs refuses to build without the corpus when it is
    // required, so this only runs where skipping is allowed.
    assert!(std::env::var_os("PTEC_REQUIRE_CORPUS").is_none_or(|v| v.is_empty() || v == "0"));
    eprintln!("SKIPPED: no ../shared/corpus next to the repository; the corpus cases did not run");
}

/// XNNPACK sums blockwise 4-bit layers in one order on x86 CPUs with
/// AVX-512 VNNI and in another elsewhere (ptec follows it, see
/// `ptec_kernels::qd8::BlockwiseOrder`); ExecuTorch's outputs on each kind
/// of CPU are a fixture. The one of this CPU's kind is met to the bit,
/// with the weights prepared by the compiler and by the first run.
#[test]
fn blockwise_4bit_layers_give_executorchs_bits_on_this_kind_of_cpu() {
    use ptec_runtime::harness::Tolerance;
    use ptec_runtime::kernels::qd8::{blockwise_order, BlockwiseOrder};
    let exact = Tolerance { rtol: 0.0, atol: 0.0 };
    macro_rules! check {
        ($embedded:ident, $external:ident, $file:literal) => {{
            static FILE: ptec_runtime::mem::Aligned<[u8; include_bytes!($file).len()]> =
                ptec_runtime::mem::Aligned(*include_bytes!($file));
            let mut embedded = $embedded::Program::try_boxed().expect("the heap holds the program");
            let mut external = $external::Program::boxed([ptec_runtime::Blob::Borrowed(&FILE.0)])
                .expect("the file is the one compiled against");
            for case in 0..$embedded::bundled::CASES.len() {
                for model in [&mut *embedded as &mut dyn ptec_runtime::Model, &mut *external] {
                    $embedded::bundled::run_case(model, case, exact)
                        .unwrap_or_else(|e| panic!("{}, case {case}: {e}", stringify!($embedded)));
                }
            }
        }};
    }
    match blockwise_order() {
        BlockwiseOrder::Partials => check!(
            fixture_xnnpack_qb4_linear,
            external_xnnpack_qb4_linear,
            "../fixtures/xnnpack_qb4_linear.bpte"
        ),
        BlockwiseOrder::Blocks => check!(
            fixture_xnnpack_qb4_linear_vnni,
            external_xnnpack_qb4_linear_vnni,
            "../fixtures/xnnpack_qb4_linear_vnni.bpte"
        ),
    }
}
