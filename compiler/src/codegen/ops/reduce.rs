//! Reductions over dims: `sum`, `mean`, `prod`, `amax`/`amin`, `any`/`all`,
//! `argmax`/`argmin`, `max.dim`/`min.dim`, `var`/`std`, `logsumexp`,
//! `norm`, `topk`, and the scans `cumsum`/`cumprod`.
use super::*;
use ScalarType::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("aten::sum.IntList_out", sum),
    ("aten::sum.out", sum),
    ("aten::mean.out", mean),
    ("aten::mean.dtype_out", mean_dtype),
    ("aten::prod.int_out", prod_int),
    ("aten::prod.out", prod_all),
    ("aten::amax.out", amax),
    ("aten::amin.out", amin),
    ("aten::max.unary_out", max_unary),
    ("aten::min.unary_out", min_unary),
    ("aten::max.dim_max", max_dim),
    ("aten::min.dim_min", min_dim),
    ("aten::topk.values", topk),
    ("aten::_cdist_forward.out", cdist),
    ("aten::_pdist_forward.out", pdist),
    ("aten::argmax.out", argmax),
    ("aten::argmin.out", argmin),
    ("aten::any.out", any_dim),
    ("aten::any.dims_out", any_dims),
    ("aten::any.all_out", any_all),
    ("aten::all.out", all_dim),
    ("aten::all.dims_out", all_dims),
    ("aten::all.all_out", all_all),
    ("aten::var.correction_out", var_correction),
    ("aten::var.out", var_unbiased),
    ("aten::std.correction_out", std_correction),
    ("aten::std.out", std_unbiased),
    ("aten::var_mean.correction_out", var_mean_correction),
    ("aten::logsumexp.out", logsumexp),
    ("aten::norm.ScalarOpt_dim_out", norm_scalar_opt_dim),
    ("aten::linalg_vector_norm.out", linalg_vector_norm),
    ("aten::cumsum.out", cumsum),
    ("aten::cumprod.out", cumprod),
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

/// Whether PyTorch sums/multiplies a dtype into `int64` by default.
fn is_integral(d: ScalarType) -> bool {
    !d.is_float()
}

