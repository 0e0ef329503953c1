//! Data-dependent indexing: advanced indexing (`index.Tensor`,
//! `index_put`), `index_select`, `gather`, `embedding`, the scatters and
//! `masked_fill`. Index values are checked by the kernels at run time
//! (an out-of-range index is a `KernelError`); shapes are checked here.
use super::checks::{no_dynamic, require_same, scalar_value, set_out_sizes, shape_mismatch};
use super::elementwise::{compute_type, emit_map, scalar_in};
use super::shape::emit_copy_then;
use super::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("aten::index.Tensor_out", index_tensor),
    ("aten::index_put.out", index_put),
    ("aten::index_put_", index_put_inplace),
    ("aten::index_select.out", index_select),
    ("aten::gather.out", gather),
    ("aten::embedding.out", embedding),
    ("aten::scatter.src_out", scatter_src),
    ("aten::scatter.value_out", scatter_value),
    ("aten::scatter_add.out", scatter_add),
    ("aten::masked_fill.Scalar_out", masked_fill_scalar),
    ("aten::masked_fill.Tensor_out", masked_fill_tensor),
    ("aten::masked_scatter.out", masked_scatter),
    ("aten::masked_select.out", masked_select),
    ("aten::nonzero.out", nonzero),
    ("aten::repeat_interleave.Tensor_out", repeat_interleave),
];

fn kernels() -> TokenStream {
    quote!(::ptec_runtime::kernels::index)
}

/// Requires an integer index tensor of static shape.
fn require_index(ctx: &OpCtx<'_>, t: &TArg) -> Result<(), String> {
    require_index_dtype(t)?;
    if t.dynamic {
        return Err(no_dynamic(ctx));
    }
    Ok(())
}

/// Requires a contiguous integer index tensor (of any shape).
fn require_index_dtype(t: &TArg) -> Result<(), String> {
    require_contiguous(&[t])?;
    if t.dtype == ScalarType::Bool || t.dtype.is_float() {
        return Err(format!(
            "index value {} has dtype {}; integer indices are supported (boolean masks have a data-dependent shape)",
            t.value, t.dtype
        ));
    }
    Ok(())
}

/// Requires static shapes on every tensor.
fn require_static(ctx: &OpCtx<'_>, ts: &[&TArg]) -> Result<(), String> {
    if ts.iter().any(|t| t.dynamic) {
        Err(no_dynamic(ctx))
    } else {
        Ok(())
    }
}

