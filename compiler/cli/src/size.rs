//! `ptec size`: what a compiled program costs, measured on a release build
//! of it for a chosen target, as ExecuTorch's size analysis reports a
//! `.pte` but for the binary.
//!
//! The program is compiled as `ptec bench` compiles it and built in a
//! runner crate (`opt-level = 3`, symbols kept). Then:
//!
//! - **code** is read from the binary: its executable sections, and each
//!   function symbol's size (the `object` crate reads ELF, Mach-O and
//!   PE). A symbol counts for a method when it is in the method's state
//!   type (`state_type_name`), for an operator kind when it is one of the
//!   instruction functions (`iN`) of that kind, or a kernel of a
//!   `ptec_kernels` module that only that kind's instructions call by name
//!   (modules several kinds call are reported as shared). Code the
//!   optimizer inlined goes with the function it was inlined into: an
//!   instruction inlined into the method's dispatch counts for the
//!   method, not its operator; a kernel inlined into an instruction counts
//!   for its operator.
//! - **planned memory** is what the built program's method descriptions
//!   say (`MethodMeta::planned_buffers`), **constants** what the program
//!   places in constant tensors, and the embedded data the size of the
//!   binary's `EMBEDDED_DATA`.
//! - on a target without an operating system (a `*-none-*` triple) the
//!   runner is `#![no_std]`: the program in a zeroed `static`, initialised
//!   in place, each method given inputs and executed from `_start`, so
//!   that what a firmware calls is linked; the state's size is its
//!   static's symbol.
//! - **stack**, on the host only (the binary must run), is measured by
//!   painting: each method runs once on a thread of its own whose unused
//!   stack was filled with a pattern, and the deepest word overwritten
//!   gives the depth (`-Z emit-stack-sizes` would give it statically, but
//!   needs a nightly compiler).
use crate::runner::{open_program, target_dir, RunnerCrate};
use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
use ptec::{compile, Options};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

/// What to measure.
#[derive(Clone, Debug)]
pub struct SizeRequest {
    /// The program (`.pte`) or bundle (`.bpte`, `.bp`).
    pub path: PathBuf,
    /// `.ptd` files its program refers to.
    pub data: Vec<PathBuf>,
    /// The target triple to build for (default: the host).
    pub target: Option<String>,
    /// Where to copy the binary measured (to strip it, or run it).
    pub keep: Option<PathBuf>,
    /// Show cargo's output.
    pub verbose: bool,
}

/// One method's share.
#[derive(Clone, Debug, Serialize)]
pub struct MethodSize {
    pub name: String,
    /// Its planned memory (the plan's buffers, as the built program
    /// describes them).
    pub planned_bytes: u64,
    /// Its constant tensors' bytes.
    pub constant_bytes: u64,
    /// Its generated code: the symbols of its state type.
    pub code_bytes: u64,
    /// The stack one execution used at most (host only), measured to
    /// within `stack_resolution_bytes`.
    pub stack_bytes: Option<u64>,
}

/// The code an operator kind adds.
#[derive(Clone, Debug, Serialize)]
pub struct OperatorCode {
    /// `aten::convolution.out`, or how the generated code names a
    /// delegate's nodes.
    pub operator: String,
    /// Its instructions in the generated code.
    pub instructions: usize,
    /// Its instruction functions plus the kernels only it calls.
    pub code_bytes: u64,
    /// The `ptec_kernels` modules its instructions call.
    pub kernels: Vec<String>,
}

/// One section of the binary.
#[derive(Clone, Debug, Serialize)]
pub struct SectionSize {
    pub name: String,
    /// `code`, `read-only data`, `data`, `zero-initialised` (no bytes in
    /// the file), `debug` or `other`.
    pub kind: &'static str,
    /// Its size in memory (or, for what is not loaded, its size).
    pub bytes: u64,
    /// What it takes in the file.
    pub file_bytes: u64,
}

