//! What to generate: the one set of options every front end takes, and the
//! one parser of their textual form (the macro's `key = value` arguments,
//! the command line's `--key value` flags).
use crate::error::{ErrorKind, Errors, Location, Result};
use ptec_runtime::harness::Tolerance;

/// How to compile a program, the same for every front end.
///
/// Build it with the setters, or from text with [`Options::set`], which
/// is how `include_pte!` and the `ptec` command line read theirs:
///
/// ```
/// let mut options = ptec::Options::new().name("Mlp").lower_xnnpack(false);
/// options.set("weights", Some("external")).unwrap();
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// Name of the program struct; by default the file stem in CamelCase.
    pub(crate) struct_name: Option<String>,
    /// The path the generated `include_bytes!` reads the program file from
    /// (relative to the generated file, or absolute); from the
    /// [`Input`](crate::Input).
    pub(crate) program_path: String,
    /// The same for each `.ptd` file, in the order they were loaded.
    pub(crate) data_paths: Vec<String>,
    /// The file name shown in the `@generated` header.
    pub(crate) source_name: String,
    /// For a bundle: also generate the `bundled` module of test cases, with
    /// these `(rtol, atol)` for its `#[test]`s.
    pub(crate) tests: Option<(f64, f64)>,
    /// The tolerance `tests` takes when switched on by [`Options::set`],
    /// which may see `rtol` and `atol` before `tests`.
    tolerance: (f64, f64),
    /// External-weights mode: embed no file data; the program is given the
    /// `.pte` (and `.ptd` files) at construction and reads them in place.
    pub(crate) external_weights: bool,
    /// The path the generated `include_bytes!` reads the program's
    /// constants from (relative to the generated file, or absolute): those
    /// its code reads and those the compiler prepared; the caller writes
    /// [`Generated::prepared`](crate::Generated::prepared) there. `None`:
    /// they are embedded in the code itself, as a byte-string literal.
    pub(crate) prepared_path: Option<String>,
    /// Name the input files in `include_bytes!`s the code does not use, so
    /// that Cargo rebuilds when they change (for `include_pte!`, whose code
    /// otherwise names no file).
    pub(crate) track_inputs: bool,
    /// Compile calls of ExecuTorch's XNNPACK delegate into kernel calls
    /// (the `passes::xnnpack` pass); when off they are left as delegate calls.
    pub(crate) lower_xnnpack: bool,
    /// Run aten convolutions on NHWC images, with batch norms and clamps
    /// folded in (the `passes::channels_last` pass); when off they run NCHW,
    /// operation by operation, as the program says.
    pub(crate) channels_last: bool,
    /// Generate `execute_traced`, which reports each instruction to a
    /// `ptec_runtime::trace::Tracer` (profiles and debug outputs in
    /// ExecuTorch's ETDump); off, the code has no trace of it.
    pub(crate) trace: bool,
    /// Run the 3 × 3 convolutions that allow it by Winograd's
    /// F(2 × 2, 3 × 3) (`Algorithm::Winograd` of the kernels); off, every
    /// convolution by the direct sum.
    pub(crate) winograd: bool,
}

impl Default for Options {
    fn default() -> Self {
        let t = Tolerance::default();
        Options {
            struct_name: None,
            program_path: String::new(),
            data_paths: Vec::new(),
            source_name: String::new(),
            tests: None,
            tolerance: (t.rtol, t.atol),
            external_weights: false,
            prepared_path: None,
            track_inputs: false,
            lower_xnnpack: true,
            channels_last: true,
            trace: false,
            winograd: true,
        }
    }
}

/// The options [`Options::set`] knows, with the values they take: the
/// macro's and the command line's spellings, and their error messages.
const NAMES: &[(&str, &str)] = &[
    ("name", "an identifier"),
    ("tests", "nothing, `true` or `false`"),
    ("rtol", "a number"),
    ("atol", "a number"),
    ("weights", "`embedded` or `external`"),
    ("lower_xnnpack", "`true` or `false`"),
    ("channels_last", "`true` or `false`"),
    ("trace", "`true` or `false`"),
    ("winograd", "`true` or `false`"),
];

impl Options {
    /// The program struct's name and identifier: the `name` option, or
    /// the source's file stem in CamelCase; an error if it is not a Rust
    /// identifier.
    pub(crate) fn struct_ident(&self) -> Result<(String, proc_macro2::Ident)> {
        let name = self
            .struct_name
            .clone()
            .unwrap_or_else(|| default_struct_name(&self.source_name));
        let ident = syn::parse_str(&name).map_err(|_| {
            Errors::one(
                ErrorKind::Unsupported {
                    detail: format!("`{name}` is not a valid Rust identifier for the program struct"),
                },
                Location::default(),
            )
        })?;
        Ok((name, ident))
    }

