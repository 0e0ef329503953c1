//! Shape operators that move data: views and reshapes (`view_copy`,
//! `unsqueeze_copy`, `squeeze_copy`, `et_view`, ...), permutations,
//! `expand_copy`, `cat`/`stack`, slicing and splitting, padding, `flip`,
//! `roll`, `tril`/`triu`, pixel shuffles, and the factories (`full`,
//! `zeros`, `arange`, `fill`, ...).
//!
//! Dynamic (bounded) shapes are supported where the output's sizes follow
//! from the input's by a simple rule: the emitter computes the live sizes
//! at run time. Ops whose output shape needs more say so at compile time.
//!
//! One file per kind: [`views`], [`join`], [`rearrange`], [`factories`];
//! this one holds their table and the argument helpers they share.
use super::checks::{no_dynamic, require_same, scalar_value, set_out_sizes, shape_mismatch};
use super::elementwise::{compute_type, convert};
use super::*;

mod factories;
mod join;
mod rearrange;
mod views;

use factories::*;
pub(super) use join::emit_copy_then;
use join::*;
use rearrange::*;
use views::*;

/// ptec's own data movement, made by the passes.
pub const FUSED: &[(&str, Emitter)] = &[(crate::names::GATHER, gather)];

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
