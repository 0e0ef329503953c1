//! Data movement: strided copies, permutes, concatenation, slicing,
//! padding, dim-order conversion and the like.
//!
//! Inputs are contiguous row-major slices with their logical `sizes`; the
//! output `dst` is contiguous with the output shape the compiler computed
//! (helpers such as [`slice_output_len`] and [`arange_len`] give the
//! PyTorch rules). All functions handle rank 0 and zero-size tensors.
//! The core is a signed-stride gather ([`strided_copy_signed`]) that
//! coalesces dims and copies contiguous runs with slice copies.
use crate::num::{contiguous_strides, numel, Element};
use crate::{KernelError, KernelResult, MAX_RANK};
use core::ops::Range;

/// Calls `f(src_off, dst_off, len, src_inner_stride, dst_inner_stride)` for
/// every innermost run of a copy of a box `sizes`, where element `idx` of
/// the box is at `src_base + idx·src_strides` and `dst_base + idx·dst_strides`.
/// Dims of size 1 are dropped and adjacent dims merged where both stride
/// sets allow it. Nothing is called for an empty box.
#[inline(always)]
fn for_rows(
    sizes: &[usize],
    src_strides: &[isize],
    src_base: isize,
    dst_strides: &[isize],
    dst_base: isize,
    mut f: impl FnMut(usize, usize, usize, isize, isize),
) {
    if sizes.contains(&0) {
        return;
    }
    // Coalesce, innermost first.
    let mut cs = [0usize; MAX_RANK];
    let mut ca = [0isize; MAX_RANK];
    let mut cb = [0isize; MAX_RANK];
    let mut g = 0usize;
    for d in (0..sizes.len()).rev() {
        let sz = sizes[d];
        if sz == 1 {
            continue;
        }
        if g > 0 {
            let n = cs[g - 1] as isize;
            if src_strides[d] == ca[g - 1] * n && dst_strides[d] == cb[g - 1] * n {
                cs[g - 1] *= sz;
                continue;
            }
        }
        cs[g] = sz;
        ca[g] = src_strides[d];
        cb[g] = dst_strides[d];
        g += 1;
    }
    if g == 0 {
        f(src_base as usize, dst_base as usize, 1, 1, 1);
        return;
    }
    // cs/ca/cb are innermost-first: index 0 is the inner run.
    let len = cs[0];
    let mut idx = [0usize; MAX_RANK];
    let (mut sa, mut sb) = (src_base, dst_base);
    loop {
        f(sa as usize, sb as usize, len, ca[0], cb[0]);
        let mut d = 1;
        loop {
            if d == g {
                return;
            }
            idx[d] += 1;
            sa += ca[d];
            sb += cb[d];
            if idx[d] < cs[d] {
                break;
            }
            sa -= ca[d] * cs[d] as isize;
            sb -= cb[d] * cs[d] as isize;
            idx[d] = 0;
            d += 1;
        }
    }
}

/// Strided box copy with a per-element map, the engine of this module.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn copy_box_map<A: Copy, O>(
    src: &[A],
    src_base: isize,
    src_strides: &[isize],
    dst: &mut [O],
    dst_base: isize,
    dst_strides: &[isize],
    sizes: &[usize],
    mut f: impl FnMut(A) -> O,
) {
    for_rows(
        sizes,
        src_strides,
        src_base,
        dst_strides,
        dst_base,
        |a, b, len, sa, sb| {
            if sa == 1 && sb == 1 {
                for (o, &v) in dst[b..b + len].iter_mut().zip(&src[a..a + len]) {
                    *o = f(v);
                }
            } else {
                for k in 0..len as isize {
                    dst[(b as isize + k * sb) as usize] = f(src[(a as isize + k * sa) as usize]);
                }
            }
        },
    );
}

#[inline(always)]
fn contiguous_istrides(sizes: &[usize]) -> [isize; MAX_RANK] {
    let mut s = [0usize; MAX_RANK];
    contiguous_strides(sizes, &mut s);
    s.map(|v| v as isize)
}

/// General N-d gather into a contiguous `dst` of shape `sizes` with signed
/// strides: element `idx` reads `src[base + Σ idx[d]·strides[d]]`. Serves
/// `flip`-like views and any view with an offset.
pub fn strided_copy_signed<T: Copy>(src: &[T], base: usize, sizes: &[usize], strides: &[isize], dst: &mut [T]) {
    let ds = contiguous_istrides(sizes);
    copy_box_map(src, base as isize, strides, dst, 0, &ds[..sizes.len()], sizes, |v| v);
}

/// General N-d gather-copy into contiguous `dst` (`permute_copy`,
/// `expand_copy`, `transpose_copy`, `as_strided_copy` with offset 0, `clone`
/// of a view, dim-order conversion): `dst` has shape `src_sizes`; element
/// `idx` reads `src[Σ idx[d]·src_strides[d]]` (strides in elements, 0 for
/// broadcast dims).
pub fn strided_copy<T: Copy>(src: &[T], src_sizes: &[usize], src_strides: &[usize], dst: &mut [T]) {
    strided_copy_map(src, src_sizes, src_strides, dst, |v| v);
}

/// [`strided_copy`] with a per-element conversion `f` (`_to_copy` with a
/// dtype change, `to_dim_order_copy`).
pub fn strided_copy_map<A: Copy, O>(
    src: &[A],
    src_sizes: &[usize],
    src_strides: &[usize],
    dst: &mut [O],
    f: impl FnMut(A) -> O,
) {
    let mut ss = [0isize; MAX_RANK];
    for (d, s) in src_strides.iter().enumerate() {
        ss[d] = *s as isize;
    }
    let r = src_sizes.len();
    let ds = contiguous_istrides(src_sizes);
    copy_box_map(src, 0, &ss[..r], dst, 0, &ds[..r], src_sizes, f);
}

/// Fewest bytes of a [`copy`] that threads split.
const SPLIT_COPY_BYTES: usize = 64 << 10;

/// Whether a copy, fill or permutation of `len` elements of `T` splits in
/// bands across threads.
fn copy_bands<T>(len: usize) -> bool {
    len.saturating_mul(core::mem::size_of::<T>().max(1)) >= SPLIT_COPY_BYTES && crate::parallel::local_bands()
}

/// `out = x` (equal lengths), in bands across threads when it is large.
/// On two threads, a copy on one thread of what both just wrote (an
/// `unsqueeze_copy` after a product split in bands of rows) waits for half
/// of it to come from the other core: 393 KB took 16 µs on one thread and
/// 73 µs on two. In bands, each thread mostly copies what it wrote.
pub fn copy<T: Copy + Send + Sync>(x: &[T], out: &mut [T]) {
    assert_eq!(x.len(), out.len(), "a copy between slices of different lengths");
    let grain = crate::parallel::band_grain(1, core::mem::size_of::<T>());
    crate::parallel::for_each_band(out, x.len(), 1, grain, copy_bands::<T>(x.len()), &|items, band| {
        band.copy_from_slice(&x[items]);
    });
}

/// `aten::permute_copy(dims)`: `dst` has sizes `sizes[dims[k]]`; `dims` is
/// a permutation of `0..sizes.len()` (non-negative). Large copies run in
/// bands of the output across threads, as [`copy`] does.
pub fn permute_copy<T: Copy + Send + Sync>(src: &[T], sizes: &[usize], dims: &[usize], dst: &mut [T]) {
    let size = core::mem::size_of::<T>().max(1);
    let split_up = copy_bands::<T>(dst.len());
    if let Some((batch, rows, cols)) = batched_transpose(sizes, dims) {
        if batch == 1 {
            // One matrix (an NCHW image to NHWC): bands of its output rows
            // (pixels), so that each thread writes the rows that the next
            // layer's part on that thread reads.
            let grain = crate::parallel::band_grain(rows, size);
            crate::parallel::for_each_band(dst, cols, rows, grain, split_up, &|band, piece| {
                transpose_columns(src, rows, cols, band, piece);
            });
            return;
        }
        let matrix = rows * cols;
        let grain = crate::parallel::band_grain(matrix, size);
        crate::parallel::for_each_band(dst, batch, matrix, grain, split_up, &|b, band| {
            transpose_blocks(&src[b.start * matrix..], b.len(), rows, cols, band);
        });
        return;
    }
    let r = sizes.len();
    let ins = contiguous_istrides(sizes);
    let mut os = [0usize; MAX_RANK];
    let mut st = [0isize; MAX_RANK];
    for k in 0..r {
        os[k] = sizes[dims[k]];
        st[k] = ins[dims[k]];
    }
    let ds = contiguous_istrides(&os[..r]);
    if r == 0 {
        return copy_box_map(src, 0, &[], dst, 0, &[], &[], |v| v);
    }
    // Bands of the output's outermost dim of more than one element.
    let (dim, row_len) = crate::parallel::outer_rows(&os[..r]).unwrap_or((0, os[1..r].iter().product()));
    let grain = crate::parallel::band_grain(row_len, size);
    crate::parallel::for_each_band(dst, os[dim], row_len, grain, split_up, &|rows, band| {
        let mut sizes = os;
        sizes[dim] = rows.len();
        let first = rows.start as isize * st[dim];
        copy_box_map(src, first, &st[..r], band, 0, &ds[..r], &sizes[..r], |v| v);
    });
}

