//! Complex tensors: `view_as_real_copy`, `_conj_physical`, and what builds
//! them from real ones (`view_as_complex_copy`, `complex`). Only these
//! operators take complex tensors (`OpCtx::tensor_by_value` refuses them
//! to the rest).
use super::checks::no_dynamic;
use super::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("aten::view_as_real_copy.out", view_as_real_copy),
    ("aten::_conj_physical.out", conj_physical),
    ("aten::view_as_complex_copy.out", view_as_complex_copy),
    ("aten::complex.out", complex),
];

/// Whether operator `name` takes complex tensors.
pub fn takes_complex(name: &str) -> bool {
    OPS.iter().any(|(n, _)| *n == name)
}

/// Static, contiguous tensors (what these emitters support).
fn require_plain(ctx: &OpCtx<'_>, ts: &[&TArg]) -> Result<(), String> {
    if ts.iter().any(|t| t.dynamic) {
        return Err(no_dynamic(ctx));
    }
    require_contiguous(ts)
}

/// The part type of complex `c`, or why it is not complex.
fn part_of(c: &TArg) -> Result<ScalarType, String> {
    c.dtype
        .complex_part()
        .ok_or_else(|| format!("value {} has dtype {}; a complex dtype is expected", c.value, c.dtype))
}

/// `real`'s sizes must be `complex`'s with a last dim of 2, and its dtype
/// the part type of `complex`'s.
fn require_split(complex: &TArg, real: &TArg) -> Result<(), String> {
    let part = part_of(complex)?;
    if real.dtype != part {
        return Err(format!(
            "value {} is {}, value {} {}; the parts of {} are {}",
            complex.value, complex.dtype, real.value, real.dtype, complex.dtype, part
        ));
    }
    let mut want = complex.sizes.clone();
    want.push(2);
    if real.sizes != want {
        return Err(format!(
            "value {} has sizes {:?}, value {} {:?}; the real view adds a last dim of 2",
            complex.value, complex.sizes, real.value, real.sizes
        ));
    }
    Ok(())
}

/// `view_as_real_copy.out(self, *, out)`: a complex tensor's parts, a last
/// dim of 2 added.
fn view_as_real_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    parts_copy(ctx, true)
}

/// `view_as_complex_copy.out(self, *, out)`: pairs along a last dim of 2 as
/// complex elements.
fn view_as_complex_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    parts_copy(ctx, false)
}

/// Either view as a copy: from complex elements to their parts (`to_parts`)
/// or back.
fn parts_copy(ctx: &mut OpCtx<'_>, to_parts: bool) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    require_plain(ctx, &[&x, &out])?;
    let kernel = if to_parts {
        require_split(&x, &out)?;
        quote!(to_parts)
    } else {
        require_split(&out, &x)?;
        quote!(from_parts)
    };
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    Ok(quote! { #s1 #s2 ::ptec_runtime::kernels::complex::#kernel(#xi, #o); })
}

/// `_conj_physical.out(self, *, out)`: the imaginary parts negated. (On a
/// real tensor PyTorch's conjugate is the tensor itself, and the exporter
/// removes the call; ExecuTorch's kernel takes complex dtypes only.)
fn conj_physical(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    require_plain(ctx, &[&x, &out])?;
    part_of(&x)?;
    if out.dtype != x.dtype || out.sizes != x.sizes {
        return Err(format!(
            "output value {} is {} {:?}, expected the input's {} {:?}",
            out.value, out.dtype, out.sizes, x.dtype, x.sizes
        ));
    }
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    Ok(quote! { #s1 #s2 ::ptec_runtime::kernels::complex::conj(#xi, #o); })
}

/// `complex.out(real, imag, *, out)`: real and imaginary parts from two
/// tensors of one shape and float dtype (broadcasting them is not
/// supported).
fn complex(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (re, im, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    require_plain(ctx, &[&re, &im, &out])?;
    let part = part_of(&out)?;
    for t in [&re, &im] {
        if t.dtype != part || t.sizes != out.sizes {
            return Err(format!(
                "value {} is {} {:?}; the parts of output value {} ({} {:?}) must be {} of its sizes",
                t.value, t.dtype, t.sizes, out.value, out.dtype, out.sizes, part
            ));
        }
    }
    let (r, s1) = ctx.read(&re)?;
    let (i, s2) = ctx.read(&im)?;
    let (o, s3) = ctx.write(&out)?;
    Ok(quote! { #s1 #s2 #s3 ::ptec_runtime::kernels::complex::from_real_imag(#r, #i, #o); })
}
