//! ExecuTorch's XNNPACK delegate, compiled instead of called.
//!
//! Most programs exported for CPU put their work in `DelegateCall`s to the
//! backend `XnnpackBackend`, whose processed blob is a serialized XNNPACK
//! subgraph. This pass reads and verifies each such blob ([`blob`]) and
//! replaces the call by kernel calls over new values of the method
//! ([`lower`]): the subgraph's nodes become instructions of the same IR that
//! the rest of the compiler already turns into straight-line Rust, with
//! `aten` operators where the semantics agree and ptec's own NHWC
//! operators (`ptec_xnn::*`, see `ops/xnnpack.rs`) where they do not.
//!
//! The pass runs between loading and code generation when
//! [`Options::lower_xnnpack`](crate::Options) is set (the default); a
//! front end that wants delegate calls left in place turns it off.
pub mod blob;
mod lower;

pub(crate) use lower::batch_matmul_sizes;
pub use lower::lower_xnnpack_delegates;

/// The backend id ExecuTorch gives its XNNPACK delegate.
pub const BACKEND_ID: &str = "XnnpackBackend";

#[cfg(test)]
mod tests;
