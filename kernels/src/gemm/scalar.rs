//! The portable micro-kernels, plain Rust the compiler vectorizes for
//! whatever the target has: the 4×32 tile of the blocked product, and the
//! unpacked product of small or thin shapes (which the AVX2 path in
//! `avx2` also compiles, with those features enabled, where it has no
//! kernel of its own).
use super::blocks::{At, Job, Out, Tile};
use super::packing::NR;
use super::Gemm;

/// Portable 4×32 tile (the compiler vectorizes the column loop).
#[derive(Clone, Copy)]
pub(super) struct Portable;

impl Tile for Portable {
    fn run(self, job: &Job<'_>, c: Out) {
        job.check(c);
        job.for_each_tile(4, false, |at| Self::tile(job, at, c.at(at.ir, at.s * NR)));
    }
}

impl Portable {
    fn tile(job: &Job<'_>, at: At<'_>, mut c: Out) {
        let mut acc = [[0.0f32; NR]; 4];
        let a = &job.a[at.ir * job.lda..];
        for (q, brow) in job.strip(at.s).chunks_exact(NR).enumerate() {
            for (i, acc_row) in acc.iter_mut().enumerate().take(at.mr) {
                let x = a[i * job.lda + q];
                for (s, &bv) in acc_row.iter_mut().zip(brow) {
                    *s += x * bv;
                }
            }
        }
        let view = c;
        let bias = job.bias_of(at);
        for (i, acc_row) in acc.iter().enumerate().take(at.mr) {
            let res = view.residual_row(i, at.nr);
            let row = c.row(i, at.nr);
            for (j, (o, &s)) in row.iter_mut().zip(acc_row).enumerate() {
                *o = job.finish(s, *o, bias.map(|b| b[j]), res.map(|r| r[j]));
            }
        }
    }
}

/// Dot product with 16 independent lanes, so it vectorizes.
#[inline(always)]
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &y[..n]);
    let mut acc = [0.0f32; 16];
    let xc = x.chunks_exact(16);
    let yc = y.chunks_exact(16);
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (xs, ys) in xc.zip(yc) {
        for l in 0..16 {
            acc[l] += xs[l] * ys[l];
        }
    }
    let mut s = 0.0f32;
    for (&u, &v) in xr.iter().zip(yr) {
        s += u * v;
    }
    let mut t = 0.0f32;
    for v in acc {
        t += v;
    }
    t + s
}

/// `c = beta · c` with `beta == 0` meaning "overwrite with 0".
#[inline(always)]
pub(super) fn scale_row(c: &mut [f32], beta: f32) {
    if beta == 0.0 {
        c.fill(0.0);
    } else if beta != 1.0 {
        for x in c {
            *x *= beta;
        }
    }
}

/// Unpacked product, for small or thin shapes.
#[inline(always)]
pub(super) fn direct(p: &Gemm<'_>, c: &mut [f32]) {
    let (m, n, k) = (p.m, p.n, p.k);
    for i in 0..m {
        let crow = &mut c[i * n..(i + 1) * n];
        if p.b_trans || n == 1 {
            // Each output is a dot product of A's row i with a contiguous
            // row of B (for n == 1 and B not transposed, ldb == 1).
            for (j, cj) in crow.iter_mut().enumerate() {
                let brow = &p.b[j * k..(j + 1) * k];
                let s = if p.a_trans {
                    let mut s = 0.0f32;
                    for (q, &bv) in brow.iter().enumerate() {
                        s += p.a[q * m + i] * bv;
                    }
                    s
                } else {
                    dot(&p.a[i * k..(i + 1) * k], brow)
                };
                *cj = if p.beta == 0.0 {
                    p.alpha * s
                } else {
                    p.alpha * s + p.beta * *cj
                };
            }
        } else {
            scale_row(crow, p.beta);
            for q in 0..k {
                let av = p.alpha * p.a_at(i, q);
                let brow = &p.b[q * n..(q + 1) * n];
                for (x, &bv) in crow.iter_mut().zip(brow) {
                    *x += av * bv;
                }
            }
        }
    }
}
