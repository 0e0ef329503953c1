//! Reads a program flatbuffer into the IR, resolving every piece of data it
//! refers to (constants, initial values of mutable tensors, named data,
//! delegate blobs, external tensors) to byte ranges of the file.
//!
//! The flatbuffer is verified first, so no accessor below can read out of
//! bounds; everything the verifier of the IR needs to know about raw fields
//! (negative indices, out-of-range segment numbers) is reported here as a
//! located error, and reading continues so that all problems are found.
use crate::error::{Diagnostic, ErrorKind, Errors, Location, Result};
use crate::ir::*;
use crate::read::container::{pte_layout, PteLayout};
use flatbuffers::{Vector, VerifierOptions};
use ptec_schema::program as fb;

/// Options for verifying flatbuffers: generous limits for real programs,
/// still bounded so that hostile input cannot make verification run long.
pub(crate) fn verifier_options() -> VerifierOptions {
    VerifierOptions {
        max_depth: 64,
        max_tables: 10_000_000,
        max_apparent_size: 1 << 34,
        ..Default::default()
    }
}

/// Reads the program held in `bytes[range]` of a file (the whole file for a
/// `.pte`, the embedded program of a bundle) and resolves external tensors
/// against `external` (`.ptd` files already read).
pub fn read_program(file: &[u8], base: usize, len: usize, external: &[ExternalFile]) -> Result<Program> {
    let end = base.checked_add(len).filter(|&e| e <= file.len()).ok_or_else(|| {
        Errors::one(
            ErrorKind::Truncated {
                what: "program",
                needed: (base as u64).saturating_add(len as u64),
                available: file.len() as u64,
            },
            Location::at_offset(base),
        )
    })?;
    let b = &file[base..end];
    let layout = pte_layout(b, base)?;
    let fb_bytes = &b[..layout.program_size];
    let root = fb::root_as_program_with_opts(&verifier_options(), fb_bytes).map_err(|e| {
        Errors::one(
            ErrorKind::Flatbuffer {
                what: "program",
                detail: e.to_string(),
            },
            Location::at_offset(base),
        )
    })?;
    let mut r = Reader {
        file,
        base,
        layout,
        errors: Vec::new(),
        segments: Vec::new(),
    };
    let program = r.program(root, external);
    if r.errors.is_empty() {
        Ok(program)
    } else {
        Err(Errors(r.errors))
    }
}

struct Reader<'f> {
    file: &'f [u8],
    /// Offset of the program in `file`.
    base: usize,
    layout: PteLayout,
    errors: Vec<Diagnostic>,
    segments: Vec<DataRef>,
}

/// Byte offset of a flatbuffer byte vector within `file`.
fn offset_in(file: &[u8], v: &[u8]) -> usize {
    (v.as_ptr() as usize).wrapping_sub(file.as_ptr() as usize)
}

impl<'f> Reader<'f> {
    fn err(&mut self, kind: ErrorKind, at: Location) {
        self.errors.push(Diagnostic::new(kind, at));
    }

