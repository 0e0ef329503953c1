//! ExecuTorch's Cortex-M backend operators (`cortex_m::*`): int8 kernels
//! with CMSIS-NN's arithmetic (`ptec_kernels::cortex_m`). The legacy
//! operators take NCHW tensors in either dim order (the backend's flow lays
//! them out channels-last); the explicit-layout `_nhwc` ones take NHWC
//! tensors. Shapes are static: the backend plans every tensor.
use super::conv::usize_list;
use super::quant::check_quantized;
use super::*;
use ScalarType::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("cortex_m::quantize_per_tensor.out", quantize_per_tensor),
    ("cortex_m::dequantize_per_tensor.out", dequantize_per_tensor),
    ("cortex_m::quantized_conv2d.out", |c| conv2d(c, false, false)),
    ("cortex_m::quantized_conv2d_nhwc.out", |c| conv2d(c, false, true)),
    ("cortex_m::quantized_depthwise_conv2d.out", |c| conv2d(c, true, false)),
    ("cortex_m::quantized_depthwise_conv2d_nhwc.out", |c| {
        conv2d(c, true, true)
    }),
    ("cortex_m::quantized_avg_pool2d.out", |c| avg_pool2d(c, false)),
    ("cortex_m::quantized_avg_pool2d_nhwc.out", |c| avg_pool2d(c, true)),
    ("cortex_m::quantized_linear.out", linear),
    ("cortex_m::quantized_add.out", add),
    ("cortex_m::quantized_mul.out", mul),
    ("cortex_m::quantized_div.out", div),
    ("cortex_m::minimum.out", |c| min_max(c, false)),
    ("cortex_m::maximum.out", |c| min_max(c, true)),
    ("cortex_m::quantized_activation.out", activation_lut),
    ("cortex_m::softmax.out", softmax),
    ("cortex_m::quantized_max_pool2d.out", |c| max_pool2d(c, false)),
    ("cortex_m::quantized_max_pool2d_nhwc.out", |c| max_pool2d(c, true)),
    ("cortex_m::quantized_transpose_conv2d.out", |c| {
        transpose_conv2d(c, false)
    }),
    ("cortex_m::quantized_transpose_conv2d_nhwc.out", |c| {
        transpose_conv2d(c, true)
    }),
    ("cortex_m::quantized_batch_matmul.out", batch_matmul),
    ("cortex_m::pad.out", pad),
    ("cortex_m::transpose.out", transpose),
];

/// The strides (in elements) of `t`'s logical dims in memory, from its dim
/// order.
fn strides(t: &TArg) -> Vec<usize> {
    let mut s = vec![0; t.rank()];
    let mut acc = 1;
    for &d in t.dim_order.iter().rev() {
        s[d as usize] = acc;
        acc *= t.sizes[d as usize];
    }
    s
}

/// Requires static tensors (the backend's programs have no others).
fn require_static(ctx: &OpCtx<'_>, ts: &[&TArg]) -> Result<(), String> {
    match ts.iter().find(|t| t.dynamic) {
        Some(t) => Err(format!(
            "value {} has a dynamic shape; {} needs static shapes",
            t.value, ctx.name
        )),
        None => Ok(()),
    }
}

/// Requires tensors laid out alike (one shape, the same strides), so that
/// an elementwise kernel may run over their memory in order.
fn require_same_layout(ts: &[&TArg]) -> Result<(), String> {
    for t in &ts[1..] {
        if t.sizes != ts[0].sizes || strides(t) != strides(ts[0]) {
            return Err(format!(
                "value {} (sizes {:?}, dim_order {:?}) and value {} (sizes {:?}, dim_order {:?}) must have one shape and layout",
                ts[0].value, ts[0].sizes, ts[0].dim_order, t.value, t.sizes, t.dim_order
            ));
        }
    }
    Ok(())
}

/// A 4-d image's logical (n, c, h, w) sizes and strides: its dims in that
/// order, or (n, h, w, c) for the `_nhwc` operators.
fn image(t: &TArg, nhwc: bool) -> Result<([usize; 4], [usize; 4]), String> {
    if t.rank() != 4 {
        return Err(format!(
            "value {} has rank {}, expected an image of rank 4",
            t.value,
            t.rank()
        ));
    }
    let order = if nhwc { [0, 3, 1, 2] } else { [0, 1, 2, 3] };
    let s = strides(t);
    Ok((order.map(|d| t.sizes[d]), order.map(|d| s[d])))
}

