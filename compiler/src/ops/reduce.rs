//! Reductions over dims: `sum`, `mean`, `prod`, `amax`, `amin`, `any`,
//! `argmax`/`argmin`, `max.dim`/`min.dim`, `var`/`std`, `cumsum`.
use super::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("aten::sum.IntList_out", sum),
    ("aten::sum.out", sum),
    ("aten::mean.out", mean),
    ("aten::mean.dtype_out", mean_dtype),
];

/// The reduced dims (sorted, distinct); `None` or an empty list means all.
pub fn reduce_dims(dims: Option<Vec<i64>>, rank: usize) -> Result<Vec<usize>, String> {
    let dims = match dims {
        None => return Ok((0..rank).collect()),
        Some(d) if d.is_empty() => return Ok((0..rank).collect()),
        Some(d) => d,
    };
    let mut out = Vec::new();
    for d in dims {
        let d = norm_dim(d, rank)?;
        if out.contains(&d) {
            return Err(format!("dim {d} is reduced twice"));
        }
        out.push(d);
    }
    out.sort_unstable();
    if rank == 0 {
        out.clear();
    }
    Ok(out)
}

/// The output sizes of a reduction.
pub fn reduced_sizes(sizes: &[usize], dims: &[usize], keepdim: bool) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, &s) in sizes.iter().enumerate() {
        if dims.contains(&i) {
            if keepdim {
                out.push(1);
            }
        } else {
            out.push(s);
        }
    }
    out
}

/// Emits `kernel(x, sizes, dims, out)` with the out sizes checked (static)
/// or set (dynamic).
pub fn emit_reduce(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    out: &TArg,
    dims: &[usize],
    keepdim: bool,
    kernel: TokenStream,
) -> Result<TokenStream, String> {
    require_contiguous(&[x, out])?;
    let mut stmts = Vec::new();
    if x.dynamic {
        let sizes = ctx.sizes(x);
        let dl = usize_slice(dims);
        let r = lit(reduced_sizes(&x.sizes, dims, keepdim).len());
        stmts.push(quote! {
            let xs: &[usize] = #sizes;
            let dims: &[usize] = #dl;
            let mut os = [0usize; #r];
            let mut k = 0;
            for (i, &s) in xs.iter().enumerate() {
                if dims.contains(&i) {
                    if #keepdim { os[k] = 1; k += 1; }
                } else {
                    os[k] = s;
                    k += 1;
                }
            }
        });
        stmts.push(ctx.set_sizes(out, quote!(&os)));
    } else {
        require_sizes(out, &reduced_sizes(&x.sizes, dims, keepdim))?;
    }
    let sizes = ctx.sizes(x);
    let (xi, s1) = ctx.read(x)?;
    let (o, s2) = ctx.write(out)?;
    let dl = usize_slice(dims);
    stmts.extend([s1, s2]);
    stmts.push(quote!(#kernel(#xi, #sizes, #dl, #o);));
    Ok(quote!(#(#stmts)*))
}

/// `sum.IntList_out(self, dim?, keepdim, dtype?, out)` and `sum.out(self, dtype?, out)`.
fn sum(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    let (x, dims, keepdim, out) = if ctx.args.len() == 4 {
        (ctx.tensor(0)?, None, false, ctx.tensor(2)?)
    } else {
        ctx.arity(6)?;
        (ctx.tensor(0)?, ctx.opt_int_list(1)?, ctx.bool(2)?, ctx.tensor(4)?)
    };
    let dims = reduce_dims(dims, x.rank())?;
    emit_reduce(
        ctx,
        &x,
        &out,
        &dims,
        keepdim,
        quote!(::ptec_runtime::kernels::reduce::sum),
    )
}

/// `mean.out(self, dim?, keepdim, dtype?, out)`.
fn mean(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, dims, keepdim, out) = (ctx.tensor(0)?, ctx.opt_int_list(1)?, ctx.bool(2)?, ctx.tensor(4)?);
    require_dtype(&out, FLOATS)?;
    let dims = reduce_dims(dims, x.rank())?;
    emit_reduce(
        ctx,
        &x,
        &out,
        &dims,
        keepdim,
        quote!(::ptec_runtime::kernels::reduce::mean),
    )
}

/// `mean.dtype_out(self, *, dtype?, out)`: the mean of all elements.
fn mean_dtype(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(2)?);
    require_dtype(&out, FLOATS)?;
    let dims: Vec<usize> = (0..x.rank()).collect();
    emit_reduce(
        ctx,
        &x,
        &out,
        &dims,
        false,
        quote!(::ptec_runtime::kernels::reduce::mean),
    )
}