/// Emits a reduction of `x` over `dims` into the outputs `outs` (all of the
/// reduced shape): checks (static) or sets (dynamic) their sizes, views
/// every tensor and appends `call(x, x_sizes, outs)`, a statement.
fn emit_reduction(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    outs: &[&TArg],
    dims: &[usize],
    keepdim: bool,
    call: impl FnOnce(&Ident, TokenStream, &[Ident]) -> TokenStream,
) -> Result<TokenStream, String> {
    let mut all: Vec<&TArg> = vec![x];
    all.extend_from_slice(outs);
    require_contiguous(&all)?;
    let mut stmts = Vec::new();
    let want = reduced_sizes(&x.sizes, dims, keepdim);
    if x.dynamic {
        let sizes = ctx.sizes(x);
        let dl = usize_slice(dims);
        let r = lit(want.len());
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
        for out in outs {
            require_rank(out, want.len())?;
            stmts.push(ctx.set_sizes(out, quote!(&os)));
        }
    } else {
        for out in outs {
            require_sizes(out, &want)?;
            stmts.push(ctx.set_sizes(out, usize_slice(&want)));
        }
    }
    let sizes = ctx.sizes(x);
    let (xi, s) = ctx.read(x)?;
    stmts.push(s);
    let mut names = Vec::new();
    for out in outs {
        let (o, s) = ctx.write(out)?;
        stmts.push(s);
        names.push(o);
    }
    stmts.push(call(&xi, sizes, &names));
    Ok(quote!(#(#stmts)*))
}

/// Emits `reduce::kernel(x, sizes, dims, out)` (the common signature).
pub fn emit_reduce(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    out: &TArg,
    dims: &[usize],
    keepdim: bool,
    kernel: &str,
) -> Result<TokenStream, String> {
    let f = format_ident!("{}", kernel);
    let dl = usize_slice(dims);
    emit_reduction(ctx, x, &[out], dims, keepdim, |xi, sizes, o| {
        let o = &o[0];
        quote!(::ptec_runtime::kernels::reduce::#f(#xi, #sizes, #dl, #o);)
    })
}

/// The dtype an optional `ScalarType` argument names.
fn opt_dtype(ctx: &OpCtx<'_>, i: usize) -> Result<Option<ScalarType>, String> {
    match ctx.opt_int(i)? {
        None => Ok(None),
        Some(code) => ScalarType::from_code(code as i8)
            .map(Some)
            .ok_or_else(|| format!("argument {i}: {code} is not a dtype")),
    }
}

/// Checks the out dtype of `sum`/`prod`/`cumsum`: `dtype` if given, else
/// `int64` for integral and bool inputs and the input's dtype otherwise.
/// The kernels accumulate in the input's type, so a float input reduced
/// into an integer dtype (PyTorch casts each element first) is refused.
fn check_accumulating_dtype(x: &TArg, dtype: Option<ScalarType>, out: &TArg) -> Result<(), String> {
    let want = dtype.unwrap_or(if is_integral(x.dtype) { Long } else { x.dtype });
    if out.dtype != want {
        return Err(format!(
            "output value {} has dtype {}, expected {}",
            out.value, out.dtype, want
        ));
    }
    if x.dtype.is_float() && !out.dtype.is_float() {
        return Err(format!("reducing {} into {} is not supported", x.dtype, out.dtype));
    }
    Ok(())
}

/// `sum.IntList_out(self, dim?, keepdim, dtype?, out)` and `sum.out(self, dtype?, out)`.
fn sum(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    let (x, dims, keepdim, dtype, out) = if ctx.args.len() == 4 {
        (ctx.tensor(0)?, None, false, opt_dtype(ctx, 1)?, ctx.tensor(2)?)
    } else {
        ctx.arity(6)?;
        (
            ctx.tensor(0)?,
            ctx.opt_int_list(1)?,
            ctx.bool(2)?,
            opt_dtype(ctx, 3)?,
            ctx.tensor(4)?,
        )
    };
    check_accumulating_dtype(&x, dtype, &out)?;
    let dims = reduce_dims(dims, x.rank())?;
    emit_reduce(ctx, &x, &out, &dims, keepdim, "sum")
}

/// Checks a floating output of `mean`-like reductions: PyTorch refuses
/// integral inputs unless a floating `dtype` is given.
fn check_float_reduction(x: &TArg, dtype: Option<ScalarType>, out: &TArg) -> Result<(), String> {
    require_dtype(out, FLOATS)?;
    if let Some(d) = dtype {
        if out.dtype != d {
            return Err(format!(
                "output value {} has dtype {}, expected {}",
                out.value, out.dtype, d
            ));
        }
    } else if !x.dtype.is_float() {
        return Err(format!(
            "the mean of a {} tensor needs a floating dtype argument",
            x.dtype
        ));
    }
    Ok(())
}

/// `mean.out(self, dim?, keepdim, dtype?, out)`.
fn mean(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, dims, keepdim, dtype, out) = (
        ctx.tensor(0)?,
        ctx.opt_int_list(1)?,
        ctx.bool(2)?,
        opt_dtype(ctx, 3)?,
        ctx.tensor(4)?,
    );
    check_float_reduction(&x, dtype, &out)?;
    let dims = reduce_dims(dims, x.rank())?;
    emit_reduce(ctx, &x, &out, &dims, keepdim, "mean")
}

/// `mean.dtype_out(self, *, dtype?, out)`: the mean of all elements.
fn mean_dtype(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, dtype, out) = (ctx.tensor(0)?, opt_dtype(ctx, 1)?, ctx.tensor(2)?);
    check_float_reduction(&x, dtype, &out)?;
    let dims: Vec<usize> = (0..x.rank()).collect();
    emit_reduce(ctx, &x, &out, &dims, false, "mean")
}

/// `prod.int_out(self, dim, keepdim, dtype?, out)`.
fn prod_int(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, dim, keepdim, dtype, out) = (
        ctx.tensor(0)?,
        ctx.int(1)?,
        ctx.bool(2)?,
        opt_dtype(ctx, 3)?,
        ctx.tensor(4)?,
    );
    check_accumulating_dtype(&x, dtype, &out)?;
    let dims = reduce_dims(Some(vec![dim]), x.rank())?;
    emit_reduce(ctx, &x, &out, &dims, keepdim, "prod")
}