    fn program(&mut self, p: fb::Program<'f>, external: &[ExternalFile]) -> Program {
        let range = DataRef {
            source: DataSource::Program,
            offset: self.base,
            len: self.layout.program_size,
        };
        self.read_segments(&p);
        let named_data = self.named_data(&p);
        let constants = self.constant_table(&p);
        let mutable_tables = self.mutable_tables(&p);
        let inline_delegate_data: Vec<DataRef> = p
            .backend_delegate_data()
            .map(|v| {
                v.iter()
                    .map(|d| {
                        let bytes = d.data().map(|x| x.bytes()).unwrap_or(&[]);
                        DataRef {
                            source: DataSource::Program,
                            offset: offset_in(self.file, bytes),
                            len: bytes.len(),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut methods = Vec::new();
        if let Some(plans) = p.execution_plan() {
            for plan in plans.iter() {
                let m = self.method(plan, &constants, &mutable_tables, &inline_delegate_data, external);
                methods.push(m);
            }
        }
        let mut program_range = range;
        if let Some(last) = self.segments.iter().map(|s| s.offset + s.len).max() {
            program_range.len = program_range.len.max(last.saturating_sub(self.base));
        }
        Program {
            version: p.version(),
            range: program_range,
            methods,
            segments: self.segments.clone(),
            named_data,
            external_files: external.to_vec(),
        }
    }

    fn read_segments(&mut self, p: &fb::Program<'f>) {
        let Some(segs) = p.segments() else { return };
        let file_end = self.file.len() as u64;
        for (i, s) in segs.iter().enumerate() {
            let Some(seg_base) = self.layout.segment_base else {
                // Without an extended header there is no segment data; the
                // exporter still lists empty segments there.
                if s.size_() == 0 {
                    self.segments.push(DataRef {
                        source: DataSource::Program,
                        offset: self.base,
                        len: 0,
                    });
                    continue;
                }
                self.err(
                    ErrorKind::BadHeader {
                        what: format!(
                            "segment {i} has {} bytes but the program has no extended header giving a segment base",
                            s.size_()
                        ),
                    },
                    Location::at_offset(self.base + 8),
                );
                return;
            };
            let start = (self.base as u64)
                .saturating_add(seg_base as u64)
                .saturating_add(s.offset());
            let end = start.checked_add(s.size_());
            match end {
                Some(end) if end <= file_end => self.segments.push(DataRef {
                    source: DataSource::Program,
                    offset: start as usize,
                    len: s.size_() as usize,
                }),
                _ => {
                    self.err(
                        ErrorKind::OutsideData {
                            what: "segment",
                            offset: start,
                            len: s.size_(),
                            limit: file_end,
                        },
                        Location::at_offset(start.min(usize::MAX as u64) as usize),
                    );
                    // Keep indices aligned; an empty stand-in is never read as data.
                    self.segments.push(DataRef {
                        source: DataSource::Program,
                        offset: 0,
                        len: 0,
                    });
                }
            }
        }
    }

    fn named_data(&mut self, p: &fb::Program<'f>) -> Vec<NamedData> {
        let Some(v) = p.named_data() else { return Vec::new() };
        v.iter()
            .map(|nd| {
                let seg = nd.segment_index() as usize;
                let data = self.segments.get(seg).copied();
                if data.is_none() {
                    self.err(
                        ErrorKind::IndexOutOfRange {
                            what: "named_data segment",
                            index: seg as i64,
                            len: self.segments.len(),
                        },
                        Location::default(),
                    );
                }
                NamedData {
                    key: nd.key().unwrap_or("").to_string(),
                    segment: seg,
                    data,
                }
            })
            .collect()
    }

    /// Where constant `i` (a `data_buffer_idx`) starts and how many bytes are
    /// available to it.
    fn constant_table(&mut self, p: &fb::Program<'f>) -> ConstantTable {
        let legacy: Vec<DataRef> = p
            .constant_buffer()
            .map(|v| {
                v.iter()
                    .map(|b| {
                        let bytes = b.storage().map(|x| x.bytes()).unwrap_or(&[]);
                        DataRef {
                            source: DataSource::Program,
                            offset: offset_in(self.file, bytes),
                            len: bytes.len(),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let seg = p
            .constant_segment()
            .and_then(|cs| self.subsegments(&cs, "constant_segment"));
        let has_seg = seg.as_ref().is_some_and(|s| !s.offsets.is_empty());
        // Old programs keep an empty entry 0 in constant_buffer; more than
        // that alongside constant_segment offsets is contradictory.
        if has_seg && legacy.len() > 1 {
            self.err(
                ErrorKind::BadPlacement {
                    detail: "both constant_buffer and constant_segment.offsets are non-empty".into(),
                },
                Location::default(),
            );
        }
        if has_seg {
            ConstantTable::Segment(seg.unwrap_or_default())
        } else {
            ConstantTable::Legacy(legacy)
        }
    }

    fn subsegments(&mut self, s: &fb::SubsegmentOffsets<'f>, what: &'static str) -> Option<Subsegments> {
        let offsets: Vec<u64> = s.offsets().map(|v| v.iter().collect()).unwrap_or_default();
        if offsets.is_empty() {
            return Some(Subsegments::default());
        }
        let idx = s.segment_index() as usize;
        match self.segments.get(idx) {
            Some(seg) => Some(Subsegments { segment: *seg, offsets }),
            None => {
                self.err(
                    ErrorKind::IndexOutOfRange {
                        what,
                        index: idx as i64,
                        len: self.segments.len(),
                    },
                    Location::default(),
                );
                None
            }
        }
    }

    fn mutable_tables(&mut self, p: &fb::Program<'f>) -> Vec<Option<Subsegments>> {
        p.mutable_data_segments()
            .map(|v| {
                v.iter()
                    .map(|s| self.subsegments(&s, "mutable_data_segments segment"))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn method(
        &mut self,
        plan: fb::ExecutionPlan<'f>,
        constants: &ConstantTable,
        mutable: &[Option<Subsegments>],
        inline_delegates: &[DataRef],
        external: &[ExternalFile],
    ) -> Method {
        let name = plan.name().unwrap_or("").to_string();
        let at = Location::method(&name);
        let mut values = Vec::new();
        if let Some(vs) = plan.values() {
            for (i, v) in vs.iter().enumerate() {
                let val = self.value(v, at.clone().value(i), constants, mutable, external);
                values.push(val);
            }
        }
        let inputs = self.indices(plan.inputs(), "input", at.clone());
        let outputs = self.indices(plan.outputs(), "output", at.clone());
        let operators: Vec<Operator> = plan
            .operators()
            .map(|ops| {
                ops.iter()
                    .map(|o| Operator {
                        name: o.name().unwrap_or("").to_string(),
                        overload: o.overload().unwrap_or("").to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let delegates = plan
            .delegates()
            .map(|ds| {
                ds.iter()
                    .enumerate()
                    .map(|(i, d)| self.delegate(d, i, inline_delegates, at.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let buffer_sizes: Vec<u64> = plan
            .non_const_buffer_sizes()
            .map(|v| {
                v.iter()
                    .map(|s| {
                        if s < 0 {
                            self.err(
                                ErrorKind::BadSizes {
                                    detail: format!("planned buffer size {s} is negative"),
                                },
                                at.clone(),
                            );
                        }
                        s.max(0) as u64
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut instructions = Vec::new();
        let mut stacktraces = None;
        if let Some(chains) = plan.chains() {
            if chains.len() > 1 {
                self.err(
                    ErrorKind::Unsupported {
                        detail: format!("{} chains (ExecuTorch programs have one)", chains.len()),
                    },
                    at.clone(),
                );
            }
            if let Some(chain) = chains.iter().next() {
                if let Some(ins) = chain.instructions() {
                    for (i, instr) in ins.iter().enumerate() {
                        instructions.push(self.instruction(instr, at.clone().instruction(i)));
                    }
                }
                if let Some(st) = chain.stacktrace() {
                    stacktraces = Some(
                        st.iter()
                            .map(|fl| {
                                fl.items()
                                    .map(|items| {
                                        items
                                            .iter()
                                            .map(|f| Frame {
                                                filename: f.filename().unwrap_or("").to_string(),
                                                lineno: f.lineno(),
                                                name: f.name().unwrap_or("").to_string(),
                                                context: f.context().unwrap_or("").to_string(),
                                            })
                                            .collect()
                                    })
                                    .unwrap_or_default()
                            })
                            .collect(),
                    );
                }
            }
        }
        let read_operators = instructions
            .iter()
            .map(|i| match i {
                Instruction::Kernel { op, .. } => operators.get(*op).map(Operator::full_name),
                _ => None,
            })
            .collect();
        Method {
            name,
            values,
            inputs,
            outputs,
            instructions,
            operators,
            delegates,
            program_buffers: buffer_sizes.len(),
            temporaries_buffer: None,
            buffer_sizes,
            stacktraces,
            origins: Vec::new(),
            read_operators,
            delegate_outputs: Default::default(),
            channels_last: Default::default(),
        }
    }

    fn indices(&mut self, v: Option<Vector<'f, i32>>, what: &'static str, at: Location) -> Vec<usize> {
        let mut out = Vec::new();
        for i in v.iter().flat_map(|v| v.iter()) {
            if i < 0 {
                self.err(
                    ErrorKind::IndexOutOfRange {
                        what,
                        index: i as i64,
                        len: 0,
                    },
                    at.clone(),
                );
            } else {
                out.push(i as usize);
            }
        }
        out
    }

    fn index(&mut self, i: i32, what: &'static str, at: &Location) -> usize {
        if i < 0 {
            self.err(
                ErrorKind::IndexOutOfRange {
                    what,
                    index: i as i64,
                    len: 0,
                },
                at.clone(),
            );
            usize::MAX
        } else {
            i as usize
        }
    }

    fn instruction(&mut self, ins: fb::Instruction<'f>, at: Location) -> Instruction {
        use fb::InstructionArguments as A;
        match ins.instr_args_type() {
            A::KernelCall => {
                let k = ins.instr_args_as_kernel_call().expect("type checked");
                let op = self.index(k.op_index(), "operator", &at);
                let args = self.indices(k.args(), "argument value", at);
                Instruction::Kernel { op, args }
            }
            A::DelegateCall => {
                let d = ins.instr_args_as_delegate_call().expect("type checked");
                let delegate = self.index(d.delegate_index(), "delegate", &at);
                let args = self.indices(d.args(), "argument value", at);
                Instruction::Delegate { delegate, args }
            }
            A::MoveCall => {
                let m = ins.instr_args_as_move_call().expect("type checked");
                Instruction::Move {
                    from: self.index(m.move_from(), "value", &at),
                    to: self.index(m.move_to(), "value", &at),
                }
            }
            A::JumpFalseCall => {
                let j = ins.instr_args_as_jump_false_call().expect("type checked");
                Instruction::JumpFalse {
                    cond: self.index(j.cond_value_index(), "value", &at),
                    destination: self.index(j.destination_instruction(), "jump destination", &at),
                }
            }
            A::FreeCall => {
                let f = ins.instr_args_as_free_call().expect("type checked");
                Instruction::Free {
                    value: self.index(f.value_index(), "value", &at),
                }
            }
            other => {
                self.err(
                    ErrorKind::Missing {
                        what: "instruction arguments",
                    },
                    at.clone(),
                );
                let _ = other;
                Instruction::Free { value: usize::MAX }
            }
        }
    }

    fn delegate(&mut self, d: fb::BackendDelegate<'f>, i: usize, inline: &[DataRef], at: Location) -> Delegate {
        let id = d.id().unwrap_or("").to_string();
        let compile_specs = d
            .compile_specs()
            .map(|cs| {
                cs.iter()
                    .map(|c| {
                        (
                            c.key().unwrap_or("").to_string(),
                            c.value().map(|v| v.bytes().to_vec()).unwrap_or_default(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let empty = DataRef {
            source: DataSource::Program,
            offset: 0,
            len: 0,
        };
        let Some(processed) = d.processed() else {
            self.err(
                ErrorKind::Missing {
                    what: "delegate processed data reference",
                },
                at,
            );
            return Delegate {
                id,
                processed: empty,
                inline: true,
                compile_specs,
            };
        };
        let idx = processed.index() as usize;
        let (table, what, inline_flag): (&[DataRef], _, _) = match processed.location() {
            fb::DataLocation::INLINE => (inline, "backend_delegate_data", true),
            fb::DataLocation::SEGMENT => (&self.segments, "segment", false),
            other => {
                self.err(
                    ErrorKind::BadPlacement {
                        detail: format!("delegate {i} data location {} is unknown", other.0),
                    },
                    at,
                );
                return Delegate {
                    id,
                    processed: empty,
                    inline: true,
                    compile_specs,
                };
            }
        };
        let data = match table.get(idx) {
            Some(d) => *d,
            None => {
                let len = table.len();
                self.err(
                    ErrorKind::IndexOutOfRange {
                        what,
                        index: idx as i64,
                        len,
                    },
                    at,
                );
                empty
            }
        };
        Delegate {
            id,
            processed: data,
            inline: inline_flag,
            compile_specs,
        }
    }

    fn value(
        &mut self,
        v: fb::EValue<'f>,
        at: Location,
        constants: &ConstantTable,
        mutable: &[Option<Subsegments>],
        external: &[ExternalFile],
    ) -> Value {
        use fb::KernelTypes as K;
        match v.val_type() {
            K::NONE | K::Null => Value::Null,
            K::Int => Value::Int(v.val_as_int().map(|x| x.int_val()).unwrap_or(0)),
            K::Bool => Value::Bool(v.val_as_bool().map(|x| x.bool_val()).unwrap_or(false)),
            K::Double => Value::Double(v.val_as_double().map(|x| x.double_val()).unwrap_or(0.0)),
            K::String => Value::String(v.val_as_string().and_then(|s| s.string_val()).unwrap_or("").to_string()),
            K::IntList => {
                let items = v.val_as_int_list().and_then(|l| l.items());
                let mut out = Vec::new();
                for i in items.iter().flat_map(|v| v.iter()) {
                    if i < 0 || i > u32::MAX as i64 {
                        self.err(
                            ErrorKind::IndexOutOfRange {
                                what: "IntList item value",
                                index: i,
                                len: 0,
                            },
                            at.clone(),
                        );
                    } else {
                        out.push(i as usize);
                    }
                }
                Value::IntList(out)
            }
            K::DoubleList => Value::DoubleList(
                v.val_as_double_list()
                    .and_then(|l| l.items())
                    .map(|v| v.iter().collect())
                    .unwrap_or_default(),
            ),
            K::BoolList => Value::BoolList(
                v.val_as_bool_list()
                    .and_then(|l| l.items())
                    .map(|v| v.iter().collect())
                    .unwrap_or_default(),
            ),
            K::TensorList => {
                let items = v.val_as_tensor_list().and_then(|l| l.items());
                Value::TensorList(self.indices(items, "TensorList item value", at))
            }
            K::OptionalTensorList => {
                let items = v.val_as_optional_tensor_list().and_then(|l| l.items());
                let mut out = Vec::new();
                for i in items.iter().flat_map(|v| v.iter()) {
                    if i == -1 {
                        out.push(None);
                    } else if i < 0 {
                        self.err(
                            ErrorKind::IndexOutOfRange {
                                what: "OptionalTensorList item value",
                                index: i as i64,
                                len: 0,
                            },
                            at.clone(),
                        );
                    } else {
                        out.push(Some(i as usize));
                    }
                }
                Value::OptionalTensorList(out)
            }
            K::Tensor => match v.val_as_tensor() {
                Some(t) => self.tensor(t, at, constants, mutable, external),
                None => Value::Null,
            },
            other => {
                self.err(
                    ErrorKind::Unsupported {
                        detail: format!("EValue kind {} is unknown", other.0),
                    },
                    at,
                );
                Value::Null
            }
        }
    }

    fn tensor(
        &mut self,
        t: fb::Tensor<'f>,
        at: Location,
        constants: &ConstantTable,
        mutable: &[Option<Subsegments>],
        external: &[ExternalFile],
    ) -> Value {
        let code = t.scalar_type().0;
        let dtype = match ScalarType::from_code(code) {
            Some(d) => d,
            None => {
                self.err(ErrorKind::UnknownScalarType { code }, at);
                return Value::Null;
            }
        };
        let raw_sizes: Vec<i32> = t.sizes().map(|v| v.iter().collect()).unwrap_or_default();
        let mut sizes = Vec::with_capacity(raw_sizes.len());
        for &s in &raw_sizes {
            if s < 0 {
                self.err(
                    ErrorKind::BadSizes {
                        detail: format!("size {s} in {raw_sizes:?} is negative"),
                    },
                    at.clone(),
                );
                return Value::Null;
            }
            sizes.push(s as usize);
        }
        let numel = sizes.iter().try_fold(1usize, |acc, &s| acc.checked_mul(s));
        let nbytes = numel
            .and_then(|n| n.checked_mul(dtype.element_size()))
            .filter(|&n| n <= isize::MAX as usize);
        let Some(nbytes) = nbytes else {
            self.err(
                ErrorKind::BadSizes {
                    detail: format!("{raw_sizes:?} of {dtype} overflows"),
                },
                at,
            );
            return Value::Null;
        };
        let dim_order: Vec<u8> = t.dim_order().map(|v| v.bytes().to_vec()).unwrap_or_default();
        // ExecuTorch writes an empty dim_order for nothing but rank 0; an
        // absent one means the default order.
        let dim_order = if dim_order.is_empty() && !sizes.is_empty() {
            (0..sizes.len() as u8).collect()
        } else {
            dim_order
        };
        let dynamism = match t.shape_dynamism() {
            fb::TensorShapeDynamism::STATIC => Dynamism::Static,
            fb::TensorShapeDynamism::DYNAMIC_BOUND => Dynamism::DynamicBound,
            fb::TensorShapeDynamism::DYNAMIC_UNBOUND => Dynamism::DynamicUnbound,
            other => {
                self.err(
                    ErrorKind::Unsupported {
                        detail: format!("shape dynamism {} is unknown", other.0),
                    },
                    at.clone(),
                );
                Dynamism::Static
            }
        };
        if t.storage_offset() != 0 {
            self.err(
                ErrorKind::StorageOffset {
                    offset: t.storage_offset(),
                },
                at.clone(),
            );
        }
        let extra = t.extra_tensor_info();
        let idx = t.data_buffer_idx() as usize;
        let alloc = t.allocation_info();
        let planned = alloc.map(|a| {
            (
                a.memory_id() as usize,
                a.memory_offset_low() as u64 | (a.memory_offset_high() as u64) << 32,
            )
        });
        let placement = if extra.is_some_and(|e| e.location() == fb::TensorDataLocation::EXTERNAL) {
            let key = extra.and_then(|e| e.fully_qualified_name()).unwrap_or("").to_string();
            if key.is_empty() {
                self.err(
                    ErrorKind::Missing {
                        what: "fully_qualified_name of an external tensor",
                    },
                    at.clone(),
                );
            }
            let data = resolve_external(external, &key, dtype, &sizes, nbytes).map_err(|detail| {
                self.err(
                    ErrorKind::External {
                        key: key.clone(),
                        detail,
                    },
                    at.clone(),
                );
            });
            Placement::External {
                key,
                data: data.ok().flatten(),
            }
        } else if idx > 0 {
            match planned {
                None => match self.constant_data(constants, idx, nbytes, &at) {
                    Some(data) => Placement::Constant { data },
                    None => Placement::Unplanned,
                },
                Some((buffer, offset)) => {
                    let table_idx = extra.map(|e| e.mutable_data_segments_idx()).unwrap_or(0) as usize;
                    match mutable.get(table_idx) {
                        Some(Some(table)) => match self.sub_data(table, idx, nbytes, "mutable data", &at) {
                            Some(initial) => Placement::Mutable {
                                buffer,
                                offset,
                                initial,
                            },
                            None => Placement::Planned { buffer, offset },
                        },
                        Some(None) => Placement::Planned { buffer, offset },
                        None => {
                            self.err(
                                ErrorKind::IndexOutOfRange {
                                    what: "mutable_data_segments",
                                    index: table_idx as i64,
                                    len: mutable.len(),
                                },
                                at.clone(),
                            );
                            Placement::Planned { buffer, offset }
                        }
                    }
                }
            }
        } else {
            match planned {
                Some((buffer, offset)) => Placement::Planned { buffer, offset },
                None => Placement::Unplanned,
            }
        };
        Value::Tensor(Tensor {
            dtype,
            sizes,
            dim_order,
            dynamism,
            placement,
        })
    }

    fn constant_data(&mut self, table: &ConstantTable, idx: usize, nbytes: usize, at: &Location) -> Option<DataRef> {
        match table {
            ConstantTable::Segment(s) => self.sub_data(s, idx, nbytes, "constant", at),
            ConstantTable::Legacy(bufs) => match bufs.get(idx) {
                Some(b) if b.len >= nbytes => Some(DataRef { len: nbytes, ..*b }),
                Some(b) => {
                    self.err(
                        ErrorKind::OutsideData {
                            what: "constant",
                            offset: b.offset as u64,
                            len: nbytes as u64,
                            limit: b.len as u64,
                        },
                        at.clone().offset(b.offset),
                    );
                    None
                }
                None => {
                    self.err(
                        ErrorKind::IndexOutOfRange {
                            what: "constant buffer",
                            index: idx as i64,
                            len: bufs.len(),
                        },
                        at.clone(),
                    );
                    None
                }
            },
        }
    }

    fn sub_data(
        &mut self,
        s: &Subsegments,
        idx: usize,
        nbytes: usize,
        what: &'static str,
        at: &Location,
    ) -> Option<DataRef> {
        let Some(&off) = s.offsets.get(idx) else {
            self.err(
                ErrorKind::IndexOutOfRange {
                    what: "data_buffer_idx",
                    index: idx as i64,
                    len: s.offsets.len(),
                },
                at.clone(),
            );
            return None;
        };
        let fits = off
            .checked_add(nbytes as u64)
            .is_some_and(|e| e <= s.segment.len as u64);
        if !fits {
            self.err(
                ErrorKind::OutsideData {
                    what,
                    offset: off,
                    len: nbytes as u64,
                    limit: s.segment.len as u64,
                },
                at.clone().offset(s.segment.offset.saturating_add(off as usize)),
            );
            return None;
        }
        Some(DataRef {
            source: DataSource::Program,
            offset: s.segment.offset + off as usize,
            len: nbytes,
        })
    }
}

/// Finds `key` in the given `.ptd` files and checks its layout.
fn resolve_external(
    files: &[ExternalFile],
    key: &str,
    dtype: ScalarType,
    sizes: &[usize],
    nbytes: usize,
) -> std::result::Result<Option<DataRef>, String> {
    if files.is_empty() {
        return Ok(None);
    }
    for f in files {
        if let Some(t) = f.tensors.iter().find(|t| t.key == key) {
            if t.dtype.is_some_and(|d| d != dtype) {
                return Err(format!("is {:?} in the data file but {dtype} in the program", t.dtype));
            }
            let same_sizes =
                t.sizes.len() == sizes.len() && t.sizes.iter().zip(sizes).all(|(&a, &b)| a >= 0 && a as usize == b);
            if !t.sizes.is_empty() && !same_sizes {
                return Err(format!(
                    "has sizes {:?} in the data file but {sizes:?} in the program",
                    t.sizes
                ));
            }
            if t.data.len < nbytes {
                return Err(format!(
                    "has {} bytes in the data file; the program needs {nbytes}",
                    t.data.len
                ));
            }
            return Ok(Some(DataRef { len: nbytes, ..t.data }));
        }
    }
    Err("not found in the given data file(s)".into())
}

#[derive(Clone, Debug, Default)]
struct Subsegments {
    segment: DataRef,
    offsets: Vec<u64>,
}

impl Default for DataRef {
    fn default() -> Self {
        DataRef {
            source: DataSource::Program,
            offset: 0,
            len: 0,
        }
    }
}

enum ConstantTable {
    Segment(Subsegments),
    Legacy(Vec<DataRef>),
}
