//! `quantized_decomposed` quantize/dequantize, per tensor and per channel,
//! computed as PyTorch's reference decomposition does (see the kernels).
use super::*;
use ScalarType::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("quantized_decomposed::quantize_per_tensor.out", quantize_per_tensor),
    (
        "quantized_decomposed::quantize_per_tensor.tensor_out",
        quantize_per_tensor_tensor,
    ),
    ("quantized_decomposed::dequantize_per_tensor.out", dequantize_per_tensor),
    (
        "quantized_decomposed::dequantize_per_tensor.tensor_out",
        dequantize_per_tensor_tensor,
    ),
    ("quantized_decomposed::quantize_per_channel.out", quantize_per_channel),
    (
        "quantized_decomposed::dequantize_per_channel.out",
        dequantize_per_channel,
    ),
    (
        "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
        choose_qparams_per_token_asymmetric,
    ),
    ("quantized_decomposed::quantize_per_token.out", quantize_per_token),
    ("quantized_decomposed::dequantize_per_token.out", dequantize_per_token),
    ("quantized_decomposed::embedding_byte.out", |c| {
        embedding_quantized(c, 8, false)
    }),
    ("quantized_decomposed::embedding_byte.dtype_out", |c| {
        embedding_quantized(c, 8, true)
    }),
    ("quantized_decomposed::embedding_4bit.out", |c| {
        embedding_quantized(c, 4, false)
    }),
    ("quantized_decomposed::embedding_4bit.dtype_out", |c| {
        embedding_quantized(c, 4, true)
    }),
    ("quantized_decomposed::embedding_2bit.out", |c| {
        embedding_quantized(c, 2, false)
    }),
    ("quantized_decomposed::embedding_2bit.dtype_out", |c| {
        embedding_quantized(c, 2, true)
    }),
];

/// The integer dtypes quantized values are stored in.
const QUANTIZED: &[ScalarType] = &[Byte, Char, Short, Int, UInt16];

/// Checks the quantized tensor `q` against the op's `dtype` argument (an
/// integer `ScalarType` code) and its `[quant_min, quant_max]` range.
pub(super) fn check_quantized(
    ctx: &OpCtx<'_>,
    q: &TArg,
    qmin: usize,
    qmax: usize,
    dtype: usize,
) -> Result<(i64, i64), String> {
    require_dtype(q, QUANTIZED)?;
    let code = ctx.int(dtype)?;
    if ScalarType::from_code(code as i8) != Some(q.dtype) {
        return Err(format!(
            "dtype argument {code} does not name the quantized tensor's dtype {}",
            q.dtype
        ));
    }
    let (lo, hi) = (ctx.int(qmin)?, ctx.int(qmax)?);
    if lo > hi {
        return Err(format!("quant_min {lo} is greater than quant_max {hi}"));
    }
    Ok((lo, hi))
}

/// The dequantized output: `out_dtype` if given, else `float32`.
fn check_dequantized(ctx: &OpCtx<'_>, out_dtype: usize, out: &TArg) -> Result<(), String> {
    let want = match ctx.opt_int(out_dtype)? {
        Some(code) => ScalarType::from_code(code as i8).ok_or_else(|| format!("{code} is not a dtype"))?,
        None => Float,
    };
    if out.dtype != want {
        return Err(format!(
            "output value {} has dtype {}, expected {}",
            out.value, out.dtype, want
        ));
    }
    require_dtype(out, FLOATS)
}

/// Output sizes equal to the input's (checked, or set when dynamic).
fn same_sizes(ctx: &OpCtx<'_>, x: &TArg, out: &TArg) -> Result<TokenStream, String> {
    require_contiguous(&[x, out])?;
    if !x.dynamic {
        require_sizes(out, &x.sizes)?;
    }
    Ok(ctx.set_sizes(out, ctx.sizes(x)))
}

/// Where the scale and zero point of a per-tensor op come from.
enum Params {
    /// Constant arguments.
    Constants { scale: f64, zero_point: i64 },
    /// One-element tensors (the `.tensor_out` overloads), read at run time.
    Tensors { scale: TArg, zero_point: TArg },
}

