//! Normalization: inference batch norm, layer norm, group norm.
use super::conv::{emit_out_sizes, opt_lit, read_opt, require_static, same_dtype, usize_arg, usize_list};
use super::*;
use ptec_runtime::kernels::norm;

pub const OPS: &[(&str, Emitter)] = &[
    ("aten::_native_batch_norm_legit_no_training.out", batch_norm_no_training),
    ("aten::_native_batch_norm_legit.no_stats_out", batch_norm_batch_stats),
    ("aten::_native_batch_norm_legit.out", batch_norm_legit),
    ("aten::native_layer_norm.out", layer_norm),
    ("aten::native_group_norm.out", group_norm),
];

/// The input and the optional per-channel (or per-element) parameters,
/// which must share the input's dtype and have static shapes.
fn check_params(x: &TArg, out: &TArg, params: &[&Option<TArg>]) -> Result<(), String> {
    let given: Vec<&TArg> = params.iter().filter_map(|p| p.as_ref()).collect();
    for p in &given {
        require_static(p, "parameter")?;
    }
    let mut all = vec![x, out];
    all.extend(given);
    same_dtype(&all, FLOATS)
}

/// `_native_batch_norm_legit_no_training.out(input, weight?, bias?,
/// running_mean, running_var, momentum, eps, out, save_mean, save_rstd)`.
/// The saved mean/rstd are empty in inference and not written.
fn batch_norm_no_training(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(11)?;
    batch_norm_running(ctx, 6, 7)
}

