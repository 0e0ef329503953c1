//! Event tracing: what code generated with `trace = true` reports as it
//! runs, in the terms of ExecuTorch's event tracer, so that its devtools
//! (the ETDump file and the Inspector) read a compiled program's profiles
//! and intermediate outputs.
//!
//! Generated code calls a [`Tracer`] around each instruction it runs,
//! naming the instruction by its [`Origin`] in the program ExecuTorch
//! wrote (ptec's passes renumber instructions; the origin does not
//! change). [`Recorder`] is the tracer that keeps what ExecuTorch's
//! `ETDumpGen` keeps, in memory the caller gives: no allocation while the
//! program runs, and the same on `no_std` targets, where the caller also
//! gives the clock. With the `etdump` feature, [`Recorder::to_etdump`]
//! writes it as the ETDump flatbuffer.
//!
//! Without `trace = true` the generated code has none of this: tracing is
//! decided at compile time and costs nothing when off.
use crate::{ScalarType, TensorRef};

/// Where an instruction of compiled code comes from, in ExecuTorch's
/// numbering of the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The instruction's chain (ExecuTorch's programs have one per method).
    pub chain: u32,
    /// The instruction's index in its chain.
    pub instruction: u32,
    /// For code compiled from a node of an XNNPACK subgraph (the delegate
    /// call at `instruction`): the node's debug handle, which ExecuTorch's
    /// devtools know as a delegate debug id.
    pub delegate_node: Option<u32>,
    /// For a kernel call: the operator ExecuTorch's instruction calls,
    /// without its namespace (`addmm.out`). ExecuTorch's runtime times the
    /// kernel itself too, as `native_call_addmm.out` within the
    /// instruction's `OPERATOR_CALL`, and tools such as Model Explorer's
    /// ETDump overlay read only those.
    pub operator: Option<&'static str>,
}

/// What generated code reports while it runs.
///
/// Every method has a default that does nothing, so a tracer implements
/// what it needs. Calls come in this order for each execution: one
/// `begin_execute`, then for each instruction `begin`, `end` and, when
/// [`Tracer::wants_outputs`], one `output` per output tensor, then
/// `end_execute` (not reached when the execution fails).
pub trait Tracer {
    /// An execution of method `method` starts.
    fn begin_execute(&mut self, method: &str) {
        let _ = method;
    }
    /// The execution ends (successfully).
    fn end_execute(&mut self) {}
    /// An instruction starts.
    fn begin(&mut self, origin: Origin) {
        let _ = origin;
    }
    /// The instruction `begin` named ends.
    fn end(&mut self, origin: Origin) {
        let _ = origin;
    }
    /// Whether to call [`Tracer::output`] with instructions' outputs.
    fn wants_outputs(&self) -> bool {
        false
    }
    /// An output of the instruction at `origin`, just computed; `name` is
    /// its operator's (`aten::addmm.out`).
    fn output(&mut self, origin: Origin, name: &'static str, tensor: TensorRef<'_>) {
        let _ = (origin, name, tensor);
    }
}

/// A source of timestamps for [`Recorder`]: any monotonic count (the
/// ETDump calls them ticks; ExecuTorch's devtools assume nanoseconds
/// unless told otherwise).
pub trait Clock {
    fn now(&mut self) -> u64;
}

impl<F: FnMut() -> u64> Clock for F {
    fn now(&mut self) -> u64 {
        self()
    }
}

/// Nanoseconds since the clock was made, from [`std::time::Instant`].
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug)]
pub struct StdClock(std::time::Instant);

#[cfg(feature = "std")]
impl StdClock {
    pub fn new() -> Self {
        StdClock(std::time::Instant::now())
    }
}

