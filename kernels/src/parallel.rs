//! Kernels' work split across threads, when the program asks for more than
//! one ([`set_threads`]; one, the caller's, by default and without `std`).
//!
//! A kernel cuts its work into parts ([`run_parts`]); the calling thread
//! and the pool's workers take parts, each its own first (part `i` is
//! thread `i`'s), until none are left, and the call returns when every
//! part is done, so a part may borrow from the caller's stack. Workers are started once and kept: between the back-to-back
//! kernels of an inference they spin on an atomic (a condition variable's
//! wake-up costs more than a small kernel), and after a while with no work
//! they sleep. Nothing is allocated per call. A call made while another is
//! in progress (from a part, or from another thread running another
//! program) runs its parts itself, one after another.

/// The most threads a kernel splits its work over.
pub const MAX_THREADS: usize = 16;

/// Threads kernels use (at least 1).
pub fn threads() -> usize {
    #[cfg(feature = "std")]
    {
        pool::threads()
    }
    #[cfg(not(feature = "std"))]
    {
        1
    }
}

/// Sets how many threads kernels use from now on (clamped to
/// `1..=`[`MAX_THREADS`]), starting workers the first time more are
/// needed. Without `std` kernels always use one.
pub fn set_threads(n: usize) {
    #[cfg(feature = "std")]
    pool::set_threads(n);
    #[cfg(not(feature = "std"))]
    let _ = n;
}

/// Whether memory-bound kernels (copies, permutations, element-wise maps,
/// normalizations) split in bands ([`set_local_bands`]).
static LOCAL_BANDS: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(true);

/// Whether memory-bound kernels split large work in bands across threads
/// (on by default). They split less to share the arithmetic than to keep
/// each thread reading what it just wrote (see [`for_each_band`]'s
/// callers); turning it off is how `ptec bench --ab-bands` measures that.
pub fn set_local_bands(on: bool) {
    LOCAL_BANDS.store(on, core::sync::atomic::Ordering::Relaxed);
}

/// Whether a memory-bound kernel may split: more than one thread and
/// [`set_local_bands`] on.
pub fn local_bands() -> bool {
    threads() > 1 && LOCAL_BANDS.load(core::sync::atomic::Ordering::Relaxed)
}

/// Fewest elements of a memory-bound kernel's output (an element-wise
/// map, a layer norm) that threads split.
const LOCAL_BAND_ELEMENTS: usize = 1 << 14;

/// Whether a memory-bound kernel of `elements` output elements splits in
/// bands: [`local_bands`] and at least `LOCAL_BAND_ELEMENTS`.
pub fn local_bands_for(elements: usize) -> bool {
    elements >= LOCAL_BAND_ELEMENTS && local_bands()
}

/// Calls `part(i)` for every `i` in `0..parts`, spread over the threads;
/// returns when all are done. A panicking part is re-raised here, after
/// the others have finished.
pub fn run_parts(parts: usize, part: &(dyn Fn(usize) + Sync)) {
    #[cfg(feature = "std")]
    {
        if parts > 1 && threads() > 1 && pool::run(parts, part) {
            return;
        }
        pool::run_here(parts, part);
    }
    #[cfg(not(feature = "std"))]
    (0..parts).for_each(part);
}

/// A raw view of an output (pointers, which are not `Sync`) handed to all
/// the parts of a split whose parts each write their own pieces of it:
/// columns of the same rows, channels of the same pixels, whose extents
/// interleave, so that no part can hold a slice of its share.
pub(crate) struct Shared<T>(T);

// SAFETY: made only by `Shared::new`, whose caller vouches for the parts.
unsafe impl<T> Sync for Shared<T> {}

impl<T: Copy> Shared<T> {
    /// # Safety
    /// The parts that share `view` must write disjoint pieces of what it
    /// points to and read none another part writes; what it points to must
    /// outlive them ([`run_parts`] returns when all are done).
    pub(crate) unsafe fn new(view: T) -> Self {
        Shared(view)
    }

    pub(crate) fn get(&self) -> T {
        self.0
    }
}

/// `items` split into at most [`threads`] contiguous ranges of whole
/// `grain`s (at most [`MAX_THREADS`]), one per part. The thread count is
/// read once, when the split is made: every part of a job must see the
/// same ranges, even if [`set_threads`] is called meanwhile.
pub fn split(items: usize, grain: usize) -> Split {
    let grain = grain.max(1);
    let grains = items.div_ceil(grain);
    let per = grains.div_ceil(threads().min(grains).clamp(1, MAX_THREADS)).max(1);
    Split {
        items,
        grain,
        per,
        longer: 0,
        parts: grains.div_ceil(per).max(1),
    }
}

/// As many parts as [`split`]`(items, coarse)` makes (the grain that says
/// whether a part is worth a thread), each whole `fine` grains (but the
/// last), their counts of grains differing by one at most. Grains of 32
/// rows split 196 rows 128 and 68, and the thread with 128 finishes last;
/// 8-row tiles split them 104 and 92.
pub fn split_even(items: usize, coarse: usize, fine: usize) -> Split {
    let fine = fine.max(1);
    let grains = items.div_ceil(fine);
    let parts = split(items, coarse).parts().min(grains).max(1);
    Split {
        items,
        grain: fine,
        per: grains / parts,
        longer: grains % parts,
        parts,
    }
}

/// A [`split`]: its parts' ranges, fixed.
#[derive(Clone, Copy, Debug)]
pub struct Split {
    items: usize,
    grain: usize,
    /// Grains per part (the last may have fewer items)...
    per: usize,
    /// ...and one more for each of the first `longer` parts.
    longer: usize,
    parts: usize,
}

impl Split {
    /// How many parts (at least one; one empty range when there are no
    /// items).
    pub fn parts(&self) -> usize {
        self.parts
    }

    /// Part `p`'s range `(start, end)`, if there is such a part.
    pub fn range(&self, p: usize) -> Option<(usize, usize)> {
        let at = |p: usize| ((p * self.per + p.min(self.longer)) * self.grain).min(self.items);
        (p < self.parts).then(|| (at(p), at(p + 1)))
    }

    /// Every part's range, in order.
    pub fn ranges(self) -> impl Iterator<Item = (usize, usize)> {
        (0..self.parts).filter_map(move |p| self.range(p))
    }
}

/// Bytes a band of [`for_each_band`] covers at least, so that no two
/// threads write the same cache line and each part is worth waking for.
const BAND_BYTES: usize = 4096;

/// How many rows of `row_len` elements of `elem_bytes` bytes make one
/// grain of a band: at least one row and about `BAND_BYTES`.
pub fn band_grain(row_len: usize, elem_bytes: usize) -> usize {
    (BAND_BYTES / elem_bytes.max(1) / row_len.max(1)).max(1)
}

/// Where to cut an output of `sizes` (row-major) into bands: its outermost
/// dim of more than one element (the dims before have one) and the length
/// of a row along it, or `None` when every dim has one element.
pub fn outer_rows(sizes: &[usize]) -> Option<(usize, usize)> {
    let dim = sizes.iter().position(|&s| s > 1)?;
    Some((dim, sizes[dim + 1..].iter().product()))
}

