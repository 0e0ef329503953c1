//! What generated code will read of the program's files, decided from the
//! IR and the plan before any code is emitted, so that the data can be
//! compacted ([`super::compact`]) and the code generated once.
//!
//! The code reads a constant where it names it: the constant arguments of
//! every instruction with code of its own (a folded transpose's product
//! reads the constant it transposes), constant outputs, conditions and
//! moves, the initial values of mutable tensors, constants handed to
//! delegates and the delegates' blobs. It does not read the constants the
//! compiler prepared a kept tensor from (but for the calls that name them
//! anyway, `prepare::reads_sources_when_prepared`), nor a weight packed at
//! compile time that only plain products read. Code generation checks that it reads
//! nothing predicted here not to be read (`codegen::generate`).
use super::compact::Reads;
use super::fold::{product_args, Folds};
use super::layout::{Home, MethodLayout};
use super::prepare::{kept_arguments, reads_sources_when_prepared};
use super::MethodPlan;
use crate::error::Diagnostic;
use crate::ir::*;
use std::collections::BTreeSet;

/// Every `(source, offset)` at which generated code will read file data,
/// for the methods that could be planned.
pub(crate) fn predict(program: &Program, plans: &[Result<MethodPlan, Vec<Diagnostic>>]) -> Reads {
    let mut reads = Reads::new();
    for (m, plan) in program.methods.iter().zip(plans) {
        if let Ok(plan) = plan {
            method_reads(m, &plan.layout, &plan.folds, &mut reads);
        }
        for d in &m.delegates {
            reads.insert((d.processed.source, d.processed.offset));
        }
    }
    reads
}

fn method_reads(m: &Method, layout: &MethodLayout, folds: &Folds, reads: &mut Reads) {
    // The state's initialisation copies mutable tensors' initial values.
    for (i, v) in m.values.iter().enumerate() {
        if let (Value::Tensor(t), Some(Home::Arena { .. })) = (v, layout.homes.get(i)) {
            if let Placement::Mutable { initial, .. } = &t.placement {
                reads.insert((initial.source, initial.offset));
            }
        }
    }
    let mut read = |v: usize| {
        if let Some(&Home::Data { source, offset }) = layout.homes.get(v) {
            reads.insert((source, offset));
        }
    };
    m.outputs.iter().for_each(|&v| read(v));
    // Weights packed on the first run are read to be packed.
    if folds.packed_len > 0 {
        folds.packed().iter().for_each(|w| read(w.value));
    }
    for (n, ins) in m.instructions.iter().enumerate() {
        match ins {
            Instruction::Kernel { .. } if folds.elided(n).is_some() => {}
            Instruction::Kernel { op, args } => {
                let name = m.operators.get(*op).map(Operator::full_name).unwrap_or_default();
                kernel_reads(m, layout, folds, n, &name, args)
                    .into_iter()
                    .for_each(&mut read);
            }
            Instruction::Delegate { args, .. } => args.iter().for_each(|&v| read(v)),
            Instruction::Move { from, .. } => read(*from),
            Instruction::JumpFalse { cond, .. } => read(*cond),
            Instruction::Free { .. } => {}
        }
    }
}

/// The values whose data the code of kernel call `n` reads.
fn kernel_reads(
    m: &Method,
    layout: &MethodLayout,
    folds: &Folds,
    n: usize,
    name: &str,
    args: &[usize],
) -> BTreeSet<usize> {
    let product = product_args(name);
    let mut values = BTreeSet::new();
    for (i, &a) in args.iter().enumerate() {
        if product.is_some_and(|(_, b_pos, _)| b_pos == i) {
            continue;
        }
        match m.values.get(a) {
            Some(Value::TensorList(items)) => values.extend(items),
            Some(Value::OptionalTensorList(items)) => values.extend(items.iter().flatten()),
            _ => {
                values.insert(a);
            }
        }
    }
    // What a kept tensor prepared at compile time was made from.
    let kept = if reads_sources_when_prepared(name) {
        Vec::new()
    } else {
        kept_arguments(name, args.len())
    };
    for (kept, sources) in kept {
        if args.get(kept).is_some_and(|k| layout.prepared.contains(k)) {
            for s in sources {
                if let Some(v) = args.get(s) {
                    values.remove(v);
                }
            }
        }
    }
    // A product's right operand: a folded transpose reads its constant; a
    // plain product reads only the packed copy of a weight packed now.
    if let Some((_, b_pos, _)) = product {
        if let Some(&b) = args.get(b_pos) {
            let (stored, trans) = match folds.transposed(b) {
                Some(src) => (src, true),
                None => (b, name == "aten::linear.out"),
            };
            if !(folds.plain(n) && folds.packed_at_compile_time(stored, trans)) {
                values.insert(stored);
            }
        }
    }
    values
}