#[cfg(feature = "std")]
impl Default for StdClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "std")]
impl Clock for StdClock {
    fn now(&mut self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The most dimensions a recorded tensor has (ExecuTorch's limit).
pub const MAX_RANK: usize = 16;

/// What a [`Recorder`] keeps of a profiling event's kind: its name in the
/// ETDump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileKind {
    /// `Method::execute`: a whole execution.
    Execute,
    /// `OPERATOR_CALL`: one kernel instruction.
    Operator,
    /// `DELEGATE_CALL`: one delegate instruction, all its nodes.
    Delegate,
    /// One node of a compiled delegate, named by its delegate debug id.
    DelegateNode,
    /// `native_call_` and the operator's name: the kernel of one kernel
    /// instruction, within its [`ProfileKind::Operator`] (ptec's code has
    /// no dispatch between them: they span the same time).
    Kernel(&'static str),
}

impl ProfileKind {
    /// The event's name, as ExecuTorch's runtime writes it, when it is a
    /// constant: `None` for a node, which its debug id names, and for a
    /// kernel (`native_call_` and its operator's name).
    pub fn name(self) -> Option<&'static str> {
        match self {
            ProfileKind::Execute => Some("Method::execute"),
            ProfileKind::Operator => Some("OPERATOR_CALL"),
            ProfileKind::Delegate => Some("DELEGATE_CALL"),
            ProfileKind::DelegateNode | ProfileKind::Kernel(_) => None,
        }
    }

    /// The prefix of a [`ProfileKind::Kernel`] event's name.
    pub const KERNEL_PREFIX: &'static str = "native_call_";
}

/// A tensor logged into the debug buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedTensor {
    pub dtype: ScalarType,
    pub rank: u8,
    pub sizes: [u64; MAX_RANK],
    pub dim_order: [u8; MAX_RANK],
    /// Where its bytes start in the debug buffer; `None` for an empty
    /// tensor.
    pub offset: Option<usize>,
}

impl LoggedTensor {
    /// Its sizes.
    pub fn sizes(&self) -> &[u64] {
        &self.sizes[..self.rank as usize]
    }

    /// Its strides in elements, from its dim order (the innermost
    /// dimension has stride 1).
    pub fn strides(&self) -> [u64; MAX_RANK] {
        let rank = self.rank as usize;
        let mut strides = [0u64; MAX_RANK];
        let mut step = 1u64;
        for &d in self.dim_order[..rank].iter().rev() {
            let d = d as usize;
            strides[d] = step;
            step = step.saturating_mul(self.sizes[d]);
        }
        strides
    }
}

/// One recorded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A new execution starts (a run of the ETDump: ExecuTorch's event
    /// block, named `Execute`).
    Block,
    /// A span of time.
    Profile {
        kind: ProfileKind,
        /// Chain and instruction (`-1` for [`ProfileKind::Execute`], as
        /// ExecuTorch writes it outside any instruction).
        chain: i32,
        instruction: i32,
        /// The delegate debug id of a [`ProfileKind::DelegateNode`].
        delegate_id: Option<u32>,
        start: u64,
        end: u64,
    },
    /// An instruction's output, its bytes in the debug buffer.
    Output {
        chain: u32,
        instruction: i32,
        delegate_id: Option<u32>,
        /// The operator's name (ExecuTorch's Inspector compares the outputs
        /// of named events only).
        name: &'static str,
        tensor: LoggedTensor,
    },
}

/// The events of an open span: those ExecuTorch would write as one but
/// ptec runs as several instructions (a convolution and what it folded in,
/// a delegate's nodes), merged as they end.
#[derive(Clone, Copy, Debug)]
struct Open {
    origin: Origin,
    start: u64,
    end: u64,
    /// Whether outputs were logged as this instruction's.
    logged: bool,
}

/// The tracer that records what ExecuTorch's `ETDumpGen` records: the
/// time of each execution, instruction and compiled delegate node, and,
/// given a debug buffer, every instruction's outputs.
///
/// It records into the caller's `events` and `debug` buffer and never
/// allocates; when either is full, what does not fit is counted in
/// [`Recorder::dropped`] and left out.
pub struct Recorder<'a, C: Clock> {
    clock: C,
    events: &'a mut [Event],
    len: usize,
    debug: Option<&'a mut [u8]>,
    debug_len: usize,
    dropped: usize,
    execute_start: Option<u64>,
    instruction_start: u64,
    operator: Option<Open>,
    delegate: Option<Open>,
}

/// The alignment of each tensor in the debug buffer (ExecuTorch's).
pub const DEBUG_ALIGN: usize = 64;

