//! Views and reshapes: permutations, `view_copy` and its aliases,
//! `as_strided_copy`, diagonals and unfolds, squeezes, transposes and
//! expansions.
use super::*;

/// `permute_copy.out(self, dims, out)`.
pub(super) fn permute_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, dims, out) = (ctx.tensor(0)?, ctx.int_list(1)?, ctx.tensor(2)?);
    require_same(&[&x, &out])?;
    let perm = permutation(&dims, x.rank())?;
    let set = map_sizes(ctx, &x, &out, &perm.iter().map(|&d| Dim::Of(d)).collect::<Vec<_>>())?;
    let sizes = ctx.sizes(&x);
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let p = usize_slice(&perm);
    let k = kernels();
    Ok(quote! { #set #s1 #s2 #k::permute_copy(#xi, #sizes, #p, #o); })
}

/// PyTorch's `infer_size` of a view: resolves one `-1` so that the sizes
/// hold `numel` elements.
pub(super) fn view_sizes(size: &[i64], numel: usize) -> Result<Vec<usize>, String> {
    let mut infer = None;
    let mut known = 1usize;
    for (k, &s) in size.iter().enumerate() {
        match s {
            -1 if infer.is_none() => infer = Some(k),
            -1 => return Err(format!("view sizes {size:?} have more than one -1")),
            s if s < 0 => return Err(format!("view sizes {size:?} have a negative size")),
            s => known *= s as usize,
        }
    }
    let mut out: Vec<usize> = size.iter().map(|&s| s.max(0) as usize).collect();
    if let Some(k) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(format!("view sizes {size:?} do not fit {numel} elements"));
        }
        out[k] = numel / known;
    } else if known != numel {
        return Err(format!("view sizes {size:?} do not hold {numel} elements"));
    }
    Ok(out)
}

/// A view (`view_copy`, `_unsafe_view`, `et_view`): `x`'s elements under the
/// sizes `size` (one may be -1).
pub(super) fn emit_view(ctx: &mut OpCtx<'_>, x: &TArg, size: &[IntArg], out: &TArg) -> Result<TokenStream, String> {
    require_same(&[x, out])?;
    if size.len() != out.rank() {
        return Err(format!(
            "view sizes of rank {} for an output of rank {}",
            size.len(),
            out.rank()
        ));
    }
    let constant: Option<Vec<i64>> = size.iter().map(IntArg::constant).collect();
    if let (false, Some(c)) = (x.dynamic, &constant) {
        let want = view_sizes(c, x.numel())?;
        require_sizes(out, &want)?;
        let set = ctx.set_sizes(out, usize_slice(&want));
        let copy = copy_elements(ctx, x, out)?;
        return Ok(quote! { #set #copy });
    }
    // Run time: resolve the -1 against the live element count.
    let n = ctx.numel(x);
    let r = lit(size.len());
    let items = size.iter().map(IntArg::expr);
    let err = shape_mismatch(ctx);
    let set = set_out_sizes(ctx, out, quote!(&os[..]));
    let copy = copy_elements(ctx, x, out)?;
    Ok(quote! {
        let os: [usize; #r] = {
            let want: [i64; #r] = [#(#items),*];
            let numel: usize = #n;
            let mut os = [0usize; #r];
            let mut infer: Option<usize> = None;
            let mut known = 1usize;
            for (k, &s) in want.iter().enumerate() {
                if s == -1 && infer.is_none() {
                    infer = Some(k);
                } else if s < 0 {
                    return Err(#err);
                } else {
                    os[k] = s as usize;
                    known = known.saturating_mul(s as usize);
                }
            }
            match infer {
                Some(k) if known != 0 && numel % known == 0 => os[k] = numel / known,
                None if known == numel => {}
                _ => return Err(#err),
            }
            os
        };
        #set
        #copy
    })
}

/// `view_copy.out(self, size, out)` and `_unsafe_view.out`.
pub(super) fn view_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, size, out) = (ctx.tensor(0)?, int_list_arg(ctx, 1)?, ctx.tensor(2)?);
    emit_view(ctx, &x, &size, &out)
}

/// `executorch_prim::et_view.default(self, size, out)`: ExecuTorch points
/// `out` at `self`'s data; here `out` gets a copy (or nothing when the
/// layout gave both the same bytes).
pub(super) fn et_view(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, size, out) = (ctx.tensor(0)?, int_list_arg(ctx, 1)?, ctx.tensor(2)?);
    emit_view(ctx, &x, &size, &out)
}

/// `alias_copy.out(self, out)`, `detach_copy.out` and `lift_fresh_copy.out`.
pub(super) fn alias_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    emit_reshape(ctx, &x, &out, &identity(x.rank()))
}

/// The largest element offset `as_strided(size, stride, storage_offset)`
/// reads, or `None` for an empty view; a message for a negative argument.
pub(super) fn strided_extent(size: &[i64], stride: &[i64], offset: i64) -> Result<Option<usize>, String> {
    if size.len() != stride.len() {
        return Err(format!(
            "as_strided with {} sizes and {} strides",
            size.len(),
            stride.len()
        ));
    }
    if size.iter().chain(stride).any(|&v| v < 0) || offset < 0 {
        return Err(format!(
            "as_strided({size:?}, {stride:?}, {offset}) has a negative argument"
        ));
    }
    if size.contains(&0) {
        return Ok(None);
    }
    let extent = size.iter().zip(stride).try_fold(offset as usize, |a, (&n, &s)| {
        (n as usize - 1).checked_mul(s as usize).and_then(|d| a.checked_add(d))
    });
    match extent {
        Some(e) => Ok(Some(e)),
        None => Err(format!(
            "as_strided({size:?}, {stride:?}, {offset}) reaches past any tensor"
        )),
    }
}

/// `as_strided_copy.out(self, size, stride, storage_offset?, out)`: the
/// elements of `self`'s (contiguous) storage at `offset + Σ idx·stride`.
pub(super) fn as_strided_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, size, stride, offset, out) = (
        ctx.tensor(0)?,
        ctx.int_list(1)?,
        ctx.int_list(2)?,
        ctx.opt_int(3)?,
        ctx.tensor(4)?,
    );
    require_same(&[&x, &out])?;
    if x.dynamic || out.dynamic {
        return Err(no_dynamic(ctx));
    }
    let offset = offset.unwrap_or(0);
    if let Some(last) = strided_extent(&size, &stride, offset)? {
        if last >= x.numel() {
            return Err(format!(
                "as_strided({size:?}, {stride:?}, {offset}) reads past the {} elements of the input",
                x.numel()
            ));
        }
    }
    let want: Vec<usize> = size.iter().map(|&n| n as usize).collect();
    emit_strided(ctx, &x, &out, offset as usize, &want, &stride)
}

