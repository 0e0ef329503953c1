//! The Cortex-M backend's operators refuse what their kernels cannot take
//! with a compile error naming the instruction, never a panic: programs of
//! examples/cortex-m/models with one argument or operator changed.
use ptec::ir::{Instruction, Method, Value};

fn model(name: &str) -> Vec<u8> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cortex-m/models");
    std::fs::read(dir.join(format!("{name}.bpte"))).unwrap()
}

/// Compiles ResNet-8's program after `edit`; the error's text, if any.
fn compile_with(edit: impl Fn(&mut Method)) -> Result<(), String> {
    compile_model_with("resnet8_cortex_m", edit)
}

/// Compiles the program `name` after `edit`.
fn compile_model_with(name: &str, edit: impl Fn(&mut Method)) -> Result<(), String> {
    let bytes = model(name);
    let mut loaded = ptec::load(&bytes, &[]).unwrap();
    edit(&mut loaded.program.as_mut().unwrap().methods[0]);
    let options = ptec::Options::new();
    ptec::transform(&mut loaded, &options).map_err(|e| e.to_string())?;
    ptec::generate(&loaded, &options).map(|_| ()).map_err(|e| e.to_string())
}

/// The instruction calling `op` first, and its arguments.
fn first_call(m: &Method, op: &str) -> (usize, Vec<usize>) {
    m.instructions
        .iter()
        .enumerate()
        .find_map(|(i, ins)| match ins {
            Instruction::Kernel { op: o, args } if m.operators[*o].full_name() == op => Some((i, args.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no call of {op}"))
}

fn set_int(m: &mut Method, value: usize, x: i64) {
    assert!(matches!(m.values[value], Value::Int(_)));
    m.values[value] = Value::Int(x);
}

#[test]
fn the_program_compiles_as_exported() {
    compile_with(|_| {}).unwrap();
}

#[test]
fn a_shift_out_of_range_is_refused() {
    let err = compile_with(|m| {
        let (_, args) = first_call(m, "cortex_m::quantized_avg_pool2d.out");
        set_int(m, args[7], 40);
    })
    .unwrap_err();
    assert!(
        err.contains("quantized_avg_pool2d") && err.contains("shift 40"),
        "{err}"
    );
}

#[test]
fn inverted_activation_bounds_are_refused() {
    let err = compile_with(|m| {
        let (_, args) = first_call(m, "cortex_m::quantized_linear.out");
        set_int(m, args[9], -100); // activation_max
        set_int(m, args[10], 100); // activation_min
    })
    .unwrap_err();
    assert!(
        err.contains("activation_min 100 is greater than activation_max -100"),
        "{err}"
    );
}

#[test]
fn an_add_of_shapes_that_do_not_broadcast_is_refused() {
    let err = compile_with(|m| {
        let (_, conv) = first_call(m, "cortex_m::quantized_conv2d.out");
        let (i, _) = first_call(m, "cortex_m::quantized_add.out");
        if let Instruction::Kernel { args, .. } = &mut m.instructions[i] {
            args[4] = conv[1]; // the other operand: a convolution's weight
        }
    })
    .unwrap_err();
    assert!(err.contains("does not broadcast"), "{err}");
}

#[test]
fn an_operator_the_backend_does_not_have_is_named() {
    let err = compile_with(|m| {
        let (i, _) = first_call(m, "cortex_m::quantized_add.out");
        let Instruction::Kernel { op, .. } = m.instructions[i] else {
            unreachable!()
        };
        m.operators[op].name = "cortex_m::quantized_sub".into();
    })
    .unwrap_err();
    assert!(err.contains("cortex_m::quantized_sub"), "{err}");
}

#[test]
fn the_other_operators_programs_compile_as_exported() {
    for name in [
        "mul_cortex_m",
        "broadcast_add_mul_cortex_m",
        "div_cortex_m",
        "activations_cortex_m",
        "softmax_cortex_m",
        "min_max_cortex_m",
        "max_pool_cortex_m",
        "max_pool_cortex_m_nhwc",
        "transpose_conv_cortex_m",
        "transpose_conv_cortex_m_nhwc",
        "bmm_cortex_m",
    ] {
        compile_model_with(name, |_| {}).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn a_softmax_of_another_output_zero_point_is_refused() {
    let err = compile_model_with("softmax_cortex_m", |m| {
        let (_, args) = first_call(m, "cortex_m::softmax.out");
        set_int(m, args[3], 0);
    })
    .unwrap_err();
    assert!(
        err.contains("cortex_m::softmax") && err.contains("output zero point is 0"),
        "{err}"
    );
}

#[test]
fn a_max_pool_changing_the_zero_point_is_refused() {
    let err = compile_model_with("max_pool_cortex_m", |m| {
        let (_, args) = first_call(m, "cortex_m::quantized_max_pool2d.out");
        set_int(m, args[7], 17);
    })
    .unwrap_err();
    assert!(err.contains("the output's 17 differ"), "{err}");
}

#[test]
fn a_batch_matmul_of_mismatched_operands_is_refused() {
    let err = compile_model_with("bmm_cortex_m", |m| {
        let (i, args) = first_call(m, "cortex_m::quantized_batch_matmul.out");
        if let Instruction::Kernel { args: a, .. } = &mut m.instructions[i] {
            a[2] = args[0]; // [2, 3, 4] by itself: an output of [2, 3, 3]
        }
    })
    .unwrap_err();
    assert!(err.contains("quantized_batch_matmul"), "{err}");
}

#[test]
fn a_multiply_of_shapes_that_do_not_broadcast_is_refused() {
    let err = compile_model_with("broadcast_add_mul_cortex_m", |m| {
        let (_, add) = first_call(m, "cortex_m::quantized_add.out");
        let (i, _) = first_call(m, "cortex_m::quantized_mul.out");
        if let Instruction::Kernel { args, .. } = &mut m.instructions[i] {
            args[7] = add[4]; // the output: the [1, 4, 1, 1] operand
        }
    })
    .unwrap_err();
    assert!(err.contains("does not broadcast"), "{err}");
}

#[test]
fn a_look_up_table_of_the_wrong_size_is_refused() {
    let err = compile_model_with("activations_cortex_m", |m| {
        let (i, _) = first_call(m, "cortex_m::quantized_activation.out");
        if let Instruction::Kernel { args, .. } = &mut m.instructions[i] {
            args[1] = args[0]; // the input, [1, 4, 3, 5], as the table
        }
    })
    .unwrap_err();
    assert!(err.contains("expected 256 values"), "{err}");
}