impl<'a, C: Clock> Recorder<'a, C> {
    /// A recorder of profiling events only, into `events`.
    pub fn new(clock: C, events: &'a mut [Event]) -> Self {
        Recorder {
            clock,
            events,
            len: 0,
            debug: None,
            debug_len: 0,
            dropped: 0,
            execute_start: None,
            instruction_start: 0,
            operator: None,
            delegate: None,
        }
    }

    /// Also records every instruction's output tensors, their bytes into
    /// `debug` (ExecuTorch's debug buffer: each tensor 64-byte aligned
    /// from its start).
    pub fn with_debug_buffer(mut self, debug: &'a mut [u8]) -> Self {
        self.debug = Some(debug);
        self
    }

    /// The events recorded so far.
    pub fn events(&self) -> &[Event] {
        &self.events[..self.len]
    }

    /// The used part of the debug buffer.
    pub fn debug_buffer(&self) -> &[u8] {
        self.debug.as_deref().map_or(&[], |d| &d[..self.debug_len])
    }

    /// How many events (or logged tensors) did not fit.
    pub fn dropped(&self) -> usize {
        self.dropped
    }

    /// What was recorded, as an ETDump file (see [`crate::etdump`]).
    #[cfg(feature = "etdump")]
    pub fn to_etdump(&self) -> alloc::vec::Vec<u8> {
        crate::etdump::write(self.events())
    }

    /// Forgets what was recorded.
    pub fn clear(&mut self) {
        self.len = 0;
        self.debug_len = 0;
        self.dropped = 0;
        self.execute_start = None;
        self.operator = None;
        self.delegate = None;
    }

    fn push(&mut self, e: Event) {
        match self.events.get_mut(self.len) {
            Some(slot) => {
                *slot = e;
                self.len += 1;
            }
            None => self.dropped += 1,
        }
    }

    fn close_operator(&mut self) {
        let open = self.operator.take();
        self.close(open, ProfileKind::Operator);
    }

    fn close_delegate(&mut self) {
        let open = self.delegate.take();
        self.close(open, ProfileKind::Delegate);
    }

    /// Records the event `open` was collecting, if any (for a kernel
    /// call, its kernel's event first: it ends first in ExecuTorch).
    /// When outputs are logged, a kernel whose outputs are logged as a
    /// later instruction's (a convolution that did the relu after it) gets
    /// no kernel event: the Inspector takes a kernel event's outputs as
    /// its operator's and would find none.
    fn close(&mut self, open: Option<Open>, kind: ProfileKind) {
        if let Some(o) = open {
            let timed_apart = o.logged || self.debug.is_none();
            if let (ProfileKind::Operator, Some(op), true) = (kind, o.origin.operator, timed_apart) {
                self.push(Event::Profile {
                    kind: ProfileKind::Kernel(op),
                    chain: o.origin.chain as i32,
                    instruction: o.origin.instruction as i32,
                    delegate_id: None,
                    start: o.start,
                    end: o.end,
                });
            }
            self.push(Event::Profile {
                kind,
                chain: o.origin.chain as i32,
                instruction: o.origin.instruction as i32,
                delegate_id: None,
                start: o.start,
                end: o.end,
            });
        }
    }

    /// Copies `data` into the debug buffer, aligned; its offset, or `None`
    /// when it does not fit.
    fn write_debug(&mut self, data: &[u8]) -> Option<usize> {
        let start = self.reserve_debug(data.len())?;
        self.debug
            .as_deref_mut()?
            .get_mut(start..start + data.len())?
            .copy_from_slice(data);
        Some(start)
    }

    /// Takes the next `len` bytes of the debug buffer, aligned; their
    /// offset, or `None` when they do not fit.
    fn reserve_debug(&mut self, len: usize) -> Option<usize> {
        let debug = self.debug.as_deref_mut()?;
        let start = self.debug_len.checked_next_multiple_of(DEBUG_ALIGN)?;
        let end = start.checked_add(len)?;
        // The padding is zeroed, as ExecuTorch's buffer sink does.
        debug.get_mut(self.debug_len..start)?.fill(0);
        if end > debug.len() {
            return None;
        }
        self.debug_len = end;
        Some(start)
    }

