//! Element-wise drivers: apply a per-element closure (usually calling a
//! function of [`crate::scalar`]) over contiguous or broadcast inputs.
//!
//! The output is always contiguous with shape `out_sizes`. Each input is
//! described by its slice and its strides in elements, one per output dim,
//! with 0 for broadcast dims (see [`broadcast_strides`]); the compiler
//! usually precomputes them as literals. The drivers coalesce dims whose
//! strides allow it, so the common cases run as plain loops over slices:
//! equal contiguous shapes become one autovectorizable zip, a broadcast
//! scalar becomes a loop against a constant, and a broadcast row or column
//! keeps a contiguous inner loop. Rank 0 (one element) and zero-size outputs
//! are handled.
//!
//! The `try_*` variants take closures returning `Option<O>` (integer
//! division and remainder) and return
//! [`KernelError::DivisionByZero`] on
//! the first `None`; the output is then partially written.
use crate::{KernelError, KernelResult, MAX_RANK};

/// A coalesced iteration space for a contiguous output and `N` inputs.
struct Plan<const N: usize> {
    rank: usize,
    sizes: [usize; MAX_RANK],
    strides: [[usize; MAX_RANK]; N],
}

impl<const N: usize> Plan<N> {
    /// Drops size-1 dims and merges adjacent dims whose strides are
    /// consistent for every input (the output is contiguous, so it always
    /// is).
    #[inline(always)]
    fn new(out_sizes: &[usize], strides: [&[usize]; N]) -> Self {
        // Build groups from the innermost dim outwards, then reverse.
        let mut rev_sizes = [0usize; MAX_RANK];
        let mut rev_strides = [[0usize; MAX_RANK]; N];
        let mut g = 0usize;
        for d in (0..out_sizes.len()).rev() {
            let sz = out_sizes[d];
            if sz == 1 {
                continue;
            }
            if g > 0 {
                let gs = rev_sizes[g - 1];
                let mergeable = (0..N).all(|i| strides[i][d] == rev_strides[i][g - 1] * gs);
                if mergeable {
                    rev_sizes[g - 1] = gs * sz;
                    continue;
                }
            }
            rev_sizes[g] = sz;
            for i in 0..N {
                rev_strides[i][g] = strides[i][d];
            }
            g += 1;
        }
        let mut sizes = [0usize; MAX_RANK];
        let mut st = [[0usize; MAX_RANK]; N];
        for k in 0..g {
            sizes[k] = rev_sizes[g - 1 - k];
            for i in 0..N {
                st[i][k] = rev_strides[i][g - 1 - k];
            }
        }
        Plan {
            rank: g,
            sizes,
            strides: st,
        }
    }

    /// Calls `row(out_offset, input_offsets, len, inner_strides)` for every
    /// innermost row, in row-major order; stops early when `row` returns
    /// false. Nothing is called for a zero-size space.
    #[inline(always)]
    fn run(&self, mut row: impl FnMut(usize, [usize; N], usize, [usize; N]) -> bool) {
        if self.rank == 0 {
            row(0, [0; N], 1, [0; N]);
            return;
        }
        if self.sizes[..self.rank].contains(&0) {
            return;
        }
        let r = self.rank;
        let len = self.sizes[r - 1];
        let mut inner = [0usize; N];
        for (i, s) in inner.iter_mut().enumerate() {
            *s = self.strides[i][r - 1];
        }
        let mut idx = [0usize; MAX_RANK];
        let mut offs = [0usize; N];
        let mut out_off = 0usize;
        loop {
            if !row(out_off, offs, len, inner) {
                return;
            }
            out_off += len;
            // Odometer over the outer dims.
            let mut d = r - 1;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                idx[d] += 1;
                for (i, o) in offs.iter_mut().enumerate() {
                    *o += self.strides[i][d];
                }
                if idx[d] < self.sizes[d] {
                    break;
                }
                for (i, o) in offs.iter_mut().enumerate() {
                    *o -= self.strides[i][d] * self.sizes[d];
                }
                idx[d] = 0;
            }
        }
    }
}

