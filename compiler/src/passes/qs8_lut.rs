//! A function of int8 values through floats, tabulated: a
//! `ptec_xnn::qs8_dequantize`, an element-wise function and a
//! `ptec_xnn::qs8_quantize`, each result read only by what follows (how
//! the XNNPACK lowering of an int8 CNN leaves the activations XNNPACK runs
//! in float: MobileNetV3's hardswish, EfficientNet's SiLU and its
//! squeeze-excitation's sigmoid), become one call that looks each
//! byte up in a table of the 256 outputs. The function is one call
//! (`hardswish`, `sigmoid`, `tanh`) or a `sigmoid` then a `mul` by its
//! input (SiLU as the export writes it). Code generation computes the
//! table with the same kernels the three calls run, so the outputs are
//! theirs to the bit; the two `f32` results are no longer used and get no
//! bytes.
use crate::analysis::alias::share_bytes;
use crate::analysis::uses::Uses;
use crate::ir::*;
use crate::names::{aten, qs8};
use crate::passes::rewrite::{fuse_runs, Fused};

/// The one-call functions tabulated, and the call each run becomes.
const FUNCTIONS: [(&str, &str); 3] = [
    (aten::HARDSWISH, qs8::LUT_HARDSWISH),
    (aten::SIGMOID, qs8::LUT_SIGMOID),
    (aten::TANH, qs8::LUT_TANH),
];

/// Fuses every such run of `m` (see the module docs). Methods with jumps
/// are left as they are (fusing renumbers instructions).
pub fn fuse_tables(m: &mut Method) {
    fuse_runs(m, |m, uses, n| {
        let (len, name, args) = run_args(m, uses, n)?;
        Some(Fused::chain(len, name, args, true))
    })
}

/// The run's length, its call and the call's arguments `[q, in_scale,
/// in_zero_point, out_scale, out_zero_point, out]` when instructions from
/// `n` are such a run: each `f32` result read only within the run, all
/// tensors static and contiguous, of one shape and layout, `out` clear of
/// `q`'s bytes.
fn run_args(m: &Method, uses: &Uses, n: usize) -> Option<(usize, &'static str, Vec<usize>)> {
    let (name, args) = kernel_name(m, m.instructions.get(n)?)?;
    let &[q, s_in, z_in, f] = args else { return None };
    if name != qs8::DEQUANTIZE {
        return None;
    }
    let (len, call, h, floats) = function(m, uses, n + 1, f)?;
    let at = n + 1 + len;
    let (name, args) = kernel_name(m, m.instructions.get(at)?)?;
    let &[b, s_out, z_out, y] = args else { return None };
    if name != qs8::QUANTIZE || b != h || !only_read_by(uses, h, at - 1, &[at]) {
        return None;
    }
    let plain = |v: usize, dtype: ScalarType| match m.values.get(v) {
        Some(Value::Tensor(t)) => {
            (t.dtype == dtype && t.dynamism == Dynamism::Static && t.is_contiguous()).then_some(t)
        }
        _ => None,
    };
    let (tq, ty) = (plain(q, ScalarType::Char)?, plain(y, ScalarType::Char)?);
    let layout = |v: usize| m.channels_last.contains(&v);
    for &v in &floats {
        let t = plain(v, ScalarType::Float)?;
        if t.sizes != tq.sizes || layout(v) != layout(q) {
            return None;
        }
    }
    let same = ty.sizes == tq.sizes && layout(y) == layout(q);
    (same && q != y && !share_bytes(m, q, y)).then(|| (len + 2, call, vec![q, s_in, z_in, s_out, z_out, y]))
}

/// The element-wise function of `f` starting at instruction `at`: how
/// many instructions it takes, the call its run becomes, its result and
/// every `f32` value it reads or writes. `f` must be read by these
/// instructions alone.
fn function(m: &Method, uses: &Uses, at: usize, f: usize) -> Option<(usize, &'static str, usize, Vec<usize>)> {
    let (name, args) = kernel_name(m, m.instructions.get(at)?)?;
    let &[a, h, ret] = args else { return None };
    if a != f || ret != h {
        return None;
    }
    if name == aten::SIGMOID {
        if let Some(p) = times_input(m, uses, at, f, h) {
            return Some((2, qs8::LUT_SIGMOID_MUL, p, vec![f, h, p]));
        }
    }
    let &(_, call) = FUNCTIONS.iter().find(|(g, _)| *g == name)?;
    only_read_by(uses, f, at - 1, &[at]).then(|| (1, call, h, vec![f, h]))
}

/// SiLU as the export writes it: when instruction `at`, `h = sigmoid(f)`,
/// is followed by `p = mul(f, h)` (or `mul(h, f)`), the only readers of
/// `f` and `h`, then `p`.
fn times_input(m: &Method, uses: &Uses, at: usize, f: usize, h: usize) -> Option<usize> {
    let (name, args) = kernel_name(m, m.instructions.get(at + 1)?)?;
    let &[x, y, p, ret] = args else { return None };
    let operands_ok = (x, y) == (f, h) || (x, y) == (h, f);
    let read = only_read_by(uses, f, at - 1, &[at, at + 1]) && only_read_by(uses, h, at, &[at + 1]);
    (name == aten::MUL && ret == p && operands_ok && read).then_some(p)
}

