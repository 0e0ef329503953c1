//! XNNPACK's dynamically quantized fully connected layers (QD8), for the
//! `qdint8` subgraphs of ExecuTorch's XNNPACK delegate (the dynamic
//! quantizer's linears, the LLM export's `8da4w`).
//!
//! Each row of the `f32` input is quantized when the layer runs, to `i8`
//! with a scale and zero point of its own; the weights are `i8` or 4-bit,
//! with a scale per output channel or per block of `group` inputs. The
//! integer products are exact; the `f32` steps after them follow
//! XNNPACK's x86 kernels operation by operation, fused multiply-adds
//! included, so that the outputs are XNNPACK's to the bit: its AVX2
//! kernels', or on CPUs with AVX-512 VNNI, where XNNPACK sums 4-bit
//! blocks in another order, those ([`BlockwiseOrder`]).
use crate::bf16;
use crate::qs8::round_even;

/// The weights of a layer: `[n, k]`, row-major.
#[derive(Clone, Copy, Debug)]
pub enum Weights<'a> {
    /// `i8` with one scale per output channel (`qcint8`).
    Channelwise8 { w: &'a [i8], scales: &'a [f32] },
    /// 4-bit, stored `w + 8` two to a byte (even `k` in the low nibble),
    /// with one scale per output channel (`qcint4`).
    Channelwise4 { w: &'a [u8], scales: &'a [f32] },
    /// 4-bit as above, with a bf16 scale per block of `group` inputs of
    /// each output channel, `[n, k / group]` (`qbint4`). `kept`: the
    /// layer's buffer after [`prepare_blockwise`] (its weight sums and
    /// repacked weights, made once), or `None` to sum the weights on every
    /// call.
    Blockwise4 {
        w: &'a [u8],
        scales: &'a [bf16],
        group: usize,
        kept: Option<&'a [f32]>,
    },
}

/// A row's quantization: `q = clamp(round_even(x · multiplier) +
/// zero_point)`, `x ≈ (q - zero_point) · scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowQuant {
    pub zero_point: i32,
    pub multiplier: f32,
    /// `1 / multiplier`, rounded: the scale the outputs are multiplied by.
    pub scale: f32,
}

/// XNNPACK's asymmetric parameters of a row whose elements lie in `[min,
/// max]` (`xnn_qd8_asymmetric_quantization_params`): the range is widened
/// to hold 0 and mapped onto the 255 steps of `i8`, the zero point nudged
/// to the side with more room.
pub fn row_quant(min: f32, max: f32) -> RowQuant {
    let (lo, hi) = (min.min(0.0), max.max(0.0));
    let multiplier = if lo == hi { 1.0 } else { 255.0 / (hi - lo) };
    let (dlo, dhi) = (lo * multiplier, hi * multiplier);
    let zp = if (-128.0 + dlo) + (127.0 + dhi) > 0.0 {
        -128.0 - dlo
    } else {
        127.0 - dhi
    };
    RowQuant {
        zero_point: libm::rintf(zp.clamp(-128.0, 127.0)) as i32,
        multiplier,
        scale: 1.0 / multiplier,
    }
}

/// Quantizes one row into `out` (as long as `x`); returns its parameters.
/// The range is taken over 16 lanes (the same minimum and maximum: NaN is
/// passed over, the sign of a zero does not change the parameters), so
/// that it vectorizes where inlined into work compiled for a vector ISA.
#[inline(always)]
pub fn quantize_row(x: &[f32], out: &mut [i8]) -> RowQuant {
    const L: usize = 16;
    let (mut mins, mut maxs) = ([f32::INFINITY; L], [f32::NEG_INFINITY; L]);
    let chunks = x.chunks_exact(L);
    let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
    for &v in chunks.remainder() {
        min = min.min(v);
        max = max.max(v);
    }
    for c in chunks {
        for l in 0..L {
            mins[l] = mins[l].min(c[l]);
            maxs[l] = maxs[l].max(c[l]);
        }
    }
    for l in 0..L {
        min = min.min(mins[l]);
        max = max.max(maxs[l]);
    }
    let q = row_quant(min, max);
    for (o, &v) in out.iter_mut().zip(x) {
        // x86: min(x · m, 32767) (a NaN becomes 32767), round, then
        // saturating packs (`clamp` would keep the NaN).
        #[allow(clippy::manual_clamp)]
        let r = round_even((v * q.multiplier).min(32767.0).max(-32768.0));
        // SAFETY: `r` is an integer in -32768..=32767.
        let r = unsafe { r.to_int_unchecked::<i32>() };
        *o = (r + q.zero_point).clamp(-128, 127) as i8;
    }
    q
}

/// The order of a blockwise 4-bit layer's `f32` steps: XNNPACK's on this
/// CPU. The two give outputs an ulp or so apart, so ExecuTorch's outputs
/// depend on the CPU, and ptec's follow them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockwiseOrder {
    /// XNNPACK's AVX2 kernel (`qd8_f32_qb4w`), on x86 CPUs without AVX-512
    /// VNNI and, as ptec's choice, on every other target: per block, four
    /// partial products, each fused into a lane of its own
    /// (`blockwise_sum`), then `fma(sum, row scale, bias)`.
    Partials,
    /// XNNPACK's AVX-512 VNNI kernels, which it runs over rows quantized to
    /// `u8` (`qdu8_f32_qb4w`, the zero point plus 128): the weight sums
    /// times the zero point first, then one fused multiply-add a block, of
    /// its whole sum, then `sum · row scale + bias`, two roundings
    /// (`blockwise_sum`).
    Blocks,
}

/// The order XNNPACK sums blockwise 4-bit layers in on this CPU: whole
/// blocks where it has AVX-512 VNNI (as XNNPACK detects it: AVX-512 F,
/// BW, VL and VNNI), partials elsewhere.
pub fn blockwise_order() -> BlockwiseOrder {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::has_avx512_vnni() {
        return BlockwiseOrder::Blocks;
    }
    BlockwiseOrder::Partials
}

/// Whether this CPU runs blockwise 4-bit layers over their weights
/// repacked once into the kept buffer (AVX-512 VNNI on x86-64, SDOT on
/// aarch64). Elsewhere the kernels read the nibbles where the program
/// holds them, on every call, so a memory-mapped file's weight pages stay
/// resident.
pub fn repacks_weights() -> bool {
    // Every target has a `repacked_kernel`; where there is none it says no.
    repacked_kernel::available()
}

/// How a quantized row is laid out for the kernel that will read it.
#[derive(Clone, Copy, PartialEq)]
enum RowLayout {
    /// In input order (the scalar paths).
    Plain,
    /// Each 16 inputs in quads ([`into_quads`]), with the block sums (the
    /// aarch64 SDOT kernel).
    Quads,
    /// In quads, each input plus 128 as a `u8`, without block sums (the
    /// x86 VNNI kernel, [`BlockwiseOrder::Blocks`]).
    UnsignedQuads,
    /// Each 64 inputs interleaved (`simd::interleave`; the AVX2 kernel).
    Interleaved,
}

/// Rows of `k` inputs quantized into their scratch rows of `words`
/// floats each ([`row_words`]), with their block sums where the layout
/// takes them.
struct PrepareRows<'a> {
    x: &'a [f32],
    k: usize,
    group: usize,
    layout: RowLayout,
    scratch: &'a mut [f32],
}

impl crate::cpu::Vectorized for PrepareRows<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let PrepareRows {
            x,
            k,
            group,
            layout,
            scratch,
        } = self;
        let words = row_words(k, blocks_of(k, group));
        for (row, x) in scratch.chunks_exact_mut(words).zip(x.chunks_exact(k)) {
            let (bytes, rest) = row.split_at_mut(k.div_ceil(4));
            let xq = &mut as_bytes(bytes)[..k];
            let q = quantize_row(x, xq);
            rest[0] = q.zero_point as f32;
            rest[1] = q.scale;
            if matches!(layout, RowLayout::Quads | RowLayout::Interleaved) {
                block_sums(xq, group, as_i32(&mut rest[2..]));
            }
            match layout {
                RowLayout::Quads => into_quads(xq),
                RowLayout::UnsignedQuads => {
                    into_quads(xq);
                    // `x + 128` as a `u8` is `x` with its sign bit flipped.
                    xq.iter_mut().for_each(|v| *v ^= i8::MIN);
                }
                RowLayout::Interleaved => simd::interleave(xq),
                RowLayout::Plain => {}
            }
        }
    }
}

/// Inputs a thread quantizes at least, when the rows are split (few in
/// tests, so that their small layers split too).
const PREPARE_GRAIN: usize = if cfg!(test) { 16 } else { 1 << 14 };

/// The 4-bit weight at `i` of a packed matrix, signed.
#[inline(always)]
fn nibble(w: &[u8], i: usize) -> i32 {
    let byte = w[i / 2];
    let u = if i.is_multiple_of(2) { byte & 0xf } else { byte >> 4 };
    u as i32 - 8
}

