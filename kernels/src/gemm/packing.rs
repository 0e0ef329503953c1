//! The layout of a packed `B`, the right operand of every product.
//!
//! `B` (`k × n`, usually a weight matrix) is packed by [`pack`] into strips
//! of [`NR`] columns, each holding all `k` rows (strip `s`, row `q`, column
//! `j` at `HEADER + s·k·NR + q·NR + j`, zero past `n`, but see
//! [`repeat_tail`]), so that a micro-kernel reads a row of a strip as
//! whole vectors. The packing starts with a header naming its shape, so a
//! buffer packed on a model's first run is recognised ([`is_packed`]) and
//! reused by later runs. [`super::sgemm`] packs blocks of a run-time `B`
//! the same way, without the header ([`pack_block`]).

/// Columns per packed strip.
pub const NR: usize = 32;

/// Floats before the strips: the header.
const HEADER: usize = 16;

/// First header word of a packing ("PKP2": strips of 17 to 24 columns
/// repeat their last 8, see [`repeat_tail`]).
const MAGIC: u32 = 0x3250_4b50;

/// Length, in `f32`, of a `k × n` matrix packed by [`pack`].
pub fn packed_len(k: usize, n: usize) -> usize {
    HEADER + k * n.div_ceil(NR) * NR
}

/// The header of a `k × n` packing.
fn header(k: usize, n: usize) -> [u32; 5] {
    [
        MAGIC,
        k as u32,
        ((k as u64) >> 32) as u32,
        n as u32,
        ((n as u64) >> 32) as u32,
    ]
}

/// The strips of a packing (what follows its header).
pub(crate) fn strips(packed: &[f32]) -> &[f32] {
    &packed[HEADER.min(packed.len())..]
}

/// Whether `packed` holds a `k × n` packing made by [`pack`].
pub fn is_packed(packed: &[f32], k: usize, n: usize) -> bool {
    packed.len() >= packed_len(k, n) && stamped(packed, &header(k, n))
}

/// Whether `head` starts with the bits of `words`: the stamp that says a
/// buffer kept from run to run already holds what a kernel prepares in it.
pub(crate) fn stamped(head: &[f32], words: &[u32]) -> bool {
    head.len() >= words.len() && words.iter().zip(head).all(|(&w, v)| v.to_bits() == w)
}

/// Whether a buffer kept from run to run holds a preparation already, by
/// any kernel: kept buffers start zeroed and every stamp starts with a
/// nonzero magic word. Generated code asks before preparing, to know
/// whether this run is the one that reads the constants it prepares from.
pub fn holds_stamp(kept: &[f32]) -> bool {
    kept.first().is_some_and(|v| v.to_bits() != 0)
}

/// Writes the stamp `words` into `head` (its other floats zero): last, once
/// what it vouches for is whole.
pub(crate) fn stamp(head: &mut [f32], words: &[u32]) {
    head.fill(0.0);
    for (v, &w) in head.iter_mut().zip(words) {
        *v = f32::from_bits(w);
    }
}

/// Packs `b` — `k × n` row-major, or `n × k` row-major when `b_trans` (a
/// PyTorch or XNNPACK weight) — into `packed` (at least
/// [`packed_len`]`(k, n)` floats).
pub fn pack(b: &[f32], k: usize, n: usize, b_trans: bool, packed: &mut [f32]) {
    let packed = &mut packed[..packed_len(k, n)];
    let b = &b[..k * n];
    let (head, body) = packed.split_at_mut(HEADER);
    if k > 0 {
        pack_block(b, b_trans, (k, n), 1.0, (0, n), (0, k), body);
    }
    stamp(head, &header(k, n));
}