/// Calls `band(rows, piece)` for bands of the `rows` rows of `out` (each
/// `row_len` elements apart; `piece` starts at the band's first row), each
/// band whole `grain`s, spread over the threads when `split_up`; else one
/// call for all rows, on this thread.
pub fn for_each_band<T: Send>(
    out: &mut [T],
    rows: usize,
    row_len: usize,
    grain: usize,
    split_up: bool,
    band: &(dyn Fn(core::ops::Range<usize>, &mut [T]) + Sync),
) {
    let bands = split(rows, grain);
    if !split_up || bands.parts() <= 1 {
        return band(0..rows, out);
    }
    let pieces = Pieces::new(out, bands.ranges().map(|(r0, _)| r0 * row_len));
    run_parts(bands.parts(), &|i| {
        if let (Some((r0, r1)), Some(piece)) = (bands.range(i), pieces.take(i)) {
            band(r0..r1, piece);
        }
    });
}

/// Calls `part(rows, out, scratch)` for `parts` parts of the `rows` rows
/// of `out` (`row_len` elements each), cut as evenly as whole rows allow,
/// one a thread: part `p` gets its rows of `out` and `share` elements of
/// `scratch` from `p * share` on (`parts * share` at most its length).
/// Parts left without rows are not called.
pub(crate) fn row_parts<T: Send, S: Send, F>(
    out: &mut [T],
    rows: usize,
    row_len: usize,
    parts: usize,
    scratch: &mut [S],
    share: usize,
    part: &F,
) where
    F: Fn(core::ops::Range<usize>, &mut [T], &mut [S]) + Sync,
{
    let per = rows.div_ceil(parts.max(1));
    let outs = Pieces::new(out, (0..parts).map(|p| (p * per).min(rows) * row_len));
    let shares = Pieces::new(scratch, (0..parts).map(|p| p * share));
    run_parts(parts, &|p| {
        let (r0, r1) = (p * per, ((p + 1) * per).min(rows));
        if let (true, Some(o), Some(s)) = (r0 < r1, outs.take(p), shares.take(p)) {
            let len = share.min(s.len());
            part(r0..r1, o, &mut s[..len]);
        }
    });
}

/// Disjoint pieces of one slice, one per part: each part takes its own
/// (once) and writes it while the others write theirs.
pub(crate) struct Pieces<'a, T> {
    ptrs: [core::sync::atomic::AtomicPtr<T>; MAX_THREADS],
    lens: [usize; MAX_THREADS],
    _whole: core::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: the pieces are disjoint and each is handed out at most once
// (`take` swaps its pointer out), so sharing `Pieces` between threads
// shares no element; moving `&mut [T]` across threads needs `T: Send`.
unsafe impl<T: Send> Sync for Pieces<'_, T> {}

impl<'a, T> Pieces<'a, T> {
    /// `whole` cut at the starts of `ranges` (increasing, from 0; at most
    /// [`MAX_THREADS`]): piece `i` runs from range `i`'s start to the next
    /// one's, the last to the end of `whole`.
    pub(crate) fn new(whole: &'a mut [T], starts: impl Iterator<Item = usize>) -> Self {
        let mut ptrs: [core::sync::atomic::AtomicPtr<T>; MAX_THREADS] =
            core::array::from_fn(|_| core::sync::atomic::AtomicPtr::new(core::ptr::null_mut()));
        let mut lens = [0; MAX_THREADS];
        let mut starts = starts.skip(1).take(MAX_THREADS - 1);
        let (mut rest, mut at) = (whole, 0);
        for i in 0..MAX_THREADS {
            let next = starts.next();
            let cut = match next {
                Some(next) => next.clamp(at, at + rest.len()) - at,
                None => rest.len(),
            };
            let (piece, tail) = core::mem::take(&mut rest).split_at_mut(cut);
            lens[i] = piece.len();
            *ptrs[i].get_mut() = piece.as_mut_ptr();
            at += cut;
            rest = tail;
            // The last piece takes the rest, even none: every part gets
            // its piece, empty ones too (a scratch of no floats).
            if next.is_none() {
                break;
            }
        }
        Pieces {
            ptrs,
            lens,
            _whole: core::marker::PhantomData,
        }
    }

    /// Piece `i`, the first time it is asked for.
    pub(crate) fn take(&self, i: usize) -> Option<&'a mut [T]> {
        let slot = self.ptrs.get(i)?;
        #[cfg(target_has_atomic = "ptr")]
        let p = slot.swap(core::ptr::null_mut(), core::sync::atomic::Ordering::AcqRel);
        // Without compare-and-swap there is no `std` (it needs it), so no
        // pool: `run_parts` runs every part on the calling thread, one
        // after another, and `Pieces` never leaves this crate's kernels.
        #[cfg(not(target_has_atomic = "ptr"))]
        let p = {
            use core::sync::atomic::Ordering;
            let p = slot.load(Ordering::Acquire);
            slot.store(core::ptr::null_mut(), Ordering::Release);
            p
        };
        // SAFETY: `p` came from a piece of `whole` (borrowed for 'a) of
        // `lens[i]` elements, disjoint from the others, and is handed out
        // only this once.
        (!p.is_null()).then(|| unsafe { core::slice::from_raw_parts_mut(p, self.lens[i]) })
    }
}

