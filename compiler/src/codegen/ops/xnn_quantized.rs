//! ptec's quantized operators for lowered XNNPACK subgraphs: the static
//! int8 ones (`ptec_xnn::qs8_*`, see [`crate::names::qs8`] for their
//! arguments), whose activations are static, contiguous `i8` tensors
//! quantized per tensor, weights `i8` with `f32` scales and biases `i32`;
//! and the dynamically quantized fully connected layer
//! ([`qd8_fully_connected`], and [`qd8_fully_connected_shared`] over rows
//! another layer quantized).
use super::*;
use crate::names::{qd8_fully_connected, qd8_fully_connected_shared, qs8};
use ptec_runtime::kernels::bf16;
use ptec_runtime::kernels::nhwc::{Conv2dNhwc, Window2d};
use ptec_runtime::kernels::qd8::{blockwise_kept_len, prepare_blockwise};
use ptec_runtime::kernels::scalar;

pub const OPS: &[(&str, Emitter)] = &[
    (qs8::QUANTIZE, quantize),
    (qs8::DEQUANTIZE, dequantize),
    (qs8::LUT_HARDSWISH, lut_hardswish),
    (qs8::LUT_SIGMOID, lut_sigmoid),
    (qs8::LUT_TANH, lut_tanh),
    (qs8::LUT_SIGMOID_MUL, lut_sigmoid_mul),
    (qs8::CONV2D_NHWC, conv2d_nhwc),
    (qs8::CHAIN, conv2d_chain),
    (qs8::FULLY_CONNECTED, fully_connected),
    (qs8::MAX_POOL2D_NHWC, max_pool2d_nhwc),
    (qs8::GLOBAL_AVG_POOL2D_NHWC, global_avg_pool2d_nhwc),
    (qs8::ADD, add),
    (qs8::SUB, sub),
    (qs8::MUL, mul),
    (qd8_fully_connected::NAME, qd8_fully_connected),
    (qd8_fully_connected_shared::NAME, qd8_fully_connected_shared),
];

/// Requires static, contiguous tensors of `dtype`.
fn static_of(ts: &[&TArg], dtype: ScalarType) -> Result<(), String> {
    require_contiguous(ts)?;
    for t in ts {
        require_dtype(t, &[dtype])?;
        if t.dynamic {
            return Err(format!("value {} has a dynamic shape", t.value));
        }
    }
    Ok(())
}

/// A positive, finite scale argument.
fn scale(ctx: &OpCtx<'_>, i: usize) -> Result<f32, String> {
    let s = ctx.double(i)? as f32;
    if s.is_finite() && s > 0.0 {
        Ok(s)
    } else {
        Err(format!("argument {i}: scale {s} is not positive"))
    }
}

/// An `i8` zero point (or clamp bound) argument.
fn quantum(ctx: &OpCtx<'_>, i: usize) -> Result<i32, String> {
    let q = ctx.int(i)?;
    i8::try_from(q)
        .map(i32::from)
        .map_err(|_| format!("argument {i}: {q} is not an int8 quantum"))
}

