//! Data-dependent indexing: `embedding`, `gather`, `index_select`,
//! advanced indexing (`index.Tensor`, `index_put`), `scatter` and friends.
//!
//! Index tensors may have any integer dtype (read through
//! [`Element::to_i64`]). Out-of-range indices return
//! [`KernelError::IndexOutOfRange`] (with the index as given). Negative
//! indices follow PyTorch per operator: `index.Tensor` and `index_put`
//! wrap them once (`-1` is the last element), while `embedding`,
//! `index_select`, `gather` and `scatter*` reject them as PyTorch does.
//! On error the output may be partially written.
use crate::elementwise::{broadcast_sizes, broadcast_strides, zip};
use crate::num::{contiguous_strides, numel, Element};
use crate::{KernelError, KernelResult, MAX_RANK};

/// Checks `0 <= index < size` without wrapping.
#[inline(always)]
fn check_index(index: i64, size: usize) -> Result<usize, KernelError> {
    if index < 0 || index as u64 >= size as u64 {
        Err(KernelError::IndexOutOfRange { index, size })
    } else {
        Ok(index as usize)
    }
}

/// Wraps a negative index once, then checks the range.
#[inline(always)]
fn wrap_index(index: i64, size: usize) -> Result<usize, KernelError> {
    let i = if index < 0 { index + size as i64 } else { index };
    check_index(i, size).map_err(|_| KernelError::IndexOutOfRange { index, size })
}

/// `aten::embedding(weight, indices)`: `weight` is `[num_embeddings, dim]`;
/// `out` is `indices.len() × dim`, row `k` = `weight[indices[k]]`.
/// Negative or too large indices → `IndexOutOfRange` (padding_idx and
/// max_norm do not affect the forward result).
pub fn embedding<T: Copy, I: Element>(
    weight: &[T],
    num_embeddings: usize,
    dim: usize,
    indices: &[I],
    out: &mut [T],
) -> KernelResult {
    for (k, &ix) in indices.iter().enumerate() {
        let i = check_index(ix.to_i64(), num_embeddings)?;
        out[k * dim..(k + 1) * dim].copy_from_slice(&weight[i * dim..(i + 1) * dim]);
    }
    Ok(())
}

/// `aten::index_select(dim, index)`: `out` has the input shape with `dim`
/// replaced by `index.len()` (a rank-0 input takes a 1-element index).
pub fn index_select<T: Copy, I: Element>(
    src: &[T],
    sizes: &[usize],
    dim: usize,
    index: &[I],
    out: &mut [T],
) -> KernelResult {
    if sizes.is_empty() {
        for (o, &ix) in out.iter_mut().zip(index) {
            check_index(ix.to_i64(), 1)?;
            *o = src[0];
        }
        return Ok(());
    }
    let outer: usize = sizes[..dim].iter().product();
    let inner: usize = sizes[dim + 1..].iter().product();
    let n = sizes[dim];
    let m = index.len();
    for o in 0..outer {
        for (k, &ix) in index.iter().enumerate() {
            let i = check_index(ix.to_i64(), n)?;
            let s = (o * n + i) * inner;
            let d = (o * m + k) * inner;
            out[d..d + inner].copy_from_slice(&src[s..s + inner]);
        }
    }
    Ok(())
}

