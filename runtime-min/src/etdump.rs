//! The ETDump file: what a [`Recorder`](crate::trace::Recorder) recorded,
//! as the flatbuffer ExecuTorch's `ETDumpGen` writes and its devtools
//! read (schema `devtools/etdump/etdump_schema_flatcc.fbs` of the
//! `executorch` package, version 0, file identifier `ED00`, size-prefixed).
//!
//! Written with the `flatbuffers` builder; the tables' fields are named
//! below by their slots in that schema, which has not changed since 2024.
use crate::trace::{Event, LoggedTensor, ProfileKind};
use alloc::vec::Vec;
use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

/// The schema's version, as `ETDumpGen` writes it.
const ETDUMP_VERSION: u32 = 0;
/// The file identifier of the schema.
pub const FILE_IDENTIFIER: &str = "ED00";

/// The vtable slot of field `i` (from 0) of a table.
const fn slot(i: u16) -> u16 {
    4 + 2 * i
}

mod root {
    use super::slot;
    pub const VERSION: u16 = slot(0);
    pub const RUN_DATA: u16 = slot(1);
}
mod run_data {
    use super::slot;
    pub const NAME: u16 = slot(0);
    pub const EVENTS: u16 = slot(3);
}
mod event {
    use super::slot;
    pub const PROFILE_EVENT: u16 = slot(0);
    pub const DEBUG_EVENT: u16 = slot(2);
}
mod profile_event {
    use super::slot;
    pub const NAME: u16 = slot(0);
    pub const CHAIN_INDEX: u16 = slot(1);
    pub const INSTRUCTION_ID: u16 = slot(2);
    pub const DELEGATE_DEBUG_ID_INT: u16 = slot(3);
    pub const DELEGATE_DEBUG_METADATA: u16 = slot(5);
    pub const START_TIME: u16 = slot(6);
    pub const END_TIME: u16 = slot(7);
}
mod debug_event {
    use super::slot;
    pub const CHAIN_INDEX: u16 = slot(0);
    pub const INSTRUCTION_ID: u16 = slot(1);
    pub const DEBUG_ENTRY: u16 = slot(2);
    pub const DELEGATE_DEBUG_ID_INT: u16 = slot(3);
    pub const NAME: u16 = slot(5);
}
mod value {
    use super::slot;
    pub const VAL: u16 = slot(0);
    pub const TENSOR: u16 = slot(1);
    /// `ValueType::Tensor`.
    pub const TYPE_TENSOR: i8 = 5;
}
mod tensor {
    use super::slot;
    pub const SCALAR_TYPE: u16 = slot(0);
    pub const SIZES: u16 = slot(1);
    pub const STRIDES: u16 = slot(2);
    pub const OFFSET: u16 = slot(3);
}

/// `events` as an ETDump: one run (`RunData`, named `Execute` as
/// ExecuTorch's runtime names it) per [`Event::Block`]; events before the
/// first block make a run of their own.
pub fn write(events: &[Event]) -> Vec<u8> {
    let mut b = FlatBufferBuilder::new();
    let execute = b.create_string("Execute");
    let mut runs = Vec::new();
    let mut rest = events;
    while !rest.is_empty() {
        let body = if rest[0] == Event::Block { &rest[1..] } else { rest };
        let len = body.iter().position(|e| *e == Event::Block).unwrap_or(body.len());
        let (run, after) = body.split_at(len);
        runs.push(write_run(&mut b, execute, run));
        rest = after;
    }
    let runs = b.create_vector(&runs);
    let root = b.start_table();
    b.push_slot(root::VERSION, ETDUMP_VERSION, 0);
    b.push_slot_always(root::RUN_DATA, runs);
    let root = b.end_table(root);
    b.finish_size_prefixed(root, Some(FILE_IDENTIFIER));
    b.finished_data().to_vec()
}

type Table = WIPOffset<flatbuffers::TableFinishedWIPOffset>;

