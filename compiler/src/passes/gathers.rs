//! Chains of views and permutations (`view_copy`, the squeezes,
//! `permute_copy`, `transpose_copy`, `split_with_sizes_copy`) whose
//! intermediate results nothing else reads become one copy of each final
//! result, a [`GATHER`] straight from the chain's first input. ShuffleNet's
//! channel shuffle, `permute → view → permute → view → split → permute`
//! between every two blocks, was six passes over the image and is one.
//!
//! Every value along a chain is a strided view of the chain's source, held
//! as its logical dims, each a list of (size, stride) factors. Factors let
//! a view merge dims whose strides do not merge (the shuffle's `(58, 2)`
//! with strides `(1, 58)` into 116 channels) and split them again later;
//! a reshape the factors cannot follow ends the chain before it.
//!
//! XNNPACK's int8 programs shuffle dequantized images: `dequantize → moves
//! → quantize`. Element-wise maps commute with moving elements, so such a
//! chain moves the `i8` elements, each looked up in the table of the
//! quantize after the dequantize (computed by the kernels themselves: the
//! same bits), or copied when the table gives every element back.
//!
//! The gathers run where the chain's first instruction ran, while the
//! source is alive in ExecuTorch's plan. Their results lose their planned
//! bytes (which other values may hold at that point) and get new ones
//! where the plan is free (`plan::temporaries`); the intermediates are
//! never written.
use crate::analysis::uses::Uses;
use crate::ir::*;
use crate::names::GATHER;
use crate::passes::rewrite::{kernel_call, push_int_list, push_value, unplan};
use std::collections::{BTreeMap, HashMap, HashSet};

/// A strided view: element `idx` of the logical dims sits at `offset + Σ
/// factor index · factor stride`, each logical dim's index split into its
/// factors' (outermost first). No factor has size 1, so a dim of size 1
/// has none.
#[derive(Clone, Debug, PartialEq)]
struct View {
    offset: usize,
    dims: Vec<Vec<(usize, usize)>>,
}

impl View {
    /// A contiguous tensor of `sizes`.
    fn contiguous(sizes: &[usize]) -> View {
        let mut stride = 1;
        let mut dims = vec![Vec::new(); sizes.len()];
        for (d, &n) in sizes.iter().enumerate().rev() {
            if n != 1 {
                dims[d].push((n, stride));
            }
            stride *= n;
        }
        View { offset: 0, dims }
    }

    fn sizes(&self) -> Vec<usize> {
        self.dims.iter().map(|f| f.iter().map(|&(n, _)| n).product()).collect()
    }

    fn permute(&self, perm: &[usize]) -> View {
        View {
            offset: self.offset,
            dims: perm.iter().map(|&p| self.dims[p].clone()).collect(),
        }
    }

    /// The same elements in row-major order under new `sizes`, when each
    /// new dim is a run of whole factors (splitting one where sizes divide).
    fn reshape(&self, sizes: &[usize]) -> Option<View> {
        let mut factors: std::collections::VecDeque<(usize, usize)> = self.dims.iter().flatten().copied().collect();
        let mut dims = Vec::with_capacity(sizes.len());
        for &n in sizes {
            let mut need = n;
            let mut dim = Vec::new();
            while need > 1 {
                let (s, t) = factors.pop_front()?;
                if s <= need {
                    if !need.is_multiple_of(s) {
                        return None;
                    }
                    need /= s;
                    dim.push((s, t));
                } else {
                    if !s.is_multiple_of(need) {
                        return None;
                    }
                    dim.push((need, t * (s / need)));
                    factors.push_front((s / need, t));
                    need = 1;
                }
            }
            dims.push(dim);
        }
        factors.is_empty().then_some(View {
            offset: self.offset,
            dims,
        })
    }

