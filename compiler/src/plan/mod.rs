//! Memory beyond ExecuTorch's plan: bytes for the temporaries the passes
//! add ([`temporaries`]), the arena's untouched bytes cut out ([`squeeze`])
//! and each value's home in the generated code's arena ([`layout`]).
pub(crate) mod layout;
pub(crate) mod squeeze;
pub(crate) mod temporaries;

use crate::ir::*;

/// Alignment of what the passes place in their buffers (a cache line; SIMD
/// loads never straddle one at a tensor's start).
pub(crate) const ALIGN: u64 = 64;

/// A planned buffer a pass adds to a method.
#[derive(Default)]
pub(crate) struct AddedBuffer {
    /// Its memory id, once something needs it.
    id: Option<usize>,
    pub(crate) size: u64,
}

impl AddedBuffer {
    /// The memory id, appending the buffer to the method's plan on first
    /// use (after the reserved entry 0).
    pub(crate) fn id(&mut self, m: &mut Method) -> usize {
        *self.id.get_or_insert_with(|| {
            if m.buffer_sizes.is_empty() {
                m.buffer_sizes.push(0);
            }
            m.buffer_sizes.push(0);
            m.buffer_sizes.len() - 1
        })
    }

    /// Bytes of their own, at the end, for one value for the whole run
    /// (and from run to run).
    pub(crate) fn reserve(&mut self, m: &mut Method, bytes: u64) -> Placement {
        let buffer = self.id(m);
        let offset = self.size;
        self.size = offset + bytes.div_ceil(ALIGN) * ALIGN;
        Placement::Planned { buffer, offset }
    }

    /// Writes the buffer's final size into the method's plan.
    pub(crate) fn install(&self, m: &mut Method) {
        if let Some(id) = self.id {
            m.buffer_sizes[id] = self.size;
        }
    }
}

/// The lowest multiple of [`ALIGN`] at which `size` bytes fit below `limit`
/// clear of the byte ranges `busy` (start, end).
pub(crate) fn lowest_fit(mut busy: Vec<(u64, u64)>, size: u64, limit: u64) -> Option<u64> {
    busy.sort_unstable();
    let mut offset = 0u64;
    for (lo, hi) in busy {
        if offset.checked_add(size)? <= lo {
            break;
        }
        offset = offset.max(hi.div_ceil(ALIGN) * ALIGN);
    }
    (offset.checked_add(size)? <= limit).then_some(offset)
}