/// `prod.out(self, *, dtype?, out)`: the product of all elements.
fn prod_all(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, dtype, out) = (ctx.tensor(0)?, opt_dtype(ctx, 1)?, ctx.tensor(2)?);
    check_accumulating_dtype(&x, dtype, &out)?;
    let dims: Vec<usize> = (0..x.rank()).collect();
    emit_reduce(ctx, &x, &out, &dims, false, "prod")
}

fn require_same_dtype(x: &TArg, out: &TArg) -> Result<(), String> {
    if x.dtype != out.dtype {
        return Err(format!(
            "output value {} has dtype {}, expected {}",
            out.value, out.dtype, x.dtype
        ));
    }
    Ok(())
}

/// `amax.out(self, dim[], keepdim, out)` (an empty `dim` reduces all).
fn extremum(ctx: &mut OpCtx<'_>, kernel: &str) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, dims, keepdim, out) = (ctx.tensor(0)?, ctx.int_list(1)?, ctx.bool(2)?, ctx.tensor(3)?);
    require_same_dtype(&x, &out)?;
    let dims = reduce_dims(Some(dims), x.rank())?;
    emit_reduce(ctx, &x, &out, &dims, keepdim, kernel)
}

fn amax(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    extremum(ctx, "amax")
}
fn amin(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    extremum(ctx, "amin")
}

/// `max.unary_out(self, out)`: the extremum of all elements.
fn extremum_all(ctx: &mut OpCtx<'_>, kernel: &str) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    require_same_dtype(&x, &out)?;
    let dims: Vec<usize> = (0..x.rank()).collect();
    emit_reduce(ctx, &x, &out, &dims, false, kernel)
}

fn max_unary(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    extremum_all(ctx, "amax")
}
fn min_unary(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    extremum_all(ctx, "amin")
}

/// `max.dim_max(self, dim, keepdim, max, max_values)`: values and indices.
fn extremum_dim(ctx: &mut OpCtx<'_>, kernel: &str) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, dim, keepdim, values, indices) = (
        ctx.tensor(0)?,
        ctx.int(1)?,
        ctx.bool(2)?,
        ctx.tensor(3)?,
        ctx.tensor(4)?,
    );
    require_same_dtype(&x, &values)?;
    require_dtype(&indices, &[Long])?;
    let d = norm_dim(dim, x.rank())?;
    let dims = reduce_dims(Some(vec![dim]), x.rank())?;
    let f = format_ident!("{}", kernel);
    let dl = lit(d);
    emit_reduction(ctx, &x, &[&values, &indices], &dims, keepdim, |xi, sizes, o| {
        let (v, i) = (&o[0], &o[1]);
        quote!(::ptec_runtime::kernels::reduce::#f(#xi, #sizes, #dl, #v, #i);)
    })
}

fn max_dim(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    extremum_dim(ctx, "max_dim")
}
fn min_dim(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    extremum_dim(ctx, "min_dim")
}