/// Bytes ahead of the weights being summed that a kernel summing a single
/// row (a decoded token) prefetches. Such a row reads each weight once,
/// so the layer runs at the speed of memory, and the hardware's
/// prefetcher alone keeps too few loads in flight: one row through 2048 ×
/// 8192 layers took 27 % less time on one Xeon thread with the VNNI
/// kernel, 35 % on two. Past a weight's end a prefetch reads the next
/// one's, or nothing (it never faults).
#[cfg(target_arch = "x86_64")]
const PREFETCH: usize = 4096;

/// Asks for the cache line [`PREFETCH`] bytes past `p + at`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_ahead(p: *const u8, at: usize) {
    use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: a prefetch reads nothing the program sees and never faults,
    // whatever the address.
    #[allow(unused_unsafe)]
    unsafe {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(at + PREFETCH).cast())
    };
}

/// A bf16 widened to `f32` (exactly).
#[inline(always)]
fn widen(s: bf16) -> f32 {
    f32::from_bits((s.to_bits() as u32) << 16)
}

/// `f32` words of scratch [`fully_connected`] needs for `rows` rows of `k`
/// inputs, with blocks of `group` inputs (0: per-channel weights): each
/// row's quantized copy, its parameters and its block sums.
pub fn scratch_len(rows: usize, k: usize, group: usize) -> usize {
    rows * row_words(k, blocks_of(k, group))
}

/// Blocks of a row of `k` inputs (0 for per-channel weights).
fn blocks_of(k: usize, group: usize) -> usize {
    k.checked_div(group).unwrap_or(0)
}

/// Scratch words of one row: its `k` quantized bytes, its zero point and
/// scale, and four sums per block.
fn row_words(k: usize, blocks: usize) -> usize {
    k.div_ceil(4) + 2 + 4 * blocks
}

/// Header of a blockwise layer's kept weight sums and repacking ("QD8S",
/// `k`, `n`, `group`), in the style of the packed-weight stamp.
fn kept_header(k: usize, n: usize, group: usize) -> [u32; 4] {
    [0x5338_4451, k as u32, n as u32, group as u32]
}

/// Floats a blockwise layer of `k` inputs, `n` outputs and blocks of
/// `group` keeps from run to run ([`prepare_blockwise`]): its stamp and
/// weight sums, then, where the layer's shape allows (blocks of a
/// multiple of 16 inputs), its weights repacked for the AVX-512 VNNI
/// and aarch64 SDOT kernels.
pub fn blockwise_kept_len(k: usize, n: usize, group: usize) -> usize {
    match repacks(k, group) {
        true => repacked_at(n).saturating_add(repacked_len(k, n, group)),
        false => 4 + n,
    }
}

/// Whether a blockwise layer's weights are repacked: blocks of a multiple
/// of 16 inputs (a quad of each of the four partial products, see
/// [`blockwise_sum`]), whole blocks.
fn repacks(k: usize, group: usize) -> bool {
    group > 0 && group.is_multiple_of(16) && k > 0 && k.is_multiple_of(group)
}

/// Where the repacked weights start in the kept floats (a cache line
/// after the stamp and sums).
fn repacked_at(n: usize) -> usize {
    (4 + n).next_multiple_of(16)
}

/// Bytes of the repacking for one block of 16 outputs and one block of
/// `group` inputs: for each two quads of inputs, the 16 outputs' 4
/// weights of each, the first quad's in the low nibbles (stored, `w +
/// 8`). 64-byte vectors, so they stay aligned to cache lines.
fn repacked_block(group: usize) -> usize {
    8 * group
}

/// Bytes of the repacking for one block of 16 outputs (a tile): each
/// input block's weights ([`repacked_block`]), then each input block's 16
/// scales, kept bf16 as XNNPACK keeps them (decoding one token reads every
/// weight once, so its speed is that of memory: half a bit a weight less),
/// padded to a whole cache line.
fn repacked_tile(k: usize, group: usize) -> usize {
    repacked_scales_at(k, group) + (32 * (k / group)).next_multiple_of(64)
}

/// Where a tile's scales start: after all its blocks' weights.
fn repacked_scales_at(k: usize, group: usize) -> usize {
    k / group * repacked_block(group)
}

fn repacked_len(k: usize, n: usize, group: usize) -> usize {
    n.div_ceil(16).saturating_mul(repacked_tile(k, group) / 4)
}

/// Input `e` (of 4) of quad `q` in a block, in the order the kernel takes
/// them: each 16 inputs hold four quads, quad `j` the inputs of partial
/// product `j`, `2j, 2j + 1, 2j + 8, 2j + 9`.
#[inline(always)]
fn quad_input(q: usize, e: usize) -> usize {
    16 * (q / 4) + 2 * (q % 4) + [0, 1, 8, 9][e]
}

/// Reorders a quantized row's inputs into quads ([`quad_input`]).
#[inline(always)]
fn into_quads(xq: &mut [i8]) {
    for chunk in xq.chunks_exact_mut(16) {
        let was: [i8; 16] = core::array::from_fn(|i| chunk[i]);
        for (i, v) in chunk.iter_mut().enumerate() {
            *v = was[quad_input(i / 4, i % 4)];
        }
    }
}

/// Repacks `w` and `scales` (see [`repacked_tile`]) into `out`.
fn repack(w: &[u8], scales: &[bf16], group: usize, k: usize, n: usize, out: &mut [f32]) {
    let blocks = k / group;
    let out = &mut out[..repacked_len(k, n, group)];
    // SAFETY: any bytes are a valid `f32` and the reverse.
    let bytes = unsafe { core::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), out.len() * 4) };
    let stored = |c: usize, i: usize| match c < n {
        true => (nibble(w, c * k + i) + 8) as u8,
        false => 0,
    };
    for (cb, tile) in bytes.chunks_exact_mut(repacked_tile(k, group)).enumerate() {
        let (quads, tail) = tile.split_at_mut(repacked_scales_at(k, group));
        for (b, quads) in quads.chunks_exact_mut(repacked_block(group)).enumerate() {
            for (p, v) in quads.chunks_exact_mut(64).enumerate() {
                for (o, v) in v.chunks_exact_mut(4).enumerate() {
                    for (e, v) in v.iter_mut().enumerate() {
                        let i = |q: usize| b * group + quad_input(q, e);
                        *v = stored(cb * 16 + o, i(2 * p)) | (stored(cb * 16 + o, i(2 * p + 1)) << 4);
                    }
                }
            }
        }
        for (at, s) in tail[..32 * blocks].chunks_exact_mut(2).enumerate() {
            let (b, c) = (at / 16, cb * 16 + at % 16);
            let scale = if c < n { scales[c * blocks + b].to_bits() } else { 0 };
            s.copy_from_slice(&scale.to_le_bytes());
        }
        tail[32 * blocks..].fill(0);
    }
}

/// The weight sums of a blockwise layer (`w` `[n, k]` nibbles, `scales`
/// `[n, k / group]`), which XNNPACK computes when it packs the weights: per
/// output, the sums of each 16 weights times their block's scale,
/// subtracted in order; and the weights repacked where the shape allows.
/// Computed into `kept` (at least [`blockwise_kept_len`] floats) unless
/// it already holds them, so it can run before every call.
pub fn prepare_blockwise(w: &[u8], scales: &[bf16], group: usize, k: usize, n: usize, kept: &mut [f32]) {
    let header = kept_header(k, n, group);
    let kept = &mut kept[..blockwise_kept_len(k, n, group)];
    if !crate::gemm::packing::stamped(kept, &header) {
        let blocks = blocks_of(k, group);
        let (head, rest) = kept.split_at_mut(4);
        for (c, s) in rest[..n].iter_mut().enumerate() {
            *s = ksum(&w[c * k / 2..], k, &scales[c * blocks..][..blocks], group);
        }
        if repacks(k, group) {
            repack(w, scales, group, k, n, &mut rest[repacked_at(n) - 4..]);
        }
        crate::gemm::packing::stamp(head, &header);
    }
}

/// The weight sums in `kept`, and the repacked weights if any, when
/// [`prepare_blockwise`] made them for this layer.
fn kept_sums(kept: &[f32], k: usize, n: usize, group: usize) -> Option<(&[f32], Option<&[f32]>)> {
    let kept = kept.get(..blockwise_kept_len(k, n, group))?;
    let stamped = crate::gemm::packing::stamped(kept, &kept_header(k, n, group));
    let repacked = repacks(k, group).then(|| &kept[repacked_at(n)..]);
    stamped.then(|| (&kept[4..4 + n], repacked))
}

/// `out[r, c] = clamp(x[r, :] · w[c, :] + bias[c], min, max)` over `rows`
/// rows of `k` inputs and `n` outputs, with each input row quantized as
/// XNNPACK does. `scratch`: [`scratch_len`]`(rows, k, group)` floats.
/// With threads, each takes a share of the outputs (and so of the
/// weights); every output is summed in the same order whatever their
/// number. The same as [`quantize_rows`] then
/// [`fully_connected_quantized`].
#[allow(clippy::too_many_arguments)]
pub fn fully_connected(
    x: &[f32],
    rows: usize,
    k: usize,
    n: usize,
    weights: &Weights<'_>,
    bias: Option<&[f32]>,
    min: f32,
    max: f32,
    scratch: &mut [f32],
    out: &mut [f32],
) {
    quantize_rows(x, rows, k, n, weights, scratch);
    fully_connected_quantized(rows, k, n, weights, bias, min, max, scratch, out);
}

