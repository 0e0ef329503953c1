//! The front ends in the library: the expansion of `include_pte!` (its
//! arguments parsed by [`Options::set`], as the command line's flags are)
//! and the [`Builder`] of build scripts, both around [`compile`], so every
//! front end generates the same code for the same file.
use crate::compile::{compile, Input};
use crate::error::{Errors, Result};
use crate::options::Options;
use proc_macro2::{Span, TokenStream};
use std::path::{Path, PathBuf};

/// Arguments of `include_pte!("model.pte", data = ["w.ptd"], key = value,
/// flag, ...)`: the path, the `.ptd` files, and every other argument an
/// option of [`Options::set`].
struct MacroArgs {
    path: syn::LitStr,
    data: Vec<syn::LitStr>,
    options: Options,
}

/// The text [`Options::set`] reads from a macro argument's value: an
/// identifier (`Mlp`, `external`) or a literal (`1e-4`, `false`, `"Mlp"`).
fn value_text(input: syn::parse::ParseStream) -> syn::Result<(String, Span)> {
    if input.peek(syn::Lit) {
        let lit: syn::Lit = input.parse()?;
        let text = match &lit {
            syn::Lit::Str(s) => s.value(),
            syn::Lit::Bool(b) => b.value.to_string(),
            syn::Lit::Float(f) => f.base10_digits().to_string(),
            syn::Lit::Int(i) => i.base10_digits().to_string(),
            other => {
                return Err(syn::Error::new(
                    other.span(),
                    "expected an identifier, a number or `true`/`false`",
                ))
            }
        };
        Ok((text, lit.span()))
    } else {
        let id: syn::Ident = input.parse()?;
        Ok((id.to_string(), id.span()))
    }
}

impl syn::parse::Parse for MacroArgs {
    fn parse(input: syn::parse::ParseStream) -> syn::Result<Self> {
        let path: syn::LitStr = input.parse()?;
        let mut args = MacroArgs {
            path,
            data: Vec::new(),
            options: Options::new(),
        };
        while input.parse::<syn::Token![,]>().is_ok() {
            if input.is_empty() {
                break;
            }
            let key: syn::Ident = input.parse()?;
            let name = key.to_string();
            if name == "data" {
                input.parse::<syn::Token![=]>()?;
                let content;
                syn::bracketed!(content in input);
                let list = content.parse_terminated(|p| p.parse::<syn::LitStr>(), syn::Token![,])?;
                args.data = list.into_iter().collect();
                continue;
            }
            if !Options::knows(&name) {
                return Err(syn::Error::new(
                    key.span(),
                    format!(
                        "unknown argument `{name}`: expected `data = [\"file.ptd\"]` or an option ({})",
                        Options::names()
                    ),
                ));
            }
            let value = if input.parse::<syn::Token![=]>().is_ok() {
                Some(value_text(input)?)
            } else {
                None
            };
            let span = value.as_ref().map_or(key.span(), |(_, s)| *s);
            args.options
                .set(&name, value.as_ref().map(|(v, _)| v.as_str()))
                .map_err(|e| syn::Error::new(span, e.to_string()))?;
        }
        Ok(args)
    }
}

/// The expansion of `include_pte!`: paths relative to `manifest_dir`; every
/// error becomes a `compile_error!` on the path literal. The paths in the
/// generated `include_bytes!` are absolute, the constants are written into
/// the tokens (a macro has no file of its own to put them in), and the
/// code names the input files so that Cargo rebuilds when they change.
pub fn expand_macro(input: TokenStream, manifest_dir: &Path) -> TokenStream {
    let args: MacroArgs = match syn::parse2(input) {
        Ok(a) => a,
        Err(e) => return e.to_compile_error(),
    };
    let span: Span = args.path.span();
    let file = manifest_dir.join(args.path.value());
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
    let data: Vec<PathBuf> = args.data.iter().map(|d| manifest_dir.join(d.value())).collect();
    let options = args.options.track_inputs(true);
    match open(&file, &data).and_then(|input| compile(&input, &options)) {
        Ok(output) => output.tokens().clone(),
        Err(e) => syn::Error::new(span, format!("ptec: {}: {e}", args.path.value())).to_compile_error(),
    }
}

