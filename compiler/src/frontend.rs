//! What the `include_pte!` macro and build scripts call: argument parsing
//! and path resolution around [`compile`](crate::compile), so every front end
//! generates the same code for the same file.
use crate::codegen::Options;
use crate::compile::{compile, compile_to_source, prepared_include, read_file, Source};
use crate::error::Errors;
use proc_macro2::{Span, TokenStream};
use std::path::{Path, PathBuf};

/// What a front end asks for besides the files.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Name of the program struct.
    pub name: Option<String>,
    /// Generate the bundle's test cases with these `(rtol, atol)`.
    pub tests: Option<(f64, f64)>,
    /// Read the weights at run time instead of embedding them.
    pub external_weights: bool,
    /// Leave calls of the XNNPACK delegate to a user backend instead of
    /// compiling them (see [`Options::lower_xnnpack`]).
    pub keep_xnnpack_delegates: bool,
    /// Run aten convolutions NCHW, operation by operation, instead of on
    /// NHWC images with batch norms folded in (see
    /// [`Options::channels_last`]).
    pub keep_nchw: bool,
}

/// Compiles `file` (with `.ptd` files `data`) for embedding from anywhere:
/// paths in the generated `include_bytes!` are absolute, the constants are
/// written into the tokens (as `include_pte!` needs: a macro has no file of
/// its own to put them in), and the code names the input files so that
/// Cargo rebuilds when they change (see [`Options::track_inputs`]).
pub fn compile_path(file: &Path, data: &[PathBuf], settings: &Settings) -> Result<(TokenStream, Options), Errors> {
    let (bytes, datas, mut options) = read_inputs(file, data, settings, None)?;
    options.track_inputs = true;
    let refs: Vec<&[u8]> = datas.iter().map(|d| d.as_slice()).collect();
    let tokens = compile(&bytes, &refs, &options)?;
    Ok((tokens, options))
}

/// [`compile_path`] as a source file; `prepared_path` as
/// [`Options::prepared_path`].
pub fn source_path(
    file: &Path,
    data: &[PathBuf],
    settings: &Settings,
    prepared_path: Option<String>,
) -> Result<(Source, Options), Errors> {
    let (bytes, datas, options) = read_inputs(file, data, settings, prepared_path)?;
    let refs: Vec<&[u8]> = datas.iter().map(|d| d.as_slice()).collect();
    Ok((compile_to_source(&bytes, &refs, &options)?, options))
}

/// A program file's bytes, its `.ptd` files' bytes, and how to compile it.
type Inputs = (Vec<u8>, Vec<Vec<u8>>, Options);

/// The files' bytes and the options of [`compile_path`].
fn read_inputs(
    file: &Path,
    data: &[PathBuf],
    settings: &Settings,
    prepared_path: Option<String>,
) -> Result<Inputs, Errors> {
    let abs = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let bytes = read_file(file)?;
    let datas = data.iter().map(|d| read_file(d)).collect::<Result<Vec<_>, _>>()?;
    let mut options = Options::new(abs(file).display().to_string());
    options.data_paths = data.iter().map(|d| abs(d).display().to_string()).collect();
    options.struct_name = settings.name.clone();
    options.tests = settings.tests;
    options.external_weights = settings.external_weights;
    options.lower_xnnpack = !settings.keep_xnnpack_delegates;
    options.channels_last = !settings.keep_nchw;
    options.prepared_path = prepared_path;
    Ok((bytes, datas, options))
}

/// Arguments of `include_pte!("model.pte", name = Model, data = ["w.ptd"],
/// weights = external, tests, rtol = 1e-4, atol = 1e-5)`.
struct MacroArgs {
    path: syn::LitStr,
    name: Option<String>,
    data: Vec<syn::LitStr>,
    tests: bool,
    rtol: f64,
    atol: f64,
    external_weights: bool,
}

impl syn::parse::Parse for MacroArgs {
    fn parse(input: syn::parse::ParseStream) -> syn::Result<Self> {
        let path: syn::LitStr = input.parse()?;
        let default = ptec_runtime::harness::Tolerance::default();
        let mut args = MacroArgs {
            path,
            name: None,
            data: Vec::new(),
            tests: false,
            rtol: default.rtol,
            atol: default.atol,
            external_weights: false,
        };
        while input.parse::<syn::Token![,]>().is_ok() {
            if input.is_empty() {
                break;
            }
            let key: syn::Ident = input.parse()?;
            match key.to_string().as_str() {
                "tests" => args.tests = true,
                "name" => {
                    input.parse::<syn::Token![=]>()?;
                    let id: syn::Ident = input.parse()?;
                    args.name = Some(id.to_string());
                }
                "data" => {
                    input.parse::<syn::Token![=]>()?;
                    let content;
                    syn::bracketed!(content in input);
                    let list = content.parse_terminated(|p| p.parse::<syn::LitStr>(), syn::Token![,])?;
                    args.data = list.into_iter().collect();
                }
                "weights" => {
                    input.parse::<syn::Token![=]>()?;
                    let mode: syn::Ident = input.parse()?;
                    args.external_weights = match mode.to_string().as_str() {
                        "embedded" => false,
                        "external" => true,
                        other => {
                            return Err(syn::Error::new(
                                mode.span(),
                                format!("unknown weights mode `{other}`: expected `embedded` or `external`"),
                            ))
                        }
                    };
                }
                "rtol" | "atol" => {
                    input.parse::<syn::Token![=]>()?;
                    let v: syn::LitFloat = input.parse()?;
                    let v: f64 = v.base10_parse()?;
                    if key == "rtol" {
                        args.rtol = v;
                    } else {
                        args.atol = v;
                    }
                }
                other => {
                    return Err(syn::Error::new(
                        key.span(),
                        format!("unknown argument `{other}`: expected `name = Ident`, `data = [\"file.ptd\"]`, `weights = embedded|external`, `tests`, `rtol = f`, `atol = f`"),
                    ))
                }
            }
        }
        Ok(args)
    }
}