    /// Copies `t`'s elements into the debug buffer, aligned, in the order
    /// of its sizes whatever its dim order: ExecuTorch's Inspector reads a
    /// logged tensor as contiguous and ignores its strides. Its offset, or
    /// `None` when it does not fit or its dim order is not a permutation.
    fn write_debug_tensor(&mut self, t: &TensorRef<'_>) -> Option<usize> {
        let rank = t.sizes.len();
        if t.dim_order.iter().enumerate().all(|(i, &d)| usize::from(d) == i) {
            return self.write_debug(t.data);
        }
        // `storage_index` reads a dim order that is not a permutation as
        // the default; here it is dropped instead, not logged misread.
        let mut seen = [false; MAX_RANK];
        let permutation = rank <= MAX_RANK
            && t.dim_order.len() == rank
            && t.dim_order
                .iter()
                .all(|&d| usize::from(d) < rank && !core::mem::replace(&mut seen[usize::from(d)], true));
        let numel = t.sizes.iter().try_fold(1usize, |a, &s| a.checked_mul(s))?;
        if !permutation || numel == 0 || !t.data.len().is_multiple_of(numel) {
            return None;
        }
        let elem = t.data.len() / numel;
        if elem == 0 {
            return None;
        }
        let start = self.reserve_debug(t.data.len())?;
        let dst = self.debug.as_deref_mut()?.get_mut(start..start + t.data.len())?;
        for (k, out) in dst.chunks_exact_mut(elem).enumerate() {
            let at = t.storage_index(k) * elem;
            // In range: the dim order is a permutation of the sizes'.
            if let Some(src) = t.data.get(at..at + elem) {
                out.copy_from_slice(src);
            }
        }
        Some(start)
    }
}

/// What [`record`] recorded: the events and the used debug buffer.
#[cfg(feature = "std")]
pub struct Recording {
    pub events: std::vec::Vec<Event>,
    pub debug: std::vec::Vec<u8>,
}

#[cfg(feature = "std")]
impl Recording {
    /// As an ETDump file.
    #[cfg(feature = "etdump")]
    pub fn to_etdump(&self) -> std::vec::Vec<u8> {
        crate::etdump::write(&self.events)
    }
}

