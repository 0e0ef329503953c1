//! Exact per-element semantics of PyTorch's element-wise operators.
//!
//! The compiler passes closures calling these functions to the drivers of
//! [`crate::elementwise`], so the drivers stay dtype-agnostic. Conventions:
//!
//! - Integer functions are generic over [`Int`] (`i8`, `u8`, `i16`, `u16`,
//!   `i32`, `u32`, `i64`, `u64`); arithmetic wraps like PyTorch's C++
//!   kernels. Integer division or remainder by zero returns `None`, which the
//!   fallible drivers (`try_zip`, ...) turn into
//!   [`KernelError::DivisionByZero`](crate::KernelError::DivisionByZero).
//! - Float functions are generic over [`FloatMath`] (`f32`, `f64`). Half
//!   types (`f16`, `bf16`) compute in `f32`: the closure converts in and out.
//! - Functions generic over `PartialOrd`/[`Element`] (comparisons,
//!   `maximum`, `clamp`, logical operators) work for every dtype; a value is
//!   "NaN" when it is not equal to itself, which never holds for integers.
use crate::num::{AccFloat, Element};

// ---------------------------------------------------------------------------
// Traits
// ---------------------------------------------------------------------------

/// Integer element types, with the wrapping arithmetic PyTorch's C++ kernels
/// perform.
pub trait Int: Element + Ord + Eq {
    const ZERO: Self;
    const ONE: Self;
    const MIN: Self;
    const MAX: Self;
    /// Width in bits.
    const BITS: u32;
    const SIGNED: bool;
    fn w_add(self, o: Self) -> Self;
    fn w_sub(self, o: Self) -> Self;
    fn w_mul(self, o: Self) -> Self;
    /// Truncating division; `MIN / -1` wraps to `MIN`. `o` must be non-zero.
    fn w_div(self, o: Self) -> Self;
    /// C remainder (sign of the dividend); `MIN % -1` is 0. `o` non-zero.
    fn w_rem(self, o: Self) -> Self;
    fn w_neg(self) -> Self;
    fn w_abs(self) -> Self;
    /// `self << s` on the bit pattern, `s < BITS`.
    fn shl_bits(self, s: u32) -> Self;
    /// Arithmetic (signed) or logical (unsigned) `self >> s`, `s < BITS`.
    fn shr_bits(self, s: u32) -> Self;
    fn is_negative(self) -> bool;
    fn is_odd(self) -> bool;
}

macro_rules! impl_int {
    ($($t:ty: $signed:expr),*) => {$(
        impl Int for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const MIN: Self = <$t>::MIN;
            const MAX: Self = <$t>::MAX;
            const BITS: u32 = <$t>::BITS;
            const SIGNED: bool = $signed;
            #[inline(always)] fn w_add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)] fn w_sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            #[inline(always)] fn w_mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)] fn w_div(self, o: Self) -> Self { self.wrapping_div(o) }
            #[inline(always)] fn w_rem(self, o: Self) -> Self { self.wrapping_rem(o) }
            #[inline(always)] fn w_neg(self) -> Self { self.wrapping_neg() }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn w_abs(self) -> Self { if self < 0 { self.wrapping_neg() } else { self } }
            #[inline(always)] fn shl_bits(self, s: u32) -> Self { self.wrapping_shl(s) }
            #[inline(always)] fn shr_bits(self, s: u32) -> Self { self.wrapping_shr(s) }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn is_negative(self) -> bool { self < 0 }
            #[inline(always)] fn is_odd(self) -> bool { self & 1 == 1 }
        }
    )*};
}
impl_int!(i8: true, u8: false, i16: true, u16: false, i32: true, u32: false, i64: true, u64: false);

/// Bitwise operators, defined for integers and for `bool` (where they are
/// the logical operators, as in PyTorch).
pub trait Bits: Element {
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    fn not(self) -> Self;
}

macro_rules! impl_bits {
    ($($t:ty),*) => {$(
        impl Bits for $t {
            #[inline(always)] fn and(self, o: Self) -> Self { self & o }
            #[inline(always)] fn or(self, o: Self) -> Self { self | o }
            #[inline(always)] fn xor(self, o: Self) -> Self { self ^ o }
            #[inline(always)] fn not(self) -> Self { !self }
        }
    )*};
}
impl_bits!(bool, i8, u8, i16, u16, i32, u32, i64, u64);

/// Transcendental and rounding functions of `f32`/`f64` (through `libm`,
/// as the crate is `no_std`).
pub trait FloatMath: AccFloat {
    const NAN: Self;
    const INFINITY: Self;
    const NEG_INFINITY: Self;
    fn from_f64_(v: f64) -> Self;
    fn abs_(self) -> Self;
    fn copysign_(self, sign: Self) -> Self;
    fn floor_(self) -> Self;
    fn ceil_(self) -> Self;
    fn trunc_(self) -> Self;
    /// Round half to even (the default rounding mode's `nearbyint`).
    fn rint_(self) -> Self;
    fn fmod_(self, o: Self) -> Self;
    fn sqrt_(self) -> Self;
    fn cbrt_(self) -> Self;
    fn exp_(self) -> Self;
    fn exp2_(self) -> Self;
    fn expm1_(self) -> Self;
    fn ln_(self) -> Self;
    fn ln1p_(self) -> Self;
    fn log2_(self) -> Self;
    fn log10_(self) -> Self;
    fn pow_(self, e: Self) -> Self;
    fn sin_(self) -> Self;
    fn cos_(self) -> Self;
    fn tan_(self) -> Self;
    fn asin_(self) -> Self;
    fn acos_(self) -> Self;
    fn atan_(self) -> Self;
    fn atan2_(self, x: Self) -> Self;
    fn sinh_(self) -> Self;
    fn cosh_(self) -> Self;
    fn tanh_(self) -> Self;
    fn asinh_(self) -> Self;
    fn acosh_(self) -> Self;
    fn atanh_(self) -> Self;
    fn erf_(self) -> Self;
    fn erfc_(self) -> Self;
    /// `1 + erf(self)`: for `f32` the vectorizable [`one_plus_erf_f32`]
    /// (within 4e-7 of libm's), for `f64` libm's.
    fn one_plus_erf_(self) -> Self;
    /// `1 / (1 + exp(-self))`: for `f32` the vectorizable
    /// [`sigmoid_f32`], for `f64` with libm's `exp`.
    fn sigmoid_(self) -> Self;
    /// `self / (1 + exp(-self))`: for `f32` the vectorizable [`silu_f32`],
    /// for `f64` with libm's `exp`.
    fn silu_(self) -> Self;
    fn is_nan_(self) -> bool;
    fn is_inf_(self) -> bool;
    fn is_finite_(self) -> bool;
    fn sign_bit_(self) -> bool;
}

