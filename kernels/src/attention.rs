//! The attention operators of ExecuTorch's LLM export (`llama::*` in
//! `extension/llm/custom_ops`): writing a KV cache in place, and attention
//! of a block of queries over a cache's first positions.
//!
//! Tensors are `[batch, seq, heads, head_dim]` (the sequence before the
//! heads, as the export lays out its caches). A cache holds `cache_len`
//! positions; a call at `start_pos` covers positions `start_pos..start_pos
//! + seq`.
use crate::{KernelError, KernelResult};

/// The sizes of a rank-4 `[batch, seq, heads, head_dim]` tensor.
fn dims4(sizes: &[usize]) -> Result<[usize; 4], KernelError> {
    match *sizes {
        [b, s, h, d] => Ok([b, s, h, d]),
        _ => Err(KernelError::ShapeMismatch),
    }
}

/// Checks `start_pos..start_pos + seq` lies in a cache of `cache_len`
/// positions (ExecuTorch's `validate_cache_params`); returns `start_pos`.
fn window(start_pos: i64, seq: usize, cache_len: usize) -> Result<usize, KernelError> {
    let start = usize::try_from(start_pos)
        .ok()
        .filter(|&s| s < cache_len)
        .ok_or(KernelError::IndexOutOfRange {
            index: start_pos,
            size: cache_len,
        })?;
    if start + seq > cache_len {
        return Err(KernelError::IndexOutOfRange {
            index: (start + seq) as i64,
            size: cache_len + 1,
        });
    }
    Ok(start)
}

/// `llama::update_cache`: `cache[b, start_pos + s] = value[b, s]` for every
/// batch line `b` and position `s` of `value`.
pub fn update_cache<T: Copy>(
    value: &[T],
    value_sizes: &[usize],
    cache: &mut [T],
    cache_sizes: &[usize],
    start_pos: i64,
) -> KernelResult {
    let ([b, s, h, d], [cb, len, ch, cd]) = (dims4(value_sizes)?, dims4(cache_sizes)?);
    if (b, h, d) != (cb, ch, cd) || value.len() != b * s * h * d || cache.len() != cb * len * ch * cd {
        return Err(KernelError::ShapeMismatch);
    }
    let start = window(start_pos, s, len)?;
    let (line, token) = (s * h * d, h * d);
    for i in 0..b {
        let at = i * len * token + start * token;
        cache[at..at + line].copy_from_slice(&value[i * line..(i + 1) * line]);
    }
    Ok(())
}

/// `llama::gated_delta_rule` (Qwen3.5's linear attention): for each batch
/// line and head, a state `S` of `dk × dv` (from `initial_state`) that
/// every token `t` decays, corrects towards its value and reads:
///
/// `S *= decay[t]`; `S += k[t] ⊗ (beta[t] · (v[t] - Sᵀ k[t]))`;
/// `out[t] = Sᵀ q[t]`,
///
/// where `decay` is one number per token (`[B, H, T]`) or one per key
/// channel (`[B, H, T, dk]`). `q`, `k` are `[B, H, T, dk]`, `v` and `out`
/// `[B, H, T, dv]`, `beta` `[B, H, T]`, the states `[B, H, dk, dv]`;
/// `final_state` receives `S` after the last token. `sizes` is `q`'s live
/// `[B, H, T, dk]`, `dv` the value width.
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: &[f32],
    beta: &[f32],
    initial_state: &[f32],
    sizes: &[usize],
    dv: usize,
    out: &mut [f32],
    final_state: &mut [f32],
) -> KernelResult {
    let [b, h, t, dk] = dims4(sizes)?;
    let channelwise = decay.len() == b * h * t * dk && dk != 1;
    let fits = q.len() == b * h * t * dk
        && k.len() == q.len()
        && v.len() == b * h * t * dv
        && (channelwise || decay.len() == b * h * t)
        && beta.len() == b * h * t
        && initial_state.len() == b * h * dk * dv
        && final_state.len() == initial_state.len()
        && out.len() == v.len();
    if !fits {
        return Err(KernelError::ShapeMismatch);
    }
    final_state.copy_from_slice(initial_state);
    for line in 0..b * h {
        let st = &mut final_state[line * dk * dv..(line + 1) * dk * dv];
        for step in 0..t {
            let row = line * t + step;
            let (qt, kt) = (&q[row * dk..(row + 1) * dk], &k[row * dk..(row + 1) * dk]);
            let (vt, ot) = (&v[row * dv..(row + 1) * dv], &mut out[row * dv..(row + 1) * dv]);
            // Each value column of the state evolves on its own.
            for c in 0..dv {
                let mut mem = 0f32;
                for i in 0..dk {
                    let g = if channelwise { decay[row * dk + i] } else { decay[row] };
                    let s = &mut st[i * dv + c];
                    *s *= g;
                    mem += *s * kt[i];
                }
                let delta = (vt[c] - mem) * beta[row];
                let mut o = 0f32;
                for i in 0..dk {
                    let s = &mut st[i * dv + c];
                    *s += kt[i] * delta;
                    o += *s * qt[i];
                }
                ot[c] = o;
            }
        }
    }
    Ok(())
}

/// `llama::update_cache_with_indices`: `cache[b, indices[b, s]] =
/// value[b, s]`. `indices` is `[batch, seq]`.
pub fn update_cache_with_indices<T: Copy>(
    value: &[T],
    value_sizes: &[usize],
    cache: &mut [T],
    cache_sizes: &[usize],
    indices: &[i64],
) -> KernelResult {
    let ([b, s, h, d], [cb, len, ch, cd]) = (dims4(value_sizes)?, dims4(cache_sizes)?);
    if (b, h, d) != (cb, ch, cd)
        || value.len() != b * s * h * d
        || cache.len() != cb * len * ch * cd
        || indices.len() != b * s
    {
        return Err(KernelError::ShapeMismatch);
    }
    let token = h * d;
    for i in 0..b {
        for j in 0..s {
            let index = indices[i * s + j];
            let pos = usize::try_from(index)
                .ok()
                .filter(|&p| p < len)
                .ok_or(KernelError::IndexOutOfRange { index, size: len })?;
            let (at, from) = ((i * len + pos) * token, (i * s + j) * token);
            cache[at..at + token].copy_from_slice(&value[from..from + token]);
        }
    }
    Ok(())
}

/// The arguments of [`custom_sdpa`] other than the data.
#[derive(Clone, Copy, Debug)]
pub struct Sdpa<'a> {
    /// `[batch, seq, heads, head_dim]` of the queries (and the output).
    pub q_sizes: &'a [usize],
    /// `[batch, cache_len, kv_heads, head_dim]` of each cache.
    pub cache_sizes: &'a [usize],
    /// The sequence position of the first query.
    pub start_pos: i64,
    /// An additive float mask of `[seq, cache_len]`: with one, every key
    /// of the cache is attended and `start_pos` is unused.
    pub mask: Option<&'a [f32]>,
    /// The mask's sizes.
    pub mask_sizes: &'a [usize],
    /// Query `s` sees only the keys up to position `start_pos + s`.
    pub is_causal: bool,
    /// Multiplies `q · k` (ExecuTorch's default is `1 / sqrt(head_dim)`).
    pub scale: f32,
}

/// Scratch floats [`custom_sdpa`] needs: a row of scores for each thread
/// it may use.
pub fn sdpa_scratch_len(cache_len: usize) -> usize {
    cache_len * crate::parallel::MAX_THREADS
}

/// Checks that a key cache and a value cache of varying length have the
/// same live sizes, which [`custom_sdpa`] takes once for both.
pub fn same_cache_sizes(k_sizes: &[usize], v_sizes: &[usize]) -> KernelResult {
    if k_sizes == v_sizes {
        Ok(())
    } else {
        Err(KernelError::ShapeMismatch)
    }
}

/// Products of attention (`q · k` and `p · v` over all heads and keys)
/// below which [`custom_sdpa`] stays on the calling thread. Under Miri
/// lower, so that the tests' smaller sizes still split across threads.
const SDPA_SPLIT_WORK: usize = if cfg!(miri) { 1 << 8 } else { 1 << 16 };

