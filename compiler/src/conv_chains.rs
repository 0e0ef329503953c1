//! Convolution chains (an IR-to-IR pass, after [`crate::channels_last`]):
//! a pointwise `ptec_xnn::conv2d_folded` then a depthwise one, a depthwise
//! one then a pointwise one, or all three (an inverted residual block's
//! expansion, depthwise and projection), each result read only by the
//! next instruction, become one `ptec_xnn::conv2d_folded_chain` when a
//! result between them is too large for the L2 cache. The chain runs band
//! by band (see `ptec_runtime::kernels::nhwc::conv2d_folded_chain`), so
//! those results never go to memory; their planned bytes are left unused.
//!
//! A chain reads its input while it writes its output, so the two must not
//! share bytes, though ExecuTorch's plan may put the last convolution's
//! output where the first one's input was (dead by then): such an output
//! moves to a buffer of the pass's own.
use crate::channels_last::folded::{self, DILATION, GROUPS, OUT, PADDING, RESIDUAL, STRIDE, WEIGHT, X};
use crate::channels_last::{image, int, share_bytes, usizes};
use crate::ir::*;
use crate::rewrite::{kernel_call, kernel_name, AddedBuffer, Uses};
use ptec_runtime::kernels::nhwc::{chain_scratch_len, chain_takes_residual, Conv2dNhwc};

/// The call a chain becomes; `ops::xnnpack` emits it.
pub(crate) const CHAIN: &str = "ptec_xnn::conv2d_folded_chain.out";

/// Smallest result between two convolutions worth a chain: below it the
/// result stays in the L2 cache between them anyway.
const CHAIN_MIN_BYTES: usize = 512 * 1024;

/// Fuses the chains of `m` (see the module docs), longest first. Methods
/// with jumps are left as they are (fusing renumbers instructions).
pub fn fuse_chains(m: &mut Method) {
    if m.instructions
        .iter()
        .any(|i| matches!(i, Instruction::JumpFalse { .. }))
    {
        return;
    }
    let uses = Uses::of(m);
    let old = std::mem::take(&mut m.instructions);
    let mut traces = m.stacktraces.take();
    let mut code = Vec::with_capacity(old.len());
    let mut moved = Vec::new();
    let mut n = 0;
    while n < old.len() {
        match [3, 2]
            .into_iter()
            .find_map(|len| Some((len, chain_args(m, &uses, &old, n, len)?)))
        {
            Some((len, args)) => {
                let (x, out) = (args[0], args[args.len() - 1]);
                if share_bytes(m, x, out) {
                    moved.push(out);
                }
                code.push(kernel_call(m, CHAIN, args));
                if let Some(t) = traces.as_mut() {
                    // The chain keeps the first convolution's frames.
                    for _ in 1..len {
                        t.remove(code.len());
                    }
                }
                n += len;
            }
            None => {
                code.push(old[n].clone());
                n += 1;
            }
        }
    }
    m.instructions = code;
    m.stacktraces = traces;
    if !moved.is_empty() {
        let mut buffer = AddedBuffer::default();
        let code = m.instructions.clone();
        buffer.place_temporaries(m, &code, &moved);
        buffer.install(m);
    }
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
    use crate::rewrite::{push_f32_tensor, push_int_list, push_value};

    fn planned(m: &mut Method, sizes: [usize; 4], offset: u64) -> usize {
        push_f32_tensor(m, sizes.to_vec(), Placement::Planned { buffer: 1, offset })
    }

    /// A `conv2d_folded` of `x` into `out` with a `[o, cg, k, k]` weight;
    /// returns its kept tensor.
    #[allow(clippy::too_many_arguments)]
    fn folded(
        m: &mut Method,
        x: usize,
        o: usize,
        cg: usize,
        k: usize,
        groups: usize,
        residual: Option<usize>,
        out: usize,
    ) -> usize {
        let w = push_f32_tensor(m, vec![o, cg, k, k], Placement::Unplanned);
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
        args.extend([kept, out]);
        let call = kernel_call(m, folded::NAME, args);
        m.instructions.push(call);
        kept
    }

    fn method() -> Method {
        Method {
            name: "forward".into(),
            values: vec![],
            inputs: vec![],
            outputs: vec![],
            instructions: vec![],
            operators: vec![],
            delegates: vec![],
            buffer_sizes: vec![0, 1 << 30],
            stacktraces: None,
        }
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
        folded(&mut m, x, 64, 8, 1, 1, None, mid);
        folded(&mut m, mid, 64, 1, 3, 64, None, out);
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
        folded(m, x, 64, 1, 3, 64, None, dw);
        folded(m, dw, 16, 64, 1, 1, None, out);
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
        folded(&mut m, x, 64, 8, 1, 1, None, mid);
        folded(&mut m, mid, 64, 1, 3, 64, None, dw);
        folded(&mut m, dw, 8, 64, 1, 1, Some(x), out);
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

    /// ExecuTorch's plan may put the last output where the first input was
    /// (dead once the first convolution ran); a chain reads one while it
    /// writes the other, so the output moves to a buffer of its own.
    #[test]
    fn an_output_planned_over_the_input_moves() {
        let mut m = method();
        let (x, out) = dw_then_pw(&mut m, 0);
        let next = planned(&mut m, [1, 48, 48, 16], 1 << 26);
        folded(&mut m, out, 16, 16, 1, 1, None, next);
        m.outputs.push(next);
        let buffers = m.buffer_sizes.len();
        fuse_chains(&mut m);
        assert_eq!(m.instructions.len(), 2);
        assert!(!share_bytes(&m, x, out));
        let t = m.values[out].as_tensor().unwrap();
        assert_eq!(
            t.placement,
            Placement::Planned {
                buffer: buffers,
                offset: 0
            }
        );
        assert_eq!(m.buffer_sizes.len(), buffers + 1);
        assert!(m.buffer_sizes[buffers] >= t.nbytes() as u64);
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
        // A 3×3 convolution, not a pointwise one, first.
        let (mut m, _) = block(48);
        let weight = push_f32_tensor(&mut m, vec![64, 8, 3, 3], Placement::Unplanned);
        let padding = push_int_list(&mut m, &[1; 4]);
        let args = kernel_args(&mut m, 0);
        (args[WEIGHT], args[PADDING]) = (weight, padding);
        let want = m.clone();
        fuse_chains(&mut m);
        assert_eq!(m, want);
    }
}