macro_rules! impl_float_math {
    ($t:ty, $bits:ty, $abs:ident, $cs:ident, $fl:ident, $ce:ident, $tr:ident, $ri:ident,
     $fm:ident, $sq:ident, $cb:ident, $ex:ident, $ex2:ident, $em1:ident, $ln:ident, $l1p:ident,
     $l2:ident, $l10:ident, $pw:ident, $si:ident, $co:ident, $ta:ident, $as:ident, $ac:ident,
     $at:ident, $at2:ident, $sh:ident, $ch:ident, $th:ident, $ash:ident, $ach:ident, $ath:ident,
     $er:ident, $erc:ident; $ope:ident, $sig:ident, $silu:ident) => {
        impl FloatMath for $t {
            const NAN: Self = <$t>::NAN;
            const INFINITY: Self = <$t>::INFINITY;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            #[inline(always)]
            fn from_f64_(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn abs_(self) -> Self {
                libm::$abs(self)
            }
            #[inline(always)]
            fn copysign_(self, s: Self) -> Self {
                libm::$cs(self, s)
            }
            #[inline(always)]
            fn floor_(self) -> Self {
                libm::$fl(self)
            }
            #[inline(always)]
            fn ceil_(self) -> Self {
                libm::$ce(self)
            }
            #[inline(always)]
            fn trunc_(self) -> Self {
                libm::$tr(self)
            }
            #[inline(always)]
            fn rint_(self) -> Self {
                libm::$ri(self)
            }
            #[inline(always)]
            fn fmod_(self, o: Self) -> Self {
                libm::$fm(self, o)
            }
            #[inline(always)]
            fn sqrt_(self) -> Self {
                libm::$sq(self)
            }
            #[inline(always)]
            fn cbrt_(self) -> Self {
                libm::$cb(self)
            }
            #[inline(always)]
            fn exp_(self) -> Self {
                libm::$ex(self)
            }
            #[inline(always)]
            fn exp2_(self) -> Self {
                libm::$ex2(self)
            }
            #[inline(always)]
            fn expm1_(self) -> Self {
                libm::$em1(self)
            }
            #[inline(always)]
            fn ln_(self) -> Self {
                libm::$ln(self)
            }
            #[inline(always)]
            fn ln1p_(self) -> Self {
                libm::$l1p(self)
            }
            #[inline(always)]
            fn log2_(self) -> Self {
                libm::$l2(self)
            }
            #[inline(always)]
            fn log10_(self) -> Self {
                libm::$l10(self)
            }
            #[inline(always)]
            fn pow_(self, e: Self) -> Self {
                libm::$pw(self, e)
            }
            #[inline(always)]
            fn sin_(self) -> Self {
                libm::$si(self)
            }
            #[inline(always)]
            fn cos_(self) -> Self {
                libm::$co(self)
            }
            #[inline(always)]
            fn tan_(self) -> Self {
                libm::$ta(self)
            }
            #[inline(always)]
            fn asin_(self) -> Self {
                libm::$as(self)
            }
            #[inline(always)]
            fn acos_(self) -> Self {
                libm::$ac(self)
            }
            #[inline(always)]
            fn atan_(self) -> Self {
                libm::$at(self)
            }
            #[inline(always)]
            fn atan2_(self, x: Self) -> Self {
                libm::$at2(self, x)
            }
            #[inline(always)]
            fn sinh_(self) -> Self {
                libm::$sh(self)
            }
            #[inline(always)]
            fn cosh_(self) -> Self {
                libm::$ch(self)
            }
            #[inline(always)]
            fn tanh_(self) -> Self {
                libm::$th(self)
            }
            #[inline(always)]
            fn asinh_(self) -> Self {
                libm::$ash(self)
            }
            #[inline(always)]
            fn acosh_(self) -> Self {
                libm::$ach(self)
            }
            #[inline(always)]
            fn atanh_(self) -> Self {
                libm::$ath(self)
            }
            #[inline(always)]
            fn erf_(self) -> Self {
                libm::$er(self)
            }
            #[inline(always)]
            fn erfc_(self) -> Self {
                libm::$erc(self)
            }
            #[inline(always)]
            fn one_plus_erf_(self) -> Self {
                $ope(self)
            }
            #[inline(always)]
            fn sigmoid_(self) -> Self {
                $sig(self)
            }
            #[inline(always)]
            fn silu_(self) -> Self {
                $silu(self)
            }
            #[inline(always)]
            fn is_nan_(self) -> bool {
                self != self
            }
            #[inline(always)]
            fn is_inf_(self) -> bool {
                self == <$t>::INFINITY || self == <$t>::NEG_INFINITY
            }
            #[inline(always)]
            fn is_finite_(self) -> bool {
                self - self == 0.0
            }
            #[inline(always)]
            fn sign_bit_(self) -> bool {
                (self.to_bits() >> (<$bits>::BITS - 1)) != 0
            }
        }
    };
}
// `1 + erf` after the `;`: rustfmt leaves the lists as written (it would
// put one name per line for a long one).
impl_float_math!(
    f32, u32, fabsf, copysignf, floorf, ceilf, truncf, rintf, fmodf, sqrtf, cbrtf, expf, exp2f, expm1f, logf, log1pf,
    log2f, log10f, powf, sinf, cosf, tanf, asinf, acosf, atanf, atan2f, sinhf, coshf, tanhf, asinhf, acoshf, atanhf,
    erff, erfcf; one_plus_erf_f32, sigmoid_f32, silu_f32
);
impl_float_math!(
    f64, u64, fabs, copysign, floor, ceil, trunc, rint, fmod, sqrt, cbrt, exp, exp2, expm1, log, log1p, log2, log10,
    pow, sin, cos, tan, asin, acos, atan, atan2, sinh, cosh, tanh, asinh, acosh, atanh, erf, erfc; one_plus_erf_f64, sigmoid_f64,
    silu_f64
);

/// `1 / (1 + exp(-x))` in f64, with libm's `exp`.
#[inline(always)]
fn sigmoid_f64(x: f64) -> f64 {
    1.0 / (1.0 + libm::exp(-x))
}

/// `x / (1 + exp(-x))` in f64, with libm's `exp`.
#[inline(always)]
fn silu_f64(x: f64) -> f64 {
    x / (1.0 + libm::exp(-x))
}

/// `e = exp(-|x|)` ([`exp_nonpositive`], so never overflowing) and
/// whether `x` is at least 0: the logistic function is `1 / (1 + e)` there
/// and `e / (1 + e)` below.
#[inline(always)]
fn logistic_parts<const L: usize>(x: &[f32; L]) -> [f32; L] {
    exp_nonpositive_lanes::<L>(&lanes(|i| -x[i].abs()))
}

/// `aten::sigmoid` for `f32`, branch-free so that element-wise loops
/// vectorize (libm's `expf` is a scalar call): from `exp(-|x|)`, within a
/// few ulp of `1 / (1 + expf(-x))`. NaN stays NaN; `±inf` give 1 and 0.
#[inline(always)]
pub fn sigmoid_f32(x: f32) -> f32 {
    sigmoid_lanes(&[x])[0]
}

/// [`sigmoid_f32`] of `L` elements, step by step over all of them (see
/// [`lanes`]).
#[inline(always)]
pub fn sigmoid_lanes<const L: usize>(x: &[f32; L]) -> [f32; L] {
    let e = logistic_parts(x);
    lanes(|i| if x[i] >= 0.0 { 1.0 } else { e[i] } / (1.0 + e[i]))
}

/// `x · sigmoid(x)`, each step rounded to `f32` (ptec's fusion of the two
/// instructions), of `L` elements step by step.
#[inline(always)]
pub fn sigmoid_mul_lanes<const L: usize>(x: &[f32; L]) -> [f32; L] {
    let s = sigmoid_lanes(x);
    lanes(|i| x[i] * s[i])
}

/// `aten::silu` for `f32`, vectorizable as [`sigmoid_f32`]: `x / (1 + e)`
/// for `x >= 0`, `x · e / (1 + e)` below. NaN and `-inf` give NaN (as
/// `-inf / inf` does in PyTorch), `+inf` gives `+inf`.
#[inline(always)]
pub fn silu_f32(x: f32) -> f32 {
    silu_lanes(&[x])[0]
}

/// [`silu_f32`] of `L` elements, step by step over all of them.
#[inline(always)]
pub fn silu_lanes<const L: usize>(x: &[f32; L]) -> [f32; L] {
    let e = logistic_parts(x);
    lanes(|i| if x[i] >= 0.0 { x[i] } else { x[i] * e[i] } / (1.0 + e[i]))
}

/// An `f32` function with a form over [`LANES`] elements at once (the
/// same operations on each), for `elementwise::map_strided_lanes`.
pub trait Lanes: Sync {
    /// The function of one element.
    fn one(x: f32) -> f32;
    /// The function of each of `x`'s, step by step over all of them.
    fn lanes(x: &[f32; LANES]) -> [f32; LANES];
}

/// `aten::sigmoid` ([`sigmoid_f32`]) as [`Lanes`].
pub struct Sigmoid;
/// `aten::silu` ([`silu_f32`]) as [`Lanes`].
pub struct Silu;
/// `x · sigmoid(x)`, each step rounded ([`sigmoid_mul_lanes`]), as [`Lanes`].
pub struct SigmoidMul;
/// `aten::gelu(approximate="none")` for `f32` ([`gelu`]) as [`Lanes`].
pub struct Gelu;

/// Each `Type: one, lanes;` as [`Lanes`]: `one` of one element, `lanes`
/// of [`LANES`].
macro_rules! lanes_forms {
    ($($name:ident: $one:expr, $lanes:path;)*) => {$(
        impl Lanes for $name {
            #[inline(always)]
            fn one(x: f32) -> f32 {
                ($one)(x)
            }
            #[inline(always)]
            fn lanes(x: &[f32; LANES]) -> [f32; LANES] {
                $lanes(x)
            }
        }
    )*};
}
lanes_forms! {
    Sigmoid: sigmoid_f32, sigmoid_lanes;
    Silu: silu_f32, silu_lanes;
    SigmoidMul: |x: f32| x * sigmoid_f32(x), sigmoid_mul_lanes;
    Gelu: gelu::<f32>, gelu_lanes;
}

/// Elements the `_lanes` forms take at once where a map has enough: four
/// AVX-512 vectors of `f32` (eight AVX2 ones).
pub const LANES: usize = 64;

/// `[f(0), .., f(L - 1)]`: one step of a `_lanes` form. A costly function
/// (`exp`'s polynomial) is a long chain of dependent operations; computed
/// one element (one vector) after another, a core overlaps only the few
/// chains its window holds, while each step over all `L` lanes hands it
/// `L / width` independent vector operations side by side. One element is
/// `L = 1`: the scalar forms are these, so both give the same bits.
#[inline(always)]
pub fn lanes<const L: usize>(f: impl Fn(usize) -> f32) -> [f32; L] {
    let mut out = [0.0; L];
    for (i, o) in out.iter_mut().enumerate() {
        *o = f(i);
    }
    out
}

/// `1 + erf(x)` in f64: libm's (f64 needs no vectorizable form).
#[inline(always)]
fn one_plus_erf_f64(x: f64) -> f64 {
    1.0 + libm::erf(x)
}

// ---------------------------------------------------------------------------
// Generic (all dtypes)
// ---------------------------------------------------------------------------

/// `x != x`: true only for a float NaN.
#[inline(always)]
#[allow(clippy::eq_op)]
pub fn is_nan_generic<T: PartialEq>(x: T) -> bool {
    x != x
}

/// `aten::isnan` for any dtype (always false for integers and bool).
#[inline(always)]
pub fn isnan<T: PartialEq>(x: T) -> bool {
    is_nan_generic(x)
}

/// `aten::isinf` for floats (integers: use `|_| false`).
#[inline(always)]
pub fn isinf<F: FloatMath>(x: F) -> bool {
    x.is_inf_()
}

/// `aten::isfinite` for floats.
#[inline(always)]
pub fn isfinite<F: FloatMath>(x: F) -> bool {
    x.is_finite_()
}

/// `aten::isposinf`.
#[inline(always)]
pub fn isposinf<F: FloatMath>(x: F) -> bool {
    x == F::INFINITY
}

/// `aten::isneginf`.
#[inline(always)]
pub fn isneginf<F: FloatMath>(x: F) -> bool {
    x == F::NEG_INFINITY
}

/// `aten::signbit` for floats (true for -0.0 and negative NaNs).
#[inline(always)]
pub fn signbit<F: FloatMath>(x: F) -> bool {
    x.sign_bit_()
}

/// `aten::maximum` (and `max.other`): NaN-propagating maximum, any dtype.
#[inline(always)]
pub fn maximum<T: PartialOrd + Copy>(a: T, b: T) -> T {
    if is_nan_generic(a) || a > b {
        a
    } else {
        b
    }
}

/// `aten::minimum` (and `min.other`): NaN-propagating minimum, any dtype.
#[inline(always)]
pub fn minimum<T: PartialOrd + Copy>(a: T, b: T) -> T {
    if is_nan_generic(a) || a < b {
        a
    } else {
        b
    }
}

/// `aten::fmax`: maximum ignoring NaN (NaN only if both are NaN).
#[inline(always)]
pub fn fmax<T: PartialOrd + Copy>(a: T, b: T) -> T {
    if is_nan_generic(a) {
        b
    } else if is_nan_generic(b) || a >= b {
        a
    } else {
        b
    }
}

/// `aten::fmin`: minimum ignoring NaN (NaN only if both are NaN).
#[inline(always)]
pub fn fmin<T: PartialOrd + Copy>(a: T, b: T) -> T {
    if is_nan_generic(a) {
        b
    } else if is_nan_generic(b) || a <= b {
        a
    } else {
        b
    }
}

/// `aten::clamp` / `clamp.Tensor` / `clamp_min` / `clamp_max`, any dtype.
///
/// `min`/`max` are optional bounds (already cast to the computation dtype).
/// A NaN input or a NaN bound gives NaN; when `min > max` the result is
/// `max` (PyTorch applies the lower bound, then the upper).
#[inline(always)]
pub fn clamp<T: PartialOrd + Copy>(x: T, min: Option<T>, max: Option<T>) -> T {
    if is_nan_generic(x) {
        return x;
    }
    let mut r = x;
    if let Some(lo) = min {
        if is_nan_generic(lo) {
            return lo;
        }
        if r < lo {
            r = lo;
        }
    }
    if let Some(hi) = max {
        if is_nan_generic(hi) {
            return hi;
        }
        if r > hi {
            r = hi;
        }
    }
    r
}

/// `aten::eq`.
#[inline(always)]
pub fn eq<T: PartialEq>(a: T, b: T) -> bool {
    a == b
}
/// `aten::ne`.
#[inline(always)]
pub fn ne<T: PartialEq>(a: T, b: T) -> bool {
    a != b
}
/// `aten::lt`.
#[inline(always)]
pub fn lt<T: PartialOrd>(a: T, b: T) -> bool {
    a < b
}
/// `aten::le`.
#[inline(always)]
pub fn le<T: PartialOrd>(a: T, b: T) -> bool {
    a <= b
}
/// `aten::gt`.
#[inline(always)]
pub fn gt<T: PartialOrd>(a: T, b: T) -> bool {
    a > b
}
/// `aten::ge`.
#[inline(always)]
pub fn ge<T: PartialOrd>(a: T, b: T) -> bool {
    a >= b
}

/// Truthiness of any element (non-zero; NaN is true, -0.0 is false), as
/// used by the logical operators, `any`/`all` and `where` conditions.
#[inline(always)]
pub fn truthy<T: Element>(x: T) -> bool {
    x != T::default()
}

/// `aten::logical_and` (inputs of any dtype, bool out).
#[inline(always)]
pub fn logical_and<A: Element, B: Element>(a: A, b: B) -> bool {
    truthy(a) && truthy(b)
}
/// `aten::logical_or`.
#[inline(always)]
pub fn logical_or<A: Element, B: Element>(a: A, b: B) -> bool {
    truthy(a) || truthy(b)
}
/// `aten::logical_xor`.
#[inline(always)]
pub fn logical_xor<A: Element, B: Element>(a: A, b: B) -> bool {
    truthy(a) != truthy(b)
}
/// `aten::logical_not`.
#[inline(always)]
pub fn logical_not<A: Element>(a: A) -> bool {
    !truthy(a)
}

/// `aten::bitwise_and` (integers and bool).
#[inline(always)]
pub fn bitwise_and<T: Bits>(a: T, b: T) -> T {
    a.and(b)
}
/// `aten::bitwise_or` (integers and bool).
#[inline(always)]
pub fn bitwise_or<T: Bits>(a: T, b: T) -> T {
    a.or(b)
}
/// `aten::bitwise_xor` (integers and bool).
#[inline(always)]
pub fn bitwise_xor<T: Bits>(a: T, b: T) -> T {
    a.xor(b)
}
/// `aten::bitwise_not` (integers and bool).
#[inline(always)]
pub fn bitwise_not<T: Bits>(a: T) -> T {
    a.not()
}

/// `aten::where.self` per element: `cond ? a : b`.
#[inline(always)]
pub fn where_<T>(cond: bool, a: T, b: T) -> T {
    if cond {
        a
    } else {
        b
    }
}

// ---------------------------------------------------------------------------
// Integers
// ---------------------------------------------------------------------------

/// `aten::add` for integers (wrapping). `alpha` is folded by the caller:
/// `add_int(a, mul_int(alpha, b))`.
#[inline(always)]
pub fn add_int<T: Int>(a: T, b: T) -> T {
    a.w_add(b)
}
/// `aten::mul` for integers (wrapping).
#[inline(always)]
pub fn mul_int<T: Int>(a: T, b: T) -> T {
    a.w_mul(b)
}

/// `aten::div.Tensor_mode(rounding_mode="trunc")` for integers: C division.
/// `None` on division by zero; `MIN / -1` wraps to `MIN`.
#[inline(always)]
pub fn div_trunc_int<T: Int>(a: T, b: T) -> Option<T> {
    if b == T::ZERO {
        None
    } else {
        Some(a.w_div(b))
    }
}

/// `aten::div.Tensor_mode(rounding_mode="floor")` and `aten::floor_divide`
/// for integers: rounds toward negative infinity (Python `//`).
/// `None` on division by zero.
#[inline(always)]
pub fn div_floor_int<T: Int>(a: T, b: T) -> Option<T> {
    if b == T::ZERO {
        return None;
    }
    let q = a.w_div(b);
    if a.is_negative() != b.is_negative() && a.w_rem(b) != T::ZERO {
        Some(q.w_sub(T::ONE))
    } else {
        Some(q)
    }
}

/// `aten::floor_divide` for integers (same as [`div_floor_int`]).
#[inline(always)]
pub fn floor_divide_int<T: Int>(a: T, b: T) -> Option<T> {
    div_floor_int(a, b)
}

/// `aten::remainder` for integers: Python `%`, the result has the sign of
/// the divisor (`remainder(-7, 3) = 2`, `remainder(7, -3) = -2`).
/// `None` on division by zero.
#[inline(always)]
pub fn remainder_int<T: Int>(a: T, b: T) -> Option<T> {
    if b == T::ZERO {
        return None;
    }
    let r = a.w_rem(b);
    if r != T::ZERO && r.is_negative() != b.is_negative() {
        Some(r.w_add(b))
    } else {
        Some(r)
    }
}

/// `aten::fmod` for integers: C `%`, the result has the sign of the
/// dividend. `None` on division by zero.
#[inline(always)]
pub fn fmod_int<T: Int>(a: T, b: T) -> Option<T> {
    if b == T::ZERO {
        None
    } else {
        Some(a.w_rem(b))
    }
}

/// Integer power by squaring for a non-negative exponent (wrapping).
#[inline(always)]
fn powi_nonneg<T: Int>(mut base: T, mut e: u64) -> T {
    let mut r = T::ONE;
    while e > 0 {
        if e & 1 == 1 {
            r = r.w_mul(base);
        }
        e >>= 1;
        if e > 0 {
            base = base.w_mul(base);
        }
    }
    r
}

/// `aten::pow.Tensor_Tensor` for integers, PyTorch's kernel semantics:
/// wrapping power by squaring; for a negative exponent, base 1 gives 1,
/// base -1 gives ±1 by the exponent's parity, any other base gives 0.
#[inline(always)]
pub fn pow_int<T: Int>(a: T, b: T) -> T {
    if b.is_negative() {
        if a == T::ONE {
            T::ONE
        } else if T::SIGNED && a == T::ONE.w_neg() {
            if b.is_odd() {
                a
            } else {
                T::ONE
            }
        } else {
            T::ZERO
        }
    } else {
        powi_nonneg(a, b.to_i64() as u64)
    }
}

/// `aten::pow` for integers with PyTorch's API check ("Integers to negative
/// integer powers are not allowed"): `None` for a negative exponent unless
/// the base is 1 or -1. (The error surfaces as `DivisionByZero` through the
/// fallible drivers.)
#[inline(always)]
pub fn try_pow_int<T: Int>(a: T, b: T) -> Option<T> {
    if b.is_negative() && a != T::ONE && !(T::SIGNED && a == T::ONE.w_neg()) {
        None
    } else {
        Some(pow_int(a, b))
    }
}

/// `aten::abs` for integers (wrapping: `abs(MIN) = MIN`).
#[inline(always)]
pub fn abs_int<T: Int>(a: T) -> T {
    a.w_abs()
}

/// `aten::neg` for integers (wrapping).
#[inline(always)]
pub fn neg_int<T: Int>(a: T) -> T {
    a.w_neg()
}

/// `aten::sign` for integers: -1, 0 or 1.
#[inline(always)]
pub fn sign_int<T: Int>(a: T) -> T {
    if a.is_negative() {
        T::ONE.w_neg()
    } else if a == T::ZERO {
        T::ZERO
    } else {
        T::ONE
    }
}

/// `aten::bitwise_left_shift` / `__lshift__` for integers: shifts of a
/// negative amount or of `BITS` or more give 0.
#[inline(always)]
pub fn shl_int<T: Int>(a: T, b: T) -> T {
    if b.is_negative() || b.to_i64() as u64 >= T::BITS as u64 {
        T::ZERO
    } else {
        a.shl_bits(b.to_i64() as u32)
    }
}

/// `aten::bitwise_right_shift` / `__rshift__` for integers: arithmetic for
/// signed types; shifts of a negative amount or of `BITS` or more give the
/// sign fill (`a >> (BITS - 1)` for signed, 0 for unsigned).
#[inline(always)]
pub fn shr_int<T: Int>(a: T, b: T) -> T {
    if b.is_negative() || b.to_i64() as u64 >= T::BITS as u64 {
        if T::SIGNED {
            a.shr_bits(T::BITS - 1)
        } else {
            T::ZERO
        }
    } else {
        a.shr_bits(b.to_i64() as u32)
    }
}

// ---------------------------------------------------------------------------
// Floats: arithmetic and rounding
// ---------------------------------------------------------------------------

/// `aten::div.Tensor_mode(rounding_mode="trunc")` for floats.
#[inline(always)]
pub fn div_trunc<F: FloatMath>(a: F, b: F) -> F {
    (a / b).trunc_()
}

/// `aten::div.Tensor_mode(rounding_mode="floor")` and `aten::floor_divide`
/// for floats: Python's `//` (computed from `fmod` so that
/// `a == (a // b) * b + remainder(a, b)` holds as closely as possible);
/// division by zero gives the IEEE quotient.
#[inline(always)]
pub fn div_floor<F: FloatMath>(a: F, b: F) -> F {
    if b == F::ZERO {
        return a / b;
    }
    let m = a.fmod_(b);
    let mut div = (a - m) / b;
    if m != F::ZERO && (b < F::ZERO) != (m < F::ZERO) {
        div = div - F::ONE;
    }
    if div != F::ZERO {
        let mut fl = div.floor_();
        if div - fl > F::from_f32(0.5) {
            fl += F::ONE;
        }
        fl
    } else {
        F::ZERO.copysign_(a / b)
    }
}

/// `aten::floor_divide` for floats (same as [`div_floor`]).
#[inline(always)]
pub fn floor_divide<F: FloatMath>(a: F, b: F) -> F {
    div_floor(a, b)
}

/// `aten::remainder` for floats: `fmod(a, b)`, shifted by `b` when the
/// signs differ, so the result has the sign of the divisor (PyTorch's CPU
/// kernel; equal to `a - floor(a / b) * b` up to rounding).
#[inline(always)]
pub fn remainder<F: FloatMath>(a: F, b: F) -> F {
    let m = a.fmod_(b);
    if m != F::ZERO && (b < F::ZERO) != (m < F::ZERO) {
        m + b
    } else {
        m
    }
}

/// `aten::fmod` for floats: C `fmod` (sign of the dividend).
#[inline(always)]
pub fn fmod<F: FloatMath>(a: F, b: F) -> F {
    a.fmod_(b)
}

/// `aten::pow.Tensor_Tensor` for floats (`pow` of C).
#[inline(always)]
pub fn pow<F: FloatMath>(a: F, b: F) -> F {
    a.pow_(b)
}

/// `aten::pow.Tensor_Scalar` for floats, with the special cases PyTorch's
/// CPU kernel takes for a scalar exponent (2 → `x*x`, 3 → `x*x*x`,
/// 0.5 → `sqrt`, -0.5 → `rsqrt`, -1 → `1/x`, -2 → `1/(x*x)`).
#[inline(always)]
pub fn pow_scalar_exponent<F: FloatMath>(x: F, e: F) -> F {
    let two = F::from_f32(2.0);
    if e == two {
        x * x
    } else if e == F::from_f32(3.0) {
        x * x * x
    } else if e == F::from_f32(0.5) {
        x.sqrt_()
    } else if e == F::from_f32(-0.5) {
        F::ONE / x.sqrt_()
    } else if e == -F::ONE {
        F::ONE / x
    } else if e == -two {
        F::ONE / (x * x)
    } else {
        x.pow_(e)
    }
}

/// `aten::round` for floats: round half to even (`round(2.5) = 2`,
/// `round(-0.5) = -0.0`). Integers round to themselves.
#[inline(always)]
pub fn round<F: FloatMath>(x: F) -> F {
    x.rint_()
}

/// `aten::round.decimals` for floats: like PyTorch, scales by `10^d`
/// (multiplying for `d > 0`, dividing for `d < 0`), rounds half to even and
/// scales back.
#[inline(always)]
pub fn round_decimals<F: FloatMath>(x: F, decimals: i64) -> F {
    if decimals == 0 {
        return x.rint_();
    }
    let ten = F::from_f32(10.0);
    let p = ten.pow_(F::from_f64_(decimals.unsigned_abs() as f64));
    if decimals > 0 {
        (x * p).rint_() / p
    } else {
        (x / p).rint_() * p
    }
}

/// `aten::floor`.
#[inline(always)]
pub fn floor<F: FloatMath>(x: F) -> F {
    x.floor_()
}
/// `aten::ceil`.
#[inline(always)]
pub fn ceil<F: FloatMath>(x: F) -> F {
    x.ceil_()
}
/// `aten::trunc` / `aten::fix`.
#[inline(always)]
pub fn trunc<F: FloatMath>(x: F) -> F {
    x.trunc_()
}
/// `aten::frac`: `x - trunc(x)`.
#[inline(always)]
pub fn frac<F: FloatMath>(x: F) -> F {
    x - x.trunc_()
}

/// `aten::sign` for floats, PyTorch's formula `(0 < x) - (x < 0)`: gives
/// +0.0 for ±0 and for NaN.
#[inline(always)]
pub fn sign<F: FloatMath>(x: F) -> F {
    let p = if F::ZERO < x { F::ONE } else { F::ZERO };
    let n = if x < F::ZERO { F::ONE } else { F::ZERO };
    p - n
}

/// `aten::abs` for floats (clears the sign bit).
#[inline(always)]
pub fn abs<F: FloatMath>(x: F) -> F {
    x.abs_()
}

/// `aten::neg` for floats.
#[inline(always)]
pub fn neg<F: FloatMath>(x: F) -> F {
    -x
}

/// `aten::sqrt`.
#[inline(always)]
pub fn sqrt<F: FloatMath>(x: F) -> F {
    x.sqrt_()
}
/// `aten::rsqrt`: `1 / sqrt(x)`.
#[inline(always)]
pub fn rsqrt<F: FloatMath>(x: F) -> F {
    F::ONE / x.sqrt_()
}
/// `aten::reciprocal`: `1 / x`.
#[inline(always)]
pub fn reciprocal<F: FloatMath>(x: F) -> F {
    F::ONE / x
}
/// `aten::square` for floats (`x * x`).
#[inline(always)]
pub fn square<F: FloatMath>(x: F) -> F {
    x * x
}
/// `aten::exp`.
#[inline(always)]
pub fn exp<F: FloatMath>(x: F) -> F {
    x.exp_()
}
/// `aten::exp2`.
#[inline(always)]
pub fn exp2<F: FloatMath>(x: F) -> F {
    x.exp2_()
}
/// `aten::expm1`.
#[inline(always)]
pub fn expm1<F: FloatMath>(x: F) -> F {
    x.expm1_()
}
/// `aten::log` (natural).
#[inline(always)]
pub fn log<F: FloatMath>(x: F) -> F {
    x.ln_()
}
/// `aten::log1p`.
#[inline(always)]
pub fn log1p<F: FloatMath>(x: F) -> F {
    x.ln1p_()
}
/// `aten::log2`.
#[inline(always)]
pub fn log2<F: FloatMath>(x: F) -> F {
    x.log2_()
}
/// `aten::log10`.
#[inline(always)]
pub fn log10<F: FloatMath>(x: F) -> F {
    x.log10_()
}
/// `aten::sin`.
#[inline(always)]
pub fn sin<F: FloatMath>(x: F) -> F {
    x.sin_()
}
/// `aten::cos`.
#[inline(always)]
pub fn cos<F: FloatMath>(x: F) -> F {
    x.cos_()
}
/// `aten::tan`.
#[inline(always)]
pub fn tan<F: FloatMath>(x: F) -> F {
    x.tan_()
}
/// `aten::asin`.
#[inline(always)]
pub fn asin<F: FloatMath>(x: F) -> F {
    x.asin_()
}
/// `aten::acos`.
#[inline(always)]
pub fn acos<F: FloatMath>(x: F) -> F {
    x.acos_()
}
/// `aten::atan`.
#[inline(always)]
pub fn atan<F: FloatMath>(x: F) -> F {
    x.atan_()
}
/// `aten::atan2(y, x)`.
#[inline(always)]
pub fn atan2<F: FloatMath>(y: F, x: F) -> F {
    y.atan2_(x)
}
/// `aten::sinh`.
#[inline(always)]
pub fn sinh<F: FloatMath>(x: F) -> F {
    x.sinh_()
}
/// `aten::cosh`.
#[inline(always)]
pub fn cosh<F: FloatMath>(x: F) -> F {
    x.cosh_()
}
/// `aten::tanh`.
#[inline(always)]
pub fn tanh<F: FloatMath>(x: F) -> F {
    x.tanh_()
}
/// `aten::asinh`.
#[inline(always)]
pub fn asinh<F: FloatMath>(x: F) -> F {
    x.asinh_()
}
/// `aten::acosh`.
#[inline(always)]
pub fn acosh<F: FloatMath>(x: F) -> F {
    x.acosh_()
}
/// `aten::atanh`.
#[inline(always)]
pub fn atanh<F: FloatMath>(x: F) -> F {
    x.atanh_()
}
/// `aten::erf`.
#[inline(always)]
pub fn erf<F: FloatMath>(x: F) -> F {
    x.erf_()
}
/// `aten::erfc`.
#[inline(always)]
pub fn erfc<F: FloatMath>(x: F) -> F {
    x.erfc_()
}

/// `aten::erfinv`: inverse error function on `[-1, 1]` (±1 → ±inf, outside
/// → NaN). A rational first guess refined by two Newton steps in `f64`.
#[inline(always)]
pub fn erfinv<F: FloatMath>(x: F) -> F {
    F::from_f64_(erfinv_f64(x.to_f64()))
}

fn erfinv_f64(y: f64) -> f64 {
    if y.is_nan() || !(-1.0..=1.0).contains(&y) {
        return f64::NAN;
    }
    if y == 1.0 {
        return f64::INFINITY;
    }
    if y == -1.0 {
        return f64::NEG_INFINITY;
    }
    if y == 0.0 {
        return y;
    }
    // First guess: Giles' single-precision approximation in w = -ln(1-y^2).
    let w = -libm::log((1.0 - y) * (1.0 + y));
    let mut x = if w < 5.0 {
        let w = w - 2.5;
        let mut p = 2.810_226_36e-08;
        p = 3.432_739_39e-07 + p * w;
        p = -3.523_387_7e-06 + p * w;
        p = -4.391_506_54e-06 + p * w;
        p = 0.000_218_580_87 + p * w;
        p = -0.001_253_725_03 + p * w;
        p = -0.004_177_681_64 + p * w;
        p = 0.246_640_727 + p * w;
        p = 1.501_409_41 + p * w;
        p * y
    } else {
        let w = libm::sqrt(w) - 3.0;
        let mut p = -0.000_200_214_257;
        p = 0.000_100_950_558 + p * w;
        p = 0.001_349_343_22 + p * w;
        p = -0.003_673_428_44 + p * w;
        p = 0.005_739_507_73 + p * w;
        p = -0.007_622_461_3 + p * w;
        p = 0.009_438_870_47 + p * w;
        p = 1.001_674_06 + p * w;
        p = 2.832_976_82 + p * w;
        p * y
    };
    // Newton: f(x) = erf(x) - y, f'(x) = 2/sqrt(pi) exp(-x^2).
    let two_over_sqrt_pi = core::f64::consts::FRAC_2_SQRT_PI;
    for _ in 0..2 {
        let err = libm::erf(x) - y;
        x -= err / (two_over_sqrt_pi * libm::exp(-x * x));
    }
    x
}

// ---------------------------------------------------------------------------
// Floats: activations
// ---------------------------------------------------------------------------

/// `aten::sigmoid`: `1 / (1 + exp(-x))`; saturates cleanly to 0 and 1 for
/// large |x| (no overflow to NaN).
#[inline(always)]
pub fn sigmoid<F: FloatMath>(x: F) -> F {
    x.sigmoid_()
}

/// `aten::relu` for any dtype: `max(x, 0)`, NaN propagates.
#[inline(always)]
pub fn relu<T: Element>(x: T) -> T {
    let z = T::default();
    if is_nan_generic(x) || x > z {
        x
    } else {
        z
    }
}

/// `aten::relu6` / `hardtanh(0, 6)`.
#[inline(always)]
pub fn relu6<F: FloatMath>(x: F) -> F {
    hardtanh(x, F::ZERO, F::from_f32(6.0))
}

/// `exp(x)` for `x <= 0` (and NaN, which stays NaN), in a form the
/// compiler vectorizes: Cody–Waite reduction `x = n·ln 2 + r`, a degree-6
/// polynomial for `e^r` on `|r| <= ln 2 / 2` (Cephes' `expf`, within 2 ulp)
/// and `2^n` built from its bits. Below the smallest normal result it
/// returns 0 (the exact value is under 1.2e-38).
#[inline(always)]
pub fn exp_nonpositive(x: f32) -> f32 {
    exp_nonpositive_lanes(&[x])[0]
}

/// [`exp_nonpositive`] of `L` elements, step by step over all of them
/// (see [`lanes`]).
#[inline(always)]
pub fn exp_nonpositive_lanes<const L: usize>(x: &[f32; L]) -> [f32; L] {
    const LOWEST: f32 = -87.33654; // ln(f32::MIN_POSITIVE)
    const LOG2E: f32 = core::f32::consts::LOG2_E;
    const ROUND: f32 = 12582912.0; // 1.5 · 2^23: adding it rounds to an integer
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let xc: [f32; L] = lanes(|i| if x[i] < LOWEST { LOWEST } else { x[i] });
    let t: [f32; L] = lanes(|i| xc[i] * LOG2E + ROUND);
    let r: [f32; L] = lanes(|i| {
        let n = t[i] - ROUND;
        xc[i] - n * LN2_HI - n * LN2_LO
    });
    let mut p = [1.987_569_1e-4f32; L];
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5] {
        p = lanes(|i| p[i] * r[i] + c);
    }
    lanes(|i| {
        let e = p[i] * r[i] * r[i] + r[i] + 1.0;
        // n lies in [-126, 0]: its bits are those of `t` minus ROUND's.
        let n_int = t[i].to_bits() as i32 - ROUND.to_bits() as i32;
        let scale = f32::from_bits(((n_int + 127) << 23) as u32);
        if x[i] < LOWEST {
            0.0
        } else {
            e * scale
        }
    })
}

