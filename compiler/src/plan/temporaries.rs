//! Bytes for the tensors a method's instructions use that nothing has
//! planned: the temporaries the passes add (NHWC copies at region borders,
//! the intermediates of lowered delegate calls, a chain's output moved off
//! its input). Each goes where the program's own plan is free while it is
//! in use, so that ptec's rewriting costs no memory beyond the plan; what
//! finds no room there shares one buffer of ptec's own.
use crate::analysis::alias::Aliases;
use crate::analysis::lives::{lives, Life};
use crate::ir::*;
use crate::plan::{lowest_fit, ALIGN};

/// Plans the method's unplanned static tensors that its instructions use,
/// other than its inputs and outputs (which the caller may provide); the
/// largest first, each at the lowest offset of the first program buffer
/// where it fits. In a method with jumps a life is a span of instructions
/// only inside a straight run (one no jump leaves or enters midway): there
/// the temporaries living inside one share ptec's buffer, and the others
/// keep bytes of their own.
pub(crate) fn plan_temporaries(m: &mut Method) {
    let runs = straight_runs(m);
    let jumps = m.has_jumps();
    let lives = lives(m, |_| None);
    let size_of = |t: &Tensor| (t.nbytes() as u64).div_ceil(ALIGN) * ALIGN;
    let mut temps: Vec<(usize, Life, u64)> = m
        .values
        .iter()
        .enumerate()
        .filter_map(|(v, value)| match (value, lives[v]) {
            (Value::Tensor(t), Some(life))
                if t.placement == Placement::Unplanned
                    && t.dynamism != Dynamism::DynamicUnbound
                    && life.last != Life::ALWAYS.last
                    && runs[life.first] == runs[life.last]
                    && t.nbytes() > 0 =>
            {
                Some((v, life, size_of(t)))
            }
            _ => None,
        })
        .collect();
    if temps.is_empty() {
        return;
    }
    temps.sort_by_key(|&(v, _, size)| (std::cmp::Reverse(size), v));

    // What is in each buffer, and while: the writes of the program's
    // values, each in use until the last read it reaches under any name
    // (a view keeps its base's bytes in use), then the temporaries as they
    // are placed.
    let mut held: Vec<Vec<Held>> = vec![Vec::new(); m.buffer_sizes.len()];
    for span in Aliases::of(m).spans() {
        if let Some(h) = held.get_mut(span.buffer) {
            h.push(Held {
                life: span.life,
                range: span.range,
            });
        }
    }
    let busy_during = |held: &[Held], life: Life| -> Vec<(u64, u64)> {
        held.iter()
            .filter(|h| h.life.overlaps(life) && h.range.1 > h.range.0)
            .map(|h| h.range)
            .collect()
    };
    // With jumps, the program's values may live across a jump: only ptec's
    // own buffer takes temporaries.
    let plan = if jumps {
        0
    } else {
        m.program_buffers.min(m.buffer_sizes.len())
    };
    let mut own = AddedBuffer::default();
    let mut own_held: Vec<Held> = Vec::new();
    for (v, life, size) in temps {
        let placed = |offset: u64| Held {
            life,
            range: (offset, offset + size),
        };
        let in_plan = (1..plan)
            .find_map(|b| lowest_fit(busy_during(&held[b], life), size, m.buffer_sizes[b]).map(|offset| (b, offset)));
        let (buffer, offset) = match in_plan {
            Some((b, offset)) => {
                held[b].push(placed(offset));
                (b, offset)
            }
            None => {
                let offset = lowest_fit(busy_during(&own_held, life), size, u64::MAX).unwrap_or(own.size);
                own_held.push(placed(offset));
                own.size = own.size.max(offset + size);
                (own.id(m), offset)
            }
        };
        if let Some(Value::Tensor(t)) = m.values.get_mut(v) {
            t.placement = Placement::Planned { buffer, offset };
        }
    }
    own.install(m);
    m.temporaries_buffer = own.memory_id();
}

