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

/// MobileNetV3's hardswish, a node of its own in the XNNPACK graph, runs
/// in the convolution before it: no pass of its own over a result, and
/// the block whose expansion and depthwise convolution it follows still
/// runs as one chain.
#[test]
fn hardswish_runs_in_the_convolutions_and_their_chain() {
    let input = ptec::Input::new(fixture("xnnpack_hardswish.pte"), "xnnpack_hardswish");
    let code = ptec::compile(&input, &ptec::Options::new())
        .and_then(|o| o.to_source())
        .unwrap();
    assert!(!code.contains("aten::hardswish"), "a hardswish instruction is left");
    assert_eq!(code.matches("conv2d_folded_chain(").count(), 1);
    assert_eq!(code.matches("conv2d_folded(").count(), 1, "the stem");
    // The stem, the expansion and the depthwise convolution.
    assert_eq!(code.matches("Activation::Hardswish").count(), 3);
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

/// The int8 fixture's depthwise then pointwise pair (2 KiB between them)
/// stays two calls: a chain's scratch would find no room in so small a
/// plan and add to the arena what the pair's temporary shares with others
/// (see `passes/qs8_chains.rs`; MobileNetV2's blocks, which do chain, are
/// measured by hand in docs/cortex-m.md).
#[test]
fn small_int8_blocks_stay_unchained() {
    let input = ptec::Input::new(fixture("xnnpack_qs8_cnn.pte"), "xnnpack_qs8_cnn");
    let code = ptec::compile(&input, &ptec::Options::new())
        .and_then(|o| o.to_source())
        .unwrap()
        .replace(char::is_whitespace, "");
    assert_eq!(code.matches("kernels::qs8::conv2d_chain(").count(), 0);
    // The stem, the depthwise and pointwise pair, the grouped convolution
    // and the two branches.
    assert_eq!(code.matches("kernels::qs8::conv2d_nhwc(").count(), 6);
}

/// The xnnpack_qs8_chains fixture's two blocks, whose expansions are
/// 96 × 40 × 40 int8 (150 KiB), each run as one chain: only the stem stays
/// a convolution of its own. (The `tests` crate and `ptec check` run its
/// bundle, ExecuTorch's runtime's outputs, to the bit.)
#[test]
fn large_int8_blocks_run_as_chains() {
    let input = ptec::Input::new(fixture("xnnpack_qs8_chains.pte"), "xnnpack_qs8_chains");
    let code = ptec::compile(&input, &ptec::Options::new())
        .and_then(|o| o.to_source())
        .unwrap()
        .replace(char::is_whitespace, "");
    assert_eq!(code.matches("kernels::qs8::conv2d_chain(").count(), 2);
    assert_eq!(code.matches("kernels::qs8::conv2d_nhwc(").count(), 1);
}
