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
//! - [`reads`]: what of the files generated code reads, from the IR and
//!   the method plans;
//! - [`compact`]: those file bytes, moved into one block.
//!
//! [`plan_program`] does it all for a program, so that code generation runs
//! once, on a [`Plan`].
pub(crate) mod compact;
pub(crate) mod fold;
pub(crate) mod layout;
pub(crate) mod prepare;
pub(crate) mod reads;
pub(crate) mod shared;
pub(crate) mod squeeze;
pub(crate) mod temporaries;

use crate::error::{Diagnostic, ErrorKind, Errors, Location, Result};
use crate::ir::*;
use crate::options::Options;
use crate::read::{Files, Loaded};
use crate::verify::verify_program;
use compact::Reads;
use fold::Folds;
use layout::{layout_prepared, Home, MethodLayout, Occupancy};
use prepare::PreparedData;
use std::borrow::Cow;

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
    /// Where the bytes of the program's shared state that the method holds
    /// are in its arena ([`shared`]); empty when it holds none.
    pub(crate) shared: Vec<shared::SharedRun>,
}

/// Plans method `m`. With `files` (the constants' bytes, known at compile
/// time) the compiler prepares filters and packs weights now; without (in
/// external-weights mode) the first run does.
/// `held` are the ranges of the program's shared state it holds.
pub(crate) fn plan_method(
    m: &Method,
    files: Option<&PreparedData<'_>>,
    held: &[(usize, usize)],
) -> Result<MethodPlan, Vec<Diagnostic>> {
    let at_compile_time = match files {
        Some(_) => prepare::prepared_at_compile_time(m),
        None => Default::default(),
    };
    let mut layout = layout_prepared(m, at_compile_time)?;
    let mut folds = Folds::of(m, &layout, |rows, n, k| {
        ptec_runtime::kernels::gemm::gemm_scratch_len(rows, n, k) > 0
    });
    if let Some(files) = files {
        folds.pack_at_compile_time(&layout, files).map_err(|detail| {
            vec![Diagnostic::new(
                ErrorKind::BadPlacement { detail },
                Location::method(&m.name),
            )]
        })?;
    }
    // What the folds left untouched takes no bytes.
    layout.squeeze(m, |v| !folds.bypassed(v));
    let occupancy = Occupancy::of(m, &layout, |n| folds.elided(n), |v| folds.bypassed(v));
    let shared = shared::runs(held, &layout).ok_or_else(|| {
        vec![Diagnostic::new(
            ErrorKind::Internal {
                detail: "a method holding shared state has no shared buffer in its layout".into(),
            },
            Location::method(&m.name),
        )]
    })?;
    Ok(MethodPlan {
        layout,
        folds,
        occupancy,
        shared,
    })
}

/// The plan of a program, all code generation needs beside the options:
/// after this nothing is decided about where a byte lives, and the code is
/// generated once.
pub(crate) struct Plan<'a> {
    /// The program as its code reads it: with embedded weights, its data
    /// references point into the compacted blocks ([`compact`]).
    pub(crate) program: Cow<'a, Program>,
    /// The test cases, their data moved as the program's.
    pub(crate) suites: Cow<'a, [TestSuite]>,
    /// Each method's plan, or why it has none (reported with the errors of
    /// the other methods' code).
    pub(crate) methods: Vec<Result<MethodPlan, Vec<Diagnostic>>>,
    /// The constants the code embeds, which the constants prepared as the
    /// code is generated follow; `None` in external-weights mode.
    pub(crate) prepared: Option<PreparedData<'static>>,
    /// Where the code reads file data ([`reads`]), as `program` places it:
    /// code generation checks it reads nothing else.
    pub(crate) reads: Reads,
    /// The files the program was read from, which the bundled tests and
    /// external-weights mode name.
    pub(crate) files: Files<'a>,
    /// Bytes of the state the methods share ([`shared`]), if they do.
    pub(crate) shared_size: Option<usize>,
}

