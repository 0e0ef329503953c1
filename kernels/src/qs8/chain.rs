//! Int8 inverted residual blocks run band by band: a pointwise expansion,
//! a depthwise convolution and a pointwise projection (or the depthwise
//! convolution with only one of the two), as [`crate::nhwc::chain`] runs
//! the fp32 ones, but for RAM rather than cache: the expansion's rows a
//! band of depthwise output rows needs are computed just before into a
//! buffer of a few rows, and the band is projected straight into the
//! output, so neither intermediate ever exists whole (MobileNetV2's first
//! expansion is 112 × 112 × 96 bytes).
//!
//! Every stage is the unchained kernel ([`conv2d_nhwc`]) on a few rows:
//! a pointwise convolution's rows are independent, and a depthwise one's
//! band is the same window over the rows it reads, its top padding what is
//! left above them. Each stage requantizes to `i8` with its own parameters
//! and the next reads those bytes, so the results are the unchained ones
//! to the bit. Expansion rows a band shares with the next (the taps'
//! overlap) move to the front of the buffer instead of being recomputed.
use super::{conv2d_nhwc, Output, Quant};
use crate::nhwc::{ChainPlan as Plan, Conv2dNhwc};

/// About how many bytes a band's buffers hold at most (at least one
/// depthwise output row's worth): little, for a microcontroller's RAM.
const BAND_BYTES: usize = 64 * 1024;

/// One convolution of a chain, as [`conv2d_nhwc`] takes it.
#[derive(Clone, Copy)]
pub struct ChainStage<'a> {
    pub g: &'a Conv2dNhwc,
    pub w: &'a [i8],
    pub w_scales: &'a [f32],
    pub bias: Option<&'a [i32]>,
    /// A pointwise stage's filter packed by [`super::pack_conv`].
    pub packed: Option<&'a [f32]>,
    pub xq: Quant,
    pub y: Output,
}

impl AsRef<Conv2dNhwc> for ChainStage<'_> {
    fn as_ref(&self) -> &Conv2dNhwc {
        self.g
    }
}

/// Bytes of a chain's expansion rows and of its band of depthwise output.
fn buffers<G: AsRef<Conv2dNhwc>>(plan: &Plan, stages: &[G]) -> Option<(usize, usize)> {
    let dw = stages[plan.depthwise()].as_ref();
    let win = &dw.window;
    let expansion = match plan.expand {
        true => plan.buffer_rows.checked_mul(win.in_w)?.checked_mul(dw.in_c)?,
        false => 0,
    };
    let band = match plan.project {
        true => plan.out_rows.checked_mul(win.out_w)?.checked_mul(dw.out_c)?,
        false => 0,
    };
    Some((expansion, band))
}

/// A 1 × 1 convolution of stride 1, no padding, one group.
fn pointwise(g: &Conv2dNhwc) -> bool {
    let w = &g.window;
    (w.kernel_h, w.kernel_w, w.stride_h, w.stride_w, w.pad_top, w.pad_left) == (1, 1, 1, 1, 0, 0)
        && (w.in_h, w.in_w) == (w.out_h, w.out_w)
        && g.groups == 1
}

/// One output per input channel, each of its own group.
fn depthwise(g: &Conv2dNhwc) -> bool {
    g.groups == g.in_c && g.out_c == g.in_c
}

/// Rows of input one output row's window spans.
fn span(w: &crate::nhwc::Window2d) -> usize {
    w.dilation_h * (w.kernel_h - 1) + 1
}

