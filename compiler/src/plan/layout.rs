//! Where every tensor of a method lives in the generated code.
//!
//! A method owns one arena: its planned buffers (memory ids 1..) laid end to
//! end, each 64-byte aligned, followed by space ptec plans itself for
//! tensors the program leaves unplanned (caller-provided inputs, kernel
//! outputs without a plan), so that generated code never needs a pointer
//! from outside. Constants stay in the embedded file data.
use crate::analysis::alias::Aliases;
use crate::analysis::lives::{lives, Life};
use crate::error::{Diagnostic, ErrorKind, Location};
use crate::ir::*;
use crate::plan::lowest_fit;
use crate::plan::squeeze::Squeeze;
use std::collections::BTreeSet;

/// Where a tensor value's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Home {
    /// In the method's arena at this byte offset.
    Arena { offset: usize },
    /// In embedded data (`source`) at this byte offset.
    Data { source: DataSource, offset: usize },
    /// Not a tensor.
    None,
}

/// The arena of a method and the home of each value.
#[derive(Clone, Debug)]
pub struct MethodLayout {
    /// Arena bytes (a multiple of 64).
    pub arena_size: usize,
    /// Arena offset of each planned buffer, by memory id (0 unused).
    pub buffer_base: Vec<usize>,
    pub homes: Vec<Home>,
    /// Kept tensors the compiler prepares (see `codegen::prepare`): they
    /// have no home; their call reads the prepared constant.
    pub prepared: BTreeSet<usize>,
    /// What [`MethodLayout::squeeze`] cut (`buffer_base` is from before).
    squeezed: Squeeze,
    /// The arena values the squeeze was told no code touches: their bytes
    /// may now be another's, so a view of one is a compiler bug.
    untouched: BTreeSet<usize>,
}

const ALIGN: usize = 64;

fn align_up(n: usize) -> Option<usize> {
    n.checked_add(ALIGN - 1).map(|x| x / ALIGN * ALIGN)
}

/// Lays out `m`'s arena. Fails for tensors whose storage cannot be known at
/// compile time (unbounded dynamic shapes without a plan, external data not
/// given).
#[cfg(test)]
pub fn layout_method(m: &Method) -> Result<MethodLayout, Vec<Diagnostic>> {
    layout_prepared(m, BTreeSet::new())
}

/// Lays out `m`'s arena, where the kept tensors `prepared` are prepared by the
/// compiler: they take no bytes, nor does a buffer ptec added that holds
/// nothing else.
pub fn layout_prepared(m: &Method, prepared: BTreeSet<usize>) -> Result<MethodLayout, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let mut buffer_base = vec![0usize; m.buffer_sizes.len().max(1)];
    // The added buffers something still lives in.
    let mut needed = vec![false; m.buffer_sizes.len()];
    for (i, v) in m.values.iter().enumerate() {
        if let Some(Placement::Planned { buffer, .. } | Placement::Mutable { buffer, .. }) =
            v.as_tensor().map(|t| &t.placement)
        {
            if !prepared.contains(&i) {
                if let Some(n) = needed.get_mut(*buffer) {
                    *n = true;
                }
            }
        }
    }
    let mut end = 0usize;
    let overflow = |at: Location| {
        Diagnostic::new(
            ErrorKind::BadSizes {
                detail: "the method's memory exceeds the address space".into(),
            },
            at,
        )
    };
    for (id, &size) in m.buffer_sizes.iter().enumerate().skip(1) {
        buffer_base[id] = end;
        let size = if id >= m.program_buffers && !needed[id] {
            0
        } else {
            size
        };
        match usize::try_from(size)
            .ok()
            .and_then(|s| end.checked_add(s))
            .and_then(align_up)
        {
            Some(e) => end = e,
            None => {
                errors.push(overflow(Location::method(&m.name)));
                return Err(errors);
            }
        }
    }
    let used = lives(m, |_| None);
    let mut homes = Vec::with_capacity(m.values.len());
    for (i, v) in m.values.iter().enumerate() {
        let at = Location::method(&m.name).value(i);
        let Value::Tensor(t) = v else {
            homes.push(Home::None);
            continue;
        };
        let home = match &t.placement {
            _ if prepared.contains(&i) => Home::None,
            Placement::Planned { buffer, offset } | Placement::Mutable { buffer, offset, .. } => Home::Arena {
                offset: buffer_base.get(*buffer).copied().unwrap_or(0) + *offset as usize,
            },
            Placement::Constant { data } => Home::Data {
                source: data.source,
                offset: data.offset,
            },
            Placement::External { key, data } => match data {
                Some(d) => Home::Data {
                    source: d.source,
                    offset: d.offset,
                },
                None => {
                    errors.push(Diagnostic::new(
                        ErrorKind::External {
                            key: key.clone(),
                            detail: "the program keeps this tensor in a .ptd file; give it with --data (or `data = [...]` in include_pte!)".into(),
                        },
                        at,
                    ));
                    Home::None
                }
            },
            // Nothing touches it (a temporary whose instructions a pass
            // fused away): no bytes.
            Placement::Unplanned if used[i].is_none() => Home::None,
            Placement::Unplanned => {
                if t.dynamism == Dynamism::DynamicUnbound {
                    errors.push(Diagnostic::new(
                        ErrorKind::Unsupported {
                            detail: "an unplanned tensor with an unbounded dynamic shape".into(),
                        },
                        at,
                    ));
                    Home::None
                } else {
                    let offset = end;
                    match end.checked_add(t.nbytes()).and_then(align_up) {
                        Some(e) => end = e,
                        None => {
                            errors.push(overflow(at));
                            return Err(errors);
                        }
                    }
                    Home::Arena { offset }
                }
            }
        };
        homes.push(home);
    }
    if errors.is_empty() {
        Ok(MethodLayout {
            arena_size: end,
            buffer_base,
            homes,
            prepared,
            squeezed: Squeeze::default(),
            untouched: BTreeSet::new(),
        })
    } else {
        Err(errors)
    }
}

