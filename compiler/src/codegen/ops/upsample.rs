//! 2-d resampling: `upsample_nearest2d.vec`, `upsample_bilinear2d.vec` and
//! `grid_sampler_2d` (RAFT's and spatial transformers' sampling at points).
use super::conv::{emit_out_sizes, opt_slice, opt_usize_list, same_dtype, usize_list};
use super::*;
use ScalarType::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("aten::upsample_nearest2d.vec_out", upsample_nearest2d),
    ("aten::upsample_bilinear2d.vec_out", upsample_bilinear2d),
    ("aten::grid_sampler_2d.out", grid_sampler_2d),
    ("aten::_upsample_bilinear2d_aa.out", upsample_bilinear2d_aa),
];

/// The element types nearest upsampling copies.
const COPYABLE: &[ScalarType] = &[Float, Double, Half, BFloat16, Byte, Char, Short, Int, Long, Bool];

/// The target size: `output_size` or `scale_factors` (exactly one given).
struct Target {
    size: Option<Vec<usize>>,
    scales: Option<Vec<f64>>,
}

impl Target {
    fn read(ctx: &OpCtx<'_>, size_arg: usize, scales_arg: usize) -> Result<Self, String> {
        let size = opt_usize_list(ctx, size_arg)?;
        let scales = ctx.opt_double_list(scales_arg)?;
        Ok(Target { size, scales })
    }