/// How `stages` run as a chain, or `None` when they are not a pointwise
/// then a depthwise convolution, a depthwise then a pointwise one, or all
/// three, each reading what the previous one writes.
fn plan<G: AsRef<Conv2dNhwc>>(stages: &[G], budget: usize) -> Option<Plan> {
    let (pw, dw) = (
        |i: usize| pointwise(stages[i].as_ref()),
        |i: usize| depthwise(stages[i].as_ref()),
    );
    let (expand, project) = match stages.len() {
        2 if pw(0) && dw(1) => (true, false),
        2 if dw(0) && pw(1) => (false, true),
        3 if pw(0) && dw(1) && pw(2) => (true, true),
        _ => return None,
    };
    let feeds = stages.windows(2).all(|p| {
        let (a, b) = (p[0].as_ref(), p[1].as_ref());
        let w = &b.window;
        [w.batch, w.in_h, w.in_w, b.in_c] == a.output_sizes()
    });
    let win = &stages[usize::from(expand)].as_ref().window;
    let span = span(win);
    // Padding shallower than the window keeps at least one input row in
    // every band (see `conv2d_chain`).
    let bottom = ((win.out_h.max(1) - 1) * win.stride_h + span).saturating_sub(win.pad_top + win.in_h);
    if !(feeds && win.pad_top < span && bottom < span && win.in_w > 0 && win.out_h > 0 && win.out_w > 0) {
        return None;
    }
    let s = win.stride_h;
    let c = stages[usize::from(expand)].as_ref().in_c.max(1);
    // Output rows o0 .. o0 + n read (n - 1)·s + span input rows.
    let row_bytes = if expand { win.in_w * c } else { win.out_w * c };
    let fit = budget / row_bytes.max(1);
    let out_rows = match expand {
        true => fit.saturating_sub(span) / s + 1,
        false => fit,
    };
    let shape = Plan {
        expand,
        project,
        out_rows: 1,
        buffer_rows: 0,
    };
    Some(banded(stages, shape, out_rows))
}

/// `plan` with bands of `out_rows` output rows (at least one, at most all)
/// and the expansion rows they read.
fn banded<G: AsRef<Conv2dNhwc>>(stages: &[G], plan: Plan, out_rows: usize) -> Plan {
    let win = &stages[plan.depthwise()].as_ref().window;
    let out_rows = out_rows.clamp(1, win.out_h);
    Plan {
        out_rows,
        // No more than the whole input (the last band's may lie partly in
        // the padding).
        buffer_rows: if plan.expand {
            ((out_rows - 1) * win.stride_h + span(win)).min(win.in_h)
        } else {
            0
        },
        ..plan
    }
}

/// Bytes of scratch [`conv2d_chain`] needs for `stages`, or `None` when
/// they do not make a chain (see the module docs): two parts' bands of
/// about 64 KiB each, so that on two threads each part's bands are as
/// large as one thread's. Halved, a part's bands at MobileNetV2's 56 x 56
/// x 144 were two rows, each moving half its expansion rows to the next
/// and calling three kernels for 112 pixels: its chains then gained 1.3x
/// from a second thread, and the model 0.92x of its two-thread time came
/// back with whole bands (Zen 5). The 64 KiB more sits in the plan's free
/// space when it has room (MobileNetV2's arena grows 5 %); the Cortex-M
/// models' blocks are too small to chain.
pub fn chain_scratch_len(stages: &[Conv2dNhwc]) -> Option<usize> {
    needs(stages, BAND_BYTES)?.checked_mul(2)
}

