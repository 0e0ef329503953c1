//! Instructions executed, as QEMU counts them under `-icount shift=0`:
//! each instruction then advances virtual time by exactly 1 ns, so a timer
//! that follows virtual time counts instructions. run.sh boots with it, and
//! `check` measures a loop of known length to prove that it holds.
//!
//! - Arm: SysTick on the core clock (24 bits, its wraps counted by its
//!   interrupt), ticks scaled by the board's clock: one tick is
//!   1e9 / CLOCK_HZ instructions, so a count is good to a tick.
//! - RISC-V: `minstret`, which QEMU derives from the same virtual time
//!   (exact to the instruction).
//!
//! With them, the rest that differs by architecture: the stack pointer and
//! waiting for an interrupt.

use crate::hprintln;

#[cfg(target_arch = "arm")]
mod arch {
    use core::sync::atomic::{AtomicU32, Ordering};
    use cortex_m::peripheral::{syst::SystClkSource, SYST};
    use cortex_m_rt::exception;

    /// The core clock QEMU gives the board (its `sysclk`).
    #[cfg(board = "an386")]
    const CLOCK_HZ: u64 = 25_000_000;
    #[cfg(board = "an547")]
    const CLOCK_HZ: u64 = 32_000_000;
    const RELOAD: u32 = 0x00FF_FFFF;
    static WRAPS: AtomicU32 = AtomicU32::new(0);

    #[exception]
    fn SysTick() {
        WRAPS.fetch_add(1, Ordering::Relaxed);
    }

    pub fn start() {
        let Some(mut p) = cortex_m::Peripherals::take() else {
            return;
        };
        p.SYST.set_clock_source(SystClkSource::Core);
        p.SYST.set_reload(RELOAD);
        p.SYST.clear_current();
        p.SYST.enable_interrupt();
        p.SYST.enable_counter();
        // It holds 0 until its first tick loads RELOAD.
        while SYST::get_current() == 0 {}
    }

    pub fn instructions() -> u64 {
        loop {
            let wraps = WRAPS.load(Ordering::Relaxed);
            let current = SYST::get_current();
            // A wrap between the two loads: read again.
            if WRAPS.load(Ordering::Relaxed) == wraps {
                // The interrupt comes as the count reaches 0: from there
                // on the period is counted in `wraps`.
                let period = u64::from(RELOAD) + 1;
                let ticks = u64::from(wraps) * period + (u64::from(RELOAD - current) + 1) % period;
                return ticks * 1_000_000_000 / CLOCK_HZ;
            }
        }
    }

    /// Runs `2 · n` instructions (a subtract and a branch per round).
    pub fn spin(n: u32) {
        // SAFETY: touches only its own register and the flags.
        unsafe { core::arch::asm!("2:", "subs {0}, {0}, #1", "bne 2b", inout(reg) n => _, options(nomem, nostack)) };
    }

    pub fn stack_pointer() -> usize {
        cortex_m::register::msp::read() as usize
    }

    pub fn wait() {
        cortex_m::asm::wfi();
    }
}

#[cfg(target_arch = "riscv32")]
mod arch {
    /// `minstret` counts from reset: nothing to set up.
    pub fn start() {}

    pub fn instructions() -> u64 {
        riscv::register::minstret::read64()
    }

    /// Runs `2 · n` instructions (a decrement and a branch per round).
    pub fn spin(n: u32) {
        // SAFETY: touches only its own register.
        unsafe {
            core::arch::asm!("2:", "addi {0}, {0}, -1", "bnez {0}, 2b", inout(reg) n => _, options(nomem, nostack))
        };
    }

    pub fn stack_pointer() -> usize {
        let sp: usize;
        // SAFETY: reads the stack pointer, nothing else.
        unsafe { core::arch::asm!("mv {0}, sp", out(reg) sp, options(nomem, nostack)) };
        sp
    }

    pub fn wait() {
        riscv::asm::wfi();
    }
}

pub use arch::{instructions, stack_pointer, start, wait};

/// Counts a loop of 2,000,000 instructions; run.sh fails unless the count
/// is that to within a timer tick.
pub fn check() {
    const ROUNDS: u32 = 1_000_000;
    let start = instructions();
    arch::spin(ROUNDS);
    let end = instructions();
    hprintln!(
        "instruction counter: a loop of {} instructions counted as {}",
        2 * u64::from(ROUNDS),
        end - start
    );
}

/// The reference for the models' counts: a straightforward scalar int8
/// fully connected layer, `sums[j] = Σ_i (x[i] - zero_point) · w[j·k + i]`,
/// one multiply-accumulate per step of the inner loop, as one would write
/// it without thinking of speed. Compiled with the firmware's flags.
#[inline(never)]
fn naive_fully_connected(x: &[i8], zero_point: i32, w: &[i8], sums: &mut [i32]) {
    let k = x.len();
    for (j, s) in sums.iter_mut().enumerate() {
        let mut acc = 0i32;
        for (&xv, &wv) in x.iter().zip(&w[j * k..(j + 1) * k]) {
            acc = acc.wrapping_add((i32::from(xv) - zero_point) * i32::from(wv));
        }
        *s = acc;
    }
}

/// Counts `naive_fully_connected` on 64 inputs and 64 outputs (4096
/// multiply-accumulates) of pseudo-random bytes. Never inlined: its
/// buffers stay out of main's frame, which the stack measure counts.
#[inline(never)]
pub fn naive_reference() {
    const K: usize = 64;
    const N: usize = 64;
    let mut state = 0x2545_F491u32;
    let mut byte = || {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (state >> 24) as i8
    };
    let (mut x, mut w) = ([0i8; K], [0i8; K * N]);
    x.iter_mut().chain(w.iter_mut()).for_each(|v| *v = byte());
    let mut sums = [0i32; N];
    let (x, w) = (core::hint::black_box(&x), core::hint::black_box(&w));
    let start = instructions();
    naive_fully_connected(x, core::hint::black_box(-3), w, &mut sums);
    let end = instructions();
    core::hint::black_box(&sums);
    hprintln!(
        "naive int8 reference: {} instructions for {} multiply-accumulates",
        end - start,
        K * N
    );
}
