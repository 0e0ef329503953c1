//! Passes over `ptec_xnn::conv2d_folded` calls (those the channels-last
//! pass makes of aten convolutions and the XNNPACK lowering of its own),
//! after [`crate::passes::channels_last`]: residual adds ([`fuse_residual_adds`]),
//! the clamps after them ([`fuse_clamps`]), activations
//! ([`fuse_activations`]), then chains.
//!
//! Convolution chains:
//! a pointwise `ptec_xnn::conv2d_folded` (or a stem: a regular one of a
//! shallow window) then a depthwise one, a depthwise one then a pointwise
//! one, or all three (an inverted residual block's expansion, depthwise
//! and projection), each result read only by the next instruction, become
//! one `ptec_xnn::conv2d_folded_chain` when a
//! result between them is too large for the L2 cache. The chain runs band
//! by band (see `ptec_runtime::kernels::nhwc::conv2d_folded_chain`), so
//! those results never go to memory; their planned bytes are left unused.
//!
//! A chain reads its input while it writes its output, so the two must not
//! share bytes, though ExecuTorch's plan may put the last convolution's
//! output where the first one's input was (dead by then): such an output
//! loses its plan, and [`crate::plan::temporaries`] gives it bytes clear of
//! everything in use during the chain.
use crate::analysis::alias::share_bytes;
use crate::analysis::uses::Uses;
use crate::ir::*;
use crate::names::aten::{HARDSWISH, MUL, RELU, SIGMOID};
use crate::names::folded::{self, ACTIVATION, DILATION, GROUPS, MAX, MIN, OUT, PADDING, RESIDUAL, STRIDE, WEIGHT, X};
use crate::names::CONV2D_FOLDED_CHAIN as CHAIN;
use crate::passes::channels_last::{clamp_of, image, int, number, residual_add_after, usizes};
use crate::passes::rewrite::{fuse_runs, push_value, Fused};
use ptec_runtime::kernels::nhwc::{chain_scratch_len, chain_takes_residual, Activation, Conv2dNhwc};

/// Smallest result between two convolutions worth a chain: below it the
/// result stays in the L2 cache between them anyway.
const CHAIN_MIN_BYTES: usize = 512 * 1024;

/// Fuses the chains of `m` (see the module docs), longest first. Methods
/// with jumps are left as they are (fusing renumbers instructions).
pub fn fuse_chains(m: &mut Method) {
    fuse_runs(m, |m, uses, n| {
        let (len, args) = [3, 2]
            .into_iter()
            .find_map(|len| Some((len, chain_args(m, uses, &m.instructions, n, len)?)))?;
        Some(Fused::chain(len, CHAIN, args, false))
    })
}

/// A `conv2d_folded` without a residual or a clamp followed by the `add`
/// of its result (read by nothing else) to another image becomes one call
/// that adds the residual as it stores (the XNNPACK lowering leaves them
/// apart; the channels-last pass makes such calls of aten convolutions
/// itself). The sum loses its plan when its bytes are the input's or the
/// residual's, as a chain's output does.
pub fn fuse_residual_adds(m: &mut Method) {
    fuse_runs(m, |m, uses, n| Some(folded_call(2, residual_args(m, uses, n)?, false)))
}

/// A `conv2d_folded` that clamps nothing, followed by a `clamp` or
/// `hardtanh` of its result (read by nothing else), becomes one call that
/// clamps as it stores. The XNNPACK lowering clamps an `add` in a separate
/// instruction, which is left after the convolution once the add is its
/// residual (ResNet's `relu(conv(x) + x)`); the channels-last pass fuses
/// aten's clamps itself. A `relu` stays apart: it has no bound to reuse.
pub fn fuse_clamps(m: &mut Method) {
    fuse_runs(m, |m, uses, n| Some(folded_call(2, clamp_args(m, uses, n)?, true)))
}

/// A `conv2d_folded` without an activation, followed by an activation of
/// its result (read by nothing else), becomes one call that applies it to
/// each band of results it writes: MobileNetV3's `hardswish`, and
/// EfficientNet's SiLU as its export writes it (a `sigmoid`, then a `mul`
/// of the result by it). The XNNPACK lowering leaves them as instructions
/// of their own, each a pass over the whole result. Runs before
/// [`fuse_chains`], whose stages may then be such calls.
pub fn fuse_activations(m: &mut Method) {
    for activation in [Activation::Hardswish, Activation::SigmoidMul] {
        // The integer naming the activation, one value for every call
        // made: taken back when there are none.
        let code = push_value(m, Value::Int(folded::activation_code(activation)));
        fuse_runs(m, |m, uses, n| {
            let (len, args) = activation_args(m, uses, n, activation, code)?;
            Some(folded_call(len, args, true))
        });
        let used = m
            .instructions
            .iter()
            .any(|i| matches!(i, Instruction::Kernel { args, .. } if args.contains(&code)));
        if !used && m.values.len() == code + 1 {
            m.values.pop();
        }
    }
}

/// The `len` instructions of a run as one `conv2d_folded` call with
/// `args`, which reads its input and residual (a null one shares no bytes).
fn folded_call(len: usize, args: Vec<usize>, logged_as_last: bool) -> Fused {
    Fused {
        len,
        name: folded::NAME,
        reads: vec![args[X], args[RESIDUAL]],
        out: args[OUT],
        args,
        logged_as_last,
    }
}

