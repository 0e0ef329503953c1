//! Inference allocates nothing: the program is built once (one allocation
//! for `boxed()`), then every method call runs under a counting allocator
//! that must not move.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
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
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    f();
    ALLOCATIONS.load(Ordering::SeqCst) - before
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
