//! Matrix products: `addmm`, `mm`, `bmm`, `linear`.
use super::*;
use crate::plan::fold::PackedWeight;

pub const OPS: &[(&str, Emitter)] = &[
    ("aten::addmm.out", addmm),
    ("aten::mm.out", mm),
    ("aten::bmm.out", bmm),
    ("aten::linear.out", linear),
];

fn float_same(ts: &[&TArg]) -> Result<(), String> {
    require_contiguous(ts)?;
    for t in ts {
        require_dtype(t, FLOATS)?;
        if t.dtype != ts[0].dtype {
            return Err(format!(
                "value {} has dtype {}, value {} has {}",
                t.value, t.dtype, ts[0].value, ts[0].dtype
            ));
        }
    }
    Ok(())
}

/// The m, k, n of a product, as literals or run-time expressions.
fn dims(ctx: &OpCtx<'_>, t: &TArg, i: usize) -> TokenStream {
    if t.dynamic {
        let s = ctx.sizes(t);
        quote!((#s)[#i])
    } else {
        lit(t.sizes[i])
    }
}

/// For a left operand whose rows may vary: the check that its live inner
/// dimension is the `k` the product was compiled for. An input within its
/// bound may have any size in every dim; without this, a short one was
/// read past its end (a panic) instead of refused.
fn inner_dim_check(ctx: &OpCtx<'_>, a: &TArg) -> TokenStream {
    if !a.dynamic {
        return quote!();
    }
    let (live, k, err) = (ctx.sizes(a), lit(a.sizes[1]), checks::shape_mismatch(ctx));
    quote! {
        if (#live)[1] != #k {
            return Err(#err);
        }
    }
}

/// The product's scratch: none when it runs on the packed engine (`packed`:
/// its right operand is a constant packed on the first run, and the call
/// is a plain product, nothing scaled or added in first), which reads the
/// left operand in place.
fn scratch(
    ctx: &mut OpCtx<'_>,
    m: &TokenStream,
    n: &TokenStream,
    k: &TokenStream,
    max: (usize, usize, usize),
    packed: bool,
) -> (Ident, TokenStream) {
    if packed {
        let name = format_ident!("no_scratch");
        return (name.clone(), quote!(let #name: &mut [f32] = &mut [];));
    }
    let max_len = ptec_runtime::kernels::linear::gemm_scratch_len(max.0, max.1, max.2);
    ctx.scratch_f32(
        quote!(::ptec_runtime::kernels::linear::gemm_scratch_len(#m, #n, #k)),
        max_len,
    )
}

/// The `&[f32]` expression of constant `value` packed (as stored
/// transposed or not) at compile time or on the first run, or an empty
/// slice.
fn packed_copy(ctx: &OpCtx<'_>, value: usize, trans: bool) -> TokenStream {
    match ctx.folds.packed_for(value, trans) {
        Some(PackedWeight {
            prepared: Some(offset),
            len,
            ..
        }) => {
            let data = (ctx.data_expr)(DataSource::Embedded, *offset);
            let (offset, len) = (lit(*offset), lit(*len));
            quote!(::ptec_runtime::mem::constant::<f32>(&#data, #offset, #len)?)
        }
        Some(w) => {
            let (at, end) = (lit(w.offset), lit(w.offset + w.len));
            quote!(&self.packed.0[#at..#end])
        }
        None => quote!(&[]),
    }
}

/// Whether constant `value` (stored transposed or not) was packed at
/// compile time: a plain product then reads only its packed copy.
fn packed_at_compile_time(ctx: &OpCtx<'_>, value: usize, trans: bool) -> bool {
    ctx.folds.packed_for(value, trans).is_some_and(|w| w.prepared.is_some())
}

/// The right operand at argument `i` of a product: the `Operand`
/// expression reading it, the view statement, and whether it is packed. A
/// folded transpose reads the constant it transposes, as a transposed
/// operand; a packed constant comes with its packed copy, and alone when
/// the product is `plain` (runs on the packed engine) and the copy was made
/// at compile time, so that the constant itself stays out of the binary.
fn right_operand(
    ctx: &mut OpCtx<'_>,
    i: usize,
    stored_transposed: bool,
    plain: bool,
) -> Result<(TokenStream, TokenStream, bool), String> {
    let logical = ctx.tensor(i)?;
    let (stored, trans) = match ctx.folds.transposed(logical.value) {
        Some(src) => (ctx.tensor_by_value(src)?, true),
        None => (logical, stored_transposed),
    };
    let (data, stmt) = ctx.read_if_needed(&stored, !(plain && packed_at_compile_time(ctx, stored.value, trans)))?;
    let is_packed = ctx.folds.packed_for(stored.value, trans).is_some();
    let packed = packed_copy(ctx, stored.value, trans);
    let operand = quote!(::ptec_runtime::kernels::linear::Operand { data: #data, trans: #trans, packed: #packed });
    Ok((operand, stmt, is_packed))
}

/// The tensor a product writes at argument `i` and whether it applies a
/// ReLU: its own, or in the memory of a fused `relu`'s output (of the same
/// element count, which may have another shape).
fn product_output(ctx: &OpCtx<'_>, i: usize) -> Result<(TArg, bool), String> {
    let own = ctx.tensor(i)?;
    match ctx.folds.relu_into(ctx.instruction) {
        Some(r) => {
            let r = ctx.tensor_by_value(r)?;
            if r.dtype != own.dtype || r.numel() != own.numel() || r.dynamic || own.dynamic {
                return Err(format!(
                    "the fused relu's output {} does not match value {}",
                    r.value, own.value
                ));
            }
            Ok((
                TArg {
                    value: r.value,
                    home: r.home,
                    ..own
                },
                true,
            ))
        }
        None => Ok((own, false)),
    }
}

/// `addmm.out(self, mat1, mat2, *, beta=1, alpha=1, out)`.
fn addmm(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(7)?;
    let (bias, a) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let (out, relu) = product_output(ctx, 5)?;
    let beta = ctx.opt_double(3)?.unwrap_or(1.0);
    let alpha = ctx.opt_double(4)?.unwrap_or(1.0);
    let b = ctx.tensor(2)?;
    float_same(&[&bias, &a, &b, &out])?;
    if a.rank() != 2 || b.rank() != 2 || out.rank() != 2 {
        return Err("addmm takes 2-d matrices".into());
    }
    if !a.dynamic && !b.dynamic {
        let want = ptec_runtime::kernels::linear::addmm_output_sizes(&bias.sizes, &a.sizes, &b.sizes)
            .ok_or_else(|| format!("sizes {:?} + {:?} @ {:?} do not fit", bias.sizes, a.sizes, b.sizes))?;
        require_sizes(&out, &want)?;
    } else if a.sizes[1] != b.sizes[0] || b.dynamic {
        return Err("addmm with a dynamic inner or right dimension is not supported".into());
    }
    let (m, k, n) = (dims(ctx, &a, 0), lit(a.sizes[1]), lit(b.sizes[1]));
    let mut stmts = vec![inner_dim_check(ctx, &a)];
    if out.dynamic {
        stmts.push(ctx.set_sizes(&out, quote!(&[#m, #n])));
    }
    let bsizes = ctx.sizes(&bias);
    // `addmm` adds a row bias as it stores, as a plain product would (the
    // plan decides which are plain: it predicts what they read).
    let plain = ctx.folds.plain(ctx.instruction);
    let (bi, s1) = ctx.read(&bias)?;
    let (ai, s2) = ctx.read(&a)?;
    let (b_operand, s3, b_packed) = right_operand(ctx, 2, false, plain)?;
    let (o, s4) = ctx.write(&out)?;
    let max = (a.sizes[0], b.sizes[1], a.sizes[1]);
    let (sc, s5) = scratch(ctx, &m, &n, &k, max, b_packed && plain);
    stmts.extend([s1, s2, s3, s4, s5]);
    let (beta, alpha) = (f64_lit(beta), f64_lit(alpha));
    stmts.push(ctx.kernel_result(quote!(::ptec_runtime::kernels::linear::addmm(
        #bi,
        #bsizes,
        ::ptec_runtime::kernels::linear::Operand::plain(#ai),
        #b_operand,
        #m, #k, #n, #beta, #alpha, #relu, #o, #sc
    ))));
    Ok(quote!(#(#stmts)*))
}

/// `mm.out(self, mat2, out)`.
fn mm(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let a = ctx.tensor(0)?;
    let (out, relu) = product_output(ctx, 2)?;
    let b = ctx.tensor(1)?;
    float_same(&[&a, &b, &out])?;
    if a.rank() != 2 || b.rank() != 2 || a.sizes[1] != b.sizes[0] || b.dynamic {
        return Err(format!("mm of {:?} and {:?}", a.sizes, b.sizes));
    }
    require_sizes(&out, &[a.sizes[0], b.sizes[1]])?;
    let (m, k, n) = (dims(ctx, &a, 0), lit(a.sizes[1]), lit(b.sizes[1]));
    let mut stmts = vec![inner_dim_check(ctx, &a), ctx.set_sizes(&out, quote!(&[#m, #n]))];
    let (ai, s1) = ctx.read(&a)?;
    let (b_operand, s2, b_packed) = right_operand(ctx, 1, false, true)?;
    let (o, s3) = ctx.write(&out)?;
    let (sc, s4) = scratch(ctx, &m, &n, &k, (a.sizes[0], b.sizes[1], a.sizes[1]), b_packed);
    stmts.extend([s1, s2, s3, s4]);
    stmts.push(quote!(::ptec_runtime::kernels::linear::mm(
        ::ptec_runtime::kernels::linear::Operand::plain(#ai),
        #b_operand,
        #m, #k, #n, #relu, #o, #sc
    );));
    Ok(quote!(#(#stmts)*))
}

/// `bmm.out(self, mat2, out)`.
fn bmm(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (a, b, out) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    float_same(&[&a, &b, &out])?;
    require_contiguous(&[&a, &b, &out])?;
    let want = ptec_runtime::kernels::linear::bmm_output_sizes(&a.sizes, &b.sizes)
        .ok_or_else(|| format!("bmm of {:?} and {:?}", a.sizes, b.sizes))?;
    require_sizes(&out, &want)?;
    // Dynamic operands (attention over a prompt of any length) have their
    // live sizes checked against each other, and set the output's.
    let dynamic = a.dynamic || b.dynamic;
    if dynamic && !out.dynamic {
        return Err(format!(
            "bmm of dynamic operands into the static output value {}",
            out.value
        ));
    }
    let (sa, sb) = (ctx.sizes(&a), ctx.sizes(&b));
    let ins = lit(ctx.instruction);
    let dims = quote! {
        let (bs, m, k, n) = {
            let (a, b): (&[usize], &[usize]) = (#sa, #sb);
            if a[0] != b[0] || a[2] != b[1] {
                return Err(::ptec_runtime::Error::Kernel {
                    instruction: #ins,
                    error: ::ptec_runtime::kernels::KernelError::ShapeMismatch,
                });
            }
            (a[0], a[1], a[2], b[2])
        };
    };
    let set = ctx.set_sizes(&out, quote!(&[bs, m, n]));
    let (ai, s1) = ctx.read(&a)?;
    let (bb, s2) = ctx.read(&b)?;
    let (o, s3) = ctx.write(&out)?;
    let max_len = ptec_runtime::kernels::linear::bmm_scratch_len(a.sizes[0], a.sizes[1], b.sizes[2], a.sizes[2]);
    let (sc, s4) = ctx.scratch_f32(
        quote!(::ptec_runtime::kernels::linear::bmm_scratch_len(bs, m, n, k).min(#max_len)),
        max_len,
    );
    Ok(quote! { #dims #set #s1 #s2 #s3 #s4 ::ptec_runtime::kernels::linear::bmm(#ai, #bb, bs, m, k, n, #o, #sc); })
}

/// `linear.out(input, weight, bias=None, out)`: `input[..., k] @ weight[n, k]^T + bias`.
fn linear(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (x, bias) = (ctx.tensor(0)?, ctx.opt_tensor(2)?);
    let (out, relu) = product_output(ctx, 3)?;
    let w = ctx.tensor(1)?;
    let mut all = vec![&x, &w, &out];
    if let Some(b) = &bias {
        all.push(b);
    }
    float_same(&all)?;
    // The input's leading dims may vary up to their bound (a prompt's
    // tokens); the output then follows them.
    if x.dynamic != out.dynamic || w.dynamic || bias.as_ref().is_some_and(|b| b.dynamic) {
        return Err("linear needs a static weight and bias, and an output as dynamic as its input".into());
    }
    if w.rank() != 2 || x.rank() == 0 {
        return Err("linear needs an input of rank >= 1 and a 2-d weight".into());
    }
    let k = *x.sizes.last().unwrap_or(&0);
    if w.sizes[1] != k {
        return Err(format!("linear of {:?} with weight {:?}", x.sizes, w.sizes));
    }
    let n = w.sizes[0];
    let m = x.numel() / k.max(1);
    let mut want = x.sizes.clone();
    *want.last_mut().expect("rank >= 1") = n;
    require_sizes(&out, &want)?;
    let (kl, nl) = (lit(k), lit(n));
    let (ml, set) = product_rows(ctx, &x, &out, k, n)?;
    let (xi, s1) = ctx.read(&x)?;
    let (wi, s2) = ctx.read_if_needed(&w, !packed_at_compile_time(ctx, w.value, true))?;
    let w_packed = ctx.folds.packed_for(w.value, true).is_some();
    let packed = packed_copy(ctx, w.value, true);
    let (o, s3) = ctx.write(&out)?;
    let (bexpr, s4) = match &bias {
        Some(b) => {
            let (bi, s) = ctx.read(b)?;
            (quote!(Some(#bi)), s)
        }
        None => (quote!(None), quote!()),
    };
    let (sc, s5) = scratch(ctx, &ml, &nl, &kl, (m, n, k), w_packed);
    Ok(quote! {
        #set #s1 #s2 #s3 #s4 #s5
        ::ptec_runtime::kernels::linear::linear(#xi, #wi, #packed, #bexpr, #ml, #kl, #nl, #relu, #o, #sc);
    })
}