    /// The defaults: the struct named after the file, embedded weights, no
    /// tests, XNNPACK delegates lowered, convolutions channels-last.
    pub fn new() -> Self {
        Self::default()
    }

    /// The name of the generated program struct (by default the file's stem
    /// in CamelCase: `mobilenet_v2.pte` → `MobilenetV2`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.struct_name = Some(name.into());
        self
    }

    /// For a bundle: also generate its test cases (a `bundled` module with
    /// one `#[test]` per case), comparing outputs with these tolerances
    /// (the front ends' defaults are `rtol = 1e-4`, `atol = 1e-5`).
    pub fn tests(mut self, rtol: f64, atol: f64) -> Self {
        self.tolerance = (rtol, atol);
        self.tests = Some(self.tolerance);
        self
    }

    /// External-weights mode: the generated program embeds no weights and
    /// is given the files at construction (see `FILES` in the generated
    /// code), reading them in place.
    pub fn external_weights(mut self, external: bool) -> Self {
        self.external_weights = external;
        self
    }

    /// Whether calls of ExecuTorch's XNNPACK delegate are compiled into the
    /// program (the default) or left to a user backend registered at run
    /// time.
    pub fn lower_xnnpack(mut self, lower: bool) -> Self {
        self.lower_xnnpack = lower;
        self
    }

    /// Whether aten convolutions run on NHWC images with batch norms and
    /// clamps folded in (the default), or NCHW as the program says.
    pub fn channels_last(mut self, on: bool) -> Self {
        self.channels_last = on;
        self
    }

    /// Whether to generate `execute_traced` (see `ptec_runtime::trace`):
    /// the program reports each instruction to a tracer, for profiles and
    /// debug outputs that ExecuTorch's devtools read. Off by default, when
    /// the generated code has none of it.
    pub fn trace(mut self, on: bool) -> Self {
        self.trace = on;
        self
    }

    /// Whether fp32 3 × 3 convolutions of stride 1 with at least 64
    /// channels in and out and 14 × 14 outputs (ResNet's) run by
    /// Winograd's F(2 × 2, 3 × 3), which does 2.25× fewer multiplications
    /// (the default), or by the direct sum, which rounds as PyTorch does
    /// more closely (Winograd's results differ from it by a few units more
    /// in the last place).
    pub fn winograd(mut self, on: bool) -> Self {
        self.winograd = on;
        self
    }

    /// How the convolutions the compiler folds run their products.
    pub(crate) fn algorithm(&self) -> ptec_runtime::kernels::nhwc::Algorithm {
        use ptec_runtime::kernels::nhwc::Algorithm;
        if self.winograd {
            Algorithm::Winograd
        } else {
            Algorithm::Direct
        }
    }

    /// The generated code will be written to `file` (by
    /// [`Output::write`](crate::Output::write)): the constants it reads go
    /// to a file beside it, `model.rs` → `model.prepared`, which it
    /// includes. Without this they are written into the code itself.
    pub fn output_file(mut self, file: impl AsRef<std::path::Path>) -> Self {
        self.prepared_path = Some(prepared_include(file.as_ref()));
        self
    }

    /// Name the input files in `include_bytes!`s the code does not use, so
    /// that Cargo rebuilds when they change: for `include_pte!`, whose code
    /// otherwise names no file.
    #[doc(hidden)]
    pub fn track_inputs(mut self, on: bool) -> Self {
        self.track_inputs = on;
        self
    }

    /// Whether [`Options::set`] knows `key`.
    pub(crate) fn knows(key: &str) -> bool {
        let key = key.replace('-', "_");
        NAMES.iter().any(|(n, _)| *n == key)
    }

    /// The names [`Options::set`] knows, for messages: `` `name`, `tests`, ...``.
    pub(crate) fn names() -> String {
        let names: Vec<String> = NAMES.iter().map(|(n, _)| format!("`{n}`")).collect();
        names.join(", ")
    }

    /// Sets the option `key` from its textual form, as `include_pte!`'s
    /// arguments and the command line's flags spell it (`-` and `_` alike):
    ///
    /// | key | value |
    /// |-----|-------|
    /// | `name` | the struct's name |
    /// | `tests` | none or `true`: generate the bundle's tests; `false`: don't |
    /// | `rtol`, `atol` | the tests' tolerances |
    /// | `weights` | `embedded` or `external` ([`Options::external_weights`]) |
    /// | `lower_xnnpack` | `true` or `false` ([`Options::lower_xnnpack`]) |
    /// | `channels_last` | `true` or `false` ([`Options::channels_last`]) |
    /// | `trace` | `true` or `false` ([`Options::trace`]) |
    /// | `winograd` | `true` or `false` ([`Options::winograd`]) |
    ///
    /// A flag given no value (`tests`, `lower_xnnpack`) is switched on.
    pub fn set(&mut self, key: &str, value: Option<&str>) -> Result<()> {
        let key = key.replace('-', "_");
        let Some(&(name, expected)) = NAMES.iter().find(|(n, _)| *n == key) else {
            return Err(bad_option(
                &key,
                format!("no such option (the options are {})", Self::names()),
            ));
        };
        let bad = || bad_option(name, format!("expected {expected}, got `{}`", value.unwrap_or("")));
        let flag = || match value {
            None | Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(_) => Err(bad()),
        };
        let number = || value.and_then(|v| v.parse::<f64>().ok()).ok_or_else(bad);
        match name {
            "name" => self.struct_name = Some(value.filter(|v| !v.is_empty()).ok_or_else(bad)?.to_string()),
            "tests" => self.tests = flag()?.then_some(self.tolerance),
            "rtol" => self.tolerance.0 = number()?,
            "atol" => self.tolerance.1 = number()?,
            "weights" => {
                self.external_weights = match value {
                    Some("embedded") => false,
                    Some("external") => true,
                    _ => return Err(bad()),
                }
            }
            "lower_xnnpack" => self.lower_xnnpack = flag()?,
            "channels_last" => self.channels_last = flag()?,
            "trace" => self.trace = flag()?,
            "winograd" => self.winograd = flag()?,
            _ => unreachable!("every name in NAMES is handled"),
        }
        // The tolerances apply to tests switched on before them too.
        if self.tests.is_some() {
            self.tests = Some(self.tolerance);
        }
        Ok(())
    }
}

