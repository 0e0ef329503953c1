//! Larger-shape checks of the heavy kernels through their public API, and
//! an ignored timing test (`cargo test --release -p ptec-kernels --test
//! heavy_gemm -- --ignored --nocapture`).

use ptec_kernels::conv::{conv_output_sizes, conv_scratch_len, convolution};
use ptec_kernels::linear::{gemm_scratch_len, sgemm};

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// Spans several KC/MC blocks and ragged edges of both micro-kernel tiles.
#[test]
fn sgemm_multi_block_against_naive() {
    let (m, n, k) = (157, 203, 601);
    let mut rng = Lcg(42);
    let a = rng.vec(m * k);
    let b = rng.vec(k * n);
    let mut c = rng.vec(m * n);
    let c0 = c.clone();
    let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
    sgemm(m, n, k, 0.75, &a, false, &b, true, -1.5, &mut c, &mut scratch);
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..k {
                s += a[i * k + p] as f64 * b[j * k + p] as f64;
            }
            let want = 0.75 * s - 1.5 * c0[i * n + j] as f64;
            let got = c[i * n + j] as f64;
            assert!(
                (got - want).abs() < 1e-3 * (1.0 + want.abs()),
                "({i},{j}) {got} vs {want}"
            );
        }
    }
}

/// A ResNet-like 3×3 convolution (im2col + blocked GEMM) against a direct loop.
#[test]
fn conv3x3_against_naive() {
    let (n, cin, cout, h, w) = (1, 24, 40, 17, 15);
    let mut rng = Lcg(43);
    let x = rng.vec(n * cin * h * w);
    let wt = rng.vec(cout * cin * 9);
    let bias = rng.vec(cout);
    let isz = [n, cin, h, w];
    let wsz = [cout, cin, 3, 3];
    let osz = conv_output_sizes(&isz, &wsz, Some(cout), &[2, 1], &[1], &[1], false, &[], 1).unwrap();
    let (oh, ow) = (osz[2], osz[3]);
    assert_eq!((oh, ow), (9, 15));
    let mut scratch = vec![0.0f32; conv_scratch_len(&isz, &wsz, &[2, 1], &[1], &[1], false, &[], 1)];
    let mut out = vec![0.0f32; osz.numel()];
    convolution(
        &x,
        &isz,
        &wt,
        &wsz,
        Some(&bias),
        &[2, 1],
        &[1],
        &[1],
        false,
        &[],
        1,
        &mut out,
        &mut scratch,
    )
    .unwrap();
    for oc in 0..cout {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut s = bias[oc] as f64;
                for ic in 0..cin {
                    for ky in 0..3 {
                        for kx in 0..3 {
                            let iy = (oy * 2 + ky) as i64 - 1;
                            let ix = (ox + kx) as i64 - 1;
                            if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                                continue;
                            }
                            s += x[(ic * h + iy as usize) * w + ix as usize] as f64
                                * wt[((oc * cin + ic) * 3 + ky) * 3 + kx] as f64;
                        }
                    }
                }
                let got = out[(oc * oh + oy) * ow + ox] as f64;
                assert!((got - s).abs() < 1e-4 * (1.0 + s.abs()));
            }
        }
    }
}

#[test]
#[ignore]
fn sgemm_timing() {
    for &(m, n, k) in &[
        (512usize, 512usize, 512usize),
        (1024, 1024, 1024),
        (1, 4096, 1024),
        (64, 3136, 576),
    ] {
        let mut rng = Lcg(1);
        let a = rng.vec(m * k);
        let b = rng.vec(k * n);
        let mut c = vec![0.0f32; m * n];
        let mut scratch = vec![0.0f32; gemm_scratch_len(m, n, k)];
        for bt in [false, true] {
            sgemm(m, n, k, 1.0, &a, false, &b, bt, 0.0, &mut c, &mut scratch);
            let reps = (2e9 / (2.0 * (m * n * k) as f64)).clamp(1.0, 1000.0) as usize;
            let t = std::time::Instant::now();
            for _ in 0..reps {
                sgemm(m, n, k, 1.0, &a, false, &b, bt, 0.0, &mut c, &mut scratch);
            }
            let dt = t.elapsed().as_secs_f64() / reps as f64;
            println!(
                "{m}x{n}x{k} b_trans={bt}: {:.2} ms, {:.1} GFLOP/s",
                dt * 1e3,
                2.0 * (m * n * k) as f64 / dt / 1e9
            );
        }
    }
}

#[test]
#[ignore]
fn conv_timing() {
    // (cin, cout, groups, hw, k, stride)
    for &(cin, cout, groups, hw, k, s) in &[
        (32usize, 32usize, 32usize, 112usize, 3usize, 1usize),
        (64, 64, 64, 56, 3, 2),
        (64, 64, 1, 56, 3, 1),
        (64, 128, 1, 56, 1, 1),
    ] {
        let mut rng = Lcg(5);
        let isz = [1, cin, hw, hw];
        let wsz = [cout, cin / groups, k, k];
        let x = rng.vec(cin * hw * hw);
        let w = rng.vec(cout * cin / groups * k * k);
        let p = k / 2;
        let osz = conv_output_sizes(&isz, &wsz, None, &[s], &[p], &[1], false, &[], groups).unwrap();
        let mut out = vec![0.0f32; osz.numel()];
        let mut scratch = vec![0.0f32; conv_scratch_len(&isz, &wsz, &[s], &[p], &[1], false, &[], groups)];
        let flops = 2.0 * (osz.numel() * cin / groups * k * k) as f64;
        let reps = (2e9 / flops).clamp(1.0, 1000.0) as usize;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            convolution(
                &x,
                &isz,
                &w,
                &wsz,
                None,
                &[s],
                &[p],
                &[1],
                false,
                &[],
                groups,
                &mut out,
                &mut scratch,
            )
            .unwrap();
        }
        let dt = t.elapsed().as_secs_f64() / reps as f64;
        println!(
            "conv {cin}->{cout} g{groups} {hw}x{hw} k{k} s{s}: {:.3} ms, {:.1} GFLOP/s",
            dt * 1e3,
            flops / dt / 1e9
        );
    }
}
