//! ptec's own operators for lowered XNNPACK subgraphs (`ptec_xnn::*`):
//! what XNNPACK nodes compute that no aten operator computes the same way
//! — convolution and pooling over NHWC images, outputs clamped to a fused
//! `[output_min, output_max]`, fully connected with either weight layout,
//! batch matrix products with broadcast batches. The XNNPACK lowering
//! (`crate::passes::xnnpack`) is what calls them; they are not in the portable
//! operator [`registry`](super::registry), only found by
//! [`lookup`](super::lookup).
//!
//! Arguments follow the aten convention (inputs, then parameters as
//! constant values, the out tensor last, which is not repeated as a
//! return). Every tensor is a static, contiguous `f32` tensor.
use super::conv::usize_list;
use super::*;
use crate::names::{
    conv2d_nhwc, folded, fully_connected, AVG_POOL2D_NHWC, BATCH_MATMUL, CONV2D_FOLDED_CHAIN, DECONV2D_NHWC,
    DEPTHWISE_CONV2D_NHWC, GLOBAL_AVG_POOL2D_NHWC, MAX_POOL2D_NHWC, PRELU,
};
use ptec_runtime::kernels::gemm::gemm_scratch_len;
use ptec_runtime::kernels::gemm::packed_len;
use ptec_runtime::kernels::nhwc::{Algorithm, BatchNormFold, Conv2dNhwc, Deconv2dNhwc, FoldedConv, Window2d};

pub const OPS: &[(&str, Emitter)] = &[
    (fully_connected::NAME, fully_connected),
    (conv2d_nhwc::NAME, conv2d_nhwc),
    (folded::NAME, conv2d_folded),
    (CONV2D_FOLDED_CHAIN, conv2d_folded_chain),
    (DEPTHWISE_CONV2D_NHWC, depthwise_conv2d_nhwc),
    (DECONV2D_NHWC, deconv2d_nhwc),
    (MAX_POOL2D_NHWC, max_pool2d_nhwc),
    (AVG_POOL2D_NHWC, avg_pool2d_nhwc),
    (GLOBAL_AVG_POOL2D_NHWC, global_avg_pool2d_nhwc),
    (BATCH_MATMUL, batch_matmul),
    (PRELU, prelu),
];

/// `prelu(x, slope, out)`: `x` where it is not negative, else `x × slope`
/// (a NaN stays NaN either way).
fn prelu(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, slope, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    f32_static(&[&x, &slope, &out])?;
    let f = ScalarType::Float;
    let body = quote!(if a < 0.0 { a * b } else { a });
    super::elementwise::emit_map(ctx, &[&x, &slope], &out, &[f, f], f, body, false)
}

/// Requires static, contiguous `f32` tensors.
fn f32_static(ts: &[&TArg]) -> Result<(), String> {
    require_contiguous(ts)?;
    for t in ts {
        require_dtype(t, &[ScalarType::Float])?;
        if t.dynamic {
            return Err(format!("value {} has a dynamic shape", t.value));
        }
    }
    Ok(())
}

/// The output clamp from arguments `i` and `i + 1`, as literals.
fn bounds(ctx: &OpCtx<'_>, i: usize) -> Result<(TokenStream, TokenStream), String> {
    let (min, max) = (ctx.double(i)? as f32, ctx.double(i + 1)? as f32);
    // Rejects NaN bounds too.
    if min.partial_cmp(&max).is_none_or(|o| o.is_gt()) {
        return Err(format!("output range [{min}, {max}] is empty"));
    }
    Ok((f32_lit(min), f32_lit(max)))
}

/// A constant list of exactly `N` non-negative integers.
fn array<const N: usize>(ctx: &OpCtx<'_>, i: usize) -> Result<[usize; N], String> {
    let v = usize_list(ctx, i)?;
    v.as_slice()
        .try_into()
        .map_err(|_| format!("argument {i} has {} items, expected {N}", v.len()))
}

/// A view of an optional tensor: `Some(name)` / `None`, and its statement.
fn read_opt(ctx: &mut OpCtx<'_>, t: &Option<TArg>) -> Result<(TokenStream, TokenStream), String> {
    super::conv::read_opt(ctx, t)
}

