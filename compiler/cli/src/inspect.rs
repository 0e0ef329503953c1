//! `ptec inspect`: what a file holds, for a person or as stable JSON.
//!
//! The JSON document is described in `docs/inspect-json.md`;
//! its keys only ever gain siblings, never change meaning.
use ptec::ir::*;
use ptec::Loaded;
use serde_json::{json, Map, Value as Json};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

fn dynamism_name(d: Dynamism) -> &'static str {
    match d {
        Dynamism::Static => "static",
        Dynamism::DynamicBound => "dynamic_bound",
        Dynamism::DynamicUnbound => "dynamic_unbound",
    }
}

fn placement_name(p: &Placement) -> &'static str {
    match p {
        Placement::Planned { .. } => "planned",
        Placement::Constant { .. } => "constant",
        Placement::Mutable { .. } => "mutable",
        Placement::External { .. } => "external",
        Placement::Unplanned => "unplanned",
    }
}

fn io_json(m: &Method, i: usize) -> Json {
    match m.values.get(i) {
        Some(Value::Tensor(t)) => json!({
            "value": i,
            "kind": "Tensor",
            "dtype": t.dtype.name(),
            "sizes": t.sizes,
            "dim_order": t.dim_order,
            "dynamism": dynamism_name(t.dynamism),
            "placement": placement_name(&t.placement),
        }),
        Some(Value::Int(x)) => json!({ "value": i, "kind": "Int", "constant": x }),
        Some(Value::Double(x)) => json!({ "value": i, "kind": "Double", "constant": x }),
        Some(Value::Bool(x)) => json!({ "value": i, "kind": "Bool", "constant": x }),
        Some(v) => json!({ "value": i, "kind": v.kind() }),
        None => json!({ "value": i, "kind": "invalid" }),
    }
}

