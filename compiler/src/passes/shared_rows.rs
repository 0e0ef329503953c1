//! Dynamically quantized layers called one after another on the same
//! input (a transformer's q, k and v projections, or its gate and up: the
//! LLM export's XNNPACK subgraphs have one such layer per node) each
//! quantized that input's rows before. Now the first of a run quantizes
//! them into a tensor of their own and the others read it:
//! `qd8_fully_connected` becomes [`qd8_fully_connected_shared`]. The rows
//! are the same bytes either way (the layers share kind, `k` and group,
//! so their kernel reads one row layout), and so are the results.
use crate::analysis::alias::share_bytes;
use crate::ir::*;
use crate::names::{qd8_fully_connected as single, qd8_fully_connected_shared as shared};
use crate::passes::rewrite::{kernel_call, push_f32_tensor, push_value};
use ptec_runtime::kernels::qd8::scratch_len;

/// Rewrites every run of two or more such layers in `m`. Methods with
/// jumps are left as they are: a jump into a run would skip its first
/// layer.
pub fn share_quantized_rows(m: &mut Method) {
    if m.has_jumps() {
        return;
    }
    let mut n = 0;
    while n < m.instructions.len() {
        let len = run_at(m, n);
        if len >= 2 {
            rewrite(m, n, len);
        }
        n += len.max(1);
    }
}

/// What layers must share to read one quantization of their input: the
/// input, the group, the weights' and the scales' types.
type Key = (usize, i64, ScalarType, ScalarType);

/// The blockwise layer at instruction `n`: its arguments and its [`Key`].
fn layer(m: &Method, n: usize) -> Option<(&[usize], Key)> {
    let (name, args) = kernel_name(m, m.instructions.get(n)?)?;
    if name != single::NAME || args.len() != single::COUNT {
        return None;
    }
    let tensor = |v: usize| match m.values.get(v) {
        Some(Value::Tensor(t)) => Some(t),
        _ => None,
    };
    let group = match m.values.get(args[3]) {
        Some(&Value::Int(g)) if g > 0 => g,
        _ => return None,
    };
    // A blockwise layer with its kept sums: its rows' layout is fixed by
    // kind, k and group alone.
    tensor(args[single::KEPT])?;
    let (w, s) = (tensor(args[single::WEIGHT])?, tensor(args[single::SCALES])?);
    Some((args, (args[0], group, w.dtype, s.dtype)))
}

/// How many layers from instruction `n` on read rows quantized alike from
/// one input that none of them writes (0 if `n` is not such a layer).
fn run_at(m: &Method, n: usize) -> usize {
    let Some((_, key)) = layer(m, n) else { return 0 };
    let x = key.0;
    let mut len = 0;
    while let Some((args, k)) = layer(m, n + len) {
        let out = args[single::COUNT - 1];
        if k != key || out == x || share_bytes(m, out, x) {
            break;
        }
        len += 1;
    }
    len
}