/// Right-aligned broadcast strides: writes into `out_strides[..out_sizes.len()]`
/// the element strides with which a contiguous input of shape `in_sizes` is
/// read when broadcast to `out_sizes` (0 for a broadcast or missing leading
/// dim). Serves every broadcasting binary/ternary operator.
pub fn broadcast_strides(out_sizes: &[usize], in_sizes: &[usize], out_strides: &mut [usize]) {
    let r = out_sizes.len();
    let ri = in_sizes.len();
    let mut s = 1usize;
    for k in 0..r {
        let d = r - 1 - k;
        if k < ri {
            let sz = in_sizes[ri - 1 - k];
            out_strides[d] = if sz == 1 { 0 } else { s };
            s *= sz;
        } else {
            out_strides[d] = 0;
        }
    }
}

/// PyTorch's broadcast shape of `a` and `b` (right-aligned; each pair of
/// sizes equal or one of them 1). Returns the sizes and the rank, or `None`
/// when the shapes do not broadcast or the rank exceeds [`MAX_RANK`].
/// A `const fn`, usable by the compiler and at run time.
pub const fn broadcast_sizes(a: &[usize], b: &[usize]) -> Option<([usize; MAX_RANK], usize)> {
    let r = if a.len() > b.len() { a.len() } else { b.len() };
    if r > MAX_RANK {
        return None;
    }
    let mut out = [0usize; MAX_RANK];
    let mut k = 0;
    while k < r {
        let sa = if k < a.len() { a[a.len() - 1 - k] } else { 1 };
        let sb = if k < b.len() { b[b.len() - 1 - k] } else { 1 };
        let s = if sa == sb || sb == 1 {
            sa
        } else if sa == 1 {
            sb
        } else {
            return None;
        };
        out[r - 1 - k] = s;
        k += 1;
    }
    Some((out, r))
}

/// Unary operators on a contiguous input (`abs`, `exp`, `sigmoid`, casts,
/// ...): `out[i] = f(x[i])`. `x` and `out` have the same length.
#[inline(always)]
pub fn map<A: Copy, O>(x: &[A], out: &mut [O], mut f: impl FnMut(A) -> O) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
}

/// Fallible [`map`]: `None` from `f` → `DivisionByZero`.
#[inline(always)]
pub fn try_map<A: Copy, O>(x: &[A], out: &mut [O], mut f: impl FnMut(A) -> Option<O>) -> KernelResult {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v).ok_or(KernelError::DivisionByZero)?;
    }
    Ok(())
}

/// Unary operator on a strided/broadcast input (`expand` fused with an
/// op, a unary op on a permuted view): `out` is contiguous with shape
/// `out_sizes`, element `idx` reads `x[sum(idx[d] * x_strides[d])]`.
/// Large outputs are computed in bands across threads (`in_bands`).
#[inline(always)]
pub fn map_strided<A: Copy + Sync, O: Send>(
    out: &mut [O],
    out_sizes: &[usize],
    x: &[A],
    x_strides: &[usize],
    f: impl Fn(A) -> O + Sync,
) {
    map_strided_by(out, out_sizes, x, x_strides, &f, &|x: &[A], out: &mut [O]| {
        map(x, out, &f)
    })
}

/// [`map_strided`] whose contiguous runs are compiled for this CPU's best
/// vector instruction set: for functions costly enough per element
/// (`exp`, `sigmoid`, ...) to pay for a copy of the loop per set. The
/// same operations run whatever the set, so the same bits come out.
#[inline(always)]
pub fn map_strided_wide<A: Copy + Sync, O: Send>(
    out: &mut [O],
    out_sizes: &[usize],
    x: &[A],
    x_strides: &[usize],
    f: impl Fn(A) -> O + Sync,
) {
    struct Run<'a, A, O, F> {
        x: &'a [A],
        out: &'a mut [O],
        f: &'a F,
    }
    impl<A: Copy, O, F: Fn(A) -> O> crate::cpu::Vectorized for Run<'_, A, O, F> {
        type Output = ();
        #[inline(always)]
        // The closure is not redundant: passing `&F` itself is what
        // leaves the call un-inlined (below).
        #[allow(clippy::redundant_closure)]
        fn run(self) {
            // `f` itself, not `&F`'s `FnMut` (which LLVM may leave as a
            // call per element, the loop then scalar).
            let f = self.f;
            map(
                self.x,
                self.out,
                #[inline(always)]
                |v| f(v),
            );
        }
    }
    let run = |x: &[A], out: &mut [O]| crate::cpu::with_best_isa(Run { x, out, f: &f });
    map_strided_by(out, out_sizes, x, x_strides, &f, &run)
}