/// `llama::custom_sdpa`: for each batch line, head and query, softmax over
/// the keys at positions `0..start_pos + seq` (with a mask, the whole cache; only those up to the
/// query's own position when causal) of `scale · q · k` (plus the mask),
/// then the weighted sum of the values. Query head `h` reads kv head `h /
/// (heads / kv_heads)` (grouped-query attention). Dot products are taken
/// over 16 lanes and `exp` is a polynomial ([`crate::scalar::exp_nonpositive`],
/// within 2 ulp), vectorized; query positions are split across threads in
/// ranges of equal work, each with its own share of `scores` (on AVX-512
/// the heads of a row that share a kv head are taken together, a row of
/// scores each, as many as the share holds).
pub fn custom_sdpa(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    args: &Sdpa<'_>,
    out: &mut [f32],
    scores: &mut [f32],
) -> KernelResult {
    let ([b, s, h, d], [cb, len, kvh, cd]) = (dims4(args.q_sizes)?, dims4(args.cache_sizes)?);
    let cache_numel = cb * len * kvh * cd;
    if cb != b
        || cd != d
        || kvh == 0
        || h % kvh != 0
        || q.len() != b * s * h * d
        || out.len() != q.len()
        || k_cache.len() != cache_numel
        || v_cache.len() != cache_numel
    {
        return Err(KernelError::ShapeMismatch);
    }
    // With a mask (never with is_causal) the keys are the whole cache and
    // the start is unused, as in ExecuTorch: a ring-buffer cache's mask
    // says which positions a query sees.
    let start = match args.mask {
        Some(_) if args.is_causal || s > len => return Err(KernelError::ShapeMismatch),
        Some(_) => len - s,
        None => window(args.start_pos, s, len)?,
    };
    let keys = start + s;
    if scores.len() < keys {
        return Err(KernelError::ShapeMismatch);
    }
    if let Some(mask) = args.mask {
        if args.mask_sizes != [s, keys] || mask.len() != s * keys {
            return Err(KernelError::ShapeMismatch);
        }
    }
    let rows = b * s;
    if rows == 0 || h * d == 0 {
        return Ok(());
    }
    let job = SdpaRows {
        q,
        k_cache,
        v_cache,
        args,
        dims: [s, h, kvh, d, len],
        start,
    };
    // The (query row, head) pairs, each d outputs in place, split in
    // contiguous ranges of about equal work (a causal row reads as many
    // keys as its position), an equal share of the scores each: a
    // prompt's rows, or a decoded token's heads.
    let units = rows * h;
    let total: usize = (0..rows).map(|r| job.seen(r)).sum::<usize>() * h;
    let parts = crate::parallel::threads()
        .min(crate::parallel::MAX_THREADS)
        .min(scores.len() / keys)
        .min(units);
    if parts <= 1 || total * d * 2 < SDPA_SPLIT_WORK {
        job.run_units(0, out, scores);
        return Ok(());
    }
    let mut starts = [units; crate::parallel::MAX_THREADS];
    let (mut p, mut done) = (0, 0);
    for u in 0..units {
        if p < parts && done * parts >= total * p {
            starts[p] = u;
            p += 1;
        }
        done += job.seen(u / h);
    }
    let parts = p;
    let outs = crate::parallel::Pieces::new(out, starts[..parts].iter().map(|&u| u * d));
    // Each part's scores: as many rows of `keys` as fit.
    let share = scores.len() / parts;
    let scratch = crate::parallel::Pieces::new(scores, (0..parts).map(|i| i * share));
    crate::parallel::run_parts(parts, &|i| {
        if let (Some(o), Some(sc)) = (outs.take(i), scratch.take(i)) {
            job.run_units(starts[i], o, &mut sc[..share]);
        }
    });
    Ok(())
}

/// The work of [`custom_sdpa`], checked: `dims` is `[seq, heads,
/// kv_heads, head_dim, cache_len]`.
#[derive(Clone, Copy)]
struct SdpaRows<'a> {
    q: &'a [f32],
    k_cache: &'a [f32],
    v_cache: &'a [f32],
    args: &'a Sdpa<'a>,
    dims: [usize; 5],
    start: usize,
}

impl SdpaRows<'_> {
    /// Keys query row `r` (of `batch · seq`) attends to.
    fn seen(&self, r: usize) -> usize {
        let s = self.dims[0];
        match self.args.is_causal {
            true => self.start + r % s + 1,
            false => self.start + s,
        }
    }

    /// The outputs of (query row, head) pairs `first..` (row-major) into
    /// `out`, compiled for this CPU's best instruction set.
    fn run_units(self, first: usize, out: &mut [f32], scores: &mut [f32]) {
        struct Work<'a, 'b>(SdpaRows<'a>, usize, &'b mut [f32], &'b mut [f32]);
        impl crate::cpu::Vectorized for Work<'_, '_> {
            type Output = ();
            #[inline(always)]
            fn run(self) {
                let Work(job, first, out, scores) = self;
                job.units(first, out, scores);
            }
        }
        crate::cpu::with_best_isa(Work(self, first, out, scores))
    }

    /// `scores` holds one row of `start + seq` floats for each head
    /// taken together (at least one).
    #[inline(always)]
    fn units(&self, first: usize, out: &mut [f32], scores: &mut [f32]) {
        let [s, h, kvh, d, len] = self.dims;
        let (args, reps, keys) = (self.args, h / kvh, self.start + s);
        // A key's or value's row of one head, and the step to the next.
        let stride = kvh * d;
        #[cfg(target_arch = "x86_64")]
        let wide = d.is_multiple_of(16) && crate::cpu::Isa::detect() == crate::cpu::Isa::Avx512;
        #[cfg(not(target_arch = "x86_64"))]
        let wide = false;
        // On AVX-512, the query heads of one row that share a kv head go
        // together, up to four (their weighted sums' registers), each key
        // block read once for all of them while it is in L1. Each head's
        // sums are taken in the same order as alone: the same bits.
        let most = if wide { (scores.len() / keys).clamp(1, 4) } else { 1 };
        let units = out.len() / d;
        let mut i = 0;
        while i < units {
            let (r, hi) = ((first + i) / h, (first + i) % h);
            let (bi, si) = (r / s, r % s);
            let g = most.min(units - i).min(reps - hi % reps);
            let seen = self.seen(r);
            let qs = &self.q[(r * h + hi) * d..][..g * d];
            let at = (bi * len * kvh + hi / reps) * d;
            let (k, v) = (&self.k_cache[at..], &self.v_cache[at..]);
            let rows = &mut scores[..g * keys];
            #[cfg(target_arch = "x86_64")]
            if wide {
                // SAFETY: the CPU has AVX-512F.
                unsafe { avx512::dots_heads(qs, k, stride, seen, rows, keys) };
            }
            if !wide {
                dots(qs, k, stride, &mut rows[..seen]);
            }
            let mut inv = [0.0f32; 4];
            for (row, inv) in rows.chunks_exact_mut(keys).zip(&mut inv) {
                let row = &mut row[..seen];
                match args.mask {
                    Some(m) => {
                        for (sc, &m) in row.iter_mut().zip(&m[si * keys..]) {
                            *sc = *sc * args.scale + m;
                        }
                    }
                    None => row.iter_mut().for_each(|sc| *sc = *sc * args.scale + 0.0),
                }
                *inv = 1.0 / crate::softmax::exp_sum_in_place(row, max_of(row));
            }
            let o = &mut out[i * d..][..g * d];
            #[cfg(target_arch = "x86_64")]
            if wide {
                let sums = avx512::Sums {
                    p: rows,
                    row: keys,
                    n: seen,
                    v,
                    stride,
                    inv: &inv[..g],
                };
                // SAFETY: the CPU has AVX-512F.
                unsafe { avx512::weighted_sums_heads(&sums, o) };
            }
            if !wide {
                weighted_sum(&rows[..seen], v, stride, inv[0], o);
            }
            i += g;
        }
    }
}