/// What `ptec size` reports.
#[derive(Clone, Debug, Serialize)]
pub struct SizeReport {
    pub file: String,
    /// The target triple built for.
    pub target: String,
    /// The executable's size on disk (symbols included; stripped it is
    /// smaller).
    pub binary_bytes: u64,
    /// Its executable sections.
    pub code_bytes: u64,
    /// Its sections, in the file's order.
    pub sections: Vec<SectionSize>,
    /// Its embedded constants (`EMBEDDED_DATA`).
    pub embedded_bytes: u64,
    /// The program object's size (on the host, from a run; on a target
    /// without an operating system, its static's symbol): planned memory
    /// and all.
    pub state_bytes: Option<u64>,
    /// Whether the binary ran (on the host): stacks are measured only then.
    pub ran: bool,
    pub methods: Vec<MethodSize>,
    /// Largest first.
    pub operators: Vec<OperatorCode>,
    /// Kernel modules several operator kinds call, and their code.
    pub shared_kernels: Vec<String>,
    pub shared_kernel_bytes: u64,
    /// Kernel code no instruction calls by name (helpers the kernels call).
    pub other_kernel_bytes: u64,
    /// All generated code, `ptec_kernels`, `ptec_runtime`, and the rest
    /// (the standard library, the runner's `main`).
    pub generated_bytes: u64,
    pub kernel_bytes: u64,
    pub runtime_bytes: u64,
    pub other_bytes: u64,
    pub stack_resolution_bytes: u64,
}

/// The runner's `main`: constructs the program, then runs each method once
/// on the inputs `ptec bench` gives (et_runner's fill) on a thread whose
/// stack it painted, and prints `state BYTES`, then per method `method
/// INDEX PLANNED STACK` (`STACK` `-` when the run failed).
const MAIN: &str = r#"// Generated by ptec size.
#[allow(dead_code)]
mod program;
use ptec_runtime::{Model, TensorRef, Value};

/// The stack painted below the measuring frame, and the gap left above it
/// for the painting function's own frame.
const PAINT: usize = 8 << 20;
const MARGIN: usize = 1024;
const WORD: u64 = 0x7074_6563_5354_4b21;

#[inline(never)]
fn here() -> usize {
    let x = 0u8;
    core::hint::black_box(&x) as *const u8 as usize
}

// Writing and reading the thread's stack below the current frame is
// outside what the language promises (the memory is this thread's unused
// stack, which nothing else owns), as in examples/cortex-m: a measurement
// tool, not a pattern to copy.
#[inline(never)]
unsafe fn paint(top: usize) {
    let mut a = top - PAINT;
    while a < top {
        unsafe { (a as *mut u64).write_volatile(WORD) };
        a += 8;
    }
}

#[inline(never)]
unsafe fn lowest_touched(top: usize) -> usize {
    let mut a = top - PAINT;
    while a < top && unsafe { (a as *const u64).read_volatile() } == WORD {
        a += 8;
    }
    a
}

fn main() {
    ptec_runtime::set_threads(1);
    let mut model = program::Program::try_boxed().expect("constructing the program");
    println!("state {}", core::mem::size_of_val(&*model));
    for index in 0..model.methods().len() {
        let meta = &model.methods()[index];
        let planned: usize = meta.planned_buffers.iter().sum();
        let mut ok = true;
        for i in 0..meta.num_inputs() {
            let Ok(tm) = meta.input_tensor_meta(i) else { continue };
            let mut data = vec![0u8; tm.nbytes()];
            ptec_runtime::bench::fill(tm.dtype, &mut data);
            let t = TensorRef { dtype: tm.dtype, sizes: tm.sizes, dim_order: tm.dim_order, data: &data };
            ok &= model.set_input(index, i, Value::Tensor(t)).is_ok();
        }
        let model = &mut *model;
        let depth = ok.then(|| {
            std::thread::scope(|s| {
                std::thread::Builder::new()
                    .stack_size(PAINT + (1 << 20))
                    .spawn_scoped(s, move || {
                        let top = here() - MARGIN;
                        unsafe { paint(top) };
                        // Through a pointer: the method keeps a symbol
                        // of the program's, where inlined into this
                        // closure its code would count as the runner's.
                        let execute: fn(&mut program::Program, usize) -> Result<(), ptec_runtime::Error> =
                            core::hint::black_box(<program::Program as Model>::execute);
                        let run = execute(model, index);
                        let low = unsafe { lowest_touched(top) };
                        run.ok().map(|_| top + MARGIN - low)
                    })
                    .expect("a thread")
                    .join()
                    .ok()
                    .flatten()
            })
        });
        match depth.flatten() {
            Some(d) => println!("method {index} {planned} {d}"),
            None => println!("method {index} {planned} -"),
        }
    }
}
"#;