/// [`map_strided_wide`] of an `f32` function `F` that has a form computing
/// [`crate::scalar::LANES`] elements at once, step by step over all of
/// them, with the same operations (so the same bits) as on one: contiguous
/// runs go through it. A costly function is one long chain of dependent
/// operations; one vector at a time, a core overlaps only the few chains
/// its window holds.
#[inline(always)]
pub fn map_strided_lanes<F: crate::scalar::Lanes>(
    out: &mut [f32],
    out_sizes: &[usize],
    x: &[f32],
    x_strides: &[usize],
) {
    struct Run<'a, F> {
        x: &'a [f32],
        out: &'a mut [f32],
        f: core::marker::PhantomData<F>,
    }
    impl<F: crate::scalar::Lanes> crate::cpu::Vectorized for Run<'_, F> {
        type Output = ();
        #[inline(always)]
        fn run(self) {
            const L: usize = crate::scalar::LANES;
            let mut xs = self.x.chunks_exact(L);
            let mut outs = self.out.chunks_exact_mut(L);
            for (x, out) in (&mut xs).zip(&mut outs) {
                if let (Ok(x), Ok(out)) = (<&[f32; L]>::try_from(x), <&mut [f32; L]>::try_from(out)) {
                    *out = F::lanes(x);
                }
            }
            map(xs.remainder(), outs.into_remainder(), F::one);
        }
    }
    let run = |x: &[f32], out: &mut [f32]| {
        crate::cpu::with_best_isa(Run::<F> {
            x,
            out,
            f: core::marker::PhantomData,
        })
    };
    map_strided_by(out, out_sizes, x, x_strides, &F::one, &run)
}

/// [`map_strided`] with `contiguous(x, out)` for each run of `out` whose
/// input is contiguous too (a constant function at each caller).
#[inline(always)]
fn map_strided_by<A: Copy + Sync, O: Send>(
    out: &mut [O],
    out_sizes: &[usize],
    x: &[A],
    x_strides: &[usize],
    f: &(impl Fn(A) -> O + Sync),
    contiguous: &(impl Fn(&[A], &mut [O]) + Sync),
) {
    let band = |dim: usize, first: usize, sizes: &[usize], out: &mut [O]| {
        let (x, x_strides) = from_band(x, x_strides, dim, first);
        let plan = Plan::<1>::new(sizes, [x_strides]);
        plan.run(|o, [ix], len, [sx]| {
            let out = &mut out[o..o + len];
            match sx {
                1 => contiguous(&x[ix..ix + len], out),
                0 => {
                    let v = x[ix];
                    for o in out {
                        *o = f(v);
                    }
                }
                _ => {
                    for (k, o) in out.iter_mut().enumerate() {
                        *o = f(x[ix + k * sx]);
                    }
                }
            }
            true
        });
    };
    in_bands(out, out_sizes, &band);
}

/// An input of a band of a map (`in_bands`): what it reads from the
/// band's `first` index along `dim` on, and its strides from `dim` on.
#[inline(always)]
fn from_band<'a, T>(x: &'a [T], strides: &'a [usize], dim: usize, first: usize) -> (&'a [T], &'a [usize]) {
    let at = strides.get(dim).map_or(0, |s| s * first);
    (&x[at.min(x.len())..], &strides[dim.min(strides.len())..])
}

