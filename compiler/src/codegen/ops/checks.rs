//! Checks and small pieces of code the emitters of every family share:
//! argument requirements, and the run-time errors and live sizes of a
//! shape that is only known when the code runs.
use super::elementwise::{compute_type, convert, scalar_in};
use super::*;

/// A `Scalar` as an expression of `d`'s storage type (PyTorch's cast of a
/// fill value to the tensor's dtype).
pub(super) fn scalar_value(s: Scalar, d: ScalarType) -> TokenStream {
    convert(scalar_in(s, d), compute_type(d), d)
}

/// Requires contiguous tensors of one dtype (data moves, no conversion).
pub(super) fn require_same(ts: &[&TArg]) -> Result<(), String> {
    require_contiguous(ts)?;
    if let Some(first) = ts.first() {
        if let Some(t) = ts.iter().find(|t| t.dtype != first.dtype) {
            return Err(format!(
                "value {} has dtype {} and value {} {}; this operator moves data without converting it",
                first.value, first.dtype, t.value, t.dtype
            ));
        }
    }
    Ok(())
}

/// The run-time error of a shape that does not fit.
pub(super) fn shape_mismatch(ctx: &OpCtx<'_>) -> TokenStream {
    let ins = lit(ctx.instruction);
    quote!(::ptec_runtime::Error::Kernel { instruction: #ins, error: ::ptec_runtime::kernels::KernelError::ShapeMismatch })
}

/// The message for an operator that needs static shapes.
pub(super) fn no_dynamic(ctx: &OpCtx<'_>) -> String {
    format!("dynamic shapes are not supported for {}", ctx.name)
}

/// Statements giving `out` the live sizes `sizes` (an `&[usize]`
/// expression computed at run time): set for a dynamic output, checked
/// against the sizes of a static one.
pub(super) fn set_out_sizes(ctx: &OpCtx<'_>, out: &TArg, sizes: TokenStream) -> TokenStream {
    if out.dynamic {
        return ctx.set_sizes(out, sizes);
    }
    let want = usize_slice(&out.sizes);
    let err = shape_mismatch(ctx);
    quote! {
        if #sizes != #want {
            return Err(#err);
        }
    }
}
