//! Reductions over any set of dims of a contiguous row-major input.
//!
//! Conventions shared by every function here:
//!
//! - `sizes` is the input shape; `dims` is the explicit list of reduced dims
//!   (non-negative, any order, duplicates ignored; dims `>= sizes.len()` are
//!   ignored, so a rank-0 input may be "reduced" over dim 0). PyTorch's
//!   `dim=None` or `dim=[]` meaning "all dims" is expanded by the compiler.
//! - The output is contiguous and holds one element per combination of the
//!   kept dims, in row-major order; `keepdim` only changes the output's
//!   shape, so it is the caller's business.
//! - Float accumulation happens in `f64` (`f32`/`f64` inputs) or `f32`
//!   (half inputs), integer and bool sums in wrapping `i64`; the result is
//!   converted to the output dtype the compiler chose (see [`Summable`]).
//! - Reducing an empty set (a reduced dim of size 0) gives the identity
//!   where PyTorch has one (sum 0, prod 1, any false, all true; mean/var
//!   NaN); `amax`/`argmax` and friends, which PyTorch rejects then, write
//!   the element type's default (0).
use crate::num::{contiguous_strides, Element};
use crate::scalar::is_nan_generic;
use crate::{bf16, f16, MAX_RANK};

/// The iteration plan of a reduction: the kept dims (one output element per
/// combination) and the reduced dims, each coalesced. Public so other
/// kernel families (softmax, norms) can reuse it.
#[derive(Clone, Copy, Debug)]
pub struct ReducePlan {
    kept_rank: usize,
    kept_sizes: [usize; MAX_RANK],
    kept_strides: [usize; MAX_RANK],
    red_rank: usize,
    red_sizes: [usize; MAX_RANK],
    red_strides: [usize; MAX_RANK],
}

/// Merges adjacent (in list order) dims whose strides are consistent and
/// drops size-1 dims; returns the new rank.
fn coalesce(sizes: &mut [usize; MAX_RANK], strides: &mut [usize; MAX_RANK], rank: usize) -> usize {
    let mut rs = [0usize; MAX_RANK];
    let mut rt = [0usize; MAX_RANK];
    let mut g = 0;
    for d in (0..rank).rev() {
        let (sz, st) = (sizes[d], strides[d]);
        if sz == 1 {
            continue;
        }
        if g > 0 && st == rt[g - 1] * rs[g - 1] {
            rs[g - 1] *= sz;
            continue;
        }
        rs[g] = sz;
        rt[g] = st;
        g += 1;
    }
    for k in 0..g {
        sizes[k] = rs[g - 1 - k];
        strides[k] = rt[g - 1 - k];
    }
    g
}

impl ReducePlan {
    /// Plans the reduction of a contiguous input of shape `sizes` over `dims`.
    pub fn new(sizes: &[usize], dims: &[usize]) -> Self {
        let rank = sizes.len();
        let mut mask = 0u32;
        for &d in dims {
            if d < rank {
                mask |= 1 << d;
            }
        }
        let mut strides = [0usize; MAX_RANK];
        contiguous_strides(sizes, &mut strides);
        let mut p = ReducePlan {
            kept_rank: 0,
            kept_sizes: [0; MAX_RANK],
            kept_strides: [0; MAX_RANK],
            red_rank: 0,
            red_sizes: [0; MAX_RANK],
            red_strides: [0; MAX_RANK],
        };
        for d in 0..rank {
            if mask & (1 << d) != 0 {
                p.red_sizes[p.red_rank] = sizes[d];
                p.red_strides[p.red_rank] = strides[d];
                p.red_rank += 1;
            } else {
                p.kept_sizes[p.kept_rank] = sizes[d];
                p.kept_strides[p.kept_rank] = strides[d];
                p.kept_rank += 1;
            }
        }
        p.kept_rank = coalesce(&mut p.kept_sizes, &mut p.kept_strides, p.kept_rank);
        p.red_rank = coalesce(&mut p.red_sizes, &mut p.red_strides, p.red_rank);
        p
    }

    /// Number of elements reduced into each output element.
    pub fn red_numel(&self) -> usize {
        self.red_sizes[..self.red_rank].iter().product()
    }

    /// Calls `f(out_index, base_offset)` for every output element in order;
    /// `base_offset` is the input offset of its first reduced element.
    #[inline(always)]
    pub fn for_each_output(&self, mut f: impl FnMut(usize, usize)) {
        odometer(
            &self.kept_sizes[..self.kept_rank],
            &self.kept_strides[..self.kept_rank],
            |i, off, len, st| {
                for k in 0..len {
                    f(i + k, off + k * st);
                }
            },
        );
    }

    /// Folds `f` over the reduced elements of the output whose base offset
    /// is `base`, in row-major order of the reduced dims.
    #[inline(always)]
    pub fn fold<T: Copy, A>(&self, x: &[T], base: usize, init: A, mut f: impl FnMut(A, T) -> A) -> A {
        let mut acc = Some(init);
        self.fold_rows(base, |off, len, st| {
            let mut a = acc.take().unwrap_or_else(|| unreachable!());
            if st == 1 {
                for &v in &x[off..off + len] {
                    a = f(a, v);
                }
            } else {
                for k in 0..len {
                    a = f(a, x[off + k * st]);
                }
            }
            acc = Some(a);
        });
        acc.unwrap_or_else(|| unreachable!())
    }

