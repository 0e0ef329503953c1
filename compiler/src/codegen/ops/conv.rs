//! `convolution`: 1-d and 2-d, regular or transposed, strided, padded,
//! dilated, grouped (depthwise included). Also the helpers the other heavy
//! families (pooling, normalization, upsampling) share: constant size
//! lists, same-dtype checks and output sizes checked at compile time or
//! computed at run time.
use super::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("aten::convolution.out", convolution),
    ("aten::convolution_backward.out", convolution_backward),
];

/// A constant list of non-negative integers (sizes, strides, paddings).
pub(super) fn usize_list(ctx: &OpCtx<'_>, i: usize) -> Result<Vec<usize>, String> {
    to_usizes(ctx.int_list(i)?).map_err(|v| format!("argument {i} holds {v}; it must be non-negative"))
}

/// Like [`usize_list`], for an optional list.
pub(super) fn opt_usize_list(ctx: &OpCtx<'_>, i: usize) -> Result<Option<Vec<usize>>, String> {
    if ctx.is_null(i)? {
        Ok(None)
    } else {
        usize_list(ctx, i).map(Some)
    }
}

/// A constant non-negative integer.
pub(super) fn usize_arg(ctx: &OpCtx<'_>, i: usize) -> Result<usize, String> {
    let v = ctx.int(i)?;
    usize::try_from(v).map_err(|_| format!("argument {i} is {v}; it must be non-negative"))
}

/// The list as `usize`s, or the first negative item.
fn to_usizes(list: Vec<i64>) -> Result<Vec<usize>, i64> {
    list.into_iter().map(|v| usize::try_from(v).map_err(|_| v)).collect()
}

/// Requires contiguous tensors of one floating dtype (`dtypes` lists which).
pub(super) fn same_dtype(ts: &[&TArg], dtypes: &[ScalarType]) -> Result<(), String> {
    require_contiguous(ts)?;
    for t in ts {
        require_dtype(t, dtypes)?;
        if t.dtype != ts[0].dtype {
            return Err(format!(
                "value {} has dtype {}, value {} has {}",
                t.value, t.dtype, ts[0].value, ts[0].dtype
            ));
        }
    }
    Ok(())
}

/// Requires a tensor whose shape is known at compile time (weights, biases).
pub(super) fn require_static(t: &TArg, what: &str) -> Result<(), String> {
    if t.dynamic {
        Err(format!(
            "the {what} (value {}) has a dynamic shape; only the input's shape may vary",
            t.value
        ))
    } else {
        Ok(())
    }
}

