//! Work moved out of a method's instructions at compile time, decided for
//! the whole method before any instruction is generated:
//!
//! - A `permute_copy` that transposes a constant matrix read only as the
//!   right operand of matrix products is folded into them: they read the
//!   constant as a transposed operand, and the copy is never made (the
//!   exporter writes every `Linear` as such a copy followed by `addmm`).
//! - A `relu` right after a matrix product, as the only reader of its
//!   result, is fused into the product, which writes the `relu`'s output.
//! - Constant `f32` right operands of products large enough to be blocked
//!   are packed once, when the program is constructed, into the strips the
//!   GEMM micro-kernel reads; the products then pack only their left
//!   operand.
use super::prepare::PreparedData;
use crate::analysis::alias::Aliases;
use crate::analysis::uses::Uses;
use crate::ir::*;
use crate::plan::layout::{overlaps, Home, MethodLayout};
use std::collections::{HashMap, HashSet};

/// A constant right operand packed once, on the first run.
#[derive(Clone, Debug, PartialEq)]
pub struct PackedWeight {
    /// The constant value packed.
    pub value: usize,
    /// Whether it is stored transposed (`n × k`) relative to the product.
    pub trans: bool,
    pub k: usize,
    pub n: usize,
    /// Element offset in the method's packed-weights buffer.
    pub offset: usize,
    pub len: usize,
    /// Byte offset in the prepared data, when packed at compile time
    /// ([`Folds::pack_at_compile_time`]) instead of on the first run.
    pub prepared: Option<usize>,
}

/// The folds of one method.
#[derive(Clone, Debug, Default)]
pub struct Folds {
    /// Value → the constant 2-D value it is the transpose of.
    transposed: HashMap<usize, usize>,
    /// Instructions generated as nothing → the instruction doing their work.
    elided: HashMap<usize, usize>,
    /// Product instruction → the `relu` output it writes instead of its own.
    relu_into: HashMap<usize, usize>,
    /// Values no generated code writes or reads: folded transposes and the
    /// own results of products that write their `relu`'s output.
    bypassed: HashSet<usize>,
    packed: Vec<PackedWeight>,
    /// Elements of the packed-weights buffer (0: none).
    pub packed_len: usize,
    /// The packings made at compile time ([`Folds::pack_at_compile_time`]),
    /// one per packed weight, until code generation places them
    /// ([`Folds::place_packed`]).
    packed_now: Vec<Vec<f32>>,
    /// Whether the weights are packed at compile time.
    at_compile_time: bool,
    /// Product instructions that are plain (nothing scaled or added in
    /// first): they run on the packed engine, reading only a weight's
    /// packed copy when it was packed at compile time.
    plain: HashSet<usize>,
}

/// The argument positions of a product: (left, right, output), by operator.
pub(crate) fn product_args(name: &str) -> Option<(usize, usize, usize)> {
    match name {
        "aten::addmm.out" => Some((1, 2, 5)),
        "aten::mm.out" => Some((0, 1, 2)),
        "aten::linear.out" => Some((0, 1, 3)),
        _ => None,
    }
}

fn static_tensor(m: &Method, v: usize) -> Option<&Tensor> {
    m.values
        .get(v)?
        .as_tensor()
        .filter(|t| t.dynamism == Dynamism::Static && t.is_contiguous())
}

