//! Grouped convolutions whose groups are narrow (RegNet's 8 channels a
//! group, ResNeXt's 4). A product per group would be 8 columns wide, a
//! quarter of a GEMM tile, and gather its windows 8 channels at a time;
//! instead each block of 16 output channels (one AVX-512 register) runs
//! as one convolution over the input channels its groups read (its
//! *span*: 16 for groups of 8), with a block-diagonal filter, zero where
//! an output does not read a channel. That spends 16 / 8 times the
//! products of the groups themselves (XNNPACK's 16-wide tiles spend as
//! much), but every one is a full-width FMA from a register tile of
//! pixels, reading the image where it lies (no gathering). When the span
//! fits in a register, a permute hands each lane its own group's channel
//! instead, and the FMAs are those of the groups alone. With AVX2, each
//! half of a block (one register) multiplies only the run of the span its
//! groups read. CPUs with neither ([`runs_here`]) keep a product per
//! group, each group's filter taken from the packing ([`pack_group`]).
//! The portable kernel here is what the tests and Miri check the shared
//! loops with.
//!
//! The filter is laid out once, by [`Conv2dNhwc::pack_filter`] (at compile
//! time when it is a constant; the same bytes serve every CPU): a header,
//! then per block `[kH · kW, span, 16]` for the broadcasts, then, when the
//! span fits in a register, per block 16 lanes' offsets into the span and
//! `[kH · kW, C / groups, 16]` for the permutes.
use super::{for_each_tap, Conv2dNhwc};
use crate::f32x16::F32x16;
use crate::gemm::packing::{stamp, stamped};

/// Output channels a block computes: one AVX-512 register of `f32`.
const LANES: usize = 16;
/// First word of a packed narrow-group filter ("PKG1").
const MAGIC: u32 = 0x3147_4b50;
/// Floats before the blocks.
const HEADER: usize = 16;
/// The widest group this path takes, and the most input channels a block
/// may read: beyond them the products per group are wide enough for the
/// GEMM, or the block-diagonal filter mostly zeros.
const MAX_GROUP_OUT: usize = LANES;
const MAX_SPAN: usize = 64;

/// How the blocks of a narrow-group convolution read their inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Narrow {
    /// Input channels each block reads (the most any block's groups span).
    span: usize,
    /// Blocks of [`LANES`] output channels (the last may be partial).
    blocks: usize,
    /// Taps of the window: `kH · kW`.
    taps: usize,
    /// Input channels a group reads.
    cg: usize,
}

impl Narrow {
    /// Floats of the packed filter, header included.
    pub(super) fn packed_len(&self) -> usize {
        HEADER + self.broadcast_len() + self.permuted_len()
    }

    /// Floats of the blocks in the layout every CPU runs: `[kH · kW, span,
    /// 16]` each.
    fn broadcast_len(&self) -> usize {
        self.blocks * self.taps * self.span * LANES
    }

    /// Floats of one block in the layout of AVX-512's permutes: 16 lanes'
    /// indices into the span, then `[kH · kW, C / groups, 16]`.
    fn permuted_block(&self) -> usize {
        LANES + self.taps * self.cg * LANES
    }

    /// Floats of the blocks in that layout, when the span fits in a
    /// register (else none).
    fn permuted_len(&self) -> usize {
        if self.span <= LANES {
            self.blocks * self.permuted_block()
        } else {
            0
        }
    }
}

impl Conv2dNhwc {
    /// The narrow-group layout of this convolution, if it takes that path:
    /// grouped (not ungrouped, not depthwise), at most [`MAX_GROUP_OUT`]
    /// outputs a group and [`MAX_SPAN`] inputs a block.
    pub(super) fn narrow(&self) -> Option<Narrow> {
        let (groups, o, c) = (self.groups, self.out_c, self.in_c);
        if groups <= 1 || o == 0 {
            return None;
        }
        let (og, cg) = (o / groups, c / groups);
        if og > MAX_GROUP_OUT {
            return None;
        }
        let blocks = o.div_ceil(LANES);
        let span = (0..blocks)
            .map(|b| {
                let (o0, o1) = (b * LANES, (b * LANES + LANES).min(o));
                ((o1 - 1) / og - o0 / og + 1) * cg
            })
            .max()?;
        if span > MAX_SPAN || span > c {
            return None;
        }
        let taps = self.window.kernel_h * self.window.kernel_w;
        Some(Narrow { span, blocks, taps, cg })
    }