/// `topk.values(self, k, dim, largest, sorted, values, indices)`: always
/// sorted (an unsorted result may come in any order).
fn topk(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(8)?;
    let (x, k, dim, largest) = (ctx.tensor(0)?, ctx.int(1)?, ctx.int(2)?, ctx.bool(3)?);
    let (values, indices) = (ctx.tensor(5)?, ctx.tensor(6)?);
    require_same_dtype(&x, &values)?;
    require_dtype(&indices, &[Long])?;
    require_contiguous(&[&x, &values, &indices])?;
    // A 0-d input is one element along dim 0 (or -1).
    let d = if x.rank() == 0 && (dim == 0 || dim == -1) {
        0
    } else {
        norm_dim(dim, x.rank())?
    };
    let n = x.sizes.get(d).copied().unwrap_or(1);
    if k < 0 || k as usize > n {
        return Err(format!("k = {k} is out of range for a dim of {n} elements"));
    }
    let mut want = x.sizes.clone();
    if let Some(s) = want.get_mut(d) {
        *s = k as usize;
    }
    let (kl, dl) = (lit(k as usize), lit(d));
    let mut stmts = Vec::new();
    for out in [&values, &indices] {
        require_rank(out, want.len())?;
        if x.dynamic {
            let sizes = ctx.sizes(&x);
            let err = super::checks::shape_mismatch(ctx);
            let r = lit(want.len());
            stmts.push(quote! {
                let mut os = [0usize; #r];
                os.copy_from_slice(#sizes);
                if os[#dl] < #kl {
                    return Err(#err);
                }
                os[#dl] = #kl;
            });
            stmts.push(ctx.set_sizes(out, quote!(&os)));
        } else {
            require_sizes(out, &want)?;
        }
    }
    let sizes = ctx.sizes(&x);
    let (xi, s) = ctx.read(&x)?;
    stmts.push(s);
    let (v, s) = ctx.write(&values)?;
    stmts.push(s);
    let (i, s) = ctx.write(&indices)?;
    stmts.push(s);
    stmts.push(quote!(::ptec_runtime::kernels::reduce::topk(#xi, #sizes, #dl, #kl, #largest, #v, #i);));
    Ok(quote!(#(#stmts)*))
}

/// A `p` of a distance: not negative (∞ allowed).
fn norm_order(p: f64) -> Result<f64, String> {
    if p >= 0.0 {
        Ok(p)
    } else {
        Err(format!("distances take p >= 0, not {p}"))
    }
}

/// `_cdist_forward.out(x1, x2, p, compute_mode?, out)`: `[*, r1, m]` and
/// `[*, r2, m]` (the same batch dims) to `[*, r1, r2]`, each distance
/// summed directly (PyTorch's matrix-product form for p = 2 over more
/// than 25 rows rounds otherwise, within a few ulps).
fn cdist(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x1, x2, p, out) = (
        ctx.tensor(0)?,
        ctx.tensor(1)?,
        norm_order(ctx.double(2)?)?,
        ctx.tensor(4)?,
    );
    require_dtype(&x1, &[Float, Double])?;
    require_same_dtype(&x1, &x2)?;
    require_same_dtype(&x1, &out)?;
    require_contiguous(&[&x1, &x2, &out])?;
    if x1.dynamic || x2.dynamic || out.dynamic {
        return Err(super::checks::no_dynamic(ctx));
    }
    let r = x1.rank();
    if r < 2 || x2.rank() != r || x1.sizes[..r - 2] != x2.sizes[..r - 2] || x1.sizes[r - 1] != x2.sizes[r - 1] {
        return Err(format!("cdist of sizes {:?} and {:?}", x1.sizes, x2.sizes));
    }
    let mut want = x1.sizes.clone();
    want[r - 1] = x2.sizes[r - 2];
    require_sizes(&out, &want)?;
    let batch: usize = x1.sizes[..r - 2].iter().product();
    let dims = usize_slice(&[batch, x1.sizes[r - 2], x2.sizes[r - 2], x1.sizes[r - 1]]);
    let (a, s1) = ctx.read(&x1)?;
    let (b, s2) = ctx.read(&x2)?;
    let (o, s3) = ctx.write(&out)?;
    let pl = f64_lit(p);
    Ok(quote! { #s1 #s2 #s3 ::ptec_runtime::kernels::reduce::cdist(#a, #b, *#dims, #pl, #o); })
}

/// `_pdist_forward.out(self, p, out)`: `[n, m]` to the `n (n - 1) / 2`
/// distances between its rows.
fn pdist(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, p, out) = (ctx.tensor(0)?, norm_order(ctx.double(1)?)?, ctx.tensor(2)?);
    require_dtype(&x, &[Float, Double])?;
    require_same_dtype(&x, &out)?;
    require_contiguous(&[&x, &out])?;
    if x.dynamic || out.dynamic || x.rank() != 2 {
        return Err(format!("pdist of a tensor of sizes {:?} (2-d and static)", x.sizes));
    }
    let (n, m) = (x.sizes[0], x.sizes[1]);
    require_sizes(&out, &[n * n.saturating_sub(1) / 2])?;
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let (nl, ml, pl) = (lit(n), lit(m), f64_lit(p));
    Ok(quote! { #s1 #s2 ::ptec_runtime::kernels::reduce::pdist(#xi, #nl, #ml, #pl, #o); })
}

/// `argmax.out(self, dim?, keepdim, out)`: `dim` None flattens the input.
fn arg_extremum(ctx: &mut OpCtx<'_>, kernel: &str) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, dim, keepdim, out) = (ctx.tensor(0)?, ctx.opt_int(1)?, ctx.bool(2)?, ctx.tensor(3)?);
    require_dtype(&out, &[Long])?;
    let (dims, dim_arg) = match dim {
        Some(d) => {
            let n = lit(norm_dim(d, x.rank())?);
            (reduce_dims(Some(vec![d]), x.rank())?, quote!(Some(#n)))
        }
        None => ((0..x.rank()).collect(), quote!(None)),
    };
    let f = format_ident!("{}", kernel);
    emit_reduction(ctx, &x, &[&out], &dims, keepdim, |xi, sizes, o| {
        let o = &o[0];
        quote!(::ptec_runtime::kernels::reduce::#f(#xi, #sizes, #dim_arg, #o);)
    })
}

fn argmax(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    arg_extremum(ctx, "argmax")
}
fn argmin(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    arg_extremum(ctx, "argmin")
}

/// `any`/`all` over `dims` with a bool output (PyTorch writes `uint8` for
/// `uint8` inputs, which is not supported here).
fn truth_reduction(
    ctx: &mut OpCtx<'_>,
    x: TArg,
    dims: Vec<usize>,
    keepdim: bool,
    out: TArg,
    kernel: &str,
) -> Result<TokenStream, String> {
    require_dtype(&out, &[Bool])?;
    emit_reduce(ctx, &x, &out, &dims, keepdim, kernel)
}

/// `any.out(self, dim, keepdim, out)`.
fn truth_dim(ctx: &mut OpCtx<'_>, kernel: &str) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, dim, keepdim, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.bool(2)?, ctx.tensor(3)?);
    let dims = reduce_dims(Some(vec![dim]), x.rank())?;
    truth_reduction(ctx, x, dims, keepdim, out, kernel)
}

/// `any.dims_out(self, dim?, keepdim, out)`.
fn truth_dims(ctx: &mut OpCtx<'_>, kernel: &str) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, dims, keepdim, out) = (ctx.tensor(0)?, ctx.opt_int_list(1)?, ctx.bool(2)?, ctx.tensor(3)?);
    let dims = reduce_dims(dims, x.rank())?;
    truth_reduction(ctx, x, dims, keepdim, out, kernel)
}

/// `any.all_out(self, out)`.
fn truth_all(ctx: &mut OpCtx<'_>, kernel: &str) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let dims = (0..x.rank()).collect();
    truth_reduction(ctx, x, dims, false, out, kernel)
}

fn any_dim(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    truth_dim(ctx, "any")
}
fn any_dims(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    truth_dims(ctx, "any")
}
fn any_all(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    truth_all(ctx, "any")
}
fn all_dim(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    truth_dim(ctx, "all")
}
fn all_dims(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    truth_dims(ctx, "all")
}
fn all_all(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    truth_all(ctx, "all")
}

/// The correction of `var.correction`: absent means 1 (Bessel's).
fn correction_arg(ctx: &OpCtx<'_>, i: usize) -> Result<f64, String> {
    Ok(ctx.opt_scalar(i)?.map_or(1.0, Scalar::as_f64))
}

/// `var`/`std` of a floating input into a floating output of the same
/// precision class.
fn variance(ctx: &mut OpCtx<'_>, correction: f64, kernel: &str) -> Result<TokenStream, String> {
    let (x, dims, keepdim, out) = (ctx.tensor(0)?, ctx.opt_int_list(1)?, ctx.bool(3)?, ctx.tensor(4)?);
    require_dtype(&x, FLOATS)?;
    require_same_dtype(&x, &out)?;
    let dims = reduce_dims(dims, x.rank())?;
    let f = format_ident!("{}", kernel);
    let dl = usize_slice(&dims);
    let c = f64_lit(correction);
    emit_reduction(ctx, &x, &[&out], &dims, keepdim, |xi, sizes, o| {
        let o = &o[0];
        quote!(::ptec_runtime::kernels::reduce::#f(#xi, #sizes, #dl, #c, #o);)
    })
}

/// `var.correction_out(self, dim?, *, correction?, keepdim, out)`.
fn var_correction(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let c = correction_arg(ctx, 2)?;
    variance(ctx, c, "var")
}

/// `var.out(self, dim?, unbiased, keepdim, out)`.
fn var_unbiased(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let c = if ctx.bool(2)? { 1.0 } else { 0.0 };
    variance(ctx, c, "var")
}

fn std_correction(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let c = correction_arg(ctx, 2)?;
    variance(ctx, c, "std")
}

fn std_unbiased(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let c = if ctx.bool(2)? { 1.0 } else { 0.0 };
    variance(ctx, c, "std")
}

/// `var_mean.correction_out(self, dim?, *, correction?, keepdim, out0, out1)`.
fn var_mean_correction(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(7)?;
    let (x, dims, correction, keepdim) = (
        ctx.tensor(0)?,
        ctx.opt_int_list(1)?,
        correction_arg(ctx, 2)?,
        ctx.bool(3)?,
    );
    let (var_out, mean_out) = (ctx.tensor(4)?, ctx.tensor(5)?);
    require_dtype(&x, FLOATS)?;
    require_same_dtype(&x, &var_out)?;
    require_same_dtype(&x, &mean_out)?;
    let dims = reduce_dims(dims, x.rank())?;
    let dl = usize_slice(&dims);
    let c = f64_lit(correction);
    emit_reduction(ctx, &x, &[&var_out, &mean_out], &dims, keepdim, |xi, sizes, o| {
        let (v, m) = (&o[0], &o[1]);
        quote!(::ptec_runtime::kernels::reduce::var_mean(#xi, #sizes, #dl, #c, #v, #m);)
    })
}

/// The floating dtype PyTorch computes `logsumexp`/`norm` in: integral
/// inputs give the default `float32`.
fn check_float_result(x: &TArg, out: &TArg) -> Result<(), String> {
    let want = if x.dtype.is_float() { x.dtype } else { Float };
    if out.dtype != want {
        return Err(format!(
            "output value {} has dtype {}, expected {}",
            out.value, out.dtype, want
        ));
    }
    Ok(())
}

/// `logsumexp.out(self, dim[], keepdim, out)`.
fn logsumexp(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, dims, keepdim, out) = (ctx.tensor(0)?, ctx.int_list(1)?, ctx.bool(2)?, ctx.tensor(3)?);
    check_float_result(&x, &out)?;
    let dims = reduce_dims(Some(dims), x.rank())?;
    emit_reduce(ctx, &x, &out, &dims, keepdim, "logsumexp")
}

/// A vector norm of order `ord` over `dims`.
fn emit_norm(
    ctx: &mut OpCtx<'_>,
    x: TArg,
    ord: f64,
    dims: Option<Vec<i64>>,
    keepdim: bool,
    out: TArg,
) -> Result<TokenStream, String> {
    require_dtype(&x, FLOATS)?;
    require_same_dtype(&x, &out)?;
    let dims = reduce_dims(dims, x.rank())?;
    let dl = usize_slice(&dims);
    let p = f64_lit(ord);
    emit_reduction(ctx, &x, &[&out], &dims, keepdim, |xi, sizes, o| {
        let o = &o[0];
        quote!(::ptec_runtime::kernels::reduce::norm(#xi, #sizes, #dl, #p, #o);)
    })
}

/// `norm.ScalarOpt_dim_out(self, p?, dim[], keepdim, out)`.
fn norm_scalar_opt_dim(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, p, dims, keepdim, out) = (
        ctx.tensor(0)?,
        ctx.opt_double(1)?,
        ctx.int_list(2)?,
        ctx.bool(3)?,
        ctx.tensor(4)?,
    );
    emit_norm(ctx, x, p.unwrap_or(2.0), Some(dims), keepdim, out)
}

/// `linalg_vector_norm.out(self, ord, dim?, keepdim, *, dtype?, out)`.
fn linalg_vector_norm(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(7)?;
    let (x, ord, dims, keepdim, dtype, out) = (
        ctx.tensor(0)?,
        ctx.double(1)?,
        ctx.opt_int_list(2)?,
        ctx.bool(3)?,
        opt_dtype(ctx, 4)?,
        ctx.tensor(5)?,
    );
    if dtype.is_some_and(|d| d != x.dtype) {
        return Err("linalg_vector_norm with a dtype other than the input's is not supported".into());
    }
    emit_norm(ctx, x, ord, dims, keepdim, out)
}

/// `cumsum.out(self, dim, *, dtype?, out)` and `cumprod`.
fn scan(ctx: &mut OpCtx<'_>, kernel: &str) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, dim, dtype, out) = (ctx.tensor(0)?, ctx.int(1)?, opt_dtype(ctx, 2)?, ctx.tensor(3)?);
    check_accumulating_dtype(&x, dtype, &out)?;
    require_contiguous(&[&x, &out])?;
    let d = lit(norm_dim(dim, x.rank())?);
    if !x.dynamic {
        require_sizes(&out, &x.sizes)?;
    }
    let sizes = ctx.sizes(&x);
    let set = ctx.set_sizes(&out, sizes.clone());
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let f = format_ident!("{}", kernel);
    Ok(quote! { #set #s1 #s2 ::ptec_runtime::kernels::reduce::#f(#xi, #sizes, #d, #o); })
}

fn cumsum(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    scan(ctx, "cumsum")
}
fn cumprod(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    scan(ctx, "cumprod")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_normalise_like_pytorch() {
        assert_eq!(reduce_dims(None, 3).unwrap(), vec![0, 1, 2]);
        assert_eq!(reduce_dims(Some(vec![]), 2).unwrap(), vec![0, 1]);
        assert_eq!(reduce_dims(Some(vec![-1, 0]), 3).unwrap(), vec![0, 2]);
        assert!(reduce_dims(Some(vec![1, -2]), 3).is_err());
        assert!(reduce_dims(Some(vec![3]), 3).is_err());
        // a 0-dim tensor accepts dim 0 / -1 and reduces nothing
        assert_eq!(reduce_dims(Some(vec![-1]), 0).unwrap(), Vec::<usize>::new());
    }

    #[test]
    fn reduced_shapes() {
        // x.sum(dim=1) of [3, 4, 5] is [3, 5]; keepdim gives [3, 1, 5]
        assert_eq!(reduced_sizes(&[3, 4, 5], &[1], false), vec![3, 5]);
        assert_eq!(reduced_sizes(&[3, 4, 5], &[1], true), vec![3, 1, 5]);
        assert_eq!(reduced_sizes(&[3, 4, 5], &[0, 1, 2], false), Vec::<usize>::new());
        assert_eq!(reduced_sizes(&[3, 4, 5], &[0, 2], true), vec![1, 4, 1]);
    }

    fn t(dtype: ScalarType) -> TArg {
        TArg {
            value: 0,
            dtype,
            sizes: vec![2],
            dynamic: false,
            contiguous: true,
            dim_order: vec![0],
            home: crate::plan::layout::Home::None,
        }
    }

    #[test]
    fn sums_of_integers_default_to_int64() {
        assert!(check_accumulating_dtype(&t(Int), None, &t(Long)).is_ok());
        assert!(check_accumulating_dtype(&t(Bool), None, &t(Long)).is_ok());
        assert!(check_accumulating_dtype(&t(Int), None, &t(Int)).is_err());
        assert!(check_accumulating_dtype(&t(Int), Some(Int), &t(Int)).is_ok());
        assert!(check_accumulating_dtype(&t(Half), None, &t(Half)).is_ok());
        assert!(check_accumulating_dtype(&t(Float), Some(Double), &t(Double)).is_ok());
        // PyTorch casts each float to the integer dtype before summing
        assert!(check_accumulating_dtype(&t(Float), Some(Long), &t(Long)).is_err());
    }

    #[test]
    fn means_need_a_floating_result() {
        assert!(check_float_reduction(&t(Float), None, &t(Float)).is_ok());
        assert!(check_float_reduction(&t(Long), None, &t(Float)).is_err());
        assert!(check_float_reduction(&t(Long), Some(Float), &t(Float)).is_ok());
        assert!(check_float_reduction(&t(Float), Some(Double), &t(Float)).is_err());
    }
}
