//! The timing harness behind `ptec bench`: the executable it builds calls
//! [`main`] with a constructor of the generated program.
//!
//! It mirrors ExecuTorch's anchor runner `et_runner` so the two can be
//! compared number for number: the same command-line arguments, the same
//! input fill, each iteration timed on its own, and the same `output<i>.bin`
//! dumps.
use crate::{Error, Model, ScalarType, TensorRef, Value};
use std::format;
use std::string::{String, ToString};
use std::time::Instant;
use std::vec::Vec;

/// What to run and how often (the arguments of `et_runner`).
#[derive(Clone, Debug, PartialEq)]
pub struct BenchOptions {
    pub method: String,
    pub iters: usize,
    pub warmup: usize,
    /// Raw little-endian bytes for input `k`; other inputs get [`fill`].
    pub input_files: Vec<(usize, String)>,
    /// Where to write `output<i>.bin` for each tensor output.
    pub dump_outputs: Option<String>,
    /// Also time each instruction (stepping through the method) and print
    /// the costliest to stderr.
    pub profile: bool,
    /// How many instructions the profile lists.
    pub profile_top: usize,
    /// Threads the kernels use ([`crate::set_threads`]).
    pub threads: usize,
    /// Also time every iteration with the memory-bound kernels' bands off
    /// ([`ptec_kernels::parallel::set_local_bands`]), alternating with the
    /// normal run, so both see the same phase of a noisy host.
    pub ab_bands: bool,
    /// Also run `iters` executions traced (code generated with `trace =
    /// true`) and write what they record there, as an ETDump file.
    pub etdump: Option<String>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            method: "forward".into(),
            iters: 20,
            warmup: 3,
            input_files: Vec::new(),
            dump_outputs: None,
            profile: false,
            profile_top: 25,
            threads: 1,
            ab_bands: false,
            etdump: None,
        }
    }
}

impl BenchOptions {
    /// Parses `[--method NAME] [--iters N] [--warmup N] [--threads N] [--input K=FILE]...
    /// [--dump-outputs DIR] [--profile] [--profile-top N] [--ab-bands] [--etdump FILE]`.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut o = BenchOptions::default();
        let mut args = args.into_iter();
        while let Some(a) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
            let number = |v: String| v.parse::<usize>().map_err(|_| format!("{a}: `{v}` is not a count"));
            match a.as_str() {
                "--method" => o.method = value()?,
                "--iters" => o.iters = number(value()?)?,
                "--warmup" => o.warmup = number(value()?)?,
                "--dump-outputs" => o.dump_outputs = Some(value()?),
                "--profile" => o.profile = true,
                "--profile-top" => o.profile_top = number(value()?)?,
                "--threads" => o.threads = number(value()?)?,
                "--ab-bands" => o.ab_bands = true,
                "--etdump" => o.etdump = Some(value()?),
                "--input" => {
                    let kv = value()?;
                    let (k, file) = kv
                        .split_once('=')
                        .ok_or_else(|| format!("--input takes K=FILE, not `{kv}`"))?;
                    let k = k.parse().map_err(|_| format!("--input: `{k}` is not an input index"))?;
                    o.input_files.push((k, file.into()));
                }
                _ => return Err(format!("unknown argument {a}")),
            }
        }
        if o.iters == 0 {
            return Err("--iters must be at least 1".into());
        }
        if o.threads == 0 {
            return Err("--threads must be at least 1".into());
        }
        Ok(o)
    }

    /// The arguments [`BenchOptions::parse`] reads back as these options.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = std::vec![
            "--method".into(),
            self.method.clone(),
            "--iters".into(),
            self.iters.to_string(),
            "--warmup".into(),
            self.warmup.to_string(),
            "--threads".into(),
            self.threads.to_string(),
        ];
        for (k, file) in &self.input_files {
            args.extend(["--input".into(), format!("{k}={file}")]);
        }
        if let Some(dir) = &self.dump_outputs {
            args.extend(["--dump-outputs".into(), dir.clone()]);
        }
        if self.profile {
            args.extend(["--profile".into(), "--profile-top".into(), self.profile_top.to_string()]);
        }
        if self.ab_bands {
            args.push("--ab-bands".into());
        }
        if let Some(file) = &self.etdump {
            args.extend(["--etdump".into(), file.clone()]);
        }
        args
    }
}