    /// The stamp of a packed narrow-group filter for this geometry.
    fn narrow_header(&self) -> [u32; 4] {
        [MAGIC, self.out_c as u32, self.depth() as u32, self.groups as u32]
    }

    /// The first input channel block `b` reads: its first group's, moved
    /// back so that the whole span lies among the channels.
    fn block_input(&self, n: &Narrow, b: usize) -> usize {
        let (og, cg) = (self.out_c / self.groups, self.in_c / self.groups);
        ((b * LANES / og) * cg).min(self.in_c - n.span)
    }
}

/// Packs the filter `w` (`[O, kH, kW, C / groups]`) of a narrow-group
/// convolution into `packed` ([`Narrow::packed_len`] floats): per block,
/// tap and input channel of its span, the 16 outputs' weights (zero where
/// an output's group does not read that channel, or past the last
/// output). Does nothing when `packed` holds it already.
pub(super) fn pack(g: &Conv2dNhwc, n: &Narrow, w: &[f32], packed: &mut [f32]) {
    if !is_packed(g, n, packed) {
        repack(g, n, w, packed);
    }
}

/// [`pack`], whatever `packed` holds (scratch shared with other calls may
/// hold another filter of the same geometry).
pub(super) fn repack(g: &Conv2dNhwc, n: &Narrow, w: &[f32], packed: &mut [f32]) {
    let (head, rest) = packed[..n.packed_len()].split_at_mut(HEADER);
    let (blocks, permuted) = rest.split_at_mut(n.broadcast_len());
    let (o, og, cg) = (g.out_c, g.out_c / g.groups, g.in_c / g.groups);
    let w = &w[..o * n.taps * cg];
    let per_block = n.taps * n.span * LANES;
    if n.permuted_len() > 0 {
        for (b, block) in permuted.chunks_exact_mut(n.permuted_block()).enumerate() {
            let c0 = g.block_input(n, b);
            let (index, taps) = block.split_at_mut(LANES);
            for (l, v) in index.iter_mut().enumerate() {
                // Where output `oc`'s group starts in the span (lanes past
                // the last output: 0, their weights are zero).
                let oc = b * LANES + l;
                *v = f32::from_bits(if oc < o { (oc / og * cg - c0) as u32 } else { 0 });
            }
            for (t, tap) in taps.chunks_exact_mut(cg * LANES).enumerate() {
                for (i, lanes) in tap.chunks_exact_mut(LANES).enumerate() {
                    for (l, v) in lanes.iter_mut().enumerate() {
                        let oc = b * LANES + l;
                        *v = if oc < o { w[(oc * n.taps + t) * cg + i] } else { 0.0 };
                    }
                }
            }
        }
    }
    for (b, block) in blocks.chunks_exact_mut(per_block).enumerate() {
        let c0 = g.block_input(n, b);
        for (t, tap) in block.chunks_exact_mut(n.span * LANES).enumerate() {
            for (s, lanes) in tap.chunks_exact_mut(LANES).enumerate() {
                for (l, v) in lanes.iter_mut().enumerate() {
                    let oc = b * LANES + l;
                    // Input channel `c0 + s` within output `oc`'s group.
                    let within = (c0 + s).checked_sub(oc / og * cg).filter(|&i| i < cg);
                    *v = match within {
                        Some(i) if oc < o => w[(oc * n.taps + t) * cg + i],
                        _ => 0.0,
                    };
                }
            }
        }
    }
    stamp(head, &g.narrow_header());
}

/// Whether this CPU runs the narrow-group kernel: with AVX-512, or AVX2
/// and FMA (half a block at a time, `avx2`). Elsewhere the block-diagonal
/// broadcasts in 16-float arrays ran 2.5× slower than one product per
/// group (RegNetY's grouped layers, AVX2 code, Zen 5), so those CPUs keep
/// that path, their filters taken from the packing ([`pack_group`]).
pub(super) fn runs_here() -> bool {
    #[cfg(target_arch = "x86_64")]
    if matches!(
        crate::cpu::Isa::detect(),
        crate::cpu::Isa::Avx512 | crate::cpu::Isa::Avx2Fma
    ) {
        return true;
    }
    false
}

