//! Complex tensors through a compiled program's typed function
//! (`fixtures/complex.pte`): the signature takes and returns
//! `ptec_runtime::Complex` arrays, and the conjugates and real views are
//! the inputs' parts, to the bit (the bundled cases, against eager PyTorch,
//! run in `build_step`).
use ptec_runtime::{f16, Complex};

mod complex {
    ptec_macros::include_pte!("fixtures/complex.pte", name = Program);
}

fn c32(re: f32, im: f32) -> Complex<f32> {
    Complex { re, im }
}

/// What the typed `forward` returns (this compiles only if the signature
/// says so).
type Outputs<'a> = (
    &'a [[[f32; 2]; 4]; 3],
    &'a [[Complex<f64>; 3]; 2],
    &'a [[[f64; 2]; 3]; 2],
    &'a [Complex<f16>; 5],
    &'a [[f16; 2]; 5],
    &'a [[[f32; 2]; 4]; 3],
    &'a [[Complex<f32>; 4]; 3],
);

#[test]
fn typed_complex_inputs_and_outputs() {
    let mut z = [[c32(0.0, 0.0); 4]; 3];
    for (i, row) in z.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = c32(i as f32 - 1.5, j as f32 * 0.25 - 0.5);
        }
    }
    z[0][0] = c32(1.0, -0.0);
    z[0][1] = c32(f32::INFINITY, f32::NAN);
    let w = [[Complex { re: 1e300f64, im: -2.5 }; 3]; 2];
    let h = [Complex {
        re: f16::from_f32(0.5),
        im: f16::from_f32(-65504.0),
    }; 5];
    let mut p = complex::Program::new();
    let (zr, wc, wr, hc, hr, cr, cc): Outputs<'_> = p.forward(&z, &w, &h).unwrap();
    for i in 0..3 {
        for j in 0..4 {
            let [re, im] = zr[i][j];
            assert_eq!(re.to_bits(), z[i][j].re.to_bits());
            // A negation: -0.0 becomes +0.0 and NaN keeps its payload.
            assert_eq!(im.to_bits(), (-z[i][j].im).to_bits(), "{i} {j}");
            // The constant's conjugate, as a complex and as parts.
            assert_eq!(cr[i][j], [cc[i][j].re, cc[i][j].im]);
        }
    }
    assert_eq!(wc[1][2], Complex { re: 1e300, im: 2.5 });
    assert_eq!(wr[1][2], [1e300, -2.5]);
    assert_eq!(
        hc[4],
        Complex {
            re: f16::from_f32(0.5),
            im: f16::from_f32(65504.0)
        }
    );
    assert_eq!(hr[4], [f16::from_f32(0.5), f16::from_f32(65504.0)]);
}
