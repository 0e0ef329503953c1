//! The `ptec` command line: a thin caller of the ptec library.
use clap::{Args, Parser, Subcommand};
use ptec_cli::check::{check_with_debug_outputs, CheckInput, CheckStatus};
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ptec",
    version,
    about = "Ahead-of-time compiler from ExecuTorch .pte programs to Rust",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    compile: CompileArgs,
}

#[derive(Args)]
struct CompileArgs {
    /// The program (.pte) or bundle (.bpte, .bp) to compile.
    file: Option<PathBuf>,
    /// Where to write the Rust module (`-` for stdout).
    #[arg(short, long, default_value = "-")]
    output: String,
    /// Name of the generated program struct (default: the file stem in CamelCase).
    #[arg(long)]
    name: Option<String>,
    /// External tensor data (.ptd) the program refers to; embedded too
    /// unless the weights are external.
    #[arg(long = "data")]
    data: Vec<PathBuf>,
    /// `embedded`: the weights are compiled into the binary. `external`: the
    /// program is given the .pte (and .ptd files) at construction and reads
    /// them in place (memory-mapped with `ptec_runtime::Blob::open`).
    #[arg(long, value_parser = ["embedded", "external"], default_value = "embedded")]
    weights: String,
    /// For a bundle: also generate its test cases (a `bundled` module with one #[test] per case).
    #[arg(long)]
    tests: bool,
    /// Relative tolerance of generated tests.
    #[arg(long, default_value_t = ptec::Tolerance::default().rtol.to_string())]
    rtol: String,
    /// Absolute tolerance of generated tests.
    #[arg(long, default_value_t = ptec::Tolerance::default().atol.to_string())]
    atol: String,
    /// `false`: leave calls of ExecuTorch's XNNPACK delegate to a user
    /// backend registered at run time instead of compiling them.
    #[arg(long, value_name = "BOOL", value_parser = ["true", "false"], default_value = "true")]
    lower_xnnpack: String,
    /// `false`: run aten convolutions NCHW, as the program says, instead
    /// of on NHWC images with batch norms and clamps folded in.
    #[arg(long, value_name = "BOOL", value_parser = ["true", "false"], default_value = "true")]
    channels_last: String,
    /// `true`: also generate `execute_traced`, which reports each
    /// instruction to a `ptec_runtime::trace::Tracer` (ETDump profiles and
    /// debug outputs for ExecuTorch's devtools).
    #[arg(long, value_name = "BOOL", value_parser = ["true", "false"], default_value = "false")]
    trace: String,
    /// `false`: run every convolution by the direct sum, which rounds
    /// closer to PyTorch, instead of ResNet-like 3 × 3 layers by
    /// Winograd's F(2 × 2, 3 × 3), which does 2.25× fewer multiplications.
    #[arg(long, value_name = "BOOL", value_parser = ["true", "false"], default_value = "true")]
    winograd: String,
}

