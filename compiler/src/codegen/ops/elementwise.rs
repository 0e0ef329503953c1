//! Element-wise arithmetic (`add`, `sub`, `mul`, `div`, `remainder`, `pow`,
//! `maximum`, bitwise ops, ...) and the machinery every element-wise family
//! shares: PyTorch's type promotion, conversions between element types and
//! the emission of a broadcasting map over one to three inputs.
use super::*;
use ScalarType::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("aten::add.out", add),
    ("aten::add.Scalar_out", add_scalar),
    ("aten::sub.out", sub),
    ("aten::sub.Scalar_out", sub_scalar),
    ("aten::rsub.Scalar_out", rsub_scalar),
    ("aten::mul.out", mul),
    ("aten::mul.Scalar_out", mul_scalar),
    ("aten::div.out", div),
    ("aten::div.Scalar_out", div_scalar),
    ("aten::div.out_mode", div_mode),
    ("aten::div.Scalar_mode_out", div_scalar_mode),
    ("aten::floor_divide.out", floor_divide),
    ("aten::remainder.Tensor_out", remainder),
    ("aten::remainder.Scalar_out", remainder_scalar),
    ("aten::fmod.Tensor_out", fmod),
    ("aten::fmod.Scalar_out", fmod_scalar),
    ("aten::pow.Tensor_Tensor_out", pow_tt),
    ("aten::pow.Tensor_Scalar_out", pow_ts),
    ("aten::pow.Scalar_out", pow_st),
    ("aten::maximum.out", maximum),
    ("aten::minimum.out", minimum),
    ("aten::fmax.out", fmax),
    ("aten::fmin.out", fmin),
    ("aten::atan2.out", atan2),
    ("aten::bitwise_and.Tensor_out", bitand),
    ("aten::bitwise_and.Scalar_out", bitand_scalar),
    ("aten::bitwise_or.Tensor_out", bitor),
    ("aten::bitwise_or.Scalar_out", bitor_scalar),
    ("aten::bitwise_xor.Tensor_out", bitxor),
    ("aten::bitwise_xor.Scalar_out", bitxor_scalar),
    ("aten::bitwise_left_shift.Tensor_out", lshift),
    ("aten::bitwise_left_shift.Tensor_Scalar_out", lshift_scalar),
    ("aten::bitwise_right_shift.Tensor_out", rshift),
    ("aten::bitwise_right_shift.Tensor_Scalar_out", rshift_scalar),
    // Python's `<<` and `>>` on tensors (ExecuTorch's runtime has no
    // kernels for these).
    ("aten::__lshift__.Tensor_out", lshift),
    ("aten::__lshift__.Scalar_out", lshift_scalar),
    ("aten::__rshift__.Tensor_out", rshift),
    ("aten::__rshift__.Scalar_out", rshift_scalar),
    ("aten::logical_and.out", logical_and),
    ("aten::logical_or.out", logical_or),
    ("aten::logical_xor.out", logical_xor),
    ("aten::where.self_out", where_self),
    ("aten::addcmul.out", addcmul),
    ("aten::addcdiv.out", addcdiv),
    ("aten::lerp.Scalar_out", lerp_scalar),
    ("aten::hypot.out", hypot),
    ("aten::copysign.out", copysign),
];

// ---------------------------------------------------------------------------
// Type promotion and conversion.

/// 0 bool, 1 integer, 2 floating.
fn category(d: ScalarType) -> u8 {
    if d == Bool {
        0
    } else if d.is_float() {
        2
    } else {
        1
    }
}

/// PyTorch's promotion of two dtypes.
pub fn promote(a: ScalarType, b: ScalarType) -> ScalarType {
    if a == b {
        return a;
    }
    match (category(a), category(b)) {
        (0, _) => b,
        (_, 0) => a,
        (1, 2) => b,
        (2, 1) => a,
        (2, 2) => match (a, b) {
            (Double, _) | (_, Double) => Double,
            (Float, _) | (_, Float) => Float,
            _ => Float, // f16 with bf16
        },
        _ => {
            let signed = |d| matches!(d, Char | Short | Int | Long);
            let width = |d: ScalarType| d.element_size();
            match (signed(a), signed(b)) {
                (true, true) | (false, false) => {
                    if width(a) >= width(b) {
                        a
                    } else {
                        b
                    }
                }
                _ => {
                    let (s, u) = if signed(a) { (a, b) } else { (b, a) };
                    if width(s) > width(u) {
                        s
                    } else {
                        match width(u) {
                            1 => Short,
                            2 => Int,
                            _ => Long,
                        }
                    }
                }
            }
        }
    }
}