    /// Elements `start..start + len` of dim `d`, when they are whole steps
    /// of its outermost factor.
    fn slice(&self, d: usize, start: usize, len: usize) -> Option<View> {
        let mut v = self.clone();
        let factors = v.dims.get_mut(d)?;
        let Some(&(_, t)) = factors.first() else {
            return (start == 0 && len == 1).then_some(v);
        };
        let inner: usize = factors[1..].iter().map(|&(n, _)| n).product();
        if len == 0 || !start.is_multiple_of(inner) || !len.is_multiple_of(inner) {
            return None;
        }
        v.offset += start / inner * t;
        if len / inner == 1 {
            factors.remove(0);
        } else {
            factors[0].0 = len / inner;
        }
        Some(v)
    }

    /// The box the gather reads: (sizes, strides), outermost first.
    fn flat(&self) -> (Vec<usize>, Vec<usize>) {
        self.dims.iter().flatten().map(|&(n, t)| (n, t)).unzip()
    }
}

/// What a data-movement instruction does to the view of its input.
enum Move {
    /// Into its output's sizes (a view or a squeeze).
    Reshape,
    Permute(Vec<usize>),
    /// Consecutive slices of this dim, one per output.
    Split(usize),
    /// XNNPACK's int8 quantization, per tensor: `i8` to `f32` (`true`)
    /// or back. An element-wise map commutes with moving elements, and a
    /// quantization undoing a dequantization gives back every `i8`.
    Convert(bool, Quant),
}

/// A per-tensor int8 quantization.
type Quant = (f32, i32);

/// What a chain's value holds of its source's elements: each looked up in
/// `table` (at its value + 128; none: the element itself), then
/// dequantized with `deq` if any.
#[derive(Clone, Debug, Default, PartialEq)]
struct Elements {
    table: Option<Vec<i8>>,
    deq: Option<Quant>,
}

impl Elements {
    /// After a quantization with `q` of what `self` dequantized with `p`:
    /// the table of the composition, computed by the kernels' own
    /// arithmetic (none when it gives back every element).
    fn quantized(&self, q: Quant) -> Option<Elements> {
        use ptec_runtime::kernels::qs8;
        let p = self.deq?;
        let quant = |(scale, zero_point): Quant| {
            (scale.is_finite() && scale > 0.0 && i8::try_from(zero_point).is_ok())
                .then_some(qs8::Quant { scale, zero_point })
        };
        let (p, q) = (quant(p)?, quant(q)?);
        let all: Vec<i8> = (-128..=127).collect();
        let looked_up: Vec<i8> = match &self.table {
            Some(t) => t.clone(),
            None => all.clone(),
        };
        let mut f = vec![0.0f32; 256];
        let mut table = vec![0i8; 256];
        qs8::dequantize(&looked_up, &p, &mut f);
        qs8::quantize(&f, &q, &mut table);
        Some(Elements {
            table: (table != all).then_some(table),
            deq: None,
        })
    }
}

/// `(input, outputs, move)` of a data-movement instruction.
fn movement(m: &Method, ins: &Instruction) -> Option<(usize, Vec<usize>, Move)> {
    let (name, args) = kernel_name(m, ins)?;
    let &x = args.first()?;
    let &out = args.last()?;
    let int = |i: usize| match m.values.get(*args.get(i)?)? {
        Value::Int(n) => Some(*n),
        _ => None,
    };
    let rank = m.values.get(x)?.as_tensor()?.sizes.len();
    let dim = |n: i64| {
        let d = if n < 0 { n + rank as i64 } else { n };
        (0..rank as i64).contains(&d).then_some(d as usize)
    };
    let mv = match name.as_str() {
        "aten::view_copy.out"
        | "aten::_unsafe_view.out"
        | "aten::unsqueeze_copy.out"
        | "aten::squeeze_copy.dims_out"
        | "aten::squeeze_copy.dim_out"
        | "aten::squeeze_copy.out" => Move::Reshape,
        crate::names::aten::PERMUTE_COPY => {
            let Value::IntList(items) = m.values.get(*args.get(1)?)? else {
                return None;
            };
            let dims = items
                .iter()
                .map(|&i| match m.values.get(i)? {
                    Value::Int(n) => Some(*n),
                    _ => None,
                })
                .collect::<Option<Vec<i64>>>()?;
            let perm = crate::shapes::permutation(&dims, rank).ok()?;
            Move::Permute(perm)
        }
        "aten::transpose_copy.int_out" => {
            let (a, b) = (dim(int(1)?)?, dim(int(2)?)?);
            let mut perm: Vec<usize> = (0..rank).collect();
            perm.swap(a, b);
            Move::Permute(perm)
        }
        crate::names::qs8::QUANTIZE | crate::names::qs8::DEQUANTIZE => {
            let (Value::Double(scale), Value::Int(zero_point)) =
                (m.values.get(*args.get(1)?)?, m.values.get(*args.get(2)?)?)
            else {
                return None;
            };
            let q = (*scale as f32, i32::try_from(*zero_point).ok()?);
            Move::Convert(name == crate::names::qs8::DEQUANTIZE, q)
        }
        "aten::split_with_sizes_copy.out" => {
            let Value::TensorList(outs) = m.values.get(*args.get(3)?)? else {
                return None;
            };
            return Some((x, outs.clone(), Move::Split(dim(int(2)?)?)));
        }
        _ => return None,
    };
    Some((x, vec![out], mv))
}