/// Packs group `gi`'s filter for the GEMM, as [`crate::gemm::pack`] packs
/// its `[O / groups, kH · kW · C / groups]` rows, from the narrow packing
/// `packed` (see [`pack`]).
pub(super) fn pack_group(g: &Conv2dNhwc, n: &Narrow, packed: &[f32], gi: usize, into: &mut [f32]) {
    assert!(
        is_packed(g, n, packed),
        "the filter was not packed for this convolution"
    );
    let w = &packed[HEADER..][..n.broadcast_len()];
    let (og, cg) = (g.out_c / g.groups, g.in_c / g.groups);
    crate::gemm::pack_with(g.depth(), og, into, |q, j| {
        // Depth index q = tap · C / groups + channel, output j of the group.
        let (tap, i, oc) = (q / cg, q % cg, gi * og + j);
        let b = oc / LANES;
        let s = gi * cg + i - g.block_input(n, b);
        w[((b * n.taps + tap) * n.span + s) * LANES + oc % LANES]
    });
}

/// Whether `packed` holds this convolution's narrow-group filter.
pub(super) fn is_packed(g: &Conv2dNhwc, n: &Narrow, packed: &[f32]) -> bool {
    packed.len() >= n.packed_len() && stamped(packed, &g.narrow_header())
}

/// `out[N, OH, OW, O] = clamp(conv(x, w) + bias)` for a narrow-group
/// convolution whose filter `packed` holds (see [`pack`]). With threads,
/// each takes a band of output rows.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv(
    g: &Conv2dNhwc,
    n: &Narrow,
    x: &[f32],
    packed: &[f32],
    bias: Option<&[f32]>,
    min: f32,
    max: f32,
    out: &mut [f32],
) {
    let win = &g.window;
    assert!(
        is_packed(g, n, packed),
        "the filter was not packed for this convolution"
    );
    let (w, permuted) = packed[HEADER..n.packed_len()].split_at(n.broadcast_len());
    let job = Job {
        g,
        n,
        x: &x[..win.batch * win.in_h * win.in_w * g.in_c],
        w,
        permuted,
        bias: bias.map(|b| &b[..g.out_c]),
        min,
        max,
    };
    let out = &mut out[..win.out_pixels() * g.out_c];
    let (rows, row_len) = (win.batch * win.out_h, win.out_w * g.out_c);
    // Vector products, 16 lanes each: split when both threads get a few
    // tens of microseconds.
    let work = win.out_pixels() * n.blocks * n.taps * n.span;
    crate::parallel::for_each_band(out, rows, row_len, 1, work >= 1 << 16, &|rows, band| {
        #[cfg(target_arch = "x86_64")]
        match crate::cpu::Isa::detect() {
            // SAFETY: AVX-512F was detected on this CPU; `job` holds the
            // lengths its geometry implies and `band` the rows `rows`.
            crate::cpu::Isa::Avx512 => return unsafe { avx512::rows(&job, band, rows) },
            // SAFETY: as above, with AVX2 and FMA.
            crate::cpu::Isa::Avx2Fma => return unsafe { avx2::rows(&job, band, rows) },
            _ => {}
        }
        crate::cpu::with_best_isa(Portable {
            job: &job,
            out: band,
            rows,
        });
    });
}

/// A narrow-group convolution's operands, lengths checked by [`conv`].
struct Job<'a> {
    g: &'a Conv2dNhwc,
    n: &'a Narrow,
    x: &'a [f32],
    /// The packed blocks, after the header, in the layout every CPU runs.
    w: &'a [f32],
    /// The blocks in the layout of AVX-512's permutes (empty when the
    /// span does not fit in a register).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    permuted: &'a [f32],
    bias: Option<&'a [f32]>,
    min: f32,
    max: f32,
}

/// The 16 lanes of a block as a kernel holds them ([`F32x16`]), with
/// how it runs the pixels whose windows lie inside the image across.
trait Lanes: F32x16 {
    /// The output pixels `ow .. end` of `row`, whose windows lie inside
    /// the image across: broadcasts of each input channel of the span,
    /// 16, 8, 4 then 1 pixels at a time.
    ///
    /// # Safety
    /// As [`Row::pixels`].
    #[inline(always)]
    unsafe fn interior(row: &Row<'_>, ow: usize, end: usize) {
        // SAFETY: by the caller.
        unsafe { Self::interior_broadcast(row, ow, end) }
    }

    /// The default [`Self::interior`].
    ///
    /// # Safety
    /// As [`Row::pixels`].
    #[inline(always)]
    unsafe fn interior_broadcast(row: &Row<'_>, ow: usize, end: usize) {
        // SAFETY: by the caller.
        unsafe {
            let ow = row.pixels::<Self, 16>(ow, end);
            let ow = row.pixels::<Self, 8>(ow, end);
            let ow = row.pixels::<Self, 4>(ow, end);
            row.pixels::<Self, 1>(ow, end);
        }
    }
}

