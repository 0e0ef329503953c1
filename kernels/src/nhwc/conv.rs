//! Regular (possibly grouped) convolutions over NHWC images. A 1×1
//! convolution is one matrix product over the pixels (NHWC is already its
//! row-major `[pixels, C]` operand); a shallow window (an image network's
//! first layer) is multiplied straight from the image ([`super::direct`]);
//! any other through tiles of gathered windows ([`super::im2col`]). The
//! filter is packed for [`crate::gemm`], at each call or once, kept
//! between calls ([`Conv2dNhwc::pack_filter`]).
use super::{clamp, direct, grouped, im2col, Conv2dNhwc};
use crate::gemm::{ensure_packed, gemm_packed, is_packed, pack, packed_len, Epilogue};

impl Conv2dNhwc {
    /// Length, in `f32`, of the packed filter that [`conv2d_nhwc`] can keep
    /// between calls of an ungrouped convolution (see [`crate::gemm::pack`])
    /// or one of narrow groups ([`Self::keeps_packed_filter`]).
    pub fn packed_filter_len(&self) -> usize {
        match self.narrow() {
            Some(n) => n.packed_len(),
            None => packed_len(self.depth(), self.out_c),
        }
    }

    /// Whether [`conv2d_nhwc`] reads this convolution's filter packed, so
    /// that it may be kept between calls ([`Self::pack_filter`]): an
    /// ungrouped one, or one whose groups are narrow (at most 16 outputs
    /// each: RegNet's, ResNeXt's), which runs 16 outputs at a time with a
    /// block-diagonal filter.
    pub fn keeps_packed_filter(&self) -> bool {
        self.groups == 1 || self.narrow().is_some()
    }

    /// Scratch, in `f32` elements, that [`conv2d_nhwc`] needs; `kept_filter`:
    /// whether a kept packed filter is passed (grouped convolutions pack
    /// each group's filter into scratch regardless).
    pub fn scratch_len(&self, kept_filter: bool) -> usize {
        let og = self.out_c / self.groups;
        if let Some(n) = self.narrow() {
            // A product per group where the narrow kernel does not run
            // (see `grouped::runs_here`); a packing per call where it does.
            let per_group = self.gather_len() + packed_len(self.depth(), og);
            return if kept_filter {
                per_group
            } else {
                per_group.max(n.packed_len())
            };
        }
        let pack = if kept_filter && self.groups == 1 {
            0
        } else {
            packed_len(self.depth(), og)
        };
        self.gather_len() + pack
    }

    /// Packs the filter `w` (`[O, kH, kW, C / groups]`) of this convolution,
    /// which must [keep a packed filter](Self::keeps_packed_filter), into
    /// `packed` ([`Self::packed_filter_len`] floats, serving this filter
    /// alone) for [`conv2d_nhwc`]. Does nothing when `packed` already holds
    /// it, so it can run before every call; ptec runs it at compile time
    /// when the weights are embedded.
    pub fn pack_filter(&self, w: &[f32], packed: &mut [f32]) {
        if let Some(n) = self.narrow() {
            return grouped::pack(self, &n, w, packed);
        }
        assert_eq!(
            self.groups, 1,
            "a packed filter needs an ungrouped convolution or narrow groups"
        );
        ensure_packed(w, self.depth(), self.out_c, true, packed);
    }
}