fn quant_tokens(scale: f32, zero_point: i32) -> TokenStream {
    let s = f32_lit(scale);
    quote!(::ptec_runtime::kernels::qs8::Quant { scale: #s, zero_point: #zero_point })
}

/// The tail of a call (see [`qs8::TAIL`]): the first input's
/// quantization, the output's with its clamp, and the output tensor.
struct Tail {
    x: (f32, i32),
    y: TokenStream,
    out: TArg,
}

fn tail(ctx: &OpCtx<'_>) -> Result<Tail, String> {
    let at = ctx.args.len().checked_sub(qs8::TAIL).ok_or("too few arguments")?;
    let (x, y) = quantizations(ctx, at)?;
    Ok(Tail {
        x,
        y,
        out: ctx.tensor(at + 6)?,
    })
}

/// The quantizations at `at`: the input's scale and zero point, then the
/// output's with its clamp (an `Output` expression).
fn quantizations(ctx: &OpCtx<'_>, at: usize) -> Result<((f32, i32), TokenStream), String> {
    let x = (scale(ctx, at)?, quantum(ctx, at + 1)?);
    let (s, zp) = (scale(ctx, at + 2)?, quantum(ctx, at + 3)?);
    let (qmin, qmax) = (quantum(ctx, at + 4)?, quantum(ctx, at + 5)?);
    if qmin > qmax {
        return Err(format!("output range [{qmin}, {qmax}] is empty"));
    }
    let sl = f32_lit(s);
    let y = quote! {
        ::ptec_runtime::kernels::qs8::Output { scale: #sl, zero_point: #zp, qmin: #qmin, qmax: #qmax }
    };
    Ok((x, y))
}

/// `quantize(x, scale, zero_point, out)`: `f32` to `i8`.
fn quantize(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    convert(ctx, ScalarType::Float, ScalarType::Char, quote!(quantize))
}

/// `dequantize(q, scale, zero_point, out)`: `i8` to `f32`.
fn dequantize(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    convert(ctx, ScalarType::Char, ScalarType::Float, quote!(dequantize))
}

fn lut_hardswish(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    lut(ctx, scalar::hardswish::<f32>)
}

fn lut_sigmoid(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    lut(ctx, scalar::sigmoid::<f32>)
}

fn lut_tanh(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    lut(ctx, scalar::tanh::<f32>)
}

/// The two rounded steps of the `sigmoid` and the `mul` it replaces.
fn lut_sigmoid_mul(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    lut(ctx, |a| a * scalar::sigmoid(a))
}

/// `lut_NAME(q, in_scale, in_zero_point, out_scale, out_zero_point,
/// out)`: the table of the 256 inputs, made here by the kernels the
/// dequantize, the element-wise `f` and the quantize run (so the outputs
/// are theirs to the bit), looked up.
fn lut(ctx: &mut OpCtx<'_>, f: fn(f32) -> f32) -> Result<TokenStream, String> {
    use ptec_runtime::kernels::qs8;
    ctx.arity(6)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(5)?);
    static_of(&[&x, &out], ScalarType::Char)?;
    require_sizes(&out, &x.sizes)?;
    let q = |scale: f32, zero_point: i32| qs8::Quant { scale, zero_point };
    let (q_in, q_out) = (q(scale(ctx, 1)?, quantum(ctx, 2)?), q(scale(ctx, 3)?, quantum(ctx, 4)?));
    let inputs: [i8; 256] = core::array::from_fn(|i| i as u8 as i8);
    let mut floats = [0f32; 256];
    qs8::dequantize(&inputs, &q_in, &mut floats);
    let floats = floats.map(f);
    let mut table = [0i8; 256];
    qs8::quantize(&floats, &q_out, &mut table);
    let (xi, s1) = ctx.read(&x)?;
    let (oi, s2) = ctx.write(&out)?;
    Ok(quote! {
        #s1 #s2
        static TABLE: [i8; 256] = [#(#table),*];
        ::ptec_runtime::kernels::qs8::lut(#xi, &TABLE, #oi);
    })
}

/// A conversion `(x, scale, zero_point, out)` from `from` to `to` by the
/// `qs8` kernel `kernel`.
fn convert(ctx: &mut OpCtx<'_>, from: ScalarType, to: ScalarType, kernel: TokenStream) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(3)?);
    static_of(&[&x], from)?;
    static_of(&[&out], to)?;
    require_sizes(&out, &x.sizes)?;
    let q = quant_tokens(scale(ctx, 1)?, quantum(ctx, 2)?);
    let (xi, s1) = ctx.read(&x)?;
    let (oi, s2) = ctx.write(&out)?;
    Ok(quote! { #s1 #s2 ::ptec_runtime::kernels::qs8::#kernel(#xi, &#q, #oi); })
}

/// A weight's scales: the `f32` tensor at argument `i` (one per output
/// channel), or the one scale at `i + 1`. Returns a slice expression and
/// its statement.
fn weight_scales(ctx: &mut OpCtx<'_>, i: usize, channels: usize) -> Result<(TokenStream, TokenStream), String> {
    match ctx.opt_tensor(i)? {
        Some(t) => {
            static_of(&[&t], ScalarType::Float)?;
            require_sizes(&t, &[channels])?;
            let (name, stmt) = ctx.read(&t)?;
            Ok((quote!(#name), stmt))
        }
        None => {
            let s = f32_lit(scale(ctx, i + 1)?);
            Ok((quote!(&[#s]), quote!()))
        }
    }
}

/// The optional `i32` bias at argument `i`, of `n` elements.
fn bias(ctx: &mut OpCtx<'_>, i: usize, n: usize) -> Result<(TokenStream, TokenStream), String> {
    let b = ctx.opt_tensor(i)?;
    if let Some(b) = &b {
        static_of(&[b], ScalarType::Int)?;
        if b.numel() != n {
            return Err(format!("the bias does not have {n} elements"));
        }
    }
    super::conv::read_opt(ctx, &b)
}

/// `conv2d_nhwc(x, weight, bias?, weight_scales?, weight_scale, padding,
/// stride, dilation, groups, depthwise, <tail>)`.
fn conv2d_nhwc(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(11 + qs8::TAIL)?;
    let x = ctx.tensor(0)?;
    let out = ctx.tensor(11 + qs8::TAIL - 1)?;
    static_of(&[&x, &out], ScalarType::Char)?;
    let c = conv_stage(ctx, &x.sizes, 0)?;
    require_sizes(&out, &c.g.output_sizes())?;
    let ConvStage {
        g,
        depthwise,
        xq,
        y,
        ws,
        bi,
        stmts,
        ..
    } = &c;
    let geometry = super::xnnpack::conv_tokens(g);
    let (xi, s2) = ctx.read(&x)?;
    let (wi, pi, s3) = conv_filter(ctx, &c, quote!(&geometry))?;
    let (oi, s4) = ctx.write(&out)?;
    Ok(quote! {
        let geometry = #geometry;
        #stmts #s2 #s3 #s4
        ::ptec_runtime::kernels::qs8::conv2d_nhwc(&geometry, #depthwise, #xi, &#xq, #wi, #ws, #bi, #pi, &#y, #oi);
    })
}

/// `conv2d_chain(x, <the 16 arguments of a conv2d_nhwc from its weight
/// to its qmax> for each of 2 or 3 convolutions, out)`: an int8 inverted
/// residual block's convolutions, run band by band (see
/// [`crate::passes::qs8_chains`]).
fn conv2d_chain(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    let count = ctx.args.len().saturating_sub(2) / qs8::CHAIN_STAGE_ARGS;
    if !(2..=3).contains(&count) {
        return Err(format!(
            "a chain of 2 or 3 convolutions has {} or {} arguments, not {}",
            2 + 2 * qs8::CHAIN_STAGE_ARGS,
            2 + 3 * qs8::CHAIN_STAGE_ARGS,
            ctx.args.len()
        ));
    }
    ctx.arity(2 + count * qs8::CHAIN_STAGE_ARGS)?;
    let x = ctx.tensor(0)?;
    let out = ctx.tensor(1 + count * qs8::CHAIN_STAGE_ARGS)?;
    static_of(&[&x, &out], ScalarType::Char)?;
    let mut sizes = x.sizes.clone();
    let mut stages = Vec::with_capacity(count);
    for i in 0..count {
        let stage = conv_stage(ctx, &sizes, i * qs8::CHAIN_STAGE_ARGS)?;
        sizes = stage.g.output_sizes().to_vec();
        stages.push(stage);
    }
    require_sizes(&out, &sizes)?;
    let geometries: Vec<Conv2dNhwc> = stages.iter().map(|s| s.g).collect();
    let len = ptec_runtime::kernels::qs8::chain_scratch_len(&geometries)
        .ok_or_else(|| format!("convolutions {geometries:?} cannot run as a chain"))?;
    // The kernel takes the depthwise stage from the geometries: each
    // stage's filter must be laid out as its geometry says.
    let depthwise_at = usize::from(count == 3 || !stages[0].depthwise);
    if stages
        .iter()
        .enumerate()
        .any(|(i, s)| s.depthwise != (i == depthwise_at))
    {
        return Err("a chain's middle (or only depthwise) convolution alone is depthwise".into());
    }
    let (xi, s1) = ctx.read(&x)?;
    let mut stmts = quote!();
    let mut views = Vec::with_capacity(count);
    for s in &stages {
        let geometry = super::xnnpack::conv_tokens(&s.g);
        let (wi, pi, filter) = conv_filter(ctx, s, quote!(&#geometry))?;
        let ConvStage { xq, y, ws, bi, .. } = s;
        let own = &s.stmts;
        stmts.extend(quote!(#own #filter));
        views.push(quote! {
            ::ptec_runtime::kernels::qs8::ChainStage {
                g: &#geometry, w: #wi, w_scales: #ws, bias: #bi, packed: #pi, xq: #xq, y: #y,
            }
        });
    }
    let (oi, s2) = ctx.write(&out)?;
    let (sc, s3) = ctx.scratch_i8(len);
    Ok(quote! {
        #s1 #stmts #s2 #s3
        ::ptec_runtime::kernels::qs8::conv2d_chain(&[#(#views),*], #xi, #oi, #sc);
    })
}

/// A convolution's checked geometry and operands, its arguments from the
/// weight on at `at + 1` (a call's own, or a chain's stage's).
struct ConvStage {
    g: Conv2dNhwc,
    depthwise: bool,
    w: TArg,
    kept: Option<TArg>,
    /// The input's quantization, and the output's with its clamp.
    xq: TokenStream,
    y: TokenStream,
    /// Its weight scales and bias, as slice expressions.
    ws: TokenStream,
    bi: TokenStream,
    /// The statements that make them.
    stmts: TokenStream,
}

/// The convolution over an input of `input` sizes whose arguments start
/// at `at + 1` with its weight (see [`ConvStage`]).
fn conv_stage(ctx: &mut OpCtx<'_>, input: &[usize], at: usize) -> Result<ConvStage, String> {
    let w = ctx.tensor(at + qs8::CONV_WEIGHT)?;
    static_of(&[&w], ScalarType::Char)?;
    let (x, y) = quantizations(ctx, at + 11)?;
    let padding: [usize; 4] = fixed(ctx, at + 5)?;
    let (stride, dilation): ([usize; 2], [usize; 2]) = (fixed(ctx, at + 6)?, fixed(ctx, at + 7)?);
    let groups = usize::try_from(ctx.int(at + 8)?).map_err(|_| "negative groups")?;
    let depthwise = ctx.bool(at + 9)?;
    let g = if depthwise {
        Conv2dNhwc::depthwise(input, &w.sizes, stride, padding, dilation).filter(|g| g.groups == groups)
    } else {
        Conv2dNhwc::regular(input, &w.sizes, stride, padding, dilation, groups)
    }
    .ok_or_else(|| {
        format!(
            "convolution of {input:?} with filter {:?} (stride {stride:?}, padding {padding:?}, dilation {dilation:?}, {groups} groups) is invalid",
            w.sizes
        )
    })?;
    let (ws, s0) = weight_scales(ctx, at + 3, g.out_c)?;
    let (bi, s1) = bias(ctx, at + 2, g.out_c)?;
    let kept = ctx.opt_tensor(at + qs8::CONV_KEPT)?;
    if depthwise && kept.is_some() {
        return Err("a depthwise convolution keeps no packed filter".into());
    }
    Ok(ConvStage {
        g,
        depthwise,
        w,
        kept,
        xq: quant_tokens(x.0, x.1),
        y,
        ws,
        bi,
        stmts: quote!(#s0 #s1),
    })
}

/// A convolution's filter as its call reads it, and its packing (or
/// `None`), made at compile time or on the first run; `geometry`, an
/// expression of its `&Conv2dNhwc`.
fn conv_filter(
    ctx: &mut OpCtx<'_>,
    c: &ConvStage,
    geometry: TokenStream,
) -> Result<(Ident, TokenStream, TokenStream), String> {
    let (g, w, kept) = (c.g, &c.w, &c.kept);
    let layout = ptec_runtime::kernels::qs8::Layout::conv(&g);
    let (wi, s3) = read_weight(ctx, w, kept)?;
    let (pi, s5) = packed(
        ctx,
        kept,
        w,
        layout.packed_len(),
        |ctx, into| {
            let w = constant_i8(ctx, w)?;
            ptec_runtime::kernels::qs8::pack_conv(&g, &w, into);
            Ok(())
        },
        |kept| quote!(::ptec_runtime::kernels::qs8::pack_conv(#geometry, #wi, #kept);),
    )?;
    Ok((wi, pi, quote!(#s3 #s5)))
}

/// The weight `w` as a call reads it: not at all when its packing `kept`
/// is made at compile time.
fn read_weight(ctx: &mut OpCtx<'_>, w: &TArg, kept: &Option<TArg>) -> Result<(Ident, TokenStream), String> {
    if kept.as_ref().is_some_and(|k| ctx.is_prepared(k)) {
        let name = ctx.fresh("unread");
        return Ok((name.clone(), quote!(let #name: &[i8] = &[];)));
    }
    ctx.read(w)
}

/// The `i8` elements of the embedded constant `t`, at compile time.
fn constant_i8(ctx: &OpCtx<'_>, t: &TArg) -> Result<Vec<i8>, String> {
    Ok(ctx.constant_bytes(t)?.into_iter().map(|b| b as i8).collect())
}

/// The kept packing of a layer (`len` floats), prepared by `prepare` at
/// compile time or by `at_run_time` on the first run.
fn packed(
    ctx: &mut OpCtx<'_>,
    kept: &Option<TArg>,
    w: &TArg,
    len: usize,
    prepare: impl FnOnce(&OpCtx<'_>, &mut [f32]) -> Result<(), String>,
    at_run_time: impl FnOnce(&Ident) -> TokenStream,
) -> Result<(TokenStream, TokenStream), String> {
    if let Some(k) = kept {
        if k.dtype != ScalarType::Float || k.numel() != len {
            return Err(format!("the kept operand does not hold {len} floats"));
        }
    }
    super::xnnpack::prepared_opt(ctx, kept, &[w], prepare, at_run_time)
}

/// `N` non-negative integers at argument `i`.
fn fixed<const N: usize>(ctx: &OpCtx<'_>, i: usize) -> Result<[usize; N], String> {
    let v = super::conv::usize_list(ctx, i)?;
    v.as_slice()
        .try_into()
        .map_err(|_| format!("argument {i} has {} items, expected {N}", v.len()))
}

/// `fully_connected(x, weight, bias?, weight_scales?, weight_scale,
/// weight_transposed, <tail>)`.
fn fully_connected(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(7 + qs8::TAIL)?;
    let (x, w) = (ctx.tensor(0)?, ctx.tensor(qs8::FC_WEIGHT)?);
    let t = tail(ctx)?;
    static_of(&[&x, &w, &t.out], ScalarType::Char)?;
    let transposed = ctx.bool(5)?;
    let k = *x.sizes.last().ok_or("a 0-d input")?;
    let n = match (&w.sizes[..], transposed) {
        (&[n, wk], false) | (&[wk, n], true) if wk == k => n,
        _ => return Err(format!("input {:?} and weight {:?} do not fit", x.sizes, w.sizes)),
    };
    if t.out.sizes.last() != Some(&n) || t.out.numel() != x.numel() / k.max(1) * n {
        return Err(format!(
            "output {:?} does not hold {} rows of {n}",
            t.out.sizes,
            x.numel() / k.max(1)
        ));
    }
    let (ws, s0) = weight_scales(ctx, 3, n)?;
    let (bi, s1) = bias(ctx, 2, n)?;
    let xq = quant_tokens(t.x.0, t.x.1);
    let y = t.y;
    let kept = ctx.opt_tensor(qs8::FC_KEPT)?;
    let (kl, nl) = (lit(k), lit(n));
    let (xi, s2) = ctx.read(&x)?;
    let (wi, s3) = read_weight(ctx, &w, &kept)?;
    let (pi, s5) = packed(
        ctx,
        &kept,
        &w,
        ptec_runtime::kernels::qs8::Layout::fully_connected(k, n).packed_len(),
        |ctx, into| {
            let w = constant_i8(ctx, &w)?;
            ptec_runtime::kernels::qs8::pack_fully_connected(&w, k, n, transposed, into);
            Ok(())
        },
        |kept| quote!(::ptec_runtime::kernels::qs8::pack_fully_connected(#wi, #kl, #nl, #transposed, #kept);),
    )?;
    let (oi, s4) = ctx.write(&t.out)?;
    Ok(quote! {
        #s0 #s1 #s2 #s3 #s5 #s4
        ::ptec_runtime::kernels::qs8::fully_connected(#xi, &#xq, #wi, #ws, #transposed, #bi, #kl, #nl, #pi, &#y, #oi);
    })
}

/// The window of a pooling call over `x`.
fn window(
    x: &TArg,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 4],
    dilation: [usize; 2],
) -> Result<Window2d, String> {
    let [n, h, w, _] = x.sizes[..] else {
        return Err(format!("input {:?} is not [N, H, W, C]", x.sizes));
    };
    Window2d::new(n, h, w, kernel, stride, padding, dilation).ok_or_else(|| {
        format!(
            "pooling of {:?} with window {kernel:?} (stride {stride:?}, padding {padding:?}, dilation {dilation:?}) is invalid",
            x.sizes
        )
    })
}

/// `max_pool2d_nhwc(x, kernel, stride, padding, dilation, <tail>)`.
fn max_pool2d_nhwc(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5 + qs8::TAIL)?;
    let x = ctx.tensor(0)?;
    let t = tail(ctx)?;
    static_of(&[&x, &t.out], ScalarType::Char)?;
    let win = window(&x, fixed(ctx, 1)?, fixed(ctx, 2)?, fixed(ctx, 3)?, fixed(ctx, 4)?)?;
    let c = x.sizes[3];
    require_sizes(&t.out, &[win.batch, win.out_h, win.out_w, c])?;
    let wt = super::xnnpack::window_tokens(&win);
    let (y, cl) = (t.y, lit(c));
    let (xi, s1) = ctx.read(&x)?;
    let (oi, s2) = ctx.write(&t.out)?;
    Ok(quote! { #s1 #s2 ::ptec_runtime::kernels::qs8::max_pool2d_nhwc(&#wt, #cl, #xi, &#y, #oi); })
}

/// `global_avg_pool2d_nhwc(x, <tail>)`.
fn global_avg_pool2d_nhwc(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(1 + qs8::TAIL)?;
    let x = ctx.tensor(0)?;
    let t = tail(ctx)?;
    static_of(&[&x, &t.out], ScalarType::Char)?;
    let [n, h, w, c] = x.sizes[..] else {
        return Err(format!("input {:?} is not [N, H, W, C]", x.sizes));
    };
    if t.out.numel() != n * c || t.out.sizes.last() != Some(&c) {
        return Err(format!("output {:?} does not hold {n} × {c} means", t.out.sizes));
    }
    let (xq, y) = (quant_tokens(t.x.0, t.x.1), t.y);
    let (nl, pl, cl) = (lit(n), lit(h * w), lit(c));
    let (xi, s1) = ctx.read(&x)?;
    let (oi, s2) = ctx.write(&t.out)?;
    Ok(quote! {
        #s1 #s2
        ::ptec_runtime::kernels::qs8::global_avg_pool_nhwc(#nl, #pl, #cl, #xi, &#xq, &#y, #oi);
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Binary {
    Add,
    Sub,
    Mul,
}

/// `add`, `sub` or `mul(a, b, b_scale, b_zero_point, <tail>)`, broadcast:
/// each element pair goes through the operation's parameters, computed
/// here.
fn binary(ctx: &mut OpCtx<'_>, op: Binary) -> Result<TokenStream, String> {
    ctx.arity(4 + qs8::TAIL)?;
    let (a, b) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let t = tail(ctx)?;
    static_of(&[&a, &b, &t.out], ScalarType::Char)?;
    let (bs, bz) = (scale(ctx, 2)?, quantum(ctx, 3)?);
    let at = ctx.args.len() - qs8::TAIL;
    let (ys, yz, qmin, qmax) = (
        scale(ctx, at + 2)?,
        quantum(ctx, at + 3)?,
        quantum(ctx, at + 4)?,
        quantum(ctx, at + 5)?,
    );
    let q = |s: f32, z: i32| ptec_runtime::kernels::qs8::Quant {
        scale: s,
        zero_point: z,
    };
    let y = ptec_runtime::kernels::qs8::Output {
        scale: ys,
        zero_point: yz,
        qmin,
        qmax,
    };
    let body = if op == Binary::Mul {
        let p = ptec_runtime::kernels::qs8::MulParams::new(&q(t.x.0, t.x.1), &q(bs, bz), &y);
        let (az, bz, scale, yz, lo, hi) = (
            p.a_zero_point,
            p.b_zero_point,
            f32_lit(p.scale),
            p.y.zero_point,
            p.y.qmin,
            p.y.qmax,
        );
        let ysl = f32_lit(p.y.scale);
        quote! {
            ::ptec_runtime::kernels::qs8::MulParams {
                a_zero_point: #az, b_zero_point: #bz, scale: #scale,
                y: ::ptec_runtime::kernels::qs8::Output { scale: #ysl, zero_point: #yz, qmin: #lo, qmax: #hi },
            }.apply(a, b)
        }
    } else {
        let p = ptec_runtime::kernels::qs8::AddParams::new(&q(t.x.0, t.x.1), &q(bs, bz), &y, op == Binary::Sub)
            .ok_or_else(|| {
                format!(
                    "input scales {} and {bs} against output scale {ys} are out of XNNPACK's range",
                    t.x.0
                )
            })?;
        let (bias, am, bm, shift, yz, lo, hi) = (
            p.bias,
            p.a_multiplier,
            p.b_multiplier,
            p.shift,
            p.zero_point,
            p.qmin,
            p.qmax,
        );
        quote! {
            ::ptec_runtime::kernels::qs8::AddParams {
                bias: #bias, a_multiplier: #am, b_multiplier: #bm, shift: #shift,
                zero_point: #yz, qmin: #lo, qmax: #hi,
            }.apply(a, b)
        }
    };
    let c = ScalarType::Char;
    super::elementwise::emit_map(ctx, &[&a, &b], &t.out, &[c, c], c, body, false)
}

fn add(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary(ctx, Binary::Add)
}

fn sub(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary(ctx, Binary::Sub)
}

fn mul(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary(ctx, Binary::Mul)
}

/// `qd8_fully_connected(x, weight, scales, group, bias?, min, max, kept?,
/// out)`: the input's rows may vary at run time (the output follows them).
/// A blockwise layer's `kept` holds its weight sums, made at compile time
/// when the weights are embedded, else on the first run.
fn qd8_fully_connected(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    qd8_layer(ctx, false)
}

/// `qd8_fully_connected_shared(x, weight, scales, group, bias?, min, max,
/// kept, rows, fresh, out)`: as [`qd8_fully_connected`], its quantized rows
/// in `rows`, made here if `fresh`, else by the call before it.
fn qd8_fully_connected_shared(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    qd8_layer(ctx, true)
}

/// A dynamically quantized layer, whose quantized rows are `shared`
/// (`qd8_fully_connected_shared`) or its own scratch.
fn qd8_layer(ctx: &mut OpCtx<'_>, shared: bool) -> Result<TokenStream, String> {
    use qd8_fully_connected::{KEPT, SCALES, WEIGHT};
    use qd8_fully_connected_shared::{FRESH, ROWS};
    let count = match shared {
        true => qd8_fully_connected_shared::COUNT,
        false => qd8_fully_connected::COUNT,
    };
    ctx.arity(count)?;
    let (x, w, scales, bias, kept, out) = (
        ctx.tensor(0)?,
        ctx.tensor(WEIGHT)?,
        ctx.tensor(SCALES)?,
        ctx.opt_tensor(4)?,
        ctx.opt_tensor(KEPT)?,
        ctx.tensor(count - 1)?,
    );
    let group = usize::try_from(ctx.int(3)?).map_err(|_| "negative group")?;
    let (min, max) = (ctx.double(5)? as f32, ctx.double(6)? as f32);
    if min.partial_cmp(&max).is_none_or(|o| o.is_gt()) {
        return Err(format!("output range [{min}, {max}] is empty"));
    }
    if x.dynamic != out.dynamic {
        return Err(format!("value {} and value {} differ in dynamism", x.value, out.value));
    }
    require_contiguous(&[&x, &out])?;
    require_dtype(&x, &[ScalarType::Float])?;
    require_dtype(&out, &[ScalarType::Float])?;
    let k = *x.sizes.last().ok_or("the input is 0-d")?;
    let [n, wk] = w.sizes[..] else {
        return Err(format!("weight {:?} is not a matrix", w.sizes));
    };
    let kind = match (w.dtype, scales.dtype) {
        (ScalarType::Char, ScalarType::Float) if group == 0 && wk == k => quote!(Channelwise8),
        (ScalarType::Byte, ScalarType::Float) if group == 0 && k % 2 == 0 && wk == k / 2 => quote!(Channelwise4),
        (ScalarType::Byte, ScalarType::BFloat16) if group > 0 && k % group == 0 && group % 2 == 0 && wk == k / 2 => {
            quote!(Blockwise4)
        }
        _ => {
            return Err(format!(
                "weight {:?} of {} with {} scales (group {group}) does not fit {k} inputs",
                w.sizes, w.dtype, scales.dtype
            ))
        }
    };
    let want_scales = n * k.checked_div(group).unwrap_or(1);
    for t in [&w, &scales] {
        static_of(&[t], t.dtype)?;
    }
    if scales.numel() != want_scales {
        return Err(format!("{} scales, {want_scales} expected", scales.numel()));
    }
    if let Some(b) = &bias {
        static_of(&[b], ScalarType::Float)?;
        if b.numel() != n {
            return Err(format!("the bias does not have {n} elements"));
        }
    }
    let m = x.numel() / k.max(1);
    if out.sizes.last() != Some(&n) || out.numel() != m * n {
        return Err(format!("output {:?} is not {m} rows of {n}", out.sizes));
    }
    let (xi, s1) = ctx.read(&x)?;
    let (wi, s2) = ctx.read(&w)?;
    let (si, s3) = ctx.read(&scales)?;
    let (bi, s4) = super::conv::read_opt(ctx, &bias)?;
    let (ml, set) = product_rows(ctx, &x, &out, k, n)?;
    let (o, s5) = ctx.write(&out)?;
    let (kl, nl, gl) = (lit(k), lit(n), lit(group));
    let rows_len = ptec_runtime::kernels::qd8::scratch_len(m, k, group);
    // The quantized rows: this call's scratch, or the shared tensor,
    // written if this call makes them.
    let (fresh, (sc, s6)) = if shared {
        let (rows, fresh) = (ctx.tensor(ROWS)?, ctx.bool(FRESH)?);
        static_of(&[&rows], ScalarType::Float)?;
        if rows.numel() < rows_len {
            return Err(format!("the rows tensor holds {} floats of {rows_len}", rows.numel()));
        }
        (fresh, if fresh { ctx.write(&rows)? } else { ctx.read(&rows)? })
    } else {
        let len = quote!(::ptec_runtime::kernels::qd8::scratch_len(#ml, #kl, #gl));
        (true, ctx.scratch_f32(len, rows_len))
    };
    let (weights, s7) = if group == 0 {
        if kept.is_some() {
            return Err("a per-channel layer keeps nothing".into());
        }
        let weights = quote!(::ptec_runtime::kernels::qd8::Weights::#kind { w: #wi, scales: #si });
        (weights, quote!())
    } else {
        if kept
            .as_ref()
            .is_some_and(|t| t.dtype != ScalarType::Float || t.numel() != blockwise_kept_len(k, n, group))
        {
            return Err(format!(
                "the kept operand does not hold {} floats",
                blockwise_kept_len(k, n, group)
            ));
        }
        let (pi, s7) = super::xnnpack::prepared_opt(
            ctx,
            &kept,
            &[&w, &scales],
            |ctx, into| {
                let (wb, sb) = (ctx.constant_bytes(&w)?, ctx.constant_bytes(&scales)?);
                let s: Vec<bf16> = sb
                    .chunks_exact(2)
                    .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                    .collect();
                prepare_blockwise(&wb, &s, group, k, n, into);
                Ok(())
            },
            |kept| quote!(::ptec_runtime::kernels::qd8::prepare_blockwise(#wi, #si, #gl, #kl, #nl, #kept);),
        )?;
        let weights =
            quote!(::ptec_runtime::kernels::qd8::Weights::#kind { w: #wi, scales: #si, group: #gl, kept: #pi });
        (weights, s7)
    };
    let (minl, maxl) = (f32_lit(min), f32_lit(max));
    let quantize = match (shared, fresh) {
        (false, _) => quote! {
            ::ptec_runtime::kernels::qd8::fully_connected(#xi, #ml, #kl, #nl, &#weights, #bi, #minl, #maxl, #sc, #o);
        },
        (true, true) => quote! {
            ::ptec_runtime::kernels::qd8::quantize_rows(#xi, #ml, #kl, #nl, &#weights, #sc);
            ::ptec_runtime::kernels::qd8::fully_connected_quantized(#ml, #kl, #nl, &#weights, #bi, #minl, #maxl, #sc, #o);
        },
        (true, false) => quote! {
            let _ = #xi;
            ::ptec_runtime::kernels::qd8::fully_connected_quantized(#ml, #kl, #nl, &#weights, #bi, #minl, #maxl, #sc, #o);
        },
    };
    Ok(quote! {
        #set #s1 #s2 #s3 #s4 #s5 #s6 #s7
        #quantize
    })
}
