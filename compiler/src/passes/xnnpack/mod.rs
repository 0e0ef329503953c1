//! ExecuTorch's XNNPACK delegate, compiled instead of called.
//!
//! Most programs exported for CPU put their work in `DelegateCall`s to the
//! backend `XnnpackBackend`, whose processed blob is a serialized XNNPACK
//! subgraph. The read stage reads and verifies each call's subgraph
//! ([`crate::read::xnnpack`]); this pass takes those subgraphs, never the
//! blobs' bytes, and replaces each call by kernel calls over new values of
//! the method
//! ([`lower`]): the subgraph's nodes become instructions of the same IR that
//! the rest of the compiler already turns into straight-line Rust, with
//! `aten` operators where the semantics agree and ptec's own NHWC
//! operators (`ptec_xnn::*`, see `ops/xnnpack.rs`) where they do not.
//!
//! The pass runs between loading and code generation when
//! [`Options::lower_xnnpack`](crate::Options) is set (the default); a
//! front end that wants delegate calls left in place turns it off.
mod lower;

pub use lower::lower_xnnpack_delegates;

pub use crate::names::XNNPACK_BACKEND_ID as BACKEND_ID;

#[cfg(test)]
mod tests;
