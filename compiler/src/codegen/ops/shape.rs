//! Shape operators that move data: views and reshapes (`view_copy`,
//! `unsqueeze_copy`, `squeeze_copy`, `et_view`, ...), permutations,
//! `expand_copy`, `cat`/`stack`, slicing and splitting, padding, `flip`,
//! `roll`, `tril`/`triu`, pixel shuffles, and the factories (`full`,
//! `zeros`, `arange`, `fill`, ...).
//!
//! Dynamic (bounded) shapes are supported where the output's sizes follow
//! from the input's by a simple rule: the emitter computes the live sizes
//! at run time. Ops whose output shape needs more say so at compile time.
use super::checks::{no_dynamic, require_same, scalar_value, set_out_sizes, shape_mismatch};
use super::elementwise::{compute_type, convert};
use super::*;

pub const OPS: &[(&str, Emitter)] = &[
    (crate::names::aten::PERMUTE_COPY, permute_copy),
    ("aten::view_copy.out", view_copy),
    ("aten::_unsafe_view.out", view_copy),
    ("executorch_prim::et_view.default", et_view),
    ("aten::alias_copy.out", alias_copy),
    ("aten::detach_copy.out", alias_copy),
    ("aten::lift_fresh_copy.out", alias_copy),
    ("aten::as_strided_copy.out", as_strided_copy),
    ("aten::unsqueeze_copy.out", unsqueeze_copy),
    ("aten::squeeze_copy.dims_out", squeeze_copy_dims),
    ("aten::squeeze_copy.dim_out", squeeze_copy_dim),
    ("aten::squeeze_copy.out", squeeze_copy_all),
    ("aten::transpose_copy.int_out", transpose_copy),
    ("aten::t_copy.out", t_copy),
    ("aten::expand_copy.out", expand_copy),
    ("aten::cat.out", cat),
    ("aten::stack.out", stack),
    ("aten::slice_copy.Tensor_out", slice_copy),
    ("aten::narrow_copy.out", narrow_copy),
    ("aten::select_copy.int_out", select_copy),
    ("aten::split_with_sizes_copy.out", split_with_sizes_copy),
    ("aten::split_copy.Tensor_out", split_copy),
    ("aten::unbind_copy.int_out", unbind_copy),
    ("aten::repeat.out", repeat),
    ("aten::flip.out", flip),
    ("aten::roll.out", roll),
    ("aten::constant_pad_nd.out", constant_pad_nd),
    ("aten::diagonal_copy.out", diagonal_copy),
    ("aten::unfold_copy.out", unfold_copy),
    ("aten::reflection_pad1d.out", reflection_pad),
    ("aten::reflection_pad2d.out", reflection_pad),
    ("aten::reflection_pad3d.out", reflection_pad),
    ("aten::replication_pad1d.out", replication_pad),
    ("aten::replication_pad2d.out", replication_pad),
    ("aten::replication_pad3d.out", replication_pad),
    ("aten::tril.out", tril),
    ("aten::triu.out", triu),
    ("aten::pixel_shuffle.out", pixel_shuffle),
    ("aten::pixel_unshuffle.out", pixel_unshuffle),
    ("aten::select_scatter.out", select_scatter),
    ("aten::slice_scatter.out", slice_scatter),
    ("aten::full.out", full),
    ("aten::empty.out", empty),
    ("dim_order_ops::_empty_dim_order.out", empty_dim_order),
    ("aten::full_like.out", full_like),
    ("aten::zeros.out", zeros),
    ("aten::ones.out", ones),
    ("aten::zeros_like.out", zeros_like),
    ("aten::ones_like.out", ones_like),
    ("aten::scalar_tensor.out", scalar_tensor),
    ("aten::fill.Scalar_out", fill_scalar),
    ("aten::fill.Tensor_out", fill_tensor),
    ("aten::arange.out", arange),
    ("aten::arange.start_out", arange_start),
];

/// The kernels of this family.
fn kernels() -> TokenStream {
    quote!(::ptec_runtime::kernels::shape)
}

// ---------------------------------------------------------------------------
// Shared helpers (also used by the indexing family).

/// An integer argument: a constant, or a `SymInt` computed at run time.
#[derive(Clone, Debug)]
pub(super) enum IntArg {
    Const(i64),
    /// An `i64` expression reading the state field of the value.
    Runtime(TokenStream),
}

impl IntArg {
    pub(super) fn expr(&self) -> TokenStream {
        match self {
            IntArg::Const(v) => i64_lit(*v),
            IntArg::Runtime(e) => e.clone(),
        }
    }

    pub(super) fn constant(&self) -> Option<i64> {
        match self {
            IntArg::Const(v) => Some(*v),
            IntArg::Runtime(_) => None,
        }
    }
}

