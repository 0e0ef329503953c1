//! Code generation: a verified program → one Rust module (as tokens, or as
//! formatted source with a `@generated` header).
//!
//! The module holds the embedded constants, one struct for the program with
//! a state per method, the typed function of each method and an
//! implementation of `ptec_runtime::Model` (the dynamic interface).
mod method;
pub(crate) mod ops;
mod resources;
mod tests;

use crate::error::{Diagnostic, ErrorKind, Errors, Location, Result};
use crate::ir::*;
use crate::options::Options;
use crate::plan::{MethodPlan, Plan};
use crate::read::Files;
use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};

pub use method::{method_ident, state_type_name};

/// Lints generated code does not answer to: it is complete for every
/// program, used or not, and written for clarity of generation. Said once,
/// on the module that holds it all.
fn allow_lints() -> TokenStream {
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
    /// Data files are read at run time (external-weights mode) instead of
    /// embedded.
    pub runtime_files: bool,
    /// Index of each method's first delegate among all the program's
    /// delegates (the generated `DelegateSlot` array).
    pub delegate_base: Vec<usize>,
    pub n_delegates: usize,
    /// The constants the compiler prepares (see [`prepare`]); `None` in
    /// external-weights mode, where the first run prepares them.
    pub prepared: Option<crate::plan::prepare::PreparedData<'a>>,
    /// Every read of file data the generated code makes, checked against
    /// the plan's prediction (`check_reads`).
    pub reads: std::cell::RefCell<crate::plan::compact::Reads>,
    /// Generate `execute_traced` (the `trace` option).
    pub trace: bool,
}