    /// Calls `f(offset, len, stride)` for each innermost run of reduced
    /// elements of the output at `base`, in row-major order.
    #[inline(always)]
    pub fn fold_rows(&self, base: usize, mut f: impl FnMut(usize, usize, usize)) {
        odometer(
            &self.red_sizes[..self.red_rank],
            &self.red_strides[..self.red_rank],
            |_, off, len, st| f(base + off, len, st),
        );
    }
}

/// Row-major odometer over `sizes`/`strides`: calls
/// `f(linear_index_of_row_start, offset, inner_len, inner_stride)` per row.
#[inline(always)]
fn odometer(sizes: &[usize], strides: &[usize], mut f: impl FnMut(usize, usize, usize, usize)) {
    let r = sizes.len();
    if r == 0 {
        f(0, 0, 1, 0);
        return;
    }
    if sizes.contains(&0) {
        return;
    }
    let len = sizes[r - 1];
    let st = strides[r - 1];
    let mut idx = [0usize; MAX_RANK];
    let mut off = 0usize;
    let mut lin = 0usize;
    loop {
        f(lin, off, len, st);
        lin += len;
        let mut d = r - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            off += strides[d];
            if idx[d] < sizes[d] {
                break;
            }
            off -= strides[d] * sizes[d];
            idx[d] = 0;
        }
    }
}

/// Element types that can be summed/multiplied, with their accumulator:
/// `i64` (wrapping) for integers and bool, `f64` for `f32`/`f64`, `f32`
/// for `f16`/`bf16`.
pub trait Summable: Element {
    /// `f32`, whose mean ExecuTorch takes in one `f32` sum, in order.
    const F32: bool = false;
    type Acc: Copy;
    const ZERO: Self::Acc;
    const ONE: Self::Acc;
    fn add(acc: Self::Acc, x: Self) -> Self::Acc;
    fn mul(acc: Self::Acc, x: Self) -> Self::Acc;
    /// Sum of a contiguous run (several partial sums for floats).
    #[inline(always)]
    fn add_slice(acc: Self::Acc, xs: &[Self]) -> Self::Acc {
        xs.iter().fold(acc, |a, &v| Self::add(a, v))
    }
    fn acc_to_f64(acc: Self::Acc) -> f64;
    /// Converts the accumulator to the output dtype.
    fn acc_out<O: Element>(acc: Self::Acc) -> O;
}

macro_rules! summable_int {
    ($($t:ty),*) => {$(
        impl Summable for $t {
            type Acc = i64;
            const ZERO: i64 = 0;
            const ONE: i64 = 1;
            #[inline(always)] fn add(a: i64, x: Self) -> i64 { a.wrapping_add(x as i64) }
            #[inline(always)] fn mul(a: i64, x: Self) -> i64 { a.wrapping_mul(x as i64) }
            #[inline(always)] fn acc_to_f64(a: i64) -> f64 { a as f64 }
            #[inline(always)] fn acc_out<O: Element>(a: i64) -> O { O::from_i64(a) }
        }
    )*};
}
summable_int!(i8, u8, i16, u16, i32, u32, i64, u64, bool);

macro_rules! summable_float {
    ($($t:ty => $acc:ty, $f32:expr),*) => {$(
        impl Summable for $t {
            const F32: bool = $f32;
            type Acc = $acc;
            const ZERO: $acc = 0.0;
            const ONE: $acc = 1.0;
            #[inline(always)] fn add(a: $acc, x: Self) -> $acc { a + <$acc>::from(x) }
            #[inline(always)] fn mul(a: $acc, x: Self) -> $acc { a * <$acc>::from(x) }
            #[inline(always)]
            fn add_slice(acc: $acc, xs: &[Self]) -> $acc {
                let mut p = [0.0 as $acc; 8];
                let mut chunks = xs.chunks_exact(8);
                for c in &mut chunks {
                    for k in 0..8 {
                        p[k] += <$acc>::from(c[k]);
                    }
                }
                let mut tail = 0.0 as $acc;
                for &v in chunks.remainder() {
                    tail += <$acc>::from(v);
                }
                acc + (((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]))) + tail
            }
            #[inline(always)] fn acc_to_f64(a: $acc) -> f64 { a as f64 }
            #[inline(always)] fn acc_out<O: Element>(a: $acc) -> O { O::from_f64(a as f64) }
        }
    )*};
}
summable_float!(f32 => f64, true, f64 => f64, false, f16 => f32, false, bf16 => f32, false);

/// `aten::sum.dim_IntList` (and `sum` over all dims): wrapping `i64` sums
/// for integers/bool, `f64` for `f32`/`f64`, `f32` for halves; converted to
/// the output dtype `O`.
pub fn sum<T: Summable, O: Element>(x: &[T], sizes: &[usize], dims: &[usize], out: &mut [O]) {
    let p = ReducePlan::new(sizes, dims);
    p.for_each_output(|i, base| {
        let mut acc = T::ZERO;
        p.fold_rows(base, |off, len, st| {
            if st == 1 {
                acc = T::add_slice(acc, &x[off..off + len]);
            } else {
                for k in 0..len {
                    acc = T::add(acc, x[off + k * st]);
                }
            }
        });
        out[i] = T::acc_out(acc);
    });
}

