//! MLPerf Tiny's models on a Cortex-M or a RISC-V core, with no allocator:
//! each program is initialised in place in one static arena, runs its
//! bundled test cases and reports over semihosting, with the instructions
//! one inference took; the exit status says whether all passed.
#![no_std]
#![no_main]
#![deny(clippy::undocumented_unsafe_blocks)]

use core::mem::{align_of, size_of, MaybeUninit};
use core::ptr::{addr_of, addr_of_mut};
#[cfg(target_arch = "arm")]
use cortex_m_rt::entry;
#[cfg(target_arch = "arm")]
use cortex_m_semihosting::{debug, hprintln};
#[cfg(target_arch = "arm")]
use panic_semihosting as _;
use ptec_runtime::harness::{CaseFailure, Tolerance};
use ptec_runtime::{InitInPlace, Model};
#[cfg(target_arch = "riscv32")]
use riscv_rt::entry;
#[cfg(target_arch = "riscv32")]
use riscv_semihosting::{debug, hprintln};

mod counter;

/// One module per model (`NAME::Net`, `NAME::bundled`), and `run_all`.
macro_rules! models {
    ($($name:ident),* $(,)?) => {
        $(mod $name {
            include!(concat!(env!("OUT_DIR"), "/", stringify!($name), ".rs"));
        })*

        /// The largest program: the arena holds one at a time.
        const ARENA_BYTES: usize = {
            let sizes: &[usize] = &[$(size_of::<$name::Net>()),*];
            let (mut max, mut i) = (0, 0);
            while i < sizes.len() {
                if sizes[i] > max {
                    max = sizes[i];
                }
                i += 1;
            }
            max
        };

        /// Runs every model's cases; returns (models passed, models).
        fn run_all() -> (usize, usize) {
            let passed: &[bool] = &[$(
                run::<$name::Net>(
                    stringify!($name),
                    &$name::bundled::CASES,
                    $name::bundled::run_case,
                    $name::bundled::TOLERANCE,
                )
            ),*];
            (passed.iter().filter(|&&p| p).count(), passed.len())
        }
    };
}
include!(concat!(env!("OUT_DIR"), "/models.rs"));

// (The firmware without models, which measures the baseline footprint,
// uses none of what follows up to `paint_stack`.)
#[allow(dead_code)]
const ARENA_ALIGN: usize = 64;
#[allow(dead_code)]
#[repr(C, align(64))]
struct Arena(MaybeUninit<[u8; ARENA_BYTES]>);
#[allow(dead_code)]
static mut ARENA: Arena = Arena(MaybeUninit::uninit());

#[allow(dead_code)]
type RunCase = fn(&mut dyn Model, usize, Tolerance) -> Result<(), CaseFailure>;

/// Initialises `M` in the arena, runs its test cases (`cases`: each one's
/// method and index) and counts the instructions of one more inference on
/// the last case's inputs; whether all passed.
#[allow(dead_code)]
fn run<M: InitInPlace + Model>(name: &str, cases: &[(&str, usize)], run_case: RunCase, tol: Tolerance) -> bool {
    const { assert!(size_of::<M>() <= ARENA_BYTES && align_of::<M>() <= ARENA_ALIGN) };
    // SAFETY: the arena is only used here, one model at a time, on one
    // thread; it is large and aligned enough for `M` (asserted above) and
    // zero-filled before `init_in_place`, as that requires.
    let model = unsafe {
        let slot = addr_of_mut!(ARENA).cast::<M>();
        slot.cast::<u8>().write_bytes(0, size_of::<M>());
        M::init_in_place(slot);
        &mut *slot
    };
    let mut failed = 0;
    for case in 0..cases.len() {
        if let Err(e) = run_case(model, case, tol) {
            hprintln!("{}: case {} FAILED: {}", name, case, e);
            failed += 1;
        }
    }
    hprintln!(
        "{}: {} of {} cases passed ({} bytes of planned memory and state)",
        name,
        cases.len() - failed,
        cases.len(),
        size_of::<M>()
    );
    // The models are stateless: running again on the inputs the last case
    // set repeats the inference it checked.
    if let (0, Some(&(method, _))) = (failed, cases.last()) {
        let Some(mi) = model.method_index(method) else {
            hprintln!("{}: no method {}", name, method);
            return false;
        };
        let start = counter::instructions();
        let ran = model.execute(mi);
        let end = counter::instructions();
        if let Err(e) = ran {
            hprintln!("{}: the timed inference FAILED: {}", name, e);
            return false;
        }
        hprintln!("{}: {} instructions per inference", name, end - start);
    }
    failed == 0
}

// The stack's lowest word (end of .bss, cortex-m-rt's `__sheap`) and top.
extern "C" {
    static mut __sheap: u32;
    static _stack_start: u32;
}
const PAINT: u32 = 0x5A5A_A5A5;

/// Paints the unused stack below the current frame, so that
/// `stack_high_water` can find how deep the models went.
fn paint_stack() {
    let sp = counter::stack_pointer() - 256;
    let mut p = addr_of_mut!(__sheap) as usize;
    while p < sp {
        // SAFETY: between the end of .bss and below the current frame: the
        // stack's unused part, which nothing else owns.
        unsafe { (p as *mut u32).write_volatile(PAINT) };
        p += 4;
    }
}

/// Bytes of stack used at most since `paint_stack`.
fn stack_high_water() -> usize {
    let top = addr_of!(_stack_start) as usize;
    let mut p = addr_of_mut!(__sheap) as usize;
    // SAFETY: reads within the painted range, below the stack top.
    while p < top && unsafe { (p as *const u32).read_volatile() } == PAINT {
        p += 4;
    }
    top - p
}

/// The two-word vector the mps3-an547 boots from (memory/an547.x).
#[cfg(board = "an547")]
mod boot {
    #[repr(C)]
    pub struct BootVector {
        stack: *const u32,
        reset: unsafe extern "C" fn() -> !,
    }
    // SAFETY: read only by the core at reset.
    unsafe impl Sync for BootVector {}
    extern "C" {
        static _stack_start: u32;
        fn Reset() -> !;
    }
    #[link_section = ".boot_vector"]
    #[used]
    static BOOT_VECTOR: BootVector = BootVector {
        stack: core::ptr::addr_of!(_stack_start),
        reset: Reset,
    };
}

#[entry]
fn main() -> ! {
    counter::start();
    // Before the paint: its buffers are not the models' stack.
    counter::check();
    counter::naive_reference();
    paint_stack();
    let (passed, total) = run_all();
    hprintln!("stack high-water mark: {} bytes", stack_high_water());
    hprintln!("{} of {} models passed", passed, total);
    debug::exit(if passed == total {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    });
    // Only reached when no debugger or emulator takes the exit.
    loop {
        counter::wait();
    }
}

/// A panic is a failure: say where, and exit with it (panic-semihosting
/// does this on Arm).
#[cfg(target_arch = "riscv32")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    hprintln!("{}", info);
    debug::exit(debug::EXIT_FAILURE);
    loop {
        counter::wait();
    }
}