/// PyTorch's `result_type` of tensors and scalars: dimensioned tensors
/// first; zero-dim tensors and then scalars only when they raise the
/// category.
pub fn result_type(tensors: &[&TArg], scalars: &[Scalar]) -> ScalarType {
    let mut dims: Option<ScalarType> = None;
    let mut zero: Option<ScalarType> = None;
    for t in tensors {
        let slot = if t.rank() > 0 { &mut dims } else { &mut zero };
        *slot = Some(match *slot {
            Some(d) => promote(d, t.dtype),
            None => t.dtype,
        });
    }
    let mut r = match (dims, zero) {
        (Some(d), Some(z)) if category(z) > category(d) => z,
        (Some(d), _) => d,
        (None, Some(z)) => z,
        (None, None) => Bool,
    };
    let any_tensor = !tensors.is_empty();
    for s in scalars {
        let (cat, default) = match s {
            Scalar::Bool(_) => (0, Bool),
            Scalar::Int(_) => (1, Long),
            Scalar::Double(_) => (2, Float),
        };
        if !any_tensor {
            r = promote(r, default);
        } else if cat > category(r) {
            r = default;
        }
    }
    r
}

/// The type arithmetic happens in for a dtype: `f32` for the half types.
pub fn compute_type(d: ScalarType) -> ScalarType {
    match d {
        Half | BFloat16 => Float,
        d => d,
    }
}

