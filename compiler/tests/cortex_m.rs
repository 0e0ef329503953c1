//! The Cortex-M backend's operators refuse what their kernels cannot take
//! with a compile error naming the instruction, never a panic: programs of
//! examples/cortex-m/models with one argument or operator changed.
use ptec::ir::{Instruction, Method, Value};

fn resnet8() -> Vec<u8> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cortex-m/models");
    std::fs::read(dir.join("resnet8_cortex_m.bpte")).unwrap()
}

/// Compiles the program after `edit`; the error's text, if any.
fn compile_with(edit: impl Fn(&mut Method)) -> Result<(), String> {
    let bytes = resnet8();
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
fn an_add_of_two_shapes_is_refused() {
    let err = compile_with(|m| {
        let (_, conv) = first_call(m, "cortex_m::quantized_conv2d.out");
        let (i, _) = first_call(m, "cortex_m::quantized_add.out");
        if let Instruction::Kernel { args, .. } = &mut m.instructions[i] {
            args[4] = conv[1]; // the other operand: a convolution's weight
        }
    })
    .unwrap_err();
    assert!(err.contains("must have one shape and layout"), "{err}");
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