/// The runner for targets without an operating system (`*-none*`
/// triples): `#![no_std]`, no heap. The program lives in a zeroed
/// `static` (`PTEC_SIZE_STATE`, whose symbol gives the state's size) and
/// `_start` initialises it in place, gives each method inputs of the
/// right description and executes it, so that everything a firmware would
/// call is linked. It is built and measured, never run.
const MAIN_NO_STD: &str = r#"// Generated by ptec size.
#![no_std]
#![no_main]
#[allow(dead_code)]
mod program;
use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use ptec_runtime::{InitInPlace, Model, TensorRef, Value};

#[repr(transparent)]
struct Slot(UnsafeCell<MaybeUninit<program::Program>>);
// SAFETY: only `_start` touches the slot, on the one thread there is.
unsafe impl Sync for Slot {}

#[no_mangle]
static PTEC_SIZE_STATE: Slot = Slot(UnsafeCell::new(MaybeUninit::zeroed()));

#[no_mangle]
pub extern "C" fn _start() -> ! {
    let slot = PTEC_SIZE_STATE.0.get().cast::<program::Program>();
    // SAFETY: the static is zero-filled and this is its only use.
    unsafe { program::Program::init_in_place(slot) };
    // SAFETY: initialised above; nothing else refers to it. Called through
    // the trait object, the methods stay functions of their own (code of
    // the program, not of `_start`).
    let model: &mut dyn Model = core::hint::black_box(unsafe { &mut *slot });
    for index in 0..model.methods().len() {
        let meta = &model.methods()[index];
        for i in 0..meta.num_inputs() {
            let Ok(tm) = meta.input_tensor_meta(i) else { continue };
            // Opaque data: the optimizer may not assume what the inputs are.
            let data: &[u8] = core::hint::black_box(&[]);
            let t = TensorRef { dtype: tm.dtype, sizes: tm.sizes, dim_order: tm.dim_order, data };
            let _ = core::hint::black_box(model.set_input(index, i, Value::Tensor(t)));
        }
        let _ = core::hint::black_box(model.execute(index));
    }
    loop {}
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}
"#;

/// The runner crates: with `std`, and without an operating system.
const RUNNER: &str = "ptec-size-run";
const RUNNER_BARE: &str = "ptec-size-bare";

/// A function symbol of the binary: its demangled name (no hash) and size.
struct Symbol {
    name: String,
    size: u64,
}

/// What a section holds, as the report names it.
fn section_kind(kind: SectionKind) -> &'static str {
    match kind {
        SectionKind::Text => "code",
        SectionKind::ReadOnlyData | SectionKind::ReadOnlyDataWithRel | SectionKind::ReadOnlyString => "read-only data",
        SectionKind::Data | SectionKind::Tls => "data",
        SectionKind::UninitializedData | SectionKind::UninitializedTls | SectionKind::Common => "zero-initialised",
        SectionKind::Debug | SectionKind::DebugString => "debug",
        _ => "other",
    }
}

/// What `ptec size` reads from the built binary.
struct Binary {
    /// The bytes of its executable sections.
    code: u64,
    sections: Vec<SectionSize>,
    /// Its function symbols.
    symbols: Vec<Symbol>,
    /// The bytes of its `EMBEDDED_DATA` symbols.
    embedded: u64,
    /// The size of the no_std runner's `PTEC_SIZE_STATE` static, where the
    /// binary says it.
    state_static: Option<u64>,
}