fn image_tokens((sizes, strides): ([usize; 4], [usize; 4])) -> TokenStream {
    let (a, b) = (usize_slice(&sizes), usize_slice(&strides));
    quote!(::ptec_runtime::kernels::cortex_m::Image { sizes: *#a, strides: *#b })
}

/// A constant `i32` argument (offsets, multipliers, shifts, bounds).
fn int32(ctx: &OpCtx<'_>, i: usize) -> Result<i32, String> {
    let v = ctx.int(i)?;
    i32::try_from(v).map_err(|_| format!("argument {i} is {v}, outside i32"))
}

/// A shift of CMSIS-NN's requantization, in `-31..=31`.
fn shift(ctx: &OpCtx<'_>, i: usize) -> Result<i32, String> {
    let s = int32(ctx, i)?;
    if !(-31..=31).contains(&s) {
        return Err(format!("argument {i} is the shift {s}, outside -31..=31"));
    }
    Ok(s)
}

/// An int8 value (a zero point, a bound of an activation).
fn int8(ctx: &OpCtx<'_>, i: usize) -> Result<i32, String> {
    let v = int32(ctx, i)?;
    if !(-128..=127).contains(&v) {
        return Err(format!("argument {i} is {v}, outside int8's range"));
    }
    Ok(v)
}

/// The activation bounds `[min, max]` at arguments `lo` and `hi`.
fn activation(ctx: &OpCtx<'_>, lo: usize, hi: usize) -> Result<TokenStream, String> {
    let (lo, hi) = (int8(ctx, lo)?, int8(ctx, hi)?);
    if lo > hi {
        return Err(format!("activation_min {lo} is greater than activation_max {hi}"));
    }
    Ok(quote!([#lo, #hi]))
}

/// `quantize_per_tensor.out(input, scale, zero_point, quant_min, quant_max,
/// dtype, out)`: `quantized_decomposed`'s arithmetic, in any layout.
fn quantize_per_tensor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(8)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(6)?);
    require_dtype(&x, &[Float])?;
    let (lo, hi) = check_quantized(ctx, &out, 3, 4, 5)?;
    require_static(ctx, &[&x, &out])?;
    require_same_layout(&[&x, &out])?;
    let (scale, zp) = (f64_lit(ctx.double(1)?), i64_lit(ctx.int(2)?));
    let (lo, hi) = (i64_lit(lo), i64_lit(hi));
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    Ok(quote! {
        #s1 #s2
        ::ptec_runtime::kernels::quant::quantize_per_tensor(#xi, #scale, #zp, #lo, #hi, #o);
    })
}

/// `dequantize_per_tensor.out(input, scale, zero_point, quant_min,
/// quant_max, dtype, out)`: to `f32`, in any layout.
fn dequantize_per_tensor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(8)?;
    let (q, out) = (ctx.tensor(0)?, ctx.tensor(6)?);
    check_quantized(ctx, &q, 3, 4, 5)?;
    require_dtype(&out, &[Float])?;
    require_static(ctx, &[&q, &out])?;
    require_same_layout(&[&q, &out])?;
    let (scale, zp) = (f64_lit(ctx.double(1)?), i64_lit(ctx.int(2)?));
    let (qi, s1) = ctx.read(&q)?;
    let (o, s2) = ctx.write(&out)?;
    Ok(quote! {
        #s1 #s2
        ::ptec_runtime::kernels::quant::dequantize_per_tensor(#qi, #scale, #zp, #o);
    })
}

/// An `Option` of a view of the optional tensor `t`, and its statement.
fn read_opt(ctx: &mut OpCtx<'_>, t: &Option<TArg>) -> Result<(TokenStream, TokenStream), String> {
    Ok(match t {
        Some(t) => {
            let (v, s) = ctx.read(t)?;
            (quote!(Some(#v)), s)
        }
        None => (quote!(None), quote!()),
    })
}

/// A per-output-channel constant (`i32` biases, multipliers, shifts).
fn per_channel(t: &TArg, what: &str, channels: usize) -> Result<(), String> {
    require_dtype(t, &[Int])?;
    require_contiguous(&[t])?;
    if t.numel() != channels {
        return Err(format!(
            "the {what} (value {}) has sizes {:?}; expected {channels} values, one per output channel",
            t.value, t.sizes
        ));
    }
    Ok(())
}

/// A pair of positive (stride, dilation) or non-negative (padding) values.
fn pair(ctx: &OpCtx<'_>, i: usize, what: &str, positive: bool) -> Result<[usize; 2], String> {
    match usize_list(ctx, i)?[..] {
        [a, b] if !positive || (a > 0 && b > 0) => Ok([a, b]),
        ref v => Err(format!(
            "the {what} (argument {i}) is {v:?}; expected two {} values",
            if positive { "positive" } else { "non-negative" }
        )),
    }
}

/// `quantized_conv2d.out(input, weight, bias?, stride, padding, dilation,
/// input_offset, output_offset, requantize_multipliers, requantize_shifts,
/// activation_min, activation_max, scratch, out)`; the depthwise form has
/// `depth_multiplier` after `dilation`. Weights are `[out, kh, kw, in /
/// groups]`, depthwise `[1, kh, kw, out]`.
fn conv2d(ctx: &mut OpCtx<'_>, depthwise: bool, nhwc: bool) -> Result<TokenStream, String> {
    let at = usize::from(depthwise);
    ctx.arity(15 + at)?;
    let (x, w, bias, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.opt_tensor(2)?, ctx.tensor(13 + at)?);
    let (mults, shifts) = (ctx.tensor(8 + at)?, ctx.tensor(9 + at)?);
    let stride = pair(ctx, 3, "stride", true)?;
    let padding = pair(ctx, 4, "padding", false)?;
    let dilation = pair(ctx, 5, "dilation", true)?;
    let (input_offset, output_offset) = (int32(ctx, 6 + at)?, int32(ctx, 7 + at)?);
    let act = activation(ctx, 10 + at, 11 + at)?;
    ctx.tensor(12 + at)?; // the scratch CMSIS-NN would use
    for t in [&x, &w, &out] {
        require_dtype(t, &[Char])?;
    }
    require_contiguous(&[&w])?;
    require_static(ctx, &[&x, &w, &out])?;
    let input = image(&x, nhwc)?;
    let output = image(&out, nhwc)?;
    let [n, ic, ih, iw] = input.0;
    if w.rank() != 4 {
        return Err(format!(
            "the weight (value {}) has rank {}, expected 4",
            w.value,
            w.rank()
        ));
    }
    let (kh, kw) = (w.sizes[1], w.sizes[2]);
    let (oc, group_in, kind) = if depthwise {
        let oc = w.sizes[3];
        let dm = ctx.int(6)?;
        if w.sizes[0] != 1 || ic == 0 || oc != ic * usize::try_from(dm).unwrap_or(0) {
            return Err(format!(
                "the depthwise weight (value {}) has sizes {:?}; expected [1, kh, kw, {ic} × depth_multiplier {dm}]",
                w.value, w.sizes
            ));
        }
        (oc, 1, quote!(Ihwo))
    } else {
        let (oc, gi) = (w.sizes[0], w.sizes[3]);
        if gi == 0 || ic % gi != 0 || oc % (ic / gi) != 0 {
            return Err(format!(
                "the weight (value {}) has sizes {:?}, which do not divide the {ic} input channels into groups",
                w.value, w.sizes
            ));
        }
        (oc, gi, quote!(Ohwi))
    };
    if let Some(b) = &bias {
        per_channel(b, "bias", oc)?;
    }
    per_channel(&mults, "requantize multipliers", oc)?;
    per_channel(&shifts, "requantize shifts", oc)?;
    let extent = |i: usize, k: usize, d: usize, p: usize, s: usize| {
        (i + 2 * p).checked_sub(d * (k.max(1) - 1) + 1).map(|v| v / s + 1)
    };
    let want = [
        Some(n),
        Some(oc),
        extent(ih, kh, dilation[0], padding[0], stride[0]),
        extent(iw, kw, dilation[1], padding[1], stride[1]),
    ];
    if want != output.0.map(Some) {
        return Err(format!(
            "the output (value {}) has sizes {:?} (n, c, h, w), expected {want:?}",
            out.value, output.0
        ));
    }
    let geometry = ConvGeometry {
        input,
        output,
        kernel: [kh, kw],
        stride,
        padding,
        dilation,
        group_in,
        kind,
    };
    let offsets = (input_offset, output_offset, act);
    conv_call(
        ctx,
        quote!(conv2d),
        &geometry,
        offsets,
        [&x, &w, &mults, &shifts, &out],
        &bias,
    )
}

/// A convolution's geometry, as the kernels' `Conv2d` takes it.
struct ConvGeometry {
    input: ([usize; 4], [usize; 4]),
    output: ([usize; 4], [usize; 4]),
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    group_in: usize,
    kind: TokenStream,
}

/// The call of the convolution kernel `f` on `[input, weight, multipliers,
/// shifts, out]` and the bias, with `(input_offset, output_offset,
/// activation)`.
fn conv_call(
    ctx: &mut OpCtx<'_>,
    f: TokenStream,
    g: &ConvGeometry,
    (input_offset, output_offset, act): (i32, i32, TokenStream),
    [x, w, mults, shifts, out]: [&TArg; 5],
    bias: &Option<TArg>,
) -> Result<TokenStream, String> {
    let (input_t, output_t) = (image_tokens(g.input), image_tokens(g.output));
    let (k, s, p, d) = (
        usize_slice(&g.kernel),
        usize_slice(&g.stride),
        usize_slice(&g.padding),
        usize_slice(&g.dilation),
    );
    let (gi, kind) = (lit(g.group_in), &g.kind);
    let (xi, s1) = ctx.read(x)?;
    let (wi, s2) = ctx.read(w)?;
    let (bias_arg, s3) = read_opt(ctx, bias)?;
    let (mi, s4) = ctx.read(mults)?;
    let (si, s5) = ctx.read(shifts)?;
    let (o, s6) = ctx.write(out)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::cortex_m::#f(
        &::ptec_runtime::kernels::cortex_m::Conv2d {
            input: #input_t,
            output: #output_t,
            weights: ::ptec_runtime::kernels::cortex_m::Weights::#kind,
            kernel: *#k,
            stride: *#s,
            padding: *#p,
            dilation: *#d,
            group_in: #gi,
            input_offset: #input_offset,
            output_offset: #output_offset,
            activation: #act,
        },
        #xi, #wi, #bias_arg, #mi, #si, #o
    )));
    Ok(quote! { #s1 #s2 #s3 #s4 #s5 #s6 #call })
}

/// A pooling's input and output images and its kernel, stride and padding,
/// as tokens, after checking the output's sizes (PyTorch's, padding at
/// most half the kernel).
fn pool_geometry(
    x: &TArg,
    out: &TArg,
    nhwc: bool,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    ceil_mode: bool,
) -> Result<[TokenStream; 5], String> {
    let input = image(x, nhwc)?;
    let output = image(out, nhwc)?;
    if padding[0] > kernel[0] / 2 || padding[1] > kernel[1] / 2 {
        return Err(format!("padding {padding:?} is more than half the kernel {kernel:?}"));
    }
    let nchw = input.0;
    let want = ptec_runtime::kernels::pool::avg_pool2d_output_sizes(&nchw, &kernel, &stride, &padding, ceil_mode, None)
        .ok_or_else(|| {
            format!("pooling {nchw:?} with kernel {kernel:?}, stride {stride:?}, padding {padding:?} is invalid")
        })?;
    if want[..] != output.0[..] {
        return Err(format!(
            "the output (value {}) has sizes {:?} (n, c, h, w), expected {:?}",
            out.value,
            output.0,
            &want[..]
        ));
    }
    Ok([
        image_tokens(input),
        image_tokens(output),
        usize_slice(&kernel),
        usize_slice(&stride),
        usize_slice(&padding),
    ])
}

/// `quantized_avg_pool2d.out(input, kernel_size, stride, padding,
/// ceil_mode, zero_point, multiplier, shift, scratch, out)`.
fn avg_pool2d(ctx: &mut OpCtx<'_>, nhwc: bool) -> Result<TokenStream, String> {
    ctx.arity(11)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(9)?);
    let kernel = pair(ctx, 1, "kernel size", true)?;
    let stride = pair(ctx, 2, "stride", true)?;
    let padding = pair(ctx, 3, "padding", false)?;
    let ceil_mode = ctx.bool(4)?;
    let (zp, multiplier, sh) = (int8(ctx, 5)?, int32(ctx, 6)?, shift(ctx, 7)?);
    ctx.tensor(8)?; // scratch
    require_dtype(&x, &[Char])?;
    require_dtype(&out, &[Char])?;
    require_static(ctx, &[&x, &out])?;
    let [input_t, output_t, k, s, p] = pool_geometry(&x, &out, nhwc, kernel, stride, padding, ceil_mode)?;
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::cortex_m::avg_pool2d(
        &::ptec_runtime::kernels::cortex_m::AvgPool2d {
            input: #input_t,
            output: #output_t,
            kernel: *#k,
            stride: *#s,
            padding: *#p,
            zero_point: #zp,
            multiplier: #multiplier,
            shift: #sh,
        },
        #xi, #o
    )));
    Ok(quote! { #s1 #s2 #call })
}

/// `quantized_linear.out(input, weights, bias?, kernel_sum?, input_offset,
/// filter_offset, output_offset, requantize_multipliers, requantize_shifts,
/// activation_max, activation_min, out)`: one multiplier and shift (the
/// first of the lists), as the reference uses.
fn linear(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(13)?;
    let (x, w, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(11)?);
    let (bias, kernel_sum) = (ctx.opt_tensor(2)?, ctx.opt_tensor(3)?);
    let (input_offset, filter_offset, output_offset) = (int32(ctx, 4)?, int32(ctx, 5)?, int32(ctx, 6)?);
    let (mults, shifts) = (ctx.int_list(7)?, ctx.int_list(8)?);
    let act = activation(ctx, 10, 9)?;
    for t in [&x, &w, &out] {
        require_dtype(t, &[Char])?;
    }
    require_contiguous(&[&x, &w, &out])?;
    require_static(ctx, &[&x, &w, &out])?;
    let (Some(&m0), Some(&s0)) = (mults.first(), shifts.first()) else {
        return Err("the requantize multipliers and shifts must not be empty".into());
    };
    let multiplier = i32::try_from(m0).map_err(|_| format!("the multiplier {m0} is outside i32"))?;
    let sh = i32::try_from(s0)
        .ok()
        .filter(|s| (-31..=31).contains(s))
        .ok_or_else(|| format!("the shift {s0} is outside -31..=31"))?;
    if w.rank() != 2 || x.rank() == 0 || x.sizes[x.rank() - 1] != w.sizes[1] {
        return Err(format!(
            "the input (value {}, sizes {:?}) and weights (value {}, sizes {:?}) do not make a product",
            x.value, x.sizes, w.value, w.sizes
        ));
    }
    let (depth, columns) = (w.sizes[1], w.sizes[0]);
    let mut want = x.sizes.clone();
    want[x.rank() - 1] = columns;
    require_sizes(&out, &want)?;
    for (t, what) in [(&bias, "bias"), (&kernel_sum, "kernel sum")] {
        if let Some(t) = t {
            per_channel(t, what, columns)?;
        }
    }
    let rows = lit(x.numel() / depth.max(1));
    let (depth, columns) = (lit(depth), lit(columns));
    let (xi, s1) = ctx.read(&x)?;
    let (wi, s2) = ctx.read(&w)?;
    let (bi, s3) = read_opt(ctx, &bias)?;
    let (ki, s4) = read_opt(ctx, &kernel_sum)?;
    let (o, s5) = ctx.write(&out)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::cortex_m::linear(
        &::ptec_runtime::kernels::cortex_m::Linear {
            rows: #rows,
            depth: #depth,
            columns: #columns,
            input_offset: #input_offset,
            filter_offset: #filter_offset,
            output_offset: #output_offset,
            multiplier: #multiplier,
            shift: #sh,
            activation: #act,
        },
        #xi, #wi, #bi, #ki, #o
    )));
    Ok(quote! { #s1 #s2 #s3 #s4 #s5 #call })
}

/// The `Binary` geometry of `out = f(a, b)`: both operands broadcast to
/// the output's shape (rank ≤ 4) by PyTorch's rules, each read through its
/// own dim order.
fn broadcast(a: &TArg, b: &TArg, out: &TArg) -> Result<TokenStream, String> {
    let rank = out.rank();
    if rank > 4 || a.rank() > rank || b.rank() > rank {
        return Err(format!(
            "values {}, {} and {} have ranks {}, {} and {}: expected at most 4, the output's the largest",
            a.value,
            b.value,
            out.value,
            a.rank(),
            b.rank(),
            rank
        ));
    }
    let mut sizes = [1usize; 4];
    sizes[4 - rank..].copy_from_slice(&out.sizes);
    let padded = |t: &TArg| -> Result<[usize; 4], String> {
        let (s, lead) = (strides(t), 4 - t.rank());
        let mut p = [0usize; 4];
        for d in 0..t.rank() {
            match t.sizes[d] {
                1 => {}
                n if n == sizes[lead + d] => p[lead + d] = s[d],
                _ => {
                    return Err(format!(
                        "value {} (sizes {:?}) does not broadcast to the output's sizes {:?} (value {})",
                        t.value, t.sizes, out.sizes, out.value
                    ));
                }
            }
        }
        Ok(p)
    };
    let (pa, pb, po) = (padded(a)?, padded(b)?, padded(out)?);
    // The output is the broadcast of the operands, not larger.
    for d in 0..rank {
        let of = |t: &TArg| {
            let lead = rank - t.rank();
            if d < lead {
                1
            } else {
                t.sizes[d - lead]
            }
        };
        if out.sizes[d] != of(a).max(of(b)) {
            return Err(format!(
                "the output (value {}) has sizes {:?}, not the broadcast of {:?} and {:?}",
                out.value, out.sizes, a.sizes, b.sizes
            ));
        }
    }
    let t = |v: [usize; 4]| usize_slice(&v);
    let (s, ta, tb, to) = (t(sizes), t(pa), t(pb), t(po));
    Ok(quote!(&::ptec_runtime::kernels::cortex_m::Binary { sizes: *#s, a: *#ta, b: *#tb, out: *#to }))
}

/// The operands and output of an elementwise operator at `a`, `b` and
/// `out`, checked static and of `dtypes`, with their geometry.
fn elementwise(
    ctx: &OpCtx<'_>,
    [a, b, out]: [usize; 3],
    dtypes: &[ScalarType],
) -> Result<([TArg; 3], TokenStream), String> {
    let (a, b, out) = (ctx.tensor(a)?, ctx.tensor(b)?, ctx.tensor(out)?);
    for t in [&a, &b, &out] {
        require_dtype(t, dtypes)?;
    }
    if a.dtype != out.dtype || b.dtype != out.dtype {
        return Err(format!(
            "{} needs operands of one dtype, got {}, {} and {}",
            ctx.name, a.dtype, b.dtype, out.dtype
        ));
    }
    require_static(ctx, &[&a, &b, &out])?;
    let shape = broadcast(&a, &b, &out)?;
    Ok(([a, b, out], shape))
}

/// Reads `a` and `b`, writes `out`: their views and statements.
fn views(ctx: &mut OpCtx<'_>, [a, b, out]: &[TArg; 3]) -> Result<([Ident; 3], TokenStream), String> {
    let (ai, s1) = ctx.read(a)?;
    let (bi, s2) = ctx.read(b)?;
    let (o, s3) = ctx.write(out)?;
    Ok(([ai, bi, o], quote!(#s1 #s2 #s3)))
}

/// `quantized_add.out(self, self_zero_point, self_multiplier, self_shift,
/// other, ..., output_zero_point, output_multiplier, output_shift,
/// activation_min, activation_max, out)`, either operand broadcast.
fn add(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(15)?;
    let (ts, shape) = elementwise(ctx, [0, 4, 13], &[Char])?;
    let operand = |first: usize| -> Result<TokenStream, String> {
        let (zp, m, s) = (int8(ctx, first)?, int32(ctx, first + 1)?, shift(ctx, first + 2)?);
        Ok(quote!(::ptec_runtime::kernels::cortex_m::AddOperand { zero_point: #zp, multiplier: #m, shift: #s }))
    };
    let (pa, pb, po) = (operand(1)?, operand(5)?, operand(8)?);
    let act = activation(ctx, 11, 12)?;
    let ([ai, bi, o], stmts) = views(ctx, &ts)?;
    let call =
        ctx.kernel_result(quote!(::ptec_runtime::kernels::cortex_m::add(#ai, #pa, #bi, #pb, #po, #act, #shape, #o)));
    Ok(quote! { #stmts #call })
}

/// `quantized_mul.out(self, self_zero_point, other, other_zero_point,
/// output_zero_point, output_multiplier, output_shift, out)`.
fn mul(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(9)?;
    let (ts, shape) = elementwise(ctx, [0, 2, 7], &[Char])?;
    let (za, zb, zo) = (int8(ctx, 1)?, int8(ctx, 3)?, int8(ctx, 4)?);
    let (m, sh) = (int32(ctx, 5)?, shift(ctx, 6)?);
    let ([ai, bi, o], stmts) = views(ctx, &ts)?;
    let call =
        ctx.kernel_result(quote!(::ptec_runtime::kernels::cortex_m::mul(#ai, #za, #bi, #zb, #zo, #m, #sh, #shape, #o)));
    Ok(quote! { #stmts #call })
}

/// `quantized_div.out(self, self_zero_point, other, other_zero_point,
/// output_zero_point, output_scale, out)` of int8 tensors (the int16 form,
/// from a non-default quantizer configuration, is refused).
fn div(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(8)?;
    let (ts, shape) = elementwise(ctx, [0, 2, 6], &[Char])?;
    let (za, zb, zo) = (int8(ctx, 1)?, int8(ctx, 3)?, int8(ctx, 4)?);
    // The reference multiplies an f32 tensor by the scale: f32 arithmetic.
    let scale = ctx.double(5)? as f32;
    if !scale.is_finite() {
        return Err(format!("argument 5 is the scale {scale}, not finite"));
    }
    let scale = f32_lit(scale);
    let ([ai, bi, o], stmts) = views(ctx, &ts)?;
    let call =
        ctx.kernel_result(quote!(::ptec_runtime::kernels::cortex_m::div(#ai, #za, #bi, #zb, #zo, #scale, #shape, #o)));
    Ok(quote! { #stmts #call })
}

/// `minimum.out(self, other, out)` and `maximum.out`, of int8 or int32
/// tensors.
fn min_max(ctx: &mut OpCtx<'_>, max: bool) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (ts, shape) = elementwise(ctx, [0, 1, 2], &[Char, Int])?;
    let f = if max { quote!(maximum) } else { quote!(minimum) };
    let ([ai, bi, o], stmts) = views(ctx, &ts)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::cortex_m::#f(#ai, #bi, #shape, #o)));
    Ok(quote! { #stmts #call })
}

/// `quantized_activation.out(input, lut, out)`: a 256-entry int8 table.
fn activation_lut(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, lut, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    for t in [&x, &lut, &out] {
        require_dtype(t, &[Char])?;
    }
    require_static(ctx, &[&x, &lut, &out])?;
    require_same_layout(&[&out, &x])?;
    require_contiguous(&[&lut])?;
    if lut.numel() != 256 {
        return Err(format!(
            "the look-up table (value {}) has sizes {:?}; expected 256 values",
            lut.value, lut.sizes
        ));
    }
    let (xi, s1) = ctx.read(&x)?;
    let (li, s2) = ctx.read(&lut)?;
    let (o, s3) = ctx.write(&out)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::cortex_m::activation(#xi, #li, #o)));
    Ok(quote! { #s1 #s2 #s3 #call })
}

/// A tensor of rank 1 to 4's sizes and strides, padded to 4 with leading
/// ones.
fn padded4(t: &TArg) -> Result<([usize; 4], [usize; 4]), String> {
    let rank = t.rank();
    if !(1..=4).contains(&rank) {
        return Err(format!("value {} has rank {rank}, expected 1 to 4", t.value));
    }
    let (mut sizes, mut st) = ([1usize; 4], [0usize; 4]);
    sizes[4 - rank..].copy_from_slice(&t.sizes);
    st[4 - rank..].copy_from_slice(&strides(t));
    Ok((sizes, st))
}

/// `softmax.out(input, dim, input_zero_point, output_zero_point,
/// input_multiplier, input_shift, diff_min, out)`: the reference's float
/// path (`diff_min` unused, as there), output zero point -128.
fn softmax(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(9)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(7)?);
    require_dtype(&x, &[Char])?;
    require_dtype(&out, &[Char])?;
    require_static(ctx, &[&x, &out])?;
    require_sizes(&out, &x.sizes)?;
    let dim = norm_dim(ctx.int(1)?, x.rank())?;
    let (zp, out_zp) = (int8(ctx, 2)?, int8(ctx, 3)?);
    if out_zp != -128 {
        return Err(format!(
            "the output zero point is {out_zp}; CMSIS-NN's softmax has -128"
        ));
    }
    let (multiplier, sh) = (int32(ctx, 4)?, shift(ctx, 5)?);
    if multiplier <= 0 {
        return Err(format!("the input multiplier {multiplier} is not positive"));
    }
    let ((sizes, xs), (_, os)) = (padded4(&x)?, padded4(&out)?);
    let dim = lit(dim + 4 - x.rank());
    let (sizes, xs, os) = (usize_slice(&sizes), usize_slice(&xs), usize_slice(&os));
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::cortex_m::softmax(
        #xi, *#sizes, *#xs, *#os, #dim, #zp, #multiplier, #sh, #o
    )));
    Ok(quote! { #s1 #s2 #call })
}

/// `quantized_max_pool2d.out(input, kernel_size, stride, padding, dilation,
/// ceil_mode, input_zero_point, output_zero_point, activation_min,
/// activation_max, out)`, without dilation or `ceil_mode` and with one zero
/// point (what the reference takes).
fn max_pool2d(ctx: &mut OpCtx<'_>, nhwc: bool) -> Result<TokenStream, String> {
    ctx.arity(12)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(10)?);
    let kernel = pair(ctx, 1, "kernel size", true)?;
    let stride = pair(ctx, 2, "stride", true)?;
    let padding = pair(ctx, 3, "padding", false)?;
    let dilation = pair(ctx, 4, "dilation", true)?;
    if dilation != [1, 1] || ctx.bool(5)? {
        return Err(format!(
            "dilation {dilation:?} or ceil_mode: the reference takes neither"
        ));
    }
    let (zi, zo) = (int8(ctx, 6)?, int8(ctx, 7)?);
    if zi != zo {
        return Err(format!("the input zero point {zi} and the output's {zo} differ"));
    }
    let act = activation(ctx, 8, 9)?;
    require_dtype(&x, &[Char])?;
    require_dtype(&out, &[Char])?;
    require_static(ctx, &[&x, &out])?;
    // No ceil_mode, no dilation: PyTorch's pooling sizes.
    let [input_t, output_t, k, s, p] = pool_geometry(&x, &out, nhwc, kernel, stride, padding, false)?;
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::cortex_m::max_pool2d(
        &::ptec_runtime::kernels::cortex_m::MaxPool2d {
            input: #input_t,
            output: #output_t,
            kernel: *#k,
            stride: *#s,
            padding: *#p,
            activation: #act,
        },
        #xi, #o
    )));
    Ok(quote! { #s1 #s2 #call })
}

/// `quantized_transpose_conv2d.out(input, weight, bias?, stride, padding,
/// output_padding, dilation, input_offset, output_offset,
/// requantize_multipliers, requantize_shifts, activation_min,
/// activation_max, scratch, output_scratch, out)`: one group, weights
/// `[out, kh, kw, in]`.
fn transpose_conv2d(ctx: &mut OpCtx<'_>, nhwc: bool) -> Result<TokenStream, String> {
    ctx.arity(17)?;
    let (x, w, bias, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.opt_tensor(2)?, ctx.tensor(15)?);
    let (mults, shifts) = (ctx.tensor(9)?, ctx.tensor(10)?);
    let stride = pair(ctx, 3, "stride", true)?;
    let padding = pair(ctx, 4, "padding", false)?;
    let output_padding = pair(ctx, 5, "output padding", false)?;
    let dilation = pair(ctx, 6, "dilation", true)?;
    let (input_offset, output_offset) = (int32(ctx, 7)?, int32(ctx, 8)?);
    let act = activation(ctx, 11, 12)?;
    ctx.tensor(13)?; // the scratch CMSIS-NN would use
    ctx.tensor(14)?;
    for t in [&x, &w, &out] {
        require_dtype(t, &[Char])?;
    }
    require_contiguous(&[&w])?;
    require_static(ctx, &[&x, &w, &out])?;
    let input = image(&x, nhwc)?;
    let output = image(&out, nhwc)?;
    let [n, ic, ih, iw] = input.0;
    if w.rank() != 4 || w.sizes[3] != ic {
        return Err(format!(
            "the weight (value {}) has sizes {:?}; expected [out, kh, kw, {ic}] (one group)",
            w.value, w.sizes
        ));
    }
    let (oc, kh, kw) = (w.sizes[0], w.sizes[1], w.sizes[2]);
    if let Some(b) = &bias {
        per_channel(b, "bias", oc)?;
    }
    per_channel(&mults, "requantize multipliers", oc)?;
    per_channel(&shifts, "requantize shifts", oc)?;
    // (i - 1) × stride - 2 × padding + dilation × (k - 1) + output_padding + 1.
    let extent = |i: usize, k: usize, s: usize, p: usize, d: usize, op: usize| {
        let span = (i.max(1) - 1)
            .checked_mul(s)?
            .checked_add(d.checked_mul(k.max(1) - 1)?)?;
        span.checked_add(op + 1)?.checked_sub(p.checked_mul(2)?)
    };
    let want = [
        Some(n),
        Some(oc),
        extent(ih, kh, stride[0], padding[0], dilation[0], output_padding[0]),
        extent(iw, kw, stride[1], padding[1], dilation[1], output_padding[1]),
    ];
    if ih == 0 || iw == 0 || want != output.0.map(Some) {
        return Err(format!(
            "the output (value {}) has sizes {:?} (n, c, h, w), expected {want:?}",
            out.value, output.0
        ));
    }
    let geometry = ConvGeometry {
        input,
        output,
        kernel: [kh, kw],
        stride,
        padding,
        dilation,
        group_in: ic,
        kind: quote!(Ohwi),
    };
    let offsets = (input_offset, output_offset, act);
    conv_call(
        ctx,
        quote!(transpose_conv2d),
        &geometry,
        offsets,
        [&x, &w, &mults, &shifts, &out],
        &bias,
    )
}

/// `quantized_batch_matmul.out(lhs, lhs_zero_point, rhs_transposed,
/// rhs_zero_point, output_zero_point, output_multiplier, output_shift,
/// scratch, out)`: `[b, m, k]` by `[b, n, k]`, the "zero points" being the
/// offsets (the negated zero points) the pass writes.
fn batch_matmul(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(10)?;
    let (l, r, out) = (ctx.tensor(0)?, ctx.tensor(2)?, ctx.tensor(8)?);
    ctx.tensor(7)?; // scratch
    for t in [&l, &r, &out] {
        require_dtype(t, &[Char])?;
    }
    require_contiguous(&[&l, &r, &out])?;
    require_static(ctx, &[&l, &r, &out])?;
    let offset = |i: usize| -> Result<i32, String> {
        let v = int32(ctx, i)?;
        if !(-127..=128).contains(&v) {
            return Err(format!("argument {i} is the offset {v}, outside -127..=128"));
        }
        Ok(v)
    };
    let (lo, ro) = (offset(1)?, offset(3)?);
    let (zo, m, sh) = (int8(ctx, 4)?, int32(ctx, 5)?, shift(ctx, 6)?);
    if l.rank() != 3 || r.rank() != 3 || l.sizes[0] != r.sizes[0] || l.sizes[2] != r.sizes[2] {
        return Err(format!(
            "the operands (values {} and {}, sizes {:?} and {:?}) are not [b, m, k] and [b, n, k]",
            l.value, r.value, l.sizes, r.sizes
        ));
    }
    let (b, rows, depth, columns) = (l.sizes[0], l.sizes[1], l.sizes[2], r.sizes[1]);
    require_sizes(&out, &[b, rows, columns])?;
    let (b, rows, depth, columns) = (lit(b), lit(rows), lit(depth), lit(columns));
    let (li, s1) = ctx.read(&l)?;
    let (ri, s2) = ctx.read(&r)?;
    let (o, s3) = ctx.write(&out)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::cortex_m::batch_matmul(
        &::ptec_runtime::kernels::cortex_m::BatchMatmul {
            batches: #b,
            rows: #rows,
            depth: #depth,
            columns: #columns,
            lhs_offset: #lo,
            rhs_offset: #ro,
            output_zero_point: #zo,
            multiplier: #m,
            shift: #sh,
        },
        #li, #ri, #o
    )));
    Ok(quote! { #s1 #s2 #s3 #call })
}

/// `pad.out(input, pre_pad, post_pad, pad_value, out)`: constant padding
/// of a tensor of rank ≤ 4, the four amounts of each list given for
/// (n, c, h, w) aligned to the last dims, in NHWC order when the reference
/// sees the input as channels-last (`_pad_to_logical_order`).
fn pad(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(4)?);
    let (pre, post) = (usize_list(ctx, 1)?, usize_list(ctx, 2)?);
    let value = int32(ctx, 3)?;
    require_static(ctx, &[&x, &out])?;
    if x.dtype != out.dtype || !matches!(x.dtype, Char | Byte | Short | Int) {
        return Err(format!(
            "pad from {} to {} is not supported (integer tensors of one dtype)",
            x.dtype, out.dtype
        ));
    }
    let rank = x.rank();
    if rank == 0 || rank > 4 || pre.len() != 4 || post.len() != 4 {
        return Err(format!(
            "pad of rank {rank} with pre_pad {pre:?} and post_pad {post:?}: expected rank 1 to 4 and four amounts each"
        ));
    }
    // The reference's is_channels_last: a 4-d tensor of one channel, of
    // one pixel, or in NHWC dim order.
    let channels_last =
        rank == 4 && (x.sizes[1] == 1 || (x.sizes[2] == 1 && x.sizes[3] == 1) || x.dim_order[..2] == [0, 2]);
    let logical = |p: &[usize]| -> Vec<usize> {
        if channels_last {
            [0, 3, 1, 2].iter().map(|&i| p[i]).collect()
        } else {
            p.to_vec()
        }
    };
    let (pre, post) = (logical(&pre)[4 - rank..].to_vec(), logical(&post)[4 - rank..].to_vec());
    let want: Vec<usize> = (0..rank).map(|d| x.sizes[d] + pre[d] + post[d]).collect();
    require_sizes(&out, &want)?;
    let ty = rust_type(x.dtype).ok_or("unsupported dtype")?;
    let lo = match x.dtype {
        Char => -128,
        Short => -32768,
        Int => i32::MIN,
        _ => 0,
    };
    let hi = match x.dtype {
        Char => 127,
        Short => 32767,
        Int => i32::MAX,
        _ => 255,
    };
    if !(lo..=hi).contains(&value) {
        return Err(format!("the pad value {value} does not fit {}", x.dtype));
    }
    let value = proc_macro2::Literal::i64_unsuffixed(i64::from(value));
    let out_strides = strides(&out);
    let offset: usize = (0..rank).map(|d| pre[d] * out_strides[d]).sum();
    let (sizes, src, dst, offset) = (
        usize_slice(&x.sizes),
        usize_slice(&strides(&x)),
        usize_slice(&out_strides),
        lit(offset),
    );
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let call = ctx
        .kernel_result(quote!(::ptec_runtime::kernels::cortex_m::strided_copy(#xi, #sizes, #src, #dst, #offset, #o)));
    Ok(quote! {
        #s1 #s2
        #o.fill(#value as #ty);
        #call
    })
}

/// `transpose.out(input, perm, out)`: `input.permute(perm)`, in the output's
/// layout.
fn transpose(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(2)?);
    let perm = usize_list(ctx, 1)?;
    require_static(ctx, &[&x, &out])?;
    if x.dtype != out.dtype {
        return Err(format!("transpose from {} to {} converts", x.dtype, out.dtype));
    }
    let rank = x.rank();
    let mut seen = vec![false; rank];
    if perm.len() != rank || perm.iter().any(|&d| d >= rank || std::mem::replace(&mut seen[d], true)) {
        return Err(format!("perm {perm:?} is not a permutation of the {rank} dims"));
    }
    let want: Vec<usize> = perm.iter().map(|&d| x.sizes[d]).collect();
    require_sizes(&out, &want)?;
    let xs = strides(&x);
    let src: Vec<usize> = perm.iter().map(|&d| xs[d]).collect();
    let (sizes, src, dst) = (usize_slice(&want), usize_slice(&src), usize_slice(&strides(&out)));
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let call =
        ctx.kernel_result(quote!(::ptec_runtime::kernels::cortex_m::strided_copy(#xi, #sizes, #src, #dst, 0, #o)));
    Ok(quote! { #s1 #s2 #call })
}
