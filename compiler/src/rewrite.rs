//! What the IR-to-IR passes (the XNNPACK lowering, channels-last regions)
//! add to a method: values, operators, and planned buffers for the
//! temporaries and kept data they introduce.
use crate::alias::Aliases;
use crate::ir::*;
use std::collections::HashMap;

/// Alignment of what the passes place in their buffers (a cache line; SIMD
/// loads never straddle one at a tensor's start).
pub(crate) const ALIGN: u64 = 64;

/// Appends `v` to the method's values; returns its index.
pub(crate) fn push_value(m: &mut Method, v: Value) -> usize {
    m.values.push(v);
    m.values.len() - 1
}

/// A new static, contiguous `f32` tensor.
pub(crate) fn push_f32_tensor(m: &mut Method, sizes: Vec<usize>, placement: Placement) -> usize {
    let rank = sizes.len();
    push_value(
        m,
        Value::Tensor(Tensor {
            dtype: ScalarType::Float,
            sizes,
            dim_order: (0..rank as u8).collect(),
            dynamism: Dynamism::Static,
            placement,
        }),
    )
}

/// A new list of integer values.
pub(crate) fn push_int_list(m: &mut Method, xs: &[usize]) -> usize {
    let items = xs.iter().map(|&x| push_value(m, Value::Int(x as i64))).collect();
    push_value(m, Value::IntList(items))
}

/// A call of `full_name` (`namespace::name.overload`) with `args`, its
/// operator added to the method's table unless already there.
pub(crate) fn kernel_call(m: &mut Method, full_name: &str, args: Vec<usize>) -> Instruction {
    let (name, overload) = full_name.split_once('.').unwrap_or((full_name, ""));
    let op = Operator {
        name: name.to_string(),
        overload: overload.to_string(),
    };
    let index = match m.operators.iter().position(|o| *o == op) {
        Some(i) => i,
        None => {
            m.operators.push(op);
            m.operators.len() - 1
        }
    };
    Instruction::Kernel { op: index, args }
}

/// The operator (`namespace::name.overload`) and arguments of a kernel
/// call; None for other instructions.
pub(crate) fn kernel_name<'a>(m: &Method, ins: &'a Instruction) -> Option<(String, &'a [usize])> {
    match ins {
        Instruction::Kernel { op, args } => Some((m.operators.get(*op)?.full_name(), args)),
        _ => None,
    }
}

/// A planned buffer a pass adds to a method.
#[derive(Default)]
pub(crate) struct AddedBuffer {
    /// Its memory id, once something needs it.
    id: Option<usize>,
    pub(crate) size: u64,
}

impl AddedBuffer {
    /// The memory id, appending the buffer to the method's plan on first
    /// use (after the reserved entry 0).
    pub(crate) fn id(&mut self, m: &mut Method) -> usize {
        *self.id.get_or_insert_with(|| {
            if m.buffer_sizes.is_empty() {
                m.buffer_sizes.push(0);
            }
            m.buffer_sizes.push(0);
            m.buffer_sizes.len() - 1
        })
    }

    /// Bytes of their own, at the end, for one value for the whole run
    /// (and from run to run).
    pub(crate) fn reserve(&mut self, m: &mut Method, bytes: u64) -> Placement {
        let buffer = self.id(m);
        let offset = self.size;
        self.size = offset + bytes.div_ceil(ALIGN) * ALIGN;
        Placement::Planned { buffer, offset }
    }

    /// Writes the buffer's final size into the method's plan.
    pub(crate) fn install(&self, m: &mut Method) {
        if let Some(id) = self.id {
            m.buffer_sizes[id] = self.size;
        }
    }
}

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

/// The lowest multiple of [`ALIGN`] at which `size` bytes fit below `limit`
/// clear of the byte ranges `busy` (start, end).
pub(crate) fn lowest_fit(mut busy: Vec<(u64, u64)>, size: u64, limit: u64) -> Option<u64> {
    busy.sort_unstable();
    let mut offset = 0u64;
    for (lo, hi) in busy {
        if offset.checked_add(size)? <= lo {
            break;
        }
        offset = offset.max(hi.div_ceil(ALIGN) * ALIGN);
    }
    (offset.checked_add(size)? <= limit).then_some(offset)
}

/// Small methods for the tests of the passes that place bytes.
#[cfg(test)]
pub(crate) mod test_methods {
    use crate::ir::*;

    /// A tensor of `bytes` bytes.
    pub(crate) fn bytes(bytes: usize, placement: Placement) -> Value {
        Value::Tensor(Tensor {
            dtype: ScalarType::Byte,
            sizes: vec![bytes],
            dim_order: vec![0],
            dynamism: Dynamism::Static,
            placement,
        })
    }

    /// A method of one 1024-byte planned buffer whose instructions are
    /// calls naming the values listed (the last one as what they write).
    pub(crate) fn calls(values: Vec<Value>, calls: &[&[usize]], inputs: &[usize], outputs: &[usize]) -> Method {
        Method {
            name: "forward".into(),
            values,
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
            instructions: calls
                .iter()
                .map(|a| Instruction::Kernel {
                    op: 0,
                    args: a.to_vec(),
                })
                .collect(),
            operators: vec![Operator {
                name: "aten::op".into(),
                overload: "out".into(),
            }],
            delegates: vec![],
            buffer_sizes: vec![0, 1024],
            program_buffers: 2,
            stacktraces: None,
        }
    }
}
