//! Tensors made from nothing but sizes and values: `full`, `empty`,
//! `zeros`, `ones` and their `_like` forms, `fill`, `scalar_tensor` and
//! `arange`.
use super::*;

/// Statements giving `out` the sizes `size` (items possibly computed at
/// run time): checked at compile time or set (and checked) at run time.
pub(super) fn sized_out(ctx: &mut OpCtx<'_>, size: &[IntArg], out: &TArg) -> Result<TokenStream, String> {
    require_contiguous(&[out])?;
    if size.len() != out.rank() {
        return Err(format!(
            "sizes of rank {} for an output of rank {}",
            size.len(),
            out.rank()
        ));
    }
    if let Some(c) = size.iter().map(IntArg::constant).collect::<Option<Vec<i64>>>() {
        let want = c
            .iter()
            .map(|&s| usize::try_from(s).map_err(|_| format!("negative size in {c:?}")))
            .collect::<Result<Vec<_>, _>>()?;
        require_sizes(out, &want)?;
        return Ok(ctx.set_sizes(out, usize_slice(&want)));
    }
    let (r, err) = (lit(size.len()), shape_mismatch(ctx));
    let items = size.iter().map(IntArg::expr);
    let set = set_out_sizes(ctx, out, quote!(&os[..]));
    Ok(quote! {
        let os: [usize; #r] = {
            let want: [i64; #r] = [#(#items),*];
            let mut os = [0usize; #r];
            for (o, &s) in os.iter_mut().zip(&want) {
                *o = usize::try_from(s).map_err(|_| #err)?;
            }
            os
        };
        #set
    })
}

/// Fills `out` (of sizes `size`) with `value` (an expression of `out`'s
/// storage type).
pub(super) fn emit_fill_sized(
    ctx: &mut OpCtx<'_>,
    size: &[IntArg],
    out: &TArg,
    value: TokenStream,
) -> Result<TokenStream, String> {
    let set = sized_out(ctx, size, out)?;
    let (o, s) = ctx.write(out)?;
    let k = kernels();
    Ok(quote! { #set #s #k::fill(#o, #value); })
}

/// Fills `out`, shaped like `x`, with `value`.
pub(super) fn emit_fill_like(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    out: &TArg,
    value: TokenStream,
) -> Result<TokenStream, String> {
    require_contiguous(&[out])?;
    let set = map_sizes(ctx, x, out, &identity(x.rank()))?;
    let (o, s) = ctx.write(out)?;
    let k = kernels();
    Ok(quote! { #set #s #k::fill(#o, #value); })
}

/// `empty.out(size, *, memory_format, out)`: only the sizes; the contents
/// are unspecified, as in PyTorch.
pub(super) fn empty(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (size, out) = (int_list_arg(ctx, 0)?, ctx.tensor(2)?);
    sized_out(ctx, &size, &out)
}

/// `_empty_dim_order.out(size, *, dim_order?, out)`: [`empty`] in the dim
/// order the output was planned with, which must be the one asked for.
pub(super) fn empty_dim_order(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (size, out) = (int_list_arg(ctx, 0)?, ctx.tensor(2)?);
    if let Some(asked) = ctx.opt_int_list(1)? {
        let planned: Vec<i64> = out.dim_order.iter().map(|&d| i64::from(d)).collect();
        if asked != planned {
            return Err(format!(
                "dim order {asked:?} asked for an output planned in dim order {planned:?}"
            ));
        }
    }
    sized_out(ctx, &size, &out)
}

/// `full.out(size, fill_value, out)`.
pub(super) fn full(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (size, value, out) = (int_list_arg(ctx, 0)?, ctx.scalar(1)?, ctx.tensor(2)?);
    emit_fill_sized(ctx, &size, &out, scalar_value(value, out.dtype))
}

pub(super) fn filled(ctx: &mut OpCtx<'_>, value: i64) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (size, out) = (int_list_arg(ctx, 0)?, ctx.tensor(1)?);
    emit_fill_sized(ctx, &size, &out, scalar_value(Scalar::Int(value), out.dtype))
}

/// `zeros.out(size, out)`.
pub(super) fn zeros(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    filled(ctx, 0)
}

/// `ones.out(size, out)`.
pub(super) fn ones(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    filled(ctx, 1)
}

/// `full_like.out(self, fill_value, *, memory_format, out)`.
pub(super) fn full_like(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, value, out) = (ctx.tensor(0)?, ctx.scalar(1)?, ctx.tensor(3)?);
    emit_fill_like(ctx, &x, &out, scalar_value(value, out.dtype))
}

pub(super) fn filled_like(ctx: &mut OpCtx<'_>, value: i64) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(2)?);
    emit_fill_like(ctx, &x, &out, scalar_value(Scalar::Int(value), out.dtype))
}

/// `zeros_like.out(self, *, memory_format, out)`.
pub(super) fn zeros_like(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    filled_like(ctx, 0)
}

/// `ones_like.out(self, *, memory_format, out)`.
pub(super) fn ones_like(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    filled_like(ctx, 1)
}

/// `fill.Scalar_out(self, value, out)`.
pub(super) fn fill_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, value, out) = (ctx.tensor(0)?, ctx.scalar(1)?, ctx.tensor(2)?);
    emit_fill_like(ctx, &x, &out, scalar_value(value, out.dtype))
}

/// `fill.Tensor_out(self, value, out)`: `value` is a one-element tensor.
pub(super) fn fill_tensor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, value, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    if value.rank() != 0 || value.dynamic {
        return Err(format!(
            "fill value must be a zero-dimensional tensor, has sizes {:?}",
            value.sizes
        ));
    }
    let (vi, s) = ctx.read(&value)?;
    let v = convert(
        convert(quote!(#vi[0]), value.dtype, compute_type(value.dtype)),
        compute_type(value.dtype),
        out.dtype,
    );
    let fill = emit_fill_like(ctx, &x, &out, quote!(v))?;
    Ok(quote! { let v = { #s #v }; #fill })
}

/// `scalar_tensor.out(s, out)`.
pub(super) fn scalar_tensor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let out = ctx.tensor(1)?;
    if out.numel() != 1 || out.dynamic {
        return Err(format!("scalar_tensor output of sizes {:?}", out.sizes));
    }
    let Ok(value) = ctx.scalar(0) else {
        // A scalar computed at run time.
        let (e, kind) = ctx.scalar_expr(0)?;
        let v = super::elementwise::convert(e, kind.dtype(), out.dtype);
        let (o, s) = ctx.write(&out)?;
        return Ok(quote! { #s #o[0] = #v; });
    };
    emit_fill_sized(
        ctx,
        &vec![IntArg::Const(1); out.rank()],
        &out,
        scalar_value(value, out.dtype),
    )
}

/// Emits `arange(start, end, step)` into `out`: in `i64` when every
/// argument and the output are integers, else in `f64` as PyTorch does.
pub(super) fn emit_arange(
    ctx: &mut OpCtx<'_>,
    start: Scalar,
    end: Scalar,
    step: Scalar,
    out: &TArg,
) -> Result<TokenStream, String> {
    require_contiguous(&[out])?;
    if out.dynamic {
        return Err(no_dynamic(ctx));
    }
    if out.dtype == ScalarType::Bool {
        return Err("arange into a bool tensor".into());
    }
    let int = |s: Scalar| match s {
        Scalar::Int(v) => Some(v),
        Scalar::Bool(b) => Some(b as i64),
        Scalar::Double(_) => None,
    };
    let k = kernels();
    let (len, f, first, step_lit) = match (int(start), int(end), int(step), out.dtype.is_float()) {
        (Some(a), Some(b), Some(c), false) => (
            ptec_runtime::kernels::shape::arange_len_i64(a, b, c),
            quote!(arange_i64),
            i64_lit(a),
            i64_lit(c),
        ),
        _ => {
            let (a, b, c) = (start.as_f64(), end.as_f64(), step.as_f64());
            (
                ptec_runtime::kernels::shape::arange_len(a, b, c),
                quote!(arange),
                f64_lit(a),
                f64_lit(c),
            )
        }
    };
    let len = len.ok_or_else(|| format!("arange({start:?}, {end:?}, {step:?}) has an invalid range"))?;
    require_sizes(out, &[len])?;
    let (o, s) = ctx.write(out)?;
    Ok(quote! { #s #k::#f(#first, #step_lit, #o); })
}

/// `arange.out(end, out)`.
pub(super) fn arange(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (end, out) = (ctx.scalar(0)?, ctx.tensor(1)?);
    emit_arange(ctx, Scalar::Int(0), end, Scalar::Int(1), &out)
}

/// `arange.start_out(start, end, step, out)`.
pub(super) fn arange_start(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let out = ctx.tensor(3)?;
    match (ctx.scalar(0), ctx.scalar(1), ctx.scalar(2)) {
        (Ok(start), Ok(end), Ok(step)) => emit_arange(ctx, start, end, step, &out),
        _ => emit_arange_runtime(ctx, [0, 1, 2], &out),
    }
}

/// Emits `arange(start, end, step)` with arguments (the values at argument
/// indices `args`) of which some are computed at run time: the length is
/// too, within `out`'s bound.
pub(super) fn emit_arange_runtime(ctx: &mut OpCtx<'_>, args: [usize; 3], out: &TArg) -> Result<TokenStream, String> {
    use super::prim::ScalarKind;
    require_contiguous(&[out])?;
    require_rank(out, 1)?;
    if out.dtype == ScalarType::Bool {
        return Err("arange into a bool tensor".into());
    }
    let mut operands = Vec::new();
    for i in args {
        operands.push(ctx.scalar_expr(i)?);
    }
    let ints = operands.iter().all(|(_, k)| *k != ScalarKind::Double) && !out.dtype.is_float();
    let as_ty = |(e, kind): &(TokenStream, ScalarKind)| match (ints, kind) {
        (true, ScalarKind::Bool) => quote!((#e as i64)),
        (true, _) => quote!((#e)),
        (false, ScalarKind::Double) => quote!((#e)),
        (false, ScalarKind::Bool) => quote!((#e as u8 as f64)),
        (false, ScalarKind::Int) => quote!((#e as f64)),
    };
    let [a, b, c] = [as_ty(&operands[0]), as_ty(&operands[1]), as_ty(&operands[2])];
    let err = shape_mismatch(ctx);
    let k = kernels();
    let (len, fill) = if ints {
        (quote!(#k::arange_len_i64(#a, #b, #c)), quote!(arange_i64(#a, #c, o)))
    } else {
        (quote!(#k::arange_len(#a, #b, #c)), quote!(arange(#a, #c, o)))
    };
    let set = set_out_sizes(ctx, out, quote!(&[len]));
    let (o, s) = ctx.write(out)?;
    Ok(quote! {
        let Some(len) = #len else {
            return Err(#err);
        };
        #set
        #s
        { let o = #o; #k::#fill; }
    })
}
