//! Mutable state the methods of a program share.
//!
//! A program exported with `share_mutable_buffers` plans the mutable state
//! of all its methods in memory buffer 2, the same bytes for every method,
//! and ExecuTorch's runtime gives them one buffer: state one method writes,
//! another reads. ptec gives each method its own arena, so where more than
//! one method holds tensors in buffer 2 the program struct keeps those
//! bytes once more, in a buffer of their own, and hands them over when the
//! method that runs changes: the method that ran last copies the bytes it
//! holds back, the one about to run takes the bytes it holds (where
//! they are in each arena: `plan::shared`; the code: `codegen`). Only the
//! held bytes move, so ptec's own temporaries in a method's free bytes of
//! buffer 2 stay that method's business, and a method run again and again
//! pays nothing.
//!
//! Which bytes a method holds is read from the program as read, before the
//! passes add tensors of their own to the planned buffers.
use crate::ir::*;

/// The buffer that carries a program's shared state.
pub const SHARED_BUFFER: usize = 2;

/// The shared state of a program whose methods share it.
#[derive(Clone, Debug)]
pub struct SharedState {
    /// Bytes of the shared buffer.
    pub size: usize,
    /// By method, the byte ranges (start, end) of the shared buffer it
    /// holds tensors in, sorted and disjoint; empty for a method that
    /// holds none.
    pub held: Vec<Vec<(usize, usize)>>,
}

impl SharedState {
    /// The shared state of `program` (as read), if more than one of its
    /// methods holds tensors in the buffer that `share_mutable_buffers`
    /// shares: each method plans exactly that many buffers, and the same
    /// size for the shared one. A program where one method holds it (as
    /// Voxtral's exports do) shares nothing.
    pub fn of(program: &Program) -> Option<SharedState> {
        let shares = |m: &Method| m.program_buffers == SHARED_BUFFER + 1 && m.buffer_sizes.len() > SHARED_BUFFER;
        let size = program.methods.iter().find(|m| shares(m))?.buffer_sizes[SHARED_BUFFER];
        let alike =
            |m: &Method| m.buffer_sizes.len() <= SHARED_BUFFER || (shares(m) && m.buffer_sizes[SHARED_BUFFER] == size);
        if !program.methods.iter().all(alike) {
            return None;
        }
        let size = usize::try_from(size).ok()?;
        let held: Vec<Vec<(usize, usize)>> = program.methods.iter().map(|m| held_ranges(m, size)).collect();
        (held.iter().filter(|h| !h.is_empty()).count() > 1).then_some(SharedState { size, held })
    }
}

/// The ranges of the shared buffer method `m` holds tensors in (clipped
/// to the buffer; the verifier has checked every tensor fits its buffer),
/// merged.
fn held_ranges(m: &Method, size: usize) -> Vec<(usize, usize)> {
    let ranges: Vec<(usize, usize)> = m
        .values
        .iter()
        .filter_map(|v| {
            let t = v.as_tensor()?;
            let (Placement::Planned { buffer, offset } | Placement::Mutable { buffer, offset, .. }) = t.placement
            else {
                return None;
            };
            let start = usize::try_from(offset).ok()?.min(size);
            (buffer == SHARED_BUFFER).then(|| (start, start.saturating_add(t.nbytes()).min(size)))
        })
        .collect();
    merged(ranges)
}

/// Byte ranges (start, end) as the sorted, disjoint runs that cover them
/// (empty ones dropped).
pub(crate) fn merged(mut ranges: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    ranges.retain(|&(s, e)| e > s);
    ranges.sort_unstable();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (s, e) in ranges {
        match runs.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => runs.push((s, e)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(name: &str) -> Program {
        let path = format!("{}/../tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        let bytes = std::fs::read(&path).unwrap();
        crate::read::parse(&bytes, &[]).unwrap().program.unwrap()
    }

    #[test]
    fn each_method_holds_its_tensors_bytes_merged() {
        let p = program("shared_state.pte");
        let names: Vec<&str> = p.methods.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["plain", "push", "read", "write"]);
        let s = SharedState::of(&p).expect("three methods hold state");
        // acc (16 bytes) at 0, steps (4) right after it, hist (6 x 8 floats)
        // at 32; `write` holds acc and steps, merged.
        assert_eq!(s.size, 224);
        assert_eq!(s.held, [vec![], vec![(0, 16), (32, 224)], vec![(0, 16)], vec![(0, 20)]]);
    }

    #[test]
    fn a_buffer_one_method_holds_is_not_shared() {
        // Every method plans the shared buffer; only `text_decoder` holds
        // its KV caches there.
        assert!(SharedState::of(&program("voxtral_tts.pte")).is_none());
        // Nor is anything in a program without the shared buffer.
        assert!(SharedState::of(&program("kv_cache.pte")).is_none());
        // Nor when one method's second buffer differs in size: it was not
        // exported with `share_mutable_buffers`.
        let mut p = program("shared_state.pte");
        p.methods[1].buffer_sizes[SHARED_BUFFER] += 64;
        assert!(SharedState::of(&p).is_none());
    }
}