/// `a + b` for elements of dtype `d` (the accumulation of `index_put` and
/// `scatter_add`), as a closure.
fn add_closure(d: ScalarType) -> TokenStream {
    use ScalarType::*;
    let ty = rust_type(d).expect("supported dtype");
    match d {
        Half | BFloat16 => quote!(|a: #ty, b: #ty| #ty::from_f32(a.to_f32() + b.to_f32())),
        Float | Double => quote!(|a: #ty, b: #ty| a + b),
        Bool => quote!(|a: bool, b: bool| a | b),
        _ => quote!(|a: #ty, b: #ty| a.wrapping_add(b)),
    }
}

/// The index tensors of `index.Tensor` / `index_put`, checked, as views:
/// returns the statements and the `IndexArg` array expression.
fn emit_indices(ctx: &mut OpCtx<'_>, indices: &[Option<TArg>]) -> Result<(TokenStream, TokenStream), String> {
    let present: Vec<&TArg> = indices.iter().flatten().collect();
    for t in &present {
        require_index_dtype(t)?;
    }
    let dtype = present.first().map_or(ScalarType::Long, |t| t.dtype);
    if let Some(t) = present.iter().find(|t| t.dtype != dtype) {
        return Err(format!(
            "index tensors of dtypes {dtype} and {}; ptec needs one index dtype",
            t.dtype
        ));
    }
    let ty = rust_type(dtype).expect("integer dtype");
    let mut stmts = Vec::new();
    let mut items = Vec::new();
    for t in indices {
        match t {
            None => items.push(quote!(None)),
            Some(t) => {
                let (n, s) = ctx.read(t)?;
                stmts.push(s);
                let sizes = ctx.sizes(t);
                items.push(quote!(Some((#n, #sizes))));
            }
        }
    }
    let n = lit(indices.len());
    let k = kernels();
    stmts.push(quote! { let indices: [#k::IndexArg<'_, #ty>; #n] = [#(#items),*]; });
    Ok((quote!(#(#stmts)*), quote!(&indices)))
}

/// The output sizes of advanced indexing of `sizes`.
fn indexed_sizes(sizes: &[usize], indices: &[Option<TArg>]) -> Result<Vec<usize>, String> {
    let shapes: Vec<Option<&[usize]>> = indices.iter().map(|t| t.as_ref().map(|t| &t.sizes[..])).collect();
    let (s, r) = ptec_runtime::kernels::index::index_output_sizes(sizes, &shapes)
        .ok_or_else(|| format!("indices of shapes {shapes:?} do not index a tensor of sizes {sizes:?}"))?;
    Ok(s[..r].to_vec())
}

/// `index.Tensor_out(self, indices, out)`.
fn index_tensor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, indices, out) = (ctx.tensor(0)?, ctx.opt_tensor_list(1)?, ctx.tensor(2)?);
    require_same(&[&x, &out])?;
    // With dynamic sizes, these are the bounds' sizes: the rank is fixed.
    let want = indexed_sizes(&x.sizes, &indices)?;
    let dynamic = x.dynamic || out.dynamic || indices.iter().flatten().any(|t| t.dynamic);
    let set = if dynamic {
        require_rank(&out, want.len())?;
        let shapes = indices.iter().map(|t| match t {
            Some(t) => {
                let s = ctx.sizes(t);
                quote!(Some(#s))
            }
            None => quote!(None),
        });
        let (k, xs, n) = (kernels(), ctx.sizes(&x), lit(indices.len()));
        let err = shape_mismatch(ctx);
        let set = set_out_sizes(ctx, &out, quote!(&os[..r]));
        quote! {
            let shapes: [Option<&[usize]>; #n] = [#(#shapes),*];
            let Some((os, r)) = #k::index_output_sizes(#xs, &shapes) else {
                return Err(#err);
            };
            #set
        }
    } else {
        require_sizes(&out, &want)?;
        quote!()
    };
    let (xi, s1) = ctx.read(&x)?;
    let (idx_stmts, idx) = emit_indices(ctx, &indices)?;
    let (o, s2) = ctx.write(&out)?;
    let (k, sizes) = (kernels(), ctx.sizes(&x));
    let call = ctx.kernel_result(quote!(#k::index(#xi, #sizes, #idx, #o)));
    Ok(quote! { #set #s1 #idx_stmts #s2 #call })
}

/// Writes `values` at `indices` of the view `dst` (of `x`'s sizes).
fn emit_put(
    ctx: &mut OpCtx<'_>,
    dst: &Ident,
    x: &TArg,
    indices: &[Option<TArg>],
    values: &TArg,
    accumulate: bool,
) -> Result<TokenStream, String> {
    let (vi, sv) = ctx.read(values)?;
    let (idx_stmts, idx) = emit_indices(ctx, indices)?;
    let (k, sizes, vs) = (kernels(), usize_slice(&x.sizes), ctx.sizes(values));
    let call = if accumulate {
        let add = add_closure(x.dtype);
        ctx.kernel_result(quote!(#k::index_put_accumulate(#dst, #sizes, #idx, #vi, #vs, #add)))
    } else {
        ctx.kernel_result(quote!(#k::index_put(#dst, #sizes, #idx, #vi, #vs)))
    };
    Ok(quote! { #sv #idx_stmts #call })
}

/// Checks the arguments of `index_put`: `values` broadcasts to the indexed
/// shape.
fn check_put(ctx: &OpCtx<'_>, x: &TArg, indices: &[Option<TArg>], values: &TArg) -> Result<(), String> {
    require_same(&[x, values])?;
    require_static(ctx, &[x])?;
    let want = indexed_sizes(&x.sizes, indices)?;
    // Varying indices or values: the kernel checks their live shapes.
    if values.dynamic || indices.iter().flatten().any(|t| t.dynamic) {
        return Ok(());
    }
    match ptec_runtime::kernels::elementwise::broadcast_sizes(&want, &values.sizes) {
        Some((s, r)) if s[..r] == want[..] => Ok(()),
        _ => Err(format!(
            "values of sizes {:?} do not broadcast to the indexed shape {want:?}",
            values.sizes
        )),
    }
}

/// `index_put.out(self, indices, values, accumulate, out)`: `out` is a copy
/// of `self` with `values` put at `indices`.
fn index_put(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, indices, values, accumulate, out) = (
        ctx.tensor(0)?,
        ctx.opt_tensor_list(1)?,
        ctx.tensor(2)?,
        ctx.bool(3)?,
        ctx.tensor(4)?,
    );
    check_put(ctx, &x, &indices, &values)?;
    emit_copy_then(ctx, &x, &out, |ctx, o| {
        emit_put(ctx, o, &x, &indices, &values, accumulate)
    })
}

/// `index_put_(self, indices, values, accumulate) -> self`.
fn index_put_inplace(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, indices, values, accumulate) = (ctx.tensor(0)?, ctx.opt_tensor_list(1)?, ctx.tensor(2)?, ctx.bool(3)?);
    check_put(ctx, &x, &indices, &values)?;
    let (o, s) = ctx.write(&x)?;
    let put = emit_put(ctx, &o, &x, &indices, &values, accumulate)?;
    Ok(quote! { #s #put })
}

/// `index_select.out(self, dim, index, out)`.
fn index_select(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, dim, index, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor(2)?, ctx.tensor(3)?);
    require_same(&[&x, &out])?;
    require_static(ctx, &[&x, &out])?;
    require_index(ctx, &index)?;
    if index.rank() > 1 {
        return Err(format!(
            "index_select takes a 0-d or 1-d index, got sizes {:?}",
            index.sizes
        ));
    }
    let d = norm_dim(dim, x.rank())?;
    let mut want = x.sizes.clone();
    if x.rank() == 0 {
        if index.numel() != 1 {
            return Err("index_select of a zero-dimensional tensor takes one index".into());
        }
    } else {
        want[d] = index.numel();
    }
    require_sizes(&out, &want)?;
    let (xi, s1) = ctx.read(&x)?;
    let (ii, s2) = ctx.read(&index)?;
    let (o, s3) = ctx.write(&out)?;
    let (k, sizes, dl) = (kernels(), usize_slice(&x.sizes), lit(d));
    let call = ctx.kernel_result(quote!(#k::index_select(#xi, #sizes, #dl, #ii, #o)));
    Ok(quote! { #s1 #s2 #s3 #call })
}

/// Checks an index of `gather`/`scatter` against `self` (`x`) and
/// optionally the source: same rank, and no larger than `x` off `dim`
/// (nor than the source anywhere).
fn check_scatter_index(x: &TArg, d: usize, index: &TArg, src: Option<&TArg>) -> Result<(), String> {
    if index.rank() != x.rank() {
        return Err(format!(
            "index of rank {} for a tensor of rank {}",
            index.rank(),
            x.rank()
        ));
    }
    for j in 0..x.rank() {
        if j != d && index.sizes[j] > x.sizes[j] {
            return Err(format!(
                "index sizes {:?} exceed the tensor's {:?} at dim {j}",
                index.sizes, x.sizes
            ));
        }
        if let Some(s) = src {
            if s.rank() != x.rank() || index.sizes[j] > s.sizes[j] {
                return Err(format!(
                    "index sizes {:?} exceed the source's {:?}",
                    index.sizes, s.sizes
                ));
            }
        }
    }
    Ok(())
}

/// `gather.out(self, dim, index, *, sparse_grad, out)`.
fn gather(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, dim, index, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor(2)?, ctx.tensor(4)?);
    require_same(&[&x, &out])?;
    require_index_dtype(&index)?;
    let d = norm_dim(dim, x.rank())?;
    // With dynamic sizes the bounds are checked here, the live sizes by
    // the kernel.
    let dynamic = x.dynamic || index.dynamic || out.dynamic;
    let set = if dynamic {
        if index.rank() != x.rank() || out.rank() != x.rank() {
            return Err(format!(
                "gather of rank {} with an index of rank {}",
                x.rank(),
                index.rank()
            ));
        }
        let is = ctx.sizes(&index);
        set_out_sizes(ctx, &out, is)
    } else {
        check_scatter_index(&x, d, &index, None)?;
        require_sizes(&out, &index.sizes)?;
        quote!()
    };
    let (xi, s1) = ctx.read(&x)?;
    let (ii, s2) = ctx.read(&index)?;
    let (o, s3) = ctx.write(&out)?;
    let (k, sizes, dl, is) = (kernels(), ctx.sizes(&x), lit(d), ctx.sizes(&index));
    let call = ctx.kernel_result(quote!(#k::gather(#xi, #sizes, #dl, #ii, #is, #o)));
    Ok(quote! { #set #s1 #s2 #s3 #call })
}

/// `embedding.out(weight, indices, padding_idx, scale_grad_by_freq, sparse,
/// out)`: rows of `weight`; the other arguments only matter for gradients.
fn embedding(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(7)?;
    let (w, indices, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(5)?);
    require_same(&[&w, &out])?;
    require_static(ctx, &[&w])?;
    // The indices may vary up to their bound (a prompt's tokens); the
    // output then follows them.
    if indices.dynamic != out.dynamic {
        return Err(no_dynamic(ctx));
    }
    let dynamic = indices.dynamic;
    let indices = TArg {
        dynamic: false,
        ..indices
    };
    require_index(ctx, &indices)?;
    let indices = TArg { dynamic, ..indices };
    if w.rank() != 2 {
        return Err(format!("embedding weight must be 2-d, has sizes {:?}", w.sizes));
    }
    let set = gathered_sizes(ctx, &indices, &out, w.sizes[1])?;
    let (wi, s1) = ctx.read(&w)?;
    let (ii, s2) = ctx.read(&indices)?;
    let (o, s3) = ctx.write(&out)?;
    let (k, n, dim) = (kernels(), lit(w.sizes[0]), lit(w.sizes[1]));
    let call = ctx.kernel_result(quote!(#k::embedding(#wi, #n, #dim, #ii, #o)));
    Ok(quote! { #set #s1 #s2 #s3 #call })
}

/// How a scatter combines its source with `self`.
enum Source {
    Tensor { add: bool },
    Value(Scalar),
}

/// `scatter.src_out`, `scatter.value_out`, `scatter_add.out`:
/// `(self, dim, index, src|value, out)`.
fn emit_scatter(ctx: &mut OpCtx<'_>, source: Source) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, dim, index, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor(2)?, ctx.tensor(4)?);
    require_index_dtype(&index)?;
    let d = norm_dim(dim, x.rank())?;
    let src = match source {
        Source::Tensor { .. } => {
            let s = ctx.tensor(3)?;
            require_same(&[&x, &s])?;
            Some(s)
        }
        Source::Value(_) => None,
    };
    // A varying index or source: the kernel checks the live sizes.
    if index.dynamic || src.as_ref().is_some_and(|s| s.dynamic) {
        if index.rank() != x.rank() || src.as_ref().is_some_and(|s| s.rank() != x.rank()) {
            return Err(format!(
                "scatter into rank {} with an index of rank {}",
                x.rank(),
                index.rank()
            ));
        }
    } else {
        check_scatter_index(&x, d, &index, src.as_ref())?;
    }
    let (sizes, dl, is) = (usize_slice(&x.sizes), lit(d), ctx.sizes(&index));
    let k = kernels();
    emit_copy_then(ctx, &x, &out, |ctx, o| {
        let (ii, s1) = ctx.read(&index)?;
        let (stmt, call) = match (&source, &src) {
            (Source::Tensor { add }, Some(src)) => {
                let (si, s2) = ctx.read(src)?;
                let ss = ctx.sizes(src);
                let call = if *add {
                    let f = add_closure(x.dtype);
                    quote!(#k::scatter_add(#o, #sizes, #dl, #ii, #is, #si, #ss, #f))
                } else {
                    quote!(#k::scatter(#o, #sizes, #dl, #ii, #is, #si, #ss))
                };
                (s2, call)
            }
            (Source::Value(v), _) => {
                let v = scalar_value(*v, x.dtype);
                (quote!(), quote!(#k::scatter_value(#o, #sizes, #dl, #ii, #is, #v)))
            }
            _ => unreachable!("a tensor source was read above"),
        };
        let call = ctx.kernel_result(call);
        Ok(quote! { #s1 #stmt #call })
    })
}

fn scatter_src(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    emit_scatter(ctx, Source::Tensor { add: false })
}

fn scatter_value(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    let v = ctx.scalar(3)?;
    emit_scatter(ctx, Source::Value(v))
}

fn scatter_add(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    emit_scatter(ctx, Source::Tensor { add: true })
}

/// Checks `masked_fill`'s tensors: a bool mask, `out` of `self`'s dtype.
fn check_masked_fill(x: &TArg, mask: &TArg, out: &TArg) -> Result<(), String> {
    if mask.dtype != ScalarType::Bool {
        return Err(format!("masked_fill mask must be bool, is {}", mask.dtype));
    }
    if x.dtype != out.dtype {
        return Err(format!("masked_fill from {} into {}", x.dtype, out.dtype));
    }
    Ok(())
}

/// `masked_fill.Scalar_out(self, mask, value, out)`.
fn masked_fill_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, mask, value, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.scalar(2)?, ctx.tensor(3)?);
    check_masked_fill(&x, &mask, &out)?;
    let c = compute_type(x.dtype);
    let v = scalar_in(value, c);
    emit_map(
        ctx,
        &[&x, &mask],
        &out,
        &[c, ScalarType::Bool],
        c,
        quote!(if b { #v } else { a }),
        false,
    )
}

/// `masked_fill.Tensor_out(self, mask, value, out)`: `value` is a
/// zero-dimensional tensor.
fn masked_fill_tensor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, mask, value, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?, ctx.tensor(3)?);
    check_masked_fill(&x, &mask, &out)?;
    if value.rank() != 0 {
        return Err(format!(
            "masked_fill value must be zero-dimensional, has sizes {:?}",
            value.sizes
        ));
    }
    let c = compute_type(x.dtype);
    emit_map(
        ctx,
        &[&x, &mask, &value],
        &out,
        &[c, ScalarType::Bool, c],
        c,
        quote!(if b { c } else { a }),
        false,
    )
}

/// `masked_scatter.out(self, mask, source, out)`: `self` with the elements
/// where `mask` (broadcast to `self`'s shape) is true taken from `source`
/// in order.
fn masked_scatter(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, mask, source, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?, ctx.tensor(3)?);
    check_masked_fill(&x, &mask, &out)?;
    require_same(&[&x, &source])?;
    require_contiguous(&[&x, &mask, &source, &out])?;
    require_static(ctx, &[&x, &mask, &source, &out])?;
    let b = ptec_runtime::kernels::elementwise::broadcast_sizes(&x.sizes, &mask.sizes);
    if b.is_none_or(|(s, r)| s[..r] != x.sizes[..]) {
        return Err(format!(
            "a mask of sizes {:?} does not broadcast to {:?}",
            mask.sizes, x.sizes
        ));
    }
    require_sizes(&out, &x.sizes)?;
    let mut st = [0usize; ptec_runtime::kernels::MAX_RANK];
    ptec_runtime::kernels::elementwise::broadcast_strides(&x.sizes, &mask.sizes, &mut st);
    let (xi, s1) = ctx.read(&x)?;
    let (mi, s2) = ctx.read(&mask)?;
    let (si, s3) = ctx.read(&source)?;
    let (o, s4) = ctx.write(&out)?;
    let (k, sizes, ms) = (kernels(), usize_slice(&x.sizes), usize_slice(&st[..x.rank()]));
    let call = ctx.kernel_result(quote!(#k::masked_scatter(#xi, #sizes, #mi, #ms, #si, #o)));
    Ok(quote! { #s1 #s2 #s3 #s4 #call })
}

/// `masked_select.out(self, mask, out)`: the elements of `self` where
/// `mask` is true (both broadcast to one shape), as many as the mask says
/// at run time, within `out`'s bound.
fn masked_select(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, mask, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    check_masked_fill(&x, &mask, &out)?;
    require_contiguous(&[&x, &mask, &out])?;
    require_static(ctx, &[&x, &mask])?;
    require_rank(&out, 1)?;
    let (b, r) = ptec_runtime::kernels::elementwise::broadcast_sizes(&x.sizes, &mask.sizes)
        .ok_or_else(|| format!("sizes {:?} and a mask of {:?} do not broadcast", x.sizes, mask.sizes))?;
    let sizes = &b[..r];
    let strides = |t: &TArg| {
        let mut st = [0usize; ptec_runtime::kernels::MAX_RANK];
        ptec_runtime::kernels::elementwise::broadcast_strides(sizes, &t.sizes, &mut st);
        usize_slice(&st[..r])
    };
    let (xs, ms, bs) = (strides(&x), strides(&mask), usize_slice(sizes));
    let (xi, s1) = ctx.read(&x)?;
    let (mi, s2) = ctx.read(&mask)?;
    let k = kernels();
    let set = set_out_sizes(ctx, &out, quote!(&[#k::masked_count(#bs, #mi, #ms)]));
    let (o, s3) = ctx.write(&out)?;
    Ok(quote! { #s1 #s2 #set #s3 #k::masked_select(#xi, #xs, #mi, #ms, #bs, #o); })
}

/// `nonzero.out(self, out)`: one row of indices per non-zero element, as
/// many as there are at run time, within `out`'s bound; `out` row-major or
/// in the column-major dim order PyTorch gives it.
fn nonzero(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    require_contiguous(&[&x])?;
    require_dtype(&out, &[ScalarType::Long])?;
    require_rank(&out, 2)?;
    let column_major = match &out.dim_order[..] {
        [0, 1] => false,
        [1, 0] => true,
        other => return Err(format!("output dim order {other:?}")),
    };
    if out.sizes[1] != x.rank() {
        return Err(format!(
            "output of sizes {:?} for an input of rank {}",
            out.sizes,
            x.rank()
        ));
    }
    let (xi, s1) = ctx.read(&x)?;
    let (k, xs, r) = (kernels(), ctx.sizes(&x), lit(x.rank()));
    let set = set_out_sizes(ctx, &out, quote!(&[count, #r]));
    let (o, s2) = ctx.write(&out)?;
    Ok(quote! { #s1 let count = #k::count_nonzero(#xi); #set #s2 #k::nonzero(#xi, #xs, count, #column_major, #o); })
}

/// `repeat_interleave.Tensor_out(repeats, output_size?, out)`: each index
/// of the 1-d `repeats` as many times as it says, in order.
fn repeat_interleave(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (repeats, out) = (ctx.tensor(0)?, ctx.tensor(2)?);
    require_index_dtype(&repeats)?;
    require_same(&[&repeats, &out])?;
    require_static(ctx, &[&repeats])?;
    if repeats.rank() != 1 {
        return Err(format!("repeats of sizes {:?}, not 1-d", repeats.sizes));
    }
    require_rank(&out, 1)?;
    let (ri, s1) = ctx.read(&repeats)?;
    let (k, ins) = (kernels(), lit(ctx.instruction));
    let count = quote! {
        let n = #k::repeat_count(#ri).map_err(|error| ::ptec_runtime::Error::Kernel { instruction: #ins, error })?;
    };
    let set = set_out_sizes(ctx, &out, quote!(&[n]));
    let (o, s2) = ctx.write(&out)?;
    Ok(quote! { #s1 #count #set #s2 #k::repeat_interleave(#ri, #o); })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dtype: ScalarType, sizes: &[usize]) -> TArg {
        TArg {
            value: 0,
            dtype,
            sizes: sizes.to_vec(),
            dynamic: false,
            contiguous: true,
            dim_order: (0..sizes.len() as u8).collect(),
            home: Home::None,
        }
    }

    #[test]
    fn advanced_indexing_shapes() {
        let l = ScalarType::Long;
        // x[:, idx] with idx [2] on [2, 3, 4] -> [2, 2, 4]
        assert_eq!(indexed_sizes(&[2, 3, 4], &[None, Some(t(l, &[2]))]), Ok(vec![2, 2, 4]));
        // x[i, :, j] with non-adjacent broadcast [2, 1] and [3]: B = [2, 3] goes first
        assert_eq!(
            indexed_sizes(&[5, 6, 7], &[Some(t(l, &[2, 1])), None, Some(t(l, &[3]))]),
            Ok(vec![2, 3, 6])
        );
        assert!(indexed_sizes(&[5, 6], &[Some(t(l, &[2])), Some(t(l, &[3]))]).is_err());
    }

    #[test]
    fn scatter_index_must_fit() {
        let f = ScalarType::Float;
        let x = t(f, &[3, 4]);
        // along dim 0 the index may be longer than self, not elsewhere
        assert!(check_scatter_index(&x, 0, &t(ScalarType::Long, &[5, 4]), None).is_ok());
        assert!(check_scatter_index(&x, 0, &t(ScalarType::Long, &[2, 5]), None).is_err());
        assert!(check_scatter_index(&x, 1, &t(ScalarType::Long, &[3, 2]), Some(&t(f, &[3, 1]))).is_err());
        assert!(check_scatter_index(&x, 1, &t(ScalarType::Long, &[3]), None).is_err());
    }
}