/// The sizes of a tensor a chain may hold: static, contiguous, in memory
/// a plan gives (not a constant, nor a buffer kept across runs), not empty, in the standard dim order (not an image ptec keeps NHWC
/// under NCHW sizes), of `dtype`.
fn plain(m: &Method, v: usize, dtype: ScalarType) -> Option<&[usize]> {
    let t = m.values.get(v)?.as_tensor()?;
    let ok = t.dtype == dtype
        && t.dynamism == Dynamism::Static
        && t.is_contiguous()
        && matches!(t.placement, Placement::Planned { .. } | Placement::Unplanned)
        && t.numel() > 0
        && !m.channels_last.contains(&v);
    ok.then_some(&t.sizes)
}

/// The views of a movement's outputs, given its input's (of `dtype`), and
/// the dequantization applied since the chain's source.
fn derive(m: &Method, x: &Link, outs: &[usize], mv: &Move, dtype: ScalarType) -> Option<(Vec<View>, Elements)> {
    let (dtype, state) = match *mv {
        Move::Convert(true, q) => {
            let ok = dtype == ScalarType::Char && x.state.deq.is_none();
            (
                ScalarType::Float,
                ok.then(|| Elements {
                    deq: Some(q),
                    ..x.state.clone()
                })?,
            )
        }
        Move::Convert(false, q) => (
            ScalarType::Char,
            x.state.quantized(q).filter(|_| dtype == ScalarType::Float)?,
        ),
        _ => (dtype, x.state.clone()),
    };
    let x = &x.view;
    let sizes = outs.iter().map(|&o| plain(m, o, dtype)).collect::<Option<Vec<_>>>()?;
    let views = match mv {
        Move::Reshape => vec![x.reshape(sizes[0])?],
        Move::Convert(..) => vec![x.clone()],
        Move::Permute(perm) => vec![x.permute(perm)],
        Move::Split(d) => {
            let mut start = 0;
            let mut views = Vec::new();
            for s in &sizes {
                let len = *s.get(*d)?;
                views.push(x.slice(*d, start, len)?);
                start += len;
            }
            (start == x.sizes()[*d]).then_some(views)?
        }
    };
    let fits = views.iter().zip(&sizes).all(|(v, s)| v.sizes() == *s);
    fits.then_some((views, state))
}

/// A value of a chain: its source, its view of it, the chain's first
/// instruction, and what it holds of the source's elements.
#[derive(Clone)]
struct Link {
    source: usize,
    view: View,
    head: usize,
    state: Elements,
}

/// The instructions of a chain, and the values it leaves: (producing
/// instruction, output position, value).
#[derive(Default)]
struct Chain {
    members: Vec<usize>,
    finals: Vec<(usize, usize, usize)>,
}