/// Odometer over `sizes` (row-major) calling `f(linear, idx)`.
#[inline(always)]
fn for_each_index(sizes: &[usize], mut f: impl FnMut(usize, &[usize; MAX_RANK]) -> KernelResult) -> KernelResult {
    let r = sizes.len();
    let n = numel(sizes);
    let mut idx = [0usize; MAX_RANK];
    for lin in 0..n {
        f(lin, &idx)?;
        let mut d = r;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            if idx[d] < sizes[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(())
}

/// A `gather`/`scatter` index of `index_sizes` (and `index_len`
/// elements) fits a tensor of `sizes`: the same rank, no larger off `dim`.
fn index_fits(sizes: &[usize], dim: usize, index_len: usize, index_sizes: &[usize]) -> bool {
    index_sizes.len() == sizes.len()
        && (0..sizes.len()).all(|d| d == dim || index_sizes[d] <= sizes[d])
        && index_len >= numel(index_sizes)
}

/// `aten::gather(dim, index)`: `out` has the index's shape;
/// `out[i] = src[i with coordinate dim replaced by index[i]]`. The index
/// has the input's rank with `index_sizes[d] <= sizes[d]` for `d != dim`.
pub fn gather<T: Copy, I: Element>(
    src: &[T],
    sizes: &[usize],
    dim: usize,
    index: &[I],
    index_sizes: &[usize],
    out: &mut [T],
) -> KernelResult {
    // Live (dynamic) sizes are checked here; static ones by the compiler.
    if !index_fits(sizes, dim, index.len(), index_sizes) || out.len() < numel(index_sizes) || src.len() < numel(sizes) {
        return Err(KernelError::ShapeMismatch);
    }
    let mut st = [0usize; MAX_RANK];
    contiguous_strides(sizes, &mut st);
    let n = sizes.get(dim).copied().unwrap_or(1);
    for_each_index(index_sizes, |lin, idx| {
        let i = check_index(index[lin].to_i64(), n)?;
        let mut off = 0;
        for d in 0..index_sizes.len() {
            off += if d == dim { i } else { idx[d] } * st[d];
        }
        out[lin] = src[off];
        Ok(())
    })
}

/// `aten::masked_scatter`: `out` is a contiguous `x` of shape `sizes`
/// whose elements where `mask` is true take `source`'s elements in order
/// (row-major). `mask` is read with `mask_strides` (0 along broadcast
/// dims). Fewer source elements than true mask entries is an error.
pub fn masked_scatter<T: Copy>(
    x: &[T],
    sizes: &[usize],
    mask: &[bool],
    mask_strides: &[usize],
    source: &[T],
    out: &mut [T],
) -> KernelResult {
    let n = numel(sizes);
    let last: usize = sizes
        .iter()
        .zip(mask_strides)
        .map(|(s, m)| s.saturating_sub(1) * m)
        .sum();
    if x.len() < n || out.len() < n || mask_strides.len() != sizes.len() || (n > 0 && mask.len() <= last) {
        return Err(KernelError::ShapeMismatch);
    }
    let mut next = 0usize;
    for_each_index(sizes, |lin, idx| {
        let m: usize = idx[..sizes.len()].iter().zip(mask_strides).map(|(i, s)| i * s).sum();
        out[lin] = if mask[m] {
            let v = *source.get(next).ok_or(KernelError::IndexOutOfRange {
                index: next as i64,
                size: source.len(),
            })?;
            next += 1;
            v
        } else {
            x[lin]
        };
        Ok(())
    })
}

/// Calls `f(linear index, offset in a, offset in b)` for every element of
/// `sizes`, in row-major order, with `a` and `b` read through strides
/// `sa` and `sb` (0 along broadcast dims).
fn for_each_pair(sizes: &[usize], sa: &[usize], sb: &[usize], mut f: impl FnMut(usize, usize, usize)) {
    let _ = for_each_index(sizes, |lin, idx| {
        let (mut oa, mut ob) = (0, 0);
        for d in 0..sizes.len() {
            oa += idx[d] * sa[d];
            ob += idx[d] * sb[d];
        }
        f(lin, oa, ob);
        Ok(())
    });
}

/// The number of elements `aten::masked_select` takes: true entries of
/// `mask` over the broadcast shape `sizes` (`mask` read with `mask_strides`).
pub fn masked_count(sizes: &[usize], mask: &[bool], mask_strides: &[usize]) -> usize {
    let mut n = 0;
    for_each_pair(sizes, mask_strides, mask_strides, |_, m, _| n += mask[m] as usize);
    n
}

/// `aten::masked_select`: the elements of `x` (read with `x_strides` over
/// the broadcast shape `sizes`) where `mask` is true, in row-major order;
/// `out` holds [`masked_count`] of them.
pub fn masked_select<T: Copy>(
    x: &[T],
    x_strides: &[usize],
    mask: &[bool],
    mask_strides: &[usize],
    sizes: &[usize],
    out: &mut [T],
) {
    let mut k = 0;
    for_each_pair(sizes, x_strides, mask_strides, |_, xo, m| {
        if mask[m] {
            out[k] = x[xo];
            k += 1;
        }
    });
}

/// The number of non-zero elements of `x` (NaN counts).
pub fn count_nonzero<T: Element>(x: &[T]) -> usize {
    let z = T::default();
    x.iter().filter(|&&v| v != z).count()
}

/// `aten::nonzero`: for each non-zero element of a contiguous `x` of shape
/// `sizes`, in row-major order, its index (`sizes.len()` coordinates).
/// `out` holds their `count` ([`count_nonzero`]) rows, row-major or, with
/// `column_major`, as PyTorch lays them out (coordinate `d` of row `i` at
/// `d * count + i`).
pub fn nonzero<T: Element>(x: &[T], sizes: &[usize], count: usize, column_major: bool, out: &mut [i64]) {
    let (r, z) = (sizes.len(), T::default());
    let mut row = 0;
    let _ = for_each_index(sizes, |lin, idx| {
        if x[lin] != z {
            for d in 0..r {
                out[if column_major { d * count + row } else { row * r + d }] = idx[d] as i64;
            }
            row += 1;
        }
        Ok(())
    });
}

/// The length of `aten::repeat_interleave(repeats)`: the sum of
/// `repeats`, or an error for a negative one or a sum no `usize` holds
/// (counts come from the data: a sum that wrapped would size the output
/// short of what [`repeat_interleave`] writes).
pub fn repeat_count<I: Element>(repeats: &[I]) -> Result<usize, KernelError> {
    repeats.iter().try_fold(0usize, |n, &r| {
        let r = r.to_i64();
        if r < 0 {
            return Err(KernelError::IndexOutOfRange { index: r, size: 0 });
        }
        usize::try_from(r)
            .ok()
            .and_then(|r| n.checked_add(r))
            .ok_or(KernelError::ShapeMismatch)
    })
}

/// `aten::repeat_interleave.Tensor`: each index `i` of `repeats`,
/// `repeats[i]` times, into `out` ([`repeat_count`] long).
pub fn repeat_interleave<I: Element>(repeats: &[I], out: &mut [I]) {
    let mut k = 0;
    for (i, &r) in repeats.iter().enumerate() {
        for _ in 0..r.to_i64().max(0) {
            out[k] = I::from_i64(i as i64);
            k += 1;
        }
    }
}

/// Shared scatter loop: for each element `i` of the index, combines
/// `dst[i with dim := index[i]]` with the source value for `i`.
fn scatter_impl<T: Copy, I: Element>(
    dst: &mut [T],
    sizes: &[usize],
    dim: usize,
    index: &[I],
    index_sizes: &[usize],
    mut value: impl FnMut(&[usize; MAX_RANK]) -> T,
    mut combine: impl FnMut(T, T) -> T,
) -> KernelResult {
    // Live (dynamic) index sizes are checked here; static ones by the
    // compiler.
    if !index_fits(sizes, dim, index.len(), index_sizes) || dst.len() < numel(sizes) {
        return Err(KernelError::ShapeMismatch);
    }
    let mut st = [0usize; MAX_RANK];
    contiguous_strides(sizes, &mut st);
    let n = sizes.get(dim).copied().unwrap_or(1);
    for_each_index(index_sizes, |lin, idx| {
        let i = check_index(index[lin].to_i64(), n)?;
        let mut off = 0;
        for d in 0..index_sizes.len() {
            off += if d == dim { i } else { idx[d] } * st[d];
        }
        dst[off] = combine(dst[off], value(idx));
        Ok(())
    })
}

#[inline(always)]
fn src_value<'a, T: Copy>(src: &'a [T], src_sizes: &[usize]) -> impl FnMut(&[usize; MAX_RANK]) -> T + 'a {
    let mut st = [0usize; MAX_RANK];
    contiguous_strides(src_sizes, &mut st);
    let r = src_sizes.len();
    move |idx| {
        let mut off = 0;
        for d in 0..r {
            off += idx[d] * st[d];
        }
        src[off]
    }
}

