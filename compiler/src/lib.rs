//! ptec: an ahead-of-time compiler from ExecuTorch programs to Rust.
//!
//! One library behind three front ends (the `ptec` command line, the
//! `include_pte!` macro and the [`Builder`] for build scripts), so they
//! accept, reject and generate exactly the same things. Its stages, each a
//! module, in the order [`compile`] runs them:
//!
//! 1. `read`: file bytes → the [`ir`] ([`load`]), verified (`verify`);
//! 2. `passes`: IR → IR ([`transform`]), consulting `analysis` (uses,
//!    lives, values that share bytes);
//! 3. `plan`: bytes for what the passes added, each value's home;
//! 4. `codegen`: the IR → Rust tokens, one emitter per operator;
//! 5. `format`: tokens → a source file ([`to_source`]).
//!
//! `frontend` holds the path handling the macro and the [`Builder`] share.
#![warn(missing_docs)]
mod analysis;
mod codegen;
mod compile;
pub mod coverage;
pub mod error;
mod format;
mod frontend;
pub mod ir;
mod names;
mod passes;
mod plan;
mod read;
mod shapes;
mod verify;

pub use codegen::{generate, Generated, Options};
pub use compile::{
    compile, compile_program, compile_to_source, compile_to_string, compile_with_cases_to_source, load, prepared_file,
    prepared_include, read_file, write_if_changed, ForeignCases, Source,
};
pub use error::{Diagnostic, ErrorKind, Errors, Location, Result};
pub use format::to_source;
pub use frontend::{compile_path, expand_macro, source_path, Builder, Settings};
pub use passes::xnnpack::BACKEND_ID as XNNPACK_BACKEND_ID;
pub use passes::{lower_delegates, transform};
/// The tolerance generated tests compare outputs with; its default is the
/// front ends' (`rtol = 1e-4, atol = 1e-5`).
pub use ptec_runtime::harness::Tolerance;
pub use read::Loaded;

/// The readers one by one, for the fuzz targets; not a stable API.
#[doc(hidden)]
pub mod __fuzz {
    pub use crate::read::bundle::{read_bp04, read_bp08};
    pub use crate::read::ptd::read_ptd;
}

/// The version of ptec, written into generated code.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