/// `1 + erf(z)` in `f32`, branch-free so that element-wise loops
/// vectorize (libm's `erff` is a scalar call). `erfc(|z|)` comes from the
/// Chebyshev fit `t e^(-z² + c(t))`, `t = 1 / (1 + |z|/2)`, `c` a degree-9
/// polynomial (Numerical Recipes' `erfcc`, relative error under 1.2e-7);
/// then `2 - erfc(|z|)` for `z >= 0` and `erfc(|z|)` below, which keeps the
/// negative tail's relative precision. NaN stays NaN; `±inf` give 2 and 0.
#[inline(always)]
pub fn one_plus_erf_f32(z: f32) -> f32 {
    one_plus_erf_lanes(&[z])[0]
}

/// [`one_plus_erf_f32`] of `L` elements, step by step over all of them
/// (see [`lanes`]): the Chebyshev sum is a chain of nine dependent steps,
/// then `exp`'s, which one vector at a time leaves the core waiting.
#[inline(always)]
pub fn one_plus_erf_lanes<const L: usize>(z: &[f32; L]) -> [f32; L] {
    const C: [f32; 10] = [
        -1.265_512_2,
        1.000_023_7,
        0.374_091_96,
        0.096_784_18,
        -0.186_288_06,
        0.278_868_07,
        -1.135_204,
        1.488_515_9,
        -0.822_152_23,
        0.170_872_77,
    ];
    let a: [f32; L] = lanes(|i| if z[i] < 0.0 { -z[i] } else { z[i] });
    let t: [f32; L] = lanes(|i| 1.0 / (1.0 + 0.5 * a[i]));
    let mut c = [C[9]; L];
    for &k in C[..9].iter().rev() {
        c = lanes(|i| c[i] * t[i] + k);
    }
    // The exponent is -z² + log(erfc(z) / t) <= 0, but for rounding.
    let e: [f32; L] = lanes(|i| {
        let e = c[i] - a[i] * a[i];
        if e > 0.0 {
            0.0
        } else {
            e
        }
    });
    let exp = exp_nonpositive_lanes(&e);
    lanes(|i| {
        let erfc = t[i] * exp[i];
        if z[i] >= 0.0 {
            2.0 - erfc
        } else {
            erfc
        }
    })
}

