//! Code generation: a verified program → one Rust module (as tokens, or as
//! formatted source with a `@generated` header).
//!
//! The module holds the embedded file data, one struct for the program with
//! a state per method, the typed function of each method and an
//! implementation of `ptec_runtime::Model` (the dynamic interface).
pub mod layout;
mod method;
mod tests;

use crate::error::{Diagnostic, ErrorKind, Errors, Location, Result};
use crate::ir::*;
use crate::load::Loaded;
use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

pub use method::method_ident;

/// How to generate a module.
#[derive(Clone, Debug)]
pub struct Options {
    /// Name of the program struct; by default the file stem in CamelCase.
    pub struct_name: Option<String>,
    /// The path the generated `include_bytes!` reads the program file from
    /// (relative to the generated file, or absolute).
    pub program_path: String,
    /// The same for each `.ptd` file, in the order they were loaded.
    pub data_paths: Vec<String>,
    /// The file name shown in the `@generated` header.
    pub source_name: String,
    /// For a bundle: also generate the `bundled` module of test cases, with
    /// these `(rtol, atol)` for its `#[test]`s.
    pub tests: Option<(f64, f64)>,
    /// Compile calls of ExecuTorch's XNNPACK delegate into kernel calls
    /// (see [`crate::xnnpack`]); when off they are left as delegate calls.
    pub lower_xnnpack: bool,
}

impl Options {
    pub fn new(program_path: impl Into<String>) -> Self {
        let program_path = program_path.into();
        let source_name = std::path::Path::new(&program_path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| program_path.clone());
        Options {
            struct_name: None,
            program_path,
            data_paths: Vec::new(),
            source_name,
            tests: None,
            lower_xnnpack: true,
        }
    }
}

/// A struct name from a file stem: `mobilenet_v2` → `MobilenetV2`.
pub fn default_struct_name(source_name: &str) -> String {
    let stem = source_name.split('.').next().unwrap_or(source_name);
    let mut s: String = stem
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert_str(0, "Program");
    }
    s
}

/// Lints generated code does not answer to: it is complete for every
/// program, used or not, and written for clarity of generation.
pub fn allow_lints() -> TokenStream {
    quote! {
        #[allow(
            dead_code,
            unused_comparisons,
            unused_variables,
            unused_mut,
            unused_unsafe,
            unused_parens,
            unreachable_code,
            unreachable_patterns,
            non_camel_case_types,
            clippy::all,
            clippy::pedantic
        )]
    }
}

/// Shared state of one generation.
pub struct Ctx<'a> {
    pub struct_ident: Ident,
    pub program: &'a Program,
}

impl Ctx<'_> {
    /// The static holding the embedded bytes of a source file.
    pub fn data_ident(&self, source: DataSource) -> Ident {
        match source {
            DataSource::Program => format_ident!("PROGRAM_DATA"),
            DataSource::External(i) => format_ident!("EXTERNAL_DATA_{}", i),
        }
    }
}

/// Which embedded sources generated code refers to.
fn used_sources(p: &Program) -> BTreeSet<(u8, usize)> {
    let mut used = BTreeSet::new();
    for m in &p.methods {
        for v in &m.values {
            if let Some(t) = v.as_tensor() {
                let d = match &t.placement {
                    Placement::Constant { data } | Placement::Mutable { initial: data, .. } => Some(data),
                    Placement::External { data: Some(d), .. } => Some(d),
                    _ => None,
                };
                if let Some(d) = d {
                    used.insert(match d.source {
                        DataSource::Program => (0, 0),
                        DataSource::External(i) => (1, i),
                    });
                }
            }
        }
    }
    used
}

/// Which embedded sources the test cases' tensors come from: the bundle
/// itself, or (for cases taken from another bundle) a data file.
fn test_sources(suites: &[TestSuite]) -> BTreeSet<(u8, usize)> {
    let mut used = BTreeSet::new();
    let values = suites
        .iter()
        .flat_map(|s| &s.cases)
        .flat_map(|c| c.inputs.iter().chain(&c.expected));
    for v in values {
        if let TestValue::Tensor { data, .. } = v {
            used.insert(match data.source {
                DataSource::Program => (0, 0),
                DataSource::External(i) => (1, i),
            });
        }
    }
    used
}