/// `aten::mean.dim`: the [`sum`] accumulator divided by the reduced count
/// (in `f64`), converted to `O`. An empty reduction gives NaN.
///
/// `f32` is summed as ExecuTorch's kernel sums it, in one `f32`
/// accumulator in order, then divided in `f32`: RMSNorm's mean feeds the
/// row quantization of 4-bit language models, where a last-bit
/// difference becomes a whole quantum (docs/chat.md).
pub fn mean<T: Summable, O: Element>(x: &[T], sizes: &[usize], dims: &[usize], out: &mut [O]) {
    let p = ReducePlan::new(sizes, dims);
    let n = p.red_numel() as f64;
    if T::F32 {
        let count = p.red_numel() as f32;
        p.for_each_output(|i, base| {
            let mut acc = 0f32;
            p.fold_rows(base, |off, len, st| {
                for k in 0..len {
                    acc += x[off + k * st].to_f64() as f32;
                }
            });
            out[i] = O::from_f64((acc / count) as f64);
        });
        return;
    }
    p.for_each_output(|i, base| {
        let mut acc = T::ZERO;
        p.fold_rows(base, |off, len, st| {
            if st == 1 {
                acc = T::add_slice(acc, &x[off..off + len]);
            } else {
                for k in 0..len {
                    acc = T::add(acc, x[off + k * st]);
                }
            }
        });
        out[i] = O::from_f64(T::acc_to_f64(acc) / n);
    });
}

/// `aten::prod.dim_int` (and `prod` over all): product in the [`Summable`]
/// accumulator, converted to `O`.
pub fn prod<T: Summable, O: Element>(x: &[T], sizes: &[usize], dims: &[usize], out: &mut [O]) {
    let p = ReducePlan::new(sizes, dims);
    p.for_each_output(|i, base| {
        out[i] = T::acc_out(p.fold(x, base, T::ONE, T::mul));
    });
}

#[inline(always)]
fn max_step<T: PartialOrd + Copy>(acc: Option<T>, v: T) -> Option<T> {
    match acc {
        None => Some(v),
        Some(a) if is_nan_generic(a) => Some(a),
        Some(a) => Some(if is_nan_generic(v) || v > a { v } else { a }),
    }
}

#[inline(always)]
fn min_step<T: PartialOrd + Copy>(acc: Option<T>, v: T) -> Option<T> {
    match acc {
        None => Some(v),
        Some(a) if is_nan_generic(a) => Some(a),
        Some(a) => Some(if is_nan_generic(v) || v < a { v } else { a }),
    }
}

/// `aten::amax` (and `max()` over all elements): NaN propagates.
pub fn amax<T: Element>(x: &[T], sizes: &[usize], dims: &[usize], out: &mut [T]) {
    let p = ReducePlan::new(sizes, dims);
    p.for_each_output(|i, base| out[i] = p.fold(x, base, None, max_step).unwrap_or_default());
}

/// `aten::amin` (and `min()` over all elements): NaN propagates.
pub fn amin<T: Element>(x: &[T], sizes: &[usize], dims: &[usize], out: &mut [T]) {
    let p = ReducePlan::new(sizes, dims);
    p.for_each_output(|i, base| out[i] = p.fold(x, base, None, min_step).unwrap_or_default());
}

/// Shared arg-reduction: `better(candidate, current)` decides whether the
/// candidate replaces the current best (strictly better, so ties keep the
/// first occurrence); a NaN beats any number and the first NaN wins.
#[inline(always)]
fn arg_reduce<T: Element>(
    x: &[T],
    sizes: &[usize],
    dim: Option<usize>,
    mut on: impl FnMut(usize, T, i64),
    better: impl Fn(T, T) -> bool + Copy,
) {
    let all: [usize; MAX_RANK] = core::array::from_fn(|k| k);
    let one: [usize; 1];
    let dims: &[usize] = match dim {
        Some(d) => {
            one = [d];
            &one
        }
        None => &all[..sizes.len()],
    };
    let p = ReducePlan::new(sizes, dims);
    p.for_each_output(|i, base| {
        let (best, bi, _) = p.fold(x, base, (None::<T>, 0i64, 0i64), |(best, bi, k), v| match best {
            None => (Some(v), k, k + 1),
            Some(b) if is_nan_generic(b) => (best, bi, k + 1),
            Some(b) => {
                if is_nan_generic(v) || better(v, b) {
                    (Some(v), k, k + 1)
                } else {
                    (best, bi, k + 1)
                }
            }
        });
        on(i, best.unwrap_or_default(), bi);
    });
}

/// `aten::argmax`: index of the first maximum along `dim`, or of the
/// flattened input when `dim` is `None` (one output). A NaN counts as the
/// maximum (the first NaN's index is returned).
pub fn argmax<T: Element>(x: &[T], sizes: &[usize], dim: Option<usize>, out: &mut [i64]) {
    arg_reduce(x, sizes, dim, |i, _, k| out[i] = k, |v, b| v > b);
}

/// `aten::argmin`: index of the first minimum along `dim` (or flattened);
/// a NaN counts as the minimum too, as in PyTorch.
pub fn argmin<T: Element>(x: &[T], sizes: &[usize], dim: Option<usize>, out: &mut [i64]) {
    arg_reduce(x, sizes, dim, |i, _, k| out[i] = k, |v, b| v < b);
}

/// `aten::max.dim`: maximum values and their (first) indices along `dim`;
/// NaN propagates and its index is reported.
pub fn max_dim<T: Element>(x: &[T], sizes: &[usize], dim: usize, values: &mut [T], indices: &mut [i64]) {
    arg_reduce(
        x,
        sizes,
        Some(dim),
        |i, v, k| {
            values[i] = v;
            indices[i] = k;
        },
        |v, b| v > b,
    );
}

/// `aten::min.dim`: minimum values and their (first) indices along `dim`.
pub fn min_dim<T: Element>(x: &[T], sizes: &[usize], dim: usize, values: &mut [T], indices: &mut [i64]) {
    arg_reduce(
        x,
        sizes,
        Some(dim),
        |i, v, k| {
            values[i] = v;
            indices[i] = k;
        },
        |v, b| v < b,
    );
}

