//! Joining and taking apart: `cat` and `stack`, splits and `unbind`,
//! slices, `narrow` and `select`, and the scatters of a slice or a
//! selection.
use super::*;

/// `cat.out(tensors, dim, out)`.
pub(super) fn cat(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (inputs, dim, out) = (ctx.tensor_list(0)?, ctx.int(1)?, ctx.tensor(2)?);
    // PyTorch skips legacy empty tensors of shape [0].
    let kept: Vec<&TArg> = inputs.iter().filter(|t| t.sizes != [0] || t.dynamic).collect();
    let mut all: Vec<&TArg> = kept.clone();
    all.push(&out);
    require_same(&all)?;
    let Some(first) = kept.first() else {
        require_sizes(&out, &[0])?;
        return Ok(quote!());
    };
    let rank = first.rank();
    if rank == 0 {
        return Err("zero-dimensional tensors cannot be concatenated".into());
    }
    let d = norm_dim(dim, rank)?;
    for t in &kept {
        let agree = t.rank() == rank && (0..rank).all(|j| j == d || t.sizes[j] == first.sizes[j]);
        if !agree {
            return Err(format!(
                "cat along dim {d} of sizes {:?} and {:?}",
                first.sizes, t.sizes
            ));
        }
    }
    let mut stmts = Vec::new();
    let shapes: Vec<TokenStream> = kept.iter().map(|t| ctx.sizes(t)).collect();
    if kept.iter().any(|t| t.dynamic) {
        let err = shape_mismatch(ctx);
        let r = lit(rank);
        let dl = lit(d);
        stmts.push(quote! {
            let shapes: &[&[usize]] = &[#(#shapes),*];
            let mut os = [0usize; #r];
            os.copy_from_slice(shapes[0]);
            os[#dl] = 0;
            for s in shapes {
                if (0..#r).any(|j| j != #dl && s[j] != shapes[0][j]) {
                    return Err(#err);
                }
                os[#dl] += s[#dl];
            }
        });
        stmts.push(set_out_sizes(ctx, &out, quote!(&os[..])));
    } else {
        let mut want = first.sizes.clone();
        want[d] = kept.iter().map(|t| t.sizes[d]).sum();
        require_sizes(&out, &want)?;
        stmts.push(ctx.set_sizes(&out, usize_slice(&want)));
    }
    let mut names = Vec::new();
    for t in &kept {
        let (n, s) = ctx.read(t)?;
        stmts.push(s);
        names.push(n);
    }
    let (o, s) = ctx.write(&out)?;
    stmts.push(s);
    let k = kernels();
    let dl = lit(d);
    stmts.push(quote!(#k::cat(&[#(#names),*], &[#(#shapes),*], #dl, #o);));
    Ok(quote!(#(#stmts)*))
}

/// `stack.out(tensors, dim, out)`.
pub(super) fn stack(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (inputs, dim, out) = (ctx.tensor_list(0)?, ctx.int(1)?, ctx.tensor(2)?);
    let mut all: Vec<&TArg> = inputs.iter().collect();
    all.push(&out);
    require_same(&all)?;
    let Some(first) = inputs.first() else {
        return Err("stack expects a non-empty list of tensors".into());
    };
    if let Some(t) = inputs.iter().find(|t| t.sizes != first.sizes) {
        return Err(format!("stack of sizes {:?} and {:?}", first.sizes, t.sizes));
    }
    let d = norm_dim(dim, first.rank() + 1)?;
    let mut want = first.sizes.clone();
    want.insert(d, inputs.len());
    let mut stmts = Vec::new();
    if inputs.iter().any(|t| t.dynamic) {
        // Varying inputs: all of one live shape, which sets the output's.
        require_rank(&out, want.len())?;
        let shapes: Vec<TokenStream> = inputs.iter().map(|t| ctx.sizes(t)).collect();
        let (err, r, dl, n) = (shape_mismatch(ctx), lit(want.len()), lit(d), lit(inputs.len()));
        let set = set_out_sizes(ctx, &out, quote!(&os[..]));
        stmts.push(quote! {
            let shapes: &[&[usize]] = &[#(#shapes),*];
            if shapes.iter().any(|s| *s != shapes[0]) {
                return Err(#err);
            }
            let mut os = [0usize; #r];
            for (k, o) in os.iter_mut().enumerate() {
                *o = match k.cmp(&#dl) {
                    ::core::cmp::Ordering::Less => shapes[0][k],
                    ::core::cmp::Ordering::Equal => #n,
                    ::core::cmp::Ordering::Greater => shapes[0][k - 1],
                };
            }
            #set
        });
    } else {
        require_sizes(&out, &want)?;
    }
    let mut names = Vec::new();
    for t in &inputs {
        let (n, s) = ctx.read(t)?;
        stmts.push(s);
        names.push(n);
    }
    let (o, s) = ctx.write(&out)?;
    stmts.push(s);
    let (k, sizes, dl) = (kernels(), ctx.sizes(first), lit(d));
    stmts.push(quote!(#k::stack(&[#(#names),*], #sizes, #dl, #o);));
    Ok(quote!(#(#stmts)*))
}

/// Emits a split of `x` along `d` into `outs` of `parts[k]` rows each
/// (`outs[k]` may drop `d` when `squeeze`, as `unbind` does).
pub(super) fn emit_split(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    d: usize,
    parts: &[usize],
    outs: &[TArg],
    squeeze: bool,
) -> Result<TokenStream, String> {
    let mut all: Vec<&TArg> = outs.iter().collect();
    all.push(x);
    require_same(&all)?;
    if outs.len() != parts.len() {
        return Err(format!("{} outputs for {} parts", outs.len(), parts.len()));
    }
    // With a varying input the split dim must hold the parts at run time;
    // the other dims follow the input's live sizes.
    let total: usize = parts.iter().sum();
    if total != x.sizes[d] && !x.dynamic {
        return Err(format!(
            "split sizes {parts:?} do not add up to {} along dim {d}",
            x.sizes[d]
        ));
    }
    let mut stmts = Vec::new();
    if x.dynamic {
        let (xs, err, r) = (ctx.sizes(x), shape_mismatch(ctx), lit(x.rank()));
        let (dl, tl) = (lit(d), lit(total));
        stmts.push(quote! {
            let xs: &[usize] = #xs;
            if xs[#dl] != #tl {
                return Err(#err);
            }
        });
        for (t, &n) in outs.iter().zip(parts) {
            require_rank(t, if squeeze { x.rank() - 1 } else { x.rank() })?;
            let nl = lit(n);
            let fix = if squeeze {
                let r1 = lit(x.rank() - 1);
                quote! {
                    let mut os = [0usize; #r1];
                    for (o, &s) in os.iter_mut().zip(xs[..#dl].iter().chain(&xs[#dl + 1..])) {
                        *o = s;
                    }
                }
            } else {
                quote! {
                    let mut os = [0usize; #r];
                    os.copy_from_slice(xs);
                    os[#dl] = #nl;
                }
            };
            let set = set_out_sizes(ctx, t, quote!(&os[..]));
            stmts.push(quote! { { #fix #set } });
        }
    } else {
        for (t, &n) in outs.iter().zip(parts) {
            let mut want = x.sizes.clone();
            if squeeze {
                want.remove(d);
            } else {
                want[d] = n;
            }
            require_sizes(t, &want)?;
        }
    }
    let (xi, s1) = ctx.read(x)?;
    stmts.push(s1);
    let mut names = Vec::new();
    for t in outs {
        let (n, s) = ctx.write(t)?;
        stmts.push(s);
        names.push(n);
    }
    let (k, sizes, dl, ps) = (kernels(), ctx.sizes(x), lit(d), usize_slice(parts));
    stmts.push(quote!(#k::split_with_sizes_copy(#xi, #sizes, #dl, #ps, &mut [#(#names),*]);));
    Ok(quote!(#(#stmts)*))
}

/// `split_with_sizes_copy.out(self, split_sizes, dim, out[])`.
pub(super) fn split_with_sizes_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, sizes, dim, outs) = (ctx.tensor(0)?, ctx.int_list(1)?, ctx.int(2)?, ctx.tensor_list(3)?);
    let d = norm_dim(dim, x.rank())?;
    if x.rank() == 0 {
        return Err("split of a zero-dimensional tensor".into());
    }
    let parts = sizes
        .iter()
        .map(|&s| usize::try_from(s).map_err(|_| format!("negative split size {s}")))
        .collect::<Result<Vec<_>, _>>()?;
    emit_split(ctx, &x, d, &parts, &outs, false)
}

/// The parts of `split(split_size)` of a dim of `n`: equal parts, the last
/// one smaller; one (empty) part for an empty dim.
pub(super) fn split_parts(n: usize, split_size: i64) -> Result<Vec<usize>, String> {
    if split_size < 0 || (split_size == 0 && n > 0) {
        return Err(format!("split size {split_size} for a dim of size {n}"));
    }
    if n == 0 {
        return Ok(vec![0]);
    }
    let s = split_size as usize;
    Ok((0..n.div_ceil(s)).map(|k| s.min(n - k * s)).collect())
}

/// `split_copy.Tensor_out(self, split_size, dim, out[])`.
pub(super) fn split_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, split_size, dim, outs) = (ctx.tensor(0)?, ctx.int(1)?, ctx.int(2)?, ctx.tensor_list(3)?);
    if x.rank() == 0 {
        return Err("split of a zero-dimensional tensor".into());
    }
    let d = norm_dim(dim, x.rank())?;
    let parts = split_parts(x.sizes[d], split_size)?;
    emit_split(ctx, &x, d, &parts, &outs, false)
}

/// `unbind_copy.int_out(self, dim, out[])`.
pub(super) fn unbind_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, dim, outs) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor_list(2)?);
    if x.rank() == 0 {
        return Err("unbind of a zero-dimensional tensor".into());
    }
    let d = norm_dim(dim, x.rank())?;
    emit_split(ctx, &x, d, &vec![1; x.sizes[d]], &outs, true)
}

// ---------------------------------------------------------------------------
// Slicing.

/// `(start, end, step)` of a slice, normalised where PyTorch does it at
/// trace time: `None` bounds stay `None` (the kernel clamps).
pub(super) fn slice_parts(ctx: &OpCtx<'_>, first: usize) -> Result<(Option<IntArg>, Option<IntArg>, i64), String> {
    let start = opt_int_arg(ctx, first)?;
    let end = opt_int_arg(ctx, first + 1)?;
    let step = ctx.int(first + 2)?;
    if step <= 0 {
        return Err(format!("slice step must be positive, is {step}"));
    }
    Ok((start, end, step))
}

/// An optional slice bound known at compile time (`Some(None)`: absent),
/// or `None` when the run computes it.
fn known_bound(v: &Option<IntArg>) -> Option<Option<i64>> {
    match v {
        None => Some(None),
        Some(v) => v.constant().map(Some),
    }
}

pub(super) fn opt_expr(v: &Option<IntArg>) -> TokenStream {
    match v {
        Some(v) => {
            let e = v.expr();
            quote!(Some(#e))
        }
        None => quote!(None),
    }
}

/// Emits `slice_copy(x, d, start, end, step)` into `out`.
pub(super) fn emit_slice(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    out: &TArg,
    d: usize,
    start: Option<IntArg>,
    end: Option<IntArg>,
    step: i64,
) -> Result<TokenStream, String> {
    require_same(&[x, out])?;
    let set = match (x.dynamic, known_bound(&start), known_bound(&end)) {
        (false, Some(s), Some(e)) => {
            let len = ptec_runtime::kernels::shape::slice_output_len(x.sizes[d], s, e, step).expect("positive step");
            let mut want = x.sizes.clone();
            want[d] = len;
            require_sizes(out, &want)?;
            ctx.set_sizes(out, usize_slice(&want))
        }
        _ => {
            require_rank(out, x.rank())?;
            let (xs, r, dl) = (ctx.sizes(x), lit(x.rank()), lit(d));
            let (s, e, st) = (opt_expr(&start), opt_expr(&end), i64_lit(step));
            let k = kernels();
            let set = set_out_sizes(ctx, out, quote!(&os[..]));
            quote! {
                let os: [usize; #r] = {
                    let xs: &[usize] = #xs;
                    let mut os = [0usize; #r];
                    os.copy_from_slice(xs);
                    os[#dl] = #k::slice_output_len(xs[#dl], #s, #e, #st).unwrap_or(0);
                    os
                };
                #set
            }
        }
    };
    let sizes = ctx.sizes(x);
    let (xi, s1) = ctx.read(x)?;
    let (o, s2) = ctx.write(out)?;
    let (k, dl, s, e, st) = (kernels(), lit(d), opt_expr(&start), opt_expr(&end), i64_lit(step));
    let call = ctx.kernel_result(quote!(#k::slice_copy(#xi, #sizes, #dl, #s, #e, #st, #o)));
    Ok(quote! { #set #s1 #s2 #call })
}

/// `slice_copy.Tensor_out(self, dim, start?, end?, step, out)`.
pub(super) fn slice_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(7)?;
    let (x, dim, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor(5)?);
    if x.rank() == 0 {
        return Err("slice of a zero-dimensional tensor".into());
    }
    let d = norm_dim(dim, x.rank())?;
    let (start, end, step) = slice_parts(ctx, 2)?;
    emit_slice(ctx, &x, &out, d, start, end, step)
}

/// `narrow_copy.out(self, dim, start, length, out)`: `slice(start,
/// start + length)` with `start` wrapped once and the range checked.
pub(super) fn narrow_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, dim, start, length, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.int(2)?, ctx.int(3)?, ctx.tensor(4)?);
    if x.rank() == 0 {
        return Err("narrow of a zero-dimensional tensor".into());
    }
    if x.dynamic {
        return Err(no_dynamic(ctx));
    }
    let d = norm_dim(dim, x.rank())?;
    let n = x.sizes[d] as i64;
    let s = if start < 0 { start + n } else { start };
    if s < 0 || s > n || length < 0 || s + length > n {
        return Err(format!("narrow({start}, {length}) of a dim of size {n}"));
    }
    emit_slice(
        ctx,
        &x,
        &out,
        d,
        Some(IntArg::Const(s)),
        Some(IntArg::Const(s + length)),
        1,
    )
}

/// `select_copy.int_out(self, dim, index, out)`.
pub(super) fn select_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, dim, index, out) = (ctx.tensor(0)?, ctx.int(1)?, int_arg(ctx, 2)?, ctx.tensor(3)?);
    require_same(&[&x, &out])?;
    if x.rank() == 0 {
        return Err("select of a zero-dimensional tensor".into());
    }
    let d = norm_dim(dim, x.rank())?;
    if let (Some(i), false) = (index.constant(), x.dynamic) {
        let n = x.sizes[d] as i64;
        if i < -n || i >= n {
            return Err(format!("index {i} is out of range for dim {d} of size {n}"));
        }
    }
    let mut map = identity(x.rank());
    map.remove(d);
    let set = map_sizes(ctx, &x, &out, &map)?;
    let sizes = ctx.sizes(&x);
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let (k, dl, ix) = (kernels(), lit(d), index.expr());
    let call = ctx.kernel_result(quote!(#k::select_copy(#xi, #sizes, #dl, #ix, #o)));
    Ok(quote! { #set #s1 #s2 #call })
}

/// Emits `out = copy of x` then `body(out view)`: the scatter-like ops
/// that write part of a copy of their input.
pub(in crate::codegen::ops) fn emit_copy_then(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    out: &TArg,
    body: impl FnOnce(&mut OpCtx<'_>, &Ident) -> Result<TokenStream, String>,
) -> Result<TokenStream, String> {
    require_same(&[x, out])?;
    if x.dynamic || out.dynamic {
        return Err(no_dynamic(ctx));
    }
    require_sizes(out, &x.sizes)?;
    let (o, so) = ctx.write(out)?;
    let copy = if x.home == out.home {
        quote!()
    } else {
        let (xi, sx) = ctx.read(x)?;
        quote! { #sx ::ptec_runtime::kernels::shape::copy(#xi, #o); }
    };
    let b = body(ctx, &o)?;
    Ok(quote! { #so #copy #b })
}

/// `select_scatter.out(self, src, dim, index, out)`: a copy of `self` with
/// `select(dim, index)` replaced by `src`.
pub(super) fn select_scatter(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, src, dim, index, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.int(2)?, ctx.int(3)?, ctx.tensor(4)?);
    require_same(&[&x, &src])?;
    if x.rank() == 0 {
        return Err("select_scatter of a zero-dimensional tensor".into());
    }
    let d = norm_dim(dim, x.rank())?;
    let n = x.sizes[d] as i64;
    if index < -n || index >= n {
        return Err(format!("index {index} is out of range for dim {d} of size {n}"));
    }
    let mut want = x.sizes.clone();
    want.remove(d);
    if src.sizes != want || src.dynamic {
        return Err(format!(
            "select_scatter source of sizes {:?}, expected {:?}",
            src.sizes, want
        ));
    }
    let sizes = usize_slice(&x.sizes);
    emit_copy_then(ctx, &x, &out, |ctx, o| {
        let (si, s) = ctx.read(&src)?;
        let (k, dl, ix) = (kernels(), lit(d), i64_lit(index));
        let call = ctx.kernel_result(quote!(#k::select_scatter(#o, #sizes, #dl, #ix, #si)));
        Ok(quote! { #s #call })
    })
}

/// `slice_scatter.out(self, src, dim, start?, end?, step, out)`: a copy of
/// `self` with `slice(dim, start, end, step)` replaced by `src`.
pub(super) fn slice_scatter(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(8)?;
    let (x, src, dim, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.int(2)?, ctx.tensor(6)?);
    require_same(&[&x, &src])?;
    if x.rank() == 0 {
        return Err("slice_scatter of a zero-dimensional tensor".into());
    }
    let d = norm_dim(dim, x.rank())?;
    let (start, end, step) = slice_parts(ctx, 3)?;
    let (start, end) = match (known_bound(&start), known_bound(&end)) {
        (Some(s), Some(e)) if !src.dynamic => (s, e),
        // A window known only at run time (a KV cache written at the
        // position of the tokens given): the kernel checks that the
        // source's live sizes are the slice's.
        _ => return slice_scatter_live(ctx, (&x, &src, &out), d, (start, end, step)),
    };
    let len = ptec_runtime::kernels::shape::slice_output_len(x.sizes[d], start, end, step).expect("positive step");
    let mut want = x.sizes.clone();
    want[d] = len;
    if src.sizes != want || src.dynamic {
        return Err(format!(
            "slice_scatter source of sizes {:?}, expected {:?}",
            src.sizes, want
        ));
    }
    let sizes = usize_slice(&x.sizes);
    emit_copy_then(ctx, &x, &out, |ctx, o| {
        let (si, s) = ctx.read(&src)?;
        let (k, dl) = (kernels(), lit(d));
        let (s0, e0, st) = (
            opt_expr(&start.map(IntArg::Const)),
            opt_expr(&end.map(IntArg::Const)),
            i64_lit(step),
        );
        let call = ctx.kernel_result(quote!(#k::slice_scatter(#o, #sizes, #dl, #s0, #e0, #st, #si)));
        Ok(quote! { #s #call })
    })
}

/// [`slice_scatter`] of a source or window whose sizes are known only at
/// run time, into a static `self`.
fn slice_scatter_live(
    ctx: &mut OpCtx<'_>,
    (x, src, out): (&TArg, &TArg, &TArg),
    d: usize,
    (start, end, step): (Option<IntArg>, Option<IntArg>, i64),
) -> Result<TokenStream, String> {
    if src.rank() != x.rank() {
        return Err(format!(
            "slice_scatter source of rank {}, expected {}",
            src.rank(),
            x.rank()
        ));
    }
    let sizes = usize_slice(&x.sizes);
    let src_sizes = ctx.sizes(src);
    emit_copy_then(ctx, x, out, |ctx, o| {
        let (si, s) = ctx.read(src)?;
        let (k, dl) = (kernels(), lit(d));
        let (s0, e0, st) = (opt_expr(&start), opt_expr(&end), i64_lit(step));
        let call = ctx.kernel_result(quote!(#k::slice_scatter_live(#o, #sizes, #dl, (#s0, #e0, #st), #si, #src_sizes)));
        Ok(quote! { #s #call })
    })
}
