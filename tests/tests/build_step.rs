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

/// The programs compiled with `trace = true` give their bundled outputs when
/// run traced, and report each execution in ExecuTorch's numbering: one
/// block per case, every instruction's span inside its execution's, and an
/// output for each instruction that computes one.
#[test]
fn traced_programs_report_their_instructions_and_outputs() {
    use ptec_runtime::harness::Tolerance;
    use ptec_runtime::trace::{record, Event, ProfileKind};
    let tol = Tolerance { rtol: 1e-4, atol: 1e-4 };
    macro_rules! traced {
        ($module:ident, $make:expr) => {{
            let name = stringify!($module);
            let cases = $module::bundled::CASES.len();
            let rec = record(true, |r| {
                let mut model = $make;
                for case in 0..cases {
                    $module::bundled::run_case_traced(&mut *model, case, tol, r)
                        .unwrap_or_else(|e| panic!("{name}, case {case}: {e}"));
                }
                Ok::<(), ()>(())
            })
            .unwrap();
            let blocks = rec.events.split(|e| *e == Event::Block).skip(1).collect::<Vec<_>>();
            assert_eq!(blocks.len(), cases, "{name}");
            for run in &blocks {
                let (mut ops, mut outputs) = (0, 0);
                let Some(&Event::Profile {
                    kind: ProfileKind::Execute,
                    start,
                    end,
                    ..
                }) = run.last()
                else {
                    panic!("{name}: a run ends with its execution's span: {run:?}");
                };
                for e in *run {
                    match *e {
                        Event::Profile {
                            kind,
                            instruction,
                            start: s,
                            end: t,
                            ..
                        } => {
                            assert!(start <= s && s <= t && t <= end, "{name}: {e:?}");
                            if kind != ProfileKind::Execute {
                                assert!(instruction >= 0, "{name}: {e:?}");
                                ops += 1;
                            }
                        }
                        Event::Output { tensor, .. } => {
                            let bytes: u64 =
                                tensor.sizes().iter().product::<u64>() * tensor.dtype.element_size() as u64;
                            let at = tensor.offset.unwrap_or(0);
                            assert!(at as u64 + bytes <= rec.debug.len() as u64, "{name}: {e:?}");
                            outputs += 1;
                        }
                        Event::Block => unreachable!(),
                    }
                }
                assert!(ops > 0 && outputs > 0, "{name}: {ops} spans, {outputs} outputs");
            }
            rec
        }};
    }
    fn boxed<M: ptec_runtime::InitInPlace>() -> ptec_runtime::Boxed<M> {
        ptec_runtime::new_boxed()
    }
    traced!(traced_cond, boxed::<traced_cond::Program>());
    traced!(traced_conv, boxed::<traced_conv::Program>());
    traced!(traced_dynamic, boxed::<traced_dynamic::Program>());
    traced!(traced_kv_cache, boxed::<traced_kv_cache::Program>());
    // The XNNPACK delegate is instruction 0 of the program: its nodes are
    // reported by their debug handles, inside one DELEGATE_CALL.
    let rec = traced!(traced_xnnpack_conv, boxed::<traced_xnnpack_conv::Program>());
    let (mut nodes, mut calls) = (0, 0);
    for e in &rec.events {
        match *e {
            Event::Profile {
                kind: ProfileKind::DelegateNode,
                instruction,
                delegate_id,
                ..
            } => {
                assert_eq!(instruction, 0);
                assert!(delegate_id.is_some());
                nodes += 1;
            }
            Event::Profile {
                kind: ProfileKind::Operator,
                ..
            } => panic!("xnnpack_conv has no operator outside its delegate: {e:?}"),
            // A node's outputs, or the call's own after its last node
            // (where ExecuTorch logs the call's arguments).
            Event::Output {
                instruction,
                delegate_id,
                name,
                ..
            } => {
                assert_eq!(instruction, 0, "{e:?}");
                if delegate_id.is_none() {
                    assert_eq!(name, "DELEGATE_CALL", "{e:?}");
                    calls += 1;
                }
            }
            _ => {}
        }
    }
    assert!(nodes > traced_xnnpack_conv::bundled::CASES.len(), "{nodes} node spans");
    // The call has one output, logged once per case.
    assert_eq!(calls, traced_xnnpack_conv::bundled::CASES.len());
    static FILE: ptec_runtime::mem::Aligned<[u8; include_bytes!("../fixtures/xnnpack_conv.bpte").len()]> =
        ptec_runtime::mem::Aligned(*include_bytes!("../fixtures/xnnpack_conv.bpte"));
    let external = || {
        traced_external_xnnpack_conv::Program::boxed([ptec_runtime::Blob::Borrowed(&FILE.0)])
            .expect("the file is the one compiled against")
    };
    let again = traced!(traced_external_xnnpack_conv, external());
    let kinds = |r: &ptec_runtime::trace::Recording| -> Vec<(ProfileKind, i32, Option<u32>)> {
        r.events
            .iter()
            .filter_map(|e| match *e {
                Event::Profile {
                    kind,
                    instruction,
                    delegate_id,
                    ..
                } => Some((kind, instruction, delegate_id)),
                _ => None,
            })
            .collect()
    };
    assert_eq!(kinds(&rec), kinds(&again));
}