/// A scratch slice of `len` floats (`&mut []` when none is needed).
fn scratch(ctx: &mut OpCtx<'_>, len: usize) -> (TokenStream, TokenStream) {
    if len == 0 {
        return (quote!(&mut []), quote!());
    }
    let (name, stmt) = ctx.scratch_f32(lit(len), len);
    (quote!(#name), stmt)
}

pub(super) fn window_tokens(w: &Window2d) -> TokenStream {
    let fields = [
        w.batch,
        w.in_h,
        w.in_w,
        w.out_h,
        w.out_w,
        w.kernel_h,
        w.kernel_w,
        w.stride_h,
        w.stride_w,
        w.dilation_h,
        w.dilation_w,
        w.pad_top,
        w.pad_left,
    ]
    .map(lit);
    let [batch, in_h, in_w, out_h, out_w, kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left] =
        fields;
    quote! {
        ::ptec_runtime::kernels::nhwc::Window2d {
            batch: #batch, in_h: #in_h, in_w: #in_w, out_h: #out_h, out_w: #out_w,
            kernel_h: #kernel_h, kernel_w: #kernel_w, stride_h: #stride_h, stride_w: #stride_w,
            dilation_h: #dilation_h, dilation_w: #dilation_w, pad_top: #pad_top, pad_left: #pad_left,
        }
    }
}

pub(super) fn conv_tokens(g: &Conv2dNhwc) -> TokenStream {
    let window = window_tokens(&g.window);
    let (in_c, out_c, groups) = (lit(g.in_c), lit(g.out_c), lit(g.groups));
    quote! {
        ::ptec_runtime::kernels::nhwc::Conv2dNhwc { window: #window, in_c: #in_c, out_c: #out_c, groups: #groups }
    }
}

/// `fully_connected.out(input, weight, bias?, weight_transposed, output_min,
/// output_max, packed?, out)`: `out[.., n] = clamp(input[.., k] · Wᵀ +
/// bias)` with `W` `[n, k]`, or `[k, n]` when `weight_transposed`.
/// `packed`, when given, keeps the packed weight between runs (it must
/// belong to this call alone).
fn fully_connected(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    use fully_connected::{BIAS, COUNT, KEPT, MIN, OUT, TRANSPOSED, WEIGHT, X};
    ctx.arity(COUNT)?;
    let (x, w, bias, packed, out) = (
        ctx.tensor(X)?,
        ctx.tensor(WEIGHT)?,
        ctx.opt_tensor(BIAS)?,
        ctx.opt_tensor(KEPT)?,
        ctx.tensor(OUT)?,
    );
    let transposed = ctx.bool(TRANSPOSED)?;
    let (min, max) = bounds(ctx, MIN)?;
    // The input's rows may vary (XNNPACK reshapes at run time); the output
    // follows them.
    if x.dynamic != out.dynamic {
        return Err(format!("value {} and value {} differ in dynamism", x.value, out.value));
    }
    let (xd, od) = (
        TArg {
            dynamic: false,
            ..x.clone()
        },
        TArg {
            dynamic: false,
            ..out.clone()
        },
    );
    let mut all = vec![&xd, &w, &od];
    all.extend(bias.as_ref());
    all.extend(packed.as_ref());
    f32_static(&all)?;
    let k = *x.sizes.last().ok_or("the input is 0-d")?;
    let (n, wk) = match (w.sizes.as_slice(), transposed) {
        (&[n, wk], false) | (&[wk, n], true) => (n, wk),
        _ => return Err(format!("weight {:?} is not a matrix", w.sizes)),
    };
    if wk != k || bias.as_ref().is_some_and(|b| b.numel() != n) {
        return Err(format!(
            "input {:?} and weight {:?} (or the bias) do not fit",
            x.sizes, w.sizes
        ));
    }
    let m = x.numel() / k.max(1);
    if out.sizes.last() != Some(&n) || out.numel() != m * n {
        return Err(format!("output {:?} is not {m} rows of {n}", out.sizes));
    }
    check_packed(&packed, packed_len(k, n))?;
    let (xi, s1) = ctx.read(&x)?;
    let (wi, s2) = ctx.read_if_needed(&w, !is_prepared(ctx, &packed))?;
    let (bi, s3) = read_opt(ctx, &bias)?;
    let (pi, s4) = prepared_opt(
        ctx,
        &packed,
        &[&w],
        |ctx, into| {
            let w = ctx.constant_f32(&w)?;
            ptec_runtime::kernels::linear::pack_fully_connected(&w, k, n, transposed, into);
            Ok(())
        },
        |kept| {
            let (kl, nl) = (lit(k), lit(n));
            quote!(::ptec_runtime::kernels::linear::pack_fully_connected(#wi, #kl, #nl, #transposed, #kept);)
        },
    )?;
    let (ml, set) = product_rows(ctx, &x, &out, k, n)?;
    let (o, s5) = ctx.write(&out)?;
    let (sc, s6) = scratch(ctx, if packed.is_some() { 0 } else { gemm_scratch_len(m, n, k) });
    let (kl, nl) = (lit(k), lit(n));
    Ok(quote! {
        #set #s1 #s2 #s3 #s4 #s5 #s6
        ::ptec_runtime::kernels::linear::fully_connected(#xi, #wi, #bi, #ml, #kl, #nl, #transposed, #min, #max, #pi, #o, #sc);
    })
}

/// Requires a kept packed operand to hold at least `len` floats.
fn check_packed(packed: &Option<TArg>, len: usize) -> Result<(), String> {
    match packed {
        Some(p) if p.numel() < len => Err(format!(
            "the packed operand (value {}) has {} elements, the packing needs {len}",
            p.value,
            p.numel()
        )),
        _ => Ok(()),
    }
}

/// Whether the optional kept tensor `kept` is given and prepared at compile
/// time: its call then reads nothing it was prepared from.
fn is_prepared(ctx: &OpCtx<'_>, kept: &Option<TArg>) -> bool {
    kept.as_ref().is_some_and(|k| ctx.is_prepared(k))
}

/// The kept tensor `kept` as its call reads it, prepared: a `&[f32]`
/// expression and the statements it needs. When the compiler prepares it
/// (see `codegen::prepare`), `prepare` writes the preparation (into a
/// zeroed slice of the kept tensor's size) and the view reads the embedded
/// result; otherwise the view is the kept tensor itself, after the
/// statement `at_run_time(view)` prepares it (on the first run; later runs
/// find it prepared).
///
/// `sources` are the constants it is prepared from. The run that prepares
/// it at run time then lets go of their pages in a memory-mapped file
/// (`Blob::release`): the calls read the preparation, so the program does
/// not hold its weights twice.
fn prepared_view(
    ctx: &mut OpCtx<'_>,
    kept: &TArg,
    sources: &[&TArg],
    prepare: impl FnOnce(&OpCtx<'_>, &mut [f32]) -> Result<(), String>,
    at_run_time: impl FnOnce(&Ident) -> TokenStream,
) -> Result<(TokenStream, TokenStream), String> {
    if ctx.is_prepared(kept) {
        let mut floats = vec![0.0f32; kept.numel()];
        prepare(ctx, &mut floats)?;
        let (view, stmt) = ctx.read_prepared(kept, &floats)?;
        Ok((quote!(#view), stmt))
    } else {
        let (view, stmt) = ctx.write(kept)?;
        let prepare = at_run_time(&view);
        let release = ctx.release_files(sources);
        if release.is_empty() {
            return Ok((quote!(&*#view), quote!(#stmt #prepare)));
        }
        let fresh = ctx.fresh("fresh");
        Ok((
            quote!(&*#view),
            quote! {
                #stmt
                let #fresh = !::ptec_runtime::kernels::gemm::holds_stamp(#view);
                #prepare
                if #fresh { #release }
            },
        ))
    }
}

/// [`prepared_view`] of an optional kept tensor: `Some(view)` or `None`
/// as an `Option<&[f32]>` expression, and the statements it needs.
pub(super) fn prepared_opt(
    ctx: &mut OpCtx<'_>,
    kept: &Option<TArg>,
    sources: &[&TArg],
    prepare: impl FnOnce(&OpCtx<'_>, &mut [f32]) -> Result<(), String>,
    at_run_time: impl FnOnce(&Ident) -> TokenStream,
) -> Result<(TokenStream, TokenStream), String> {
    match kept {
        Some(k) => {
            let (view, stmts) = prepared_view(ctx, k, sources, prepare, at_run_time)?;
            Ok((quote!(Some(#view)), stmts))
        }
        None => Ok((quote!(None), quote!())),
    }
}

/// The convolution's operands, checked: input, filter, bias, output.
fn conv_operands(ctx: &OpCtx<'_>, out_arg: usize) -> Result<(TArg, TArg, Option<TArg>, TArg), String> {
    let (x, w, bias, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.opt_tensor(2)?, ctx.tensor(out_arg)?);
    let mut all = vec![&x, &w, &out];
    all.extend(bias.as_ref());
    f32_static(&all)?;
    Ok((x, w, bias, out))
}

/// Emits a checked convolution: the geometry, its output sizes and bias.
/// `packed`: the kept packed filter of a regular convolution, if any.
fn emit_conv(
    ctx: &mut OpCtx<'_>,
    g: Conv2dNhwc,
    operands: (TArg, TArg, Option<TArg>, TArg),
    bounds: (TokenStream, TokenStream),
    packed: Option<Option<TArg>>,
) -> Result<TokenStream, String> {
    let (x, w, bias, out) = operands;
    if bias.as_ref().is_some_and(|b| b.numel() != g.out_c) {
        return Err(format!("the bias does not have {} elements", g.out_c));
    }
    require_sizes(&out, &g.output_sizes())?;
    let (min, max) = bounds;
    let geometry = conv_tokens(&g);
    let (xi, s1) = ctx.read(&x)?;
    let (wi, s2) = ctx.read_if_needed(&w, !is_prepared(ctx, packed.as_ref().unwrap_or(&None)))?;
    let (bi, s3) = read_opt(ctx, &bias)?;
    let call = match packed {
        None => {
            let (o, s4) = ctx.write(&out)?;
            quote! { #s4 ::ptec_runtime::kernels::nhwc::depthwise_conv2d_nhwc(&geometry, #xi, #wi, #bi, #min, #max, #o); }
        }
        Some(packed) => {
            if let Some(p) = &packed {
                f32_static(&[p])?;
                if !g.keeps_packed_filter() {
                    return Err("a kept packed filter needs an ungrouped convolution or narrow groups".into());
                }
            }
            check_packed(&packed, g.packed_filter_len())?;
            let (pi, s4) = prepared_opt(
                ctx,
                &packed,
                &[&w],
                |ctx, into| {
                    g.pack_filter(&ctx.constant_f32(&w)?, into);
                    Ok(())
                },
                |kept| quote!(geometry.pack_filter(#wi, #kept);),
            )?;
            let (o, s5) = ctx.write(&out)?;
            let (sc, s6) = scratch(ctx, g.scratch_len(packed.is_some()));
            quote! { #s4 #s5 #s6 ::ptec_runtime::kernels::nhwc::conv2d_nhwc(&geometry, #xi, #wi, #bi, #min, #max, #pi, #o, #sc); }
        }
    };
    Ok(quote! {
        let geometry = #geometry;
        #s1 #s2 #s3
        #call
    })
}

/// `conv2d_nhwc.out(input, filter, bias?, padding, stride, dilation, groups,
/// output_min, output_max, packed?, out)`: input `[N, H, W, C]`, filter
/// `[O, kH, kW, C / groups]`, padding `[top, right, bottom, left]`.
/// `packed`, when given (ungrouped or narrow groups only: see
/// `Conv2dNhwc::keeps_packed_filter`), keeps the packed filter between runs
/// (it must belong to this call alone).
fn conv2d_nhwc(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    use conv2d_nhwc::{COUNT, DILATION, GROUPS, KEPT, MIN, OUT, PADDING, STRIDE};
    ctx.arity(COUNT)?;
    let operands = conv_operands(ctx, OUT)?;
    let (padding, stride, dilation) = (
        array::<4>(ctx, PADDING)?,
        array::<2>(ctx, STRIDE)?,
        array::<2>(ctx, DILATION)?,
    );
    let groups = super::conv::usize_arg(ctx, GROUPS)?;
    let b = bounds(ctx, MIN)?;
    let packed = ctx.opt_tensor(KEPT)?;
    let (x, w) = (&operands.0, &operands.1);
    let g = Conv2dNhwc::regular(&x.sizes, &w.sizes, stride, padding, dilation, groups).ok_or_else(|| {
        format!(
            "convolution of {:?} with filter {:?} (stride {stride:?}, padding {padding:?}, dilation {dilation:?}, {groups} groups) is invalid",
            x.sizes, w.sizes
        )
    })?;
    emit_conv(ctx, g, operands, b, Some(packed))
}

/// `conv2d_folded.out(input, weight, bias?, bn_weight?, bn_bias?,
/// bn_mean?, bn_var?, bn_eps?, padding, stride, dilation, groups,
/// output_min, output_max, residual?, kept, layout, activation, algorithm, out)`: an aten
/// convolution run on NHWC images (see [`crate::passes::channels_last`]). Input `[N, H, W, C]`,
/// weight in PyTorch's layout `[O, C / groups, kH, kW]`, ungrouped or
/// depthwise; an inference batch norm is folded in when `bn_mean` and
/// `bn_var` are given; `residual` (sized as `out`) is added before the
/// clamp, and `activation` (an integer: `folded::activation`) applied
/// last; `algorithm` (an integer: `folded::algorithm`) says how the
/// products run. `kept` ([`Conv2dNhwc::folded_len`] floats for that
/// algorithm, this call's alone) holds the prepared filter from run to run.
fn conv2d_folded(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(folded::COUNT)?;
    let x = ctx.tensor(folded::X)?;
    f32_static(&[&x])?;
    let conv = folded_conv(ctx, &x.sizes, folded::WEIGHT)?;
    let out = ctx.tensor(folded::OUT)?;
    f32_static(&[&out])?;
    require_sizes(&out, &conv.geometry.output_sizes())?;
    let (xi, s1) = ctx.read(&x)?;
    let (oi, s2) = ctx.write(&out)?;
    let (sc, s3) = scratch(ctx, conv.geometry.folded_scratch_len(conv.algorithm));
    let FoldedTokens { stmts, conv, kept, .. } = conv;
    Ok(quote! {
        #stmts #s1 #s2 #s3
        ::ptec_runtime::kernels::nhwc::conv2d_folded(&#conv, #xi, #kept, #oi, #sc);
    })
}

/// `conv2d_folded_chain.out(input, <the 18 arguments of a
/// conv2d_folded after its input> for each of 2 or 3 convolutions, out)`:
/// a pointwise then a depthwise convolution, a depthwise then a pointwise
/// one, or all three, each reading the previous one's result, run together
/// band by band (see [`crate::passes::conv_chains`]); only a last pointwise one
/// (a projection) may add a residual.
fn conv2d_folded_chain(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    let count = ctx.args.len().saturating_sub(2) / FOLDED_ARGS;
    if !(2..=3).contains(&count) {
        return Err(format!(
            "a chain of 2 or 3 convolutions has {} or {} arguments, not {}",
            2 + 2 * FOLDED_ARGS,
            2 + 3 * FOLDED_ARGS,
            ctx.args.len()
        ));
    }
    ctx.arity(1 + count * FOLDED_ARGS + 1)?;
    let x = ctx.tensor(0)?;
    f32_static(&[&x])?;
    let mut sizes = x.sizes.clone();
    let mut stages = Vec::with_capacity(count);
    for i in 0..count {
        let stage = folded_conv(ctx, &sizes, 1 + i * FOLDED_ARGS)?;
        sizes = stage.geometry.output_sizes().to_vec();
        stages.push(stage);
    }
    let out = ctx.tensor(1 + count * FOLDED_ARGS)?;
    f32_static(&[&out])?;
    require_sizes(&out, &stages[count - 1].geometry.output_sizes())?;
    let geometries: Vec<Conv2dNhwc> = stages.iter().map(|s| s.geometry).collect();
    let len = ::ptec_runtime::kernels::nhwc::chain_scratch_len(&geometries)
        .ok_or_else(|| format!("convolutions {geometries:?} cannot run as a chain"))?;
    let residual_at = stages.iter().position(|s| s.residual);
    if residual_at.is_some_and(|i| i + 1 < count || !::ptec_runtime::kernels::nhwc::chain_takes_residual(&geometries)) {
        return Err("only a chain's last convolution, a pointwise one, adds a residual".into());
    }
    let (xi, s1) = ctx.read(&x)?;
    let (oi, s2) = ctx.write(&out)?;
    // Every chain shares one thread scratch, each thread's buffers in its
    // own share (see `conv2d_folded_chain`).
    let (sc, s3) = ctx.thread_scratch_f32(len / ::ptec_runtime::kernels::nhwc::MAX_CHAIN_PARTS);
    let stmts = stages.iter().map(|s| &s.stmts);
    let convs = stages.iter().map(|s| &s.conv);
    let kept = stages.iter().map(|s| &s.kept);
    Ok(quote! {
        #(#stmts)* #s1 #s2 #s3
        ::ptec_runtime::kernels::nhwc::conv2d_folded_chain(&[#(#convs),*], &[#(#kept),*], #xi, #oi, #sc);
    })
}

/// Arguments of one folded convolution after its input (see
/// [`folded`]): weight, bias, four batch norm tensors and eps, padding,
/// stride, dilation, groups, the output range, residual, kept, layout,
/// activation, algorithm.
const FOLDED_ARGS: usize = folded::OUT - folded::WEIGHT;

/// A folded convolution's checked geometry and emitted operands.
struct FoldedTokens {
    geometry: Conv2dNhwc,
    /// How it runs its products (its kept filter is prepared for it).
    algorithm: Algorithm,
    /// Whether it adds a residual.
    residual: bool,
    /// The statements that make its views.
    stmts: TokenStream,
    /// The binding of its `FoldedConv`.
    conv: Ident,
    /// Its prepared filter: a `&[f32]` expression.
    kept: TokenStream,
}

/// The folded convolution whose [`FOLDED_ARGS`] arguments start at `first`
/// (the weight), reading an input of `input` sizes.
fn folded_conv(ctx: &mut OpCtx<'_>, input: &[usize], first: usize) -> Result<FoldedTokens, String> {
    let arg = |pos: usize| first + pos - folded::WEIGHT;
    let (w, bias) = (ctx.tensor(arg(folded::WEIGHT))?, ctx.opt_tensor(arg(folded::BIAS))?);
    let mut all = vec![&w];
    all.extend(bias.as_ref());
    f32_static(&all)?;
    let (padding, stride, dilation) = (
        array::<4>(ctx, arg(folded::PADDING))?,
        array::<2>(ctx, arg(folded::STRIDE))?,
        array::<2>(ctx, arg(folded::DILATION))?,
    );
    let groups = super::conv::usize_arg(ctx, arg(folded::GROUPS))?;
    let code = ctx.int(arg(folded::LAYOUT))?;
    let layout = folded::layout(code).ok_or_else(|| format!("{code} names no filter layout"))?;
    let code = ctx.int(arg(folded::ACTIVATION))?;
    let activation = folded::activation(code).ok_or_else(|| format!("{code} names no activation"))?;
    let code = ctx.int(arg(folded::ALGORITHM))?;
    let algorithm = folded::algorithm(code).ok_or_else(|| format!("{code} names no convolution algorithm"))?;
    let (min, max) = bounds(ctx, arg(folded::MIN))?;
    let residual = ctx.opt_tensor(arg(folded::RESIDUAL))?;
    let kept = ctx.tensor(arg(folded::KEPT))?;
    f32_static(&[&kept])?;
    let g = Conv2dNhwc::folded(layout, input, &w.sizes, stride, padding, dilation, groups).ok_or_else(|| {
        format!(
            "convolution of {input:?} with weight {:?} ({layout:?} layout, stride {stride:?}, padding {padding:?}, dilation {dilation:?}, {groups} groups) is invalid or neither ungrouped nor depthwise",
            w.sizes
        )
    })?;
    let o = g.out_c;
    if bias.as_ref().is_some_and(|b| b.numel() != o) {
        return Err(format!("the bias does not have {o} elements"));
    }
    if let Some(r) = &residual {
        f32_static(&[r])?;
        if r.sizes != g.output_sizes() {
            return Err(format!(
                "residual value {} has sizes {:?}, expected the output's {:?}",
                r.value,
                r.sizes,
                g.output_sizes()
            ));
        }
    }
    check_packed(&Some(kept.clone()), g.folded_len(algorithm))?;
    let params = [
        ctx.opt_tensor(arg(folded::BN_WEIGHT))?,
        ctx.opt_tensor(arg(folded::BN_BIAS))?,
        ctx.opt_tensor(arg(folded::MEAN))?,
        ctx.opt_tensor(arg(folded::VAR))?,
    ];
    let given: Vec<&TArg> = params.iter().flatten().collect();
    f32_static(&given)?;
    if given.iter().any(|p| p.numel() != o) {
        return Err(format!("a batch norm parameter does not have {o} elements"));
    }
    let [bn_weight, bn_bias, mean, var] = params;
    let eps = match (&mean, &var) {
        (Some(_), Some(_)) => Some(ctx.double(arg(folded::EPS))?),
        _ => None,
    };
    let conv = ctx.fresh("conv");
    // A filter prepared at compile time is all the call reads: the weights
    // and batch norm it was made from stay out of the binary.
    let prepared = ctx.is_prepared(&kept);
    let mut sources = vec![&w];
    sources.extend([&bias, &bn_weight, &bn_bias, &mean, &var].into_iter().flatten());
    let (kept, s_kept) = prepared_view(
        ctx,
        &kept,
        &sources,
        |ctx, into| {
            let w = ctx.constant_f32(&w)?;
            let bias = ctx.opt_constant_f32(&bias)?;
            let [bn_weight, bn_bias, mean, var] = [&bn_weight, &bn_bias, &mean, &var].map(|t| ctx.opt_constant_f32(t));
            let (bn_weight, bn_bias, mean, var) = (bn_weight?, bn_bias?, mean?, var?);
            let bn = match (&mean, &var, eps) {
                (Some(mean), Some(var), Some(eps)) => Some(BatchNormFold {
                    weight: bn_weight.as_deref(),
                    bias: bn_bias.as_deref(),
                    mean,
                    var,
                    eps,
                }),
                _ => None,
            };
            let conv = FoldedConv {
                geometry: g,
                algorithm,
                layout,
                w: &w,
                bias: bias.as_deref(),
                bn,
                residual: None,
                min: f32::NEG_INFINITY,
                max: f32::INFINITY,
                activation,
            };
            conv.prepare(into);
            Ok(())
        },
        |kept| quote!(#conv.prepare(#kept);),
    )?;
    let (bn, s_bn) = match (mean, var) {
        _ if prepared => (quote!(None), quote!()),
        (Some(mean), Some(var)) => {
            let eps = f64_lit(eps.unwrap_or_default());
            let (wi, s1) = read_opt(ctx, &bn_weight)?;
            let (bi, s2) = read_opt(ctx, &bn_bias)?;
            let (mi, s3) = ctx.read(&mean)?;
            let (vi, s4) = ctx.read(&var)?;
            (
                quote!(Some(::ptec_runtime::kernels::nhwc::BatchNormFold { weight: #wi, bias: #bi, mean: #mi, var: #vi, eps: #eps })),
                quote!(#s1 #s2 #s3 #s4),
            )
        }
        (None, None) if bn_weight.is_none() && bn_bias.is_none() => (quote!(None), quote!()),
        _ => return Err("a batch norm needs its running mean and variance".into()),
    };
    let geometry = conv_tokens(&g);
    let layout = format_ident!("{layout:?}");
    let activation = format_ident!("{activation:?}");
    let algorithm_ident = format_ident!("{algorithm:?}");
    let (wi, s1) = ctx.read_if_needed(&w, !prepared)?;
    let (bi, s2) = if prepared {
        (quote!(None), quote!())
    } else {
        read_opt(ctx, &bias)?
    };
    let (ri, s3) = read_opt(ctx, &residual)?;
    Ok(FoldedTokens {
        geometry: g,
        algorithm,
        residual: residual.is_some(),
        stmts: quote! {
            #s1 #s2 #s_bn #s3
            let #conv = ::ptec_runtime::kernels::nhwc::FoldedConv {
                geometry: #geometry, algorithm: ::ptec_runtime::kernels::nhwc::Algorithm::#algorithm_ident,
                layout: ::ptec_runtime::kernels::nhwc::FilterLayout::#layout, w: #wi, bias: #bi, bn: #bn, residual: #ri, min: #min, max: #max,
                activation: ::ptec_runtime::kernels::nhwc::Activation::#activation,
            };
            #s_kept
        },
        conv,
        kept,
    })
}

/// `depthwise_conv2d_nhwc.out(input, filter, bias?, padding, stride,
/// dilation, output_min, output_max, out)`: input `[N, H, W, C]`, filter
/// `[1, kH, kW, C · multiplier]`.
fn depthwise_conv2d_nhwc(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(9)?;
    let operands = conv_operands(ctx, 8)?;
    let (padding, stride, dilation) = (array::<4>(ctx, 3)?, array::<2>(ctx, 4)?, array::<2>(ctx, 5)?);
    let b = bounds(ctx, 6)?;
    let (x, w) = (&operands.0, &operands.1);
    let g = Conv2dNhwc::depthwise(&x.sizes, &w.sizes, stride, padding, dilation).ok_or_else(|| {
        format!(
            "depthwise convolution of {:?} with filter {:?} (stride {stride:?}, padding {padding:?}, dilation {dilation:?}) is invalid",
            x.sizes, w.sizes
        )
    })?;
    emit_conv(ctx, g, operands, b, None)
}

/// `deconv2d_nhwc.out(input, filter, bias?, padding, stride, dilation,
/// adjustment, groups, output_min, output_max, out)`.
fn deconv2d_nhwc(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(11)?;
    let (x, w, bias, out) = conv_operands(ctx, 10)?;
    let (padding, stride) = (array::<4>(ctx, 3)?, array::<2>(ctx, 4)?);
    let (dilation, adjustment) = (array::<2>(ctx, 5)?, array::<2>(ctx, 6)?);
    let groups = ctx.int(7)?;
    let (min, max) = bounds(ctx, 8)?;
    let invalid = || {
        format!(
            "transposed convolution of {:?} with filter {:?} (groups {groups}, stride {stride:?}, padding {padding:?}, dilation {dilation:?}, adjustment {adjustment:?}) is invalid",
            x.sizes, w.sizes
        )
    };
    let groups = usize::try_from(groups).map_err(|_| invalid())?;
    let [o, kh, kw, gi] = w.sizes[..] else {
        return Err(invalid());
    };
    if groups == 0 || o % groups != 0 {
        return Err(invalid());
    }
    let g = Deconv2dNhwc::new(
        &x.sizes,
        [kh, kw],
        stride,
        dilation,
        padding,
        adjustment,
        groups,
        gi,
        o / groups,
    )
    .ok_or_else(invalid)?;
    if bias.as_ref().is_some_and(|b| b.numel() != o) {
        return Err(format!("the bias does not have {o} elements"));
    }
    require_sizes(&out, &g.output_sizes())?;
    let geometry = {
        let [n, ih, iw, oh, ow] = [g.batch, g.in_h, g.in_w, g.out_h, g.out_w].map(lit);
        let [kh, kw, sh, sw, dh, dw] = [kh, kw, stride[0], stride[1], dilation[0], dilation[1]].map(lit);
        let [pt, pl, gr, gin, gout] = [g.pad_top, g.pad_left, groups, gi, o / groups].map(lit);
        quote! {
            ::ptec_runtime::kernels::nhwc::Deconv2dNhwc {
                batch: #n, in_h: #ih, in_w: #iw, out_h: #oh, out_w: #ow,
                kernel: [#kh, #kw], stride: [#sh, #sw], dilation: [#dh, #dw],
                pad_top: #pt, pad_left: #pl, groups: #gr, group_in: #gin, group_out: #gout,
            }
        }
    };
    let (xi, s1) = ctx.read(&x)?;
    let (wi, s2) = ctx.read(&w)?;
    let (bi, s3) = read_opt(ctx, &bias)?;
    let (oi, s4) = ctx.write(&out)?;
    Ok(quote! {
        #s1 #s2 #s3 #s4
        ::ptec_runtime::kernels::nhwc::deconv2d_nhwc(&#geometry, #xi, #wi, #bi, #min, #max, #oi);
    })
}

/// Emits a pooling kernel call (`max_pool2d_nhwc` or `avg_pool2d_nhwc`).
fn emit_pool(ctx: &mut OpCtx<'_>, kernel_fn: &str, dilation: Option<[usize; 2]>) -> Result<TokenStream, String> {
    let out_arg = ctx.args.len() - 1;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(out_arg)?);
    f32_static(&[&x, &out])?;
    let (kernel, stride, padding) = (array::<2>(ctx, 1)?, array::<2>(ctx, 2)?, array::<4>(ctx, 3)?);
    let (min, max) = bounds(ctx, out_arg - 2)?;
    let [n, h, w, c] = x.sizes[..] else {
        return Err(format!("input {:?} is not [N, H, W, C]", x.sizes));
    };
    let win = Window2d::new(n, h, w, kernel, stride, padding, dilation.unwrap_or([1, 1])).ok_or_else(|| {
        format!(
            "pooling of {:?} with window {kernel:?} (stride {stride:?}, padding {padding:?}, dilation {dilation:?}) is invalid",
            x.sizes
        )
    })?;
    require_sizes(&out, &[n, win.out_h, win.out_w, c])?;
    let window = window_tokens(&win);
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let f = format_ident!("{}", kernel_fn);
    let cl = lit(c);
    Ok(quote! {
        #s1 #s2
        ::ptec_runtime::kernels::nhwc::#f(&#window, #cl, #xi, #min, #max, #o);
    })
}

/// `max_pool2d_nhwc.out(input, kernel, stride, padding, dilation,
/// output_min, output_max, out)`.
fn max_pool2d_nhwc(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(8)?;
    let dilation = array::<2>(ctx, 4)?;
    emit_pool(ctx, "max_pool2d_nhwc", Some(dilation))
}

/// `avg_pool2d_nhwc.out(input, kernel, stride, padding, output_min,
/// output_max, out)`: padding is not counted in the averages.
fn avg_pool2d_nhwc(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(7)?;
    emit_pool(ctx, "avg_pool2d_nhwc", None)
}

/// `global_avg_pool2d_nhwc.out(input, output_min, output_max, out)`: the
/// mean of each image's pixels per channel; `out` holds `N · C` elements
/// (`[N, 1, 1, C]` or `[N, C]`).
fn global_avg_pool2d_nhwc(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(3)?);
    f32_static(&[&x, &out])?;
    let (min, max) = bounds(ctx, 1)?;
    let [n, h, w, c] = x.sizes[..] else {
        return Err(format!("input {:?} is not [N, H, W, C]", x.sizes));
    };
    // [N, C, 1, 1] (an aten mean that keeps its dims) has the same bytes.
    if out.numel() != n * c || (out.sizes.last() != Some(&c) && out.sizes[..] != [n, c, 1, 1]) {
        return Err(format!("output {:?} does not hold {n} × {c} means", out.sizes));
    }
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let (nl, pl, cl) = (lit(n), lit(h * w), lit(c));
    Ok(quote! {
        #s1 #s2
        ::ptec_runtime::kernels::nhwc::global_avg_pool_nhwc(#nl, #pl, #cl, #xi, #min, #max, #o);
    })
}

/// `batch_matmul.out(a, b, transpose_b, out)`: `out[.., m, n] = a[.., m, k]
/// · b[.., k, n]` (`b[.., n, k]` transposed), batch dims broadcast.
fn batch_matmul(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (a, b, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(3)?);
    let transposed = ctx.bool(2)?;
    f32_static(&[&a, &b, &out])?;
    let want = crate::shapes::batch_matmul_sizes(&a.sizes, &b.sizes, transposed)
        .ok_or_else(|| format!("batch matrix multiply of {:?} and {:?}", a.sizes, b.sizes))?;
    require_sizes(&out, &want)?;
    let rank = want.len();
    if rank - 2 > ptec_runtime::kernels::MAX_RANK {
        return Err(format!(
            "{} batch dims; at most {} are supported",
            rank - 2,
            ptec_runtime::kernels::MAX_RANK
        ));
    }
    let batch = &want[..rank - 2];
    let (m, n) = (want[rank - 2], want[rank - 1]);
    let k = a.sizes[a.rank() - 1];
    let strides = |t: &TArg| -> Vec<usize> {
        // Step of each output batch dim in the operand's matrices; 0 where
        // the operand broadcasts (size 1 or absent).
        let own = &t.sizes[..t.rank() - 2];
        let mut steps = vec![0; batch.len()];
        let mut step = 1;
        for (d, &size) in own.iter().enumerate().rev() {
            let od = d + batch.len() - own.len();
            if size != 1 {
                steps[od] = step;
            }
            step *= size;
        }
        steps
    };
    let (sa, sb) = (usize_slice(&strides(&a)), usize_slice(&strides(&b)));
    let bs = usize_slice(batch);
    let (ai, s1) = ctx.read(&a)?;
    let (bi, s2) = ctx.read(&b)?;
    let (o, s3) = ctx.write(&out)?;
    let (sc, s4) = scratch(ctx, gemm_scratch_len(m, n, k));
    let (ml, kl, nl) = (lit(m), lit(k), lit(n));
    Ok(quote! {
        #s1 #s2 #s3 #s4
        ::ptec_runtime::kernels::linear::batch_matmul(#ai, #bi, #bs, #sa, #sb, #ml, #kl, #nl, #transposed, #o, #sc);
    })
}
