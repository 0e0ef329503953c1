//! What ptec refuses around complex tensors, random numbers and device
//! copies: each a compile-time error naming what is wrong, never code that
//! would read a complex element as a real one.
use ptec::ir::{Instruction, Method, ScalarType, Value};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(name),
    )
    .unwrap()
}

/// Compiles `name` after `edit` changes its first method; the error text.
fn refused(name: &str, edit: impl FnOnce(&mut Method)) -> String {
    let bytes = fixture(name);
    let mut loaded = ptec::load(&bytes, &[]).unwrap();
    edit(&mut loaded.program.as_mut().unwrap().methods[0]);
    match ptec::generate(&loaded, &ptec::Options::new()) {
        Ok(_) => panic!("{name} compiled after the edit"),
        Err(e) => e.to_string(),
    }
}

/// Renames the operator `from` (`name`, `overload`) to `to`.
fn rename(m: &mut Method, from: &str, to: (&str, &str)) {
    let op = m.operators.iter_mut().find(|o| o.full_name() == from).unwrap();
    (op.name, op.overload) = (to.0.to_string(), to.1.to_string());
}

/// The arguments of the first call of `op`.
fn args_of(m: &Method, op: &str) -> Vec<usize> {
    m.instructions
        .iter()
        .find_map(|i| match i {
            Instruction::Kernel { op: k, args } if m.operators[*k].full_name() == op => Some(args.clone()),
            _ => None,
        })
        .unwrap()
}

fn tensor(m: &mut Method, v: usize) -> &mut ptec::ir::Tensor {
    match &mut m.values[v] {
        Value::Tensor(t) => t,
        other => panic!("value {v} is {other:?}"),
    }
}

#[test]
fn the_fixtures_compile_as_exported() {
    for name in ["complex.pte", "complex_build.pte", "random.pte", "device_copies.pte"] {
        let bytes = fixture(name);
        let loaded = ptec::load(&bytes, &[]).unwrap();
        ptec::generate(&loaded, &ptec::Options::new()).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn complex_tensors_go_only_to_the_complex_operators() {
    // A real operator given a complex tensor (a negation of the conjugate's
    // input, say) is refused: its emitter assumes real elements.
    let e = refused("complex.pte", |m| {
        rename(m, "aten::_conj_physical.out", ("aten::neg", "out"))
    });
    assert!(
        e.contains("is complex") && e.contains("ptec computes with complex tensors only in"),
        "{e}"
    );
    assert!(e.contains("aten::neg.out"), "{e}");
    // So is a device copy of one.
    let e = refused("complex.pte", |m| {
        rename(m, "aten::_conj_physical.out", ("et_copy::_h2d_copy", "out"))
    });
    assert!(e.contains("ptec computes with complex tensors only in"), "{e}");
}

#[test]
fn parts_must_have_the_part_type_and_a_last_dim_of_two() {
    let e = refused("complex.pte", |m| {
        let out = args_of(m, "aten::view_as_real_copy.out")[1];
        let t = tensor(m, out);
        t.dtype = if t.dtype == ScalarType::Half {
            ScalarType::Float
        } else {
            ScalarType::Half
        };
    });
    assert!(e.contains("the parts of"), "{e}");
    let e = refused("complex_build.pte", |m| {
        let x = args_of(m, "aten::view_as_complex_copy.out")[0];
        let t = tensor(m, x);
        *t.sizes.last_mut().unwrap() = 1;
    });
    assert!(e.contains("adds a last dim of 2"), "{e}");
    // The conjugate of a real tensor is not what ExecuTorch's kernel
    // takes, nor what the exporter writes.
    let e = refused("complex.pte", |m| {
        let [x, out, ..] = args_of(m, "aten::_conj_physical.out")[..] else {
            unreachable!()
        };
        for v in [x, out] {
            tensor(m, v).dtype = ScalarType::Float;
        }
    });
    assert!(e.contains("a complex dtype is expected"), "{e}");
}

#[test]
fn random_draws_need_float_outputs_of_the_sizes_given() {
    let e = refused("random.pte", |m| {
        let out = args_of(m, "aten::rand.out")[1];
        tensor(m, out).dtype = ScalarType::Int;
    });
    assert!(e.contains("supported"), "{e}");
    let e = refused("random.pte", |m| {
        let out = args_of(m, "aten::randn.out")[1];
        tensor(m, out).sizes[0] += 1;
    });
    assert!(e.contains("is not output value"), "{e}");
}

#[test]
fn device_copies_convert_nothing() {
    let e = refused("device_copies.pte", |m| {
        let out = args_of(m, "et_copy::_h2d_copy.out")[1];
        tensor(m, out).dtype = ScalarType::Double;
    });
    assert!(e.contains("a device copy moves bytes without converting them"), "{e}");
}
