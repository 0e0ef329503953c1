//! 2-d and 3-d pooling: `max_pool2d_with_indices`, `avg_pool2d`,
//! `_adaptive_avg_pool2d`, `max_pool3d_with_indices`, `avg_pool3d`.
//! (PyTorch has no `max_pool2d.out`: exported programs call
//! `max_pool2d_with_indices`.)
use super::conv::{emit_out_sizes, same_dtype, usize_list};
use super::*;
use ptec_runtime::kernels::pool;
use ScalarType::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("aten::max_pool2d_with_indices.out", |ctx| max_pool_with_indices(ctx, 2)),
    ("aten::avg_pool2d.out", |ctx| avg_pool(ctx, 2)),
    ("aten::max_pool3d_with_indices.out", |ctx| max_pool_with_indices(ctx, 3)),
    ("aten::avg_pool3d.out", |ctx| avg_pool(ctx, 3)),
    ("aten::_adaptive_avg_pool2d.out", adaptive_avg_pool2d),
    ("aten::max_pool2d_with_indices_backward.grad_input", max_pool2d_backward),
];

/// The element types max pooling compares (all but `bool`).
const ORDERED: &[ScalarType] = &[Float, Double, Half, BFloat16, Byte, Char, Short, Int, Long];

/// The `kernel_size, stride, padding` arguments at `first..first + 3`:
/// PyTorch allows one value for both dims; an empty stride means the kernel
/// size (the kernels resolve both).
fn window(ctx: &OpCtx<'_>, first: usize) -> Result<[Vec<usize>; 3], String> {
    let lists = [
        usize_list(ctx, first)?,
        usize_list(ctx, first + 1)?,
        usize_list(ctx, first + 2)?,
    ];
    if lists[0].is_empty() {
        return Err("kernel_size must not be empty".into());
    }
    Ok(lists)
}