/// Calls `run` with a [`Recorder`] (on the heap, with a debug buffer when
/// `debug`) until what it records fits: buffers too small for it are
/// doubled and `run` is called again from the start, so it must redo all
/// it did (construct the program afresh, for a stateful one).
#[cfg(feature = "std")]
pub fn record<E>(
    debug: bool,
    mut run: impl FnMut(&mut Recorder<'_, StdClock>) -> Result<(), E>,
) -> Result<Recording, E> {
    use std::vec;
    // Under Miri, which checks every byte it zeroes, small first buffers:
    // the doubling is the same.
    let (events_0, debug_0) = if cfg!(miri) {
        (1 << 6, 1 << 12)
    } else {
        (1 << 12, 1 << 24)
    };
    let (mut n_events, mut n_debug) = (events_0, if debug { debug_0 } else { 0 });
    loop {
        let mut events = vec![Event::Block; n_events];
        let mut buffer = vec![0u8; n_debug];
        let mut r = Recorder::new(StdClock::new(), &mut events);
        if debug {
            r = r.with_debug_buffer(&mut buffer);
        }
        run(&mut r)?;
        if r.dropped() == 0 {
            let (len, debug_len) = (r.len, r.debug_len);
            events.truncate(len);
            buffer.truncate(debug_len);
            return Ok(Recording { events, debug: buffer });
        }
        n_events = n_events.saturating_mul(2);
        // Whether the events or the tensors overflowed, both grow: a rerun
        // is cheap next to a debugging session.
        n_debug = n_debug.saturating_mul(2);
    }
}

/// Whether `a` and `b` are the same ExecuTorch instruction.
fn same_instruction(a: Origin, b: Origin) -> bool {
    a.chain == b.chain && a.instruction == b.instruction
}

impl<C: Clock> Tracer for Recorder<'_, C> {
    fn begin_execute(&mut self, _method: &str) {
        // An execution that failed left its spans open: they are dropped.
        self.operator = None;
        self.delegate = None;
        self.push(Event::Block);
        self.execute_start = Some(self.clock.now());
    }

    fn end_execute(&mut self) {
        self.close_operator();
        self.close_delegate();
        let end = self.clock.now();
        if let Some(start) = self.execute_start.take() {
            self.push(Event::Profile {
                kind: ProfileKind::Execute,
                chain: -1,
                instruction: 0,
                delegate_id: None,
                start,
                end,
            });
        }
    }

    fn begin(&mut self, origin: Origin) {
        // Spans of another instruction are over.
        if self
            .operator
            .is_some_and(|o| !same_instruction(o.origin, origin) || origin.delegate_node.is_some())
        {
            self.close_operator();
        }
        if self
            .delegate
            .is_some_and(|o| !same_instruction(o.origin, origin) || origin.delegate_node.is_none())
        {
            self.close_delegate();
        }
        self.instruction_start = self.clock.now();
    }

    fn end(&mut self, origin: Origin) {
        let (start, end) = (self.instruction_start, self.clock.now());
        let open = match origin.delegate_node {
            Some(node) => {
                self.push(Event::Profile {
                    kind: ProfileKind::DelegateNode,
                    chain: origin.chain as i32,
                    instruction: origin.instruction as i32,
                    delegate_id: Some(node),
                    start,
                    end,
                });
                &mut self.delegate
            }
            None => &mut self.operator,
        };
        match open {
            Some(o) => o.end = end,
            None => {
                *open = Some(Open {
                    origin,
                    start,
                    end,
                    logged: false,
                })
            }
        }
    }

    fn wants_outputs(&self) -> bool {
        self.debug.is_some()
    }

    fn output(&mut self, origin: Origin, name: &'static str, tensor: TensorRef<'_>) {
        if let Some(o) = self.operator.as_mut().filter(|o| same_instruction(o.origin, origin)) {
            o.logged = true;
        }
        let rank = tensor.sizes.len();
        if rank > MAX_RANK || tensor.dim_order.len() != rank {
            self.dropped += 1;
            return;
        }
        let offset = if tensor.data.is_empty() {
            None
        } else {
            match self.write_debug_tensor(&tensor) {
                Some(o) => Some(o),
                None => {
                    self.dropped += 1;
                    return;
                }
            }
        };
        let mut logged = LoggedTensor {
            dtype: tensor.dtype,
            rank: rank as u8,
            sizes: [0; MAX_RANK],
            dim_order: [0; MAX_RANK],
            offset,
        };
        for (d, &s) in logged.sizes.iter_mut().zip(tensor.sizes) {
            *d = s as u64;
        }
        // Logged in the order of its sizes (`write_debug_tensor`).
        for (i, d) in logged.dim_order[..rank].iter_mut().enumerate() {
            *d = i as u8;
        }
        self.push(Event::Output {
            chain: origin.chain,
            instruction: origin.instruction as i32,
            delegate_id: origin.delegate_node,
            name,
            tensor: logged,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    fn counter() -> impl FnMut() -> u64 {
        let mut t = 0;
        move || {
            t += 10;
            t
        }
    }

    const fn op(instruction: u32) -> Origin {
        Origin {
            chain: 0,
            instruction,
            delegate_node: None,
            operator: None,
        }
    }

    const fn node(instruction: u32, handle: u32) -> Origin {
        Origin {
            chain: 0,
            instruction,
            delegate_node: Some(handle),
            operator: None,
        }
    }

    fn run(t: &mut dyn Tracer, origins: &[Origin]) {
        t.begin_execute("forward");
        for &o in origins {
            t.begin(o);
            t.end(o);
        }
        t.end_execute();
    }

    fn profile(e: &Event) -> (ProfileKind, i32, Option<u32>, u64, u64) {
        match *e {
            Event::Profile {
                kind,
                instruction,
                delegate_id,
                start,
                end,
                ..
            } => (kind, instruction, delegate_id, start, end),
            _ => panic!("not a profile event: {e:?}"),
        }
    }

    #[test]
    fn a_kernel_call_is_timed_as_its_kernel_too() {
        let mut events = [Event::Block; 8];
        let mut r = Recorder::new(counter(), &mut events);
        // Instruction 1 as two parts of ptec's, then a delegate node.
        let addmm = Origin {
            operator: Some("addmm.out"),
            ..op(1)
        };
        run(&mut r, &[addmm, addmm, node(2, 7)]);
        let e = r.events();
        // The kernel's event first (ExecuTorch's ends first), both over
        // the instruction's whole span; none for the delegate.
        assert_eq!(profile(&e[1]), (ProfileKind::Kernel("addmm.out"), 1, None, 20, 50));
        assert_eq!(profile(&e[2]), (ProfileKind::Operator, 1, None, 20, 50));
        assert_eq!(profile(&e[3]), (ProfileKind::DelegateNode, 2, Some(7), 60, 70));
        assert_eq!(profile(&e[4]), (ProfileKind::Delegate, 2, None, 60, 70));
        assert_eq!(e.len(), 6);
    }

    #[test]
    fn with_outputs_logged_only_kernels_that_log_their_own_are_timed_apart() {
        let mut events = [Event::Block; 16];
        let mut debug = [0u8; 256];
        let mut r = Recorder::new(counter(), &mut events).with_debug_buffer(&mut debug);
        let x = [1.0f32];
        let conv = Origin {
            operator: Some("convolution.out"),
            ..op(1)
        };
        let relu = Origin {
            operator: Some("relu.out"),
            ..op(2)
        };
        let add = Origin {
            operator: Some("add.out"),
            ..op(3)
        };
        r.begin_execute("forward");
        // The convolution did the relu: its output is logged as 2's.
        r.begin(conv);
        r.end(conv);
        r.output(relu, "aten::relu.out", TensorRef::from_slice(&[1], &x));
        r.begin(add);
        r.end(add);
        r.output(add, "aten::add.out", TensorRef::from_slice(&[1], &x));
        r.end_execute();
        let kinds: std::vec::Vec<_> = r
            .events()
            .iter()
            .filter_map(|e| match *e {
                Event::Profile { kind, instruction, .. } => Some((kind, instruction)),
                _ => None,
            })
            .collect();
        assert_eq!(
            kinds,
            [
                (ProfileKind::Operator, 1),
                (ProfileKind::Kernel("add.out"), 3),
                (ProfileKind::Operator, 3),
                (ProfileKind::Execute, 0),
            ]
        );
    }

    #[test]
    fn instructions_of_one_origin_merge_and_delegate_nodes_nest() {
        let mut events = [Event::Block; 16];
        let mut r = Recorder::new(counter(), &mut events);
        // 1 and 1 again (a convolution ptec split), then a delegate at 2 of
        // two nodes, then 3.
        run(&mut r, &[op(1), op(1), node(2, 7), node(2, 9), op(3)]);
        let e = r.events();
        assert_eq!(e[0], Event::Block);
        // execute starts at 10; instruction 1 from 20 to 50.
        assert_eq!(profile(&e[1]), (ProfileKind::Operator, 1, None, 20, 50));
        assert_eq!(profile(&e[2]), (ProfileKind::DelegateNode, 2, Some(7), 60, 70));
        assert_eq!(profile(&e[3]), (ProfileKind::DelegateNode, 2, Some(9), 80, 90));
        assert_eq!(profile(&e[4]), (ProfileKind::Delegate, 2, None, 60, 90));
        assert_eq!(profile(&e[5]), (ProfileKind::Operator, 3, None, 100, 110));
        assert_eq!(profile(&e[6]), (ProfileKind::Execute, 0, None, 10, 120));
        assert_eq!(e.len(), 7);
        assert_eq!(r.dropped(), 0);
    }

    #[test]
    fn a_full_buffer_counts_what_it_drops() {
        let mut events = [Event::Block; 2];
        let mut r = Recorder::new(counter(), &mut events);
        run(&mut r, &[op(0), op(1)]);
        assert_eq!(r.events().len(), 2);
        assert_eq!(r.dropped(), 2);
    }

    #[test]
    fn outputs_go_to_the_debug_buffer_aligned() {
        let mut events = [Event::Block; 8];
        let mut debug = [0xffu8; 150];
        let mut r = Recorder::new(counter(), &mut events).with_debug_buffer(&mut debug);
        assert!(r.wants_outputs());
        let a = [1.0f32, 2.0, 3.0];
        let b = [4.0f32; 12];
        r.begin_execute("forward");
        r.output(op(0), "aten::a", TensorRef::from_slice(&[3], &a));
        r.output(op(1), "aten::b", TensorRef::from_slice(&[3, 4], &b));
        // 64 + 48 bytes do not fit after 128: dropped.
        r.output(op(2), "aten::c", TensorRef::from_slice(&[3, 4], &b));
        let offsets: Vec<_> = r
            .events()
            .iter()
            .filter_map(|e| match e {
                Event::Output { tensor, .. } => Some((tensor.offset, tensor.sizes().to_vec())),
                _ => None,
            })
            .collect();
        assert_eq!(offsets, [(Some(0), vec![3]), (Some(64), vec![3, 4])]);
        assert_eq!(r.dropped(), 1);
        let used = r.debug_buffer();
        assert_eq!(used.len(), 112);
        assert_eq!(&used[..12], crate::bytes_of(&a));
        assert!(used[12..64].iter().all(|&x| x == 0));
        assert_eq!(&used[64..], crate::bytes_of(&b));
    }

    #[test]
    fn outputs_stored_in_another_dim_order_are_logged_in_their_sizes_order() {
        let mut events = [Event::Block; 4];
        let mut debug = [0u8; 128];
        let mut r = Recorder::new(counter(), &mut events).with_debug_buffer(&mut debug);
        // An NCHW image [1, 3, 2, 2] stored NHWC: element (c, h, w) is at
        // (h * 2 + w) * 3 + c and holds 100 c + 10 h + w.
        let mut nhwc = [0i32; 12];
        for (c, h, w) in (0..3).flat_map(|c| (0..2).flat_map(move |h| (0..2).map(move |w| (c, h, w)))) {
            nhwc[(h * 2 + w) * 3 + c] = 100 * c as i32 + 10 * h as i32 + w as i32;
        }
        let stored = TensorRef {
            dtype: ScalarType::Int,
            sizes: &[1, 3, 2, 2],
            dim_order: &[0, 2, 3, 1],
            data: crate::bytes_of(&nhwc),
        };
        r.output(op(0), "aten::a", stored);
        // Not a permutation: dropped, not misread.
        r.output(
            op(1),
            "aten::b",
            TensorRef {
                dim_order: &[0, 2, 2, 1],
                ..stored
            },
        );
        assert_eq!(r.dropped(), 1);
        let nchw: Vec<i32> = r
            .debug_buffer()
            .chunks_exact(4)
            .map(|b| i32::from_ne_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(nchw, [0, 1, 10, 11, 100, 101, 110, 111, 200, 201, 210, 211]);
        match r.events()[0] {
            Event::Output { tensor, .. } => {
                assert_eq!(tensor.sizes(), [1, 3, 2, 2]);
                assert_eq!(&tensor.strides()[..4], &[12, 4, 2, 1]);
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn record_grows_its_buffers_until_everything_fits() {
        // More than the first buffers hold (smaller under Miri).
        const RUNS: u32 = if cfg!(miri) { 100 } else { 5000 };
        let mut calls = 0;
        let data = [0.5f32; 1000];
        let rec = record(true, |r| {
            calls += 1;
            // More events than the first buffer holds, and 4 kB tensors.
            for k in 0..RUNS {
                r.begin_execute("forward");
                r.output(op(k), "aten::a", TensorRef::from_slice(&[1000], &data));
                r.end_execute();
            }
            Ok::<(), ()>(())
        })
        .unwrap();
        assert!(calls > 1);
        assert_eq!(rec.events.len(), 3 * RUNS as usize);
        assert_eq!(rec.debug.len(), (RUNS as usize - 1) * 4032 + 4000);
    }

    #[test]
    fn strides_follow_the_dim_order() {
        let mut t = LoggedTensor {
            dtype: ScalarType::Float,
            rank: 4,
            sizes: [0; MAX_RANK],
            dim_order: [0; MAX_RANK],
            offset: None,
        };
        t.sizes[..4].copy_from_slice(&[2, 3, 4, 5]);
        t.dim_order[..4].copy_from_slice(&[0, 1, 2, 3]);
        assert_eq!(&t.strides()[..4], &[60, 20, 5, 1]);
        t.dim_order[..4].copy_from_slice(&[0, 2, 3, 1]);
        assert_eq!(&t.strides()[..4], &[60, 1, 15, 3]);
    }
}
