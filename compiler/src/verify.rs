//! Verification of a program, once, at compile time.
//!
//! Covers what ExecuTorch checks at `Program::load` (internal consistency)
//! and method load, plus what only an ahead-of-time compiler can afford to
//! check: every index in range, every planned tensor inside its buffer and
//! aligned, every list item of the right kind, jump targets valid, and test
//! cases that fit their methods. All problems are reported, not only the
//! first.
use crate::error::{Diagnostic, ErrorKind, Errors, Location, Result};
use crate::ir::*;
use std::collections::HashSet;

/// Checks `program` (and the test suites of its bundle, if any).
pub fn verify_program(program: &Program, suites: &[TestSuite]) -> Result<()> {
    let mut v = Verifier { errors: Vec::new() };
    let mut names = HashSet::new();
    for m in &program.methods {
        if !names.insert(m.name.as_str()) {
            v.err(ErrorKind::DuplicateMethod, Location::method(&m.name));
        }
        v.method(m);
    }
    for s in suites {
        match program.methods.iter().find(|m| m.name == s.method) {
            Some(m) => v.suite(m, s),
            None => v.err(
                ErrorKind::BadTestCase {
                    detail: format!(
                        "the bundle tests method `{}`, which the program does not have",
                        s.method
                    ),
                },
                Location::default(),
            ),
        }
    }
    if v.errors.is_empty() {
        Ok(())
    } else {
        Err(Errors(v.errors))
    }
}

struct Verifier {
    errors: Vec<Diagnostic>,
}

fn in_range(i: usize, len: usize) -> bool {
    i < len
}

impl Verifier {
    fn err(&mut self, kind: ErrorKind, at: Location) {
        self.errors.push(Diagnostic::new(kind, at));
    }

