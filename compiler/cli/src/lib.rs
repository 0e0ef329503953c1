//! The subcommands of the `ptec` command line beyond compiling: `check`
//! and `bench` build generated code in a runner crate and run it;
//! `inspect` describes a file. The compiler itself is the `ptec` library.
pub mod bench;
pub mod check;
pub mod inspect;
mod runner;
