//! Methods that share mutable state (`fixtures/shared_state.pte`, exported
//! with `share_mutable_buffers`: `write`, `push` and `read` hold state in
//! the one buffer ExecuTorch's runtime gives them all, partly the same
//! tensor, partly their own; `plain` holds none). `fixtures/shared_state.calls`
//! holds 63 calls (60 of random methods on random inputs) and the outputs
//! ExecuTorch's runtime gave, in order; they are replayed here through the
//! typed functions and through `Model`, on the stack and boxed, and must
//! agree to the bit.
use ptec_runtime::{Model, TensorRef, Value};

mod shared {
    ptec_macros::include_pte!("fixtures/shared_state.pte", name = Program);
}
use shared::Program;

struct Call {
    method: String,
    input: Vec<f32>,
    output: Vec<f32>,
}

fn floats(hex: &str) -> Vec<f32> {
    hex.split_whitespace()
        .map(|w| f32::from_bits(u32::from_str_radix(w, 16).expect("f32 bits in hex")))
        .collect()
}

fn calls() -> Vec<Call> {
    let calls: Vec<Call> = include_str!("../fixtures/shared_state.calls")
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split(" | ").collect();
            assert_eq!(parts.len(), 3, "{line}");
            Call {
                method: parts[0].to_string(),
                input: floats(parts[1]),
                output: floats(parts[2]),
            }
        })
        .collect();
    assert_eq!(calls.len(), 63);
    calls
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn typed(p: &mut Program, c: &Call) -> Vec<f32> {
    let x = &c.input;
    match c.method.as_str() {
        "write" => p.write(x.as_slice().try_into().unwrap()).unwrap().to_vec(),
        "read" => p.read(x.as_slice().try_into().unwrap()).unwrap().to_vec(),
        "push" => p.push(x.as_slice().try_into().unwrap()).unwrap().to_vec(),
        "plain" => p.plain(x.as_slice().try_into().unwrap()).unwrap().to_vec(),
        other => panic!("no method {other}"),
    }
}

fn dynamic(p: &mut Program, c: &Call, stepwise: bool) -> Vec<f32> {
    let m = p.methods().iter().position(|m| m.name == c.method).unwrap();
    let sizes = [c.input.len()];
    p.set_input(m, 0, Value::Tensor(TensorRef::from_slice(&sizes, &c.input)))
        .unwrap();
    if stepwise {
        while p.step(m).unwrap() == ptec_runtime::Step::Continue {}
    } else {
        p.execute(m).unwrap();
    }
    let Ok(Value::Tensor(t)) = p.output(m, 0) else {
        panic!("{}: no tensor output", c.method)
    };
    t.data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn replay(p: &mut Program, how: &str, mut call: impl FnMut(&mut Program, &Call) -> Vec<f32>) {
    for (n, c) in calls().iter().enumerate() {
        let got = call(p, c);
        assert_eq!(
            bits(&got),
            bits(&c.output),
            "{how}: call {n} ({}): {got:?}, ExecuTorch gave {:?}",
            c.method,
            c.output
        );
    }
}

#[test]
fn typed_functions_share_the_state_as_executorch_does() {
    replay(&mut Program::new(), "typed", typed);
}

#[test]
fn the_model_interface_shares_it_too() {
    replay(&mut Program::new(), "execute", |p, c| dynamic(p, c, false));
    replay(&mut Program::boxed(), "step", |p, c| dynamic(p, c, true));
}

#[test]
fn typed_and_dynamic_calls_mix() {
    let mut p = Program::boxed();
    let mut n = 0;
    replay(&mut p, "mixed", |p, c| {
        n += 1;
        if n % 2 == 0 {
            typed(p, c)
        } else {
            dynamic(p, c, n % 3 == 0)
        }
    });
}

/// A method stopped half-way hands over the state as it left it, as
/// ExecuTorch's one buffer would show it, and takes it back when it goes
/// on; `reset` of one method restores the initial state it holds (`acc`,
/// `hist`), for every method, and leaves the rest (`steps`, only `write`'s).
#[test]
fn steps_and_resets_across_methods() {
    let mut p = Program::new();
    let index = |p: &Program, name: &str| p.methods().iter().position(|m| m.name == name).unwrap();
    let (write, push) = (index(&p, "write"), index(&p, "push"));
    p.set_input(write, 0, Value::Tensor(TensorRef::from_slice(&[4], &[1.0f32; 4])))
        .unwrap();
    assert_eq!(p.step(write).unwrap(), ptec_runtime::Step::Continue);
    // `acc` starts at 0.5; `write` adds 1 somewhere in its steps.
    let seen = p.read(&[2.0; 4]).unwrap().to_vec();
    assert!(seen == [1.0; 4] || seen == [3.0; 4], "{seen:?}");
    while p.step(write).unwrap() == ptec_runtime::Step::Continue {}
    // acc 1.5, steps 1.
    assert_eq!(p.read(&[1.0; 4]).unwrap(), &[1.5; 4]);
    p.reset(push).unwrap();
    assert_eq!(p.read(&[1.0; 4]).unwrap(), &[0.5; 4]);
    // acc 1.5, steps 2.
    assert_eq!(p.write(&[1.0; 4]).unwrap(), &[3.0; 4]);
}

/// With the program's files given at construction and with tracing, the
/// same calls give the same outputs.
mod external {
    ptec_macros::include_pte!(
        "fixtures/shared_state.pte",
        name = Program,
        weights = external,
        trace = true
    );
}

#[test]
fn with_external_files_and_traced_execution() {
    let file = ptec_runtime::Blob::open(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/shared_state.pte")).unwrap();
    let mut p = external::Program::boxed([file]).unwrap();
    struct Count(usize);
    impl ptec_runtime::trace::Tracer for Count {
        fn begin(&mut self, _: ptec_runtime::trace::Origin) {
            self.0 += 1;
        }
    }
    let mut tracer = Count(0);
    for (n, c) in calls().iter().enumerate() {
        let m = p.methods().iter().position(|m| m.name == c.method).unwrap();
        let sizes = [c.input.len()];
        p.set_input(m, 0, Value::Tensor(TensorRef::from_slice(&sizes, &c.input)))
            .unwrap();
        if n % 2 == 0 {
            p.execute_traced(m, &mut tracer).unwrap();
        } else {
            p.execute(m).unwrap();
        }
        let Ok(Value::Tensor(t)) = p.output(m, 0) else { panic!() };
        let got: Vec<f32> = t
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(bits(&got), bits(&c.output), "call {n} ({})", c.method);
    }
    assert!(tracer.0 > 30, "{} instructions traced", tracer.0);
}