/// Regular convolution (see [`Conv2dNhwc::regular`]): `out[N, OH, OW, O] =
/// clamp(conv(x, w) + bias)`. `packed`, when given for a convolution that
/// [keeps one](Conv2dNhwc::keeps_packed_filter), is `w` packed by
/// [`Conv2dNhwc::pack_filter`], and all the call reads of the filter (`w`
/// may be empty); otherwise each call packs `w` into `scratch`:
/// [`Conv2dNhwc::scratch_len`] floats.
///
/// A 1×1 convolution is one matrix product over the pixels (NHWC is
/// already its row-major `[pixels, C]` operand); any other gathers tiles of
/// output pixels' windows (im2col, in the filter's `kH, kW, C` order) and
/// multiplies each by the filter, group by group, writing each group's
/// columns of the output in place.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_nhwc(
    g: &Conv2dNhwc,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    min: f32,
    max: f32,
    packed: Option<&[f32]>,
    out: &mut [f32],
    scratch: &mut [f32],
) {
    let narrow = g.narrow();
    if let Some(n) = narrow.filter(|_| grouped::runs_here()) {
        let filter: &[f32] = match packed {
            Some(p) => p,
            None => {
                grouped::repack(g, &n, w, scratch);
                scratch
            }
        };
        return grouped::conv(g, &n, x, filter, bias, min, max, out);
    }
    let (groups, og, depth) = (g.groups, g.out_c / g.groups, g.depth());
    if let Some(n) = &narrow {
        let parts = group_parts(g);
        if parts > 1 {
            let e = Epilogue {
                min,
                max,
                ..Epilogue::new(bias, false)
            };
            return split_groups(g, n, x, w, &e, packed, out, scratch, parts);
        }
    }
    let (cols, spare) = scratch.split_at_mut(g.gather_len());
    for gi in 0..groups {
        // A packed filter is all the call reads (`w` may then be empty).
        let filter: &[f32] = match (packed, &narrow) {
            (Some(p), None) if groups == 1 => {
                assert!(
                    is_packed(p, depth, og),
                    "the filter was not packed for this convolution"
                );
                p
            }
            (_, n) => {
                group_filter(g, n.as_ref(), packed, w, gi, spare);
                spare
            }
        };
        let e = Epilogue {
            bias: bias.map(|b| &b[gi * og..][..og]),
            residual: None,
            min,
            max,
            activation: crate::activation::Activation::Identity,
        };
        conv_group(g, x, gi, filter, &e, out, cols);
    }
}

/// Parts into which a narrow-group convolution's groups split, on a CPU
/// where the narrow kernel does not run: one a thread, at most one a
/// group, when the whole is worth a hand-off and each part's share of the
/// scratch ([`split_groups`]) holds a tile of 8 windows or more. A group's
/// own product (a few hundred pixels by 8 columns: RegNetY's) is below
/// the GEMM's minimum to split, so group by group such layers ran on one
/// thread whatever the thread count. Threads beyond the groups would stay
/// idle.
fn group_parts(g: &Conv2dNhwc) -> usize {
    let work = g.window.out_pixels() * g.out_c * g.depth();
    if work < 1 << 18 {
        return 1;
    }
    let mut parts = crate::parallel::threads().min(g.groups);
    while parts > 1 && group_tile(g, g.scratch_len(true), parts) < 8 {
        parts -= 1;
    }
    parts
}

/// Group `gi`'s filter packed into `into`: taken from the kept packing of
/// a narrow-group convolution (`n`), else packed from `w`.
fn group_filter(
    g: &Conv2dNhwc,
    n: Option<&grouped::Narrow>,
    packed: Option<&[f32]>,
    w: &[f32],
    gi: usize,
    into: &mut [f32],
) {
    let (og, depth) = (g.out_c / g.groups, g.depth());
    match (packed, n) {
        (Some(p), Some(n)) => grouped::pack_group(g, n, p, gi, into),
        _ => pack(&w[gi * og * depth..][..og * depth], depth, og, true, into),
    }
}

/// Windows a tile of [`split_groups`] gathers when `scratch` floats are
/// shared among `parts`: each part's share holds a group's packed filter,
/// the tile's windows and its outputs.
fn group_tile(g: &Conv2dNhwc, scratch: usize, parts: usize) -> usize {
    let (og, depth) = (g.out_c / g.groups, g.depth());
    (scratch / parts).saturating_sub(packed_len(depth, og)) / (depth + og)
}

