//! Planning, the stage between the passes and code generation: where every
//! byte lives.
//!
//! - [`plan_temporaries`]: the tensors the passes added get bytes where
//!   ExecuTorch's plan is free ([`temporaries`]);
//! - [`plan_method`]: each method's [`MethodPlan`]: every value's home in
//!   its arena ([`layout`]), what folds into what and the weights packed
//!   ahead of time ([`fold`], with the constants the compiler prepares,
//!   [`prepare`]), and the arena bytes only folded values held cut out
//!   ([`squeeze`]);
//! - [`compact`]: the file bytes generated code reads, moved into one
//!   block.
pub(crate) mod compact;
pub(crate) mod fold;
pub(crate) mod layout;
pub(crate) mod prepare;
pub(crate) mod squeeze;
pub(crate) mod temporaries;

use crate::error::{Diagnostic, ErrorKind, Location, Result};
use crate::ir::{DataSource, Method};
use crate::read::Loaded;
use crate::verify::verify_program;
use fold::Folds;
use layout::{layout_prepared, MethodLayout, Occupancy};
use prepare::PreparedData;

pub(crate) use crate::ir::PLAN_ALIGN as ALIGN;

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

/// The bytes of a file the program was read from (none for the blocks the
/// compiler makes, which are not such files).
pub(crate) fn source_bytes<'a>(source: DataSource, program_bytes: &'a [u8], data: &[&'a [u8]]) -> &'a [u8] {
    match source {
        DataSource::Program => program_bytes,
        DataSource::External(k) => data.get(k).copied().unwrap_or(&[]),
        DataSource::Embedded | DataSource::PrepareOnly => &[],
    }
}

/// Where everything of one method lives, decided before any code is
/// emitted: after this, the bytes of every value are fixed. (Each
/// instruction's own scratch, which only its emitter knows, goes after the
/// plan, where no value lives.)
pub(crate) struct MethodPlan {
    /// Each value's home and the arena's size, with what the folds left
    /// untouched cut out.
    pub(crate) layout: MethodLayout,
    /// What folds into what, and the weights packed ahead of time.
    pub(crate) folds: Folds,
    /// Which arena bytes each instruction leaves free, for its scratch.
    pub(crate) occupancy: Occupancy,
}

/// Plans method `m`. With `prepared` (the constants' bytes, known at compile
/// time) the compiler prepares filters and packs weights now; without (in
/// external-weights mode) the first run does.
pub(crate) fn plan_method(m: &Method, prepared: Option<&PreparedData<'_>>) -> Result<MethodPlan, Vec<Diagnostic>> {
    let at_compile_time = match prepared {
        Some(_) => prepare::prepared_at_compile_time(m),
        None => Default::default(),
    };
    let mut layout = layout_prepared(m, at_compile_time)?;
    let mut folds = Folds::of(m, &layout, |rows, n, k| {
        ptec_runtime::kernels::gemm::gemm_scratch_len(rows, n, k) > 0
    });
    if let Some(p) = prepared {
        folds.pack_at_compile_time(&layout, p).map_err(|detail| {
            vec![Diagnostic::new(
                ErrorKind::BadPlacement { detail },
                Location::method(&m.name),
            )]
        })?;
    }
    // What the folds left untouched takes no bytes.
    layout.squeeze(m, |v| !folds.bypassed(v));
    let occupancy = Occupancy::of(m, &layout, |n| folds.elided(n), |v| folds.bypassed(v));
    Ok(MethodPlan {
        layout,
        folds,
        occupancy,
    })
}

/// Gives bytes to the tensors the passes added (see [`temporaries`]), then
/// verifies the program; a `.ptd` file, which holds no program, is left as
/// it is.
pub(crate) fn plan_temporaries(loaded: &mut Loaded) -> Result<()> {
    let Some(program) = loaded.program.as_mut() else {
        return Ok(());
    };
    program.methods.iter_mut().for_each(temporaries::plan_temporaries);
    verify_program(program, &loaded.suites)
}