impl CompileArgs {
    /// The options, read by the parser `include_pte!`'s arguments go
    /// through too.
    fn options(&self) -> ptec::Result<ptec::Options> {
        let mut options = ptec::Options::new();
        let tests = if self.tests { "true" } else { "false" };
        let mut flags = vec![
            ("weights", self.weights.as_str()),
            ("rtol", self.rtol.as_str()),
            ("atol", self.atol.as_str()),
            ("tests", tests),
            ("lower-xnnpack", self.lower_xnnpack.as_str()),
            ("channels-last", self.channels_last.as_str()),
            ("trace", self.trace.as_str()),
            ("winograd", self.winograd.as_str()),
        ];
        // Without a name the struct is named after the file.
        flags.extend(self.name.as_deref().map(|n| ("name", n)));
        for (key, value) in flags {
            options.set(key, Some(value))?;
        }
        Ok(options)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Show what a .pte, .bp, .bpte or .ptd file holds.
    Inspect {
        file: PathBuf,
        /// Print a JSON document instead of text.
        #[arg(long)]
        json: bool,
        /// External tensor data (.ptd) the program refers to.
        #[arg(long = "data")]
        data: Vec<PathBuf>,
    },
    /// Compile bundles, build and run their test cases; exit 0 only if all pass.
    Check {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// External tensor data (.ptd) the programs refer to.
        #[arg(long = "data")]
        data: Vec<PathBuf>,
        #[arg(long, default_value_t = ptec::Tolerance::default().rtol)]
        rtol: f64,
        #[arg(long, default_value_t = ptec::Tolerance::default().atol)]
        atol: f64,
        /// Check the files against this bundle's test cases instead of
        /// their own (a .pte has none): e.g. a program exported for XNNPACK
        /// against the bundle of the same model exported portably.
        #[arg(long)]
        cases: Option<PathBuf>,
        /// `false`: compile every convolution to run by the direct sum
        /// rather than ResNet-like 3 × 3 layers by Winograd's method (see
        /// the `winograd` option).
        #[arg(long, value_name = "BOOL", value_parser = ["true", "false"], default_value = "true")]
        winograd: String,
        /// Run the cases on each of these thread counts (e.g. 1,2): the
        /// kernels split large work across threads, and each split must
        /// reproduce the bundled outputs too.
        #[arg(long, value_delimiter = ',', default_value = "1", value_parser = clap::value_parser!(u32).range(1..=16))]
        threads: Vec<u32>,
        /// Run the first failing case (or, when all pass, the first) again
        /// and write its profile and every instruction's outputs to FILE as
        /// an ETDump, the outputs' bytes to the debug buffer beside it
        /// (out.etdp → out.bin), for ExecuTorch's Inspector (see
        /// docs/devtools.md). One bundle only.
        #[arg(long, value_name = "FILE")]
        debug_outputs: Option<PathBuf>,
        /// When a case fails, the program ExecuTorch's Python runtime runs
        /// as the reference that names the first instruction whose output
        /// differs (default: the file checked; it needs the same
        /// instructions).
        #[arg(long, value_name = "FILE")]
        reference: Option<PathBuf>,
        /// Show cargo's output while building.
        #[arg(short, long)]
        verbose: bool,
        /// Where to build and cache the runner (default:
        /// $PTEC_CHECK_TARGET_DIR, else ptec-check under $CARGO_TARGET_DIR,
        /// the source tree's target, or the user's cache directory).
        #[arg(long, value_name = "DIR")]
        target_dir: Option<PathBuf>,
    },
    /// Build a program in release mode and report its size: per method
    /// the planned memory, constants, code and stack; per operator kind
    /// the code it adds (see docs/devtools.md).
    Size {
        /// The program (.pte) or bundle (.bpte, .bp).
        file: PathBuf,
        /// The target triple to build for (default: the host; the stack is
        /// measured on the host only).
        #[arg(long)]
        target: Option<String>,
        /// External tensor data (.ptd) the program refers to.
        #[arg(long = "data")]
        data: Vec<PathBuf>,
        /// Print a JSON document instead of text.
        #[arg(long)]
        json: bool,
        /// Also copy the binary measured to FILE (its `main` constructs the
        /// program and runs each method once).
        #[arg(long, value_name = "FILE")]
        keep: Option<PathBuf>,
        /// Show cargo's output while building.
        #[arg(short, long)]
        verbose: bool,
        /// Where to build and cache the runner (default:
        /// $PTEC_SIZE_TARGET_DIR, else ptec-size under $CARGO_TARGET_DIR,
        /// the source tree's target, or the user's cache directory).
        #[arg(long, value_name = "DIR")]
        target_dir: Option<PathBuf>,
    },
    /// Print the operator coverage table (Markdown).
    Coverage,
    /// Build a program in release mode and time it; prints one JSON line
    /// with the keys of ExecuTorch's et_runner plus gen_ms, build_s and
    /// binary_bytes.
    Bench(BenchArgs),
}

#[derive(Args)]
struct BenchArgs {
    /// The program (.pte) or bundle (.bpte, .bp) to time.
    file: PathBuf,
    #[arg(long, default_value = "forward")]
    method: String,
    /// Timed executions.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    iters: u32,
    /// Untimed executions before them.
    #[arg(long, default_value_t = 3)]
    warmup: u32,
    /// Threads the kernels use (large matrix products and depthwise
    /// convolutions split their work).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    threads: u32,
    /// Raw little-endian bytes for input K (K=FILE); other inputs get
    /// et_runner's fill: sin(0.1 i) for floats, i % 7 for integers.
    #[arg(long = "input", value_name = "K=FILE", value_parser = parse_input)]
    inputs: Vec<(usize, PathBuf)>,
    /// Write each tensor output's bytes to DIR/output<i>.bin, as et_runner.
    #[arg(long, value_name = "DIR")]
    dump_outputs: Option<PathBuf>,
    /// External tensor data (.ptd) the program refers to.
    #[arg(long = "data")]
    data: Vec<PathBuf>,
    /// Build for the target's baseline CPU instead of `-C target-cpu=native`.
    #[arg(long)]
    portable: bool,
    /// Also time each instruction (stepping through the method) and print
    /// the costliest to stderr; instruction numbers are those of the
    /// generated code (`ptec FILE` shows it).
    #[arg(long)]
    profile: bool,
    /// How many instructions `--profile` lists, costliest first.
    #[arg(long, default_value_t = 25)]
    profile_top: u32,
    /// Also run every timed iteration with the bands of memory-bound
    /// kernels (copies, fills, permutations, element-wise maps, layer
    /// norms) off, alternating, and report `bands_off_median_us` and
    /// `bands_on_faster` (in how many of the pairs the normal run won).
    /// Meaningful with --threads > 1.
    #[arg(long)]
    ab_bands: bool,
    /// Also run the timed iterations again, traced, and write their
    /// profile to FILE as an ETDump, which ExecuTorch's Inspector reads
    /// (operators named by their instruction in the .pte; see
    /// docs/devtools.md).
    #[arg(long, value_name = "FILE")]
    etdump: Option<PathBuf>,
    /// `false`: compile every convolution to run by the direct sum
    /// rather than ResNet-like 3 × 3 layers by Winograd's method (see the
    /// `winograd` option).
    #[arg(long, value_name = "BOOL", value_parser = ["true", "false"], default_value = "true")]
    winograd: String,
    /// Show cargo's output while building.
    #[arg(short, long)]
    verbose: bool,
    /// Where to build and cache the runner (default:
    /// $PTEC_BENCH_TARGET_DIR, else ptec-bench under $CARGO_TARGET_DIR, the
    /// source tree's target, or the user's cache directory).
    #[arg(long, value_name = "DIR")]
    target_dir: Option<PathBuf>,
}

fn parse_input(s: &str) -> Result<(usize, PathBuf), String> {
    let (k, file) = s.split_once('=').ok_or("expected K=FILE")?;
    let k = k.parse().map_err(|_| format!("`{k}` is not an input index"))?;
    Ok((k, PathBuf::from(file)))
}

fn run_bench(a: &BenchArgs) -> Result<(), String> {
    if let Some(d) = &a.target_dir {
        // bench builds its native and portable runtimes apart.
        ptec_cli::set_target_dir(d.clone());
    }
    let mut req = ptec_cli::bench::BenchRequest::new(&a.file);
    req.data = a.data.clone();
    req.run.method = a.method.clone();
    req.run.iters = a.iters as usize;
    req.run.warmup = a.warmup as usize;
    req.run.input_files = a.inputs.iter().map(|(k, f)| (*k, f.display().to_string())).collect();
    req.run.dump_outputs = a.dump_outputs.as_ref().map(|d| d.display().to_string());
    req.run.profile = a.profile;
    req.run.profile_top = a.profile_top as usize;
    req.run.threads = a.threads as usize;
    req.run.ab_bands = a.ab_bands;
    req.run.etdump = a.etdump.as_ref().map(|f| f.display().to_string());
    req.native = !a.portable;
    req.verbose = a.verbose;
    req.winograd = a.winograd == "true";
    let report = ptec_cli::bench::bench(&req, |msg| eprintln!("ptec bench: {msg}"))?;
    println!("{}", report.to_json());
    Ok(())
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn inspect(file: &Path, json: bool, data: &[PathBuf]) -> Result<(), String> {
    let bytes = read(file)?;
    let data_bytes = data.iter().map(|p| read(p)).collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&[u8]> = data_bytes.iter().map(|d| d.as_slice()).collect();
    let loaded = ptec::load(&bytes, &refs).map_err(|e| format!("{}: {e}", file.display()))?;
    if json {
        let doc = ptec_cli::inspect::to_json(&loaded, bytes.len());
        println!("{}", serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?);
    } else {
        print!(
            "{}",
            ptec_cli::inspect::to_text(&loaded, &file.display().to_string(), bytes.len())
        );
    }
    Ok(())
}

/// `to` relative to directory `from` when both are absolute, else `to`.
fn relative_to(from: &Path, to: &Path) -> PathBuf {
    let (Ok(from), Ok(to)) = (std::fs::canonicalize(from), std::fs::canonicalize(to)) else {
        return to.to_path_buf();
    };
    let f: Vec<Component> = from.components().collect();
    let t: Vec<Component> = to.components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    out
}

/// The path a generated `include_bytes!` uses: relative to the output file
/// when writing one, absolute for stdout.
fn include_path(input: &Path, output: &str) -> String {
    if output == "-" {
        return std::fs::canonicalize(input)
            .unwrap_or_else(|_| input.to_path_buf())
            .display()
            .to_string();
    }
    let out_dir = Path::new(output)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // The output's directory must exist to be resolved; it is about to be
    // written into anyway.
    let _ = std::fs::create_dir_all(out_dir);
    relative_to(out_dir, input).display().to_string()
}

fn compile(a: &CompileArgs) -> Result<(), String> {
    let Some(file) = &a.file else {
        return Err("no input file: `ptec MODEL.pte -o model.rs`, or see `ptec --help`".into());
    };
    let mut options = a.options().map_err(|e| e.to_string())?;
    let mut input = ptec::Input::new(read(file)?, include_path(file, &a.output)).source_name(
        file.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    for d in &a.data {
        input = input.data(read(d)?, include_path(d, &a.output));
    }
    // The constants go beside the output (`model.rs` → `model.prepared`),
    // or, on standard output, into the code itself.
    if a.output != "-" {
        options = options.output_file(&a.output);
    }
    let output = ptec::compile(&input, &options).map_err(|e| format!("{}: {e}", file.display()))?;
    if a.output == "-" {
        print!(
            "{}",
            output.to_source().map_err(|e| format!("{}: {e}", file.display()))?
        );
    } else {
        output.write(&a.output).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn run_check(
    files: &[PathBuf],
    data: &[PathBuf],
    (rtol, atol): (f64, f64),
    (cases, winograd): (Option<&PathBuf>, bool),
    threads: &[u32],
    (debug_outputs, reference): (Option<&Path>, Option<&Path>),
    verbose: bool,
) -> Result<bool, String> {
    let inputs: Vec<CheckInput> = files
        .iter()
        .map(|f| CheckInput {
            path: f.clone(),
            data: data.to_vec(),
            rtol,
            atol,
            cases: cases.cloned(),
            winograd,
        })
        .collect();
    let threads: Vec<usize> = threads.iter().map(|&t| t as usize).collect();
    let progress = |msg: &str| eprintln!("ptec check: {msg}");
    let results = check_with_debug_outputs(&inputs, &threads, verbose, debug_outputs, progress)?;
    // Where a case fails, the first instruction that differs from
    // ExecuTorch's runtime.
    let verdicts =
        ptec_cli::reference::explain_failures(&results, threads[0], verbose, debug_outputs, reference, progress);
    let (mut passed, mut failed) = (0, 0);
    for r in &results {
        match &r.status {
            CheckStatus::Ran {
                lines,
                passed: p,
                failed: f,
            } => {
                let verdict = verdicts.iter().filter(|(k, _)| std::ptr::eq(&results[*k], r));
                for l in lines.iter().cloned().chain(verdict.map(|(_, v)| v.message())) {
                    if results.len() > 1 {
                        println!("{}: {l}", r.input.path.display());
                    } else {
                        println!("{l}");
                    }
                }
                passed += p;
                failed += f;
            }
            CheckStatus::NotCompiled(e) => {
                println!("{}: not compiled: {e}", r.input.path.display());
                failed += 1;
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    Ok(failed == 0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Some(Command::Inspect { file, json, data }) => inspect(file, *json, data).map(|_| true),
        Some(Command::Check {
            files,
            data,
            rtol,
            atol,
            cases,
            winograd,
            threads,
            debug_outputs,
            reference,
            verbose,
            target_dir,
        }) => {
            if let Some(d) = target_dir {
                ptec_cli::set_target_dir(d.clone());
            }
            run_check(
                files,
                data,
                (*rtol, *atol),
                (cases.as_ref(), winograd == "true"),
                threads,
                (debug_outputs.as_deref(), reference.as_deref()),
                *verbose,
            )
        }
        Some(Command::Bench(args)) => run_bench(args).map(|_| true),
        Some(Command::Size {
            file,
            target,
            data,
            json,
            keep,
            verbose,
            target_dir,
        }) => {
            if let Some(d) = target_dir {
                ptec_cli::set_target_dir(d.clone());
            }
            let req = ptec_cli::size::SizeRequest {
                path: file.clone(),
                data: data.clone(),
                target: target.clone(),
                keep: keep.clone(),
                verbose: *verbose,
            };
            ptec_cli::size::size(&req, |msg| eprintln!("ptec size: {msg}")).map(|r| {
                if *json {
                    println!("{}", serde_json::to_string_pretty(&r).expect("a report serializes"));
                } else {
                    print!("{}", r.to_text());
                }
                true
            })
        }
        Some(Command::Coverage) => {
            print!("{}", ptec::coverage::coverage_markdown());
            Ok(true)
        }
        None => compile(&cli.compile).map(|_| true),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}
