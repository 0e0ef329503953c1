//! The `llama::` operators of ExecuTorch's LLM export: KV-cache updates,
//! which write their cache in place (see `names::written_in_place`), and
//! attention over the cache. Semantics follow `extension/llm/custom_ops`
//! (`op_update_cache.cpp`, `op_sdpa.cpp`).
use super::*;
use crate::names::llama::{CUSTOM_SDPA, SDPA_WITH_KV_CACHE, UPDATE_CACHE, UPDATE_CACHE_WITH_INDICES};

pub const OPS: &[(&str, Emitter)] = &[
    (UPDATE_CACHE, update_cache),
    (UPDATE_CACHE_WITH_INDICES, update_cache_with_indices),
    (CUSTOM_SDPA, custom_sdpa),
    (SDPA_WITH_KV_CACHE, sdpa_with_kv_cache),
];

/// The run-time (or constant) integer argument `i`, as an `i64` expression.
fn int_expr(ctx: &OpCtx<'_>, i: usize) -> Result<TokenStream, String> {
    match ctx.scalar_expr(i)? {
        (e, prim::ScalarKind::Int) => Ok(e),
        (_, kind) => Err(format!("argument {i} must be an Int, is a {kind:?}")),
    }
}

/// A rank-4 tensor in the default dim order.
fn rank4(t: &TArg, what: &str) -> Result<(), String> {
    require_contiguous(&[t])?;
    if t.rank() != 4 {
        return Err(format!("the {what} (value {}) has rank {}, not 4", t.value, t.rank()));
    }
    Ok(())
}

/// The value and the cache of an update, checked: same dtype, the same
/// batch, heads and head size, the cache static (its bytes hold it).
fn cache_operands(ctx: &OpCtx<'_>) -> Result<(TArg, TArg), String> {
    let (value, cache) = (ctx.tensor(0)?, ctx.tensor(1)?);
    rank4(&value, "value")?;
    rank4(&cache, "cache")?;
    if value.dtype != cache.dtype {
        return Err(format!("value is {}, the cache {}", value.dtype, cache.dtype));
    }
    if cache.dynamic {
        return Err(format!("the cache (value {}) has a dynamic shape", cache.value));
    }
    let (v, c) = (&value.sizes, &cache.sizes);
    if (v[0], v[2], v[3]) != (c[0], c[2], c[3]) || v[1] > c[1] {
        return Err(format!("value {v:?} does not fit the cache {c:?}"));
    }
    Ok((value, cache))
}