/// `aten::gelu(approximate="none")`: `0.5 x (1 + erf(x / sqrt 2))`.
#[inline(always)]
pub fn gelu<F: FloatMath>(x: F) -> F {
    let r = F::from_f64_(core::f64::consts::FRAC_1_SQRT_2);
    x * F::from_f32(0.5) * (x * r).one_plus_erf_()
}

/// [`gelu`] for `f32` of `L` elements, step by step over all of them (see
/// [`lanes`]): the same operations, so the same bits.
#[inline(always)]
pub fn gelu_lanes<const L: usize>(x: &[f32; L]) -> [f32; L] {
    let r = core::f64::consts::FRAC_1_SQRT_2 as f32;
    let e = one_plus_erf_lanes(&lanes::<L>(|i| x[i] * r));
    lanes(|i| x[i] * 0.5 * e[i])
}

/// `aten::gelu(approximate="tanh")`:
/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
#[inline(always)]
pub fn gelu_tanh<F: FloatMath>(x: F) -> F {
    let beta = F::from_f64_(core::f64::consts::SQRT_2 * core::f64::consts::FRAC_2_SQRT_PI * 0.5);
    let kappa = F::from_f64_(0.044715);
    let inner = beta * (x + kappa * x * x * x);
    F::from_f32(0.5) * x * (F::ONE + inner.tanh_())
}