/// Runs a map, a large one across threads in bands of its outermost dim
/// of more than one element (the dims before have one): calls
/// `band(dim, first, sizes, piece)` for each band, `first` its first index
/// along `dim`, `sizes` its output sizes from `dim` on and `piece` its
/// output; else `band(0, 0, out_sizes, out)`. On two threads a map on one
/// thread of what both just wrote waits for half of it to come from the
/// other core; in bands each thread mostly reads what it wrote, as the
/// product before it is split in bands of rows too.
/// (Generic, so that the call on one thread is direct: the compiler
/// still sees the generated code's constant sizes and strides.)
#[inline(always)]
fn in_bands<O: Send, F: Fn(usize, usize, &[usize], &mut [O]) + Sync>(out: &mut [O], out_sizes: &[usize], band: &F) {
    let split_up = crate::parallel::local_bands_for(out.len())
        && out_sizes.len() <= MAX_RANK
        && out_sizes.iter().product::<usize>() == out.len();
    let Some((dim, row_len)) = crate::parallel::outer_rows(out_sizes).filter(|&(_, row_len)| split_up && row_len > 0)
    else {
        return band(0, 0, out_sizes, out);
    };
    let rest = &out_sizes[dim + 1..];
    crate::parallel::for_each_band(
        out,
        out_sizes[dim],
        row_len,
        crate::parallel::band_grain(row_len, core::mem::size_of::<O>()),
        true,
        &|rows, piece| {
            let mut sizes = [0usize; MAX_RANK];
            sizes[0] = rows.len();
            sizes[1..=rest.len()].copy_from_slice(rest);
            band(dim, rows.start, &sizes[..=rest.len()], piece);
        },
    );
}

/// Fallible [`map_strided`].
#[inline(always)]
pub fn try_map_strided<A: Copy, O>(
    out: &mut [O],
    out_sizes: &[usize],
    x: &[A],
    x_strides: &[usize],
    mut f: impl FnMut(A) -> Option<O>,
) -> KernelResult {
    let plan = Plan::<1>::new(out_sizes, [x_strides]);
    let mut res = Ok(());
    plan.run(|o, [ix], len, [sx]| {
        for (k, o) in out[o..o + len].iter_mut().enumerate() {
            match f(x[ix + k * sx]) {
                Some(v) => *o = v,
                None => {
                    res = Err(KernelError::DivisionByZero);
                    return false;
                }
            }
        }
        true
    });
    res
}

/// Binary operators with broadcasting (`add`, `mul`, `maximum`, `eq`,
/// `atan2`, ...): `out` is contiguous with shape `out_sizes`; `a` and `b`
/// are read with `a_strides`/`b_strides` (elements, one per output dim, 0
/// where broadcast). `out[idx] = f(a[idx·a_strides], b[idx·b_strides])`.
/// Large outputs are computed in bands across threads (`in_bands`).
#[inline(always)]
pub fn zip<A: Copy + Sync, B: Copy + Sync, O: Send>(
    out: &mut [O],
    out_sizes: &[usize],
    a: &[A],
    a_strides: &[usize],
    b: &[B],
    b_strides: &[usize],
    f: impl Fn(A, B) -> O + Sync,
) {
    let band = |dim: usize, first: usize, sizes: &[usize], out: &mut [O]| {
        let (a, a_strides) = from_band(a, a_strides, dim, first);
        let (b, b_strides) = from_band(b, b_strides, dim, first);
        let plan = Plan::<2>::new(sizes, [a_strides, b_strides]);
        plan.run(|o, [ia, ib], len, [sa, sb]| {
            let out = &mut out[o..o + len];
            match (sa, sb) {
                (1, 1) => {
                    let a = &a[ia..ia + len];
                    let b = &b[ib..ib + len];
                    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                        *o = f(x, y);
                    }
                }
                (1, 0) => {
                    let y = b[ib];
                    for (o, &x) in out.iter_mut().zip(&a[ia..ia + len]) {
                        *o = f(x, y);
                    }
                }
                (0, 1) => {
                    let x = a[ia];
                    for (o, &y) in out.iter_mut().zip(&b[ib..ib + len]) {
                        *o = f(x, y);
                    }
                }
                _ => {
                    for (k, o) in out.iter_mut().enumerate() {
                        *o = f(a[ia + k * sa], b[ib + k * sb]);
                    }
                }
            }
            true
        });
    };
    in_bands(out, out_sizes, &band);
}

/// Fallible [`zip`] (integer `div`, `floor_divide`, `remainder`, `fmod`,
/// checked `pow`): a `None` from `f` → `DivisionByZero`.
#[inline(always)]
pub fn try_zip<A: Copy, B: Copy, O>(
    out: &mut [O],
    out_sizes: &[usize],
    a: &[A],
    a_strides: &[usize],
    b: &[B],
    b_strides: &[usize],
    mut f: impl FnMut(A, B) -> Option<O>,
) -> KernelResult {
    let plan = Plan::<2>::new(out_sizes, [a_strides, b_strides]);
    let mut res = Ok(());
    plan.run(|o, [ia, ib], len, [sa, sb]| {
        for (k, o) in out[o..o + len].iter_mut().enumerate() {
            match f(a[ia + k * sa], b[ib + k * sb]) {
                Some(v) => *o = v,
                None => {
                    res = Err(KernelError::DivisionByZero);
                    return false;
                }
            }
        }
        true
    });
    res
}