/// `aten::topk`: the `k` largest (`largest`) or smallest elements along
/// `dim` of a contiguous `x` of shape `sizes`, best first, and their
/// indices; `values` and `indices` have `x`'s shape with `k` at `dim`. NaN
/// ranks above every number, as in PyTorch; equal values keep the lower
/// index first. The outputs double as a heap of the best `k` seen so far
/// (no scratch): O(n log k) per row. The caller checks `k <= sizes[dim]`;
/// a 0-d `x` is one row of one element.
pub fn topk<T: Element>(
    x: &[T],
    sizes: &[usize],
    dim: usize,
    k: usize,
    largest: bool,
    values: &mut [T],
    indices: &mut [i64],
) {
    let n = sizes.get(dim).copied().unwrap_or(1);
    let inner: usize = sizes.get(dim + 1..).map_or(1, |s| s.iter().product());
    let outer: usize = sizes[..dim.min(sizes.len())].iter().product();
    let above = |a: T, b: T| (is_nan_generic(a) && !is_nan_generic(b)) || a > b;
    let better = |a: T, b: T| if largest { above(a, b) } else { above(b, a) };
    // `a` ranks before `b`: a better value, or the same value at a lower index.
    let before = |a: (T, i64), b: (T, i64)| better(a.0, b.0) || (!better(b.0, a.0) && a.1 < b.1);
    for o in 0..outer {
        for j in 0..inner {
            let (xb, ob) = (o * n * inner + j, o * k * inner + j);
            let slot = |s: usize| ob + s * inner;
            let get = |v: &[T], ix: &[i64], s: usize| (v[slot(s)], ix[slot(s)]);
            // A heap with the worst of the kept elements at slot 0.
            let sift_down = |v: &mut [T], ix: &mut [i64], len: usize| {
                let mut s = 0;
                loop {
                    let (l, r) = (2 * s + 1, 2 * s + 2);
                    let mut w = s;
                    if l < len && before(get(v, ix, w), get(v, ix, l)) {
                        w = l;
                    }
                    if r < len && before(get(v, ix, w), get(v, ix, r)) {
                        w = r;
                    }
                    if w == s {
                        break;
                    }
                    v.swap(slot(s), slot(w));
                    ix.swap(slot(s), slot(w));
                    s = w;
                }
            };
            for i in 0..n {
                let e = (x[xb + i * inner], i as i64);
                if i < k {
                    let mut s = i;
                    while s > 0 && before(get(values, indices, (s - 1) / 2), e) {
                        let p = (s - 1) / 2;
                        values[slot(s)] = values[slot(p)];
                        indices[slot(s)] = indices[slot(p)];
                        s = p;
                    }
                    values[slot(s)] = e.0;
                    indices[slot(s)] = e.1;
                } else if k > 0 && before(e, get(values, indices, 0)) {
                    values[slot(0)] = e.0;
                    indices[slot(0)] = e.1;
                    sift_down(values, indices, k);
                }
            }
            // Heap sort: the worst moves to the end, the best ends at slot 0.
            for len in (1..k).rev() {
                values.swap(slot(0), slot(len));
                indices.swap(slot(0), slot(len));
                sift_down(values, indices, len);
            }
        }
    }
}

/// The `p`-norm of the differences `a[k] - b[k]`, as `aten::cdist` takes
/// it: a count of the non-zero ones for p = 0, their largest magnitude for
/// p = ∞.
fn distance<F: crate::scalar::FloatMath>(a: &[F], b: &[F], p: f64) -> F {
    let diffs = a.iter().zip(b).map(|(&x, &y)| (x - y).abs_());
    let zero = F::from_f64_(0.0);
    if p == 0.0 {
        F::from_f64_(diffs.filter(|d| *d != zero).count() as f64)
    } else if p == f64::INFINITY {
        diffs.fold(zero, |m, d| if d > m || d.is_nan_() { d } else { m })
    } else if p == 1.0 {
        diffs.fold(zero, |s, d| s + d)
    } else if p == 2.0 {
        diffs.fold(zero, |s, d| s + d * d).sqrt_()
    } else {
        let e = F::from_f64_(p);
        diffs.fold(zero, |s, d| s + d.pow_(e)).pow_(F::from_f64_(1.0 / p))
    }
}

/// `aten::_cdist_forward`: `out[b, i, j]` is the `p`-norm distance between
/// row `i` of `x1` (`[batch, rows1, m]`) and row `j` of `x2` (`[batch,
/// rows2, m]`), summed in the rows' order.
pub fn cdist<F: crate::scalar::FloatMath>(x1: &[F], x2: &[F], dims: [usize; 4], p: f64, out: &mut [F]) {
    let [batch, r1, r2, m] = dims;
    for b in 0..batch {
        for i in 0..r1 {
            let a = &x1[(b * r1 + i) * m..][..m];
            for j in 0..r2 {
                out[(b * r1 + i) * r2 + j] = distance(a, &x2[(b * r2 + j) * m..][..m], p);
            }
        }
    }
}

/// `aten::_pdist_forward`: the `p`-norm distances between the rows of `x`
/// (`[n, m]`), pairs `(i, j)` with `i < j` in row-major order.
pub fn pdist<F: crate::scalar::FloatMath>(x: &[F], n: usize, m: usize, p: f64, out: &mut [F]) {
    let mut k = 0;
    for i in 0..n {
        for j in i + 1..n {
            out[k] = distance(&x[i * m..][..m], &x[j * m..][..m], p);
            k += 1;
        }
    }
}

