//! ptec: an ahead-of-time compiler from ExecuTorch programs to Rust.
//!
//! One library behind three front ends (the `ptec` CLI, the `include_pte!`
//! macro and the [`Builder`] for build scripts), so they accept, reject and
//! generate exactly the same things:
//!
//! - [`load`] reads any ExecuTorch file (`.pte`, `.bp`, `.bpte`, `.ptd`) into
//!   the [`ir`] and verifies it ([`verify`]);
//! - [`inspect`] describes it for a person or as JSON.
mod alias;
pub mod bench;
pub mod bundle;
pub mod channels_last;
pub mod check;
pub mod codegen;
mod compile;
pub mod container;
pub mod conv_chains;
pub mod coverage;
pub mod error;
mod frontend;
pub mod inspect;
pub mod ir;
pub mod load;
pub mod ops;
pub mod ptd;
pub mod reader;
mod rewrite;
mod runner_crate;
mod temporaries;
pub mod verify;
pub mod xnnpack;

pub use codegen::{Generated, Options};
pub use compile::{
    compile, compile_program, compile_to_source, compile_to_string, compile_with_cases_to_source, lower_delegates,
    prepared_file, prepared_include, read_file, transform, write_if_changed, ForeignCases, Source,
};
pub use error::{Diagnostic, ErrorKind, Errors, Location};
pub use frontend::{compile_path, expand_macro, source_path, Builder, Settings};
pub use load::{load, Loaded};

/// The version of ptec, written into generated code.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