/// Ternary operators with broadcasting (`where.self`, `clamp.Tensor`,
/// `addcmul`, `addcdiv`, `lerp`): like [`zip`] with three inputs.
/// Large outputs are computed in bands across threads (`in_bands`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn zip3<A: Copy + Sync, B: Copy + Sync, C: Copy + Sync, O: Send>(
    out: &mut [O],
    out_sizes: &[usize],
    a: &[A],
    a_strides: &[usize],
    b: &[B],
    b_strides: &[usize],
    c: &[C],
    c_strides: &[usize],
    f: impl Fn(A, B, C) -> O + Sync,
) {
    let band = |dim: usize, first: usize, sizes: &[usize], out: &mut [O]| {
        let (a, a_strides) = from_band(a, a_strides, dim, first);
        let (b, b_strides) = from_band(b, b_strides, dim, first);
        let (c, c_strides) = from_band(c, c_strides, dim, first);
        let plan = Plan::<3>::new(sizes, [a_strides, b_strides, c_strides]);
        plan.run(|o, [ia, ib, ic], len, [sa, sb, sc]| {
            let out = &mut out[o..o + len];
            if (sa, sb, sc) == (1, 1, 1) {
                let a = &a[ia..ia + len];
                let b = &b[ib..ib + len];
                let c = &c[ic..ic + len];
                for (((o, &x), &y), &z) in out.iter_mut().zip(a).zip(b).zip(c) {
                    *o = f(x, y, z);
                }
            } else if (sa, sb, sc) == (0, 1, 1) {
                // The first operand broadcast along the run: `where` with a
                // per-row condition (an attention mask).
                let x = a[ia];
                let b = &b[ib..ib + len];
                let c = &c[ic..ic + len];
                for ((o, &y), &z) in out.iter_mut().zip(b).zip(c) {
                    *o = f(x, y, z);
                }
            } else {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = f(a[ia + k * sa], b[ib + k * sb], c[ic + k * sc]);
                }
            }
            true
        });
    };
    in_bands(out, out_sizes, &band);
}

/// Fallible [`zip3`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn try_zip3<A: Copy, B: Copy, C: Copy, O>(
    out: &mut [O],
    out_sizes: &[usize],
    a: &[A],
    a_strides: &[usize],
    b: &[B],
    b_strides: &[usize],
    c: &[C],
    c_strides: &[usize],
    mut f: impl FnMut(A, B, C) -> Option<O>,
) -> KernelResult {
    let plan = Plan::<3>::new(out_sizes, [a_strides, b_strides, c_strides]);
    let mut res = Ok(());
    plan.run(|o, [ia, ib, ic], len, [sa, sb, sc]| {
        for (k, o) in out[o..o + len].iter_mut().enumerate() {
            match f(a[ia + k * sa], b[ib + k * sb], c[ic + k * sc]) {
                Some(v) => *o = v,
                None => {
                    res = Err(KernelError::DivisionByZero);
                    return false;
                }
            }
        }
        true
    });
    res
}

