//! What the IR-to-IR passes (the XNNPACK lowering, channels-last regions)
//! add to a method: values, operators, and planned buffers for the
//! temporaries and kept data they introduce.
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

    /// Lays out `temps` (tensor values) in this buffer, given the
    /// instructions that use them (a straight run, no jumps): a value lives
    /// from the first instruction that names it to the last, and values
    /// whose lives overlap get disjoint bytes (largest first, each at the
    /// lowest offset that fits). A value no instruction names is left
    /// unplanned.
    pub(crate) fn place_temporaries(&mut self, m: &mut Method, code: &[Instruction], temps: &[usize]) {
        if temps.is_empty() {
            return;
        }
        let mut temps = temps.to_vec();
        temps.sort_unstable();
        temps.dedup();
        let temps = &temps[..];
        for &v in temps {
            if let Some(Value::Tensor(t)) = m.values.get_mut(v) {
                t.placement = Placement::Unplanned;
            }
        }
        let id = self.id(m);
        let mut life: Vec<Option<(usize, usize)>> = vec![None; temps.len()];
        for (n, ins) in code.iter().enumerate() {
            let Instruction::Kernel { args, .. } = ins else {
                continue;
            };
            let mut touch = |v: usize| {
                if let Ok(k) = temps.binary_search(&v) {
                    let l = &mut life[k];
                    *l = Some(l.map_or((n, n), |(a, _)| (a, n)));
                }
            };
            for &a in args {
                touch(a);
                if let Some(Value::TensorList(items)) = m.values.get(a) {
                    items.iter().for_each(|&t| touch(t));
                }
            }
        }
        let size_of = |m: &Method, v: usize| m.values[v].as_tensor().map_or(0, |t| t.nbytes() as u64);
        let mut order: Vec<usize> = (0..temps.len()).collect();
        order.sort_by_key(|&k| std::cmp::Reverse(size_of(m, temps[k])));
        // (start, end, bytes range) of values placed so far.
        let mut placed: Vec<((usize, usize), (u64, u64))> = Vec::new();
        for k in order {
            let v = temps[k];
            let Some((a, b)) = life[k] else { continue };
            let size = size_of(m, v).div_ceil(ALIGN) * ALIGN;
            let mut busy: Vec<(u64, u64)> = placed
                .iter()
                .filter(|((s, e), _)| *s <= b && a <= *e)
                .map(|&(_, r)| r)
                .collect();
            busy.sort_unstable();
            let mut offset = 0u64;
            for (lo, hi) in busy {
                if offset + size <= lo {
                    break;
                }
                offset = offset.max(hi);
            }
            placed.push(((a, b), (offset, offset + size)));
            self.size = self.size.max(offset + size);
            if let Some(Value::Tensor(t)) = m.values.get_mut(v) {
                t.placement = Placement::Planned { buffer: id, offset };
            }
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
    pub(crate) fn of(m: &Method) -> Uses {
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