/// A chain of views and permutations as one copy (see the compiler's
/// `passes::gathers`): `dst` (contiguous, of shape `sizes`) takes element
/// `offset + Σ idx[d]·strides[d]` of `src`. Large copies run in bands of
/// the output across threads, as [`copy`] does. Where the output's
/// innermost dim does not run along `src`, the reads follow a dim that
/// does: two to four runs side by side are interleaved (a channel
/// shuffle's halves), longer ones transposed in tiles (an NHWC image's
/// channels into NCHW).
pub fn gather<T: Copy + Send + Sync>(src: &[T], offset: usize, sizes: &[usize], strides: &[usize], dst: &mut [T]) {
    gather_then(src, offset, sizes, strides, dst, &|_| {});
}

/// [`gather`] of `i8` elements, each then looked up in `table` (at its
/// value + 128): a chain that requantizes int8 elements as it moves them.
pub fn gather_table(src: &[i8], offset: usize, sizes: &[usize], strides: &[usize], table: &[i8; 256], dst: &mut [i8]) {
    gather_then(src, offset, sizes, strides, dst, &|band| {
        for v in band {
            *v = table[(*v as i32 + 128) as usize];
        }
    });
}

/// [`gather`], with `then` run on each band of `dst` as it is written.
fn gather_then<T: Copy + Send + Sync>(
    src: &[T],
    offset: usize,
    sizes: &[usize],
    strides: &[usize],
    dst: &mut [T],
    then: &(dyn Fn(&mut [T]) + Sync),
) {
    assert!(
        sizes.len() <= MAX_RANK && strides.len() == sizes.len(),
        "a gather of rank {} with {} strides",
        sizes.len(),
        strides.len()
    );
    let total = sizes.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
    let dst = &mut dst[..total.expect("a gather of more elements than a usize counts")];
    if dst.is_empty() {
        return;
    }
    // Every read in bounds, checked once: the transposing tiles rely on it.
    let last = sizes.iter().zip(strides).try_fold(offset, |a, (&n, &s)| {
        (n - 1).checked_mul(s).and_then(|d| a.checked_add(d))
    });
    assert!(
        last.is_some_and(|l| l < src.len()),
        "a gather reads past the end of its source"
    );
    let total = dst.len();
    // Dims of size 1 dropped, and neighbours whose reads run on merged.
    let (mut sz, mut st) = ([1usize; MAX_RANK], [0isize; MAX_RANK]);
    let mut r = 0;
    for (&n, &s) in sizes.iter().zip(strides) {
        if n == 1 {
            continue;
        }
        if r > 0 && st[r - 1] == s as isize * n as isize {
            sz[r - 1] *= n;
            st[r - 1] = s as isize;
            continue;
        }
        (sz[r], st[r]) = (n, s as isize);
        r += 1;
    }
    let ds = contiguous_istrides(&sz[..r]);
    let size = core::mem::size_of::<T>().max(1);
    let row_len: usize = sz[1..r.max(1)].iter().product();
    let grain = crate::parallel::band_grain(row_len, size);
    let rows = if r == 0 { 1 } else { sz[0] };
    crate::parallel::for_each_band(dst, rows, row_len, grain, copy_bands::<T>(total), &|band_rows, band| {
        let mut box_sizes = sz;
        box_sizes[0] = band_rows.len();
        let first = offset as isize + band_rows.start as isize * st[0];
        gather_box(src, first, &box_sizes[..r], &st[..r], band, &ds[..r]);
        then(band);
    });
}

/// [`gather`]'s copy of one box into `dst` (`ds` its strides, the
/// innermost 1).
fn gather_box<T: Copy>(src: &[T], first: isize, sizes: &[usize], st: &[isize], dst: &mut [T], ds: &[isize]) {
    let r = sizes.len();
    if r >= 2 && st[r - 1] != 1 {
        let (q, k) = (r - 1, sizes[r - 1]);
        let mut outer = [1usize; MAX_RANK];
        outer[..r].copy_from_slice(sizes);
        outer[q] = 1;
        if (2..=4).contains(&k) && st[q - 1] == 1 && ds[q - 1] == k as isize {
            // Groups of the two innermost dims: `k` runs of `n` elements,
            // `step` apart, interleaved.
            let (n, step) = (sizes[q - 1], st[q] as usize);
            outer[q - 1] = 1;
            return for_rows(&outer[..r], st, first, ds, 0, |a, b, len, sa, sb| {
                for i in 0..len as isize {
                    let (a, b) = ((a as isize + i * sa) as usize, (b as isize + i * sb) as usize);
                    let d = &mut dst[b..][..n * k];
                    match k {
                        2 => interleave_runs::<T, 2>(src, a, step, d),
                        3 => interleave_runs::<T, 3>(src, a, step, d),
                        _ => interleave_runs::<T, 4>(src, a, step, d),
                    }
                }
            });
        }
        if let Some(p) = (0..q).find(|&p| st[p] == 1 && sizes[p] >= 4) {
            // A transposition: for each place in the other dims, the
            // `k × sizes[p]` block of rows `st[q]` apart.
            outer[p] = 1;
            let (cols, s_stride, d_stride) = (sizes[p], st[q] as usize, ds[p] as usize);
            return for_rows(&outer[..r], st, first, ds, 0, |a, b, len, sa, sb| {
                for i in 0..len as isize {
                    let (a, b) = ((a as isize + i * sa) as usize, (b as isize + i * sb) as usize);
                    crate::transpose::strided(src, a, s_stride, k, cols, dst, b, d_stride);
                }
            });
        }
    }
    copy_box_map(src, first, st, dst, 0, ds, sizes, |v| v)
}

/// `d[i·R + j] = s[a + j·step + i]`: `R` runs of `d.len() / R` elements
/// of `s`, interleaved.
#[inline(always)]
fn interleave_runs<T: Copy, const R: usize>(s: &[T], a: usize, step: usize, d: &mut [T]) {
    let n = d.len() / R;
    let runs: [&[T]; R] = core::array::from_fn(|j| &s[a + j * step..][..n]);
    if R == 2 {
        // Zipped, without indices: the stores vectorize as one interleaved
        // group.
        for ((o, &x), &y) in d.chunks_exact_mut(2).zip(runs[0]).zip(runs[1]) {
            o[0] = x;
            o[1] = y;
        }
        return;
    }
    for (i, out) in d.chunks_exact_mut(R).enumerate() {
        for (j, o) in out.iter_mut().enumerate() {
            *o = runs[j][i];
        }
    }
}

/// When `dims` keeps some leading dims and swaps the two groups of the
/// rest (NCHW → NHWC is `[0, 2, 3, 1]`), the permutation is a batch of
/// `rows × cols` matrix transposes: `(batch, rows, cols)`.
fn batched_transpose(sizes: &[usize], dims: &[usize]) -> Option<(usize, usize, usize)> {
    let r = sizes.len();
    let lead = dims.iter().enumerate().take_while(|&(k, &d)| k == d).count();
    if lead + 2 > r {
        return None;
    }
    // dims[lead..] must be [split, .., r - 1, lead, .., split - 1].
    let split = dims[lead];
    let rotated = (lead..r).all(|k| {
        let want = if k < lead + (r - split) {
            split + (k - lead)
        } else {
            lead + (k - lead - (r - split))
        };
        dims[k] == want
    });
    if !rotated || split <= lead {
        return None;
    }
    let prod = |d: &[usize]| d.iter().product::<usize>();
    Some((prod(&sizes[..lead]), prod(&sizes[lead..split]), prod(&sizes[split..])))
}

