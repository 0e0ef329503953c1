//! Programs compiled by `ptec::Builder` in `build.rs`: each module's
//! `bundled::tests` runs the bundle's cases against PyTorch's outputs.
macro_rules! generated {
    ($($name:ident),* $(,)?) => {$(
        #[allow(dead_code)]
        mod $name {
            include!(concat!(env!("OUT_DIR"), "/", stringify!($name), ".rs"));
        }
    )*};
}

generated!(
    fixture_mlp,
    fixture_mlp_bp04,
    fixture_cond,
    fixture_multi_method,
    fixture_multi_method_bp04,
    fixture_kv_cache,
    fixture_dynamic,
    fixture_ops_mix,
    fixture_stacktrace,
    fixture_external_weights,
    fixture_conv,
);

#[cfg(ptec_corpus)]
generated!(corpus_mlp, corpus_cond, corpus_multi_method, corpus_dynamic);

#[cfg(not(ptec_corpus))]
#[test]
fn corpus_cases() {
    eprintln!("SKIPPED: no ../shared/corpus next to the repository; the corpus cases did not run");
}
