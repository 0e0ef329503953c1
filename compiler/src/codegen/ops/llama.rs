//! The `llama::` operators of ExecuTorch's LLM export: KV-cache updates,
//! which write their cache in place (see `names::written_in_place`), and
//! attention over the cache, and Qwen3.5's gated delta rule. Semantics follow `extension/llm/custom_ops`
//! (`op_update_cache.cpp`, `op_sdpa.cpp`).
use super::*;
use crate::names::llama::{
    CUSTOM_QUANTIZED_SDPA, CUSTOM_SDPA, GATED_DELTA_RULE, SDPA_WITH_KV_CACHE, UPDATE_CACHE, UPDATE_CACHE_WITH_INDICES,
};

pub const OPS: &[(&str, Emitter)] = &[
    (UPDATE_CACHE, update_cache),
    (UPDATE_CACHE_WITH_INDICES, update_cache_with_indices),
    (CUSTOM_SDPA, custom_sdpa),
    (SDPA_WITH_KV_CACHE, sdpa_with_kv_cache),
    (CUSTOM_QUANTIZED_SDPA, custom_quantized_sdpa),
    (GATED_DELTA_RULE, gated_delta_rule),
];

/// `gated_delta_rule(query, key, value, decay, beta, initial_state, out,
/// final_state)`: the sequence length may vary; the heads of the query
/// and of the key must be as many (the model repeats them before).
fn gated_delta_rule(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(9)?;
    let ts: Vec<TArg> = (0..8).map(|i| ctx.tensor(i)).collect::<Result<_, _>>()?;
    let [q, k, v, decay, beta, s0, out, s1] = &ts[..] else {
        unreachable!()
    };
    require_contiguous(&ts.iter().collect::<Vec<_>>())?;
    for t in &ts {
        require_dtype(t, &[ScalarType::Float])?;
    }
    let bound4 = |t: &TArg| -> Result<[usize; 4], String> {
        <[usize; 4]>::try_from(&t.sizes[..]).map_err(|_| format!("value {} has sizes {:?}, not 4-d", t.value, t.sizes))
    };
    let ([b, h, tl, dk], [.., dv]) = (bound4(q)?, bound4(v)?);
    if bound4(k)? != [b, h, tl, dk] {
        return Err(format!(
            "query of sizes {:?} and key of {:?}: the heads of both must be as many",
            q.sizes, k.sizes
        ));
    }
    if bound4(s0)? != [b, h, dk, dv] || s1.sizes != s0.sizes || s0.dynamic || s1.dynamic {
        return Err(format!(
            "states of sizes {:?} and {:?}, expected [{b}, {h}, {dk}, {dv}]",
            s0.sizes, s1.sizes
        ));
    }
    if decay.rank() != 3 && decay.rank() != 4 || beta.rank() != 3 {
        return Err(format!("decay of sizes {:?} and beta of {:?}", decay.sizes, beta.sizes));
    }
    // The output follows the query's live sizes, with the value's width.
    let qs = ctx.sizes(q);
    let set = super::checks::set_out_sizes(ctx, out, quote!(&[qs[0], qs[1], qs[2], #dv]));
    let mut stmts = vec![quote! { let qs: &[usize] = #qs; #set }];
    let mut names = Vec::new();
    for t in [q, k, v, decay, beta, s0] {
        let (n, s) = ctx.read(t)?;
        stmts.push(s);
        names.push(n);
    }
    let (o, so) = ctx.write(out)?;
    let (f, sf) = ctx.write(s1)?;
    stmts.extend([so, sf]);
    let dvl = lit(dv);
    let call =
        ctx.kernel_result(quote!(::ptec_runtime::kernels::attention::gated_delta_rule(#(#names,)* qs, #dvl, #o, #f)));
    Ok(quote! { #(#stmts)* #call })
}

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

/// The per-row parameters (argument `i`) of the int8 operand `t`: `t`'s
/// sizes with a last dim of 1, as dynamic as `t`.
fn row_params(ctx: &OpCtx<'_>, t: &TArg, i: usize) -> Result<TArg, String> {
    let p = ctx
        .opt_tensor(i)?
        .ok_or_else(|| format!("argument {i}: an int8 operand needs its zero points and scales"))?;
    require_contiguous(&[&p])?;
    let want = [t.sizes[0], t.sizes[1], t.sizes[2], 1];
    if p.sizes != want || p.dynamic != t.dynamic {
        return Err(format!(
            "value {} has sizes {:?}, expected {want:?} (one per row of value {})",
            p.value, p.sizes, t.value
        ));
    }
    Ok(p)
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
    attention(ctx, [0, 1, 2, 3, 4, 6, 7, 8], Extra::None)
}

/// `sdpa_with_kv_cache(q, k, v, key_cache, value_cache, start_pos, seq_len,
/// attn_mask?, dropout_p, is_causal, scale?, out)`: the caches are written
/// with `k` and `v` (as `update_cache`), then attended over (as
/// `custom_sdpa`), in one kernel call that holds them mutably.
fn sdpa_with_kv_cache(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(13)?;
    attention(
        ctx,
        [0, 3, 4, 5, 7, 9, 10, 11],
        Extra::Update { k: 1, v: 2, seq_len: 6 },
    )
}

/// `custom_quantized_sdpa(q, k_cache, v_cache, start_pos, attn_mask?,
/// dropout_p, is_causal, scale?, q_zero_points?, q_scales?,
/// k_zero_points?, k_scales?, v_zero_points?, v_scales?, is_seq_at_dim_2,
/// out)`: `custom_sdpa` over int8 operands with per-row parameters (the
/// quantized KV cache of `--quantize_kv_cache`).
fn custom_quantized_sdpa(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(17)?;
    if ctx.bool(14)? {
        return Err("is_seq_at_dim_2 (the [B, H, S, D] layout) is not supported".into());
    }
    attention(ctx, [0, 1, 2, 3, 4, 6, 7, 15], Extra::Quantized([8, 9, 10, 11, 12, 13]))
}

/// What an attention operator has besides `custom_sdpa`'s arguments.
enum Extra {
    None,
    /// `sdpa_with_kv_cache`'s new keys and values and their count.
    Update {
        k: usize,
        v: usize,
        seq_len: usize,
    },
    /// The zero points and scales of the int8 q, k and v, in that order.
    Quantized([usize; 6]),
}

/// The attention of `custom_sdpa` from the argument positions `at` (query,
/// key cache, value cache, start_pos, mask, is_causal, scale, out), with
/// the cache writes of `sdpa_with_kv_cache` or the int8 operands of
/// `custom_quantized_sdpa` as `extra` says.
fn attention(ctx: &mut OpCtx<'_>, at: [usize; 8], extra: Extra) -> Result<TokenStream, String> {
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
    let operands = match extra {
        Extra::Quantized(_) => ScalarType::Char,
        _ => ScalarType::Float,
    };
    let float = ScalarType::Float;
    for (t, what, dtype) in [
        (&q, "query", operands),
        (&k, "key cache", operands),
        (&v, "value cache", operands),
        (&out, "output", float),
    ] {
        rank4(t, what)?;
        require_dtype(t, &[dtype])?;
    }
    // Only `custom_sdpa` reads caches of a varying length (a slice of an
    // earlier layer's, as Gemma 4's KV-sharing layers attend over); the
    // others write or scale their caches in place.
    let dynamic = k.dynamic || v.dynamic;
    if k.sizes != v.sizes || (dynamic && !matches!(extra, Extra::None)) {
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
    // Dynamic caches: their live sizes, equal at run time, which the
    // kernel checks against the live views and the query.
    let (cache_sizes, same_caches) = if dynamic {
        let (ks, vs) = (ctx.sizes(&k), ctx.sizes(&v));
        let check = ctx.kernel_result(quote!(::ptec_runtime::kernels::attention::same_cache_sizes(#ks, #vs)));
        (ks, check)
    } else {
        (usize_slice(cs), quote!())
    };
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
    if let Extra::Quantized(params) = extra {
        let len = ::ptec_runtime::kernels::attention::quantized_sdpa_scratch_len(cs[1]);
        let mut stmts = quote!(#set #s2);
        let mut rows = Vec::new();
        for (t, pair) in [&q, &k, &v].into_iter().zip(params.chunks_exact(2)) {
            let (zero_points, scales) = (row_params(ctx, t, pair[0])?, row_params(ctx, t, pair[1])?);
            require_dtype(&zero_points, &[ScalarType::Char])?;
            require_dtype(&scales, &[ScalarType::Float])?;
            let (ti, a) = ctx.read(t)?;
            let (zi, b) = ctx.read(&zero_points)?;
            let (si, c) = ctx.read(&scales)?;
            stmts.extend(quote!(#a #b #c));
            rows.push(quote! {
                ::ptec_runtime::kernels::attention::QuantizedRows { values: #ti, scales: #si, zero_points: #zi }
            });
        }
        let (o, s3) = ctx.write(&out)?;
        let (scores, s4) = ctx.scratch_f32(lit(len), len);
        let [qr, kr, vr] = [&rows[0], &rows[1], &rows[2]];
        let call = ctx.kernel_result(quote!(::ptec_runtime::kernels::attention::custom_quantized_sdpa(
            #qr, #kr, #vr, #args, #o, #scores
        )));
        return Ok(quote! { #stmts #s3 #s4 #call });
    }
    let (qi, s1) = ctx.read(&q)?;
    let len = ::ptec_runtime::kernels::attention::sdpa_scratch_len(cs[1]);
    let Extra::Update {
        k: k_at,
        v: v_at,
        seq_len: seq_at,
    } = extra
    else {
        let (ki, s3) = ctx.read(&k)?;
        let (vi, s4) = ctx.read(&v)?;
        let (o, s5) = ctx.write(&out)?;
        let (scores, s6) = ctx.scratch_f32(lit(len), len);
        let call = ctx
            .kernel_result(quote!(::ptec_runtime::kernels::attention::custom_sdpa(#qi, #ki, #vi, #args, #o, #scores)));
        return Ok(quote! { #same_caches #set #s1 #s2 #s3 #s4 #s5 #s6 #call });
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