/// The measurements of one run, in microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// Time to construct the program (ExecuTorch: program + method load).
    pub load_us: f64,
    /// The first execution after construction (a warm-up run when there
    /// are any): what a program that prepares its weights on the first run
    /// pays for it, and the cold caches.
    pub first_us: f64,
    /// Sum of the method's memory-planned buffer sizes.
    pub planned_bytes: usize,
    /// Size of the program object: every byte it owns (the plan's buffers,
    /// what ptec adds to them; in external-weights mode, the weights the
    /// first run prepares), all of it static.
    pub state_bytes: usize,
    /// The process's peak resident memory after the runs, where the system
    /// reports it (Linux: `VmHWM`).
    pub peak_rss_bytes: Option<u64>,
    /// Each timed execution, sorted ascending.
    pub latencies_us: Vec<f64>,
    /// With [`BenchOptions::ab_bands`]: the same iterations with the bands
    /// off, each run next to one of `latencies_us`.
    pub bands_off: Option<BandsOff>,
}

/// The iterations run with the memory-bound kernels' bands off.
#[derive(Clone, Debug, PartialEq)]
pub struct BandsOff {
    /// Each timed execution with the bands off, sorted ascending.
    pub latencies_us: Vec<f64>,
    /// In how many of the pairs (one execution each way, back to back)
    /// the one with the bands on was faster.
    pub on_faster: usize,
}

/// The element at `len / 2` of sorted latencies, as `et_runner`.
fn median(sorted: &[f64]) -> f64 {
    sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
}

impl Timing {
    pub fn min_us(&self) -> f64 {
        self.latencies_us.first().copied().unwrap_or(0.0)
    }

    /// The element at `len / 2` of the sorted latencies, as `et_runner`.
    pub fn median_us(&self) -> f64 {
        median(&self.latencies_us)
    }

    pub fn max_us(&self) -> f64 {
        self.latencies_us.last().copied().unwrap_or(0.0)
    }

    /// One JSON object on one line.
    pub fn to_json(&self) -> String {
        let ab = self.bands_off.as_ref().map_or(String::new(), |off| {
            format!(
                ", \"bands_off_median_us\": {:.1}, \"bands_on_faster\": {}",
                median(&off.latencies_us),
                off.on_faster
            )
        });
        format!(
            "{{\"load_us\": {:.1}, \"planned_bytes\": {}, \"iters\": {}, \"min_us\": {:.1}, \"median_us\": {:.1}, \"max_us\": {:.1}, \"first_us\": {:.1}, \"state_bytes\": {}, \"peak_rss_bytes\": {}{ab}}}",
            self.load_us,
            self.planned_bytes,
            self.latencies_us.len(),
            self.min_us(),
            self.median_us(),
            self.max_us(),
            self.first_us,
            self.state_bytes,
            self.peak_rss_bytes.map_or("null".to_string(), |b| b.to_string())
        )
    }
}