/// The [`Input`] of a program file and its `.ptd` files, named in the
/// generated code by their absolute paths.
fn open(file: &Path, data: &[PathBuf]) -> Result<Input<'static>> {
    data.iter().try_fold(Input::open(file)?, |input, d| input.open_data(d))
}

/// Build-script front end: compiles a program into `OUT_DIR`, rewriting the
/// files only when their contents change.
///
/// ```no_run
/// // build.rs
/// ptec::Builder::new("models/mlp.pte").name("Mlp").generate("mlp.rs").unwrap();
/// // src/lib.rs: mod mlp { include!(concat!(env!("OUT_DIR"), "/mlp.rs")); }
/// ```
///
/// It takes every [`Options`]: one by one through its setters, all at once
/// with [`Builder::options`], or by name with [`Builder::set`].
#[derive(Clone, Debug)]
pub struct Builder {
    file: PathBuf,
    data: Vec<PathBuf>,
    options: Options,
    out_dir: Option<PathBuf>,
}

impl Builder {
    /// A program or bundle, relative to the current directory (a build
    /// script runs in its package's directory).
    pub fn new(file: impl Into<PathBuf>) -> Self {
        Builder {
            file: file.into(),
            data: Vec::new(),
            options: Options::new(),
            out_dir: None,
        }
    }

    /// A `.ptd` file the program refers to.
    pub fn data(mut self, file: impl Into<PathBuf>) -> Self {
        self.data.push(file.into());
        self
    }

    /// Compile with these options (replacing those set so far).
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// [`Options::set`]: an option by name, as the macro and the command
    /// line spell it.
    pub fn set(mut self, key: &str, value: Option<&str>) -> Result<Self> {
        self.options.set(key, value)?;
        Ok(self)
    }

    /// [`Options::name`].
    pub fn name(self, name: impl Into<String>) -> Self {
        self.with(|o| o.name(name))
    }

    /// [`Options::tests`].
    pub fn tests(self, rtol: f64, atol: f64) -> Self {
        self.with(|o| o.tests(rtol, atol))
    }

    /// [`Options::external_weights`].
    pub fn external_weights(self, external: bool) -> Self {
        self.with(|o| o.external_weights(external))
    }

    /// [`Options::lower_xnnpack`].
    pub fn lower_xnnpack(self, lower: bool) -> Self {
        self.with(|o| o.lower_xnnpack(lower))
    }

    /// [`Options::channels_last`].
    pub fn channels_last(self, on: bool) -> Self {
        self.with(|o| o.channels_last(on))
    }

    /// [`Options::winograd`].
    pub fn winograd(self, on: bool) -> Self {
        self.with(|o| o.winograd(on))
    }

    /// [`Options::trace`].
    pub fn trace(self, on: bool) -> Self {
        self.with(|o| o.trace(on))
    }

    /// This builder, its options changed by `change`.
    fn with(mut self, change: impl FnOnce(Options) -> Options) -> Self {
        self.options = change(std::mem::take(&mut self.options));
        self
    }

    /// Write into `dir` instead of `OUT_DIR`.
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Generates `file_name` in the output directory, with the constants
    /// the code reads beside it (see [`Output::write`](crate::Output::write));
    /// returns its path.
    pub fn generate(&self, file_name: &str) -> std::result::Result<PathBuf, String> {
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
        let options = self.options.clone().output_file(&path);
        open(&self.file, &self.data)
            .and_then(|input| compile(&input, &options))
            .and_then(|output| output.write(&path))
            .map_err(|e: Errors| format!("{}: {e}", self.file.display()))?;
        Ok(path)
    }
}