/// The largest of `x` that is not NaN (`-inf` if none): over 16 lanes,
/// which vectorizes where a running `max` is one long chain. The same
/// value as `f32::max` folded in order, but for the sign of a zero maximum.
#[inline(always)]
fn max_of(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = x.chunks_exact(16);
    let mut max = f32::NEG_INFINITY;
    for &v in chunks.remainder() {
        max = max.max(v);
    }
    for c in chunks {
        for l in 0..16 {
            lanes[l] = lanes[l].max(c[l]);
        }
    }
    lanes.iter().fold(max, |m, &l| m.max(l))
}

/// `dots[j] = dot16(q, k[j · stride..][..q.len()])` for every `j`.
#[inline(always)]
fn dots(q: &[f32], k: &[f32], stride: usize, dots: &mut [f32]) {
    let d = q.len();
    for (j, dot) in dots.iter_mut().enumerate() {
        *dot = dot16(q, &k[j * stride..][..d]);
    }
}

/// `out = inv · Σ_j p[j] · v[j · stride..][..out.len()]`, summed over
/// `j` in order for each output.
#[inline(always)]
fn weighted_sum(p: &[f32], v: &[f32], stride: usize, inv: f32, out: &mut [f32]) {
    let d = out.len();
    out.fill(0.0);
    for (j, &pj) in p.iter().enumerate() {
        for (x, &vj) in out.iter_mut().zip(&v[j * stride..][..d]) {
            *x += pj * vj;
        }
    }
    out.iter_mut().for_each(|x| *x *= inv);
}

/// [`dots`] and [`weighted_sum`] on AVX-512 for heads of a multiple of 16
/// elements, to the same bits: sixteen keys' lane sums transposed so that
/// their lanes add up in [`dot16`]'s order for all sixteen at once (a
/// key's lanes added one by one are one long chain), and the weighted sum
/// kept in registers rather than read back from memory for every key.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use core::arch::x86_64::*;

    /// How many keys ahead the products fetch rows into L1.
    const PREFETCH: usize = 48;

    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(test)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn dots(q: &[f32], k: &[f32], stride: usize, dots: &mut [f32]) {
        let n = dots.len();
        // SAFETY: as for this function; one head, one row of n.
        unsafe { dots_heads(q, k, stride, n, dots, n) }
    }

    /// [`dots`] for `q.len() / rows.len() · row` heads of one kv head:
    /// head `i`'s query is `q[i · d..][..d]` and its `n` dots go to
    /// `rows[i · row..]`. Each block of 16 keys is read for every head in
    /// turn, while it is in L1.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn dots_heads(q: &[f32], k: &[f32], stride: usize, n: usize, rows: &mut [f32], row: usize) {
        if n == 0 {
            return;
        }
        let g = rows.len() / row;
        assert!(g > 0 && q.len().is_multiple_of(g) && n <= row);
        // The common head sizes with their loops unrolled: the chunks'
        // loads and products independent, only the adds chained.
        match q.len() / g {
            // SAFETY: as for this function.
            64 => unsafe { dots_of::<4>(q, k, stride, n, rows, row) },
            // SAFETY: as for this function.
            128 => unsafe { dots_of::<8>(q, k, stride, n, rows, row) },
            // SAFETY: as for this function.
            _ => unsafe { dots_of::<0>(q, k, stride, n, rows, row) },
        }
    }

    /// [`dots_heads`] for heads of `C` chunks of 16 (any multiple of 16
    /// when `C` is 0).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn dots_of<const C: usize>(q: &[f32], k: &[f32], stride: usize, n: usize, rows: &mut [f32], row: usize) {
        let g = rows.len() / row;
        let d = if C == 0 { q.len() / g } else { 16 * C };
        assert!(q.len() == g * d && d.is_multiple_of(16) && (n == 0 || (n - 1) * stride + d <= k.len()));
        let full = n / 16 * 16;
        let kp = k.as_ptr();
        for j0 in (0..full).step_by(16) {
            // The next block's rows, while this one is worked on.
            for t in (j0 + PREFETCH..(j0 + PREFETCH + 16).min(n)).rev() {
                for c in (0..d).step_by(16) {
                    // SAFETY: key t < n: its row is within k (asserted).
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(kp.add(t * stride + c).cast()) };
                }
            }
            for (head, qh) in q.chunks_exact(d).enumerate() {
                let qp = qh.as_ptr();
                // SAFETY: key j0 + t < n reads k[(j0 + t) · stride..][..d],
                // within k (asserted); qh holds d floats.
                let mut a: [__m512; 16] = core::array::from_fn(|t| unsafe {
                    let key = kp.add((j0 + t) * stride);
                    let mut lanes = _mm512_setzero_ps();
                    for c in (0..d).step_by(16) {
                        let x = _mm512_mul_ps(_mm512_loadu_ps(qp.add(c)), _mm512_loadu_ps(key.add(c)));
                        lanes = _mm512_add_ps(lanes, x);
                    }
                    lanes
                });
                transpose(&mut a);
                // Lane l of every key, l = 0, 1, ...: dot16's `sum()`,
                // then its `+ tail` (zero).
                let mut sum = a[0];
                for lane in &a[1..] {
                    sum = _mm512_add_ps(sum, *lane);
                }
                let sum = _mm512_add_ps(sum, _mm512_setzero_ps());
                // SAFETY: head < g and j0 + 16 <= n <= row: within rows.
                unsafe { _mm512_storeu_ps(rows.as_mut_ptr().add(head * row + j0), sum) };
            }
        }
        if full < n {
            for (qh, out) in q.chunks_exact(d).zip(rows.chunks_exact_mut(row)) {
                super::dots(qh, &k[full * stride..], stride, &mut out[full..n]);
            }
        }
    }

    /// Transposes the 16 × 16 floats of `a` (lane `l` of `a[j]` becomes
    /// lane `j` of `a[l]`).
    #[target_feature(enable = "avx512f")]
    fn transpose(a: &mut [__m512; 16]) {
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]);
        }
        for i in 0..4 {
            let (x, y, z, w) = (t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]);
            let pd = |v: __m512| _mm512_castps_pd(v);
            a[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(x), pd(z)));
            a[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(x), pd(z)));
            a[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(y), pd(w)));
            a[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(y), pd(w)));
        }
        for i in 0..2 {
            for j in 0..4 {
                t[8 * i + j] = _mm512_shuffle_f32x4::<0x88>(a[8 * i + j], a[8 * i + 4 + j]);
                t[8 * i + 4 + j] = _mm512_shuffle_f32x4::<0xdd>(a[8 * i + j], a[8 * i + 4 + j]);
            }
        }
        for j in 0..8 {
            a[j] = _mm512_shuffle_f32x4::<0x88>(t[j], t[8 + j]);
            a[8 + j] = _mm512_shuffle_f32x4::<0xdd>(t[j], t[8 + j]);
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(test)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn weighted_sum(p: &[f32], v: &[f32], stride: usize, inv: f32, out: &mut [f32]) {
        // SAFETY: as for this function; one head.
        let sums = Sums {
            p,
            row: p.len(),
            n: p.len(),
            v,
            stride,
            inv: &[inv],
        };
        // SAFETY: as for this function.
        unsafe { weighted_sums_heads(&sums, out) }
    }

    /// The weighted sums of `inv.len()` heads of one kv head: head `i`'s
    /// `n` weights are `p[i · row..]`, its scale `inv[i]`; key `j`'s values
    /// are `v[j · stride..]`.
    #[derive(Clone, Copy)]
    pub(super) struct Sums<'a> {
        pub p: &'a [f32],
        pub row: usize,
        pub n: usize,
        pub v: &'a [f32],
        pub stride: usize,
        pub inv: &'a [f32],
    }

    /// [`weighted_sum`] for the heads of `sums`, head `i`'s outputs to
    /// `out[i · d..][..d]`. Each key's values are loaded once for all the
    /// heads.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn weighted_sums_heads(sums: &Sums<'_>, out: &mut [f32]) {
        // SAFETY: as for this function.
        unsafe {
            match sums.inv.len() {
                1 => weighted_sums_of::<1>(sums, out),
                2 => weighted_sums_of::<2>(sums, out),
                3 => weighted_sums_of::<3>(sums, out),
                4 => weighted_sums_of::<4>(sums, out),
                _ => unreachable!("at most four heads together"),
            }
        }
    }

    /// [`weighted_sums_heads`] for `G` heads.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn weighted_sums_of<const G: usize>(sums: &Sums<'_>, out: &mut [f32]) {
        let Sums {
            p,
            row,
            n,
            v,
            stride,
            inv,
        } = *sums;
        let d = out.len() / G;
        assert!(inv.len() == G && out.len() == G * d && d.is_multiple_of(16));
        assert!(n <= row && (G - 1) * row + n <= p.len() && (n == 0 || (n - 1) * stride + d <= v.len()));
        match d {
            // SAFETY: as for this function.
            64 => unsafe { weighted_sums_d::<G, 4>(sums, out) },
            // SAFETY: as for this function.
            _ => unsafe { weighted_sums_d::<G, 0>(sums, out) },
        }
    }

    /// [`weighted_sums_of`] for heads of `W` chunks of 16 (any multiple of
    /// 16 when `W` is 0), checked by the caller.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn weighted_sums_d<const G: usize, const W: usize>(sums: &Sums<'_>, out: &mut [f32]) {
        let Sums {
            p,
            row,
            n,
            v,
            stride,
            inv,
        } = *sums;
        let d = if W == 0 { out.len() / G } else { 16 * W };
        let (vp, pp) = (v.as_ptr(), p.as_ptr());
        // Up to 64 outputs a pass, four registers a head.
        for c0 in (0..d).step_by(64) {
            let w = (d - c0).min(64) / 16;
            let mut acc = [[_mm512_setzero_ps(); 4]; G];
            for j in 0..n {
                if j + PREFETCH < n {
                    for t in 0..w {
                        // SAFETY: key j + PREFETCH < n: within v.
                        unsafe { _mm_prefetch::<_MM_HINT_T0>(vp.add((j + PREFETCH) * stride + c0 + 16 * t).cast()) };
                    }
                }
                // SAFETY: j < n and c0 + 16t + 16 <= d: within v
                // (checked by the caller).
                let x: [__m512; 4] =
                    core::array::from_fn(|t| unsafe { _mm512_loadu_ps(vp.add(j * stride + c0 + 16 * t.min(w - 1))) });
                for (head, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: head < G and j < n: within p (checked).
                    let pj = _mm512_set1_ps(unsafe { *pp.add(head * row + j) });
                    for (t, acc) in acc.iter_mut().enumerate().take(w) {
                        *acc = _mm512_add_ps(*acc, _mm512_mul_ps(pj, x[t]));
                    }
                }
            }
            for (head, acc) in acc.iter().enumerate() {
                for (t, acc) in acc.iter().enumerate().take(w) {
                    let y = _mm512_mul_ps(*acc, _mm512_set1_ps(inv[head]));
                    // SAFETY: head < G, c0 + 16t + 16 <= d: within out.
                    unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(head * d + c0 + 16 * t), y) };
                }
            }
        }
    }
}

