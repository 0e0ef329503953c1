//! Generated code builds with `#![no_std]` and `ptec-runtime` without its
//! `std` and `alloc` features. Built alone (`cargo build -p
//! ptec-no-std-check`) so no other package turns those features on.
#![no_std]
#![deny(clippy::undocumented_unsafe_blocks)]

mod mlp {
    ptec_macros::include_pte!("../fixtures/mlp.pte");
}
mod cond {
    ptec_macros::include_pte!("../fixtures/cond.pte");
}

/// Runs the MLP in place in caller-provided memory: no heap at all.
pub fn classify(model: &mut mlp::Mlp, x: &[[f32; 16]; 4]) -> Result<[usize; 4], ptec_runtime::Error> {
    let probs = model.forward(x)?;
    let mut out = [0usize; 4];
    for (o, row) in out.iter_mut().zip(probs) {
        *o = row
            .iter()
            .enumerate()
            .fold(0, |best, (i, &p)| if p > row[best] { i } else { best });
    }
    Ok(out)
}

/// Initialises a program in memory the caller owns (a `static`, a stack
/// slot, ...).
///
/// # Safety
/// `slot` must be valid for writes and zero-filled.
pub unsafe fn init_cond(slot: *mut cond::Cond) {
    // SAFETY: forwarded from the caller.
    unsafe { <cond::Cond as ptec_runtime::InitInPlace>::init_in_place(slot) }
}

mod cond_traced {
    ptec_macros::include_pte!("../fixtures/cond.pte", name = CondTraced, trace = true);
}

/// Runs `cond` traced into the caller's event buffer, timed by the
/// caller's clock (a cycle counter, on a board): no heap, no `std`.
/// Returns how many events were recorded and how many did not fit.
pub fn trace_cond(
    model: &mut cond_traced::CondTraced,
    clock: impl FnMut() -> u64,
    events: &mut [ptec_runtime::trace::Event],
) -> Result<(usize, usize), ptec_runtime::Error> {
    use ptec_runtime::Model;
    let mut recorder = ptec_runtime::trace::Recorder::new(clock, events);
    model.execute_traced(0, &mut recorder)?;
    Ok((recorder.events().len(), recorder.dropped()))
}
