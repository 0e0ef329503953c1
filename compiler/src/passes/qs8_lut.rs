//! A function of int8 values through floats, tabulated: a
//! `ptec_xnn::qs8_dequantize`, an element-wise `aten::hardswish` and a
//! `ptec_xnn::qs8_quantize`, each result read only by the next (how the
//! XNNPACK lowering of an int8 MobileNetV3 leaves its activations, which
//! XNNPACK runs in float), become one call that looks each
//! byte up in a table of the 256 outputs. Code generation computes the
//! table with the same kernels the three calls run, so the outputs are
//! theirs to the bit; the two `f32` results are no longer used and get no
//! bytes.
use crate::analysis::alias::share_bytes;
use crate::analysis::uses::Uses;
use crate::ir::*;
use crate::names::{aten, qs8};
use crate::passes::rewrite::{fuse_runs, Fused};

/// The functions tabulated, and the call each run becomes.
const FUNCTIONS: [(&str, &str); 1] = [(aten::HARDSWISH, qs8::LUT_HARDSWISH)];

/// Fuses every such run of `m` (see the module docs). Methods with jumps
/// are left as they are (fusing renumbers instructions).
pub fn fuse_tables(m: &mut Method) {
    fuse_runs(m, |m, uses, n| {
        let (name, args) = run_args(m, uses, n)?;
        Some(Fused::chain(3, name, args, true))
    })
}

/// The call and its arguments `[q, in_scale, in_zero_point, out_scale,
/// out_zero_point, out]` when instructions `n..n + 3` are such a run: the
/// two `f32` results read by the next instruction alone, all four tensors
/// static and contiguous, of one shape and layout, `out` clear of `q`'s
/// bytes.
fn run_args(m: &Method, uses: &Uses, n: usize) -> Option<(&'static str, Vec<usize>)> {
    let (name, args) = kernel_name(m, m.instructions.get(n)?)?;
    let &[q, s_in, z_in, f] = args else { return None };
    if name != qs8::DEQUANTIZE {
        return None;
    }
    let (name, args) = kernel_name(m, m.instructions.get(n + 1)?)?;
    let &[a, h, ret] = args else { return None };
    let call = FUNCTIONS.iter().find(|(f, _)| *f == name)?.1;
    if a != f || ret != h {
        return None;
    }
    let (name, args) = kernel_name(m, m.instructions.get(n + 2)?)?;
    let &[b, s_out, z_out, y] = args else { return None };
    if name != qs8::QUANTIZE || b != h {
        return None;
    }
    let only_next =
        |v: usize, at: usize| matches!(uses.kernel_uses(v, at).as_deref(), Some([(next, 0)]) if *next == at + 1);
    if !(only_next(f, n) && only_next(h, n + 1)) {
        return None;
    }
    let plain = |v: usize, dtype: ScalarType| match m.values.get(v) {
        Some(Value::Tensor(t)) => {
            (t.dtype == dtype && t.dynamism == Dynamism::Static && t.is_contiguous()).then_some(t)
        }
        _ => None,
    };
    let (tq, tf) = (plain(q, ScalarType::Char)?, plain(f, ScalarType::Float)?);
    let (th, ty) = (plain(h, ScalarType::Float)?, plain(y, ScalarType::Char)?);
    let layout = |v: usize| m.channels_last.contains(&v);
    let same = [tf, th, ty].iter().all(|t| t.sizes == tq.sizes) && [f, h, y].iter().all(|&v| layout(v) == layout(q));
    (same && q != y && !share_bytes(m, q, y)).then(|| (call, vec![q, s_in, z_in, s_out, z_out, y]))
}