/// Bytes of a buffer in use, and while.
#[derive(Clone, Copy, Debug)]
struct Held {
    life: Life,
    /// Byte range (start, end).
    range: (u64, u64),
}

/// The straight run of each instruction, numbered from 0: a new one starts
/// at each jump's destination and after each jump.
fn straight_runs(m: &Method) -> Vec<usize> {
    let len = m.instructions.len();
    let mut starts = vec![false; len + 1];
    for (n, ins) in m.instructions.iter().enumerate() {
        if let Instruction::JumpFalse { destination, .. } = ins {
            starts[n + 1] = true;
            starts[(*destination).min(len)] = true;
        }
    }
    let mut run = 0;
    (0..len)
        .map(|n| {
            if n > 0 && starts[n] {
                run += 1;
            }
            run
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::analysis::test_methods::{bytes as tensor, calls};

    fn planned(offset: u64) -> Placement {
        Placement::Planned { buffer: 1, offset }
    }

    fn method(values: Vec<Value>, instructions: &[&[usize]], io: (&[usize], &[usize])) -> Method {
        calls(values, instructions, io.0, io.1)
    }

    fn placement(m: &Method, v: usize) -> Placement {
        m.values[v].as_tensor().unwrap().placement.clone()
    }

    #[test]
    fn temporaries_take_the_plans_free_bytes() {
        // Value 0 (input, bytes 0..256) lives always, 3 (output, 768..1024)
        // from call 2 on, 1 (256..768) during calls 0 and 1. Temporary 2 is
        // used at call 2, when 1's bytes are free; temporary 4 at calls 1
        // and 2, when no bytes of the plan are free throughout.
        let values = || {
            vec![
                tensor(256, planned(0)),
                tensor(512, planned(256)),
                tensor(512, Placement::Unplanned),
                tensor(256, planned(768)),
                tensor(64, Placement::Unplanned),
            ]
        };
        let mut m = method(values(), &[&[0, 1], &[1, 4], &[2, 4, 3]], (&[0], &[3]));
        plan_temporaries(&mut m);
        assert_eq!(placement(&m, 2), planned(256));
        assert_eq!(placement(&m, 4), Placement::Planned { buffer: 2, offset: 0 });
        assert_eq!(m.buffer_sizes, vec![0, 1024, 64]);
        assert_eq!(m.program_buffers, 2);
        // Used at call 1 only, 4 takes the output's bytes: the output is
        // not written yet.
        let mut m = method(values(), &[&[0, 1], &[1, 4], &[2, 3]], (&[0], &[3]));
        plan_temporaries(&mut m);
        assert_eq!(placement(&m, 4), planned(768));
        assert_eq!(m.buffer_sizes, vec![0, 1024]);
    }

    #[test]
    fn temporaries_alive_together_get_disjoint_bytes() {
        // Nothing of the plan is in use; temporaries 0 and 1 overlap in
        // time, 2 comes after both.
        let values = vec![
            tensor(300, Placement::Unplanned),
            tensor(200, Placement::Unplanned),
            tensor(500, Placement::Unplanned),
            tensor(1024, planned(0)),
        ];
        let mut m = method(values, &[&[0, 1], &[1], &[2], &[3]], (&[], &[]));
        plan_temporaries(&mut m);
        let range = |v: usize| match placement(&m, v) {
            Placement::Planned { buffer: 1, offset } => {
                (offset, offset + m.values[v].as_tensor().unwrap().nbytes() as u64)
            }
            other => panic!("value {v} is not in the plan: {other:?}"),
        };
        let (a, b, c) = (range(0), range(1), range(2));
        assert!(a.1 <= b.0 || b.1 <= a.0, "{a:?} and {b:?} overlap");
        assert!(c.1 <= 1024);
        assert_eq!(c.0 % ALIGN, 0);
        // The plan held them all: no buffer was added.
        assert_eq!(m.buffer_sizes, vec![0, 1024]);
    }

    #[test]
    fn a_view_keeps_its_base_in_use() {
        // Value 1 starts where value 0 does and nothing writes it (call 2
        // names it, but writes value 3): a view, read at call 2, of what
        // call 0 wrote. Temporary 2, used at call 1, must not take those
        // bytes.
        let values = || {
            vec![
                tensor(512, planned(0)),
                tensor(512, planned(0)),
                tensor(512, Placement::Unplanned),
                tensor(64, planned(960)),
            ]
        };
        let mut m = method(values(), &[&[0], &[2], &[1, 3]], (&[], &[]));
        plan_temporaries(&mut m);
        assert_eq!(placement(&m, 2), planned(512));
        // Were value 1 written by call 2, it would be no view.
        let mut m = method(values(), &[&[0], &[2], &[3, 1]], (&[], &[]));
        plan_temporaries(&mut m);
        assert_eq!(placement(&m, 2), planned(0));
    }

    #[test]
    fn inputs_outputs_and_unused_values_are_left_to_the_caller() {
        let values = vec![
            tensor(64, Placement::Unplanned),
            tensor(64, Placement::Unplanned),
            tensor(64, Placement::Unplanned),
        ];
        let mut m = method(values, &[&[0, 1]], (&[0], &[1]));
        plan_temporaries(&mut m);
        for v in 0..3 {
            assert_eq!(placement(&m, v), Placement::Unplanned, "value {v}");
        }
        assert_eq!(m.buffer_sizes, vec![0, 1024]);
    }

    #[test]
    fn mutable_buffers_are_never_shared() {
        // A mutable buffer holds its bytes between runs, though only call 0
        // names it.
        let values = vec![
            tensor(
                1024,
                Placement::Mutable {
                    buffer: 1,
                    offset: 0,
                    initial: DataRef {
                        source: DataSource::Program,
                        offset: 0,
                        len: 0,
                    },
                },
            ),
            tensor(64, Placement::Unplanned),
        ];
        let mut m = method(values, &[&[0], &[1]], (&[], &[]));
        plan_temporaries(&mut m);
        assert_eq!(placement(&m, 1), Placement::Planned { buffer: 2, offset: 0 });
    }

    #[test]
    fn a_loop_over_the_whole_method_keeps_temporaries_off_the_plan() {
        // A jump at the end back to the start: one straight run, but
        // values of the plan may carry over from one pass to the next.
        let values = vec![tensor(64, Placement::Unplanned), Value::Bool(true)];
        let mut m = method(values, &[&[0]], (&[], &[]));
        m.instructions.push(Instruction::JumpFalse {
            cond: 1,
            destination: 0,
        });
        plan_temporaries(&mut m);
        assert_eq!(placement(&m, 0), Placement::Planned { buffer: 2, offset: 0 });
    }

    #[test]
    fn with_jumps_only_temporaries_inside_a_straight_run_share() {
        // Call 0, call 1, a jump back to call 1, call 3. Temporary 0 lives
        // across the jump's destination; 1 and 2 live inside runs.
        let values = vec![
            tensor(64, Placement::Unplanned),
            tensor(128, Placement::Unplanned),
            tensor(128, Placement::Unplanned),
            Value::Bool(true),
        ];
        let mut m = method(values, &[&[0], &[0, 1], &[2]], (&[], &[]));
        m.instructions.insert(
            2,
            Instruction::JumpFalse {
                cond: 3,
                destination: 1,
            },
        );
        assert_eq!(straight_runs(&m), vec![0, 1, 1, 2]);
        plan_temporaries(&mut m);
        assert_eq!(placement(&m, 0), Placement::Unplanned);
        // In ptec's buffer, not the plan's (whose values may live across
        // the jump), and sharing it: they never live together.
        assert_eq!(placement(&m, 1), Placement::Planned { buffer: 2, offset: 0 });
        assert_eq!(placement(&m, 2), Placement::Planned { buffer: 2, offset: 0 });
        assert_eq!(m.buffer_sizes, vec![0, 1024, 128]);
    }
}