fn write_run<'b>(b: &mut FlatBufferBuilder<'b>, name: WIPOffset<&'b str>, run: &[Event]) -> Table {
    let mut tables = Vec::with_capacity(run.len());
    for e in run {
        let (field, table) = match *e {
            Event::Block => continue,
            Event::Profile {
                kind,
                chain,
                instruction,
                delegate_id,
                start,
                end,
            } => {
                let name = match kind {
                    ProfileKind::Kernel(op) => {
                        Some(b.create_string(&alloc::format!("{}{op}", ProfileKind::KERNEL_PREFIX)))
                    }
                    _ => kind.name().map(|n| b.create_string(n)),
                };
                // ETDumpGen gives delegate events (and only them) their
                // metadata, empty here.
                let metadata = (kind == ProfileKind::DelegateNode).then(|| b.create_vector::<u8>(&[]));
                let t = b.start_table();
                if let Some(n) = name {
                    b.push_slot_always(profile_event::NAME, n);
                }
                b.push_slot(profile_event::CHAIN_INDEX, chain, 0);
                b.push_slot(profile_event::INSTRUCTION_ID, instruction, -1);
                if let Some(id) = delegate_id {
                    b.push_slot(profile_event::DELEGATE_DEBUG_ID_INT, id as i32, -1);
                }
                if let Some(m) = metadata {
                    b.push_slot_always(profile_event::DELEGATE_DEBUG_METADATA, m);
                }
                b.push_slot(profile_event::START_TIME, start, 0);
                b.push_slot(profile_event::END_TIME, end, 0);
                (event::PROFILE_EVENT, b.end_table(t))
            }
            Event::Output {
                chain,
                instruction,
                delegate_id,
                name,
                tensor,
            } => {
                let entry = write_tensor_value(b, &tensor);
                // As ETDumpGen: a delegate's events are named by their id.
                let name = delegate_id.is_none().then(|| b.create_string(name));
                let t = b.start_table();
                if let Some(n) = name {
                    b.push_slot_always(debug_event::NAME, n);
                }
                b.push_slot(debug_event::CHAIN_INDEX, u64::from(chain), 0);
                b.push_slot(debug_event::INSTRUCTION_ID, instruction, -1);
                b.push_slot_always(debug_event::DEBUG_ENTRY, entry);
                if let Some(id) = delegate_id {
                    b.push_slot(debug_event::DELEGATE_DEBUG_ID_INT, id as i32, -1);
                }
                (event::DEBUG_EVENT, b.end_table(t))
            }
        };
        let t = b.start_table();
        b.push_slot_always(field, table);
        tables.push(b.end_table(t));
    }
    let events = b.create_vector(&tables);
    let t = b.start_table();
    b.push_slot_always(run_data::NAME, name);
    b.push_slot_always(run_data::EVENTS, events);
    b.end_table(t)
}