/// `batch` transposes of `rows × cols` matrices.
fn transpose_blocks<T: Copy>(src: &[T], batch: usize, rows: usize, cols: usize, dst: &mut [T]) {
    let size = rows * cols;
    for b in 0..batch {
        transpose_columns(
            &src[b * size..][..size],
            rows,
            cols,
            0..cols,
            &mut dst[b * size..][..size],
        );
    }
}

/// Columns `band` of a `rows × cols` matrix `s`, transposed into `d`: the
/// rows `band` of the transpose (a few rows are simply interleaved).
fn transpose_columns<T: Copy>(s: &[T], rows: usize, cols: usize, band: Range<usize>, d: &mut [T]) {
    let d = &mut d[..band.len() * rows];
    // A few long rows (the channels of an NCHW image): read them side by
    // side, write the output in order.
    match rows {
        1 => d.copy_from_slice(&s[band]),
        2 => interleave::<T, 2>(s, cols, band, d),
        3 => interleave::<T, 3>(s, cols, band, d),
        4 => interleave::<T, 4>(s, cols, band, d),
        _ => crate::transpose::columns(s, rows, cols, band, d),
    }
}

/// Interleaves columns `band` of the `R` rows of `s` (`cols` each) into
/// `d`: groups of a fixed size, which the compiler turns into vector
/// shuffles.
fn interleave<T: Copy, const R: usize>(s: &[T], cols: usize, band: Range<usize>, d: &mut [T]) {
    let rows: [&[T]; R] = core::array::from_fn(|r| &s[r * cols..][band.clone()]);
    for (col, out) in d[..R * band.len()].chunks_exact_mut(R).enumerate() {
        for (r, o) in out.iter_mut().enumerate() {
            *o = rows[r][col];
        }
    }
}

/// `aten::transpose_copy.int(dim0, dim1)` (and `t_copy`): swaps two dims.
pub fn transpose_copy<T: Copy + Send + Sync>(src: &[T], sizes: &[usize], dim0: usize, dim1: usize, dst: &mut [T]) {
    let mut p: [usize; MAX_RANK] = core::array::from_fn(|k| k);
    p.swap(dim0, dim1);
    permute_copy(src, sizes, &p[..sizes.len()], dst);
}

/// `aten::expand_copy` / broadcast materialization: `src` of shape
/// `src_sizes` broadcast (right-aligned) to `out_sizes` (with `-1`
/// already resolved by the compiler).
pub fn expand_copy<T: Copy>(src: &[T], src_sizes: &[usize], out_sizes: &[usize], dst: &mut [T]) {
    let mut st = [0usize; MAX_RANK];
    crate::elementwise::broadcast_strides(out_sizes, src_sizes, &mut st);
    strided_copy(src, out_sizes, &st[..out_sizes.len()], dst);
}

/// `aten::repeat(repeats)`: `repeats.len() >= sizes.len()`; the input is
/// right-aligned (missing leading dims are 1); output dim `k` has size
/// `size[k] * repeats[k]`.
pub fn repeat<T: Copy>(src: &[T], sizes: &[usize], repeats: &[usize], dst: &mut [T]) {
    let r = repeats.len();
    let lead = r - sizes.len();
    let ins = contiguous_istrides(sizes);
    let mut ps = [1usize; MAX_RANK];
    let mut pst = [0isize; MAX_RANK];
    ps[lead..r].copy_from_slice(sizes);
    pst[lead..r].copy_from_slice(&ins[..sizes.len()]);
    if 2 * r <= MAX_RANK {
        // Output dim k viewed as [repeats[k], size[k]]: the repeat index has
        // source stride 0.
        let mut vs = [0usize; MAX_RANK];
        let mut vst = [0isize; MAX_RANK];
        for k in 0..r {
            vs[2 * k] = repeats[k];
            vs[2 * k + 1] = ps[k];
            vst[2 * k + 1] = pst[k];
        }
        let ds = contiguous_istrides(&vs[..2 * r]);
        copy_box_map(src, 0, &vst[..2 * r], dst, 0, &ds[..2 * r], &vs[..2 * r], |v| v);
    } else {
        // Rare high-rank case: per element.
        let mut os = [0usize; MAX_RANK];
        for k in 0..r {
            os[k] = ps[k] * repeats[k];
        }
        for (lin, o) in dst.iter_mut().enumerate().take(numel(&os[..r])) {
            let mut rem = lin;
            let mut off = 0isize;
            for k in (0..r).rev() {
                let i = rem % os[k];
                rem /= os[k];
                off += (i % ps[k]) as isize * pst[k];
            }
            *o = src[off as usize];
        }
    }
}

/// `aten::cat(tensors, dim)`: `inputs[k]` has shape `shapes[k]`; inputs of
/// the legacy shape `[0]` are skipped, as PyTorch does. All other inputs
/// agree on every dim but `dim`.
pub fn cat<T: Copy>(inputs: &[&[T]], shapes: &[&[usize]], dim: usize, dst: &mut [T]) {
    let skip = |s: &[usize]| s.len() == 1 && s[0] == 0;
    let Some(first) = shapes.iter().find(|s| !skip(s)) else {
        return;
    };
    if first.is_empty() {
        // Rank 0 cannot be concatenated (PyTorch rejects it); copy through.
        if let (Some(x), Some(d)) = (inputs.first(), dst.first_mut()) {
            *d = x[0];
        }
        return;
    }
    let outer: usize = first[..dim].iter().product();
    let inner: usize = first[dim + 1..].iter().product();
    let mut o = 0;
    for i in 0..outer {
        for (x, s) in inputs.iter().zip(shapes) {
            if skip(s) {
                continue;
            }
            let chunk = s[dim] * inner;
            dst[o..o + chunk].copy_from_slice(&x[i * chunk..(i + 1) * chunk]);
            o += chunk;
        }
    }
}

/// `aten::stack(tensors, dim)`: all inputs have shape `sizes`; the output
/// has a new dim of size `inputs.len()` inserted at `dim`.
pub fn stack<T: Copy>(inputs: &[&[T]], sizes: &[usize], dim: usize, dst: &mut [T]) {
    let outer: usize = sizes[..dim].iter().product();
    let chunk: usize = sizes[dim..].iter().product();
    let mut o = 0;
    for i in 0..outer {
        for x in inputs {
            dst[o..o + chunk].copy_from_slice(&x[i * chunk..(i + 1) * chunk]);
            o += chunk;
        }
    }
}

/// `aten::split_with_sizes_copy(split_sizes, dim)`: `outs[k]` receives the
/// part of size `split_sizes[k]` along `dim` (`split_sizes` sums to
/// `sizes[dim]`).
pub fn split_with_sizes_copy<T: Copy>(
    src: &[T],
    sizes: &[usize],
    dim: usize,
    split_sizes: &[usize],
    outs: &mut [&mut [T]],
) {
    split_impl(src, sizes, dim, split_sizes.len(), |k| split_sizes[k], outs);
}

/// `aten::split_copy.Tensor(split_size, dim)`: equal parts of
/// `split_size` along `dim`, the last one smaller if needed;
/// `outs.len() = ceil(sizes[dim] / split_size)` (at least 1).
/// Also serves `unbind_copy` (`split_size` 1).
pub fn split_copy<T: Copy>(src: &[T], sizes: &[usize], dim: usize, split_size: usize, outs: &mut [&mut [T]]) {
    let n = sizes.get(dim).copied().unwrap_or(1);
    let parts = outs.len();
    split_impl(
        src,
        sizes,
        dim,
        parts,
        |k| n.saturating_sub(k * split_size).min(split_size),
        outs,
    );
}

fn split_impl<T: Copy>(
    src: &[T],
    sizes: &[usize],
    dim: usize,
    parts: usize,
    part: impl Fn(usize) -> usize,
    outs: &mut [&mut [T]],
) {
    let n = sizes.get(dim).copied().unwrap_or(1);
    let outer: usize = sizes[..dim.min(sizes.len())].iter().product();
    let inner: usize = sizes.get(dim + 1..).map_or(1, |s| s.iter().product());
    for i in 0..outer {
        let mut start = i * n * inner;
        for (k, out) in outs.iter_mut().enumerate().take(parts) {
            let chunk = part(k) * inner;
            out[i * chunk..(i + 1) * chunk].copy_from_slice(&src[start..start + chunk]);
            start += chunk;
        }
    }
}

