//! Where the bytes of the mutable state a program's methods share
//! ([`crate::analysis::shared`]) are in each method's arena: the runs the
//! generated code moves between the method's arena and the program's
//! shared buffer when the method that runs changes.
use crate::analysis::shared::SHARED_BUFFER;
use crate::plan::layout::MethodLayout;

/// Bytes of the shared buffer a method holds: where they are in the
/// shared buffer and in the method's arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedRun {
    pub shared: usize,
    pub arena: usize,
    pub len: usize,
}

/// Where the shared ranges `held` are in a method's arena: what of them
/// the layout kept (bytes no code of the method touches are cut out of its
/// arena, and need not move). `None` if the layout has no shared buffer.
pub fn runs(held: &[(usize, usize)], layout: &MethodLayout) -> Option<Vec<SharedRun>> {
    let mut runs = Vec::new();
    for &(start, end) in held {
        for (s, e, arena) in layout.kept(SHARED_BUFFER, start, end)? {
            runs.push(SharedRun {
                shared: s,
                arena,
                len: e - s,
            });
        }
    }
    Some(runs)
}