#[cfg(feature = "std")]
mod pool {
    extern crate std;
    use core::sync::atomic::Ordering::*;
    // Under `--cfg loom` the protocol's atomics, locks and threads are
    // loom's, so that its model (`loom_model` below) explores them.
    #[cfg(not(loom))]
    use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};
    #[cfg(loom)]
    use loom::sync::{
        atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize},
        Condvar, Mutex, MutexGuard,
    };
    use std::boxed::Box;
    use std::sync::OnceLock;
    #[cfg(not(loom))]
    use std::sync::{Condvar, Mutex, MutexGuard};
    use std::time::Duration;
    #[cfg(not(loom))]
    use std::time::Instant;

    /// How long an idle worker spins for the next job before it sleeps.
    const SPIN: Duration = Duration::from_millis(2);
    /// The job word holds the job's generation above a bit that says
    /// whether its parts may be claimed (open).
    const OPEN: u64 = 1;
    /// Slots a job's parts are claimed in: a job with more parts than
    /// slots runs consecutive parts in each (see [`Slots`]).
    const SLOTS: usize = 4 * super::MAX_THREADS;

    /// A CPU number no CPU has.
    const NO_CPU: usize = usize::MAX;

    /// The CPU this thread runs on, where the system tells.
    fn current_cpu() -> usize {
        // Miri does not model CPUs (nor this call).
        #[cfg(all(target_os = "linux", not(miri), not(loom)))]
        {
            // SAFETY: no arguments; fails with -1.
            let cpu = unsafe { libc::sched_getcpu() };
            if let Ok(cpu) = usize::try_from(cpu) {
                return cpu;
            }
        }
        NO_CPU
    }

    /// A job's part function, its lifetime erased.
    type Part = &'static (dyn Fn(usize) + Sync);

    struct Pool {
        /// Threads kernels use (the caller and `threads - 1` workers).
        threads: AtomicUsize,
        /// Workers started.
        workers: AtomicUsize,
        /// The current job's generation and whether it is open. A new job
        /// first closes the word (under a new generation), then writes its
        /// part count, thread count and function, then opens it under the
        /// generation after; a claim stands only if the word is still the
        /// open one it was made under (see `claim`).
        word: AtomicU64,
        /// The current job's part count, the threads it was split for and
        /// its part function (a pointer to the caller's [`Part`]), written
        /// while the word is closed. The function is called only by a
        /// thread that has claimed a part, which the caller waits for.
        parts: AtomicUsize,
        owners: AtomicUsize,
        job: AtomicPtr<Part>,
        /// The generation each slot was last claimed in: a slot is free in
        /// a job of a later generation. A job's caller returns only when
        /// all its slots were claimed and done, so a thread that read the
        /// job's word before it ended finds every slot taken.
        slots: [AtomicU64; SLOTS],
        /// Slots of the current job finished.
        done: AtomicUsize,
        panicked: AtomicBool,
        /// Held while a job runs (one job at a time).
        submit: Mutex<()>,
        /// Sleeping workers wait here for a new generation.
        sleep: Mutex<()>,
        wake: Condvar,
        sleepers: AtomicUsize,
        /// The CPU each thread was last seen on (the caller's first, then
        /// the workers'), `NO_CPU` when not known. A hint, not part of the
        /// protocol: never loom's.
        cpus: [core::sync::atomic::AtomicUsize; super::MAX_THREADS],
        /// Tells the workers of a loom model to return.
        #[cfg(loom)]
        stop: AtomicBool,
    }

    fn pool() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(Pool::new)
    }

    impl Pool {
        fn new() -> Self {
            Pool {
                threads: AtomicUsize::new(1),
                workers: AtomicUsize::new(0),
                word: AtomicU64::new(0),
                parts: AtomicUsize::new(0),
                owners: AtomicUsize::new(1),
                job: AtomicPtr::new(core::ptr::null_mut()),
                slots: core::array::from_fn(|_| AtomicU64::new(0)),
                done: AtomicUsize::new(0),
                panicked: AtomicBool::new(false),
                submit: Mutex::new(()),
                sleep: Mutex::new(()),
                wake: Condvar::new(),
                sleepers: AtomicUsize::new(0),
                cpus: core::array::from_fn(|_| core::sync::atomic::AtomicUsize::new(NO_CPU)),
                #[cfg(loom)]
                stop: AtomicBool::new(false),
            }
        }
    }

    /// Locks ignoring poison: nothing the pool's mutexes guard can be left
    /// half-written.
    fn lock(m: &Mutex<()>) -> MutexGuard<'_, ()> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    impl Pool {
        /// Spins until `ready()`, for at most `longest`; false if it gave
        /// up. Thread `me` of the pool gives up its CPU whenever a thread
        /// it waits for (`others`) was last seen on that CPU: when the host
        /// has more runnable threads than CPUs, two threads of the pool can
        /// share one, and spinning there only keeps the other from running.
        fn spin_until(
            &self,
            me: usize,
            others: core::ops::Range<usize>,
            longest: Duration,
            ready: impl Fn() -> bool,
        ) -> bool {
            // Loom has no clock: a bounded spin looks once (the model then
            // sees both a waiter that found it ready and one that gave up),
            // an unbounded one yields until ready, as loom needs.
            #[cfg(loom)]
            loop {
                if ready() {
                    return true;
                }
                if longest != Duration::MAX {
                    return false;
                }
                let _ = (me, &others);
                loom::thread::yield_now();
            }
            #[cfg(not(loom))]
            {
                let start = Instant::now();
                loop {
                    for _ in 0..32 {
                        if ready() {
                            return true;
                        }
                        core::hint::spin_loop();
                    }
                    let cpu = self.seen_on(me);
                    if cpu != NO_CPU && self.cpus[others.clone()].iter().any(|c| c.load(Relaxed) == cpu) {
                        std::thread::yield_now();
                    }
                    if start.elapsed() >= longest {
                        return false;
                    }
                }
            }
        }

        /// Makes `part`, of `parts` parts split for `owners` threads, the
        /// current job: closes the word, writes the job, opens the word
        /// (see `claim`).
        fn open(&self, parts: usize, owners: usize, part: &Part) {
            let generation = (self.word.load(Relaxed) >> 1) + 1;
            self.word.store(generation << 1, SeqCst);
            self.parts.store(parts, Release);
            self.owners.store(owners, Release);
            self.job.store(part as *const Part as *mut Part, Release);
            self.done.store(0, Relaxed);
            self.panicked.store(false, Relaxed);
            self.word.store((generation + 1) << 1 | OPEN, SeqCst);
        }

        /// Records the CPU thread `me` runs on, and returns it.
        fn seen_on(&self, me: usize) -> usize {
            let cpu = current_cpu();
            self.cpus[me].store(cpu, Relaxed);
            cpu
        }

        /// Claims a slot of the current job, thread `me`'s own ones first:
        /// the parts it runs and the job's function; else the job's generation, all
        /// of whose slots are claimed.
        ///
        /// A kernel splits its work into one part per thread, and the next
        /// kernel reads what the last one wrote: part `i` of a job goes to
        /// thread `i` of the pool when that thread comes in time, so each
        /// thread keeps reading its own writes. Parts taken in the order
        /// they were claimed swapped threads in 10–30 % of MobileNetV2's
        /// jobs, and on a host whose two CPUs were far apart (a 450 ns
        /// round trip) its parts then ran up to 1.8 times as long as half
        /// the work on one thread. A thread that comes late finds its slots
        /// taken, and whoever is free runs them.
        fn claim(&self, me: usize) -> Result<(core::ops::Range<usize>, Part), u64> {
            'job: loop {
                let word = self.word.load(SeqCst);
                let generation = word >> 1;
                if word & OPEN == 0 {
                    return Err(generation);
                }
                // Read between loading `word` and checking it again after a
                // claim. A job's values are written while the word is
                // closed: values read here that a later job wrote fail the
                // check, as the word was closed since.
                let slots = Slots::of(self.parts.load(Acquire));
                let owners = self.owners.load(Acquire).max(1);
                let job = self.job.load(Acquire);
                let own = (me < owners).then(|| (me..slots.count).step_by(owners));
                for s in own.into_iter().flatten().chain(0..slots.count) {
                    let last = self.slots[s].load(Acquire);
                    if last >= generation
                        || self.slots[s]
                            .compare_exchange(last, generation, AcqRel, Acquire)
                            .is_err()
                    {
                        continue;
                    }
                    if self.word.load(SeqCst) != word {
                        // The job read above has ended (it could not end
                        // with slot `s` free had it been `word`'s) and the
                        // values may be a later job's. Marking `s` taken
                        // under an older generation leaves it free for
                        // that later job.
                        continue 'job;
                    }
                    // SAFETY: `job` points to the caller's `Part`, which
                    // outlives its job's parts (see `run`).
                    return Ok((slots.run(s), unsafe { *job }));
                }
                return Err(generation);
            }
        }

        /// Takes parts of the current job until none are left; its
        /// generation, and the first panic of a part run here.
        fn work(&self, me: usize) -> (u64, Option<Box<dyn core::any::Any + Send>>) {
            let mut first_panic = None;
            loop {
                let (parts, part) = match self.claim(me) {
                    Ok(claimed) => claimed,
                    Err(generation) => return (generation, first_panic),
                };
                self.seen_on(me);
                for i in parts {
                    if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| part(i))) {
                        self.panicked.store(true, Relaxed);
                        first_panic.get_or_insert(e);
                    }
                }
                self.done.fetch_add(1, Release);
            }
        }
    }

    /// How a job's parts map to slots: one part a slot, or runs of
    /// consecutive parts when there are more parts than [`SLOTS`].
    struct Slots {
        parts: usize,
        /// Parts a slot runs (the last may run fewer).
        per: usize,
        /// Slots the parts fill.
        count: usize,
    }

    impl Slots {
        fn of(parts: usize) -> Self {
            let per = parts.div_ceil(SLOTS).max(1);
            Slots {
                parts,
                per,
                count: parts.div_ceil(per),
            }
        }

        /// The parts slot `s` runs.
        fn run(&self, s: usize) -> core::ops::Range<usize> {
            (s * self.per).min(self.parts)..((s + 1) * self.per).min(self.parts)
        }
    }

    pub(super) fn threads() -> usize {
        pool().threads.load(Relaxed)
    }

    pub(super) fn set_threads(n: usize) {
        let p = pool();
        let n = n.clamp(1, super::MAX_THREADS);
        // Workers start between jobs: they begin at the current generation.
        let _guard = lock(&p.submit);
        while p.workers.load(Relaxed) < n - 1 {
            let seen = p.word.load(Acquire) >> 1;
            let me = p.workers.load(Relaxed) + 1;
            let started = std::thread::Builder::new()
                .name("ptec-worker".into())
                .spawn(move || worker(pool(), me, seen));
            if started.is_err() {
                break;
            }
            p.workers.fetch_add(1, Relaxed);
        }
        p.threads.store(n.min(p.workers.load(Relaxed) + 1), Relaxed);
    }

    /// Worker `me` (from 1; the caller is 0).
    fn worker(p: &Pool, me: usize, mut seen: u64) {
        loop {
            let fresh = || p.word.load(SeqCst) >> 1 != seen || p.stopping();
            if !p.spin_until(me, 0..1, SPIN, fresh) {
                let mut guard = lock(&p.sleep);
                p.sleepers.fetch_add(1, SeqCst);
                while !fresh() {
                    guard = p.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                p.sleepers.fetch_sub(1, SeqCst);
            }
            if p.stopping() {
                return;
            }
            // A panic here is already recorded for the job's caller.
            seen = p.work(me).0;
        }
    }

    impl Pool {
        /// Whether the workers are to return: only a loom model's ever do.
        fn stopping(&self) -> bool {
            #[cfg(loom)]
            return self.stop.load(SeqCst);
            #[cfg(not(loom))]
            false
        }
    }

    /// Runs every part on this thread, with the same panic behaviour as a
    /// job on the pool.
    pub(super) fn run_here(parts: usize, part: &(dyn Fn(usize) + Sync)) {
        let mut first_panic = None;
        for i in 0..parts {
            if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| part(i))) {
                first_panic.get_or_insert(e);
            }
        }
        if let Some(e) = first_panic {
            std::panic::resume_unwind(e);
        }
    }

    /// Runs a job on the pool; false when the pool is busy (the caller then
    /// runs the parts itself).
    ///
    /// The caller takes parts too, and waits only for the parts workers
    /// have taken: a worker that comes late (switched out, or asleep) finds
    /// none left.
    pub(super) fn run(parts: usize, part: &(dyn Fn(usize) + Sync)) -> bool {
        pool().run(parts, part)
    }

    impl Pool {
        fn run(&self, parts: usize, part: &(dyn Fn(usize) + Sync)) -> bool {
            let p = self;
            let Ok(_guard) = p.submit.try_lock() else {
                return false;
            };
            let threads = p.threads.load(Relaxed);
            if p.workers.load(Relaxed).min(threads - 1) == 0 {
                return false;
            }
            // SAFETY: erases the part's lifetime; this function does not return
            // before every claimed part is done, and no part is claimed after.
            let part: Part = unsafe { core::mem::transmute(part) };
            p.open(parts, threads, &part);
            if p.sleepers.load(SeqCst) > 0 {
                let _sleep = lock(&p.sleep);
                p.wake.notify_all();
            }
            p.seen_on(0);
            let (_, caller_panic) = p.work(0);
            let slots = Slots::of(parts).count;
            p.spin_until(0, 1..super::MAX_THREADS, Duration::MAX, || {
                p.done.load(Acquire) == slots
            });
            if let Some(e) = caller_panic {
                std::panic::resume_unwind(e);
            }
            if p.panicked.load(Relaxed) {
                panic!("a part of a parallel kernel panicked");
            }
            true
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::vec::Vec;

        /// Every slot `me` can claim of the current job, in the order it
        /// claims them.
        fn claims(p: &Pool, me: usize) -> Vec<core::ops::Range<usize>> {
            core::iter::from_fn(|| p.claim(me).ok().map(|(parts, _)| parts)).collect()
        }

        #[test]
        fn threads_claim_their_own_parts_first() {
            let p = Pool::new();
            let part: Part = &|_| {};
            // Thread 1 of 2 takes part 1, then steals part 0.
            p.open(2, 2, &part);
            assert_eq!(claims(&p, 1), [1..2, 0..1]);
            assert!(claims(&p, 0).is_empty());
            // Thread 0 of 2 takes 0 and 2, then 1 and 3.
            p.open(4, 2, &part);
            assert_eq!(claims(&p, 0), [0..1, 2..3, 1..2, 3..4]);
            // A thread beyond the job's threads (they were reduced) owns
            // none: it takes them in order.
            p.open(3, 2, &part);
            assert_eq!(p.claim(1).map(|(parts, _)| parts), Ok(1..2));
            assert_eq!(claims(&p, 5), [0..1, 2..3]);
            // More parts than slots: runs of consecutive parts a slot.
            p.open(2 * SLOTS + 1, 1, &part);
            let all = claims(&p, 0);
            let parts = 2 * SLOTS + 1;
            assert_eq!((all.len(), all[0].clone()), (parts.div_ceil(3), 0..3));
            assert_eq!(all.last().map(|r| r.end), Some(parts));
            assert!(all.windows(2).all(|w| w[0].end == w[1].start && w[0].len() == 3));
        }

        /// A slot a late thread marked under a job that has ended (its
        /// claim then fails) is free in the next job.
        #[test]
        fn a_slot_marked_under_an_ended_job_stays_free() {
            let p = Pool::new();
            let part: Part = &|_| {};
            p.open(2, 2, &part);
            let stale = p.word.load(SeqCst);
            assert_eq!(claims(&p, 0), [0..1, 1..2]);
            p.open(2, 2, &part);
            // A thread that read the old word marks slot 1 under it.
            p.slots[1].store(stale >> 1, SeqCst);
            assert_eq!(claims(&p, 1), [1..2, 0..1]);
        }
    }

    /// The hand-off protocol under loom, which runs the code above (its
    /// atomics, locks and threads loom's) in every interleaving of its
    /// threads and every outcome the memory model allows its atomics, up
    /// to loom's preemption bound. Run alone, with
    /// `RUSTFLAGS="--cfg loom" cargo test -p ptec-kernels --release --lib
    /// parallel::pool::loom_model` (docs/soundness.md): under `--cfg loom`
    /// the global pool is loom's too, which only a model may use.
    #[cfg(all(test, loom))]
    mod loom_model {
        use super::*;
        use loom::cell::UnsafeCell;
        use loom::sync::Arc;
        use std::vec::Vec;

        /// What each part writes, with no synchronisation of its own:
        /// loom reports any access the pool's hand-offs do not order
        /// after the last write.
        struct Outputs([UnsafeCell<usize>; 3]);

        // SAFETY: the model checks that the pool orders every access (loom
        // reports a race on an `UnsafeCell` as a failure).
        unsafe impl Sync for Outputs {}

        impl Outputs {
            fn slot(&self, i: usize) -> &UnsafeCell<usize> {
                &self.0[i]
            }
        }

        /// A caller and `workers` workers run `jobs` (their part counts)
        /// back to back: each part runs once, for its own job, and the
        /// caller sees every part's writes when its call returns. Exhaustive
        /// up to `preemptions` preemptions (`LOOM_MAX_PREEMPTIONS` sets
        /// another); unbounded, it runs for hours.
        fn check(workers: usize, jobs: &'static [usize], preemptions: usize) {
            let mut model = loom::model::Builder::new();
            model.preemption_bound.get_or_insert(preemptions);
            model.check(move || {
                let pool = Arc::new(Pool::new());
                pool.threads.store(workers + 1, Relaxed);
                pool.workers.store(workers, Relaxed);
                let workers: Vec<_> = (1..=workers)
                    .map(|me| {
                        let pool = pool.clone();
                        loom::thread::spawn(move || worker(&pool, me, 0))
                    })
                    .collect();
                let out = Outputs(core::array::from_fn(|_| UnsafeCell::new(0)));
                for (job, &parts) in jobs.iter().enumerate() {
                    // Part `i` adds its job's mark: a part run twice, or
                    // for another job, leaves a wrong sum.
                    let part = |i: usize| {
                        out.slot(i).with_mut(|v| {
                            // SAFETY: only part `i` writes slot `i` (loom checks
                            // the order against the caller's reads).
                            unsafe { *v += 1 << (4 * job) }
                        })
                    };
                    assert!(pool.run(parts, &part), "the pool took job {job}");
                    for (i, slot) in out.0.iter().enumerate() {
                        let want: usize = (0..=job).filter(|&j| i < jobs[j]).map(|j| 1 << (4 * j)).sum();
                        // SAFETY: the job is done: no part runs now.
                        assert_eq!(slot.with(|v| unsafe { *v }), want, "job {job}, part {i}");
                    }
                }
                pool.stop.store(true, SeqCst);
                {
                    let _sleep = lock(&pool.sleep);
                    pool.wake.notify_all();
                }
                for w in workers {
                    w.join().unwrap();
                }
            });
        }

        /// A job of two parts, then one of three: a worker that comes late
        /// to the first may read the second's part count.
        #[test]
        fn two_workers_two_jobs() {
            check(2, &[2, 3], 2);
        }

        /// The same on one worker, to three preemptions: enough for a
        /// worker to read one job's word and the next job's part count.
        #[test]
        fn one_worker_two_jobs() {
            check(1, &[2, 3], 3);
        }
    }
}