/// The lanes as a plain array: the portable kernel (and the one Miri
/// checks).
impl Lanes for [f32; LANES] {}

/// [`rows`] of the portable kernel, compiled for the best instruction set.
struct Portable<'a, 'o> {
    job: &'a Job<'a>,
    out: &'o mut [f32],
    rows: core::ops::Range<usize>,
}

impl crate::cpu::Vectorized for Portable<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        // SAFETY: the portable lanes need no instructions of their own;
        // `job` holds the lengths its geometry implies and `out` the rows.
        unsafe { rows::<[f32; LANES]>(self.job, self.out, self.rows) }
    }
}

/// Output rows `rows` (over all images) of a narrow-group convolution into
/// `out`, which starts at row `rows.start`. Pixels whose windows lie
/// inside the image across go 8, then 4, then 1 at a time per block;
/// the others one at a time, taps outside the image skipped.
///
/// # Safety
/// The CPU must run `V`'s instructions; `job` must hold the lengths
/// [`conv`] checks and `out` the rows `rows`.
#[inline(always)]
unsafe fn rows<V: Lanes>(job: &Job<'_>, out: &mut [f32], rows: core::ops::Range<usize>) {
    let win = &job.g.window;
    let row_len = win.out_w * job.g.out_c;
    assert!(out.len() >= rows.len() * row_len && rows.end <= win.batch * win.out_h);
    let inner = win.inner_cols();
    for (i, r) in rows.enumerate() {
        let row = Row {
            job,
            n: r / win.out_h,
            oh: r % win.out_h,
            out: out[i * row_len..].as_mut_ptr(),
        };
        let mut ow = 0;
        while ow < win.out_w {
            if ow == inner.start && !inner.is_empty() {
                // SAFETY: the pixels of `inner` lie inside the image
                // across; the rest by the caller.
                unsafe { V::interior(&row, ow, inner.end) };
                ow = inner.end;
                continue;
            }
            // SAFETY: by the caller.
            unsafe { row.border::<V>(ow) };
            ow += 1;
        }
    }
}

/// One output row of a narrow-group convolution.
struct Row<'a> {
    job: &'a Job<'a>,
    n: usize,
    oh: usize,
    /// The row's first output.
    out: *mut f32,
}