/// Rewrites every chain of `m` (see the module docs). Methods with jumps
/// are left as they are.
pub fn compose_moves(m: &mut Method) {
    if m.has_jumps() {
        return;
    }
    let uses = Uses::of(m);
    let moves: Vec<_> = m.instructions.iter().map(|i| movement(m, i)).collect();
    // The readers of each movement's outputs (other than itself).
    let mut readers: HashMap<usize, Option<Vec<(usize, usize)>>> = HashMap::new();
    for (n, mv) in moves.iter().enumerate() {
        for &o in mv.iter().flat_map(|(_, outs, _)| outs) {
            readers.insert(o, uses.kernel_uses(o, n));
        }
    }
    // Values only movements read, each as its input: maybe never written.
    let mut skipped: HashSet<usize> = readers
        .iter()
        .filter(|(_, r)| {
            r.as_ref()
                .is_some_and(|r| !r.is_empty() && r.iter().all(|&(n, pos)| pos == 0 && moves[n].is_some()))
        })
        .map(|(&v, _)| v)
        .collect();
    // Narrow `skipped` to the values whose readers all follow them.
    let links = loop {
        let mut links: HashMap<usize, Link> = HashMap::new();
        for (n, mv) in moves.iter().enumerate() {
            let Some((x, outs, mv)) = mv else { continue };
            let Some(dtype) = m.values.get(*x).and_then(Value::as_tensor).map(|t| t.dtype) else {
                continue;
            };
            let from = match links.get(x) {
                Some(l) if skipped.contains(x) => l.clone(),
                _ => match plain(m, *x, dtype) {
                    Some(sizes) => Link {
                        source: *x,
                        view: View::contiguous(sizes),
                        head: n,
                        state: Elements::default(),
                    },
                    None => continue,
                },
            };
            if let Some((views, state)) = derive(m, &from, outs, mv, dtype) {
                for (&o, view) in outs.iter().zip(views) {
                    let state = state.clone();
                    links.insert(
                        o,
                        Link {
                            view,
                            state,
                            ..from.clone()
                        },
                    );
                }
            }
        }
        // What a chain leaves is a copy of source elements, or of their
        // requantization: dequantized ones only pass through.
        links.retain(|v, l| l.state.deq.is_none() || skipped.contains(v));
        let followed = |v: &usize| {
            links.contains_key(v)
                && readers[v].as_ref().is_some_and(|r| {
                    r.iter().all(|&(n, _)| {
                        moves[n]
                            .as_ref()
                            .is_some_and(|(_, outs, _)| outs.iter().all(|o| links.contains_key(o)))
                    })
                })
        };
        let next: HashSet<usize> = skipped.iter().copied().filter(followed).collect();
        if next == skipped {
            break links;
        }
        skipped = next;
    };

    // The chains by first instruction.
    let mut chains: BTreeMap<usize, Chain> = BTreeMap::new();
    for (n, mv) in moves.iter().enumerate() {
        let Some((_, outs, _)) = mv else { continue };
        let Some(link) = outs.first().and_then(|o| links.get(o)) else {
            continue;
        };
        let chain = chains.entry(link.head).or_default();
        chain.members.push(n);
        for (pos, &o) in outs.iter().enumerate() {
            if !skipped.contains(&o) {
                chain.finals.push((n, pos, o));
            }
        }
    }
    // First instruction → the gathers in its place, each with the
    // instruction whose result it writes.
    let mut replaced: HashMap<usize, Vec<(usize, Instruction)>> = HashMap::new();
    let mut dropped: HashSet<usize> = HashSet::new();
    let mut moved = Vec::new();
    for (head, Chain { members, mut finals }) in chains {
        // Nothing to save in a chain that skips no value.
        if members.iter().all(|&n| {
            moves[n]
                .as_ref()
                .is_some_and(|(_, o, _)| o.iter().all(|v| !skipped.contains(v)))
        }) {
            continue;
        }
        // Each result is written early, on new bytes: none may be named
        // elsewhere; and each box must fit a kernel's rank.
        let movable = finals.iter().all(|&(_, _, o)| {
            readers[&o].is_some() && links[&o].view.flat().0.len() <= ptec_runtime::kernels::MAX_RANK
        });
        // The results traced of an instruction must be its first outputs
        // (`ptec check` lines them up with ExecuTorch's); of consecutive
        // gathers logged as one instruction only the last is traced, so
        // its first output goes last.
        let prefixes = finals
            .iter()
            .all(|&(n, pos, _)| pos == 0 || finals.iter().any(|&(k, p, _)| k == n && p + 1 == pos));
        if !movable || !prefixes {
            continue;
        }
        finals.sort_by_key(|&(n, pos, _)| (n, std::cmp::Reverse(pos)));
        let mut calls = Vec::new();
        for (n, _, o) in finals {
            let link = &links[&o];
            let (sizes, strides) = link.view.flat();
            let sizes = push_int_list(m, &sizes);
            let strides = push_int_list(m, &strides);
            let offset = push_value(m, Value::Int(link.view.offset as i64));
            let table = match &link.state.table {
                Some(t) => {
                    let items = t.iter().map(|&v| push_value(m, Value::Int(v as i64))).collect();
                    push_value(m, Value::IntList(items))
                }
                None => push_value(m, Value::Null),
            };
            let args = vec![link.source, sizes, strides, offset, table, o, o];
            calls.push((n, kernel_call(m, GATHER, args)));
            moved.push(o);
        }
        replaced.insert(head, calls);
        dropped.extend(members);
    }
    if replaced.is_empty() {
        return;
    }
    let old = std::mem::take(&mut m.instructions);
    let mut traces = m.stacktraces.take();
    let (mut code, mut origins, mut frames) = (Vec::new(), Vec::new(), Vec::new());
    for (n, ins) in old.into_iter().enumerate() {
        let kept = match replaced.remove(&n) {
            Some(calls) => calls,
            None if dropped.contains(&n) => continue,
            None => vec![(n, ins)],
        };
        for (from, call) in kept {
            code.push(call);
            origins.push(m.origin(from));
            if let Some(t) = traces.as_mut() {
                frames.push(t.get(from).cloned().unwrap_or_default());
            }
        }
    }
    if traces.is_some() {
        traces = Some(frames);
    }
    m.instructions = code;
    m.origins = origins;
    m.stacktraces = traces;
    unplan(m, moved);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::aten::{PERMUTE_COPY, RELU};
    use crate::passes::rewrite::push_f32_tensor;

    /// A tensor's elements in row-major order, with its sizes.
    #[derive(Clone, Debug)]
    struct Dense {
        data: Vec<usize>,
        sizes: Vec<usize>,
    }

    fn strides(sizes: &[usize]) -> Vec<usize> {
        let mut s = vec![1; sizes.len()];
        for d in (0..sizes.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * sizes[d + 1];
        }
        s
    }

    fn unravel(mut i: usize, sizes: &[usize]) -> Vec<usize> {
        let mut idx = vec![0; sizes.len()];
        for d in (0..sizes.len()).rev() {
            idx[d] = i % sizes[d];
            i /= sizes[d];
        }
        idx
    }

    /// Each operation done the plain way, element by element.
    impl Dense {
        fn permute(&self, perm: &[usize]) -> Dense {
            let sizes: Vec<usize> = perm.iter().map(|&p| self.sizes[p]).collect();
            let st = strides(&self.sizes);
            let n = self.data.len();
            let data = (0..n)
                .map(|i| {
                    let idx = unravel(i, &sizes);
                    self.data[perm.iter().zip(&idx).map(|(&p, &k)| k * st[p]).sum::<usize>()]
                })
                .collect();
            Dense { data, sizes }
        }

        fn slice(&self, d: usize, start: usize, len: usize) -> Dense {
            let mut sizes = self.sizes.clone();
            sizes[d] = len;
            let st = strides(&self.sizes);
            let n = sizes.iter().product();
            let data = (0..n)
                .map(|i| {
                    let mut idx = unravel(i, &sizes);
                    idx[d] += start;
                    self.data[idx.iter().zip(&st).map(|(k, s)| k * s).sum::<usize>()]
                })
                .collect();
            Dense { data, sizes }
        }
    }

    /// What the gather of `v` reads from `source`.
    fn gathered(source: &[usize], v: &View) -> Vec<usize> {
        let (sizes, st) = v.flat();
        let n: usize = sizes.iter().product();
        (0..n)
            .map(|i| source[v.offset + unravel(i, &sizes).iter().zip(&st).map(|(k, s)| k * s).sum::<usize>()])
            .collect()
    }

    #[test]
    fn a_channel_shuffle_is_one_strided_read_per_half() {
        // ShuffleNet's: NHWC [1, 28, 28, 116] → NCHW → (2, 58) groups →
        // swapped → 116 channels → halves → NHWC each.
        let source = Dense {
            data: (0..28 * 28 * 116).collect(),
            sizes: vec![1, 28, 28, 116],
        };
        let nchw = source.permute(&[0, 3, 1, 2]);
        let swapped = Dense {
            sizes: vec![1, 2, 58, 28, 28],
            ..nchw
        }
        .permute(&[0, 2, 1, 3, 4]);
        let shuffled = Dense {
            sizes: vec![1, 116, 28, 28],
            ..swapped
        };
        let v = View::contiguous(&source.sizes)
            .permute(&[0, 3, 1, 2])
            .reshape(&[1, 2, 58, 28, 28])
            .unwrap()
            .permute(&[0, 2, 1, 3, 4])
            .reshape(&[1, 116, 28, 28])
            .unwrap();
        for (k, start) in [0, 58].into_iter().enumerate() {
            let half = v.slice(1, start, 58).unwrap().permute(&[0, 2, 3, 1]);
            let want = shuffled.slice(1, start, 58).permute(&[0, 2, 3, 1]);
            assert_eq!(half.sizes(), want.sizes);
            assert_eq!(gathered(&source.data, &half), want.data, "half {k}");
            // Channel c of half k is channel c/2 + 58 (c%2) of the source.
            let (sizes, st) = half.flat();
            assert_eq!(
                (sizes, st, half.offset),
                (vec![28, 28, 29, 2], vec![3248, 116, 1, 58], 29 * k)
            );
        }
    }

    #[test]
    fn random_chains_read_what_their_copies_hold() {
        // Chains of reshapes (to random groupings of the prime factors, in
        // random order), permutations and slices, from contiguous tensors:
        // every view the factors can follow reads what the copies hold, and
        // most chains are followed to the end.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let (mut followed, mut chains) = (0, 0);
        for _ in 0..2000 {
            let rank = 1 + next(4);
            let sizes: Vec<usize> = (0..rank).map(|_| [1, 2, 3, 4, 6, 8][next(6)]).collect();
            let source: Vec<usize> = (0..sizes.iter().product()).collect();
            let mut dense = Dense {
                data: source.clone(),
                sizes: sizes.clone(),
            };
            let mut view = Some(View::contiguous(&sizes));
            chains += 1;
            for _ in 0..1 + next(6) {
                let r = dense.sizes.len();
                match next(3) {
                    0 => {
                        let mut primes = Vec::new();
                        for &s in &dense.sizes {
                            let mut s = s;
                            for p in [2, 3] {
                                while s % p == 0 {
                                    primes.push(p);
                                    s /= p;
                                }
                            }
                        }
                        for i in (1..primes.len()).rev() {
                            primes.swap(i, next(i + 1));
                        }
                        let mut new = vec![1];
                        for p in primes {
                            if next(2) == 0 {
                                new.push(1);
                            }
                            *new.last_mut().unwrap() *= p;
                        }
                        if next(3) == 0 {
                            new.insert(next(new.len() + 1), 1);
                        }
                        view = view.and_then(|v| v.reshape(&new));
                        dense.sizes = new;
                    }
                    1 => {
                        let mut perm: Vec<usize> = (0..r).collect();
                        for i in (1..r).rev() {
                            perm.swap(i, next(i + 1));
                        }
                        view = view.map(|v| v.permute(&perm));
                        dense = dense.permute(&perm);
                    }
                    _ => {
                        let d = next(r);
                        let n = dense.sizes[d];
                        let len = 1 + next(n);
                        let start = next(n - len + 1);
                        view = view.and_then(|v| v.slice(d, start, len));
                        dense = dense.slice(d, start, len);
                    }
                }
                if let Some(v) = &view {
                    assert_eq!(v.sizes(), dense.sizes);
                    assert_eq!(gathered(&source, v), dense.data, "from {sizes:?}: {v:?}");
                }
            }
            followed += view.is_some() as usize;
        }
        assert!(followed * 2 > chains, "{followed} of {chains} chains followed");
    }

    /// ShuffleNet's shuffle as a method: `cat` (here a `relu`) writes the
    /// NHWC image, the chain shuffles it, and a `relu` reads each half;
    /// `[image, half 0, half 1]` and the values the chain passes through.
    fn shuffle_method() -> (Method, [usize; 3], Vec<usize>) {
        let mut m = crate::analysis::test_methods::empty(1 << 24);
        let mut offset = 0;
        let mut t = |m: &mut Method, sizes: &[usize]| {
            offset += 1 << 19;
            push_f32_tensor(m, sizes.to_vec(), Placement::Planned { buffer: 1, offset })
        };
        let x = t(&mut m, &[1, 28, 28, 116]);
        let image = t(&mut m, &[1, 28, 28, 116]);
        let nchw = t(&mut m, &[1, 116, 28, 28]);
        let grouped = t(&mut m, &[1, 2, 58, 28, 28]);
        let swapped = t(&mut m, &[1, 58, 2, 28, 28]);
        let shuffled = t(&mut m, &[1, 116, 28, 28]);
        let halves = [t(&mut m, &[1, 58, 28, 28]), t(&mut m, &[1, 58, 28, 28])];
        let nhwc = [t(&mut m, &[1, 28, 28, 58]), t(&mut m, &[1, 28, 28, 58])];
        let outs = [t(&mut m, &[1, 28, 28, 58]), t(&mut m, &[1, 28, 28, 58])];
        let int_list = |m: &mut Method, xs: &[usize]| push_int_list(m, xs);
        let p0312 = int_list(&mut m, &[0, 3, 1, 2]);
        let s5 = int_list(&mut m, &[1, 2, 58, 28, 28]);
        let p5 = int_list(&mut m, &[0, 2, 1, 3, 4]);
        let s4 = int_list(&mut m, &[1, 116, 28, 28]);
        let split = int_list(&mut m, &[58, 58]);
        let one = push_value(&mut m, Value::Int(1));
        let list = push_value(&mut m, Value::TensorList(halves.to_vec()));
        let p0231 = int_list(&mut m, &[0, 2, 3, 1]);
        m.inputs.push(x);
        m.outputs.extend(outs);
        let code = vec![
            kernel_call(&mut m, RELU, vec![x, image, image]),
            kernel_call(&mut m, PERMUTE_COPY, vec![image, p0312, nchw, nchw]),
            kernel_call(&mut m, "aten::view_copy.out", vec![nchw, s5, grouped, grouped]),
            kernel_call(&mut m, PERMUTE_COPY, vec![grouped, p5, swapped, swapped]),
            kernel_call(&mut m, "aten::view_copy.out", vec![swapped, s4, shuffled, shuffled]),
            kernel_call(
                &mut m,
                "aten::split_with_sizes_copy.out",
                vec![shuffled, split, one, list, list],
            ),
            kernel_call(&mut m, PERMUTE_COPY, vec![halves[0], p0231, nhwc[0], nhwc[0]]),
            kernel_call(&mut m, PERMUTE_COPY, vec![halves[1], p0231, nhwc[1], nhwc[1]]),
            kernel_call(&mut m, RELU, vec![nhwc[1], outs[1], outs[1]]),
            kernel_call(&mut m, RELU, vec![nhwc[0], outs[0], outs[0]]),
        ];
        m.instructions = code;
        (
            m,
            [image, nhwc[0], nhwc[1]],
            vec![nchw, grouped, swapped, shuffled, halves[0], halves[1]],
        )
    }

    fn names(m: &Method) -> Vec<String> {
        m.instructions.iter().map(|i| kernel_name(m, i).unwrap().0).collect()
    }

    #[test]
    fn a_shuffle_in_a_method_becomes_two_gathers_where_it_began() {
        let (mut m, [image, h0, h1], _) = shuffle_method();
        compose_moves(&mut m);
        assert_eq!(names(&m), [RELU, GATHER, GATHER, RELU, RELU]);
        // In program order of what they write; each logged as the
        // permutation whose result it is (instructions 7 and 6 as read).
        for (n, half, from, offset) in [(1, h0, 6, 0), (2, h1, 7, 29)] {
            let (_, args) = kernel_name(&m, &m.instructions[n]).unwrap();
            assert_eq!((args[0], args[5], args[6]), (image, half, half));
            assert_eq!(m.values[args[4]], Value::Null);
            let ints = |v: usize| match &m.values[v] {
                Value::IntList(items) => items
                    .iter()
                    .map(|&i| match m.values[i] {
                        Value::Int(k) => k,
                        _ => panic!(),
                    })
                    .collect::<Vec<_>>(),
                _ => panic!(),
            };
            assert_eq!(ints(args[1]), [28, 28, 29, 2]);
            assert_eq!(ints(args[2]), [3248, 116, 1, 58]);
            assert!(matches!(m.values[args[3]], Value::Int(o) if o == offset));
            assert_eq!(m.origin(n).instruction, from);
            // Written earlier than planned: new bytes.
            assert_eq!(m.values[half].as_tensor().unwrap().placement, Placement::Unplanned);
        }
        assert_eq!(m.origin(3).instruction, 8);
    }

    #[test]
    fn chains_whose_values_are_read_elsewhere_stop_there() {
        // An intermediate that is also a method output keeps its bytes:
        // the chain up to it stays, and the rest reads it.
        let (mut m, _, mid) = shuffle_method();
        m.outputs.push(mid[3]);
        compose_moves(&mut m);
        let view = "aten::view_copy.out";
        assert_eq!(
            names(&m),
            [RELU, PERMUTE_COPY, view, PERMUTE_COPY, view, GATHER, GATHER, RELU, RELU]
        );
        for n in [5, 6] {
            assert_eq!(kernel_name(&m, &m.instructions[n]).unwrap().1[0], mid[3]);
        }
        // A result named outside the kernels (a method output) cannot move
        // to new bytes: that chain stays as it is.
        let (mut m, [_, h0, _], _) = shuffle_method();
        m.outputs.push(h0);
        let before = names(&m);
        compose_moves(&mut m);
        assert_eq!(names(&m), before);
        // An intermediate another kernel reads is written, by a gather of
        // its own, and the rest of the chain starts from it.
        let (mut m, [image, ..], mid) = shuffle_method();
        let extra = push_f32_tensor(&mut m, vec![1, 2, 58, 28, 28], Placement::Unplanned);
        let relu = kernel_call(&mut m, RELU, vec![mid[1], extra, extra]);
        m.instructions.insert(3, relu);
        compose_moves(&mut m);
        assert_eq!(names(&m), [RELU, GATHER, RELU, GATHER, GATHER, RELU, RELU]);
        let read = |n: usize| {
            let args = kernel_name(&m, &m.instructions[n]).unwrap().1;
            (args[0], args[5])
        };
        assert_eq!(read(1), (image, mid[1]));
        assert_eq!(read(3).0, mid[1]);
        assert_eq!(read(4).0, mid[1]);
    }
}
