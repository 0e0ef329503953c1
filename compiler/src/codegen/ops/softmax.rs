//! `_softmax` and `_log_softmax` along one dim.
use super::*;

pub const OPS: &[(&str, Emitter)] = &[("aten::_softmax.out", softmax), ("aten::_log_softmax.out", log_softmax)];

fn emit(ctx: &mut OpCtx<'_>, kernel: &str) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, dim, _half_to_float, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.bool(2)?, ctx.tensor(3)?);
    require_contiguous(&[&x, &out])?;
    require_dtype(&x, FLOATS)?;
    require_dtype(&out, FLOATS)?;
    let acc = |d: ScalarType| if d == ScalarType::Double { 1 } else { 0 };
    if acc(x.dtype) != acc(out.dtype) {
        return Err(format!("softmax from {} to {} is not supported", x.dtype, out.dtype));
    }
    norm_dim(dim, x.rank())?;
    if !x.dynamic {
        require_sizes(&out, &x.sizes)?;
    }
    let sizes = ctx.sizes(&x);
    let set = ctx.set_sizes(&out, sizes.clone());
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let f = format_ident!("{}", kernel);
    let d = i64_lit(dim);
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::softmax::#f(#xi, #sizes, #d, #o)));
    Ok(quote! { #set #s1 #s2 #call })
}

fn softmax(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    emit(ctx, "softmax")
}
fn log_softmax(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    emit(ctx, "log_softmax")
}