/// Fills `data` (`numel` elements of `dtype`) with `et_runner`'s pattern:
/// `sin(0.1 i)` for float32/float64, `i % 7` for integers, `i % 2 != 0` for
/// bool and zero for every other type.
pub fn fill(dtype: ScalarType, data: &mut [u8]) {
    let size = dtype.element_size();
    for (i, e) in data.chunks_exact_mut(size).enumerate() {
        let v = (0.1 * i as f64).sin();
        let small = (i % 7) as u8;
        match dtype {
            ScalarType::Float => e.copy_from_slice(&(v as f32).to_le_bytes()),
            ScalarType::Double => e.copy_from_slice(&v.to_le_bytes()),
            ScalarType::Long => e.copy_from_slice(&(small as i64).to_le_bytes()),
            ScalarType::Int => e.copy_from_slice(&(small as i32).to_le_bytes()),
            ScalarType::Short => e.copy_from_slice(&(small as i16).to_le_bytes()),
            ScalarType::Char | ScalarType::Byte => e[0] = small,
            ScalarType::Bool => e[0] = (i % 2 != 0) as u8,
            _ => e.fill(0),
        }
    }
}

fn error(what: &str, e: Error) -> String {
    format!("{what}: {e}")
}

/// Sets the inputs of `method`, times `warmup + iters` executions and dumps
/// the outputs if asked. `load_us` is measured by the caller.
pub fn run(model: &mut dyn Model, load_us: f64, o: &BenchOptions) -> Result<Timing, String> {
    crate::set_threads(o.threads);
    let index = model
        .method_index(&o.method)
        .ok_or_else(|| format!("no method {}", o.method))?;
    let meta = &model.methods()[index];
    for &(k, _) in &o.input_files {
        if k >= meta.num_inputs() {
            return Err(format!("--input {k}: the method has {} input(s)", meta.num_inputs()));
        }
    }
    let mut inputs = Vec::new();
    for i in 0..meta.num_inputs() {
        // Like et_runner, non-tensor inputs keep their serialized values.
        let Ok(tm) = meta.input_tensor_meta(i) else { continue };
        let mut data = std::vec![0u8; tm.nbytes()];
        match o.input_files.iter().rev().find(|(k, _)| *k == i) {
            Some((_, file)) => {
                let bytes = std::fs::read(file).map_err(|e| format!("--input {i}={file}: {e}"))?;
                let n = bytes.len().min(data.len());
                data[..n].copy_from_slice(&bytes[..n]);
            }
            None => fill(tm.dtype, &mut data),
        }
        inputs.push((i, tm, data));
    }
    // A program may reuse an input's planned bytes once it has read them,
    // so every execution is given its inputs afresh (untimed).
    let set_inputs = |model: &mut dyn Model| -> Result<(), String> {
        for (i, tm, data) in &inputs {
            let t = TensorRef {
                dtype: tm.dtype,
                sizes: tm.sizes,
                dim_order: tm.dim_order,
                data,
            };
            model
                .set_input(index, *i, Value::Tensor(t))
                .map_err(|e| error(&format!("set_input {i}"), e))?;
        }
        Ok(())
    };
    let mut latencies_us = Vec::with_capacity(o.iters);
    let mut off_us = Vec::with_capacity(if o.ab_bands { o.iters } else { 0 });
    let mut on_faster = 0;
    let mut first_us = 0.0;
    let timed = |model: &mut dyn Model, bands: bool| -> Result<f64, String> {
        set_inputs(model)?;
        ptec_kernels::parallel::set_local_bands(bands);
        let t0 = Instant::now();
        let run = model.execute(index);
        let us = t0.elapsed().as_secs_f64() * 1e6;
        ptec_kernels::parallel::set_local_bands(true);
        run.map_err(|e| error("execute", e))?;
        Ok(us)
    };
    for i in 0..o.warmup + o.iters {
        // With --ab-bands, each way first in turn, so that neither always
        // follows the other.
        let (us, off) = match (o.ab_bands, i % 2 == 1) {
            (false, _) => (timed(model, true)?, None),
            (true, true) => {
                let off = timed(model, false)?;
                (timed(model, true)?, Some(off))
            }
            (true, false) => {
                let us = timed(model, true)?;
                (us, Some(timed(model, false)?))
            }
        };
        if i == 0 {
            first_us = us;
        }
        if i >= o.warmup {
            latencies_us.push(us);
            if let Some(off) = off {
                off_us.push(off);
                on_faster += usize::from(us < off);
            }
        }
    }
    latencies_us.sort_by(f64::total_cmp);
    off_us.sort_by(f64::total_cmp);
    if o.profile {
        let per_step = profile(model, index, o.iters, &set_inputs)?;
        std::eprint!("{}", profile_report(&per_step, o.profile_top));
    }
    if let Some(file) = &o.etdump {
        let recording = crate::trace::record(false, |r| {
            for _ in 0..o.iters {
                set_inputs(model)?;
                model.execute_traced(index, r).map_err(|e| error("execute_traced", e))?;
            }
            Ok::<(), String>(())
        })?;
        std::fs::write(file, recording.to_etdump()).map_err(|e| format!("{file}: {e}"))?;
    }
    if let Some(dir) = &o.dump_outputs {
        for i in 0..meta.num_outputs() {
            if let Value::Tensor(t) = model.output(index, i).map_err(|e| error("output", e))? {
                let path = std::path::Path::new(dir).join(format!("output{i}.bin"));
                std::fs::write(&path, t.data).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
    }
    Ok(Timing {
        load_us,
        first_us,
        planned_bytes: meta.planned_buffers.iter().sum(),
        state_bytes: core::mem::size_of_val(model),
        peak_rss_bytes: peak_rss_bytes(),
        latencies_us,
        bands_off: o.ab_bands.then_some(BandsOff {
            latencies_us: off_us,
            on_faster,
        }),
    })
}

/// The process's peak resident set size, from `/proc/self/status`.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Mean time of the `k`-th step of an execution of `method` (the `k`-th
/// instruction, in a method without jumps), in microseconds, over `iters`
/// executions driven one instruction at a time, each after `set_inputs`.
pub fn profile(
    model: &mut dyn Model,
    method: usize,
    iters: usize,
    set_inputs: &dyn Fn(&mut dyn Model) -> Result<(), String>,
) -> Result<Vec<f64>, String> {
    let mut total: Vec<f64> = Vec::new();
    for _ in 0..iters {
        set_inputs(model)?;
        let mut k = 0;
        loop {
            let t0 = Instant::now();
            let step = model.step(method).map_err(|e| error("step", e))?;
            let us = t0.elapsed().as_secs_f64() * 1e6;
            if total.len() <= k {
                total.push(0.0);
            }
            total[k] += us;
            k += 1;
            if step == crate::Step::Done {
                break;
            }
        }
    }
    Ok(total.into_iter().map(|t| t / iters.max(1) as f64).collect())
}

/// The `top` costliest steps of a [`profile`], one line each, with their
/// share of the whole.
pub fn profile_report(per_step: &[f64], top: usize) -> String {
    let whole: f64 = per_step.iter().sum();
    let mut order: Vec<usize> = (0..per_step.len()).collect();
    order.sort_by(|&a, &b| per_step[b].total_cmp(&per_step[a]));
    let mut out = format!("profile: {whole:.1} us per execution, costliest instructions:\n");
    for &k in order.iter().take(top) {
        let share = if whole > 0.0 { 100.0 * per_step[k] / whole } else { 0.0 };
        out.push_str(&format!(
            "  instruction {k:>4}: {:>10.1} us {share:>5.1}%\n",
            per_step[k]
        ));
    }
    out
}

/// The whole benchmark executable: parses the arguments, constructs the
/// program with `make` (a box of it, timed as the load), runs it and prints
/// [`Timing::to_json`].
pub fn main<P>(make: impl FnOnce() -> Result<P, Error>) -> std::process::ExitCode
where
    P: core::ops::DerefMut,
    P::Target: Model + Sized,
{
    let result = BenchOptions::parse(std::env::args().skip(1)).and_then(|o| {
        let t0 = Instant::now();
        let mut model = make().map_err(|e| error("construct", e))?;
        let load_us = t0.elapsed().as_secs_f64() * 1e6;
        run(&mut *model, load_us, &o)
    });
    match result {
        Ok(t) => {
            std::println!("{}", t.to_json());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            std::eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    #[test]
    fn fill_matches_et_runner() {
        let mut f = [0u8; 12];
        fill(ScalarType::Float, &mut f);
        let got: Vec<f32> = f.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, vec![0.0, (0.1f64).sin() as f32, (0.2f64).sin() as f32]);
        let mut l = [0u8; 8 * 9];
        fill(ScalarType::Long, &mut l);
        let got: Vec<i64> = l.chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4, 5, 6, 0, 1]);
        let mut b = [9u8; 4];
        fill(ScalarType::Bool, &mut b);
        assert_eq!(b, [0, 1, 0, 1]);
        let mut h = [9u8; 4];
        fill(ScalarType::Half, &mut h);
        assert_eq!(h, [0; 4]);
    }

    #[test]
    fn parses_et_runner_arguments() {
        let args = [
            "--iters",
            "5",
            "--input",
            "1=x.bin",
            "--method",
            "m",
            "--dump-outputs",
            "d",
        ];
        let o = BenchOptions::parse(args.iter().map(|s| s.to_string())).unwrap();
        assert_eq!(o.iters, 5);
        assert_eq!(o.warmup, 3);
        assert_eq!(o.method, "m");
        assert_eq!(o.input_files, vec![(1, "x.bin".to_string())]);
        assert_eq!(o.dump_outputs.as_deref(), Some("d"));
        assert!(!o.profile);
        assert!(BenchOptions::parse(["--profile".to_string()]).unwrap().profile);
        assert_eq!(o.profile_top, 25);
        let top = BenchOptions::parse(["--profile-top".to_string(), "3".to_string()]).unwrap();
        assert_eq!(top.profile_top, 3);
        let all = BenchOptions {
            profile: true,
            profile_top: 7,
            ab_bands: true,
            etdump: Some("out.etdp".into()),
            ..o
        };
        assert_eq!(BenchOptions::parse(all.to_args()).unwrap(), all);
        for bad in [
            &["--iters"][..],
            &["--iters", "x"],
            &["--input", "1"],
            &["--bogus"],
            &["--iters", "0"],
        ] {
            assert!(
                BenchOptions::parse(bad.iter().map(|s| s.to_string())).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn profile_report_ranks_steps() {
        let report = profile_report(&[1.0, 6.0, 3.0], 2);
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].contains("10.0 us per execution"));
        assert!(lines[1].contains("instruction    1") && lines[1].contains("60.0%"));
        assert!(lines[2].contains("instruction    2") && lines[2].contains("30.0%"));
    }

    #[test]
    fn median_is_et_runners() {
        let mut t = Timing {
            load_us: 1.0,
            first_us: 9.0,
            planned_bytes: 64,
            state_bytes: 128,
            peak_rss_bytes: Some(4096),
            latencies_us: vec![1.0, 2.0, 3.0, 4.0],
            bands_off: None,
        };
        assert_eq!((t.min_us(), t.median_us(), t.max_us()), (1.0, 3.0, 4.0));
        assert_eq!(
            t.to_json(),
            "{\"load_us\": 1.0, \"planned_bytes\": 64, \"iters\": 4, \"min_us\": 1.0, \"median_us\": 3.0, \"max_us\": 4.0, \"first_us\": 9.0, \"state_bytes\": 128, \"peak_rss_bytes\": 4096}"
        );
        t.peak_rss_bytes = None;
        assert!(t.to_json().ends_with("\"peak_rss_bytes\": null}"));
        t.bands_off = Some(BandsOff {
            latencies_us: vec![2.0, 5.0, 6.0],
            on_faster: 2,
        });
        assert!(t
            .to_json()
            .ends_with("\"peak_rss_bytes\": null, \"bands_off_median_us\": 5.0, \"bands_on_faster\": 2}"));
    }
}
