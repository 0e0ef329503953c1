//! Values crossing the dynamic interface of a generated program.
use crate::meta::{ScalarType, Tag};
use crate::Error;

/// Plain element types whose every bit pattern is a valid value, so a byte
/// buffer can be viewed as a slice of them.
///
/// # Safety
/// Implementors must have no padding, no invalid bit patterns and an
/// alignment no larger than their size.
pub unsafe trait Pod: Copy + 'static {
    /// The ExecuTorch scalar type stored as this Rust type.
    const DTYPE: Option<ScalarType>;
}

macro_rules! pod {
    ($($t:ty => $d:expr),* $(,)?) => {$(
        // SAFETY: primitive numeric types: no padding, every bit pattern valid.
        unsafe impl Pod for $t { const DTYPE: Option<ScalarType> = $d; }
    )*};
}
pod!(
    u8 => Some(ScalarType::Byte),
    i8 => Some(ScalarType::Char),
    i16 => Some(ScalarType::Short),
    i32 => Some(ScalarType::Int),
    i64 => Some(ScalarType::Long),
    f32 => Some(ScalarType::Float),
    f64 => Some(ScalarType::Double),
    half::f16 => Some(ScalarType::Half),
    half::bf16 => Some(ScalarType::BFloat16),
    u16 => Some(ScalarType::UInt16),
    u32 => Some(ScalarType::UInt32),
    u64 => Some(ScalarType::UInt64),
);
// SAFETY: `Complex` is `repr(C)` of two equal floats: no padding, every bit
// pattern valid, aligned as one part (at most its size).
unsafe impl Pod for crate::Complex<half::f16> {
    const DTYPE: Option<ScalarType> = Some(ScalarType::ComplexHalf);
}
// SAFETY: as above.
unsafe impl Pod for crate::Complex<f32> {
    const DTYPE: Option<ScalarType> = Some(ScalarType::ComplexFloat);
}
// SAFETY: as above.
unsafe impl Pod for crate::Complex<f64> {
    const DTYPE: Option<ScalarType> = Some(ScalarType::ComplexDouble);
}
// SAFETY: an array of Pod elements has no padding and no invalid patterns.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {
    const DTYPE: Option<ScalarType> = T::DTYPE;
}

/// Views `bytes` as a slice of `T`; fails when misaligned or not a whole
/// number of elements.
pub fn cast_slice<T: Pod>(bytes: &[u8]) -> Result<&[T], Error> {
    let size = core::mem::size_of::<T>();
    if size == 0 || !bytes.len().is_multiple_of(size) {
        return Err(Error::WrongDataLength {
            index: 0,
            expected: size,
            got: bytes.len(),
        });
    }
    if !(bytes.as_ptr() as usize).is_multiple_of(core::mem::align_of::<T>()) {
        return Err(Error::Misaligned);
    }
    // SAFETY: aligned, in bounds (len * size == bytes.len()), and T: Pod
    // accepts every bit pattern; the lifetime is that of `bytes`.
    Ok(unsafe { core::slice::from_raw_parts(bytes.as_ptr() as *const T, bytes.len() / size) })
}

/// A borrowed tensor: dtype, sizes, dim order and its bytes (contiguous in
/// the dim order, `numel * element_size` long).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TensorRef<'a> {
    pub dtype: ScalarType,
    pub sizes: &'a [usize],
    pub dim_order: &'a [u8],
    pub data: &'a [u8],
}

impl<'a> TensorRef<'a> {
    /// A tensor over `data` with the default (contiguous) dim order of a
    /// tensor of rank up to 16.
    pub fn new(dtype: ScalarType, sizes: &'a [usize], data: &'a [u8]) -> Self {
        const IDENTITY: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
        TensorRef {
            dtype,
            sizes,
            dim_order: &IDENTITY[..sizes.len().min(16)],
            data,
        }
    }

    /// A float32 (or other [`Pod`] type) tensor over a typed slice.
    pub fn from_slice<T: Pod>(sizes: &'a [usize], data: &'a [T]) -> Self {
        let dtype = T::DTYPE.unwrap_or(ScalarType::Byte);
        // SAFETY: T: Pod has no padding, so its bytes are initialised u8s.
        let bytes = unsafe { core::slice::from_raw_parts(data.as_ptr() as *const u8, core::mem::size_of_val(data)) };
        Self::new(dtype, sizes, bytes)
    }

    pub fn numel(&self) -> usize {
        self.sizes.iter().product()
    }

    /// The storage position of the element at row-major position
    /// `logical` (the same unless the dim order is not the default; a dim
    /// order that is not a permutation of the dims reads as the default).
    pub fn storage_index(&self, logical: usize) -> usize {
        let r = self.sizes.len();
        let identity = self.dim_order.iter().enumerate().all(|(k, &d)| d as usize == k);
        if identity || r > 16 || self.dim_order.len() != r || self.dim_order.iter().any(|&d| d as usize >= r) {
            return logical;
        }
        let mut coord = [0usize; 16];
        let mut rem = logical;
        for d in (0..r).rev() {
            let n = self.sizes[d].max(1);
            coord[d] = rem % n;
            rem /= n;
        }
        self.dim_order
            .iter()
            .fold(0, |off, &d| off * self.sizes[d as usize] + coord[d as usize])
    }