/// Packs `alpha ·` columns `jc..jc+nc`, depth `pc..pc+kc` of `B` (`b`:
/// `k × n` row-major, or `n × k` when `b_trans`) into [`NR`]-column
/// strips: strip `s` holds `alpha · B(pc + q, jc + s·NR + j)`
/// at `s·kc·NR + q·NR + j`, zero past `nc` (but see [`repeat_tail`]).
pub(super) fn pack_block(
    b: &[f32],
    b_trans: bool,
    (k, n): (usize, usize),
    alpha: f32,
    (jc, nc): (usize, usize),
    (pc, kc): (usize, usize),
    out: &mut [f32],
) {
    for (s, strip) in out[..nc.div_ceil(NR) * kc * NR].chunks_exact_mut(kc * NR).enumerate() {
        let j0 = jc + s * NR;
        let cols = NR.min(jc + nc - j0);
        if !b_trans {
            for (q, d) in strip.chunks_exact_mut(NR).enumerate() {
                let src = &b[(pc + q) * n + j0..][..cols];
                for (x, &v) in d.iter_mut().zip(src) {
                    *x = alpha * v;
                }
                d[cols..].fill(0.0);
            }
            repeat_tail(strip, cols);
            continue;
        }
        // Stored transposed: column j of the strip is row j0 + j of `b`.
        // Eight of those rows at a time, eight deep, go through a
        // fixed-size tile: contiguous reads, contiguous writes.
        const T: usize = 8;
        if cols < NR {
            strip.fill(0.0);
        }
        for jj0 in (0..cols).step_by(T) {
            let rows = T.min(cols - jj0);
            let src: [&[f32]; T] = core::array::from_fn(|r| {
                let row = j0 + jj0 + r.min(rows - 1);
                &b[row * k + pc..][..kc]
            });
            let mut q0 = 0;
            while q0 + T <= kc {
                let tile: [[f32; T]; T] = core::array::from_fn(|r| src[r][q0..q0 + T].try_into().expect("8 floats"));
                for t in 0..T {
                    let d: &mut [f32; T] = (&mut strip[(q0 + t) * NR + jj0..][..T]).try_into().expect("8 floats");
                    for (r, x) in d.iter_mut().enumerate().take(rows) {
                        *x = alpha * tile[r][t];
                    }
                }
                q0 += T;
            }
            for q in q0..kc {
                for r in 0..rows {
                    strip[q * NR + jj0 + r] = alpha * src[r][q];
                }
            }
        }
        repeat_tail(strip, cols);
    }
}

/// The columns 16.. of a strip holding 17 to 24 (a product 24 columns
/// wide, MobileNetV2's projections) are copied into lanes 24..32 of each
/// row: one vector of the strip then serves two rows of `A` at once (see
/// `tile_avx512_pairs` in `avx512`) instead of wasting half its lanes. The other
/// tiles never store columns past the strip's, so the copy is harmless to
/// them.
fn repeat_tail(strip: &mut [f32], cols: usize) {
    if (17..=24).contains(&cols) {
        for row in strip.chunks_exact_mut(NR) {
            row.copy_within(16..24, 24);
        }
    }
}

/// Packs the `k × n` matrix whose row `q`, column `j` is `b(q, j)` into
/// `packed` (at least [`packed_len`]`(k, n)` floats): for operands kept in
/// another layout, or rescaled as they are packed.
pub fn pack_with(k: usize, n: usize, packed: &mut [f32], b: impl Fn(usize, usize) -> f32) {
    let packed = &mut packed[..packed_len(k, n)];
    let (head, body) = packed.split_at_mut(HEADER);
    if k > 0 {
        for (s, strip) in body.chunks_exact_mut(k * NR).enumerate() {
            for (q, row) in strip.chunks_exact_mut(NR).enumerate() {
                for (jj, v) in row.iter_mut().enumerate() {
                    let j = s * NR + jj;
                    *v = if j < n { b(q, j) } else { 0.0 };
                }
            }
            repeat_tail(strip, NR.min(n - s * NR));
        }
    }
    stamp(head, &header(k, n));
}

/// `packed`, holding `b` packed: packed now unless an earlier call already
/// did. `packed` must belong to `b` alone.
pub fn ensure_packed<'p>(b: &[f32], k: usize, n: usize, b_trans: bool, packed: &'p mut [f32]) -> &'p [f32] {
    if !is_packed(packed, k, n) {
        pack(b, k, n, b_trans, packed);
    }
    packed
}
