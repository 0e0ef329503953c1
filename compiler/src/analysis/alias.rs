//! Which values share data through planned memory: the one alias analysis
//! every pass consults.
//!
//! ExecuTorch plans a view (`flatten`, `view`, `squeeze`, ...) as a second
//! value at its base's bytes, with no instruction between them; other
//! values merely reuse bytes once an earlier one is dead. Telling the two
//! apart takes data flow, not value indices: a read of value `v` at
//! instruction `n` sees what the last writes before `n` left in `v`'s
//! bytes. When such a write was of another value `u`, `v` reads `u`'s data
//! under another name: `u` and `v` are aliases, and a pass that changes
//! how `u` is laid out or where it lives must change `v` alike, or leave
//! both alone.
//!
//! The analysis also gives the span during which each write's bytes are in
//! use (from the write to the last read it reaches, under any name), which
//! is what the passes placing new bytes must keep clear of.
//!
//! What counts as a write: the tensors a kernel call returns (its last
//! argument), a move's target, the method's inputs (before the first
//! instruction), and a delegate's arguments that nothing names before it
//! (its outputs; they count as read by it too). Everything else a call
//! names is read; the method's outputs are read after the last
//! instruction. Where this is unsure it errs towards more aliases:
//!
//! - a method with jumps has no single order of instructions, so there any
//!   two named values whose bytes overlap are aliases, in use throughout;
//! - mutable buffers carry data from one run to the next, so values
//!   overlapping one are its aliases, and its bytes are in use throughout;
//! - the caller may run a method again on the inputs it set, so theirs stay
//!   in use throughout.
use crate::analysis::lives::{held, Life};
use crate::ir::*;
use crate::names::written_in_place;

/// The aliases of each value, and when each write's bytes are in use.
#[derive(Clone, Debug, Default)]
pub(crate) struct Aliases {
    /// For each value, the other values it shares data with (sorted).
    partners: Vec<Vec<usize>>,
    /// One per write of planned bytes.
    spans: Vec<Span>,
}

/// Planned bytes written once, and while what was written is in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    /// The value written.
    pub(crate) value: usize,
    /// Memory id of its buffer.
    pub(crate) buffer: usize,
    /// Byte range (start, end) in the buffer.
    pub(crate) range: (u64, u64),
    /// From the write to the last read of these bytes it reaches (both
    /// included); to `usize::MAX` when the caller reads them after the run.
    pub(crate) life: Life,
}

/// A write of planned bytes, in instruction order.
struct Write {
    value: usize,
    buffer: usize,
    range: (u64, u64),
    /// Instruction position (0 for what is written before the first).
    at: usize,
    last_read: usize,
}

/// Byte range of a planned tensor: (buffer, start, end); `None` for
/// anything else or an empty tensor.
pub(crate) fn planned_range(m: &Method, v: usize) -> Option<(usize, u64, u64)> {
    let t = m.values.get(v)?.as_tensor()?;
    let (Placement::Planned { buffer, offset } | Placement::Mutable { buffer, offset, .. }) = t.placement else {
        return None;
    };
    let end = offset.checked_add(t.nbytes() as u64)?;
    (end > offset).then_some((buffer, offset, end))
}

/// Whether planned tensors `a` and `b` share bytes.
pub(crate) fn share_bytes(m: &Method, a: usize, b: usize) -> bool {
    match (planned_range(m, a), planned_range(m, b)) {
        (Some((ba, sa, ea)), Some((bb, sb, eb))) => ba == bb && sa < eb && sb < ea,
        _ => false,
    }
}

/// The tensors value `v` names: itself, or a list's items.
fn tensors_of(m: &Method, v: usize, out: &mut Vec<usize>) {
    match m.values.get(v) {
        Some(Value::Tensor(_)) => out.push(v),
        Some(Value::TensorList(items)) => out.extend(items.iter().copied()),
        Some(Value::OptionalTensorList(items)) => out.extend(items.iter().flatten().copied()),
        _ => {}
    }
}