/// What a layer's rows are quantized for: its group, its weight sums and
/// repacked weights where kept, and the row layout its kernel reads. The
/// same for every layer of one kind, `k` and group whose kept buffer
/// [`prepare_blockwise`] has filled, so that such layers can share rows.
struct Plan<'a> {
    group: usize,
    ksums: Option<&'a [f32]>,
    repacked: Option<&'a [f32]>,
    order: BlockwiseOrder,
    fast: Option<simd::Blockwise>,
    layout: RowLayout,
    blocks: usize,
    words: usize,
}

impl<'a> Plan<'a> {
    fn of(weights: &Weights<'a>, k: usize, n: usize) -> Plan<'a> {
        let (group, kept) = match *weights {
            Weights::Blockwise4 { group, kept, .. } => (group, kept.and_then(|v| kept_sums(v, k, n, group))),
            _ => (0, None),
        };
        let order = blockwise_order();
        // The repacked weights, where this CPU has the kernel for them.
        let repacked = kept.and_then(|(_, r)| r).filter(|_| repacked_kernel::available());
        let blocks = blocks_of(k, group);
        // The AVX2 kernel sums in its own order only.
        let fast = simd::Blockwise::for_layer(weights, k).filter(|_| order == BlockwiseOrder::Partials);
        let layout = match (repacked, fast) {
            (Some(_), _) if order == BlockwiseOrder::Blocks => RowLayout::UnsignedQuads,
            (Some(_), _) => RowLayout::Quads,
            (None, Some(_)) => RowLayout::Interleaved,
            (None, None) => RowLayout::Plain,
        };
        Plan {
            group,
            ksums: kept.map(|(sums, _)| sums),
            repacked,
            order,
            fast,
            layout,
            blocks,
            words: row_words(k, blocks),
        }
    }
}

/// The first half of [`fully_connected`]: `rows` rows of `k` inputs of `x`
/// quantized into `scratch` ([`scratch_len`]`(rows, k, group)` floats), as
/// the layer of `weights` (`n` outputs) reads them. Layers of the same
/// kind, `k` and group, each prepared ([`prepare_blockwise`]), read the
/// same rows: one quantization serves them all.
pub fn quantize_rows(x: &[f32], rows: usize, k: usize, n: usize, weights: &Weights<'_>, scratch: &mut [f32]) {
    let Plan {
        group, layout, words, ..
    } = Plan::of(weights, k, n);
    let (x, scratch) = (&x[..rows * k], &mut scratch[..rows * words]);
    // Rows quantized in bands across threads (a prompt's rows).
    let grain = PREPARE_GRAIN.div_ceil(k.max(1));
    crate::parallel::for_each_band(scratch, rows, words, grain, true, &|band, scratch| {
        let x = &x[band.start * k..band.end * k];
        crate::cpu::with_best_isa(PrepareRows {
            x,
            k,
            group,
            layout,
            scratch,
        })
    });
}

/// The second half of [`fully_connected`], over rows [`quantize_rows`]
/// made in `scratch` for this layer or one like it.
#[allow(clippy::too_many_arguments)]
pub fn fully_connected_quantized(
    rows: usize,
    k: usize,
    n: usize,
    weights: &Weights<'_>,
    bias: Option<&[f32]>,
    min: f32,
    max: f32,
    scratch: &[f32],
    out: &mut [f32],
) {
    let Plan {
        group,
        ksums,
        repacked,
        order,
        fast,
        blocks,
        words,
        ..
    } = Plan::of(weights, k, n);
    let (out, scratch) = (&mut out[..rows * n], &scratch[..rows * words]);
    if let Some(b) = bias {
        assert!(b.len() >= n, "a bias of {} for {n} outputs", b.len());
    }
    // A row of scratch: its interleaved or plain bytes, block sums, zero
    // point and scale.
    let row_of = |r: usize| {
        let (bytes, rest) = scratch[r * words..][..words].split_at(k.div_ceil(4));
        (&bytes_of(bytes)[..k], as_i32_ref(&rest[2..]), rest[0] as i32, rest[1])
    };
    // x86's max_ps(y, min) then min_ps: a NaN becomes `min`.
    let clamp = |y: f32| {
        let y = if y > min { y } else { min };
        if y < max {
            y
        } else {
            max
        }
    };
    // Each output reads its weight row once, for every row of inputs;
    // `put(r, c, ys)` writes row `r`'s outputs `c..c + ys.len()`.
    // A call writes only columns `c0..c1` of rows `0..rows` of `out`
    // (`rows · n` floats), which the caller gives it alone.
    let columns = |c0: usize, c1: usize, out: *mut f32| {
        // SAFETY: `put(r, c, ys)` writes row `r`'s outputs `c..c +
        // ys.len()`, inside the columns this call was given (above).
        let put = &mut |r: usize, c: usize, ys: &[f32]| unsafe {
            core::ptr::copy_nonoverlapping(ys.as_ptr(), out.add(r * n + c), ys.len())
        };
        if let Some(packed) = repacked {
            // Blocks of 16 outputs, each over every row while its weights
            // are in cache.
            let per = repacked_tile(k, group) / 4;
            let ksums = ksums.unwrap_or_default();
            let tile_at = |c: usize| {
                let at = c / 16 * per;
                Tile {
                    group,
                    blocks,
                    packed: &packed[at..at + per],
                    ksums: core::array::from_fn(|o| ksums.get(c + o).copied().unwrap_or(0.0)),
                    bias: core::array::from_fn(|o| bias.map_or(0.0, |b| b.get(c + o).copied().unwrap_or(0.0))),
                    min,
                    max,
                }
            };
            // A single row (a decoded token) takes four tiles at a time,
            // read and written in place; the rest go one by one.
            #[cfg(target_arch = "x86_64")]
            let c0 = if rows == 1 {
                const T: usize = 4;
                let (row, mut c) = (row_of(0), c0);
                while c + 16 * T <= c1 {
                    let tiles = Tiles {
                        group,
                        blocks,
                        packed: &packed[c / 16 * per..][..T * per],
                        ksums: &ksums[c..c + 16 * T],
                        bias: bias.map(|b| &b[c..c + 16 * T]),
                        min,
                        max,
                    };
                    // SAFETY: columns c..c + 16T < c1 of row 0 (above).
                    let o = unsafe { core::slice::from_raw_parts_mut(out.add(c), 16 * T) };
                    tiles.one_row::<T>(&row, o);
                    c += 16 * T;
                }
                c
            } else {
                c0
            };
            for c in (c0..c1).step_by(16) {
                let cols = 16.min(c1 - c);
                let tile = tile_at(c);
                for r0 in (0..rows).step_by(repacked_kernel::ROWS) {
                    let take = repacked_kernel::ROWS.min(rows - r0);
                    let each: [_; repacked_kernel::ROWS] = core::array::from_fn(|i| row_of(r0 + i.min(take - 1)));
                    let ys = tile.rows(&each);
                    for (i, y) in ys.iter().enumerate().take(take) {
                        put(r0 + i, c, &y[..cols]);
                    }
                }
            }
            return;
        }
        if let (Weights::Blockwise4 { w, scales, .. }, Some(fast)) = (*weights, fast) {
            // Up to `ROWS` rows share each unpacked weight; groups of rows
            // are gathered once for every output.
            const GROUPS: usize = 16;
            for first in (0..rows).step_by(simd::ROWS * GROUPS) {
                let count = (rows - first).div_ceil(simd::ROWS).min(GROUPS);
                let groups: [_; GROUPS] = core::array::from_fn(|g| {
                    let r0 = (first + g * simd::ROWS).min(rows - 1);
                    let take = simd::ROWS.min(rows - r0);
                    let each: [_; simd::ROWS] = core::array::from_fn(|i| row_of(r0 + i.min(take - 1)));
                    let inputs = fast.rows(&each.map(|(xq, sums, _, _)| (xq, sums))[..take]);
                    (r0, take, inputs, each.map(|e| e.2), each.map(|e| e.3))
                });
                for c in c0..c1 {
                    let b = bias.map_or(0.0, |b| b[c]);
                    let s = &scales[c * blocks..][..blocks];
                    let w = &w[c * k / 2..][..k / 2];
                    let ks = ksums.map_or_else(|| ksum(w, k, s, group), |v| v[c]);
                    for (r0, take, inputs, zero_points, row_scales) in &groups[..count] {
                        let sums = fast.sums(inputs, &zero_points.map(|z| ks * z as f32), w, s);
                        for i in 0..*take {
                            put(r0 + i, c, &[clamp(libm::fmaf(sums[i], row_scales[i], b))]);
                        }
                    }
                }
            }
            return;
        }
        for c in c0..c1 {
            let b = bias.map_or(0.0, |b| b[c]);
            // A blockwise output's weight sum, once for all its rows.
            let ks = match *weights {
                Weights::Blockwise4 { w, scales, .. } => {
                    let s = &scales[c * blocks..][..blocks];
                    ksums.map_or_else(|| ksum(&w[c * k / 2..], k, s, group), |v| v[c])
                }
                _ => 0.0,
            };
            for r in 0..rows {
                let (xq, _, zero_point, scale) = row_of(r);
                let y = match *weights {
                    Weights::Channelwise8 { w, scales } => {
                        let acc = simd::centred8(xq, &w[c * k..][..k], zero_point);
                        libm::fmaf(acc as f32 * scale, scales[c], b)
                    }
                    Weights::Channelwise4 { w, scales } if k.is_multiple_of(2) => {
                        let acc = simd::centred4(xq, &w[c * k / 2..][..k / 2], zero_point);
                        libm::fmaf(acc as f32 * scale, scales[c], b)
                    }
                    Weights::Channelwise4 { w, scales } => {
                        let acc = centred_dot(xq, zero_point, |i| nibble(w, c * k + i));
                        libm::fmaf(acc as f32 * scale, scales[c], b)
                    }
                    Weights::Blockwise4 { w, scales, .. } => {
                        let s = &scales[c * blocks..][..blocks];
                        let sum = blockwise_sum(order, xq, zero_point, |i| nibble(w, c * k + i), s, group, ks);
                        match order {
                            BlockwiseOrder::Partials => libm::fmaf(sum, scale, b),
                            BlockwiseOrder::Blocks => sum * scale + b,
                        }
                    }
                };
                put(r, c, &[clamp(y)]);
            }
        }
    };
    let split = crate::parallel::split(n, 16);
    if rows * n * k < 1 << 16 || split.parts() < 2 {
        columns(0, n, out.as_mut_ptr());
        return;
    }
    // SAFETY: part `p` writes only the columns of its range (of every
    // row), which no other part writes or reads; `out` outlives the parts.
    let shared = unsafe { crate::parallel::Shared::new(out.as_mut_ptr()) };
    crate::parallel::run_parts(split.parts(), &|p| {
        let Some((c0, c1)) = split.range(p) else { return };
        columns(c0, c1, shared.get());
    });
}

/// The bytes of a row's scratch words.
fn as_bytes(words: &mut [f32]) -> &mut [i8] {
    // SAFETY: `i8` has no invalid bit patterns and no stricter alignment
    // than `f32`; the bytes are those of `words`, borrowed uniquely.
    unsafe { core::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<i8>(), words.len() * 4) }
}

