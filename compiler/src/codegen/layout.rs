//! Where every tensor of a method lives in the generated code.
//!
//! A method owns one arena: its planned buffers (memory ids 1..) laid end to
//! end, each 64-byte aligned, followed by space ptec plans itself for
//! tensors the program leaves unplanned (caller-provided inputs, kernel
//! outputs without a plan), so that generated code never needs a pointer
//! from outside. Constants stay in the embedded file data.
use crate::error::{Diagnostic, ErrorKind, Location};
use crate::ir::*;

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
}

const ALIGN: usize = 64;

fn align_up(n: usize) -> Option<usize> {
    n.checked_add(ALIGN - 1).map(|x| x / ALIGN * ALIGN)
}

/// Lays out `m`'s arena. Fails for tensors whose storage cannot be known at
/// compile time (unbounded dynamic shapes without a plan, external data not
/// given).
pub fn layout_method(m: &Method) -> Result<MethodLayout, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let mut buffer_base = vec![0usize; m.buffer_sizes.len().max(1)];
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
    let mut homes = Vec::with_capacity(m.values.len());
    for (i, v) in m.values.iter().enumerate() {
        let at = Location::method(&m.name).value(i);
        let Value::Tensor(t) = v else {
            homes.push(Home::None);
            continue;
        };
        let home = match &t.placement {
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
        })
    } else {
        Err(errors)
    }
}

impl MethodLayout {
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