fn read_binary(bytes: &[u8]) -> Result<Binary, String> {
    if bytes.starts_with(b"\0asm") {
        return Err("ptec size reads ELF, Mach-O and PE binaries, and this target builds WebAssembly".into());
    }
    let file = object::File::parse(bytes).map_err(|e| format!("reading the built binary: {e}"))?;
    let text: BTreeMap<usize, (u64, u64)> = file
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .map(|s| (s.index().0, (s.address(), s.size())))
        .collect();
    let code = text.values().map(|(_, size)| size).sum();
    let sections = file
        .sections()
        .filter(|s| s.size() > 0)
        .map(|s| SectionSize {
            name: s.name().unwrap_or("?").to_string(),
            kind: section_kind(s.kind()),
            bytes: s.size(),
            file_bytes: s.file_range().map_or(0, |(_, len)| len),
        })
        .collect();
    let (mut embedded, mut state_static) = (0, None);
    let mut functions: Vec<(u64, u64, usize, String)> = Vec::new();
    for s in file.symbols() {
        let Ok(name) = s.name() else { continue };
        if s.kind() == SymbolKind::Data && name.contains("EMBEDDED_DATA") {
            embedded += s.size();
        }
        if name == "PTEC_SIZE_STATE" && s.size() > 0 {
            state_static = Some(s.size());
        }
        match s.section_index() {
            Some(i) if s.kind() == SymbolKind::Text && s.is_definition() && text.contains_key(&i.0) => {
                functions.push((s.address(), s.size(), i.0, name.to_string()))
            }
            _ => {}
        }
    }
    functions.sort_by_key(|f| f.0);
    // Aliases share an address: count the code once.
    functions.dedup_by_key(|f| f.0);
    let mut symbols = Vec::with_capacity(functions.len());
    for (k, (address, size, section, name)) in functions.iter().enumerate() {
        // Formats without sizes (Mach-O): up to the next symbol, or the
        // section's end.
        let size = match *size {
            0 => {
                let (start, len) = text[section];
                let next = functions
                    .get(k + 1)
                    .filter(|n| n.2 == *section)
                    .map_or(start + len, |n| n.0);
                next.saturating_sub(*address)
            }
            s => s,
        };
        symbols.push(Symbol {
            name: format!("{:#}", rustc_demangle::demangle(name)),
            size,
        });
    }
    Ok(Binary {
        code,
        sections,
        symbols,
        embedded,
        state_static,
    })
}

/// For each state type's instruction function (`(state, "i12")`), its
/// operator (from the `/// Instruction K: OP(...)` line above it), and the
/// `ptec_kernels` modules it calls by name.
fn instruction_functions(source: &str) -> BTreeMap<(String, String), (String, BTreeSet<String>)> {
    let mut out = BTreeMap::new();
    let (mut state, mut op) = (String::new(), None::<String>);
    let mut current: Option<(String, String)> = None;
    for line in source.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("impl ") {
            if let Some(name) = rest.strip_suffix(" {").filter(|n| n.ends_with("State")) {
                state = name.to_string();
            }
            current = None;
        } else if let Some(rest) = t.strip_prefix("/// Instruction ") {
            op = rest
                .split_once(": ")
                .map(|(_, o)| o.split('(').next().unwrap_or(o).trim().to_string());
        } else if let Some(rest) = t.strip_prefix("fn ").or_else(|| t.strip_prefix("pub fn ")) {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let is_instruction =
                name.len() > 1 && name.starts_with('i') && name[1..].bytes().all(|b| b.is_ascii_digit());
            current = match (is_instruction, op.take()) {
                (true, Some(o)) => {
                    let key = (state.clone(), name);
                    out.insert(key.clone(), (o, BTreeSet::new()));
                    Some(key)
                }
                _ => None,
            };
        } else if let Some(key) = &current {
            let mut rest = line;
            while let Some(at) = rest.find("::ptec_runtime::kernels::") {
                rest = &rest[at + "::ptec_runtime::kernels::".len()..];
                let module: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                // A path straight to an item of the kernels' root (a
                // function, or a type: `KernelError::Shape`) is not a
                // module; modules are snake case.
                if rest[module.len()..].starts_with("::") && module.starts_with(|c: char| c.is_ascii_lowercase()) {
                    if let Some((_, modules)) = out.get_mut(key) {
                        modules.insert(module);
                    }
                }
            }
        }
    }
    out
}

