//! Unary element-wise operators: math functions, activations, rounding,
//! `clamp`, `logical_not`, `bitwise_not`, `isnan`.
use super::elementwise::{compute_type, emit_map, emit_map_lanes, emit_map_wide, result_type, scalar_in};
use super::*;
use ScalarType::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("aten::abs.out", abs),
    ("aten::neg.out", neg),
    ("aten::sign.out", sign),
    ("aten::ceil.out", ceil),
    ("aten::floor.out", floor),
    ("aten::round.out", round),
    ("aten::round.decimals_out", round_decimals),
    ("aten::trunc.out", trunc),
    ("aten::frac.out", frac),
    ("aten::sqrt.out", sqrt),
    ("aten::rsqrt.out", rsqrt),
    ("aten::reciprocal.out", reciprocal),
    ("aten::exp.out", exp),
    ("aten::exp2.out", exp2),
    ("aten::expm1.out", expm1),
    ("aten::log.out", log),
    ("aten::log1p.out", log1p),
    ("aten::log2.out", log2),
    ("aten::log10.out", log10),
    ("aten::sin.out", sin),
    ("aten::cos.out", cos),
    ("aten::tan.out", tan),
    ("aten::asin.out", asin),
    ("aten::acos.out", acos),
    ("aten::atan.out", atan),
    ("aten::sinh.out", sinh),
    ("aten::cosh.out", cosh),
    ("aten::tanh.out", tanh),
    ("aten::asinh.out", asinh),
    ("aten::acosh.out", acosh),
    ("aten::atanh.out", atanh),
    ("aten::erf.out", erf),
    ("aten::erfinv.out", erfinv),
    ("aten::sigmoid.out", sigmoid),
    ("aten::glu.out", glu),
    ("aten::relu.out", relu),
    ("aten::gelu.out", gelu),
    ("aten::elu.out", elu),
    ("aten::leaky_relu.out", leaky_relu),
    ("aten::hardtanh.out", hardtanh),
    ("aten::hardswish.out", hardswish),
    ("aten::hardsigmoid.out", hardsigmoid),
    ("aten::silu.out", silu),
    ("aten::softplus.out", softplus),
    ("aten::logit.out", logit),
    ("aten::clamp.out", clamp),
    ("aten::clamp.Tensor_out", clamp_tensor),
    ("aten::logical_not.out", logical_not),
    ("aten::bitwise_not.out", bitwise_not),
    ("aten::isnan.out", isnan),
    ("aten::isinf.out", isinf),
];

/// ptec's own element-wise operators, made by the passes.
pub const FUSED: &[(&str, Emitter)] = &[(crate::names::SIGMOID_MUL, sigmoid_mul)];