/// `aten::glu`: `a · sigmoid(b)` where `a` and `b` are the first and the
/// second half of a contiguous `x` of shape `sizes` along `dim` (of even
/// length, checked by the caller); `out` has `x`'s shape with that dim
/// halved.
pub fn glu<F: crate::scalar::FloatMath>(x: &[F], sizes: &[usize], dim: usize, out: &mut [F]) {
    let n = sizes[dim];
    let inner: usize = sizes[dim + 1..].iter().product();
    let half = n / 2 * inner;
    for (o, src) in out.chunks_exact_mut(half).zip(x.chunks_exact(n * inner)) {
        let (a, b) = src.split_at(half);
        for ((o, &a), &b) in o.iter_mut().zip(a).zip(b) {
            *o = a * crate::scalar::sigmoid(b);
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::num::{contiguous_strides, numel};
    use crate::scalar;
    use crate::testing::rng;
    use std::vec;
    use std::vec::Vec;

    /// The maps written step by step over lanes give the one-element
    /// forms' bits, on contiguous, broadcast and strided inputs with
    /// remainders, and at the exponential's edges.
    #[test]
    fn lanes_maps_are_the_plain_ones() {
        // Runs of 97 and 291 elements: whole blocks of `LANES` and
        // remainders; the edges of the exponential's range among them.
        let mut seed = 7u64;
        let mut x: Vec<f32> = (0..3 * 97)
            .map(|_| (rng(&mut seed) % 40_001) as f32 / 400.0 - 50.0)
            .collect();
        let edges = [
            0.0,
            -0.0,
            -87.33654,
            -87.3365,
            -88.0,
            88.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-30,
        ];
        for (i, e) in edges.into_iter().enumerate() {
            x[7 * i + 3] = e;
        }
        fn check<F: scalar::Lanes>(x: &[f32], plain: fn(f32) -> f32) {
            for (sizes, strides) in [
                ([3usize, 97usize], [97usize, 1usize]),
                ([3, 97], [0, 1]),
                ([97, 3], [1, 97]),
            ] {
                let (mut want, mut got) = (vec![0.0f32; 291], vec![0.0f32; 291]);
                map_strided(&mut want, &sizes, x, &strides, plain);
                map_strided_lanes::<F>(&mut got, &sizes, x, &strides);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "sizes {sizes:?} strides {strides:?}");
            }
        }
        check::<scalar::Sigmoid>(&x, scalar::sigmoid);
        check::<scalar::Silu>(&x, scalar::silu);
        check::<scalar::SigmoidMul>(&x, |a| a * scalar::sigmoid(a));
        check::<scalar::Gelu>(&x, scalar::gelu);
        // Where the logistic and GELU bend (|x| below 8), densely: 291
        // values 1/18 apart, whose `erf` argument crosses every branch.
        let near: Vec<f32> = (0..3 * 97).map(|i| (i as f32 - 145.0) / 18.0).collect();
        check::<scalar::Sigmoid>(&near, scalar::sigmoid);
        check::<scalar::Silu>(&near, scalar::silu);
        check::<scalar::Gelu>(&near, scalar::gelu);
    }

    /// The vector-ISA copies of a map give the baseline's bits, for
    /// contiguous, broadcast and strided inputs.
    #[test]
    fn wide_maps_are_the_plain_ones() {
        let mut seed = 5u64;
        let x: Vec<f32> = (0..3 * 97)
            .map(|_| (rng(&mut seed) % 40_001) as f32 / 1000.0 - 20.0)
            .collect();
        let fs: [fn(f32) -> f32; 4] = [scalar::sigmoid, scalar::silu, scalar::exp, scalar::tanh];
        for f in fs {
            for (sizes, strides) in [
                ([3usize, 97usize], [97usize, 1usize]),
                ([3, 97], [0, 1]),
                ([97, 3], [1, 97]),
            ] {
                let (mut plain, mut wide) = (vec![0.0f32; 291], vec![0.0f32; 291]);
                map_strided(&mut plain, &sizes, &x, &strides, f);
                map_strided_wide(&mut wide, &sizes, &x, &strides, f);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&wide), bits(&plain), "sizes {sizes:?} strides {strides:?}");
            }
        }
    }

    /// Naive reference: decompose every output index and recompute offsets.
    fn naive_zip(
        out_sizes: &[usize],
        a: &[i64],
        a_sizes: &[usize],
        b: &[i64],
        b_sizes: &[usize],
        f: impl Fn(i64, i64) -> i64,
    ) -> Vec<i64> {
        let n = numel(out_sizes);
        let r = out_sizes.len();
        let mut out = Vec::with_capacity(n);
        for lin in 0..n {
            let mut idx = vec![0usize; r];
            let mut rem = lin;
            for d in (0..r).rev() {
                idx[d] = rem % out_sizes[d];
                rem /= out_sizes[d];
            }
            let off = |sizes: &[usize]| {
                let ri = sizes.len();
                let mut o = 0;
                for k in 0..ri {
                    let i = if sizes[k] == 1 { 0 } else { idx[r - ri + k] };
                    o = o * sizes[k] + i;
                }
                o
            };
            out.push(f(a[off(a_sizes)], b[off(b_sizes)]));
        }
        out
    }

    fn run_zip(a_sizes: &[usize], b_sizes: &[usize]) {
        let (os, r) = broadcast_sizes(a_sizes, b_sizes).unwrap();
        let out_sizes = &os[..r];
        let a: Vec<i64> = (0..numel(a_sizes) as i64).map(|v| v * 3 + 1).collect();
        let b: Vec<i64> = (0..numel(b_sizes) as i64).map(|v| v * 7 - 5).collect();
        let mut sa = [0; MAX_RANK];
        let mut sb = [0; MAX_RANK];
        broadcast_strides(out_sizes, a_sizes, &mut sa);
        broadcast_strides(out_sizes, b_sizes, &mut sb);
        let mut out = vec![0i64; numel(out_sizes)];
        let f = |x: i64, y: i64| x * 1000 + y;
        zip(&mut out, out_sizes, &a, &sa[..r], &b, &sb[..r], f);
        assert_eq!(
            out,
            naive_zip(out_sizes, &a, a_sizes, &b, b_sizes, f),
            "{a_sizes:?} {b_sizes:?}"
        );
    }

    #[test]
    fn broadcast_shapes() {
        let (s, r) = broadcast_sizes(&[2, 1, 4], &[3, 1]).unwrap();
        assert_eq!(&s[..r], &[2, 3, 4]);
        assert!(broadcast_sizes(&[2, 3], &[4]).is_none());
        let (_, r) = broadcast_sizes(&[], &[]).unwrap();
        assert_eq!(r, 0);
        let (s, r) = broadcast_sizes(&[0, 1], &[5]).unwrap();
        assert_eq!(&s[..r], &[0, 5]);
        const S: Option<([usize; MAX_RANK], usize)> = broadcast_sizes(&[5, 1], &[1, 6]);
        assert_eq!(S.unwrap().0[..2], [5, 6]);
        let mut st = [9; 3];
        broadcast_strides(&[2, 3, 4], &[3, 1], &mut st);
        assert_eq!(st, [0, 1, 0]);
        broadcast_strides(&[2, 3, 4], &[2, 1, 4], &mut st);
        assert_eq!(st, [4, 0, 1]);
    }

    #[test]
    fn zip_broadcast_cases() {
        run_zip(&[2, 1, 4], &[3, 1]);
        run_zip(&[3, 1], &[2, 1, 4]);
        run_zip(&[2, 3, 4], &[2, 3, 4]);
        run_zip(&[2, 3, 4], &[]);
        run_zip(&[], &[2, 3, 4]);
        run_zip(&[], &[]);
        run_zip(&[4], &[3, 1]);
        run_zip(&[1, 1, 1], &[1]);
        run_zip(&[0, 3], &[3]);
        run_zip(&[2, 0], &[1]);
        run_zip(&[5, 1, 3, 1, 2], &[4, 1, 2, 2]);
    }

    #[test]
    fn zip_random_shapes() {
        let mut seed = 7;
        for _ in 0..300 {
            let r = (rng(&mut seed) % 5) as usize;
            let mut a = vec![0usize; r];
            let mut b = vec![0usize; r];
            for d in 0..r {
                let s = (rng(&mut seed) % 4) as usize;
                let m = rng(&mut seed) % 3;
                a[d] = if m == 0 { 1 } else { s };
                b[d] = if m == 1 { 1 } else { s };
            }
            let drop = (rng(&mut seed) as usize) % (r + 1);
            run_zip(&a, &b[drop..]);
        }
    }

    #[test]
    fn map_and_strided() {
        let x = [1.0f32, -2.0, 3.0];
        let mut out = [0.0f32; 3];
        map(&x, &mut out, scalar::abs);
        assert_eq!(out, [1.0, 2.0, 3.0]);
        // transpose of a [2,3] matrix read as [3,2]
        let x = [1, 2, 3, 4, 5, 6];
        let mut out = [0i32; 6];
        map_strided(&mut out, &[3, 2], &x, &[1, 3], |v| v * 10);
        assert_eq!(out, [10, 40, 20, 50, 30, 60]);
        // expand [3] -> [2,3]
        let mut out = [0i32; 6];
        map_strided(&mut out, &[2, 3], &x[..3], &[0, 1], |v| v);
        assert_eq!(out, [1, 2, 3, 1, 2, 3]);
        // rank 0
        let mut out = [0i32; 1];
        map_strided(&mut out, &[], &[42], &[], |v| v + 1);
        assert_eq!(out, [43]);
        let mut empty: [i32; 0] = [];
        map_strided(&mut empty, &[0, 3], &x, &[3, 1], |v| v);
    }

    #[test]
    fn fallible() {
        let a = [7i32, -7, 8];
        let b = [3i32];
        let mut out = [0i32; 3];
        try_zip(&mut out, &[3], &a, &[1], &b, &[0], scalar::remainder_int).unwrap();
        assert_eq!(out, [1, 2, 2]);
        let z = [1i32, 0, 2];
        assert_eq!(
            try_zip(&mut out, &[3], &a, &[1], &z, &[1], scalar::div_floor_int),
            Err(KernelError::DivisionByZero)
        );
        assert_eq!(
            try_map(&z, &mut out, |v| scalar::div_trunc_int(6, v)),
            Err(KernelError::DivisionByZero)
        );
        assert_eq!(
            try_map_strided(&mut out, &[3], &z, &[1], |v| scalar::div_trunc_int(6, v)),
            Err(KernelError::DivisionByZero)
        );
        let mut o3 = [0i32; 3];
        assert_eq!(
            try_zip3(&mut o3, &[3], &a, &[1], &z, &[1], &b, &[0], |x, y, w| {
                scalar::div_trunc_int(x, y).map(|q| q + w)
            }),
            Err(KernelError::DivisionByZero)
        );
    }

    #[test]
    fn zip3_where_and_clamp() {
        // where(cond[2,1], a[3], b[]) -> [2,3]
        let cond = [true, false];
        let a = [1.0f32, 2.0, 3.0];
        let b = [-1.0f32];
        let mut out = [0.0f32; 6];
        zip3(
            &mut out,
            &[2, 3],
            &cond,
            &[1, 0],
            &a,
            &[0, 1],
            &b,
            &[0, 0],
            scalar::where_,
        );
        assert_eq!(out, [1.0, 2.0, 3.0, -1.0, -1.0, -1.0]);
        // A per-row condition with both values contiguous (the broadcast
        // first operand's own path): where(cond[2,1], a[2,3], b[2,3]).
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [-1.0f32, -2.0, -3.0, -4.0, -5.0, -6.0];
        zip3(
            &mut out,
            &[2, 3],
            &cond,
            &[1, 0],
            &a,
            &[3, 1],
            &b,
            &[3, 1],
            scalar::where_,
        );
        assert_eq!(out, [1.0, 2.0, 3.0, -4.0, -5.0, -6.0]);
        let x = [0.5f32, f32::NAN, 5.0, -3.0];
        let lo = [0.0f32; 4];
        let hi = [1.0f32, 1.0, 1.0, f32::NAN];
        let mut out = [0.0f32; 4];
        zip3(&mut out, &[4], &x, &[1], &lo, &[1], &hi, &[1], |x, l, h| {
            scalar::clamp(x, Some(l), Some(h))
        });
        assert_eq!(out[0], 0.5);
        assert!(out[1].is_nan());
        assert_eq!(out[2], 1.0);
        assert!(out[3].is_nan());
    }

    #[test]
    fn zip_nan_maximum_and_strided_inner() {
        // a is a [3,2] transposed view of [2,3] data, b contiguous [3,2]
        let a = [1.0f32, 2.0, f32::NAN, 4.0, 5.0, 6.0];
        let b = [3.0f32; 6];
        let mut out = [0.0f32; 6];
        let mut st = [0; 2];
        contiguous_strides(&[3, 2], &mut st);
        zip(&mut out, &[3, 2], &a, &[1, 3], &b, &st, scalar::maximum);
        // a^T = [[1,4],[2,5],[nan,6]]
        assert_eq!(out[..4], [3.0, 4.0, 3.0, 5.0]);
        assert!(out[4].is_nan());
        assert_eq!(out[5], 6.0);
    }
}