/// `ptec::gather.out(self, sizes, strides, offset, table?, out)`, which
/// `passes::gathers` makes of a chain of views and permutations: `out`
/// holds as many elements as the box `sizes`, read at
/// `offset + Σ idx·strides` of `self`, all checked in range here; `i8`
/// elements then looked up in `table` if any.
pub(super) fn gather(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(7)?;
    let (x, sizes, strides, offset, out) = (
        ctx.tensor(0)?,
        ctx.int_list(1)?,
        ctx.int_list(2)?,
        ctx.int(3)?,
        ctx.tensor(5)?,
    );
    let table = match ctx.value(4)?.1 {
        Value::Null => None,
        _ => {
            let t = ctx.int_list(4)?;
            let t = t.iter().map(|&v| i8::try_from(v).ok()).collect::<Option<Vec<i8>>>();
            match t {
                Some(t) if t.len() == 256 && x.dtype == ScalarType::Char => Some(t),
                _ => return Err("a gather's table is not 256 int8s, or its elements are not int8".into()),
            }
        }
    };
    require_same(&[&x, &out])?;
    if x.dynamic || out.dynamic {
        return Err(no_dynamic(ctx));
    }
    // Non-negative, as many strides as sizes, and the last read in range.
    if let Some(last) = strided_extent(&sizes, &strides, offset)? {
        if last >= x.numel() {
            return Err(format!(
                "a gather of {sizes:?} at strides {strides:?} from {offset} reads past the {} elements of its input",
                x.numel()
            ));
        }
    }
    let unsigned = |v: &[i64]| v.iter().map(|&n| n as usize).collect::<Vec<usize>>();
    let (sizes, strides, offset) = (unsigned(&sizes), unsigned(&strides), offset as usize);
    if sizes.len() > ptec_runtime::kernels::MAX_RANK {
        return Err(format!("a gather of rank {}", sizes.len()));
    }
    let count = sizes.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
    if count != Some(out.numel()) {
        return Err(format!(
            "a gather of {sizes:?} into the {} elements of its output",
            out.numel()
        ));
    }
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let (k, offset, sizes, strides) = (kernels(), lit(offset), usize_slice(&sizes), usize_slice(&strides));
    Ok(match table {
        Some(t) => {
            let t = t.iter().map(|&v| proc_macro2::Literal::i8_suffixed(v));
            quote! { #s1 #s2 #k::gather_table(#xi, #offset, #sizes, #strides, &[#(#t),*], #o); }
        }
        None => quote! { #s1 #s2 #k::gather(#xi, #offset, #sizes, #strides, #o); },
    })
}

/// Emits the copy into `out` (of sizes `sizes`) of the elements of `x`
/// at `offset + Σ index · stride`, checked in range by the caller.
pub(super) fn emit_strided(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    out: &TArg,
    offset: usize,
    sizes: &[usize],
    stride: &[i64],
) -> Result<TokenStream, String> {
    require_sizes(out, sizes)?;
    let (xi, s1) = ctx.read(x)?;
    let (o, s2) = ctx.write(out)?;
    let (k, base, sizes) = (kernels(), lit(offset), usize_slice(sizes));
    let strides = stride.iter().map(|&s| {
        let l = proc_macro2::Literal::isize_suffixed(s as isize);
        quote!(#l)
    });
    Ok(quote! { #s1 #s2 #k::strided_copy_signed(#xi, #base, #sizes, &[#(#strides),*], #o); })
}

/// Row-major strides of `sizes`, in elements.
pub(super) fn row_major(sizes: &[usize]) -> Vec<i64> {
    let mut st = vec![1i64; sizes.len()];
    for d in (0..sizes.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * sizes[d + 1] as i64;
    }
    st
}

/// `diagonal_copy.out(self, offset, dim1, dim2, out)`: the diagonal of
/// dims `dim1` and `dim2` (above the main one by `offset`), as a last dim.
pub(super) fn diagonal_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, offset, dim1, dim2, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.int(2)?, ctx.int(3)?, ctx.tensor(4)?);
    require_same(&[&x, &out])?;
    require_contiguous(&[&x])?;
    if x.dynamic || out.dynamic {
        return Err(no_dynamic(ctx));
    }
    let (d1, d2) = (norm_dim(dim1, x.rank())?, norm_dim(dim2, x.rank())?);
    if d1 == d2 || x.rank() < 2 {
        return Err(format!(
            "diagonal of dims {dim1} and {dim2} of a tensor of rank {}",
            x.rank()
        ));
    }
    let st = row_major(&x.sizes);
    let (n1, n2) = (x.sizes[d1] as i64, x.sizes[d2] as i64);
    let (len, first) = if offset >= 0 {
        ((n1.min(n2 - offset)).max(0), offset * st[d2])
    } else {
        ((n2.min(n1 + offset)).max(0), -offset * st[d1])
    };
    let keep = (0..x.rank()).filter(|&d| d != d1 && d != d2);
    let mut sizes: Vec<usize> = keep.clone().map(|d| x.sizes[d]).collect();
    let mut strides: Vec<i64> = keep.map(|d| st[d]).collect();
    sizes.push(len as usize);
    strides.push(st[d1] + st[d2]);
    let first = if len == 0 || x.numel() == 0 { 0 } else { first as usize };
    emit_strided(ctx, &x, &out, first, &sizes, &strides)
}

/// `unfold_copy.out(self, dimension, size, step, out)`: the windows of
/// `size` elements every `step` along `dimension`, as a last dim.
pub(super) fn unfold_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (x, dim, size, step, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.int(2)?, ctx.int(3)?, ctx.tensor(4)?);
    require_same(&[&x, &out])?;
    require_contiguous(&[&x])?;
    if x.dynamic || out.dynamic {
        return Err(no_dynamic(ctx));
    }
    // A 0-d tensor unfolds as one of one element.
    let (xs, d) = if x.rank() == 0 {
        (vec![1], 0)
    } else {
        (x.sizes.clone(), norm_dim(dim, x.rank())?)
    };
    let n = xs[d] as i64;
    if step <= 0 || size < 0 || size > n {
        return Err(format!("unfold of {size} every {step} along a dim of {n}"));
    }
    let st = row_major(&xs);
    let mut sizes = xs.clone();
    let mut strides = st.clone();
    sizes[d] = ((n - size) / step + 1) as usize;
    strides[d] = st[d] * step;
    if x.rank() == 0 {
        sizes.clear();
        strides.clear();
    }
    sizes.push(size as usize);
    strides.push(st[d]);
    emit_strided(ctx, &x, &out, 0, &sizes, &strides)
}

/// A copy whose output sizes are a dim map of the input's (same elements in
/// the same order).
pub(super) fn emit_reshape(ctx: &mut OpCtx<'_>, x: &TArg, out: &TArg, dims: &[Dim]) -> Result<TokenStream, String> {
    require_same(&[x, out])?;
    let set = map_sizes(ctx, x, out, dims)?;
    let copy = copy_elements(ctx, x, out)?;
    Ok(quote! { #set #copy })
}

/// The dim map of `unsqueeze(dim)` for an input of rank `rank`.
pub(super) fn unsqueeze_dims(dim: i64, rank: usize) -> Result<Vec<Dim>, String> {
    let d = norm_dim(dim, rank + 1)?;
    let mut dims = identity(rank);
    dims.insert(d, Dim::Fixed(1));
    Ok(dims)
}

/// `unsqueeze_copy.out(self, dim, out)`.
pub(super) fn unsqueeze_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, dim, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor(2)?);
    let dims = unsqueeze_dims(dim, x.rank())?;
    emit_reshape(ctx, &x, &out, &dims)
}

/// The dim map of `squeeze(dims)`: the listed dims of size 1 go (a listed
/// dim of another size stays, as in PyTorch). For a dynamic input the
/// bound decides; a dim whose bound is 1 has size 1.
pub(super) fn squeeze_dims(x: &TArg, dims: &[usize]) -> Vec<Dim> {
    (0..x.rank())
        .filter(|d| !(dims.contains(d) && x.sizes[*d] == 1))
        .map(Dim::Of)
        .collect()
}

pub(super) fn emit_squeeze(ctx: &mut OpCtx<'_>, x: &TArg, out: &TArg, dims: &[usize]) -> Result<TokenStream, String> {
    let map = squeeze_dims(x, dims);
    if x.dynamic && map.len() != out.rank() {
        return Err(no_dynamic(ctx));
    }
    emit_reshape(ctx, x, out, &map)
}

/// `squeeze_copy.dims_out(self, dim[], out)`.
pub(super) fn squeeze_copy_dims(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, dims, out) = (ctx.tensor(0)?, ctx.int_list(1)?, ctx.tensor(2)?);
    let dims = dims
        .iter()
        .map(|&d| norm_dim(d, x.rank()))
        .collect::<Result<Vec<_>, _>>()?;
    emit_squeeze(ctx, &x, &out, &dims)
}

/// `squeeze_copy.dim_out(self, dim, out)`.
pub(super) fn squeeze_copy_dim(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, dim, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor(2)?);
    let d = norm_dim(dim, x.rank())?;
    emit_squeeze(ctx, &x, &out, &[d])
}