fn bad_option(name: &str, detail: String) -> Errors {
    Errors::one(
        ErrorKind::BadOption {
            name: name.to_string(),
            detail,
        },
        Location::default(),
    )
}

/// Where the constants of the generated file `path` go, as the compiler
/// prepared them: beside it, `model.rs` → `model.prepared`.
pub(crate) fn prepared_file(path: &std::path::Path) -> std::path::PathBuf {
    path.with_extension("prepared")
}

/// What `include_bytes!` in the file generated at `path` names its
/// constants by: their file's name, beside it.
pub(crate) fn prepared_include(path: &std::path::Path) -> String {
    prepared_file(path)
        .file_name()
        .map_or_else(|| "prepared".into(), |n| n.to_string_lossy().into_owned())
}

/// A struct name from a file stem: `mobilenet_v2` → `MobilenetV2`.
pub fn default_struct_name(source_name: &str) -> String {
    let stem = source_name.split('.').next().unwrap_or(source_name);
    let mut s = crate::names::camel_case(stem.split(|c: char| !c.is_ascii_alphanumeric()));
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert_str(0, "Program");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::Options;

    #[test]
    fn set_reads_every_option_in_any_order() {
        let mut o = Options::new();
        for (k, v) in [
            ("rtol", Some("0.5")),
            ("tests", None),
            ("atol", Some("1e-3")),
            ("weights", Some("external")),
            ("lower-xnnpack", Some("false")),
            ("channels_last", Some("false")),
            ("name", Some("Net")),
            ("trace", None),
            ("winograd", Some("false")),
        ] {
            o.set(k, v).unwrap();
        }
        assert_eq!(o.tests, Some((0.5, 1e-3)));
        assert!(o.external_weights && !o.lower_xnnpack && !o.channels_last && o.trace && !o.winograd);
        assert_eq!(o.struct_name.as_deref(), Some("Net"));
        o.set("tests", Some("false")).unwrap();
        assert_eq!(o.tests, None);
    }

    #[test]
    fn set_names_what_it_refuses() {
        let mut o = Options::new();
        let e = o.set("weight", Some("external")).unwrap_err().to_string();
        assert!(e.contains("`weight`") && e.contains("`weights`"), "{e}");
        let e = o.set("weights", Some("inline")).unwrap_err().to_string();
        assert!(e.contains("`embedded` or `external`") && e.contains("`inline`"), "{e}");
        assert!(o.set("rtol", None).is_err());
        assert!(o.set("channels_last", Some("yes")).is_err());
    }
}