/// Whether the fused call's `args` may stand: an output on the bytes the
/// call reads moves (see [`fuse_runs`]), which only one that the method's
/// kernels alone use may.
fn output_may_move(m: &Method, uses: &Uses, args: &[usize]) -> bool {
    let out = args[OUT];
    let clash = share_bytes(m, args[X], out) || share_bytes(m, args[RESIDUAL], out);
    !clash || uses.kernel_uses(out, usize::MAX).is_some()
}

/// The length of the run from instruction `n` and the arguments of the
/// call it becomes when it is a convolution and `activation` of its result
/// (see [`fuse_activations`]); `code` is the value naming `activation`.
fn activation_args(
    m: &Method,
    uses: &Uses,
    n: usize,
    activation: Activation,
    code: usize,
) -> Option<(usize, Vec<usize>)> {
    let args = unactivated(m, n)?;
    let x = args[OUT];
    let (len, out) = match activation {
        Activation::Hardswish => (2, hardswish_of(m, uses, n, x)?),
        Activation::SigmoidMul => (3, sigmoid_mul_of(m, uses, n, x)?),
        Activation::Identity => return None,
    };
    if image(m, out)? != image(m, x)? {
        return None;
    }
    let mut fused = args.to_vec();
    fused[ACTIVATION] = code;
    fused[OUT] = out;
    output_may_move(m, uses, &fused).then_some((len, fused))
}

/// The result of instruction `n + 1` when it is the `hardswish` of `x`,
/// which nothing else reads.
fn hardswish_of(m: &Method, uses: &Uses, n: usize, x: usize) -> Option<usize> {
    if uses.kernel_uses(x, n)? != [(n + 1, 0)] {
        return None;
    }
    let (name, args) = kernel_name(m, m.instructions.get(n + 1)?)?;
    let &[input, out, ret] = args else {
        return None;
    };
    (name == HARDSWISH && input == x && ret == out).then_some(out)
}

/// The result of instruction `n + 2` when instructions `n + 1` and `n + 2`
/// are `s = sigmoid(x)` and `x · s` (or `s · x`), and nothing else reads
/// `x` or `s`.
fn sigmoid_mul_of(m: &Method, uses: &Uses, n: usize, x: usize) -> Option<usize> {
    let (name, args) = kernel_name(m, m.instructions.get(n + 1)?)?;
    let &[input, s, ret] = args else {
        return None;
    };
    if name != SIGMOID || input != x || ret != s || s == x {
        return None;
    }
    let (name, args) = kernel_name(m, m.instructions.get(n + 2)?)?;
    let &[a, b, y, ret] = args else {
        return None;
    };
    let x_at = match (a, b) {
        _ if name != MUL || ret != y => return None,
        (a, b) if (a, b) == (x, s) => 0,
        (a, b) if (a, b) == (s, x) => 1,
        _ => return None,
    };
    let mut readers = uses.kernel_uses(x, n)?.to_vec();
    readers.sort_unstable();
    let only = readers == [(n + 1, 0), (n + 2, x_at)] && uses.kernel_uses(s, n + 1)? == [(n + 2, 1 - x_at)];
    (only && image(m, s)? == image(m, x)?).then_some(y)
}

/// The arguments of instruction `n` when it is a `conv2d_folded` without an
/// activation: the fusions of this module apply theirs before it.
fn unactivated(m: &Method, n: usize) -> Option<&[usize]> {
    let (name, args) = kernel_name(m, m.instructions.get(n)?)?;
    let plain = int(m, *args.get(ACTIVATION)?)?;
    (name == folded::NAME && args.len() == folded::COUNT && folded::activation(plain) == Some(Activation::Identity))
        .then_some(args)
}

/// The arguments of the call that instruction `n` and the clamp after it
/// become (see [`fuse_clamps`]), when they make one.
fn clamp_args(m: &Method, uses: &Uses, n: usize) -> Option<Vec<usize>> {
    let args = unactivated(m, n)?;
    let unclamped = number(m, args[MIN]) == Some(f64::NEG_INFINITY) && number(m, args[MAX]) == Some(f64::INFINITY);
    let readers = uses.kernel_uses(args[OUT], n)?;
    if !unclamped || readers != [(n + 1, 0)] {
        return None;
    }
    let (clamp, clamp_args) = kernel_name(m, m.instructions.get(n + 1)?)?;
    if clamp == RELU {
        return None;
    }
    let ((lo, hi), x, out) = clamp_of(m, &clamp, clamp_args)?;
    if x != args[OUT] {
        return None;
    }
    // The clamp's own bound values, or the convolution's infinite ones
    // where the clamp has none.
    let (lo_arg, hi_arg) = (clamp_args[1], clamp_args[2]);
    let mut fused = args.to_vec();
    if lo > f64::NEG_INFINITY {
        fused[MIN] = lo_arg;
    }
    if hi < f64::INFINITY {
        fused[MAX] = hi_arg;
    }
    fused[OUT] = out;
    output_may_move(m, uses, &fused).then_some(fused)
}

/// The arguments of the call that instruction `n` and the `add` after it
/// become (see [`fuse_residual_adds`]), when they make one.
fn residual_args(m: &Method, uses: &Uses, n: usize) -> Option<Vec<usize>> {
    let args = unactivated(m, n)?;
    let plain = matches!(m.values.get(args[RESIDUAL]), Some(Value::Null))
        && number(m, args[MIN]) == Some(f64::NEG_INFINITY)
        && number(m, args[MAX]) == Some(f64::INFINITY);
    if !plain {
        return None;
    }
    let (residual, sum) = residual_add_after(m, uses, n, args[OUT])?;
    let mut fused = args.to_vec();
    fused[RESIDUAL] = residual;
    fused[OUT] = sum;
    output_may_move(m, uses, &fused).then_some(fused)
}