fn bytes_of(words: &[f32]) -> &[i8] {
    // SAFETY: as in `as_bytes`, shared.
    unsafe { core::slice::from_raw_parts(words.as_ptr().cast::<i8>(), words.len() * 4) }
}

/// Scratch words as `i32` (same size and alignment, any bits valid).
fn as_i32(words: &mut [f32]) -> &mut [i32] {
    // SAFETY: `i32` and `f32` have the same size and alignment and every
    // bit pattern is valid for both; the borrow moves into the result.
    unsafe { core::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<i32>(), words.len()) }
}

fn as_i32_ref(words: &[f32]) -> &[i32] {
    // SAFETY: as in `as_i32`, shared.
    unsafe { core::slice::from_raw_parts(words.as_ptr().cast::<i32>(), words.len()) }
}

/// `sums[4·b + j] = -8 · Σ xq[i]` over the inputs `i` of block `b` with
/// `(i mod 8) / 2 == j`: what the weights' offset of 8 takes from the
/// block's four partial products when they are summed over the stored
/// nibbles (`0..16`) rather than the weights (negated, so that the repacked
/// kernel starts its sums from it).
#[inline(always)]
fn block_sums(xq: &[i8], group: usize, sums: &mut [i32]) {
    for (b, s) in sums.chunks_exact_mut(4).take(blocks_of(xq.len(), group)).enumerate() {
        // Sums by input mod 8, over whole eights then the rest.
        let mut lanes = [0i32; 8];
        let chunks = xq[b * group..(b + 1) * group].chunks_exact(8);
        for (l, &v) in chunks.remainder().iter().enumerate() {
            lanes[l] += v as i32;
        }
        for c in chunks {
            for l in 0..8 {
                lanes[l] += c[l] as i32;
            }
        }
        for (j, s) in s.iter_mut().enumerate() {
            *s = -8 * (lanes[2 * j] + lanes[2 * j + 1]);
        }
    }
}

/// `Σ (xq[i] - zero_point) · w(i)`, wrapping as `i32`.
#[inline(always)]
fn centred_dot(xq: &[i8], zero_point: i32, w: impl Fn(usize) -> i32) -> i32 {
    let mut acc = 0i32;
    let mut wsum = 0i32;
    for (i, &v) in xq.iter().enumerate() {
        let wi = w(i);
        acc = acc.wrapping_add(v as i32 * wi);
        wsum = wsum.wrapping_add(wi);
    }
    acc.wrapping_sub(zero_point.wrapping_mul(wsum))
}

/// The weight sum of one output of a blockwise layer (`row`: its `k`
/// nibbles), as XNNPACK's packing makes it: the sums of each 16 weights
/// times their block's scale, subtracted in order from 0.
fn ksum(row: &[u8], k: usize, scales: &[bf16], group: usize) -> f32 {
    let mut ksum = 0.0f32;
    let mut start = 0;
    while start < k {
        let end = (start + 16).min(k);
        let chunk: i32 = if end - start == 16 && start.is_multiple_of(2) {
            // Eight whole bytes, each two weights stored plus 8.
            row[start / 2..][..8]
                .iter()
                .map(|&b| (b & 15) as i32 + (b >> 4) as i32)
                .sum::<i32>()
                - 128
        } else {
            (start..end).map(|i| nibble(row, i)).sum()
        };
        ksum -= chunk as f32 * widen(scales[start / group]);
        start += 16;
    }
    ksum
}

/// One output of a blockwise 4-bit layer before its row scale and bias,
/// summed in `order`, from the zero point's share (the weight sums `ksum`
/// times the zero point):
/// - [`BlockwiseOrder::Partials`], as XNNPACK's AVX2 kernel: per block
///   four partial products (inputs `i` with `i mod 8` in `{2j, 2j + 1}`),
///   each fused into a lane of its own, and the lanes added in pairs;
/// - [`BlockwiseOrder::Blocks`], as its AVX-512 VNNI kernels: the inputs
///   plus 128 (`u8`, and so the zero point too) times the weights shifted
///   up a nibble (`16 · w`: the kernels keep each nibble in a byte's high
///   half), exact and wrapping as `i32` a block, each block's sum
///   converted and fused with its scale over 16 (XNNPACK keeps that scale
///   as bf16, the same number for any scale of at least 2^-122).
fn blockwise_sum(
    order: BlockwiseOrder,
    xq: &[i8],
    zero_point: i32,
    w: impl Fn(usize) -> i32,
    scales: &[bf16],
    group: usize,
    ksum: f32,
) -> f32 {
    let blocks = scales.iter().map(|&s| widen(s)).enumerate();
    match order {
        BlockwiseOrder::Partials => {
            let mut lanes = [ksum * zero_point as f32, 0.0, 0.0, 0.0];
            for (b, s) in blocks {
                let mut m = [0i32; 4];
                for i in b * group..(b + 1) * group {
                    m[(i % 8) / 2] += xq[i] as i32 * w(i);
                }
                for (lane, &mj) in lanes.iter_mut().zip(&m) {
                    *lane = libm::fmaf(mj as f32, s, *lane);
                }
            }
            (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
        }
        BlockwiseOrder::Blocks => {
            let mut sum = ksum * (zero_point + 128) as f32;
            for (b, s) in blocks {
                let acc = (b * group..(b + 1) * group)
                    .fold(0i32, |acc, i| acc.wrapping_add((xq[i] as i32 + 128) * 16 * w(i)));
                sum = libm::fmaf(acc as f32, s / 16.0, sum);
            }
            sum
        }
    }
}

// The kernel over the repacked weights, where the target has one: AVX-512
// VNNI on x86-64, SDOT (FEAT_DotProd) on aarch64; each checks the CPU.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod sdot;
#[cfg(target_arch = "x86_64")]
mod vnni;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
use sdot as repacked_kernel;
#[cfg(target_arch = "x86_64")]
use vnni as repacked_kernel;

/// `T` tiles one after another in a repacking (`T ·` [`repacked_tile`]
/// bytes from `packed`) and their `16 · T` outputs' weight sums and bias,
/// for a single row (`repacked_kernel::Tiles::one_row`).
#[cfg(target_arch = "x86_64")]
struct Tiles<'a> {
    group: usize,
    blocks: usize,
    packed: &'a [f32],
    ksums: &'a [f32],
    bias: Option<&'a [f32]>,
    min: f32,
    max: f32,
}

