//! `ptec check`: compile bundles, build them against `ptec-runtime` in a
//! temporary crate, run every test case and report.
//!
//! Several bundles are checked in one crate (one `cargo build`), each as its
//! own module. The build directory persists between checks (under
//! `target/ptec-check`, or `PTEC_CHECK_TARGET_DIR`), so only the generated
//! code is compiled again.
use crate::runner::{absolute, refuse_user_backends, target_dir, RunnerCrate};
use ptec::{compile, ErrorKind, Errors, Input, Location, Options};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `--debug-outputs FILE` writes the debug buffer (the outputs'
/// bytes, which the ETDump points into): beside it, `out.etdp` →
/// `out.bin`.
pub fn debug_buffer_path(etdump: &Path) -> PathBuf {
    etdump.with_extension("bin")
}

/// The part of the runner's `main` that runs module `m0`'s case `failed`
/// (its first failing case, else its first) traced, the cases before it
/// untraced on the same instance (a stateful method sees what they left),
/// and writes the recording where the environment says.
const TRACE_CASE: &str = r#"    if let (Some(etdump), Some(debug)) = (std::env::var_os("PTEC_CHECK_ETDUMP"), std::env::var_os("PTEC_CHECK_DEBUG_BUFFER")) {
        let tol = ptec_runtime::harness::Tolerance { rtol: tols[0], atol: tols[1] };
        let target = first_failed[0].unwrap_or(0);
        let recording = ptec_runtime::trace::record(true, |r| {
            let mut model = m0::Program::try_boxed().map_err(|e| e.to_string())?;
            for k in 0..target {
                let _ = m0::bundled::run_case(&mut *model, k, tol);
            }
            let _ = m0::bundled::run_case_traced(&mut *model, target, tol, r);
            Ok::<(), String>(())
        });
        match recording {
            Ok(rec) => {
                std::fs::write(&etdump, rec.to_etdump()).expect("writing the ETDump");
                std::fs::write(&debug, &rec.debug).expect("writing the debug buffer");
                let (method, index) = m0::bundled::CASES[target];
                println!("m0 traced {method}[{index}] {target}");
            }
            Err(e) => println!("m0 construction: {e}"),
        }
    }
"#;

/// One bundle to check.
#[derive(Clone, Debug)]
pub struct CheckInput {
    pub path: PathBuf,
    /// `.ptd` files its program refers to.
    pub data: Vec<PathBuf>,
    pub rtol: f64,
    pub atol: f64,
    /// A bundle whose test cases check `path` instead of its own (`path`
    /// may then be a plain `.pte`): the same model exported another way.
    pub cases: Option<PathBuf>,
    /// Compile with [`ptec::Options::winograd`] (the default) or without.
    pub winograd: bool,
}

/// What happened to one bundle.
#[derive(Clone, Debug, PartialEq)]
pub enum CheckStatus {
    /// It compiled and ran: the per-case report lines and the counts.
    Ran {
        lines: Vec<String>,
        passed: usize,
        failed: usize,
    },
    /// ptec could not compile it (an unsupported operator, ...).
    NotCompiled(String),
}

#[derive(Clone, Debug)]
pub struct CheckResult {
    pub input: CheckInput,
    pub status: CheckStatus,
    /// The case `--debug-outputs` traced.
    pub traced: Option<TracedCase>,
}

/// A case run traced: its method and index in the method's suite, and the
/// cases run before it on the same instance (which a stateful method
/// sees), in order.
#[derive(Clone, Debug, PartialEq)]
pub struct TracedCase {
    pub method: String,
    pub index: usize,
    pub before: Vec<(String, usize)>,
}

/// `(method, index)` of a report line `method[index]: ...`.
fn case_of(line: &str) -> Option<(String, usize)> {
    let (case, _) = line.split_once("]: ")?;
    let (method, index) = case.rsplit_once('[')?;
    Some((method.to_string(), index.parse().ok()?))
}