/// The arguments of a chain made of the `len` instructions from `n`, when
/// they make one: the first's input, each one's arguments from its weight
/// to its kept filter, the last one's output.
fn chain_args(m: &Method, uses: &Uses, code: &[Instruction], n: usize, len: usize) -> Option<Vec<usize>> {
    let mut calls = Vec::with_capacity(len);
    for i in n..n + len {
        let (name, args) = kernel_name(m, code.get(i)?)?;
        if name != folded::NAME || args.len() != folded::COUNT {
            return None;
        }
        calls.push(args);
    }
    let mut geometries = Vec::with_capacity(len);
    let mut input = image(m, calls[0][X])?;
    let mut large = false;
    for (i, args) in calls.iter().enumerate() {
        let g = geometry(m, args, input)?;
        input = g.output_sizes();
        geometries.push(g);
        let Some(next) = calls.get(i + 1) else { break };
        // A result between two stages: read by the next one alone, and
        // plain (a residual comes only at the end).
        let only_reader = uses.kernel_uses(args[OUT], n + i)? == [(n + i + 1, X)];
        let plain = matches!(m.values.get(args[RESIDUAL]), Some(Value::Null));
        if !(only_reader && plain && next[X] == args[OUT]) {
            return None;
        }
        large |= input.iter().product::<usize>() * 4 >= CHAIN_MIN_BYTES;
    }
    let (x, out, residual) = (calls[0][X], calls[len - 1][OUT], calls[len - 1][RESIDUAL]);
    let adds = !matches!(m.values.get(residual), Some(Value::Null));
    if !large || chain_scratch_len(&geometries).is_none() || (adds && !chain_takes_residual(&geometries)) {
        return None;
    }
    // An output that shares bytes with the input moves (see the module
    // docs): only one that the method's kernels alone use, and not onto
    // the residual's bytes (the single convolution already had those
    // apart).
    if share_bytes(m, x, out) && (uses.kernel_uses(out, usize::MAX).is_none() || share_bytes(m, residual, out)) {
        return None;
    }
    let mut args = vec![calls[0][X]];
    for call in &calls {
        args.extend(&call[WEIGHT..OUT]);
    }
    args.push(calls[len - 1][OUT]);
    Some(args)
}

/// A list of exactly `N` non-negative integers.
fn fixed<const N: usize>(m: &Method, v: usize) -> Option<[usize; N]> {
    usizes(m, v)?.try_into().ok()
}