impl MethodLayout {
    /// Cuts the arena bytes that no value `touched` covers (see
    /// [`crate::plan::squeeze`]); called once, before anything else is
    /// placed. A method with jumps keeps its layout: there the generated
    /// code's accesses are not followed value by value.
    pub fn squeeze(&mut self, m: &Method, touched: impl Fn(usize) -> bool) {
        if m.has_jumps() {
            return;
        }
        let ranges = (0..m.values.len())
            .filter(|&v| touched(v))
            .filter_map(|v| match self.range(m, v)? {
                (Home::Arena { offset }, n) => Some((offset, offset + n)),
                _ => None,
            });
        let squeeze = Squeeze::keeping(ranges, self.arena_size);
        for home in &mut self.homes {
            if let Home::Arena { offset } = home {
                *offset = squeeze.map(*offset);
            }
        }
        self.arena_size = squeeze.map(self.arena_size);
        self.squeezed = squeeze;
        self.untouched = (0..m.values.len())
            .filter(|&v| !touched(v) && matches!(self.homes.get(v), Some(Home::Arena { .. })))
            .collect();
    }

    /// Whether the squeeze was told no code touches value `v`.
    pub fn untouched(&self, v: usize) -> bool {
        self.untouched.contains(&v)
    }

    /// Arena offset of byte `offset` of planned buffer `buffer`.
    pub fn at(&self, buffer: usize, offset: usize) -> Option<usize> {
        Some(self.squeezed.map(self.buffer_base.get(buffer)?.checked_add(offset)?))
    }

    /// Of bytes `start..end` of planned buffer `buffer`, the runs the
    /// squeeze kept: (start, end) in the buffer and where each starts in
    /// the arena.
    pub fn kept(&self, buffer: usize, start: usize, end: usize) -> Option<Vec<(usize, usize, usize)>> {
        let base = *self.buffer_base.get(buffer)?;
        let runs = self
            .squeezed
            .kept_within(base.checked_add(start)?, base.checked_add(end)?);
        Some(
            runs.into_iter()
                .map(|(s, e)| (s - base, e - base, self.squeezed.map(s)))
                .collect(),
        )
    }

    /// Byte range a tensor value occupies, at its upper-bound size.
    pub fn range(&self, m: &Method, value: usize) -> Option<(Home, usize)> {
        let t = m.values.get(value)?.as_tensor()?;
        Some((self.homes[value], t.nbytes()))
    }
}