// Not on WASI, whose programs start no threads (the pool then runs every
// part on the caller's), nor catch panics.
#[cfg(all(test, feature = "std", not(target_os = "wasi")))]
pub(crate) mod tests {
    extern crate std;
    use super::*;
    use core::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::vec::Vec;

    /// The thread count is global: these tests take turns setting it.
    /// (Other modules' tests that set it take this turn too.)
    pub(crate) static TURN: Mutex<()> = Mutex::new(());

    #[test]
    fn every_part_runs_once_on_any_number_of_threads() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        for threads in [1, 2, 3, 8] {
            set_threads(threads);
            for parts in [0, 1, 2, 7, 100] {
                let hits: Vec<AtomicUsize> = (0..parts).map(|_| AtomicUsize::new(0)).collect();
                let rounds = if cfg!(miri) { 3 } else { 50 };
                for _ in 0..rounds {
                    run_parts(parts, &|i| {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    });
                }
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == rounds),
                    "{threads} threads, {parts} parts"
                );
            }
        }
        set_threads(1);
    }

    /// Jobs back to back, so that workers come late to many of them (with
    /// more threads than CPUs, most do): each part of each job runs once,
    /// and only for its own job.
    #[test]
    fn back_to_back_jobs_run_their_own_parts_once() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        for threads in [3, MAX_THREADS] {
            set_threads(threads);
            let sum = AtomicUsize::new(0);
            let mut want = 0;
            // Fewer under Miri, which interprets each (its many seeds vary
            // the interleavings instead).
            for job in 0..if cfg!(miri) { 200 } else { 20_000usize } {
                let parts = 1 + job % 4;
                run_parts(parts, &|i| {
                    sum.fetch_add(job * 4 + i, Ordering::Relaxed);
                });
                want += (0..parts).map(|i| job * 4 + i).sum::<usize>();
                assert_eq!(sum.load(Ordering::Relaxed), want, "{threads} threads, job {job}");
            }
        }
        set_threads(1);
    }

    #[test]
    fn split_covers_the_items_in_whole_grains() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        set_threads(2);
        let two = split(100, 8);
        assert_eq!(two.ranges().collect::<Vec<_>>(), [(0, 56), (56, 100)]);
        assert_eq!(split(5, 8).ranges().collect::<Vec<_>>(), [(0, 5)]);
        assert_eq!(split(0, 8).ranges().collect::<Vec<_>>(), [(0, 0)]);
        set_threads(3);
        // 5 grains over 3 threads: 2 + 2 + 1.
        assert_eq!(split(10, 2).ranges().collect::<Vec<_>>(), [(0, 4), (4, 8), (8, 10)]);
        // 4 grains over 3 threads: 2 + 2, no empty third part.
        assert_eq!(split(8, 2).ranges().collect::<Vec<_>>(), [(0, 4), (4, 8)]);
        set_threads(1);
        assert_eq!(split(100, 8).ranges().collect::<Vec<_>>(), [(0, 100)]);
        // A split made on two threads keeps its parts.
        assert_eq!((two.parts(), two.range(1), two.range(2)), (2, Some((56, 100)), None));
    }

    #[test]
    fn even_splits_take_as_many_parts_in_finer_grains() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        set_threads(2);
        // 14 × 14 pixels: 128 + 68 in grains of 32, 104 + 92 in tiles of 8.
        assert_eq!(split(196, 32).ranges().collect::<Vec<_>>(), [(0, 128), (128, 196)]);
        assert_eq!(
            split_even(196, 32, 8).ranges().collect::<Vec<_>>(),
            [(0, 104), (104, 196)]
        );
        // Too few items for two coarse grains: one part, however fine.
        assert_eq!(split_even(30, 32, 1).ranges().collect::<Vec<_>>(), [(0, 30)]);
        set_threads(4);
        for items in 0..300 {
            for (coarse, fine) in [(32, 8), (7, 1), (5, 3), (1, 1)] {
                let s = split_even(items, coarse, fine);
                let parts = split(items, coarse).parts().min(items.div_ceil(fine)).max(1);
                assert_eq!(s.parts(), parts, "{items} by {coarse}");
                let r: Vec<_> = s.ranges().collect();
                assert_eq!((r[0].0, r[r.len() - 1].1), (0, items));
                assert!(r.windows(2).all(|w| w[0].1 == w[1].0 && w[0].1 % fine == 0));
                // Every part but the last whole grains, as many as another
                // give or take one.
                let grains: Vec<_> = r.iter().map(|(a, b)| (b - a).div_ceil(fine)).collect();
                let (lo, hi) = (grains.iter().min().unwrap(), grains.iter().max().unwrap());
                assert!(
                    hi - lo <= 1 && r.iter().all(|(a, b)| a < b || items == 0),
                    "{items}: {r:?}"
                );
            }
        }
        set_threads(1);
    }

    /// The kernels that split their work give the same bits on one thread
    /// and on two.
    #[test]
    #[cfg_attr(miri, ignore = "its products are too large to interpret; ThreadSanitizer runs it")]
    fn split_kernels_match_one_thread() {
        use crate::gemm::{gemm_packed, pack, packed_len};
        use crate::nhwc::{depthwise_conv2d_nhwc, Conv2dNhwc};
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let rng = |seed: u64, n: usize| crate::testing::Lcg(seed).vec(n);
        let run_both = |f: &dyn Fn() -> Vec<f32>| {
            set_threads(1);
            let one = f();
            set_threads(2);
            let two = f();
            set_threads(1);
            assert_eq!(
                one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                two.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        };
        use crate::activation::Activation::{Hardswish, Identity};
        // One packed product on one thread and on two: `[m, n, k, lda,
        // ldc]`, B transposed or not, A, B, the bias and the residual drawn
        // from `seed`, the epilogue adding the bias and the residual when
        // asked; C starts at 7 (the gaps of a strided C must stay).
        let product =
            |[m, n, k, lda, ldc]: [usize; 5], trans: bool, seed: u64, adds: (bool, bool), clamp: f32, activation| {
                let (a, b) = (rng(seed, m * lda), rng(seed + 1, k * n));
                let (bias, residual) = (rng(seed + 2, n), rng(seed + 3, m * ldc));
                let mut packed = std::vec![0.0; packed_len(k, n)];
                pack(&b, k, n, trans, &mut packed);
                run_both(&|| {
                    let mut c = std::vec![7.0; m * ldc];
                    let e = crate::gemm::Epilogue {
                        bias: adds.0.then_some(&bias[..]),
                        residual: adds.1.then_some(&residual[..]),
                        min: -clamp,
                        max: clamp,
                        activation,
                    };
                    gemm_packed(m, n, k, &a, lda, &packed, &e, &mut c, ldc);
                    c
                });
            };
        let inf = f32::INFINITY;
        for (m, n, k) in [(100, 70, 300), (49, 300, 100), (1000, 33, 16)] {
            product([m, n, k, k, n], false, 1, (false, false), inf, Identity);
        }
        // 49 rows against a wider B: split by tiles, strip by strip (some
        // strips shared by two parts), with bias and residual.
        product([49, 160, 960, 960, 160], false, 4, (true, true), 3.0, Identity);
        // One row against a weight larger than the cache (MobileNetV3's
        // squeeze-excitation): split strip by strip, each part applying
        // the activation to its columns.
        product([1, 240, 960, 960, 240], false, 14, (true, false), inf, Hardswish);
        // Bands of rows, each with its rows of the residual.
        product([100, 70, 300, 300, 70], false, 1, (false, true), inf, Identity);
        // A batch of 5 rows: split by columns, each part its strips, its
        // bias, its columns of the residual and of a strided C (the gaps
        // left as they were).
        product([5, 700, 300, 301, 703], true, 10, (true, true), 0.5, Identity);
        // One row against a large packed weight (a batch of one through
        // a fully-connected layer): split by strips, with bias, residual
        // and clamp.
        product([1, 700, 400, 400, 700], true, 18, (true, true), 2.0, Identity);
        // Depthwise: on AVX2, output rows when each thread gets at least
        // 7 (the first five), else channel blocks of 32, the last one
        // partial (the next two); stride 2 too. On AVX-512, stride 1 splits
        // channel blocks and stride 2 output rows.
        let cases = [
            ([2, 40, 40, 48], 1),
            ([1, 30, 30, 40], 1),
            ([2, 41, 37, 48], 2),
            ([2, 33, 30, 24], 1),
            ([1, 60, 60, 19], 2),
            ([1, 12, 12, 112], 1),
            ([2, 11, 40, 80], 2),
        ];
        for (input, stride) in cases {
            let c = input[3];
            let g = Conv2dNhwc::depthwise(&input, &[1, 3, 3, c], [stride; 2], [1, 1, 1, 1], [1, 1]).unwrap();
            let (x, w) = (rng(3, input.iter().product()), rng(4, 9 * c));
            run_both(&|| {
                let mut out = std::vec![0.0; g.window.out_pixels() * c];
                depthwise_conv2d_nhwc(&g, &x, &w, None, -1.0, 1.0, &mut out);
                out
            });
        }
        // Global average pooling of one image, in bands of 16 channels
        // (the last one partial).
        for (pixels, c) in [(49, 1280), (30, 1000)] {
            let x = rng(10, pixels * c);
            run_both(&|| {
                let mut out = std::vec![0.0; c];
                crate::nhwc::global_avg_pool_nhwc(1, pixels, c, &x, -0.1, 0.2, &mut out);
                out
            });
        }
        // A classifier: one row times a Linear weight, split by columns.
        let (a, b, bias) = (rng(7, 300), rng(8, 1000 * 300), rng(9, 1000));
        run_both(&|| {
            let mut c = std::vec![0.0; 1000];
            let e = crate::gemm::Epilogue::new(Some(&bias), true);
            crate::gemm::sgemm_fused(1, 1000, 300, 1.0, &a, false, &b, true, 0.0, &e, &mut c, &mut []);
            c
        });
        // Products of two run-time operands (sgemm packs B as it goes):
        // bands of rows per depth block, with alpha, beta, bias and clamp;
        // A stored transposed too.
        let (m, n, k) = (90, 600, 700);
        let (a, b, bias, c0) = (rng(14, m * k), rng(15, k * n), rng(16, n), rng(17, m * n));
        for (a_trans, b_trans) in [(false, false), (false, true), (true, false)] {
            run_both(&|| {
                let mut c = c0.clone();
                let mut scratch = std::vec![0.0; crate::gemm::gemm_scratch_len(m, n, k)];
                let e = crate::gemm::Epilogue {
                    bias: Some(&bias),
                    residual: None,
                    min: -4.0,
                    max: 4.0,
                    activation: crate::activation::Activation::Identity,
                };
                crate::gemm::sgemm_fused(m, n, k, 0.5, &a, a_trans, &b, b_trans, 0.25, &e, &mut c, &mut scratch);
                c
            });
        }
        // An attention's products: each part a share of the batch, with
        // its own scratch; then its softmax, in bands of rows.
        let (batch, m, k, n) = (5, 40, 24, 36);
        let (a, b) = (rng(18, batch * m * k), rng(19, batch * k * n));
        run_both(&|| {
            let mut out = std::vec![0.0; batch * m * n];
            let mut scratch = std::vec![0.0; crate::linear::bmm_scratch_len(batch, m, n, k)];
            crate::linear::bmm(&a, &b, batch, m, k, n, &mut out, &mut scratch);
            out
        });
        let x = rng(20, 4 * 64 * 128);
        run_both(&|| {
            let mut out = std::vec![0.0; x.len()];
            crate::softmax::softmax(&x, &[4, 64, 128], -1, &mut out).unwrap();
            out
        });
        // A copy large enough to go in bands.
        let x = rng(21, 50_000);
        run_both(&|| {
            let mut out = std::vec![0.0; x.len()];
            crate::shape::copy(&x, &mut out);
            assert_eq!(out, x);
            out
        });
        // Element-wise maps in bands of their outermost dim of more than
        // one element: a transposed read, a broadcast bias, and a `where`
        // with a broadcast mask and scalar.
        let x = rng(22, 100 * 300);
        run_both(&|| {
            let mut out = std::vec![0.0; x.len()];
            crate::elementwise::map_strided(&mut out, &[1, 100, 300], &x, &[0, 1, 100], |v| v * 2.0 + 1.0);
            out
        });
        let (a, bias) = (rng(23, 128 * 256), rng(24, 256));
        run_both(&|| {
            let mut out = std::vec![0.0; a.len()];
            crate::elementwise::zip(&mut out, &[1, 128, 256], &a, &[0, 256, 1], &bias, &[0, 0, 1], |x, y| {
                x + y
            });
            out
        });
        let (a, mask) = (rng(25, 4 * 64 * 128), rng(26, 4 * 128));
        let mask: std::vec::Vec<bool> = mask.iter().map(|&v| v > 0.0).collect();
        run_both(&|| {
            let mut out = std::vec![0.0; a.len()];
            let (sizes, fill) = ([4, 64, 128], [-1e9f32]);
            crate::elementwise::zip3(
                &mut out,
                &sizes,
                &mask,
                &[128, 0, 1],
                &fill,
                &[0; 3],
                &a,
                &[8192, 128, 1],
                |m, f, x| {
                    if m {
                        f
                    } else {
                        x
                    }
                },
            );
            out
        });
        // Permutations in bands: of a batch of transposes (attention heads),
        // of one transpose's output rows (an NCHW image to NHWC, with 3
        // channels interleaved, and with 6 by tiles), and of the outermost
        // output dim of more than one element.
        for (sizes, dims) in [
            (&[1, 4, 128, 64][..], &[0, 1, 3, 2][..]),
            (&[1, 3, 120, 201], &[0, 2, 3, 1]),
            (&[1, 6, 60, 70], &[0, 2, 3, 1]),
            (&[1, 128, 1, 3, 256], &[3, 1, 2, 0, 4]),
            (&[2, 30, 50, 60], &[0, 2, 1, 3]),
        ] {
            let x = rng(27, sizes.iter().product());
            run_both(&|| {
                let mut out = std::vec![0.0; x.len()];
                crate::shape::permute_copy(&x, sizes, dims, &mut out);
                out
            });
        }
        // A batch of products too small to need a scratch: each part still
        // gets its (empty) share of it, and computes its matrices.
        let (x, y) = (rng(31, 5 * 2 * 6), rng(32, 5 * 6 * 48));
        run_both(&|| {
            let mut out = std::vec![0.0; 5 * 2 * 48];
            crate::linear::bmm(&x, &y, 5, 2, 6, 48, &mut out, &mut []);
            out
        });
        // Layer norms in bands of rows, each band its rows of the mean and
        // the reciprocal deviation too; one with an odd number of rows.
        for (rows, n, affine) in [(300, 96, true), (129, 256, false)] {
            let (x, w, b) = (rng(28, rows * n), rng(29, n), rng(30, n));
            run_both(&|| {
                let mut out = std::vec![0.0; rows * n + 2 * rows];
                let (y, stats) = out.split_at_mut(rows * n);
                let (mean, rstd) = stats.split_at_mut(rows);
                let (w, b) = if affine {
                    (Some(&w[..]), Some(&b[..]))
                } else {
                    (None, None)
                };
                crate::norm::native_layer_norm(&x, &[rows, n], &[n], w, b, 1e-5, y, mean, rstd).unwrap();
                out
            });
        }
        // A stem convolution, multiplied from the image (nhwc::direct).
        let g = Conv2dNhwc::regular(&[1, 64, 64, 3], &[32, 3, 3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 1).unwrap();
        let (x, w) = (rng(5, 64 * 64 * 3), rng(6, 32 * 27));
        run_both(&|| {
            let mut out = std::vec![0.0; 32 * 32 * 32];
            let mut scratch = std::vec![0.0; g.scratch_len(false)];
            crate::nhwc::conv2d_nhwc(&g, &x, &w, None, 0.0, 6.0, None, &mut out, &mut scratch);
            out
        });
        // An expansion, depthwise and projection chain with a residual:
        // each part its output rows and band buffers, two images.
        let g1 = Conv2dNhwc::regular(&[2, 31, 20, 8], &[144, 1, 1, 8], [1, 1], [0; 4], [1, 1], 1).unwrap();
        let g2 = Conv2dNhwc::depthwise(&[2, 31, 20, 144], &[1, 3, 3, 144], [2, 2], [1; 4], [1, 1]).unwrap();
        let g3 = Conv2dNhwc::regular(&g2.output_sizes(), &[24, 1, 1, 144], [1, 1], [0; 4], [1, 1], 1).unwrap();
        let (x, w1, w2, w3) = (
            rng(7, 2 * 31 * 20 * 8),
            rng(8, 144 * 8),
            rng(9, 144 * 9),
            rng(10, 24 * 144),
        );
        let residual = rng(11, g3.window.out_pixels() * 24);
        let conv = |geometry, w, residual| crate::nhwc::FoldedConv {
            geometry,
            algorithm: crate::nhwc::Algorithm::Direct,
            layout: crate::nhwc::FilterLayout::Torch,
            w,
            bias: None,
            bn: None,
            residual,
            min: f32::NEG_INFINITY,
            max: f32::INFINITY,
            activation: crate::nhwc::Activation::Identity,
        };
        let stages = [
            conv(g1, &w1[..], None),
            conv(g2, &w2[..], None),
            conv(g3, &w3[..], Some(&residual[..])),
        ];
        run_both(&|| {
            let mut out = std::vec![0.0; g3.window.out_pixels() * 24];
            let mut kept: Vec<Vec<f32>> = [g1, g2, g3]
                .iter()
                .map(|g| std::vec![0.0; g.folded_len(crate::nhwc::Algorithm::Direct)])
                .collect();
            for (stage, k) in stages.iter().zip(&mut kept) {
                stage.prepare(k);
            }
            let prepared: Vec<&[f32]> = kept.iter().map(|k| &k[..]).collect();
            // Shares larger than the chain's buffers, as in a program's
            // thread scratch.
            let len = crate::nhwc::chain_scratch_len(&[g1, g2, g3]).unwrap() + crate::nhwc::MAX_CHAIN_PARTS * 13 + 3;
            let mut scratch = std::vec![f32::NAN; len];
            crate::nhwc::conv2d_folded_chain(&stages, &prepared, &x, &mut out, &mut scratch);
            out
        });
    }

    /// On two threads a chain's part `p` keeps its buffers at the start of
    /// share `p` of the scratch, whatever the scratch's length: a program
    /// gives all its chains one scratch, and each thread's buffers must
    /// stay in the share only that thread writes.
    #[test]
    fn chain_parts_keep_to_their_shares() {
        use crate::nhwc::{
            chain_scratch_len, conv2d_folded_chain, Conv2dNhwc, FilterLayout, FoldedConv, MAX_CHAIN_PARTS,
        };
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let g1 = Conv2dNhwc::regular(&[1, 24, 16, 8], &[32, 1, 1, 8], [1, 1], [0; 4], [1, 1], 1).unwrap();
        let g2 = Conv2dNhwc::depthwise(&[1, 24, 16, 32], &[1, 3, 3, 32], [1, 1], [1; 4], [1, 1]).unwrap();
        let (x, w1, w2) = (
            crate::testing::Lcg(1).vec(24 * 16 * 8),
            crate::testing::Lcg(2).vec(32 * 8),
            crate::testing::Lcg(3).vec(32 * 9),
        );
        let conv = |geometry, w| FoldedConv {
            geometry,
            algorithm: crate::nhwc::Algorithm::Direct,
            layout: FilterLayout::Torch,
            w,
            bias: None,
            bn: None,
            residual: None,
            min: f32::NEG_INFINITY,
            max: f32::INFINITY,
            activation: crate::nhwc::Activation::Identity,
        };
        let stages = [conv(g1, &w1[..]), conv(g2, &w2[..])];
        let mut kept: Vec<Vec<f32>> = [g1, g2]
            .iter()
            .map(|g| std::vec![0.0; g.folded_len(crate::nhwc::Algorithm::Direct)])
            .collect();
        for (stage, k) in stages.iter().zip(&mut kept) {
            stage.prepare(k);
        }
        let prepared: Vec<&[f32]> = kept.iter().map(|k| &k[..]).collect();
        let part = chain_scratch_len(&[g1, g2]).unwrap() / MAX_CHAIN_PARTS;
        let share = 2 * part + 16;
        let mut scratch = std::vec![f32::NAN; MAX_CHAIN_PARTS * share];
        let mut out = std::vec![0.0; 24 * 16 * 32];
        set_threads(2);
        conv2d_folded_chain(&stages, &prepared, &x, &mut out, &mut scratch);
        set_threads(1);
        let written = |r: core::ops::Range<usize>| scratch[r].iter().filter(|v| !v.is_nan()).count();
        assert!(
            written(0..part) > 0 && written(share..share + part) > 0,
            "both parts use their shares"
        );
        assert_eq!(written(part..share), 0, "part 1 stays out of share 0");
        assert_eq!(
            written(share + part..MAX_CHAIN_PARTS * share),
            0,
            "nothing past part 1's buffers"
        );
    }

    /// Many small and large split kernels back to back from several
    /// caller threads at once, on 2 and 8 threads: one caller holds the
    /// pool while the others run their parts themselves, and they trade
    /// it as jobs end. Every result has one thread's bits.
    #[test]
    #[cfg_attr(miri, ignore = "too large to interpret; ThreadSanitizer runs it")]
    fn concurrent_callers_get_one_threads_bits() {
        use crate::gemm::{gemm_packed, pack, packed_len, Epilogue};
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let rng = |seed: u64, n: usize| crate::testing::Lcg(seed).vec(n);
        // Products too small to split, split by rows, and split by tiles.
        let products: Vec<_> = [(3, 8, 8), (64, 48, 32), (100, 70, 300), (49, 160, 96), (5, 300, 64)]
            .into_iter()
            .enumerate()
            .map(|(i, (m, n, k))| {
                let mut packed = std::vec![0.0; packed_len(k, n)];
                pack(&rng(2 * i as u64 + 1, k * n), k, n, false, &mut packed);
                (m, n, k, rng(2 * i as u64 + 2, m * k), packed)
            })
            .collect();
        let product = |i: usize| {
            let (m, n, k, a, packed) = &products[i];
            let mut c = std::vec![0.0f32; m * n];
            gemm_packed(*m, *n, *k, a, *k, packed, &Epilogue::NONE, &mut c, *n);
            c.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        // A memory-bound map in bands, of 1 and of 64 rows of 1024.
        let bands = |rows: usize| {
            let mut v = rng(rows as u64, rows * 1024);
            for_each_band(&mut v, rows, 1024, 1, true, &|_, piece| {
                piece.iter_mut().for_each(|x| *x = x.mul_add(3.0, 0.5).sin())
            });
            v.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        set_threads(1);
        let want: Vec<_> = (0..products.len()).map(product).collect();
        let want_bands = [bands(1), bands(64)];
        for threads in [2, 8] {
            set_threads(threads);
            std::thread::scope(|s| {
                for caller in 0..4 {
                    let (want, want_bands, product, bands) = (&want, &want_bands, &product, &bands);
                    s.spawn(move || {
                        for round in 0..200 {
                            let i = (caller + round) % want.len();
                            assert!(product(i) == want[i], "{threads} threads, caller {caller}, product {i}");
                            let b = round % 2;
                            assert!(
                                bands([1, 64][b]) == want_bands[b],
                                "{threads} threads, caller {caller}, bands {b}"
                            );
                        }
                    });
                }
            });
        }
        set_threads(1);
    }

    #[test]
    fn pieces_are_disjoint_and_taken_once() {
        let mut v: Vec<u32> = (0..10).collect();
        let pieces = Pieces::new(&mut v, [0, 4, 7].into_iter());
        let a = pieces.take(1).unwrap();
        assert_eq!(a, &[4, 5, 6]);
        assert!(pieces.take(1).is_none());
        assert_eq!(pieces.take(2).unwrap(), &[7, 8, 9]);
        assert_eq!(pieces.take(0).unwrap(), &[0, 1, 2, 3]);
        assert!(pieces.take(3).is_none());
        a[0] = 40;
        assert_eq!(v[4], 40);
        // Empty pieces are handed out too: each part of a split gets one,
        // even of an empty scratch (a bmm of small products needs none).
        let mut none: [u32; 0] = [];
        let pieces = Pieces::new(&mut none, [0, 0, 0].into_iter());
        for i in 0..3 {
            assert_eq!(pieces.take(i).map(|p| p.len()), Some(0), "piece {i}");
        }
        assert!(pieces.take(3).is_none());
        let mut v: Vec<u32> = (0..4).collect();
        let pieces = Pieces::new(&mut v, [0, 4].into_iter());
        assert_eq!(pieces.take(0).unwrap(), &[0, 1, 2, 3]);
        assert_eq!(pieces.take(1).map(|p| p.len()), Some(0));
    }

    #[test]
    fn a_panicking_part_panics_the_call_after_the_others_finish() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        set_threads(2);
        let done = AtomicUsize::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_parts(8, &|i| {
                if i == 3 {
                    panic!("part 3");
                }
                done.fetch_add(1, Ordering::Relaxed);
            })
        }));
        assert!(r.is_err());
        assert_eq!(done.load(Ordering::Relaxed), 7);
        // The pool still works.
        let n = AtomicUsize::new(0);
        run_parts(4, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 4);
        set_threads(1);
    }
}
