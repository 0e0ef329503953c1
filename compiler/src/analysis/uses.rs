//! Who names each value, and when: the uses and lives the passes, the
//! memory plan and code generation reason from.
use crate::analysis::alias::Aliases;
use crate::ir::*;
use crate::names::written_in_place;
use std::collections::HashMap;

/// Where each value is used: `(instruction, argument position)` of every
/// kernel call naming it (directly, or as an item of a list argument), and
/// whether anything else (another kind of instruction, the method's inputs
/// or outputs) does.
pub(crate) struct Uses {
    by_kernels: HashMap<usize, Vec<(usize, usize)>>,
    elsewhere: Vec<bool>,
}

impl Uses {
    /// The uses of `m`'s values, where a value that shares data with
    /// another through planned memory ([`Aliases`]) counts as used
    /// elsewhere: its kernel uses are not all its readers and writers, so
    /// no pass may reason from them alone.
    pub(crate) fn of(m: &Method) -> Uses {
        let mut uses = Self::direct(m);
        let aliases = Aliases::of(m);
        for (v, e) in uses.elsewhere.iter_mut().enumerate() {
            *e |= aliases.is_aliased(v);
        }
        uses
    }

    /// The uses of `m`'s values by name only, blind to aliases: for a pass
    /// that consults [`Aliases`] itself.
    pub(crate) fn direct(m: &Method) -> Uses {
        let mut by_kernels: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
        let mut elsewhere = vec![false; m.values.len()];
        let mut mark = |v: usize| {
            if let Some(e) = elsewhere.get_mut(v) {
                *e = true;
            }
        };
        for &v in m.inputs.iter().chain(&m.outputs) {
            mark(v);
        }
        for (n, ins) in m.instructions.iter().enumerate() {
            match ins {
                Instruction::Kernel { op, args } => {
                    // A tensor written in place holds data across runs: no
                    // pass may reason from its kernel uses.
                    let name = m.operators.get(*op).map(Operator::full_name).unwrap_or_default();
                    for &i in written_in_place(&name) {
                        if let Some(&v) = args.get(i) {
                            mark(v);
                        }
                    }
                    for (pos, &v) in args.iter().enumerate() {
                        let mut note = |v: usize| by_kernels.entry(v).or_default().push((n, pos));
                        note(v);
                        match m.values.get(v) {
                            Some(Value::TensorList(items)) => items.iter().for_each(|&i| note(i)),
                            Some(Value::OptionalTensorList(items)) => items.iter().flatten().for_each(|&i| note(i)),
                            _ => {}
                        }
                    }
                }
                Instruction::Delegate { args, .. } => args.iter().for_each(|&v| mark(v)),
                Instruction::Move { from, to } => {
                    mark(*from);
                    mark(*to);
                }
                Instruction::JumpFalse { cond, .. } => mark(*cond),
                Instruction::Free { .. } => {}
            }
        }
        Uses { by_kernels, elsewhere }
    }

    /// The kernel uses of `v` other than by instruction `except`, or `None`
    /// when something else uses it.
    pub(crate) fn kernel_uses(&self, v: usize, except: usize) -> Option<Vec<(usize, usize)>> {
        if self.elsewhere.get(v).copied().unwrap_or(true) {
            return None;
        }
        Some(
            self.by_kernels
                .get(&v)
                .map(|u| u.iter().copied().filter(|&(n, _)| n != except).collect())
                .unwrap_or_default(),
        )
    }
}
