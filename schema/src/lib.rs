//! FlatBuffer bindings for the files ptec reads.
//!
//! The schemas in `fbs/` are written for what ExecuTorch 1.5 emits; the Rust
//! code in `src/generated/` is produced from them by `flatc` 24.3.25 through
//! `regen.sh` and committed, so building needs no `flatc`.
//!
//! | module | schema | file identifier |
//! | --- | --- | --- |
//! | [`program`] | `fbs/program.fbs` | `ET12` |
//! | [`bp04`] | `fbs/bundled_program_bp04.fbs` | `BP04` |
//! | [`bp08`] | `fbs/bundled_program_bp08.fbs` | `BP08` |
//! | [`flat_tensor`] | `fbs/flat_tensor.fbs` | `FT01` |
//! | [`xnnpack`] | `fbs/xnnpack.fbs` | `XN01` (or `XN00`) |
#![no_std]
#![allow(
    clippy::all,
    unused_imports,
    dead_code,
    non_camel_case_types,
    non_snake_case,
    deprecated,
    mismatched_lifetime_syntaxes
)]
// flatc's output (below) has `unsafe` blocks without SAFETY comments; it
// is not edited by hand, so the lint is allowed there alone.
#![deny(clippy::undocumented_unsafe_blocks)]

#[rustfmt::skip]
#[allow(clippy::undocumented_unsafe_blocks)]
#[path = "generated/bundled_program_bp04/bundled_program_bp04_generated.rs"]
mod bp04_generated;
#[rustfmt::skip]
#[allow(clippy::undocumented_unsafe_blocks)]
#[path = "generated/bundled_program_bp08/bundled_program_bp08_generated.rs"]
mod bp08_generated;
#[rustfmt::skip]
#[allow(clippy::undocumented_unsafe_blocks)]
#[path = "generated/flat_tensor/flat_tensor_generated.rs"]
mod flat_tensor_generated;
#[rustfmt::skip]
#[allow(clippy::undocumented_unsafe_blocks)]
#[path = "generated/program/program_generated.rs"]
mod program_generated;
#[rustfmt::skip]
#[allow(clippy::undocumented_unsafe_blocks)]
#[path = "generated/xnnpack/xnnpack_generated.rs"]
mod xnnpack_generated;

pub use flatbuffers;

/// The `.pte` program (`executorch_flatbuffer` namespace, root `Program`).
pub mod program {
    pub use crate::program_generated::executorch_flatbuffer::*;
}

/// Bundled programs in the seed's BP04 layout (`.bp`).
pub mod bp04 {
    pub use crate::bp04_generated::executorch_flatbuffer::*;
}

/// Bundled programs in today's BP08 layout (`.bpte`).
pub mod bp08 {
    pub use crate::bp08_generated::bundled_program_flatbuffer::*;
    /// The scalar-type enum as this schema's module declares it.
    pub use crate::bp08_generated::executorch_flatbuffer::ScalarType;
}

/// External tensor data (`.ptd`).
pub mod flat_tensor {
    /// The scalar-type enum as this schema's module declares it.
    pub use crate::flat_tensor_generated::executorch_flatbuffer::ScalarType;
    pub use crate::flat_tensor_generated::flat_tensor_flatbuffer::*;
}

/// The subgraph inside an XNNPACK delegate's processed blob (after its
/// `XH00` header).
pub mod xnnpack {
    pub use crate::xnnpack_generated::xnnpack_flatbuffer::*;
}
