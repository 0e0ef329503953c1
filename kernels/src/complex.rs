//! Complex tensors: the element type and the operators that build, split
//! and conjugate them (`complex`, `view_as_complex_copy`,
//! `view_as_real_copy`, `_conj_physical`).

/// A complex number as ExecuTorch and PyTorch store it: the real part, then
/// the imaginary part, each of type `T` (`f16` for `complex32`, `f32` for
/// `complex64`, `f64` for `complex128`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct Complex<T> {
    pub re: T,
    pub im: T,
}

/// `_conj_physical.out`: the imaginary parts negated.
pub fn conj<T: Copy + core::ops::Neg<Output = T>>(x: &[Complex<T>], out: &mut [Complex<T>]) {
    for (o, &a) in out.iter_mut().zip(x) {
        *o = Complex { re: a.re, im: -a.im };
    }
}

/// `view_as_real_copy.out`: each element as its two parts (`out` holds
/// twice as many elements as `x`).
pub fn to_parts<T: Copy>(x: &[Complex<T>], out: &mut [T]) {
    for (o, a) in out.chunks_exact_mut(2).zip(x) {
        o[0] = a.re;
        o[1] = a.im;
    }
}

/// `view_as_complex_copy.out`: pairs of parts (a last dim of 2) as
/// elements.
pub fn from_parts<T: Copy>(x: &[T], out: &mut [Complex<T>]) {
    for (o, a) in out.iter_mut().zip(x.chunks_exact(2)) {
        *o = Complex { re: a[0], im: a[1] };
    }
}

/// `complex.out`: real and imaginary parts from two tensors of one shape.
pub fn from_real_imag<T: Copy>(re: &[T], im: &[T], out: &mut [Complex<T>]) {
    for ((o, &r), &i) in out.iter_mut().zip(re).zip(im) {
        *o = Complex { re: r, im: i };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_round_trip_and_conjugate() {
        let x = [Complex { re: 1.0f32, im: -2.0 }, Complex { re: -0.0, im: 0.0 }];
        let mut parts = [9.0f32; 4];
        to_parts(&x, &mut parts);
        assert_eq!(parts, [1.0, -2.0, -0.0, 0.0]);
        let mut back = [Complex::default(); 2];
        from_parts(&parts, &mut back);
        assert_eq!(back, x);
        let mut c = [Complex::default(); 2];
        conj(&x, &mut c);
        assert_eq!(c[0], Complex { re: 1.0, im: 2.0 });
        // -0.0 imaginary part: the sign flips (a negation, not 0 - im).
        assert!(c[1].im.is_sign_negative());
        let mut z = [Complex::default(); 2];
        from_real_imag(&[1.0f64, 2.0], &[3.0, 4.0], &mut z);
        assert_eq!(z, [Complex { re: 1.0, im: 3.0 }, Complex { re: 2.0, im: 4.0 }]);
    }
}