/// The statements that give `out` its sizes. `bound` is the output shape
/// computed from the input's (upper-bound) sizes. With a static input it is
/// the shape: checked against `out` now. With a dynamic input, `live` (an
/// expression of type `Option<impl Deref<Target = [usize]>>`, `None` for
/// shapes the kernel rejects) computes the shape at run time; it becomes the
/// live sizes of a dynamic `out`, or must equal a static `out`'s.
pub(super) fn emit_out_sizes(
    ctx: &OpCtx<'_>,
    input_dynamic: bool,
    out: &TArg,
    bound: &[usize],
    live: TokenStream,
) -> Result<TokenStream, String> {
    if !input_dynamic {
        require_sizes(out, bound)?;
        return Ok(ctx.set_sizes(out, usize_slice(bound)));
    }
    require_rank(out, bound.len())?;
    let ins = lit(ctx.instruction);
    let shape_error = quote! {
        ::ptec_runtime::Error::Kernel { instruction: #ins, error: ::ptec_runtime::kernels::KernelError::ShapeMismatch }
    };
    let apply = if out.dynamic {
        ctx.set_sizes(out, quote!(&live[..]))
    } else {
        let fixed = usize_slice(&out.sizes);
        quote! {
            if live[..] != *#fixed {
                return Err(#shape_error);
            }
        }
    };
    Ok(quote! {
        {
            let live = match #live {
                Some(live) => live,
                None => return Err(#shape_error),
            };
            #apply
        }
    })
}

/// `Some(slice)` / `None` for an optional constant list.
pub(super) fn opt_slice<T>(list: &Option<Vec<T>>, items: impl Fn(&[T]) -> TokenStream) -> TokenStream {
    match list {
        Some(v) => {
            let s = items(v);
            quote!(Some(#s))
        }
        None => quote!(None),
    }
}

/// `Some(n)` / `None` as an `Option<usize>` expression.
pub(super) fn opt_lit(n: Option<usize>) -> TokenStream {
    match n {
        Some(n) => {
            let n = lit(n);
            quote!(Some(#n))
        }
        None => quote!(None),
    }
}

/// A shared view of an optional tensor: `Some(view)` or `None`, and its
/// `let` statement.
pub(super) fn read_opt(ctx: &mut OpCtx<'_>, t: &Option<TArg>) -> Result<(TokenStream, TokenStream), String> {
    Ok(match t {
        Some(t) => {
            let (name, stmt) = ctx.read(t)?;
            (quote!(Some(#name)), stmt)
        }
        None => (quote!(None), quote!()),
    })
}

/// `convolution.out(input, weight, bias?, stride, padding, dilation,
/// transposed, output_padding, groups, out)`.
fn convolution(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(11)?;
    let (x, w, bias, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.opt_tensor(2)?, ctx.tensor(9)?);
    let stride = usize_list(ctx, 3)?;
    let padding = usize_list(ctx, 4)?;
    let dilation = usize_list(ctx, 5)?;
    let transposed = ctx.bool(6)?;
    let output_padding = usize_list(ctx, 7)?;
    let groups = usize_arg(ctx, 8)?;
    let mut all = vec![&x, &w, &out];
    all.extend(bias.as_ref());
    same_dtype(&all, FLOATS)?;
    require_static(&w, "weight")?;
    if let Some(b) = &bias {
        require_static(b, "bias")?;
    }
    if transposed && x.sizes.len() == 5 {
        return Err(format!(
            "transposed 3-d convolution (of {:?}) is not supported",
            x.sizes
        ));
    }
    let bias_len = bias.as_ref().map(TArg::numel);
    let geometry = |input: &[usize]| {
        ptec_runtime::kernels::conv::conv_output_sizes(
            input,
            &w.sizes,
            bias_len,
            &stride,
            &padding,
            &dilation,
            transposed,
            &output_padding,
            groups,
        )
    };
    let bound = geometry(&x.sizes).ok_or_else(|| {
        format!(
            "convolution of {:?} with weight {:?} (bias {bias_len:?}, stride {stride:?}, padding {padding:?}, dilation {dilation:?}, transposed {transposed}, output_padding {output_padding:?}, groups {groups}) is invalid",
            x.sizes, w.sizes
        )
    })?;
    let (ws, st, pa, di, op) = (
        usize_slice(&w.sizes),
        usize_slice(&stride),
        usize_slice(&padding),
        usize_slice(&dilation),
        usize_slice(&output_padding),
    );
    let bl = opt_lit(bias_len);
    let g = lit(groups);
    let xs = ctx.sizes(&x);
    let set = emit_out_sizes(
        ctx,
        x.dynamic,
        &out,
        &bound,
        quote!(::ptec_runtime::kernels::conv::conv_output_sizes(#xs, #ws, #bl, #st, #pa, #di, #transposed, #op, #g)),
    )?;
    // The scratch of the largest input serves every live input: a smaller
    // one needs no more.
    let scratch_len = if x.dtype == ScalarType::Float {
        ptec_runtime::kernels::conv::conv_scratch_len(
            &x.sizes,
            &w.sizes,
            &stride,
            &padding,
            &dilation,
            transposed,
            &output_padding,
            groups,
        )
    } else {
        0
    };
    let (xi, s1) = ctx.read(&x)?;
    let (wi, s2) = ctx.read(&w)?;
    let (bi, s3) = read_opt(ctx, &bias)?;
    let (o, s4) = ctx.write(&out)?;
    let (sc, s5) = if scratch_len > 0 {
        let (name, stmt) = ctx.scratch_f32(lit(scratch_len), scratch_len);
        (quote!(#name), stmt)
    } else {
        (quote!(&mut []), quote!())
    };
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::conv::convolution(
        #xi, #xs, #wi, #ws, #bi, #st, #pa, #di, #transposed, #op, #g, #o, #sc
    )));
    Ok(quote! { #set #s1 #s2 #s3 #s4 #s5 #call })
}

/// `convolution_backward.out(grad_output, input, weight, bias_sizes?,
/// stride, padding, dilation, transposed, output_padding, groups,
/// output_mask, out0, out1, out2)`: the gradients of the input, weight and
/// bias the mask asks for (the exporter gives the others empty tensors,
/// left alone). Static shapes only.
fn convolution_backward(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(15)?;
    let (gy, x, w) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    let bias_sizes = opt_usize_list(ctx, 3)?;
    let stride = usize_list(ctx, 4)?;
    let padding = usize_list(ctx, 5)?;
    let dilation = usize_list(ctx, 6)?;
    let transposed = ctx.bool(7)?;
    let output_padding = usize_list(ctx, 8)?;
    let groups = usize_arg(ctx, 9)?;
    let mask = ctx.bool_list(10)?;
    let &[want_gi, want_gw, want_gb] = &mask[..] else {
        return Err(format!("output_mask {mask:?} must have 3 entries"));
    };
    let outs = [ctx.tensor(11)?, ctx.tensor(12)?, ctx.tensor(13)?];
    let mut all = vec![&gy, &x, &w];
    all.extend(outs.iter().zip(mask.iter()).filter(|(_, &m)| m).map(|(t, _)| t));
    same_dtype(&all, FLOATS)?;
    for t in &all {
        require_static(t, "convolution_backward tensor")?;
    }
    if transposed && x.rank() == 5 {
        return Err(format!(
            "convolution_backward of a transposed 3-d convolution (of {:?}) is not supported",
            x.sizes
        ));
    }
    let sizes = ptec_runtime::kernels::conv::conv_output_sizes(
        &x.sizes,
        &w.sizes,
        None,
        &stride,
        &padding,
        &dilation,
        transposed,
        &output_padding,
        groups,
    )
    .ok_or_else(|| {
        format!(
            "convolution_backward of {:?} with weight {:?} (stride {stride:?}, padding {padding:?}, dilation {dilation:?}, transposed {transposed}, output_padding {output_padding:?}, groups {groups}) is invalid",
            x.sizes, w.sizes
        )
    })?;
    require_sizes(&gy, &sizes)?;
    let cout = sizes[1];
    if want_gb && bias_sizes.as_ref().is_some_and(|b| b[..] != [cout]) {
        return Err(format!("bias_sizes {bias_sizes:?} for {cout} output channels"));
    }
    let (yi, s1) = ctx.read(&gy)?;
    let (xi, s2) = ctx.read(&x)?;
    let (wi, s3) = ctx.read(&w)?;
    let mut stmts = Vec::new();
    let mut grads = Vec::new();
    for ((t, want), shape) in outs
        .iter()
        .zip([want_gi, want_gw, want_gb])
        .zip([&x.sizes[..], &w.sizes[..], &[cout]])
    {
        if want {
            stmts.push(emit_out_sizes(ctx, false, t, shape, quote!())?);
            let (name, stmt) = ctx.write(t)?;
            stmts.push(stmt);
            grads.push(quote!(Some(#name)));
        } else {
            grads.push(quote!(None));
        }
    }
    let (xs, ws, st, pa, di, op, g) = (
        usize_slice(&x.sizes),
        usize_slice(&w.sizes),
        usize_slice(&stride),
        usize_slice(&padding),
        usize_slice(&dilation),
        usize_slice(&output_padding),
        lit(groups),
    );
    let [gi, gw, gb] = [&grads[0], &grads[1], &grads[2]];
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::conv::convolution_backward(
        #yi, #xi, #xs, #wi, #ws, (#st, #pa, #di), #transposed, #op, #g, #gi, #gw, #gb
    )));
    Ok(quote! { #s1 #s2 #s3 #(#stmts)* #call })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_list_items_are_reported() {
        assert_eq!(to_usizes(vec![1, 2]), Ok(vec![1, 2]));
        assert_eq!(to_usizes(vec![1, -3, -4]), Err(-3));
        assert_eq!(to_usizes(vec![]), Ok(vec![]));
    }

    #[test]
    fn conv_shapes_the_emitter_relies_on() {
        use ptec_runtime::kernels::conv::conv_output_sizes;
        // 2-d, 3×3, padding 1, stride 2: ⌊(8 + 2 − 2 − 1) / 2⌋ + 1 = 4.
        let s = conv_output_sizes(&[1, 4, 8, 8], &[6, 4, 3, 3], Some(6), &[2], &[1], &[1], false, &[0], 1).unwrap();
        assert_eq!(&s[..], &[1, 6, 4, 4]);
        // 1-d depthwise: 4 groups of one channel, k = 5, dilation 2: 20 − 8 = 12.
        let s = conv_output_sizes(&[2, 4, 20], &[4, 1, 5], None, &[1], &[0], &[2], false, &[0], 4).unwrap();
        assert_eq!(&s[..], &[2, 4, 12]);
        // Transposed: (5 − 1)·2 − 2 + 2 + 1 + 1 = 10; weight [C_in, C_out/groups, k].
        let s = conv_output_sizes(&[1, 4, 5], &[4, 3, 3], Some(3), &[2], &[1], &[1], true, &[1], 1).unwrap();
        assert_eq!(&s[..], &[1, 3, 10]);
        // Channels not divisible by groups.
        assert!(conv_output_sizes(&[1, 4, 8, 8], &[6, 2, 3, 3], None, &[1], &[0], &[1], false, &[0], 3).is_none());
    }
}
