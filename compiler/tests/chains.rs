//! Chains of convolutions share one thread scratch: the `conv_chains`
//! fixture's two inverted residual blocks each run as a chain, and both
//! chains take the same region, after everything else in the arena, so
//! that each thread's band buffers stay where only that thread writes.
//! (The `tests` crate runs the fixture's bundle on one and two threads.)
use std::path::PathBuf;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The number after `key` in `code` (a `usize` literal).
fn number_after(code: &str, key: &str) -> usize {
    let at = code
        .find(key)
        .unwrap_or_else(|| panic!("no {key} in the generated code"))
        + key.len();
    let digits: String = code[at..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().unwrap_or_else(|_| panic!("no number after {key}"))
}

#[test]
fn chains_share_one_thread_scratch_at_the_arena_end() {
    let input = ptec::Input::new(fixture("conv_chains.pte"), "conv_chains");
    let code = ptec::compile(&input, &ptec::Options::new())
        .and_then(|o| o.to_source())
        .unwrap()
        .replace(char::is_whitespace, "");
    let calls: Vec<&str> = code.split("conv2d_folded_chain(").skip(1).collect();
    assert_eq!(calls.len(), 2, "one chain per inverted residual block");
    let views = code
        .matches("view_mut(base,Self::THREAD_SCRATCH_OFFSET,Self::THREAD_SCRATCH_FLOATS,)")
        .count();
    assert_eq!(views, 2, "each chain views the thread scratch");
    let offset = number_after(&code, "constTHREAD_SCRATCH_OFFSET:usize=");
    let floats = number_after(&code, "constTHREAD_SCRATCH_FLOATS:usize=");
    let arena = number_after(&code, "mem::Arena<");
    assert_eq!(offset % 64, 0, "the thread scratch starts on a cache line");
    assert_eq!(offset + 4 * floats, arena, "the thread scratch ends the arena");
    assert_eq!(floats % ptec_runtime::kernels::nhwc::MAX_CHAIN_PARTS, 0, "equal shares");
    // No tensor of the plan lies in it: every view the instructions take
    // other than the thread scratch ends at or before its start.
    for view in code.split("view_mut(base,").skip(1) {
        if view.starts_with("Self::THREAD_SCRATCH_OFFSET") {
            continue;
        }
        let start: usize = view.split("usize").next().unwrap().parse().expect("a byte offset");
        assert!(
            start < offset,
            "a view at {start} inside the thread scratch at {offset}"
        );
    }
}

#[test]
fn a_block_whose_expansion_is_viewed_forms_no_chain() {
    // aliased_chain's first block would be a chain, but its expansion is
    // also read, after the block, through a flatten planned at its bytes:
    // a chain keeps the expansion in band buffers only, so none may form,
    // and the expansion is written in full (NCHW, for the view's reader).
    let input = ptec::Input::new(fixture("aliased_chain.pte"), "aliased_chain");
    let code = ptec::compile(&input, &ptec::Options::new())
        .and_then(|o| o.to_source())
        .unwrap();
    assert_eq!(code.matches("conv2d_folded_chain(").count(), 0);
    assert!(code.contains("conv2d_folded("), "the convolutions still run NHWC");
}

/// The int8 fixture's depthwise then pointwise convolutions (before its
/// residual add) run as one chain, in a scratch of the arena apart from
/// the chain's input and output, and its intermediate is nobody's: no view
/// of its size is left.
#[test]
fn int8_blocks_chain_in_scratch_apart_from_their_operands() {
    let input = ptec::Input::new(fixture("xnnpack_qs8_cnn.pte"), "xnnpack_qs8_cnn");
    let code = ptec::compile(&input, &ptec::Options::new())
        .and_then(|o| o.to_source())
        .unwrap()
        .replace(char::is_whitespace, "");
    let calls: Vec<&str> = code.split("kernels::qs8::conv2d_chain(").skip(1).collect();
    assert_eq!(calls.len(), 1, "one chain: the depthwise and pointwise pair");
    // The stem, the grouped convolution and the two branches stay single.
    assert_eq!(code.matches("kernels::qs8::conv2d_nhwc(").count(), 4);
    // The chain's statements: from the end of the call before it.
    let before = code.split("kernels::qs8::conv2d_chain(").next().unwrap();
    let stmts = &before[before.rfind(");").unwrap()..];
    // Its views: `view(base, offset, len)` of the input (16 channels of
    // 16 × 16 pixels), the output (the same) and the scratch.
    let mut spans = Vec::new();
    for view in stmts.split("::view").skip(1) {
        let args = view.split('(').nth(1).unwrap().split(')').next().unwrap();
        let mut parts = args.split(',');
        assert_eq!(parts.next(), Some("base"));
        let offset: usize = parts.next().unwrap().trim_end_matches("usize").parse().unwrap();
        let len: usize = parts.next().unwrap().trim_end_matches("usize").parse().unwrap();
        spans.push((offset, offset + len));
    }
    let scratch = *spans.last().unwrap();
    assert!(spans.len() >= 3, "{stmts}");
    for (i, a) in spans.iter().enumerate() {
        for b in &spans[i + 1..] {
            assert!(a.1 <= b.0 || b.1 <= a.0, "views {a:?} and {b:?} overlap: {stmts}");
        }
    }
    assert!(scratch.1 - scratch.0 > 0);
}
