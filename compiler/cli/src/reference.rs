//! ExecuTorch's runtime as the reference of a failing `ptec check`: the
//! failing case runs again in ExecuTorch's Python runtime (the
//! `executorch` package's pybindings), which logs every instruction's
//! outputs to an ETDump debug buffer as ptec's traced run does, and the
//! two are compared instruction by instruction (`reference.py`). The
//! first instruction whose outputs differ is where ptec's numbers go
//! wrong.
//!
//! The Python environment is `$PTEC_VENV`, else the one
//! `examples/chat/setup.sh` makes from the source tree's pins. Without
//! one there is no reference, and the report says so.
use crate::check::{CheckInput, TracedCase};
use crate::runner::{source_tree, user_cache_dir};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

const SCRIPT: &str = include_str!("reference.py");

/// The Python of an environment with `executorch`: `$PTEC_VENV`, else a
/// complete pinned environment of `examples/chat/setup.sh` (its
/// `pins.ok` equal to the source tree's pins).
pub fn python() -> Result<PathBuf, String> {
    if let Some(v) = std::env::var_os("PTEC_VENV") {
        let python = PathBuf::from(&v).join("bin/python");
        return match python.exists() {
            true => Ok(python),
            false => Err(format!("PTEC_VENV={} has no bin/python", Path::new(&v).display())),
        };
    }
    let not_found = "ExecuTorch's Python runtime was not found (set PTEC_VENV to a virtual environment with the \
                     `executorch` package, or run examples/chat/setup.sh)";
    let pins = std::fs::read(source_tree().join("examples/chat/pins.txt")).map_err(|_| not_found.to_string())?;
    let dir = user_cache_dir().map(|d| d.join("chat")).ok_or(not_found)?;
    let mut venvs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("venv-")))
        .filter(|p| std::fs::read(p.join("pins.ok")).is_ok_and(|ok| ok == pins))
        .collect();
    venvs.sort();
    venvs
        .into_iter()
        .map(|v| v.join("bin/python"))
        .find(|p| p.exists())
        .ok_or_else(|| not_found.to_string())
}

/// The instruction whose outputs first differ from ExecuTorch's.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    pub method: String,
    /// Its index in the method's instructions, as in the `.pte`.
    pub instruction: usize,
    /// Its operator (`aten::convolution.out`) or delegate.
    pub operator: String,
    /// Where it comes from in the model's source, when the program says.
    pub location: Option<String>,
    /// Which output (with its value in the program), by how much, and the
    /// tolerance it exceeds.
    pub detail: String,
}

/// What the reference said about a failing case.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// There is no reference to compare with: why.
    Unavailable(String),
    /// The first instruction whose outputs differ.
    Differs(Difference),
    /// Every instruction both logged agrees (`compared` of them);
    /// `reference_passes` is whether ExecuTorch's outputs match the
    /// bundle's.
    Agrees { compared: usize, reference_passes: bool },
}

impl Verdict {
    /// The line `ptec check` prints.
    pub fn message(&self) -> String {
        match self {
            Verdict::Unavailable(why) => {
                format!("no reference to find the first wrong instruction: {why}")
            }
            Verdict::Differs(d) => {
                let at = d.location.as_ref().map(|l| format!(", at {l}")).unwrap_or_default();
                format!(
                    "first instruction whose output differs from ExecuTorch's runtime: `{}` instruction {} ({}{at}): {}",
                    d.method, d.instruction, d.operator, d.detail
                )
            }
            Verdict::Agrees {
                compared,
                reference_passes: false,
            } => format!(
                "ExecuTorch's runtime computes what ptec does at every instruction compared ({compared}), and fails \
                 this case too: the program, or its bundled outputs, is off, not ptec"
            ),
            Verdict::Agrees {
                compared,
                reference_passes: true,
            } => format!(
                "ExecuTorch's runtime passes this case, yet its outputs match ptec's at every instruction compared \
                 ({compared}): the difference is in what no instruction logs (a method output ptec does not trace)"
            ),
        }
    }
}

/// The operator (or delegate) of each instruction of `method`.
fn instruction_names(loaded: &ptec::Loaded, method: &str) -> Option<Vec<String>> {
    let m = loaded.program.as_ref()?.methods.iter().find(|m| m.name == method)?;
    Some(
        m.instructions
            .iter()
            .map(|i| match i {
                ptec::ir::Instruction::Kernel { op, .. } => {
                    m.operators.get(*op).map(|o| o.full_name()).unwrap_or_default()
                }
                ptec::ir::Instruction::Delegate { delegate, .. } => {
                    m.delegates.get(*delegate).map(|d| d.id.clone()).unwrap_or_default()
                }
                other => other.kind().to_string(),
            })
            .collect(),
    )
}