    /// The data as `T`, which must be the tensor's element type.
    pub fn as_slice<T: Pod>(&self) -> Result<&'a [T], Error> {
        match T::DTYPE {
            Some(d) if d == self.dtype => cast_slice(self.data),
            _ => Err(Error::WrongDtype {
                index: 0,
                expected: self.dtype,
                got: T::DTYPE.unwrap_or(ScalarType::Byte),
            }),
        }
    }

    /// The data of a bool tensor.
    pub fn as_bools(&self) -> Result<&'a [bool], Error> {
        if self.dtype != ScalarType::Bool {
            return Err(Error::WrongDtype {
                index: 0,
                expected: self.dtype,
                got: ScalarType::Bool,
            });
        }
        if self.data.iter().any(|&b| b > 1) {
            return Err(Error::InvalidBool { index: 0 });
        }
        // SAFETY: every byte is 0 or 1, valid bools; bool has size and
        // alignment 1.
        Ok(unsafe { core::slice::from_raw_parts(self.data.as_ptr() as *const bool, self.data.len()) })
    }

    /// Element `i` (in storage order) converted to `f64`, for any numeric
    /// dtype; `None` for types without a numeric reading or out of range.
    pub fn get_f64(&self, i: usize) -> Option<f64> {
        let size = self.dtype.element_size();
        let b = self.data.get(i * size..(i + 1) * size)?;
        Some(match self.dtype {
            ScalarType::Byte => b[0] as f64,
            ScalarType::Char => b[0] as i8 as f64,
            ScalarType::Bool => (b[0] != 0) as u8 as f64,
            ScalarType::Short => i16::from_le_bytes([b[0], b[1]]) as f64,
            ScalarType::UInt16 => u16::from_le_bytes([b[0], b[1]]) as f64,
            ScalarType::Int => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            ScalarType::UInt32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            ScalarType::Long => i64::from_le_bytes(b.try_into().ok()?) as f64,
            ScalarType::UInt64 => u64::from_le_bytes(b.try_into().ok()?) as f64,
            ScalarType::Float => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            ScalarType::Double => f64::from_le_bytes(b.try_into().ok()?),
            ScalarType::Half => half::f16::from_le_bytes([b[0], b[1]]).to_f64(),
            ScalarType::BFloat16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f64(),
            _ => return None,
        })
    }

    /// Element `i` (in storage order) of a complex tensor, as its real and
    /// imaginary parts; `None` for other dtypes or out of range.
    pub fn get_complex(&self, i: usize) -> Option<(f64, f64)> {
        let part = self.dtype.complex_part()?;
        let size = part.element_size();
        let b = self.data.get(2 * i * size..2 * (i + 1) * size)?;
        let parts = TensorRef::new(part, &[], b);
        Some((parts.get_f64(0)?, parts.get_f64(1)?))
    }

    /// Element `i` as `i64`, exact for integer and bool dtypes.
    pub fn get_i64(&self, i: usize) -> Option<i64> {
        let size = self.dtype.element_size();
        let b = self.data.get(i * size..(i + 1) * size)?;
        Some(match self.dtype {
            ScalarType::Long => i64::from_le_bytes(b.try_into().ok()?),
            ScalarType::UInt64 => u64::from_le_bytes(b.try_into().ok()?) as i64,
            _ => self.get_f64(i)? as i64,
        })
    }
}

/// An EValue as seen through the dynamic interface.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    None,
    Int(i64),
    Double(f64),
    Bool(bool),
    Tensor(TensorRef<'a>),
}

impl<'a> Value<'a> {
    pub fn tag(&self) -> Tag {
        match self {
            Value::None => Tag::None,
            Value::Int(_) => Tag::Int,
            Value::Double(_) => Tag::Double,
            Value::Bool(_) => Tag::Bool,
            Value::Tensor(_) => Tag::Tensor,
        }
    }

    pub fn as_tensor(&self) -> Option<&TensorRef<'a>> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

/// The bytes of a [`Pod`] value (an element or a nested array of them).
pub fn bytes_of<T: Pod>(v: &T) -> &[u8] {
    // SAFETY: T: Pod has no padding, so all its bytes are initialised.
    unsafe { core::slice::from_raw_parts(v as *const T as *const u8, core::mem::size_of::<T>()) }
}

/// Views `bytes` as one `T` (an element or a nested array of them); fails
/// when the length or alignment does not fit.
pub fn from_bytes<T: Pod>(bytes: &[u8]) -> Result<&T, Error> {
    if bytes.len() != core::mem::size_of::<T>() {
        return Err(Error::WrongDataLength {
            index: 0,
            expected: core::mem::size_of::<T>(),
            got: bytes.len(),
        });
    }
    if !(bytes.as_ptr() as usize).is_multiple_of(core::mem::align_of::<T>()) {
        return Err(Error::Misaligned);
    }
    // SAFETY: length and alignment checked; every bit pattern is a valid T.
    Ok(unsafe { &*(bytes.as_ptr() as *const T) })
}