/// PyTorch's clamping of `slice(start, end)` bounds for a dim of `size`:
/// `None` start is 0, `None` end is `size`; negatives wrap once by `size`,
/// then both clamp to `[0, size]` and `end` to at least `start`. Returns
/// `(start, end)`.
pub const fn slice_bounds(size: usize, start: Option<i64>, end: Option<i64>) -> (usize, usize) {
    const fn fix(v: i64, n: i64) -> i64 {
        let v = if v < 0 { v + n } else { v };
        if v < 0 {
            0
        } else if v > n {
            n
        } else {
            v
        }
    }
    let n = size as i64;
    let s = match start {
        Some(v) => fix(v, n),
        None => 0,
    };
    let e = match end {
        Some(v) => fix(v, n),
        None => n,
    };
    let e = if e < s { s } else { e };
    (s as usize, e as usize)
}

/// Output length of `aten::slice_copy.Tensor(dim, start, end, step)` for a
/// dim of `size`: `ceil((end - start) / step)` after [`slice_bounds`];
/// `None` when `step <= 0` (PyTorch: "slice step must be positive").
pub const fn slice_output_len(size: usize, start: Option<i64>, end: Option<i64>, step: i64) -> Option<usize> {
    if step <= 0 {
        return None;
    }
    let (s, e) = slice_bounds(size, start, end);
    let step = step as usize;
    Some((e - s).div_ceil(step))
}

/// `aten::slice_copy.Tensor(dim, start, end, step)`: `dst` has the input
/// shape with `dim` of length [`slice_output_len`]. `Err(ShapeMismatch)`
/// for `step <= 0`.
pub fn slice_copy<T: Copy>(
    src: &[T],
    sizes: &[usize],
    dim: usize,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
    dst: &mut [T],
) -> KernelResult {
    let Some(len) = slice_output_len(sizes[dim], start, end, step) else {
        return Err(KernelError::ShapeMismatch);
    };
    let (s, _) = slice_bounds(sizes[dim], start, end);
    let r = sizes.len();
    let mut st = contiguous_istrides(sizes);
    let base = s as isize * st[dim];
    st[dim] *= step as isize;
    let mut os = [0usize; MAX_RANK];
    os[..r].copy_from_slice(sizes);
    os[dim] = len;
    let ds = contiguous_istrides(&os[..r]);
    copy_box_map(src, base, &st[..r], dst, 0, &ds[..r], &os[..r], |v| v);
    Ok(())
}

/// Wraps a possibly negative index into `0..size`, or reports it.
#[inline(always)]
pub fn wrap_index(index: i64, size: usize) -> Result<usize, KernelError> {
    let n = size as i64;
    let i = if index < 0 { index + n } else { index };
    if i < 0 || i >= n {
        Err(KernelError::IndexOutOfRange { index, size })
    } else {
        Ok(i as usize)
    }
}

/// `aten::select_copy.int(dim, index)`: `dst` has the input shape without
/// `dim`; a negative `index` wraps; out of range → `IndexOutOfRange`.
pub fn select_copy<T: Copy>(src: &[T], sizes: &[usize], dim: usize, index: i64, dst: &mut [T]) -> KernelResult {
    let i = wrap_index(index, sizes[dim])?;
    let outer: usize = sizes[..dim].iter().product();
    let inner: usize = sizes[dim + 1..].iter().product();
    let n = sizes[dim];
    for o in 0..outer {
        let s = (o * n + i) * inner;
        dst[o * inner..(o + 1) * inner].copy_from_slice(&src[s..s + inner]);
    }
    Ok(())
}

/// `aten::select_scatter(src, dim, index)`: `dst` already holds a copy of
/// `self` (shape `sizes`); its `select(dim, index)` receives `src` (shape
/// `sizes` without `dim`). A negative `index` wraps; out of range →
/// `IndexOutOfRange`.
pub fn select_scatter<T: Copy>(dst: &mut [T], sizes: &[usize], dim: usize, index: i64, src: &[T]) -> KernelResult {
    let i = wrap_index(index, sizes[dim])?;
    let outer: usize = sizes[..dim].iter().product();
    let inner: usize = sizes[dim + 1..].iter().product();
    let n = sizes[dim];
    for o in 0..outer {
        let d = (o * n + i) * inner;
        dst[d..d + inner].copy_from_slice(&src[o * inner..(o + 1) * inner]);
    }
    Ok(())
}

/// `aten::slice_scatter(src, dim, start, end, step)`: `dst` already holds
/// a copy of `self` (shape `sizes`); its `slice(dim, start, end, step)`
/// receives `src` (the input shape with `dim` of length
/// [`slice_output_len`]). `Err(ShapeMismatch)` for `step <= 0`.
pub fn slice_scatter<T: Copy>(
    dst: &mut [T],
    sizes: &[usize],
    dim: usize,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
    src: &[T],
) -> KernelResult {
    let Some(len) = slice_output_len(sizes[dim], start, end, step) else {
        return Err(KernelError::ShapeMismatch);
    };
    let (s, _) = slice_bounds(sizes[dim], start, end);
    let r = sizes.len();
    let mut st = contiguous_istrides(sizes);
    let base = s as isize * st[dim];
    st[dim] *= step as isize;
    let mut ss = [0usize; MAX_RANK];
    ss[..r].copy_from_slice(sizes);
    ss[dim] = len;
    let src_st = contiguous_istrides(&ss[..r]);
    copy_box_map(src, 0, &src_st[..r], dst, base, &st[..r], &ss[..r], |v| v);
    Ok(())
}

/// [`slice_scatter`] of a window known only at run time: `src` has the
/// live sizes `src_sizes`, which must be the slice's (the input's sizes,
/// `dim` of length [`slice_output_len`]), as ATen requires; otherwise
/// `Err(ShapeMismatch)`, and `dst` is left as it was. `window` is
/// `(start, end, step)`.
pub fn slice_scatter_live<T: Copy>(
    dst: &mut [T],
    sizes: &[usize],
    dim: usize,
    window: (Option<i64>, Option<i64>, i64),
    src: &[T],
    src_sizes: &[usize],
) -> KernelResult {
    let (start, end, step) = window;
    let Some(len) = slice_output_len(sizes[dim], start, end, step) else {
        return Err(KernelError::ShapeMismatch);
    };
    let fits = src_sizes.len() == sizes.len()
        && (0..sizes.len()).all(|k| src_sizes[k] == if k == dim { len } else { sizes[k] })
        && src.len() == src_sizes.iter().product::<usize>();
    if !fits {
        return Err(KernelError::ShapeMismatch);
    }
    slice_scatter(dst, sizes, dim, start, end, step, src)
}

/// `aten::flip(dims)`: reverses the listed (non-negative) dims.
pub fn flip<T: Copy>(src: &[T], sizes: &[usize], dims: &[usize], dst: &mut [T]) {
    let r = sizes.len();
    let mut st = contiguous_istrides(sizes);
    let mut base = 0isize;
    let mut flipped = 0u32;
    for &d in dims {
        if flipped & (1 << d) != 0 || sizes[d] == 0 {
            continue;
        }
        flipped |= 1 << d;
        base += (sizes[d] as isize - 1) * st[d];
        st[d] = -st[d];
    }
    strided_copy_signed(src, base as usize, sizes, &st[..r], dst);
}

/// `aten::roll(shifts, dims)`: element `i` along each rolled dim moves to
/// `(i + shift) mod size`. With `dims` empty the input is rolled as a
/// flattened 1-d tensor by `shifts[0]`.
pub fn roll<T: Copy>(src: &[T], sizes: &[usize], shifts: &[i64], dims: &[usize], dst: &mut [T]) {
    let n = src.len().min(dst.len());
    if n == 0 {
        return;
    }
    if dims.is_empty() {
        let s = shifts.first().copied().unwrap_or(0).rem_euclid(n as i64) as usize;
        dst[s..n].copy_from_slice(&src[..n - s]);
        dst[..s].copy_from_slice(&src[n - s..n]);
        return;
    }
    let r = sizes.len();
    if r == 0 {
        dst[0] = src[0];
        return;
    }
    let mut sh = [0usize; MAX_RANK];
    for (&d, &s) in dims.iter().zip(shifts) {
        sh[d] = (sh[d] as i64 + s).rem_euclid(sizes[d] as i64) as usize;
    }
    let st = contiguous_istrides(sizes);
    // Output index j along dim d reads input (j - shift) mod size. Per
    // output row: map the outer coordinates, then copy the row in two
    // rotated pieces.
    let last = r - 1;
    let len = sizes[last];
    let rows = n / len;
    let s_last = sh[last];
    for row in 0..rows {
        let mut rem = row;
        let mut off = 0usize;
        for d in (0..last).rev() {
            let j = rem % sizes[d];
            rem /= sizes[d];
            let i = (j + sizes[d] - sh[d]) % sizes[d];
            off += i * st[d] as usize;
        }
        let o = row * len;
        dst[o + s_last..o + len].copy_from_slice(&src[off..off + len - s_last]);
        dst[o..o + s_last].copy_from_slice(&src[off + len - s_last..off + len]);
    }
}