impl Ctx<'_> {
    /// The static holding the embedded bytes of a source.
    pub fn data_ident(&self, source: DataSource) -> Ident {
        match source {
            DataSource::Program => format_ident!("PROGRAM_DATA"),
            DataSource::External(i) => format_ident!("EXTERNAL_DATA_{}", i),
            DataSource::Embedded | DataSource::PrepareOnly => format_ident!("EMBEDDED_DATA"),
        }
    }

    /// Index of a source among the files a program in external-weights
    /// mode is given: the program first, then its `.ptd` files.
    pub fn file_index(source: DataSource) -> usize {
        match source {
            DataSource::External(i) => 1 + i,
            _ => 0,
        }
    }

    /// The bytes of a source as an expression `e` such that `&e` is a
    /// `&[u8]` and `&e[a..b]` a sub-slice: an embedded static, or (in
    /// external-weights mode) the run-time file in the resources `rs`.
    /// `offset` is where the code reads from, recorded in [`Ctx::reads`].
    pub fn data_expr(&self, source: DataSource, offset: usize) -> TokenStream {
        self.reads.borrow_mut().insert((source, offset));
        match source {
            DataSource::Program | DataSource::External(_) if self.runtime_files => {
                let k = crate::codegen::ops::lit(Self::file_index(source));
                quote!(rs.files[#k].bytes())
            }
            // Never embedded: the plan predicted no read here, and
            // `check_reads` fails on one before the code leaves `generate`.
            DataSource::PrepareOnly => quote!(compile_error!("internal: a read of data left out of the binary")),
            _ => {
                let id = self.data_ident(source);
                quote!(#id.0)
            }
        }
    }

    /// Whether the program needs things given at construction: run-time
    /// files or delegate backends.
    pub fn has_resources(&self) -> bool {
        self.runtime_files || self.n_delegates > 0
    }

    pub fn resources_ident(&self) -> Ident {
        format_ident!("{}Resources", self.struct_ident)
    }

    /// The extra parameter of method-state functions that read run-time
    /// resources (`rs`), mutable or shared; empty when there are none.
    pub fn rs_param(&self, mutable: bool) -> TokenStream {
        if !self.has_resources() {
            return quote!();
        }
        let r = self.resources_ident();
        if mutable {
            quote!(, rs: &mut #r<'_>)
        } else {
            quote!(, rs: &#r<'_>)
        }
    }

    /// Passes `rs` on inside a method state (after other arguments when
    /// `after`); empty when there are none.
    pub fn rs_arg(&self, after: bool) -> TokenStream {
        match (self.has_resources(), after) {
            (false, _) => quote!(),
            (true, true) => quote!(, rs),
            (true, false) => quote!(rs),
        }
    }

    /// Passes the program's resources to a method state (after other
    /// arguments when `after`).
    pub fn self_rs(&self, mutable: bool, after: bool) -> TokenStream {
        if !self.has_resources() {
            return quote!();
        }
        let arg = if mutable {
            quote!(&mut self.rs)
        } else {
            quote!(&self.rs)
        };
        if after {
            quote!(, #arg)
        } else {
            arg
        }
    }

    /// The program struct's lifetime parameter (what its resources borrow).
    pub fn generics(&self) -> TokenStream {
        if self.has_resources() {
            quote!(<'r>)
        } else {
            quote!()
        }
    }
}

/// A generated module.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The module's items.
    pub tokens: TokenStream,
    /// The constants the code embeds (see [`DataSource::Embedded`]), for the
    /// file at [`Options::output_file`] (when set; the code embeds them
    /// otherwise): the bytes of the program's files its code reads, then the
    /// constants the compiler prepared.
    /// Empty when there are none: the code then reads no such file.
    pub prepared: Vec<u8>,
    /// How many leading bytes of `prepared` are the files' bytes; the
    /// constants the compiler prepared follow, from the next multiple of 64.
    pub files_len: usize,
    /// Test cases of the generated `bundled` module (0 when there is none).
    pub cases: usize,
    /// Each method's name and what each of its instructions does, in a few
    /// words: for profiles, which count the instructions of the compiled
    /// program.
    pub instructions: Vec<(String, Vec<String>)>,
}

/// Generates the module of a planned program, in one pass: every read of
/// file data its code makes was predicted by the plan (checked here).
pub(crate) fn generate(mut plan: Plan<'_>, options: &Options) -> Result<Generated> {
    let (struct_name, struct_ident) = options.struct_ident()?;
    let program: &Program = &plan.program;
    let mut delegate_base = Vec::new();
    let mut n_delegates = 0;
    for m in &program.methods {
        delegate_base.push(n_delegates);
        n_delegates += m.delegates.len();
    }
    let ctx = Ctx {
        struct_ident: struct_ident.clone(),
        program,
        runtime_files: options.external_weights,
        delegate_base,
        n_delegates,
        prepared: plan.prepared.take(),
        reads: Default::default(),
        trace: options.trace,
    };
    let with_tests = options.tests.is_some() && !plan.suites.is_empty();
    let shared_size = plan.shared_size;
    let suites: &[TestSuite] = &plan.suites;
    let methods = generate_methods(&ctx, std::mem::take(&mut plan.methods))?;
    check_reads(&ctx, &plan.reads)?;
    let files = &plan.files;

    let file_sources: Vec<(u8, usize)> = if options.external_weights {
        std::iter::once((0, 0))
            .chain((0..files.data_files()).map(|i| (1, i)))
            .collect()
    } else {
        Vec::new()
    };
    let files_len = ctx.prepared.as_ref().map_or(0, |p| p.files_len());
    let prepared = ctx.prepared.as_ref().map(|p| p.take_bytes()).unwrap_or_default();
    let prepared_static = prepared_static(&ctx, options, &prepared);
    // In external-weights mode the weights stay out of the binary; only
    // the bundled tests embed the files, to hand them to the program.
    let test_statics = data_statics(&ctx, options, files, &file_sources)?;
    let tracked = if options.track_inputs {
        track_inputs(options)
    } else {
        quote!()
    };
    let tests_module = match options.tests {
        Some((rtol, atol)) if with_tests => tests::generate_tests(&ctx, suites, rtol, atol, &test_statics),
        _ => quote!(),
    };
    let file_checks: Vec<TokenStream> = file_sources
        .iter()
        .map(|&(kind, i)| {
            let (name, bytes) = if kind == 0 {
                (options.source_name.clone(), files.bytes(DataSource::Program))
            } else {
                let name = options.data_paths.get(i).map_or_else(
                    || format!("data file {i}"),
                    |p| {
                        std::path::Path::new(p)
                            .file_name()
                            .map_or_else(|| p.clone(), |n| n.to_string_lossy().into_owned())
                    },
                );
                (name, files.bytes(DataSource::External(i)))
            };
            let size = crate::codegen::ops::lit(bytes.len());
            let hash = proc_macro2::Literal::u64_suffixed(ptec_runtime::content_hash(bytes));
            quote!(::ptec_runtime::FileCheck { name: #name, size: #size, hash: #hash })
        })
        .collect();

    let instructions = ctx
        .program
        .methods
        .iter()
        .zip(&methods)
        .map(|(m, code)| (m.name.clone(), code.instructions.clone()))
        .collect();
    let state_items = methods.iter().map(|m| &m.items);
    let shared = Shared::of(&ctx, &methods, shared_size);
    let mut fields: Vec<TokenStream> = methods
        .iter()
        .map(|m| {
            let (f, s) = (&m.field, &m.state_ident);
            quote!(#f: #s)
        })
        .collect();
    fields.extend(shared.fields.iter().cloned());
    let field_names: Vec<&Ident> = methods.iter().map(|m| &m.field).collect();
    let metas = methods.iter().map(|m| &m.meta);
    let typed = methods.iter().map(|m| &m.typed_fn);
    let abi = ptec_runtime::ABI_VERSION;
    let mut zeroed: Vec<TokenStream> = methods
        .iter()
        .map(|m| {
            let f = &m.field;
            let s = &m.state_ident;
            quote!(#f: #s::zeroed())
        })
        .collect();
    zeroed.extend(shared.zeroed.iter().cloned());
    let zero_impls = methods.iter().map(|m| {
        let s = &m.state_ident;
        quote! {
            impl #s {
                fn zeroed() -> Self {
                    // SAFETY: every field of a method state is an integer,
                    // float or bool (array), for which all-zero bytes are a
                    // valid value.
                    unsafe { ::ptec_runtime::mem::zeroed_state() }
                }
            }
        }
    });
    let doc = format!(
        " The ExecuTorch program `{}`, compiled by ptec {}.",
        options.source_name,
        crate::VERSION
    );
    // Send and Sync are deliberate (docs/soundness.md).
    let threads_doc = if ctx.n_delegates > 0 {
        " It is neither `Send` nor `Sync`: it holds the backends of its delegates (`&mut dyn Backend`), which need not be either, so it stays on the thread that made it."
    } else {
        " It is `Send` and `Sync`: it owns its memory or borrows read-only files, nothing in it changes behind `&self`, and the kernels' thread pool serves callers on any thread."
    };
    let gen = ctx.generics();
    let rs_field = if ctx.has_resources() {
        let r = ctx.resources_ident();
        quote!(rs: #r<'r>,)
    } else {
        quote!()
    };
    let (construction, resources) = if ctx.has_resources() {
        construction_with_resources(&ctx, &file_checks, &field_names, &zeroed, &shared)
    } else {
        (construction_plain(&ctx, &field_names, &zeroed, &shared), quote!())
    };
    let model_impl = model_impl(&ctx, &field_names, &shared);
    let shared_impl = &shared.items;
    let tokens = quote! {
        const _: () = ::ptec_runtime::check_abi(#abi);

        #tracked
        #prepared_static

        #(#state_items)*

        #(#zero_impls)*

        #resources

        #[doc = #doc]
        ///
        /// Construct it with `new(..)` (on the stack) or `boxed(..)` (on the
        /// heap, for programs with large planned memory, or large weights
        /// that the first run prepares in external-weights mode), then call
        /// a method's typed function or drive it through
        /// `ptec_runtime::Model`.
        ///
        #[doc = #threads_doc]
        pub struct #struct_ident #gen {
            #rs_field
            #(#fields,)*
        }

        impl #gen #struct_ident #gen {
            /// The program's methods.
            pub const METHODS: &'static [::ptec_runtime::MethodMeta] = &[#(#metas),*];

            /// The description of method `name`.
            pub fn method_meta(name: &str) -> Option<&'static ::ptec_runtime::MethodMeta> {
                Self::METHODS.iter().find(|m| m.name == name)
            }

            #(#typed)*
        }

        #construction

        #shared_impl

        #tests_module

        #model_impl
    };
    // Everything in one private module, so that one `#[allow]` covers it;
    // its public items are the caller's, as if written in place (a caller
    // that uses none of them is not told so).
    let allow = allow_lints();
    let module = format_ident!("__ptec_{}", struct_name.to_lowercase());
    let tokens = quote! {
        #allow
        mod #module {
            #tokens
        }
        #[allow(unused_imports)]
        pub use #module::*;
    };
    Ok(Generated {
        tokens,
        prepared,
        files_len,
        cases: suites.iter().map(|s| s.cases.len()).sum(),
        instructions,
    })
}

/// Fails, as a bug in ptec, if the code read file data the plan did not
/// predict (`plan::reads`): the compaction would have left it out. Reads
/// of the constants prepared as the code was generated, after the files'
/// bytes, are the code's own.
fn check_reads(ctx: &Ctx<'_>, predicted: &crate::plan::compact::Reads) -> Result<()> {
    let files_len = ctx.prepared.as_ref().map_or(0, |p| p.files_len());
    let unpredicted = ctx.reads.borrow().iter().copied().find(|&(source, offset)| {
        let prepared_now = source == DataSource::Embedded && offset >= files_len;
        !prepared_now && !predicted.contains(&(source, offset))
    });
    match unpredicted {
        None => Ok(()),
        Some((source, offset)) => Err(Errors::one(
            ErrorKind::Internal {
                detail: format!("generated code reads data the plan did not predict ({source:?} at byte {offset})"),
            },
            Location::default(),
        )),
    }
}

/// The code of every method of `ctx.program`, from its plan.
fn generate_methods(ctx: &Ctx<'_>, plans: Vec<Result<MethodPlan, Vec<Diagnostic>>>) -> Result<Vec<method::MethodCode>> {
    let mut errors = Vec::new();
    let mut methods = Vec::new();
    for ((i, m), plan) in ctx.program.methods.iter().enumerate().zip(plans) {
        match plan.and_then(|plan| method::generate_method(ctx, i, m, plan)) {
            Ok(code) => methods.push(code),
            Err(mut e) => errors.append(&mut e),
        }
    }
    let total = methods
        .iter()
        .try_fold(0usize, |sum, m| sum.checked_add(m.arena_bytes))
        .filter(|&t| t <= method::MAX_PROGRAM_ARENA_BYTES);
    if errors.is_empty() && total.is_none() {
        errors.push(Diagnostic::new(
            ErrorKind::Unsupported {
                detail: format!(
                    "the methods' memory together is more than a program may take ({} bytes)",
                    method::MAX_PROGRAM_ARENA_BYTES
                ),
            },
            Location::default(),
        ));
    }
    if errors.is_empty() {
        Ok(methods)
    } else {
        Err(Errors(errors))
    }
}

/// Unused constants naming the input files, so that Cargo rebuilds the
/// crate of an `include_pte!` when one changes (the compiler drops them:
/// they are not in the binary).
fn track_inputs(options: &Options) -> TokenStream {
    let paths = std::iter::once(&options.program_path).chain(&options.data_paths);
    quote!(#(const _: &[u8] = include_bytes!(#paths);)*)
}

/// The `static` holding the constants the code embeds, 64-byte aligned:
/// read from `options.prepared_path`, or written out here.
fn prepared_static(ctx: &Ctx<'_>, options: &Options, bytes: &[u8]) -> TokenStream {
    if bytes.is_empty() {
        return quote!();
    }
    let ident = ctx.data_ident(DataSource::Embedded);
    let n = crate::codegen::ops::lit(bytes.len());
    let data = match &options.prepared_path {
        Some(path) => quote!(*include_bytes!(#path)),
        None => {
            let lit = proc_macro2::Literal::byte_string(bytes);
            quote!(*#lit)
        }
    };
    let fits = fits_target("the embedded data", bytes.len());
    quote! {
        #fits
        static #ident: ::ptec_runtime::mem::Aligned<[u8; #n]> = ::ptec_runtime::mem::Aligned(#data);
    }
}

/// A compile-time assertion that `bytes` of `what` fit the target's address
/// space: on a target where they do not (a 32-bit one), the build fails with
/// this message, naming what, rather than with the overflows of the
/// generated literals.
pub(crate) fn fits_target(what: &str, bytes: usize) -> TokenStream {
    if bytes == 0 {
        return quote!();
    }
    let message = format!("ptec: {what} takes {bytes} bytes, more than this target's address space holds");
    let n = proc_macro2::Literal::u64_suffixed(bytes as u64);
    quote!(
        const _: () = ::core::assert!(#n <= isize::MAX as u64, #message);
    )
}

/// `static` items embedding the given source files, 64-byte aligned.
fn data_statics(
    ctx: &Ctx<'_>,
    options: &Options,
    files: &Files<'_>,
    sources: &[(u8, usize)],
) -> Result<Vec<TokenStream>> {
    let mut statics = Vec::new();
    for &(kind, i) in sources {
        let (ident, path, len) = if kind == 0 {
            (
                ctx.data_ident(DataSource::Program),
                options.program_path.clone(),
                files.bytes(DataSource::Program).len(),
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
                files.bytes(DataSource::External(i)).len(),
            )
        };
        let n = crate::codegen::ops::lit(len);
        let fits = fits_target(&format!("`{path}`"), len);
        statics.push(quote! {
            #fits
            static #ident: ::ptec_runtime::mem::Aligned<[u8; #n]> = ::ptec_runtime::mem::Aligned(*include_bytes!(#path));
        });
    }
    Ok(statics)
}

/// What the program struct adds for the state its methods share (see
/// [`crate::plan::shared`]): nothing when they share none.
#[derive(Default)]
struct Shared {
    /// Its fields: the shared buffer, and which method's arena holds the
    /// shared state as it is now (method + 1; 0: the buffer does).
    fields: Vec<TokenStream>,
    /// The fields' all-zero values.
    zeroed: Vec<TokenStream>,
    /// Whether the methods share state (the rest is empty if not).
    active: bool,
    /// By method, what runs before it does (or is reset).
    switch: Vec<TokenStream>,
    /// `shared_switch` and `shared_init`.
    items: TokenStream,
}

impl Shared {
    /// At construction, after every method's `init`, on the program
    /// `receiver`.
    fn init(&self, receiver: TokenStream) -> TokenStream {
        if self.active {
            quote!(#receiver.shared_init();)
        } else {
            quote!()
        }
    }

    fn of(ctx: &Ctx<'_>, methods: &[method::MethodCode], size: Option<usize>) -> Shared {
        let Some(size) = size.filter(|_| methods.iter().any(|m| m.shares)) else {
            return Shared {
                switch: vec![quote!(); methods.len()],
                ..Shared::default()
            };
        };
        let (st, gen) = (&ctx.struct_ident, ctx.generics());
        let n = crate::codegen::ops::lit(size.next_multiple_of(64));
        // The methods that hold shared state: their index, their index + 1
        // (as the owner) and their field.
        let holders = || methods.iter().enumerate().filter(|(_, m)| m.shares);
        let idx: Vec<TokenStream> = holders().map(|(i, _)| crate::codegen::ops::lit(i)).collect();
        let owner: Vec<TokenStream> = holders().map(|(i, _)| crate::codegen::ops::lit(i + 1)).collect();
        let field: Vec<&Ident> = holders().map(|(_, m)| &m.field).collect();
        let switch = methods
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let i = crate::codegen::ops::lit(i);
                if m.shares {
                    quote!(self.shared_switch(#i);)
                } else {
                    quote!()
                }
            })
            .collect();
        let items = quote! {
            impl #gen #st #gen {
                /// Before method `method` runs: the method whose arena holds
                /// the shared state hands it to the shared buffer, and
                /// `method` takes its part from there (nothing moves while
                /// the same method runs again).
                fn shared_switch(&mut self, method: usize) {
                    if self.shared_owner == method + 1 {
                        return;
                    }
                    match self.shared_owner {
                        #(#owner => self.#field.shared_save(&mut self.shared.0),)*
                        _ => {}
                    }
                    match method {
                        #(#idx => self.#field.shared_load(&self.shared.0),)*
                        _ => {}
                    }
                    self.shared_owner = method + 1;
                }

                /// The shared buffer filled from each method's initial
                /// state in turn (as ExecuTorch's runtime loading them in
                /// order would).
                fn shared_init(&mut self) {
                    #(self.#field.shared_save(&mut self.shared.0);)*
                    self.shared_owner = 0;
                }
            }
        };
        Shared {
            fields: vec![
                quote!(shared: ::ptec_runtime::mem::Arena<#n>),
                quote!(shared_owner: usize),
            ],
            zeroed: vec![
                // SAFETY: all-zero bytes are a valid byte array.
                quote!(shared: unsafe { ::ptec_runtime::mem::zeroed_state() }),
                quote!(shared_owner: 0),
            ],
            active: true,
            switch,
            items,
        }
    }
}

/// Constructors of a program that needs nothing at construction: `new`,
/// `Default`, `boxed` and in-place initialisation.
fn construction_plain(ctx: &Ctx<'_>, field_names: &[&Ident], zeroed: &[TokenStream], shared: &Shared) -> TokenStream {
    let st = &ctx.struct_ident;
    let shared_init = shared.init(quote!(s));
    quote! {
        impl #st {
            /// A new instance, built on the stack.
            pub fn new() -> Self {
                let mut s = #st { #(#zeroed,)* };
                #(s.#field_names.init();)*
                #shared_init
                s
            }
        }

        impl Default for #st {
            fn default() -> Self {
                Self::new()
            }
        }

        ::ptec_runtime::__if_alloc! {
            impl #st {
                /// A new instance, built directly on the heap (no large stack
                /// frame however big the planned memory is).
                pub fn boxed() -> ::ptec_runtime::Boxed<Self> {
                    ::ptec_runtime::new_boxed::<Self>()
                }

                /// As [`Self::boxed`], but when the heap cannot hold the
                /// program, an error instead of an abort.
                pub fn try_boxed() -> ::core::result::Result<::ptec_runtime::Boxed<Self>, ::ptec_runtime::Error> {
                    ::ptec_runtime::try_new_boxed::<Self>()
                }
            }
        }

        // SAFETY: all-zero bytes are a valid value of the struct (see
        // `zeroed`), and init_in_place finishes initialisation in place.
        unsafe impl ::ptec_runtime::InitInPlace for #st {
            unsafe fn init_in_place(slot: *mut Self) {
                // SAFETY: the caller hands a zero-filled slot, which is a
                // valid value of Self.
                let s = unsafe { &mut *slot };
                #(s.#field_names.init();)*
                #shared_init
            }
        }
    }
}

/// Constructors of a program given files and/or backends; returns them and
/// the resources items.
fn construction_with_resources(
    ctx: &Ctx<'_>,
    file_checks: &[TokenStream],
    field_names: &[&Ident],
    zeroed: &[TokenStream],
    shared: &Shared,
) -> (TokenStream, TokenStream) {
    let st = &ctx.struct_ident;
    let (shared_init, shared_init_raw) = (shared.init(quote!(s)), shared.init(quote!((*p))));
    let r = ctx.resources_ident();
    let (params, args) = resources::constructor_params(ctx, file_checks.len());
    let n_files = crate::codegen::ops::lit(file_checks.len());
    let files_const = if ctx.runtime_files {
        quote! {
            /// The files `new` and `boxed` take, in order (the program,
            /// then its `.ptd` files), with the size and hash they must have.
            pub const FILES: [::ptec_runtime::FileCheck; #n_files] = [#(#file_checks),*];
        }
    } else {
        quote!()
    };
    let needs = match (ctx.runtime_files, ctx.n_delegates > 0) {
        (true, true) => "the files in [`Self::FILES`] and the backends of its delegates",
        (true, false) => "the files in [`Self::FILES`], read in place (e.g. `ptec_runtime::Blob::open`)",
        _ => "the backends of its delegates, each initialised now",
    };
    let new_doc = format!(" A new instance, built on the stack, given {needs}.");
    let boxed_doc = format!(
        " A new instance, built directly on the heap, given {needs}; an error too when the heap cannot hold it."
    );
    let construction = quote! {
        impl<'r> #st<'r> {
            #files_const

            #[doc = #new_doc]
            pub fn new(#params) -> ::core::result::Result<Self, ::ptec_runtime::Error> {
                let rs = #r::new(#args)?;
                let mut s = #st { rs, #(#zeroed,)* };
                #(s.#field_names.init(&s.rs);)*
                #shared_init
                Ok(s)
            }
        }

        ::ptec_runtime::__if_alloc! {
            impl<'r> #st<'r> {
                #[doc = #boxed_doc]
                pub fn boxed(#params) -> ::core::result::Result<::ptec_runtime::Boxed<Self>, ::ptec_runtime::Error> {
                    let rs = #r::new(#args)?;
                    // SAFETY: the method states are valid all-zero (see
                    // `zeroed`); `rs` is written before anything reads it,
                    // so every field is initialised when this returns.
                    unsafe {
                        ::ptec_runtime::try_new_boxed_with::<Self>(|p| {
                            ::core::ptr::addr_of_mut!((*p).rs).write(rs);
                            #((*::core::ptr::addr_of_mut!((*p).#field_names)).init(&(*p).rs);)*
                            #shared_init_raw
                        })
                    }
                }
            }
        }
    };
    (construction, resources::resources_items(ctx, file_checks))
}

/// The program's implementation of `ptec_runtime::Model`: each call
/// dispatched to the state of the method it names.
fn model_impl(ctx: &Ctx<'_>, field_names: &[&Ident], shared: &Shared) -> TokenStream {
    let (st, gen) = (&ctx.struct_ident, ctx.generics());
    let switch = &shared.switch;
    let idx: Vec<TokenStream> = (0..field_names.len()).map(crate::codegen::ops::lit).collect();
    let n_methods = crate::codegen::ops::lit(field_names.len());
    let (rs_mut, rs_ref, rs_ref_after) = (
        ctx.self_rs(true, false),
        ctx.self_rs(false, false),
        ctx.self_rs(false, true),
    );
    let traced = ctx.trace.then(|| {
        let rs_after = ctx.self_rs(true, true);
        quote! {
            fn execute_traced(&mut self, method: usize, tracer: &mut dyn ::ptec_runtime::trace::Tracer) -> ::core::result::Result<(), ::ptec_runtime::Error> {
                match method {
                    #(#idx => { #switch self.#field_names.execute_traced(tracer #rs_after) })*
                    _ => Err(::ptec_runtime::Error::IndexOutOfRange { what: "method", index: method, len: #n_methods }),
                }
            }
        }
    });
    // The methods that draw random numbers each have a generator.
    let random: Vec<&Ident> = ctx
        .program
        .methods
        .iter()
        .zip(field_names)
        .filter(|(m, _)| crate::codegen::ops::random::draws_random(m))
        .map(|(_, f)| *f)
        .collect();
    let seed = (!random.is_empty()).then(|| {
        quote! {
            fn manual_seed(&mut self, seed: u64) {
                #(self.#random.rng = ::ptec_runtime::kernels::random::Rng::seeded(seed);)*
            }
        }
    });
    quote! {
    impl #gen ::ptec_runtime::Model for #st #gen {
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
                #(#idx => { #switch self.#field_names.execute(#rs_mut) })*
                _ => Err(::ptec_runtime::Error::IndexOutOfRange { what: "method", index: method, len: #n_methods }),
            }
        }

        fn step(&mut self, method: usize) -> ::core::result::Result<::ptec_runtime::Step, ::ptec_runtime::Error> {
            match method {
                #(#idx => { #switch self.#field_names.step(#rs_mut) })*
                _ => Err(::ptec_runtime::Error::IndexOutOfRange { what: "method", index: method, len: #n_methods }),
            }
        }

        fn output(&self, method: usize, index: usize) -> ::core::result::Result<::ptec_runtime::Value<'_>, ::ptec_runtime::Error> {
            match method {
                #(#idx => self.#field_names.output(index #rs_ref_after),)*
                _ => Err(::ptec_runtime::Error::IndexOutOfRange { what: "method", index: method, len: #n_methods }),
            }
        }

        fn reset(&mut self, method: usize) -> ::core::result::Result<(), ::ptec_runtime::Error> {
            match method {
                #(#idx => { #switch self.#field_names.init(#rs_ref); Ok(()) })*
                _ => Err(::ptec_runtime::Error::IndexOutOfRange { what: "method", index: method, len: #n_methods }),
            }
        }

        #seed

        #traced
    }
    }
}

#[cfg(test)]
mod read_check_tests {
    use super::*;

    /// Code that reads file data the plan did not predict is a bug in ptec,
    /// reported as such (the compaction would have left the data out).
    #[test]
    fn a_read_the_plan_did_not_predict_is_an_internal_error() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/mlp.pte");
        let file = std::fs::read(path).unwrap();
        let options = Options::new();
        let mut loaded = crate::load(&file, &[]).unwrap();
        crate::transform(&mut loaded, &options).unwrap();
        crate::plan::plan_temporaries(&mut loaded).unwrap();
        // As planned, the code generates.
        generate(crate::plan::plan_program(&loaded, &options).unwrap(), &options).unwrap();
        let mut plan = crate::plan::plan_program(&loaded, &options).unwrap();
        assert!(!plan.reads.is_empty(), "mlp's code reads its weights");
        plan.reads.clear();
        let e = generate(plan, &options).unwrap_err();
        assert!(matches!(e.first().kind, ErrorKind::Internal { .. }), "{e}");
        assert!(e.to_string().contains("the plan did not predict"), "{e}");
    }
}
