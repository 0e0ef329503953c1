//! Heap construction of generated programs without touching their memory.
//!
//! A program's planned memory can be many megabytes. Zeroed memory from the
//! system allocator (`calloc`) arrives as fresh pages that cost nothing until
//! used, but only for alignments up to 16: Rust's allocator zero-fills any
//! more strictly aligned block by hand. Programs are 64-byte aligned, so
//! [`Boxed`] asks for a 16-aligned block 64 bytes larger and aligns inside
//! it, keeping construction independent of the program's size.
use crate::Error;
use alloc::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use core::ptr::NonNull;

/// An owned, heap-allocated program (like `Box<M>`).
pub struct Boxed<M> {
    value: NonNull<M>,
    block: NonNull<u8>,
    layout: Layout,
}

// SAFETY: Boxed<M> owns its M exactly like Box<M> does.
unsafe impl<M: Send> Send for Boxed<M> {}
// SAFETY: as above; shared access only hands out &M.
unsafe impl<M: Sync> Sync for Boxed<M> {}

/// Allocates zeroed memory for an `M` and lets `init` finish it; aborts,
/// as `Box::new` does, when the heap cannot hold it.
///
/// # Safety
/// `init` receives a pointer to zero-filled memory for an `M`, and must
/// leave a valid `M` there when it returns.
pub unsafe fn new_boxed_with<M>(init: impl FnOnce(*mut M)) -> Boxed<M> {
    // SAFETY: by the caller.
    match unsafe { try_new_boxed_with(init) } {
        Ok(b) => b,
        Err(_) => handle_alloc_error(Layout::new::<M>()),
    }
}

/// [`new_boxed_with`], with the heap's refusal an error instead of an
/// abort (`init` is then not called): a malformed program can plan more
/// memory than any machine has.
///
/// # Safety
/// As for [`new_boxed_with`].
pub unsafe fn try_new_boxed_with<M>(init: impl FnOnce(*mut M)) -> Result<Boxed<M>, Error> {
    let size = core::mem::size_of::<M>();
    let align = core::mem::align_of::<M>();
    let refused = Error::OutOfMemory { bytes: size };
    let layout = size
        .max(1)
        .checked_add(align)
        .and_then(|bytes| Layout::from_size_align(bytes, 16.min(align)).ok())
        .ok_or(refused.clone())?;
    // SAFETY: the layout has a non-zero size.
    let block = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(refused)?;
    huge_pages(block.as_ptr(), layout.size());
    let offset = block.as_ptr().align_offset(align);
    // SAFETY: offset < align, and the block holds size + align bytes, so the
    // aligned M lies inside it.
    let value = unsafe { block.as_ptr().add(offset) } as *mut M;
    init(value);
    Ok(Boxed {
        // SAFETY: derived from a non-null block pointer.
        value: unsafe { NonNull::new_unchecked(value) },
        block,
        layout,
    })
}

/// Asks Linux to back a large block with huge pages when it is touched: a
/// program's state holds its packed weights, which decoding reads through
/// whole each token, and 2 MB pages spare the TLB a miss every 4 KB.
#[cfg(all(feature = "std", target_os = "linux"))]
fn huge_pages(block: *mut u8, len: usize) {
    const HUGE: usize = 2 << 20;
    let start = (block as usize).next_multiple_of(HUGE);
    let end = (block as usize + len) / HUGE * HUGE;
    if end > start {
        // SAFETY: the range lies inside the block just allocated, which
        // nothing else uses; MADV_HUGEPAGE changes no contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(all(feature = "std", target_os = "linux")))]
fn huge_pages(_: *mut u8, _: usize) {}

impl<M> core::ops::Deref for Boxed<M> {
    type Target = M;
    fn deref(&self) -> &M {
        // SAFETY: value points to the M this Boxed owns, initialised at
        // construction.
        unsafe { self.value.as_ref() }
    }
}

impl<M> core::ops::DerefMut for Boxed<M> {
    fn deref_mut(&mut self) -> &mut M {
        // SAFETY: as deref, with unique access through &mut self.
        unsafe { self.value.as_mut() }
    }
}

impl<M> Drop for Boxed<M> {
    fn drop(&mut self) {
        // SAFETY: the M is valid and dropped once; the block was allocated
        // with this layout.
        unsafe {
            core::ptr::drop_in_place(self.value.as_ptr());
            dealloc(self.block.as_ptr(), self.layout);
        }
    }
}

impl<M: core::fmt::Debug> core::fmt::Debug for Boxed<M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A megabyte natively, a state of the size programs have; under
    /// Miri, which checks the same accesses at any size but takes many
    /// minutes a megabyte, 4 KiB.
    const BIG: usize = if cfg!(miri) { 1 << 12 } else { 1 << 20 };

    #[repr(C, align(64))]
    struct Big([u8; BIG], u32);

    #[test]
    fn aligned_zeroed_and_dropped() {
        // SAFETY: all-zero is a valid Big; the closure sets the tag.
        let mut b = unsafe { new_boxed_with::<Big>(|p| (*p).1 = 7) };
        assert_eq!(&*b as *const Big as usize % 64, 0);
        assert!(b.0.iter().all(|&x| x == 0));
        assert_eq!(b.1, 7);
        b.0[5] = 1;
        assert_eq!(b.0[5], 1);
        let counted = alloc::rc::Rc::new(());
        {
            // SAFETY: the closure writes a valid Rc into the slot.
            let holder = unsafe { new_boxed_with::<alloc::rc::Rc<()>>(|p| p.write(counted.clone())) };
            assert_eq!(alloc::rc::Rc::strong_count(&holder), 2);
        }
        assert_eq!(alloc::rc::Rc::strong_count(&counted), 1, "dropping runs the destructor");
    }

    /// 1 EiB: more than any address space, less than the largest type (on
    /// a 64-bit target; on a 32-bit one no type exceeds the address space).
    #[cfg(target_pointer_width = "64")]
    #[repr(C, align(64))]
    struct Huge([u8; 1 << 60]);

    #[cfg(target_pointer_width = "64")]
    #[test]
    #[cfg_attr(
        miri,
        ignore = "Miri stops at an allocation it cannot hold instead of returning null"
    )]
    fn a_state_no_heap_holds_is_an_error() {
        let mut called = false;
        // SAFETY: the closure writes nothing (it must not even be called).
        // `black_box`: an allocation nothing reads may be optimized away,
        // and then assumed to have succeeded.
        let refused = core::hint::black_box(unsafe { try_new_boxed_with::<Huge>(|_| called = true) });
        assert_eq!(refused.err(), Some(Error::OutOfMemory { bytes: 1 << 60 }));
        assert!(!called, "init ran on memory that was never allocated");
        // SAFETY: as in the first test.
        let big = unsafe { try_new_boxed_with::<Big>(|p| (*p).1 = 3) }.unwrap();
        assert_eq!(big.1, 3);
    }
}
