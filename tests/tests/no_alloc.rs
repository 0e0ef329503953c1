//! Inference allocates nothing: the program is built once (one allocation
//! for `boxed()`), then every method call runs under a counting allocator
//! that must not move. Counts are per thread, so tests running in parallel
//! do not see each other's allocations.
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

fn allocations() -> usize {
    ALLOCATIONS.with(|c| c.get())
}

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

mod mlp {
    ptec_macros::include_pte!("fixtures/mlp.pte", name = Program);
}
mod dynamic {
    ptec_macros::include_pte!("fixtures/dynamic.pte", name = Program);
}
mod cond {
    ptec_macros::include_pte!("fixtures/cond.pte", name = Program);
}

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = allocations();
    f();
    allocations() - before
}

#[test]
fn inference_does_not_allocate() {
    use ptec_runtime::{Model, TensorRef, Value};
    let mut m = mlp::Program::boxed();
    let x = [[0.25f32; 16]; 4];
    let n = allocations_during(|| {
        for _ in 0..10 {
            let out = m.forward(&x).unwrap();
            assert!(out[0][0] > 0.0);
        }
    });
    assert_eq!(n, 0, "typed API allocated");

    let mut d = dynamic::Program::boxed();
    let sizes = [3usize, 6];
    let data = [0.5f32; 18];
    let n = allocations_during(|| {
        for _ in 0..10 {
            d.set_input(0, 0, Value::Tensor(TensorRef::from_slice(&sizes, &data)))
                .unwrap();
            d.execute(0).unwrap();
            let out = d.output(0, 1).unwrap();
            assert_eq!(out.as_tensor().unwrap().sizes, &[3, 4]);
        }
    });
    assert_eq!(n, 0, "dynamic interface allocated");

    let mut c = cond::Program::boxed();
    let (a, b) = ([[1.0f32; 4]; 3], [[-1.0f32; 4]; 3]);
    let n = allocations_during(|| {
        for _ in 0..10 {
            c.forward(&a, &b).unwrap();
            c.forward(&b, &a).unwrap();
        }
    });
    assert_eq!(n, 0, "control flow allocated");
}

#[test]
fn counting_allocator_counts() {
    // The check above means something only if allocations are seen.
    let n = allocations_during(|| drop(std::hint::black_box(vec![1u8; 64])));
    assert!(n >= 1);
}

mod channels_last {
    ptec_macros::include_pte!("fixtures/channels_last.pte", name = Program);
}

/// With two threads, handing kernel parts to the pool allocates nothing
/// either (the pool's workers are started by `set_threads`, before).
#[test]
fn inference_on_two_threads_does_not_allocate() {
    use ptec_runtime::kernels::gemm::{self, Epilogue};
    ptec_runtime::set_threads(2);
    let mut m = channels_last::Program::boxed();
    let x = Box::new([[[[0.5f32; 32]; 32]; 3]; 2]);
    let (k, n, rows) = (64, 96, 4096);
    let a = vec![0.25f32; rows * k];
    let mut b = vec![0.0f32; gemm::packed_len(k, n)];
    gemm::pack(&vec![0.5f32; k * n], k, n, false, &mut b);
    let mut c = vec![0.0f32; rows * n];
    m.forward(&x).unwrap();
    let count = allocations_during(|| {
        for _ in 0..5 {
            m.forward(&x).unwrap();
            // Large enough to be split between the threads.
            gemm::gemm_packed(rows, n, k, &a, k, &b, &Epilogue::NONE, &mut c, n);
        }
    });
    ptec_runtime::set_threads(1);
    assert_eq!(count, 0);
    assert!(c.iter().all(|&v| v == 8.0));
}
