//! What the IR-to-IR passes add to a method: values, operators and calls.
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
