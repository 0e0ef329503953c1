//! The one entry point of the three front ends: file bytes in, Rust out
//! ([`compile`]: an [`Input`] and [`Options`] in, an [`Output`] out).
use crate::analysis::shared::SharedState;
use crate::codegen::Generated;
use crate::error::{ErrorKind, Errors, Location, Result};
use crate::format::render;
use crate::ir::{DataSource, TestValue};
use crate::options::{prepared_file, prepared_include, Options};
use crate::passes::transform;
use crate::plan::{plan_program, plan_temporaries};
use crate::read::{parse, Loaded};
use crate::verify::verify_program;
use proc_macro2::TokenStream;
use std::borrow::Cow;
use std::path::Path;

/// Reads, verifies and compiles a program (`.pte`, or the program of a
/// `.bp`/`.bpte` bundle) to tokens, with the constants the code embeds.
/// `data` are the bytes of the `.ptd` files named in `options.data_paths`.
pub(crate) fn compile_program(bytes: &[u8], data: &[&[u8]], options: &Options) -> Result<Generated> {
    // A panic here is a bug in ptec; it still must not take down a build
    // script or a proc macro, so it becomes an error that says so.
    std::panic::catch_unwind(|| {
        let mut loaded = load(bytes, data)?;
        transform(&mut loaded, options)?;
        plan_temporaries(&mut loaded)?;
        generate(&loaded, options)
    })
    .unwrap_or_else(|panic| Err(internal_error(panic)))
}

/// Plans a transformed program and generates its module: the last stages
/// but formatting.
pub fn generate(loaded: &Loaded<'_>, options: &Options) -> Result<Generated> {
    let plan = plan_program(loaded, options)?;
    crate::codegen::generate(plan, options)
}

/// Reads and verifies `bytes` (a `.pte`, `.bp`, `.bpte` or `.ptd`),
/// resolving external tensors against the `.ptd` files in `data_files`:
/// the first two stages.
pub fn load<'a>(bytes: &'a [u8], data_files: &[&'a [u8]]) -> Result<Loaded<'a>> {
    let mut loaded = parse(bytes, data_files)?;
    if let Some(p) = &loaded.program {
        verify_program(p, &loaded.suites)?;
        loaded.shared = SharedState::of(p);
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

/// One file of an [`Input`]: its bytes, and the path the generated code's
/// `include_bytes!` names it by.
#[derive(Clone, Debug)]
struct Named<'a> {
    bytes: Cow<'a, [u8]>,
    path: String,
}

impl<'a> Named<'a> {
    fn open(path: &Path) -> Result<Named<'static>> {
        let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Ok(Named {
            bytes: Cow::Owned(read_file(path)?),
            path: abs.display().to_string(),
        })
    }
}

/// What [`compile`] compiles: a program (`.pte`) or bundle (`.bpte`,
/// `.bp`), the `.ptd` files it refers to, and optionally a bundle whose
/// test cases check it. Each file comes with the path the generated code
/// names it by (in `include_bytes!`s: relative to the generated file, or
/// absolute).
///
/// ```no_run
/// let input = ptec::Input::open("model.pte")?.open_data("model.ptd")?;
/// let output = ptec::compile(&input, &ptec::Options::new().name("Model"))?;
/// print!("{}", output.to_source()?);
/// # Ok::<(), ptec::Errors>(())
/// ```
#[derive(Clone, Debug)]
pub struct Input<'a> {
    program: Named<'a>,
    data: Vec<Named<'a>>,
    cases: Option<Named<'a>>,
    source_name: Option<String>,
}

impl<'a> Input<'a> {
    /// A program's bytes, which the generated code names by `path`.
    pub fn new(bytes: impl Into<Cow<'a, [u8]>>, path: impl Into<String>) -> Self {
        Input {
            program: Named {
                bytes: bytes.into(),
                path: path.into(),
            },
            data: Vec::new(),
            cases: None,
            source_name: None,
        }
    }

    /// Reads the program at `path`; the generated code names it by its
    /// absolute path.
    pub fn open(path: impl AsRef<Path>) -> Result<Input<'static>> {
        Ok(Input {
            program: Named::open(path.as_ref())?,
            data: Vec::new(),
            cases: None,
            source_name: None,
        })
    }

    /// A `.ptd` file the program refers to, named by `path`.
    pub fn data(mut self, bytes: impl Into<Cow<'a, [u8]>>, path: impl Into<String>) -> Self {
        self.data.push(Named {
            bytes: bytes.into(),
            path: path.into(),
        });
        self
    }

    /// Reads a `.ptd` file the program refers to; the generated code names
    /// it by its absolute path.
    pub fn open_data(mut self, path: impl AsRef<Path>) -> Result<Self> {
        self.data.push(Named::open(path.as_ref())?);
        Ok(self)
    }

    /// Checks the program with the test cases of this bundle instead of
    /// its own (a `.pte` has none): for a program that computes what the
    /// bundle's program computes (the same model exported for another
    /// backend, say). The cases must fit the program's methods; the bundle
    /// is embedded as one more data file, named by `path`.
    pub fn cases(mut self, bytes: impl Into<Cow<'a, [u8]>>, path: impl Into<String>) -> Self {
        self.cases = Some(Named {
            bytes: bytes.into(),
            path: path.into(),
        });
        self
    }

    /// [`Input::cases`] read from `path`, named by its absolute path.
    pub fn open_cases(mut self, path: impl AsRef<Path>) -> Result<Self> {
        self.cases = Some(Named::open(path.as_ref())?);
        Ok(self)
    }

    /// The file name the generated code's `@generated` header shows, and
    /// the default struct name is made from (by default the last part of
    /// the program's path).
    pub fn source_name(mut self, name: impl Into<String>) -> Self {
        self.source_name = Some(name.into());
        self
    }

    /// The program's bytes.
    #[doc(hidden)]
    pub fn program_bytes(&self) -> &[u8] {
        &self.program.bytes
    }

    /// The `.ptd` files' bytes, in order.
    #[doc(hidden)]
    pub fn data_bytes(&self) -> Vec<&[u8]> {
        self.data.iter().map(|d| &*d.bytes).collect()
    }

    /// `options`, with the paths the generated code names the files by.
    fn options(&self, options: &Options) -> Options {
        let mut options = options.clone();
        let path = &self.program.path;
        options.source_name = self.source_name.clone().unwrap_or_else(|| {
            Path::new(path)
                .file_name()
                .map_or_else(|| path.clone(), |n| n.to_string_lossy().into_owned())
        });
        options.program_path = path.clone();
        options.data_paths = self.data.iter().map(|d| d.path.clone()).collect();
        options
    }
}

