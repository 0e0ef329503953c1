//! Element traits and shape helpers shared by all kernel families.
use crate::{bf16, f16, MAX_RANK};

/// Any tensor element type.
pub trait Element: Copy + Default + PartialEq + PartialOrd + Send + Sync + 'static {
    /// Converts to `f64` (booleans become 0/1). Exact for every type but
    /// `i64`/`u64` beyond 2^53.
    fn to_f64(self) -> f64;
    /// Converts from `f64` with PyTorch's cast semantics for in-range
    /// values: floats round to nearest, integers truncate toward zero.
    fn from_f64(v: f64) -> Self;
    /// Converts to `i64` (floats truncate toward zero, saturating).
    fn to_i64(self) -> i64;
    /// Converts from `i64` (integers wrap as C casts do, floats round).
    fn from_i64(v: i64) -> Self;
}

/// Floating-point element types. Arithmetic happens in [`Float::Acc`]
/// (`f32` for the half types, as PyTorch's CPU kernels do).
pub trait Float: Element {
    type Acc: AccFloat;
    fn to_acc(self) -> Self::Acc;
    fn from_acc(v: Self::Acc) -> Self;
}

/// The types arithmetic of floats is done in: `f32` and `f64`.
pub trait AccFloat:
    Float<Acc = Self>
    + core::ops::Add<Output = Self>
    + core::ops::Sub<Output = Self>
    + core::ops::Mul<Output = Self>
    + core::ops::Div<Output = Self>
    + core::ops::Neg<Output = Self>
    + core::ops::AddAssign
    + core::ops::MulAssign
{
    const ZERO: Self;
    const ONE: Self;
    fn from_f32(v: f32) -> Self;
}

macro_rules! int_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            #[inline(always)] fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)] fn from_f64(v: f64) -> Self { v as $t }
            #[inline(always)] fn to_i64(self) -> i64 { self as i64 }
            #[inline(always)] fn from_i64(v: i64) -> Self { v as $t }
        }
    )*};
}
int_element!(i8, u8, i16, u16, i32, u32, i64, u64);

impl Element for bool {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v != 0
    }
}

macro_rules! acc_float {
    ($($t:ty),*) => {$(
        impl Element for $t {
            #[inline(always)] fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)] fn from_f64(v: f64) -> Self { v as $t }
            #[inline(always)] fn to_i64(self) -> i64 { self as i64 }
            #[inline(always)] fn from_i64(v: i64) -> Self { v as $t }
        }
        impl Float for $t {
            type Acc = $t;
            #[inline(always)] fn to_acc(self) -> $t { self }
            #[inline(always)] fn from_acc(v: $t) -> Self { v }
        }
        impl AccFloat for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline(always)] fn from_f32(v: f32) -> Self { v as $t }
        }
    )*};
}
acc_float!(f32, f64);

macro_rules! half_float {
    ($($t:ty),*) => {$(
        impl Element for $t {
            #[inline(always)] fn to_f64(self) -> f64 { self.to_f64() }
            #[inline(always)] fn from_f64(v: f64) -> Self { <$t>::from_f64(v) }
            #[inline(always)] fn to_i64(self) -> i64 { self.to_f32() as i64 }
            #[inline(always)] fn from_i64(v: i64) -> Self { <$t>::from_f32(v as f32) }
        }
        impl Float for $t {
            type Acc = f32;
            #[inline(always)] fn to_acc(self) -> f32 { self.to_f32() }
            #[inline(always)] fn from_acc(v: f32) -> Self { <$t>::from_f32(v) }
        }
    )*};
}
half_float!(f16, bf16);

/// Contiguous row-major strides of `sizes`, written into `out[..sizes.len()]`.
#[inline]
pub fn contiguous_strides(sizes: &[usize], out: &mut [usize]) {
    let mut s = 1usize;
    for d in (0..sizes.len()).rev() {
        out[d] = s;
        s = s.saturating_mul(sizes[d]);
    }
}

/// Number of elements of a shape.
#[inline]
pub fn numel(sizes: &[usize]) -> usize {
    sizes.iter().product()
}

/// A tensor shape of rank at most [`MAX_RANK`], as returned by the
/// `*_output_sizes` helpers of the heavy kernels. Dereferences to `[usize]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    rank: usize,
    dims: [usize; MAX_RANK],
}

impl Sizes {
    /// The shape `dims`, or `None` if its rank exceeds [`MAX_RANK`].
    pub fn new(dims: &[usize]) -> Option<Self> {
        if dims.len() > MAX_RANK {
            return None;
        }
        let mut s = Sizes {
            rank: dims.len(),
            dims: [0; MAX_RANK],
        };
        s.dims[..dims.len()].copy_from_slice(dims);
        Some(s)
    }
    /// The dimensions.
    pub fn as_slice(&self) -> &[usize] {
        &self.dims[..self.rank]
    }
    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.as_slice().iter().product()
    }
    /// Sets dimension `i` (which must be below the rank).
    pub(crate) fn set(&mut self, i: usize, v: usize) {
        self.dims[..self.rank][i] = v;
    }
}

impl core::ops::Deref for Sizes {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        self.as_slice()
    }
}