/// The `ptec_kernels` modules each module of the kernels' sources in
/// `dir` names (`crate::gemm::...`, `use crate::{gemm, parallel}`): how a
/// kernel reaches helpers the generated code does not call by name.
fn kernel_module_uses(dir: &std::path::Path) -> BTreeMap<String, BTreeSet<String>> {
    fn files(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let mut all = Vec::new();
    files(dir, &mut all);
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in all {
        let Ok(rel) = file.strip_prefix(dir) else { continue };
        let Some(first) = rel.components().next() else { continue };
        let module = first.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        // The code only: not comments, nor the tests at the file's end.
        let text: String = text
            .lines()
            .take_while(|l| l.trim() != "#[cfg(test)]")
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let named = uses.entry(module.clone()).or_default();
        for (at, _) in text.match_indices("crate::") {
            let rest = &text[at + "crate::".len()..];
            match rest.strip_prefix('{') {
                Some(list) => {
                    let list = &list[..list.find('}').unwrap_or(0)];
                    named.extend(list.split(',').map(|p| ident(p.trim())));
                }
                None => {
                    named.insert(ident(rest));
                }
            }
        }
        named.remove(&module);
    }
    // Only what is a module of the crate.
    let modules: BTreeSet<String> = uses.keys().cloned().collect();
    for named in uses.values_mut() {
        named.retain(|m| modules.contains(m));
    }
    uses
}

/// `direct` and every module they reach through `uses`.
fn reached(direct: &BTreeSet<String>, uses: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    let mut seen = direct.clone();
    let mut todo: Vec<String> = direct.iter().cloned().collect();
    while let Some(m) = todo.pop() {
        for n in uses.get(&m).into_iter().flatten() {
            if seen.insert(n.clone()) {
                todo.push(n.clone());
            }
        }
    }
    seen
}

/// Where a symbol's code belongs.
enum Owner<'a> {
    /// Generated code; in a method's state type (by state name) and an
    /// instruction function of it.
    Generated {
        state: Option<&'a str>,
        function: Option<String>,
    },
    /// A `ptec_kernels` module.
    Kernel(String),
    Runtime,
    Other,
}

/// Who owns the function `name` of the binary `runner` built.
fn owner<'a>(name: &str, runner: &str, states: &'a [String]) -> Owner<'a> {
    let path = name.trim_start_matches('<');
    if let Some(rest) = path.strip_prefix("ptec_kernels::") {
        let module: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        return Owner::Kernel(module);
    }
    if path.starts_with("ptec_runtime::") {
        return Owner::Runtime;
    }
    let generated = path
        .strip_prefix(runner.replace('-', "_").as_str())
        .is_some_and(|rest| rest.starts_with("::program::"));
    if !generated {
        return Owner::Other;
    }
    let state = states
        .iter()
        .find(|s| path.contains(&format!("::{s}>")) || path.contains(&format!("::{s}::")));
    let function = state.and_then(|s| {
        let after = &path[path.find(s.as_str())? + s.len()..];
        let after = after.trim_start_matches('>').strip_prefix("::")?;
        let f: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        Some(f)
    });
    Owner::Generated {
        state: state.map(|s| s.as_str()),
        function,
    }
}