impl Params {
    fn read(ctx: &OpCtx<'_>, tensors: bool) -> Result<Params, String> {
        if !tensors {
            return Ok(Params::Constants {
                scale: ctx.double(1)?,
                zero_point: ctx.int(2)?,
            });
        }
        let (scale, zero_point) = (ctx.tensor(1)?, ctx.tensor(2)?);
        for t in [&scale, &zero_point] {
            if t.dynamic || t.numel() != 1 {
                return Err(format!("value {} must be a static one-element tensor", t.value));
            }
        }
        Ok(Params::Tensors { scale, zero_point })
    }

    /// Statements binding `scale: f64` and `zero_point: i64`.
    fn bind(&self, ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
        Ok(match self {
            Params::Constants { scale, zero_point } => {
                let (s, z) = (f64_lit(*scale), i64_lit(*zero_point));
                quote! { let scale: f64 = #s; let zero_point: i64 = #z; }
            }
            Params::Tensors { scale, zero_point } => {
                let (s, s1) = ctx.read(scale)?;
                let (z, s2) = ctx.read(zero_point)?;
                let e = quote!(::ptec_runtime::kernels::num::Element);
                quote! {
                    #s1 #s2
                    let scale: f64 = #e::to_f64(#s[0]);
                    let zero_point: i64 = #e::to_i64(#z[0]);
                }
            }
        })
    }
}

/// `quantize_per_tensor.out(input, scale, zero_point, quant_min, quant_max, dtype, out)`.
fn emit_quantize_per_tensor(ctx: &mut OpCtx<'_>, tensors: bool) -> Result<TokenStream, String> {
    ctx.arity(8)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(6)?);
    require_dtype(&x, &[Float, Half, BFloat16])?;
    let (lo, hi) = check_quantized(ctx, &out, 3, 4, 5)?;
    let params = Params::read(ctx, tensors)?;
    let set = same_sizes(ctx, &x, &out)?;
    let bind = params.bind(ctx)?;
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let (lo, hi) = (i64_lit(lo), i64_lit(hi));
    Ok(quote! {
        #set #bind #s1 #s2
        ::ptec_runtime::kernels::quant::quantize_per_tensor(#xi, scale, zero_point, #lo, #hi, #o);
    })
}

fn quantize_per_tensor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    emit_quantize_per_tensor(ctx, false)
}
fn quantize_per_tensor_tensor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    emit_quantize_per_tensor(ctx, true)
}

/// `dequantize_per_tensor.out(input, scale, zero_point, quant_min, quant_max, dtype, *, out_dtype?, out)`.
fn emit_dequantize_per_tensor(ctx: &mut OpCtx<'_>, tensors: bool) -> Result<TokenStream, String> {
    ctx.arity(9)?;
    let (q, out) = (ctx.tensor(0)?, ctx.tensor(7)?);
    check_quantized(ctx, &q, 3, 4, 5)?;
    check_dequantized(ctx, 6, &out)?;
    let params = Params::read(ctx, tensors)?;
    let set = same_sizes(ctx, &q, &out)?;
    let bind = params.bind(ctx)?;
    let (qi, s1) = ctx.read(&q)?;
    let (o, s2) = ctx.write(&out)?;
    Ok(quote! {
        #set #bind #s1 #s2
        ::ptec_runtime::kernels::quant::dequantize_per_tensor(#qi, scale, zero_point, #o);
    })
}

fn dequantize_per_tensor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    emit_dequantize_per_tensor(ctx, false)
}
fn dequantize_per_tensor_tensor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    emit_dequantize_per_tensor(ctx, true)
}

/// The channel axis of a per-channel op and a check that `params` (scales
/// or zero points) hold one value per channel; the kernels index them by
/// channel, so their length must cover the channel dim's bound.
fn channel_axis(x: &TArg, axis: i64, params: &[&TArg]) -> Result<usize, String> {
    if x.rank() == 0 {
        return Err("per-channel quantization needs a tensor of rank 1 or more".into());
    }
    let axis = norm_dim(axis, x.rank())?;
    for p in params {
        if p.dynamic || p.rank() != 1 || p.sizes[0] != x.sizes[axis] {
            return Err(format!(
                "value {} must be a static 1-d tensor of {} (the size of dim {axis}), has sizes {:?}",
                p.value, x.sizes[axis], p.sizes
            ));
        }
    }
    Ok(axis)
}

