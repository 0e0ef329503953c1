//! What the IR-to-IR passes add to a method: values, operators and calls.
use crate::analysis::alias::share_bytes;
use crate::analysis::uses::Uses;
use crate::ir::*;

/// Appends `v` to the method's values; returns its index.
pub(crate) fn push_value(m: &mut Method, v: Value) -> usize {
    m.values.push(v);
    m.values.len() - 1
}

/// A new static, contiguous `f32` tensor.
pub(crate) fn push_f32_tensor(m: &mut Method, sizes: Vec<usize>, placement: Placement) -> usize {
    push_tensor(m, ScalarType::Float, sizes, placement)
}

/// A new static, contiguous tensor of `dtype`.
pub(crate) fn push_tensor(m: &mut Method, dtype: ScalarType, sizes: Vec<usize>, placement: Placement) -> usize {
    let rank = sizes.len();
    push_value(
        m,
        Value::Tensor(Tensor {
            dtype,
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

/// A run of instructions that becomes one call.
pub(crate) struct Fused {
    pub len: usize,
    pub name: &'static str,
    pub args: Vec<usize>,
    /// What the call reads as it writes `out`: an `out` planned on the
    /// bytes of one of them loses its plan (see the module's notes).
    pub reads: Vec<usize>,
    pub out: usize,
    /// Whether the call's debug outputs are logged as the run's last
    /// instruction's (its result is that one's), else as the first's.
    pub logged_as_last: bool,
}

impl Fused {
    /// A chain of `len` instructions as one call of `name` with `args`,
    /// which reads its first argument and writes its last.
    pub fn chain(len: usize, name: &'static str, args: Vec<usize>, logged_as_last: bool) -> Self {
        Fused {
            len,
            name,
            reads: vec![args[0]],
            out: args[args.len() - 1],
            args,
            logged_as_last,
        }
    }
}

/// Replaces the runs `find` finds (scanning from the first instruction,
/// past each run found) by their calls; the call keeps its first
/// instruction's origin and stack frames. An output planned on bytes the
/// call reads loses its plan. Methods with jumps are left as they are.
pub(crate) fn fuse_runs(m: &mut Method, find: impl Fn(&Method, &Uses, usize) -> Option<Fused>) {
    if m.has_jumps() {
        return;
    }
    let uses = Uses::of(m);
    let mut runs = Vec::new();
    let mut n = 0;
    while n < m.instructions.len() {
        match find(m, &uses, n) {
            Some(run) => {
                let len = run.len;
                runs.push((n, run));
                n += len;
            }
            None => n += 1,
        }
    }
    if runs.is_empty() {
        return;
    }
    let old = std::mem::take(&mut m.instructions);
    let mut traces = m.stacktraces.take();
    // A run keeps its first instruction's origin, as its stack trace.
    let mut origins: Vec<Origin> = (0..old.len()).map(|n| m.origin(n)).collect();
    let mut code = Vec::with_capacity(old.len());
    let mut moved = Vec::new();
    let mut next = 0;
    for (start, run) in runs {
        code.extend_from_slice(&old[next..start]);
        if run.reads.iter().any(|&r| share_bytes(m, r, run.out)) {
            moved.push(run.out);
        }
        code.push(kernel_call(m, run.name, run.args));
        if let Some(t) = traces.as_mut() {
            for _ in 1..run.len {
                t.remove(code.len());
            }
        }
        let last = origins[code.len() + run.len - 2];
        for _ in 1..run.len {
            origins.remove(code.len());
        }
        if run.logged_as_last {
            origins[code.len() - 1].logged_as = Some(last.logged_as.unwrap_or(last.instruction));
        }
        next = start + run.len;
    }
    code.extend_from_slice(&old[next..]);
    m.instructions = code;
    m.stacktraces = traces;
    m.origins = origins;
    unplan(m, moved);
}

/// Takes the planned bytes of tensors `values` written where their plan
/// did not expect: the next stage gives them new ones.
pub(crate) fn unplan(m: &mut Method, values: impl IntoIterator<Item = usize>) {
    for v in values {
        if let Some(Value::Tensor(t)) = m.values.get_mut(v) {
            t.placement = Placement::Unplanned;
        }
    }
}
