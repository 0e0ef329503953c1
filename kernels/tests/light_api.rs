//! Integration test of the light kernel families through the public API,
//! composing them the way generated code does.
use ptec_kernels::elementwise::{broadcast_sizes, broadcast_strides, try_zip, zip};
use ptec_kernels::reduce::{mean, sum, var};
use ptec_kernels::shape::{permute_copy, slice_copy, slice_output_len};
use ptec_kernels::{index, quant, scalar, KernelError, MAX_RANK};

/// A layer-norm-like sequence: mean/var over the last dim, then
/// (x - mean) / sqrt(var + eps) with broadcasting of the [2,1] statistics.
#[test]
fn normalize_rows() {
    let x = [1.0f32, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 14.0]; // [2, 4]
    let mut m = [0.0f32; 2];
    let mut v = [0.0f32; 2];
    mean(&x, &[2, 4], &[1], &mut m);
    var(&x, &[2, 4], &[1], 0.0, &mut v);
    // row 0: mean 2.5, var 1.25 ; row 1: mean 11, var (1+1+1+9)/4 = 3
    assert_eq!(m, [2.5, 11.0]);
    assert_eq!(v, [1.25, 3.0]);
    let (os, r) = broadcast_sizes(&[2, 4], &[2, 1]).unwrap();
    let mut sx = [0; MAX_RANK];
    let mut sm = [0; MAX_RANK];
    broadcast_strides(&os[..r], &[2, 4], &mut sx);
    broadcast_strides(&os[..r], &[2, 1], &mut sm);
    let mut centered = [0.0f32; 8];
    zip(&mut centered, &os[..r], &x, &sx[..r], &m, &sm[..r], |a, b| a - b);
    let mut y = [0.0f32; 8];
    zip(&mut y, &os[..r], &centered, &sx[..r], &v, &sm[..r], |a, b| {
        a * scalar::rsqrt(b + 1e-5)
    });
    let mut s = [0.0f32; 2];
    sum(&y, &[2, 4], &[1], &mut s);
    assert!(s.iter().all(|v| v.abs() < 1e-5));
}

#[test]
fn int_division_by_zero_surfaces() {
    let a = [6i64, 7, 8];
    let b = [2i64, 0, 4];
    let mut o = [0i64; 3];
    assert_eq!(
        try_zip(&mut o, &[3], &a, &[1], &b, &[1], scalar::div_floor_int),
        Err(KernelError::DivisionByZero)
    );
}

#[test]
fn permute_slice_index_quant_chain() {
    let x: Vec<f32> = (0..24).map(|v| v as f32 * 0.25).collect(); // [2,3,4]
    let mut p = vec![0.0f32; 24];
    permute_copy(&x, &[2, 3, 4], &[2, 0, 1], &mut p); // [4,2,3]
    let len = slice_output_len(4, Some(-3), None, 2).unwrap(); // rows 1, 3
    assert_eq!(len, 2);
    let mut s = vec![0.0f32; len * 6];
    slice_copy(&p, &[4, 2, 3], 0, Some(-3), None, 2, &mut s).unwrap();
    // p[1] = x[:, :, 1] = [1,5,9,13,17,21] * 0.25
    assert_eq!(&s[..6], &[0.25, 1.25, 2.25, 3.25, 4.25, 5.25]);
    let mut g = [0.0f32; 6];
    index::index_select(&s, &[2, 6], 1, &[5i32, 0, 5], &mut g).unwrap();
    assert_eq!(g[..3], [5.25, 0.25, 5.25]);
    assert_eq!(
        index::index_select(&s, &[2, 6], 1, &[6i32], &mut g[..2]),
        Err(KernelError::IndexOutOfRange { index: 6, size: 6 })
    );
    let mut q = [0i8; 12];
    quant::quantize_per_tensor(&s, 0.25, -10, -128, 127, &mut q);
    assert_eq!(q[0], -9); // 0.25 / 0.25 = 1, + (-10)
}