/// Compiles, builds and measures the program. `progress` receives one
/// line per step.
pub fn size(req: &SizeRequest, mut progress: impl FnMut(&str)) -> Result<SizeReport, String> {
    let shown = req.path.display().to_string();
    progress(&format!("compiling {shown}"));
    let input = open_program(
        &req.path,
        &req.data,
        "size",
        "measure it in your own build with the backend",
    )?;
    let loaded = ptec::load(input.program_bytes(), &input.data_bytes()).map_err(|e| format!("{shown}: {e}"))?;
    let program = loaded
        .program
        .as_ref()
        .ok_or_else(|| format!("{shown} holds no program"))?;
    let options = Options::new().name("Program").output_file("program.rs");
    let source = compile(&input, &options).map_err(|e| format!("{shown}: {e}"))?;
    let text = source.to_source().map_err(|e| format!("{shown}: {e}"))?;

    let host = host_triple()?;
    let triple = req.target.clone().unwrap_or_else(|| host.clone());
    // A target without an operating system gets a runner without `std`.
    let bare = triple.split('-').any(|part| part == "none");
    let runner = if bare { RUNNER_BARE } else { RUNNER };
    let release = "opt-level = 3\ndebug = false\nstrip = \"debuginfo\"";
    let krate = match bare {
        false => RunnerCrate::new(runner, release)?,
        true => RunnerCrate::with_runtime(
            runner,
            &format!("{release}\npanic = \"abort\""),
            "default-features = false",
        )?,
    };
    krate.write_source("program.rs", &source)?;
    krate.write("main.rs", if bare { MAIN_NO_STD } else { MAIN })?;
    let target = target_dir("PTEC_SIZE_TARGET_DIR", "ptec-size");
    progress(&format!("building for {triple} in {}", target.display()));
    let exe = krate
        .build_for(&target, req.target.as_deref(), Some(""), req.verbose)
        .map_err(|e| match e.contains("can't find crate for `std`") {
            // The runner runs the program with `std`'s threads and output.
            true => format!(
                "{triple} has no standard library, and ptec size builds a runner that needs one for a \
                 target whose name does not say `none` (a `*-none-*` target gets a runner without it)"
            ),
            false => e,
        })?;
    let bytes = std::fs::read(&exe).map_err(|e| format!("{}: {e}", exe.display()))?;
    if let Some(keep) = &req.keep {
        std::fs::copy(&exe, keep).map_err(|e| format!("{}: {e}", keep.display()))?;
    }
    let Binary {
        code: code_bytes,
        sections,
        symbols,
        embedded: embedded_bytes,
        state_static,
    } = read_binary(&bytes)?;
    // Without a run, the state's size from its static's symbol.
    let mut state_bytes = state_static;

    // On the host: run it for the state's size, the plans and the stacks.
    let ran = triple == host;
    let mut runs: BTreeMap<usize, (u64, Option<u64>)> = BTreeMap::new();
    if ran {
        progress("running each method once to measure its stack");
        let out = Command::new(&exe)
            .output()
            .map_err(|e| format!("running {}: {e}", exe.display()))?;
        if !out.status.success() {
            return Err(format!(
                "the size runner failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["state", n] => state_bytes = n.parse().ok(),
                ["method", i, planned, stack] => {
                    if let (Ok(i), Ok(p)) = (i.parse(), planned.parse()) {
                        runs.insert(i, (p, stack.parse().ok()));
                    }
                }
                _ => {}
            }
        }
    }

    let states: Vec<String> = program
        .methods
        .iter()
        .map(|m| ptec::state_type_name("Program", &m.name))
        .collect();
    let mut instructions = instruction_functions(&text);
    // What the kernels the instructions call call in turn, where their
    // sources say.
    let uses = crate::runner::kernels_source()
        .map(|d| kernel_module_uses(&d))
        .unwrap_or_default();
    for (_, modules) in instructions.values_mut() {
        *modules = reached(modules, &uses);
    }
    let mut module_users: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (op, modules) in instructions.values() {
        for m in modules {
            module_users.entry(m).or_default().insert(op);
        }
    }
    let (mut generated_bytes, mut kernel_bytes, mut runtime_bytes, mut other_bytes) = (0, 0, 0, 0);
    let mut method_code: BTreeMap<&str, u64> = BTreeMap::new();
    let mut op_code: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut shared_kernel_bytes, mut other_kernel_bytes) = (0, 0);
    for s in &symbols {
        match owner(&s.name, runner, &states) {
            Owner::Generated { state, function } => {
                generated_bytes += s.size;
                if let Some(state) = state {
                    *method_code.entry(state).or_default() += s.size;
                    let key = (state.to_string(), function.unwrap_or_default());
                    if let Some((op, _)) = instructions.get(&key) {
                        *op_code.entry(op).or_default() += s.size;
                    }
                }
            }
            Owner::Kernel(module) => {
                kernel_bytes += s.size;
                match module_users.get(module.as_str()) {
                    Some(users) if users.len() == 1 => {
                        *op_code.entry(users.first().expect("one user")).or_default() += s.size
                    }
                    Some(_) => shared_kernel_bytes += s.size,
                    None => other_kernel_bytes += s.size,
                }
            }
            Owner::Runtime => runtime_bytes += s.size,
            Owner::Other => other_bytes += s.size,
        }
    }

    let methods = program
        .methods
        .iter()
        .enumerate()
        .map(|(k, m)| {
            let run = runs.get(&k);
            MethodSize {
                name: m.name.clone(),
                // Without a run (another target), the program's own plan.
                planned_bytes: run.map_or_else(|| m.buffer_sizes.iter().skip(1).sum(), |r| r.0),
                constant_bytes: crate::inspect::constant_bytes(m) as u64,
                // One method: the program's dispatch (where the optimizer
                // often inlines the whole method) is its too.
                code_bytes: match program.methods.len() {
                    1 => generated_bytes,
                    _ => method_code.get(states[k].as_str()).copied().unwrap_or(0),
                },
                stack_bytes: run.and_then(|r| r.1),
            }
        })
        .collect();
    let mut operators: Vec<OperatorCode> = BTreeSet::from_iter(instructions.values().map(|(op, _)| op.as_str()))
        .into_iter()
        .map(|op| {
            let mine = instructions.values().filter(|(o, _)| o == op);
            OperatorCode {
                operator: op.to_string(),
                instructions: mine.clone().count(),
                code_bytes: op_code.get(op).copied().unwrap_or(0),
                kernels: BTreeSet::from_iter(mine.flat_map(|(_, m)| m.iter().cloned()))
                    .into_iter()
                    .collect(),
            }
        })
        .collect();
    operators.sort_by(|a, b| b.code_bytes.cmp(&a.code_bytes).then(a.operator.cmp(&b.operator)));
    let shared_kernels = module_users
        .iter()
        .filter(|(_, users)| users.len() > 1)
        .map(|(m, _)| m.to_string())
        .collect();
    Ok(SizeReport {
        file: shown,
        target: triple,
        binary_bytes: bytes.len() as u64,
        code_bytes,
        sections,
        embedded_bytes,
        state_bytes,
        ran,
        methods,
        operators,
        shared_kernels,
        shared_kernel_bytes,
        other_kernel_bytes,
        generated_bytes,
        kernel_bytes,
        runtime_bytes,
        other_bytes,
        stack_resolution_bytes: 8,
    })
}

