//! Copies and casts: `_to_dim_order_copy`, `_clone_dim_order`, `clone`,
//! `_to_copy`, `copy_`, `copy`, and the device copies `et_copy::_h2d_copy`,
//! `et_copy::_d2h_copy`.
use super::elementwise::{compute_type, convert, emit_map, emit_map_shaped};
use super::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("dim_order_ops::_to_dim_order_copy.out", to_dim_order_copy),
    ("dim_order_ops::_clone_dim_order.out", clone_dim_order),
    ("aten::clone.out", clone),
    ("aten::_to_copy.out", to_copy),
    (crate::names::COPY_INPLACE, copy_inplace),
    ("aten::copy.out", copy_out),
    ("aten::native_dropout.out", native_dropout),
    ("et_copy::_h2d_copy.out", device_copy),
    ("et_copy::_d2h_copy.out", device_copy),
];

/// `_h2d_copy.out(self, *, out)` and `_d2h_copy.out(self, *, out)`: the
/// exporter puts them around a delegate that runs on a device (a compile
/// spec `target_device`, with `enable_non_cpu_memory_planning`). In ptec
/// every buffer is host memory, the device's planned buffers included, and
/// the delegate's backend is given host tensors; so both are a plain copy
/// of the same dtype, `out` taking `self`'s sizes, as ExecuTorch's kernels
/// do (they convert nothing).
fn device_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    if x.dtype != out.dtype || x.dim_order != out.dim_order {
        return Err(format!(
            "value {} ({}, dim order {:?}) and value {} ({}, dim order {:?}) differ; a device copy moves bytes without converting them",
            x.value, x.dtype, x.dim_order, out.value, out.dtype, out.dim_order
        ));
    }
    emit_convert(ctx, &x, &out)
}

/// `native_dropout.out(input, p, train?, out0, out1)`: outside training
/// (or with p = 0) the input and an all-true mask; in training with p = 1,
/// zeros and an all-false mask. Training with 0 < p < 1 draws random
/// numbers, which a compiled program cannot reproduce: refused.
fn native_dropout(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, p, out, mask) = (ctx.tensor(0)?, ctx.double(1)?, ctx.tensor(3)?, ctx.tensor(4)?);
    let train = if ctx.is_null(2)? { false } else { ctx.bool(2)? };
    require_dtype(&mask, &[ScalarType::Bool])?;
    let keep = !train || p == 0.0;
    if !keep && p != 1.0 {
        return Err(format!(
            "dropout with p = {p} in training draws random numbers; export the model in eval mode"
        ));
    }
    let c = compute_type(x.dtype);
    let body = if keep { quote!(a) } else { quote!(a * (0 as _)) };
    let values = if keep {
        emit_convert(ctx, &x, &out)?
    } else {
        emit_map(ctx, &[&x], &out, &[c], c, body, false)?
    };
    let masks = emit_map(
        ctx,
        &[&x],
        &mask,
        &[c],
        ScalarType::Bool,
        quote!({ let _ = a; #keep }),
        false,
    )?;
    Ok(quote! { #values #masks })
}

/// Copies `x` into `out` converting dtype and dim order.
pub fn emit_convert(ctx: &mut OpCtx<'_>, x: &TArg, out: &TArg) -> Result<TokenStream, String> {
    if !x.dynamic {
        require_sizes(out, &x.sizes)?;
    }
    if x.dim_order == out.dim_order {
        // Same layout: an element-wise cast (or plain copy).
        let c = x.dtype;
        let mut xs = x.clone();
        let mut os = out.clone();
        // The layout is shared, so treat both as contiguous in memory order.
        xs.contiguous = true;
        os.contiguous = true;
        if !x.contiguous {
            let perm: Vec<usize> = x.dim_order.iter().map(|&d| x.sizes[d as usize]).collect();
            xs.sizes = perm.clone();
            os.sizes = perm;
        }
        return emit_map(ctx, &[&xs], &os, &[c], c, quote!(a), false);
    }
    if x.dynamic || out.dynamic {
        return Err("changing the dim order of a dynamic tensor is not supported".into());
    }
    let (xi, s1) = ctx.read(x)?;
    let (o, s2) = ctx.write(out)?;
    let sizes = usize_slice(&x.sizes);
    let so = usize_slice(&x.dim_order.iter().map(|&d| d as usize).collect::<Vec<_>>());
    let doo = usize_slice(&out.dim_order.iter().map(|&d| d as usize).collect::<Vec<_>>());
    let ty = rust_type(x.dtype).expect("dtype");
    let conv = convert(quote!(a), x.dtype, compute_type(x.dtype));
    let conv = convert(conv, compute_type(x.dtype), out.dtype);
    Ok(quote! { #s1 #s2 ::ptec_runtime::kernels::shape::to_dim_order(#xi, #sizes, #so, #doo, #o, |a: #ty| #conv); })
}

/// `_to_dim_order_copy.out(self, *, non_blocking, dim_order?, out)`.
fn to_dim_order_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(3)?);
    emit_convert(ctx, &x, &out)
}

/// `_clone_dim_order.out(self, *, non_blocking, dim_order?, out)`.
fn clone_dim_order(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    to_dim_order_copy(ctx)
}

/// `clone.out(self, *, memory_format?, out)`.
fn clone(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(2)?);
    emit_convert(ctx, &x, &out)
}

/// `_to_copy.out(self, *, non_blocking, memory_format?, out)`.
fn to_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(3)?);
    emit_convert(ctx, &x, &out)
}

/// `copy_(self, src, non_blocking) -> self`: writes `src` (broadcast) into
/// `self`.
fn copy_inplace(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (dst, src) = (ctx.tensor(0)?, ctx.tensor(1)?);
    emit_broadcast_copy(ctx, &dst, &src, &dst)
}

/// `copy.out(self, src, non_blocking, out)`: `out` = `src` broadcast to `self`'s shape.
fn copy_out(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (like, src, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(3)?);
    emit_broadcast_copy(ctx, &like, &src, &out)
}

/// `out` = `src` broadcast to the shape of `like` (whose data is not
/// read): the two broadcast together, which gives `like`'s shape exactly
/// when `src` broadcasts to it (the output's sizes are checked).
fn emit_broadcast_copy(ctx: &mut OpCtx<'_>, like: &TArg, src: &TArg, out: &TArg) -> Result<TokenStream, String> {
    let c = compute_type(src.dtype);
    emit_map_shaped(ctx, Some(like), &[src], out, &[c], c, quote!(a), false)
}
