//! The bundled-program test harness: run a method on a test case through the
//! dynamic interface and compare its outputs with the expected ones.
use crate::{Error, Model, ScalarType, Value};
use core::fmt;

/// Elementwise tolerance: pass when `|got - want| <= atol + rtol * |want|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance { rtol: 1e-4, atol: 1e-5 }
    }
}

/// One element that differs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ElementMismatch {
    pub index: usize,
    pub expected: f64,
    pub got: f64,
}

/// How many mismatching elements a report lists.
pub const REPORTED_MISMATCHES: usize = 4;

/// Why a test case failed.
#[derive(Clone, Debug, PartialEq)]
pub enum CaseFailure {
    /// Setting an input or executing failed.
    Error(Error),
    /// Output `output` is of another kind than expected.
    Kind { output: usize },
    /// Output `output` has another dtype.
    Dtype {
        output: usize,
        expected: ScalarType,
        got: ScalarType,
    },
    /// Output `output` has other sizes.
    Sizes { output: usize },
    /// A scalar output differs.
    Scalar { output: usize, expected: f64, got: f64 },
    /// Elements of tensor output `output` differ: `count` of them, the first
    /// ones listed.
    Elements {
        output: usize,
        count: usize,
        first: [Option<ElementMismatch>; REPORTED_MISMATCHES],
    },
}

impl From<Error> for CaseFailure {
    fn from(e: Error) -> Self {
        CaseFailure::Error(e)
    }
}

impl fmt::Display for CaseFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaseFailure::Error(e) => write!(f, "error: {e}"),
            CaseFailure::Kind { output } => write!(f, "output {output}: value of another kind than expected"),
            CaseFailure::Dtype { output, expected, got } => {
                write!(f, "output {output}: expected dtype {expected}, got {got}")
            }
            CaseFailure::Sizes { output } => write!(f, "output {output}: sizes differ"),
            CaseFailure::Scalar { output, expected, got } => {
                write!(f, "output {output}: expected {expected}, got {got}")
            }
            CaseFailure::Elements { output, count, first } => {
                write!(f, "output {output}: {count} element(s) differ")?;
                for m in first.iter().flatten() {
                    write!(f, "; [{}] expected {}, got {}", m.index, m.expected, m.got)?;
                }
                Ok(())
            }
        }
    }
}

/// True when `got` is within tolerance of `want` (NaN equals NaN;
/// infinities must match exactly).
pub fn close(got: f64, want: f64, tol: Tolerance) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return want == got;
    }
    (got - want).abs() <= tol.atol + tol.rtol * want.abs()
}

/// Compares one output with its expected value. Integer and bool tensors
/// must be equal; float tensors within `tol`.
// The failure carries its first mismatches inline: there may be no heap.
#[allow(clippy::result_large_err)]
pub fn compare(output: usize, got: &Value<'_>, want: &Value<'_>, tol: Tolerance) -> Result<(), CaseFailure> {
    match (got, want) {
        (Value::Tensor(g), Value::Tensor(w)) => {
            if g.dtype != w.dtype {
                return Err(CaseFailure::Dtype {
                    output,
                    expected: w.dtype,
                    got: g.dtype,
                });
            }
            if g.sizes != w.sizes {
                return Err(CaseFailure::Sizes { output });
            }
            let exact = !g.dtype.is_float() && !g.dtype.is_complex();
            let mut count = 0;
            let mut first = [None; REPORTED_MISMATCHES];
            // Element by element in row-major order, each read where its
            // tensor's dim order stores it.
            for i in 0..w.numel() {
                let (gi, wi) = (g.storage_index(i), w.storage_index(i));
                // A complex element: both parts within tolerance; a
                // mismatch reports the first part that is not.
                if let (Some(a), Some(b)) = (g.get_complex(gi), w.get_complex(wi)) {
                    let (ok, got, want) = if close(a.0, b.0, tol) {
                        (close(a.1, b.1, tol), a.1, b.1)
                    } else {
                        (false, a.0, b.0)
                    };
                    if !ok {
                        if count < REPORTED_MISMATCHES {
                            first[count] = Some(ElementMismatch {
                                index: i,
                                expected: want,
                                got,
                            });
                        }
                        count += 1;
                    }
                    continue;
                }
                let ok = if exact {
                    match (g.get_i64(gi), w.get_i64(wi)) {
                        (Some(a), Some(b)) => a == b,
                        _ => false,
                    }
                } else {
                    match (g.get_f64(gi), w.get_f64(wi)) {
                        (Some(a), Some(b)) => close(a, b, tol),
                        _ => false,
                    }
                };
                if !ok {
                    if count < REPORTED_MISMATCHES {
                        first[count] = Some(ElementMismatch {
                            index: i,
                            expected: w.get_f64(wi).unwrap_or(f64::NAN),
                            got: g.get_f64(gi).unwrap_or(f64::NAN),
                        });
                    }
                    count += 1;
                }
            }
            if count == 0 {
                Ok(())
            } else {
                Err(CaseFailure::Elements { output, count, first })
            }
        }
        (Value::Int(g), Value::Int(w)) if g == w => Ok(()),
        (Value::Int(g), Value::Int(w)) => Err(CaseFailure::Scalar {
            output,
            expected: *w as f64,
            got: *g as f64,
        }),
        (Value::Bool(g), Value::Bool(w)) if g == w => Ok(()),
        (Value::Bool(g), Value::Bool(w)) => Err(CaseFailure::Scalar {
            output,
            expected: *w as u8 as f64,
            got: *g as u8 as f64,
        }),
        (Value::Double(g), Value::Double(w)) if close(*g, *w, tol) => Ok(()),
        (Value::Double(g), Value::Double(w)) => Err(CaseFailure::Scalar {
            output,
            expected: *w,
            got: *g,
        }),
        (Value::None, Value::None) => Ok(()),
        _ => Err(CaseFailure::Kind { output }),
    }
}

