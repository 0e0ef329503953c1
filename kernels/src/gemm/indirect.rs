//! Products whose rows of `A` are not stored as rows: each row is a list
//! of runs ("taps") of one source, or zeros (an indirect GEMM). A
//! convolution's window is then multiplied where it lies in the image,
//! without first copying it into a row (im2col): on ResNet's 3 × 3 layers
//! that copy took 3 % of the time, and the gathered tile (72 windows,
//! 166 KB to 1.3 MB) pushed the image and the weights out of cache.
//!
//! Only the AVX-512 8 × 32 and 7 × 32 sweeps read such rows: they take a
//! pointer per row anyway, so a run is one sweep, the accumulators kept
//! in registers from one run to the next over the whole depth.
use super::packing::NR;

/// The offset of a tap outside the source (its run reads as zeros).
pub const ZERO_TAP: usize = usize::MAX;

/// Rows of `A`, each `taps` runs of `run` floats: row `i`'s run `t` is
/// `x[offsets[i·taps + t]..][..run]`, or `run` zeros where the offset is
/// [`ZERO_TAP`]. Row `i` of the product is the runs in order, `taps ·
/// run` deep. Every offset is checked against `x` when made.
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub struct Gather<'a> {
    x: &'a [f32],
    offsets: &'a [usize],
    taps: usize,
    run: usize,
    zeros: &'a [f32],
}

impl<'a> Gather<'a> {
    /// The rows `offsets.len() / taps` over `x`; `zeros` holds at least
    /// `run` zeros (the runs of taps outside `x`). `None` when `taps` or
    /// `run` is 0, `offsets` is not whole rows, an offset's run leaves
    /// `x`, or `zeros` is shorter than a run or not zeros.
    pub fn new(x: &'a [f32], offsets: &'a [usize], taps: usize, run: usize, zeros: &'a [f32]) -> Option<Self> {
        let inside = |&o: &usize| o == ZERO_TAP || o.checked_add(run).is_some_and(|end| end <= x.len());
        let zeros = zeros.get(..run)?;
        let valid = taps > 0
            && run > 0
            && offsets.len().is_multiple_of(taps)
            && offsets.iter().all(inside)
            && zeros.iter().all(|&z| z == 0.0);
        valid.then_some(Gather {
            x,
            offsets,
            taps,
            run,
            zeros,
        })
    }

    /// Rows of the product.
    pub fn rows(&self) -> usize {
        self.offsets.len() / self.taps
    }

    /// Depth of each row (`taps · run`).
    pub fn depth(&self) -> usize {
        self.taps * self.run
    }

    /// The rows from row `r` on.
    pub(super) fn skip_rows(&self, r: usize) -> Self {
        Gather {
            offsets: &self.offsets[r * self.taps..],
            ..*self
        }
    }

    /// For rows `ir .. ir + mr` (later rows of the `MR` repeat row `ir`,
    /// whose results are not stored), the run that depth `d` falls in:
    /// a pointer to each row's element `d`, and how many floats the run
    /// has left, at most `most`.
    ///
    /// The pointers are valid for that many reads (checked in [`Self::new`]);
    /// `ir + mr` must not pass [`Self::rows`] and `d` must be less than
    /// [`Self::depth`].
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    #[inline(always)]
    pub(super) fn rows_at<const MR: usize>(
        &self,
        ir: usize,
        mr: usize,
        d: usize,
        most: usize,
    ) -> ([*const f32; MR], usize) {
        let (t, c0) = (d / self.run, d % self.run);
        let offsets = &self.offsets[ir * self.taps + t..];
        let row = |i: usize| {
            let o = offsets[i * self.taps];
            if o == ZERO_TAP {
                self.zeros[c0..].as_ptr()
            } else {
                self.x[o + c0..].as_ptr()
            }
        };
        let first = row(0);
        let rows = core::array::from_fn(|i| if i > 0 && i < mr { row(i) } else { first });
        (rows, (self.run - c0).min(most))
    }
}

/// Whether [`super::gemm_indirect`] runs an `n`-column product on this
/// CPU: on AVX-512, with whole strips of [`NR`] columns (the 8 × 32 and
/// 7 × 32 tiles, whose sweeps take a pointer per row).
pub fn runs_indirect(n: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::cpu::Isa::detect() == crate::cpu::Isa::Avx512 && n > 0 && n.is_multiple_of(NR)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (n, NR);
        false
    }
}