/// `quantize_per_channel.out(input, scales, zero_points, axis, quant_min, quant_max, dtype, out)`.
fn quantize_per_channel(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(9)?;
    let (x, scales, zero_points, axis, out) = (
        ctx.tensor(0)?,
        ctx.tensor(1)?,
        ctx.tensor(2)?,
        ctx.int(3)?,
        ctx.tensor(7)?,
    );
    require_dtype(&x, &[Float, Half, BFloat16])?;
    let (lo, hi) = check_quantized(ctx, &out, 4, 5, 6)?;
    let axis = lit(channel_axis(&x, axis, &[&scales, &zero_points])?);
    let set = same_sizes(ctx, &x, &out)?;
    let sizes = ctx.sizes(&x);
    let (xi, s1) = ctx.read(&x)?;
    let (si, s2) = ctx.read(&scales)?;
    let (zi, s3) = ctx.read(&zero_points)?;
    let (o, s4) = ctx.write(&out)?;
    let (lo, hi) = (i64_lit(lo), i64_lit(hi));
    Ok(quote! {
        #set #s1 #s2 #s3 #s4
        ::ptec_runtime::kernels::quant::quantize_per_channel(#xi, #sizes, #si, #zi, #axis, #lo, #hi, #o);
    })
}

/// `dequantize_per_channel.out(input, scales, zero_points?, axis, quant_min, quant_max, dtype, *, out_dtype?, out)`.
fn dequantize_per_channel(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(10)?;
    let (q, scales, zero_points, axis, out) = (
        ctx.tensor(0)?,
        ctx.tensor(1)?,
        ctx.opt_tensor(2)?,
        ctx.int(3)?,
        ctx.tensor(8)?,
    );
    check_quantized(ctx, &q, 4, 5, 6)?;
    check_dequantized(ctx, 7, &out)?;
    let mut params = vec![&scales];
    params.extend(zero_points.as_ref());
    let axis = lit(channel_axis(&q, axis, &params)?);
    let set = same_sizes(ctx, &q, &out)?;
    let sizes = ctx.sizes(&q);
    let (qi, s1) = ctx.read(&q)?;
    let (si, s2) = ctx.read(&scales)?;
    let (zp, s3) = match &zero_points {
        Some(z) => {
            let (zi, s) = ctx.read(z)?;
            (quote!(Some(#zi)), s)
        }
        // Any element type will do for an absent zero point.
        None => (quote!(None::<&[i64]>), quote!()),
    };
    let (o, s4) = ctx.write(&out)?;
    Ok(quote! {
        #set #s1 #s2 #s3 #s4
        ::ptec_runtime::kernels::quant::dequantize_per_channel(#qi, #sizes, #si, #zp, #axis, #o);
    })
}

/// The per-token parameters of `x` (one per row along the last dim):
/// checked to be `x`'s sizes with a last dim of 1, and the statements that
/// bind `row: usize` (the live size of `x`'s last dim) and set the live
/// sizes of dynamic `params`.
fn token_rows(ctx: &OpCtx<'_>, x: &TArg, params: &[&TArg], outputs: bool) -> Result<TokenStream, String> {
    require_contiguous(&[x])?;
    let Some((&d, lead)) = x.sizes.split_last() else {
        return Err("per-token quantization needs a tensor of rank 1 or more".into());
    };
    if d == 0 {
        return Err(format!("value {} has rows of 0 elements", x.value));
    }
    let want: Vec<usize> = lead.iter().copied().chain([1]).collect();
    let mut set = quote!();
    for p in params {
        require_contiguous(&[p])?;
        if outputs {
            require_sizes(p, &want)?;
        } else if p.sizes != want || p.dynamic != x.dynamic {
            return Err(format!(
                "value {} has sizes {:?}, expected {want:?} (one per row of value {})",
                p.value, p.sizes, x.value
            ));
        }
        if outputs && p.dynamic {
            let rank = lit(want.len());
            let last = lit(want.len() - 1);
            let sizes = ctx.sizes(x);
            set.extend(ctx.set_sizes(
                p,
                quote!(&{
                    let mut s = [0usize; #rank];
                    s.copy_from_slice(#sizes);
                    s[#last] = 1;
                    s
                }),
            ));
        }
    }
    let (sizes, last) = (ctx.sizes(x), lit(lead.len()));
    Ok(quote! { #set let row: usize = (#sizes)[#last]; })
}

/// `choose_qparams_per_token_asymmetric.out(input, dtype, *, scale_out,
/// zero_point_out)`: ExecuTorch's int8 parameters of each row (see the
/// kernel), an `f64` scale and an `i64` zero point.
fn choose_qparams_per_token_asymmetric(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, scales, zero_points) = (ctx.tensor(0)?, ctx.tensor(2)?, ctx.tensor(3)?);
    require_dtype(&x, &[Float])?;
    require_dtype(&scales, &[Double])?;
    require_dtype(&zero_points, &[Long])?;
    let code = ctx.int(1)?;
    if ScalarType::from_code(code as i8) != Some(Char) {
        return Err(format!(
            "dtype argument {code} is not int8, the only dtype ExecuTorch's kernel makes"
        ));
    }
    let rows = token_rows(ctx, &x, &[&scales, &zero_points], true)?;
    let (xi, s1) = ctx.read(&x)?;
    let (si, s2) = ctx.write(&scales)?;
    let (zi, s3) = ctx.write(&zero_points)?;
    let call = ctx.kernel_result(quote!(
        ::ptec_runtime::kernels::quant::choose_qparams_per_token_asymmetric(#xi, row, #si, #zi)
    ));
    Ok(quote! { #rows #s1 #s2 #s3 #call })
}

/// `quantize_per_token.out(input, scales, zero_points, quant_min,
/// quant_max, dtype, out)`.
fn quantize_per_token(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(8)?;
    let (x, scales, zero_points, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?, ctx.tensor(6)?);
    require_dtype(&x, &[Float])?;
    let (lo, hi) = check_quantized(ctx, &out, 3, 4, 5)?;
    let rows = token_rows(ctx, &x, &[&scales, &zero_points], false)?;
    let set = same_sizes(ctx, &x, &out)?;
    let (xi, s1) = ctx.read(&x)?;
    let (si, s2) = ctx.read(&scales)?;
    let (zi, s3) = ctx.read(&zero_points)?;
    let (o, s4) = ctx.write(&out)?;
    let (lo, hi) = (i64_lit(lo), i64_lit(hi));
    let call = ctx.kernel_result(quote!(
        ::ptec_runtime::kernels::quant::quantize_per_token(#xi, row, #si, #zi, #lo, #hi, #o)
    ));
    Ok(quote! { #rows #set #s1 #s2 #s3 #s4 #call })
}

/// `dequantize_per_token.out(input, scales, zero_points, quant_min,
/// quant_max, dtype, output_dtype, out)`.
fn dequantize_per_token(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(9)?;
    let (q, scales, zero_points, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?, ctx.tensor(7)?);
    let (lo, hi) = check_quantized(ctx, &q, 3, 4, 5)?;
    check_dequantized(ctx, 6, &out)?;
    let rows = token_rows(ctx, &q, &[&scales, &zero_points], false)?;
    let set = same_sizes(ctx, &q, &out)?;
    let (qi, s1) = ctx.read(&q)?;
    let (si, s2) = ctx.read(&scales)?;
    let (zi, s3) = ctx.read(&zero_points)?;
    let (o, s4) = ctx.write(&out)?;
    let (lo, hi) = (i64_lit(lo), i64_lit(hi));
    let call = ctx.kernel_result(quote!(
        ::ptec_runtime::kernels::quant::dequantize_per_token(#qi, row, #si, #zi, #lo, #hi, #o)
    ));
    Ok(quote! { #rows #set #s1 #s2 #s3 #s4 #call })
}

/// `embedding_{byte,4bit,2bit}(weight, scales, zero_points?, quant_min,
/// quant_max, indices, [dtype?,] out)`: rows of a table quantized per row
/// or per group of a row, dequantized (see the kernel). As in ExecuTorch,
/// `quant_min`/`quant_max` are metadata only.
fn embedding_quantized(ctx: &mut OpCtx<'_>, nbit: u32, with_dtype: bool) -> Result<TokenStream, String> {
    ctx.arity(if with_dtype { 9 } else { 8 })?;
    let out_at = if with_dtype { 7 } else { 6 };
    let (w, scales, zero_points, indices, out) = (
        ctx.tensor(0)?,
        ctx.tensor(1)?,
        ctx.opt_tensor(2)?,
        ctx.tensor(5)?,
        ctx.tensor(out_at)?,
    );
    let (lo, hi) = (ctx.int(3)?, ctx.int(4)?);
    if lo > hi {
        return Err(format!("quant_min {lo} is greater than quant_max {hi}"));
    }
    if with_dtype {
        if let Some(code) = ctx.opt_int(6)? {
            if ScalarType::from_code(code as i8) != Some(out.dtype) {
                return Err(format!(
                    "dtype argument {code} does not name the output's dtype {}",
                    out.dtype
                ));
            }
        }
    }
    require_dtype(&w, if nbit == 8 { &[Byte, Char] } else { &[Byte] })?;
    require_dtype(&scales, &[Float, Half])?;
    require_dtype(&out, &[Float, Half])?;
    require_dtype(&indices, &[Long])?;
    let mut all = vec![&w, &scales, &indices, &out];
    all.extend(zero_points.as_ref());
    require_contiguous(&all)?;
    if w.dynamic || scales.dynamic || zero_points.as_ref().is_some_and(|z| z.dynamic) {
        return Err("the table and its scales must have static shapes".into());
    }
    if w.rank() != 2 {
        return Err(format!("the weight must be 2-d, has sizes {:?}", w.sizes));
    }
    let (rows, dim) = (w.sizes[0], w.sizes[1] * (8 / nbit as usize));
    let groups = match scales.sizes[..] {
        [r] if r == rows => 1,
        [r, g] if r == rows && g > 0 && dim % g == 0 => g,
        _ => {
            return Err(format!(
                "scales {:?} do not fit a table of {rows} rows of {dim}",
                scales.sizes
            ))
        }
    };
    if let Some(z) = &zero_points {
        if z.sizes != scales.sizes || z.dtype != out.dtype {
            return Err(format!(
                "zero points {:?} ({}) must have the scales' sizes {:?} and the output's dtype {}",
                z.sizes, z.dtype, scales.sizes, out.dtype
            ));
        }
    }
    if indices.dynamic != out.dynamic {
        return Err("the output must vary with the indices".into());
    }
    let set = gathered_sizes(ctx, &indices, &out, dim)?;
    let (wi, s1) = ctx.read(&w)?;
    let (si, s2) = ctx.read(&scales)?;
    let (zp, s3) = match &zero_points {
        Some(z) => {
            let (zi, s) = ctx.read(z)?;
            (quote!(Some(#zi)), s)
        }
        None => (quote!(None), quote!()),
    };
    let (ii, s4) = ctx.read(&indices)?;
    let (o, s5) = ctx.write(&out)?;
    let k = quote!(::ptec_runtime::kernels::quant);
    let table = if nbit == 8 {
        quote!(#k::QuantizedTable::Bytes(#wi))
    } else {
        let n = proc_macro2::Literal::u32_suffixed(nbit);
        quote!({
            let table: #k::QuantizedTable<'_, u8> = #k::QuantizedTable::Packed { bytes: #wi, nbit: #n };
            table
        })
    };
    let (rl, dl, gl) = (lit(rows), lit(dim), lit(groups));
    let call = ctx.kernel_result(quote!(#k::embedding_quantized(#table, #rl, #dl, #si, #zp, #gl, #ii, #o)));
    Ok(quote! { #set #s1 #s2 #s3 #s4 #s5 #call })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(sizes: &[usize]) -> TArg {
        TArg {
            value: 0,
            dtype: Float,
            sizes: sizes.to_vec(),
            dynamic: false,
            contiguous: true,
            dim_order: (0..sizes.len() as u8).collect(),
            home: crate::plan::layout::Home::None,
        }
    }

    #[test]
    fn channel_params_cover_the_axis() {
        let x = t(&[6, 3, 3, 3]);
        assert_eq!(channel_axis(&x, 0, &[&t(&[6])]).unwrap(), 0);
        assert_eq!(channel_axis(&x, -3, &[&t(&[3]), &t(&[3])]).unwrap(), 1);
        assert!(channel_axis(&x, 0, &[&t(&[3])]).is_err());
        assert!(channel_axis(&x, 4, &[&t(&[6])]).is_err());
        assert!(channel_axis(&t(&[]), 0, &[&t(&[1])]).is_err());
    }
}