/// Whether two homes' byte ranges overlap (empty ranges never do).
pub fn overlaps(a: (Home, usize), b: (Home, usize)) -> bool {
    match (a, b) {
        ((Home::Arena { offset: x }, n), (Home::Arena { offset: y }, k)) => n > 0 && k > 0 && x < y + k && y < x + n,
        _ => false,
    }
}

/// What of the program's planned buffers is in use at each instruction,
/// so that an instruction's scratch can go where the plan is free.
pub struct Occupancy {
    /// Arena ranges (start, end) of the program's planned buffers.
    regions: Vec<(usize, usize)>,
    /// The life and arena range of every tensor in the arena.
    held: Vec<(Life, (usize, usize))>,
}

impl Occupancy {
    /// Of the method's tensors, those the generated code touches: not the
    /// `bypassed` values, and an instruction doing the work of `elided`
    /// ones uses their values (as the folds decided). A method with jumps
    /// gets no room: its values' lives are not spans of instructions.
    pub fn of(
        m: &Method,
        layout: &MethodLayout,
        elided: impl Fn(usize) -> Option<usize>,
        bypassed: impl Fn(usize) -> bool,
    ) -> Occupancy {
        if m.has_jumps() {
            return Occupancy {
                regions: Vec::new(),
                held: Vec::new(),
            };
        }
        // The program's plan, and ptec's buffer of temporaries: a scratch
        // may go wherever neither holds a value in use.
        let regions = (1..m.program_buffers.min(m.buffer_sizes.len()))
            .chain(m.temporaries_buffer)
            .filter_map(|b| {
                Some((
                    layout.at(b, 0)?,
                    layout.at(b, usize::try_from(m.buffer_sizes[b]).ok()?)?,
                ))
            })
            .collect();
        let aliases = Aliases::with_work_at(m, elided, bypassed);
        let held = aliases
            .spans()
            .iter()
            .filter(|s| matches!(layout.homes.get(s.value), Some(Home::Arena { .. })))
            .filter_map(|s| {
                let (lo, hi) = (usize::try_from(s.range.0).ok()?, usize::try_from(s.range.1).ok()?);
                Some((s.life, (layout.at(s.buffer, lo)?, layout.at(s.buffer, hi)?)))
            })
            .collect();
        Occupancy { regions, held }
    }