/// `aten::scatter.src(dim, index, src)`: `dst` already holds a copy of
/// `self` (shape `sizes`); for each element `i` of the index,
/// `dst[i with dim := index[i]] = src[i]` (`src` of shape `src_sizes`, at
/// least the index's sizes). With duplicate indices the last write wins.
#[allow(clippy::too_many_arguments)]
pub fn scatter<T: Copy, I: Element>(
    dst: &mut [T],
    sizes: &[usize],
    dim: usize,
    index: &[I],
    index_sizes: &[usize],
    src: &[T],
    src_sizes: &[usize],
) -> KernelResult {
    src_covers(index_sizes, src, src_sizes)?;
    scatter_impl(dst, sizes, dim, index, index_sizes, src_value(src, src_sizes), |_, v| v)
}

/// A source of `src_sizes` (and as many elements) at least as large as
/// the index in every dim.
fn src_covers<T>(index_sizes: &[usize], src: &[T], src_sizes: &[usize]) -> KernelResult {
    let fits = src_sizes.len() == index_sizes.len()
        && index_sizes.iter().zip(src_sizes).all(|(i, s)| i <= s)
        && src.len() >= numel(src_sizes);
    if fits {
        Ok(())
    } else {
        Err(KernelError::ShapeMismatch)
    }
}

/// `aten::scatter.value(dim, index, value)`: like [`scatter`] with a
/// constant.
pub fn scatter_value<T: Copy, I: Element>(
    dst: &mut [T],
    sizes: &[usize],
    dim: usize,
    index: &[I],
    index_sizes: &[usize],
    value: T,
) -> KernelResult {
    scatter_impl(dst, sizes, dim, index, index_sizes, |_| value, |_, v| v)
}