/// The geometry of the `conv2d_folded` with arguments `args` over an input
/// of `input` sizes (as its emitter checks it).
fn geometry(m: &Method, args: &[usize], input: [usize; 4]) -> Option<Conv2dNhwc> {
    let groups = usize::try_from(int(m, args[GROUPS])?).ok()?;
    Conv2dNhwc::folded(
        folded::layout(int(m, args[folded::LAYOUT])?)?,
        &input,
        &image(m, args[WEIGHT])?,
        fixed(m, args[STRIDE])?,
        fixed(m, args[PADDING])?,
        fixed(m, args[DILATION])?,
        groups,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::rewrite::{kernel_call, push_f32_tensor, push_int_list};
    use ptec_runtime::kernels::nhwc::{Algorithm, FilterLayout};

    const TORCH: FilterLayout = FilterLayout::Torch;

    fn planned(m: &mut Method, sizes: [usize; 4], offset: u64) -> usize {
        push_f32_tensor(m, sizes.to_vec(), Placement::Planned { buffer: 1, offset })
    }

    /// A `conv2d_folded` of `x` into `out` with a weight of `o` filters of
    /// `cg` channels, `k × k`, in `layout`; returns its kept tensor.
    #[allow(clippy::too_many_arguments)]
    fn folded(
        m: &mut Method,
        layout: FilterLayout,
        x: usize,
        o: usize,
        cg: usize,
        k: usize,
        groups: usize,
        residual: Option<usize>,
        out: usize,
    ) -> usize {
        let sizes = match layout {
            FilterLayout::Torch => vec![o, cg, k, k],
            FilterLayout::Xnnpack if groups == 1 => vec![o, k, k, cg],
            FilterLayout::Xnnpack => vec![1, k, k, o],
        };
        let w = push_f32_tensor(m, sizes, Placement::Unplanned);
        let null = push_value(m, Value::Null);
        let kept = push_f32_tensor(m, vec![1], Placement::Unplanned);
        let mut args = vec![x, w, null, null, null, null, null, null];
        args.push(push_int_list(m, &[k / 2; 4]));
        args.push(push_int_list(m, &[1, 1]));
        args.push(push_int_list(m, &[1, 1]));
        args.push(push_value(m, Value::Int(groups as i64)));
        args.push(push_value(m, Value::Double(0.0)));
        args.push(push_value(m, Value::Double(6.0)));
        args.push(residual.unwrap_or(null));
        let layout = push_value(m, Value::Int(folded::layout_code(layout)));
        let activation = push_value(m, Value::Int(folded::activation_code(Activation::Identity)));
        let algorithm = push_value(m, Value::Int(folded::algorithm_code(Algorithm::Direct)));
        args.extend([kept, layout, activation, algorithm, out]);
        let call = kernel_call(m, folded::NAME, args);
        m.instructions.push(call);
        kept
    }

    fn method() -> Method {
        crate::analysis::test_methods::empty(1 << 30)
    }

    /// Input `[1, side, side, 8]` expanded to 64 channels, then a 3×3
    /// depthwise convolution: the method and its pointwise result.
    fn block(side: usize) -> (Method, usize) {
        let mut m = method();
        let x = planned(&mut m, [1, side, side, 8], 0);
        let mid = planned(&mut m, [1, side, side, 64], 1 << 24);
        let out = planned(&mut m, [1, side, side, 64], 1 << 26);
        m.inputs.push(x);
        m.outputs.push(out);
        folded(&mut m, TORCH, x, 64, 8, 1, 1, None, mid);
        folded(&mut m, TORCH, mid, 64, 1, 3, 64, None, out);
        (m, mid)
    }

    /// A method input `[1, 48, 48, 64]` through a 3×3 depthwise
    /// convolution (a 576 KiB result) and a pointwise one to 16 channels,
    /// whose output is planned at `out_offset` (the input is at 0):
    /// the input and that output.
    fn dw_then_pw(m: &mut Method, out_offset: u64) -> (usize, usize) {
        let x = planned(m, [1, 48, 48, 64], 0);
        let dw = planned(m, [1, 48, 48, 64], 1 << 24);
        let out = planned(m, [1, 48, 48, 16], out_offset);
        folded(m, TORCH, x, 64, 1, 3, 64, None, dw);
        folded(m, TORCH, dw, 16, 64, 1, 1, None, out);
        m.inputs.push(x);
        (x, out)
    }

    /// The one instruction of `m`, a chain: its arguments.
    fn the_chain(m: &Method) -> Vec<usize> {
        assert_eq!(m.instructions.len(), 1);
        let (name, args) = kernel_name(m, &m.instructions[0]).unwrap();
        assert_eq!(name, CHAIN);
        args.to_vec()
    }

    #[test]
    fn a_large_pointwise_result_read_only_by_a_depthwise_convolution_chains() {
        // 48 × 48 pixels of 64 channels: 576 KiB.
        let (mut m, mid) = block(48);
        let (x, out) = (m.inputs[0], m.outputs[0]);
        fuse_chains(&mut m);
        let args = the_chain(&m);
        assert_eq!(args.len(), 2 * OUT);
        assert_eq!((args[0], args[args.len() - 1]), (x, out));
        assert!(!args.contains(&mid));
    }

    /// An inverted residual block: expansion, depthwise convolution and
    /// a projection that adds the block's input.
    #[test]
    fn an_inverted_residual_block_chains_whole() {
        let mut m = method();
        let x = planned(&mut m, [1, 48, 48, 8], 0);
        let mid = planned(&mut m, [1, 48, 48, 64], 1 << 24);
        let dw = planned(&mut m, [1, 48, 48, 64], 1 << 25);
        let out = planned(&mut m, [1, 48, 48, 8], 1 << 26);
        m.inputs.push(x);
        m.outputs.push(out);
        folded(&mut m, TORCH, x, 64, 8, 1, 1, None, mid);
        folded(&mut m, TORCH, mid, 64, 1, 3, 64, None, dw);
        folded(&mut m, TORCH, dw, 8, 64, 1, 1, Some(x), out);
        fuse_chains(&mut m);
        let args = the_chain(&m);
        assert_eq!(args.len(), 3 * (OUT - 1) + 2);
        assert_eq!((args[0], args[args.len() - 1]), (x, out));
        assert!(!args.contains(&mid) && !args.contains(&dw));
        // The projection's residual is the block's input.
        assert_eq!(args[1 + 2 * (OUT - 1) + RESIDUAL - 1], x);
    }

    /// A large depthwise result read only by a pointwise convolution
    /// (MobileNetV2's first block, which has no expansion).
    #[test]
    fn a_large_depthwise_result_read_only_by_a_pointwise_convolution_chains() {
        let mut m = method();
        let (x, out) = dw_then_pw(&mut m, 1 << 26);
        m.outputs.push(out);
        fuse_chains(&mut m);
        let args = the_chain(&m);
        assert_eq!((args[0], args[args.len() - 1]), (x, out));
    }

    /// `moved` lost its plan, and once the temporaries are placed it
    /// shares no bytes with `input`.
    fn assert_moved_off(m: &mut Method, moved: usize, input: usize) {
        assert_eq!(m.values[moved].as_tensor().unwrap().placement, Placement::Unplanned);
        crate::plan::temporaries::plan_temporaries(m);
        assert!(matches!(
            m.values[moved].as_tensor().unwrap().placement,
            Placement::Planned { .. }
        ));
        assert!(!share_bytes(m, input, moved));
    }

    /// ExecuTorch's plan may put the last output where the first input was
    /// (dead once the first convolution ran); a chain reads one while it
    /// writes the other, so the output moves to a buffer of its own.
    #[test]
    fn an_output_planned_over_the_input_moves() {
        let mut m = method();
        let (x, out) = dw_then_pw(&mut m, 0);
        let next = planned(&mut m, [1, 48, 48, 16], 1 << 26);
        folded(&mut m, TORCH, out, 16, 16, 1, 1, None, next);
        m.outputs.push(next);
        fuse_chains(&mut m);
        assert_eq!(m.instructions.len(), 2);
        assert_moved_off(&mut m, out, x);
        // Planned elsewhere, it stays where it was.
        let mut m = method();
        let (_, out) = dw_then_pw(&mut m, 1 << 26);
        m.outputs.push(out);
        let before = m.values[out].clone();
        fuse_chains(&mut m);
        assert_eq!(m.instructions.len(), 1);
        assert_eq!(m.values[out], before);
    }

    /// The arguments of instruction `i`, a kernel call.
    fn kernel_args(m: &mut Method, i: usize) -> &mut Vec<usize> {
        let Instruction::Kernel { args, .. } = &mut m.instructions[i] else {
            unreachable!("instruction {i} is not a kernel call")
        };
        args
    }

    #[test]
    fn other_pairs_stay_apart() {
        // A result that fits in L2 (32 × 32 × 64 floats: 256 KiB).
        let (mut m, _) = block(32);
        let want = m.clone();
        fuse_chains(&mut m);
        assert_eq!(m, want);
        // A result something else reads too.
        let (mut m, mid) = block(48);
        m.outputs.push(mid);
        let want = m.clone();
        fuse_chains(&mut m);
        assert_eq!(m, want);
        // A depthwise convolution that adds a residual, last.
        let (mut m, _) = block(48);
        let residual = m.values.len();
        m.values.push(m.values[m.outputs[0]].clone());
        kernel_args(&mut m, 1)[RESIDUAL] = residual;
        let want = m.clone();
        fuse_chains(&mut m);
        assert_eq!(m, want);
        // An expansion that adds a residual, first.
        let (mut m, mid) = block(48);
        let residual = m.values.len();
        m.values.push(m.values[mid].clone());
        kernel_args(&mut m, 0)[RESIDUAL] = residual;
        let want = m.clone();
        fuse_chains(&mut m);
        assert_eq!(m, want);
        // A 5×5 convolution first, too deep a window for a stem.
        let (mut m, _) = block(48);
        let want = first_regular(&mut m, 5);
        fuse_chains(&mut m);
        assert_eq!(m, want);
    }

    /// Makes the first convolution of `block`'s method a regular `k`×`k`
    /// one (padded to keep the size): the method as it then is.
    fn first_regular(m: &mut Method, k: usize) -> Method {
        let weight = push_f32_tensor(m, vec![64, 8, k, k], Placement::Unplanned);
        let padding = push_int_list(m, &[k / 2; 4]);
        let args = kernel_args(m, 0);
        (args[WEIGHT], args[PADDING]) = (weight, padding);
        m.clone()
    }

    #[test]
    fn a_stem_opens_a_chain() {
        // A 3×3 convolution of 8 channels (72 floats a window) then the
        // depthwise one: the two become a chain as a pointwise one would.
        let (mut m, _) = block(48);
        let before = first_regular(&mut m, 3);
        fuse_chains(&mut m);
        let args = the_chain(&m);
        let (_, first) = kernel_name(&before, &before.instructions[0]).unwrap();
        assert_eq!(args[0], first[X]);
        assert_eq!(args[1], first[WEIGHT]);
    }

    /// The same block with XNNPACK's weights (`[O, kH, kW, C]` and
    /// `[1, kH, kW, O]`), as the XNNPACK lowering makes it.
    #[test]
    fn convolutions_with_xnnpack_weights_chain() {
        let mut m = method();
        let x = planned(&mut m, [1, 48, 48, 8], 0);
        let mid = planned(&mut m, [1, 48, 48, 64], 1 << 24);
        let out = planned(&mut m, [1, 48, 48, 64], 1 << 26);
        m.inputs.push(x);
        m.outputs.push(out);
        folded(&mut m, FilterLayout::Xnnpack, x, 64, 8, 1, 1, None, mid);
        folded(&mut m, FilterLayout::Xnnpack, mid, 64, 1, 3, 64, None, out);
        fuse_chains(&mut m);
        let args = the_chain(&m);
        assert_eq!((args[0], args[args.len() - 1]), (x, out));
        assert!(!args.contains(&mid));
    }

    /// `[1, 8, 8, 16]` through a pointwise convolution without a clamp
    /// into `y`, then `add(y, r)` (or `add(r, y)`) into `sum`, all planned
    /// apart unless `sum_offset` says otherwise: the method and `(x, r,
    /// sum)`.
    fn conv_then_add(y_first: bool, sum_offset: u64) -> (Method, [usize; 3]) {
        let mut m = method();
        let x = planned(&mut m, [1, 8, 8, 16], 0);
        let r = planned(&mut m, [1, 8, 8, 16], 1 << 20);
        let y = planned(&mut m, [1, 8, 8, 16], 1 << 21);
        let sum = planned(&mut m, [1, 8, 8, 16], sum_offset);
        m.inputs.extend([x, r]);
        m.outputs.push(sum);
        folded(&mut m, TORCH, x, 16, 16, 1, 1, None, y);
        let (lo, hi) = (
            push_value(&mut m, Value::Double(f64::NEG_INFINITY)),
            push_value(&mut m, Value::Double(f64::INFINITY)),
        );
        (kernel_args(&mut m, 0)[MIN], kernel_args(&mut m, 0)[MAX]) = (lo, hi);
        let alpha = push_value(&mut m, Value::Int(1));
        let (a, b) = if y_first { (y, r) } else { (r, y) };
        let add = kernel_call(&mut m, crate::names::aten::ADD, vec![a, b, alpha, sum, sum]);
        m.instructions.push(add);
        (m, [x, r, sum])
    }

    #[test]
    fn a_convolution_absorbs_the_residual_add_after_it() {
        for y_first in [true, false] {
            let (mut m, [x, r, sum]) = conv_then_add(y_first, 1 << 22);
            fuse_residual_adds(&mut m);
            assert_eq!(m.instructions.len(), 1);
            let (name, args) = kernel_name(&m, &m.instructions[0]).unwrap();
            assert_eq!(name, folded::NAME);
            assert_eq!((args[X], args[RESIDUAL], args[OUT]), (x, r, sum));
        }
    }

    /// [`conv_then_add`] then `clamp(sum, lo, hi)` (`None`: a null bound)
    /// into a new image at `out_offset`: the method, the clamp's bound
    /// values and its output.
    fn conv_add_clamp(lo: Option<f64>, hi: Option<f64>, out_offset: u64) -> (Method, [usize; 3]) {
        let (mut m, [_, _, sum]) = conv_then_add(true, 1 << 22);
        m.outputs.clear();
        let out = planned(&mut m, [1, 8, 8, 16], out_offset);
        m.outputs.push(out);
        let bound = |m: &mut Method, b: Option<f64>| push_value(m, b.map_or(Value::Null, Value::Double));
        let (lo, hi) = (bound(&mut m, lo), bound(&mut m, hi));
        let clamp = kernel_call(&mut m, crate::names::aten::CLAMP, vec![sum, lo, hi, out, out]);
        m.instructions.push(clamp);
        (m, [lo, hi, out])
    }

    #[test]
    fn a_convolution_absorbs_the_clamp_after_its_residual_add() {
        for (lo, hi) in [(Some(0.0), None), (None, Some(6.0)), (Some(-1.0), Some(1.0))] {
            let (mut m, [lo_v, hi_v, out]) = conv_add_clamp(lo, hi, 1 << 23);
            let x = kernel_args(&mut m, 0)[X];
            let (inf_lo, inf_hi) = (kernel_args(&mut m, 0)[MIN], kernel_args(&mut m, 0)[MAX]);
            fuse_residual_adds(&mut m);
            fuse_clamps(&mut m);
            assert_eq!(m.instructions.len(), 1, "{lo:?} {hi:?}");
            let (name, args) = kernel_name(&m, &m.instructions[0]).unwrap();
            assert_eq!(name, folded::NAME);
            assert_eq!((args[X], args[OUT]), (x, out));
            assert_eq!(args[MIN], if lo.is_some() { lo_v } else { inf_lo });
            assert_eq!(args[MAX], if hi.is_some() { hi_v } else { inf_hi });
            assert!(!matches!(m.values[args[RESIDUAL]], Value::Null));
        }
    }

    #[test]
    fn other_clamps_stay_apart() {
        let fused = |mut m: Method| {
            fuse_residual_adds(&mut m);
            let want = m.clone();
            fuse_clamps(&mut m);
            assert_eq!(m, want);
        };
        // An empty range, left to the clamp kernel.
        fused(conv_add_clamp(Some(1.0), Some(-1.0), 1 << 23).0);
        // The sum is read after the clamp too.
        let (mut m, [_, _, out]) = conv_add_clamp(Some(0.0), None, 1 << 23);
        let sum = kernel_args(&mut m, 1)[0];
        let tail = planned(&mut m, [1, 8, 8, 16], 1 << 24);
        let alpha = push_value(&mut m, Value::Int(1));
        let add = kernel_call(&mut m, crate::names::aten::ADD, vec![sum, out, alpha, tail, tail]);
        m.instructions.push(add);
        m.outputs = vec![tail];
        fused(m);
        // The convolution clamps already.
        let (mut m, _) = conv_add_clamp(Some(0.0), None, 1 << 23);
        kernel_args(&mut m, 0)[MAX] = push_value(&mut m, Value::Double(6.0));
        let mut want = m.clone();
        fuse_clamps(&mut m);
        assert_eq!(m, want);
        fuse_residual_adds(&mut want);
        assert_eq!(want.instructions.len(), 3);
        // A relu: no bound value to reuse.
        let (mut m, [_, _, sum]) = conv_then_add(true, 1 << 22);
        let out = planned(&mut m, [1, 8, 8, 16], 1 << 23);
        m.outputs = vec![out];
        let relu = kernel_call(&mut m, RELU, vec![sum, out, out]);
        m.instructions.push(relu);
        fused(m);
    }

    /// A clamp written over the convolution's input (dead after it before
    /// the fusion) moves to a buffer of its own.
    #[test]
    fn a_clamp_planned_over_the_input_moves() {
        let (mut m, [_, _, out]) = conv_add_clamp(Some(0.0), None, 0);
        let x = kernel_args(&mut m, 0)[X];
        m.outputs.clear();
        let tail = planned(&mut m, [1, 8, 8, 16], 1 << 24);
        folded(&mut m, TORCH, out, 16, 16, 1, 1, None, tail);
        m.outputs.push(tail);
        fuse_residual_adds(&mut m);
        fuse_clamps(&mut m);
        assert_eq!(m.instructions.len(), 2);
        assert_moved_off(&mut m, out, x);
    }

    /// A sum planned over the convolution's input (dead after it before
    /// the fusion) moves to a buffer of its own, unless something other
    /// than a kernel uses it (here: a method output).
    #[test]
    fn a_sum_planned_over_the_input_moves() {
        let (mut m, [x, _, sum]) = conv_then_add(true, 0);
        m.outputs.clear();
        let tail = planned(&mut m, [1, 8, 8, 16], 1 << 23);
        folded(&mut m, TORCH, sum, 16, 16, 1, 1, None, tail);
        m.outputs.push(tail);
        fuse_residual_adds(&mut m);
        assert_eq!(m.instructions.len(), 2);
        assert_moved_off(&mut m, sum, x);
        let (mut m, _) = conv_then_add(true, 0);
        let want = m.clone();
        fuse_residual_adds(&mut m);
        assert_eq!(m, want);
    }

    #[test]
    fn other_adds_stay_apart() {
        // The convolution clamps before the add.
        let (mut m, _) = conv_then_add(true, 1 << 22);
        kernel_args(&mut m, 0)[MAX] = push_value(&mut m, Value::Double(6.0));
        let want = m.clone();
        fuse_residual_adds(&mut m);
        assert_eq!(m, want);
        // Its result is a method output too.
        let (mut m, _) = conv_then_add(true, 1 << 22);
        let y = kernel_args(&mut m, 0)[OUT];
        m.outputs.push(y);
        let want = m.clone();
        fuse_residual_adds(&mut m);
        assert_eq!(m, want);
        // It adds a residual already.
        let (mut m, [_, r, _]) = conv_then_add(true, 1 << 22);
        kernel_args(&mut m, 0)[RESIDUAL] = r;
        let want = m.clone();
        fuse_residual_adds(&mut m);
        assert_eq!(m, want);
        // The add scales the result (alpha 2).
        let (mut m, _) = conv_then_add(true, 1 << 22);
        kernel_args(&mut m, 1)[2] = push_value(&mut m, Value::Int(2));
        let want = m.clone();
        fuse_residual_adds(&mut m);
        assert_eq!(m, want);
    }

    /// `hardswish(x, out)` appended to `m`.
    fn hardswish(m: &mut Method, x: usize, out: usize) {
        let call = kernel_call(m, HARDSWISH, vec![x, out, out]);
        m.instructions.push(call);
    }

    /// The activation instruction `i` of `m` (a folded convolution) applies.
    fn activation_of(m: &mut Method, i: usize) -> Option<Activation> {
        let code = kernel_args(m, i)[ACTIVATION];
        folded::activation(int(m, code)?)
    }

    /// An expansion, a depthwise convolution, a projection: the first two
    /// followed by hardswish, as in MobileNetV3's blocks, each result
    /// `side² · 64` floats. The method and the hardswish results.
    fn hardswish_block(side: usize) -> (Method, [usize; 2]) {
        let mut m = method();
        let x = planned(&mut m, [1, side, side, 8], 0);
        let sizes = [1, side, side, 64];
        let [e, he, d, hd] = [1, 2, 3, 4].map(|i| planned(&mut m, sizes, i << 24));
        let out = planned(&mut m, [1, side, side, 8], 5 << 24);
        m.inputs.push(x);
        m.outputs.push(out);
        folded(&mut m, TORCH, x, 64, 8, 1, 1, None, e);
        hardswish(&mut m, e, he);
        folded(&mut m, TORCH, he, 64, 1, 3, 64, None, d);
        hardswish(&mut m, d, hd);
        folded(&mut m, TORCH, hd, 8, 64, 1, 1, None, out);
        (m, [he, hd])
    }

    #[test]
    fn convolutions_absorb_the_hardswish_after_them() {
        let (mut m, [he, hd]) = hardswish_block(8);
        let values = m.values.len();
        fuse_activations(&mut m);
        assert_eq!(m.instructions.len(), 3);
        assert_eq!(m.values.len(), values + 1, "one value names hardswish");
        for (i, out) in [(0, he), (1, hd)] {
            assert_eq!(activation_of(&mut m, i), Some(Activation::Hardswish));
            assert_eq!(kernel_args(&mut m, i)[OUT], out);
        }
        assert_eq!(kernel_args(&mut m, 1)[X], he);
        assert_eq!(activation_of(&mut m, 2), Some(Activation::Identity));
        // Nothing left to fuse: nothing changes, no value is added.
        let want = m.clone();
        fuse_activations(&mut m);
        assert_eq!(m, want);
    }

    /// With the hardswish inside them, the stages chain when their results
    /// are large, each keeping its activation.
    #[test]
    fn hardswish_stages_chain() {
        let (mut m, [he, hd]) = hardswish_block(48);
        let want = m.clone();
        fuse_chains(&mut m);
        assert_eq!(m, want, "no chain through a separate hardswish");
        fuse_activations(&mut m);
        fuse_chains(&mut m);
        let args = the_chain(&m);
        assert_eq!(args.len(), 2 + 3 * (OUT - WEIGHT));
        assert!(!args.contains(&he) && !args.contains(&hd));
        let stage = |i: usize| folded::activation(int(&m, args[1 + i * (OUT - WEIGHT) + ACTIVATION - WEIGHT]).unwrap());
        assert_eq!(
            [stage(0), stage(1), stage(2)],
            [
                Some(Activation::Hardswish),
                Some(Activation::Hardswish),
                Some(Activation::Identity)
            ]
        );
    }

    #[test]
    fn other_hardswish_stays_apart() {
        let unchanged = |mut m: Method| {
            let want = m.clone();
            fuse_activations(&mut m);
            assert_eq!(m, want);
        };
        // The convolution's result is read again after the hardswish.
        let (mut m, [he, _]) = hardswish_block(8);
        let e = kernel_args(&mut m, 1)[0];
        let tail = planned(&mut m, [1, 8, 8, 64], 6 << 24);
        let alpha = push_value(&mut m, Value::Int(1));
        let add = kernel_call(&mut m, crate::names::aten::ADD, vec![e, he, alpha, tail, tail]);
        m.instructions.truncate(2);
        m.instructions.push(add);
        m.outputs = vec![tail];
        unchanged(m);
        // A hardswish of something else (the convolution's input).
        let mut m = method();
        let x = planned(&mut m, [1, 8, 8, 64], 0);
        let [y, z] = [1, 2].map(|i| planned(&mut m, [1, 8, 8, 64], i << 24));
        m.inputs.push(x);
        m.outputs.extend([y, z]);
        folded(&mut m, TORCH, x, 64, 64, 1, 1, None, y);
        hardswish(&mut m, x, z);
        unchanged(m);
        // A convolution that applies an activation already.
        let mut m = method();
        let x = planned(&mut m, [1, 8, 8, 64], 0);
        let [y, z] = [1, 2].map(|i| planned(&mut m, [1, 8, 8, 64], i << 24));
        m.inputs.push(x);
        m.outputs.push(z);
        folded(&mut m, TORCH, x, 64, 64, 1, 1, None, y);
        kernel_args(&mut m, 0)[ACTIVATION] = push_value(&mut m, Value::Int(1));
        hardswish(&mut m, y, z);
        unchanged(m);
    }

    /// `sigmoid(x)` then `x · sigmoid` (or `sigmoid · x`) appended to `m`,
    /// the sigmoid's result planned at `s_offset`.
    fn silu(m: &mut Method, x: usize, out: usize, x_first: bool, s_offset: u64) {
        let sizes = m.values[x].as_tensor().unwrap().sizes.clone();
        let s = push_f32_tensor(
            m,
            sizes,
            Placement::Planned {
                buffer: 1,
                offset: s_offset,
            },
        );
        let sigmoid = kernel_call(m, SIGMOID, vec![x, s, s]);
        let (a, b) = if x_first { (x, s) } else { (s, x) };
        let mul = kernel_call(m, MUL, vec![a, b, out, out]);
        m.instructions.extend([sigmoid, mul]);
    }

    /// EfficientNet's SiLU after a convolution, either way round, and after
    /// both convolutions of a chain.
    #[test]
    fn convolutions_absorb_the_silu_after_them() {
        for x_first in [true, false] {
            let mut m = method();
            let x = planned(&mut m, [1, 48, 48, 8], 0);
            let [e, y, d, z] = [1, 2, 3, 4].map(|i| planned(&mut m, [1, 48, 48, 64], i << 24));
            m.inputs.push(x);
            m.outputs.push(z);
            folded(&mut m, TORCH, x, 64, 8, 1, 1, None, e);
            silu(&mut m, e, y, x_first, 5 << 24);
            folded(&mut m, TORCH, y, 64, 1, 3, 64, None, d);
            silu(&mut m, d, z, !x_first, 6 << 24);
            let mut unchained = m.clone();
            fuse_activations(&mut unchained);
            assert_eq!(unchained.instructions.len(), 2);
            for (i, out) in [(0, y), (1, z)] {
                assert_eq!(activation_of(&mut unchained, i), Some(Activation::SigmoidMul));
                assert_eq!(kernel_args(&mut unchained, i)[OUT], out);
            }
            fuse_activations(&mut m);
            fuse_chains(&mut m);
            let args = the_chain(&m);
            assert_eq!((args[0], args[args.len() - 1]), (x, z));
        }
    }

    #[test]
    fn other_silus_stay_apart() {
        let unchanged = |mut m: Method| {
            let want = m.clone();
            fuse_activations(&mut m);
            assert_eq!(m, want);
        };
        let base = || {
            let mut m = method();
            let x = planned(&mut m, [1, 8, 8, 8], 0);
            let [e, y] = [1, 2].map(|i| planned(&mut m, [1, 8, 8, 64], i << 24));
            m.inputs.push(x);
            m.outputs.push(y);
            folded(&mut m, TORCH, x, 64, 8, 1, 1, None, e);
            (m, e, y)
        };
        // The sigmoid's result is read again.
        let (mut m, e, y) = base();
        silu(&mut m, e, y, true, 3 << 24);
        let s = kernel_args(&mut m, 1)[1];
        m.outputs.push(s);
        unchanged(m);
        // The product is of the sigmoid and something else.
        let (mut m, e, y) = base();
        let other = planned(&mut m, [1, 8, 8, 64], 4 << 24);
        m.inputs.push(other);
        silu(&mut m, e, y, true, 3 << 24);
        kernel_args(&mut m, 2)[0] = other;
        unchanged(m);
        // The sigmoid of something else.
        let (mut m, e, y) = base();
        let other = planned(&mut m, [1, 8, 8, 64], 4 << 24);
        m.inputs.push(other);
        silu(&mut m, e, y, true, 3 << 24);
        kernel_args(&mut m, 1)[0] = other;
        unchanged(m);
    }

    /// A hardswish written over the convolution's input (dead after it
    /// before the fusion) moves to a buffer of its own.
    #[test]
    fn a_hardswish_planned_over_the_input_moves() {
        let mut m = method();
        let x = planned(&mut m, [1, 8, 8, 64], 0);
        let y = planned(&mut m, [1, 8, 8, 64], 1 << 24);
        let z = planned(&mut m, [1, 8, 8, 64], 0);
        let tail = planned(&mut m, [1, 8, 8, 8], 2 << 24);
        m.inputs.push(x);
        m.outputs.push(tail);
        folded(&mut m, TORCH, x, 64, 64, 1, 1, None, y);
        hardswish(&mut m, y, z);
        folded(&mut m, TORCH, z, 8, 64, 1, 1, None, tail);
        fuse_activations(&mut m);
        assert_eq!(m.instructions.len(), 2);
        assert_moved_off(&mut m, z, x);
    }
}