/// Checks what generated code will rely on about embedded data: every
/// constant lies in its file and is aligned for its element type (the file
/// is embedded 64-byte aligned), and bool constants hold only 0 and 1.
fn check_data(p: &Program, program_bytes: &[u8], data: &[&[u8]]) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    for m in &p.methods {
        for (i, v) in m.values.iter().enumerate() {
            let Some(t) = v.as_tensor() else { continue };
            let d = match &t.placement {
                Placement::Constant { data } | Placement::Mutable { initial: data, .. } => data,
                Placement::External { data: Some(d), .. } => d,
                _ => continue,
            };
            let at = Location::method(&m.name).value(i).offset(d.offset);
            let bytes = match d.source {
                DataSource::Program => program_bytes,
                DataSource::External(k) => data.get(k).copied().unwrap_or(&[]),
            };
            let Some(b) = bytes.get(d.offset..d.offset.saturating_add(d.len)) else {
                errors.push(Diagnostic::new(
                    ErrorKind::OutsideData {
                        what: "tensor data",
                        offset: d.offset as u64,
                        len: d.len as u64,
                        limit: bytes.len() as u64,
                    },
                    at,
                ));
                continue;
            };
            let align = t.dtype.element_size();
            if d.offset % align != 0 {
                errors.push(Diagnostic::new(
                    ErrorKind::Misaligned {
                        offset: d.offset as u64,
                        align,
                    },
                    at,
                ));
            } else if t.dtype == ScalarType::Bool && b.iter().any(|&x| x > 1) {
                errors.push(Diagnostic::new(
                    ErrorKind::BadPlacement {
                        detail: "a bool constant holds a byte other than 0 or 1".into(),
                    },
                    at,
                ));
            }
        }
    }
    errors
}