/// `squeeze_copy.out(self, out)`: every dim of size 1 goes.
pub(super) fn squeeze_copy_all(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let all: Vec<usize> = (0..x.rank()).collect();
    emit_squeeze(ctx, &x, &out, &all)
}

/// Emits a permutation swapping `d0` and `d1`.
pub(super) fn emit_transpose(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    out: &TArg,
    d0: usize,
    d1: usize,
) -> Result<TokenStream, String> {
    require_same(&[x, out])?;
    let mut map = identity(x.rank());
    map.swap(d0, d1);
    let set = map_sizes(ctx, x, out, &map)?;
    let sizes = ctx.sizes(x);
    let (xi, s1) = ctx.read(x)?;
    let (o, s2) = ctx.write(out)?;
    let (a, b) = (lit(d0), lit(d1));
    let k = kernels();
    Ok(quote! { #set #s1 #s2 #k::transpose_copy(#xi, #sizes, #a, #b, #o); })
}

/// `transpose_copy.int_out(self, dim0, dim1, out)`.
pub(super) fn transpose_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, d0, d1, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.int(2)?, ctx.tensor(3)?);
    let (d0, d1) = (norm_dim(d0, x.rank())?, norm_dim(d1, x.rank())?);
    if x.rank() == 0 {
        return emit_reshape(ctx, &x, &out, &[]);
    }
    emit_transpose(ctx, &x, &out, d0, d1)
}