impl Row<'_> {
    /// The blocks of output pixels `ow ..`, `P` at a time while they fit
    /// before `end`; returns where it stopped.
    ///
    /// # Safety
    /// As [`rows`], and the pixels `ow .. end` lie inside the image across.
    #[inline(always)]
    unsafe fn pixels<V: Lanes, const P: usize>(&self, mut ow: usize, end: usize) -> usize {
        let job = self.job;
        let (o, n) = (job.g.out_c, job.n);
        while ow + P <= end {
            for b in 0..n.blocks {
                let c0 = job.g.block_input(n, b);
                let mut acc = [self.bias::<V>(b); P];
                self.interior_taps(ow, c0, |tap, xs: [*const f32; P]| {
                    let ws = self.weights(b, tap);
                    for s in 0..n.span {
                        // SAFETY: the span's channels `c0 + s` are below C
                        // ([`Conv2dNhwc::block_input`]), the tap's pixels in
                        // the image, the weights within the block's tap.
                        unsafe {
                            let wv = V::load(ws.add(s * LANES));
                            for (a, xp) in acc.iter_mut().zip(&xs) {
                                *a = a.fma(V::splat(*xp.add(s)), wv);
                            }
                        }
                    }
                });
                for (p, a) in acc.iter().enumerate() {
                    // SAFETY: by the caller.
                    unsafe { self.store::<V>(*a, ow + p, b, o) };
                }
            }
            ow += P;
        }
        ow
    }

    /// For each tap inside the image down, its index and where pixels
    /// `ow .. ow + P` read it from channel `c0` on, for pixels whose
    /// windows lie inside the image across.
    #[inline(always)]
    fn interior_taps<const P: usize>(&self, ow: usize, c0: usize, mut f: impl FnMut(usize, [*const f32; P])) {
        let (job, win) = (self.job, &self.job.g.window);
        for ky in 0..win.kernel_h {
            let Some(ih) = win.in_row(self.oh, ky) else {
                continue;
            };
            let line = (self.n * win.in_h + ih) * win.in_w;
            for kx in 0..win.kernel_w {
                let iw0 = ow * win.stride_w + kx * win.dilation_w - win.pad_left;
                let xs = core::array::from_fn(|p| job.x[(line + iw0 + p * win.stride_w) * job.g.in_c + c0..].as_ptr());
                f(ky * win.kernel_w + kx, xs);
            }
        }
    }

    /// Output pixel `ow` of a window that may reach outside the image.
    ///
    /// # Safety
    /// As [`rows`].
    #[inline(always)]
    unsafe fn border<V: Lanes>(&self, ow: usize) {
        let (job, win) = (self.job, &self.job.g.window);
        let (c, n) = (job.g.in_c, job.n);
        for b in 0..n.blocks {
            let c0 = job.g.block_input(n, b);
            let mut acc = self.bias::<V>(b);
            for_each_tap(win, self.oh, ow, |pix, tap| {
                let xp = job.x[(self.n * win.in_h * win.in_w + pix) * c + c0..].as_ptr();
                let ws = self.weights(b, tap);
                for s in 0..n.span {
                    // SAFETY: as in `pixels`.
                    unsafe { acc = acc.fma(V::splat(*xp.add(s)), V::load(ws.add(s * LANES))) };
                }
            });
            // SAFETY: by the caller.
            unsafe { self.store::<V>(acc, ow, b, job.g.out_c) };
        }
    }

    /// Block `b`'s bias (zero without one, or past the last output).
    #[inline(always)]
    fn bias<V: Lanes>(&self, b: usize) -> V {
        match self.job.bias {
            Some(bias) => {
                let o0 = b * LANES;
                // SAFETY: the bias holds O floats, and `o0 < O`.
                unsafe { V::load_first(bias[o0..].as_ptr(), LANES.min(bias.len() - o0)) }
            }
            None => V::zero(),
        }
    }

    /// The packed weights of block `b`, tap `tap`: `span × 16` floats.
    #[inline(always)]
    fn weights(&self, b: usize, tap: usize) -> *const f32 {
        let n = self.job.n;
        self.job.w[(b * n.taps + tap) * n.span * LANES..][..n.span * LANES].as_ptr()
    }

    /// Stores block `b` of output pixel `ow`, clamped.
    ///
    /// # Safety
    /// As [`rows`], and `ow` below the output width.
    #[inline(always)]
    unsafe fn store<V: Lanes>(&self, a: V, ow: usize, b: usize, o: usize) {
        let o0 = b * LANES;
        let a = a.clamp(V::splat(self.job.min), V::splat(self.job.max));
        // SAFETY: by the caller, pixel `ow` of the row holds O outputs.
        unsafe { a.store_first(self.out.add(ow * o + o0), o - o0) }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Job, Lanes, Row, LANES};
    use crate::f32x16::Zmm;
    use core::arch::x86_64::*;

    // The lanes as an AVX-512 register, which runs the interior by
    // permutes where the job has them.
    impl Lanes for Zmm {
        #[inline(always)]
        unsafe fn interior(row: &Row<'_>, ow: usize, end: usize) {
            if row.job.permuted.is_empty() {
                // SAFETY: by the caller.
                return unsafe { <Zmm as Lanes>::interior_broadcast(row, ow, end) };
            }
            // SAFETY: by the caller.
            unsafe {
                let ow = Zmm::permuted::<8>(row, ow, end);
                let ow = Zmm::permuted::<4>(row, ow, end);
                Zmm::permuted::<1>(row, ow, end);
            }
        }
    }

    impl Zmm {
        /// [`Lanes::interior`] by permutes: when the span fits in a
        /// register, each tap loads it once per pixel and each of its
        /// group's `C / groups` channels reaches its lanes by a permute
        /// (`vpermps`), one FMA per channel of a group rather than per
        /// channel of the span (RegNet's groups of 8: half the FMAs, and
        /// no load in each). `P` pixels at a time while they fit before
        /// `end`; returns where it stopped.
        ///
        /// # Safety
        /// As [`Row::pixels`], and the CPU supports AVX-512F.
        #[inline(always)]
        unsafe fn permuted<const P: usize>(row: &Row<'_>, mut ow: usize, end: usize) -> usize {
            let job = row.job;
            let (o, n) = (job.g.out_c, job.n);
            let span = crate::x86::lanes(n.span);
            while ow + P <= end {
                for b in 0..n.blocks {
                    let c0 = job.g.block_input(n, b);
                    let block = &job.permuted[b * n.permuted_block()..][..n.permuted_block()];
                    // SAFETY: the block's 16 index lanes, then its taps'
                    // weights, `C / groups` vectors each; the span's
                    // channels `c0 .. c0 + span` below C; interior pixels
                    // (every tap's column inside the image); the output
                    // pixels inside the row, by the caller.
                    unsafe {
                        let first = _mm512_loadu_si512(block.as_ptr().cast());
                        let mut acc = [row.bias::<Zmm>(b).0; P];
                        row.interior_taps(ow, c0, |tap, at: [*const f32; P]| {
                            let xs = at.map(|p| crate::x86::load16(span, p));
                            let ws = block[LANES + tap * n.cg * LANES..].as_ptr();
                            let mut index = first;
                            for i in 0..n.cg {
                                let wv = _mm512_loadu_ps(ws.add(i * LANES));
                                for (a, x) in acc.iter_mut().zip(&xs) {
                                    *a = _mm512_fmadd_ps(_mm512_permutexvar_ps(index, *x), wv, *a);
                                }
                                index = _mm512_add_epi32(index, _mm512_set1_epi32(1));
                            }
                        });
                        for (p, a) in acc.iter().enumerate() {
                            row.store::<Zmm>(Zmm(*a), ow + p, b, o);
                        }
                    }
                }
                ow += P;
            }
            ow
        }
    }

    /// [`super::rows`] on AVX-512.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; as [`super::rows`] otherwise.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn rows(job: &Job<'_>, out: &mut [f32], rows: core::ops::Range<usize>) {
        // SAFETY: by the caller.
        unsafe { super::rows::<Zmm>(job, out, rows) }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Job, Lanes, Row, LANES};
    use crate::f32x16::Ymm2;
    use core::arch::x86_64::*;

    /// Lanes in one AVX2 register: half a block.
    const HALF: usize = LANES / 2;

    // The lanes as two AVX2 registers, whose interior runs half a block at
    // a time over the channels that half's groups read.
    impl Lanes for Ymm2 {
        #[inline(always)]
        unsafe fn interior(row: &Row<'_>, ow: usize, end: usize) {
            // SAFETY: by the caller.
            unsafe {
                let ow = Ymm2::halves::<8>(row, ow, end);
                let ow = Ymm2::halves::<4>(row, ow, end);
                Ymm2::halves::<1>(row, ow, end);
            }
        }
    }

    impl Ymm2 {
        /// [`Lanes::interior`] half a block at a time: the outputs of a
        /// half read a run of the span (one group's channels for groups
        /// of 8, RegNet's), outside which its weights are zero, so each
        /// half multiplies only its run, by broadcasts into `P` registers
        /// of 8 sums: for groups of 8, the FMAs of the groups alone, where
        /// the whole block's broadcasts spend twice as many (and 8 pixels
        /// of 16 sums would not fit in AVX2's 16 registers). `P` pixels at
        /// a time while they fit before `end`; returns where it stopped.
        ///
        /// # Safety
        /// As [`Row::pixels`], and the CPU supports AVX2 and FMA.
        #[inline(always)]
        unsafe fn halves<const P: usize>(row: &Row<'_>, mut ow: usize, end: usize) -> usize {
            let job = row.job;
            let (o, n) = (job.g.out_c, job.n);
            let (og, cg) = (o / job.g.groups, job.g.in_c / job.g.groups);
            // SAFETY: AVX2, by the caller.
            let (lo, hi) = unsafe { (_mm256_set1_ps(job.min), _mm256_set1_ps(job.max)) };
            while ow + P <= end {
                for b in 0..n.blocks {
                    let c0 = job.g.block_input(n, b);
                    for h in 0..2 {
                        let o0 = b * LANES + h * HALF;
                        if o0 >= o {
                            break;
                        }
                        let o1 = (o0 + HALF).min(o);
                        // The run of the span this half's groups read.
                        let (s0, s1) = ((o0 / og) * cg - c0, ((o1 - 1) / og + 1) * cg - c0);
                        debug_assert!(s1 <= n.span);
                        // SAFETY: the bias holds O floats and `o0 < O`;
                        // the run's channels `c0 + s` are below C, the
                        // tap's pixels in the image, the weights within
                        // the block's tap (`s < span`); the output pixels
                        // inside the row, by the caller.
                        unsafe {
                            let mask = Ymm2::first(o1 - o0)[0];
                            let bias = match job.bias {
                                Some(b) => _mm256_maskload_ps(b[o0..].as_ptr(), mask),
                                None => _mm256_setzero_ps(),
                            };
                            let mut acc = [bias; P];
                            row.interior_taps(ow, c0, |tap, xs: [*const f32; P]| {
                                let ws = row.weights(b, tap).add(h * HALF);
                                for s in s0..s1 {
                                    let wv = _mm256_loadu_ps(ws.add(s * LANES));
                                    for (a, xp) in acc.iter_mut().zip(&xs) {
                                        *a = _mm256_fmadd_ps(_mm256_broadcast_ss(&*xp.add(s)), wv, *a);
                                    }
                                }
                            });
                            for (p, a) in acc.iter().enumerate() {
                                let v = _mm256_min_ps(_mm256_max_ps(*a, lo), hi);
                                _mm256_maskstore_ps(row.out.add((ow + p) * o + o0), mask, v);
                            }
                        }
                    }
                }
                ow += P;
            }
            ow
        }
    }

    /// [`super::rows`] on AVX2.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; as [`super::rows`] otherwise.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rows(job: &Job<'_>, out: &mut [f32], rows: core::ops::Range<usize>) {
        // SAFETY: by the caller.
        unsafe { super::rows::<Ymm2>(job, out, rows) }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::nhwc::tests::{close, reference, rng, Dims4, Pair};
    use std::vec;

    #[test]
    fn narrow_groups_match_the_reference() {
        // (input, filter, stride, padding, dilation, groups)
        let cases: &[(Dims4, Dims4, Pair, Dims4, Pair, usize)] = &[
            // RegNet's groups of 8, stride 1 and 2, two images.
            ([1, 10, 12, 48], [48, 3, 3, 8], [1, 1], [1, 1, 1, 1], [1, 1], 6),
            ([2, 9, 11, 32], [32, 3, 3, 8], [2, 2], [1, 1, 1, 1], [1, 1], 4),
            // ResNeXt's groups of 4; a 1×1 grouped layer.
            ([1, 8, 8, 32], [32, 3, 3, 4], [1, 1], [1, 1, 1, 1], [1, 1], 8),
            ([1, 4, 5, 16], [16, 1, 1, 4], [1, 1], [0, 0, 0, 0], [1, 1], 4),
            // 3 outputs a group from 4 inputs, uneven padding and dilation.
            ([1, 7, 7, 8], [6, 3, 2, 4], [1, 2], [0, 1, 2, 1], [2, 1], 2),
            // A partial last block (40 outputs), dilated.
            ([1, 6, 6, 40], [40, 3, 3, 8], [1, 1], [2, 2, 2, 2], [2, 2], 5),
            // Groups of 5 outputs straddling blocks; the last block's span
            // moved back to end at the last channel.
            ([1, 5, 9, 14], [35, 3, 3, 2], [1, 1], [1, 1, 1, 1], [1, 1], 7),
            // 16 groups of one output from 4 inputs: a span of 64, wider
            // than a register (no permutes).
            ([1, 5, 7, 64], [16, 3, 3, 4], [1, 1], [1, 1, 1, 1], [1, 1], 16),
            // A 5 × 5 window, rows narrower than it.
            ([1, 9, 4, 16], [16, 5, 5, 8], [1, 1], [2, 2, 2, 2], [1, 1], 2),
            // Rows of many interior pixels with RegNet's 13 groups of 8,
            // the last block one group whose span moved back, two images;
            // and stride 2.
            ([2, 5, 37, 104], [104, 3, 3, 8], [1, 1], [1, 1, 1, 1], [1, 1], 13),
            ([1, 7, 45, 48], [48, 3, 3, 8], [2, 2], [1, 1, 1, 1], [1, 1], 6),
        ];
        // Under Miri (the portable kernel), the same kinds on tiny images:
        // groups of 8, uneven groups with dilation, blocks straddling
        // groups, a span wider than a register.
        let miri: &[(Dims4, Dims4, Pair, Dims4, Pair, usize)] = &[
            ([1, 3, 4, 16], [16, 3, 3, 8], [1, 1], [1, 1, 1, 1], [1, 1], 2),
            ([1, 4, 4, 8], [6, 3, 2, 4], [1, 2], [0, 1, 2, 1], [2, 1], 2),
            ([1, 2, 3, 14], [35, 3, 3, 2], [1, 1], [1, 1, 1, 1], [1, 1], 7),
            ([1, 2, 2, 64], [16, 1, 1, 4], [1, 1], [0, 0, 0, 0], [1, 1], 16),
        ];
        let cases = if cfg!(miri) { miri } else { cases };
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        for threads in [1, 2] {
            crate::parallel::set_threads(threads);
            for (i, &(input, filter, stride, padding, dilation, groups)) in cases.iter().enumerate() {
                if cfg!(miri) && threads == 2 {
                    continue;
                }
                let g = Conv2dNhwc::regular(&input, &filter, stride, padding, dilation, groups).unwrap();
                let n = g.narrow().unwrap_or_else(|| panic!("case {i} is not narrow"));
                let x = rng(i as u64, input.iter().product());
                let w = rng(100 + i as u64, filter.iter().product());
                let b = rng(200 + i as u64, filter[0]);
                for (bias, min, max) in [(None, f32::NEG_INFINITY, f32::INFINITY), (Some(&b[..]), -0.3, 0.5)] {
                    let want = reference(&g, &x, &w, false, bias, min, max);
                    let mut packed = vec![0.0f32; g.packed_filter_len()];
                    g.pack_filter(&w, &mut packed);
                    let mut out = vec![f32::NAN; want.len()];
                    conv(&g, &n, &x, &packed, bias, min, max, &mut out);
                    close(&out, &want);
                    // The portable kernel, whatever this CPU runs.
                    let job = Job {
                        g: &g,
                        n: &n,
                        x: &x,
                        w: &packed[HEADER..][..n.broadcast_len()],
                        permuted: &[],
                        bias,
                        min,
                        max,
                    };
                    let mut out = vec![f32::NAN; want.len()];
                    let rows = 0..g.window.batch * g.window.out_h;
                    crate::cpu::with_best_isa(Portable {
                        job: &job,
                        out: &mut out,
                        rows,
                    });
                    close(&out, &want);
                    // The AVX2 kernel, on a CPU that would take AVX-512's.
                    #[cfg(target_arch = "x86_64")]
                    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                        let mut out = vec![f32::NAN; want.len()];
                        let rows = 0..g.window.batch * g.window.out_h;
                        // SAFETY: AVX2 and FMA detected; `job` as `conv`
                        // makes it, `out` all the rows.
                        unsafe { avx2::rows(&job, &mut out, rows) };
                        close(&out, &want);
                    }
                    // Each group's filter as the GEMM packs it, recovered
                    // from the packing (CPUs without AVX-512).
                    let (og, depth) = (g.out_c / g.groups, g.depth());
                    for gi in 0..g.groups {
                        let mut from_packing = vec![f32::NAN; crate::gemm::packed_len(depth, og)];
                        pack_group(&g, &n, &packed, gi, &mut from_packing);
                        let mut direct = vec![f32::NAN; from_packing.len()];
                        crate::gemm::pack(&w[gi * og * depth..][..og * depth], depth, og, true, &mut direct);
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<std::vec::Vec<_>>();
                        assert_eq!(bits(&from_packing), bits(&direct), "case {i}, group {gi}");
                    }
                    // Packed into scratch (of the length the call asks
                    // for) that held another filter of the same geometry
                    // (the stamp must not stand for it).
                    let mut scratch = vec![f32::NAN; g.scratch_len(false)];
                    let other = rng(300 + i as u64, w.len());
                    g.pack_filter(&other, &mut scratch[..packed.len()]);
                    let mut out = vec![f32::NAN; want.len()];
                    crate::nhwc::conv2d_nhwc(&g, &x, &w, bias, min, max, None, &mut out, &mut scratch);
                    close(&out, &want);
                }
            }
        }
        crate::parallel::set_threads(1);
    }

    #[test]
    fn only_narrow_groups_take_this_path() {
        let regular = |c: usize, o: usize, cg: usize, groups: usize| {
            Conv2dNhwc::regular(&[1, 8, 8, c], &[o, 3, 3, cg], [1, 1], [1, 1, 1, 1], [1, 1], groups).unwrap()
        };
        // Ungrouped, groups of 32 outputs, and groups whose blocks would
        // read more than 64 channels (16 groups of one output, 8 inputs).
        assert_eq!(regular(16, 32, 16, 1).narrow(), None);
        assert_eq!(regular(64, 64, 32, 2).narrow(), None);
        assert_eq!(regular(128, 16, 8, 16).narrow(), None);
        let n = regular(48, 48, 8, 6).narrow().unwrap();
        assert_eq!((n.span, n.blocks, n.taps), (16, 3, 9));
        // Both layouts: broadcasts over the span, permutes within it.
        assert_eq!(n.packed_len(), HEADER + 3 * 9 * 16 * 16 + 3 * (16 + 9 * 8 * 16));
        // A span wider than a register: the broadcasts alone.
        let n = regular(64, 16, 4, 16).narrow().unwrap();
        assert_eq!((n.span, n.blocks, n.permuted_len()), (64, 1, 0));
    }
}