/// Compiles a program: reads and verifies it, transforms it and generates
/// one Rust module. Every front end calls this, so they accept, reject and
/// generate the same things.
pub fn compile(input: &Input<'_>, options: &Options) -> Result<Output> {
    let options = input.options(options);
    let bytes = input.program_bytes();
    let data = input.data_bytes();
    let generated = match &input.cases {
        None => compile_program(bytes, &data, &options)?,
        Some(cases) => compile_with_cases(bytes, &data, cases, &options)?,
    };
    Ok(Output::of(generated, &options, bytes))
}

/// What [`compile`] generated: a Rust module and the constants it reads.
#[derive(Clone, Debug)]
pub struct Output {
    generated: Generated,
    /// Shown in the `@generated` header.
    source_name: String,
    /// The program's SHA-256, in hex, for the header.
    digest: String,
    /// Where the code reads its constants from, beside itself
    /// ([`Options::output_file`]).
    prepared_include: Option<String>,
}

impl Output {
    fn of(generated: Generated, options: &Options, program_bytes: &[u8]) -> Output {
        Output {
            generated,
            source_name: options.source_name.clone(),
            digest: hex_digest(program_bytes),
            prepared_include: options.prepared_path.clone(),
        }
    }

    /// The module as a source file: formatted, with a `@generated` header
    /// that names ptec and the program (with its SHA-256).
    pub fn to_source(&self) -> Result<String> {
        render(self.generated.tokens.clone(), &self.source_name, &self.digest)
    }

    /// Writes the source file to `path` and, when the code reads constants
    /// (compiled with [`Options::output_file`]`(path)`; written into the
    /// code otherwise), those beside it, `model.rs` → `model.prepared`.
    /// Each file is written only if it changed, so build systems see no
    /// change for nothing; returns whether anything did.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<bool> {
        let path = path.as_ref();
        if let Some(include) = &self.prepared_include {
            if *include != prepared_include(path) {
                return Err(io_error(
                    path,
                    format!("the code reads its constants from `{include}`, which is not beside this file (see Options::output_file)"),
                ));
            }
        }
        let code = self.to_source()?;
        let mut changed = write_if_changed(path, code.as_bytes()).map_err(|e| io_error(path, e.to_string()))?;
        if !self.generated.prepared.is_empty() {
            let prepared = prepared_file(path);
            changed |= write_if_changed(&prepared, &self.generated.prepared)
                .map_err(|e| io_error(&prepared, e.to_string()))?;
        }
        Ok(changed)
    }

    /// The constants the code reads: the bytes of the program's files its
    /// code reads, then the constants the compiler prepared (empty when
    /// there are none). [`Output::write`] writes them beside the code.
    pub fn prepared(&self) -> &[u8] {
        &self.generated.prepared
    }

    /// The number of test cases in the generated `bundled` module (0 when
    /// there is none).
    pub fn cases(&self) -> usize {
        self.generated.cases
    }

    /// The generated module as tokens, unformatted (what `include_pte!`
    /// expands to).
    #[doc(hidden)]
    pub fn tokens(&self) -> &TokenStream {
        &self.generated.tokens
    }

    /// How many leading bytes of [`Output::prepared`] are the files' bytes.
    #[doc(hidden)]
    pub fn files_len(&self) -> usize {
        self.generated.files_len
    }

    /// What each instruction of method `method` does, in a few words, in
    /// the numbering of the compiled program (which `step` follows).
    #[doc(hidden)]
    pub fn instructions(&self, method: &str) -> Option<&[String]> {
        let (_, names) = self.generated.instructions.iter().find(|(m, _)| m == method)?;
        Some(names)
    }
}

fn hex_digest(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn io_error(path: &Path, detail: String) -> Errors {
    Errors::one(
        ErrorKind::Io {
            path: path.display().to_string(),
            detail,
        },
        Location::default(),
    )
}

/// [`compile_program`] with the test cases of another bundle (see
/// [`Input::cases`]).
fn compile_with_cases(bytes: &[u8], data: &[&[u8]], cases: &Named<'_>, options: &Options) -> Result<Generated> {
    std::panic::catch_unwind(|| {
        let mut loaded = load(bytes, data)?;
        let bundle = load(&cases.bytes, data)?;
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
        transform(&mut loaded, options)?;
        plan_temporaries(&mut loaded)?;
        loaded.files.add_data(&cases.bytes);
        let mut options = options.clone();
        options.data_paths.push(cases.path.clone());
        generate(&loaded, &options)
    })
    .unwrap_or_else(|panic| Err(internal_error(panic)))
}

/// Reads a file for a front end, with an error that names it.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
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
pub(crate) fn write_if_changed(path: &Path, contents: &[u8]) -> std::io::Result<bool> {
    if std::fs::read(path).is_ok_and(|old| old == contents) {
        return Ok(false);
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, contents)?;
    Ok(true)
}
