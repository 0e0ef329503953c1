//! `include_pte!`: compile an ExecuTorch program into Rust items at build
//! time.
//!
//! ```ignore
//! mod mlp {
//!     ptec_macros::include_pte!("models/mlp.pte");
//! }
//! let mut model = mlp::Mlp::new();
//! let probs = model.forward(&input)?;
//! ```
//!
//! The path is relative to the crate's `CARGO_MANIFEST_DIR`. Optional
//! arguments: `data = ["w.ptd"]` (external tensor data), and every option
//! of `ptec::Options`, spelled as `ptec::Options::set` reads them (the
//! `ptec` command line's flags go through the same parser): `name = Ident`
//! (the struct's name), `tests` with `rtol = f` / `atol = f` (for a bundle:
//! generate its test cases), `weights = embedded|external`,
//! `lower_xnnpack = false` (leave XNNPACK delegate calls to a user
//! backend), `channels_last = false` (run convolutions NCHW), `trace =
//! true` (also generate `execute_traced`, see `ptec_runtime::trace`),
//! `winograd = false` (every convolution by the direct sum). Every error
//! is a compile error. The constants the code reads are written into the
//! expansion; the program (and `.ptd` files) are named in unused
//! `include_bytes!`s, which keep them out of the binary but make Cargo
//! rebuild when they change. The generated code needs the `ptec-runtime`
//! crate as a dependency.
use proc_macro::TokenStream;

#[proc_macro]
pub fn include_pte(input: TokenStream) -> TokenStream {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    ptec::expand_macro(input.into(), &dir).into()
}