/// What instruction `n` reads and writes (tensor values).
fn accesses(m: &Method, named_before: &[bool], n: usize) -> (Vec<usize>, Vec<usize>) {
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    match &m.instructions[n] {
        Instruction::Kernel { op, args } => {
            if let Some((&ret, rest)) = args.split_last() {
                tensors_of(m, ret, &mut writes);
                let name = m.operators.get(*op).map(Operator::full_name).unwrap_or_default();
                for &i in written_in_place(&name) {
                    if let Some(&a) = args.get(i) {
                        tensors_of(m, a, &mut writes);
                    }
                }
                for &a in rest {
                    tensors_of(m, a, &mut reads);
                }
                reads.retain(|v| !writes.contains(v));
            }
        }
        Instruction::Delegate { args, .. } => {
            for &a in args {
                tensors_of(m, a, &mut reads);
            }
            writes = reads
                .iter()
                .copied()
                .filter(|&v| !named_before.get(v).copied().unwrap_or(true))
                .collect();
        }
        Instruction::Move { from, to } => {
            tensors_of(m, *from, &mut reads);
            tensors_of(m, *to, &mut writes);
        }
        Instruction::JumpFalse { cond, .. } => tensors_of(m, *cond, &mut reads),
        Instruction::Free { .. } => {}
    }
    (reads, writes)
}

impl Aliases {
    /// The analysis of `m` as it stands.
    pub(crate) fn of(m: &Method) -> Aliases {
        Self::with_work_at(m, |_| None, |_| false)
    }

    /// The analysis of `m` as the generated code runs it: instruction `n`'s
    /// work is also done at `also(n)` (an instruction folded into another),
    /// and values `skip` says nothing touches are left out.
    pub(crate) fn with_work_at(
        m: &Method,
        also: impl Fn(usize) -> Option<usize>,
        skip: impl Fn(usize) -> bool,
    ) -> Aliases {
        let mut a = Aliases {
            partners: vec![Vec::new(); m.values.len()],
            spans: Vec::new(),
        };
        if m.has_jumps() {
            a.unordered(m, &skip);
        } else {
            a.flow(m, &also, &skip);
        }
        a.mutable_buffers(m, &skip);
        for p in &mut a.partners {
            p.sort_unstable();
            p.dedup();
        }
        a
    }

    /// The other values `v` shares data with.
    pub(crate) fn partners(&self, v: usize) -> &[usize] {
        self.partners.get(v).map_or(&[], Vec::as_slice)
    }

    pub(crate) fn is_aliased(&self, v: usize) -> bool {
        !self.partners(v).is_empty()
    }

    /// Every write of planned bytes, with when its bytes are in use.
    pub(crate) fn spans(&self) -> &[Span] {
        &self.spans
    }

    fn pair(&mut self, a: usize, b: usize) {
        if a != b && a < self.partners.len() && b < self.partners.len() {
            self.partners[a].push(b);
            self.partners[b].push(a);
        }
    }

    /// Straight-line data flow: each read sees the latest writes to its
    /// bytes.
    fn flow(&mut self, m: &Method, also: &impl Fn(usize) -> Option<usize>, skip: &impl Fn(usize) -> bool) {
        let len = m.instructions.len();
        let mut writes: Vec<Write> = Vec::new();
        let write = |writes: &mut Vec<Write>, v: usize, at: usize| {
            if skip(v) {
                return;
            }
            if let Some((buffer, start, end)) = planned_range(m, v) {
                writes.push(Write {
                    value: v,
                    buffer,
                    range: (start, end),
                    at,
                    last_read: at,
                });
            }
        };
        // What holds data from run to run, the inputs the caller may run
        // the method again on and the mutable buffers, is written before
        // the first instruction and in use throughout; and what a delegate
        // names first, it writes.
        let mut named_before = vec![false; m.values.len()];
        for v in m.inputs.iter().copied().chain(held(m)) {
            write(&mut writes, v, 0);
            if let Some(w) = writes.last_mut().filter(|w| w.value == v) {
                w.last_read = usize::MAX;
            }
            if let Some(b) = named_before.get_mut(v) {
                *b = true;
            }
        }
        for n in 0..len {
            let (reads, written) = accesses(m, &named_before, n);
            let read_at = also(n).map_or(n, |k| k.max(n));
            for &v in &reads {
                if !skip(v) {
                    self.read(m, &mut writes, v, read_at);
                }
            }
            let write_at = also(n).map_or(n, |k| k.min(n));
            for &v in &written {
                write(&mut writes, v, write_at);
            }
            for v in reads.into_iter().chain(written) {
                if let Some(b) = named_before.get_mut(v) {
                    *b = true;
                }
            }
        }
        for &v in &m.outputs {
            if !skip(v) {
                self.read(m, &mut writes, v, usize::MAX);
            }
        }
        self.spans.extend(writes.into_iter().map(|w| Span {
            value: w.value,
            buffer: w.buffer,
            range: w.range,
            life: Life {
                first: w.at,
                last: w.last_read,
            },
        }));
    }