/// `aten::elu(alpha, scale, input_scale)`:
/// `x > 0 ? scale x : alpha scale (exp(input_scale x) - 1)`.
#[inline(always)]
pub fn elu<F: FloatMath>(x: F, alpha: F, scale: F, input_scale: F) -> F {
    if x > F::ZERO {
        x * scale
    } else {
        (x * input_scale).expm1_() * (alpha * scale)
    }
}

/// `aten::selu`: [`elu`] with PyTorch's fixed alpha and scale.
#[inline(always)]
pub fn selu<F: FloatMath>(x: F) -> F {
    elu(
        x,
        F::from_f64_(1.673_263_242_354_377_3),
        F::from_f64_(1.050_700_987_355_480_5),
        F::ONE,
    )
}

/// `aten::celu(alpha)`: `elu(x, alpha, 1, 1/alpha)`.
#[inline(always)]
pub fn celu<F: FloatMath>(x: F, alpha: F) -> F {
    elu(x, alpha, F::ONE, F::ONE / alpha)
}

/// `aten::leaky_relu(negative_slope)`: `x > 0 ? x : x * slope`.
#[inline(always)]
pub fn leaky_relu<F: FloatMath>(x: F, slope: F) -> F {
    if x > F::ZERO {
        x
    } else {
        x * slope
    }
}

