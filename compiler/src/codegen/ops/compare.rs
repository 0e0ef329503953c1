//! Comparisons (`eq`, `ne`, `lt`, `le`, `gt`, `ge`), with a tensor or a
//! scalar on the right; the result is written in the out tensor's dtype
//! (bool in exported programs).
use super::elementwise::{compute_type, convert, emit_map, result_type, scalar_in};
use super::prim::ScalarKind;
use super::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("aten::eq.Tensor_out", eq_t),
    ("aten::eq.Scalar_out", eq_s),
    ("aten::ne.Tensor_out", ne_t),
    ("aten::ne.Scalar_out", ne_s),
    ("aten::lt.Tensor_out", lt_t),
    ("aten::lt.Scalar_out", lt_s),
    ("aten::le.Tensor_out", le_t),
    ("aten::le.Scalar_out", le_s),
    ("aten::gt.Tensor_out", gt_t),
    ("aten::gt.Scalar_out", gt_s),
    ("aten::ge.Tensor_out", ge_t),
    ("aten::ge.Scalar_out", ge_s),
];

fn compare(ctx: &mut OpCtx<'_>, op: TokenStream, scalar: bool) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let a = ctx.tensor(0)?;
    let out = ctx.tensor(2)?;
    if scalar && ctx.scalar(1).is_err() {
        // A scalar computed at run time (a position, say): converted once.
        let (e, kind) = ctx.scalar_expr(1)?;
        let proto = match kind {
            ScalarKind::Int => Scalar::Int(0),
            ScalarKind::Double => Scalar::Double(0.0),
            ScalarKind::Bool => Scalar::Bool(false),
        };
        let c = compute_type(result_type(&[&a], &[proto]));
        let rhs = convert(e, kind.dtype(), c);
        let map = emit_map(ctx, &[&a], &out, &[c], ScalarType::Bool, quote!(a #op rhs), false)?;
        Ok(quote! { let rhs = #rhs; #map })
    } else if scalar {
        let s = ctx.scalar(1)?;
        let c = compute_type(result_type(&[&a], &[s]));
        let sv = scalar_in(s, c);
        emit_map(
            ctx,
            &[&a],
            &out,
            &[c],
            ScalarType::Bool,
            quote!({ let b = #sv; a #op b }),
            false,
        )
    } else {
        let b = ctx.tensor(1)?;
        let c = compute_type(result_type(&[&a, &b], &[]));
        emit_map(ctx, &[&a, &b], &out, &[c, c], ScalarType::Bool, quote!(a #op b), false)
    }
}

macro_rules! cmp_ops {
    ($($t:ident, $s:ident, $op:tt;)*) => {$(
        fn $t(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
            compare(ctx, quote!($op), false)
        }
        fn $s(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
            compare(ctx, quote!($op), true)
        }
    )*};
}
cmp_ops!(
    eq_t, eq_s, ==;
    ne_t, ne_s, !=;
    lt_t, lt_s, <;
    le_t, le_s, <=;
    gt_t, gt_s, >;
    ge_t, ge_s, >=;
);