/// Whether, besides instruction `writer`, kernel instructions `at` alone
/// use `v` (once each), and nothing else does.
fn only_read_by(uses: &Uses, v: usize, writer: usize, at: &[usize]) -> bool {
    let Some(readers) = uses.kernel_uses(v, writer) else {
        return false;
    };
    let mut seen: Vec<usize> = readers.iter().map(|r| r.0).collect();
    seen.sort_unstable();
    seen == at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::rewrite::{kernel_call, push_tensor, push_value};

    /// The values of a run on `[1, 4, 4, 8]` tensors planned apart: the
    /// `i8` input and output, the two `f32` ones between, a spare `f32`
    /// and the quantization scalars.
    struct Run {
        m: Method,
        q: usize,
        f: usize,
        h: usize,
        p: usize,
        y: usize,
        spare: usize,
        scalars: [usize; 2],
    }

    fn run() -> Run {
        let mut m = crate::analysis::test_methods::empty(1 << 20);
        let mut offset = 0;
        let mut planned = |m: &mut Method, dtype| {
            offset += 4096;
            push_tensor(m, dtype, vec![1, 4, 4, 8], Placement::Planned { buffer: 1, offset })
        };
        let q = planned(&mut m, ScalarType::Char);
        let [f, h, p, spare] = [(); 4].map(|_| planned(&mut m, ScalarType::Float));
        let y = planned(&mut m, ScalarType::Char);
        let scalars = [
            push_value(&mut m, Value::Double(0.05)),
            push_value(&mut m, Value::Int(3)),
        ];
        m.inputs.extend([q, spare]);
        m.outputs.push(y);
        Run {
            m,
            q,
            f,
            h,
            p,
            y,
            spare,
            scalars,
        }
    }

    impl Run {
        /// Surrounds `middle` (kernel calls by name and arguments) with the
        /// dequantize into `f` and the quantize of `out` into `y`.
        fn build(mut self, middle: &[(&str, Vec<usize>)], out: usize) -> Self {
            let [s, z] = self.scalars;
            let first = kernel_call(&mut self.m, qs8::DEQUANTIZE, vec![self.q, s, z, self.f]);
            self.m.instructions.push(first);
            for (name, args) in middle {
                let call = kernel_call(&mut self.m, name, args.clone());
                self.m.instructions.push(call);
            }
            let last = kernel_call(&mut self.m, qs8::QUANTIZE, vec![out, s, z, self.y]);
            self.m.instructions.push(last);
            self
        }

        fn fused(mut self) -> Vec<(String, Vec<usize>)> {
            fuse_tables(&mut self.m);
            let m = &self.m;
            m.instructions
                .iter()
                .map(|i| kernel_name(m, i).map(|(n, a)| (n, a.to_vec())).unwrap())
                .collect()
        }
    }

    #[test]
    fn each_function_becomes_one_lookup() {
        for (op, call) in FUNCTIONS {
            let r = run();
            let (f, h) = (r.f, r.h);
            let (q, y, [s, z]) = (r.q, r.y, r.scalars);
            let got = r.build(&[(op, vec![f, h, h])], h).fused();
            assert_eq!(got, [(call.to_string(), vec![q, s, z, s, z, y])]);
        }
        // SiLU, the product either way round.
        for order in [|f, h| [f, h], |f, h| [h, f]] {
            let r = run();
            let (f, h, p) = (r.f, r.h, r.p);
            let [a, b] = order(f, h);
            let middle = [(aten::SIGMOID, vec![f, h, h]), (aten::MUL, vec![a, b, p, p])];
            let (q, y, [s, z]) = (r.q, r.y, r.scalars);
            let got = r.build(&middle, p).fused();
            assert_eq!(got, [(qs8::LUT_SIGMOID_MUL.to_string(), vec![q, s, z, s, z, y])]);
        }
    }

    #[test]
    fn runs_whose_floats_are_read_elsewhere_stay() {
        // A sigmoid times something else: the sigmoid alone is not a run
        // either (its result goes on to the mul, not a quantize).
        let r = run();
        let (f, h, p, spare) = (r.f, r.h, r.p, r.spare);
        let middle = [(aten::SIGMOID, vec![f, h, h]), (aten::MUL, vec![spare, h, p, p])];
        assert_eq!(r.build(&middle, p).fused().len(), 4);
        // The dequantized values read after the run too.
        let mut r = run();
        let (f, h) = (r.f, r.h);
        r.m.outputs.push(f);
        assert_eq!(r.build(&[(aten::TANH, vec![f, h, h])], h).fused().len(), 3);
        // The function's result read by another instruction as well.
        let r = run();
        let (f, h, p) = (r.f, r.h, r.p);
        let r = r.build(&[(aten::SIGMOID, vec![f, h, h])], h);
        let mut r = r;
        let extra = kernel_call(&mut r.m, aten::TANH, vec![h, p, p]);
        r.m.instructions.push(extra);
        r.m.outputs.push(p);
        assert_eq!(r.fused().len(), 4);
        // An output on the input's bytes.
        let mut r = run();
        let (f, h, q, y) = (r.f, r.h, r.q, r.y);
        r.m.values[y] = r.m.values[q].clone();
        if let Value::Tensor(t) = &mut r.m.values[y] {
            t.dtype = ScalarType::Char;
        }
        assert_eq!(r.build(&[(aten::HARDSWISH, vec![f, h, h])], h).fused().len(), 3);
    }
}