/// Rewrites the `len` layers from instruction `first` to share one rows
/// tensor, the first making it.
fn rewrite(m: &mut Method, first: usize, len: usize) {
    let (x, group) = {
        let (args, (x, group, ..)) = layer(m, first).expect("a run starts with a layer");
        debug_assert_eq!(args[0], x);
        (x, group as usize)
    };
    let Some(Value::Tensor(t)) = m.values.get(x) else {
        return;
    };
    let k = t.sizes.last().copied().unwrap_or(0);
    let rows = t.numel().checked_div(k).unwrap_or(0);
    let words = push_f32_tensor(m, vec![scratch_len(rows, k, group)], Placement::Unplanned);
    for n in first..first + len {
        let Some((args, _)) = layer(m, n) else { return };
        let mut args = args.to_vec();
        let out = args.pop().expect("a layer has arguments");
        let fresh = push_value(m, Value::Bool(n == first));
        args.extend([words, fresh, out]);
        m.instructions[n] = kernel_call(m, shared::NAME, args);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::rewrite::push_tensor;

    /// A method of `layers` blockwise layers in a row, layer `i` reading
    /// input `inputs[i]` (of two, `[3, 64]` each) with group `groups[i]`,
    /// each writing its own `[3, 16]` output, all planned apart.
    fn method(inputs: &[usize], groups: &[i64]) -> (Method, Vec<usize>) {
        let mut m = crate::analysis::test_methods::empty(1 << 20);
        let planned = |m: &mut Method, sizes: Vec<usize>, at: u64| {
            push_f32_tensor(m, sizes, Placement::Planned { buffer: 1, offset: at })
        };
        let xs = [planned(&mut m, vec![3, 64], 0), planned(&mut m, vec![3, 64], 1024)];
        let mut outs = Vec::new();
        for (i, (&input, &group)) in inputs.iter().zip(groups).enumerate() {
            let w = push_tensor(&mut m, ScalarType::Byte, vec![16, 32], Placement::Unplanned);
            let s = push_tensor(
                &mut m,
                ScalarType::BFloat16,
                vec![16 * 64 / group as usize],
                Placement::Unplanned,
            );
            let kept = push_f32_tensor(&mut m, vec![4096], Placement::Unplanned);
            let group = push_value(&mut m, Value::Int(group));
            let (null, min, max) = (
                push_value(&mut m, Value::Null),
                push_value(&mut m, Value::Double(f64::NEG_INFINITY)),
                push_value(&mut m, Value::Double(f64::INFINITY)),
            );
            let out = planned(&mut m, vec![3, 16], 4096 + 256 * i as u64);
            outs.push(out);
            let call = kernel_call(
                &mut m,
                single::NAME,
                vec![xs[input], w, s, group, null, min, max, kept, out],
            );
            m.instructions.push(call);
        }
        (m, outs)
    }

    fn names(m: &Method) -> Vec<String> {
        m.instructions
            .iter()
            .map(|i| kernel_name(m, i).map(|(n, _)| n).unwrap_or_default())
            .collect()
    }

    /// The `(rows, fresh)` arguments of shared layer `n`.
    fn rows_of(m: &Method, n: usize) -> (usize, Option<bool>) {
        let (_, args) = kernel_name(m, &m.instructions[n]).unwrap();
        let fresh = match m.values[args[shared::FRESH]] {
            Value::Bool(b) => Some(b),
            _ => None,
        };
        (args[shared::ROWS], fresh)
    }

    #[test]
    fn layers_on_one_input_share_its_rows() {
        let (mut m, _) = method(&[0, 0, 0, 1, 1], &[32, 32, 32, 32, 32]);
        share_quantized_rows(&mut m);
        assert_eq!(names(&m), vec![shared::NAME.to_string(); 5]);
        let (first, second) = (rows_of(&m, 0).0, rows_of(&m, 3).0);
        assert_ne!(first, second);
        assert_eq!(
            (0..5).map(|n| rows_of(&m, n)).collect::<Vec<_>>(),
            vec![
                (first, Some(true)),
                (first, Some(false)),
                (first, Some(false)),
                (second, Some(true)),
                (second, Some(false))
            ]
        );
        // Three rows of 64 inputs in groups of 32.
        let Value::Tensor(t) = &m.values[first] else { panic!() };
        assert_eq!(t.sizes, vec![scratch_len(3, 64, 32)]);
        assert_eq!(t.placement, Placement::Unplanned);
    }

    #[test]
    fn other_inputs_or_groups_and_lone_layers_are_left() {
        for (inputs, groups) in [
            (&[0, 1, 0][..], &[32, 32, 32][..]),
            (&[0, 0][..], &[32, 16][..]),
            (&[0][..], &[32][..]),
        ] {
            let (mut m, _) = method(inputs, groups);
            share_quantized_rows(&mut m);
            assert_eq!(
                names(&m),
                vec![single::NAME.to_string(); inputs.len()],
                "{inputs:?} {groups:?}"
            );
        }
    }

    #[test]
    fn a_layer_writing_over_the_input_ends_the_run() {
        let (mut m, outs) = method(&[0, 0, 0], &[32, 32, 32]);
        // The second layer's output on the input's bytes.
        let Value::Tensor(t) = &mut m.values[outs[1]] else {
            panic!()
        };
        t.placement = Placement::Planned { buffer: 1, offset: 0 };
        share_quantized_rows(&mut m);
        assert_eq!(names(&m), vec![single::NAME.to_string(); 3]);
    }
}