/// Plans a loaded program (see [`Plan`]).
pub(crate) fn plan_program<'a>(loaded: &'a Loaded<'_>, options: &Options) -> Result<Plan<'a>> {
    let files = &loaded.files;
    let program = loaded.program.as_ref().ok_or_else(|| {
        Errors::one(
            ErrorKind::Unsupported {
                detail: "a .ptd file holds data, not a program; compile the .pte that uses it".into(),
            },
            Location::default(),
        )
    })?;
    options.struct_ident()?;
    let errors = check_data(program, files);
    if !errors.is_empty() {
        return Err(Errors(errors));
    }
    let with_tests = options.tests.is_some() && !loaded.suites.is_empty();
    let suites: &[TestSuite] = if with_tests { &loaded.suites } else { &[] };
    let held =
        |i: usize| -> &[(usize, usize)] { loaded.shared.as_ref().and_then(|s| s.held.get(i)).map_or(&[], |h| h) };
    let shared_size = loaded.shared.as_ref().map(|s| s.size);
    if options.external_weights {
        let methods: Vec<_> = program
            .methods
            .iter()
            .enumerate()
            .map(|(i, m)| plan_method(m, None, held(i)))
            .collect();
        let reads = reads::predict(program, &methods);
        return Ok(Plan {
            program: Cow::Borrowed(program),
            suites: Cow::Borrowed(suites),
            methods,
            prepared: None,
            reads,
            files: files.clone(),
            shared_size,
        });
    }
    let constants = PreparedData::new(files.clone());
    let mut methods: Vec<_> = program
        .methods
        .iter()
        .enumerate()
        .map(|(i, m)| plan_method(m, Some(&constants), held(i)))
        .collect();
    let reads = reads::predict(program, &methods);
    let c = compact::compact(program, suites, &reads, files)
        .map_err(|detail| Errors::one(ErrorKind::BadPlacement { detail }, Location::default()))?;
    // The plans' constants move with the program's.
    for plan in methods.iter_mut().flatten() {
        for home in &mut plan.layout.homes {
            if let Home::Data { source, offset } = home {
                (*source, *offset) = c.relocate(*source, *offset);
            }
        }
    }
    let reads = reads.iter().map(|&(s, o)| c.relocate(s, o)).collect();
    Ok(Plan {
        program: Cow::Owned(c.program),
        suites: Cow::Owned(c.suites),
        methods,
        prepared: Some(PreparedData::compacted(c.embedded, c.prepare_only)),
        reads,
        files: files.clone(),
        shared_size,
    })
}

/// Checks what generated code will rely on about embedded data: every
/// constant lies in its file and is aligned for its element type (the file
/// is embedded 64-byte aligned), and bool constants hold only 0 and 1.
fn check_data(p: &Program, files: &Files<'_>) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    for m in &p.methods {
        for (i, v) in m.values.iter().enumerate() {
            let Some(t) = v.as_tensor() else { continue };
            let d = match &t.placement {
                Placement::Constant { data } | Placement::Mutable { initial: data, .. } => data,
                Placement::External { data: Some(d), .. } => d,
                _ => continue,
            };
            let at = Location::method(&m.name).value(i).offset(d.offset);
            let bytes = files.bytes(d.source);
            let Some(b) = bytes.get(d.offset..d.offset.saturating_add(d.len)) else {
                errors.push(Diagnostic::new(
                    ErrorKind::OutsideData {
                        what: "tensor data",
                        offset: d.offset as u64,
                        len: d.len as u64,
                        limit: bytes.len() as u64,
                    },
                    at,
                ));
                continue;
            };
            let align = t.dtype.element_size();
            if d.offset % align != 0 {
                errors.push(Diagnostic::new(
                    ErrorKind::Misaligned {
                        offset: d.offset as u64,
                        align,
                    },
                    at,
                ));
            } else if t.dtype == ScalarType::Bool && b.iter().any(|&x| x > 1) {
                errors.push(Diagnostic::new(
                    ErrorKind::BadPlacement {
                        detail: "a bool constant holds a byte other than 0 or 1".into(),
                    },
                    at,
                ));
            }
        }
    }
    errors
}

/// Gives bytes to the tensors the passes added (see [`temporaries`]), then
/// verifies the program; a `.ptd` file, which holds no program, is left as
/// it is.
pub(crate) fn plan_temporaries(loaded: &mut Loaded<'_>) -> Result<()> {
    let Some(program) = loaded.program.as_mut() else {
        return Ok(());
    };
    program.methods.iter_mut().for_each(temporaries::plan_temporaries);
    verify_program(program, &loaded.suites)
}