/// `update_cache(value, cache, start_pos, out) -> out`; `out` is left as it is
/// (ExecuTorch's kernel returns it untouched).
fn update_cache(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(5)?;
    let (value, cache) = cache_operands(ctx)?;
    let start = int_expr(ctx, 2)?;
    let (vs, cs) = (ctx.sizes(&value), usize_slice(&cache.sizes));
    let (vi, s1) = ctx.read(&value)?;
    let (ci, s2) = ctx.write(&cache)?;
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::attention::update_cache(#vi, #vs, #ci, #cs, #start)));
    Ok(quote! { #s1 #s2 #call })
}

/// `update_cache_with_indices(value, cache, start_pos, indices, out)`.
fn update_cache_with_indices(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(6)?;
    let (value, cache) = cache_operands(ctx)?;
    int_expr(ctx, 2)?;
    let indices = ctx.tensor(3)?;
    require_contiguous(&[&indices])?;
    require_dtype(&indices, &[ScalarType::Long])?;
    let (vs, cs) = (ctx.sizes(&value), usize_slice(&cache.sizes));
    let (vi, s1) = ctx.read(&value)?;
    let (ii, s2) = ctx.read(&indices)?;
    let (ci, s3) = ctx.write(&cache)?;
    let call = ctx
        .kernel_result(quote!(::ptec_runtime::kernels::attention::update_cache_with_indices(#vi, #vs, #ci, #cs, #ii)));
    Ok(quote! { #s1 #s2 #s3 #call })
}

/// `custom_sdpa(q, k_cache, v_cache, start_pos, attn_mask?, dropout_p,
/// is_causal, scale?, out)`. Like ExecuTorch, it ignores `dropout_p`, and
/// refuses a mask together with `is_causal`.
fn custom_sdpa(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(10)?;
    attention(ctx, [0, 1, 2, 3, 4, 6, 7, 8], None)
}

/// `sdpa_with_kv_cache(q, k, v, key_cache, value_cache, start_pos, seq_len,
/// attn_mask?, dropout_p, is_causal, scale?, out)`: the caches are written
/// with `k` and `v` (as `update_cache`), then attended over (as
/// `custom_sdpa`), in one kernel call that holds them mutably.
fn sdpa_with_kv_cache(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(13)?;
    attention(ctx, [0, 3, 4, 5, 7, 9, 10, 11], Some((1, 2, 6)))
}

/// The attention of `custom_sdpa` from the argument positions `at` (query,
/// key cache, value cache, start_pos, mask, is_causal, scale, out), and
/// with `update` (k, v, seq_len) the cache writes of `sdpa_with_kv_cache`.
fn attention(
    ctx: &mut OpCtx<'_>,
    at: [usize; 8],
    update: Option<(usize, usize, usize)>,
) -> Result<TokenStream, String> {
    let [q_at, k_at, v_at, start_at, mask_at, causal_at, scale_at, out_at] = at;
    let (q, k, v, out) = (
        ctx.tensor(q_at)?,
        ctx.tensor(k_at)?,
        ctx.tensor(v_at)?,
        ctx.tensor(out_at)?,
    );
    let mask = ctx.opt_tensor(mask_at)?;
    let start = int_expr(ctx, start_at)?;
    let is_causal = ctx.bool(causal_at)?;
    let scale = ctx.opt_double(scale_at)?;
    for (t, what) in [(&q, "query"), (&k, "key cache"), (&v, "value cache"), (&out, "output")] {
        rank4(t, what)?;
        require_dtype(t, &[ScalarType::Float])?;
    }
    if k.dynamic || v.dynamic || k.sizes != v.sizes {
        return Err(format!(
            "the caches {:?} and {:?} differ or are dynamic",
            k.sizes, v.sizes
        ));
    }
    if mask.is_some() && is_causal {
        return Err("attn_mask and is_causal cannot be set at the same time".into());
    }
    if let Some(m) = &mask {
        require_contiguous(&[m])?;
        require_dtype(m, &[ScalarType::Float])?;
        if m.rank() != 2 {
            return Err(format!("the mask (value {}) has rank {}, not 2", m.value, m.rank()));
        }
    }
    let (qs, cs) = (&q.sizes, &k.sizes);
    if qs[0] != cs[0] || qs[3] != cs[3] || cs[2] == 0 || qs[2] % cs[2] != 0 || qs[1] > cs[1] {
        return Err(format!("query {qs:?} does not fit the caches {cs:?}"));
    }
    if !q.dynamic {
        require_sizes(&out, qs)?;
    }
    // ExecuTorch's default scale, computed in f64 and used as f32.
    let scale = scale.unwrap_or(1.0 / (qs[3] as f64).sqrt()) as f32;
    let scale = f32_lit(scale);
    let q_sizes = ctx.sizes(&q);
    let set = ctx.set_sizes(&out, q_sizes.clone());
    let cache_sizes = usize_slice(cs);
    let (qi, s1) = ctx.read(&q)?;
    let (mask_expr, mask_sizes, s2) = match &mask {
        Some(m) => {
            let sizes = ctx.sizes(m);
            let (mi, s) = ctx.read(m)?;
            (quote!(Some(#mi)), sizes, s)
        }
        None => (quote!(None), quote!(&[]), quote!()),
    };
    let args = quote! {
        &::ptec_runtime::kernels::attention::Sdpa {
            q_sizes: #q_sizes,
            cache_sizes: #cache_sizes,
            start_pos: #start,
            mask: #mask_expr,
            mask_sizes: #mask_sizes,
            is_causal: #is_causal,
            scale: #scale,
        }
    };
    let len = ::ptec_runtime::kernels::attention::sdpa_scratch_len(cs[1]);
    let Some((k_at, v_at, seq_at)) = update else {
        let (ki, s3) = ctx.read(&k)?;
        let (vi, s4) = ctx.read(&v)?;
        let (o, s5) = ctx.write(&out)?;
        let (scores, s6) = ctx.scratch_f32(lit(len), len);
        let call = ctx
            .kernel_result(quote!(::ptec_runtime::kernels::attention::custom_sdpa(#qi, #ki, #vi, #args, #o, #scores)));
        return Ok(quote! { #set #s1 #s2 #s3 #s4 #s5 #s6 #call });
    };
    let (kp, vp) = (ctx.tensor(k_at)?, ctx.tensor(v_at)?);
    for (t, what) in [(&kp, "key"), (&vp, "value")] {
        rank4(t, what)?;
        require_dtype(t, &[ScalarType::Float])?;
    }
    let (ks, vs) = (&kp.sizes, &vp.sizes);
    if ks != vs || kp.dynamic != vp.dynamic || (ks[0], ks[2], ks[3]) != (cs[0], cs[2], cs[3]) || ks[1] > cs[1] {
        return Err(format!("key {ks:?} and value {vs:?} do not fit the caches {cs:?}"));
    }
    let seq = int_expr(ctx, seq_at)?;
    let kv_sizes = ctx.sizes(&kp);
    let (ki, s3) = ctx.read(&kp)?;
    let (vi, s4) = ctx.read(&vp)?;
    let (kc, s5) = ctx.write(&k)?;
    let (vc, s6) = ctx.write(&v)?;
    let (o, s7) = ctx.write(&out)?;
    let (scores, s8) = ctx.scratch_f32(lit(len), len);
    let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::attention::sdpa_with_kv_cache(
        #qi, #ki, #vi, #kv_sizes, #kc, #vc, #seq, #args, #o, #scores
    )));
    Ok(quote! { #set #s1 #s2 #s3 #s4 #s5 #s6 #s7 #s8 #call })
}
