//! `ptec check`: compile bundles, build them against `ptec-runtime` in a
//! temporary crate, run every test case and report.
//!
//! Several bundles are checked in one crate (one `cargo build`), each as its
//! own module. The build directory persists between checks (under
//! `target/ptec-check`, or `PTEC_CHECK_TARGET_DIR`), so only the generated
//! code is compiled again.
use crate::runner::{absolute, refuse_user_backends, target_dir, RunnerCrate};
use ptec::Options;
use ptec::{compile_to_source, compile_with_cases_to_source, prepared_include, read_file, ForeignCases};
use ptec::{ErrorKind, Errors, Location};
use std::path::PathBuf;
use std::process::Command;

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
    mut progress: impl FnMut(&str),
) -> Result<Vec<CheckResult>, String> {
    if let Some(bad) = threads.iter().find(|&&t| t == 0) {
        return Err(format!("cannot run on {bad} threads"));
    }
    let krate = RunnerCrate::new("ptec-check-run", "opt-level = 2\ncodegen-units = 16\ndebug = false")?;
    let mut results: Vec<CheckResult> = Vec::new();
    let mut modules = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let path = absolute(&input.path);
        progress(&format!("compiling {}", input.path.display()));
        let generated = (|| {
            let bytes = read_file(&path)?;
            let datas = input
                .data
                .iter()
                .map(|d| read_file(&absolute(d)))
                .collect::<ptec::Result<Vec<_>>>()?;
            let refs: Vec<&[u8]> = datas.iter().map(|d| d.as_slice()).collect();
            refuse_user_backends(
                &bytes,
                &refs,
                "check",
                "run its bundled cases from your own code with the backend",
            )?;
            let mut options = Options::new(path.display().to_string());
            options.data_paths = input.data.iter().map(|d| absolute(d).display().to_string()).collect();
            options.tests = Some((input.rtol, input.atol));
            options.struct_name = Some("Program".into());
            options.prepared_path = Some(prepared_include(std::path::Path::new(&format!("m{i}.rs"))));
            let source = match &input.cases {
                None => compile_to_source(&bytes, &refs, &options)?,
                Some(cases) => {
                    let cases = absolute(cases);
                    let cases_bytes = read_file(&cases)?;
                    let foreign = ForeignCases {
                        bytes: &cases_bytes,
                        path: &cases.display().to_string(),
                    };
                    compile_with_cases_to_source(&bytes, &refs, foreign, &options)?
                }
            };
            // Without cases there is nothing to run (a .pte, or a bundle
            // whose suites are empty), and no `bundled` module to run them.
            if source.cases == 0 {
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
                });
            }
            Err(e) => results.push(CheckResult {
                input: input.clone(),
                status: CheckStatus::NotCompiled(e.to_string()),
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
        "fn main() {\n    let args: Vec<String> = std::env::args().collect();\n    ptec_runtime::set_threads(args[1].parse().expect(\"thread count\"));\n    let tols: Vec<f64> = args[2..].iter().map(|a| a.parse().expect(\"tolerance\")).collect();\n",
    );
    for (k, (m, _)) in modules.iter().enumerate() {
        main.push_str(&format!(
            "    'module: {{\n        let tol = ptec_runtime::harness::Tolerance {{ rtol: tols[{}], atol: tols[{}] }};\n        let mut model = match {m}::Program::try_boxed() {{\n            Ok(model) => model,\n            Err(e) => {{ println!(\"{m} construction: {{e}}\"); println!(\"{m} done 0 1\"); break 'module; }}\n        }};\n        let (mut passed, mut failed) = (0, 0);\n        for (k, (method, index)) in {m}::bundled::CASES.iter().enumerate() {{\n            match {m}::bundled::run_case(&mut *model, k, tol) {{\n                Ok(()) => {{ passed += 1; println!(\"{m} {{method}}[{{index}}]: ok\"); }}\n                Err(e) => {{ failed += 1; println!(\"{m} {{method}}[{{index}}]: {{e}}\"); }}\n            }}\n        }}\n        println!(\"{m} done {{passed}} {{failed}}\");\n    }}\n",
            2 * k,
            2 * k + 1
        ));
    }
    main.push_str("}\n");
    krate.write("main.rs", &main)?;
    let target = target_dir("PTEC_CHECK_TARGET_DIR", "ptec-check");
    progress(&format!("building {} module(s) in {}", modules.len(), target.display()));
    let exe = krate.build(&target, None, verbose)?;
    for &n in threads {
        progress(&format!("running on {n} thread(s)"));
        let mut cmd = Command::new(&exe);
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
            let CheckStatus::Ran { lines, passed, failed } = &mut results[*i].status else {
                continue;
            };
            for line in stdout.lines() {
                let Some(rest) = line.strip_prefix(&format!("{m} ")) else {
                    continue;
                };
                if let Some(counts) = rest.strip_prefix("done ") {
                    let mut it = counts.split(' ').map(|x| x.parse::<usize>().unwrap_or(0));
                    *passed += it.next().unwrap_or(0);
                    *failed += it.next().unwrap_or(0);
                } else {
                    lines.push(format!("{on}{rest}"));
                }
            }
        }
    }
    Ok(results)
}