/// The expansion of `include_pte!`: paths relative to `manifest_dir`; every
/// error becomes a `compile_error!` on the path literal.
pub fn expand_macro(input: TokenStream, manifest_dir: &Path) -> TokenStream {
    let args: MacroArgs = match syn::parse2(input) {
        Ok(a) => a,
        Err(e) => return e.to_compile_error(),
    };
    let span: Span = args.path.span();
    let file = manifest_dir.join(args.path.value());
    let data: Vec<PathBuf> = args.data.iter().map(|d| manifest_dir.join(d.value())).collect();
    if !file.exists() {
        return syn::Error::new(
            span,
            format!(
                "cannot read `{}`: no such file (paths are relative to CARGO_MANIFEST_DIR, {})",
                args.path.value(),
                manifest_dir.display()
            ),
        )
        .to_compile_error();
    }
    let settings = Settings {
        name: args.name.clone(),
        tests: args.tests.then_some((args.rtol, args.atol)),
        external_weights: args.external_weights,
        keep_xnnpack_delegates: false,
        keep_nchw: false,
    };
    match compile_path(&file, &data, &settings) {
        Ok((tokens, _)) => tokens,
        Err(e) => syn::Error::new(span, format!("ptec: {}: {e}", args.path.value())).to_compile_error(),
    }
}

/// Build-script front end: compiles a program into `OUT_DIR`, rewriting the
/// file only when its contents change.
///
/// ```no_run
/// // build.rs
/// ptec::Builder::new("models/mlp.pte").name("Mlp").generate("mlp.rs").unwrap();
/// // src/lib.rs: mod mlp { include!(concat!(env!("OUT_DIR"), "/mlp.rs")); }
/// ```
#[derive(Clone, Debug)]
pub struct Builder {
    file: PathBuf,
    data: Vec<PathBuf>,
    settings: Settings,
    out_dir: Option<PathBuf>,
}

impl Builder {
    /// A program or bundle, relative to the current directory (a build
    /// script runs in its package's directory).
    pub fn new(file: impl Into<PathBuf>) -> Self {
        Builder {
            file: file.into(),
            data: Vec::new(),
            settings: Settings::default(),
            out_dir: None,
        }
    }

    /// A `.ptd` file the program refers to.
    pub fn data(mut self, file: impl Into<PathBuf>) -> Self {
        self.data.push(file.into());
        self
    }

    /// The name of the generated struct.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.settings.name = Some(name.into());
        self
    }

    /// Also generate the bundle's test cases with these tolerances.
    pub fn tests(mut self, rtol: f64, atol: f64) -> Self {
        self.settings.tests = Some((rtol, atol));
        self
    }

    /// External-weights mode: the generated program embeds no weights and
    /// is given the files at construction (see `FILES` in the generated
    /// code).
    pub fn external_weights(mut self, external: bool) -> Self {
        self.settings.external_weights = external;
        self
    }

    /// Whether calls of ExecuTorch's XNNPACK delegate are compiled into the
    /// program (the default) or left to a user backend registered at run
    /// time.
    pub fn lower_xnnpack(mut self, lower: bool) -> Self {
        self.settings.keep_xnnpack_delegates = !lower;
        self
    }

    /// Whether aten convolutions run on NHWC images with batch norms and
    /// clamps folded in (the default), or NCHW as the program says.
    pub fn channels_last(mut self, on: bool) -> Self {
        self.settings.keep_nchw = !on;
        self
    }

    /// Write into `dir` instead of `OUT_DIR`.
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Generates `file_name` in the output directory; returns its path.
    pub fn generate(&self, file_name: &str) -> Result<PathBuf, String> {
        let dir = match &self.out_dir {
            Some(d) => d.clone(),
            None => PathBuf::from(
                std::env::var_os("OUT_DIR")
                    .ok_or("OUT_DIR is not set: call Builder::generate from a build script, or set out_dir")?,
            ),
        };
        println!("cargo:rerun-if-changed={}", self.file.display());
        for d in &self.data {
            println!("cargo:rerun-if-changed={}", d.display());
        }
        let path = dir.join(file_name);
        let (source, _) = source_path(&self.file, &self.data, &self.settings, Some(prepared_include(&path)))
            .map_err(|e| format!("{}: {e}", self.file.display()))?;
        source.write(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }
}