/// Batch norm with the running statistics at arguments 3 and 4, `eps` and
/// `out` at `eps_arg` and `out_arg`.
fn batch_norm_running(ctx: &mut OpCtx<'_>, eps_arg: usize, out_arg: usize) -> Result<TokenStream, String> {
    let (x, weight, bias, out) = (
        ctx.tensor(0)?,
        ctx.opt_tensor(1)?,
        ctx.opt_tensor(2)?,
        ctx.tensor(out_arg)?,
    );
    let (mean, var) = (Some(ctx.tensor(3)?), Some(ctx.tensor(4)?));
    let eps = ctx.double(eps_arg)?;
    check_params(&x, &out, &[&weight, &bias, &mean, &var])?;
    let (mean, var) = (mean.expect("given"), var.expect("given"));
    let len = |t: &Option<TArg>| t.as_ref().map(TArg::numel);
    let bound = norm::batch_norm_output_sizes(&x.sizes, len(&weight), len(&bias), mean.numel(), var.numel())
        .ok_or_else(|| {
            format!(
                "batch norm of {:?} with {} running statistics is invalid",
                x.sizes,
                mean.numel()
            )
        })?;
    // The output has the input's shape: its live sizes are the input's.
    let xs = ctx.sizes(&x);
    let set = emit_out_sizes(ctx, x.dynamic, &out, &bound, quote!(Some(#xs)))?;
    let (xi, s1) = ctx.read(&x)?;
    let (wi, s2) = read_opt(ctx, &weight)?;
    let (bi, s3) = read_opt(ctx, &bias)?;
    let (mi, s4) = ctx.read(&mean)?;
    let (vi, s5) = ctx.read(&var)?;
    let (o, s6) = ctx.write(&out)?;
    let eps = f64_lit(eps);
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::norm::batch_norm_no_training(
        #xi, #xs, #wi, #bi, #mi, #vi, #eps, #o
    )));
    Ok(quote! { #set #s1 #s2 #s3 #s4 #s5 #s6 #call })
}

/// `_native_batch_norm_legit.no_stats_out(input, weight?, bias?, training,
/// momentum, eps, out, save_mean, save_invstd)`: normalizes with the batch's
/// statistics (PyTorch rejects `training=False` without running
/// statistics).
fn batch_norm_batch_stats(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(10)?;
    if !ctx.bool(3)? {
        return Err("batch norm without running statistics needs training=True".into());
    }
    let eps = ctx.double(5)?;
    batch_stats(ctx, None, eps, 6)
}

/// `_native_batch_norm_legit.out(input, weight?, bias?, running_mean,
/// running_var, training, momentum, eps, out, save_mean, save_invstd)`. In
/// training: the batch's statistics, and the running ones updated in place
/// (with momentum and the unbiased variance). Otherwise: the running
/// statistics, as `_native_batch_norm_legit_no_training`.
fn batch_norm_legit(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(12)?;
    if !ctx.bool(5)? {
        return batch_norm_running(ctx, 7, 8);
    }
    let running = (ctx.tensor(3)?, ctx.tensor(4)?, ctx.double(6)?);
    let eps = ctx.double(7)?;
    batch_stats(ctx, Some(running), eps, 8)
}

/// Training batch norm of input 0 (weight and bias at 1 and 2) with `out`,
/// `save_mean` and `save_invstd` from argument `first_out`, and the running
/// statistics and momentum to update if given.
fn batch_stats(
    ctx: &mut OpCtx<'_>,
    running: Option<(TArg, TArg, f64)>,
    eps: f64,
    first_out: usize,
) -> Result<TokenStream, String> {
    let (x, weight, bias) = (ctx.tensor(0)?, ctx.opt_tensor(1)?, ctx.opt_tensor(2)?);
    let (out, mean, invstd) = (
        ctx.tensor(first_out)?,
        ctx.tensor(first_out + 1)?,
        ctx.tensor(first_out + 2)?,
    );
    let (rm, rv) = (
        running.as_ref().map(|r| r.0.clone()),
        running.as_ref().map(|r| r.1.clone()),
    );
    check_params(
        &x,
        &out,
        &[&weight, &bias, &Some(mean.clone()), &Some(invstd.clone()), &rm, &rv],
    )?;
    let c = x
        .sizes
        .get(1)
        .copied()
        .ok_or("batch norm needs an input of rank >= 2")?;
    let len = |t: &Option<TArg>| t.as_ref().map(TArg::numel);
    let (mlen, vlen) = (len(&rm).unwrap_or(c), len(&rv).unwrap_or(c));
    let bound = norm::batch_norm_output_sizes(&x.sizes, len(&weight), len(&bias), mlen, vlen).ok_or_else(|| {
        format!(
            "batch norm of {:?} with parameters of {:?}, {:?} and running statistics of {mlen}, {vlen} is invalid",
            x.sizes,
            len(&weight),
            len(&bias)
        )
    })?;
    let xs = ctx.sizes(&x);
    let set = emit_out_sizes(ctx, x.dynamic, &out, &bound, quote!(Some(#xs)))?;
    // The channel count is static even when the input is not.
    let set_mean = emit_out_sizes(ctx, false, &mean, &[c], quote!())?;
    let set_invstd = emit_out_sizes(ctx, false, &invstd, &[c], quote!())?;
    let (xi, s1) = ctx.read(&x)?;
    let (wi, s2) = read_opt(ctx, &weight)?;
    let (bi, s3) = read_opt(ctx, &bias)?;
    let (o, s4) = ctx.write(&out)?;
    let (mi, s5) = ctx.write(&mean)?;
    let (ri, s6) = ctx.write(&invstd)?;
    let (update, momentum, s7) = match &running {
        Some((rm, rv, momentum)) => {
            let (rmi, s7) = ctx.write(rm)?;
            let (rvi, s8) = ctx.write(rv)?;
            (quote!(Some((#rmi, #rvi))), *momentum, quote!(#s7 #s8))
        }
        None => (quote!(None), 0.0, quote!()),
    };
    let (momentum, eps) = (f64_lit(momentum), f64_lit(eps));
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::norm::batch_norm_training(
        #xi, #xs, #wi, #bi, #update, #momentum, #eps, #o, #mi, #ri
    )));
    Ok(quote! { #set #set_mean #set_invstd #s1 #s2 #s3 #s4 #s5 #s6 #s7 #call })
}

/// `native_layer_norm.out(input, normalized_shape, weight?, bias?, eps,
/// out, mean, rstd)`.
fn layer_norm(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(9)?;
    let (x, weight, bias, eps) = (ctx.tensor(0)?, ctx.opt_tensor(2)?, ctx.opt_tensor(3)?, ctx.double(4)?);
    let shape = usize_list(ctx, 1)?;
    let (out, mean, rstd) = (ctx.tensor(5)?, ctx.tensor(6)?, ctx.tensor(7)?);
    check_params(&x, &out, &[&weight, &bias, &Some(mean.clone()), &Some(rstd.clone())])?;
    let len = |t: &Option<TArg>| t.as_ref().map(TArg::numel);
    let (bound, stat) = norm::layer_norm_output_sizes(&x.sizes, &shape, len(&weight), len(&bias))
        .ok_or_else(|| format!("layer norm of {:?} over {shape:?} is invalid", x.sizes))?;
    let (xs, sh) = (ctx.sizes(&x), usize_slice(&shape));
    let (wl, bl) = (opt_lit(len(&weight)), opt_lit(len(&bias)));
    let live_stat =
        quote!(::ptec_runtime::kernels::norm::layer_norm_output_sizes(#xs, #sh, #wl, #bl).map(|(_, stat)| stat));
    let set_out = emit_out_sizes(ctx, x.dynamic, &out, &bound, quote!(Some(#xs)))?;
    let set_mean = emit_out_sizes(ctx, x.dynamic, &mean, &stat, live_stat.clone())?;
    let set_rstd = emit_out_sizes(ctx, x.dynamic, &rstd, &stat, live_stat)?;
    let (xi, s1) = ctx.read(&x)?;
    let (wi, s2) = read_opt(ctx, &weight)?;
    let (bi, s3) = read_opt(ctx, &bias)?;
    let (o, s4) = ctx.write(&out)?;
    let (mi, s5) = ctx.write(&mean)?;
    let (ri, s6) = ctx.write(&rstd)?;
    let eps = f64_lit(eps);
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::norm::native_layer_norm(
        #xi, #xs, #sh, #wi, #bi, #eps, #o, #mi, #ri
    )));
    Ok(quote! { #set_out #set_mean #set_rstd #s1 #s2 #s3 #s4 #s5 #s6 #call })
}

/// `native_group_norm.out(input, weight?, bias?, N, C, HxW, group, eps,
/// out, mean, rstd)`.
fn group_norm(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(12)?;
    let (x, weight, bias) = (ctx.tensor(0)?, ctx.opt_tensor(1)?, ctx.opt_tensor(2)?);
    let (n, c, hxw, group) = (
        usize_arg(ctx, 3)?,
        usize_arg(ctx, 4)?,
        usize_arg(ctx, 5)?,
        usize_arg(ctx, 6)?,
    );
    let eps = ctx.double(7)?;
    let (out, mean, rstd) = (ctx.tensor(8)?, ctx.tensor(9)?, ctx.tensor(10)?);
    check_params(&x, &out, &[&weight, &bias, &Some(mean.clone()), &Some(rstd.clone())])?;
    // N, C and HxW are constants: the input's shape is as well, whatever its
    // dynamism says.
    let len = |t: &Option<TArg>| t.as_ref().map(TArg::numel);
    let (bound, stat) = norm::group_norm_output_sizes(&x.sizes, len(&weight), len(&bias), n, c, hxw, group)
        .ok_or_else(|| {
            format!(
                "group norm of {:?} (N {n}, C {c}, HxW {hxw}) in {group} groups is invalid",
                x.sizes
            )
        })?;
    let mut stmts = Vec::new();
    if x.dynamic {
        let xs = ctx.sizes(&x);
        let fixed = usize_slice(&bound);
        let ins = lit(ctx.instruction);
        stmts.push(quote! {
            if *#xs != *#fixed {
                return Err(::ptec_runtime::Error::Kernel {
                    instruction: #ins,
                    error: ::ptec_runtime::kernels::KernelError::ShapeMismatch,
                });
            }
        });
    }
    stmts.push(emit_out_sizes(ctx, false, &out, &bound, quote!())?);
    stmts.push(emit_out_sizes(ctx, false, &mean, &stat, quote!())?);
    stmts.push(emit_out_sizes(ctx, false, &rstd, &stat, quote!())?);
    let (xi, s1) = ctx.read(&x)?;
    let (wi, s2) = read_opt(ctx, &weight)?;
    let (bi, s3) = read_opt(ctx, &bias)?;
    let (o, s4) = ctx.write(&out)?;
    let (mi, s5) = ctx.write(&mean)?;
    let (ri, s6) = ctx.write(&rstd)?;
    stmts.extend([s1, s2, s3, s4, s5, s6]);
    let (n, c, hxw, group, eps) = (lit(n), lit(c), lit(hxw), lit(group), f64_lit(eps));
    stmts.push(
        ctx.kernel_result(quote!(::ptec_runtime::kernels::norm::native_group_norm(
            #xi, #wi, #bi, #n, #c, #hxw, #group, #eps, #o, #mi, #ri
        ))),
    );
    Ok(quote!(#(#stmts)*))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norm_shapes_the_emitters_rely_on() {
        // Layer norm over the last dim of [2, 5, 8]: statistics [2, 5, 1].
        let (out, stat) = norm::layer_norm_output_sizes(&[2, 5, 8], &[8], Some(8), Some(8)).unwrap();
        assert_eq!((&out[..], &stat[..]), (&[2, 5, 8][..], &[2, 5, 1][..]));
        // Over the last two dims: [2, 1, 1].
        let (_, stat) = norm::layer_norm_output_sizes(&[2, 5, 8], &[5, 8], None, None).unwrap();
        assert_eq!(&stat[..], &[2, 1, 1]);
        assert!(norm::layer_norm_output_sizes(&[2, 5, 8], &[5], None, None).is_none());
        // Group norm of [2, 6, 10] in 3 groups: statistics [2, 3].
        let (out, stat) = norm::group_norm_output_sizes(&[2, 6, 10], Some(6), Some(6), 2, 6, 10, 3).unwrap();
        assert_eq!((&out[..], stat), (&[2, 6, 10][..], [2, 3]));
        assert!(norm::group_norm_output_sizes(&[2, 6, 10], None, None, 2, 6, 10, 4).is_none());
    }
}
