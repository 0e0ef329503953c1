//! Filters and weights the compiler prepares: with embedded weights they
//! are computed at compile time and leave the method's state; in
//! external-weights mode the first run prepares them in the state. (Both
//! ways run their bundles in the `tests` crate.)
use std::path::PathBuf;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `Arena<N>` sizes of the generated method states.
fn arenas(code: &str) -> Vec<usize> {
    code.match_indices("mem::Arena<")
        .map(|(i, m)| {
            let rest = &code[i + m.len()..];
            rest[..rest.find("usize>").expect("an arena size")].parse().unwrap()
        })
        .collect()
}

/// A fixture's generated code and the constants it reads.
struct Compiled {
    code: String,
    prepared: Vec<u8>,
    /// How many leading bytes of `prepared` are the files' bytes.
    files_len: usize,
}

fn compile(name: &str, external: bool) -> Compiled {
    let options = ptec::Options::new().external_weights(external);
    let output = ptec::compile(&ptec::Input::new(fixture(name), name), &options).unwrap();
    Compiled {
        code: output.to_source().unwrap(),
        prepared: output.prepared().to_vec(),
        files_len: output.files_len(),
    }
}

#[test]
fn prepared_constants_leave_the_state_when_the_weights_are_embedded() {
    // conv and channels_last: folded convolutions and chains of them;
    // xnnpack_conv and xnnpack_ops: lowered XNNPACK convolutions and fully
    // connected layers with kept packed weights; xnnpack_qb4_linear: the
    // weight sums of 4-bit blockwise layers; xnnpack_qs8_cnn: packed int8
    // filters and weights.
    for name in [
        "conv.bpte",
        "channels_last.bpte",
        "xnnpack_conv.bpte",
        "xnnpack_ops.bpte",
        "xnnpack_qb4_linear.bpte",
        "xnnpack_qs8_cnn.bpte",
    ] {
        let embedded = compile(name, false);
        let external = compile(name, true);
        assert!(
            embedded.prepared.len() > embedded.files_len,
            "{name}: nothing was prepared"
        );
        assert!(external.prepared.is_empty(), "{name}: external weights were prepared");
        assert!(embedded.code.contains("static EMBEDDED_DATA"), "{name}");
        assert!(!external.code.contains("EMBEDDED_DATA"), "{name}");
        // Nothing is prepared at run time when the compiler did it...
        for call in [
            ".prepare(",
            ".pack_filter(",
            "pack_fully_connected(",
            "prepare_blockwise(",
            "pack_conv(",
        ] {
            assert!(!embedded.code.contains(call), "{name}: {call} at run time");
        }
        // ...and the bytes it prepared are the ones the state no longer
        // holds (each kept tensor is 64-byte aligned in both).
        let (a, b) = (arenas(&embedded.code), arenas(&external.code));
        assert_eq!(a.len(), b.len(), "{name}");
        let saved: usize = b.iter().zip(&a).map(|(x, y)| x - y).sum();
        let prepared = embedded.prepared.len() - embedded.files_len.next_multiple_of(64);
        assert_eq!(saved, prepared.next_multiple_of(64), "{name}: arenas {a:?} and {b:?}");
    }
}

#[test]
fn planned_bytes_that_only_folded_values_held_leave_the_arena() {
    // ExecuTorch plans the MLP's transposed weights (2816 bytes in all);
    // ptec transposes them at compile time, so the arena keeps only the
    // activations: the [4, 16] input, the [4, 32] hidden layer and the
    // [4, 10] logits and probabilities, 64-byte aligned.
    let plan = 2816;
    let activations = [4 * 16 * 4, 4 * 32 * 4, 4 * 10 * 4, 4 * 10 * 4].map(|b: usize| b.next_multiple_of(64));
    let embedded = arenas(&compile("mlp.bpte", false).code);
    assert_eq!(embedded.len(), 1);
    assert!(embedded[0] < plan, "arena {embedded:?}");
    assert!(
        embedded[0] >= activations.iter().max().unwrap() * 2,
        "arena {embedded:?}"
    );
    // With external weights the first run packs them into the state's own
    // field, not the arena: the same arena.
    assert_eq!(arenas(&compile("mlp.bpte", true).code), embedded);
}

/// The Winograd fixtures' 3 × 3 convolution runs by Winograd's method by
/// default, its transformed filter prepared at compile time (16 matrices
/// where the direct filter has 9 taps), and by the direct sum with
/// `winograd = false`; their 1 × 1 stem by the direct sum either way.
/// (The `tests` crate runs both ways' bundles.)
#[test]
fn winograd_runs_by_default_and_the_option_turns_it_off() {
    for name in ["winograd.bpte", "xnnpack_winograd.bpte"] {
        let compile = |on: bool| {
            let options = ptec::Options::new().winograd(on);
            ptec::compile(&ptec::Input::new(fixture(name), name), &options).unwrap()
        };
        let (on, off) = (compile(true), compile(false));
        let (code_on, code_off) = (on.to_source().unwrap(), off.to_source().unwrap());
        assert_eq!(code_on.matches("Algorithm::Winograd").count(), 1, "{name}");
        assert_eq!(code_on.matches("Algorithm::Direct").count(), 1, "{name}: the stem");
        assert_eq!(code_off.matches("Algorithm::Winograd").count(), 0, "{name}");
        assert_eq!(code_off.matches("Algorithm::Direct").count(), 2, "{name}");
        // The transformed filter: 16 of 64 × 64 against 9 · 64 × 64.
        let more = on.prepared().len() - off.prepared().len();
        assert!(more >= 7 * 64 * 64 * 4, "{name}: {more} more bytes prepared");
    }
}