/// 16 outputs of a blockwise layer for a repacked kernel
/// (`repacked_kernel::Tile::rows`): their repacked weights (`blocks` blocks of
/// `group` inputs), weight sums, biases and the output clamp.
#[cfg_attr(
    not(any(target_arch = "x86_64", all(target_arch = "aarch64", target_feature = "neon"))),
    allow(dead_code)
)]
struct Tile<'a> {
    group: usize,
    blocks: usize,
    packed: &'a [f32],
    ksums: [f32; 16],
    bias: [f32; 16],
    min: f32,
    max: f32,
}

/// No kernel over the repacked weights on other targets.
#[cfg(not(any(target_arch = "x86_64", all(target_arch = "aarch64", target_feature = "neon"))))]
mod repacked_kernel {
    pub(super) const ROWS: usize = 1;

    pub(super) fn available() -> bool {
        false
    }

    impl super::Tile<'_> {
        pub(super) fn rows(&self, _: &[(&[i8], &[i32], i32, f32); ROWS]) -> [[f32; 16]; ROWS] {
            unreachable!("no repacked kernel on this target")
        }
    }
}

/// The vectorized blockwise layer: the same sums as [`blockwise_sum`], to
/// the bit (the integer partial products are exact in any order; the
/// `f32` steps are the same, in the same order).
#[cfg(target_arch = "x86_64")]
mod simd {
    use super::{bf16, widen, Weights};

    /// Rows of inputs that share each unpacked weight.
    pub(super) const ROWS: usize = 4;

    /// The AVX2 blockwise kernel, for a layer it serves: `k` a multiple of
    /// 64 and blocks of 32 inputs or a multiple of 64. Exists only when the
    /// CPU has AVX2 and FMA.
    #[derive(Clone, Copy)]
    pub(super) struct Blockwise {
        group: usize,
    }

    impl Blockwise {
        pub(super) fn for_layer(weights: &Weights<'_>, k: usize) -> Option<Self> {
            let Weights::Blockwise4 { group, .. } = *weights else {
                return None;
            };
            let shaped = k.is_multiple_of(64) && (group == 32 || (group > 0 && group.is_multiple_of(64)));
            (shaped && crate::cpu::has_avx2_fma()).then_some(Blockwise { group })
        }

        /// Up to [`ROWS`] rows of inputs, checked once for all outputs:
        /// each row's quantized inputs ([`interleave`]d) and
        /// [`super::block_sums`].
        pub(super) fn rows<'a>(self, rows: &[(&'a [i8], &'a [i32])]) -> Rows<'a> {
            let k = rows.first().map_or(0, |r| r.0.len());
            let blocks = k / self.group;
            assert!(k.is_multiple_of(64) && (1..=ROWS).contains(&rows.len()));
            assert!(rows.iter().all(|(xq, sums)| xq.len() == k && sums.len() >= 4 * blocks));
            Rows {
                x: core::array::from_fn(|i| rows[i.min(rows.len() - 1)].0.as_ptr()),
                sums: core::array::from_fn(|i| rows[i.min(rows.len() - 1)].1.as_ptr()),
                count: rows.len(),
                k,
                _rows: core::marker::PhantomData,
            }
        }

        /// [`super::blockwise_sum`] of `rows` against one output: the zero
        /// points' share `firsts`, the output's nibbles `w` and block
        /// scales.
        pub(super) fn sums(self, rows: &Rows<'_>, firsts: &[f32; ROWS], w: &[u8], scales: &[bf16]) -> [f32; ROWS] {
            assert!(w.len() * 2 == rows.k && scales.len() * self.group == rows.k);
            let (x, s) = (rows.x, rows.sums);
            let mut out = [0.0f32; ROWS];
            // SAFETY: `Blockwise` exists only where AVX2 and FMA were
            // detected; `rows` checked its rows' lengths against `k`, and
            // the weights are asserted to match it above.
            unsafe {
                match rows.count {
                    1 => out[..1].copy_from_slice(&blockwise_avx2::<1>(
                        self.group,
                        [x[0]],
                        [s[0]],
                        [firsts[0]],
                        w,
                        scales,
                    )),
                    2 => out[..2].copy_from_slice(&blockwise_avx2::<2>(
                        self.group,
                        [x[0], x[1]],
                        [s[0], s[1]],
                        [firsts[0], firsts[1]],
                        w,
                        scales,
                    )),
                    3 => out[..3].copy_from_slice(&blockwise_avx2::<3>(
                        self.group,
                        [x[0], x[1], x[2]],
                        [s[0], s[1], s[2]],
                        [firsts[0], firsts[1], firsts[2]],
                        w,
                        scales,
                    )),
                    _ => out = blockwise_avx2::<4>(self.group, x, s, *firsts, w, scales),
                }
            }
            out
        }
    }