/// `aten::hardtanh(min_val, max_val)`: `x <= min ? min : x >= max ? max : x`
/// (NaN passes through).
#[inline(always)]
pub fn hardtanh<T: PartialOrd + Copy>(x: T, min: T, max: T) -> T {
    if x <= min {
        min
    } else if x >= max {
        max
    } else {
        x
    }
}

/// `aten::hardsigmoid`: `min(max(x + 3, 0), 6) / 6`.
#[inline(always)]
pub fn hardsigmoid<F: FloatMath>(x: F) -> F {
    let six = F::from_f32(6.0);
    minimum(maximum(x + F::from_f32(3.0), F::ZERO), six) / six
}

/// `aten::hardswish`: `x * min(max(x + 3, 0), 6) / 6`.
#[inline(always)]
pub fn hardswish<F: FloatMath>(x: F) -> F {
    let six = F::from_f32(6.0);
    x * minimum(maximum(x + F::from_f32(3.0), F::ZERO), six) / six
}

/// `aten::silu`: `x / (1 + exp(-x))`.
#[inline(always)]
pub fn silu<F: FloatMath>(x: F) -> F {
    x.silu_()
}

/// `aten::softplus(beta, threshold)`:
/// `x beta > threshold ? x : log1p(exp(x beta)) / beta`.
#[inline(always)]
pub fn softplus<F: FloatMath>(x: F, beta: F, threshold: F) -> F {
    let xb = x * beta;
    if xb > threshold {
        x
    } else {
        xb.exp_().ln1p_() / beta
    }
}

