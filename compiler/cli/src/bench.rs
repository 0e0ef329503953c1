//! `ptec bench`: compile a program, build it in release mode against
//! `ptec-runtime` and time it the way ExecuTorch's anchor runner
//! (`et_runner`) times the same file, so their JSON lines compare key by key.
//!
//! The executable is driven by `ptec_runtime::bench`, which takes the same
//! arguments as `et_runner`; this module adds what only ptec knows: the
//! generation time, the build time and the executable's size.
use crate::runner::{absolute, open_program, target_dir, RunnerCrate};
use ptec::{compile, Options};
use ptec_runtime::bench::BenchOptions;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// What to benchmark and how.
#[derive(Clone, Debug)]
pub struct BenchRequest {
    /// The program (`.pte`) or bundle (`.bpte`, `.bp`).
    pub path: PathBuf,
    /// `.ptd` files its program refers to.
    pub data: Vec<PathBuf>,
    /// What the executable runs (method, iterations, inputs, dumps,
    /// profile), with `et_runner`'s defaults.
    pub run: BenchOptions,
    /// Build for the CPU at hand (`-C target-cpu=native`) rather than the
    /// baseline of the target.
    pub native: bool,
    /// Show cargo's output.
    pub verbose: bool,
    /// Compile with [`ptec::Options::winograd`] (the default) or without.
    pub winograd: bool,
}

impl BenchRequest {
    /// A request with `et_runner`'s defaults (20 iterations after 3 warm-up
    /// runs of `forward`, one thread), for native code.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        BenchRequest {
            path: path.into(),
            data: Vec::new(),
            run: BenchOptions::default(),
            native: true,
            verbose: false,
            winograd: true,
        }
    }
}

/// What the benchmark executable measures (`ptec_runtime::bench::Timing`).
#[derive(Deserialize)]
struct ExecutableTiming {
    load_us: f64,
    planned_bytes: u64,
    iters: usize,
    min_us: f64,
    median_us: f64,
    max_us: f64,
    first_us: f64,
    state_bytes: u64,
    peak_rss_bytes: Option<u64>,
    #[serde(default)]
    bands_off_median_us: Option<f64>,
    #[serde(default)]
    bands_on_faster: Option<usize>,
}

/// The result: `et_runner`'s keys, in its order, then ptec's own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub model: String,
    pub method: String,
    pub threads: usize,
    pub load_us: f64,
    pub planned_bytes: u64,
    pub iters: usize,
    pub min_us: f64,
    pub median_us: f64,
    pub max_us: f64,
    /// The first execution after construction (see
    /// `ptec_runtime::bench::Timing::first_us`).
    pub first_us: f64,
    /// Time ptec took to generate the Rust module.
    pub gen_ms: f64,
    /// Time to build the executable once the runtime is built: in effect
    /// rustc on the generated module (plus cargo's fixed overhead).
    pub build_s: f64,
    /// Size of the built executable (which embeds the constants the code
    /// reads).
    pub binary_bytes: u64,
    /// Bytes the program object owns: the plan's buffers, what ptec adds
    /// to them (temporaries the plan had no room for, scratch; in
    /// external-weights mode, the weights the first run prepares).
    pub state_bytes: u64,
    /// The benchmark process's peak resident memory, where the system
    /// reports it.
    pub peak_rss_bytes: Option<u64>,
    /// With `--ab-bands`: the median of the same iterations run with the
    /// memory-bound kernels' bands off, each next to one with them on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bands_off_median_us: Option<f64>,
    /// With `--ab-bands`: in how many of those `iters` pairs the run with
    /// the bands on was faster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bands_on_faster: Option<usize>,
}

impl BenchReport {
    /// One JSON object on one line.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }
}

fn round(x: f64, decimals: i32) -> f64 {
    let f = 10f64.powi(decimals);
    (x * f).round() / f
}

/// The runner's profile with each instruction's operator after its line
/// (`  instruction   12: ... us  3.4%  aten::convolution.out`), so that it
/// reads without the generated file beside it.
fn name_instructions(profile: &str, names: &[String]) -> String {
    let mut out = String::new();
    for line in profile.lines() {
        out.push_str(line);
        let k = line
            .trim_start()
            .strip_prefix("instruction")
            .and_then(|rest| rest.split(':').next())
            .and_then(|k| k.trim().parse::<usize>().ok());
        if let Some(name) = k.and_then(|k| names.get(k)) {
            out.push_str("  ");
            out.push_str(name);
        }
        out.push('\n');
    }
    out
}

/// The executable's `main`: construct the program (timed as the load) and
/// hand it to the runtime's harness.
const MAIN: &str = "// Generated by ptec bench.\n#[allow(dead_code)]\nmod program;\n\nfn main() -> std::process::ExitCode {\n    ptec_runtime::bench::main(program::Program::try_boxed)\n}\n";