    /// A read of `v` at `at`: the latest writes to each of its bytes
    /// (those before `at` in `writes`, which is in instruction order).
    fn read(&mut self, m: &Method, writes: &mut [Write], v: usize, at: usize) {
        let Some((buffer, start, end)) = planned_range(m, v) else {
            return;
        };
        // The bytes of `v` no later write has covered yet.
        let mut open = vec![(start, end)];
        for w in writes.iter_mut().rev() {
            if open.is_empty() {
                break;
            }
            if w.buffer != buffer {
                continue;
            }
            let (ws, we) = w.range;
            if !open.iter().any(|&(s, e)| s < we && ws < e) {
                continue;
            }
            w.last_read = w.last_read.max(at);
            let written = w.value;
            // What it wrote hides what was written before. (A dynamic
            // tensor is written to its live size only, but no one reads
            // past that either.)
            open = open
                .into_iter()
                .flat_map(|(s, e)| [(s, e.min(ws)), (s.max(we), e)])
                .filter(|&(s, e)| s < e)
                .collect();
            self.pair(written, v);
        }
    }

    /// With jumps: values whose bytes overlap alias, in use throughout.
    fn unordered(&mut self, m: &Method, skip: &impl Fn(usize) -> bool) {
        let mut named = vec![false; m.values.len()];
        let none = vec![false; m.values.len()];
        for n in 0..m.instructions.len() {
            let (reads, writes) = accesses(m, &none, n);
            for v in reads.into_iter().chain(writes) {
                named[v] = true;
            }
        }
        for v in m.inputs.iter().chain(&m.outputs).copied().chain(held(m)) {
            if let Some(b) = named.get_mut(v) {
                *b = true;
            }
        }
        let held: Vec<(usize, (usize, u64, u64))> = (0..m.values.len())
            .filter(|&v| named[v] && !skip(v))
            .filter_map(|v| Some((v, planned_range(m, v)?)))
            .collect();
        self.overlapping_pairs(&held, |_, _| true);
        self.spans.extend(held.iter().map(|&(value, (buffer, s, e))| Span {
            value,
            buffer,
            range: (s, e),
            life: Life::ALWAYS,
        }));
    }

    /// Values overlapping a mutable buffer, or another tensor held from
    /// run to run, are its aliases (its data crosses runs, past any order
    /// of instructions).
    fn mutable_buffers(&mut self, m: &Method, skip: &impl Fn(usize) -> bool) {
        let across = held(m);
        let held: Vec<(usize, (usize, u64, u64))> = (0..m.values.len())
            .filter(|&v| !skip(v))
            .filter_map(|v| Some((v, planned_range(m, v)?)))
            .collect();
        self.overlapping_pairs(&held, |a, b| across.contains(&a) || across.contains(&b));
    }

    /// Pairs the values of `held` whose bytes overlap, where `keep` says.
    fn overlapping_pairs(&mut self, held: &[(usize, (usize, u64, u64))], keep: impl Fn(usize, usize) -> bool) {
        let mut sorted = held.to_vec();
        sorted.sort_unstable_by_key(|&(v, (b, s, _))| (b, s, v));
        for (i, &(a, (ba, _, ea))) in sorted.iter().enumerate() {
            for &(b, (bb, sb, _)) in &sorted[i + 1..] {
                if bb != ba || sb >= ea {
                    break;
                }
                if keep(a, b) {
                    self.pair(a, b);
                }
            }
        }
    }
}