/// `t_copy.out(self, out)`: transposes a matrix; vectors and scalars copy.
pub(super) fn t_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    match x.rank() {
        0 | 1 => emit_reshape(ctx, &x, &out, &identity(x.rank())),
        2 => emit_transpose(ctx, &x, &out, 0, 1),
        r => Err(format!("t_copy expects a tensor of rank <= 2, got rank {r}")),
    }
}

/// The output dim map of `expand(size)`, or a message saying why `size` does
/// not expand `sizes`.
pub(super) fn expand_dims(sizes: &[usize], size: &[i64]) -> Result<Vec<Dim>, String> {
    if size.len() < sizes.len() {
        return Err(format!(
            "expand sizes {size:?} have fewer dims than the input {sizes:?}"
        ));
    }
    let lead = size.len() - sizes.len();
    let mut dims = Vec::new();
    for (k, &s) in size.iter().enumerate() {
        let dim = if k < lead {
            if s < 0 {
                return Err(format!("expand size {s} for a new leading dim"));
            }
            Dim::Fixed(s as usize)
        } else {
            let have = sizes[k - lead];
            match s {
                -1 => Dim::Of(k - lead),
                s if s >= 0 && s as usize == have => Dim::Of(k - lead),
                s if s >= 0 && have == 1 => Dim::Fixed(s as usize),
                s => return Err(format!("cannot expand a dim of size {have} to {s}")),
            }
        };
        dims.push(dim);
    }
    Ok(dims)
}