/// The `Int` value `vi`, constant or computed at run time.
fn int_value(ctx: &OpCtx<'_>, vi: usize) -> Result<IntArg, String> {
    match ctx.method.values.get(vi) {
        Some(Value::Int(x)) => {
            if ctx.runtime_scalars.get(vi).copied().unwrap_or(false) {
                let f = scalar_field(vi);
                Ok(IntArg::Runtime(quote!(self.#f)))
            } else {
                Ok(IntArg::Const(*x))
            }
        }
        Some(other) => Err(format!("value {vi} must be an Int, is a {}", other.kind())),
        None => Err(format!("value {vi} is out of range")),
    }
}

/// Argument `i`: an `Int`, possibly computed at run time.
pub(super) fn int_arg(ctx: &OpCtx<'_>, i: usize) -> Result<IntArg, String> {
    let vi = *ctx.args.get(i).ok_or_else(|| format!("argument {i} is missing"))?;
    int_value(ctx, vi).map_err(|e| format!("argument {i}: {e}"))
}

/// Argument `i`: an optional `Int`, possibly computed at run time.
pub(super) fn opt_int_arg(ctx: &OpCtx<'_>, i: usize) -> Result<Option<IntArg>, String> {
    if ctx.is_null(i)? {
        Ok(None)
    } else {
        int_arg(ctx, i).map(Some)
    }
}

/// Argument `i`: an `IntList` whose items may be computed at run time.
pub(super) fn int_list_arg(ctx: &OpCtx<'_>, i: usize) -> Result<Vec<IntArg>, String> {
    let vi = *ctx.args.get(i).ok_or_else(|| format!("argument {i} is missing"))?;
    match ctx.method.values.get(vi) {
        Some(Value::IntList(items)) => items
            .iter()
            .map(|&k| int_value(ctx, k).map_err(|e| format!("argument {i}: {e}")))
            .collect(),
        Some(other) => Err(format!(
            "argument {i} (value {vi}) must be an IntList, is a {}",
            other.kind()
        )),
        None => Err(format!("argument {i} names value {vi}, out of range")),
    }
}

/// One output dim: a constant, or a dim of the input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Dim {
    Fixed(usize),
    Of(usize),
}

/// The output sizes a dim map gives for input sizes `sizes`.
fn apply_dims(dims: &[Dim], sizes: &[usize]) -> Vec<usize> {
    dims.iter()
        .map(|d| match *d {
            Dim::Fixed(n) => n,
            Dim::Of(k) => sizes[k],
        })
        .collect()
}

/// Checks (static input) or sets at run time (dynamic input) the sizes of
/// `out` as the dim map `dims` of `x`'s.
pub(super) fn map_sizes(ctx: &OpCtx<'_>, x: &TArg, out: &TArg, dims: &[Dim]) -> Result<TokenStream, String> {
    let want = apply_dims(dims, &x.sizes);
    if !x.dynamic {
        require_sizes(out, &want)?;
        return Ok(ctx.set_sizes(out, usize_slice(&want)));
    }
    require_rank(out, want.len())?;
    let xs = ctx.sizes(x);
    let items = dims.iter().map(|d| match *d {
        Dim::Fixed(n) => lit(n),
        Dim::Of(k) => {
            let k = lit(k);
            quote!(xs[#k])
        }
    });
    let r = lit(want.len());
    let set = set_out_sizes(ctx, out, quote!(&os[..]));
    Ok(quote! {
        let os: [usize; #r] = { let xs: &[usize] = #xs; [#(#items),*] };
        #set
    })
}

/// Copies `x`'s live elements into `out` (same dtype, same element order,
/// equal live element counts); nothing when they are the same bytes.
pub(super) fn copy_elements(ctx: &mut OpCtx<'_>, x: &TArg, out: &TArg) -> Result<TokenStream, String> {
    if x.home == out.home && matches!(x.home, Home::Arena { .. }) {
        return Ok(quote!());
    }
    let (xi, s1) = ctx.read(x)?;
    let (o, s2) = ctx.write(out)?;
    Ok(quote! { #s1 #s2 ::ptec_runtime::kernels::shape::copy(#xi, #o); })
}

/// The identity dim map of a tensor of rank `rank`.
fn identity(rank: usize) -> Vec<Dim> {
    (0..rank).map(Dim::Of).collect()
}

/// Emits `kernel(x, live sizes, extra..., out)` for a shape-preserving op.
fn emit_same_shape(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    out: &TArg,
    call: impl FnOnce(&Ident, &TokenStream, &Ident) -> TokenStream,
) -> Result<TokenStream, String> {
    require_same(&[x, out])?;
    let set = map_sizes(ctx, x, out, &identity(x.rank()))?;
    let sizes = ctx.sizes(x);
    let (xi, s1) = ctx.read(x)?;
    let (o, s2) = ctx.write(out)?;
    let c = call(&xi, &sizes, &o);
    Ok(quote! { #set #s1 #s2 #c })
}

// ---------------------------------------------------------------------------
// Permutations and views.

/// `permute_copy.out(self, dims, out)`.
fn permute_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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

/// Normalises `dims` to a permutation of `0..rank`.
fn permutation(dims: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    if dims.len() != rank {
        return Err(format!("{} dims for a tensor of rank {rank}", dims.len()));
    }
    let mut seen = vec![false; rank];
    let mut perm = Vec::new();
    for &d in dims {
        let d = norm_dim(d, rank)?;
        if std::mem::replace(&mut seen[d], true) {
            return Err(format!("dims {dims:?} are not a permutation"));
        }
        perm.push(d);
    }
    Ok(perm)
}

/// PyTorch's `infer_size` of a view: resolves one `-1` so that the sizes
/// hold `numel` elements.
fn view_sizes(size: &[i64], numel: usize) -> Result<Vec<usize>, String> {
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
fn emit_view(ctx: &mut OpCtx<'_>, x: &TArg, size: &[IntArg], out: &TArg) -> Result<TokenStream, String> {
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
fn view_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, size, out) = (ctx.tensor(0)?, int_list_arg(ctx, 1)?, ctx.tensor(2)?);
    emit_view(ctx, &x, &size, &out)
}

/// `executorch_prim::et_view.default(self, size, out)`: ExecuTorch points
/// `out` at `self`'s data; here `out` gets a copy (or nothing when the
/// layout gave both the same bytes).
fn et_view(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, size, out) = (ctx.tensor(0)?, int_list_arg(ctx, 1)?, ctx.tensor(2)?);
    emit_view(ctx, &x, &size, &out)
}

/// `alias_copy.out(self, out)`, `detach_copy.out` and `lift_fresh_copy.out`.
fn alias_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    emit_reshape(ctx, &x, &out, &identity(x.rank()))
}

/// The largest element offset `as_strided(size, stride, storage_offset)`
/// reads, or `None` for an empty view; a message for a negative argument.
fn strided_extent(size: &[i64], stride: &[i64], offset: i64) -> Result<Option<usize>, String> {
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
    Ok(Some(
        size.iter()
            .zip(stride)
            .map(|(&n, &s)| (n as usize - 1) * s as usize)
            .sum::<usize>()
            + offset as usize,
    ))
}

/// `as_strided_copy.out(self, size, stride, storage_offset?, out)`: the
/// elements of `self`'s (contiguous) storage at `offset + Σ idx·stride`.
fn as_strided_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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

/// Emits the copy into `out` (of sizes `sizes`) of the elements of `x`
/// at `offset + Σ index · stride`, checked in range by the caller.
fn emit_strided(
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
fn row_major(sizes: &[usize]) -> Vec<i64> {
    let mut st = vec![1i64; sizes.len()];
    for d in (0..sizes.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * sizes[d + 1] as i64;
    }
    st
}

/// `diagonal_copy.out(self, offset, dim1, dim2, out)`: the diagonal of
/// dims `dim1` and `dim2` (above the main one by `offset`), as a last dim.
fn diagonal_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn unfold_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn emit_reshape(ctx: &mut OpCtx<'_>, x: &TArg, out: &TArg, dims: &[Dim]) -> Result<TokenStream, String> {
    require_same(&[x, out])?;
    let set = map_sizes(ctx, x, out, dims)?;
    let copy = copy_elements(ctx, x, out)?;
    Ok(quote! { #set #copy })
}

/// The dim map of `unsqueeze(dim)` for an input of rank `rank`.
fn unsqueeze_dims(dim: i64, rank: usize) -> Result<Vec<Dim>, String> {
    let d = norm_dim(dim, rank + 1)?;
    let mut dims = identity(rank);
    dims.insert(d, Dim::Fixed(1));
    Ok(dims)
}

/// `unsqueeze_copy.out(self, dim, out)`.
fn unsqueeze_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, dim, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor(2)?);
    let dims = unsqueeze_dims(dim, x.rank())?;
    emit_reshape(ctx, &x, &out, &dims)
}

/// The dim map of `squeeze(dims)`: the listed dims of size 1 go (a listed
/// dim of another size stays, as in PyTorch). For a dynamic input the
/// bound decides; a dim whose bound is 1 has size 1.
fn squeeze_dims(x: &TArg, dims: &[usize]) -> Vec<Dim> {
    (0..x.rank())
        .filter(|d| !(dims.contains(d) && x.sizes[*d] == 1))
        .map(Dim::Of)
        .collect()
}

fn emit_squeeze(ctx: &mut OpCtx<'_>, x: &TArg, out: &TArg, dims: &[usize]) -> Result<TokenStream, String> {
    let map = squeeze_dims(x, dims);
    if x.dynamic && map.len() != out.rank() {
        return Err(no_dynamic(ctx));
    }
    emit_reshape(ctx, x, out, &map)
}

/// `squeeze_copy.dims_out(self, dim[], out)`.
fn squeeze_copy_dims(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, dims, out) = (ctx.tensor(0)?, ctx.int_list(1)?, ctx.tensor(2)?);
    let dims = dims
        .iter()
        .map(|&d| norm_dim(d, x.rank()))
        .collect::<Result<Vec<_>, _>>()?;
    emit_squeeze(ctx, &x, &out, &dims)
}

/// `squeeze_copy.dim_out(self, dim, out)`.
fn squeeze_copy_dim(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, dim, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor(2)?);
    let d = norm_dim(dim, x.rank())?;
    emit_squeeze(ctx, &x, &out, &[d])
}

/// `squeeze_copy.out(self, out)`: every dim of size 1 goes.
fn squeeze_copy_all(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let all: Vec<usize> = (0..x.rank()).collect();
    emit_squeeze(ctx, &x, &out, &all)
}

/// Emits a permutation swapping `d0` and `d1`.
fn emit_transpose(ctx: &mut OpCtx<'_>, x: &TArg, out: &TArg, d0: usize, d1: usize) -> Result<TokenStream, String> {
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
fn transpose_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, d0, d1, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.int(2)?, ctx.tensor(3)?);
    let (d0, d1) = (norm_dim(d0, x.rank())?, norm_dim(d1, x.rank())?);
    if x.rank() == 0 {
        return emit_reshape(ctx, &x, &out, &[]);
    }
    emit_transpose(ctx, &x, &out, d0, d1)
}

/// `t_copy.out(self, out)`: transposes a matrix; vectors and scalars copy.
fn t_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn expand_dims(sizes: &[usize], size: &[i64]) -> Result<Vec<Dim>, String> {
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
fn expand_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn emit_expand_runtime(ctx: &mut OpCtx<'_>, x: &TArg, size: &[IntArg], out: &TArg) -> Result<TokenStream, String> {
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

/// `cat.out(tensors, dim, out)`.
fn cat(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn stack(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn emit_split(
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
fn split_with_sizes_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn split_parts(n: usize, split_size: i64) -> Result<Vec<usize>, String> {
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
fn split_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn unbind_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn slice_parts(ctx: &OpCtx<'_>, first: usize) -> Result<(Option<IntArg>, Option<IntArg>, i64), String> {
    let start = opt_int_arg(ctx, first)?;
    let end = opt_int_arg(ctx, first + 1)?;
    let step = ctx.int(first + 2)?;
    if step <= 0 {
        return Err(format!("slice step must be positive, is {step}"));
    }
    Ok((start, end, step))
}

fn opt_expr(v: &Option<IntArg>) -> TokenStream {
    match v {
        Some(v) => {
            let e = v.expr();
            quote!(Some(#e))
        }
        None => quote!(None),
    }
}

/// Emits `slice_copy(x, d, start, end, step)` into `out`.
fn emit_slice(
    ctx: &mut OpCtx<'_>,
    x: &TArg,
    out: &TArg,
    d: usize,
    start: Option<IntArg>,
    end: Option<IntArg>,
    step: i64,
) -> Result<TokenStream, String> {
    require_same(&[x, out])?;
    let constant = |v: &Option<IntArg>| match v {
        None => Some(None),
        Some(v) => v.constant().map(Some),
    };
    let set = match (x.dynamic, constant(&start), constant(&end)) {
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
fn slice_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn narrow_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn select_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
pub(super) fn emit_copy_then(
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
fn select_scatter(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn slice_scatter(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(8)?;
    let (x, src, dim, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.int(2)?, ctx.tensor(6)?);
    require_same(&[&x, &src])?;
    if x.rank() == 0 {
        return Err("slice_scatter of a zero-dimensional tensor".into());
    }
    let d = norm_dim(dim, x.rank())?;
    let (start, end, step) = slice_parts(ctx, 3)?;
    let (start, end) = (constant_bound(ctx, start)?, constant_bound(ctx, end)?);
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

/// An optional slice bound that must be known at compile time.
fn constant_bound(ctx: &OpCtx<'_>, bound: Option<IntArg>) -> Result<Option<i64>, String> {
    match bound {
        None => Ok(None),
        Some(b) => b.constant().map(Some).ok_or_else(|| no_dynamic(ctx)),
    }
}

// ---------------------------------------------------------------------------
// Rearrangements.

/// `repeat.out(self, repeats, out)`.
fn repeat(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn distinct_dims(dims: &[i64], rank: usize) -> Result<Vec<usize>, String> {
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
fn flip(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn roll(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
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
fn padded_sizes(sizes: &[usize], pad: &[i64]) -> Result<Vec<usize>, String> {
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

/// `constant_pad_nd.out(self, pad, value, out)`.
fn constant_pad_nd(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, pad, value, out) = (ctx.tensor(0)?, ctx.int_list(1)?, ctx.scalar(2)?, ctx.tensor(3)?);
    require_same(&[&x, &out])?;
    // With the bound's sizes; a varying input's are padded at run time.
    let bound = padded_sizes(&x.sizes, &pad)?;
    let (k, sizes) = (kernels(), ctx.sizes(&x));
    let set = if x.dynamic {
        require_rank(&out, x.rank())?;
        let (r, err) = (lit(x.rank()), shape_mismatch(ctx));
        let pl = pad.iter().map(|&p| i64_lit(p));
        let set = set_out_sizes(ctx, &out, quote!(&os[..]));
        quote! {
            let mut os = [0usize; #r];
            os.copy_from_slice(#sizes);
            let pad: &[i64] = &[#(#pl),*];
            for j in 0..pad.len() / 2 {
                let d = #r - 1 - j;
                match #k::pad_output_size(os[d], pad[2 * j], pad[2 * j + 1]) {
                    Some(n) => os[d] = n,
                    None => return Err(#err),
                }
            }
            #set
        }
    } else {
        require_sizes(&out, &bound)?;
        quote!()
    };
    let v = scalar_value(value, out.dtype);
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let pl = pad.iter().map(|&p| i64_lit(p));
    Ok(quote! { #set #s1 #s2 #k::constant_pad_nd(#xi, #sizes, &[#(#pl),*], #v, #o); })
}

/// `reflection_pad{1,2,3}d.out(self, padding, out)` and
/// `replication_pad{1,2,3}d`: `padding` of 2, 4 or 6 entries pads as many
/// trailing dims, each by a reflection (shorter than the dim) or a
/// replication (of a dim that is not empty) of the input's edge.
fn indexed_pad(ctx: &mut OpCtx<'_>, reflect: bool) -> Result<TokenStream, String> {
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

fn reflection_pad(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    indexed_pad(ctx, true)
}
fn replication_pad(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    indexed_pad(ctx, false)
}

/// `tril.out(self, diagonal, out)` and `triu`.
fn triangle(ctx: &mut OpCtx<'_>, kernel: &str) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, diagonal, out) = (ctx.tensor(0)?, ctx.int(1)?, ctx.tensor(2)?);
    if x.rank() < 2 {
        return Err(format!("{kernel} expects a tensor of rank >= 2, got rank {}", x.rank()));
    }
    let (k, f, dg) = (kernels(), format_ident!("{}", kernel), i64_lit(diagonal));
    emit_same_shape(ctx, &x, &out, |xi, sizes, o| quote!(#k::#f(#xi, #sizes, #dg, #o);))
}

fn tril(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    triangle(ctx, "tril")
}

fn triu(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    triangle(ctx, "triu")
}

/// The output sizes of `pixel_shuffle(r)` (`inverse`: `pixel_unshuffle`).
fn shuffled_sizes(sizes: &[usize], r: i64, inverse: bool) -> Result<Vec<usize>, String> {
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

fn emit_pixel_shuffle(ctx: &mut OpCtx<'_>, inverse: bool) -> Result<TokenStream, String> {
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
fn pixel_shuffle(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    emit_pixel_shuffle(ctx, false)
}

/// `pixel_unshuffle.out(self, downscale_factor, out)`.
fn pixel_unshuffle(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    emit_pixel_shuffle(ctx, true)
}

// ---------------------------------------------------------------------------
// Factories.

/// Statements giving `out` the sizes `size` (items possibly computed at
/// run time): checked at compile time or set (and checked) at run time.
fn sized_out(ctx: &mut OpCtx<'_>, size: &[IntArg], out: &TArg) -> Result<TokenStream, String> {
    require_contiguous(&[out])?;
    if size.len() != out.rank() {
        return Err(format!(
            "sizes of rank {} for an output of rank {}",
            size.len(),
            out.rank()
        ));
    }
    if let Some(c) = size.iter().map(IntArg::constant).collect::<Option<Vec<i64>>>() {
        let want = c
            .iter()
            .map(|&s| usize::try_from(s).map_err(|_| format!("negative size in {c:?}")))
            .collect::<Result<Vec<_>, _>>()?;
        require_sizes(out, &want)?;
        return Ok(ctx.set_sizes(out, usize_slice(&want)));
    }
    let (r, err) = (lit(size.len()), shape_mismatch(ctx));
    let items = size.iter().map(IntArg::expr);
    let set = set_out_sizes(ctx, out, quote!(&os[..]));
    Ok(quote! {
        let os: [usize; #r] = {
            let want: [i64; #r] = [#(#items),*];
            let mut os = [0usize; #r];
            for (o, &s) in os.iter_mut().zip(&want) {
                *o = usize::try_from(s).map_err(|_| #err)?;
            }
            os
        };
        #set
    })
}

/// Fills `out` (of sizes `size`) with `value` (an expression of `out`'s
/// storage type).
fn emit_fill_sized(
    ctx: &mut OpCtx<'_>,
    size: &[IntArg],
    out: &TArg,
    value: TokenStream,
) -> Result<TokenStream, String> {
    let set = sized_out(ctx, size, out)?;
    let (o, s) = ctx.write(out)?;
    let k = kernels();
    Ok(quote! { #set #s #k::fill(#o, #value); })
}

/// Fills `out`, shaped like `x`, with `value`.
fn emit_fill_like(ctx: &mut OpCtx<'_>, x: &TArg, out: &TArg, value: TokenStream) -> Result<TokenStream, String> {
    require_contiguous(&[out])?;
    let set = map_sizes(ctx, x, out, &identity(x.rank()))?;
    let (o, s) = ctx.write(out)?;
    let k = kernels();
    Ok(quote! { #set #s #k::fill(#o, #value); })
}

/// `empty.out(size, *, memory_format, out)`: only the sizes; the contents
/// are unspecified, as in PyTorch.
fn empty(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (size, out) = (int_list_arg(ctx, 0)?, ctx.tensor(2)?);
    sized_out(ctx, &size, &out)
}

/// `_empty_dim_order.out(size, *, dim_order?, out)`: [`empty`] in the dim
/// order the output was planned with, which must be the one asked for.
fn empty_dim_order(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (size, out) = (int_list_arg(ctx, 0)?, ctx.tensor(2)?);
    if let Some(asked) = ctx.opt_int_list(1)? {
        let planned: Vec<i64> = out.dim_order.iter().map(|&d| i64::from(d)).collect();
        if asked != planned {
            return Err(format!(
                "dim order {asked:?} asked for an output planned in dim order {planned:?}"
            ));
        }
    }
    sized_out(ctx, &size, &out)
}

/// `full.out(size, fill_value, out)`.
fn full(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (size, value, out) = (int_list_arg(ctx, 0)?, ctx.scalar(1)?, ctx.tensor(2)?);
    emit_fill_sized(ctx, &size, &out, scalar_value(value, out.dtype))
}

fn filled(ctx: &mut OpCtx<'_>, value: i64) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (size, out) = (int_list_arg(ctx, 0)?, ctx.tensor(1)?);
    emit_fill_sized(ctx, &size, &out, scalar_value(Scalar::Int(value), out.dtype))
}

/// `zeros.out(size, out)`.
fn zeros(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    filled(ctx, 0)
}

/// `ones.out(size, out)`.
fn ones(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    filled(ctx, 1)
}

/// `full_like.out(self, fill_value, *, memory_format, out)`.
fn full_like(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, value, out) = (ctx.tensor(0)?, ctx.scalar(1)?, ctx.tensor(3)?);
    emit_fill_like(ctx, &x, &out, scalar_value(value, out.dtype))
}

fn filled_like(ctx: &mut OpCtx<'_>, value: i64) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(2)?);
    emit_fill_like(ctx, &x, &out, scalar_value(Scalar::Int(value), out.dtype))
}

/// `zeros_like.out(self, *, memory_format, out)`.
fn zeros_like(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    filled_like(ctx, 0)
}

/// `ones_like.out(self, *, memory_format, out)`.
fn ones_like(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    filled_like(ctx, 1)
}

/// `fill.Scalar_out(self, value, out)`.
fn fill_scalar(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, value, out) = (ctx.tensor(0)?, ctx.scalar(1)?, ctx.tensor(2)?);
    emit_fill_like(ctx, &x, &out, scalar_value(value, out.dtype))
}

/// `fill.Tensor_out(self, value, out)`: `value` is a one-element tensor.
fn fill_tensor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, value, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    if value.rank() != 0 || value.dynamic {
        return Err(format!(
            "fill value must be a zero-dimensional tensor, has sizes {:?}",
            value.sizes
        ));
    }
    let (vi, s) = ctx.read(&value)?;
    let v = convert(
        convert(quote!(#vi[0]), value.dtype, compute_type(value.dtype)),
        compute_type(value.dtype),
        out.dtype,
    );
    let fill = emit_fill_like(ctx, &x, &out, quote!(v))?;
    Ok(quote! { let v = { #s #v }; #fill })
}

/// `scalar_tensor.out(s, out)`.
fn scalar_tensor(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let out = ctx.tensor(1)?;
    if out.numel() != 1 || out.dynamic {
        return Err(format!("scalar_tensor output of sizes {:?}", out.sizes));
    }
    let Ok(value) = ctx.scalar(0) else {
        // A scalar computed at run time.
        let (e, kind) = ctx.scalar_expr(0)?;
        let v = super::elementwise::convert(e, kind.dtype(), out.dtype);
        let (o, s) = ctx.write(&out)?;
        return Ok(quote! { #s #o[0] = #v; });
    };
    emit_fill_sized(
        ctx,
        &vec![IntArg::Const(1); out.rank()],
        &out,
        scalar_value(value, out.dtype),
    )
}

/// Emits `arange(start, end, step)` into `out`: in `i64` when every
/// argument and the output are integers, else in `f64` as PyTorch does.
fn emit_arange(
    ctx: &mut OpCtx<'_>,
    start: Scalar,
    end: Scalar,
    step: Scalar,
    out: &TArg,
) -> Result<TokenStream, String> {
    require_contiguous(&[out])?;
    if out.dynamic {
        return Err(no_dynamic(ctx));
    }
    if out.dtype == ScalarType::Bool {
        return Err("arange into a bool tensor".into());
    }
    let int = |s: Scalar| match s {
        Scalar::Int(v) => Some(v),
        Scalar::Bool(b) => Some(b as i64),
        Scalar::Double(_) => None,
    };
    let k = kernels();
    let (len, f, first, step_lit) = match (int(start), int(end), int(step), out.dtype.is_float()) {
        (Some(a), Some(b), Some(c), false) => (
            ptec_runtime::kernels::shape::arange_len_i64(a, b, c),
            quote!(arange_i64),
            i64_lit(a),
            i64_lit(c),
        ),
        _ => {
            let (a, b, c) = (start.as_f64(), end.as_f64(), step.as_f64());
            (
                ptec_runtime::kernels::shape::arange_len(a, b, c),
                quote!(arange),
                f64_lit(a),
                f64_lit(c),
            )
        }
    };
    let len = len.ok_or_else(|| format!("arange({start:?}, {end:?}, {step:?}) has an invalid range"))?;
    require_sizes(out, &[len])?;
    let (o, s) = ctx.write(out)?;
    Ok(quote! { #s #k::#f(#first, #step_lit, #o); })
}

/// `arange.out(end, out)`.
fn arange(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (end, out) = (ctx.scalar(0)?, ctx.tensor(1)?);
    emit_arange(ctx, Scalar::Int(0), end, Scalar::Int(1), &out)
}

/// `arange.start_out(start, end, step, out)`.
fn arange_start(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let out = ctx.tensor(3)?;
    match (ctx.scalar(0), ctx.scalar(1), ctx.scalar(2)) {
        (Ok(start), Ok(end), Ok(step)) => emit_arange(ctx, start, end, step, &out),
        _ => emit_arange_runtime(ctx, [0, 1, 2], &out),
    }
}

/// Emits `arange(start, end, step)` with arguments (the values at argument
/// indices `args`) of which some are computed at run time: the length is
/// too, within `out`'s bound.
fn emit_arange_runtime(ctx: &mut OpCtx<'_>, args: [usize; 3], out: &TArg) -> Result<TokenStream, String> {
    use super::prim::ScalarKind;
    require_contiguous(&[out])?;
    require_rank(out, 1)?;
    if out.dtype == ScalarType::Bool {
        return Err("arange into a bool tensor".into());
    }
    let mut operands = Vec::new();
    for i in args {
        operands.push(ctx.scalar_expr(i)?);
    }
    let ints = operands.iter().all(|(_, k)| *k != ScalarKind::Double) && !out.dtype.is_float();
    let as_ty = |(e, kind): &(TokenStream, ScalarKind)| match (ints, kind) {
        (true, ScalarKind::Bool) => quote!((#e as i64)),
        (true, _) => quote!((#e)),
        (false, ScalarKind::Double) => quote!((#e)),
        (false, ScalarKind::Bool) => quote!((#e as u8 as f64)),
        (false, ScalarKind::Int) => quote!((#e as f64)),
    };
    let [a, b, c] = [as_ty(&operands[0]), as_ty(&operands[1]), as_ty(&operands[2])];
    let err = shape_mismatch(ctx);
    let k = kernels();
    let (len, fill) = if ints {
        (quote!(#k::arange_len_i64(#a, #b, #c)), quote!(arange_i64(#a, #c, o)))
    } else {
        (quote!(#k::arange_len(#a, #b, #c)), quote!(arange(#a, #c, o)))
    };
    let set = set_out_sizes(ctx, out, quote!(&[len]));
    let (o, s) = ctx.write(out)?;
    Ok(quote! {
        let Some(len) = #len else {
            return Err(#err);
        };
        #set
        #s
        { let o = #o; #k::#fill; }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_sizes_infer_one_dim() {
        assert_eq!(view_sizes(&[2, -1], 12), Ok(vec![2, 6]));
        assert_eq!(view_sizes(&[3, 4], 12), Ok(vec![3, 4]));
        assert!(view_sizes(&[-1, -1], 12).is_err());
        assert!(view_sizes(&[5, -1], 12).is_err());
        assert!(view_sizes(&[3, 5], 12).is_err());
        // 0 elements cannot infer a -1 (PyTorch: ambiguous)
        assert!(view_sizes(&[0, -1], 0).is_err());
    }

    #[test]
    fn expand_keeps_or_broadcasts_dims() {
        // [3, 1] -> expand(2, -1, 4): new dim 2, keep 3, broadcast 1 -> 4
        assert_eq!(
            expand_dims(&[3, 1], &[2, -1, 4]),
            Ok(vec![Dim::Fixed(2), Dim::Of(0), Dim::Fixed(4)])
        );
        assert_eq!(expand_dims(&[3, 1], &[3, 1]), Ok(vec![Dim::Of(0), Dim::Of(1)]));
        assert!(expand_dims(&[3, 2], &[3, 4]).is_err());
        assert!(expand_dims(&[3], &[-1, 3]).is_err());
        assert!(expand_dims(&[3, 1], &[3]).is_err());
    }

    #[test]
    fn unsqueeze_and_squeeze_maps() {
        // unsqueeze(-1) of rank 2 appends a dim; unsqueeze(0) prepends
        assert_eq!(unsqueeze_dims(-1, 2), Ok(vec![Dim::Of(0), Dim::Of(1), Dim::Fixed(1)]));
        assert_eq!(unsqueeze_dims(0, 1), Ok(vec![Dim::Fixed(1), Dim::Of(0)]));
        assert!(unsqueeze_dims(3, 1).is_err());
        let x = TArg {
            value: 0,
            dtype: ScalarType::Float,
            sizes: vec![1, 3, 1],
            dynamic: false,
            contiguous: true,
            dim_order: vec![0, 1, 2],
            home: Home::None,
        };
        // squeezing a dim of size 3 keeps it, as PyTorch does
        assert_eq!(squeeze_dims(&x, &[0, 1]), vec![Dim::Of(1), Dim::Of(2)]);
        assert_eq!(squeeze_dims(&x, &[0, 1, 2]), vec![Dim::Of(1)]);
    }

    #[test]
    fn split_parts_follow_pytorch() {
        assert_eq!(split_parts(7, 3), Ok(vec![3, 3, 1]));
        assert_eq!(split_parts(6, 3), Ok(vec![3, 3]));
        assert_eq!(split_parts(2, 5), Ok(vec![2]));
        assert_eq!(split_parts(0, 2), Ok(vec![0]));
        assert!(split_parts(4, 0).is_err());
    }

    #[test]
    fn padding_and_shuffle_sizes() {
        // pad (1, 2) on the last dim and (0, 1) on the one before: [2, 3, 4] -> [2, 4, 7]
        assert_eq!(padded_sizes(&[2, 3, 4], &[1, 2, 0, 1]), Ok(vec![2, 4, 7]));
        assert_eq!(padded_sizes(&[2, 3], &[-1, -1]), Ok(vec![2, 1]));
        assert!(padded_sizes(&[2, 3], &[-2, -2]).is_err());
        assert!(padded_sizes(&[2], &[1, 1, 1, 1]).is_err());
        assert_eq!(shuffled_sizes(&[1, 8, 3, 5], 2, false), Ok(vec![1, 2, 6, 10]));
        assert_eq!(shuffled_sizes(&[1, 2, 6, 10], 2, true), Ok(vec![1, 8, 3, 5]));
        assert!(shuffled_sizes(&[1, 6, 3, 5], 2, false).is_err());
    }

    #[test]
    fn as_strided_extent_is_the_last_element_read() {
        // sizes [2, 2], strides [4, 1], offset 1: the last element is 1 + 4 + 1 = 6
        assert_eq!(strided_extent(&[2, 2], &[4, 1], 1), Ok(Some(6)));
        assert_eq!(strided_extent(&[3, 0], &[1, 5], 0), Ok(None));
        assert!(strided_extent(&[2], &[-1], 0).is_err());
        assert!(strided_extent(&[2, 2], &[1], 0).is_err());
    }

    #[test]
    fn permutations_are_checked() {
        assert_eq!(permutation(&[1, -1, 0], 3), Ok(vec![1, 2, 0]));
        assert!(permutation(&[0, 0], 2).is_err());
        assert!(permutation(&[0], 2).is_err());
    }
}