/// Builds the checks and runs them once on each thread count of
/// `threads` (the kernels split large work across threads, and every
/// split must give the bundled outputs too). `progress` receives one line
/// per step; cargo's own progress goes to this process's stderr when
/// `verbose`. With more than one thread count, each case's lines say which
/// it ran on, and its counts add up over them.
pub fn check(
    inputs: &[CheckInput],
    threads: &[usize],
    verbose: bool,
    progress: impl FnMut(&str),
) -> Result<Vec<CheckResult>, String> {
    check_with_debug_outputs(inputs, threads, verbose, None, progress)
}

/// [`check`], and with `debug_outputs` (for one bundle only) its first
/// failing case (or, when all pass, its first) run again traced, on the
/// first thread count: its profile and every instruction's outputs are
/// written to that file as an ETDump, the outputs' bytes to the debug
/// buffer beside it ([`debug_buffer_path`]), for ExecuTorch's Inspector.
pub fn check_with_debug_outputs(
    inputs: &[CheckInput],
    threads: &[usize],
    verbose: bool,
    debug_outputs: Option<&Path>,
    mut progress: impl FnMut(&str),
) -> Result<Vec<CheckResult>, String> {
    if let Some(bad) = threads.iter().find(|&&t| t == 0) {
        return Err(format!("cannot run on {bad} threads"));
    }
    let debug_outputs = match debug_outputs {
        Some(_) if inputs.len() != 1 => {
            return Err(format!(
                "--debug-outputs writes the outputs of one bundle's case, and {} bundles were given",
                inputs.len()
            ))
        }
        Some(file) if debug_buffer_path(file) == file => {
            return Err(format!(
                "--debug-outputs {}: the debug buffer goes beside it with the extension .bin; name the ETDump otherwise (out.etdp)",
                file.display()
            ))
        }
        Some(file) => Some(absolute(file)),
        None => None,
    };
    let krate = RunnerCrate::new("ptec-check-run", "opt-level = 2\ncodegen-units = 16\ndebug = false")?;
    let mut results: Vec<CheckResult> = Vec::new();
    let mut modules = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let path = absolute(&input.path);
        progress(&format!("compiling {}", input.path.display()));
        let generated = (|| {
            let mut program = input.data.iter().try_fold(Input::open(&path)?, |p, d| p.open_data(d))?;
            refuse_user_backends(
                &program,
                "check",
                "run its bundled cases from your own code with the backend",
            )?;
            if let Some(cases) = &input.cases {
                program = program.open_cases(cases)?;
            }
            let options = Options::new()
                .tests(input.rtol, input.atol)
                .name("Program")
                .output_file(format!("m{i}.rs"))
                .trace(debug_outputs.is_some())
                .winograd(input.winograd);
            let source = compile(&program, &options)?;
            // Without cases there is nothing to run (a .pte, or a bundle
            // whose suites are empty), and no `bundled` module to run them.
            if source.cases() == 0 {
                return Err(Errors::one(
                    ErrorKind::BadTestCase {
                        detail: format!(
                            "{} holds no test cases to run (a .pte can take a bundle's with --cases)",
                            path.display()
                        ),
                    },
                    Location::default(),
                ));
            }
            Ok(source)
        })();
        match generated {
            Ok(source) => {
                let module = format!("m{i}");
                krate.write_source(&format!("{module}.rs"), &source)?;
                modules.push((module, i));
                results.push(CheckResult {
                    input: input.clone(),
                    status: CheckStatus::Ran {
                        lines: vec![],
                        passed: 0,
                        failed: 0,
                    },
                    traced: None,
                });
            }
            Err(e) => results.push(CheckResult {
                input: input.clone(),
                status: CheckStatus::NotCompiled(e.to_string()),
                traced: None,
            }),
        }
    }
    if modules.is_empty() {
        return Ok(results);
    }
    let mut main = String::from("// Generated by ptec check.\n");
    for (m, _) in &modules {
        main.push_str(&format!("#[allow(dead_code)]\nmod {m};\n"));
    }
    main.push_str(
        "fn main() {\n    let args: Vec<String> = std::env::args().collect();\n    ptec_runtime::set_threads(args[1].parse().expect(\"thread count\"));\n    let tols: Vec<f64> = args[2..].iter().map(|a| a.parse().expect(\"tolerance\")).collect();\n    let mut first_failed: Vec<Option<usize>> = vec![None; tols.len() / 2];\n",
    );
    for (k, (m, _)) in modules.iter().enumerate() {
        main.push_str(&format!(
            "    'module: {{\n        let tol = ptec_runtime::harness::Tolerance {{ rtol: tols[{}], atol: tols[{}] }};\n        let mut model = match {m}::Program::try_boxed() {{\n            Ok(model) => model,\n            Err(e) => {{ println!(\"{m} construction: {{e}}\"); println!(\"{m} done 0 1\"); break 'module; }}\n        }};\n        let (mut passed, mut failed) = (0, 0);\n        for (k, (method, index)) in {m}::bundled::CASES.iter().enumerate() {{\n            match {m}::bundled::run_case(&mut *model, k, tol) {{\n                Ok(()) => {{ passed += 1; println!(\"{m} {{method}}[{{index}}]: ok\"); }}\n                Err(e) => {{ failed += 1; first_failed[{k}].get_or_insert(k); println!(\"{m} {{method}}[{{index}}]: {{e}}\"); }}\n            }}\n        }}\n        println!(\"{m} done {{passed}} {{failed}}\");\n    }}\n",
            2 * k,
            2 * k + 1,
        ));
    }
    if debug_outputs.is_some() {
        main.push_str(TRACE_CASE);
    }
    main.push_str("}\n");
    krate.write("main.rs", &main)?;
    let target = target_dir("PTEC_CHECK_TARGET_DIR", "ptec-check");
    progress(&format!("building {} module(s) in {}", modules.len(), target.display()));
    let exe = krate.build(&target, None, verbose)?;
    for (k, &n) in threads.iter().enumerate() {
        progress(&format!("running on {n} thread(s)"));
        let mut cmd = Command::new(&exe);
        if let (0, Some(file)) = (k, &debug_outputs) {
            cmd.env("PTEC_CHECK_ETDUMP", file)
                .env("PTEC_CHECK_DEBUG_BUFFER", debug_buffer_path(file));
        }
        cmd.arg(n.to_string());
        for (_, i) in &modules {
            cmd.arg(inputs[*i].rtol.to_string()).arg(inputs[*i].atol.to_string());
        }
        let out = cmd.output().map_err(|e| format!("running {}: {e}", exe.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "the generated program crashed on {n} thread(s): {}\n{}{}",
                out.status,
                stdout,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let on = if threads.len() > 1 {
            format!("on {n} thread(s): ")
        } else {
            String::new()
        };
        for (m, i) in &modules {
            let result = &mut results[*i];
            let CheckStatus::Ran { lines, passed, failed } = &mut result.status else {
                continue;
            };
            // The cases of this run, in the order they ran.
            let mut ran = Vec::new();
            for line in stdout.lines() {
                let Some(rest) = line.strip_prefix(&format!("{m} ")) else {
                    continue;
                };
                if let Some(traced) = rest.strip_prefix("traced ") {
                    let (case, position) = traced.rsplit_once(' ').unwrap_or((traced, "0"));
                    let position: usize = position.parse().unwrap_or(0);
                    if let Some((method, index)) = case_of(&format!("{case}: ")) {
                        ran.truncate(position);
                        result.traced = Some(TracedCase {
                            method,
                            index,
                            before: ran.clone(),
                        });
                    }
                    if let Some(file) = &debug_outputs {
                        progress(&format!(
                            "the outputs of case {case} are in {} (its debug buffer in {})",
                            file.display(),
                            debug_buffer_path(file).display()
                        ));
                    }
                } else if let Some(counts) = rest.strip_prefix("done ") {
                    let mut it = counts.split(' ').map(|x| x.parse::<usize>().unwrap_or(0));
                    *passed += it.next().unwrap_or(0);
                    *failed += it.next().unwrap_or(0);
                } else {
                    ran.extend(case_of(rest));
                    lines.push(format!("{on}{rest}"));
                }
            }
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    #[test]
    fn report_lines_name_their_case() {
        use super::case_of;
        assert_eq!(case_of("forward[3]: ok"), Some(("forward".into(), 3)));
        assert_eq!(
            case_of("get[x][12]: output 0: 3 element(s) differ"),
            Some(("get[x]".into(), 12))
        );
        assert_eq!(case_of("construction: out of memory"), None);
        assert_eq!(case_of("forward[a]: ok"), None);
    }
}