/// Converts `x` (an expression of dtype `from`'s storage or compute type)
/// to `to`. Half types are converted through `f32`.
pub fn convert(x: TokenStream, from: ScalarType, to: ScalarType) -> TokenStream {
    if from == to {
        return x;
    }
    let to_ty = rust_type(to).expect("supported dtype");
    match (from, to) {
        (Half | BFloat16, Float) => quote!((#x).to_f32()),
        (Half | BFloat16, Double) => quote!((#x).to_f64()),
        (Half | BFloat16, Bool) => quote!((#x).to_f32() != 0.0),
        (Half | BFloat16, Half | BFloat16) => quote!(#to_ty::from_f32((#x).to_f32())),
        (Half | BFloat16, _) => quote!(((#x).to_f32() as #to_ty)),
        (Double, Half | BFloat16) => quote!(#to_ty::from_f64(#x)),
        (Bool, Half | BFloat16) => quote!(#to_ty::from_f32((#x) as u8 as f32)),
        (_, Half | BFloat16) => quote!(#to_ty::from_f32((#x) as f32)),
        (Bool, _) => quote!(((#x) as u8 as #to_ty)),
        (Float | Double, Bool) => quote!(((#x) != 0.0)),
        (_, Bool) => quote!(((#x) != 0)),
        _ => quote!(((#x) as #to_ty)),
    }
}

/// A scalar constant as an expression of dtype `d`'s compute type.
pub fn scalar_in(s: Scalar, d: ScalarType) -> TokenStream {
    let c = compute_type(d);
    match c {
        Float => {
            // A double beyond f32's range rounds to an infinity, as in PyTorch.
            f32_lit(s.as_f64() as f32)
        }
        Double => f64_lit(s.as_f64()),
        Bool => {
            let b = s.as_f64() != 0.0;
            quote!(#b)
        }
        _ => {
            let ty = rust_type(c).expect("int");
            let v = match s {
                Scalar::Int(i) => i,
                Scalar::Bool(b) => b as i64,
                Scalar::Double(d) => d as i64,
            };
            let l = i64_lit(v);
            quote!((#l as #ty))
        }
    }
}

// ---------------------------------------------------------------------------
// The broadcasting map.

/// Emits `out[i] = body(inputs[i]...)` with broadcasting. Each input is
/// converted to `compute` before `body` sees it (as identifiers `a`, `b`,
/// `c`); `body`'s result has dtype `result` and is converted to the output's
/// dtype. With `fallible`, `body` is an `Option` (None → division by zero).
pub fn emit_map(
    ctx: &mut OpCtx<'_>,
    inputs: &[&TArg],
    out: &TArg,
    compute: &[ScalarType],
    result: ScalarType,
    body: TokenStream,
    fallible: bool,
) -> Result<TokenStream, String> {
    emit_map_shaped(ctx, None, inputs, out, compute, result, body, fallible)
}

/// [`emit_map`], the inputs broadcast together with the sizes of `like`
/// too (whose data is not read).
#[allow(clippy::too_many_arguments)]
pub fn emit_map_shaped(
    ctx: &mut OpCtx<'_>,
    like: Option<&TArg>,
    inputs: &[&TArg],
    out: &TArg,
    compute: &[ScalarType],
    result: ScalarType,
    body: TokenStream,
    fallible: bool,
) -> Result<TokenStream, String> {
    emit_map_with(ctx, like, inputs, out, compute, result, body, fallible, Wide::No)
}

/// [`emit_map`] of one input through a function costly enough per element
/// (`exp`, `sigmoid`, ...) that its loop is worth a copy per vector ISA,
/// chosen at run time (`elementwise::map_strided_wide`): the generated
/// crate is otherwise compiled for the target's baseline.
pub fn emit_map_wide(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    out: &TArg,
    compute: ScalarType,
    body: TokenStream,
) -> Result<TokenStream, String> {
    emit_map_with(ctx, None, &[x], out, &[compute], compute, body, false, Wide::Yes)
}

/// [`emit_map_wide`] of an `f32` function `body` that has a form over
/// several elements at once, `lanes` (a path to the kernels' type of it,
/// `scalar::Lanes`): contiguous runs go through that form
/// (`elementwise::map_strided_lanes`). Other dtypes take the plain wide
/// map of `body`.
pub fn emit_map_lanes(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    out: &TArg,
    body: TokenStream,
    lanes: TokenStream,
) -> Result<TokenStream, String> {
    let wide = match x.dtype == Float && out.dtype == Float {
        true => Wide::Lanes(lanes),
        false => Wide::Yes,
    };
    emit_map_with(ctx, None, &[x], out, &[Float], Float, body, false, wide)
}

/// How a map's contiguous runs are compiled: for the baseline, for the
/// best vector ISA, or for it through a `_lanes` form.
enum Wide {
    No,
    Yes,
    Lanes(TokenStream),
}

#[allow(clippy::too_many_arguments)]
fn emit_map_with(
    ctx: &mut OpCtx<'_>,
    like: Option<&TArg>,
    inputs: &[&TArg],
    out: &TArg,
    compute: &[ScalarType],
    result: ScalarType,
    body: TokenStream,
    fallible: bool,
    wide: Wide,
) -> Result<TokenStream, String> {
    let mut ts: Vec<&TArg> = inputs.to_vec();
    ts.push(out);
    require_contiguous(&ts)?;
    let mut stmts = Vec::new();
    let any_dynamic = inputs.iter().chain(like.as_slice()).any(|t| t.dynamic) || out.dynamic;
    // Output sizes: checked at compile time, or computed at run time.
    let mut bshape: Vec<usize> = like.map(|l| l.sizes.clone()).unwrap_or_default();
    for t in inputs {
        let (s, r) = ptec_runtime::kernels::elementwise::broadcast_sizes(&bshape, &t.sizes)
            .ok_or_else(|| format!("sizes {:?} and {:?} do not broadcast", bshape, t.sizes))?;
        bshape = s[..r].to_vec();
    }
    let out_sizes_expr;
    let mut strides_exprs = Vec::new();
    if !any_dynamic {
        require_sizes(out, &bshape)?;
        for t in inputs {
            let mut st = vec![0usize; bshape.len()];
            ptec_runtime::kernels::elementwise::broadcast_strides(&bshape, &t.sizes, &mut st);
            strides_exprs.push(usize_slice(&st));
        }
        out_sizes_expr = usize_slice(&bshape);
    } else {
        require_rank(out, bshape.len())?;
        let ins = lit(ctx.instruction);
        let mut shape = match like {
            Some(l) => ctx.sizes(l),
            None => quote!(&[]),
        };
        for (k, t) in inputs.iter().enumerate() {
            let s = ctx.sizes(t);
            let name = format_ident!("bs{}", k);
            stmts.push(quote! {
                let #name = ::ptec_runtime::kernels::elementwise::broadcast_sizes(#shape, #s)
                    .ok_or(::ptec_runtime::Error::Kernel { instruction: #ins, error: ::ptec_runtime::kernels::KernelError::ShapeMismatch })?;
            });
            shape = quote!(&#name.0[..#name.1]);
        }
        stmts.push(quote! { let out_sizes: &[usize] = #shape; });
        stmts.push(ctx.set_sizes(out, quote!(out_sizes)));
        for (k, t) in inputs.iter().enumerate() {
            let s = ctx.sizes(t);
            let name = format_ident!("st{}", k);
            stmts.push(quote! {
                let mut #name = [0usize; ::ptec_runtime::kernels::MAX_RANK];
                ::ptec_runtime::kernels::elementwise::broadcast_strides(out_sizes, #s, &mut #name);
            });
            strides_exprs.push(quote!(&#name[..out_sizes.len()]));
        }
        out_sizes_expr = quote!(out_sizes);
    }
    let mut names = Vec::new();
    for t in inputs {
        let (n, s) = ctx.read(t)?;
        stmts.push(s);
        names.push(n);
    }
    let (o, s) = ctx.write(out)?;
    stmts.push(s);
    let params: Vec<Ident> = ["a", "b", "c"]
        .iter()
        .take(inputs.len())
        .map(|n| format_ident!("{}", n))
        .collect();
    let mut prelude = Vec::new();
    for ((p, t), &c) in params.iter().zip(inputs).zip(compute) {
        let cv = convert(quote!(#p), t.dtype, c);
        prelude.push(quote!(let #p = #cv;));
    }
    let out_conv = convert(quote!(r), result, out.dtype);
    let closure_params = params.iter().zip(inputs).map(|(p, t)| {
        let ty = rust_type(t.dtype).expect("dtype");
        quote!(#p: #ty)
    });
    let closure = if fallible {
        quote!(|#(#closure_params),*| { #(#prelude)* let r = #body; r.map(|r| #out_conv) })
    } else {
        quote!(|#(#closure_params),*| { #(#prelude)* let r = #body; #out_conv })
    };
    let k = quote!(::ptec_runtime::kernels::elementwise);
    let n = &names;
    let st = &strides_exprs;
    let call = match (inputs.len(), fallible) {
        (1, false) => match &wide {
            Wide::Yes => quote!(#k::map_strided_wide(#o, #out_sizes_expr, #(#n),*, #(#st),*, #closure);),
            Wide::Lanes(lanes) => quote!(#k::map_strided_lanes::<#lanes>(#o, #out_sizes_expr, #(#n),*, #(#st),*);),
            Wide::No => quote!(#k::map_strided(#o, #out_sizes_expr, #(#n),*, #(#st),*, #closure);),
        },
        (1, true) => ctx.kernel_result(quote!(#k::try_map_strided(#o, #out_sizes_expr, #(#n),*, #(#st),*, #closure))),
        (2, false) => {
            let (n0, n1, s0, s1) = (&n[0], &n[1], &st[0], &st[1]);
            quote!(#k::zip(#o, #out_sizes_expr, #n0, #s0, #n1, #s1, #closure);)
        }
        (2, true) => {
            let (n0, n1, s0, s1) = (&n[0], &n[1], &st[0], &st[1]);
            ctx.kernel_result(quote!(#k::try_zip(#o, #out_sizes_expr, #n0, #s0, #n1, #s1, #closure)))
        }
        (3, false) => {
            let (n0, n1, n2, s0, s1, s2) = (&n[0], &n[1], &n[2], &st[0], &st[1], &st[2]);
            quote!(#k::zip3(#o, #out_sizes_expr, #n0, #s0, #n1, #s1, #n2, #s2, #closure);)
        }
        _ => return Err("element-wise maps take one to three inputs".into()),
    };
    stmts.push(call);
    Ok(quote!(#(#stmts)*))
}

// ---------------------------------------------------------------------------
// Binary arithmetic.

#[derive(Clone, Copy, PartialEq)]
enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

/// The body of `a op b` (with `alpha` for add/sub) in compute type `c`.
fn arith_body(op: Arith, c: ScalarType, alpha: Option<Scalar>) -> Result<TokenStream, String> {
    let alpha_b = match alpha {
        Some(al) if al.as_f64() != 1.0 => {
            if c == Bool {
                return Err("alpha is not supported for bool tensors".into());
            }
            if category(c) == 1 && al.is_float() {
                return Err("a float alpha needs a floating-point result".into());
            }
            let a = scalar_in(al, c);
            if category(c) == 1 {
                quote!(b.wrapping_mul(#a))
            } else {
                quote!((b * #a))
            }
        }
        _ => quote!(b),
    };
    Ok(match (op, category(c)) {
        (Arith::Add, 0) => quote!(a | b),
        (Arith::Add, 1) => quote!(a.wrapping_add(#alpha_b)),
        (Arith::Add, _) => quote!(a + #alpha_b),
        (Arith::Sub, 0) => return Err("subtraction of bool tensors is not supported by PyTorch".into()),
        (Arith::Sub, 1) => quote!(a.wrapping_sub(#alpha_b)),
        (Arith::Sub, _) => quote!(a - #alpha_b),
        (Arith::Mul, 0) => quote!(a & b),
        (Arith::Mul, 1) => quote!(a.wrapping_mul(b)),
        (Arith::Mul, _) => quote!(a * b),
        (Arith::Div, _) => quote!(a / b),
    })
}

/// `op(self, other)` where `other` is a tensor.
fn binary_tt(ctx: &mut OpCtx<'_>, op: Arith, alpha_arg: Option<usize>) -> Result<TokenStream, String> {
    let n = if alpha_arg.is_some() { 5 } else { 4 };
    ctx.arity(n)?;
    let a = ctx.tensor(0)?;
    let b = ctx.tensor(1)?;
    let alpha = match alpha_arg {
        Some(i) => ctx.opt_scalar(i)?,
        None => None,
    };
    let out = ctx.tensor(n - 2)?;
    let mut common = result_type(&[&a, &b], &[]);
    if op == Arith::Div && category(common) < 2 {
        common = Float;
    }
    let c = compute_type(common);
    let body = arith_body(op, c, alpha)?;
    emit_map(ctx, &[&a, &b], &out, &[c, c], c, body, false)
}

/// `op(self, other)` where `other` is a Scalar.
fn binary_ts(ctx: &mut OpCtx<'_>, op: Arith, alpha_arg: Option<usize>, reversed: bool) -> Result<TokenStream, String> {
    let n = if alpha_arg.is_some() { 5 } else { 4 };
    ctx.arity(n)?;
    let a = ctx.tensor(0)?;
    let s = ctx.scalar(1)?;
    let alpha = match alpha_arg {
        Some(i) => ctx.opt_scalar(i)?,
        None => None,
    };
    let out = ctx.tensor(n - 2)?;
    let mut common = result_type(&[&a], &[s]);
    if op == Arith::Div && category(common) < 2 {
        common = Float;
    }
    let c = compute_type(common);
    let sv = scalar_in(s, c);
    let body = arith_body(op, c, alpha)?;
    let body = if reversed {
        quote!({ let (a, b) = (#sv, a); #body })
    } else {
        quote!({ let b = #sv; #body })
    };
    emit_map(ctx, &[&a], &out, &[c], c, body, false)
}

fn add(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary_tt(ctx, Arith::Add, Some(2))
}
fn add_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary_ts(ctx, Arith::Add, Some(2), false)
}
fn sub(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary_tt(ctx, Arith::Sub, Some(2))
}
fn sub_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary_ts(ctx, Arith::Sub, Some(2), false)
}
fn rsub_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary_ts(ctx, Arith::Sub, Some(2), true)
}
fn mul(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary_tt(ctx, Arith::Mul, None)
}
fn mul_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary_ts(ctx, Arith::Mul, None, false)
}
fn div(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary_tt(ctx, Arith::Div, None)
}
fn div_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary_ts(ctx, Arith::Div, None, false)
}

/// A rounding division or remainder-like op over two operands; `scalar`
/// when `other` is a Scalar. `kind`: "trunc", "floor", "floor_divide",
/// "remainder", "fmod", or "true" (plain division).
fn rounding(ctx: &mut OpCtx<'_>, kind: &str, scalar: bool, with_mode: bool) -> Result<TokenStream, String> {
    let n = if with_mode { 5 } else { 4 };
    ctx.arity(n)?;
    let a = ctx.tensor(0)?;
    let mode = if with_mode {
        if ctx.is_null(2)? {
            "true".to_string()
        } else {
            ctx.string(2)?
        }
    } else {
        kind.to_string()
    };
    let out = ctx.tensor(n - 2)?;
    let (common, b_tensor, s) = if scalar {
        let s = ctx.scalar(1)?;
        (result_type(&[&a], &[s]), None, Some(s))
    } else {
        let b = ctx.tensor(1)?;
        (result_type(&[&a, &b], &[]), Some(b), None)
    };
    let mut c = compute_type(common);
    if mode == "true" && category(c) < 2 {
        c = Float;
    }
    let k = quote!(::ptec_runtime::kernels::scalar);
    let int = category(c) < 2;
    if c == Bool && mode != "true" {
        return Err(format!("`{mode}` division of bool tensors is not supported"));
    }
    let (body, fallible) = match (mode.as_str(), int) {
        ("true", _) => (quote!(a / b), false),
        ("trunc", true) => (quote!(#k::div_trunc_int(a, b)), true),
        ("trunc", false) => (quote!(#k::div_trunc(a, b)), false),
        ("floor" | "floor_divide", true) => (quote!(#k::div_floor_int(a, b)), true),
        ("floor", false) => (quote!(#k::div_floor(a, b)), false),
        ("floor_divide", false) => (quote!(#k::floor_divide(a, b)), false),
        ("remainder", true) => (quote!(#k::remainder_int(a, b)), true),
        ("remainder", false) => (quote!(#k::remainder(a, b)), false),
        ("fmod", true) => (quote!(#k::fmod_int(a, b)), true),
        ("fmod", false) => (quote!(#k::fmod(a, b)), false),
        (m, _) => return Err(format!("rounding mode `{m}` is not one of trunc, floor")),
    };
    match (b_tensor, s) {
        (Some(b), _) => emit_map(ctx, &[&a, &b], &out, &[c, c], c, body, fallible),
        (None, Some(s)) => {
            let sv = scalar_in(s, c);
            emit_map(ctx, &[&a], &out, &[c], c, quote!({ let b = #sv; #body }), fallible)
        }
        _ => unreachable!("one of tensor or scalar"),
    }
}

fn div_mode(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    rounding(ctx, "", false, true)
}
fn div_scalar_mode(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    rounding(ctx, "", true, true)
}
fn floor_divide(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    rounding(ctx, "floor_divide", false, false)
}
fn remainder(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    rounding(ctx, "remainder", false, false)
}
fn remainder_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    rounding(ctx, "remainder", true, false)
}
fn fmod(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    rounding(ctx, "fmod", false, false)
}
fn fmod_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    rounding(ctx, "fmod", true, false)
}

fn pow_body(c: ScalarType) -> (TokenStream, bool) {
    let k = quote!(::ptec_runtime::kernels::scalar);
    if category(c) == 2 {
        (quote!(#k::pow(a, b)), false)
    } else {
        (quote!(#k::try_pow_int(a, b)), true)
    }
}

fn pow_tt(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (a, b, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    let c = compute_type(result_type(&[&a, &b], &[]));
    if c == Bool {
        return Err("pow of bool tensors is not supported".into());
    }
    let (body, f) = pow_body(c);
    emit_map(ctx, &[&a, &b], &out, &[c, c], c, body, f)
}

fn pow_ts(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (a, s, out) = (ctx.tensor(0)?, ctx.scalar(1)?, ctx.tensor(2)?);
    let c = compute_type(result_type(&[&a], &[s]));
    if c == Bool {
        return Err("pow of bool tensors is not supported".into());
    }
    let sv = scalar_in(s, c);
    let k = quote!(::ptec_runtime::kernels::scalar);
    if category(c) == 2 {
        // Exact for the common small integral exponents (x*x for 2).
        let e = s.as_f64();
        let body = if e == 2.0 {
            quote!(a * a)
        } else if e == 1.0 {
            quote!(a)
        } else if e == 0.5 {
            quote!(#k::sqrt(a))
        } else {
            quote!(#k::pow_scalar_exponent(a, #sv))
        };
        emit_map(ctx, &[&a], &out, &[c], c, body, false)
    } else {
        emit_map(ctx, &[&a], &out, &[c], c, quote!(#k::try_pow_int(a, #sv)), true)
    }
}

fn pow_st(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (s, b, out) = (ctx.scalar(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    let c = compute_type(result_type(&[&b], &[s]));
    let sv = scalar_in(s, c);
    let (body, f) = pow_body(c);
    emit_map(ctx, &[&b], &out, &[c], c, quote!({ let (a, b) = (#sv, a); #body }), f)
}

fn minmax(ctx: &mut OpCtx<'_>, f: &str) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (a, b, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    let c = compute_type(result_type(&[&a, &b], &[]));
    let fi = format_ident!("{}", f);
    emit_map(
        ctx,
        &[&a, &b],
        &out,
        &[c, c],
        c,
        quote!(::ptec_runtime::kernels::scalar::#fi(a, b)),
        false,
    )
}

fn maximum(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    minmax(ctx, "maximum")
}
fn minimum(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    minmax(ctx, "minimum")
}
fn fmax(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    minmax(ctx, "fmax")
}
fn fmin(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    minmax(ctx, "fmin")
}

fn float_binary(ctx: &mut OpCtx<'_>, body: TokenStream) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (a, b, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    let mut c = compute_type(result_type(&[&a, &b], &[]));
    if category(c) < 2 {
        c = Float;
    }
    emit_map(ctx, &[&a, &b], &out, &[c, c], c, body, false)
}

fn atan2(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    float_binary(ctx, quote!(::ptec_runtime::kernels::scalar::atan2(a, b)))
}
fn hypot(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    float_binary(ctx, quote!(::ptec_runtime::kernels::scalar::sqrt(a * a + b * b)))
}
fn copysign(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    float_binary(ctx, quote!(::ptec_runtime::kernels::scalar::FloatMath::copysign_(a, b)))
}

fn bitwise(ctx: &mut OpCtx<'_>, op: &str, scalar: bool) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let a = ctx.tensor(0)?;
    let out = ctx.tensor(2)?;
    let (b, s) = if scalar {
        (None, Some(ctx.scalar(1)?))
    } else {
        (Some(ctx.tensor(1)?), None)
    };
    let common = match (&b, s) {
        (Some(b), _) => result_type(&[&a, b], &[]),
        (None, Some(s)) => result_type(&[&a], &[s]),
        _ => unreachable!(),
    };
    if category(common) == 2 {
        return Err(format!("bitwise_{op} is not defined for floating-point tensors"));
    }
    let shift = op.ends_with("shift");
    if shift && common == Bool {
        return Err(format!("bitwise_{op} is not defined for bool tensors"));
    }
    // Shifts as PyTorch's CPU kernels: by a negative amount or by the
    // width or more, a left shift gives 0 and a right shift the sign fill
    // (0 for uint8).
    let ty = rust_type(common).expect("integer dtype");
    let body = match op {
        "and" => quote!(a & b),
        "or" => quote!(a | b),
        "left_shift" => quote! {{
            let s = b as i64;
            if s < 0 || s >= #ty::BITS as i64 { 0 } else { ((a as u64) << s) as #ty }
        }},
        "right_shift" => quote! {{
            let (s, max) = (b as i64, #ty::BITS as i64 - (#ty::MIN != 0) as i64);
            if s < 0 || s >= max { a.checked_shr(max as u32).unwrap_or(0) } else { a >> s }
        }},
        _ => quote!(a ^ b),
    };
    match (b, s) {
        (Some(b), _) => emit_map(ctx, &[&a, &b], &out, &[common, common], common, body, false),
        (None, Some(s)) => {
            let sv = scalar_in(s, common);
            emit_map(
                ctx,
                &[&a],
                &out,
                &[common],
                common,
                quote!({ let b = #sv; #body }),
                false,
            )
        }
        _ => unreachable!(),
    }
}

fn bitand(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    bitwise(ctx, "and", false)
}
fn bitand_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    bitwise(ctx, "and", true)
}
fn bitor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    bitwise(ctx, "or", false)
}
fn bitor_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    bitwise(ctx, "or", true)
}
fn lshift(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    bitwise(ctx, "left_shift", false)
}
fn lshift_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    bitwise(ctx, "left_shift", true)
}
fn rshift(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    bitwise(ctx, "right_shift", false)
}
fn rshift_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    bitwise(ctx, "right_shift", true)
}
fn bitxor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    bitwise(ctx, "xor", false)
}
fn bitxor_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    bitwise(ctx, "xor", true)
}

fn logical(ctx: &mut OpCtx<'_>, body: TokenStream) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (a, b, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    emit_map(ctx, &[&a, &b], &out, &[Bool, Bool], Bool, body, false)
}

fn logical_and(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    logical(ctx, quote!(a && b))
}
fn logical_or(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    logical(ctx, quote!(a || b))
}
fn logical_xor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    logical(ctx, quote!(a != b))
}

/// `where.self_out(condition, self, other, out)`.
fn where_self(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (cond, a, b, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?, ctx.tensor(3)?);
    let c = compute_type(result_type(&[&a, &b], &[]));
    emit_map(
        ctx,
        &[&cond, &a, &b],
        &out,
        &[Bool, c, c],
        c,
        quote!(if a { b } else { c }),
        false,
    )
}

/// `addcmul.out(self, tensor1, tensor2, value, out)` and `addcdiv`.
fn addc(ctx: &mut OpCtx<'_>, div: bool) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (a, t1, t2, v, out) = (
        ctx.tensor(0)?,
        ctx.tensor(1)?,
        ctx.tensor(2)?,
        ctx.scalar(3)?,
        ctx.tensor(4)?,
    );
    let c = compute_type(result_type(&[&a, &t1, &t2], &[]));
    if category(c) < 2 && div {
        return Err("addcdiv needs floating-point tensors".into());
    }
    let vv = scalar_in(v, c);
    let body = if div {
        quote!(a + #vv * (b / c))
    } else {
        quote!(a + #vv * b * c)
    };
    emit_map(ctx, &[&a, &t1, &t2], &out, &[c, c, c], c, body, false)
}

fn addcmul(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    addc(ctx, false)
}
fn addcdiv(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    addc(ctx, true)
}

/// `lerp.Scalar_out(self, end, weight, out)`.
fn lerp_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (a, b, w, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.scalar(2)?, ctx.tensor(3)?);
    let c = compute_type(result_type(&[&a, &b], &[]));
    let wv = scalar_in(w, c);
    emit_map(ctx, &[&a, &b], &out, &[c, c], c, quote!(a + #wv * (b - a)), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_follows_pytorch() {
        assert_eq!(promote(Byte, Char), Short);
        assert_eq!(promote(Int, Long), Long);
        assert_eq!(promote(Bool, Int), Int);
        assert_eq!(promote(Half, BFloat16), Float);
        assert_eq!(promote(Long, Half), Half);
        assert_eq!(promote(Float, Double), Double);
    }

    fn t(dtype: ScalarType, sizes: &[usize]) -> TArg {
        TArg {
            value: 0,
            dtype,
            sizes: sizes.to_vec(),
            dynamic: false,
            contiguous: true,
            dim_order: (0..sizes.len() as u8).collect(),
            home: crate::plan::layout::Home::None,
        }
    }

    #[test]
    fn scalars_and_zero_dim_tensors_only_raise_the_category() {
        // int tensor * 2.5 -> float32 (default dtype); float16 tensor * 2.5 stays float16
        assert_eq!(result_type(&[&t(Long, &[3])], &[Scalar::Double(2.5)]), Float);
        assert_eq!(result_type(&[&t(Half, &[3])], &[Scalar::Double(2.5)]), Half);
        assert_eq!(result_type(&[&t(Int, &[3])], &[Scalar::Int(7)]), Int);
        // a 0-dim double tensor does not widen a float32 tensor, a 0-dim float does widen an int one
        assert_eq!(result_type(&[&t(Float, &[3]), &t(Double, &[])], &[]), Float);
        assert_eq!(result_type(&[&t(Long, &[3]), &t(Float, &[])], &[]), Float);
        assert_eq!(result_type(&[&t(Bool, &[3])], &[Scalar::Int(1)]), Long);
    }
}
