//! `x · sigmoid(x)` as two instructions, a `sigmoid` whose result only the
//! `mul` right after it reads (SiLU as EfficientNet's export writes it:
//! XNNPACK's partitioner leaves both out of its subgraphs), becomes one
//! element-wise call, [`SIGMOID_MUL`]. It computes the same two rounded
//! `f32` steps for each element, in one pass: the sigmoid's result is
//! never stored and read back. That result's planned bytes are left
//! unused.
use crate::analysis::alias::share_bytes;
use crate::analysis::uses::Uses;
use crate::ir::*;
use crate::names::SIGMOID_MUL;
use crate::passes::rewrite::{fuse_runs, Fused};

/// Fuses every such pair of `m` (see the module docs). Methods with jumps
/// are left as they are (fusing renumbers instructions).
pub fn fuse_sigmoid_mul(m: &mut Method) {
    fuse_runs(m, |m, uses, n| {
        let [x, y] = pair_args(m, uses, n)?;
        Some(Fused {
            len: 2,
            name: SIGMOID_MUL,
            args: vec![x, y, y],
            reads: vec![x],
            out: y,
            // The result is the `mul`'s.
            logged_as_last: true,
        })
    })
}

/// `[x, y]` when instruction `n` is `sigmoid(x)` and the next one
/// `mul(x, that)` (or `mul(that, x)`) into `y`, with the sigmoid's result
/// read by nothing else, all three static contiguous `f32` tensors of one
/// shape and layout, and `y` clear of `x`'s bytes.
fn pair_args(m: &Method, uses: &Uses, n: usize) -> Option<[usize; 2]> {
    let (name, args) = kernel_name(m, m.instructions.get(n)?)?;
    let &[x, s, ret] = args else { return None };
    if name != crate::names::aten::SIGMOID || ret != s {
        return None;
    }
    let (name, args) = kernel_name(m, m.instructions.get(n + 1)?)?;
    let &[a, b, y, ret] = args else { return None };
    if name != crate::names::aten::MUL || ret != y || !((a, b) == (x, s) || (a, b) == (s, x)) {
        return None;
    }
    let readers = uses.kernel_uses(s, n)?;
    if readers.len() != 1 || readers[0].0 != n + 1 {
        return None;
    }
    let plain = |v: usize| match m.values.get(v) {
        Some(Value::Tensor(t)) => {
            (t.dtype == ScalarType::Float && t.dynamism == Dynamism::Static && t.is_contiguous()).then_some(t)
        }
        _ => None,
    };
    let (tx, ts, ty) = (plain(x)?, plain(s)?, plain(y)?);
    let layout = |v: usize| m.channels_last.contains(&v);
    let same = tx.sizes == ts.sizes && tx.sizes == ty.sizes && layout(x) == layout(s) && layout(x) == layout(y);
    (same && x != y && !share_bytes(m, x, y)).then_some([x, y])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::aten::{MUL, SIGMOID};
    use crate::passes::rewrite::{kernel_call, push_f32_tensor};

    /// `sigmoid(x)` into `s`, then `mul(a, b)` into `y` (`a`, `b` chosen
    /// from x, s and a third tensor by `mul_args`), on `[1, 4, 4, 8]`
    /// tensors planned apart (`other_sizes`: the third one's), `y` the
    /// output: the method and `[x, s, y, other]`.
    fn pair(mul_args: impl Fn([usize; 3]) -> [usize; 2], other_sizes: Vec<usize>) -> (Method, [usize; 4]) {
        let mut m = crate::analysis::test_methods::empty(1 << 20);
        let planned = |m: &mut Method, sizes: Vec<usize>, offset: u64| {
            push_f32_tensor(m, sizes, Placement::Planned { buffer: 1, offset })
        };
        let x = planned(&mut m, vec![1, 4, 4, 8], 0);
        let s = planned(&mut m, vec![1, 4, 4, 8], 4096);
        let y = planned(&mut m, vec![1, 4, 4, 8], 8192);
        let other = planned(&mut m, other_sizes, 12288);
        m.inputs.extend([x, other]);
        m.outputs.push(y);
        let [a, b] = mul_args([x, s, other]);
        let sigmoid = kernel_call(&mut m, SIGMOID, vec![x, s, s]);
        let mul = kernel_call(&mut m, MUL, vec![a, b, y, y]);
        m.instructions.extend([sigmoid, mul]);
        (m, [x, s, y, other])
    }

    #[test]
    fn sigmoid_then_mul_by_its_input_is_one_call() {
        for order in [|[x, s, _]: [usize; 3]| [x, s], |[x, s, _]: [usize; 3]| [s, x]] {
            let (mut m, [x, _, y, _]) = pair(order, vec![1, 4, 4, 8]);
            fuse_sigmoid_mul(&mut m);
            assert_eq!(m.instructions.len(), 1);
            let (name, args) = kernel_name(&m, &m.instructions[0]).unwrap();
            assert_eq!((name.as_str(), args), (SIGMOID_MUL, &[x, y, y][..]));
            // Logged as the `mul`, instruction 1 of the program as read.
            assert_eq!(m.origin(0).instruction, 0);
            assert_eq!(m.origin(0).logged_as, Some(1));
        }
    }

    #[test]
    fn other_pairs_are_left_apart() {
        // The `mul` by something else, and a broadcast `mul`.
        let (mut m, _) = pair(|[_, s, other]| [s, other], vec![1, 4, 4, 8]);
        fuse_sigmoid_mul(&mut m);
        assert_eq!(m.instructions.len(), 2);
        let (mut m, _) = pair(|[x, s, _]| [x, s], vec![1, 1, 1, 8]);
        m.values[1] = m.values[3].clone();
        fuse_sigmoid_mul(&mut m);
        assert_eq!(m.instructions.len(), 2, "shapes differ");
        // The sigmoid's result read elsewhere too: a method output.
        let (mut m, [_, s, _, _]) = pair(|[x, s, _]| [x, s], vec![1, 4, 4, 8]);
        m.outputs.push(s);
        fuse_sigmoid_mul(&mut m);
        assert_eq!(m.instructions.len(), 2);
        // An output on the input's bytes.
        let (mut m, [x, _, y, _]) = pair(|[x, s, _]| [x, s], vec![1, 4, 4, 8]);
        m.values[y] = m.values[x].clone();
        fuse_sigmoid_mul(&mut m);
        assert_eq!(m.instructions.len(), 2);
    }
}