    /// Rows checked by [`Blockwise::rows`]: row `i`'s inputs (`k` bytes)
    /// and block sums, the last repeated past `count`.
    pub(super) struct Rows<'a> {
        x: [*const i8; ROWS],
        sums: [*const i32; ROWS],
        count: usize,
        k: usize,
        _rows: core::marker::PhantomData<&'a [i8]>,
    }

    /// `Σ (x[i] - zero_point) · w[i]` over `i8` weights, wrapping as `i32`
    /// ([`super::centred_dot`], exact in any order).
    pub(super) fn centred8(x: &[i8], w: &[i8], zero_point: i32) -> i32 {
        let k = x.len();
        assert!(w.len() >= k);
        if !crate::cpu::has_avx2_fma() {
            return super::centred_dot(x, zero_point, |i| w[i] as i32);
        }
        let whole = k / 32 * 32;
        // SAFETY: AVX2 was detected; 32-byte loads below `whole` <= k.
        let (dot, wsum) = unsafe { dot8_avx2(x.as_ptr(), w.as_ptr(), whole) };
        let (mut dot, mut wsum) = (dot, wsum);
        for (&xi, &wi) in x[whole..].iter().zip(&w[whole..k]) {
            dot = dot.wrapping_add(xi as i32 * wi as i32);
            wsum = wsum.wrapping_add(wi as i32);
        }
        dot.wrapping_sub(zero_point.wrapping_mul(wsum))
    }

    /// `(Σ x·w, Σ w)` over the first `len` (a multiple of 32) bytes.
    ///
    /// # Safety
    /// AVX2; `len` bytes readable at `x` and `w`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot8_avx2(x: *const i8, w: *const i8, len: usize) -> (i32, i32) {
        use core::arch::x86_64::*;
        let ones = _mm256_set1_epi16(1);
        let (mut dot, mut wsum) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for at in (0..len).step_by(16) {
            // SAFETY: by the caller (at + 16 <= len).
            let (xv, wv) = unsafe {
                (
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(x.add(at).cast())),
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(w.add(at).cast())),
                )
            };
            dot = _mm256_add_epi32(dot, _mm256_madd_epi16(xv, wv));
            wsum = _mm256_add_epi32(wsum, _mm256_madd_epi16(wv, ones));
        }
        (sum8(dot), sum8(wsum))
    }

    /// `Σ (x[i] - zero_point) · (nibble i of w - 8)`, wrapping as `i32`
    /// (exact in any order).
    pub(super) fn centred4(x: &[i8], w: &[u8], zero_point: i32) -> i32 {
        let k = x.len();
        assert!(w.len() * 2 >= k);
        if !crate::cpu::has_avx2_fma() {
            return super::centred_dot(x, zero_point, |i| super::nibble(w, i));
        }
        let whole = k / 64 * 64;
        // SAFETY: AVX2 was detected; 64 inputs (32 bytes of `w`) at a time
        // below `whole` <= k.
        let (xu, xsum, usum) = unsafe { dot4_avx2(x.as_ptr(), w.as_ptr(), whole) };
        // Σ x·(u - 8) and Σ (u - 8) over the whole chunks.
        let mut dot = xu.wrapping_sub(xsum.wrapping_mul(8));
        let mut wsum = usum.wrapping_sub(8 * whole as i32);
        for (i, &xi) in x.iter().enumerate().skip(whole) {
            let wi = super::nibble(w, i);
            dot = dot.wrapping_add(xi as i32 * wi);
            wsum = wsum.wrapping_add(wi);
        }
        dot.wrapping_sub(zero_point.wrapping_mul(wsum))
    }

    /// `(Σ x·u, Σ x, Σ u)` over the first `len` (a multiple of 64) inputs,
    /// `u` the stored nibbles (`0..16`), `x` in plain order.
    ///
    /// # Safety
    /// AVX2; `len` bytes readable at `x` and `len / 2` at `w`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot4_avx2(x: *const i8, w: *const u8, len: usize) -> (i32, i32, i32) {
        use core::arch::x86_64::*;
        let (ones8, ones16) = (_mm256_set1_epi8(1), _mm256_set1_epi16(1));
        let (mut dot, mut xsum, mut usum) = (_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256());
        for at in (0..len).step_by(64) {
            // SAFETY: by the caller (at + 64 <= len).
            unsafe {
                let [wa, wb] = unpack(w.add(at / 2));
                // The inputs in the unpacked weights' order.
                let xa = _mm256_loadu2_m128i(x.add(at + 32).cast(), x.add(at).cast());
                let xb = _mm256_loadu2_m128i(x.add(at + 48).cast(), x.add(at + 16).cast());
                let t = _mm256_add_epi16(_mm256_maddubs_epi16(wa, xa), _mm256_maddubs_epi16(wb, xb));
                dot = _mm256_add_epi32(dot, _mm256_madd_epi16(t, ones16));
                let xs = _mm256_add_epi16(_mm256_maddubs_epi16(ones8, xa), _mm256_maddubs_epi16(ones8, xb));
                xsum = _mm256_add_epi32(xsum, _mm256_madd_epi16(xs, ones16));
                let zero = _mm256_setzero_si256();
                usum = _mm256_add_epi64(
                    usum,
                    _mm256_add_epi64(_mm256_sad_epu8(wa, zero), _mm256_sad_epu8(wb, zero)),
                );
            }
        }
        let mut u = [0i64; 4];
        // SAFETY: `u` holds four i64.
        unsafe { _mm256_storeu_si256(u.as_mut_ptr().cast(), usum) };
        (sum8(dot), sum8(xsum), u.iter().sum::<i64>() as i32)
    }

    /// The wrapping sum of eight `i32` lanes.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn sum8(v: core::arch::x86_64::__m256i) -> i32 {
        use core::arch::x86_64::*;
        let mut l = [0i32; 8];
        // SAFETY: `l` holds eight i32.
        unsafe { _mm256_storeu_si256(l.as_mut_ptr().cast(), v) };
        l.iter().fold(0i32, |s, &v| s.wrapping_add(v))
    }

    /// Reorders each 64 inputs of a quantized row as the kernel unpacks a
    /// weight's 32 bytes: inputs 0–15, 32–47, 16–31, 48–63.
    #[inline(always)]
    pub(super) fn interleave(xq: &mut [i8]) {
        for chunk in xq.chunks_exact_mut(64) {
            let was: [i8; 64] = core::array::from_fn(|i| chunk[i]);
            for (to, from) in [0, 32, 16, 48].into_iter().enumerate() {
                chunk[16 * to..16 * (to + 1)].copy_from_slice(&was[from..from + 16]);
            }
        }
    }

    /// The nibbles of 64 inputs (32 bytes at `w`), unsigned, in input
    /// order: inputs 0–15 | 32–47, and 16–31 | 48–63.
    ///
    /// # Safety
    /// AVX2; 32 bytes readable at `w`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn unpack(w: *const u8) -> [core::arch::x86_64::__m256i; 2] {
        use core::arch::x86_64::*;
        // SAFETY: by the caller.
        let v = unsafe { _mm256_loadu_si256(w.cast()) };
        let low = _mm256_set1_epi8(0x0f);
        let (lo, hi) = (
            _mm256_and_si256(v, low),
            _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
        );
        [_mm256_unpacklo_epi8(lo, hi), _mm256_unpackhi_epi8(lo, hi)]
    }

    /// The [`unpack`]ed nibbles of 64 inputs times the interleaved row at
    /// `x`: eight `i32`, the four partial products (by `(i mod 8) / 2`) of
    /// inputs 0–31, then those of inputs 32–63, over the stored nibbles
    /// `0..16` (unsigned, so `maddubs` takes them; its pairs of products
    /// are at most 2 · 15 · 128 and cannot saturate).
    ///
    /// # Safety
    /// AVX2; 64 bytes readable at `x`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn dot(w: [core::arch::x86_64::__m256i; 2], x: *const i8) -> core::arch::x86_64::__m256i {
        use core::arch::x86_64::*;
        // SAFETY: by the caller.
        let (xa, xb) = unsafe { (_mm256_loadu_si256(x.cast()), _mm256_loadu_si256(x.add(32).cast())) };
        // Pair p of each half holds inputs 2p, 2p + 1: partial p mod 4.
        let t = _mm256_add_epi16(_mm256_maddubs_epi16(w[0], xa), _mm256_maddubs_epi16(w[1], xb));
        let pairs = _mm256_setr_epi8(
            0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15, 0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15,
        );
        _mm256_madd_epi16(_mm256_shuffle_epi8(t, pairs), _mm256_set1_epi16(1))
    }

    /// `R` rows against one output: row `r`'s interleaved inputs at
    /// `x[r]` (`k` bytes), its block sums at `sums[r]`.
    ///
    /// # Safety
    /// AVX2 and FMA; the lengths [`Blockwise::sums`] asserts.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn blockwise_avx2<const R: usize>(
        group: usize,
        x: [*const i8; R],
        sums: [*const i32; R],
        firsts: [f32; R],
        w: &[u8],
        scales: &[bf16],
    ) -> [f32; R] {
        use core::arch::x86_64::*;
        let k = w.len() * 2;
        let wp = w.as_ptr();
        let mut lanes = firsts.map(|f| _mm_setr_ps(f, 0.0, 0.0, 0.0));
        // A bf16 is the top half of its f32.
        let top = _mm_set1_epi32(0xffff_0000u32 as i32);
        // SAFETY: the loads: chunk `c` reads bytes 32c.. of `w` (below k /
        // 2) and 64c.. of each row (below k); block `b` reads sums 4b..4b
        // + 4 (below 4 · blocks) and scales b, b + 1 (below blocks).
        unsafe {
            if group == 32 {
                for c in 0..k / 64 {
                    if R == 1 && c % 2 == 0 {
                        super::prefetch_ahead(wp, 32 * c);
                    }
                    let wv = unpack(wp.add(32 * c));
                    // Blocks 2c and 2c + 1's scales, widened.
                    let pair = _mm_set1_epi32(scales.as_ptr().add(2 * c).cast::<i32>().read_unaligned());
                    let s0 = _mm_castsi128_ps(_mm_slli_epi32::<16>(pair));
                    let s1 = _mm_castsi128_ps(_mm_and_si128(pair, top));
                    for r in 0..R {
                        let m =
                            _mm256_add_epi32(dot(wv, x[r].add(64 * c)), _mm256_loadu_si256(sums[r].add(8 * c).cast()));
                        let f = _mm256_cvtepi32_ps(m);
                        lanes[r] = _mm_fmadd_ps(_mm256_castps256_ps128(f), s0, lanes[r]);
                        lanes[r] = _mm_fmadd_ps(_mm256_extractf128_ps::<1>(f), s1, lanes[r]);
                    }
                }
            } else {
                let per = group / 64;
                for (b, &s) in scales.iter().enumerate() {
                    let mut acc = [_mm256_setzero_si256(); R];
                    for c in b * per..(b + 1) * per {
                        if R == 1 && c % 2 == 0 {
                            super::prefetch_ahead(wp, 32 * c);
                        }
                        let wv = unpack(wp.add(32 * c));
                        for r in 0..R {
                            acc[r] = _mm256_add_epi32(acc[r], dot(wv, x[r].add(64 * c)));
                        }
                    }
                    let s = _mm_set1_ps(widen(s));
                    for r in 0..R {
                        let m = _mm_add_epi32(_mm256_castsi256_si128(acc[r]), _mm256_extracti128_si256::<1>(acc[r]));
                        let m = _mm_add_epi32(m, _mm_loadu_si128(sums[r].add(4 * b).cast()));
                        lanes[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(m), s, lanes[r]);
                    }
                }
            }
        }
        lanes.map(|v| {
            let mut l = [0.0f32; 4];
            // SAFETY: `l` holds four floats.
            unsafe { _mm_storeu_ps(l.as_mut_ptr(), v) };
            (l[0] + l[1]) + (l[2] + l[3])
        })
    }
}

/// No vectorized kernel off x86-64: every layer takes the scalar sums.
#[cfg(not(target_arch = "x86_64"))]
mod simd {
    use super::{bf16, Weights};

    pub(super) const ROWS: usize = 1;

    #[derive(Clone, Copy)]
    pub(super) struct Blockwise;