    fn value_index(&mut self, m: &Method, i: usize, what: &'static str, at: &Location) -> Option<&'static str> {
        if in_range(i, m.values.len()) {
            Some(m.values[i].kind())
        } else {
            self.err(
                ErrorKind::IndexOutOfRange {
                    what,
                    index: i as i64,
                    len: m.values.len(),
                },
                at.clone(),
            );
            None
        }
    }

    fn method(&mut self, m: &Method) {
        let at = Location::method(&m.name);
        for (i, v) in m.values.iter().enumerate() {
            self.value(m, v, at.clone().value(i));
        }
        for &i in &m.inputs {
            if let Some(kind) = self.value_index(m, i, "input value", &at) {
                if !matches!(kind, "Tensor" | "Int" | "Double" | "Bool" | "None") {
                    self.err(
                        ErrorKind::WrongValueKind {
                            expected: "Tensor, Int, Double or Bool input",
                            found: kind,
                        },
                        at.clone().value(i),
                    );
                }
            }
        }
        for &i in &m.outputs {
            self.value_index(m, i, "output value", &at);
        }
        if let Some(st) = &m.stacktraces {
            if st.len() != m.instructions.len() {
                self.err(
                    ErrorKind::BadHeader {
                        what: format!("{} stack traces for {} instructions", st.len(), m.instructions.len()),
                    },
                    at.clone(),
                );
            }
        }
        if !m.origins.is_empty() && m.origins.len() != m.instructions.len() {
            self.err(
                ErrorKind::BadHeader {
                    what: format!("{} origins for {} instructions", m.origins.len(), m.instructions.len()),
                },
                at.clone(),
            );
        }
        for (n, ins) in m.instructions.iter().enumerate() {
            let at = at.clone().instruction(n);
            match ins {
                Instruction::Kernel { op, args } => {
                    if !in_range(*op, m.operators.len()) {
                        self.err(
                            ErrorKind::IndexOutOfRange {
                                what: "operator",
                                index: *op as i64,
                                len: m.operators.len(),
                            },
                            at.clone(),
                        );
                    }
                    for &a in args {
                        self.value_index(m, a, "argument value", &at);
                    }
                }
                Instruction::Delegate { delegate, args } => {
                    if !in_range(*delegate, m.delegates.len()) {
                        self.err(
                            ErrorKind::IndexOutOfRange {
                                what: "delegate",
                                index: *delegate as i64,
                                len: m.delegates.len(),
                            },
                            at.clone(),
                        );
                    }
                    for &a in args {
                        if let Some(kind) = self.value_index(m, a, "argument value", &at) {
                            if matches!(kind, "String") {
                                self.err(
                                    ErrorKind::WrongValueKind {
                                        expected: "delegate argument",
                                        found: kind,
                                    },
                                    at.clone().value(a),
                                );
                            }
                        }
                    }
                }
                Instruction::Move { from, to } => {
                    let f = self.value_index(m, *from, "value", &at);
                    let t = self.value_index(m, *to, "value", &at);
                    if let (Some(f), Some(t)) = (f, t) {
                        if f != t && t != "None" {
                            self.err(
                                ErrorKind::WrongValueKind { expected: t, found: f },
                                at.clone().value(*from),
                            );
                        }
                    }
                }
                Instruction::JumpFalse { cond, destination } => {
                    if let Some(kind) = self.value_index(m, *cond, "value", &at) {
                        let ok = match &m.values[*cond] {
                            Value::Bool(_) => true,
                            Value::Tensor(t) => t.dtype == ScalarType::Bool,
                            _ => false,
                        };
                        if !ok {
                            self.err(
                                ErrorKind::WrongValueKind {
                                    expected: "Bool or bool tensor condition",
                                    found: kind,
                                },
                                at.clone().value(*cond),
                            );
                        }
                    }
                    if *destination > m.instructions.len() {
                        self.err(
                            ErrorKind::IndexOutOfRange {
                                what: "jump destination",
                                index: *destination as i64,
                                len: m.instructions.len() + 1,
                            },
                            at.clone(),
                        );
                    }
                }
                Instruction::Free { value } => {
                    if let Some(kind) = self.value_index(m, *value, "value", &at) {
                        if kind != "Tensor" {
                            self.err(
                                ErrorKind::WrongValueKind {
                                    expected: "Tensor",
                                    found: kind,
                                },
                                at.clone().value(*value),
                            );
                        }
                    }
                }
            }
        }
    }

    fn value(&mut self, m: &Method, v: &Value, at: Location) {
        match v {
            Value::IntList(items) => {
                for &i in items {
                    match m.values.get(i) {
                        Some(Value::Int(_)) => {}
                        Some(other) => self.err(
                            ErrorKind::WrongValueKind {
                                expected: "Int (IntList item)",
                                found: other.kind(),
                            },
                            at.clone(),
                        ),
                        None => self.err(
                            ErrorKind::IndexOutOfRange {
                                what: "IntList item value",
                                index: i as i64,
                                len: m.values.len(),
                            },
                            at.clone(),
                        ),
                    }
                }
            }
            Value::TensorList(items) => {
                for &i in items {
                    self.tensor_item(m, i, "TensorList item value", &at);
                }
            }
            Value::OptionalTensorList(items) => {
                for &i in items.iter().flatten() {
                    self.tensor_item(m, i, "OptionalTensorList item value", &at);
                }
            }
            Value::Tensor(t) => self.tensor(m, t, at),
            _ => {}
        }
    }

    fn tensor_item(&mut self, m: &Method, i: usize, what: &'static str, at: &Location) {
        match m.values.get(i) {
            Some(Value::Tensor(_)) => {}
            Some(other) => self.err(
                ErrorKind::WrongValueKind {
                    expected: "Tensor (list item)",
                    found: other.kind(),
                },
                at.clone(),
            ),
            None => self.err(
                ErrorKind::IndexOutOfRange {
                    what,
                    index: i as i64,
                    len: m.values.len(),
                },
                at.clone(),
            ),
        }
    }

    fn tensor(&mut self, m: &Method, t: &Tensor, at: Location) {
        let rank = t.sizes.len();
        let mut seen = vec![false; rank];
        let perm = t.dim_order.len() == rank
            && t.dim_order.iter().all(|&d| {
                let d = d as usize;
                d < rank && !std::mem::replace(&mut seen[d], true)
            });
        if !perm {
            self.err(
                ErrorKind::BadDimOrder {
                    dim_order: t.dim_order.clone(),
                    rank,
                },
                at.clone(),
            );
        }
        match &t.placement {
            Placement::Planned { buffer, offset } | Placement::Mutable { buffer, offset, .. } => {
                self.planned(m, t, *buffer, *offset, &at)
            }
            _ => {}
        }
    }

    fn planned(&mut self, m: &Method, t: &Tensor, buffer: usize, offset: u64, at: &Location) {
        if buffer == 0 || buffer >= m.buffer_sizes.len() {
            self.err(
                ErrorKind::IndexOutOfRange {
                    what: "planned buffer (memory_id)",
                    index: buffer as i64,
                    len: m.buffer_sizes.len(),
                },
                at.clone(),
            );
            return;
        }
        let size = m.buffer_sizes[buffer];
        let nbytes = t.nbytes() as u64;
        if offset.checked_add(nbytes).is_none_or(|end| end > size) {
            self.err(
                ErrorKind::OutsideBuffer {
                    buffer,
                    offset,
                    nbytes,
                    buffer_size: size,
                },
                at.clone(),
            );
        }
        let align = t.dtype.element_size();
        if !offset.is_multiple_of(align as u64) {
            self.err(ErrorKind::Misaligned { offset, align }, at.clone());
        }
    }

    fn suite(&mut self, m: &Method, s: &TestSuite) {
        let at = Location::method(&m.name);
        for (ci, c) in s.cases.iter().enumerate() {
            if c.inputs.len() != m.inputs.len() {
                self.err(
                    ErrorKind::BadTestCase {
                        detail: format!(
                            "test case {ci} has {} inputs; the method takes {}",
                            c.inputs.len(),
                            m.inputs.len()
                        ),
                    },
                    at.clone(),
                );
            } else {
                for (k, (tv, &vi)) in c.inputs.iter().zip(&m.inputs).enumerate() {
                    if let Some(problem) = input_mismatch(tv, m.values.get(vi)) {
                        self.err(
                            ErrorKind::BadTestCase {
                                detail: format!("test case {ci}, input {k}: {problem}"),
                            },
                            at.clone().value(vi),
                        );
                    }
                }
            }
            if c.expected.len() != m.outputs.len() {
                self.err(
                    ErrorKind::BadTestCase {
                        detail: format!(
                            "test case {ci} has {} expected outputs; the method returns {}",
                            c.expected.len(),
                            m.outputs.len()
                        ),
                    },
                    at.clone(),
                );
            }
        }
    }
}

/// Why a test input does not fit a method input, if it does not.
fn input_mismatch(tv: &TestValue, v: Option<&Value>) -> Option<String> {
    match (tv, v) {
        (TestValue::Tensor { dtype, sizes, .. }, Some(Value::Tensor(t))) => {
            if *dtype != t.dtype {
                return Some(format!("dtype {dtype} differs from the input's {}", t.dtype));
            }
            let fits = sizes.len() == t.sizes.len()
                && match t.dynamism {
                    Dynamism::Static => *sizes == t.sizes,
                    _ => sizes.iter().zip(&t.sizes).all(|(a, b)| a <= b),
                };
            (!fits).then(|| format!("sizes {sizes:?} do not fit the input's {:?}", t.sizes))
        }
        (TestValue::Int(_), Some(Value::Int(_)))
        | (TestValue::Bool(_), Some(Value::Bool(_)))
        | (TestValue::Double(_), Some(Value::Double(_))) => None,
        (_, None) => Some("the input's value index is out of range".into()),
        (tv, Some(v)) => Some(format!("a {tv:?} cannot feed a {} input", v.kind())),
    }
}
