//! The one entry point of the three front ends: file bytes in, Rust out.
use crate::codegen::{generate, Generated, Options};
use crate::error::{ErrorKind, Errors, Location, Result};
use crate::format::to_source;
use crate::ir::{DataSource, TestValue};
use crate::passes::transform;
use crate::plan::plan_temporaries;
use crate::read::{parse, Loaded};
use crate::verify::verify_program;
use proc_macro2::TokenStream;

/// Reads, verifies and compiles a program (`.pte`, or the program of a
/// `.bp`/`.bpte` bundle) to tokens. `data` are the bytes of the `.ptd`
/// files named in `options.data_paths`. With `options.prepared_path` set,
/// the code reads its constants from that file: use [`compile_program`],
/// which returns them.
pub fn compile(bytes: &[u8], data: &[&[u8]], options: &Options) -> Result<TokenStream> {
    compile_program(bytes, data, options).map(|g| g.tokens)
}

/// [`compile`], with the constants the code embeds.
pub fn compile_program(bytes: &[u8], data: &[&[u8]], options: &Options) -> Result<Generated> {
    // A panic here is a bug in ptec; it still must not take down a build
    // script or a proc macro, so it becomes an error that says so.
    std::panic::catch_unwind(|| {
        let mut loaded = load(bytes, data)?;
        transform(&mut loaded, bytes, options)?;
        plan_temporaries(&mut loaded)?;
        generate(&loaded, bytes, data, options)
    })
    .unwrap_or_else(|panic| Err(internal_error(panic)))
}

/// Reads and verifies `bytes` (a `.pte`, `.bp`, `.bpte` or `.ptd`),
/// resolving external tensors against the `.ptd` files in `data_files`:
/// the first two stages.
pub fn load(bytes: &[u8], data_files: &[&[u8]]) -> Result<Loaded> {
    let loaded = parse(bytes, data_files)?;
    if let Some(p) = &loaded.program {
        verify_program(p, &loaded.suites)?;
    }
    Ok(loaded)
}

/// The error that a panic in the compiler becomes.
fn internal_error(panic: Box<dyn std::any::Any + Send>) -> Errors {
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    Errors::one(ErrorKind::Internal { detail: msg }, Location::default())
}

/// [`compile`], formatted as a source file with its `@generated` header.
pub fn compile_to_string(bytes: &[u8], data: &[&[u8]], options: &Options) -> Result<String> {
    compile_to_source(bytes, data, options).map(|s| s.code)
}

/// A generated source file and the constants it embeds.
#[derive(Clone, Debug)]
pub struct Source {
    /// The source file's text.
    pub code: String,
    /// For the file at `Options::prepared_path` (see [`Generated`]).
    pub prepared: Vec<u8>,
    /// See [`Generated::files_len`].
    pub files_len: usize,
    /// See [`Generated::cases`].
    pub cases: usize,
}

impl Source {
    /// A generated module formatted (see [`to_source`]), with its
    /// constants.
    fn of(g: Generated, options: &Options, program_bytes: &[u8]) -> Result<Source> {
        Ok(Source {
            code: to_source(g.tokens, options, program_bytes)?,
            prepared: g.prepared,
            files_len: g.files_len,
            cases: g.cases,
        })
    }

    /// Writes the code to `path` and, when it embeds constants, those to
    /// [`prepared_file`]`(path)`, each only if it changed (so build
    /// systems see no change for nothing); returns whether anything did.
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<bool> {
        let mut changed = write_if_changed(path, self.code.as_bytes())?;
        if !self.prepared.is_empty() {
            changed |= write_if_changed(&prepared_file(path), &self.prepared)?;
        }
        Ok(changed)
    }
}

/// Where the constants of the generated file `path` go, as the compiler
/// prepared them: beside it, `model.rs` → `model.prepared`.
pub fn prepared_file(path: &std::path::Path) -> std::path::PathBuf {
    path.with_extension("prepared")
}

/// What `include_bytes!` in the file generated at `path` names its
/// constants by: their file's name, beside it.
pub fn prepared_include(path: &std::path::Path) -> String {
    prepared_file(path)
        .file_name()
        .map_or_else(|| "prepared".into(), |n| n.to_string_lossy().into_owned())
}

/// [`compile_program`], formatted as a source file with its `@generated`
/// header.
pub fn compile_to_source(bytes: &[u8], data: &[&[u8]], options: &Options) -> Result<Source> {
    let g = compile_program(bytes, data, options)?;
    Source::of(g, options, bytes)
}

/// Test cases taken from a bundle other than the compiled file: its bytes
/// and the path the generated code embeds it from.
#[derive(Clone, Copy, Debug)]
pub struct ForeignCases<'a> {
    /// The bundle's bytes.
    pub bytes: &'a [u8],
    /// The path the generated code's `include_bytes!` reads the bundle from.
    pub path: &'a str,
}

/// [`compile_to_source`] with the test cases of another bundle: for a
/// program that computes what the bundle's program computes (the same
/// model exported for another backend, say), so that the bundle's inputs
/// and expected outputs check it. The cases must fit the program's
/// methods; the bundle is embedded as one more data file.
pub fn compile_with_cases_to_source(
    bytes: &[u8],
    data: &[&[u8]],
    cases: ForeignCases<'_>,
    options: &Options,
) -> Result<Source> {
    std::panic::catch_unwind(|| {
        let mut loaded = load(bytes, data)?;
        let bundle = load(cases.bytes, data)?;
        if bundle.suites.iter().all(|s| s.cases.is_empty()) {
            return Err(Errors::one(
                ErrorKind::BadTestCase {
                    detail: format!("{} holds no test cases", cases.path),
                },
                Location::default(),
            ));
        }
        // The cases' data lives in the bundle, embedded after the .ptd files.
        let source = DataSource::External(data.len());
        let mut suites = bundle.suites;
        for value in suites
            .iter_mut()
            .flat_map(|s| &mut s.cases)
            .flat_map(|c| c.inputs.iter_mut().chain(&mut c.expected))
        {
            if let TestValue::Tensor { data, .. } = value {
                data.source = source;
            }
        }
        loaded.suites = suites;
        if let Some(p) = &loaded.program {
            verify_program(p, &loaded.suites)?;
        }
        transform(&mut loaded, bytes, options)?;
        plan_temporaries(&mut loaded)?;
        let mut all_data = data.to_vec();
        all_data.push(cases.bytes);
        let mut options = options.clone();
        options.data_paths.push(cases.path.to_string());
        let g = generate(&loaded, bytes, &all_data, &options)?;
        Source::of(g, &options, bytes)
    })
    .unwrap_or_else(|panic| Err(internal_error(panic)))
}

/// Reads a file for a front end, with an error that names it.
pub fn read_file(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Errors::one(
            ErrorKind::Io {
                path: path.display().to_string(),
                detail: e.to_string(),
            },
            Location::default(),
        )
    })
}

/// Writes `contents` to `path` unless it already holds exactly that, so
/// build systems do not see a change (and rebuild) for nothing.
pub fn write_if_changed(path: &std::path::Path, contents: &[u8]) -> std::io::Result<bool> {
    if std::fs::read(path).is_ok_and(|old| old == contents) {
        return Ok(false);
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, contents)?;
    Ok(true)
}