/// `x · sigmoid(x)` of `f32` tensors, in the `sigmoid`'s and the `mul`'s
/// steps (each rounded to `f32`), as the two instructions it replaces.
fn sigmoid_mul(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    if x.dtype != Float || out.dtype != Float {
        return Err("`sigmoid_mul` takes f32 tensors".into());
    }
    let s = quote!(::ptec_runtime::kernels::scalar);
    emit_map_lanes(ctx, &x, &out, quote!(a * #s::sigmoid(a)), quote!(#s::SigmoidMul))
}

/// `op(self, out)` computed in floating point (integers promote to f32).
fn float_unary(ctx: &mut OpCtx<'_>, f: &str) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let mut c = compute_type(x.dtype);
    if !c.is_float() {
        c = Float;
    }
    let fi = format_ident!("{}", f);
    let body = quote!(::ptec_runtime::kernels::scalar::#fi(a));
    if let Some(lanes) = lanes_form(f).filter(|_| c == Float) {
        return emit_map_lanes(ctx, &x, &out, body, lanes);
    }
    if WIDE.contains(&f) {
        return emit_map_wide(ctx, &x, &out, c, body);
    }
    emit_map(ctx, &[&x], &out, &[c], c, body, false)
}

/// The `_lanes` form of function `f` of the kernels' `scalar` module (see
/// `emit_map_lanes`), where it has one.
fn lanes_form(f: &str) -> Option<TokenStream> {
    let s = quote!(::ptec_runtime::kernels::scalar);
    match f {
        "sigmoid" => Some(quote!(#s::Sigmoid)),
        "silu" => Some(quote!(#s::Silu)),
        "gelu" => Some(quote!(#s::Gelu)),
        _ => None,
    }
}

/// Functions whose cost per element (a polynomial, or several) pays for a
/// loop compiled for each vector ISA (`emit_map_wide`).
const WIDE: &[&str] = &[
    "exp",
    "exp2",
    "expm1",
    "log",
    "log1p",
    "log2",
    "log10",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "erfinv",
    "sigmoid",
    "silu",
    "gelu",
    "gelu_tanh",
];

macro_rules! float_ops {
    ($($name:ident),*) => {$(
        fn $name(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
            float_unary(ctx, stringify!($name))
        }
    )*};
}
float_ops!(
    sqrt,
    rsqrt,
    reciprocal,
    exp,
    exp2,
    expm1,
    log,
    log1p,
    log2,
    log10,
    sin,
    cos,
    tan,
    asin,
    acos,
    atan,
    sinh,
    cosh,
    tanh,
    asinh,
    acosh,
    atanh,
    erf,
    erfinv,
    sigmoid,
    hardswish,
    hardsigmoid,
    silu
);

/// `op(self, out)` keeping the dtype: float function for floats, `int` body
/// for integers (None: integers are returned unchanged).
fn same_type_unary(ctx: &mut OpCtx<'_>, float_fn: &str, int_body: Option<TokenStream>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let c = compute_type(x.dtype);
    let body = if c.is_float() {
        let fi = format_ident!("{}", float_fn);
        quote!(::ptec_runtime::kernels::scalar::#fi(a))
    } else if c == Bool {
        return Err(format!("`{}` is not defined for bool tensors", ctx.name));
    } else {
        int_body.unwrap_or(quote!(a))
    };
    emit_map(ctx, &[&x], &out, &[c], c, body, false)
}

fn abs(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    same_type_unary(ctx, "abs", Some(quote!(::ptec_runtime::kernels::scalar::abs_int(a))))
}
fn neg(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    same_type_unary(ctx, "neg", Some(quote!(::ptec_runtime::kernels::scalar::neg_int(a))))
}
fn sign(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    same_type_unary(ctx, "sign", Some(quote!(::ptec_runtime::kernels::scalar::sign_int(a))))
}
fn ceil(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    same_type_unary(ctx, "ceil", None)
}
fn floor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    same_type_unary(ctx, "floor", None)
}
fn round(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    same_type_unary(ctx, "round", None)
}
fn trunc(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    same_type_unary(ctx, "trunc", None)
}
fn frac(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    same_type_unary(ctx, "frac", Some(quote!(0)))
}

fn round_decimals(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, d, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor(2)?);
    let c = compute_type(x.dtype);
    if !c.is_float() {
        return emit_map(ctx, &[&x], &out, &[c], c, quote!(a), false);
    }
    let d = i64_lit(d);
    emit_map(
        ctx,
        &[&x],
        &out,
        &[c],
        c,
        quote!(::ptec_runtime::kernels::scalar::round_decimals(a, #d)),
        false,
    )
}

fn relu(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let c = compute_type(x.dtype);
    if c == Bool {
        return Err("relu is not defined for bool tensors".into());
    }
    emit_map(
        ctx,
        &[&x],
        &out,
        &[c],
        c,
        quote!(::ptec_runtime::kernels::scalar::relu(a)),
        false,
    )
}

/// A float activation with constant scalar parameters (given as f64).
fn float_params(ctx: &mut OpCtx<'_>, x: &TArg, out: &TArg, f: &str, params: &[f64]) -> Result<TokenStream, String> {
    let mut c = compute_type(x.dtype);
    if !c.is_float() {
        c = Float;
    }
    let fi = format_ident!("{}", f);
    let ps = params.iter().map(|&p| scalar_in(Scalar::Double(p), c));
    let body = quote!(::ptec_runtime::kernels::scalar::#fi(a, #(#ps),*));
    if let Some(lanes) = lanes_form(f).filter(|_| c == Float && params.is_empty()) {
        return emit_map_lanes(ctx, x, out, body, lanes);
    }
    if WIDE.contains(&f) {
        return emit_map_wide(ctx, x, out, c, body);
    }
    emit_map(ctx, &[x], out, &[c], c, body, false)
}

fn gelu(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, approx, out) = (ctx.tensor(0)?, ctx.string(1)?, ctx.tensor(2)?);
    match approx.as_str() {
        "none" => float_params(ctx, &x, &out, "gelu", &[]),
        "tanh" => float_params(ctx, &x, &out, "gelu_tanh", &[]),
        a => Err(format!("gelu approximation `{a}` is not one of none, tanh")),
    }
}

fn elu(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, alpha, scale, input_scale, out) = (
        ctx.tensor(0)?,
        ctx.double(1)?,
        ctx.double(2)?,
        ctx.double(3)?,
        ctx.tensor(4)?,
    );
    float_params(ctx, &x, &out, "elu", &[alpha, scale, input_scale])
}

fn leaky_relu(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, slope, out) = (ctx.tensor(0)?, ctx.double(1)?, ctx.tensor(2)?);
    float_params(ctx, &x, &out, "leaky_relu", &[slope])
}

fn softplus(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, beta, threshold, out) = (ctx.tensor(0)?, ctx.double(1)?, ctx.double(2)?, ctx.tensor(3)?);
    float_params(ctx, &x, &out, "softplus", &[beta, threshold])
}

fn logit(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, eps, out) = (ctx.tensor(0)?, ctx.opt_double(1)?, ctx.tensor(2)?);
    match eps {
        Some(e) => float_params(ctx, &x, &out, "logit_eps", &[e]),
        None => float_params(ctx, &x, &out, "logit", &[]),
    }
}

fn hardtanh(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, lo, hi, out) = (ctx.tensor(0)?, ctx.scalar(1)?, ctx.scalar(2)?, ctx.tensor(3)?);
    let c = compute_type(x.dtype);
    let (l, h) = (scalar_in(lo, c), scalar_in(hi, c));
    emit_map(
        ctx,
        &[&x],
        &out,
        &[c],
        c,
        quote!(::ptec_runtime::kernels::scalar::hardtanh(a, #l, #h)),
        false,
    )
}

fn clamp(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, lo, hi, out) = (ctx.tensor(0)?, ctx.opt_scalar(1)?, ctx.opt_scalar(2)?, ctx.tensor(3)?);
    if lo.is_none() && hi.is_none() {
        return Err("clamp needs at least one of min and max".into());
    }
    let scalars: Vec<Scalar> = lo.iter().chain(hi.iter()).copied().collect();
    let c = compute_type(result_type(&[&x], &scalars));
    let opt = |s: Option<Scalar>| match s {
        Some(s) => {
            let v = scalar_in(s, c);
            quote!(Some(#v))
        }
        None => quote!(None),
    };
    let (l, h) = (opt(lo), opt(hi));
    emit_map(
        ctx,
        &[&x],
        &out,
        &[c],
        c,
        quote!(::ptec_runtime::kernels::scalar::clamp(a, #l, #h)),
        false,
    )
}

fn clamp_tensor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, lo, hi, out) = (ctx.tensor(0)?, ctx.opt_tensor(1)?, ctx.opt_tensor(2)?, ctx.tensor(3)?);
    let k = quote!(::ptec_runtime::kernels::scalar::clamp);
    match (lo, hi) {
        (Some(l), Some(h)) => {
            let c = compute_type(result_type(&[&x, &l, &h], &[]));
            emit_map(
                ctx,
                &[&x, &l, &h],
                &out,
                &[c, c, c],
                c,
                quote!(#k(a, Some(b), Some(c))),
                false,
            )
        }
        (Some(l), None) => {
            let c = compute_type(result_type(&[&x, &l], &[]));
            emit_map(ctx, &[&x, &l], &out, &[c, c], c, quote!(#k(a, Some(b), None)), false)
        }
        (None, Some(h)) => {
            let c = compute_type(result_type(&[&x, &h], &[]));
            emit_map(ctx, &[&x, &h], &out, &[c, c], c, quote!(#k(a, None, Some(b))), false)
        }
        (None, None) => Err("clamp needs at least one of min and max".into()),
    }
}

fn logical_not(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    emit_map(ctx, &[&x], &out, &[Bool], Bool, quote!(!a), false)
}

fn bitwise_not(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    if x.dtype.is_float() {
        return Err("bitwise_not is not defined for floating-point tensors".into());
    }
    emit_map(ctx, &[&x], &out, &[x.dtype], x.dtype, quote!(!a), false)
}

fn float_test(ctx: &mut OpCtx<'_>, f: &str) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let c = compute_type(x.dtype);
    if !c.is_float() {
        return emit_map(ctx, &[&x], &out, &[c], Bool, quote!(false), false);
    }
    let fi = format_ident!("{}", f);
    emit_map(
        ctx,
        &[&x],
        &out,
        &[c],
        Bool,
        quote!(::ptec_runtime::kernels::scalar::#fi(a)),
        false,
    )
}

fn isnan(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    float_test(ctx, "isnan")
}
fn isinf(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    float_test(ctx, "isinf")
}

/// `glu.out(self, dim, out)`: the first half of `self` along `dim` times
/// the sigmoid of the second (float32 and float64).
fn glu(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, dim, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor(2)?);
    require_dtype(&x, &[Float, Double])?;
    require_dtype(&out, &[x.dtype])?;
    require_contiguous(&[&x, &out])?;
    if x.dynamic || out.dynamic {
        return Err(super::checks::no_dynamic(ctx));
    }
    let d = norm_dim(dim, x.rank())?;
    if x.rank() == 0 || !x.sizes[d].is_multiple_of(2) {
        return Err(format!("glu halves dim {d} of sizes {:?}, which is not even", x.sizes));
    }
    let mut want = x.sizes.clone();
    want[d] /= 2;
    require_sizes(&out, &want)?;
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let (sizes, dl) = (usize_slice(&x.sizes), lit(d));
    Ok(quote! { #s1 #s2 ::ptec_runtime::kernels::elementwise::glu(#xi, #sizes, #dl, #o); })
}
