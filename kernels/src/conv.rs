//! `aten::convolution.out`: 1-d (`N, C, L`) and 2-d (`N, C, H, W`)
//! convolution, regular or transposed, with stride, padding, dilation,
//! output padding and groups (depthwise included); 3-d (`N, C, T, H, W`,
//! video models) regular only.
//!
//! Layouts are PyTorch's, contiguous row-major: input `[N, C_in, (H,) W]`;
//! weight `[C_out, C_in / groups, (kH,) kW]` for a regular convolution and
//! `[C_in, C_out / groups, (kH,) kW]` for a transposed one; bias `[C_out]`;
//! output `[N, C_out, (H_out,) W_out]`. A 1-d convolution is run as a 2-d
//! one with a height of 1, a 2-d one as a 3-d one with a depth of 1.
//!
//! `f32` paths: im2col into the caller's scratch followed by the blocked
//! GEMM of [`crate::linear`] (1×1 stride-1 convolutions skip im2col); a
//! direct row-wise method when each group has a single input channel
//! (depthwise, e.g. 3×3 depthwise); GEMM followed by col2im for transposed
//! convolution. Other float types use direct loops accumulating in
//! [`Float::Acc`].

use crate::linear::{as_f32, as_f32_mut, gemm, gemm_bias, gemm_scratch_len, Bias};
use crate::num::{AccFloat, Float, Sizes};
use crate::{KernelError, KernelResult};

/// The resolved geometry of one convolution (3-d; 2-d has `it = kt = ot = 1`
/// and 1-d also `ih = kh = oh = 1`).
#[derive(Clone, Copy, Debug)]
struct Geom {
    n: usize,
    cin: usize,
    cout: usize,
    groups: usize,
    ih: usize,
    iw: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    ph: usize,
    pw: usize,
    dh: usize,
    dw: usize,
    /// Depth (time): input, output, kernel, stride, padding, dilation.
    it: usize,
    ot: usize,
    kt: usize,
    st: usize,
    pt: usize,
    dt: usize,
    transposed: bool,
    /// Rank of the input (3, 4 or 5).
    rank: usize,
}

impl Geom {
    fn cin_g(&self) -> usize {
        self.cin / self.groups
    }
    fn cout_g(&self) -> usize {
        self.cout / self.groups
    }
    /// Elements of one input / output channel.
    fn ivol(&self) -> usize {
        self.it * self.ih * self.iw
    }
    fn ovol(&self) -> usize {
        self.ot * self.oh * self.ow
    }
    /// Taps of one kernel channel.
    fn taps(&self) -> usize {
        self.kt * self.kh * self.kw
    }
}

/// Parameter `i` of `list` for `sd` spatial dims: a list of length `sd`, or
/// a single value that applies to every spatial dim.
fn param(list: &[usize], sd: usize, i: usize) -> Option<usize> {
    if list.len() == sd {
        Some(list[i])
    } else if list.len() == 1 {
        Some(list[0])
    } else {
        None
    }
}

/// Output length of one spatial dim (PyTorch's formulas), or `None` when it
/// would be below 1.
fn out_len(inp: usize, k: usize, s: usize, p: usize, d: usize, op: usize, transposed: bool) -> Option<usize> {
    let (inp, k, s, p, d, op) = (inp as i128, k as i128, s as i128, p as i128, d as i128, op as i128);
    let o = if transposed {
        (inp - 1) * s - 2 * p + d * (k - 1) + op + 1
    } else {
        let num = inp + 2 * p - d * (k - 1) - 1;
        if num < 0 {
            return None;
        }
        num / s + 1
    };
    if o < 1 {
        return None;
    }
    usize::try_from(o).ok()
}

#[allow(clippy::too_many_arguments)]
fn geometry(
    input_sizes: &[usize],
    weight_sizes: &[usize],
    bias_len: Option<usize>,
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    transposed: bool,
    output_padding: &[usize],
    groups: usize,
) -> Option<Geom> {
    let rank = input_sizes.len();
    // No transposed 3-d kernel yet: its shapes are refused.
    if !(rank == 3 || rank == 4 || rank == 5 && !transposed) || weight_sizes.len() != rank || groups == 0 {
        return None;
    }
    let sd = rank - 2;
    let (n, cin) = (input_sizes[0], input_sizes[1]);
    if !cin.is_multiple_of(groups) {
        return None;
    }
    let cout = if transposed {
        if weight_sizes[0] != cin {
            return None;
        }
        weight_sizes[1].checked_mul(groups)?
    } else {
        if weight_sizes[1].checked_mul(groups)? != cin || !weight_sizes[0].is_multiple_of(groups) {
            return None;
        }
        weight_sizes[0]
    };
    if bias_len.is_some_and(|l| l != cout) {
        return None;
    }
    let mut sp = [(1usize, 1usize, 1usize, 1usize, 0usize, 1usize, 0usize); 3];
    // (in, out, k, s, p, d, op) for (t, h, w); fewer dims leave the leading
    // ones as the identity.
    for i in 0..sd {
        let inp = input_sizes[2 + i];
        let k = weight_sizes[2 + i];
        let s = param(stride, sd, i)?;
        let p = param(padding, sd, i)?;
        let d = param(dilation, sd, i)?;
        let op = if transposed { param(output_padding, sd, i)? } else { 0 };
        if k == 0 || s == 0 || d == 0 {
            return None;
        }
        if transposed && !(op < s || op < d) {
            return None;
        }
        let o = out_len(inp, k, s, p, d, op, transposed)?;
        sp[3 - sd + i] = (inp, o, k, s, p, d, op);
    }
    let [(it, ot, kt, st, pt, dt, _), (ih, oh, kh, sh, ph, dh, _), (iw, ow, kw, sw, pw, dw, _)] = sp;
    Some(Geom {
        n,
        cin,
        cout,
        groups,
        ih,
        iw,
        oh,
        ow,
        kh,
        kw,
        sh,
        sw,
        ph,
        pw,
        dh,
        dw,
        it,
        ot,
        kt,
        st,
        pt,
        dt,
        transposed,
        rank,
    })
}

/// Output sizes of `aten::convolution` (see [`convolution`] for the
/// arguments; `bias_len` is the bias length if there is one), or `None`
/// when the shapes are invalid: input rank not 3, 4 or 5 (5: regular
/// only), weight rank
/// different, channels not divisible by `groups`, a zero stride, dilation
/// or kernel size, `stride`/`padding`/`dilation`/`output_padding` lists not
/// of length 1 or the spatial rank, transposed `output_padding` not smaller
/// than either stride or dilation, or an output size below 1.
///
/// Regular: `out = (in + 2·pad − dil·(k − 1) − 1) / stride + 1`;
/// transposed: `out = (in − 1)·stride − 2·pad + dil·(k − 1) + output_padding + 1`.
#[allow(clippy::too_many_arguments)]
pub fn conv_output_sizes(
    input_sizes: &[usize],
    weight_sizes: &[usize],
    bias_len: Option<usize>,
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    transposed: bool,
    output_padding: &[usize],
    groups: usize,
) -> Option<Sizes> {
    let g = geometry(
        input_sizes,
        weight_sizes,
        bias_len,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
    )?;
    match g.rank {
        3 => Sizes::new(&[g.n, g.cout, g.ow]),
        4 => Sizes::new(&[g.n, g.cout, g.oh, g.ow]),
        _ => Sizes::new(&[g.n, g.cout, g.ot, g.oh, g.ow]),
    }
}

/// The `f32` algorithm for a geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// One input channel per group: direct row-wise accumulation.
    Depthwise,
    /// 1×1 kernel, stride 1, no padding: the input is already the GEMM's B.
    Pointwise,
    /// im2col, then GEMM.
    Im2col,
    /// GEMM, then col2im.
    Transposed,
}

fn path(g: &Geom) -> Path {
    if g.transposed {
        Path::Transposed
    } else if g.cin_g() == 1 && g.rank < 5 {
        Path::Depthwise
    } else if g.taps() == 1 && g.st == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.ph == 0 && g.pw == 0 {
        Path::Pointwise
    } else {
        Path::Im2col
    }
}

/// `(column buffer length, GEMM scratch length)` in floats.
fn scratch_parts(g: &Geom) -> (usize, usize) {
    let kk = g.kh * g.kw;
    match path(g) {
        Path::Depthwise if is_depthwise3x3(g) => (0, DW3_ROWS * (g.iw + 2)),
        Path::Depthwise => (0, 0),
        Path::Pointwise => (0, gemm_scratch_len(g.cout_g(), g.ovol(), g.cin_g())),
        Path::Im2col => {
            let k = g.cin_g() * g.taps();
            (k * g.ovol(), gemm_scratch_len(g.cout_g(), g.ovol(), k))
        }
        Path::Transposed => {
            let m = g.cout_g() * kk;
            (m * g.ih * g.iw, gemm_scratch_len(m, g.ih * g.iw, g.cin_g()))
        }
    }
}