/// The constant a `permute_copy` instruction transposes and the value it
/// writes, when it is a 2-D transpose of a constant.
fn constant_transpose(m: &Method, layout: &MethodLayout, args: &[usize]) -> Option<(usize, usize)> {
    let (&src, &dims, &out) = (args.first()?, args.get(1)?, args.get(2)?);
    if args.len() != 4 || args[3] != out {
        return None;
    }
    let (s, o) = (static_tensor(m, src)?, static_tensor(m, out)?);
    let Some(Value::IntList(items)) = m.values.get(dims) else {
        return None;
    };
    let dims: Vec<i64> = items
        .iter()
        .map(|&i| match m.values.get(i) {
            Some(Value::Int(d)) => Some(if *d < 0 { d + 2 } else { *d }),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let transposes = dims == [1, 0]
        && s.sizes.len() == 2
        && o.sizes == [s.sizes[1], s.sizes[0]]
        && s.dtype == o.dtype
        && matches!(layout.homes.get(src), Some(Home::Data { .. }));
    transposes.then_some((src, out))
}

impl Folds {
    /// Decides the folds of `m`. `worth_packing(rows, n, k)` says whether a
    /// product of `rows × k` by a constant `k × n` gains from packing the
    /// constant once (the product runs blocked).
    pub fn of(m: &Method, layout: &MethodLayout, worth_packing: impl Fn(usize, usize, usize) -> bool) -> Folds {
        // A value an alias shares data with is read (or written) under
        // that name too, unseen by `uses`: its work is not folded away,
        // except through the one view `fusable_relu` accounts for.
        let uses = Uses::direct(m);
        let aliases = Aliases::of(m);
        let viewed = |v: usize| aliases.is_aliased(v);
        let mut f = Folds::default();
        let has_jumps = m.has_jumps();
        for (n, ins) in m.instructions.iter().enumerate() {
            let Some((name, args)) = kernel_name(m, ins) else {
                continue;
            };
            if name == crate::names::aten::PERMUTE_COPY {
                let Some((src, out)) = constant_transpose(m, layout, args) else {
                    continue;
                };
                let Some(readers) = uses.kernel_uses(out, n) else {
                    continue;
                };
                let only_right_operands = !readers.is_empty()
                    && !viewed(out)
                    && readers.iter().all(|&(r, pos)| {
                        kernel_name(m, &m.instructions[r]).is_some_and(|(rn, _)| {
                            rn != "aten::linear.out" && product_args(&rn).is_some_and(|(_, b, _)| b == pos)
                        })
                    });
                if only_right_operands {
                    f.transposed.insert(out, src);
                    f.bypassed.insert(out);
                    f.elided.insert(n, readers[0].0);
                }
            } else if let Some((_, _, out_pos)) = product_args(&name) {
                if name != "aten::addmm.out" || plain_addmm(m, args) {
                    f.plain.insert(n);
                }
                if !has_jumps {
                    let fused = fusable_relu(m, layout, &uses, &aliases, &f.transposed, n, args, out_pos);
                    if let Some((r, read)) = fused {
                        f.relu_into.insert(n, r);
                        f.bypassed.insert(args[out_pos]);
                        f.bypassed.insert(read);
                        f.elided.insert(n + 1, n);
                    }
                }
            }
        }
        // Packing, once the transposes are known.
        for ins in &m.instructions {
            let Some((name, args)) = kernel_name(m, ins) else {
                continue;
            };
            let Some((a_pos, b_pos, _)) = product_args(&name) else {
                continue;
            };
            let (Some(&a), Some(&b)) = (args.get(a_pos), args.get(b_pos)) else {
                continue;
            };
            let linear = name == "aten::linear.out";
            let (value, trans) = match f.transposed.get(&b) {
                Some(&src) => (src, true),
                None => (b, linear),
            };
            let (Some(w), Some(x)) = (static_tensor(m, value), m.values.get(a).and_then(Value::as_tensor)) else {
                continue;
            };
            if w.dtype != ScalarType::Float
                || w.sizes.len() != 2
                || x.sizes.is_empty()
                || !matches!(layout.homes.get(value), Some(Home::Data { .. }))
            {
                continue;
            }
            let (k, n) = if trans {
                (w.sizes[1], w.sizes[0])
            } else {
                (w.sizes[0], w.sizes[1])
            };
            let rows = x.sizes.iter().product::<usize>() / k.max(1);
            if !worth_packing(rows, n, k) || f.packed_for(value, trans).is_some() {
                continue;
            }
            let len = ptec_runtime::kernels::gemm::packed_len(k, n);
            f.packed.push(PackedWeight {
                value,
                trans,
                k,
                n,
                offset: f.packed_len,
                len,
                prepared: None,
            });
            // Each packed weight starts on a cache line.
            f.packed_len += len.div_ceil(16) * 16;
        }
        f
    }

    /// The constant `value` is the transpose of, when it was folded.
    pub fn transposed(&self, value: usize) -> Option<usize> {
        self.transposed.get(&value).copied()
    }

    /// The instruction that does the work of `instruction`, when that one
    /// is generated as nothing.
    pub fn elided(&self, instruction: usize) -> Option<usize> {
        self.elided.get(&instruction).copied()
    }

    /// Whether no generated code touches `value`'s bytes (see
    /// [`Folds::of`]'s folds).
    pub fn bypassed(&self, value: usize) -> bool {
        self.bypassed.contains(&value)
    }

    /// The `relu` output a product instruction writes, when one is fused.
    pub fn relu_into(&self, instruction: usize) -> Option<usize> {
        self.relu_into.get(&instruction).copied()
    }

    /// The packed copy of constant `value` (stored transposed or not).
    pub fn packed_for(&self, value: usize, trans: bool) -> Option<&PackedWeight> {
        self.packed.iter().find(|p| p.value == value && p.trans == trans)
    }

    pub fn packed(&self) -> &[PackedWeight] {
        &self.packed
    }

    /// Whether product instruction `n` is plain (see [`Folds::of`]).
    pub fn plain(&self, n: usize) -> bool {
        self.plain.contains(&n)
    }

    /// Whether constant `value` (stored transposed or not) is packed at
    /// compile time.
    pub fn packed_at_compile_time(&self, value: usize, trans: bool) -> bool {
        self.at_compile_time && self.packed_for(value, trans).is_some()
    }

    /// Packs every weight now, from the constants in `files`: the method
    /// then needs no packed-weights buffer and no run packs anything. The
    /// packings go into the embedded constants with [`Folds::place_packed`].
    pub fn pack_at_compile_time(&mut self, layout: &MethodLayout, files: &PreparedData<'_>) -> Result<(), String> {
        for w in &self.packed {
            let Some(Home::Data { source, offset }) = layout.homes.get(w.value).copied() else {
                return Err(format!("value {} is packed but is not embedded data", w.value));
            };
            let mut packed = vec![0.0f32; w.len];
            let b = files.read_f32(source, offset, w.k * w.n)?;
            ptec_runtime::kernels::gemm::pack(&b, w.k, w.n, w.trans, &mut packed);
            self.packed_now.push(packed);
        }
        self.packed_len = 0;
        self.at_compile_time = true;
        Ok(())
    }

    /// Appends the packings made at compile time to `prepared`, each
    /// weight then reading its own.
    pub fn place_packed(&mut self, prepared: &PreparedData<'_>) {
        for (w, packed) in self.packed.iter_mut().zip(std::mem::take(&mut self.packed_now)) {
            w.prepared = Some(prepared.push(&packed));
        }
    }
}

/// Whether `addmm(bias, a, b, beta, alpha, out)` is a plain product: alpha
/// 1, and beta 0, or 1 with a bias of one row (added as the product stores).
fn plain_addmm(m: &Method, args: &[usize]) -> bool {
    let scalar = |i: usize| match args.get(i).and_then(|&v| m.values.get(v)) {
        Some(Value::Null) => Some(1.0),
        Some(Value::Int(x)) => Some(*x as f64),
        Some(Value::Double(x)) => Some(*x),
        Some(Value::Bool(x)) => Some(f64::from(u8::from(*x))),
        _ => None,
    };
    let tensor = |i: usize| args.get(i).and_then(|&v| m.values.get(v)).and_then(Value::as_tensor);
    let (Some(beta), Some(alpha), Some(bias), Some(b)) = (scalar(3), scalar(4), tensor(0), tensor(2)) else {
        return false;
    };
    let row_bias =
        bias.dynamism == Dynamism::Static && matches!(bias.sizes[..], [n] | [1, n] if Some(&n) == b.sizes.get(1));
    alpha == 1.0 && (beta == 0.0 || (beta == 1.0 && row_bias))
}

/// The output of a `relu` at `n + 1` that product `n` can write directly,
/// and the value the `relu` reads: the product's result, or the one view
/// of it (the exporter puts a view between a 2-d product and a `relu` on
/// its 3-d shape). The `relu` must be the only reader of what it reads,
/// nothing else may name the product's result or view it, and the `relu`'s
/// output (static, contiguous, of the same dtype and element count) must
/// share no memory with what the product reads (a folded transpose is read
/// from its constant).
#[allow(clippy::too_many_arguments)]
fn fusable_relu(
    m: &Method,
    layout: &MethodLayout,
    uses: &Uses,
    aliases: &Aliases,
    transposed: &HashMap<usize, usize>,
    n: usize,
    args: &[usize],
    out_pos: usize,
) -> Option<(usize, usize)> {
    let &out = args.get(out_pos)?;
    let (rname, rargs) = kernel_name(m, m.instructions.get(n + 1)?)?;
    if rname != "aten::relu.out" || rargs.len() != 3 || rargs[1] != rargs[2] {
        return None;
    }
    let (read, relu_out) = (rargs[0], rargs[1]);
    let through_view = match aliases.partners(out) {
        [] => false,
        [view] if *view == read && aliases.partners(read) == [out] => true,
        _ => return None,
    };
    if read != out && !through_view {
        return None;
    }
    let readers = uses.kernel_uses(read, n)?;
    if readers != [(n + 1, 0)] || args.iter().enumerate().any(|(p, &v)| v == out && p < out_pos) {
        return None;
    }
    if through_view && !uses.kernel_uses(out, n)?.is_empty() {
        return None;
    }
    let (t, v, r) = (
        static_tensor(m, out)?,
        static_tensor(m, read)?,
        static_tensor(m, relu_out)?,
    );
    if t.dtype != r.dtype
        || v.dtype != t.dtype
        || t.numel() != r.numel()
        || v.numel() != t.numel()
        || !matches!(layout.homes.get(relu_out), Some(Home::Arena { .. }))
    {
        return None;
    }
    let written = layout.range(m, relu_out)?;
    let inputs_clear = args[..out_pos]
        .iter()
        .filter_map(|v| layout.range(m, *transposed.get(v).unwrap_or(v)))
        .all(|range| !overlaps(written, range));
    inputs_clear.then_some((relu_out, read))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::layout::layout_method;

    /// The forward method of tests/fixtures/mlp.pte: 0 permute_copy(w1) →
    /// 1 addmm → 2 relu → 3 permute_copy(w2) → 4 addmm → 5 softmax.
    fn mlp() -> Method {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/mlp.pte");
        let bytes = std::fs::read(path).unwrap();
        let loaded = crate::load(&bytes, &[]).unwrap();
        loaded.program.unwrap().methods[0].clone()
    }

    fn folds(m: &Method, pack: bool) -> Folds {
        Folds::of(m, &layout_method(m).unwrap(), |_, _, _| pack)
    }

    fn out_of(m: &Method, instruction: usize, pos: usize) -> usize {
        match &m.instructions[instruction] {
            Instruction::Kernel { args, .. } => args[pos],
            other => panic!("instruction {instruction} is {other:?}"),
        }
    }

    #[test]
    fn transposes_fold_into_products_and_relu_fuses() {
        let m = mlp();
        let f = folds(&m, false);
        let (w1t, w2t) = (out_of(&m, 0, 2), out_of(&m, 3, 2));
        assert_eq!(f.transposed(w1t), Some(out_of(&m, 0, 0)));
        assert_eq!(f.transposed(w2t), Some(out_of(&m, 3, 0)));
        assert_eq!((f.elided(0), f.elided(2), f.elided(3)), (Some(1), Some(1), Some(4)));
        assert_eq!((f.elided(1), f.elided(4), f.elided(5)), (None, None, None));
        assert_eq!(f.relu_into(1), Some(out_of(&m, 2, 1)));
        // The second product feeds softmax, not relu.
        assert_eq!(f.relu_into(4), None);
        assert!(f.packed().is_empty() && f.packed_len == 0);
    }

    #[test]
    fn packs_each_constant_right_operand_on_its_own_cache_line() {
        let m = mlp();
        let f = folds(&m, true);
        let (w1, w2) = (out_of(&m, 0, 0), out_of(&m, 3, 0));
        let p1 = f.packed_for(w1, true).unwrap();
        let p2 = f.packed_for(w2, true).unwrap();
        // w1 is [32, 16] (Linear 16 → 32), w2 is [10, 32].
        assert_eq!((p1.k, p1.n, p2.k, p2.n), (16, 32, 32, 10));
        assert_eq!(p1.len, ptec_runtime::kernels::gemm::packed_len(16, 32));
        assert_eq!(p1.offset, 0);
        assert!(p2.offset >= p1.len && p2.offset.is_multiple_of(16));
        assert_eq!(f.packed_len, p2.offset + p2.len.div_ceil(16) * 16);
        assert!(f.packed_for(w1, false).is_none());
    }

    #[test]
    fn weights_packed_at_compile_time_are_their_constants_packed() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/mlp.pte");
        let bytes = std::fs::read(path).unwrap();
        let m = mlp();
        let layout = layout_method(&m).unwrap();
        let mut f = Folds::of(&m, &layout, |_, _, _| true);
        let prepared = PreparedData::new(crate::read::Files::new(&bytes, &[]));
        f.pack_at_compile_time(&layout, &prepared).unwrap();
        assert_eq!(f.packed_len, 0, "no packed-weights buffer is left");
        f.place_packed(&prepared);
        let data = prepared.take_bytes();
        for (w, (rows, cols)) in [(out_of(&m, 0, 0), (32, 16)), (out_of(&m, 3, 0), (10, 32))] {
            let p = f.packed_for(w, true).unwrap();
            let at = p.prepared.expect("packed at compile time");
            assert!(at.is_multiple_of(64));
            // The weight as the file holds it: [out, in], read here on its own.
            let Some(Home::Data { offset, .. }) = layout.homes.get(w).copied() else {
                panic!("{w} is not data")
            };
            let weight: Vec<f32> = bytes[offset..offset + rows * cols * 4]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            let mut want = vec![0.0f32; p.len];
            ptec_runtime::kernels::gemm::pack(&weight, cols, rows, true, &mut want);
            let got: Vec<f32> = data[at..at + p.len * 4]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            assert_eq!(got, want, "value {w}");
            assert!(ptec_runtime::kernels::gemm::is_packed(&got, cols, rows));
        }
    }

    #[test]
    fn values_used_elsewhere_are_not_folded() {
        // The transposed weight is also an output: the copy must be made.
        let mut m = mlp();
        m.outputs.push(out_of(&m, 0, 2));
        let f = folds(&m, false);
        assert_eq!(f.transposed(out_of(&m, 0, 2)), None);
        assert_eq!(f.elided(0), None);
        // The product's result is also an output: the relu cannot take it.
        let mut m = mlp();
        m.outputs.push(out_of(&m, 1, 5));
        let f = folds(&m, false);
        assert_eq!(f.relu_into(1), None);
        assert_eq!(f.elided(2), None);
        assert_eq!(f.elided(0), Some(1));
    }

    /// A view of `v` (same bytes, written by nothing) that a call put at
    /// instruction `at` reads (writing the method's output again).
    fn read_through_a_view(m: &mut Method, v: usize, at: usize) {
        let view = m.values.len();
        m.values.push(m.values[v].clone());
        let out = m.outputs[0];
        m.instructions.insert(
            at,
            Instruction::Kernel {
                op: 0,
                args: vec![view, out, out],
            },
        );
    }

    #[test]
    fn values_read_through_views_are_not_folded() {
        // Read between the transpose (0) and its product (now 2).
        let mut m = mlp();
        let w1t = out_of(&m, 0, 2);
        read_through_a_view(&mut m, w1t, 1);
        let f = folds(&m, false);
        assert_eq!((f.elided(0), f.transposed(w1t)), (None, None));
        // Read after the relu (2) that the product (1) would write.
        let mut m = mlp();
        let product = out_of(&m, 1, 5);
        read_through_a_view(&mut m, product, 3);
        let f = folds(&m, false);
        assert_eq!((f.relu_into(1), f.elided(2)), (None, None));
        assert_eq!(f.elided(0), Some(1));
    }

    /// Makes the `relu` (2) read the product's (1) result through a 3-d
    /// view, as the exporter writes a `Linear` on a 3-d input; returns the
    /// view.
    fn relu_through_a_view(m: &mut Method) -> usize {
        let product = out_of(m, 1, 5);
        let mut view = m.values[product].as_tensor().unwrap().clone();
        view.sizes.insert(0, 1);
        view.dim_order = (0..view.sizes.len() as u8).collect();
        m.values.push(Value::Tensor(view));
        let v = m.values.len() - 1;
        if let Instruction::Kernel { args, .. } = &mut m.instructions[2] {
            args[0] = v;
        }
        v
    }

    #[test]
    fn relu_fuses_through_a_view_of_the_product() {
        let mut m = mlp();
        let view = relu_through_a_view(&mut m);
        let f = folds(&m, false);
        assert_eq!((f.relu_into(1), f.elided(2)), (Some(out_of(&m, 2, 1)), Some(1)));
        assert!(f.bypassed(out_of(&m, 1, 5)) && f.bypassed(view));
        // The view read again after the relu: the product's result is kept.
        let mut m = mlp();
        let view = relu_through_a_view(&mut m);
        let x = out_of(&m, 1, 1);
        m.instructions.insert(
            3,
            Instruction::Kernel {
                op: 0,
                args: vec![view, x, x],
            },
        );
        let f = folds(&m, false);
        assert_eq!((f.relu_into(1), f.elided(2)), (None, None));
        // A second view of the result, read after the relu.
        let mut m = mlp();
        relu_through_a_view(&mut m);
        let product = out_of(&m, 1, 5);
        read_through_a_view(&mut m, product, 3);
        let f = folds(&m, false);
        assert_eq!((f.relu_into(1), f.elided(2)), (None, None));
        // The relu reads the result itself while a view of it exists.
        let mut m = mlp();
        let view = relu_through_a_view(&mut m);
        if let Instruction::Kernel { args, .. } = &mut m.instructions[2] {
            args[0] = product;
        }
        read_through_a_view(&mut m, view, 3);
        let f = folds(&m, false);
        assert_eq!(f.relu_into(1), None);
    }

    #[test]
    fn a_view_of_a_later_value_on_the_same_bytes_does_not_stop_folds() {
        // A value the plan puts where the transposed weight was, written
        // after the products, then read through a view: the view is of
        // that value, not of the transpose.
        let mut m = mlp();
        let w1t = out_of(&m, 0, 2);
        let later = m.values.len();
        m.values.push(m.values[w1t].clone());
        let x = out_of(&m, 1, 1);
        m.instructions.push(Instruction::Kernel {
            op: 0,
            args: vec![x, later, later],
        });
        let end = m.instructions.len();
        read_through_a_view(&mut m, later, end);
        let f = folds(&m, false);
        assert_eq!((f.elided(0), f.transposed(w1t)), (Some(1), Some(out_of(&m, 0, 0))));
    }
}