/// `expand_copy.out(self, size, *, implicit, out)`.
pub(super) fn expand_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, size, out) = (ctx.tensor(0)?, int_list_arg(ctx, 1)?, ctx.tensor(3)?);
    require_same(&[&x, &out])?;
    // A dynamic input's live sizes are checked against the target at run
    // time (a kept dim may have shrunk, a broadcast one may be empty).
    let constant: Option<Vec<i64>> = size.iter().map(IntArg::constant).collect();
    let set = match (&constant, x.dynamic) {
        (Some(c), false) => map_sizes(ctx, &x, &out, &expand_dims(&x.sizes, c)?)?,
        _ => return emit_expand_runtime(ctx, &x, &size, &out),
    };
    let k = kernels();
    let (xs, os) = (ctx.sizes(&x), ctx.sizes(&out));
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    Ok(quote! { #set #s1 #s2 #k::expand_copy(#xi, #xs, #os, #o); })
}

/// `expand_copy` with sizes known only at run time: each target size is
/// checked against the input's live size there.
pub(super) fn emit_expand_runtime(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    size: &[IntArg],
    out: &TArg,
) -> Result<TokenStream, String> {
    if size.len() < x.rank() || out.rank() != size.len() {
        return Err(format!(
            "expand to {} dims of a tensor of rank {} into an output of rank {}",
            size.len(),
            x.rank(),
            out.rank()
        ));
    }
    let r = lit(size.len());
    let lead = lit(size.len() - x.rank());
    let items = size.iter().map(IntArg::expr);
    let xs = ctx.sizes(x);
    let err = shape_mismatch(ctx);
    let set = set_out_sizes(ctx, out, quote!(&os[..]));
    let os_expr = ctx.sizes(out);
    let (xi, s1) = ctx.read(x)?;
    let (o, s2) = ctx.write(out)?;
    let k = kernels();
    Ok(quote! {
        let os: [usize; #r] = {
            let want: [i64; #r] = [#(#items),*];
            let xs: &[usize] = #xs;
            let mut os = [0usize; #r];
            for (k, &s) in want.iter().enumerate() {
                os[k] = if k < #lead {
                    if s < 0 { return Err(#err); }
                    s as usize
                } else {
                    let have = xs[k - #lead];
                    if s == -1 || (s >= 0 && s as usize == have) {
                        have
                    } else if s >= 0 && have == 1 {
                        s as usize
                    } else {
                        return Err(#err);
                    }
                };
            }
            os
        };
        #set
        #s1 #s2
        #k::expand_copy(#xi, #xs, #os_expr, #o);
    })
}

// ---------------------------------------------------------------------------
// Concatenation and splitting.
