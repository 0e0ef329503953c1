//! Int8 inverted residual blocks, streamed: a pointwise
//! `ptec_xnn::qs8_conv2d_nhwc` then a depthwise one, a depthwise one then a
//! pointwise one, or all three (the expansion, depthwise and projection of
//! an XNNPACK-quantized block), each result read only by the next
//! instruction, become one `ptec_xnn::qs8_conv2d_chain` when a result
//! between them is large. The chain runs band by band (see
//! `ptec_runtime::kernels::qs8::conv2d_chain`) in a few rows of scratch,
//! so those results, temporaries of the XNNPACK lowering, are no longer
//! used and get no bytes: the arena shrinks (MobileNetV2's second block's
//! expansion alone is 1.15 MiB).
//!
//! Small blocks stay apart: the chain's scratch goes only where
//! ExecuTorch's plan is free, and a small model's plan has no such room
//! while its temporaries' buffer does, so chaining DS-CNN's 8000-byte
//! blocks added 8000 bytes of scratch to its arena and saved nothing.
//!
//! A chain reads its input while it writes its output: an output planned
//! on the input's bytes loses its plan, and [`crate::plan::temporaries`]
//! gives it bytes apart. A residual add after the block reads the input
//! after the chain, as it did after the projection.
use crate::analysis::alias::share_bytes;
use crate::analysis::uses::Uses;
use crate::ir::*;
use crate::names::qs8::{self, CHAIN, CHAIN_STAGE_ARGS};
use crate::passes::channels_last::{int, usizes};
use crate::passes::rewrite::{fuse_runs, Fused};
use ptec_runtime::kernels::nhwc::Conv2dNhwc;
use ptec_runtime::kernels::qs8::chain_scratch_len;

/// Smallest result between two stages worth streaming (see the module
/// docs).
const CHAIN_MIN_BYTES: usize = 128 * 1024;

/// Arguments of a `qs8_conv2d_nhwc`.
const CONV_ARGS: usize = 11 + qs8::TAIL;
/// Where its output is.
const OUT: usize = CONV_ARGS - 1;

/// Fuses the chains of `m` (see the module docs), longest first. Methods
/// with jumps are left as they are (fusing renumbers instructions).
pub fn fuse_chains(m: &mut Method) {
    fuse_runs(m, |m, uses, n| {
        let (len, args) = [3, 2]
            .into_iter()
            .find_map(|len| Some((len, chain_args(m, uses, n, len)?)))?;
        Some(Fused::chain(len, CHAIN, args, true))
    })
}

/// The arguments of the chain the `len` instructions from `n` make, if
/// they make one: the first's input, each one's arguments from its weight
/// to its output's clamp, the last one's output.
fn chain_args(m: &Method, uses: &Uses, n: usize, len: usize) -> Option<Vec<usize>> {
    let mut calls = Vec::with_capacity(len);
    for i in n..n + len {
        let (name, args) = kernel_name(m, m.instructions.get(i)?)?;
        if name != qs8::CONV2D_NHWC || args.len() != CONV_ARGS {
            return None;
        }
        calls.push(args);
    }
    let mut geometries = Vec::with_capacity(len);
    let mut large = false;
    for (i, args) in calls.iter().enumerate() {
        geometries.push(geometry(m, args)?);
        let Some(next) = calls.get(i + 1) else { break };
        // A result read by the next stage alone.
        let only_reader = uses.kernel_uses(args[OUT], n + i)? == [(n + i + 1, 0)];
        if !(only_reader && next[0] == args[OUT]) {
            return None;
        }
        large |= tensor(m, args[OUT])?.numel() >= CHAIN_MIN_BYTES;
    }
    // The depthwise stage is the one flagged so, whose filter is laid out
    // as one (the geometries alone do not tell).
    let d = usize::from(len == 3 || !flag(m, calls[0])?);
    let flags = calls.iter().enumerate().all(|(i, c)| flag(m, c) == Some(i == d));
    if !(large && flags && chain_scratch_len(&geometries).is_some()) {
        return None;
    }
    let (x, out) = (calls[0][0], calls[len - 1][OUT]);
    tensor(m, out)?;
    // An output on the input's bytes moves: only one that the method's
    // kernels alone use may.
    if share_bytes(m, x, out) && uses.kernel_uses(out, usize::MAX).is_none() {
        return None;
    }
    let mut args = vec![x];
    for call in &calls {
        args.extend(&call[1..OUT]);
    }
    debug_assert_eq!(args.len(), 1 + len * CHAIN_STAGE_ARGS);
    args.push(out);
    Some(args)
}

/// Tensor `v`, when its sizes are static (the chain's emitter takes no
/// other).
fn tensor(m: &Method, v: usize) -> Option<&Tensor> {
    match m.values.get(v)? {
        Value::Tensor(t) if t.dynamism == Dynamism::Static => Some(t),
        _ => None,
    }
}

/// A call's `depthwise` argument.
fn flag(m: &Method, args: &[usize]) -> Option<bool> {
    match m.values.get(args[9])? {
        Value::Bool(b) => Some(*b),
        _ => None,
    }
}

/// The geometry of the `qs8_conv2d_nhwc` with arguments `args` (as its
/// emitter checks it).
fn geometry(m: &Method, args: &[usize]) -> Option<Conv2dNhwc> {
    let (x, w) = (&tensor(m, args[0])?.sizes, &tensor(m, args[qs8::CONV_WEIGHT])?.sizes);
    let padding: [usize; 4] = usizes(m, args[5])?.try_into().ok()?;
    let stride: [usize; 2] = usizes(m, args[6])?.try_into().ok()?;
    let dilation: [usize; 2] = usizes(m, args[7])?.try_into().ok()?;
    let groups = usize::try_from(int(m, args[8])?).ok()?;
    match flag(m, args)? {
        true => Conv2dNhwc::depthwise(x, w, stride, padding, dilation).filter(|g| g.groups == groups),
        false => Conv2dNhwc::regular(x, w, stride, padding, dilation, groups),
    }
}
