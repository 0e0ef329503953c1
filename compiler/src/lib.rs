//! ptec: an ahead-of-time compiler from ExecuTorch programs to Rust.
//!
//! One library behind three front ends, so they accept, reject and
//! generate exactly the same things: the `ptec` command line, the
//! `include_pte!` macro (crate `ptec-macros`) and the [`Builder`] for build
//! scripts. Each takes the same [`Options`], and all call [`compile`]:
//!
//! ```no_run
//! let input = ptec::Input::open("mlp.pte")?;
//! let output = ptec::compile(&input, &ptec::Options::new().name("Mlp"))?;
//! output.write("src/mlp.rs")?;
//! # Ok::<(), ptec::Errors>(())
//! ```
//!
//! The compiler's stages, each a module, in the order [`compile`] runs
//! them (none is part of the stable API):
//!
//! 1. `read`: file bytes → the IR, with the subgraph of each XNNPACK
//!    delegate call read from its blob, and the files' bytes the IR refers
//!    to (`Loaded`: later stages take it, never a file, and parse nothing);
//! 2. `verify`: what the rest relies on, checked (after reading and after
//!    every pass);
//! 3. `passes`: IR → IR, consulting `analysis` (uses, lives, values that
//!    share bytes);
//! 4. `plan`: where every byte lives (temporaries, each value's home,
//!    folds, packed weights, what the code will read, compaction), all
//!    decided before any code is emitted;
//! 5. `codegen`: the IR and its plan → Rust tokens in one pass, one
//!    emitter per operator;
//! 6. `format`: tokens → a source file.
//!
//! A stage uses only those before it and the shared vocabulary below them
//! all (`ir`, `error`, `names`, `shapes`, `options`, `analysis`).
//! `options` holds the options and their one parser; `frontend` the
//! macro's expansion and the [`Builder`]; `compile` runs the stages.
#![warn(missing_docs)]
// The compiler only writes `unsafe` into generated code (tokens, each
// block with its SAFETY comment: `format::safety_comments`).
#![forbid(unsafe_code)]
mod analysis;
mod codegen;
mod compile;
#[doc(hidden)]
pub mod coverage;
mod error;
mod format;
mod frontend;
#[doc(hidden)]
pub mod ir;
mod names;
mod options;
mod passes;
mod plan;
mod read;
mod shapes;
mod verify;

pub use compile::{compile, Input, Output};
pub use error::{Diagnostic, ErrorKind, Errors, Location, Result};
pub use frontend::Builder;
pub use options::Options;
/// The tolerance generated tests compare outputs with; its default is the
/// front ends' (`rtol = 1e-4, atol = 1e-5`).
pub use ptec_runtime::harness::Tolerance;

// The stages one by one, for the command line's `inspect`, the macro, the
// fuzz targets and tests: not a stable API.
#[doc(hidden)]
pub use codegen::{state_type_name, Generated};
#[doc(hidden)]
pub use compile::{generate, load};
#[doc(hidden)]
pub use frontend::expand_macro;
#[doc(hidden)]
pub use passes::xnnpack::BACKEND_ID as XNNPACK_BACKEND_ID;
#[doc(hidden)]
pub use passes::{lower_delegates, transform};
#[doc(hidden)]
pub use read::{Files, Loaded};

/// The readers one by one, for the fuzz targets; not a stable API.
#[doc(hidden)]
pub mod __fuzz {
    pub use crate::read::bundle::{read_bp04, read_bp08};
    pub use crate::read::ptd::read_ptd;
}

/// The version of ptec, written into generated code.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