/// A narrow-group convolution whose groups are shared among `parts`
/// threads ([`group_parts`]), each group whole on one of them, in tiles of
/// windows gathered into that part's share of `scratch`. A tile's product
/// goes into the share, then into the group's columns of `out`, which
/// interleave with the other parts'. Every group sums as on one thread.
#[allow(clippy::too_many_arguments)]
fn split_groups(
    g: &Conv2dNhwc,
    n: &grouped::Narrow,
    x: &[f32],
    w: &[f32],
    e: &Epilogue<'_>,
    packed: Option<&[f32]>,
    out: &mut [f32],
    scratch: &mut [f32],
    parts: usize,
) {
    let (pixels, o, og, cg, depth) = (
        g.window.out_pixels(),
        g.out_c,
        g.out_c / g.groups,
        g.in_c / g.groups,
        g.depth(),
    );
    let share = scratch.len() / parts;
    let tile = group_tile(g, scratch.len(), parts).min(pixels);
    assert!(tile >= 1, "scratch of {} floats for {parts} parts", scratch.len());
    // Even tiles: a last tile of one row would take the GEMM's one-row
    // kernel, which sums in another order.
    let tiles = pixels.div_ceil(tile);
    let tile = pixels.div_ceil(tiles);
    let x = &x[..g.window.batch * g.window.in_h * g.window.in_w * g.in_c];
    let out = &mut out[..pixels * o];
    let shares = crate::parallel::Pieces::new(scratch, (0..parts).map(|p| p * share));
    let per = g.groups.div_ceil(parts);
    // SAFETY: part `p` writes only the columns of its groups, which no
    // other part writes, and reads no output; `out` outlives `run_parts`.
    let view = unsafe { crate::parallel::Shared::new((out.as_mut_ptr(), out.len())) };
    crate::parallel::run_parts(parts, &|p| {
        let (g0, g1) = ((p * per).min(g.groups), ((p + 1) * per).min(g.groups));
        let Some(mine) = shares.take(p) else { return };
        let (filter, rest) = mine[..share].split_at_mut(packed_len(depth, og));
        let (cols, prod) = rest.split_at_mut(tile * depth);
        let prod = &mut prod[..tile * og];
        for gi in g0..g1 {
            group_filter(g, Some(n), packed, w, gi, filter);
            let e = Epilogue {
                bias: e.bias.map(|b| &b[gi * og..][..og]),
                ..*e
            };
            for p0 in (0..pixels).step_by(tile) {
                let t = tile.min(pixels - p0);
                im2col::im2col(g, x, p0, t, gi * cg, cg, &mut cols[..t * depth]);
                gemm_packed(t, og, depth, cols, depth, filter, &e, prod, og);
                let (ptr, len) = view.get();
                // The tile's last row ends furthest into `out`.
                assert!((p0 + t - 1) * o + (gi + 1) * og <= len);
                for (i, row) in prod.chunks_exact(og).take(t).enumerate() {
                    let at = (p0 + i) * o + gi * og;
                    // SAFETY: in bounds (above); group `gi`'s columns of
                    // this pixel are this part's alone.
                    unsafe { core::ptr::copy_nonoverlapping(row.as_ptr(), ptr.add(at), og) };
                }
            }
        }
    });
}

/// Group `gi` of a regular convolution, its filter packed: one matrix
/// product over the pixels for a 1×1 convolution, else products over
/// gathered tiles of windows (`cols`: [`Conv2dNhwc::gather_len`] floats).
pub(super) fn conv_group(
    g: &Conv2dNhwc,
    x: &[f32],
    gi: usize,
    filter: &[f32],
    e: &Epilogue<'_>,
    out: &mut [f32],
    cols: &mut [f32],
) {
    let pixels = g.window.out_pixels();
    let o = g.out_c;
    let out = &mut out[..pixels * o];
    if g.is_pointwise() {
        gemm_packed(pixels, o, g.in_c, x, g.in_c, filter, e, out, o);
        return;
    }
    if direct::fits(g) {
        match e.residual {
            None => direct::conv(g, x, filter, e, out),
            Some(r) => {
                // The direct kernel (an image network's first layer) adds
                // no residual: the sum and the clamp take a second pass.
                direct::conv(g, x, filter, &Epilogue::new(e.bias, false), out);
                add_residual(out, r, e.min, e.max);
                e.activation
                    .apply_rows(out, g.window.batch * g.window.out_h, g.window.out_w * o);
            }
        }
        return;
    }
    im2col::gathered_split(g, x, gi, filter, e, out, cols);
}