/// Distinct `name.overload` of a method's operator table, sorted.
pub fn method_operators(m: &Method) -> Vec<String> {
    m.operators
        .iter()
        .map(Operator::full_name)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn data_bytes<'a>(m: &'a Method, pick: impl Fn(&'a Placement) -> Option<&'a DataRef>) -> usize {
    let mut seen = BTreeSet::new();
    m.values
        .iter()
        .filter_map(|v| v.as_tensor())
        .filter_map(|t| pick(&t.placement))
        .filter(|d| seen.insert((d.source == DataSource::Program, d.offset)))
        .map(|d| d.len)
        .sum()
}

/// The bytes of a method's constant tensors (each counted once).
pub fn constant_bytes(m: &Method) -> usize {
    data_bytes(m, |p| match p {
        Placement::Constant { data } => Some(data),
        _ => None,
    })
}

fn method_json(m: &Method, suites: &[TestSuite]) -> Json {
    let mut op_counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for ins in &m.instructions {
        *kinds.entry(ins.kind()).or_default() += 1;
        if let Instruction::Kernel { op, .. } = ins {
            if let Some(o) = m.operators.get(*op) {
                *op_counts.entry(o.full_name()).or_default() += 1;
            }
        }
    }
    let buffers: Vec<u64> = m.buffer_sizes.iter().skip(1).copied().collect();
    let external: Vec<&str> = m
        .values
        .iter()
        .filter_map(|v| match v.as_tensor().map(|t| &t.placement) {
            Some(Placement::External { key, .. }) => Some(key.as_str()),
            _ => None,
        })
        .collect();
    let suite = suites.iter().find(|s| s.method == m.name);
    let tests = suite.map(|s| s.cases.len());
    // What the generated tests embed: each case's tensors, in and out.
    let test_bytes = suite.map(|s| {
        s.cases
            .iter()
            .flat_map(|c| c.inputs.iter().chain(&c.expected))
            .map(|v| match v {
                TestValue::Tensor { data, .. } => data.len,
                _ => 0,
            })
            .sum::<usize>()
    });
    json!({
        "name": m.name,
        "inputs": m.inputs.iter().map(|&i| io_json(m, i)).collect::<Vec<_>>(),
        "outputs": m.outputs.iter().map(|&i| io_json(m, i)).collect::<Vec<_>>(),
        "operators": method_operators(m),
        "operator_counts": op_counts,
        "instructions": m.instructions.len(),
        "instruction_kinds": kinds,
        "values": m.values.len(),
        "buffers": buffers,
        "planned_bytes": buffers.iter().sum::<u64>(),
        "constant_bytes": constant_bytes(m),
        "mutable_bytes": data_bytes(m, |p| match p { Placement::Mutable { initial, .. } => Some(initial), _ => None }),
        "external_tensors": external,
        "delegates": m.delegates.iter().map(|d| json!({
            "id": d.id,
            "bytes": d.processed.len,
            "location": if d.inline { "inline" } else { "segment" },
            "compile_specs": d.compile_specs.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "stacktraces": m.stacktraces.is_some(),
        "test_cases": tests,
        "test_data_bytes": test_bytes,
    })
}

/// The JSON document of `ptec inspect --json`.
pub fn to_json(loaded: &Loaded, file_size: usize) -> Json {
    let mut doc = Map::new();
    doc.insert("kind".into(), json!(loaded.kind.name()));
    doc.insert("bytes".into(), json!(file_size));
    if let FileKind::Program { extended_header } = loaded.kind {
        doc.insert("extended_header".into(), json!(extended_header));
    }
    if let Some(p) = &loaded.program {
        doc.insert("version".into(), json!(p.version));
        doc.insert(
            "methods".into(),
            Json::Array(p.methods.iter().map(|m| method_json(m, &loaded.suites)).collect()),
        );
        doc.insert(
            "segments".into(),
            Json::Array(
                p.segments
                    .iter()
                    .map(|s| json!({ "offset": s.offset, "bytes": s.len }))
                    .collect(),
            ),
        );
        doc.insert(
            "named_data".into(),
            Json::Array(p.named_data.iter().map(|n| json!(n.key)).collect()),
        );
        let ops: BTreeSet<String> = p.methods.iter().flat_map(method_operators).collect();
        doc.insert("operators".into(), json!(ops));
    }
    if !loaded.suites.is_empty() || matches!(loaded.kind, FileKind::BundleBp04 | FileKind::BundleBp08) {
        doc.insert(
            "test_suites".into(),
            Json::Array(
                loaded
                    .suites
                    .iter()
                    .map(|s| json!({ "method": s.method, "cases": s.cases.len() }))
                    .collect(),
            ),
        );
    }
    if let Some(t) = &loaded.tensor_data {
        doc.insert(
            "tensors".into(),
            Json::Array(
                t.tensors
                    .iter()
                    .map(|t| {
                        json!({
                            "key": t.key,
                            "dtype": t.dtype.map(|d| d.name()),
                            "sizes": t.sizes,
                            "bytes": t.data.len,
                        })
                    })
                    .collect(),
            ),
        );
    }
    Json::Object(doc)
}

fn fmt_bytes(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

fn io_text(m: &Method, i: usize) -> String {
    match m.values.get(i) {
        Some(Value::Tensor(t)) => {
            let dyn_note = match t.dynamism {
                Dynamism::Static => String::new(),
                d => format!(" ({})", dynamism_name(d).replace('_', " ")),
            };
            let order = if t.is_contiguous() {
                String::new()
            } else {
                format!(" dim_order {:?}", t.dim_order)
            };
            format!("{} {:?}{dyn_note}{order}", t.dtype, t.sizes)
        }
        Some(Value::Int(x)) => format!("int = {x}"),
        Some(Value::Double(x)) => format!("float = {x}"),
        Some(Value::Bool(x)) => format!("bool = {x}"),
        Some(v) => v.kind().to_string(),
        None => "?".into(),
    }
}

/// The human-readable report of `ptec inspect`.
pub fn to_text(loaded: &Loaded, path: &str, file_size: usize) -> String {
    let mut s = String::new();
    let kind = match loaded.kind {
        FileKind::Program {
            extended_header: Some(n),
        } => format!("ExecuTorch program (.pte, {n}-byte extended header)"),
        FileKind::Program { extended_header: None } => "ExecuTorch program (.pte, no extended header)".into(),
        FileKind::BundleBp04 => "bundled program, BP04 layout (.bp)".into(),
        FileKind::BundleBp08 => "bundled program, BP08 layout (.bpte)".into(),
        FileKind::TensorData => "external tensor data (.ptd)".into(),
    };
    let _ = writeln!(s, "{path}: {kind}, {}", fmt_bytes(file_size as u64));
    if let Some(p) = &loaded.program {
        let _ = writeln!(
            s,
            "program version {}, {} method(s), {} segment(s)",
            p.version,
            p.methods.len(),
            p.segments.len()
        );
        for m in &p.methods {
            let _ = writeln!(
                s,
                "\nmethod `{}`: {} instruction(s), {} value(s)",
                m.name,
                m.instructions.len(),
                m.values.len()
            );
            for (k, &i) in m.inputs.iter().enumerate() {
                let _ = writeln!(s, "  input {k}: {}", io_text(m, i));
            }
            for (k, &i) in m.outputs.iter().enumerate() {
                let _ = writeln!(s, "  output {k}: {}", io_text(m, i));
            }
            let buffers: Vec<u64> = m.buffer_sizes.iter().skip(1).copied().collect();
            let total: u64 = buffers.iter().sum();
            let _ = writeln!(
                s,
                "  memory plan: {} buffer(s) {:?}, {} in all",
                buffers.len(),
                buffers,
                fmt_bytes(total)
            );
            let constant = constant_bytes(m);
            let mutable = data_bytes(m, |p| match p {
                Placement::Mutable { initial, .. } => Some(initial),
                _ => None,
            });
            let _ = writeln!(
                s,
                "  constants: {}, mutable state: {}",
                fmt_bytes(constant as u64),
                fmt_bytes(mutable as u64)
            );
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
            for ins in &m.instructions {
                *kinds.entry(ins.kind()).or_default() += 1;
                if let Instruction::Kernel { op, .. } = ins {
                    if let Some(o) = m.operators.get(*op) {
                        *counts.entry(o.full_name()).or_default() += 1;
                    }
                }
            }
            if !kinds.is_empty() {
                let k: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
                let _ = writeln!(s, "  instructions: {}", k.join(", "));
            }
            for (op, n) in &counts {
                let _ = writeln!(s, "    {n:>4} × {op}");
            }
            for d in &m.delegates {
                let _ = writeln!(
                    s,
                    "  delegate `{}`: {} {}",
                    d.id,
                    fmt_bytes(d.processed.len as u64),
                    if d.inline { "inline" } else { "in a segment" }
                );
            }
            if m.stacktraces.is_some() {
                let _ = writeln!(s, "  carries stack traces");
            }
            if let Some(suite) = loaded.suites.iter().find(|t| t.method == m.name) {
                let _ = writeln!(s, "  bundled test cases: {}", suite.cases.len());
            }
        }
        for (i, seg) in p.segments.iter().enumerate() {
            let _ = writeln!(s, "segment {i}: {} at byte {}", fmt_bytes(seg.len as u64), seg.offset);
        }
    }
    if let Some(t) = &loaded.tensor_data {
        let _ = writeln!(s, "{} tensor(s):", t.tensors.len());
        for t in &t.tensors {
            let dtype = t.dtype.map(|d| d.name()).unwrap_or("?");
            let _ = writeln!(
                s,
                "  {}: {dtype} {:?}, {}",
                t.key,
                t.sizes,
                fmt_bytes(t.data.len as u64)
            );
        }
    }
    s
}