/// `aten::scatter_add(dim, index, src)` and `scatter_reduce` with a
/// reduction closure: `dst[...] = add(dst[...], src[i])` (`add` is e.g.
/// `|a, b| a + b`, or `scalar::add_int`, or a max/min/mul for
/// `scatter_reduce(include_self=True)`).
#[allow(clippy::too_many_arguments)]
pub fn scatter_add<T: Copy, I: Element>(
    dst: &mut [T],
    sizes: &[usize],
    dim: usize,
    index: &[I],
    index_sizes: &[usize],
    src: &[T],
    src_sizes: &[usize],
    add: impl FnMut(T, T) -> T,
) -> KernelResult {
    src_covers(index_sizes, src, src_sizes)?;
    scatter_impl(dst, sizes, dim, index, index_sizes, src_value(src, src_sizes), add)
}

/// One optional index tensor of `index.Tensor` / `index_put`: its data and
/// shape. `None` means the dim is taken whole (a `:` in Python).
pub type IndexArg<'a, I> = Option<(&'a [I], &'a [usize])>;

/// Output shape of `aten::index.Tensor(self, indices)` (also the shape
/// `index_put` broadcasts `values` to). `index_shapes[d]` is the shape of
/// the index for dim `d` (`None` for a whole dim; trailing dims may be
/// omitted). The index shapes broadcast together to `B`; if the indexed
/// dims are adjacent, `B` replaces them in place, otherwise `B` comes first
/// followed by the remaining dims. `None` if the shapes do not broadcast,
/// there are more indices than dims, or the rank exceeds [`MAX_RANK`].
/// Boolean mask indices are not supported (their shape is data-dependent).
pub fn index_output_sizes(
    self_sizes: &[usize],
    index_shapes: &[Option<&[usize]>],
) -> Option<([usize; MAX_RANK], usize)> {
    let layout = Layout::new(self_sizes, index_shapes)?;
    let mut out = [0usize; MAX_RANK];
    let mut r = 0;
    for k in 0..layout.pre_rank {
        out[r] = layout.pre_sizes[k];
        r += 1;
    }
    if r + layout.b_rank + layout.post_rank > MAX_RANK {
        return None;
    }
    for k in 0..layout.b_rank {
        out[r] = layout.b_sizes[k];
        r += 1;
    }
    for k in 0..layout.post_rank {
        out[r] = layout.post_sizes[k];
        r += 1;
    }
    Some((out, r))
}

/// Output layout of advanced indexing: `[pre dims, B, post dims]`.
struct Layout {
    b_sizes: [usize; MAX_RANK],
    b_rank: usize,
    pre_sizes: [usize; MAX_RANK],
    pre_strides: [usize; MAX_RANK],
    pre_rank: usize,
    post_sizes: [usize; MAX_RANK],
    post_strides: [usize; MAX_RANK],
    post_rank: usize,
}

impl Layout {
    fn new(sizes: &[usize], index_shapes: &[Option<&[usize]>]) -> Option<Layout> {
        let r = sizes.len();
        if index_shapes.len() > r.max(1) || (r == 0 && index_shapes.iter().any(|s| s.is_some())) {
            return None;
        }
        let mut b_sizes = [0usize; MAX_RANK];
        let mut b_rank = 0usize;
        let (mut first, mut last, mut count) = (usize::MAX, 0usize, 0usize);
        for (d, s) in index_shapes.iter().enumerate() {
            if let Some(s) = s {
                let (nb, nr) = broadcast_sizes(&b_sizes[..b_rank], s)?;
                b_sizes = nb;
                b_rank = nr;
                first = first.min(d);
                last = d;
                count += 1;
            }
        }
        let mut st = [0usize; MAX_RANK];
        contiguous_strides(sizes, &mut st);
        let mut l = Layout {
            b_sizes,
            b_rank,
            pre_sizes: [0; MAX_RANK],
            pre_strides: [0; MAX_RANK],
            pre_rank: 0,
            post_sizes: [0; MAX_RANK],
            post_strides: [0; MAX_RANK],
            post_rank: 0,
        };
        let adjacent = count == 0 || last - first + 1 == count;
        let is_indexed = |d: usize| index_shapes.get(d).is_some_and(|s| s.is_some());
        for d in 0..r {
            if is_indexed(d) {
                continue;
            }
            if adjacent && (count == 0 || d < first) {
                l.pre_sizes[l.pre_rank] = sizes[d];
                l.pre_strides[l.pre_rank] = st[d];
                l.pre_rank += 1;
            } else {
                l.post_sizes[l.post_rank] = sizes[d];
                l.post_strides[l.post_rank] = st[d];
                l.post_rank += 1;
            }
        }
        Some(l)
    }
}