/// `aten::any.dims` / `any.dim` / `any`: true if some element is non-zero
/// (NaN counts as true). Any input dtype, bool output.
pub fn any<T: Element>(x: &[T], sizes: &[usize], dims: &[usize], out: &mut [bool]) {
    let p = ReducePlan::new(sizes, dims);
    let z = T::default();
    // `|`, not `||`: no branch per element, so a contiguous run vectorizes.
    p.for_each_output(|i, base| out[i] = p.fold(x, base, false, |a, v| a | (v != z)));
}

/// `aten::all.dims` / `all.dim` / `all`: true if every element is non-zero.
pub fn all<T: Element>(x: &[T], sizes: &[usize], dims: &[usize], out: &mut [bool]) {
    let p = ReducePlan::new(sizes, dims);
    let z = T::default();
    p.for_each_output(|i, base| out[i] = p.fold(x, base, true, |a, v| a & (v != z)));
}

/// Two-pass variance in `f64` of one output: returns (var, mean).
#[inline(always)]
fn var_one<T: Element>(p: &ReducePlan, x: &[T], base: usize, n: f64, correction: f64) -> (f64, f64) {
    let s = p.fold(x, base, 0.0f64, |a, v| a + v.to_f64());
    let m = s / n;
    let ss = p.fold(x, base, 0.0f64, |a, v| {
        let d = v.to_f64() - m;
        a + d * d
    });
    let div = n - correction;
    (ss / if div > 0.0 { div } else { 0.0 }, m)
}

/// `aten::var.correction`: `sum((x - mean)^2) / max(0, N - correction)`
/// (correction 1 = unbiased, 0 = population); computed two-pass in `f64`.
/// A divisor of 0 gives inf or NaN like PyTorch.
pub fn var<T: Element, O: Element>(x: &[T], sizes: &[usize], dims: &[usize], correction: f64, out: &mut [O]) {
    let p = ReducePlan::new(sizes, dims);
    let n = p.red_numel() as f64;
    p.for_each_output(|i, base| out[i] = O::from_f64(var_one(&p, x, base, n, correction).0));
}

/// `aten::std.correction`: square root of [`var`].
pub fn std<T: Element, O: Element>(x: &[T], sizes: &[usize], dims: &[usize], correction: f64, out: &mut [O]) {
    let p = ReducePlan::new(sizes, dims);
    let n = p.red_numel() as f64;
    p.for_each_output(|i, base| out[i] = O::from_f64(libm::sqrt(var_one(&p, x, base, n, correction).0)));
}

/// `aten::var_mean.correction`: variance (as [`var`]) and mean.
pub fn var_mean<T: Element, O: Element>(
    x: &[T],
    sizes: &[usize],
    dims: &[usize],
    correction: f64,
    var_out: &mut [O],
    mean_out: &mut [O],
) {
    let p = ReducePlan::new(sizes, dims);
    let n = p.red_numel() as f64;
    p.for_each_output(|i, base| {
        let (v, m) = var_one(&p, x, base, n, correction);
        var_out[i] = O::from_f64(v);
        mean_out[i] = O::from_f64(m);
    });
}

/// Strided scan along `dim` with the [`Summable`] accumulator.
#[inline(always)]
fn scan<T: Summable, O: Element>(
    x: &[T],
    sizes: &[usize],
    dim: usize,
    out: &mut [O],
    init: T::Acc,
    step: impl Fn(T::Acc, T) -> T::Acc,
) {
    let (outer, n, inner) = if sizes.is_empty() {
        (1, 1, 1)
    } else {
        let d = dim.min(sizes.len() - 1);
        (
            sizes[..d].iter().product::<usize>(),
            sizes[d],
            sizes[d + 1..].iter().product::<usize>(),
        )
    };
    for o in 0..outer {
        for j in 0..inner {
            let mut acc = init;
            for k in 0..n {
                let idx = (o * n + k) * inner + j;
                acc = step(acc, x[idx]);
                out[idx] = T::acc_out(acc);
            }
        }
    }
}

/// `aten::cumsum` along `dim` (output same shape as input, dtype `O`):
/// running sums in the [`Summable`] accumulator (`f64` for `f32`, like
/// PyTorch's CPU kernel). Rank 0 copies the element.
pub fn cumsum<T: Summable, O: Element>(x: &[T], sizes: &[usize], dim: usize, out: &mut [O]) {
    scan(x, sizes, dim, out, T::ZERO, T::add);
}

/// `aten::cumprod` along `dim`.
pub fn cumprod<T: Summable, O: Element>(x: &[T], sizes: &[usize], dim: usize, out: &mut [O]) {
    scan(x, sizes, dim, out, T::ONE, T::mul);
}

/// `aten::logsumexp`: `log(sum(exp(x - m))) + m` with `m` the maximum
/// (replaced by 0 when infinite, as PyTorch does), in `f64`. All `-inf`
/// gives `-inf`; a `+inf` gives `+inf`; NaN propagates.
pub fn logsumexp<T: Element, O: Element>(x: &[T], sizes: &[usize], dims: &[usize], out: &mut [O]) {
    let p = ReducePlan::new(sizes, dims);
    p.for_each_output(|i, base| {
        let m = p
            .fold(x, base, None, |a, v: T| max_step(a, v.to_f64()))
            .unwrap_or(f64::NEG_INFINITY);
        let m = if m.is_infinite() { 0.0 } else { m };
        let s = p.fold(x, base, 0.0f64, |a, v| a + libm::exp(v.to_f64() - m));
        out[i] = O::from_f64(libm::log(s) + m);
    });
}