/// `max_pool{2,3}d_with_indices.out(self, kernel_size, stride, padding,
/// dilation, ceil_mode, out, indices)` over `dims` spatial dims.
fn max_pool_with_indices(ctx: &mut OpCtx<'_>, dims: usize) -> Result<TokenStream, String> {
    ctx.arity(9)?;
    let (x, out, indices) = (ctx.tensor(0)?, ctx.tensor(6)?, ctx.tensor(7)?);
    let [kernel, stride, padding] = window(ctx, 1)?;
    let dilation = usize_list(ctx, 4)?;
    let ceil_mode = ctx.bool(5)?;
    same_dtype(&[&x, &out], ORDERED)?;
    require_contiguous(&[&indices])?;
    require_dtype(&indices, &[Long])?;
    let (sizes_fn, kernel_fn, bound) = if dims == 2 {
        let b = pool::max_pool2d_output_sizes(&x.sizes, &kernel, &stride, &padding, &dilation, ceil_mode);
        (quote!(max_pool2d_output_sizes), quote!(max_pool2d_with_indices), b)
    } else {
        let b = pool::max_pool3d_output_sizes(&x.sizes, &kernel, &stride, &padding, &dilation, ceil_mode);
        (quote!(max_pool3d_output_sizes), quote!(max_pool3d_with_indices), b)
    };
    let bound = bound.ok_or_else(|| format!("max_pool{dims}d of {:?} with kernel {kernel:?}, stride {stride:?}, padding {padding:?}, dilation {dilation:?} is invalid", x.sizes))?;
    let (k, s, p, d) = (
        usize_slice(&kernel),
        usize_slice(&stride),
        usize_slice(&padding),
        usize_slice(&dilation),
    );
    let xs = ctx.sizes(&x);
    let live = quote!(::ptec_runtime::kernels::pool::#sizes_fn(#xs, #k, #s, #p, #d, #ceil_mode));
    let set_out = emit_out_sizes(ctx, x.dynamic, &out, &bound, live.clone())?;
    let set_indices = emit_out_sizes(ctx, x.dynamic, &indices, &bound, live)?;
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let (ii, s3) = ctx.write(&indices)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::pool::#kernel_fn(
        #xi, #xs, #k, #s, #p, #d, #ceil_mode, #o, #ii
    )));
    Ok(quote! { #set_out #set_indices #s1 #s2 #s3 #call })
}

/// `max_pool2d_with_indices_backward.grad_input(grad_output, self,
/// kernel_size, stride, padding, dilation, ceil_mode, indices,
/// grad_input)`: the window arguments only check that `grad_output` and
/// `indices` have the pooled shape; the indices say where each gradient
/// goes. Static shapes only.
fn max_pool2d_backward(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(10)?;
    let (gy, x, indices, gi) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(7)?, ctx.tensor(8)?);
    let [kernel, stride, padding] = window(ctx, 2)?;
    let dilation = usize_list(ctx, 5)?;
    let ceil_mode = ctx.bool(6)?;
    same_dtype(&[&gy, &x, &gi], FLOATS)?;
    require_contiguous(&[&indices])?;
    require_dtype(&indices, &[Long])?;
    if [&gy, &x, &indices, &gi].iter().any(|t| t.dynamic) {
        return Err("max_pool2d_with_indices_backward with dynamic shapes is not supported".into());
    }
    let bound = pool::max_pool2d_output_sizes(&x.sizes, &kernel, &stride, &padding, &dilation, ceil_mode)
        .ok_or_else(|| format!("max_pool2d_with_indices_backward of {:?} with kernel {kernel:?}, stride {stride:?}, padding {padding:?}, dilation {dilation:?} is invalid", x.sizes))?;
    require_sizes(&gy, &bound)?;
    require_sizes(&indices, &bound)?;
    let set = emit_out_sizes(ctx, false, &gi, &x.sizes, quote!())?;
    let r = x.rank();
    let planes: usize = x.sizes[..r - 2].iter().product();
    let (in_plane, out_plane) = (x.sizes[r - 2] * x.sizes[r - 1], bound[r - 2] * bound[r - 1]);
    let (yi, s1) = ctx.read(&gy)?;
    let (ii, s2) = ctx.read(&indices)?;
    let (o, s3) = ctx.write(&gi)?;
    let (p, op, ip) = (lit(planes), lit(out_plane), lit(in_plane));
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::pool::max_pool2d_with_indices_backward(
        #yi, #ii, #p, #op, #ip, #o
    )));
    Ok(quote! { #set #s1 #s2 #s3 #call })
}

/// `avg_pool{2,3}d.out(self, kernel_size, stride, padding, ceil_mode,
/// count_include_pad, divisor_override?, out)` over `dims` spatial dims.
fn avg_pool(ctx: &mut OpCtx<'_>, dims: usize) -> Result<TokenStream, String> {
    ctx.arity(9)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(7)?);
    let [kernel, stride, padding] = window(ctx, 1)?;
    let ceil_mode = ctx.bool(4)?;
    let count_include_pad = ctx.bool(5)?;
    let divisor = ctx.opt_int(6)?;
    same_dtype(&[&x, &out], FLOATS)?;
    let (sizes_fn, kernel_fn, bound) = if dims == 2 {
        let b = pool::avg_pool2d_output_sizes(&x.sizes, &kernel, &stride, &padding, ceil_mode, divisor);
        (quote!(avg_pool2d_output_sizes), quote!(avg_pool2d), b)
    } else {
        let b = pool::avg_pool3d_output_sizes(&x.sizes, &kernel, &stride, &padding, ceil_mode, divisor);
        (quote!(avg_pool3d_output_sizes), quote!(avg_pool3d), b)
    };
    let bound = bound.ok_or_else(|| format!("avg_pool{dims}d of {:?} with kernel {kernel:?}, stride {stride:?}, padding {padding:?}, divisor {divisor:?} is invalid", x.sizes))?;
    let (k, s, p) = (usize_slice(&kernel), usize_slice(&stride), usize_slice(&padding));
    let div = match divisor {
        Some(v) => {
            let v = i64_lit(v);
            quote!(Some(#v))
        }
        None => quote!(None),
    };
    let xs = ctx.sizes(&x);
    let live = quote!(::ptec_runtime::kernels::pool::#sizes_fn(#xs, #k, #s, #p, #ceil_mode, #div));
    let set = emit_out_sizes(ctx, x.dynamic, &out, &bound, live)?;
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::pool::#kernel_fn(
        #xi, #xs, #k, #s, #p, #ceil_mode, #count_include_pad, #div, #o
    )));
    Ok(quote! { #set #s1 #s2 #call })
}

/// `_adaptive_avg_pool2d.out(self, output_size, out)`.
fn adaptive_avg_pool2d(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(2)?);
    let size = usize_list(ctx, 1)?;
    same_dtype(&[&x, &out], FLOATS)?;
    if size.contains(&0) {
        return Err(format!("output_size {size:?} must be positive"));
    }
    let bound = pool::adaptive_avg_pool2d_output_sizes(&x.sizes, &size)
        .ok_or_else(|| format!("adaptive_avg_pool2d of {:?} to {size:?} is invalid", x.sizes))?;
    let sl = usize_slice(&size);
    let xs = ctx.sizes(&x);
    let live = quote!(::ptec_runtime::kernels::pool::adaptive_avg_pool2d_output_sizes(#xs, #sl));
    let set = emit_out_sizes(ctx, x.dynamic, &out, &bound, live)?;
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::pool::adaptive_avg_pool2d(#xi, #xs, #sl, #o)));
    Ok(quote! { #set #s1 #s2 #call })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_shapes_the_emitters_rely_on() {
        // 3×3 window, stride 2, padding 1 on 7×7: ⌊(7 + 2 − 2 − 1) / 2⌋ + 1 = 4.
        let s = pool::max_pool2d_output_sizes(&[1, 3, 7, 7], &[3], &[2], &[1], &[1], false).unwrap();
        assert_eq!(&s[..], &[1, 3, 4, 4]);
        // An empty stride means the kernel size: 6 / 2 = 3.
        let s = pool::avg_pool2d_output_sizes(&[2, 6, 6], &[2, 2], &[], &[0], false, None).unwrap();
        assert_eq!(&s[..], &[2, 3, 3]);
        // ceil mode: ⌈(5 − 2) / 2⌉ + 1 = 3 windows.
        let s = pool::avg_pool2d_output_sizes(&[1, 1, 5, 5], &[2], &[2], &[0], true, None).unwrap();
        assert_eq!(&s[..], &[1, 1, 3, 3]);
        let s = pool::adaptive_avg_pool2d_output_sizes(&[1, 8, 5, 7], &[1, 1]).unwrap();
        assert_eq!(&s[..], &[1, 8, 1, 1]);
    }
}
