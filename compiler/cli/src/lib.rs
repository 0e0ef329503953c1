//! The subcommands of the `ptec` command line beyond compiling: `check`,
//! `bench` and `size` build generated code in a runner crate and run it
//! (`size` also reads the binary);
//! `inspect` describes a file; `reference` compares a failing case
//! with ExecuTorch's runtime. The compiler itself is the `ptec` library.
pub mod bench;
pub mod check;
pub mod inspect;
pub mod reference;
mod runner;
pub mod size;

/// Where `check` and `bench` build and cache their runner crates, for
/// this process (the command line's `--target-dir`).
pub use runner::set_target_dir;