    /// The statements that check or set `out`'s sizes, and the
    /// `output_size, scale_factors` argument expressions.
    fn emit(&self, ctx: &OpCtx<'_>, x: &TArg, out: &TArg) -> Result<(TokenStream, TokenStream, TokenStream), String> {
        let bound = ptec_runtime::kernels::upsample::upsample2d_output_sizes(
            &x.sizes,
            self.size.as_deref(),
            self.scales.as_deref(),
        )
        .ok_or_else(|| {
            format!(
                "upsampling {:?} to output_size {:?} / scale_factors {:?} is invalid",
                x.sizes, self.size, self.scales
            )
        })?;
        let size = opt_slice(&self.size, usize_slice);
        let scales = opt_slice(&self.scales, |v| {
            let items = v.iter().map(|&s| f64_lit(s));
            quote!(&[#(#items),*])
        });
        let xs = ctx.sizes(x);
        let live = quote!(::ptec_runtime::kernels::upsample::upsample2d_output_sizes(#xs, #size, #scales));
        let set = emit_out_sizes(ctx, x.dynamic, out, &bound, live)?;
        Ok((set, size, scales))
    }
}

/// `upsample_nearest2d.vec_out(input, output_size?, scale_factors?, out)`.
fn upsample_nearest2d(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(3)?);
    same_dtype(&[&x, &out], COPYABLE)?;
    let (set, size, scales) = Target::read(ctx, 1, 2)?.emit(ctx, &x, &out)?;
    let xs = ctx.sizes(&x);
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let call =
        ctx.kernel_result(quote!(::ptec_runtime::kernels::upsample::upsample_nearest2d(#xi, #xs, #size, #scales, #o)));
    Ok(quote! { #set #s1 #s2 #call })
}

/// `upsample_bilinear2d.vec_out(input, output_size?, align_corners,
/// scale_factors?, out)`.
fn upsample_bilinear2d(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, align_corners, out) = (ctx.tensor(0)?, ctx.bool(2)?, ctx.tensor(4)?);
    same_dtype(&[&x, &out], FLOATS)?;
    let (set, size, scales) = Target::read(ctx, 1, 3)?.emit(ctx, &x, &out)?;
    let xs = ctx.sizes(&x);
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::upsample::upsample_bilinear2d(
        #xi, #xs, #size, #align_corners, #scales, #o
    )));
    Ok(quote! { #set #s1 #s2 #call })
}

/// `_upsample_bilinear2d_aa.out(input, output_size, align_corners,
/// scales_h?, scales_w?, out)`: float and double, as PyTorch's CPU kernel
/// (which has no half types; its uint8 path computes in 16-bit fixed
/// point, not implemented here). Static shapes only.
fn upsample_bilinear2d_aa(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(7)?;
    let (x, align_corners, out) = (ctx.tensor(0)?, ctx.bool(2)?, ctx.tensor(5)?);
    let size = usize_list(ctx, 1)?;
    let scales = [ctx.opt_double(3)?, ctx.opt_double(4)?];
    same_dtype(&[&x, &out], &[Float, Double])?;
    if x.dynamic || out.dynamic {
        return Err("_upsample_bilinear2d_aa with dynamic shapes is not supported".into());
    }
    let (&[n, c, h, w], &[oh, ow]) = (&x.sizes[..], &size[..]) else {
        return Err(format!(
            "_upsample_bilinear2d_aa of {:?} to output_size {size:?} (a 4-d input, two sizes)",
            x.sizes
        ));
    };
    if [h, w, oh, ow].contains(&0) {
        return Err(format!(
            "_upsample_bilinear2d_aa of {:?} to {size:?}: sizes must be positive",
            x.sizes
        ));
    }
    require_sizes(&out, &[n, c, oh, ow])?;
    let set = ctx.set_sizes(&out, usize_slice(&out.sizes));
    let xs = usize_slice(&x.sizes);
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let sc = scales.map(|s| match s {
        Some(v) => {
            let v = f64_lit(v);
            quote!(Some(#v))
        }
        None => quote!(None),
    });
    let [sh, sw] = &sc;
    let (ohl, owl) = (lit(oh), lit(ow));
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::upsample::upsample_bilinear2d_aa(
        #xi, #xs, [#ohl, #owl], #align_corners, [#sh, #sw], #o
    )));
    Ok(quote! { #set #s1 #s2 #call })
}

/// `grid_sampler_2d.out(input, grid, interpolation_mode, padding_mode,
/// align_corners, out)`: bilinear or nearest (bicubic is refused).
fn grid_sampler_2d(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(7)?;
    let (x, grid, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(5)?);
    let (mode, padding, align_corners) = (ctx.int(2)?, ctx.int(3)?, ctx.bool(4)?);
    same_dtype(&[&x, &grid, &out], FLOATS)?;
    if mode == 2 {
        return Err("grid_sampler_2d with bicubic interpolation is not supported".into());
    }
    let sizes = ptec_runtime::kernels::grid_sample::grid_sampler_2d_output_sizes;
    let bound = sizes(&x.sizes, &grid.sizes, mode, padding).ok_or_else(|| {
        format!(
            "grid_sampler_2d of {:?} at a grid of {:?} (interpolation_mode {mode}, padding_mode {padding}) is invalid",
            x.sizes, grid.sizes
        )
    })?;
    let (xs, gs) = (ctx.sizes(&x), ctx.sizes(&grid));
    let (m, p) = (i64_lit(mode), i64_lit(padding));
    let live = quote!(::ptec_runtime::kernels::grid_sample::grid_sampler_2d_output_sizes(#xs, #gs, #m, #p));
    let set = emit_out_sizes(ctx, x.dynamic || grid.dynamic, &out, &bound, live)?;
    let (xi, s1) = ctx.read(&x)?;
    let (gi, s2) = ctx.read(&grid)?;
    let (o, s3) = ctx.write(&out)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::grid_sample::grid_sampler_2d(
        #xi, #xs, #gi, #gs, #m, #p, #align_corners, #o
    )));
    Ok(quote! { #set #s1 #s2 #s3 #call })
}

#[cfg(test)]
mod tests {
    use ptec_runtime::kernels::upsample::upsample2d_output_sizes;

    #[test]
    fn upsample_shapes_the_emitters_rely_on() {
        assert_eq!(
            upsample2d_output_sizes(&[1, 2, 3, 4], Some(&[6, 8]), None),
            Some([1, 2, 6, 8])
        );
        // Scale factors floor: ⌊3 · 2.5⌋ = 7.
        assert_eq!(
            upsample2d_output_sizes(&[1, 2, 3, 4], None, Some(&[2.5, 2.0])),
            Some([1, 2, 7, 8])
        );
        // Both or neither given.
        assert_eq!(
            upsample2d_output_sizes(&[1, 2, 3, 4], Some(&[6, 8]), Some(&[2.0, 2.0])),
            None
        );
        assert_eq!(upsample2d_output_sizes(&[1, 2, 3, 4], None, None), None);
    }
}