/// Output size of one dim under `constant_pad_nd`, or `None` if negative.
pub const fn pad_output_size(size: usize, before: i64, after: i64) -> Option<usize> {
    let v = size as i64 + before + after;
    if v < 0 {
        None
    } else {
        Some(v as usize)
    }
}

/// `aten::constant_pad_nd(pad, value)`: `pad` holds (before, after) pairs
/// starting from the last dim backwards (`pad[0..2]` for dim `r-1`,
/// `pad[2..4]` for dim `r-2`, ...); negative pads crop. `dst` has the
/// padded shape (see [`pad_output_size`]).
pub fn constant_pad_nd<T: Copy>(src: &[T], sizes: &[usize], pad: &[i64], value: T, dst: &mut [T]) {
    dst.fill(value);
    let r = sizes.len();
    let mut os = [0usize; MAX_RANK];
    os[..r].copy_from_slice(sizes);
    let mut lo = [0i64; MAX_RANK];
    for k in 0..pad.len() / 2 {
        if k >= r {
            break;
        }
        let d = r - 1 - k;
        lo[d] = pad[2 * k];
        os[d] = pad_output_size(sizes[d], pad[2 * k], pad[2 * k + 1]).unwrap_or(0);
    }
    // Overlap along each dim: input i in [max(0, -lo), min(n, out - lo)).
    let ss = contiguous_istrides(sizes);
    let ds = contiguous_istrides(&os[..r]);
    let mut bs = [0usize; MAX_RANK];
    let (mut sb, mut db) = (0isize, 0isize);
    for d in 0..r {
        let i0 = (-lo[d]).max(0);
        let i1 = (sizes[d] as i64).min(os[d] as i64 - lo[d]);
        bs[d] = (i1 - i0).max(0) as usize;
        sb += i0 as isize * ss[d];
        db += (i0 + lo[d]) as isize * ds[d];
    }
    if bs[..r].contains(&0) {
        return;
    }
    copy_box_map(src, sb, &ss[..r], dst, db, &ds[..r], &bs[..r], |v| v);
}