/// Scratch length, in `f32` elements, that [`convolution`] needs for these
/// arguments when the element type is `f32` (other types need none). 0 for
/// invalid shapes.
#[allow(clippy::too_many_arguments)]
pub fn conv_scratch_len(
    input_sizes: &[usize],
    weight_sizes: &[usize],
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    transposed: bool,
    output_padding: &[usize],
    groups: usize,
) -> usize {
    match geometry(
        input_sizes,
        weight_sizes,
        None,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
    ) {
        Some(g) => {
            let (a, b) = scratch_parts(&g);
            a + b
        }
        None => 0,
    }
}

/// `aten::convolution.out(input, weight, bias?, stride, padding, dilation,
/// transposed, output_padding, groups, out)`.
///
/// `input`/`weight` are contiguous with shapes `input_sizes`/`weight_sizes`
/// (layouts in the module docs); `bias` has `C_out` elements. `stride`,
/// `padding`, `dilation` and `output_padding` (read only when `transposed`)
/// hold one value per spatial dim, or a single value for all. `out` has the
/// shape [`conv_output_sizes`] gives; `scratch` at least
/// [`conv_scratch_len`] floats when `T` is `f32` (otherwise it is unused).
/// Returns [`KernelError::ShapeMismatch`] if the shapes are invalid or a
/// buffer is too short.
#[allow(clippy::too_many_arguments)]
pub fn convolution<T: Float>(
    input: &[T],
    input_sizes: &[usize],
    weight: &[T],
    weight_sizes: &[usize],
    bias: Option<&[T]>,
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    transposed: bool,
    output_padding: &[usize],
    groups: usize,
    out: &mut [T],
    scratch: &mut [f32],
) -> KernelResult {
    let g = geometry(
        input_sizes,
        weight_sizes,
        bias.map(|b| b.len()),
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
    )
    .ok_or(KernelError::ShapeMismatch)?;
    let in_len = g.n * g.cin * g.ivol();
    let w_len = if g.transposed {
        g.cin * g.cout_g() * g.taps()
    } else {
        g.cout * g.cin_g() * g.taps()
    };
    let out_len = g.n * g.cout * g.ovol();
    if input.len() < in_len || weight.len() < w_len || out.len() < out_len {
        return Err(KernelError::ShapeMismatch);
    }
    let (input, weight, out) = (&input[..in_len], &weight[..w_len], &mut out[..out_len]);
    if out_len == 0 {
        return Ok(());
    }
    if let (Some(x), Some(w), Some(o)) = (as_f32(input), as_f32(weight), as_f32_mut(out)) {
        let b = bias.and_then(as_f32);
        let (col_len, gemm_len) = scratch_parts(&g);
        if scratch.len() < col_len + gemm_len {
            return Err(KernelError::ShapeMismatch);
        }
        match path(&g) {
            Path::Depthwise => {
                #[cfg(target_arch = "x86_64")]
                if crate::cpu::has_avx2_fma() {
                    // SAFETY: AVX2 and FMA were detected on this CPU.
                    unsafe { depthwise_f32_avx2(&g, x, w, b, o, scratch) };
                    return Ok(());
                }
                depthwise_any_f32(&g, x, w, b, o, scratch)
            }
            Path::Pointwise => pointwise_f32(&g, x, w, b, o, scratch),
            Path::Im2col => {
                let (col, rest) = scratch.split_at_mut(col_len);
                im2col_conv_f32(&g, x, w, b, o, col, rest)
            }
            Path::Transposed => {
                let (col, rest) = scratch.split_at_mut(col_len);
                transposed_f32(&g, x, w, b, o, col, rest)
            }
        }
        return Ok(());
    }
    if g.transposed {
        transposed_generic(&g, input, weight, bias, out);
    } else {
        regular_generic(&g, input, weight, bias, out);
    }
    Ok(())
}

/// The range `lo..hi` of output positions `o < out_len` for which
/// `o·s + off` lies in `0..in_len`.
#[inline(always)]
fn valid_range(off: isize, s: usize, in_len: usize, out_len: usize) -> (usize, usize) {
    let s_i = s as isize;
    let lo = if off >= 0 { 0 } else { ((-off) + s_i - 1) / s_i } as usize;
    let lim = in_len as isize - off; // need o·s < lim
    let hi = if lim <= 0 { 0 } else { ((lim + s_i - 1) / s_i) as usize };
    let hi = hi.min(out_len);
    (lo.min(hi), hi)
}