/// A `Value` of type `Tensor`, with the tensor's offset in the debug
/// buffer (`-1` for an empty one, as ETDumpGen writes it).
fn write_tensor_value(b: &mut FlatBufferBuilder<'_>, t: &LoggedTensor) -> WIPOffset<UnionWIPOffset> {
    let rank = t.rank as usize;
    let sizes: Vec<i64> = t.sizes().iter().map(|&s| s as i64).collect();
    let strides: Vec<i64> = t.strides()[..rank].iter().map(|&s| s as i64).collect();
    let sizes = b.create_vector(&sizes);
    let strides = b.create_vector(&strides);
    let offset = t.offset.map_or(-1, |o| o as i64);
    let tt = b.start_table();
    b.push_slot_always(tensor::SCALAR_TYPE, t.dtype as i8);
    b.push_slot_always(tensor::SIZES, sizes);
    b.push_slot_always(tensor::STRIDES, strides);
    b.push_slot_always(tensor::OFFSET, offset);
    let tensor = b.end_table(tt);
    let v = b.start_table();
    b.push_slot_always(value::VAL, value::TYPE_TENSOR);
    b.push_slot_always(value::TENSOR, tensor);
    WIPOffset::new(b.end_table(v).value())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Origin, Recorder, Tracer};
    use crate::TensorRef;

    #[test]
    fn runs_events_and_tensors_are_where_the_schema_says() {
        let mut t = 0u64;
        let clock = move || {
            t += 5;
            t
        };
        let mut events = [Event::Block; 16];
        let mut debug = [0u8; 256];
        let mut r = Recorder::new(clock, &mut events).with_debug_buffer(&mut debug);
        let o = Origin {
            chain: 0,
            instruction: 3,
            delegate_node: None,
            operator: Some("x.out"),
        };
        let x = [1.5f32, 2.5];
        r.begin_execute("forward");
        r.begin(o);
        r.end(o);
        r.output(o, "aten::x.out", TensorRef::from_slice(&[1, 2], &x));
        r.end_execute();
        let bytes: &'static [u8] = std::boxed::Box::leak(write(r.events()).into_boxed_slice());
        // Size prefix, then the root offset and the identifier.
        let size = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        assert_eq!(size, bytes.len() - 4);
        assert_eq!(&bytes[8..12], FILE_IDENTIFIER.as_bytes());
        let buf = &bytes[4..];
        let root = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
        // SAFETY: as in `field`.
        let root_t = unsafe { flatbuffers::Table::new(buf, root) };
        // SAFETY: as in `field`; run_data is a vector of tables.
        let runs = unsafe {
            root_t.get::<flatbuffers::ForwardsUOffset<
                    flatbuffers::Vector<flatbuffers::ForwardsUOffset<flatbuffers::Table>>,
                >>(root::RUN_DATA, None)
        }
        .unwrap();
        assert_eq!(runs.len(), 1);
        let run = runs.get(0);
        // SAFETY: as above.
        let name = unsafe { run.get::<flatbuffers::ForwardsUOffset<&str>>(run_data::NAME, None) };
        assert_eq!(name, Some("Execute"));
        // SAFETY: as above.
        let events = unsafe {
            run.get::<flatbuffers::ForwardsUOffset<flatbuffers::Vector<flatbuffers::ForwardsUOffset<flatbuffers::Table>>>>(
                run_data::EVENTS,
                None,
            )
        }
        .unwrap();
        // The output (logged before the instruction's span closes), the
        // kernel, the operator, the execution.
        assert_eq!(events.len(), 4);
        let sub = |i: usize, slot: u16| {
            // SAFETY: as above.
            unsafe {
                events
                    .get(i)
                    .get::<flatbuffers::ForwardsUOffset<flatbuffers::Table>>(slot, None)
            }
        };
        let debug_ev = sub(0, event::DEBUG_EVENT).unwrap();
        let kernel = sub(1, event::PROFILE_EVENT).unwrap();
        let op = sub(2, event::PROFILE_EVENT).unwrap();
        let exec = sub(3, event::PROFILE_EVENT).unwrap();
        // SAFETY: as above, for every read below.
        unsafe {
            assert_eq!(
                kernel.get::<flatbuffers::ForwardsUOffset<&str>>(profile_event::NAME, None),
                Some("native_call_x.out")
            );
            assert_eq!(kernel.get::<i32>(profile_event::INSTRUCTION_ID, Some(-1)), Some(3));
            assert_eq!(kernel.get::<u64>(profile_event::START_TIME, Some(0)), Some(10));
            assert_eq!(kernel.get::<u64>(profile_event::END_TIME, Some(0)), Some(15));
            assert_eq!(
                op.get::<flatbuffers::ForwardsUOffset<&str>>(profile_event::NAME, None),
                Some("OPERATOR_CALL")
            );
            assert_eq!(op.get::<i32>(profile_event::INSTRUCTION_ID, Some(-1)), Some(3));
            assert_eq!(op.get::<u64>(profile_event::START_TIME, Some(0)), Some(10));
            assert_eq!(op.get::<u64>(profile_event::END_TIME, Some(0)), Some(15));
            assert_eq!(
                exec.get::<flatbuffers::ForwardsUOffset<&str>>(profile_event::NAME, None),
                Some("Method::execute")
            );
            assert_eq!(exec.get::<i32>(profile_event::CHAIN_INDEX, Some(0)), Some(-1));
            assert_eq!(debug_ev.get::<i32>(debug_event::INSTRUCTION_ID, Some(-1)), Some(3));
            assert_eq!(
                debug_ev.get::<flatbuffers::ForwardsUOffset<&str>>(debug_event::NAME, None),
                Some("aten::x.out")
            );
            let v = debug_ev
                .get::<flatbuffers::ForwardsUOffset<flatbuffers::Table>>(debug_event::DEBUG_ENTRY, None)
                .unwrap();
            assert_eq!(v.get::<i8>(value::VAL, Some(0)), Some(value::TYPE_TENSOR));
            let t = v
                .get::<flatbuffers::ForwardsUOffset<flatbuffers::Table>>(value::TENSOR, None)
                .unwrap();
            assert_eq!(t.get::<i8>(tensor::SCALAR_TYPE, Some(0)), Some(6));
            let sizes = t
                .get::<flatbuffers::ForwardsUOffset<flatbuffers::Vector<i64>>>(tensor::SIZES, None)
                .unwrap();
            assert_eq!(sizes.iter().collect::<Vec<_>>(), [1, 2]);
            let strides = t
                .get::<flatbuffers::ForwardsUOffset<flatbuffers::Vector<i64>>>(tensor::STRIDES, None)
                .unwrap();
            assert_eq!(strides.iter().collect::<Vec<_>>(), [2, 1]);
            assert_eq!(t.get::<i64>(tensor::OFFSET, Some(0)), Some(0));
        }
    }
}