/// `aten::reflection_pad{1,2,3}d` (`reflect`) and
/// `aten::replication_pad{1,2,3}d`: pads the last `pad.len() / 2` dims of
/// a contiguous `src` of shape `sizes` (`pad` as PyTorch lists it, the last
/// dim first, before then after), each output position reading the input
/// position mirrored about the edge (the edge not repeated) or clamped to
/// it. The caller checks the sizes: a reflected pad is shorter than its
/// dim, a replicated dim is not empty.
pub fn pad_indexed<T: Copy>(src: &[T], sizes: &[usize], pad: &[i64], reflect: bool, dst: &mut [T]) {
    let (r, k) = (sizes.len(), pad.len() / 2);
    let mut os = [0usize; MAX_RANK];
    os[..r].copy_from_slice(sizes);
    for j in 0..k {
        let d = r - 1 - j;
        os[d] = pad_output_size(sizes[d], pad[2 * j], pad[2 * j + 1]).unwrap_or(0);
    }
    let map = |d: usize, o: usize| -> usize {
        let n = sizes[d] as i64;
        let before = if d + k >= r { pad[2 * (r - 1 - d)] } else { 0 };
        let i = o as i64 - before;
        let i = if reflect {
            let i = if i < 0 { -i } else { i };
            if i >= n {
                2 * (n - 1) - i
            } else {
                i
            }
        } else {
            i.clamp(0, n - 1)
        };
        i as usize
    };
    let mut st = [0usize; MAX_RANK];
    crate::num::contiguous_strides(sizes, &mut st);
    let mut idx = [0usize; MAX_RANK];
    for o in dst.iter_mut() {
        let off: usize = (0..r).map(|d| map(d, idx[d]) * st[d]).sum();
        *o = src[off];
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < os[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

fn tri<T: Element>(src: &[T], sizes: &[usize], keep: impl Fn(i64) -> bool, dst: &mut [T]) {
    let r = sizes.len();
    let (rows, cols) = (sizes[r - 2], sizes[r - 1]);
    let m = rows * cols;
    if m == 0 {
        return;
    }
    for (s, d) in src.chunks_exact(m).zip(dst.chunks_exact_mut(m)) {
        for i in 0..rows {
            for j in 0..cols {
                let k = i * cols + j;
                d[k] = if keep(j as i64 - i as i64) { s[k] } else { T::default() };
            }
        }
    }
}

/// `aten::tril(diagonal)`: keeps elements with `col - row <= diagonal` of
/// the last two dims (rank >= 2), zeroes the rest.
pub fn tril<T: Element>(src: &[T], sizes: &[usize], diagonal: i64, dst: &mut [T]) {
    tri(src, sizes, |k| k <= diagonal, dst);
}

/// `aten::triu(diagonal)`: keeps elements with `col - row >= diagonal`.
pub fn triu<T: Element>(src: &[T], sizes: &[usize], diagonal: i64, dst: &mut [T]) {
    tri(src, sizes, |k| k >= diagonal, dst);
}

/// Strides (in elements, indexed by logical dim) of a dense tensor whose
/// memory order is `dim_order` (outermost first), as ExecuTorch's dim order.
pub fn dim_order_strides(sizes: &[usize], dim_order: &[usize], out: &mut [usize]) {
    let mut s = 1usize;
    for &d in dim_order.iter().rev() {
        out[d] = s;
        s *= sizes[d];
    }
}

/// `dim_order_ops::_to_dim_order_copy` / `_clone_dim_order`: converts the
/// memory layout of a tensor of logical shape `sizes` from `src_dim_order`
/// to `dst_dim_order` (e.g. `[0,1,2,3]` ↔ channels-last `[0,2,3,1]`),
/// converting each element with `f` (identity or a dtype cast).
pub fn to_dim_order<A: Copy, O>(
    src: &[A],
    sizes: &[usize],
    src_dim_order: &[usize],
    dst_dim_order: &[usize],
    dst: &mut [O],
    f: impl FnMut(A) -> O,
) {
    let r = sizes.len();
    let mut ss = [0usize; MAX_RANK];
    dim_order_strides(sizes, src_dim_order, &mut ss);
    // Walk dst memory order: dim dst_dim_order[k] outermost first.
    let mut ws = [0usize; MAX_RANK];
    let mut wst = [0usize; MAX_RANK];
    for k in 0..r {
        ws[k] = sizes[dst_dim_order[k]];
        wst[k] = ss[dst_dim_order[k]];
    }
    strided_copy_map(src, &ws[..r], &wst[..r], dst, f);
}

/// `aten::fill` / `aten::full` / `full_like` / `zeros` / `ones`; in bands
/// across threads when it is large, as [`copy`]: on two threads a 256 KB
/// `full_like` over memory the other core had just written took 32 µs,
/// against 5.5 µs on one.
#[inline]
pub fn fill<T: Copy + Send + Sync>(dst: &mut [T], value: T) {
    let grain = crate::parallel::band_grain(1, core::mem::size_of::<T>());
    crate::parallel::for_each_band(dst, dst.len(), 1, grain, copy_bands::<T>(dst.len()), &|_, band| {
        band.fill(value)
    });
}

/// `aten::full` (alias of [`fill`]).
#[inline]
pub fn full<T: Copy + Send + Sync>(dst: &mut [T], value: T) {
    fill(dst, value);
}

/// Length of `aten::arange.start_step(start, end, step)` with float
/// arguments: `ceil((end - start) / step)` in `f64`; `None` if `step` is 0
/// or its sign disagrees with `end - start`, or the bounds are not finite.
pub fn arange_len(start: f64, end: f64, step: f64) -> Option<usize> {
    if step == 0.0 || !start.is_finite() || !end.is_finite() {
        return None;
    }
    if (step > 0.0 && end < start) || (step < 0.0 && end > start) {
        return None;
    }
    let n = libm::ceil((end - start) / step);
    if n < 0.0 {
        None
    } else {
        Some(n as usize)
    }
}

/// Length of `aten::arange` with integer arguments (exact integer ceiling
/// division); `None` as for [`arange_len`].
pub const fn arange_len_i64(start: i64, end: i64, step: i64) -> Option<usize> {
    if step == 0 || (step > 0 && end < start) || (step < 0 && end > start) {
        return None;
    }
    let span = end as i128 - start as i128;
    let st = step as i128;
    let sgn = if st > 0 { 1 } else { -1 };
    Some(((span + st - sgn) / st) as usize)
}

/// `aten::arange` values for float (or any) output: `start + i * step`
/// computed in `f64` (PyTorch's CPU accumulate type), cast to `T`.
pub fn arange<T: Element>(start: f64, step: f64, dst: &mut [T]) {
    for (i, o) in dst.iter_mut().enumerate() {
        *o = T::from_f64(start + step * i as f64);
    }
}

/// `aten::arange` values for integer output: `start + i * step` in `i64`.
pub fn arange_i64<T: Element>(start: i64, step: i64, dst: &mut [T]) {
    for (i, o) in dst.iter_mut().enumerate() {
        *o = T::from_i64(start.wrapping_add(step.wrapping_mul(i as i64)));
    }
}

/// `aten::pixel_shuffle(upscale_factor)`: input `[*, C*r*r, H, W]` →
/// output `[*, C, H*r, W*r]` with
/// `out[.., c, h*r + i, w*r + j] = in[.., c*r*r + i*r + j, h, w]`.
pub fn pixel_shuffle<T: Copy>(src: &[T], sizes: &[usize], r: usize, dst: &mut [T]) {
    let k = sizes.len();
    let (crr, h, w) = (sizes[k - 3], sizes[k - 2], sizes[k - 1]);
    let b: usize = sizes[..k - 3].iter().product();
    let c = crr / (r * r).max(1);
    // Input viewed as [B, C, r, r, H, W]; output order [B, C, H, r, W, r].
    let vs = [b, c, r, r, h, w];
    let vst = contiguous_istrides(&vs);
    let os = [b, c, h, r, w, r];
    let st = [vst[0], vst[1], vst[4], vst[2], vst[5], vst[3]];
    let ds = contiguous_istrides(&os);
    copy_box_map(src, 0, &st, dst, 0, &ds[..6], &os, |v| v);
}

/// `aten::pixel_unshuffle(downscale_factor)`: input `[*, C, H*r, W*r]` →
/// output `[*, C*r*r, H, W]`, the inverse of [`pixel_shuffle`].
pub fn pixel_unshuffle<T: Copy>(src: &[T], sizes: &[usize], r: usize, dst: &mut [T]) {
    let k = sizes.len();
    let (c, hr, wr) = (sizes[k - 3], sizes[k - 2], sizes[k - 1]);
    let b: usize = sizes[..k - 3].iter().product();
    let r1 = r.max(1);
    let (h, w) = (hr / r1, wr / r1);
    // Input viewed as [B, C, H, r, W, r]; output order [B, C, r, r, H, W].
    let vs = [b, c, h, r, w, r];
    let vst = contiguous_istrides(&vs);
    let os = [b, c, r, r, h, w];
    let st = [vst[0], vst[1], vst[3], vst[5], vst[2], vst[4]];
    let ds = contiguous_istrides(&os);
    copy_box_map(src, 0, &st, dst, 0, &ds[..6], &os, |v| v);
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::testing::rng;
    use std::vec;
    use std::vec::Vec;

    fn iota(n: usize) -> Vec<i32> {
        (0..n as i32).collect()
    }

    /// Naive index decomposition.
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
    fn gathers_read_each_element_at_its_strided_index_on_one_thread_and_two() {
        // A channel shuffle's half (an innermost 2 over a run of stride 1,
        // interleaved), 3 and 4 runs, a plain permutation, an offset, and
        // random boxes; large enough that two threads split them.
        let mut seed = 5u64;
        let mut cases: Vec<(usize, Vec<usize>, Vec<usize>)> = vec![
            (0, vec![1, 28, 28, 29, 2], vec![90944, 3248, 116, 1, 58]),
            (29, vec![1, 28, 28, 29, 2], vec![90944, 3248, 116, 1, 58]),
            (0, vec![40, 30, 3], vec![1, 40, 1200]),
            (7, vec![3, 500, 4], vec![4000, 1, 500]),
            (0, vec![30, 40, 50], vec![1, 1500, 30]),
            (3, vec![2, 64, 2], vec![1, 2, 1]),
            // An int8 shuffle's half into NCHW: 784 × 29 blocks of rows
            // 116 apart; and transposes with edges that make no tile.
            (0, vec![29, 2, 28, 28], vec![1, 58, 3248, 116]),
            (58, vec![29, 2, 28, 28], vec![1, 58, 3248, 116]),
            (1, vec![19, 37], vec![1, 23]),
            (0, vec![3, 33, 17], vec![600, 1, 35]),
        ];
        for _ in 0..40 {
            let r = 1 + rng(&mut seed) as usize % 5;
            let sizes: Vec<usize> = (0..r).map(|_| 1 + rng(&mut seed) as usize % 12).collect();
            let strides: Vec<usize> = (0..r).map(|_| rng(&mut seed) as usize % 100).collect();
            cases.push((rng(&mut seed) as usize % 9, sizes, strides));
        }
        for (offset, sizes, strides) in cases {
            let total: usize = sizes.iter().product();
            let len = offset + sizes.iter().zip(&strides).map(|(&n, &s)| (n - 1) * s).sum::<usize>() + 1;
            let src = iota(len);
            let want: Vec<i32> = (0..total)
                .map(|i| {
                    let idx = unravel(i, &sizes);
                    src[offset + idx.iter().zip(&strides).map(|(&i, &s)| i * s).sum::<usize>()]
                })
                .collect();
            for threads in [1, 2] {
                #[cfg(not(target_os = "wasi"))]
                let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
                crate::parallel::set_threads(threads);
                let mut got = vec![-1; total];
                gather(&src, offset, &sizes, &strides, &mut got);
                // Bytes too, which transpose in tiles of their own.
                let bytes: Vec<u8> = src.iter().map(|&v| (v * 7) as u8).collect();
                let mut got_bytes = vec![0u8; total];
                gather(&bytes, offset, &sizes, &strides, &mut got_bytes);
                crate::parallel::set_threads(1);
                assert_eq!(got, want, "{sizes:?} {strides:?} + {offset} on {threads} thread(s)");
                let want_bytes: Vec<u8> = want.iter().map(|&v| (v * 7) as u8).collect();
                assert_eq!(
                    got_bytes, want_bytes,
                    "bytes: {sizes:?} {strides:?} + {offset} on {threads} thread(s)"
                );
            }
        }
    }

    #[test]
    #[cfg(panic = "unwind")]
    fn gathers_out_of_their_source_panic() {
        let src = [0u8; 64];
        let mut dst = [0u8; 64];
        for (offset, sizes, strides) in [
            (0usize, vec![8usize, 9], vec![8usize, 1]),
            (1, vec![8, 8], vec![8, 1]),
            (0, vec![2, 2], vec![usize::MAX / 2 + 1, 1]),
            (0, vec![usize::MAX, 2], vec![0, 1]),
        ] {
            let sizes2 = sizes.clone();
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                gather(&src, offset, &sizes2, &strides, &mut dst)
            }));
            assert!(caught.is_err(), "{sizes:?} {strides:?} + {offset}");
        }
        // In bounds to the last element: fine.
        gather(&src, 0, &[8, 8], &[1, 8], &mut dst);
    }

    #[test]
    fn gathers_through_a_table_look_each_element_up() {
        let src: Vec<i8> = (0..200).map(|i| (i * 37 % 256) as u8 as i8).collect();
        let table: [i8; 256] = core::array::from_fn(|i| (255 - i) as u8 as i8);
        let (sizes, strides) = ([4, 10, 3], [1, 12, 4]);
        let mut got = vec![0i8; 120];
        gather_table(&src, 5, &sizes, &strides, &table, &mut got);
        let mut plain = vec![0i8; 120];
        gather(&src, 5, &sizes, &strides, &mut plain);
        let want: Vec<i8> = plain.iter().map(|&v| table[(v as i32 + 128) as usize]).collect();
        assert_eq!(got, want);
        assert_ne!(got, plain);
    }

    #[test]
    fn select_and_slice_scatter_write_into_a_copy() {
        // x = [[0,1,2],[3,4,5]]; x[:, 1] = [10, 11]
        let mut d = iota(6);
        select_scatter(&mut d, &[2, 3], 1, 1, &[10, 11]).unwrap();
        assert_eq!(d, [0, 10, 2, 3, 11, 5]);
        // negative index wraps: x[-1, :] = [7, 8, 9]
        let mut d = iota(6);
        select_scatter(&mut d, &[2, 3], 0, -1, &[7, 8, 9]).unwrap();
        assert_eq!(d, [0, 1, 2, 7, 8, 9]);
        assert_eq!(
            select_scatter(&mut d, &[2, 3], 0, 2, &[0, 0, 0]),
            Err(KernelError::IndexOutOfRange { index: 2, size: 2 })
        );
        // x[:, 0::2] = [[20, 21], [22, 23]]
        let mut d = iota(6);
        slice_scatter(&mut d, &[2, 3], 1, Some(0), None, 2, &[20, 21, 22, 23]).unwrap();
        assert_eq!(d, [20, 1, 21, 22, 4, 23]);
        // x[1:, :] along dim 0 with an end past the size (clamped)
        let mut d = iota(6);
        slice_scatter(&mut d, &[2, 3], 0, Some(1), Some(9), 1, &[7, 8, 9]).unwrap();
        assert_eq!(d, [0, 1, 2, 7, 8, 9]);
        assert_eq!(
            slice_scatter(&mut d, &[2, 3], 0, None, None, 0, &[]),
            Err(KernelError::ShapeMismatch)
        );
    }

    #[test]
    fn slice_scatter_of_a_run_time_window_checks_the_live_source() {
        // A [2, 4] cache written at position 1 by a [2, 2] source, then
        // at the end by one of [2, 1].
        let mut d = [0; 8];
        slice_scatter_live(&mut d, &[2, 4], 1, (Some(1), Some(3), 1), &[1, 2, 3, 4], &[2, 2]).unwrap();
        assert_eq!(d, [0, 1, 2, 0, 0, 3, 4, 0]);
        slice_scatter_live(&mut d, &[2, 4], 1, (Some(3), Some(4), 1), &[5, 6], &[2, 1]).unwrap();
        assert_eq!(d, [0, 1, 2, 5, 0, 3, 4, 6]);
        // A window past the end is clamped, so its source no longer fits;
        // nor does one of another rank or other sizes, or too few elements.
        for (start, end, src, sizes) in [
            (3, 5, &[1, 2, 3, 4][..], &[2, 2][..]),
            (0, 2, &[1, 2, 3, 4], &[4]),
            (0, 2, &[1, 2, 3, 4], &[1, 4]),
            (0, 2, &[1, 2, 3], &[2, 2]),
        ] {
            let before = d;
            assert_eq!(
                slice_scatter_live(&mut d, &[2, 4], 1, (Some(start), Some(end), 1), src, sizes),
                Err(KernelError::ShapeMismatch)
            );
            assert_eq!(d, before);
        }
    }

    #[test]
    fn batched_transposes_match_the_general_permute() {
        for (sizes, perm) in [
            (vec![2, 3, 5, 7], vec![0, 2, 3, 1]),
            (vec![2, 3, 5, 7], vec![0, 3, 1, 2]),
            (vec![20, 37], vec![1, 0]),
            (vec![3, 40, 2], vec![1, 2, 0]),
            // One to four channels, interleaved; five, by tiles.
            (vec![2, 1, 3, 5], vec![0, 2, 3, 1]),
            (vec![2, 2, 3, 5], vec![0, 2, 3, 1]),
            (vec![1, 3, 9, 7], vec![0, 2, 3, 1]),
            (vec![2, 4, 3, 5], vec![0, 2, 3, 1]),
            (vec![1, 5, 4, 9], vec![0, 2, 3, 1]),
        ] {
            assert!(batched_transpose(&sizes, &perm).is_some());
            let x = iota(numel(&sizes));
            let os: Vec<usize> = perm.iter().map(|&p| sizes[p]).collect();
            let mut out = vec![-1; x.len()];
            permute_copy(&x, &sizes, &perm, &mut out);
            for (lin, &v) in out.iter().enumerate() {
                let oi = unravel(lin, &os);
                let mut ii = vec![0; sizes.len()];
                for k in 0..sizes.len() {
                    ii[perm[k]] = oi[k];
                }
                assert_eq!(v, x[ravel(&ii, &sizes)], "{sizes:?} {perm:?} at {lin}");
            }
        }
        // Not a group swap.
        assert!(batched_transpose(&[2, 3, 4], &[2, 1, 0]).is_none());
        assert!(batched_transpose(&[2, 3, 4], &[0, 1, 2]).is_none());
    }

    #[test]
    fn permute_random_vs_naive() {
        let mut seed = 11;
        for _ in 0..200 {
            let r = (rng(&mut seed) % 5) as usize;
            let sizes: Vec<usize> = (0..r).map(|_| (rng(&mut seed) % 4) as usize).collect();
            let mut perm: Vec<usize> = (0..r).collect();
            for i in (1..r).rev() {
                perm.swap(i, (rng(&mut seed) as usize) % (i + 1));
            }
            let n = numel(&sizes);
            let x = iota(n);
            let os: Vec<usize> = perm.iter().map(|&p| sizes[p]).collect();
            let mut out = vec![-1; n];
            permute_copy(&x, &sizes, &perm, &mut out);
            for (lin, &v) in out.iter().enumerate() {
                let oi = unravel(lin, &os);
                let mut ii = vec![0; r];
                for k in 0..r {
                    ii[perm[k]] = oi[k];
                }
                assert_eq!(v, x[ravel(&ii, &sizes)]);
            }
            // flip every other dim, compare to naive
            let fd: Vec<usize> = (0..r).filter(|d| d % 2 == 0).collect();
            flip(&x, &sizes, &fd, &mut out);
            for (lin, &v) in out.iter().enumerate() {
                let mut ii = unravel(lin, &sizes);
                for &d in &fd {
                    ii[d] = sizes[d] - 1 - ii[d];
                }
                assert_eq!(v, x[ravel(&ii, &sizes)]);
            }
            // roll every dim by varying amounts
            if r > 0 {
                let dims: Vec<usize> = (0..r).collect();
                let shifts: Vec<i64> = (0..r).map(|_| (rng(&mut seed) % 9) as i64 - 4).collect();
                roll(&x, &sizes, &shifts, &dims, &mut out);
                for (lin, &v) in out.iter().enumerate() {
                    let oi = unravel(lin, &sizes);
                    let ii: Vec<usize> = (0..r)
                        .map(|d| (oi[d] as i64 - shifts[d]).rem_euclid(sizes[d] as i64) as usize)
                        .collect();
                    assert_eq!(v, x[ravel(&ii, &sizes)]);
                }
            }
        }
    }

    #[test]
    fn transpose_expand_repeat() {
        let x = iota(6); // [[0,1,2],[3,4,5]]
        let mut o = [0; 6];
        transpose_copy(&x, &[2, 3], 0, 1, &mut o);
        assert_eq!(o, [0, 3, 1, 4, 2, 5]);
        let mut e = [0; 6];
        expand_copy(&[7, 8], &[2, 1], &[2, 3], &mut e);
        assert_eq!(e, [7, 7, 7, 8, 8, 8]);
        let mut s = [0; 4];
        expand_copy(&[5], &[], &[2, 2], &mut s);
        assert_eq!(s, [5; 4]);
        // repeat([1,2] shape [2], repeats [2,2]) -> [[1,2,1,2],[1,2,1,2]]
        let mut rp = [0; 8];
        repeat(&[1, 2], &[2], &[2, 2], &mut rp);
        assert_eq!(rp, [1, 2, 1, 2, 1, 2, 1, 2]);
        // [[0,1,2],[3,4,5]] repeat [2,1] -> rows 0,1,0,1
        let mut rp = [0; 12];
        repeat(&x, &[2, 3], &[2, 1], &mut rp);
        assert_eq!(rp, [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]);
        // rank 0 copy through the generic path
        let mut one = [0];
        strided_copy(&[9], &[], &[], &mut one);
        assert_eq!(one, [9]);
    }

    #[test]
    fn cat_stack_split() {
        let a = iota(4); // [2,2]
        let b = [10, 11]; // [2,1]
        let empty: [i32; 0] = [];
        let mut o = [0; 6];
        cat(&[&a, &empty, &b], &[&[2, 2], &[0], &[2, 1]], 1, &mut o);
        assert_eq!(o, [0, 1, 10, 2, 3, 11]);
        let mut o = [0; 6];
        cat(&[&a, &b[..]], &[&[2, 2], &[1, 2]], 0, &mut o);
        assert_eq!(o, [0, 1, 2, 3, 10, 11]);
        let mut st = [0; 4];
        stack(&[&[1, 2], &[3, 4]], &[2], 1, &mut st);
        assert_eq!(st, [1, 3, 2, 4]);
        // split [2,5] along dim 1 into [2,3]
        let x = iota(10);
        let mut p0 = [0; 4];
        let mut p1 = [0; 6];
        split_with_sizes_copy(&x, &[2, 5], 1, &[2, 3], &mut [&mut p0, &mut p1]);
        assert_eq!(p0, [0, 1, 5, 6]);
        assert_eq!(p1, [2, 3, 4, 7, 8, 9]);
        // split_size 2 along dim 1 of size 5 -> 2,2,1
        let mut q0 = [0; 4];
        let mut q1 = [0; 4];
        let mut q2 = [0; 2];
        split_copy(&x, &[2, 5], 1, 2, &mut [&mut q0, &mut q1, &mut q2]);
        assert_eq!((q0, q1, q2), ([0, 1, 5, 6], [2, 3, 7, 8], [4, 9]));
    }

    #[test]
    fn slicing() {
        // size 10: slice(2, 8, 3) -> 2,5 : len ceil(6/3) = 2
        assert_eq!(slice_output_len(10, Some(2), Some(8), 3), Some(2));
        // negative start wraps: -3 -> 7 ; end None -> 10 : len 3
        assert_eq!(slice_output_len(10, Some(-3), None, 1), Some(3));
        // clamping: start -20 -> 0, end 100 -> 10
        assert_eq!(slice_output_len(10, Some(-20), Some(100), 1), Some(10));
        // end before start -> empty
        assert_eq!(slice_output_len(10, Some(7), Some(3), 1), Some(0));
        assert_eq!(slice_output_len(10, Some(0), Some(i64::MAX), 4), Some(3));
        assert_eq!(slice_output_len(10, None, None, 0), None);
        assert_eq!(slice_output_len(10, None, None, -1), None);
        assert_eq!(slice_output_len(0, Some(1), Some(2), 1), Some(0));
        let x = iota(12); // [3,4]
        let mut o = [0; 6];
        slice_copy(&x, &[3, 4], 1, Some(1), None, 2, &mut o).unwrap();
        assert_eq!(o, [1, 3, 5, 7, 9, 11]);
        let mut o = [0; 4];
        slice_copy(&x, &[3, 4], 0, Some(-1), None, 1, &mut o).unwrap();
        assert_eq!(o, [8, 9, 10, 11]);
        assert_eq!(
            slice_copy(&x, &[3, 4], 0, None, None, -1, &mut o),
            Err(KernelError::ShapeMismatch)
        );
        let mut s = [0; 3];
        select_copy(&x, &[3, 4], 1, -1, &mut s).unwrap();
        assert_eq!(s, [3, 7, 11]);
        assert_eq!(
            select_copy(&x, &[3, 4], 1, 4, &mut s),
            Err(KernelError::IndexOutOfRange { index: 4, size: 4 })
        );
        assert_eq!(
            select_copy(&x, &[3, 4], 1, -5, &mut s),
            Err(KernelError::IndexOutOfRange { index: -5, size: 4 })
        );
    }

    #[test]
    fn padding_and_tri() {
        // [2,2] padded last dim (1,0) and dim 0 (0,1) -> [3,3]
        let x = [1, 2, 3, 4];
        let mut o = [0; 9];
        constant_pad_nd(&x, &[2, 2], &[1, 0, 0, 1], -1, &mut o);
        assert_eq!(o, [-1, 1, 2, -1, 3, 4, -1, -1, -1]);
        // negative pad crops: [1,4] with (-1, 1) -> [2,3,4,p]
        let mut o = [0; 4];
        constant_pad_nd(&[1, 2, 3, 4], &[1, 4], &[-1, 1], 0, &mut o);
        assert_eq!(o, [2, 3, 4, 0]);
        assert_eq!(pad_output_size(2, -3, 0), None);
        let m = iota(9);
        let mut t = [0; 9];
        tril(&m, &[3, 3], 0, &mut t);
        assert_eq!(t, [0, 0, 0, 3, 4, 0, 6, 7, 8]);
        triu(&m, &[3, 3], 1, &mut t);
        assert_eq!(t, [0, 1, 2, 0, 0, 5, 0, 0, 0]);
        tril(&m, &[3, 3], -1, &mut t);
        assert_eq!(t, [0, 0, 0, 3, 0, 0, 6, 7, 0]);
    }

    #[test]
    fn dim_order_and_arange_and_pixel_shuffle() {
        // NCHW [1,2,2,2] -> channels-last [0,2,3,1]
        let x = iota(8);
        let mut o = [0.0f32; 8];
        to_dim_order(&x, &[1, 2, 2, 2], &[0, 1, 2, 3], &[0, 2, 3, 1], &mut o, |v| v as f32);
        assert_eq!(o, [0.0, 4.0, 1.0, 5.0, 2.0, 6.0, 3.0, 7.0]);
        let mut back = [0; 8];
        to_dim_order(&o, &[1, 2, 2, 2], &[0, 2, 3, 1], &[0, 1, 2, 3], &mut back, |v| v as i32);
        assert_eq!(back, [0, 1, 2, 3, 4, 5, 6, 7]);
        // arange(0, 1, 0.3) -> ceil(3.33) = 4 ; arange(1, 10, 3) -> 1,4,7 ; (5,0,-2) -> 5,3,1
        assert_eq!(arange_len(0.0, 1.0, 0.3), Some(4));
        assert_eq!(arange_len_i64(1, 10, 3), Some(3));
        assert_eq!(arange_len_i64(5, 0, -2), Some(3));
        assert_eq!(arange_len_i64(0, 0, 1), Some(0));
        assert_eq!(arange_len_i64(0, 5, -1), None);
        assert_eq!(arange_len(0.0, 5.0, 0.0), None);
        let mut a = [0.0f32; 4];
        arange(0.0, 0.3, &mut a);
        // 3 * 0.3 = 0.8999999999999999 in f64, which rounds to 0.9f32
        // (in f32 arithmetic it would be 0.90000004).
        assert_eq!(a, [0.0, 0.3, 0.6, 0.9]);
        let mut ai = [0i64; 3];
        arange_i64(5, -2, &mut ai);
        assert_eq!(ai, [5, 3, 1]);
        let mut f = [0u8; 3];
        fill(&mut f, 7);
        assert_eq!(f, [7; 3]);
        // pixel_shuffle: [1, 4, 1, 1] r=2 -> [1,1,2,2] = channels laid out
        let mut ps = [0; 4];
        pixel_shuffle(&[0, 1, 2, 3], &[1, 4, 1, 1], 2, &mut ps);
        assert_eq!(ps, [0, 1, 2, 3]);
        // random round trip and naive check on [2, 8, 2, 3] r=2
        let sizes = [2, 8, 2, 3];
        let x = iota(96);
        let mut y = vec![0; 96];
        pixel_shuffle(&x, &sizes, 2, &mut y);
        let os = [2, 2, 4, 6];
        for (lin, &v) in y.iter().enumerate() {
            let i = unravel(lin, &os);
            let (n, c, hh, ww) = (i[0], i[1], i[2], i[3]);
            let src = [n, c * 4 + (hh % 2) * 2 + ww % 2, hh / 2, ww / 2];
            assert_eq!(v, x[ravel(&src, &sizes)]);
        }
        let mut z = vec![0; 96];
        pixel_unshuffle(&y, &os, 2, &mut z);
        assert_eq!(z, x);
    }

    #[test]
    fn zero_size() {
        let e: [i32; 0] = [];
        let mut o: [i32; 0] = [];
        permute_copy(&e, &[0, 3], &[1, 0], &mut o);
        flip(&e, &[0, 3], &[0, 1], &mut o);
        roll(&e, &[0, 3], &[1], &[1], &mut o);
        slice_copy(&e, &[0, 3], 1, Some(1), None, 1, &mut o).unwrap();
        let mut p = [5; 2];
        constant_pad_nd(&e, &[0], &[1, 1], 9, &mut p);
        assert_eq!(p, [9, 9]);
        let mut r = [0; 4];
        roll(&[1, 2, 3, 4], &[2, 2], &[1], &[], &mut r);
        assert_eq!(r, [4, 1, 2, 3]);
    }
}
