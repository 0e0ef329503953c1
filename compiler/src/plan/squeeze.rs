//! Cutting the arena bytes generated code never touches out of its layout.
//!
//! ExecuTorch plans memory for every value its runtime computes, including
//! the ones ptec computes at compile time or folds into another call (the
//! transposed weights of a linear layer, the dequantized weights of a
//! quantized one). Their bytes stay in the plan, untouched: a 640-input MLP
//! planned 323 KiB for the weights it transposes on every run.
//!
//! The squeeze keeps the layout but removes every run of arena bytes that
//! no touched value covers: offsets move down by the bytes removed below
//! them. Within what is kept the map is a translation, so values that
//! shared bytes still share exactly the same bytes and those that did not
//! still do not. Runs are cut in whole multiples of 64 bytes, so every
//! offset keeps its alignment. Untouched values may land anywhere.
use crate::analysis::shared::merged;
use crate::plan::ALIGN;

/// A monotone map of arena offsets that drops the runs nothing touches.
#[derive(Clone, Debug, Default)]
pub struct Squeeze {
    /// The kept runs (start, end), aligned, sorted and disjoint; empty for
    /// the identity.
    kept: Vec<(usize, usize)>,
    /// Whether anything is cut.
    cuts: bool,
}

impl Squeeze {
    /// The squeeze keeping the arena byte ranges `touched` (start, end) of
    /// an arena of `size` bytes.
    pub fn keeping(touched: impl IntoIterator<Item = (usize, usize)>, size: usize) -> Squeeze {
        let align = ALIGN as usize;
        let kept = merged(
            touched
                .into_iter()
                .filter(|&(s, e)| e > s)
                .map(|(s, e)| {
                    (
                        s / align * align,
                        e.next_multiple_of(align).min(size.next_multiple_of(align)),
                    )
                })
                .collect(),
        );
        let covered: usize = kept.iter().map(|&(s, e)| e - s).sum();
        let cuts = covered < size.next_multiple_of(align);
        Squeeze { kept, cuts }
    }

    /// Of the arena bytes `start..end`, the runs kept (in offsets from
    /// before the squeeze).
    pub fn kept_within(&self, start: usize, end: usize) -> Vec<(usize, usize)> {
        if !self.cuts {
            return if end > start { vec![(start, end)] } else { Vec::new() };
        }
        self.kept
            .iter()
            .map(|&(s, e)| (s.max(start), e.min(end)))
            .filter(|&(s, e)| e > s)
            .collect()
    }

    /// The new offset of arena offset `offset`: less the bytes cut below
    /// it (one inside a cut run goes to where the run was).
    pub fn map(&self, offset: usize) -> usize {
        if !self.cuts {
            return offset;
        }
        let mut cut = 0;
        let mut prev_end = 0;
        for &(s, e) in &self.kept {
            if offset < s {
                return prev_end - cut;
            }
            cut += s - prev_end;
            if offset < e {
                return offset - cut;
            }
            prev_end = e;
        }
        prev_end - cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untouched_runs_are_cut_and_the_rest_moves_down_alike() {
        // Touched: 0..256, 1280..1536 and a view of it at 1344..1408;
        // untouched: 256..1280 and 1600..1664, in an arena of 4096.
        let s = Squeeze::keeping([(0, 256), (1280, 1536), (1344, 1408)], 4096);
        assert_eq!([0, 256, 1280, 1344, 1536].map(|o| s.map(o)), [0, 256, 256, 320, 512]);
        // Untouched offsets land at the cut's place; the arena's end too.
        assert_eq!([300, 1600, 4096].map(|o| s.map(o)), [256, 512, 512]);
        // What of a range was kept.
        assert_eq!(s.kept_within(200, 1400), [(200, 256), (1280, 1400)]);
        assert_eq!(s.kept_within(300, 1200), []);
        assert_eq!(Squeeze::keeping([(0, 64)], 64).kept_within(10, 20), [(10, 20)]);
    }

    #[test]
    fn runs_are_cut_in_whole_cache_lines() {
        // Touched 0..10 and 200..210: kept 0..64 and 192..256.
        let s = Squeeze::keeping([(0, 10), (200, 210)], 1000);
        assert_eq!([0, 10, 192, 200, 210, 1000].map(|o| s.map(o)), [0, 10, 64, 72, 82, 128]);
    }

    #[test]
    fn a_tight_arena_maps_to_itself() {
        let s = Squeeze::keeping([(0, 64), (64, 128)], 128);
        assert_eq!([0, 100, 128, 5000].map(|o| s.map(o)), [0, 100, 128, 5000]);
        let empty = Squeeze::keeping([], 0);
        assert_eq!(empty.map(0), 0);
    }
}
