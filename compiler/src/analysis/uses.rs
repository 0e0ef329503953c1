//! Who names each value, and when: the uses and lives the passes, the
//! memory plan and code generation reason from.
use crate::analysis::alias::Aliases;
use crate::ir::*;
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
                Instruction::Kernel { args, .. } => {
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

/// When a value is in use: from the first instruction that names it to the
/// last, both included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Life {
    pub(crate) first: usize,
    pub(crate) last: usize,
}

impl Life {
    /// For what holds data between runs.
    pub(crate) const ALWAYS: Life = Life {
        first: 0,
        last: usize::MAX,
    };

    pub(crate) fn overlaps(self, other: Life) -> bool {
        self.first <= other.last && other.first <= self.last
    }

    fn include(life: &mut Option<Life>, n: usize) {
        *life = Some(match *life {
            None => Life { first: n, last: n },
            Some(l) => Life {
                first: l.first.min(n),
                last: l.last.max(n),
            },
        });
    }
}

/// Each value's life in `m`'s instructions (`None`: nothing names it). A
/// value counts as named by the instructions that name it directly or as an
/// item of a list, and, for each such instruction `n`, by `also(n)` too (an
/// instruction that does `n`'s work, as a fold does). The method's inputs
/// and its mutable buffers live always: they hold data between runs; its
/// outputs, from the first instruction naming them on (the caller reads
/// them after the run).
pub(crate) fn lives(m: &Method, also: impl Fn(usize) -> Option<usize>) -> Vec<Option<Life>> {
    let mut lives: Vec<Option<Life>> = vec![None; m.values.len()];
    for (n, ins) in m.instructions.iter().enumerate() {
        let named: &[usize] = match ins {
            Instruction::Kernel { args, .. } | Instruction::Delegate { args, .. } => args,
            Instruction::Move { from, to } => &[*from, *to],
            Instruction::JumpFalse { cond, .. } => std::slice::from_ref(cond),
            Instruction::Free { value } => std::slice::from_ref(value),
        };
        let mut name = |v: usize| {
            if let Some(life) = lives.get_mut(v) {
                Life::include(life, n);
                if let Some(k) = also(n) {
                    Life::include(life, k);
                }
            }
        };
        for &v in named {
            name(v);
            match m.values.get(v) {
                Some(Value::TensorList(items)) => items.iter().for_each(|&i| name(i)),
                Some(Value::OptionalTensorList(items)) => items.iter().flatten().for_each(|&i| name(i)),
                _ => {}
            }
        }
    }
    let held = m.values.iter().enumerate().filter_map(|(v, value)| match value {
        Value::Tensor(Tensor {
            placement: Placement::Mutable { .. },
            ..
        }) => Some(v),
        _ => None,
    });
    for &v in &m.outputs {
        if let Some(life) = lives.get_mut(v) {
            *life = Some(Life {
                first: life.map_or(0, |l| l.first),
                last: usize::MAX,
            });
        }
    }
    for v in m.inputs.iter().copied().chain(held) {
        if let Some(life) = lives.get_mut(v) {
            *life = Some(Life::ALWAYS);
        }
    }
    lives
}