/// Fails unless the program checked and the reference run the same
/// instructions in `method`: outputs are matched by instruction index.
fn same_instructions(
    checked: &Path,
    data: &[&[u8]],
    reference: &Path,
    loaded_reference: &ptec::Loaded,
    method: &str,
) -> Result<(), String> {
    let bytes = std::fs::read(checked).map_err(|e| format!("{}: {e}", checked.display()))?;
    let loaded = ptec::load(&bytes, data).map_err(|e| format!("{}: {e}", checked.display()))?;
    match (
        instruction_names(&loaded, method),
        instruction_names(loaded_reference, method),
    ) {
        (Some(a), Some(b)) if a == b => Ok(()),
        _ => Err(format!(
            "--reference {} does not run the instructions of {} in `{method}`, so their outputs cannot be matched",
            reference.display(),
            checked.display()
        )),
    }
}

/// Compares ptec's traced run of `case` (its ETDump `etdump` and the
/// debug buffer `debug_buffer`) with ExecuTorch's run of the program
/// `reference` (a `.pte` or bundle; by default `input`'s own) on the same
/// inputs, with `input`'s tolerance.
pub fn compare(
    input: &CheckInput,
    reference: Option<&Path>,
    case: &TracedCase,
    etdump: &Path,
    debug_buffer: &Path,
) -> Verdict {
    let python = match python() {
        Ok(p) => p,
        Err(why) => return Verdict::Unavailable(why),
    };
    match run(&python, input, reference, case, etdump, debug_buffer) {
        Ok(v) => v,
        Err(why) => Verdict::Unavailable(why),
    }
}

fn run(
    python: &Path,
    input: &CheckInput,
    reference: Option<&Path>,
    case: &TracedCase,
    etdump: &Path,
    debug_buffer: &Path,
) -> Result<Verdict, String> {
    let program = reference.unwrap_or(&input.path);
    let bytes = std::fs::read(program).map_err(|e| format!("{}: {e}", program.display()))?;
    let data: Vec<Vec<u8>> = input
        .data
        .iter()
        .map(|d| std::fs::read(d).map_err(|e| format!("{}: {e}", d.display())))
        .collect::<Result<_, _>>()?;
    if data.len() > 1 {
        return Err("ExecuTorch's Python runtime takes one .ptd file, and the program has more".into());
    }
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let loaded = ptec::load(&bytes, &refs).map_err(|e| format!("{}: {e}", program.display()))?;
    if let Some(reference) = reference {
        same_instructions(&input.path, &refs, reference, &loaded, &case.method)?;
    }
    let is_bundle = matches!(
        loaded.kind,
        ptec::ir::FileKind::BundleBp04 | ptec::ir::FileKind::BundleBp08
    );
    let cases = input.cases.as_deref().unwrap_or(&input.path);
    let scratch = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let ptec_debug_len = std::fs::metadata(debug_buffer).map(|m| m.len()).unwrap_or(0);
    let request = json!({
        "program": crate::runner::absolute(program),
        "program_is_bundle": is_bundle,
        "data": input.data.first().map(|d| crate::runner::absolute(d)),
        "cases": crate::runner::absolute(cases),
        "method": case.method,
        "index": case.index,
        "before": case.before,
        "etdump": etdump,
        "debug_buffer": debug_buffer,
        "rtol": input.rtol,
        "atol": input.atol,
        "scratch": scratch.path(),
        // ExecuTorch logs the earlier cases' outputs too.
        "debug_buffer_size": executorch_log_bytes(&loaded, &case.method).max(ptec_debug_len.max(1 << 20) * 2)
            * (case.before.len() as u64 + 1),
    });
    let script = scratch.path().join("reference.py");
    let request_file = scratch.path().join("request.json");
    std::fs::write(&script, SCRIPT).map_err(|e| e.to_string())?;
    std::fs::write(&request_file, request.to_string()).map_err(|e| e.to_string())?;
    let out = Command::new(python)
        .arg(&script)
        .arg(&request_file)
        .output()
        .map_err(|e| format!("running {}: {e}", python.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!(
            "ExecuTorch's runtime could not run the case ({} exited with {}: {last})",
            python.display(),
            out.status
        ));
    }
    let doc: Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("reading what reference.py printed: {e}"))?;
    let compared = doc["compared"].as_u64().unwrap_or(0) as usize;
    if compared == 0 {
        return Err("ExecuTorch's runtime and ptec logged no instruction in common".into());
    }
    let Some(first) = doc["first"].as_object() else {
        return Ok(Verdict::Agrees {
            compared,
            reference_passes: doc["reference_matches_expected"].as_bool().unwrap_or(false),
        });
    };
    let instruction = first["instruction"].as_u64().unwrap_or(0) as usize;
    let method = loaded
        .program
        .as_ref()
        .and_then(|p| p.methods.iter().find(|m| m.name == case.method));
    let named = first["name"].as_str().unwrap_or("?").to_string();
    let operator = method
        .and_then(|m| match m.instructions.get(instruction)? {
            ptec::ir::Instruction::Kernel { op, .. } => Some(m.operators.get(*op)?.full_name()),
            ptec::ir::Instruction::Delegate { delegate, .. } => {
                Some(format!("delegate `{}`", m.delegates.get(*delegate)?.id))
            }
            _ => None,
        })
        .unwrap_or(named);
    let location = method
        .and_then(|m| m.stacktraces.as_ref()?.get(instruction)?.last())
        .map(|f| format!("{}:{} in {}", f.filename, f.lineno, f.name));
    let output = first["output"].as_u64().unwrap_or(0) as usize;
    // ExecuTorch logs a kernel's last argument, the value it returns (the
    // out argument again, or a list of them); a delegate's outputs are not
    // told apart.
    let value = method
        .and_then(|m| match m.instructions.get(instruction)? {
            ptec::ir::Instruction::Kernel { args, .. } => {
                let last = *args.last()?;
                match m.values.get(last)? {
                    ptec::ir::Value::TensorList(items) => items.get(output).copied(),
                    _ => (output == 0).then_some(last),
                }
            }
            _ => None,
        })
        .map(|v| format!(" (value {v})"))
        .unwrap_or_default();
    Ok(Verdict::Differs(Difference {
        method: case.method.clone(),
        instruction,
        operator,
        location,
        detail: format!(
            "output {output}{value}: {}, beyond the check's tolerance (rtol {}, atol {})",
            first["why"].as_str().unwrap_or(""),
            input.rtol,
            input.atol
        ),
    }))
}