fn host_triple() -> Result<String, String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .map_err(|e| format!("running rustc: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .ok_or_else(|| "rustc -vV names no host".to_string())
}

fn kib(n: u64) -> String {
    format!("{:.1} KiB", n as f64 / 1024.0)
}

impl SizeReport {
    /// The report for a person.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} built for {} (release, opt-level 3): binary {}, code {}, embedded constants {}",
            self.file,
            self.target,
            kib(self.binary_bytes),
            kib(self.code_bytes),
            kib(self.embedded_bytes)
        );
        let mut kinds: Vec<(&str, u64)> = Vec::new();
        for section in &self.sections {
            match kinds.iter_mut().find(|(k, _)| *k == section.kind) {
                Some((_, b)) => *b += section.bytes,
                None => kinds.push((section.kind, section.bytes)),
            }
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, b)| format!("{k} {}", kib(*b))).collect();
        let _ = writeln!(s, "sections: {}", kinds.join(", "));
        if let Some(b) = self.state_bytes {
            let _ = writeln!(s, "program object (planned memory and state): {}", kib(b));
        }
        for m in &self.methods {
            let stack = match m.stack_bytes {
                Some(b) => kib(b),
                None if self.ran => "not measured (the run failed)".into(),
                None => "not measured (not the host)".into(),
            };
            let _ = writeln!(
                s,
                "method `{}`: planned memory {}, constants {}, code {}, stack {stack}",
                m.name,
                kib(m.planned_bytes),
                kib(m.constant_bytes),
                kib(m.code_bytes)
            );
        }
        let _ = writeln!(
            s,
            "code by operator kind (its instruction functions and the kernels only it calls):"
        );
        for o in &self.operators {
            let _ = writeln!(
                s,
                "  {:>10}  {:>3} × {}  [{}]",
                kib(o.code_bytes),
                o.instructions,
                o.operator,
                o.kernels.join(", ")
            );
        }
        let _ = writeln!(
            s,
            "kernels several kinds call: {} [{}]; kernel helpers none calls by name: {}",
            kib(self.shared_kernel_bytes),
            self.shared_kernels.join(", "),
            kib(self.other_kernel_bytes)
        );
        let _ = writeln!(
            s,
            "code by origin: generated {}, ptec_kernels {}, ptec_runtime {}, the rest (std, the runner) {}",
            kib(self.generated_bytes),
            kib(self.kernel_bytes),
            kib(self.runtime_bytes),
            kib(self.other_bytes)
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instruction_functions_are_read_with_their_operator_and_kernels() {
        let source = r#"
    impl ProgramForwardState {
        /// Instruction 1: aten::addmm.out(1, 4, 5)
        /// Also does instruction 0, which ptec folded into it.
        #[inline]
        fn i1(&mut self) -> Result<(), Error> {
            ::ptec_runtime::kernels::linear::addmm(::ptec_runtime::kernels::linear::Operand::plain(a));
            ::ptec_runtime::kernels::KernelError::Shape;
        }
        fn helper(&mut self) {
            ::ptec_runtime::kernels::softmax::softmax();
        }
        /// Instruction 5: aten::_softmax.out(17, 21)
        fn i5(&mut self) {
            ::ptec_runtime::kernels::softmax::softmax();
        }
    }
"#;
        let found = instruction_functions(source);
        let key = |f: &str| ("ProgramForwardState".to_string(), f.to_string());
        assert_eq!(found.len(), 2, "{found:?}");
        let (op, modules) = &found[&key("i1")];
        assert_eq!(op, "aten::addmm.out");
        // `KernelError` is an item of the root, not a module.
        assert_eq!(modules.iter().collect::<Vec<_>>(), ["linear"]);
        assert_eq!(found[&key("i5")].0, "aten::_softmax.out");
    }

    #[test]
    fn symbols_are_owned_by_their_path() {
        let states = vec!["ProgramForwardState".to_string()];
        let owner_of = |name: &str| match owner(name, RUNNER, &states) {
            Owner::Generated { state, function } => format!("generated {state:?} {function:?}"),
            Owner::Kernel(m) => format!("kernel {m}"),
            Owner::Runtime => "runtime".into(),
            Owner::Other => "other".into(),
        };
        assert_eq!(
            owner_of("<ptec_size_run::program::__ptec_mlp::ProgramForwardState>::i1"),
            "generated Some(\"ProgramForwardState\") Some(\"i1\")"
        );
        assert_eq!(
            owner_of("<ptec_size_run::program::__ptec_mlp::Program as ptec_runtime::Model>::execute"),
            "generated None None"
        );
        assert_eq!(
            owner_of("<ptec_kernels::gemm::Packed<f32> as core::fmt::Debug>::fmt"),
            "kernel gemm"
        );
        assert_eq!(owner_of("ptec_runtime::harness::compare"), "runtime");
        assert_eq!(owner_of("std::rt::lang_start"), "other");
        // Another runner's program is not this binary's.
        assert_eq!(owner_of("ptec_size_bare::program::__ptec_mlp::Program::new"), "other");
        let bare = match owner(
            "ptec_size_bare::program::__ptec_mlp::ProgramForwardState::i1",
            RUNNER_BARE,
            &states,
        ) {
            Owner::Generated { function, .. } => function,
            _ => None,
        };
        assert_eq!(bare.as_deref(), Some("i1"));
    }
}