/// Generates the module of a loaded program. `program_bytes` and `data` are
/// the files' bytes (for checks and the header's hash).
pub fn generate(loaded: &Loaded, program_bytes: &[u8], data: &[&[u8]], options: &Options) -> Result<TokenStream> {
    let program = loaded.program.as_ref().ok_or_else(|| {
        Errors::one(
            ErrorKind::Unsupported {
                detail: "a .ptd file holds data, not a program; compile the .pte that uses it".into(),
            },
            Location::default(),
        )
    })?;
    let struct_name = options
        .struct_name
        .clone()
        .unwrap_or_else(|| default_struct_name(&options.source_name));
    let struct_ident: Ident = syn::parse_str(&struct_name).map_err(|_| {
        Errors::one(
            ErrorKind::Unsupported {
                detail: format!("`{struct_name}` is not a valid Rust identifier for the program struct"),
            },
            Location::default(),
        )
    })?;
    let ctx = Ctx {
        struct_ident: struct_ident.clone(),
        program,
    };
    let mut errors = check_data(program, program_bytes, data);
    let mut methods = Vec::new();
    for (i, m) in program.methods.iter().enumerate() {
        match method::generate_method(&ctx, i, m) {
            Ok(code) => methods.push(code),
            Err(mut e) => errors.append(&mut e),
        }
    }
    if !errors.is_empty() {
        return Err(Errors(errors));
    }

    let tests_module = match options.tests {
        Some((rtol, atol)) if !loaded.suites.is_empty() => tests::generate_tests(&ctx, &loaded.suites, rtol, atol),
        _ => quote!(),
    };
    let mut sources = used_sources(program);
    if !tests_module.is_empty() {
        sources.extend(test_sources(&loaded.suites));
    }
    let mut statics = Vec::new();
    for (kind, i) in sources {
        let (ident, path, len) = if kind == 0 {
            (
                ctx.data_ident(DataSource::Program),
                options.program_path.clone(),
                program_bytes.len(),
            )
        } else {
            let path = options.data_paths.get(i).cloned().ok_or_else(|| {
                Errors::one(
                    ErrorKind::Unsupported {
                        detail: format!("no path was given for data file {i}"),
                    },
                    Location::default(),
                )
            })?;
            (
                ctx.data_ident(DataSource::External(i)),
                path,
                data.get(i).map_or(0, |d| d.len()),
            )
        };
        let n = crate::ops::lit(len);
        let allow = allow_lints();
        statics.push(quote! {
            #allow
            static #ident: ::ptec_runtime::mem::Aligned<[u8; #n]> = ::ptec_runtime::mem::Aligned(*include_bytes!(#path));
        });
    }

    let state_items = methods.iter().map(|m| &m.items);
    let fields = methods.iter().map(|m| {
        let (f, s) = (&m.field, &m.state_ident);
        quote!(#f: #s)
    });
    let field_names: Vec<&Ident> = methods.iter().map(|m| &m.field).collect();
    let metas = methods.iter().map(|m| &m.meta);
    let typed = methods.iter().map(|m| &m.typed_fn);
    let idx: Vec<TokenStream> = (0..methods.len()).map(crate::ops::lit).collect();
    let n_methods = crate::ops::lit(methods.len());
    let abi = ptec_runtime::ABI_VERSION;
    let zeroed = methods.iter().map(|m| {
        let f = &m.field;
        let s = &m.state_ident;
        let _ = m.arena_size;
        quote!(#f: #s::zeroed())
    });
    let zero_impls = methods.iter().map(|m| {
        let s = &m.state_ident;
        let allow = allow_lints();
        quote! {
            #allow
            impl #s {
                fn zeroed() -> Self {
                    // SAFETY: every field of a method state is an integer,
                    // float or bool (array), for which all-zero bytes are a
                    // valid value.
                    unsafe { ::core::mem::zeroed() }
                }
            }
        }
    });
    let doc = format!(
        " The ExecuTorch program `{}`, compiled by ptec {}.",
        options.source_name,
        crate::VERSION
    );
    let allow = allow_lints();
    Ok(quote! {
        const _: () = ::ptec_runtime::check_abi(#abi);

        #(#statics)*

        #(#state_items)*

        #(#zero_impls)*

        #[doc = #doc]
        ///
        /// Construct it with `new()` (on the stack) or `boxed()` (on the heap,
        /// for programs with large planned memory), then call a method's
        /// typed function or drive it through `ptec_runtime::Model`.
        pub struct #struct_ident {
            #(#fields,)*
        }

        #allow
        impl #struct_ident {
            /// The program's methods.
            pub const METHODS: &'static [::ptec_runtime::MethodMeta] = &[#(#metas),*];

            /// A new instance, built on the stack.
            pub fn new() -> Self {
                let mut s = #struct_ident { #(#zeroed,)* };
                #(s.#field_names.init();)*
                s
            }

            /// The description of method `name`.
            pub fn method_meta(name: &str) -> Option<&'static ::ptec_runtime::MethodMeta> {
                Self::METHODS.iter().find(|m| m.name == name)
            }

            #(#typed)*
        }

        impl Default for #struct_ident {
            fn default() -> Self {
                Self::new()
            }
        }

        #tests_module

        ::ptec_runtime::__if_alloc! {
            #allow
            impl #struct_ident {
                /// A new instance, built directly on the heap (no large stack
                /// frame however big the planned memory is).
                pub fn boxed() -> ::ptec_runtime::__Box<Self> {
                    ::ptec_runtime::new_boxed::<Self>()
                }
            }
        }

        // SAFETY: all-zero bytes are a valid value of the struct (see
        // `zeroed`), and init_in_place finishes initialisation in place.
        unsafe impl ::ptec_runtime::InitInPlace for #struct_ident {
            unsafe fn init_in_place(slot: *mut Self) {
                // SAFETY: the caller hands a zero-filled slot, which is a
                // valid value of Self.
                let s = unsafe { &mut *slot };
                #(s.#field_names.init();)*
            }
        }

        #allow
        impl ::ptec_runtime::Model for #struct_ident {
            fn methods(&self) -> &'static [::ptec_runtime::MethodMeta] {
                Self::METHODS
            }

            fn set_input(&mut self, method: usize, index: usize, value: ::ptec_runtime::Value<'_>) -> ::core::result::Result<(), ::ptec_runtime::Error> {
                match method {
                    #(#idx => self.#field_names.set_input(index, value),)*
                    _ => Err(::ptec_runtime::Error::IndexOutOfRange { what: "method", index: method, len: #n_methods }),
                }
            }

            fn execute(&mut self, method: usize) -> ::core::result::Result<(), ::ptec_runtime::Error> {
                match method {
                    #(#idx => self.#field_names.execute(),)*
                    _ => Err(::ptec_runtime::Error::IndexOutOfRange { what: "method", index: method, len: #n_methods }),
                }
            }

            fn step(&mut self, method: usize) -> ::core::result::Result<::ptec_runtime::Step, ::ptec_runtime::Error> {
                match method {
                    #(#idx => self.#field_names.step(),)*
                    _ => Err(::ptec_runtime::Error::IndexOutOfRange { what: "method", index: method, len: #n_methods }),
                }
            }

            fn output(&self, method: usize, index: usize) -> ::core::result::Result<::ptec_runtime::Value<'_>, ::ptec_runtime::Error> {
                match method {
                    #(#idx => self.#field_names.output(index),)*
                    _ => Err(::ptec_runtime::Error::IndexOutOfRange { what: "method", index: method, len: #n_methods }),
                }
            }

            fn reset(&mut self, method: usize) -> ::core::result::Result<(), ::ptec_runtime::Error> {
                match method {
                    #(#idx => { self.#field_names.init(); Ok(()) })*
                    _ => Err(::ptec_runtime::Error::IndexOutOfRange { what: "method", index: method, len: #n_methods }),
                }
            }
        }
    })
}

/// Formats generated tokens as a source file with the `@generated` header.
pub fn to_source(tokens: TokenStream, options: &Options, program_bytes: &[u8]) -> Result<String> {
    let file: syn::File = syn::parse2(tokens).map_err(|e| {
        Errors::one(
            ErrorKind::Unsupported {
                detail: format!("internal error: generated code does not parse: {e}"),
            },
            Location::default(),
        )
    })?;
    let hash = Sha256::digest(program_bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "// @generated by ptec {} from `{}` (sha256 {hex}).\n// Do not edit: regenerate with ptec.\n\n{}",
        crate::VERSION,
        options.source_name,
        prettyplease::unparse(&file)
    ))
}