/// Bytes ExecuTorch's debug buffer needs for one run of `method`, with
/// room to spare: it logs every instruction's output (a kernel's last
/// argument, every tensor a delegate call touches), where ptec logs a
/// fused chain once (ResNet-50: 45 MB for ptec, 150 to 250 MB for
/// ExecuTorch), and it stops the process when the buffer is full.
pub fn executorch_log_bytes(loaded: &ptec::Loaded<'_>, method: &str) -> u64 {
    let Some(m) = loaded
        .program
        .as_ref()
        .and_then(|p| p.methods.iter().find(|m| m.name == method))
    else {
        return 0;
    };
    let one = |v: usize| match m.values.get(v) {
        Some(ptec::ir::Value::Tensor(t)) => t.nbytes() as u64 + 64,
        _ => 0,
    };
    let tensors = |v: usize| -> u64 {
        match m.values.get(v) {
            Some(ptec::ir::Value::TensorList(items)) => items.iter().map(|&i| one(i)).sum(),
            Some(ptec::ir::Value::OptionalTensorList(items)) => items.iter().flatten().map(|&i| one(i)).sum(),
            _ => one(v),
        }
    };
    let logged: u64 = m
        .instructions
        .iter()
        .map(|i| match i {
            ptec::ir::Instruction::Kernel { args, .. } => args.last().map_or(0, |&v| tensors(v)),
            ptec::ir::Instruction::Delegate { args, .. } => args.iter().map(|&v| tensors(v)).sum(),
            _ => 0,
        })
        .sum();
    logged + (logged >> 3)
}

/// The verdict on each bundle of `results` with a failing case (by its
/// index in `results`). A bundle traced already (`debug_outputs`, the
/// ETDump `ptec check --debug-outputs` wrote) is compared as it is;
/// another is built again with tracing, on `threads` threads, to trace
/// its first failing case. `reference` is the program ExecuTorch runs
/// (default: each bundle's own).
pub fn explain_failures(
    results: &[crate::check::CheckResult],
    threads: usize,
    verbose: bool,
    debug_outputs: Option<&Path>,
    reference: Option<&Path>,
    mut progress: impl FnMut(&str),
) -> Vec<(usize, Verdict)> {
    use crate::check::{check_with_debug_outputs, debug_buffer_path, CheckStatus};
    // A program that could not be constructed ran no instruction.
    let failing = results.iter().enumerate().filter(|(_, r)| {
        matches!(&r.status, CheckStatus::Ran { failed, lines, .. }
            if *failed > 0 && !lines.iter().any(|l| l.starts_with("construction: ")))
    });
    let mut verdicts = Vec::new();
    for (k, result) in failing {
        if let Err(why) = python() {
            verdicts.push((k, Verdict::Unavailable(why)));
            continue;
        }
        let verdict = match (&result.traced, debug_outputs) {
            (Some(case), Some(etdump)) => compare(&result.input, reference, case, etdump, &debug_buffer_path(etdump)),
            _ => (|| {
                let scratch = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
                let etdump = scratch.path().join("case.etdp");
                progress(&format!(
                    "tracing {} to compare it with ExecuTorch's runtime",
                    result.input.path.display()
                ));
                // Its own steps would name files about to go.
                let again = check_with_debug_outputs(
                    std::slice::from_ref(&result.input),
                    &[threads],
                    verbose,
                    Some(&etdump),
                    |_| {},
                )?;
                let case = again
                    .first()
                    .and_then(|r| r.traced.clone())
                    .ok_or("the traced run did not report its case")?;
                Ok::<_, String>(compare(
                    &result.input,
                    reference,
                    &case,
                    &etdump,
                    &debug_buffer_path(&etdump),
                ))
            })()
            .unwrap_or_else(Verdict::Unavailable),
        };
        verdicts.push((k, verdict));
    }
    verdicts
}