/// Builds the executable with only the runtime, so the timed build that
/// follows compiles nothing but the generated code.
const WARM_UP_MAIN: &str = "fn main() {\n    let _ = ptec_runtime::ABI_VERSION;\n}\n";

/// Compiles, builds and runs the benchmark. `progress` receives one line per
/// step.
pub fn bench(req: &BenchRequest, mut progress: impl FnMut(&str)) -> Result<BenchReport, String> {
    let shown = req.path.display().to_string();
    progress(&format!("compiling {shown}"));
    let input = open_program(
        &req.path,
        &req.data,
        "bench",
        "time it from your own code with the backend",
    )?;
    // The traced code adds `execute_traced`; what is timed is the same.
    let options = Options::new()
        .name("Program")
        .output_file("program.rs")
        .trace(req.run.etdump.is_some())
        .winograd(req.winograd);
    let t0 = Instant::now();
    let source = compile(&input, &options).map_err(|e| format!("{shown}: {e}"))?;
    let gen_ms = t0.elapsed().as_secs_f64() * 1e3;

    let krate = RunnerCrate::new("ptec-bench-run", "opt-level = 3\ndebug = false")?;
    let (target, flags) = if req.native {
        (
            target_dir("PTEC_BENCH_TARGET_DIR", "ptec-bench").join("native"),
            "-C target-cpu=native",
        )
    } else {
        (target_dir("PTEC_BENCH_TARGET_DIR", "ptec-bench").join("portable"), "")
    };
    progress(&format!("building the runtime in {}", target.display()));
    krate.write("main.rs", WARM_UP_MAIN)?;
    krate.build(&target, Some(flags), req.verbose)?;
    krate.write_source("program.rs", &source)?;
    krate.write("main.rs", MAIN)?;
    progress("building the generated code");
    let t0 = Instant::now();
    let exe = krate.build(&target, Some(flags), req.verbose)?;
    let build_s = t0.elapsed().as_secs_f64();
    let binary_bytes = std::fs::metadata(&exe)
        .map_err(|e| format!("{}: {e}", exe.display()))?
        .len();

    progress("running");
    let mut run = req.run.clone();
    for (_, file) in &mut run.input_files {
        *file = absolute(std::path::Path::new(file)).display().to_string();
    }
    if let Some(file) = &run.etdump {
        run.etdump = Some(absolute(std::path::Path::new(file)).display().to_string());
    }
    if let Some(dir) = &run.dump_outputs {
        std::fs::create_dir_all(dir).map_err(|e| format!("{dir}: {e}"))?;
        run.dump_outputs = Some(absolute(std::path::Path::new(dir)).display().to_string());
    }
    let mut cmd = Command::new(&exe);
    cmd.args(run.to_args());
    let out = cmd.output().map_err(|e| format!("running {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!(
            "the benchmark failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    if req.run.profile {
        let names = source.instructions(&req.run.method).unwrap_or_default();
        eprint!("{}", name_instructions(&String::from_utf8_lossy(&out.stderr), names));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let t: ExecutableTiming = serde_json::from_str(stdout.trim())
        .map_err(|e| format!("unexpected output of the benchmark ({e}): {stdout}"))?;
    Ok(BenchReport {
        model: shown,
        method: req.run.method.clone(),
        threads: req.run.threads,
        load_us: t.load_us,
        planned_bytes: t.planned_bytes,
        iters: t.iters,
        min_us: t.min_us,
        median_us: t.median_us,
        max_us: t.max_us,
        first_us: t.first_us,
        gen_ms: round(gen_ms, 1),
        build_s: round(build_s, 2),
        binary_bytes,
        state_bytes: t.state_bytes,
        peak_rss_bytes: t.peak_rss_bytes,
        bands_off_median_us: t.bands_off_median_us,
        bands_on_faster: t.bands_on_faster,
    })
}

#[cfg(test)]
mod tests {
    use super::name_instructions;

    #[test]
    fn profile_lines_get_their_operator() {
        let profile = "profile: 10.0 us per execution, costliest instructions:\n  instruction    2:        6.0 us  60.0%\n  instruction    0:        1.0 us  10.0%\n  instruction    9:        1.0 us  10.0%\n";
        let names = [
            "aten::add.out".to_string(),
            "move".into(),
            "aten::convolution.out".into(),
        ];
        let named = name_instructions(profile, &names);
        let lines: Vec<&str> = named.lines().collect();
        assert_eq!(lines[0], "profile: 10.0 us per execution, costliest instructions:");
        assert!(lines[1].ends_with("60.0%  aten::convolution.out"), "{}", lines[1]);
        assert!(lines[2].ends_with("10.0%  aten::add.out"), "{}", lines[2]);
        // An instruction the names do not cover is left as it was.
        assert!(lines[3].ends_with("10.0%"), "{}", lines[3]);
    }
}
