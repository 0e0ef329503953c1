//! Moving elements within a tensor: `repeat`, `flip`, `roll`, constant,
//! reflection and replication pads, `tril`/`triu`, pixel shuffles.
use super::*;

// ---------------------------------------------------------------------------
// Rearrangements.

/// `repeat.out(self, repeats, out)`.
pub(super) fn repeat(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, repeats, out) = (ctx.tensor(0)?, ctx.int_list(1)?, ctx.tensor(2)?);
    require_same(&[&x, &out])?;
    if x.dynamic || out.dynamic {
        return Err(no_dynamic(ctx));
    }
    if repeats.len() < x.rank() {
        return Err(format!("{} repeats for a tensor of rank {}", repeats.len(), x.rank()));
    }
    let reps = repeats
        .iter()
        .map(|&r| usize::try_from(r).map_err(|_| format!("negative repeat {r}")))
        .collect::<Result<Vec<_>, _>>()?;
    let lead = reps.len() - x.rank();
    let want: Vec<usize> = reps
        .iter()
        .enumerate()
        .map(|(k, &r)| r * if k < lead { 1 } else { x.sizes[k - lead] })
        .collect();
    require_sizes(&out, &want)?;
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let (k, sizes, rl) = (kernels(), usize_slice(&x.sizes), usize_slice(&reps));
    Ok(quote! { #s1 #s2 #k::repeat(#xi, #sizes, #rl, #o); })
}

/// Distinct normalised dims, or PyTorch's error for a repeated one.
pub(super) fn distinct_dims(dims: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for &d in dims {
        let d = norm_dim(d, rank)?;
        if out.contains(&d) {
            return Err(format!("dim {d} appears multiple times in {dims:?}"));
        }
        out.push(d);
    }
    Ok(out)
}

/// `flip.out(self, dims, out)`.
pub(super) fn flip(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, dims, out) = (ctx.tensor(0)?, ctx.int_list(1)?, ctx.tensor(2)?);
    let dims = if x.rank() == 0 {
        Vec::new()
    } else {
        distinct_dims(&dims, x.rank())?
    };
    let (k, dl) = (kernels(), usize_slice(&dims));
    emit_same_shape(ctx, &x, &out, |xi, sizes, o| quote!(#k::flip(#xi, #sizes, #dl, #o);))
}

/// `roll.out(self, shifts, dims, out)`.
pub(super) fn roll(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, shifts, dims, out) = (ctx.tensor(0)?, ctx.int_list(1)?, ctx.int_list(2)?, ctx.tensor(3)?);
    if dims.is_empty() && shifts.len() != 1 {
        return Err(format!("roll without dims takes one shift, got {shifts:?}"));
    }
    if !dims.is_empty() && dims.len() != shifts.len() {
        return Err(format!("roll with {} shifts and {} dims", shifts.len(), dims.len()));
    }
    let dims = dims
        .iter()
        .map(|&d| norm_dim(d, x.rank()))
        .collect::<Result<Vec<_>, _>>()?;
    if x.rank() == 0 && !dims.is_empty() {
        return emit_reshape(ctx, &x, &out, &[]);
    }
    let (k, dl) = (kernels(), usize_slice(&dims));
    let sl = shifts.iter().map(|&s| i64_lit(s));
    let sl = quote!(&[#(#sl),*]);
    emit_same_shape(
        ctx,
        &x,
        &out,
        |xi, sizes, o| quote!(#k::roll(#xi, #sizes, #sl, #dl, #o);),
    )
}

/// The padded sizes of `constant_pad_nd(pad)`.
pub(super) fn padded_sizes(sizes: &[usize], pad: &[i64]) -> Result<Vec<usize>, String> {
    if !pad.len().is_multiple_of(2) || pad.len() / 2 > sizes.len() {
        return Err(format!("padding {pad:?} for a tensor of rank {}", sizes.len()));
    }
    let mut out = sizes.to_vec();
    for k in 0..pad.len() / 2 {
        let d = sizes.len() - 1 - k;
        out[d] = ptec_runtime::kernels::shape::pad_output_size(sizes[d], pad[2 * k], pad[2 * k + 1])
            .ok_or_else(|| format!("padding {pad:?} makes dim {d} of size {} negative", sizes[d]))?;
    }
    Ok(out)
}

/// `constant_pad_nd.out(self, pad, value, out)`. A varying input, or pads
/// computed at run time (LLaVA pads an image of varying size to its crop
/// size), give the output's sizes at run time, within its bound.
pub(super) fn constant_pad_nd(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, pads, value, out) = (ctx.tensor(0)?, int_list_arg(ctx, 1)?, ctx.scalar(2)?, ctx.tensor(3)?);
    require_same(&[&x, &out])?;
    let (k, sizes) = (kernels(), ctx.sizes(&x));
    let constant: Option<Vec<i64>> = pads.iter().map(IntArg::constant).collect();
    let set = match constant {
        Some(pad) if !x.dynamic => {
            require_sizes(&out, &padded_sizes(&x.sizes, &pad)?)?;
            quote!()
        }
        _ => {
            if !pads.len().is_multiple_of(2) || pads.len() / 2 > x.rank() {
                return Err(format!("{} pads for a tensor of rank {}", pads.len(), x.rank()));
            }
            require_rank(&out, x.rank())?;
            let (r, err) = (lit(x.rank()), shape_mismatch(ctx));
            let set = set_out_sizes(ctx, &out, quote!(&os[..]));
            quote! {
                let mut os = [0usize; #r];
                os.copy_from_slice(#sizes);
                for j in 0..pad.len() / 2 {
                    let d = #r - 1 - j;
                    match #k::pad_output_size(os[d], pad[2 * j], pad[2 * j + 1]) {
                        Some(n) => os[d] = n,
                        None => return Err(#err),
                    }
                }
                #set
            }
        }
    };
    let v = scalar_value(value, out.dtype);
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let (n, pl) = (lit(pads.len()), pads.iter().map(IntArg::expr));
    Ok(quote! {
        let pad: [i64; #n] = [#(#pl),*];
        #set #s1 #s2
        #k::constant_pad_nd(#xi, #sizes, &pad, #v, #o);
    })
}

/// `reflection_pad{1,2,3}d.out(self, padding, out)` and
/// `replication_pad{1,2,3}d`: `padding` of 2, 4 or 6 entries pads as many
/// trailing dims, each by a reflection (shorter than the dim) or a
/// replication (of a dim that is not empty) of the input's edge.
pub(super) fn indexed_pad(ctx: &mut OpCtx<'_>, reflect: bool) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, pad, out) = (ctx.tensor(0)?, ctx.int_list(1)?, ctx.tensor(2)?);
    require_same(&[&x, &out])?;
    require_contiguous(&[&x, &out])?;
    if x.dynamic || out.dynamic {
        return Err(no_dynamic(ctx));
    }
    let k = pad.len() / 2;
    if !(1..=3).contains(&k) || pad.len() != 2 * k || x.rank() < k {
        return Err(format!("padding {pad:?} for a tensor of sizes {:?}", x.sizes));
    }
    for j in 0..k {
        let n = x.sizes[x.rank() - 1 - j] as i64;
        let (a, b) = (pad[2 * j], pad[2 * j + 1]);
        let ok = if reflect { a.max(b) < n && a.min(b) > -n } else { n > 0 };
        if !ok {
            return Err(format!("padding {pad:?} does not fit the input of sizes {:?}", x.sizes));
        }
    }
    require_sizes(&out, &padded_sizes(&x.sizes, &pad)?)?;
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let (kk, sizes) = (kernels(), usize_slice(&x.sizes));
    let pl = pad.iter().map(|&p| i64_lit(p));
    Ok(quote! { #s1 #s2 #kk::pad_indexed(#xi, #sizes, &[#(#pl),*], #reflect, #o); })
}

pub(super) fn reflection_pad(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    indexed_pad(ctx, true)
}
pub(super) fn replication_pad(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    indexed_pad(ctx, false)
}

/// `tril.out(self, diagonal, out)` and `triu`.
pub(super) fn triangle(ctx: &mut OpCtx<'_>, kernel: &str) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, diagonal, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor(2)?);
    if x.rank() < 2 {
        return Err(format!("{kernel} expects a tensor of rank >= 2, got rank {}", x.rank()));
    }
    let (k, f, dg) = (kernels(), format_ident!("{}", kernel), i64_lit(diagonal));
    emit_same_shape(ctx, &x, &out, |xi, sizes, o| quote!(#k::#f(#xi, #sizes, #dg, #o);))
}

pub(super) fn tril(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    triangle(ctx, "tril")
}

pub(super) fn triu(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    triangle(ctx, "triu")
}

/// The output sizes of `pixel_shuffle(r)` (`inverse`: `pixel_unshuffle`).
pub(super) fn shuffled_sizes(sizes: &[usize], r: i64, inverse: bool) -> Result<Vec<usize>, String> {
    let k = sizes.len();
    if k < 3 {
        return Err(format!("pixel shuffles expect a tensor of rank >= 3, got rank {k}"));
    }
    if r <= 0 {
        return Err(format!("factor {r} must be positive"));
    }
    let r = r as usize;
    let mut out = sizes.to_vec();
    let (c, h, w) = (sizes[k - 3], sizes[k - 2], sizes[k - 1]);
    if inverse {
        if h % r != 0 || w % r != 0 {
            return Err(format!("height {h} and width {w} must be divisible by {r}"));
        }
        out[k - 3..].copy_from_slice(&[c * r * r, h / r, w / r]);
    } else {
        if c % (r * r) != 0 {
            return Err(format!("channels {c} must be divisible by {r}²"));
        }
        out[k - 3..].copy_from_slice(&[c / (r * r), h * r, w * r]);
    }
    Ok(out)
}

pub(super) fn emit_pixel_shuffle(ctx: &mut OpCtx<'_>, inverse: bool) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, r, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor(2)?);
    require_same(&[&x, &out])?;
    if x.dynamic || out.dynamic {
        return Err(no_dynamic(ctx));
    }
    require_sizes(&out, &shuffled_sizes(&x.sizes, r, inverse)?)?;
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let (k, sizes, rl) = (kernels(), usize_slice(&x.sizes), lit(r as usize));
    let f = if inverse {
        quote!(pixel_unshuffle)
    } else {
        quote!(pixel_shuffle)
    };
    Ok(quote! { #s1 #s2 #k::#f(#xi, #sizes, #rl, #o); })
}

/// `pixel_shuffle.out(self, upscale_factor, out)`.
pub(super) fn pixel_shuffle(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    emit_pixel_shuffle(ctx, false)
}

/// `pixel_unshuffle.out(self, downscale_factor, out)`.
pub(super) fn pixel_unshuffle(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    emit_pixel_shuffle(ctx, true)
}

// ---------------------------------------------------------------------------
// Factories.