/// `Σ a[i] · b[i]` over 16 lanes, then the lanes and the rest in order.
#[inline(always)]
fn dot16(a: &[f32], b: &[f32]) -> f32 {
    const L: usize = 16;
    let mut lanes = [0.0f32; L];
    let (ac, bc) = (a.chunks_exact(L), b.chunks_exact(L));
    let mut tail = 0.0f32;
    for (x, y) in ac.remainder().iter().zip(bc.remainder()) {
        tail += x * y;
    }
    for (x, y) in ac.zip(bc) {
        for l in 0..L {
            lanes[l] += x[l] * y[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `llama::sdpa_with_kv_cache`: `k` and `v` (`[batch, seq, kv_heads,
/// head_dim]`) written into their caches at `start_pos`, as
/// [`update_cache`] does, then [`custom_sdpa`] over the caches. `seq_len`
/// is the op's own argument, which ExecuTorch checks the window with.
#[allow(clippy::too_many_arguments)]
pub fn sdpa_with_kv_cache(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    kv_sizes: &[usize],
    k_cache: &mut [f32],
    v_cache: &mut [f32],
    seq_len: i64,
    args: &Sdpa<'_>,
    out: &mut [f32],
    scores: &mut [f32],
) -> KernelResult {
    let [_, len, _, _] = dims4(args.cache_sizes)?;
    let seq = usize::try_from(seq_len).map_err(|_| KernelError::ShapeMismatch)?;
    window(args.start_pos, seq, len)?;
    update_cache(k, kv_sizes, k_cache, args.cache_sizes, args.start_pos)?;
    update_cache(v, kv_sizes, v_cache, args.cache_sizes, args.start_pos)?;
    custom_sdpa(q, k_cache, v_cache, args, out, scores)
}

/// An int8 operand of [`custom_quantized_sdpa`]: `[batch, seq, heads,
/// head_dim]` values with one scale and zero point per `(batch, seq,
/// head)` row, as ExecuTorch's quantized KV cache stores them.
#[derive(Clone, Copy, Debug)]
pub struct QuantizedRows<'a> {
    pub values: &'a [i8],
    pub scales: &'a [f32],
    pub zero_points: &'a [i8],
}

impl QuantizedRows<'_> {
    /// Checks the operand holds `rows` rows of `d`.
    fn fits(&self, rows: usize, d: usize) -> bool {
        self.values.len() == rows * d && self.scales.len() == rows && self.zero_points.len() == rows
    }

    /// Element `e` of row `r`, dequantized as torchao's kernels do:
    /// `scale * (q - zero_point)`, one `f32` rounding.
    #[inline(always)]
    fn get(&self, r: usize, d: usize, e: usize) -> f32 {
        self.scales[r] * (self.values[r * d + e] as i16 - self.zero_points[r] as i16) as f32
    }
}

/// ExecuTorch's block of keys (`kv_split_size`) in its flash attention.
/// Under Miri 32, so that the tests' short caches still take several.
const KV_SPLIT: usize = if cfg!(miri) { 32 } else { 512 };

/// Scratch floats [`custom_quantized_sdpa`] needs: one block of scores.
pub fn quantized_sdpa_scratch_len(cache_len: usize) -> usize {
    cache_len.min(KV_SPLIT)
}

/// The C library's `expf` and `exp` where there is one (with `std`), which
/// ExecuTorch's kernel calls; the `libm` crate's otherwise. The two
/// differ in the last bit for about one argument in ten.
#[cfg(feature = "std")]
mod c_exp {
    extern crate std;
    pub(super) fn expf(x: f32) -> f32 {
        x.exp()
    }
    pub(super) fn exp(x: f64) -> f64 {
        x.exp()
    }
}
#[cfg(not(feature = "std"))]
mod c_exp {
    pub(super) use libm::{exp, expf};
}

/// `exp(x - max)` over `row`, in place, and its sum, in the order of
/// ExecuTorch's `_exp_reduce_sum_fusion_kernel`: 16 lanes of `f32` sums
/// over the whole groups of 16 (with `expf`), the lanes added in order,
/// then the rest one by one with the `f64` `exp`.
fn exp_sum(row: &mut [f32], max: f32) -> f32 {
    const LANES: usize = 16;
    let whole = row.len() / LANES * LANES;
    let mut lanes = [0.0f32; LANES];
    for chunk in row[..whole].chunks_exact_mut(LANES) {
        for (x, lane) in chunk.iter_mut().zip(&mut lanes) {
            *x = c_exp::expf(*x - max);
            *lane += *x;
        }
    }
    let mut sum = 0.0f32;
    for lane in lanes {
        sum += lane;
    }
    for x in &mut row[whole..] {
        let e = c_exp::exp((*x - max) as f64);
        sum = (sum as f64 + e) as f32;
        *x = e as f32;
    }
    sum
}

/// `llama::custom_quantized_sdpa` (`is_seq_at_dim_2 = false`): the
/// attention of [`custom_sdpa`] over an int8 query and int8 caches, each
/// row with its own scale and zero point, computed as ExecuTorch's x86
/// kernel does so that the results agree to the bit: scores are sums over
/// `head_dim` of dequantized products, accumulated in order in `f32`; keys
/// come in blocks of 512 with an online softmax between blocks; values are
/// weighted one key after another. (ExecuTorch on aarch64 takes integer
/// dot products instead, and for more than 4 queries at once a BLAS
/// product: the same sums to the last bit or two.) Without a mask only the
/// keys up to `start_pos + seq` are read.
pub fn custom_quantized_sdpa(
    q: QuantizedRows<'_>,
    k_cache: QuantizedRows<'_>,
    v_cache: QuantizedRows<'_>,
    args: &Sdpa<'_>,
    out: &mut [f32],
    scores: &mut [f32],
) -> KernelResult {
    let ([b, s, h, d], [cb, len, kvh, cd]) = (dims4(args.q_sizes)?, dims4(args.cache_sizes)?);
    let cache_rows = cb * len * kvh;
    if cb != b
        || cd != d
        || kvh == 0
        || h % kvh != 0
        || !q.fits(b * s * h, d)
        || out.len() != b * s * h * d
        || !k_cache.fits(cache_rows, d)
        || !v_cache.fits(cache_rows, d)
    {
        return Err(KernelError::ShapeMismatch);
    }
    let start = window(args.start_pos, s, len)?;
    let kv_size = if args.mask.is_some() { len } else { start + s };
    if let Some(mask) = args.mask {
        if args.mask_sizes != [s, kv_size] || mask.len() != s * kv_size {
            return Err(KernelError::ShapeMismatch);
        }
    }
    let kv_split = kv_size.min(KV_SPLIT);
    if scores.len() < kv_split {
        return Err(KernelError::ShapeMismatch);
    }
    // ExecuTorch's block of queries, which bounds the keys a query's
    // block reads.
    let q_split = if s >= 768 {
        256
    } else if s >= 192 {
        64
    } else {
        32
    }
    .min(s);
    let reps = h / kvh;
    for bi in 0..b {
        for hi in 0..h {
            let kv = hi / reps;
            for si in 0..s {
                let qr = (bi * s + si) * h + hi;
                let pos = start + si;
                let m = si / q_split * q_split;
                let keys = if args.is_causal {
                    (start + m + q_split.min(s - m)).min(kv_size)
                } else {
                    kv_size
                };
                let dst = &mut out[qr * d..(qr + 1) * d];
                dst.fill(0.0);
                let (mut row_max, mut row_sum) = (f32::NEG_INFINITY, 0.0f32);
                for n in (0..keys).step_by(kv_split) {
                    let block = kv_split.min(kv_size - n);
                    let row = &mut scores[..block];
                    for (c, sc) in row.iter_mut().enumerate() {
                        let kr = (bi * len + n + c) * kvh + kv;
                        let mut acc = 0.0f32;
                        for e in 0..d {
                            acc += q.get(qr, d, e) * k_cache.get(kr, d, e);
                        }
                        *sc = acc;
                    }
                    if args.is_causal && start + m <= n + kv_split && pos + 1 < n + kv_split {
                        let first_hidden = (pos + 1).saturating_sub(n);
                        if first_hidden < block {
                            row[first_hidden..].fill(f32::NEG_INFINITY);
                        }
                    }
                    let mut max = f32::NEG_INFINITY;
                    for (c, sc) in row.iter_mut().enumerate() {
                        *sc *= args.scale;
                        if let Some(mask) = args.mask {
                            *sc += mask[si * kv_size + n + c];
                        }
                        max = if max < *sc { *sc } else { max };
                    }
                    let max = if row_max > max { row_max } else { max };
                    if max == f32::NEG_INFINITY {
                        row.fill(0.0);
                    } else {
                        let sum = exp_sum(row, max);
                        let rescale = c_exp::expf(row_max - max);
                        row_sum = sum + rescale * row_sum;
                        row_max = max;
                        if n > 0 {
                            dst.iter_mut().for_each(|x| *x *= rescale);
                        }
                    }
                    let beta = if n == 0 { 0.0 } else { 1.0 };
                    for (e, x) in dst.iter_mut().enumerate() {
                        let mut acc = 0.0f32;
                        for (c, &p) in row.iter().enumerate() {
                            let vr = (bi * len + n + c) * kvh + kv;
                            acc += p * v_cache.get(vr, d, e);
                        }
                        *x = *x * beta + acc;
                    }
                }
                let reciprocal = 1.0 / row_sum;
                dst.iter_mut().for_each(|x| *x *= reciprocal);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::testing::Lcg;
    use std::{vec, vec::Vec};

    /// The gated delta rule against its matrix form in f64 (a decay per
    /// token and one per key channel), over several tokens.
    #[test]
    fn gated_delta_rule_matches_the_matrix_form() {
        let mut r = Lcg(9);
        let (b, h, t, dk, dv) = (2, 3, 5, 4, 6);
        for channelwise in [false, true] {
            let q = r.vec(b * h * t * dk);
            let k = r.vec(b * h * t * dk);
            let v = r.vec(b * h * t * dv);
            let nd = if channelwise { b * h * t * dk } else { b * h * t };
            let decay: Vec<f32> = r.vec(nd).iter().map(|x| 0.75 + 0.25 * x).collect();
            let beta: Vec<f32> = r.vec(b * h * t).iter().map(|x| 0.5 + 0.5 * x).collect();
            let s0 = r.vec(b * h * dk * dv);
            let (mut out, mut s1) = (vec![0f32; v.len()], vec![0f32; s0.len()]);
            gated_delta_rule(&q, &k, &v, &decay, &beta, &s0, &[b, h, t, dk], dv, &mut out, &mut s1).unwrap();
            for line in 0..b * h {
                let mut st: Vec<f64> = s0[line * dk * dv..][..dk * dv].iter().map(|&x| x as f64).collect();
                for step in 0..t {
                    let row = line * t + step;
                    for i in 0..dk {
                        let g = if channelwise { decay[row * dk + i] } else { decay[row] } as f64;
                        st[i * dv..(i + 1) * dv].iter_mut().for_each(|s| *s *= g);
                    }
                    let kt = &k[row * dk..][..dk];
                    for c in 0..dv {
                        let mem: f64 = (0..dk).map(|i| st[i * dv + c] * kt[i] as f64).sum();
                        let delta = (v[row * dv + c] as f64 - mem) * beta[row] as f64;
                        (0..dk).for_each(|i| st[i * dv + c] += kt[i] as f64 * delta);
                        let o: f64 = (0..dk).map(|i| st[i * dv + c] * q[row * dk + i] as f64).sum();
                        assert!((out[row * dv + c] as f64 - o).abs() < 1e-5, "{channelwise} {row} {c}");
                    }
                }
                for (x, y) in s1[line * dk * dv..][..dk * dv].iter().zip(&st) {
                    assert!((*x as f64 - y).abs() < 1e-5);
                }
            }
        }
        let mut out = [0f32; 1];
        let bad = gated_delta_rule(
            &[0.0; 2],
            &[0.0; 2],
            &[0.0; 1],
            &[1.0],
            &[1.0],
            &[0.0; 2],
            &[1, 1, 1, 2],
            1,
            &mut out,
            &mut [0.0; 3],
        );
        assert_eq!(bad, Err(KernelError::ShapeMismatch));
    }

    /// The AVX-512 products give the portable ones' bits, for any number
    /// of keys (whole blocks of 16 and the rest) and head sizes.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn wide_products_are_the_portable_ones() {
        if crate::cpu::Isa::detect() != crate::cpu::Isa::Avx512 {
            std::eprintln!("NOT RUN: this CPU has no AVX-512");
            return;
        }
        let mut rng = Lcg(7);
        for d in [16, 64, 80, 128, 256] {
            for n in [0, 1, 15, 16, 17, 48, 200] {
                let stride = 3 * d;
                let q = rng.vec(d);
                // Exactly as long as the last key needs (a full cache).
                let k = rng.vec((n.max(1) - 1) * stride + d);
                let p: Vec<f32> = rng.vec(n).iter().map(|x| x.abs()).collect();
                let (mut want, mut got) = (vec![0.0; n], vec![0.0; n]);
                dots(&q, &k, stride, &mut want);
                // SAFETY: the CPU has AVX-512F.
                unsafe { avx512::dots(&q, &k, stride, &mut got) };
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "dots, d {d}, {n} keys");
                let (mut want, mut got) = (vec![0.0; d], vec![0.0; d]);
                weighted_sum(&p, &k, stride, 0.3, &mut want);
                // SAFETY: as above.
                unsafe { avx512::weighted_sum(&p, &k, stride, 0.3, &mut got) };
                assert_eq!(bits(&got), bits(&want), "weighted sum, d {d}, {n} keys");
            }
        }
    }

    /// Query heads that share a kv head, taken together on AVX-512 (up to
    /// four), give each head's bits alone on the portable path: for head
    /// sizes with and without unrolled paths, groups cut at four, heads
    /// that share nothing, masks, one and two threads.
    #[test]
    fn heads_taken_together_give_each_heads_bits_alone() {
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut rng = Lcg(31);
        let shapes: &[(usize, usize, usize)] = if cfg!(miri) {
            &[(3, 1, 16), (6, 1, 32)]
        } else {
            &[(9, 3, 64), (8, 2, 128), (12, 2, 64), (6, 3, 48), (4, 4, 64), (5, 1, 16)]
        };
        let len = if cfg!(miri) { 20 } else { 96 };
        for &(h, kvh, d) in shapes {
            for start in [0, 4, 15, len - 1] {
                for masked in [false, true] {
                    let q = rng.vec(h * d);
                    let k = rng.vec(len * kvh * d);
                    let v = rng.vec(len * kvh * d);
                    let mask: Vec<f32> = rng.vec(len).iter().map(|x| if *x > 0.5 { -1e9 } else { *x }).collect();
                    let (start, keys) = if masked { (len - 1, len) } else { (start, start + 1) };
                    // Each head alone, portable.
                    let mut want = vec![0.0f32; h * d];
                    for hi in 0..h {
                        let at = (hi / (h / kvh)) * d;
                        let mut row = vec![0.0f32; keys];
                        dots(&q[hi * d..][..d], &k[at..], kvh * d, &mut row);
                        for (j, sc) in row.iter_mut().enumerate() {
                            *sc = *sc * 0.125 + if masked { mask[j] } else { 0.0 };
                        }
                        let m = max_of(&row);
                        let sum = crate::softmax::exp_sum_in_place(&mut row, m);
                        weighted_sum(&row, &v[at..], kvh * d, 1.0 / sum, &mut want[hi * d..][..d]);
                    }
                    for threads in [1, 2] {
                        crate::parallel::set_threads(threads);
                        let mut out = vec![0.0f32; h * d];
                        let mut scores = vec![0.0f32; sdpa_scratch_len(len)];
                        let args = Sdpa {
                            q_sizes: &[1, 1, h, d],
                            cache_sizes: &[1, len, kvh, d],
                            start_pos: start as i64,
                            mask: masked.then_some(&mask[..]),
                            mask_sizes: if masked { &[1, len] } else { &[] },
                            is_causal: !masked,
                            scale: 0.125,
                        };
                        custom_sdpa(&q, &k, &v, &args, &mut out, &mut scores).unwrap();
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(
                            bits(&out),
                            bits(&want),
                            "{h} heads over {kvh}, d {d}, start {start}, mask {masked}, {threads} threads"
                        );
                    }
                    crate::parallel::set_threads(1);
                }
            }
        }
    }

    #[test]
    fn update_cache_writes_at_start_pos_and_checks_the_window() {
        let mut cache = [0i32; 2 * 4 * 2];
        let value = [1, 2, 3, 4, 5, 6, 7, 8];
        update_cache(&value, &[2, 2, 1, 2], &mut cache, &[2, 4, 1, 2], 1).unwrap();
        assert_eq!(cache, [0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 5, 6, 7, 8, 0, 0]);
        assert!(update_cache(&value, &[2, 2, 1, 2], &mut cache, &[2, 4, 1, 2], 3).is_err());
        assert!(update_cache(&value, &[2, 2, 1, 2], &mut cache, &[2, 4, 1, 2], -1).is_err());
        let mut cache = [0i32; 4 * 2];
        update_cache_with_indices(&[1, 2, 3, 4], &[1, 2, 1, 2], &mut cache, &[1, 4, 1, 2], &[3, 0]).unwrap();
        assert_eq!(cache, [3, 4, 0, 0, 0, 0, 1, 2]);
        assert!(update_cache_with_indices(&[1, 2], &[1, 1, 1, 2], &mut cache, &[1, 4, 1, 2], &[4]).is_err());
    }

    /// Attention written out the slow way, in f64.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        dims: [usize; 6],
        start: usize,
        causal: bool,
        scale: f64,
    ) -> Vec<f32> {
        let [b, s, h, kvh, d, len] = dims;
        let mut out = vec![0.0; b * s * h * d];
        for bi in 0..b {
            for hi in 0..h {
                let kv = hi / (h / kvh);
                for si in 0..s {
                    let n = if causal { start + si + 1 } else { start + s };
                    let at = |t: &[f32], j: usize, e: usize| t[((bi * len + j) * kvh + kv) * d + e] as f64;
                    let qv = |e: usize| q[((bi * s + si) * h + hi) * d + e] as f64;
                    let w: Vec<f64> = (0..n)
                        .map(|j| (0..d).map(|e| qv(e) * at(k, j, e)).sum::<f64>() * scale)
                        .collect();
                    let m = w.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = w.iter().map(|x| (x - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for c in 0..d {
                        let o: f64 = (0..n).map(|j| e[j] * at(v, j, c)).sum::<f64>() / z;
                        out[((bi * s + si) * h + hi) * d + c] = o as f32;
                    }
                }
            }
        }
        out
    }

    /// Prompts long enough to split across threads (causal ranges of
    /// equal work, uneven in rows), a head size with a tail past the 16
    /// lanes, and a mask: every output as attention written out, and the
    /// same bits on 1, 2 and 3 threads.
    #[test]
    fn a_decoded_tokens_heads_split_across_threads() {
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut rng = Lcg(12);
        // Under Miri a shorter cache and heads with a tail past the 16
        // lanes, still split (`SDPA_SPLIT_WORK`).
        let (h, kvh, d, len, start) = if cfg!(miri) {
            (9, 3, 20, 12, 10)
        } else {
            (9, 3, 64, 512, 400)
        };
        let q = rng.vec(h * d);
        let k = rng.vec(len * kvh * d);
        let v = rng.vec(len * kvh * d);
        let mut outs = Vec::new();
        for threads in [1, 2, 3] {
            crate::parallel::set_threads(threads);
            let mut out = vec![0.0; q.len()];
            let mut scores = vec![0.0; sdpa_scratch_len(len)];
            let args = Sdpa {
                q_sizes: &[1, 1, h, d],
                cache_sizes: &[1, len, kvh, d],
                start_pos: start,
                mask: None,
                mask_sizes: &[],
                is_causal: true,
                scale: 0.125,
            };
            custom_sdpa(&q, &k, &v, &args, &mut out, &mut scores).unwrap();
            outs.push(out);
        }
        crate::parallel::set_threads(1);
        assert!(outs.iter().all(|o| o == &outs[0]), "threads disagree");
        // Head 4 (kv head 1) against attention written out.
        let (hi, kv) = (4, 1);
        let sc: Vec<f64> = (0..=start as usize)
            .map(|j| {
                (0..d)
                    .map(|e| q[hi * d + e] as f64 * k[(j * kvh + kv) * d + e] as f64)
                    .sum::<f64>()
                    * 0.125
            })
            .collect();
        let m = sc.iter().cloned().fold(f64::MIN, f64::max);
        let p: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = p.iter().sum();
        for e in 0..d {
            let want: f64 = p
                .iter()
                .enumerate()
                .map(|(j, pj)| pj * v[(j * kvh + kv) * d + e] as f64)
                .sum::<f64>()
                / z;
            assert!((outs[0][hi * d + e] as f64 - want).abs() < 1e-5, "output {e}");
        }
    }

    #[test]
    fn custom_sdpa_splits_query_rows_across_threads() {
        // WASI has no threads (nor the turn): more threads run as one there.
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut rng = Lcg(11);
        // Under Miri fewer rows and keys, still split (`SDPA_SPLIT_WORK`),
        // unevenly where causal.
        let (b, s, h, kvh, d, len) = if cfg!(miri) {
            (2, 2, 4, 2, 17, 12)
        } else {
            (2, 37, 4, 2, 21, 64)
        };
        let q = rng.vec(b * s * h * d);
        let k = rng.vec(b * len * kvh * d);
        let v = rng.vec(b * len * kvh * d);
        for (start, causal, masked) in [(0, true, false), (9, true, false), (5, false, false), (3, false, true)] {
            // With a mask, every key of the cache (the start is unused).
            let keys = if masked { len } else { start + s };
            // A mask that hides every third key: the reference sees the
            // same by having those keys' scores at -inf.
            let mask: Vec<f32> = (0..s * keys)
                .map(|i| if i % keys % 3 == 1 { f32::NEG_INFINITY } else { 0.0 })
                .collect();
            let mut outs = Vec::new();
            for threads in [1, 2, 3] {
                crate::parallel::set_threads(threads);
                let mut out = vec![0.0; q.len()];
                let mut scores = vec![0.0; sdpa_scratch_len(len)];
                let args = Sdpa {
                    q_sizes: &[b, s, h, d],
                    cache_sizes: &[b, len, kvh, d],
                    start_pos: start as i64,
                    mask: masked.then_some(&mask[..]),
                    mask_sizes: &[s, keys],
                    is_causal: causal,
                    scale: 0.3,
                };
                custom_sdpa(&q, &k, &v, &args, &mut out, &mut scores).unwrap();
                outs.push(out);
            }
            crate::parallel::set_threads(1);
            assert!(
                outs.iter().all(|o| o == &outs[0]),
                "start {start} causal {causal}: threads disagree"
            );
            if masked {
                // Keys hidden by the mask: attention over the others.
                let kept: Vec<usize> = (0..keys).filter(|j| j % 3 != 1).collect();
                for (si, hi, bi) in [(0, 0, 0), (s - 1, h - 1, b - 1), (7.min(s - 2), 2, 1)] {
                    let kv = hi / (h / kvh);
                    let at = |t: &[f32], j: usize, e: usize| t[((bi * len + j) * kvh + kv) * d + e] as f64;
                    let qv = |e: usize| q[((bi * s + si) * h + hi) * d + e] as f64;
                    let w: Vec<f64> = kept
                        .iter()
                        .map(|&j| (0..d).map(|e| qv(e) * at(&k, j, e)).sum::<f64>() * 0.3f32 as f64)
                        .collect();
                    let m = w.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = w.iter().map(|x| (x - m).exp()).sum();
                    for c in 0..d {
                        let o: f64 = kept
                            .iter()
                            .zip(&w)
                            .map(|(&j, x)| (x - m).exp() * at(&v, j, c))
                            .sum::<f64>()
                            / z;
                        let got = outs[0][((bi * s + si) * h + hi) * d + c];
                        assert!((got as f64 - o).abs() < 1e-5, "masked: {got} vs {o}");
                    }
                }
                continue;
            }
            let want = reference(&q, &k, &v, [b, s, h, kvh, d, len], start, causal, 0.3f32 as f64);
            for (x, y) in outs[0].iter().zip(&want) {
                assert!((x - y).abs() < 1e-5, "start {start} causal {causal}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn custom_sdpa_reads_caches_of_a_live_length_within_their_bound() {
        // Caches planned for 16 positions, of which a slice of `live` is
        // attended over (as Gemma 4's KV-sharing layers do): the live
        // elements are the first of the bound's buffer.
        let mut rng = Lcg(5);
        let (b, s, h, kvh, d, bound) = (1, 2, 4, 2, 6, 16);
        let q = rng.vec(b * s * h * d);
        let k = rng.vec(b * bound * kvh * d);
        let v = rng.vec(b * bound * kvh * d);
        let mut scores = vec![0.0; sdpa_scratch_len(bound)];
        let q_sizes = [b, s, h, d];
        fn causal<'a>(q_sizes: &'a [usize], cache_sizes: &'a [usize], start_pos: i64) -> Sdpa<'a> {
            Sdpa {
                q_sizes,
                cache_sizes,
                start_pos,
                mask: None,
                mask_sizes: &[],
                is_causal: true,
                scale: 0.4,
            }
        }
        for (live, start) in [(2, 0), (7, 5), (11, 3), (16, 14)] {
            let n = b * live * kvh * d;
            let mut out = vec![0.0; q.len()];
            let sizes = [b, live, kvh, d];
            custom_sdpa(
                &q,
                &k[..n],
                &v[..n],
                &causal(&q_sizes, &sizes, start as i64),
                &mut out,
                &mut scores,
            )
            .unwrap();
            let want = reference(
                &q,
                &k[..n],
                &v[..n],
                [b, s, h, kvh, d, live],
                start,
                true,
                0.4f32 as f64,
            );
            for (x, y) in out.iter().zip(&want) {
                assert!((x - y).abs() < 1e-5, "live {live} start {start}: {x} vs {y}");
            }
        }
        let mut out = vec![0.0; q.len()];
        // A live length over the bound: more than the caches hold.
        let over = [b, bound + 1, kvh, d];
        assert_eq!(
            custom_sdpa(&q, &k, &v, &causal(&q_sizes, &over, 0), &mut out, &mut scores),
            Err(KernelError::ShapeMismatch)
        );
        // Sizes that disagree with the live views, or with the query.
        let n = b * 7 * kvh * d;
        for sizes in [[b, 8, kvh, d], [b, 7, kvh, d + 1], [b + 1, 7, kvh, d]] {
            assert_eq!(
                custom_sdpa(
                    &q,
                    &k[..n],
                    &v[..n],
                    &causal(&q_sizes, &sizes, 0),
                    &mut out,
                    &mut scores
                ),
                Err(KernelError::ShapeMismatch),
                "{sizes:?}"
            );
        }
        // Queries past the live length.
        let sizes = [b, 7, kvh, d];
        assert!(matches!(
            custom_sdpa(
                &q,
                &k[..n],
                &v[..n],
                &causal(&q_sizes, &sizes, 6),
                &mut out,
                &mut scores
            ),
            Err(KernelError::IndexOutOfRange { .. })
        ));
        // Key and value caches of different live sizes.
        assert_eq!(same_cache_sizes(&[1, 7, 2, 6], &[1, 7, 2, 6]), Ok(()));
        assert_eq!(
            same_cache_sizes(&[1, 7, 2, 6], &[1, 8, 2, 6]),
            Err(KernelError::ShapeMismatch)
        );
    }

    #[test]
    fn custom_sdpa_matches_attention_written_out() {
        let mut rng = Lcg(7);
        let (b, s, h, kvh, d, len) = (2, 3, 4, 2, 5, 8);
        let q = rng.vec(b * s * h * d);
        let k = rng.vec(b * len * kvh * d);
        let v = rng.vec(b * len * kvh * d);
        for (start, causal) in [(0, true), (2, true), (5, true), (2, false)] {
            let mut out = vec![0.0; q.len()];
            let mut scores = vec![0.0; sdpa_scratch_len(len)];
            let args = Sdpa {
                q_sizes: &[b, s, h, d],
                cache_sizes: &[b, len, kvh, d],
                start_pos: start as i64,
                mask: None,
                mask_sizes: &[],
                is_causal: causal,
                scale: 0.4,
            };
            custom_sdpa(&q, &k, &v, &args, &mut out, &mut scores).unwrap();
            let want = reference(&q, &k, &v, [b, s, h, kvh, d, len], start, causal, 0.4f32 as f64);
            for (x, y) in out.iter().zip(&want) {
                assert!((x - y).abs() < 1e-5, "start {start} causal {causal}: {x} vs {y}");
            }
        }
        let mut out = vec![0.0; q.len()];
        let mut scores = vec![0.0; len];
        let args = Sdpa {
            q_sizes: &[b, s, h, d],
            cache_sizes: &[b, len, kvh, d],
            start_pos: 6,
            mask: None,
            mask_sizes: &[],
            is_causal: true,
            scale: 1.0,
        };
        assert!(custom_sdpa(&q, &k, &v, &args, &mut out, &mut scores).is_err());
    }

    /// Random int8 rows with their scales and zero points.
    fn int8_rows(rng: &mut Lcg, rows: usize, d: usize) -> (Vec<i8>, Vec<f32>, Vec<i8>) {
        let values = (0..rows * d).map(|_| (rng.next() * 127.0) as i8).collect();
        let scales = (0..rows).map(|_| 0.01 + 0.005 * rng.next()).collect();
        let zero_points = (0..rows).map(|_| (rng.next() * 20.0) as i8).collect();
        (values, scales, zero_points)
    }

    fn dequantized((values, scales, zero_points): &(Vec<i8>, Vec<f32>, Vec<i8>), d: usize) -> Vec<f32> {
        let row = |i: usize| i / d;
        let f = |i: usize, &q: &i8| (scales[row(i)] as f64 * (q as f64 - zero_points[row(i)] as f64)) as f32;
        values.iter().enumerate().map(|(i, q)| f(i, q)).collect()
    }

    fn rows(t: &(Vec<i8>, Vec<f32>, Vec<i8>)) -> QuantizedRows<'_> {
        QuantizedRows {
            values: &t.0,
            scales: &t.1,
            zero_points: &t.2,
        }
    }

    /// The int8 attention is attention over the dequantized operands, to
    /// f32 rounding: prompts within one block of queries and across
    /// several (ExecuTorch's 32), keys in one block and in two (of 512),
    /// causal and with a mask.
    #[test]
    fn quantized_sdpa_is_attention_over_the_dequantized_operands() {
        let mut rng = Lcg(5);
        // Under Miri a short cache in blocks of 32 keys (`KV_SPLIT`): rows
        // in the first block, past it and across its end.
        let (len, long, past, across) = if cfg!(miri) {
            (48, 12, 36, (29, 4))
        } else {
            (600, 40, 520, (498, 37))
        };
        let (h, kvh, d) = (4, 2, 8);
        let k = int8_rows(&mut rng, len * kvh, d);
        let v = int8_rows(&mut rng, len * kvh, d);
        let (kf, vf) = (dequantized(&k, d), dequantized(&v, d));
        for (start, s, masked) in [
            (0, 1, false),
            (7, 3, false),
            (0, long, false),
            (past, 2, false),
            (across.0, across.1, false),
            (5, 3, true),
        ] {
            let q = int8_rows(&mut rng, s * h, d);
            let keys = if masked { len } else { start + s };
            let mask: Vec<f32> = (0..s * keys).map(|i| if i % 3 == 0 { -0.5 } else { 0.25 }).collect();
            let args = Sdpa {
                q_sizes: &[1, s, h, d],
                cache_sizes: &[1, len, kvh, d],
                start_pos: start as i64,
                mask: masked.then_some(&mask[..]),
                mask_sizes: &[s, keys],
                is_causal: !masked,
                scale: 0.3,
            };
            let mut out = vec![0.0; s * h * d];
            let mut scores = vec![0.0; quantized_sdpa_scratch_len(len)];
            custom_quantized_sdpa(rows(&q), rows(&k), rows(&v), &args, &mut out, &mut scores).unwrap();
            let want = if masked {
                // The float kernel over the dequantized operands (its mask
                // spans the keys up to start + s, all of them here).
                let mut want = vec![0.0; out.len()];
                let (kf, vf) = (&kf[..keys * kvh * d], &vf[..keys * kvh * d]);
                let args = Sdpa {
                    cache_sizes: &[1, keys, kvh, d],
                    start_pos: (keys - s) as i64,
                    ..args
                };
                custom_sdpa(&dequantized(&q, d), kf, vf, &args, &mut want, &mut vec![0.0; keys]).unwrap();
                want.iter().map(|&x| x as f64).collect::<Vec<_>>()
            } else {
                let r = reference(
                    &dequantized(&q, d),
                    &kf,
                    &vf,
                    [1, s, h, kvh, d, len],
                    start,
                    true,
                    0.3f32 as f64,
                );
                r.iter().map(|&x| x as f64).collect()
            };
            for (i, (x, y)) in out.iter().zip(&want).enumerate() {
                assert!(
                    (*x as f64 - y).abs() < 2e-5,
                    "start {start} s {s} masked {masked} at {i}: {x} vs {y}"
                );
            }
        }
        // The window is checked as for the float op.
        let q = int8_rows(&mut rng, 2 * h, d);
        let args = Sdpa {
            q_sizes: &[1, 2, h, d],
            cache_sizes: &[1, len, kvh, d],
            start_pos: len as i64 - 1,
            mask: None,
            mask_sizes: &[],
            is_causal: true,
            scale: 1.0,
        };
        let (mut out, mut scores) = (vec![0.0; 2 * h * d], vec![0.0; 512]);
        assert!(custom_quantized_sdpa(rows(&q), rows(&k), rows(&v), &args, &mut out, &mut scores).is_err());
    }

    /// The fused op is the two updates, then the attention; its own
    /// `seq_len` is checked against the cache.
    #[test]
    fn sdpa_with_kv_cache_updates_then_attends() {
        let mut rng = Lcg(11);
        let (s, h, kvh, d, len) = (2, 4, 2, 3, 6);
        let (q, k, v) = (rng.vec(s * h * d), rng.vec(s * kvh * d), rng.vec(s * kvh * d));
        let (mut kc, mut vc) = (rng.vec(len * kvh * d), rng.vec(len * kvh * d));
        let (mut kc2, mut vc2) = (kc.clone(), vc.clone());
        let args = Sdpa {
            q_sizes: &[1, s, h, d],
            cache_sizes: &[1, len, kvh, d],
            start_pos: 3,
            mask: None,
            mask_sizes: &[],
            is_causal: true,
            scale: 0.7,
        };
        let (mut out, mut want) = (vec![0.0; q.len()], vec![0.0; q.len()]);
        let mut scores = vec![0.0; len];
        let kv = [1, s, kvh, d];
        sdpa_with_kv_cache(
            &q,
            &k,
            &v,
            &kv,
            &mut kc,
            &mut vc,
            s as i64,
            &args,
            &mut out,
            &mut scores,
        )
        .unwrap();
        update_cache(&k, &kv, &mut kc2, args.cache_sizes, 3).unwrap();
        update_cache(&v, &kv, &mut vc2, args.cache_sizes, 3).unwrap();
        custom_sdpa(&q, &kc2, &vc2, &args, &mut want, &mut scores).unwrap();
        assert_eq!((&kc, &vc, &out), (&kc2, &vc2, &want));
        let e = sdpa_with_kv_cache(&q, &k, &v, &kv, &mut kc, &mut vc, 4, &args, &mut out, &mut scores);
        assert!(e.is_err());
    }

    /// An additive mask of zeros and -inf is a causal mask.
    #[test]
    fn a_mask_adds_to_the_scores() {
        let mut rng = Lcg(3);
        let (s, h, d, len, start) = (2, 2, 3, 4, 1);
        let q = rng.vec(s * h * d);
        let k = rng.vec(len * h * d);
        let v = rng.vec(len * h * d);
        // A mask covers the whole cache: here the causal one.
        let keys = len;
        let mask: Vec<f32> = (0..s * keys)
            .map(|i| {
                if i % keys <= start + i / keys {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect();
        let run = |mask: Option<&[f32]>, causal: bool| {
            let mut out = vec![0.0; q.len()];
            let mut scores = vec![0.0; len];
            let args = Sdpa {
                q_sizes: &[1, s, h, d],
                cache_sizes: &[1, len, h, d],
                start_pos: start as i64,
                mask,
                mask_sizes: &[s, keys],
                is_causal: causal,
                scale: 0.5,
            };
            custom_sdpa(&q, &k, &v, &args, &mut out, &mut scores).unwrap();
            out
        };
        assert_eq!(run(Some(&mask), false), run(None, true));
    }
}