/// Checks that a pass that changed how values are laid out (`old` → `new`)
/// changed none that shares data with another: such a value would be read
/// under its other name as it was before, a wrong answer with no error. A
/// pass breaking this is a bug in ptec; the error says where.
pub(crate) fn check_relaid(old: &Method, new: &Method) -> crate::error::Result<()> {
    let aliases = Aliases::of(old);
    for (v, (a, b)) in old.values.iter().zip(&new.values).enumerate() {
        let (Some(a), Some(b)) = (a.as_tensor(), b.as_tensor()) else {
            continue;
        };
        let relaid = a.sizes != b.sizes || a.placement != b.placement || a.dim_order != b.dim_order;
        if relaid && aliases.is_aliased(v) {
            return Err(crate::error::Errors::one(
                crate::error::ErrorKind::Internal {
                    detail: format!(
                        "a pass changed the layout of a value that shares its bytes with value(s) {:?}",
                        aliases.partners(v)
                    ),
                },
                crate::error::Location::method(&old.name).value(v),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_methods::{bytes, calls};

    fn at(offset: u64, size: usize) -> Value {
        bytes(size, Placement::Planned { buffer: 1, offset })
    }

    #[test]
    fn a_view_read_later_aliases_its_base() {
        // 0 writes value 0; value 1 (a view: the same bytes, never written)
        // is read by 1, which writes value 2.
        let m = calls(vec![at(0, 64), at(0, 64), at(128, 64)], &[&[0], &[1, 2]], &[], &[2]);
        let a = Aliases::of(&m);
        assert_eq!(a.partners(0), [1]);
        assert_eq!(a.partners(1), [0]);
        assert!(!a.is_aliased(2));
        // Value 0's bytes are in use until the view is read.
        let span = a.spans().iter().find(|s| s.value == 0).unwrap();
        assert_eq!(span.life, Life { first: 0, last: 1 });
    }

    /// A KV cache written in place by `llama::update_cache` holds its bytes
    /// from run to run: written before the first instruction and by the
    /// update, in use throughout, its own life too; and a value planned
    /// over it, even before its first use, is its alias.
    #[test]
    fn a_cache_written_in_place_is_held_across_runs() {
        // 0 writes value 0 (the projected value); 1 updates the cache
        // (value 1) in place, its out a placeholder (value 2); 2 reads the
        // cache into value 3. Value 4 is planned over the cache.
        let mut m = calls(
            vec![at(0, 64), at(128, 64), at(320, 64), at(384, 64), at(128, 64)],
            &[&[4], &[0], &[0, 1, 2], &[1, 3]],
            &[],
            &[3],
        );
        m.operators.push(Operator {
            name: "llama::update_cache".into(),
            overload: "out".into(),
        });
        if let Instruction::Kernel { op, .. } = &mut m.instructions[2] {
            *op = 1;
        }
        assert_eq!(held(&m), [1]);
        let lives = crate::analysis::lives::lives(&m, |_| None);
        assert_eq!(lives[1], Some(Life::ALWAYS));
        let (_, writes) = accesses(&m, &[false; 5], 2);
        assert!(writes.contains(&1), "{writes:?}");
        let a = Aliases::of(&m);
        assert!(a.partners(1).contains(&4), "{:?}", a.partners(1));
        assert!(a.spans().iter().any(|s| s.value == 1 && s.life.last == usize::MAX));
        let uses = crate::analysis::uses::Uses::direct(&m);
        assert!(uses.kernel_uses(1, usize::MAX).is_none());
    }

    /// A buffer the exporter writes back with `copy_` holds its bytes from
    /// run to run even when the file gives it no initial state (Gemma 4's
    /// caches, read before anything in the method writes them): without
    /// it, ptec took some of a cache's bytes for a temporary of its own
    /// between two of its reads.
    #[test]
    fn a_buffer_written_back_by_copy_is_held_across_runs() {
        // 0 writes value 2, planned over the cache (value 0); 1 reads the
        // cache into value 1; 2 copies value 1 back into the cache.
        let mut m = calls(
            vec![at(0, 64), at(128, 64), at(0, 64)],
            &[&[2], &[0, 1], &[0, 1, 0]],
            &[],
            &[1],
        );
        m.operators.push(Operator {
            name: "aten::copy_".into(),
            overload: String::new(),
        });
        if let Instruction::Kernel { op, .. } = &mut m.instructions[2] {
            *op = 1;
        }
        assert_eq!(held(&m), [0]);
        let lives = crate::analysis::lives::lives(&m, |_| None);
        assert_eq!(lives[0], Some(Life::ALWAYS));
        let a = Aliases::of(&m);
        assert!(a.partners(0).contains(&2), "{:?}", a.partners(0));
        assert!(a.spans().iter().any(|s| s.value == 0 && s.life.last == usize::MAX));
    }

    #[test]
    fn reused_bytes_are_no_alias() {
        // Value 0 is written and read, then value 1 takes its bytes.
        let m = calls(
            vec![at(0, 64), at(0, 64), at(128, 64), at(256, 64)],
            &[&[0], &[0, 2], &[1], &[1, 3]],
            &[],
            &[3],
        );
        let a = Aliases::of(&m);
        assert!((0..4).all(|v| !a.is_aliased(v)));
    }

    #[test]
    fn partial_overlaps_and_outputs_count() {
        // Value 1 starts inside value 0 and is a method output: read after
        // the run, it sees value 0's write.
        let m = calls(vec![at(0, 128), at(64, 64)], &[&[0]], &[], &[1]);
        let a = Aliases::of(&m);
        assert_eq!(a.partners(0), [1]);
        let span = a.spans().iter().find(|s| s.value == 0).unwrap();
        assert_eq!(span.life.last, usize::MAX);
    }

    #[test]
    fn a_later_write_hides_an_earlier_one() {
        // Value 0 written, then value 1 (same bytes) written, then value 2
        // (same bytes again, never written) read: only value 1 reaches it.
        let m = calls(
            vec![at(0, 64), at(0, 64), at(0, 64), at(128, 64)],
            &[&[0], &[1], &[2, 3]],
            &[],
            &[3],
        );
        let a = Aliases::of(&m);
        assert_eq!(a.partners(2), [1]);
        assert!(!a.is_aliased(0));
    }

    #[test]
    fn jumps_and_mutable_buffers_alias_whatever_overlaps() {
        let mut m = calls(vec![at(0, 64), at(0, 64), at(128, 64)], &[&[0], &[1]], &[], &[]);
        let cond = m.values.len();
        m.values.push(Value::Bool(true));
        m.instructions.push(Instruction::JumpFalse { cond, destination: 0 });
        let a = Aliases::of(&m);
        assert_eq!(a.partners(0), [1]);
        assert!(a.spans().iter().all(|s| s.life == Life::ALWAYS));

        let mut m = calls(vec![at(0, 64), at(0, 64)], &[&[1]], &[], &[]);
        if let Value::Tensor(t) = &mut m.values[0] {
            t.placement = Placement::Mutable {
                buffer: 1,
                offset: 0,
                initial: DataRef {
                    source: DataSource::Program,
                    offset: 0,
                    len: 64,
                },
            };
        }
        assert_eq!(Aliases::of(&m).partners(1), [0]);
    }

    #[test]
    fn a_delegate_reads_a_view_and_writes_its_outputs() {
        // Call 0 writes value 0; the delegate reads value 1 (its view) and
        // writes value 2, which reuses nothing.
        let mut m = calls(vec![at(0, 64), at(0, 64), at(128, 64)], &[&[0]], &[], &[2]);
        m.instructions.push(Instruction::Delegate {
            delegate: 0,
            args: vec![1, 2],
        });
        let a = Aliases::of(&m);
        assert_eq!(a.partners(1), [0]);
        assert!(!a.is_aliased(2));
    }
}
