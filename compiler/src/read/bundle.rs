//! Reads bundled programs, BP04 (`.bp`) and BP08 (`.bpte`): the embedded
//! program and its test cases.
use crate::error::{Diagnostic, ErrorKind, Errors, Location, Result};
use crate::ir::*;
use crate::read::program::{read_program, verifier_options};
use ptec_schema::{bp04, bp08};

fn offset_in(file: &[u8], v: &[u8]) -> usize {
    (v.as_ptr() as usize).wrapping_sub(file.as_ptr() as usize)
}

fn tensor_value(
    file: &[u8],
    code: i8,
    sizes: Option<flatbuffers::Vector<'_, i32>>,
    data: Option<flatbuffers::Vector<'_, u8>>,
    dim_order: Option<flatbuffers::Vector<'_, u8>>,
    at: &Location,
    errors: &mut Vec<Diagnostic>,
) -> Option<TestValue> {
    let Some(dtype) = ScalarType::from_code(code) else {
        errors.push(Diagnostic::new(ErrorKind::UnknownScalarType { code }, at.clone()));
        return None;
    };
    let mut out_sizes = Vec::new();
    for s in sizes.iter().flat_map(|v| v.iter()) {
        if s < 0 {
            errors.push(Diagnostic::new(
                ErrorKind::BadSizes {
                    detail: format!("size {s} is negative"),
                },
                at.clone(),
            ));
            return None;
        }
        out_sizes.push(s as usize);
    }
    let bytes = data.map(|d| d.bytes()).unwrap_or(&[]);
    let numel = out_sizes.iter().try_fold(1usize, |a, &s| a.checked_mul(s));
    let need = numel.and_then(|n| n.checked_mul(dtype.element_size()));
    if need != Some(bytes.len()) {
        errors.push(Diagnostic::new(
            ErrorKind::BadTestCase {
                detail: format!(
                    "tensor of {out_sizes:?} {dtype} has {} bytes of data, needs {need:?}",
                    bytes.len()
                ),
            },
            at.clone().offset(offset_in(file, bytes)),
        ));
        return None;
    }
    let dim_order: Vec<u8> = match dim_order {
        Some(d) if !d.is_empty() => d.bytes().to_vec(),
        _ => (0..out_sizes.len() as u8).collect(),
    };
    Some(TestValue::Tensor {
        dtype,
        sizes: out_sizes,
        dim_order,
        data: DataRef {
            source: DataSource::Program,
            offset: offset_in(file, bytes),
            len: bytes.len(),
        },
    })
}

/// A bundled value of either layout, before conversion.
enum RawValue<'a> {
    Tensor {
        code: i8,
        sizes: Option<flatbuffers::Vector<'a, i32>>,
        data: Option<flatbuffers::Vector<'a, u8>>,
        dim_order: Option<flatbuffers::Vector<'a, u8>>,
    },
    Int(i64),
    Bool(bool),
    Double(f64),
    /// A union kind this reader does not know (or a missing member).
    Unknown(u8),
}

