//! Shape operators that move data: `permute_copy`, `view_copy`,
//! `expand_copy`, `cat`, `slice_copy`, `select_copy`, ...
use super::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("aten::permute_copy.out", permute_copy),
    ("aten::view_copy.out", view_copy),
];

/// `permute_copy.out(self, dims, out)`.
fn permute_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, dims, out) = (ctx.tensor(0)?, ctx.int_list(1)?, ctx.tensor(2)?);
    require_contiguous(&[&x, &out])?;
    if x.dtype != out.dtype {
        return Err(format!("permute_copy from {} to {}", x.dtype, out.dtype));
    }
    if dims.len() != x.rank() {
        return Err(format!("{} dims for a tensor of rank {}", dims.len(), x.rank()));
    }
    let mut seen = vec![false; x.rank()];
    let mut perm = Vec::new();
    for &d in &dims {
        let d = norm_dim(d, x.rank())?;
        if std::mem::replace(&mut seen[d], true) {
            return Err(format!("dims {dims:?} are not a permutation"));
        }
        perm.push(d);
    }
    let mut stmts = Vec::new();
    if x.dynamic {
        let s = ctx.sizes(&x);
        let p = usize_slice(&perm);
        let r = lit(perm.len());
        stmts.push(quote! {
            let xs: &[usize] = #s;
            let p: &[usize] = #p;
            let mut os = [0usize; #r];
            for (o, &d) in os.iter_mut().zip(p) { *o = xs[d]; }
        });
        stmts.push(ctx.set_sizes(&out, quote!(&os)));
    } else {
        let want: Vec<usize> = perm.iter().map(|&d| x.sizes[d]).collect();
        require_sizes(&out, &want)?;
    }
    let sizes = ctx.sizes(&x);
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    let p = usize_slice(&perm);
    stmts.extend([s1, s2]);
    stmts.push(quote!(::ptec_runtime::kernels::shape::permute_copy(#xi, #sizes, #p, #o);));
    Ok(quote!(#(#stmts)*))
}

/// `view_copy.out(self, size, out)`: the same elements under another shape.
fn view_copy(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (x, out) = (ctx.tensor(0)?, ctx.tensor(2)?);
    require_contiguous(&[&x, &out])?;
    if x.dtype != out.dtype || x.dynamic || out.dynamic || x.numel() != out.numel() {
        return Err(format!(
            "view_copy of {:?} {} into {:?} {}",
            x.sizes, x.dtype, out.sizes, out.dtype
        ));
    }
    let (xi, s1) = ctx.read(&x)?;
    let (o, s2) = ctx.write(&out)?;
    Ok(quote! { #s1 #s2 #o.copy_from_slice(#xi); })
}
