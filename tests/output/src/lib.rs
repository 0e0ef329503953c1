//! The snapshots of generated code that `compiler/tests/snapshots.rs`
//! checks, as modules of a crate: reviewed as diffs, and built (and linted)
//! like any user's crate. Regenerate them with
//! `PTEC_BLESS=1 cargo test -p ptec --test snapshots`.
//!
//! The files are ptec's output exactly as the CLI writes it, not rustfmt's.
//!
//! Every `unsafe` block of generated code states its invariant in a
//! `SAFETY` comment (issue 59), which this lint checks here.
#![deny(clippy::undocumented_unsafe_blocks)]
#[rustfmt::skip]
pub mod cond;
#[rustfmt::skip]
pub mod dynamic;
#[rustfmt::skip]
pub mod mlp;
#[rustfmt::skip]
pub mod mlp_external_weights;
#[rustfmt::skip]
pub mod mlp_traced;
#[rustfmt::skip]
pub mod multi_method;