/// `out = clamp(out + residual)`, element by element.
pub(super) fn add_residual(out: &mut [f32], residual: &[f32], min: f32, max: f32) {
    let residual = &residual[..out.len()];
    for (o, &r) in out.iter_mut().zip(residual) {
        *o += r;
    }
    clamp(out, min, max);
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::nhwc::tests::{close, reference, rng, Dims4, Pair};
    use std::vec;

    #[test]
    fn regular_convolutions_match_the_reference() {
        // (input, filter, stride, padding, dilation, groups)
        let cases: &[(Dims4, Dims4, Pair, Dims4, Pair, usize)] = &[
            ([1, 9, 9, 3], [8, 3, 3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 1),
            ([2, 5, 6, 16], [24, 1, 1, 16], [1, 1], [0, 0, 0, 0], [1, 1], 1),
            ([1, 7, 7, 8], [6, 3, 2, 4], [1, 2], [0, 1, 2, 1], [2, 1], 2),
            ([1, 4, 4, 5], [7, 1, 1, 5], [2, 2], [0, 0, 0, 0], [1, 1], 1),
            ([1, 30, 30, 4], [9, 3, 3, 4], [1, 1], [1, 1, 1, 1], [1, 1], 1),
            // Shallow windows, multiplied from the image where they lie
            // inside it: a 7×7 stem over two images with a partial second
            // strip of 32 channels, dilation with uneven padding, windows
            // never wholly inside, and a window too deep for that path.
            ([2, 23, 21, 3], [40, 7, 7, 3], [2, 2], [3, 3, 3, 3], [1, 1], 1),
            ([1, 11, 10, 2], [5, 3, 3, 2], [1, 2], [2, 0, 1, 2], [2, 2], 1),
            ([1, 3, 3, 3], [33, 3, 3, 3], [1, 1], [2, 2, 2, 2], [1, 1], 1),
            ([1, 6, 6, 20], [16, 3, 3, 20], [1, 1], [1, 1, 1, 1], [1, 1], 1),
            // MobileNet's 3×3 stride-2 stem: one border pixel per row
            // (gathered), the rest multiplied in place, 8 then fewer; and
            // a wider one, whose tiles of 8 along the row are fewer than
            // tiles cut at the borders (those with a border pixel
            // gathered whole).
            ([1, 20, 36, 3], [32, 3, 3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 1),
            ([1, 17, 40, 3], [16, 5, 5, 3], [1, 1], [2, 2, 2, 2], [1, 1], 1),
        ];
        // Under Miri (the portable kernels, whose tiles are 4 × 32) the
        // kinds of case above that take paths of their own there, on tiny
        // images: grouped, dilated with uneven padding (the gathered band),
        // pointwise; each with one of the two epilogues, in turn.
        let miri: &[(Dims4, Dims4, Pair, Dims4, Pair, usize)] = &[
            ([1, 4, 4, 4], [4, 3, 2, 2], [1, 2], [0, 1, 2, 1], [2, 1], 2),
            ([1, 5, 6, 2], [5, 3, 3, 2], [1, 2], [2, 0, 1, 2], [2, 2], 1),
            ([1, 4, 4, 5], [7, 1, 1, 5], [2, 2], [0, 0, 0, 0], [1, 1], 1),
        ];
        let cases = if cfg!(miri) { miri } else { cases };
        for (i, &(input, filter, stride, padding, dilation, groups)) in cases.iter().enumerate() {
            let g = Conv2dNhwc::regular(&input, &filter, stride, padding, dilation, groups).unwrap();
            let x = rng(i as u64, input.iter().product());
            let w = rng(100 + i as u64, filter.iter().product());
            let b = rng(200 + i as u64, filter[0]);
            let epilogues = [(None, f32::NEG_INFINITY, f32::INFINITY), (Some(&b[..]), 0.0, 0.5)];
            for (e, (bias, min, max)) in epilogues.into_iter().enumerate() {
                if cfg!(miri) && e != i % 2 {
                    continue;
                }
                let want = reference(&g, &x, &w, false, bias, min, max);
                // Filter packed into scratch, and kept packed between calls.
                let mut out = vec![f32::NAN; want.len()];
                let mut scratch = vec![0.0f32; g.scratch_len(false)];
                conv2d_nhwc(&g, &x, &w, bias, min, max, None, &mut out, &mut scratch);
                close(&out, &want);
                let mut kept = vec![0.0f32; g.packed_filter_len()];
                let mut scratch = vec![0.0f32; g.scratch_len(true)];
                for _ in 0..2 {
                    let mut out = vec![f32::NAN; want.len()];
                    // Wide groups pack each group as they go.
                    let packed = g.keeps_packed_filter().then(|| {
                        g.pack_filter(&w, &mut kept);
                        &kept[..]
                    });
                    conv2d_nhwc(&g, &x, &w, bias, min, max, packed, &mut out, &mut scratch);
                    close(&out, &want);
                }
                // The packing alone, as when ptec made it at compile time.
                if g.keeps_packed_filter() {
                    let mut out = vec![f32::NAN; want.len()];
                    conv2d_nhwc(&g, &x, &[], bias, min, max, Some(&kept), &mut out, &mut scratch);
                    close(&out, &want);
                }
                // A band of rows across the images, on this thread (as a
                // chain computes its stem): gathered, as CPUs without AVX2
                // do, and directly.
                if groups == 1 && !g.is_pointwise() {
                    let e = Epilogue {
                        bias,
                        residual: None,
                        min,
                        max,
                        activation: crate::activation::Activation::Identity,
                    };
                    let row_len = g.window.out_w * g.out_c;
                    let rows = 1..g.window.batch * g.window.out_h - 1;
                    let want = &want[rows.start * row_len..rows.end * row_len];
                    let mut cols = vec![f32::NAN; g.gather_len()];
                    let mut band = vec![f32::NAN; want.len()];
                    let pixels = rows.start * g.window.out_w..rows.end * g.window.out_w;
                    im2col::gathered(&g, &x, 0, &kept, &e, pixels, &mut band, &mut cols);
                    close(&band, want);
                    #[cfg(target_arch = "x86_64")]
                    if direct::fits(&g) {
                        let mut band = vec![f32::NAN; want.len()];
                        let avx512 = crate::cpu::Isa::detect() == crate::cpu::Isa::Avx512;
                        direct::conv_band(avx512, &g, &x, &kept, &e, rows, &mut band);
                        close(&band, want);
                    }
                }
                // The AVX2 tile of the direct path, on a CPU that would
                // take the AVX-512 one too.
                #[cfg(target_arch = "x86_64")]
                if direct::fits(&g) {
                    let mut out = vec![f32::NAN; want.len()];
                    let e = Epilogue {
                        bias,
                        residual: None,
                        min,
                        max,
                        activation: crate::activation::Activation::Identity,
                    };
                    direct::conv_on(false, &g, &x, &kept, &e, &mut out);
                    close(&out, &want);
                }
            }
        }
    }

    #[test]
    fn gathered_convolutions_split_across_threads_match_the_reference() {
        // Enough pixels for one band of whole tiles per thread (a tile of
        // these windows is 910 pixels; under Miri, 72), one with a
        // residual, one strided over two images.
        let cases: &[(Dims4, Dims4, Pair)] = if cfg!(miri) {
            &[([1, 12, 13, 64], [4, 3, 3, 64], [1, 1])]
        } else {
            &[
                ([1, 48, 47, 4], [24, 3, 3, 4], [1, 1]),
                ([2, 61, 64, 4], [8, 3, 3, 4], [2, 1]),
            ]
        };
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        for threads in [2, 3] {
            crate::parallel::set_threads(threads);
            for (i, &(input, filter, stride)) in cases.iter().enumerate() {
                let g = Conv2dNhwc::regular(&input, &filter, stride, [1, 1, 1, 1], [1, 1], 1).unwrap();
                assert!(g.window.out_pixels() >= 2 * g.tile_rows(), "case {i} takes one band");
                let x = rng(i as u64, input.iter().product());
                let w = rng(100 + i as u64, filter.iter().product());
                let b = rng(200 + i as u64, filter[0]);
                let mut want = reference(&g, &x, &w, false, Some(&b), f32::NEG_INFINITY, f32::INFINITY);
                let residual = rng(300 + i as u64, want.len());
                for (v, r) in want.iter_mut().zip(&residual) {
                    *v = (*v + r).clamp(-0.5, 0.75);
                }
                let mut kept = vec![0.0f32; g.packed_filter_len()];
                g.pack_filter(&w, &mut kept);
                let e = Epilogue {
                    bias: Some(&b),
                    residual: Some(&residual),
                    min: -0.5,
                    max: 0.75,
                    activation: crate::activation::Activation::Identity,
                };
                let mut out = vec![f32::NAN; want.len()];
                let mut cols = vec![f32::NAN; g.gather_len()];
                im2col::gathered_split(&g, &x, 0, &kept, &e, &mut out, &mut cols);
                close(&out, &want);
            }
        }
        crate::parallel::set_threads(1);
    }

    #[test]
    fn narrow_groups_split_among_threads_give_one_threads_bits() {
        // RegNetY's 8 channels a group, and groups of 4 over two images
        // with uneven padding and stride, more threads than some parts.
        let cases: &[(Dims4, Dims4, Pair, Dims4, usize)] = if cfg!(miri) {
            &[([1, 4, 5, 8], [8, 3, 3, 2], [1, 1], [1, 1, 1, 1], 4)]
        } else {
            &[
                ([1, 14, 14, 48], [48, 3, 3, 8], [1, 1], [1, 1, 1, 1], 6),
                ([2, 9, 11, 20], [20, 3, 3, 4], [2, 1], [0, 1, 2, 1], 5),
            ]
        };
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        for (i, &(input, filter, stride, padding, groups)) in cases.iter().enumerate() {
            let g = Conv2dNhwc::regular(&input, &filter, stride, padding, [1, 1], groups).unwrap();
            let n = g.narrow().expect("narrow groups");
            let x = rng(i as u64, input.iter().product());
            let w = rng(100 + i as u64, filter.iter().product());
            let b = rng(200 + i as u64, filter[0]);
            let want = reference(&g, &x, &w, false, Some(&b), -0.5, 0.75);
            let e = Epilogue {
                bias: Some(&b),
                residual: None,
                min: -0.5,
                max: 0.75,
                activation: crate::activation::Activation::Identity,
            };
            let mut kept = vec![0.0f32; g.packed_filter_len()];
            g.pack_filter(&w, &mut kept);
            // One part on one thread: the groups one after another.
            crate::parallel::set_threads(1);
            let mut one = vec![f32::NAN; want.len()];
            let mut scratch = vec![f32::NAN; g.scratch_len(true)];
            split_groups(&g, &n, &x, &[], &e, Some(&kept), &mut one, &mut scratch, 1);
            close(&one, &want);
            for threads in [2, 3] {
                crate::parallel::set_threads(threads);
                for parts in 2..=threads {
                    // The filter kept packed, and packed from `w` a group
                    // at a time.
                    for (filter, scratch_len) in [(Some(&kept[..]), g.scratch_len(true)), (None, g.scratch_len(false))]
                    {
                        // Enough for tiles of 8 in each part, where a
                        // call's own would not split so far.
                        let (og, depth) = (g.out_c / g.groups, g.depth());
                        let least = parts * (packed_len(depth, og) + 8 * (depth + og));
                        let mut out = vec![f32::NAN; want.len()];
                        let mut scratch = vec![f32::NAN; scratch_len.max(least)];
                        split_groups(&g, &n, &x, &w, &e, filter, &mut out, &mut scratch, parts);
                        let same = out.iter().zip(&one).all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(same, "case {i}, {parts} parts on {threads} threads");
                    }
                }
                // The whole call, whichever path this CPU takes.
                let mut out = vec![f32::NAN; want.len()];
                let mut scratch = vec![f32::NAN; g.scratch_len(true)];
                conv2d_nhwc(&g, &x, &[], Some(&b), -0.5, 0.75, Some(&kept), &mut out, &mut scratch);
                close(&out, &want);
            }
            if i == 0 && !cfg!(miri) {
                // Three threads, or one where there are none (wasm).
                let threads = crate::parallel::threads();
                assert_eq!(group_parts(&g), threads, "RegNet's layer splits one part a thread");
            }
        }
        crate::parallel::set_threads(1);
    }
}