fn bp08_raw(v: bp08::Value<'_>) -> RawValue<'_> {
    use bp08::ValueUnion as U;
    let missing = RawValue::Unknown(v.val_type().0);
    match v.val_type() {
        U::Tensor => v.val_as_tensor().map_or(missing, |t| RawValue::Tensor {
            code: t.scalar_type().0,
            sizes: t.sizes(),
            data: t.data(),
            dim_order: t.dim_order(),
        }),
        U::Int => v.val_as_int().map_or(missing, |x| RawValue::Int(x.int_val())),
        U::Bool => v.val_as_bool().map_or(missing, |x| RawValue::Bool(x.bool_val())),
        U::Double => v.val_as_double().map_or(missing, |x| RawValue::Double(x.double_val())),
        _ => missing,
    }
}

fn bp04_raw(v: bp04::BundledValue<'_>) -> RawValue<'_> {
    use bp04::BundledValueUnion as U;
    let missing = RawValue::Unknown(v.val_type().0);
    match v.val_type() {
        U::BundledTensor => v.val_as_bundled_tensor().map_or(missing, |t| RawValue::Tensor {
            code: t.scalar_type().0,
            sizes: t.sizes(),
            data: t.data(),
            dim_order: t.dim_order(),
        }),
        U::BundledInt => v.val_as_bundled_int().map_or(missing, |x| RawValue::Int(x.int_val())),
        U::BundledBool => v
            .val_as_bundled_bool()
            .map_or(missing, |x| RawValue::Bool(x.bool_val())),
        U::BundledDouble => v
            .val_as_bundled_double()
            .map_or(missing, |x| RawValue::Double(x.double_val())),
        _ => missing,
    }
}

/// Converts the values of test case `case`, collecting errors.
fn test_values<'a>(
    file: &[u8],
    raw: impl Iterator<Item = RawValue<'a>>,
    case: usize,
    at: &Location,
    errors: &mut Vec<Diagnostic>,
) -> Vec<TestValue> {
    raw.filter_map(|v| match v {
        RawValue::Tensor {
            code,
            sizes,
            data,
            dim_order,
        } => tensor_value(file, code, sizes, data, dim_order, at, errors),
        RawValue::Int(i) => Some(TestValue::Int(i)),
        RawValue::Bool(b) => Some(TestValue::Bool(b)),
        RawValue::Double(d) => Some(TestValue::Double(d)),
        RawValue::Unknown(kind) => {
            errors.push(Diagnostic::new(
                ErrorKind::BadTestCase {
                    detail: format!("test case {case}: value kind {kind} is unknown"),
                },
                at.clone(),
            ));
            None
        }
    })
    .collect()
}

/// Reads the program embedded in a bundle.
fn read_embedded_program(
    file: &[u8],
    program: Option<flatbuffers::Vector<'_, u8>>,
    external: &[ExternalFile],
) -> Result<Program> {
    let bytes = program.map(|p| p.bytes()).ok_or_else(|| {
        Errors::one(
            ErrorKind::Missing {
                what: "bundled program bytes",
            },
            Location::default(),
        )
    })?;
    read_program(file, offset_in(file, bytes), bytes.len(), external)
}

/// Reads a BP08 bundle.
pub fn read_bp08(file: &[u8], external: &[ExternalFile]) -> Result<Bundle> {
    let root = flatbuffers::root_with_opts::<bp08::BundledProgram>(&verifier_options(), file).map_err(|e| {
        Errors::one(
            ErrorKind::Flatbuffer {
                what: "BP08 bundle",
                detail: e.to_string(),
            },
            Location::at_offset(0),
        )
    })?;
    let program = read_embedded_program(file, root.program(), external)?;
    let mut errors = Vec::new();
    let mut suites = Vec::new();
    for s in root.method_test_suites().iter().flat_map(|v| v.iter()) {
        let method = s.method_name().unwrap_or("").to_string();
        let at = Location::method(&method);
        let mut cases = Vec::new();
        for (ci, c) in s.test_cases().iter().flat_map(|v| v.iter()).enumerate() {
            let inputs = test_values(
                file,
                c.inputs().iter().flat_map(|v| v.iter()).map(bp08_raw),
                ci,
                &at,
                &mut errors,
            );
            let expected = test_values(
                file,
                c.expected_outputs().iter().flat_map(|v| v.iter()).map(bp08_raw),
                ci,
                &at,
                &mut errors,
            );
            cases.push(TestCase { inputs, expected });
        }
        suites.push(TestSuite { method, cases });
    }
    if errors.is_empty() {
        Ok(Bundle { program, suites })
    } else {
        Err(Errors(errors))
    }
}

/// Reads a BP04 bundle: `execution_plan_tests[i]` tests method `i`.
pub fn read_bp04(file: &[u8], external: &[ExternalFile]) -> Result<Bundle> {
    let root = flatbuffers::root_with_opts::<bp04::BundledProgram>(&verifier_options(), file).map_err(|e| {
        Errors::one(
            ErrorKind::Flatbuffer {
                what: "BP04 bundle",
                detail: e.to_string(),
            },
            Location::at_offset(0),
        )
    })?;
    let program = read_embedded_program(file, root.program(), external)?;
    let mut errors = Vec::new();
    let mut suites = Vec::new();
    for (pi, plan) in root.execution_plan_tests().iter().flat_map(|v| v.iter()).enumerate() {
        let Some(method) = program.methods.get(pi).map(|m| m.name.clone()) else {
            errors.push(Diagnostic::new(
                ErrorKind::BadTestCase {
                    detail: format!(
                        "execution_plan_tests[{pi}] has no execution plan (the program has {})",
                        program.methods.len()
                    ),
                },
                Location::default(),
            ));
            continue;
        };
        let at = Location::method(&method);
        let mut cases = Vec::new();
        for (ci, set) in plan.test_sets().iter().flat_map(|v| v.iter()).enumerate() {
            let inputs = test_values(
                file,
                set.inputs().iter().flat_map(|v| v.iter()).map(bp04_raw),
                ci,
                &at,
                &mut errors,
            );
            let expected = test_values(
                file,
                set.expected_outputs().iter().flat_map(|v| v.iter()).map(bp04_raw),
                ci,
                &at,
                &mut errors,
            );
            cases.push(TestCase { inputs, expected });
        }
        suites.push(TestSuite { method, cases });
    }
    if errors.is_empty() {
        Ok(Bundle { program, suites })
    } else {
        Err(Errors(errors))
    }
}