/// `aten::mish`: `x tanh(log1p(exp(x)))` (PyTorch's formula; large `x`
/// saturates to `x`).
#[inline(always)]
pub fn mish<F: FloatMath>(x: F) -> F {
    x * x.exp_().ln1p_().tanh_()
}

/// `aten::logit(eps=None)`: `log(x / (1 - x))`.
#[inline(always)]
pub fn logit<F: FloatMath>(x: F) -> F {
    (x / (F::ONE - x)).ln_()
}

/// `aten::logit(eps)`: clamps `x` to `[eps, 1 - eps]` first.
#[inline(always)]
pub fn logit_eps<F: FloatMath>(x: F, eps: F) -> F {
    logit(clamp(x, Some(eps), Some(F::ONE - eps)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectorized_exp_within_two_ulp() {
        let mut x = -87.3f32;
        while x <= 0.0 {
            let (got, want) = (exp_nonpositive(x), libm::exp(x as f64));
            let ulp = (want as f32).to_bits().abs_diff(got.to_bits());
            assert!(ulp <= 2, "exp({x}) = {got}, want {want} ({ulp} ulp)");
            x += 0.0137;
        }
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-100.0), 0.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert!(exp_nonpositive(f32::NAN).is_nan());
    }

    /// Against f64 over [-87, 87] (down to where the result leaves the
    /// normal range): sigmoid and silu within 4 ulp; the special values.
    #[test]
    fn vectorizable_sigmoid_and_silu_are_within_four_ulp() {
        let mut x = -87.0f32;
        while x <= 87.0 {
            let s = 1.0 / (1.0 + libm::exp(-(x as f64)));
            for (name, got, want) in [("sigmoid", sigmoid_f32(x), s), ("silu", silu_f32(x), x as f64 * s)] {
                let ulp = (want as f32).to_bits().abs_diff(got.to_bits());
                assert!(
                    ulp <= 4 || got == want as f32,
                    "{name}({x}) = {got}, want {want} ({ulp} ulp)"
                );
            }
            x += 0.0173;
        }
        assert_eq!(sigmoid_f32(f32::INFINITY), 1.0);
        assert_eq!(sigmoid_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(sigmoid_f32(0.0), 0.5);
        assert_eq!(silu_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(silu_f32(-200.0), 0.0);
        assert!(silu_f32(-0.0).is_sign_negative());
        for f in [sigmoid_f32, silu_f32] {
            assert!(f(f32::NAN).is_nan());
        }
        assert!(silu_f32(f32::NEG_INFINITY).is_nan());
    }

    /// Against libm in f64 over [-8, 8] and the special values: `1 + erf`
    /// within 4e-7 absolutely (3 ulp of 2); the negative tail (`erfc`)
    /// within 1e-5 relatively down to the smallest normal f32 (the f32
    /// square of `z` limits it far out; 3e-7 near 0); gelu within a
    /// fiftieth of the bundles' default tolerance.
    #[test]
    fn vectorizable_one_plus_erf_is_close_to_libm() {
        let mut z = -8.0f64;
        let mut worst_tail = 0.0f64;
        while z <= 8.0 {
            let zf = (z as f32) as f64;
            let want = if zf < 0.0 { libm::erfc(-zf) } else { 1.0 + libm::erf(zf) };
            let got = one_plus_erf_f32(zf as f32) as f64;
            assert!((got - want).abs() <= 4e-7, "1 + erf({zf}) = {got}, want {want}");
            if zf < 0.0 && want > f32::MIN_POSITIVE as f64 {
                worst_tail = worst_tail.max((got - want).abs() / want);
            }
            let x = (z * core::f64::consts::SQRT_2) as f32;
            let g = gelu(x) as f64;
            let w = 0.5 * x as f64 * (1.0 + libm::erf(x as f64 * core::f64::consts::FRAC_1_SQRT_2));
            assert!((g - w).abs() <= 1e-7 + 2e-6 * w.abs(), "gelu({x}) = {g}, want {w}");
            z += 0.000_731;
        }
        assert!(worst_tail <= 1e-5, "erfc's largest relative error: {worst_tail}");
        assert_eq!(one_plus_erf_f32(f32::INFINITY), 2.0);
        assert_eq!(one_plus_erf_f32(f32::NEG_INFINITY), 0.0);
        assert!(one_plus_erf_f32(f32::NAN).is_nan());
        assert!(gelu(f32::NAN).is_nan());
        assert_eq!(gelu(f32::INFINITY), f32::INFINITY);
        assert_eq!(gelu(0.0f32), 0.0);
    }

    #[test]
    fn int_division_modes() {
        // trunc: -7 / 2 = -3.5 -> -3 ; floor -> -4
        assert_eq!(div_trunc_int(-7i32, 2), Some(-3));
        assert_eq!(div_floor_int(-7i32, 2), Some(-4));
        assert_eq!(div_floor_int(7i32, -2), Some(-4));
        assert_eq!(div_floor_int(-7i32, -2), Some(3));
        assert_eq!(div_floor_int(6i32, -2), Some(-3));
        assert_eq!(div_floor_int(7u8, 2), Some(3));
        assert_eq!(div_trunc_int(1i64, 0), None);
        assert_eq!(div_floor_int(1i8, 0), None);
        assert_eq!(div_trunc_int(i32::MIN, -1), Some(i32::MIN));
        assert_eq!(floor_divide_int(-1i16, 3), Some(-1));
    }

    #[test]
    fn int_remainder_python_sign() {
        // -7 = 3 * (-3) + 2 ; 7 = (-3) * (-3) + (-2)
        assert_eq!(remainder_int(-7i32, 3), Some(2));
        assert_eq!(remainder_int(7i32, -3), Some(-2));
        assert_eq!(remainder_int(-7i32, -3), Some(-1));
        assert_eq!(remainder_int(6i8, -3), Some(0));
        assert_eq!(remainder_int(7u8, 3), Some(1));
        assert_eq!(remainder_int(5i64, 0), None);
        assert_eq!(fmod_int(-7i32, 3), Some(-1));
        assert_eq!(fmod_int(7i32, -3), Some(1));
        assert_eq!(fmod_int(7i32, 0), None);
        assert_eq!(remainder_int(i64::MIN, -1), Some(0));
    }

    #[test]
    fn int_remainder_random_identity() {
        // a == floor_div(a, b) * b + remainder(a, b), remainder sign == b sign
        let mut s = 12345u64;
        for _ in 0..10000 {
            crate::testing::lcg_step(&mut s);
            let a = (s >> 33) as i32 % 1000 - 500;
            let b = (s >> 13) as i32 % 41 - 20;
            if b == 0 {
                continue;
            }
            let q = div_floor_int(a, b).unwrap();
            let r = remainder_int(a, b).unwrap();
            assert_eq!(q * b + r, a);
            assert!(r == 0 || (r < 0) == (b < 0));
            assert!(r.abs() < b.abs());
            assert_eq!(q, (a as f64 / b as f64).floor() as i32);
        }
    }

    #[test]
    fn float_remainder_and_floor_div() {
        assert_eq!(remainder(-7.0f32, 3.0), 2.0);
        assert_eq!(remainder(7.0f64, -3.0), -2.0);
        assert_eq!(remainder(5.5f32, 2.0), 1.5);
        assert!(remainder(1.0f32, 0.0).is_nan());
        assert_eq!(fmod(-7.0f32, 3.0), -1.0);
        assert_eq!(div_floor(-7.0f32, 2.0), -4.0);
        assert_eq!(div_floor(7.0f64, 2.0), 3.0);
        assert_eq!(div_trunc(-7.0f32, 2.0), -3.0);
        assert_eq!(div_floor(1.0f32, 0.0), f32::INFINITY);
        // 0 // -3 is -0.0 (sign of the quotient)
        let z = div_floor(0.0f64, -3.0);
        assert!(z == 0.0 && z.is_sign_negative());
    }

    #[test]
    fn int_pow() {
        assert_eq!(pow_int(3i32, 4), 81);
        assert_eq!(pow_int(-2i64, 3), -8);
        assert_eq!(pow_int(5i32, 0), 1);
        assert_eq!(pow_int(2i8, 8), 0); // 256 wraps to 0
        assert_eq!(pow_int(2i32, -1), 0);
        assert_eq!(pow_int(1i32, -5), 1);
        assert_eq!(pow_int(-1i32, -3), -1);
        assert_eq!(pow_int(-1i32, -4), 1);
        assert_eq!(try_pow_int(2i32, -1), None);
        assert_eq!(try_pow_int(-1i32, -1), Some(-1));
        assert_eq!(try_pow_int(3u8, 2), Some(9));
    }

    #[test]
    fn rounding() {
        assert_eq!(round(2.5f32), 2.0);
        assert_eq!(round(3.5f32), 4.0);
        assert_eq!(round(-2.5f64), -2.0);
        let z = round(-0.5f32);
        assert!(z == 0.0 && z.is_sign_negative());
        assert_eq!(round(1.4999f32), 1.0);
        // 1.25 * 10 = 12.5 -> 12 -> 1.2
        assert_eq!(round_decimals(1.25f64, 1), 1.2);
        // 1250 / 100 = 12.5 -> 12 -> 1200
        assert_eq!(round_decimals(1250.0f64, -2), 1200.0);
    }

    #[test]
    fn signs_abs_neg() {
        assert_eq!(sign(-3.0f32), -1.0);
        assert_eq!(sign(0.0f32), 0.0);
        assert_eq!(sign(f32::NAN), 0.0);
        assert_eq!(sign_int(-5i8), -1);
        assert_eq!(sign_int(0u8), 0);
        assert_eq!(sign_int(9u8), 1);
        assert_eq!(abs_int(i8::MIN), i8::MIN);
        assert_eq!(neg_int(i32::MIN), i32::MIN);
        assert_eq!(neg_int(5u8), 251);
        assert_eq!(abs(-0.0f32).to_bits(), 0);
    }

    #[test]
    fn activations() {
        // gelu(1) = 0.5 * (1 + erf(0.70710678)) = 0.5 * 1.6826895 = 0.8413447
        assert!((gelu(1.0f32) - 0.841_344_7).abs() < 1e-6);
        // tanh approx: 0.5*(1+tanh(0.7978846*(1.044715))) = 0.8411920
        assert!((gelu_tanh(1.0f64) - 0.841_192).abs() < 1e-6);
        assert_eq!(sigmoid(-1000.0f32), 0.0);
        assert_eq!(sigmoid(1000.0f32), 1.0);
        assert!((sigmoid(0.0f64) - 0.5).abs() < 1e-15);
        assert_eq!(relu(-3i32), 0);
        assert!(relu(f32::NAN).is_nan());
        assert_eq!(relu(-0.5f32), 0.0);
        assert_eq!(hardswish(1.0f32), 1.0 * 4.0 / 6.0);
        assert_eq!(hardswish(-4.0f32), 0.0);
        assert_eq!(hardsigmoid(4.0f32), 1.0);
        assert_eq!(leaky_relu(-2.0f32, 0.01), -0.02);
        assert_eq!(hardtanh(3.0f32, -1.0, 1.0), 1.0);
        assert!(hardtanh(f32::NAN, -1.0, 1.0).is_nan());
        // elu(-1, alpha=1) = e^-1 - 1 = -0.63212056
        assert!((elu(-1.0f64, 1.0, 1.0, 1.0) + 0.632_120_558_828_557_7).abs() < 1e-15);
        assert_eq!(elu(2.0f32, 1.0, 2.0, 1.0), 4.0);
        // softplus(0) = ln 2 ; above threshold: identity
        assert!((softplus(0.0f64, 1.0, 20.0) - core::f64::consts::LN_2).abs() < 1e-15);
        assert_eq!(softplus(30.0f32, 1.0, 20.0), 30.0);
        // silu(1) = 1 / (1 + e^-1) = 0.7310586
        assert!((silu(1.0f32) - 0.731_058_6).abs() < 1e-6);
    }

    #[test]
    fn min_max_clamp_nan() {
        assert!(maximum(f32::NAN, 1.0).is_nan());
        assert!(maximum(1.0, f32::NAN).is_nan());
        assert!(minimum(f32::NAN, 1.0).is_nan());
        assert!(minimum(1.0f64, f64::NAN).is_nan());
        assert_eq!(maximum(3i32, 4), 4);
        assert_eq!(minimum(3i32, 4), 3);
        assert_eq!(fmax(f32::NAN, 1.0), 1.0);
        assert_eq!(fmin(2.0, f32::NAN), 2.0);
        assert!(fmax(f32::NAN, f32::NAN).is_nan());
        assert!(clamp(f32::NAN, Some(0.0), Some(1.0)).is_nan());
        assert!(clamp(0.5f32, Some(f32::NAN), None).is_nan());
        assert_eq!(clamp(5i32, Some(0), Some(3)), 3);
        assert_eq!(clamp(-5i32, Some(0), None), 0);
        assert_eq!(clamp(2i32, Some(5), Some(3)), 3); // min > max -> max
        assert_eq!(clamp(2.0f32, None, None), 2.0);
    }

    #[test]
    fn logical_bitwise_shifts() {
        assert!(logical_and(2i32, 0.5f32));
        assert!(!logical_and(0i32, 1u8));
        assert!(logical_or(0.0f32, f32::NAN));
        assert!(!logical_or(-0.0f32, 0u8));
        assert!(logical_xor(true, 0i64));
        assert!(logical_not(0.0f64));
        assert!(bitwise_and(true, true));
        assert!(!bitwise_xor(true, true));
        assert!(!bitwise_not(true));
        assert_eq!(bitwise_not(0u8), 255);
        assert_eq!(bitwise_and(0b1100i32, 0b1010), 0b1000);
        assert_eq!(shl_int(1i32, 4), 16);
        assert_eq!(shl_int(1i32, 32), 0);
        assert_eq!(shl_int(1i32, -1), 0);
        assert_eq!(shl_int(1i8, 7), i8::MIN);
        assert_eq!(shr_int(-16i32, 2), -4);
        assert_eq!(shr_int(-16i32, 40), -1);
        assert_eq!(shr_int(16i32, 40), 0);
        assert_eq!(shr_int(200u8, 9), 0);
        assert_eq!(shr_int(200u8, 3), 25);
    }

    #[test]
    fn predicates_and_transcendentals() {
        assert!(isnan(f32::NAN));
        assert!(!isnan(3i32));
        assert!(isinf(f64::NEG_INFINITY));
        assert!(!isinf(f32::NAN));
        assert!(!isfinite(f32::NAN));
        assert!(signbit(-0.0f32));
        assert!((erfinv(erf(0.3f64)) - 0.3).abs() < 1e-14);
        assert!((erfinv(0.999_999f64) - 3.458_910_737_279_500_3).abs() < 1e-9);
        assert_eq!(erfinv(1.0f32), f32::INFINITY);
        assert!(erfinv(1.5f32).is_nan());
        assert!((atan2(1.0f64, -1.0) - 3.0 * core::f64::consts::FRAC_PI_4).abs() < 1e-15);
        assert_eq!(pow_scalar_exponent(3.0f32, 2.0), 9.0);
        assert_eq!(pow_scalar_exponent(4.0f32, -0.5), 0.5);
        assert_eq!(pow(2.0f64, 10.0), 1024.0);
        assert_eq!(rsqrt(4.0f32), 0.5);
        assert_eq!(reciprocal(4.0f64), 0.25);
    }
}