/// Direct convolution for one input channel per group (depthwise and
/// depthwise-multiplier convolutions): each output row accumulates, per
/// kernel tap, a scaled (strided) input row.
#[inline(always)]
fn depthwise_f32(g: &Geom, x: &[f32], w: &[f32], bias: Option<&[f32]>, o: &mut [f32]) {
    const TAPS: usize = 16;
    let (ihw, ohw, kk) = (g.ih * g.iw, g.oh * g.ow, g.kh * g.kw);
    let cout_g = g.cout_g();
    // Per column tap j: the output columns lo..hi it reaches and the first
    // input column it reads (the same for every row and plane).
    let tap = |j: usize| -> (usize, usize, usize) {
        let off = (j * g.dw) as isize - g.pw as isize;
        let (lo, hi) = valid_range(off, g.sw, g.iw, g.ow);
        let start = if lo < hi {
            ((lo * g.sw) as isize + off) as usize
        } else {
            0
        };
        (lo, hi, start)
    };
    let mut cache = [(0usize, 0usize, 0usize); TAPS];
    for (j, c) in cache.iter_mut().enumerate().take(g.kw) {
        *c = tap(j);
    }
    for ni in 0..g.n {
        for oc in 0..g.cout {
            let ic = oc / cout_g;
            let plane = &x[(ni * g.cin + ic) * ihw..][..ihw];
            let wk = &w[oc * kk..][..kk];
            let oplane = &mut o[(ni * g.cout + oc) * ohw..][..ohw];
            let b0 = bias.map_or(0.0, |b| b[oc]);
            for (oy, orow) in oplane.chunks_exact_mut(g.ow).enumerate() {
                orow.fill(b0);
                for i in 0..g.kh {
                    let iy = (oy * g.sh + i * g.dh) as isize - g.ph as isize;
                    if iy < 0 || iy >= g.ih as isize {
                        continue;
                    }
                    let irow = &plane[iy as usize * g.iw..][..g.iw];
                    for j in 0..g.kw {
                        let wv = wk[i * g.kw + j];
                        let (lo, hi, start) = if j < TAPS { cache[j] } else { tap(j) };
                        if lo >= hi {
                            continue;
                        }
                        let dst = &mut orow[lo..hi];
                        match g.sw {
                            1 => axpy_strided::<1>(dst, wv, &irow[start..]),
                            2 => axpy_strided::<2>(dst, wv, &irow[start..]),
                            s => {
                                let src = &irow[start..][..(hi - lo - 1) * s + 1];
                                for (t, d) in dst.iter_mut().enumerate() {
                                    *d += wv * src[t * s];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `dst[t] += wv · src[t · S]` for every `t` (`src` holds at least
/// `(dst.len() − 1) · S + 1` elements).
#[inline(always)]
fn axpy_strided<const S: usize>(dst: &mut [f32], wv: f32, src: &[f32]) {
    if S == 1 {
        let n = dst.len();
        for (d, &v) in dst.iter_mut().zip(&src[..n]) {
            *d += wv * v;
        }
    } else {
        let n = dst.len();
        let full = n.min(src.len() / S);
        for (d, c) in dst[..full].iter_mut().zip(src.chunks_exact(S)) {
            *d += wv * c[0];
        }
        for t in full..n {
            dst[t] += wv * src[t * S];
        }
    }
}

/// Widest input row, padded, the 3×3 depthwise path takes.
const DW3_MAX_ROW: usize = 1026;
/// Padded rows the 3×3 depthwise path keeps in the scratch: three input
/// rows and a row of zeros. In the scratch rather than the stack, where
/// they took 16 KB on microcontrollers for rows of a few dozen.
const DW3_ROWS: usize = 4;

/// Whether [`depthwise3x3_f32`] handles `g`: MobileNet's depthwise layers
/// (3×3, padding 1, stride 1 or 2, one output channel per input channel).
fn is_depthwise3x3(g: &Geom) -> bool {
    g.cin_g() == 1
        && g.cout_g() == 1
        && (g.kh, g.kw, g.ph, g.pw, g.dh, g.dw) == (3, 3, 1, 1, 1, 1)
        && g.sh == g.sw
        && (g.sw == 1 || g.sw == 2)
        && g.iw + 2 <= DW3_MAX_ROW
}

/// Copies input row `row` zero-padded by one on each side into `dst`; for
/// stride 2 its even columns first, then its odd ones, so that every tap of
/// every output reads a contiguous run.
#[inline(always)]
fn padded_row(row: &[f32], stride: usize, dst: &mut [f32]) {
    let iw = row.len();
    if stride == 1 {
        dst[0] = 0.0;
        dst[1..=iw].copy_from_slice(row);
        dst[iw + 1] = 0.0;
    } else {
        // Padded column p is row[p - 1]; evens are p = 0, 2, ..., odds 1, 3, ...
        let evens = (iw + 3) / 2;
        let at = |p: usize| if p == 0 || p > iw { 0.0 } else { row[p - 1] };
        for (k, d) in dst[..evens].iter_mut().enumerate() {
            *d = at(2 * k);
        }
        for (k, d) in dst[evens..evens + (iw + 2) / 2].iter_mut().enumerate() {
            *d = at(2 * k + 1);
        }
    }
}

/// 3×3 depthwise convolution with padding 1 and stride 1 or 2 (see
/// [`is_depthwise3x3`]): padded copies of the three input rows an output row
/// reads (kept while later rows reuse them), then all nine taps of each
/// output summed at once, which vectorizes across the row. `scratch` holds
/// [`DW3_ROWS`] padded rows.
#[inline(always)]
fn depthwise3x3_f32(g: &Geom, x: &[f32], w: &[f32], bias: Option<&[f32]>, o: &mut [f32], scratch: &mut [f32]) {
    let (s, ow, iw) = (g.sw, g.ow, g.iw);
    let (ihw, ohw) = (g.ih * iw, g.oh * ow);
    let evens = (iw + 3) / 2;
    // Where tap column j starts in a padded row: stride 1 reads p = x + j;
    // stride 2 reads p = 2x + j, i.e. evens[x], odds[x], evens[x + 1].
    let starts: [usize; 3] = if s == 1 { [0, 1, 2] } else { [0, evens, 1] };
    let Some(scratch) = scratch.get_mut(..DW3_ROWS * (iw + 2)) else {
        return;
    };
    // Only the zero row: every other row is written whole before it is read.
    let (zeros, held_rows) = scratch.split_at_mut(iw + 2);
    zeros.fill(0.0);
    let mut rows = held_rows.chunks_exact_mut(iw + 2);
    let rows: [&mut [f32]; 3] = [(); 3].map(|_| rows.next().unwrap_or_default());
    for ni in 0..g.n {
        for c in 0..g.cout {
            let plane = &x[(ni * g.cin + c) * ihw..][..ihw];
            let k: &[f32; 9] = match w[c * 9..][..9].try_into() {
                Ok(k) => k,
                Err(_) => return,
            };
            let b0 = bias.map_or(0.0, |b| b[c]);
            let oplane = &mut o[(ni * g.cout + c) * ohw..][..ohw];
            let mut held = [usize::MAX; 3];
            for (oy, orow) in oplane.chunks_exact_mut(ow).enumerate() {
                // Fill the rows first, then borrow them.
                let mut slots = [None; 3];
                for (i, slot) in slots.iter_mut().enumerate() {
                    let iy = (oy * s + i) as isize - 1;
                    if iy < 0 || iy as usize >= g.ih {
                        continue;
                    }
                    let iy = iy as usize;
                    if held[iy % 3] != iy {
                        padded_row(&plane[iy * iw..][..iw], s, rows[iy % 3]);
                        held[iy % 3] = iy;
                    }
                    *slot = Some(iy % 3);
                }
                let src: [&[f32]; 3] = slots.map(|sl| match sl {
                    Some(k) => &*rows[k],
                    None => &*zeros,
                });
                let tap = |i: usize, j: usize| &src[i][starts[j]..][..ow];
                let (t0, t1, t2) = (tap(0, 0), tap(0, 1), tap(0, 2));
                let (t3, t4, t5) = (tap(1, 0), tap(1, 1), tap(1, 2));
                let (t6, t7, t8) = (tap(2, 0), tap(2, 1), tap(2, 2));
                for xx in 0..ow {
                    let top = k[0] * t0[xx] + k[1] * t1[xx] + k[2] * t2[xx];
                    let mid = k[3] * t3[xx] + k[4] * t4[xx] + k[5] * t5[xx];
                    let bot = k[6] * t6[xx] + k[7] * t7[xx] + k[8] * t8[xx];
                    orow[xx] = b0 + top + mid + bot;
                }
            }
        }
    }
}

/// The depthwise paths: 3×3 specialised, or the general row-wise one.
#[inline(always)]
fn depthwise_any_f32(g: &Geom, x: &[f32], w: &[f32], bias: Option<&[f32]>, o: &mut [f32], scratch: &mut [f32]) {
    if is_depthwise3x3(g) {
        depthwise3x3_f32(g, x, w, bias, o, scratch)
    } else {
        depthwise_f32(g, x, w, bias, o)
    }
}

/// [`depthwise_any_f32`] compiled for AVX2 + FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn depthwise_f32_avx2(g: &Geom, x: &[f32], w: &[f32], bias: Option<&[f32]>, o: &mut [f32], scratch: &mut [f32]) {
    depthwise_any_f32(g, x, w, bias, o, scratch)
}

/// 1×1, stride 1, unpadded: `out_g = W_g · x_g` per batch and group.
fn pointwise_f32(g: &Geom, x: &[f32], w: &[f32], bias: Option<&[f32]>, o: &mut [f32], scratch: &mut [f32]) {
    let hw = g.ovol();
    let (cin_g, cout_g) = (g.cin_g(), g.cout_g());
    for ni in 0..g.n {
        for gi in 0..g.groups {
            let xg = &x[(ni * g.cin + gi * cin_g) * hw..][..cin_g * hw];
            let wg = &w[gi * cout_g * cin_g..][..cout_g * cin_g];
            let og = &mut o[(ni * g.cout + gi * cout_g) * hw..][..cout_g * hw];
            let b = bias.map_or(Bias::None, |b| Bias::PerRow(&b[gi * cout_g..][..cout_g]));
            gemm_bias(cout_g, hw, cin_g, wg, false, xg, false, b, og, scratch);
        }
    }
}

/// Writes the im2col matrix of batch `ni`, group `gi` into `col`
/// (`(cin_g·kt·kh·kw) × (ot·oh·ow)`, row `((c·kt + t)·kh + i)·kw + j`).
fn im2col(g: &Geom, x: &[f32], ni: usize, gi: usize, col: &mut [f32]) {
    let (ihw, ohw) = (g.ih * g.iw, g.oh * g.ow);
    let (cin_g, ovol) = (g.cin_g(), g.ovol());
    let mut r = 0;
    for c in 0..cin_g {
        let volume = &x[(ni * g.cin + gi * cin_g + c) * g.ivol()..][..g.ivol()];
        for t in 0..g.kt {
            for i in 0..g.kh {
                for j in 0..g.kw {
                    let row = &mut col[r * ovol..(r + 1) * ovol];
                    r += 1;
                    for (oz, dst) in row.chunks_exact_mut(ohw).enumerate() {
                        let iz = (oz * g.st + t * g.dt) as isize - g.pt as isize;
                        if iz < 0 || iz >= g.it as isize {
                            dst.fill(0.0);
                        } else {
                            im2col_row(g, &volume[iz as usize * ihw..][..ihw], i, j, dst);
                        }
                    }
                }
            }
        }
    }
}

/// One (oh·ow) im2col row: tap (`i`, `j`) of input plane `plane`.
fn im2col_row(g: &Geom, plane: &[f32], i: usize, j: usize, row: &mut [f32]) {
    let off = (j * g.dw) as isize - g.pw as isize;
    let (lo, hi) = valid_range(off, g.sw, g.iw, g.ow);
    for (oy, dst) in row.chunks_exact_mut(g.ow).enumerate() {
        let iy = (oy * g.sh + i * g.dh) as isize - g.ph as isize;
        if iy < 0 || iy >= g.ih as isize || lo >= hi {
            dst.fill(0.0);
            continue;
        }
        let irow = &plane[iy as usize * g.iw..][..g.iw];
        dst[..lo].fill(0.0);
        dst[hi..].fill(0.0);
        let start = ((lo * g.sw) as isize + off) as usize;
        if g.sw == 1 {
            dst[lo..hi].copy_from_slice(&irow[start..start + (hi - lo)]);
        } else {
            for (d, &v) in dst[lo..hi].iter_mut().zip(irow[start..].iter().step_by(g.sw)) {
                *d = v;
            }
        }
    }
}

fn im2col_conv_f32(
    g: &Geom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    o: &mut [f32],
    col: &mut [f32],
    scratch: &mut [f32],
) {
    let ohw = g.ovol();
    let (cin_g, cout_g) = (g.cin_g(), g.cout_g());
    let k = cin_g * g.taps();
    for ni in 0..g.n {
        for gi in 0..g.groups {
            im2col(g, x, ni, gi, col);
            let wg = &w[gi * cout_g * k..][..cout_g * k];
            let og = &mut o[(ni * g.cout + gi * cout_g) * ohw..][..cout_g * ohw];
            let b = bias.map_or(Bias::None, |b| Bias::PerRow(&b[gi * cout_g..][..cout_g]));
            gemm_bias(cout_g, ohw, k, wg, false, &col[..k * ohw], false, b, og, scratch);
        }
    }
}

/// Transposed convolution: `col = W_gᵀ · x_g` (`(cout_g·kh·kw) × (ih·iw)`),
/// then each column entry is added to the output position it maps to.
fn transposed_f32(
    g: &Geom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    o: &mut [f32],
    col: &mut [f32],
    scratch: &mut [f32],
) {
    let (ihw, ohw) = (g.ih * g.iw, g.oh * g.ow);
    let (cin_g, cout_g) = (g.cin_g(), g.cout_g());
    let mrows = cout_g * g.kh * g.kw;
    let col = &mut col[..mrows * ihw];
    for ni in 0..g.n {
        for gi in 0..g.groups {
            let xg = &x[(ni * g.cin + gi * cin_g) * ihw..][..cin_g * ihw];
            let wg = &w[gi * cin_g * mrows..][..cin_g * mrows];
            gemm(mrows, ihw, cin_g, 1.0, wg, true, xg, false, 0.0, col, scratch);
            let og = &mut o[(ni * g.cout + gi * cout_g) * ohw..][..cout_g * ohw];
            for (oc, oplane) in og.chunks_exact_mut(ohw).enumerate() {
                oplane.fill(bias.map_or(0.0, |b| b[gi * cout_g + oc]));
                for i in 0..g.kh {
                    for j in 0..g.kw {
                        let crow = &col[((oc * g.kh + i) * g.kw + j) * ihw..][..ihw];
                        // ox = ix·sw + (j·dw − pw), valid for 0 ≤ ox < ow.
                        let off = (j * g.dw) as isize - g.pw as isize;
                        let (lo, hi) = out_range(off, g.sw, g.iw, g.ow);
                        for iy in 0..g.ih {
                            let oy = (iy * g.sh + i * g.dh) as isize - g.ph as isize;
                            if oy < 0 || oy >= g.oh as isize || lo >= hi {
                                continue;
                            }
                            let orow = &mut oplane[oy as usize * g.ow..][..g.ow];
                            let src = &crow[iy * g.iw + lo..iy * g.iw + hi];
                            let start = ((lo * g.sw) as isize + off) as usize;
                            if g.sw == 1 {
                                for (d, &v) in orow[start..].iter_mut().zip(src) {
                                    *d += v;
                                }
                            } else {
                                for (d, &v) in orow[start..].iter_mut().step_by(g.sw).zip(src) {
                                    *d += v;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The range `lo..hi` of input positions `i < in_len` whose output position
/// `i·s + off` lies in `0..out_len`.
#[inline(always)]
fn out_range(off: isize, s: usize, in_len: usize, out_len: usize) -> (usize, usize) {
    valid_range(off, s, out_len, in_len)
}

/// Direct regular convolution for any float type.
fn regular_generic<T: Float>(g: &Geom, x: &[T], w: &[T], bias: Option<&[T]>, o: &mut [T]) {
    let (ihw, ivol, ovol, taps) = (g.ih * g.iw, g.ivol(), g.ovol(), g.taps());
    let (cin_g, cout_g) = (g.cin_g(), g.cout_g());
    // The input index a tap reads along one dim, if inside.
    let src = |o: usize, k: usize, s: usize, p: usize, d: usize, len: usize| {
        let i = (o * s + k * d) as isize - p as isize;
        (i >= 0 && i < len as isize).then_some(i as usize)
    };
    for ni in 0..g.n {
        for oc in 0..g.cout {
            let gi = oc / cout_g;
            let wo = &w[oc * cin_g * taps..][..cin_g * taps];
            let b0 = bias.map_or(T::Acc::ZERO, |b| b[oc].to_acc());
            let ovolume = &mut o[(ni * g.cout + oc) * ovol..][..ovol];
            for oz in 0..g.ot {
                for oy in 0..g.oh {
                    for ox in 0..g.ow {
                        let mut acc = b0;
                        for c in 0..cin_g {
                            let volume = &x[(ni * g.cin + gi * cin_g + c) * ivol..][..ivol];
                            let wc = &wo[c * taps..][..taps];
                            for t in 0..g.kt {
                                let Some(iz) = src(oz, t, g.st, g.pt, g.dt, g.it) else {
                                    continue;
                                };
                                for i in 0..g.kh {
                                    let Some(iy) = src(oy, i, g.sh, g.ph, g.dh, g.ih) else {
                                        continue;
                                    };
                                    for j in 0..g.kw {
                                        let Some(ix) = src(ox, j, g.sw, g.pw, g.dw, g.iw) else {
                                            continue;
                                        };
                                        acc += volume[iz * ihw + iy * g.iw + ix].to_acc()
                                            * wc[(t * g.kh + i) * g.kw + j].to_acc();
                                    }
                                }
                            }
                        }
                        ovolume[(oz * g.oh + oy) * g.ow + ox] = T::from_acc(acc);
                    }
                }
            }
        }
    }
}

/// The input position that output position `o` receives kernel tap `t`
/// from in a transposed convolution (`o = i·s − p + t·d`), if any.
#[inline(always)]
fn transposed_src(o: usize, t: usize, s: usize, p: usize, d: usize, in_len: usize) -> Option<usize> {
    let num = (o + p) as isize - (t * d) as isize;
    if num < 0 || !(num as usize).is_multiple_of(s) {
        return None;
    }
    let i = num as usize / s;
    (i < in_len).then_some(i)
}

/// Direct (gather) transposed convolution for any float type.
fn transposed_generic<T: Float>(g: &Geom, x: &[T], w: &[T], bias: Option<&[T]>, o: &mut [T]) {
    let (ihw, ohw, kk) = (g.ih * g.iw, g.oh * g.ow, g.kh * g.kw);
    let (cin_g, cout_g) = (g.cin_g(), g.cout_g());
    for ni in 0..g.n {
        for oc in 0..g.cout {
            let gi = oc / cout_g;
            let ocg = oc % cout_g;
            let b0 = bias.map_or(T::Acc::ZERO, |b| b[oc].to_acc());
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    let mut acc = b0;
                    for i in 0..g.kh {
                        let Some(iy) = transposed_src(oy, i, g.sh, g.ph, g.dh, g.ih) else {
                            continue;
                        };
                        for j in 0..g.kw {
                            let Some(ix) = transposed_src(ox, j, g.sw, g.pw, g.dw, g.iw) else {
                                continue;
                            };
                            for c in 0..cin_g {
                                let ic = gi * cin_g + c;
                                acc += x[(ni * g.cin + ic) * ihw + iy * g.iw + ix].to_acc()
                                    * w[(ic * cout_g + ocg) * kk + i * g.kw + j].to_acc();
                            }
                        }
                    }
                    o[(ni * g.cout + oc) * ohw + oy * g.ow + ox] = T::from_acc(acc);
                }
            }
        }
    }
}

/// One spatial dim of a convolution seen from its strided side: `small`
/// positions `s` meet `big` positions `s · stride + k · dilation − padding`
/// (the output is the small side of a regular convolution, the input that
/// of a transposed one).
#[derive(Clone, Copy)]
struct Axis {
    small: usize,
    big: usize,
    s: usize,
    p: usize,
    d: usize,
}

impl Axis {
    fn big_of(&self, small: usize, k: usize) -> Option<usize> {
        (small * self.s + k * self.d)
            .checked_sub(self.p)
            .filter(|&b| b < self.big)
    }

    fn small_of(&self, big: usize, k: usize) -> Option<usize> {
        let q = (big + self.p).checked_sub(k * self.d)?;
        (q.is_multiple_of(self.s) && q / self.s < self.small).then_some(q / self.s)
    }
}

/// The (depth, height, width) axes of `g`.
fn axes(g: &Geom) -> [Axis; 3] {
    let (i, o) = ([g.it, g.ih, g.iw], [g.ot, g.oh, g.ow]);
    let (small, big) = if g.transposed { (i, o) } else { (o, i) };
    let spd = [(g.st, g.pt, g.dt), (g.sh, g.ph, g.dh), (g.sw, g.pw, g.dw)];
    core::array::from_fn(|a| Axis {
        small: small[a],
        big: big[a],
        s: spd[a].0,
        p: spd[a].1,
        d: spd[a].2,
    })
}

/// Every position of a `dims` volume, row-major.
fn positions(dims: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
    (0..dims[0]).flat_map(move |a| (0..dims[1]).flat_map(move |b| (0..dims[2]).map(move |c| [a, b, c])))
}

/// The row-major offset of `p` in a `dims` volume.
fn flat(p: [usize; 3], dims: [usize; 3]) -> usize {
    (p[0] * dims[1] + p[1]) * dims[2] + p[2]
}

/// `f` of each axis, or `None` when one gives `None`.
fn per_axis(ax: &[Axis; 3], f: impl Fn(&Axis, usize) -> Option<usize>) -> Option<[usize; 3]> {
    Some([f(&ax[0], 0)?, f(&ax[1], 1)?, f(&ax[2], 2)?])
}

/// `aten::convolution_backward.out(grad_output, input, weight, bias_sizes?,
/// stride, padding, dilation, transposed, output_padding, groups,
/// output_mask)`: the gradients of [`convolution`] with respect to its
/// input, weight and bias, each written when given (the output mask's
/// `true` entries). Shapes as for [`convolution`]; `grad_output` has the
/// convolution's output shape. Each gradient element is one sum in
/// [`Float::Acc`] (over the taps and channels that reach it, or over the
/// batch and positions for the weight and bias).
#[allow(clippy::too_many_arguments)]
pub fn convolution_backward<T: Float>(
    grad_output: &[T],
    input: &[T],
    input_sizes: &[usize],
    weight: &[T],
    weight_sizes: &[usize],
    (stride, padding, dilation): (&[usize], &[usize], &[usize]),
    transposed: bool,
    output_padding: &[usize],
    groups: usize,
    grad_input: Option<&mut [T]>,
    grad_weight: Option<&mut [T]>,
    grad_bias: Option<&mut [T]>,
) -> KernelResult {
    let g = geometry(
        input_sizes,
        weight_sizes,
        None,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
    )
    .ok_or(KernelError::ShapeMismatch)?;
    let (ivol, ovol, taps) = (g.ivol(), g.ovol(), g.taps());
    let (cin_g, cout_g) = (g.cin_g(), g.cout_g());
    let in_len = g.n * g.cin * ivol;
    let w_len = weight_sizes.iter().product::<usize>();
    let out_len = g.n * g.cout * ovol;
    let short = |s: Option<&[T]>, len| s.is_some_and(|s| s.len() < len);
    if grad_output.len() < out_len
        || input.len() < in_len
        || weight.len() < w_len
        || short(grad_input.as_deref(), in_len)
        || short(grad_weight.as_deref(), w_len)
        || short(grad_bias.as_deref(), g.cout)
    {
        return Err(KernelError::ShapeMismatch);
    }
    let ax = axes(&g);
    let (idims, odims, kdims) = ([g.it, g.ih, g.iw], [g.ot, g.oh, g.ow], [g.kt, g.kh, g.kw]);
    let sdims = [ax[0].small, ax[1].small, ax[2].small];
    // Weight index of (output channel, input channel) within a group.
    let w_at = |oc: usize, ic: usize, k: [usize; 3]| {
        let (first, second) = if transposed {
            (ic, oc % cout_g)
        } else {
            (oc, ic % cin_g)
        };
        let inner = if transposed { cout_g } else { cin_g };
        (first * inner + second) * taps + flat(k, kdims)
    };
    let gy = |b: usize, oc: usize, p: [usize; 3]| grad_output[(b * g.cout + oc) * ovol + flat(p, odims)].to_acc();
    let xv = |b: usize, ic: usize, p: [usize; 3]| input[(b * g.cin + ic) * ivol + flat(p, idims)].to_acc();
    if let Some(gi) = grad_input {
        for b in 0..g.n {
            for ic in 0..g.cin {
                let grp = ic / cin_g;
                for pos in positions(idims) {
                    let mut acc = T::Acc::ZERO;
                    for oc in grp * cout_g..(grp + 1) * cout_g {
                        for k in positions(kdims) {
                            // The input is the big side of a regular
                            // convolution, the small one of a transposed.
                            let o = if transposed {
                                per_axis(&ax, |a, i| a.big_of(pos[i], k[i]))
                            } else {
                                per_axis(&ax, |a, i| a.small_of(pos[i], k[i]))
                            };
                            if let Some(o) = o {
                                acc += gy(b, oc, o) * weight[w_at(oc, ic, k)].to_acc();
                            }
                        }
                    }
                    gi[(b * g.cin + ic) * ivol + flat(pos, idims)] = T::from_acc(acc);
                }
            }
        }
    }
    if let Some(gw) = grad_weight {
        for oc in 0..g.cout {
            let grp = oc / cout_g;
            for ic in grp * cin_g..(grp + 1) * cin_g {
                for k in positions(kdims) {
                    let mut acc = T::Acc::ZERO;
                    for b in 0..g.n {
                        for s in positions(sdims) {
                            if let Some(big) = per_axis(&ax, |a, i| a.big_of(s[i], k[i])) {
                                let (xp, yp) = if transposed { (s, big) } else { (big, s) };
                                acc += gy(b, oc, yp) * xv(b, ic, xp);
                            }
                        }
                    }
                    gw[w_at(oc, ic, k)] = T::from_acc(acc);
                }
            }
        }
    }
    if let Some(gb) = grad_bias {
        for (oc, slot) in gb[..g.cout].iter_mut().enumerate() {
            let mut acc = T::Acc::ZERO;
            for b in 0..g.n {
                for v in &grad_output[(b * g.cout + oc) * ovol..][..ovol] {
                    acc += v.to_acc();
                }
            }
            *slot = T::from_acc(acc);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::testing::Lcg;
    use crate::{bf16, f16};
    use std::vec;
    use std::vec::Vec;

    /// Parameters of one test case, always in 2-d form (1-d: h = 1).
    #[derive(Clone, Copy, Debug)]
    struct Case {
        n: usize,
        cin: usize,
        cout: usize,
        groups: usize,
        ih: usize,
        iw: usize,
        kh: usize,
        kw: usize,
        s: (usize, usize),
        p: (usize, usize),
        d: (usize, usize),
        op: (usize, usize),
        transposed: bool,
        one_d: bool,
        bias: bool,
    }

    /// Seven-loop direct convolution (scatter form for transposed) in f64,
    /// written independently of the kernel.
    fn reference(c: &Case, x: &[f32], w: &[f32], b: Option<&[f32]>) -> (Vec<f64>, usize, usize) {
        let (cin_g, cout_g) = (c.cin / c.groups, c.cout / c.groups);
        if !c.transposed {
            let oh = (c.ih + 2 * c.p.0 - c.d.0 * (c.kh - 1) - 1) / c.s.0 + 1;
            let ow = (c.iw + 2 * c.p.1 - c.d.1 * (c.kw - 1) - 1) / c.s.1 + 1;
            let mut out = vec![0.0f64; c.n * c.cout * oh * ow];
            for n in 0..c.n {
                for oc in 0..c.cout {
                    let gi = oc / cout_g;
                    for oy in 0..oh {
                        for ox in 0..ow {
                            let mut s = b.map_or(0.0, |b| b[oc] as f64);
                            for icg in 0..cin_g {
                                let ic = gi * cin_g + icg;
                                for ky in 0..c.kh {
                                    for kx in 0..c.kw {
                                        let iy = (oy * c.s.0 + ky * c.d.0) as i64 - c.p.0 as i64;
                                        let ix = (ox * c.s.1 + kx * c.d.1) as i64 - c.p.1 as i64;
                                        if iy < 0 || ix < 0 || iy >= c.ih as i64 || ix >= c.iw as i64 {
                                            continue;
                                        }
                                        let xv = x[((n * c.cin + ic) * c.ih + iy as usize) * c.iw + ix as usize];
                                        let wv = w[((oc * cin_g + icg) * c.kh + ky) * c.kw + kx];
                                        s += xv as f64 * wv as f64;
                                    }
                                }
                            }
                            out[((n * c.cout + oc) * oh + oy) * ow + ox] = s;
                        }
                    }
                }
            }
            (out, oh, ow)
        } else {
            let oh = (c.ih - 1) * c.s.0 + c.d.0 * (c.kh - 1) + c.op.0 + 1 - 2 * c.p.0;
            let ow = (c.iw - 1) * c.s.1 + c.d.1 * (c.kw - 1) + c.op.1 + 1 - 2 * c.p.1;
            let mut out = vec![0.0f64; c.n * c.cout * oh * ow];
            for n in 0..c.n {
                for oc in 0..c.cout {
                    for v in &mut out[(n * c.cout + oc) * oh * ow..][..oh * ow] {
                        *v = b.map_or(0.0, |b| b[oc] as f64);
                    }
                }
                for ic in 0..c.cin {
                    let gi = ic / cin_g;
                    for iy in 0..c.ih {
                        for ix in 0..c.iw {
                            let xv = x[((n * c.cin + ic) * c.ih + iy) * c.iw + ix] as f64;
                            for ocg in 0..cout_g {
                                let oc = gi * cout_g + ocg;
                                for ky in 0..c.kh {
                                    for kx in 0..c.kw {
                                        let oy = (iy * c.s.0 + ky * c.d.0) as i64 - c.p.0 as i64;
                                        let ox = (ix * c.s.1 + kx * c.d.1) as i64 - c.p.1 as i64;
                                        if oy < 0 || ox < 0 || oy >= oh as i64 || ox >= ow as i64 {
                                            continue;
                                        }
                                        let wv = w[((ic * cout_g + ocg) * c.kh + ky) * c.kw + kx] as f64;
                                        out[((n * c.cout + oc) * oh + oy as usize) * ow + ox as usize] += xv * wv;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            (out, oh, ow)
        }
    }

    /// (input sizes, weight sizes, stride, padding, dilation, output_padding)
    type CaseSizes = (Vec<usize>, Vec<usize>, [usize; 2], [usize; 2], [usize; 2], [usize; 2]);

    fn sizes_of(c: &Case) -> CaseSizes {
        let (cin_g, cout_g) = (c.cin / c.groups, c.cout / c.groups);
        let wlead = if c.transposed { [c.cin, cout_g] } else { [c.cout, cin_g] };
        if c.one_d {
            (
                vec![c.n, c.cin, c.iw],
                vec![wlead[0], wlead[1], c.kw],
                [c.s.1, 0],
                [c.p.1, 0],
                [c.d.1, 0],
                [c.op.1, 0],
            )
        } else {
            (
                vec![c.n, c.cin, c.ih, c.iw],
                vec![wlead[0], wlead[1], c.kh, c.kw],
                [c.s.0, c.s.1],
                [c.p.0, c.p.1],
                [c.d.0, c.d.1],
                [c.op.0, c.op.1],
            )
        }
    }

    /// A case's multiply-adds (about: inputs times outputs a group times
    /// taps).
    fn work(c: &Case) -> usize {
        c.n * c.cin * c.ih * c.iw * (c.cout / c.groups) * c.kh * c.kw
    }

    fn run_case<T: Float>(c: &Case, rng: &mut Lcg, tol: f64) {
        let (cin_g, cout_g) = (c.cin / c.groups, c.cout / c.groups);
        // Under Miri only the smaller cases (each path has some).
        if crate::testing::too_large_for_miri(work(c), 1 << 12) {
            return;
        }
        let x32 = rng.vec(c.n * c.cin * c.ih * c.iw);
        let w32 = rng.vec(if c.transposed { c.cin * cout_g } else { c.cout * cin_g } * c.kh * c.kw);
        let b32 = rng.vec(c.cout);
        let to_t = |v: &[f32]| v.iter().map(|&x| T::from_f64(x as f64)).collect::<Vec<T>>();
        let back = |v: &[T]| v.iter().map(|&x| x.to_f64() as f32).collect::<Vec<f32>>();
        let (x, w, b) = (to_t(&x32), to_t(&w32), to_t(&b32));
        let (xr, wr, br) = (back(&x), back(&w), back(&b));
        let (want, oh, ow) = reference(c, &xr, &wr, c.bias.then_some(&br[..]));
        let (isz, wsz, s, p, d, op) = sizes_of(c);
        let sd = if c.one_d { 1 } else { 2 };
        let osz = conv_output_sizes(
            &isz,
            &wsz,
            c.bias.then_some(c.cout),
            &s[..sd],
            &p[..sd],
            &d[..sd],
            c.transposed,
            &op[..sd],
            c.groups,
        )
        .unwrap_or_else(|| panic!("{c:?}"));
        let want_sz: Vec<usize> = if c.one_d {
            vec![c.n, c.cout, ow]
        } else {
            vec![c.n, c.cout, oh, ow]
        };
        assert_eq!(osz.as_slice(), &want_sz[..], "{c:?}");
        let mut scratch = vec![
            0.0f32;
            conv_scratch_len(
                &isz,
                &wsz,
                &s[..sd],
                &p[..sd],
                &d[..sd],
                c.transposed,
                &op[..sd],
                c.groups
            )
        ];
        let mut out = vec![T::from_f64(f64::NAN); osz.numel()];
        convolution(
            &x,
            &isz,
            &w,
            &wsz,
            c.bias.then_some(&b[..]),
            &s[..sd],
            &p[..sd],
            &d[..sd],
            c.transposed,
            &op[..sd],
            c.groups,
            &mut out,
            &mut scratch,
        )
        .unwrap();
        for (i, (g, w)) in out.iter().zip(&want).enumerate() {
            let g = g.to_f64();
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "{c:?} at {i}: got {g}, want {w}"
            );
        }
    }

    fn base() -> Case {
        Case {
            n: 1,
            cin: 1,
            cout: 1,
            groups: 1,
            ih: 1,
            iw: 1,
            kh: 1,
            kw: 1,
            s: (1, 1),
            p: (0, 0),
            d: (1, 1),
            op: (0, 0),
            transposed: false,
            one_d: false,
            bias: false,
        }
    }

    #[test]
    fn hand_computed() {
        // 1-d: x = [1,2,3,4], w = [1,0,-1], pad 1, bias 0.5:
        // padded [0,1,2,3,4,0] → [0-2, 1-3, 2-4, 3-0] + 0.5 = [-1.5,-1.5,-1.5,3.5]
        let mut out = [0.0f32; 4];
        convolution(
            &[1.0f32, 2.0, 3.0, 4.0],
            &[1, 1, 4],
            &[1.0, 0.0, -1.0],
            &[1, 1, 3],
            Some(&[0.5]),
            &[1],
            &[1],
            &[1],
            false,
            &[0],
            1,
            &mut out,
            &mut [],
        )
        .unwrap();
        assert_eq!(out, [-1.5, -1.5, -1.5, 3.5]);
        // Transposed 1-d, stride 2, output_padding 1: x = [1, 2], w = [1, 10]
        // out length (2-1)·2 + 1·(2-1) + 1 + 1 = 5:
        // x0 → positions 0,1 += [1, 10]; x1 → positions 2,3 += [2, 20]; pos 4 = 0.
        let mut out = [0.0f32; 5];
        let wsz = [1, 1, 2];
        let mut scratch = vec![0.0f32; conv_scratch_len(&[1, 1, 2], &wsz, &[2], &[0], &[1], true, &[1], 1)];
        convolution(
            &[1.0f32, 2.0],
            &[1, 1, 2],
            &[1.0, 10.0],
            &wsz,
            None,
            &[2],
            &[0],
            &[1],
            true,
            &[1],
            1,
            &mut out,
            &mut scratch,
        )
        .unwrap();
        assert_eq!(out, [1.0, 10.0, 2.0, 20.0, 0.0]);
    }

    #[test]
    fn output_sizes_validation() {
        // (5 + 2·1 − 2·(3−1) − 1)/2 + 1 = 2/2 + 1 = 2
        assert_eq!(
            conv_output_sizes(&[1, 4, 5, 5], &[6, 2, 3, 3], Some(6), &[2], &[1], &[2], false, &[], 2).as_deref(),
            Some(&[1, 6, 2, 2][..])
        );
        // kernel larger than the padded input
        assert_eq!(
            conv_output_sizes(&[1, 1, 2, 2], &[1, 1, 3, 3], None, &[1], &[0], &[1], false, &[], 1),
            None
        );
        // channels do not match groups
        assert_eq!(
            conv_output_sizes(&[1, 3, 5, 5], &[6, 2, 3, 3], None, &[1], &[0], &[1], false, &[], 2),
            None
        );
        // transposed output_padding must be below stride or dilation
        assert_eq!(
            conv_output_sizes(&[1, 1, 4], &[1, 1, 3], None, &[2], &[0], &[1], true, &[2], 1),
            None
        );
        // bias length mismatch
        assert_eq!(
            conv_output_sizes(&[1, 1, 4], &[2, 1, 3], Some(1), &[1], &[0], &[1], false, &[], 1),
            None
        );
    }

    fn cases() -> Vec<Case> {
        let b = base();
        let mut cases = vec![
            // regular 2-d, odd sizes, stride/pad/dilation combos
            Case {
                n: 2,
                cin: 3,
                cout: 5,
                ih: 7,
                iw: 9,
                kh: 3,
                kw: 3,
                p: (1, 1),
                bias: true,
                ..b
            },
            Case {
                n: 1,
                cin: 4,
                cout: 6,
                ih: 11,
                iw: 10,
                kh: 3,
                kw: 2,
                s: (2, 3),
                p: (1, 0),
                d: (2, 1),
                ..b
            },
            Case {
                n: 1,
                cin: 6,
                cout: 4,
                groups: 2,
                ih: 8,
                iw: 8,
                kh: 3,
                kw: 3,
                s: (2, 2),
                p: (2, 1),
                bias: true,
                ..b
            },
            Case {
                n: 2,
                cin: 8,
                cout: 8,
                groups: 4,
                ih: 6,
                iw: 5,
                kh: 1,
                kw: 3,
                d: (1, 2),
                p: (0, 2),
                ..b
            },
            // 3×3 depthwise, padding 1, stride 1 and 2 (the specialised
            // path), odd and even widths including ones narrower than a
            // SIMD vector
            Case {
                n: 2,
                cin: 5,
                cout: 5,
                groups: 5,
                ih: 9,
                iw: 13,
                kh: 3,
                kw: 3,
                p: (1, 1),
                bias: true,
                ..b
            },
            Case {
                n: 1,
                cin: 3,
                cout: 3,
                groups: 3,
                ih: 7,
                iw: 2,
                kh: 3,
                kw: 3,
                p: (1, 1),
                ..b
            },
            Case {
                n: 1,
                cin: 4,
                cout: 4,
                groups: 4,
                ih: 11,
                iw: 17,
                kh: 3,
                kw: 3,
                s: (2, 2),
                p: (1, 1),
                bias: true,
                ..b
            },
            Case {
                n: 1,
                cin: 2,
                cout: 2,
                groups: 2,
                ih: 6,
                iw: 1,
                kh: 3,
                kw: 3,
                s: (2, 2),
                p: (1, 1),
                ..b
            },
            Case {
                n: 1,
                cin: 2,
                cout: 2,
                groups: 2,
                ih: 8,
                iw: 8,
                kh: 3,
                kw: 3,
                s: (2, 2),
                p: (1, 1),
                bias: true,
                ..b
            },
            // pointwise (1×1) and large enough for the packed GEMM
            Case {
                n: 2,
                cin: 16,
                cout: 24,
                ih: 9,
                iw: 7,
                bias: true,
                ..b
            },
            Case {
                n: 1,
                cin: 20,
                cout: 33,
                ih: 13,
                iw: 12,
                kh: 3,
                kw: 3,
                p: (1, 1),
                bias: true,
                ..b
            },
            // depthwise 3×3, strides 1 and 2, dilation, multiplier
            Case {
                n: 2,
                cin: 5,
                cout: 5,
                groups: 5,
                ih: 9,
                iw: 10,
                kh: 3,
                kw: 3,
                p: (1, 1),
                bias: true,
                ..b
            },
            Case {
                n: 1,
                cin: 3,
                cout: 3,
                groups: 3,
                ih: 10,
                iw: 11,
                kh: 3,
                kw: 3,
                s: (2, 2),
                p: (1, 1),
                ..b
            },
            Case {
                n: 1,
                cin: 4,
                cout: 4,
                groups: 4,
                ih: 9,
                iw: 9,
                kh: 3,
                kw: 3,
                d: (2, 2),
                p: (2, 2),
                ..b
            },
            Case {
                n: 1,
                cin: 2,
                cout: 6,
                groups: 2,
                ih: 6,
                iw: 7,
                kh: 5,
                kw: 3,
                s: (1, 2),
                p: (2, 1),
                bias: true,
                ..b
            },
            Case {
                n: 1,
                cin: 1,
                cout: 7,
                ih: 8,
                iw: 8,
                kh: 3,
                kw: 3,
                ..b
            },
            // 1-d regular, grouped, depthwise
            Case {
                n: 2,
                cin: 3,
                cout: 4,
                iw: 13,
                kw: 4,
                s: (1, 2),
                p: (0, 1),
                one_d: true,
                bias: true,
                ..b
            },
            Case {
                n: 1,
                cin: 4,
                cout: 6,
                groups: 2,
                iw: 10,
                kw: 3,
                d: (1, 3),
                p: (0, 3),
                one_d: true,
                ..b
            },
            Case {
                n: 1,
                cin: 6,
                cout: 6,
                groups: 6,
                iw: 12,
                kw: 5,
                p: (0, 2),
                one_d: true,
                ..b
            },
            // depthwise with stride 3 and with more than 16 column taps
            Case {
                n: 1,
                cin: 3,
                cout: 3,
                groups: 3,
                ih: 5,
                iw: 14,
                kh: 2,
                kw: 3,
                s: (1, 3),
                p: (1, 1),
                bias: true,
                ..b
            },
            Case {
                n: 1,
                cin: 2,
                cout: 2,
                groups: 2,
                iw: 30,
                kw: 19,
                p: (0, 9),
                one_d: true,
                ..b
            },
            // transposed: stride, padding, output_padding, dilation, groups
            Case {
                n: 2,
                cin: 3,
                cout: 2,
                ih: 4,
                iw: 5,
                kh: 3,
                kw: 3,
                s: (2, 2),
                p: (1, 1),
                op: (1, 1),
                transposed: true,
                bias: true,
                ..b
            },
            Case {
                n: 1,
                cin: 4,
                cout: 6,
                groups: 2,
                ih: 5,
                iw: 3,
                kh: 2,
                kw: 3,
                s: (3, 2),
                p: (0, 1),
                op: (2, 0),
                transposed: true,
                ..b
            },
            Case {
                n: 1,
                cin: 2,
                cout: 2,
                ih: 4,
                iw: 4,
                kh: 3,
                kw: 3,
                d: (2, 2),
                op: (1, 1),
                transposed: true,
                ..b
            },
            Case {
                n: 1,
                cin: 4,
                cout: 4,
                groups: 4,
                ih: 5,
                iw: 6,
                kh: 4,
                kw: 4,
                s: (2, 2),
                p: (1, 1),
                transposed: true,
                bias: true,
                ..b
            },
            Case {
                n: 2,
                cin: 3,
                cout: 5,
                iw: 7,
                kw: 3,
                s: (1, 2),
                p: (0, 1),
                op: (0, 1),
                transposed: true,
                one_d: true,
                bias: true,
                ..b
            },
            Case {
                n: 1,
                cin: 16,
                cout: 12,
                ih: 6,
                iw: 7,
                kh: 2,
                kw: 2,
                s: (2, 2),
                transposed: true,
                ..b
            },
        ];
        if cfg!(miri) {
            // The pointwise path, on a case small enough for Miri (the
            // pointwise case above is left out there).
            cases.push(Case {
                n: 2,
                cin: 3,
                cout: 5,
                ih: 3,
                iw: 2,
                bias: true,
                ..b
            });
        }
        cases
    }

    #[test]
    fn random_f32_against_direct_reference() {
        let mut rng = Lcg(5);
        for c in cases() {
            run_case::<f32>(&c, &mut rng, 1e-4);
        }
    }

    #[test]
    fn random_other_types() {
        let mut rng = Lcg(9);
        // These types take the generic loops (regular and transposed, 1-d
        // and 2-d, grouped, padded, strided, dilated): under Miri the cases
        // of at most 2^11 multiply-adds, which have each of those, each in
        // one of the three types, in turn (each type still takes regular
        // 1-d and 2-d cases, grouped ones and transposed ones).
        let small = cases()
            .into_iter()
            .filter(|c| !crate::testing::too_large_for_miri(work(c), 1 << 11));
        for (i, c) in small.enumerate() {
            let take = |t: usize| !cfg!(miri) || i % 3 == t;
            if take(0) {
                run_case::<f64>(&c, &mut rng, 1e-12);
            }
            if take(1) {
                run_case::<f16>(&c, &mut rng, 1e-2);
            }
            if take(2) {
                run_case::<bf16>(&c, &mut rng, 5e-2);
            }
        }
    }

    /// 3-d (video) convolution against an independent f64 loop nest, over
    /// random geometries: strides, padding, dilation, groups (depthwise
    /// included), 1×1×1 kernels (the pointwise path), f32 and f16.
    #[test]
    fn three_d_matches_a_direct_loop_nest() {
        let mut seed = 31u64;
        let mut pick = |n: u64| crate::testing::rng(&mut seed) % n;
        let mut rng = Lcg(5);
        // Under Miri fewer random geometries.
        for case in 0..if cfg!(miri) { 8 } else { 60 } {
            let groups = [1, 1, 2, 4][pick(4) as usize] as usize;
            let cin = groups * (1 + pick(3) as usize);
            let cout = groups * (1 + pick(3) as usize);
            let n = 1 + pick(2) as usize;
            let k: [usize; 3] = core::array::from_fn(|_| 1 + pick(3) as usize);
            let s: [usize; 3] = core::array::from_fn(|_| 1 + pick(2) as usize);
            let d: [usize; 3] = core::array::from_fn(|_| 1 + pick(2) as usize);
            let p: [usize; 3] = core::array::from_fn(|i| pick(k[i] as u64) as usize);
            let i: [usize; 3] = core::array::from_fn(|j| d[j] * (k[j] - 1) + 1 + pick(5) as usize);
            let o: [usize; 3] = core::array::from_fn(|j| (i[j] + 2 * p[j] - d[j] * (k[j] - 1) - 1) / s[j] + 1);
            let (cin_g, cout_g) = (cin / groups, cout / groups);
            // Under Miri the geometries of at most 2^12 multiply-adds (all
            // but one of the eight; 3-d convolutions take the same path,
            // grouped or not).
            let macs = n * cout * o[0] * o[1] * o[2] * cin_g * k[0] * k[1] * k[2];
            if crate::testing::too_large_for_miri(macs, 1 << 12) {
                continue;
            }
            let x = rng.vec(n * cin * i[0] * i[1] * i[2]);
            let w = rng.vec(cout * cin_g * k[0] * k[1] * k[2]);
            let b = rng.vec(cout);
            let bias = case % 3 != 0;
            let mut want = vec![0.0f64; n * cout * o[0] * o[1] * o[2]];
            for ni in 0..n {
                for oc in 0..cout {
                    let gi = oc / cout_g;
                    for oz in 0..o[0] {
                        for oy in 0..o[1] {
                            for ox in 0..o[2] {
                                let mut acc = if bias { b[oc] as f64 } else { 0.0 };
                                for c in 0..cin_g {
                                    for (t, u, v) in (0..k[0])
                                        .flat_map(|t| (0..k[1]).flat_map(move |u| (0..k[2]).map(move |v| (t, u, v))))
                                    {
                                        let z = (oz * s[0] + t * d[0]) as isize - p[0] as isize;
                                        let y = (oy * s[1] + u * d[1]) as isize - p[1] as isize;
                                        let xx = (ox * s[2] + v * d[2]) as isize - p[2] as isize;
                                        if z < 0 || y < 0 || xx < 0 {
                                            continue;
                                        }
                                        let (z, y, xx) = (z as usize, y as usize, xx as usize);
                                        if z >= i[0] || y >= i[1] || xx >= i[2] {
                                            continue;
                                        }
                                        let ic = gi * cin_g + c;
                                        let xv = x[(((ni * cin + ic) * i[0] + z) * i[1] + y) * i[2] + xx];
                                        let wv = w[(((oc * cin_g + c) * k[0] + t) * k[1] + u) * k[2] + v];
                                        acc += xv as f64 * wv as f64;
                                    }
                                }
                                want[(((ni * cout + oc) * o[0] + oz) * o[1] + oy) * o[2] + ox] = acc;
                            }
                        }
                    }
                }
            }
            let isz = [n, cin, i[0], i[1], i[2]];
            let wsz = [cout, cin_g, k[0], k[1], k[2]];
            let osz = conv_output_sizes(&isz, &wsz, bias.then_some(cout), &s, &p, &d, false, &[0], groups).unwrap();
            assert_eq!(osz.as_slice(), &[n, cout, o[0], o[1], o[2]]);
            let mut scratch = vec![0.0f32; conv_scratch_len(&isz, &wsz, &s, &p, &d, false, &[0], groups)];
            // In T: the data rounded to T, the result back in f32.
            fn run<T: Float>(
                data: [&[f32]; 3],
                bias: bool,
                sizes: [&[usize]; 2],
                window: [&[usize]; 3],
                groups: usize,
                out_len: usize,
                scratch: &mut [f32],
            ) -> Vec<f32> {
                let [x, w, b] = data.map(|v| v.iter().map(|&a| T::from_f64(a as f64)).collect::<Vec<T>>());
                let [s, p, d] = window;
                let mut out = vec![T::from_f64(f64::NAN); out_len];
                let bv = bias.then_some(&b[..]);
                convolution(
                    &x,
                    sizes[0],
                    &w,
                    sizes[1],
                    bv,
                    s,
                    p,
                    d,
                    false,
                    &[0],
                    groups,
                    &mut out,
                    scratch,
                )
                .unwrap();
                out.iter().map(|v| v.to_f64() as f32).collect()
            }
            let data = [&x[..], &w[..], &b[..]];
            let (sizes, window) = ([&isz[..], &wsz[..]], [&s[..], &p[..], &d[..]]);
            let out = run::<f32>(data, bias, sizes, window, groups, want.len(), &mut scratch);
            crate::testing::check(&out, &want, cin_g * k[0] * k[1] * k[2]);
            let out = run::<f16>(data, bias, sizes, window, groups, want.len(), &mut []);
            for (g, w) in out.iter().zip(&want) {
                let g = *g as f64;
                assert!((g - w).abs() <= 2e-2 * (1.0 + w.abs()), "case {case}: {g} vs {w}");
            }
        }
        // Transposed 3-d convolution has no kernel: its shapes are refused.
        assert!(conv_output_sizes(
            &[1, 2, 3, 3, 3],
            &[2, 2, 2, 2, 2],
            None,
            &[1],
            &[0],
            &[1],
            true,
            &[0],
            1
        )
        .is_none());
    }

    /// The gradients are the adjoints of the forward convolution:
    /// `⟨conv(x), gy⟩` is linear in `x` and in `w`, so
    /// `⟨conv(x + e_i) − conv(x), gy⟩ = grad_input[i]` exactly in f64 (up
    /// to rounding), and the same for the weight; the bias gradient sums
    /// `gy`.
    #[test]
    fn convolution_backward_is_the_forward_adjoint() {
        let mut rng = Lcg(7);
        // (input, weight, stride, padding, dilation, transposed, output_padding, groups)
        type Case = (
            Vec<usize>,
            Vec<usize>,
            Vec<usize>,
            Vec<usize>,
            Vec<usize>,
            bool,
            Vec<usize>,
            usize,
        );
        let cases: Vec<Case> = vec![
            (
                vec![2, 4, 5, 4],
                vec![6, 2, 3, 2],
                vec![2, 1],
                vec![1, 0],
                vec![1, 2],
                false,
                vec![0],
                2,
            ),
            (
                vec![1, 2, 7],
                vec![3, 2, 3],
                vec![3],
                vec![2],
                vec![1],
                false,
                vec![0],
                1,
            ),
            (
                vec![1, 4, 3, 2],
                vec![4, 1, 2, 3],
                vec![2, 1],
                vec![0, 1],
                vec![1],
                true,
                vec![1, 0],
                2,
            ),
            (
                vec![1, 2, 3, 4, 3],
                vec![2, 2, 2, 1, 2],
                vec![1],
                vec![1],
                vec![1],
                false,
                vec![0],
                1,
            ),
        ];
        for (xs, ws, s, p, d, t, op, g) in cases {
            let x: Vec<f64> = (0..xs.iter().product()).map(|_| rng.next() as f64).collect();
            let w: Vec<f64> = (0..ws.iter().product()).map(|_| rng.next() as f64).collect();
            let ys = conv_output_sizes(&xs, &ws, None, &s, &p, &d, t, &op, g).unwrap();
            let gy: Vec<f64> = (0..ys.iter().product()).map(|_| rng.next() as f64).collect();
            let forward = |x: &[f64], w: &[f64]| {
                let mut y = vec![0.0; gy.len()];
                convolution(x, &xs, w, &ws, None, &s, &p, &d, t, &op, g, &mut y, &mut []).unwrap();
                y.iter().zip(&gy).map(|(a, b)| a * b).sum::<f64>()
            };
            let (mut gi, mut gw, mut gb) = (vec![0.0; x.len()], vec![0.0; w.len()], vec![0.0; ys[1]]);
            let grads = (Some(&mut gi[..]), Some(&mut gw[..]), Some(&mut gb[..]));
            convolution_backward(
                &gy,
                &x,
                &xs,
                &w,
                &ws,
                (&s, &p, &d),
                t,
                &op,
                g,
                grads.0,
                grads.1,
                grads.2,
            )
            .unwrap();
            let base = forward(&x, &w);
            // Under Miri every 13th input and weight (13 is prime to every
            // size here), each check a whole forward convolution.
            let step = if cfg!(miri) { 13 } else { 1 };
            for i in (0..x.len()).step_by(step) {
                let mut e = x.clone();
                e[i] += 1.0;
                assert!((forward(&e, &w) - base - gi[i]).abs() < 1e-9, "input {i} of {xs:?}");
            }
            for i in (0..w.len()).step_by(step) {
                let mut e = w.clone();
                e[i] += 1.0;
                assert!((forward(&x, &e) - base - gw[i]).abs() < 1e-9, "weight {i} of {ws:?}");
            }
            let per = gy.len() / ys[1] / ys[0];
            for (oc, b) in gb.iter().enumerate() {
                let want: f64 = (0..ys[0]).flat_map(|n| &gy[(n * ys[1] + oc) * per..][..per]).sum();
                assert!((b - want).abs() < 1e-9);
            }
        }
    }
}
