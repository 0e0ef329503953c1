//! The subcommands of the `ptec` command line beyond compiling: `check`
//! and `bench` build generated code in a runner crate and run it;
//! `inspect` describes a file. The compiler itself is the `ptec` library.
pub mod bench;
pub mod check;
pub mod inspect;
mod runner;

/// Where `check` and `bench` build and cache their runner crates, for
/// this process (the command line's `--target-dir`).
pub use runner::set_target_dir;
