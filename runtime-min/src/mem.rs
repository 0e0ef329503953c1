//! Memory used by generated programs: the planned arena of each method and
//! typed views into it and into constant data.
//!
//! The compiler lays every planned tensor of a method out in one arena at an
//! offset it has checked at compile time: inside the arena, aligned for the
//! element type, and — for the views one instruction holds at once — not
//! overlapping a mutable view. The unsafe functions here rely on exactly
//! those facts.
use crate::value::Pod;
use crate::Error;

/// Alignment of arenas and embedded data: enough for every element type and
/// for SIMD loads.
pub const ALIGN: usize = 64;

/// A method's planned memory: `N` bytes aligned to [`ALIGN`].
#[derive(Clone)]
#[repr(C, align(64))]
pub struct Arena<const N: usize>(pub [u8; N]);

/// An all-zero `T` (a method's state), made out of line: rustc's MIR
/// optimizer evaluates `mem::zeroed` of a concrete type as a constant of
/// the type's size while it compiles, which for a state is the whole plan
/// (gigabytes for a large one, more than the compiler can hold for a
/// corrupted one). Here `T` is generic, and the call is not inlined.
///
/// # Safety
/// All-zero bytes must be a valid `T`.
#[inline(never)]
pub unsafe fn zeroed_state<T>() -> T {
    // SAFETY: by the caller.
    unsafe { core::mem::zeroed() }
}

/// Constant weights of a method packed for the matrix kernels when the
/// program is constructed: `N` floats aligned to [`ALIGN`].
#[derive(Clone)]
#[repr(C, align(64))]
pub struct Packed<const N: usize>(pub [f32; N]);

/// Bytes aligned to [`ALIGN`]; wraps embedded data as
/// `static X: Aligned<[u8; N]> = Aligned(*include_bytes!(...))`.
#[repr(C, align(64))]
pub struct Aligned<T: ?Sized>(pub T);

/// A shared view of `len` elements at byte `offset` of an arena.
///
/// # Safety
/// `base + offset` must be aligned for `T`, the `len` elements must lie in
/// the arena, and no mutable view of overlapping bytes may be alive while
/// the returned slice is.
#[inline(always)]
pub unsafe fn view<'a, T: Pod>(base: *const u8, offset: usize, len: usize) -> &'a [T] {
    // SAFETY: the caller guarantees alignment, bounds and no aliasing &mut;
    // T: Pod is valid for any initialised bytes (arenas start zeroed).
    unsafe { core::slice::from_raw_parts(base.add(offset) as *const T, len) }
}

/// A mutable view of `len` elements at byte `offset` of an arena.
///
/// # Safety
/// As [`view`], and no other view of overlapping bytes may be alive while
/// the returned slice is.
#[inline(always)]
pub unsafe fn view_mut<'a, T: Pod>(base: *mut u8, offset: usize, len: usize) -> &'a mut [T] {
    // SAFETY: see view(); exclusivity is guaranteed by the caller.
    unsafe { core::slice::from_raw_parts_mut(base.add(offset) as *mut T, len) }
}

/// Copies `len` bytes inside an arena; the ranges may overlap.
///
/// # Safety
/// Both ranges must lie in the arena and no view of the destination may be
/// alive.
#[inline(always)]
pub unsafe fn copy_within(base: *mut u8, from: usize, to: usize, len: usize) {
    // SAFETY: in bounds by the caller's guarantee; `copy` allows overlap.
    unsafe { core::ptr::copy(base.add(from), base.add(to), len) }
}

/// A typed view of constant data: `len` elements at byte `offset` of
/// `bytes`. Checked, so it is safe for data loaded at run time; for
/// embedded data the compiler has proven the check passes and it folds
/// away.
#[inline(always)]
pub fn constant<T: Pod>(bytes: &[u8], offset: usize, len: usize) -> Result<&[T], Error> {
    let size = core::mem::size_of::<T>();
    let end = len
        .checked_mul(size)
        .and_then(|n| n.checked_add(offset))
        .ok_or(Error::DataMismatch {
            what: "constant out of range",
        })?;
    let b = bytes.get(offset..end).ok_or(Error::DataMismatch {
        what: "constant out of range",
    })?;
    crate::value::cast_slice(b)
}

/// Checks that every byte of a bool tensor is 0 or 1.
#[inline]
pub fn check_bools(bytes: &[u8], index: usize) -> Result<(), Error> {
    // Some byte is above 1 exactly when the OR of all has a bit above the
    // lowest; unlike a search that stops early, this vectorizes (a 64 KB
    // mask took 20 µs to check byte by byte).
    if bytes.iter().fold(0u8, |acc, &b| acc | b) > 1 {
        Err(Error::InvalidBool { index })
    } else {
        Ok(())
    }
}

/// A shared view of a bool tensor in an arena, checked to hold only 0/1
/// bytes (memory reused from tensors of other types could hold anything).
///
/// # Safety
/// As [`view`].
#[inline(always)]
pub unsafe fn view_bool<'a>(base: *const u8, offset: usize, len: usize, value: usize) -> Result<&'a [bool], Error> {
    // SAFETY: bounds and aliasing by the caller's guarantee.
    let bytes: &[u8] = unsafe { view(base, offset, len) };
    check_bools(bytes, value)?;
    // SAFETY: every byte is 0 or 1, a valid bool; size and alignment 1.
    Ok(unsafe { core::slice::from_raw_parts(bytes.as_ptr() as *const bool, len) })
}

/// A mutable view of a bool tensor in an arena, zero-filled first so that
/// it only ever holds valid bools.
///
/// # Safety
/// As [`view_mut`].
#[inline(always)]
pub unsafe fn view_bool_mut<'a>(base: *mut u8, offset: usize, len: usize) -> &'a mut [bool] {
    // SAFETY: bounds and exclusivity by the caller's guarantee.
    let bytes: &mut [u8] = unsafe { view_mut(base, offset, len) };
    bytes.fill(0);
    // SAFETY: all bytes are now 0 (false); size and alignment 1.
    unsafe { core::slice::from_raw_parts_mut(bytes.as_mut_ptr() as *mut bool, len) }
}

/// A view of constant bool data, checked to hold only 0/1 bytes.
#[inline(always)]
pub fn constant_bool(bytes: &[u8], offset: usize, len: usize) -> Result<&[bool], Error> {
    let b: &[u8] = constant(bytes, offset, len)?;
    check_bools(b, usize::MAX)?;
    // SAFETY: every byte is 0 or 1; size and alignment 1.
    Ok(unsafe { core::slice::from_raw_parts(b.as_ptr() as *const bool, len) })
}

/// Element count of a shape.
#[inline(always)]
pub fn numel(sizes: &[usize]) -> usize {
    sizes.iter().product()
}

#[cfg(test)]
mod tests {
    use super::check_bools;

    #[test]
    fn bools_are_checked_byte_by_byte() {
        let mut bytes = [
            0u8, 1, 1, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0,
        ];
        assert_eq!(check_bools(&bytes, 3), Ok(()));
        assert_eq!(check_bools(&[], 3), Ok(()));
        // Any other byte, anywhere (in and past the first vector's width).
        for at in [0, 5, 31, 32] {
            for bad in [2u8, 3, 0x80, 0xff] {
                let keep = bytes[at];
                bytes[at] = bad;
                assert_eq!(
                    check_bools(&bytes, 7),
                    Err(crate::Error::InvalidBool { index: 7 }),
                    "{bad} at {at}"
                );
                bytes[at] = keep;
            }
        }
    }
}