/// `aten::linalg_vector_norm` / `aten::norm.ScalarOpt_dim` with order `p`:
/// `p = 2` → `sqrt(sum x^2)`, `1` → `sum |x|`, `inf` → `max |x|`,
/// `-inf` → `min |x|`, `0` → count of non-zeros, otherwise
/// `(sum |x|^p)^(1/p)`. Computed in `f64`.
pub fn norm<T: Element, O: Element>(x: &[T], sizes: &[usize], dims: &[usize], p_ord: f64, out: &mut [O]) {
    let p = ReducePlan::new(sizes, dims);
    p.for_each_output(|i, base| {
        let r = if p_ord == 2.0 {
            libm::sqrt(p.fold(x, base, 0.0f64, |a, v| a + v.to_f64() * v.to_f64()))
        } else if p_ord == 1.0 {
            p.fold(x, base, 0.0f64, |a, v| a + libm::fabs(v.to_f64()))
        } else if p_ord == f64::INFINITY {
            p.fold(x, base, None, |a, v: T| max_step(a, libm::fabs(v.to_f64())))
                .unwrap_or(0.0)
        } else if p_ord == f64::NEG_INFINITY {
            p.fold(x, base, None, |a, v: T| min_step(a, libm::fabs(v.to_f64())))
                .unwrap_or(f64::INFINITY)
        } else if p_ord == 0.0 {
            p.fold(x, base, 0.0f64, |a, v| a + if v.to_f64() != 0.0 { 1.0 } else { 0.0 })
        } else {
            let s = p.fold(x, base, 0.0f64, |a, v| a + libm::pow(libm::fabs(v.to_f64()), p_ord));
            libm::pow(s, 1.0 / p_ord)
        };
        out[i] = O::from_f64(r);
    });
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::num::numel;
    use crate::testing::rng;
    use std::vec;
    use std::vec::Vec;

    /// Naive reference: for every input index, find its output index by
    /// dropping the reduced coordinates, and collect the values per output
    /// in row-major order.
    fn naive_groups(x: &[f64], sizes: &[usize], dims: &[usize]) -> Vec<Vec<f64>> {
        let r = sizes.len();
        let kept: Vec<usize> = (0..r).filter(|d| !dims.contains(d)).collect();
        let out_n: usize = kept.iter().map(|&d| sizes[d]).product();
        let mut groups = vec![Vec::new(); out_n];
        for (lin, &v) in x.iter().enumerate() {
            let mut idx = vec![0; r];
            let mut rem = lin;
            for d in (0..r).rev() {
                idx[d] = rem % sizes[d];
                rem /= sizes[d];
            }
            let mut o = 0;
            for &d in &kept {
                o = o * sizes[d] + idx[d];
            }
            groups[o].push(v);
        }
        groups
    }

    #[test]
    fn topk_random_vs_sorting() {
        let mut seed = 11;
        // Under Miri fewer random cases (of ranks 1 to 3, either order).
        for case in 0..if cfg!(miri) { 60 } else { 300 } {
            let r = 1 + (rng(&mut seed) % 3) as usize;
            let sizes: Vec<usize> = (0..r).map(|_| 1 + (rng(&mut seed) % 7) as usize).collect();
            let dim = (rng(&mut seed) as usize) % r;
            let n = sizes[dim];
            let k = (rng(&mut seed) as usize) % (n + 1);
            let largest = case % 2 == 0;
            // Few distinct values (ties), some NaN.
            let x: Vec<f32> = (0..numel(&sizes))
                .map(|_| match rng(&mut seed) % 9 {
                    0 => f32::NAN,
                    v => v as f32 - 4.0,
                })
                .collect();
            let mut osizes = sizes.clone();
            osizes[dim] = k;
            let mut values = vec![0f32; numel(&osizes)];
            let mut indices = vec![0i64; values.len()];
            topk(&x, &sizes, dim, k, largest, &mut values, &mut indices);
            let inner: usize = sizes[dim + 1..].iter().product();
            let outer: usize = sizes[..dim].iter().product();
            for o in 0..outer {
                for j in 0..inner {
                    // A stable sort by rank: NaN first (largest) or last.
                    let mut row: Vec<(f32, i64)> = (0..n).map(|i| (x[(o * n + i) * inner + j], i as i64)).collect();
                    let key = |v: f32| if v.is_nan() { f32::INFINITY } else { v };
                    row.sort_by(|a, b| {
                        let (a, b) = (key(a.0), key(b.0));
                        if largest {
                            b.partial_cmp(&a).unwrap()
                        } else {
                            a.partial_cmp(&b).unwrap()
                        }
                    });
                    for (s, &(v, i)) in row[..k].iter().enumerate() {
                        let at = (o * k + s) * inner + j;
                        assert_eq!(indices[at], i, "{sizes:?} dim {dim} k {k} largest {largest}");
                        assert!(values[at] == v || (v.is_nan() && values[at].is_nan()));
                    }
                }
            }
        }
        // 0-d: one element.
        let (mut v, mut i) = ([0i32], [7i64]);
        topk(&[5i32], &[], 0, 1, true, &mut v, &mut i);
        assert_eq!((v, i), ([5], [0]));
    }

    #[test]
    fn sum_random_vs_naive() {
        let mut seed = 3;
        // Under Miri fewer random cases (ranks 0 to 4, empty sizes too).
        for _ in 0..if cfg!(miri) { 50 } else { 200 } {
            let r = (rng(&mut seed) % 5) as usize;
            let sizes: Vec<usize> = (0..r).map(|_| (rng(&mut seed) % 4) as usize).collect();
            let dims: Vec<usize> = (0..r).filter(|_| rng(&mut seed) & 1 == 0).collect();
            let n = numel(&sizes);
            let x: Vec<i32> = (0..n).map(|_| (rng(&mut seed) % 100) as i32 - 50).collect();
            let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
            let groups = naive_groups(&xf, &sizes, &dims);
            let mut out = vec![0i64; groups.len()];
            sum(&x, &sizes, &dims, &mut out);
            let want: Vec<i64> = groups.iter().map(|g| g.iter().sum::<f64>() as i64).collect();
            assert_eq!(out, want, "{sizes:?} {dims:?}");
            let mut mx = vec![0i32; groups.len()];
            amax(&x, &sizes, &dims, &mut mx);
            let want: Vec<i32> = groups
                .iter()
                .map(|g| {
                    g.iter()
                        .cloned()
                        .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))))
                        .unwrap_or(0.0) as i32
                })
                .collect();
            assert_eq!(mx, want, "{sizes:?} {dims:?}");
            let mut vo = vec![0.0f64; groups.len()];
            var(&x, &sizes, &dims, 1.0, &mut vo);
            for (g, &v) in groups.iter().zip(&vo) {
                let n = g.len() as f64;
                let m = g.iter().sum::<f64>() / n;
                let want = if g.is_empty() {
                    f64::NAN // PyTorch: var of an empty set is NaN
                } else {
                    g.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (n - 1.0)
                };
                assert!(
                    v == want
                        || (v - want).abs() < 1e-9
                        || (v.is_nan() && want.is_nan())
                        || (v.is_infinite() && (want.is_infinite() || want.is_nan())),
                    "{v} {want}"
                );
            }
        }
    }

    #[test]
    fn sum_dims_and_rank0() {
        // x = [[1,2,3],[4,5,6]]
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut o2 = [0.0f32; 2];
        sum(&x, &[2, 3], &[1], &mut o2);
        assert_eq!(o2, [6.0, 15.0]);
        let mut o3 = [0.0f32; 3];
        sum(&x, &[2, 3], &[0], &mut o3);
        assert_eq!(o3, [5.0, 7.0, 9.0]);
        let mut o1 = [0.0f32; 1];
        sum(&x, &[2, 3], &[0, 1], &mut o1);
        assert_eq!(o1, [21.0]);
        mean(&x, &[2, 3], &[0, 1], &mut o1);
        assert_eq!(o1, [3.5]);
        prod(&x, &[2, 3], &[0, 1], &mut o1);
        assert_eq!(o1, [720.0]);
        // rank 0 with dim 0
        sum(&[7.0f32], &[], &[0], &mut o1);
        assert_eq!(o1, [7.0]);
        // zero-size reduced dim: sum 0, prod 1, mean NaN
        let e: [f32; 0] = [];
        let mut o = [9.0f32; 2];
        sum(&e, &[2, 0], &[1], &mut o);
        assert_eq!(o, [0.0, 0.0]);
        prod(&e, &[2, 0], &[1], &mut o);
        assert_eq!(o, [1.0, 1.0]);
        mean(&e, &[2, 0], &[1], &mut o);
        assert!(o[0].is_nan());
        // zero-size kept dim: nothing written
        let mut none: [f32; 0] = [];
        sum(&e, &[0, 3], &[1], &mut none);
        // bools sum to i64 counts; halves
        let b = [true, false, true];
        let mut c = [0i64];
        sum(&b, &[3], &[0], &mut c);
        assert_eq!(c, [2]);
        let h = [f16::from_f32(1.5), f16::from_f32(2.5)];
        let mut ho = [f16::ZERO];
        sum(&h, &[2], &[0], &mut ho);
        assert_eq!(ho[0].to_f32(), 4.0);
    }

    #[test]
    fn f32_mean_sums_in_order_in_f32_as_executorch() {
        // In f32, 1e8 + 1 is 1e8: the sum in order is 1, not 2.
        let x = [1e8f32, 1.0, -1e8, 1.0, 2.0, 2.0, 2.0, 2.0];
        let mut out = [0f32; 2];
        mean(&x, &[2, 4], &[1], &mut out);
        assert_eq!(out, [0.25, 2.0]);
        // f64 inputs keep the f64 sum.
        let x: [f64; 4] = [1e8, 1.0, -1e8, 1.0];
        let mut out = [0f64; 1];
        mean(&x, &[4], &[0], &mut out);
        assert_eq!(out, [0.5]);
    }

    #[test]
    fn sum_f32_accuracy() {
        // 10^7 copies of 0.1f32: a naive f32 running sum drifts by ~10%;
        // the exact sum of the f32 value 0.1f32 is 1e7 * 0.100000001490116.
        // Under Miri 10^4, where the naive sum still drifts by 1e-4.
        let n = if cfg!(miri) { 10_000 } else { 10_000_000usize };
        let x = vec![0.1f32; n];
        let mut o = [0.0f32];
        sum(&x, &[n], &[0], &mut o);
        let exact = (0.1f32 as f64) * n as f64;
        assert!(((o[0] as f64) - exact).abs() / exact < 1e-7);
    }

    #[test]
    fn amax_nan_and_argmax() {
        let x = [1.0f32, f32::NAN, 3.0, 2.0, 5.0, 5.0];
        let mut o = [0.0f32; 2];
        amax(&x, &[2, 3], &[1], &mut o);
        assert!(o[0].is_nan());
        assert_eq!(o[1], 5.0);
        amin(&x, &[2, 3], &[1], &mut o);
        assert!(o[0].is_nan());
        assert_eq!(o[1], 2.0);
        let mut i = [0i64; 2];
        argmax(&x, &[2, 3], Some(1), &mut i);
        assert_eq!(i, [1, 1]); // NaN at 1; tie 5,5 -> first (1)
        argmin(&x, &[2, 3], Some(1), &mut i);
        assert_eq!(i, [1, 0]);
        let mut i1 = [0i64];
        argmax(&x, &[2, 3], None, &mut i1);
        assert_eq!(i1, [1]);
        let y = [3i32, 7, 7, 1, 7];
        argmax(&y, &[5], None, &mut i1);
        assert_eq!(i1, [1]);
        argmin(&y, &[5], Some(0), &mut i1);
        assert_eq!(i1, [3]);
        // along dim 0 of [[3,1],[3,4]] -> argmax [0,1]
        let z = [3i32, 1, 3, 4];
        let mut v = [0i32; 2];
        let mut k = [0i64; 2];
        max_dim(&z, &[2, 2], 0, &mut v, &mut k);
        assert_eq!((v, k), ([3, 4], [0, 1]));
        min_dim(&z, &[2, 2], 0, &mut v, &mut k);
        assert_eq!((v, k), ([3, 1], [0, 0]));
        // rank 0
        argmax(&[4.0f64], &[], None, &mut i1);
        assert_eq!(i1, [0]);
    }

    #[test]
    fn any_all() {
        let x = [0.0f32, -0.0, f32::NAN, 1.0];
        let mut o = [false; 2];
        any(&x, &[2, 2], &[1], &mut o);
        assert_eq!(o, [false, true]);
        all(&x, &[2, 2], &[1], &mut o);
        assert_eq!(o, [false, true]);
        let e: [u8; 0] = [];
        let mut o1 = [false];
        all(&e, &[0], &[0], &mut o1);
        assert_eq!(o1, [true]);
        any(&e, &[0], &[0], &mut o1);
        assert_eq!(o1, [false]);
    }

    #[test]
    fn var_std_correction() {
        // x = [1,2,3,4]: mean 2.5, squared deviations 2.25+0.25+0.25+2.25 = 5
        let x = [1.0f64, 2.0, 3.0, 4.0];
        let mut o = [0.0f64];
        var(&x, &[4], &[0], 0.0, &mut o);
        assert_eq!(o[0], 1.25);
        var(&x, &[4], &[0], 1.0, &mut o);
        assert!((o[0] - 5.0 / 3.0).abs() < 1e-15);
        std(&x, &[4], &[0], 0.0, &mut o);
        assert!((o[0] - 1.25f64.sqrt()).abs() < 1e-15);
        let mut m = [0.0f64];
        var_mean(&x, &[4], &[0], 1.0, &mut o, &mut m);
        assert_eq!(m[0], 2.5);
        // single element with correction 1: 0/0 = NaN
        var(&[3.0f64], &[1], &[0], 1.0, &mut o);
        assert!(o[0].is_nan());
    }

    #[test]
    fn cumsum_and_logsumexp_and_norm() {
        let x = [1i32, 2, 3, 4, 5, 6];
        let mut o = [0i64; 6];
        cumsum(&x, &[2, 3], 1, &mut o);
        assert_eq!(o, [1, 3, 6, 4, 9, 15]);
        cumsum(&x, &[2, 3], 0, &mut o);
        assert_eq!(o, [1, 2, 3, 5, 7, 9]);
        let mut of = [0.0f32; 6];
        cumsum(&x, &[2, 3], 1, &mut of);
        assert_eq!(of, [1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
        cumprod(&x, &[6], 0, &mut o);
        assert_eq!(o, [1, 2, 6, 24, 120, 720]);
        let mut s = [0i64];
        cumsum(&[5i8], &[], 0, &mut s);
        assert_eq!(s, [5]);
        // logsumexp([0, ln 3]) = ln(1 + 3) = ln 4
        let y = [0.0f64, libm::log(3.0)];
        let mut l = [0.0f64];
        logsumexp(&y, &[2], &[0], &mut l);
        assert!((l[0] - libm::log(4.0)).abs() < 1e-15);
        logsumexp(&[f64::NEG_INFINITY, f64::NEG_INFINITY], &[2], &[0], &mut l);
        assert_eq!(l[0], f64::NEG_INFINITY);
        logsumexp(&[1.0f64, f64::INFINITY], &[2], &[0], &mut l);
        assert_eq!(l[0], f64::INFINITY);
        logsumexp(&[1000.0f64, 1000.0], &[2], &[0], &mut l);
        assert!((l[0] - (1000.0 + libm::log(2.0))).abs() < 1e-12);
        // norm([3,-4]) = 5 ; p=1: 7 ; inf: 4 ; 0: 2
        let z = [3.0f32, -4.0];
        let mut n = [0.0f32];
        norm(&z, &[2], &[0], 2.0, &mut n);
        assert_eq!(n[0], 5.0);
        norm(&z, &[2], &[0], 1.0, &mut n);
        assert_eq!(n[0], 7.0);
        norm(&z, &[2], &[0], f64::INFINITY, &mut n);
        assert_eq!(n[0], 4.0);
        norm(&z, &[2], &[0], 0.0, &mut n);
        assert_eq!(n[0], 2.0);
        norm(&z, &[2], &[0], 3.0, &mut n);
        assert!((n[0] - 91f32.cbrt()).abs() < 1e-5);
    }
}