/// `out = stages[last](… stages[0](x))`, band by band (see the module
/// docs), in `scratch` of at least [`chain_scratch_len`] bytes. `out`
/// must not be `x` (a residual added after the chain reads `x`).
pub fn conv2d_chain(stages: &[ChainStage<'_>], x: &[i8], out: &mut [i8], scratch: &mut [i8]) {
    chain(stages, x, out, scratch, BAND_BYTES)
}

/// [`conv2d_chain`] with bands of about `budget` bytes.
///
/// With more than one thread the output rows are cut into parts, one a
/// thread, each with its own share of the scratch and bands planned to fit
/// it: the threads meet once a chain, not at every stage of every band
/// (bands of 64 KiB make each stage's own split a hand-off of a few
/// microseconds' work). A share too small for bands of one row leaves the
/// work to the stages' own splits, as on one thread. Bands and parts
/// change no bit: every stage is the unchained kernel on whole rows.
fn chain(stages: &[ChainStage<'_>], x: &[i8], out: &mut [i8], scratch: &mut [i8], budget: usize) {
    let whole = plan(stages, budget).expect("a chain of convolutions");
    let win = &stages[whole.depthwise()].g.window;
    let first = &stages[0].g.window;
    let image_in = first.in_h * first.in_w * stages[0].g.in_c;
    let out_row = win.out_w * stages[stages.len() - 1].g.out_c;
    let image_out = win.out_h * out_row;
    let x = &x[..win.batch * image_in];
    let out = &mut out[..win.batch * image_out];
    let threads = crate::parallel::threads();
    let (parts, plan) = parts(stages, win.out_h, threads, scratch.len(), budget).unwrap_or((1, whole));
    for (xi, oi) in x.chunks_exact(image_in).zip(out.chunks_exact_mut(image_out)) {
        if parts == 1 {
            rows(stages, &plan, xi, 0..win.out_h, oi, scratch);
            continue;
        }
        let share = scratch.len() / parts;
        crate::parallel::row_parts(oi, win.out_h, out_row, parts, scratch, share, &|r, o, s| {
            rows(stages, &plan, xi, r, o, s)
        });
    }
}

/// How many parts a chain of `out_h` output rows splits into on
/// `threads`, and the plan of each part's bands: the most parts (up to the
/// threads and the rows) whose shares of `scratch_len` bytes each fit
/// bands of at least a row, each planned for the largest budget (at most
/// `budget`) that fits its share. `None` for one part.
fn parts<G: AsRef<Conv2dNhwc>>(
    stages: &[G],
    out_h: usize,
    threads: usize,
    scratch_len: usize,
    budget: usize,
) -> Option<(usize, Plan)> {
    (2..=threads.min(out_h)).rev().find_map(|parts| {
        let share = scratch_len / parts;
        // The most rows a band may have, then the most that fit the share
        // (what a plan needs grows with its rows): a few steps, not one
        // per byte of budget, as this runs on every call.
        let most = plan(stages, budget.min(share).max(1))?;
        let fits = |r: usize| {
            let (e, b) = buffers(&banded(stages, most, r), stages)?;
            e.checked_add(b).filter(|&n| n <= share)
        };
        fits(1)?;
        let (mut lo, mut hi) = (1, most.out_rows);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid).is_some() {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Some((parts, banded(stages, most, lo)))
    })
}

/// Bytes of buffers a chain's plan for `budget` needs.
fn needs<G: AsRef<Conv2dNhwc>>(stages: &[G], budget: usize) -> Option<usize> {
    let (e, b) = buffers(&plan(stages, budget)?, stages)?;
    e.checked_add(b)
}

/// Output rows `rows` of one image's chain, band by band: `x` is the
/// image's input, `out` those rows of its output, `scratch` the bands'
/// buffers (at least what `plan` needs).
fn rows(
    stages: &[ChainStage<'_>],
    plan: &Plan,
    x: &[i8],
    rows: core::ops::Range<usize>,
    out: &mut [i8],
    scratch: &mut [i8],
) {
    let (e_len, b_len) = buffers(plan, stages).expect("a chain's buffers");
    let (expansion, rest) = scratch.split_at_mut(e_len);
    let band = &mut rest[..b_len];
    let d = plan.depthwise();
    let dw = &stages[d];
    let win = &dw.g.window;
    let (c, s, span) = (dw.g.in_c, win.stride_h, span(win));
    let in_row = win.in_w * c;
    let first = &stages[0].g.window;
    let out_row = win.out_w * stages[stages.len() - 1].g.out_c;
    // The expansion rows the buffer holds.
    let (mut h0, mut h1) = (0usize, 0usize);
    for o0 in rows.clone().step_by(plan.out_rows) {
        let o1 = (o0 + plan.out_rows).min(rows.end);
        // Input rows the band reads: `pad_top < span` and the bottom
        // padding's likewise leave at least one (see `plan`).
        let a = (o0 * s).saturating_sub(win.pad_top);
        let b = ((o1 - 1) * s + span - win.pad_top).min(win.in_h);
        let input: &[i8] = if plan.expand {
            let e = &stages[0];
            let keep = h1.saturating_sub(a.max(h0));
            if keep > 0 {
                expansion.copy_within((a - h0) * in_row..(h1 - h0) * in_row, 0);
            }
            let from = a + keep;
            let at = (from - a) * in_row;
            let src = &x[from * first.in_w * e.g.in_c..b * first.in_w * e.g.in_c];
            let n = b - from;
            run(e, false, [n, n, 0], src, &mut expansion[at..(b - a) * in_row]);
            (h0, h1) = (a, b);
            &expansion[..(b - a) * in_row]
        } else {
            &x[a * in_row..b * in_row]
        };
        let dw_rows = [b - a, o1 - o0, win.pad_top.saturating_sub(o0 * s)];
        let dst = &mut out[(o0 - rows.start) * out_row..(o1 - rows.start) * out_row];
        if plan.project {
            let band = &mut band[..(o1 - o0) * win.out_w * c];
            run(dw, true, dw_rows, input, band);
            run(&stages[d + 1], false, [o1 - o0, o1 - o0, 0], band, dst);
        } else {
            run(dw, true, dw_rows, input, dst);
        }
    }
}

/// `st` over rows of one image: `[in_h, out_h, pad_top]`, the input rows,
/// the output rows and the window's top padding left above them (a
/// pointwise stage's is 0). Not inlined, so that the band's geometry and
/// `conv2d_nhwc`'s stacked arguments take stack only while a stage runs,
/// not in the chain's frame under every kernel it calls: on a
/// microcontroller the frames add up.
#[inline(never)]
fn run(st: &ChainStage<'_>, depthwise: bool, [in_h, out_h, pad_top]: [usize; 3], x: &[i8], out: &mut [i8]) {
    let mut g = *st.g;
    g.window.batch = 1;
    g.window.in_h = in_h;
    g.window.out_h = out_h;
    g.window.pad_top = pad_top;
    conv2d_nhwc(
        &g,
        depthwise,
        x,
        &st.xq,
        st.w,
        st.w_scales,
        st.bias,
        st.packed,
        &st.y,
        out,
    );
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::qs8::{pack_conv, Layout};
    use crate::testing::rng;
    use std::vec::Vec;

    fn bytes(seed: &mut u64, n: usize) -> Vec<i8> {
        (0..n).map(|_| rng(seed) as u8 as i8).collect()
    }

    /// A stage of geometry `g` with random weights, scales and bias, and
    /// quantizations of its own; packed when `pack`.
    struct Owned {
        g: Conv2dNhwc,
        w: Vec<i8>,
        scales: Vec<f32>,
        bias: Vec<i32>,
        packed: Vec<f32>,
        xq: Quant,
        y: Output,
    }

    impl Owned {
        fn new(seed: &mut u64, g: Conv2dNhwc, xq: Quant, pack: bool) -> Self {
            let taps = g.window.kernel_h * g.window.kernel_w;
            let w = bytes(seed, taps * g.in_c / g.groups * g.out_c);
            let scales = (0..g.out_c).map(|_| 0.002 + (rng(seed) % 100) as f32 * 1e-4).collect();
            let bias = (0..g.out_c).map(|_| rng(seed) as i32 % 4000 - 2000).collect();
            let mut packed = Vec::new();
            if pack {
                packed = std::vec![0f32; Layout::conv(&g).packed_len()];
                pack_conv(&g, &w, &mut packed);
            }
            let zp = (rng(seed) % 40) as i32 - 20;
            let y = Output {
                scale: 0.05 + (rng(seed) % 50) as f32 * 0.01,
                zero_point: zp,
                qmin: if rng(seed).is_multiple_of(2) { -128 } else { zp },
                qmax: 127,
            };
            Owned {
                g,
                w,
                scales,
                bias,
                packed,
                xq,
                y,
            }
        }

        fn stage(&self) -> ChainStage<'_> {
            ChainStage {
                g: &self.g,
                w: &self.w,
                w_scales: &self.scales,
                bias: Some(&self.bias),
                packed: (!self.packed.is_empty()).then_some(&self.packed[..]),
                xq: self.xq,
                y: self.y,
            }
        }

        fn next_quant(&self) -> Quant {
            Quant {
                scale: self.y.scale,
                zero_point: self.y.zero_point,
            }
        }

        /// The unchained call.
        fn unchained(&self, depthwise: bool, x: &[i8]) -> Vec<i8> {
            let mut out = std::vec![0i8; self.g.output_sizes().iter().product()];
            let s = self.stage();
            conv2d_nhwc(
                &self.g, depthwise, x, &s.xq, s.w, s.w_scales, s.bias, s.packed, &s.y, &mut out,
            );
            out
        }
    }

    #[test]
    fn chains_give_the_unchained_calls_bytes() {
        let mut seed = 61;
        let (mut cases, mut split) = (0, 0);
        // Under Miri the first 8 chains (each choice below still takes
        // all its values), on smaller images of fewer channels: `most`
        // picks the bound of a size, natively or under Miri.
        let (count, least) = if cfg!(miri) { (8, 5) } else { (60, 50) };
        let most = |native: u64, miri: u64| if cfg!(miri) { miri } else { native };
        for case in 0..count {
            let r = |seed: &mut u64, n: u64| 1 + (rng(seed) % n) as usize;
            let (expand, project) = [(true, true), (true, false), (false, true)][case % 3];
            let batch = if case % 7 == 6 { 2 } else { 1 };
            let (h, w) = (r(&mut seed, most(13, 6)), r(&mut seed, most(11, 5)));
            let cin = r(&mut seed, most(20, 6));
            // Expansions wide enough that some bands are several rows and
            // some one (the band is `BAND_BYTES` at most).
            let mid = if case % 5 == 0 {
                16 * r(&mut seed, most(4, 2))
            } else {
                r(&mut seed, most(40, 12))
            };
            let cout = r(&mut seed, most(24, 8));
            let k = [3, 3, 5, 1][case % 4];
            let stride = [r(&mut seed, 2), r(&mut seed, 2)];
            // Padding up to the window's depth less one (the most a chain
            // takes), on each side apart.
            let pad = [0, 1, 2, 3].map(|_| rng(&mut seed) as usize % k);
            let xq = Quant {
                scale: 0.03,
                zero_point: (rng(&mut seed) % 256) as i32 - 128,
            };
            let mut stages = Vec::new();
            let mut sizes = [batch, h, w, cin];
            let mut q = xq;
            let dw_c = if expand { mid } else { cin };
            if expand {
                let g = Conv2dNhwc::regular(&sizes, &[mid, 1, 1, cin], [1, 1], [0; 4], [1, 1], 1).unwrap();
                stages.push(Owned::new(&mut seed, g, q, case % 2 == 0));
                q = stages[0].next_quant();
                sizes = g.output_sizes();
            }
            let Some(g) = Conv2dNhwc::depthwise(&sizes, &[1, k, k, dw_c], stride, pad, [1, 1]) else {
                continue;
            };
            stages.push(Owned::new(&mut seed, g, q, false));
            q = stages[stages.len() - 1].next_quant();
            sizes = g.output_sizes();
            if project {
                let g = Conv2dNhwc::regular(&sizes, &[cout, 1, 1, dw_c], [1, 1], [0; 4], [1, 1], 1).unwrap();
                stages.push(Owned::new(&mut seed, g, q, case % 4 != 1));
            }
            let geometries: Vec<Conv2dNhwc> = stages.iter().map(|s| s.g).collect();
            let x = bytes(&mut seed, batch * h * w * cin);
            let mut want = x.clone();
            let d = usize::from(expand);
            for (i, st) in stages.iter().enumerate() {
                want = st.unchained(i == d, &want);
            }
            let views: Vec<ChainStage<'_>> = stages.iter().map(Owned::stage).collect();
            // Bands of one output row, of a few, and the default's.
            let row = geometries[d].window.in_w * geometries[d].in_c;
            // On one thread, and in parts on two and three where the
            // scratch holds their shares.
            for budget in [1, 4 * row, BAND_BYTES] {
                let len = needs(&geometries, budget).expect("a chain");
                for threads in [1, 2, 3] {
                    crate::parallel::set_threads(threads);
                    let out_h = geometries[d].window.out_h;
                    split += usize::from(parts(&geometries, out_h, threads, len, budget).is_some());
                    // Stale bytes in the scratch and the output must not matter.
                    let mut scratch = std::vec![0x5au8 as i8; len];
                    let mut got = std::vec![-77i8; want.len()];
                    chain(&views, &x, &mut got, &mut scratch, budget);
                    assert_eq!(
                        got, want,
                        "case {case}, budget {budget}, {threads} threads: {geometries:?}"
                    );
                }
                crate::parallel::set_threads(1);
            }
            cases += 1;
        }
        assert!(cases >= least, "only {cases} chains ran");
        assert!(split >= cases / 2, "only {split} runs split into parts");
        std::eprintln!("{split} runs of {cases} chains split into parts");
    }

    #[test]
    fn bands_split_rows_and_reuse_the_overlap() {
        // MobileNetV2's second block: 112 × 112 × 16 → 96, depthwise
        // stride 2, → 24: bands of a few rows, far less than the whole.
        let g0 = Conv2dNhwc::regular(&[1, 112, 112, 16], &[96, 1, 1, 16], [1, 1], [0; 4], [1, 1], 1).unwrap();
        let g1 = Conv2dNhwc::depthwise(&[1, 112, 112, 96], &[1, 3, 3, 96], [2, 2], [1, 1, 1, 1], [1, 1]).unwrap();
        let g2 = Conv2dNhwc::regular(&[1, 56, 56, 96], &[24, 1, 1, 96], [1, 1], [0; 4], [1, 1], 1).unwrap();
        let p = plan(&[g0, g1, g2], BAND_BYTES).unwrap();
        assert_eq!((p.out_rows, p.buffer_rows), (2, 5));
        assert_eq!(needs(&[g0, g1, g2], BAND_BYTES), Some(5 * 112 * 96 + 2 * 56 * 96));
        // One output row a band at the least.
        let one = plan(&[g0, g1, g2], 1).unwrap();
        assert_eq!((one.out_rows, one.buffer_rows), (1, 3));
        // Not a chain: two pointwise convolutions, or a pointwise one
        // that does not feed the depthwise one.
        assert_eq!(chain_scratch_len(&[g0, g2]), None);
        assert_eq!(chain_scratch_len(&[g2, g1]), None);
        // On two threads each part's bands are one thread's.
        let (g3, g4, g5) = (
            Conv2dNhwc::regular(&[1, 56, 56, 24], &[144, 1, 1, 24], [1, 1], [0; 4], [1, 1], 1).unwrap(),
            Conv2dNhwc::depthwise(&[1, 56, 56, 144], &[1, 3, 3, 144], [1, 1], [1, 1, 1, 1], [1, 1]).unwrap(),
            Conv2dNhwc::regular(&[1, 56, 56, 144], &[24, 1, 1, 144], [1, 1], [0; 4], [1, 1], 1).unwrap(),
        );
        let len = chain_scratch_len(&[g3, g4, g5]).unwrap();
        let (n, p) = parts(&[g3, g4, g5], 56, 2, len, BAND_BYTES).expect("two parts");
        assert_eq!(n, 2);
        assert_eq!(p, plan(&[g3, g4, g5], BAND_BYTES).unwrap());
        assert_eq!((p.out_rows, p.buffer_rows), (6, 8));
        assert_eq!(parts(&[g3, g4, g5], 56, 1, len, BAND_BYTES), None);
        let first = chain_scratch_len(&[g0, g1, g2]).unwrap();
        assert_eq!(first, 2 * (5 * 112 * 96 + 2 * 56 * 96));
        let (n, p) = parts(&[g0, g1, g2], 56, 2, first, BAND_BYTES).expect("two parts");
        assert_eq!((n, p.out_rows, p.buffer_rows), (2, 2, 5));
        // Four threads share it in smaller bands.
        let (n, p) = parts(&[g3, g4, g5], 56, 4, len, BAND_BYTES).expect("four parts");
        assert!(n == 4 && p.out_rows >= 1 && p.out_rows < 6);
        // Padding as deep as the window.
        let deep = Conv2dNhwc::depthwise(&[1, 112, 112, 96], &[1, 3, 3, 96], [2, 2], [3, 1, 1, 1], [1, 1]).unwrap();
        assert_eq!(chain_scratch_len(&[g0, deep]), None);
    }
}
