//! How long each value is in use, in instructions: what the memory plan
//! and the alias analysis reason from.
use crate::ir::*;
use crate::names::written_in_place;

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
    for &v in &m.outputs {
        if let Some(life) = lives.get_mut(v) {
            *life = Some(Life {
                first: life.map_or(0, |l| l.first),
                last: usize::MAX,
            });
        }
    }
    for v in m.inputs.iter().copied().chain(held(m)) {
        if let Some(life) = lives.get_mut(v) {
            *life = Some(Life::ALWAYS);
        }
    }
    lives
}

/// The tensors other than inputs that hold data from run to run: mutable
/// buffers, and what a call writes in place (a KV cache; see
/// [`written_in_place`]), whose planned bytes nothing else may use.
pub(crate) fn held(m: &Method) -> Vec<usize> {
    let mut held: Vec<usize> = m
        .values
        .iter()
        .enumerate()
        .filter_map(|(v, value)| match value {
            Value::Tensor(Tensor {
                placement: Placement::Mutable { .. },
                ..
            }) => Some(v),
            _ => None,
        })
        .collect();
    for ins in &m.instructions {
        if let Instruction::Kernel { op, args } = ins {
            let Some(o) = m.operators.get(*op) else { continue };
            held.extend(written_in_place(&o.full_name()).iter().filter_map(|&i| args.get(i)));
        }
    }
    held.retain(|v| !m.inputs.contains(v));
    held.sort_unstable();
    held.dedup();
    held
}