    pub(super) struct Rows<'a>(core::marker::PhantomData<&'a [i8]>);

    impl Blockwise {
        pub(super) fn for_layer(_: &Weights<'_>, _: usize) -> Option<Self> {
            None
        }

        pub(super) fn rows<'a>(self, _: &[(&'a [i8], &'a [i32])]) -> Rows<'a> {
            unreachable!("no vectorized blockwise kernel on this target")
        }

        pub(super) fn sums(self, _: &Rows<'_>, _: &[f32; ROWS], _: &[u8], _: &[bf16]) -> [f32; ROWS] {
            unreachable!("no vectorized blockwise kernel on this target")
        }
    }

    pub(super) fn interleave(_: &mut [i8]) {}

    pub(super) fn centred8(x: &[i8], w: &[i8], zero_point: i32) -> i32 {
        super::centred_dot(x, zero_point, |i| w[i] as i32)
    }

    pub(super) fn centred4(x: &[i8], w: &[u8], zero_point: i32) -> i32 {
        super::centred_dot(x, zero_point, |i| super::nibble(w, i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_quantized_over_a_range_holding_zero() {
        // [0.5, 2.0] widens to [0, 2]: 255 / 2 per unit, zero point -128.
        let q = row_quant(0.5, 2.0);
        assert_eq!(q.multiplier, 127.5);
        assert_eq!(q.zero_point, -128);
        assert_eq!(q.scale, 1.0 / 127.5);
        // A row of zeros.
        assert_eq!(
            row_quant(0.0, 0.0),
            RowQuant {
                zero_point: 127,
                multiplier: 1.0,
                scale: 1.0
            }
        );
        let mut xq = [0i8; 4];
        let q = quantize_row(&[-1.0, 1.0, 0.0, 0.25], &mut xq);
        assert_eq!(q.multiplier, 127.5);
        // zero point: -128 + 127.5 = -0.5 → -0 (half to even).
        assert_eq!(q.zero_point, 0);
        assert_eq!(xq, [-128, 127, 0, 32]);
    }

    /// The vectorized row quantization against the definition written out
    /// (the range element by element, each value rounded on its own), on
    /// rows of every length around the 16 lanes, with NaN, a lone
    /// extreme and all-negative rows; the block sums against theirs.
    #[test]
    fn quantized_rows_and_block_sums_follow_their_definitions() {
        extern crate std;
        use std::{vec, vec::Vec};
        let mut seed = 3u64;
        for len in [1, 5, 15, 16, 17, 33, 64, 100, 257] {
            for case in 0..4 {
                let mut x: Vec<f32> = (0..len)
                    .map(|_| (crate::testing::rng(&mut seed) % 2001) as f32 / 100.0 - 10.0)
                    .collect();
                match case {
                    1 => x[len / 2] = f32::NAN,
                    2 => x[len - 1] = 1e6,
                    3 => x.iter_mut().for_each(|v| *v = -v.abs() - 0.5),
                    _ => {}
                }
                let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
                for &v in &x {
                    min = min.min(v);
                    max = max.max(v);
                }
                let want = row_quant(min, max);
                let mut xq = vec![0i8; len];
                assert_eq!(quantize_row(&x, &mut xq), want, "len {len} case {case}");
                for (i, (&q, &v)) in xq.iter().zip(&x).enumerate() {
                    let p = v * want.multiplier;
                    let r = if p.is_nan() {
                        32767
                    } else {
                        libm::rintf(p.clamp(-32768.0, 32767.0)) as i32
                    };
                    assert_eq!(
                        q as i32,
                        (r + want.zero_point).clamp(-128, 127),
                        "len {len} case {case} at {i}"
                    );
                }
                for group in [8, 16, 32].into_iter().filter(|g| len % g == 0) {
                    let mut sums = vec![0i32; 4 * (len / group)];
                    block_sums(&xq, group, &mut sums);
                    for (i, s) in sums.iter().enumerate() {
                        let (b, j) = (i / 4, i % 4);
                        let want: i32 = (b * group..(b + 1) * group)
                            .filter(|e| (e % 8) / 2 == j)
                            .map(|e| -8 * xq[e] as i32)
                            .sum();
                        assert_eq!(*s, want, "len {len} group {group} sum {i}");
                    }
                }
            }
        }
    }

    #[test]
    fn channelwise_outputs_are_the_exact_sum_scaled() {
        let x = [0.3f32, -0.7, 1.1, 0.0, 2.0, -2.0, 0.5, 0.25];
        let w: [i8; 8] = [3, -5, 7, 1, -2, 4, 0, 6];
        let run = |weights: Weights<'_>| {
            let (mut scratch, mut out) = ([0f32; 8], [0f32; 4]);
            fully_connected(
                &x,
                2,
                4,
                2,
                &weights,
                Some(&[1.0, -1.0]),
                -100.0,
                100.0,
                &mut scratch,
                &mut out,
            );
            out
        };
        let out = run(Weights::Channelwise8 {
            w: &w,
            scales: &[0.5, 0.25],
        });
        for r in 0..2 {
            let mut q8 = [0i8; 4];
            let q = quantize_row(&x[r * 4..][..4], &mut q8);
            for c in 0..2 {
                let acc: i32 = (0..4)
                    .map(|i| (q8[i] as i32 - q.zero_point) * w[c * 4 + i] as i32)
                    .sum();
                let want = libm::fmaf(acc as f32 * q.scale, [0.5, 0.25][c], [1.0, -1.0][c]);
                assert_eq!(out[r * 2 + c], want);
            }
        }
        // The same weights as nibbles (w + 8, even k low) give the same.
        let packed: [u8; 4] = core::array::from_fn(|j| ((w[2 * j] + 8) as u8) | (((w[2 * j + 1] + 8) as u8) << 4));
        let out4 = run(Weights::Channelwise4 {
            w: &packed,
            scales: &[0.5, 0.25],
        });
        assert_eq!(out, out4);
    }

    #[test]
    fn blockwise_outputs_approximate_the_real_product() {
        // One output of k = 64 in two blocks of 32.
        let x: [f32; 64] = core::array::from_fn(|i| ((i * 37 % 17) as f32 - 8.0) / 8.0);
        let wv: [i32; 64] = core::array::from_fn(|i| (i * 5 % 16) as i32 - 8);
        let packed: [u8; 32] = core::array::from_fn(|j| ((wv[2 * j] + 8) as u8) | (((wv[2 * j + 1] + 8) as u8) << 4));
        let scales = [bf16::from_f32(0.25), bf16::from_f32(0.5)];
        let mut scratch = [0f32; 26];
        let mut out = [0f32; 1];
        let weights = Weights::Blockwise4 {
            w: &packed,
            scales: &scales,
            group: 32,
            kept: None,
        };
        fully_connected(
            &x,
            1,
            64,
            1,
            &weights,
            None,
            f32::NEG_INFINITY,
            f32::INFINITY,
            &mut scratch,
            &mut out,
        );
        let real: f32 = (0..64)
            .map(|i| x[i] * wv[i] as f32 * if i < 32 { 0.25 } else { 0.5 })
            .sum();
        // Within the activations' quantization error.
        assert!((out[0] - real).abs() < 0.1, "{} vs {real}", out[0]);
    }

    /// Blockwise layers (the vectorized kernel with blocks of 32, 64 and
    /// 128, the scalar sums for other shapes; several rows; one and two
    /// threads; kept and unkept weight sums; kept ones through the
    /// repacked kernel where the CPU has one, x86 VNNI or aarch64 SDOT)
    /// give the reference's bits:
    /// each row quantized by `quantize_row`, the weight sums made weight by
    /// weight, each output `fmaf(blockwise_sum, scale, bias)`, clamped, or
    /// where XNNPACK sums whole blocks, their sums written out here.
    #[cfg(feature = "std")]
    #[test]
    fn blockwise_layers_give_the_scalar_sums_bits() {
        extern crate std;
        use std::vec::Vec;
        // WASI has no threads (nor the turn): two threads run as one there.
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut seed = 7u64;
        let mut next = || crate::testing::rng(&mut seed);
        // Whether the two orders ever give other bits (else this test
        // could not tell them apart).
        let mut differ = false;
        for (rows, k, n, group) in [
            (1, 64, 3, 32),
            (3, 128, 17, 32),
            (2, 256, 40, 64),
            (1, 512, 300, 128),
            (5, 192, 9, 64),
            (1, 2048, 64, 32),
            // More rows than one gathering of row groups (64).
            (70, 64, 5, 32),
            // Scalar sums: k not a multiple of 64, a partial 16 weights.
            (2, 40, 5, 8),
            (3, 96, 7, 32),
            // Repacked: blocks of 16, row counts 1 to 4 past whole tiles,
            // outputs past whole blocks of 16.
            (6, 48, 33, 16),
            (7, 160, 20, 32),
            (9, 256, 16, 128),
        ] {
            // Under Miri the layers of at most 2^13 multiply-adds: blocks
            // of 8 (a partial 16 weights, not repacked) and of 32 (repacked,
            // a partial tile and one past a whole one), several rows, one
            // row; the portable sums take any block length alike.
            if crate::testing::too_large_for_miri(rows * k * n, 1 << 13) {
                continue;
            }
            let blocks = k / group;
            // Rows of mixed signs and ranges; one all positive, one tiny.
            let x: Vec<f32> = (0..rows * k)
                .map(|i| {
                    let v = (next() % 2001) as f32 / 1000.0 - 1.0;
                    match i / k {
                        1 => v.abs() * 3.0,
                        2 => v * 1e-3,
                        _ => v * (1 + i % 7) as f32,
                    }
                })
                .collect();
            let w: Vec<u8> = (0..n * k / 2).map(|_| next() as u8).collect();
            let scales: Vec<bf16> = (0..n * blocks)
                .map(|_| bf16::from_f32((1 + next() % 1000) as f32 * 1e-4))
                .collect();
            let bias: Vec<f32> = (0..n).map(|_| (next() % 200) as f32 / 100.0 - 1.0).collect();
            let (min, max) = (-3.0f32, 2.5f32);
            let mut want = Vec::new();
            for r in 0..rows {
                let mut xq = std::vec![0i8; k];
                let q = quantize_row(&x[r * k..][..k], &mut xq);
                for c in 0..n {
                    let s = &scales[c * blocks..][..blocks];
                    let wc = |i| nibble(&w, c * k + i);
                    let ks = {
                        // XNNPACK's packing, weight by weight.
                        let mut ks = 0.0f32;
                        for start in (0..k).step_by(16) {
                            let chunk: i32 = (start..(start + 16).min(k)).map(wc).sum();
                            ks -= chunk as f32 * widen(s[start / group]);
                        }
                        ks
                    };
                    let partials = {
                        let sum = blockwise_sum(BlockwiseOrder::Partials, &xq, q.zero_point, wc, s, group, ks);
                        libm::fmaf(sum, q.scale, bias[c])
                    };
                    // XNNPACK's VNNI kernels, written out: `u8` inputs,
                    // weights times 16, scales over 16, a sum a block.
                    let blocks_order = {
                        let mut sum = ks * (q.zero_point + 128) as f32;
                        for (b, &sb) in s.iter().enumerate() {
                            let acc: i32 = (b * group..(b + 1) * group)
                                .map(|i| (xq[i] as u8 ^ 0x80) as i32 * (16 * wc(i)))
                                .sum();
                            sum = libm::fmaf(acc as f32, sb.to_f32() * 0.0625, sum);
                        }
                        sum * q.scale + bias[c]
                    };
                    differ |= partials.to_bits() != blocks_order.to_bits();
                    let y = match blockwise_order() {
                        BlockwiseOrder::Partials => partials,
                        BlockwiseOrder::Blocks => blocks_order,
                    };
                    want.push(y.max(min).min(max));
                }
            }
            let mut kept = std::vec![0f32; blockwise_kept_len(k, n, group)];
            for (threads, keep) in [(1, false), (2, false), (1, true), (2, true)] {
                // Under Miri each of the weight sums (made, kept) once, and
                // the rows quantized on one thread and in bands on two.
                if cfg!(miri) && (threads == 2) == keep {
                    continue;
                }
                crate::parallel::set_threads(threads);
                if keep {
                    prepare_blockwise(&w, &scales, group, k, n, &mut kept);
                }
                let weights = Weights::Blockwise4 {
                    w: &w,
                    scales: &scales,
                    group,
                    kept: keep.then_some(&kept[..]),
                };
                let mut scratch = std::vec![0f32; scratch_len(rows, k, group)];
                let mut out = std::vec![0f32; rows * n];
                fully_connected(&x, rows, k, n, &weights, Some(&bias), min, max, &mut scratch, &mut out);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&out),
                    bits(&want),
                    "{rows}x{k}x{n}, group {group}, {threads} threads, kept {keep}"
                );
            }
            crate::parallel::set_threads(1);
            // A second preparation finds the sums (and repacking) in place.
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            let before = bits(&kept);
            prepare_blockwise(&w, &scales, group, k, n, &mut kept);
            assert_eq!(before, bits(&kept));
        }
        assert!(differ, "the two orders gave the same bits everywhere");
    }

    /// Prepared blockwise layers of one `k` and group (q, k and v of a
    /// transformer's attention, its gate and up) read the rows one
    /// [`quantize_rows`] made for any of them: each gives the bits of its
    /// own [`fully_connected`], on one and two threads, a row or several.
    #[cfg(feature = "std")]
    #[test]
    fn layers_of_one_shape_share_quantized_rows() {
        extern crate std;
        use std::vec::Vec;
        #[cfg(not(target_os = "wasi"))]
        let _turn = crate::parallel::tests::TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut seed = 11u64;
        let mut next = || crate::testing::rng(&mut seed);
        let cases = [
            (1, 576, 32, [576, 192, 40]),
            (9, 576, 32, [192, 576, 17]),
            (3, 256, 64, [16, 300, 33]),
            (2, 40, 8, [5, 7, 16]),
        ];
        // Under Miri (no repacked kernel) a row and two, small: blocks of
        // 32 (whose preparation repacks) and of 8.
        let miri = [(1, 64, 32, [16, 8, 3]), (2, 40, 8, [5, 7, 16])];
        for (rows, k, group, ns) in if cfg!(miri) { &miri[..] } else { &cases[..] }.iter().copied() {
            let x: Vec<f32> = (0..rows * k).map(|_| (next() % 2001) as f32 / 500.0 - 2.0).collect();
            let layers: Vec<(Vec<u8>, Vec<bf16>, Vec<f32>)> = ns
                .iter()
                .map(|&n| {
                    let w = (0..n * k / 2).map(|_| next() as u8).collect();
                    let scales = (0..n * k / group)
                        .map(|_| bf16::from_f32((1 + next() % 1000) as f32 * 1e-4))
                        .collect();
                    (w, scales, std::vec![0f32; blockwise_kept_len(k, n, group)])
                })
                .collect();
            let layers: Vec<_> = layers
                .into_iter()
                .zip(ns)
                .map(|((w, scales, mut kept), n)| {
                    prepare_blockwise(&w, &scales, group, k, n, &mut kept);
                    (w, scales, kept, n)
                })
                .collect();
            fn weights(layer: &(Vec<u8>, Vec<bf16>, Vec<f32>, usize), group: usize) -> Weights<'_> {
                Weights::Blockwise4 {
                    w: &layer.0,
                    scales: &layer.1,
                    group,
                    kept: Some(&layer.2),
                }
            }
            for threads in [1, 2] {
                crate::parallel::set_threads(threads);
                let mut shared = std::vec![f32::NAN; scratch_len(rows, k, group)];
                quantize_rows(&x, rows, k, ns[1], &weights(&layers[1], group), &mut shared);
                for layer in &layers {
                    let n = layer.3;
                    let (mut want, mut got) = (std::vec![0f32; rows * n], std::vec![0f32; rows * n]);
                    let mut scratch = std::vec![0f32; scratch_len(rows, k, group)];
                    let w = weights(layer, group);
                    fully_connected(&x, rows, k, n, &w, None, -9.0, 9.0, &mut scratch, &mut want);
                    fully_connected_quantized(rows, k, n, &w, None, -9.0, 9.0, &shared, &mut got);
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "{rows}x{k}x{n}, group {group}, {threads} threads"
                    );
                }
            }
            crate::parallel::set_threads(1);
        }
    }

    /// Per-channel layers (int8 and 4-bit weights; whole vectors and
    /// tails) give the exact sums: `fmaf(Σ (xq - zp) · w · row scale,
    /// channel scale, bias)`, the sum taken in `i64` here.
    #[cfg(feature = "std")]
    #[test]
    fn channelwise_layers_give_the_exact_sums() {
        extern crate std;
        use std::vec::Vec;
        let mut seed = 11u64;
        let mut next = || crate::testing::rng(&mut seed);
        for (rows, k, n) in [(1, 24, 5), (2, 64, 7), (3, 100, 4), (1, 256, 33), (2, 130, 3)] {
            // Under Miri the layers of at most 2^12 multiply-adds: one row
            // and several, whole vectors and tails.
            if crate::testing::too_large_for_miri(rows * k * n, 1 << 12) {
                continue;
            }
            let x: Vec<f32> = (0..rows * k).map(|_| (next() % 2001) as f32 / 500.0 - 2.5).collect();
            let w8: Vec<i8> = (0..n * k).map(|_| next() as i8).collect();
            let w4: Vec<u8> = (0..n * k / 2).map(|_| next() as u8).collect();
            let scales: Vec<f32> = (0..n).map(|_| (1 + next() % 100) as f32 * 1e-3).collect();
            let bias: Vec<f32> = (0..n).map(|_| (next() % 200) as f32 / 100.0 - 1.0).collect();
            for four in [false, true] {
                let weight = |c: usize, i: usize| {
                    if four {
                        nibble(&w4, c * k + i)
                    } else {
                        w8[c * k + i] as i32
                    }
                };
                let mut want = Vec::new();
                for r in 0..rows {
                    let mut xq = std::vec![0i8; k];
                    let q = quantize_row(&x[r * k..][..k], &mut xq);
                    for c in 0..n {
                        let acc: i64 = (0..k)
                            .map(|i| (xq[i] as i64 - q.zero_point as i64) * weight(c, i) as i64)
                            .sum();
                        want.push(libm::fmaf(acc as i32 as f32 * q.scale, scales[c], bias[c]).clamp(-50.0, 50.0));
                    }
                }
                let weights = if four {
                    Weights::Channelwise4 {
                        w: &w4,
                        scales: &scales,
                    }
                } else {
                    Weights::Channelwise8 {
                        w: &w8,
                        scales: &scales,
                    }
                };
                let mut scratch = std::vec![0f32; scratch_len(rows, k, 0)];
                let mut out = std::vec![0f32; rows * n];
                fully_connected(
                    &x,
                    rows,
                    k,
                    n,
                    &weights,
                    Some(&bias),
                    -50.0,
                    50.0,
                    &mut scratch,
                    &mut out,
                );
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&out), bits(&want), "{rows}x{k}x{n}, 4-bit {four}");
            }
        }
    }
}