/// Walks advanced indexing: calls `f(out_linear, self_offset)` for every
/// output element in order.
fn walk_index<I: Element>(
    sizes: &[usize],
    indices: &[IndexArg<'_, I>],
    mut f: impl FnMut(usize, usize),
) -> KernelResult {
    let mut shapes: [Option<&[usize]>; MAX_RANK] = [None; MAX_RANK];
    for (s, ix) in shapes.iter_mut().zip(indices) {
        *s = ix.map(|(_, sh)| sh);
    }
    let nidx = indices.len().min(MAX_RANK);
    let l = Layout::new(sizes, &shapes[..nidx]).ok_or(KernelError::ShapeMismatch)?;
    let b = &l.b_sizes[..l.b_rank];
    // Broadcast strides of every index tensor over B.
    let mut bst = [[0usize; MAX_RANK]; MAX_RANK];
    let mut self_st = [0usize; MAX_RANK];
    contiguous_strides(sizes, &mut self_st);
    for (d, ix) in indices.iter().enumerate() {
        if let Some((_, sh)) = ix {
            broadcast_strides(b, sh, &mut bst[d]);
        }
    }
    let nb = numel(b);
    let post = &l.post_sizes[..l.post_rank];
    let post_st = &l.post_strides[..l.post_rank];
    let mut lin = 0usize;
    let mut res = Ok(());
    // Pre dims (outermost), then B, then post dims.
    let _ = for_each_index(&l.pre_sizes[..l.pre_rank], |_, pidx| {
        let po: usize = (0..l.pre_rank).map(|k| pidx[k] * l.pre_strides[k]).sum();
        for bl in 0..nb {
            // Unravel bl over B and read every index tensor.
            let mut bidx = [0usize; MAX_RANK];
            let mut rem = bl;
            for k in (0..b.len()).rev() {
                bidx[k] = rem % b[k];
                rem /= b[k];
            }
            let mut io = 0;
            for (d, ix) in indices.iter().enumerate() {
                if let Some((data, _)) = ix {
                    let mut off = 0;
                    for k in 0..b.len() {
                        off += bidx[k] * bst[d][k];
                    }
                    match wrap_index(data[off].to_i64(), sizes[d]) {
                        Ok(i) => io += i * self_st[d],
                        Err(e) => {
                            res = Err(e);
                            return Err(e);
                        }
                    }
                }
            }
            let base = po + io;
            let _ = for_each_index(post, |_, qidx| {
                let mut qo = 0;
                for k in 0..post.len() {
                    qo += qidx[k] * post_st[k];
                }
                f(lin, base + qo);
                lin += 1;
                Ok(())
            });
        }
        Ok(())
    });
    res
}

/// `aten::index.Tensor(self, indices)`: advanced indexing with optional
/// index tensors (see [`index_output_sizes`] for the output shape). Index
/// values wrap once if negative; out of range → `IndexOutOfRange`;
/// incompatible index shapes → `ShapeMismatch`.
pub fn index<T: Copy, I: Element>(
    src: &[T],
    sizes: &[usize],
    indices: &[IndexArg<'_, I>],
    out: &mut [T],
) -> KernelResult {
    walk_index(sizes, indices, |lin, off| out[lin] = src[off])
}

fn index_put_impl<T: Copy, I: Element>(
    dst: &mut [T],
    sizes: &[usize],
    indices: &[IndexArg<'_, I>],
    values: &[T],
    values_sizes: &[usize],
    mut combine: impl FnMut(T, T) -> T,
) -> KernelResult {
    let mut shapes: [Option<&[usize]>; MAX_RANK] = [None; MAX_RANK];
    for (s, ix) in shapes.iter_mut().zip(indices) {
        *s = ix.map(|(_, sh)| sh);
    }
    let (os, r) =
        index_output_sizes(sizes, &shapes[..indices.len().min(MAX_RANK)]).ok_or(KernelError::ShapeMismatch)?;
    let os = &os[..r];
    if broadcast_sizes(os, values_sizes).is_none_or(|(s, rr)| &s[..rr] != os) {
        return Err(KernelError::ShapeMismatch);
    }
    let mut vst = [0usize; MAX_RANK];
    broadcast_strides(os, values_sizes, &mut vst);
    // Walk the output positions in order, tracking the values offset with
    // an odometer over the result shape.
    let mut idx = [0usize; MAX_RANK];
    let mut voff = 0usize;
    walk_index(sizes, indices, |_, off| {
        dst[off] = combine(dst[off], values[voff]);
        let mut d = r;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            voff += vst[d];
            if idx[d] < os[d] {
                break;
            }
            voff -= vst[d] * os[d];
            idx[d] = 0;
        }
    })
}

/// `aten::index_put(self, indices, values, accumulate=False)`: `dst`
/// already holds a copy of `self`; `values` (shape `values_sizes`)
/// broadcasts to the [`index_output_sizes`] shape and is written at the
/// indexed positions (with duplicates, the last write wins).
pub fn index_put<T: Copy, I: Element>(
    dst: &mut [T],
    sizes: &[usize],
    indices: &[IndexArg<'_, I>],
    values: &[T],
    values_sizes: &[usize],
) -> KernelResult {
    index_put_impl(dst, sizes, indices, values, values_sizes, |_, v| v)
}

/// `aten::index_put(..., accumulate=True)`: like [`index_put`] but
/// `dst[p] = add(dst[p], v)`, so duplicate indices accumulate.
pub fn index_put_accumulate<T: Copy, I: Element>(
    dst: &mut [T],
    sizes: &[usize],
    indices: &[IndexArg<'_, I>],
    values: &[T],
    values_sizes: &[usize],
    add: impl FnMut(T, T) -> T,
) -> KernelResult {
    index_put_impl(dst, sizes, indices, values, values_sizes, add)
}

/// `aten::masked_fill.Scalar`: `out = mask ? value : x`, with broadcast
/// strides for `x` and `mask` over `out_sizes` (see
/// [`crate::elementwise::zip`]).
pub fn masked_fill<T: Copy + Send + Sync>(
    out: &mut [T],
    out_sizes: &[usize],
    x: &[T],
    x_strides: &[usize],
    mask: &[bool],
    mask_strides: &[usize],
    value: T,
) {
    zip(out, out_sizes, x, x_strides, mask, mask_strides, |v, m| {
        if m {
            value
        } else {
            v
        }
    });
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    fn iota(n: usize) -> Vec<i32> {
        (0..n as i32).collect()
    }
    fn unravel(mut lin: usize, sizes: &[usize]) -> Vec<usize> {
        let mut idx = vec![0; sizes.len()];
        for d in (0..sizes.len()).rev() {
            idx[d] = lin % sizes[d];
            lin /= sizes[d];
        }
        idx
    }
    fn ravel(idx: &[usize], sizes: &[usize]) -> usize {
        idx.iter().zip(sizes).fold(0, |a, (&i, &s)| a * s + i)
    }

    #[test]
    fn embedding_and_index_select() {
        let w = [0.0f32, 0.1, 1.0, 1.1, 2.0, 2.1]; // [3, 2]
        let mut o = [0.0f32; 6];
        embedding(&w, 3, 2, &[2i64, 0, 2], &mut o).unwrap();
        assert_eq!(o, [2.0, 2.1, 0.0, 0.1, 2.0, 2.1]);
        assert_eq!(
            embedding(&w, 3, 2, &[3i32], &mut o),
            Err(KernelError::IndexOutOfRange { index: 3, size: 3 })
        );
        assert_eq!(
            embedding(&w, 3, 2, &[-1i64], &mut o),
            Err(KernelError::IndexOutOfRange { index: -1, size: 3 })
        );
        // index_select dim 1 of [[0,1,2],[3,4,5]] with [2,0]
        let x = iota(6);
        let mut o = [0; 4];
        index_select(&x, &[2, 3], 1, &[2u8, 0], &mut o).unwrap();
        assert_eq!(o, [2, 0, 5, 3]);
        let mut o = [0; 3];
        index_select(&x, &[2, 3], 0, &[1i64], &mut o).unwrap();
        assert_eq!(o, [3, 4, 5]);
        assert!(index_select(&x, &[2, 3], 0, &[2i64], &mut o).is_err());
        let mut s = [0; 2];
        index_select(&[7], &[], 0, &[0i64, 0], &mut s).unwrap();
        assert_eq!(s, [7, 7]);
    }

    #[test]
    fn gather_scatter() {
        // gather dim 1 of [[1,2],[3,4]] with [[0,0],[1,0]] -> [[1,1],[4,3]]
        let x = [1, 2, 3, 4];
        let mut o = [0; 4];
        gather(&x, &[2, 2], 1, &[0i64, 0, 1, 0], &[2, 2], &mut o).unwrap();
        assert_eq!(o, [1, 1, 4, 3]);
        // gather dim 0 with a smaller index [1,2]: [[1,0]] -> [3, 2]
        let mut o = [0; 2];
        gather(&x, &[2, 2], 0, &[1i64, 0], &[1, 2], &mut o).unwrap();
        assert_eq!(o, [3, 2]);
        assert_eq!(
            gather(&x, &[2, 2], 0, &[2i64, 0], &[1, 2], &mut o),
            Err(KernelError::IndexOutOfRange { index: 2, size: 2 })
        );
        // scatter into zeros [2,3] along dim 1: index [[2,0]], src [[9,8]]
        let mut d = [0; 6];
        scatter(&mut d, &[2, 3], 1, &[2i64, 0], &[1, 2], &[9, 8, 7, 6], &[2, 2]).unwrap();
        assert_eq!(d, [8, 0, 9, 0, 0, 0]);
        let mut d = [1; 3];
        scatter_add(&mut d, &[3], 0, &[0i64, 0, 2], &[3], &[5, 6, 7], &[3], |a, b| a + b).unwrap();
        assert_eq!(d, [12, 1, 8]);
        let mut d = [0; 3];
        scatter_value(&mut d, &[3], 0, &[1i32], &[1], 4).unwrap();
        assert_eq!(d, [0, 4, 0]);
        assert!(scatter_value(&mut d, &[3], 0, &[-1i32], &[1], 4).is_err());
    }

    #[test]
    fn advanced_index_shapes() {
        let s = |x: Option<([usize; MAX_RANK], usize)>| x.map(|(a, r)| a[..r].to_vec());
        // x[idx] with idx [2,3] on [5,4] -> [2,3,4]
        assert_eq!(s(index_output_sizes(&[5, 4], &[Some(&[2, 3])])), Some(vec![2, 3, 4]));
        // x[:, idx] on [5,4,6], idx [7] -> [5,7,6]
        assert_eq!(
            s(index_output_sizes(&[5, 4, 6], &[None, Some(&[7])])),
            Some(vec![5, 7, 6])
        );
        // adjacent pair broadcasting [2,1] & [3] on [5,4,6] dims 1,2 -> [5,2,3]
        assert_eq!(
            s(index_output_sizes(&[5, 4, 6], &[None, Some(&[2, 1]), Some(&[3])])),
            Some(vec![5, 2, 3])
        );
        // non-adjacent dims 0 and 2 -> B first: [3] + [4] -> [3,4]
        assert_eq!(
            s(index_output_sizes(&[5, 4, 6], &[Some(&[3]), None, Some(&[3])])),
            Some(vec![3, 4])
        );
        assert_eq!(s(index_output_sizes(&[5, 4], &[Some(&[2]), Some(&[3])])), None);
        assert_eq!(s(index_output_sizes(&[5], &[None])), Some(vec![5]));
    }

    type OwnedIdx = Option<(Vec<i64>, Vec<usize>)>;

    /// Naive advanced indexing reference via explicit coordinates.
    fn naive_index(x: &[i32], sizes: &[usize], idx: &[OwnedIdx]) -> (Vec<i32>, Vec<usize>) {
        let shapes: Vec<Option<&[usize]>> = idx.iter().map(|o| o.as_ref().map(|(_, s)| &s[..])).collect();
        let (os, r) = index_output_sizes(sizes, &shapes).unwrap();
        let os = os[..r].to_vec();
        let (b, br) = shapes
            .iter()
            .flatten()
            .fold(([0; MAX_RANK], 0), |(a, r), s| broadcast_sizes(&a[..r], s).unwrap());
        let b = b[..br].to_vec();
        let indexed: Vec<usize> = (0..idx.len()).filter(|&d| idx[d].is_some()).collect();
        let adjacent = indexed.windows(2).all(|w| w[1] == w[0] + 1);
        let rest: Vec<usize> = (0..sizes.len()).filter(|d| !indexed.contains(d)).collect();
        let mut out = vec![];
        for lin in 0..numel(&os) {
            let oi = unravel(lin, &os);
            let (bpos, restc): (Vec<usize>, Vec<usize>) = if adjacent && !indexed.is_empty() {
                let f = indexed[0];
                let pre = rest.iter().filter(|&&d| d < f).count();
                let bp = oi[pre..pre + br].to_vec();
                let mut rc = oi[..pre].to_vec();
                rc.extend_from_slice(&oi[pre + br..]);
                (bp, rc)
            } else {
                (oi[..br].to_vec(), oi[br..].to_vec())
            };
            let mut si = vec![0usize; sizes.len()];
            for (k, &d) in rest.iter().enumerate() {
                si[d] = restc[k];
            }
            for &d in &indexed {
                let (data, sh) = idx[d].as_ref().unwrap();
                // right-aligned broadcast read
                let mut c = vec![0; sh.len()];
                for k in 0..sh.len() {
                    let bk = bpos[br - sh.len() + k];
                    c[k] = if sh[k] == 1 { 0 } else { bk };
                }
                let v = data[ravel(&c, sh)];
                si[d] = if v < 0 {
                    (v + sizes[d] as i64) as usize
                } else {
                    v as usize
                };
            }
            let _ = &b;
            out.push(x[ravel(&si, sizes)]);
        }
        (out, os)
    }

    #[test]
    fn advanced_index_vs_naive() {
        let sizes = [3usize, 4, 5];
        let x = iota(60);
        let cases: Vec<Vec<OwnedIdx>> = vec![
            vec![Some((vec![2, -1, 0], vec![3]))],
            vec![None, Some((vec![3, 0, 1, -4], vec![2, 2]))],
            vec![None, Some((vec![0, 1], vec![2, 1])), Some((vec![4, -5, 2], vec![3]))],
            vec![Some((vec![0, 2], vec![2])), None, Some((vec![1, 3], vec![2]))],
            vec![Some((vec![1], vec![1])), None, Some((vec![0, 4, 3], vec![3, 1]))],
            vec![None, None, Some((vec![-1], vec![]))],
            vec![Some((vec![], vec![0]))],
        ];
        for c in &cases {
            let (want, os) = naive_index(&x, &sizes, c);
            let args: Vec<IndexArg<'_, i64>> = c.iter().map(|o| o.as_ref().map(|(d, s)| (&d[..], &s[..]))).collect();
            let mut out = vec![-1; numel(&os)];
            index(&x, &sizes, &args, &mut out).unwrap();
            assert_eq!(out, want, "{c:?}");
        }
        // rank 0 self with no indices -> copy
        let mut o = [0];
        index::<i32, i64>(&[5], &[], &[], &mut o).unwrap();
        assert_eq!(o, [5]);
        // out of range and wrap
        let mut o = [0; 1];
        assert_eq!(
            index(&x, &sizes, &[Some((&[3i64][..], &[1usize][..]))], &mut o[..]),
            Err(KernelError::IndexOutOfRange { index: 3, size: 3 })
        );
        assert_eq!(
            index(&x, &sizes, &[Some((&[-4i64][..], &[1usize][..]))], &mut o[..]),
            Err(KernelError::IndexOutOfRange { index: -4, size: 3 })
        );
        assert_eq!(
            index(
                &x,
                &sizes,
                &[
                    Some((&[0i64, 1][..], &[2usize][..])),
                    Some((&[0i64, 1, 2][..], &[3usize][..]))
                ],
                &mut o[..]
            ),
            Err(KernelError::ShapeMismatch)
        );
    }

    /// Counts from an input (tests/tests/api/model_api.rs found the sum
    /// overflowing) are an error, never a wrapped length.
    #[test]
    fn repeat_counts_that_overflow_are_an_error() {
        assert_eq!(repeat_count(&[2i64, 3]), Ok(5));
        assert_eq!(
            repeat_count(&[-1i64]),
            Err(KernelError::IndexOutOfRange { index: -1, size: 0 })
        );
        assert_eq!(repeat_count(&[i64::MAX, i64::MAX, 2]), Err(KernelError::ShapeMismatch));
        // A count past a 32-bit usize is too long there, not truncated.
        assert_eq!(repeat_count(&[i64::MAX]).is_ok(), usize::BITS == 64);
    }

    #[test]
    fn index_put_and_masked_fill() {
        // x = zeros [3,2]; x[[0, 2, 0]] = [[1,2]] (broadcast over rows)
        let mut d = [0; 6];
        let idx = [0i64, 2, 0];
        index_put(&mut d, &[3, 2], &[Some((&idx[..], &[3usize][..]))], &[1, 2], &[2]).unwrap();
        assert_eq!(d, [1, 2, 0, 0, 1, 2]);
        let mut d = [0; 6];
        index_put_accumulate(
            &mut d,
            &[3, 2],
            &[Some((&idx[..], &[3usize][..]))],
            &[1, 2],
            &[1, 2],
            |a, b| a + b,
        )
        .unwrap();
        assert_eq!(d, [2, 4, 0, 0, 1, 2]);
        // x[:, [-1]] = 9 (scalar value)
        let mut d = [0; 6];
        index_put(&mut d, &[3, 2], &[None, Some((&[-1i64][..], &[1usize][..]))], &[9], &[]).unwrap();
        assert_eq!(d, [0, 9, 0, 9, 0, 9]);
        // values not broadcastable to [3,2]
        assert_eq!(
            index_put(&mut d, &[3, 2], &[Some((&idx[..], &[3usize][..]))], &[1, 2, 3], &[3]),
            Err(KernelError::ShapeMismatch)
        );
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let mut o = [0.0f32; 4];
        masked_fill(&mut o, &[2, 2], &x, &[2, 1], &[true, false], &[0, 1], -1.0);
        assert_eq!(o, [-1.0, 2.0, -1.0, 4.0]);
    }
}