    /// The arena offset (a multiple of 64) of `bytes` that neither the
    /// program's plan nor ptec's temporaries use during instruction `n`,
    /// clear of `taken`; `None` when no buffer has such room.
    pub fn room(&self, n: usize, bytes: usize, taken: &[(usize, usize)]) -> Option<usize> {
        let at = Life { first: n, last: n };
        self.regions.iter().find_map(|&(start, end)| {
            let busy = self
                .held
                .iter()
                .filter(|(life, _)| life.overlaps(at))
                .map(|&(_, r)| r)
                .chain(taken.iter().copied())
                .filter(|&(lo, hi)| lo < end && hi > start)
                .map(|(lo, hi)| ((lo.max(start) - start) as u64, (hi.min(end) - start) as u64))
                .collect();
            lowest_fit(busy, bytes as u64, (end - start) as u64).map(|o| start + o as usize)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fold::Folds;

    use crate::analysis::test_methods::{bytes, calls};

    fn tensor(size: usize, offset: u64) -> Value {
        bytes(size, Placement::Planned { buffer: 1, offset })
    }

    fn method(values: Vec<Value>, instructions: &[&[usize]]) -> Method {
        calls(values, instructions, &[], &[])
    }

    fn occupancy(m: &Method, folds: &Folds) -> Occupancy {
        Occupancy::of(
            m,
            &layout_method(m).unwrap(),
            |n| folds.elided(n),
            |v| folds.bypassed(v),
        )
    }

    #[test]
    fn scratch_goes_where_the_plan_is_free() {
        // Value 0 (bytes 0..256) is written by call 0 and read by call 1;
        // value 1 (256..512) is written by call 2.
        let m = method(vec![tensor(256, 0), tensor(256, 256)], &[&[0], &[0], &[1]]);
        let o = occupancy(&m, &Folds::default());
        assert_eq!(o.room(1, 256, &[]), Some(256));
        assert_eq!(o.room(2, 256, &[]), Some(0));
        // Past what the instruction already took; none for more than the
        // plan has free.
        assert_eq!(o.room(1, 100, &[(256, 356)]), Some(384));
        assert_eq!(o.room(1, 769, &[]), None);
        assert_eq!(o.room(0, 768, &[]), Some(256));
    }

    #[test]
    fn a_view_keeps_its_base_in_use() {
        // Value 1 starts where value 0 does and nothing writes it: a view
        // of value 0, whose bytes stay in use until call 2 reads the view.
        let m = method(
            vec![tensor(256, 0), tensor(256, 0), tensor(64, 512)],
            &[&[0], &[2], &[1, 2]],
        );
        let o = occupancy(&m, &Folds::default());
        assert_eq!(o.room(1, 256, &[]), Some(256));
        assert_eq!(o.room(1, 600, &[]), None);
        // Were value 1 written, it would be no view: bytes 0..256 would
        // be free at call 1.
        let m = method(
            vec![tensor(256, 0), tensor(256, 0), tensor(64, 512)],
            &[&[0], &[2], &[2, 1]],
        );
        assert_eq!(occupancy(&m, &Folds::default()).room(1, 256, &[]), Some(0));
    }

    #[test]
    fn scratch_goes_where_the_temporaries_buffer_is_free() {
        // Value 0 fills the program's buffer throughout; temporaries 1
        // (512 bytes, calls 0 to 1) and 2 (256 bytes, calls 2 to 3) find
        // no room there and share ptec's buffer, half of which is free
        // during call 2.
        let unplanned = |size| bytes(size, Placement::Unplanned);
        let mut m = method(
            vec![tensor(1024, 0), unplanned(512), unplanned(256)],
            &[&[0, 1], &[1, 0], &[0, 2], &[2, 0]],
        );
        crate::plan::temporaries::plan_temporaries(&mut m);
        let own = m.temporaries_buffer.expect("the temporaries have a buffer");
        let layout = layout_method(&m).unwrap();
        let o = occupancy(&m, &Folds::default());
        let free_half = layout.at(own, 256);
        assert!(free_half.is_some());
        assert_eq!(o.room(2, 256, &[]), free_half);
        assert_eq!(o.room(2, 257, &[]), None);
        assert_eq!(o.room(1, 64, &[]), None);
        // Without it, only the program's buffer counts.
        m.temporaries_buffer = None;
        assert_eq!(occupancy(&m, &Folds::default()).room(2, 256, &[]), None);
    }

    #[test]
    fn without_jumps_only() {
        let mut m = method(vec![tensor(64, 0), Value::Bool(true)], &[&[0]]);
        m.instructions.push(Instruction::JumpFalse {
            cond: 1,
            destination: 0,
        });
        assert_eq!(occupancy(&m, &Folds::default()).room(0, 64, &[]), None);
    }

    #[test]
    fn what_folds_bypass_leaves_room() {
        // tests/fixtures/mlp.pte: 0 permute_copy(w1) → 1 addmm → 2 relu →
        // 3 permute_copy(w2) → 4 addmm → 5 softmax. With the transposes
        // folded and the relu fused, the products write no transposed
        // weights and no result of their own.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/mlp.pte");
        let bytes = std::fs::read(path).unwrap();
        let m = crate::load(&bytes, &[]).unwrap().program.unwrap().methods.remove(0);
        let layout = layout_method(&m).unwrap();
        let plan = m.buffer_sizes[1] as usize;
        let folds = Folds::of(&m, &layout, |_, _, _| false);
        assert_eq!(folds.elided(0), Some(1));
        let free_at = |o: &Occupancy, n: usize| {
            (1..=plan / 64)
                .rev()
                .map(|k| k * 64)
                .find(|&b| o.room(n, b, &[]).is_some())
        };
        let (unfolded, folded) = (
            free_at(&occupancy(&m, &Folds::default()), 1),
            free_at(
                &Occupancy::of(&m, &layout, |n| folds.elided(n), |v| folds.bypassed(v)),
                1,
            ),
        );
        assert!(folded > unfolded, "{folded:?} vs {unfolded:?}");
    }
}