/// Runs one test case: sets every input, executes, compares every output.
/// Stateful methods keep their state between calls: run a suite's cases in
/// order on one instance.
#[allow(clippy::result_large_err)]
pub fn run_case(
    model: &mut dyn Model,
    method: usize,
    inputs: &[Value<'_>],
    expected: &[Value<'_>],
    tol: Tolerance,
) -> Result<(), CaseFailure> {
    run_case_with(model, method, inputs, expected, tol, None)
}

/// [`run_case`], the execution reported to `tracer` (see
/// [`Model::execute_traced`]).
#[allow(clippy::result_large_err)]
pub fn run_case_traced(
    model: &mut dyn Model,
    method: usize,
    inputs: &[Value<'_>],
    expected: &[Value<'_>],
    tol: Tolerance,
    tracer: &mut dyn crate::trace::Tracer,
) -> Result<(), CaseFailure> {
    run_case_with(model, method, inputs, expected, tol, Some(tracer))
}

#[allow(clippy::result_large_err)]
fn run_case_with(
    model: &mut dyn Model,
    method: usize,
    inputs: &[Value<'_>],
    expected: &[Value<'_>],
    tol: Tolerance,
    tracer: Option<&mut dyn crate::trace::Tracer>,
) -> Result<(), CaseFailure> {
    for (i, v) in inputs.iter().enumerate() {
        model.set_input(method, i, *v)?;
    }
    match tracer {
        Some(t) => model.execute_traced(method, t)?,
        None => model.execute(method)?,
    }
    let meta = model.methods().get(method).ok_or(Error::NoSuchMethod)?;
    if meta.num_outputs() != expected.len() {
        return Err(CaseFailure::Error(Error::IndexOutOfRange {
            what: "expected output",
            index: expected.len(),
            len: meta.num_outputs(),
        }));
    }
    for (i, want) in expected.iter().enumerate() {
        let got = model.output(method, i)?;
        compare(i, &got, want, tol)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TensorRef;

    #[test]
    fn tolerance_rule() {
        let t = Tolerance { rtol: 1e-4, atol: 1e-5 };
        // 1e-5 + 1e-4 * 1.0 = 1.1e-4 allowed
        assert!(close(1.0001, 1.0, t));
        assert!(!close(1.0002, 1.0, t));
        assert!(close(f64::NAN, f64::NAN, t));
        assert!(!close(0.0, f64::NAN, t));
        assert!(close(f64::INFINITY, f64::INFINITY, t));
        assert!(!close(f64::NEG_INFINITY, f64::INFINITY, t));
        assert!(!close(1e300, f64::INFINITY, t));
    }

    #[test]
    fn tensors_compare_by_element_whatever_their_dim_orders() {
        // [[1, 2, 3], [4, 5, 6]] row-major, and column-major (dim order [1, 0]).
        let rows = [1i64, 2, 3, 4, 5, 6];
        let cols = [1i64, 4, 2, 5, 3, 6];
        let want = Value::Tensor(TensorRef::from_slice(&[2, 3], &rows));
        let mut t = TensorRef::from_slice(&[2, 3], &cols);
        t.dim_order = &[1, 0];
        let tol = Tolerance { rtol: 0.0, atol: 0.0 };
        assert_eq!(compare(0, &Value::Tensor(t), &want, tol), Ok(()));
        // The same bytes read in the default order differ.
        let plain = Value::Tensor(TensorRef::from_slice(&[2, 3], &cols));
        assert!(compare(0, &plain, &want, tol).is_err());
        assert_eq!(
            (0..6).map(|i| t.storage_index(i)).collect::<std::vec::Vec<_>>(),
            [0, 2, 4, 1, 3, 5]
        );
    }

    #[test]
    fn reports_first_mismatches() {
        let want = [1.0f32, 2.0, 3.0];
        let got = [1.0f32, 2.5, 3.0];
        let s = [3usize];
        let w = Value::Tensor(TensorRef::from_slice(&s, &want));
        let g = Value::Tensor(TensorRef::from_slice(&s, &got));
        let err = compare(0, &g, &w, Tolerance::default()).unwrap_err();
        match err {
            CaseFailure::Elements { count, first, .. } => {
                assert_eq!(count, 1);
                assert_eq!(
                    first[0],
                    Some(ElementMismatch {
                        index: 1,
                        expected: 2.0,
                        got: 2.5
                    })
                );
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(compare(0, &w, &w, Tolerance::default()).is_ok());
    }

    #[test]
    fn integers_exact_and_shapes_checked() {
        let a = [5i64, 7];
        let b = [5i64, 8];
        let s = [2usize];
        let s1 = [1usize, 2];
        let ta = Value::Tensor(TensorRef::from_slice(&s, &a));
        let tb = Value::Tensor(TensorRef::from_slice(&s, &b));
        let tc = Value::Tensor(TensorRef::from_slice(&s1, &a));
        assert!(compare(0, &ta, &tb, Tolerance { rtol: 1.0, atol: 1.0 }).is_err());
        assert_eq!(
            compare(0, &ta, &tc, Tolerance::default()),
            Err(CaseFailure::Sizes { output: 0 })
        );
        assert!(compare(0, &Value::Int(3), &Value::Int(3), Tolerance::default()).is_ok());
        assert!(compare(0, &Value::Int(3), &Value::Double(3.0), Tolerance::default()).is_err());
    }

    #[test]
    fn complex_elements_compare_both_parts() {
        use crate::{f16, Complex};
        let s = [2usize];
        let want = [Complex { re: 1.0f32, im: 2.0 }, Complex { re: -3.0, im: 0.5 }];
        let near = [Complex { re: 1.0f32, im: 2.0 }, Complex { re: -3.0, im: 0.50001 }];
        let imag_off = [Complex { re: 1.0f32, im: 2.0 }, Complex { re: -3.0, im: -0.5 }];
        let tol = Tolerance { rtol: 1e-4, atol: 1e-5 };
        let want = Value::Tensor(TensorRef::from_slice(&s, &want));
        let near = Value::Tensor(TensorRef::from_slice(&s, &near));
        let imag_off = Value::Tensor(TensorRef::from_slice(&s, &imag_off));
        assert!(compare(0, &near, &want, tol).is_ok());
        match compare(0, &imag_off, &want, tol) {
            Err(CaseFailure::Elements { count: 1, first, .. }) => {
                assert_eq!(
                    first[0],
                    Some(ElementMismatch {
                        index: 1,
                        expected: 0.5,
                        got: -0.5
                    })
                );
            }
            other => panic!("{other:?}"),
        }
        // complex32: f16 parts.
        let h = [Complex {
            re: f16::from_f32(1.5),
            im: f16::from_f32(-2.0),
        }];
        let th = TensorRef::from_slice(&s[..1], &h);
        assert_eq!(th.dtype, ScalarType::ComplexHalf);
        assert_eq!(th.get_complex(0), Some((1.5, -2.0)));
        assert_eq!(th.get_f64(0), None);
    }
}
