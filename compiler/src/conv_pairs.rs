//! Pointwise-depthwise pairs (an IR-to-IR pass, after
//! [`crate::channels_last`]): a pointwise `ptec_xnn::conv2d_folded` whose
//! result only the next instruction reads, a depthwise `conv2d_folded`,
//! becomes one `ptec_xnn::conv2d_folded_pair` when that result is too large
//! for the L2 cache. The pair runs band by band (see
//! `ptec_runtime::kernels::nhwc::conv2d_folded_pair`), so the result never
//! goes to memory; its planned bytes are left unused.
use crate::channels_last::{image, int, ints};
use crate::ir::*;
use crate::rewrite::{kernel_call, kernel_name, Uses};
use ptec_runtime::kernels::nhwc::{pair_scratch_len, Conv2dNhwc};

pub(crate) const FOLDED: &str = "ptec_xnn::conv2d_folded.out";
const PAIR: &str = "ptec_xnn::conv2d_folded_pair.out";

/// Positions of `conv2d_folded`'s arguments this pass reads.
const X: usize = 0;
const WEIGHT: usize = 1;
const PADDING: usize = 8;
const STRIDE: usize = 9;
const DILATION: usize = 10;
const GROUPS: usize = 11;
const RESIDUAL: usize = 14;
const OUT: usize = 16;

/// Smallest pointwise result worth a pair: below it the result stays in
/// the L2 cache between the two convolutions anyway.
const PAIR_MIN_BYTES: usize = 512 * 1024;

/// Fuses the pairs of `m` (see the module docs). Methods with jumps are
/// left as they are (fusing renumbers instructions).
pub fn fuse_pairs(m: &mut Method) {
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
    let mut n = 0;
    while n < old.len() {
        match pair_args(m, &uses, &old, n) {
            Some(args) => {
                code.push(kernel_call(m, PAIR, args));
                if let Some(t) = traces.as_mut() {
                    // The pair keeps the first convolution's frames.
                    t.remove(code.len());
                }
                n += 2;
            }
            None => {
                code.push(old[n].clone());
                n += 1;
            }
        }
    }
    m.instructions = code;
    m.stacktraces = traces;
}

/// The arguments of a pair made of instructions `n` and `n + 1`, when they
/// make one.
fn pair_args(m: &Method, uses: &Uses, code: &[Instruction], n: usize) -> Option<Vec<usize>> {
    let (first, a) = kernel_name(m, code.get(n)?)?;
    let (second, b) = kernel_name(m, code.get(n + 1)?)?;
    if first != FOLDED || second != FOLDED || a.len() != OUT + 1 || b.len() != OUT + 1 {
        return None;
    }
    let mid = a[OUT];
    let only_reader = uses.kernel_uses(mid, n)? == [(n + 1, X)];
    let no_residual = [a[RESIDUAL], b[RESIDUAL]]
        .iter()
        .all(|&r| matches!(m.values.get(r), Some(Value::Null)));
    if !(only_reader && no_residual) {
        return None;
    }
    let g1 = geometry(m, a, image(m, a[X])?)?;
    let g2 = geometry(m, b, g1.output_sizes())?;
    let bytes = g1.output_sizes().iter().product::<usize>() * 4;
    if bytes < PAIR_MIN_BYTES || pair_scratch_len(&g1, &g2).is_none() {
        return None;
    }
    let mut args = a[..OUT].to_vec();
    args.extend(&b[WEIGHT..]);
    Some(args)
}

/// A list of exactly `N` non-negative integers.
fn usizes<const N: usize>(m: &Method, v: usize) -> Option<[usize; N]> {
    let xs: Vec<usize> = ints(m, v)?
        .into_iter()
        .map(|x| usize::try_from(x).ok())
        .collect::<Option<_>>()?;
    xs.try_into().ok()
}

/// The geometry of the `conv2d_folded` with arguments `args` over an input
/// of `input` sizes (as its emitter checks it).
fn geometry(m: &Method, args: &[usize], input: [usize; 4]) -> Option<Conv2dNhwc> {
    let groups = usize::try_from(int(m, args[GROUPS])?).ok()?;
    Conv2dNhwc::folded(
        &input,
        &image(m, args[WEIGHT])?,
        usizes(m, args[STRIDE])?,
        usizes(m, args[PADDING])?,
        usizes(m, args[DILATION])?,
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
        let call = kernel_call(m, FOLDED, args);
        m.instructions.push(call);
        kept
    }

    /// Input `[1, side, side, 8]` expanded to 64 channels, then a 3×3
    /// depthwise convolution: the method and its pointwise result.
    fn block(side: usize) -> (Method, usize) {
        let mut m = Method {
            name: "forward".into(),
            values: vec![],
            inputs: vec![],
            outputs: vec![],
            instructions: vec![],
            operators: vec![],
            delegates: vec![],
            buffer_sizes: vec![0, 1 << 30],
            stacktraces: None,
        };
        let x = planned(&mut m, [1, side, side, 8], 0);
        let mid = planned(&mut m, [1, side, side, 64], 1 << 24);
        let out = planned(&mut m, [1, side, side, 64], 1 << 26);
        m.inputs.push(x);
        m.outputs.push(out);
        folded(&mut m, x, 64, 8, 1, 1, None, mid);
        folded(&mut m, mid, 64, 1, 3, 64, None, out);
        (m, mid)
    }

    #[test]
    fn a_large_pointwise_result_read_only_by_a_depthwise_convolution_pairs() {
        // 48 × 48 pixels of 64 channels: 576 KiB.
        let (mut m, mid) = block(48);
        let (x, out) = (m.inputs[0], m.outputs[0]);
        fuse_pairs(&mut m);
        assert_eq!(m.instructions.len(), 1);
        let (name, args) = kernel_name(&m, &m.instructions[0]).unwrap();
        assert_eq!(name, PAIR);
        assert_eq!(args.len(), 2 * OUT);
        assert_eq!((args[0], args[args.len() - 1]), (x, out));
        assert!(!args.contains(&mid));
    }

    #[test]
    fn other_pairs_stay_apart() {
        // A result that fits in L2 (32 × 32 × 64 floats: 256 KiB).
        let (mut m, _) = block(32);
        let want = m.clone();
        fuse_pairs(&mut m);
        assert_eq!(m, want);
        // A result something else reads too.
        let (mut m, mid) = block(48);
        m.outputs.push(mid);
        let want = m.clone();
        fuse_pairs(&mut m);
        assert_eq!(m, want);
        // A depthwise convolution that adds a residual.
        let (mut m, _) = block(48);
        let residual = m.values.len();
        m.values.push(m.values[m.outputs[0]].clone());
        let Instruction::Kernel { args, .. } = &mut m.instructions[1] else {
            unreachable!()
        };
        args[RESIDUAL] = residual;
        let want = m.clone();
        fuse_pairs(&mut m);
        assert_eq!(m, want);
        // A 3×3 convolution, not a pointwise one, first.
        let (mut m, _) = block(48);
        let weight = push_f32_tensor(&mut m, vec![64, 8, 3, 3], Placement::Unplanned);
        let padding = push_int_list(&mut m, &[1; 4]);
        let Instruction::Kernel { args, .. } = &mut m.instructions[0] else {
            unreachable!()
        };
        (args[WEIGHT], args[PADDING]) = (weight, padding);
        let want = m.clone();
        fuse_pairs(&mut m);
        assert_eq!(m, want);
    }
}
