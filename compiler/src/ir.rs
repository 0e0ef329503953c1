//! The small IR between the reader and the code generator.
//!
//! The reader turns a file's flatbuffers into these types, resolving every
//! piece of data to a byte range of the file it lives in ([`DataRef`]); the
//! verifier checks them once; the code generator consumes them. Indices keep
//! the program's numbering: value `i` of a method is `Method::values[i]`,
//! instruction `i` is `Method::instructions[i]`.
pub use ptec_runtime::{Dynamism, ScalarType};

/// Which file a [`DataRef`] points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataSource {
    /// The file the program was read from (`.pte`, or the bundle holding it).
    Program,
    /// An external data file (`.ptd`), by its index in
    /// [`Program::external_files`].
    External(usize),
    /// The one block of constants generated code embeds (when the weights
    /// are embedded): the bytes of the files its code reads, compacted (see
    /// `plan::compact`), then the constants the compiler prepared (see
    /// `codegen::prepare`).
    Embedded,
    /// Bytes of the files that only the compiler reads, to prepare other
    /// constants from: the generated code holds no copy of them.
    PrepareOnly,
}

/// A byte range of a source file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DataRef {
    /// The file the bytes are in.
    pub source: DataSource,
    /// Byte offset from the start of the source file.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

/// What kind of file was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A `.pte` program.
    Program {
        /// Length in bytes of its `eh00` extended header (24 or 32), or
        /// `None` when it has none.
        extended_header: Option<u32>,
    },
    /// A BP04 bundled program (`.bp`).
    BundleBp04,
    /// A BP08 bundled program (`.bpte`).
    BundleBp08,
    /// External tensor data (`.ptd`).
    TensorData,
}

impl FileKind {
    /// The kind's name, as `ptec inspect` prints it (`program`, `bundle-bp08`...).
    pub fn name(&self) -> &'static str {
        match self {
            FileKind::Program { .. } => "program",
            FileKind::BundleBp04 => "bundle-bp04",
            FileKind::BundleBp08 => "bundle-bp08",
            FileKind::TensorData => "tensor-data",
        }
    }
}

/// A program: its methods and the data they refer to.
#[derive(Clone, Debug)]
pub struct Program {
    /// The program's schema version (its flatbuffer `version` field).
    pub version: u32,
    /// Byte range of the program (flatbuffer and segments) in its source
    /// file: the whole file for a `.pte`, the embedded bytes for a bundle.
    pub range: DataRef,
    /// Its methods, in the program's order.
    pub methods: Vec<Method>,
    /// Data segments, resolved to absolute byte ranges.
    pub segments: Vec<DataRef>,
    /// `named_data` entries: key and the segment holding the data.
    pub named_data: Vec<NamedData>,
    /// External data files the program's `EXTERNAL` tensors were resolved
    /// against, in the order given to the reader.
    pub external_files: Vec<ExternalFile>,
}

impl Program {
    /// The distinct ids of the backends the program's delegate calls name
    /// (after lowering: those whose calls ptec left in place, which the
    /// generated code must be given).
    pub fn backend_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .methods
            .iter()
            .flat_map(|m| m.delegates.iter().map(|d| d.id.clone()))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }
}

/// One `named_data` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedData {
    /// The key the data is looked up by.
    pub key: String,
    /// Index of the segment holding the data, in [`Program::segments`].
    pub segment: usize,
    /// The bytes of that segment; `None` when the index is out of range.
    pub data: Option<DataRef>,
}

/// A `.ptd` file: named tensors and their bytes.
#[derive(Clone, Debug)]
pub struct ExternalFile {
    /// Its tensors, in the order of the file's `named_data`.
    pub tensors: Vec<ExternalTensor>,
}

/// One named tensor of a `.ptd` file.
#[derive(Clone, Debug, PartialEq)]
pub struct ExternalTensor {
    /// The fully qualified name a program's `EXTERNAL` tensor names it by.
    pub key: String,
    /// Element type from its tensor layout; `None` when the file gives none
    /// or an unknown code.
    pub dtype: Option<ScalarType>,
    /// Sizes from its tensor layout, outermost first, as the file gives
    /// them; empty when it gives none.
    pub sizes: Vec<i64>,
    /// Dim order from its tensor layout; empty when the file gives none.
    pub dim_order: Vec<u8>,
    /// Its bytes: the whole segment its entry names.
    pub data: DataRef,
}

/// One method (ExecuTorch `ExecutionPlan`).
#[derive(Clone, Debug, PartialEq)]
pub struct Method {
    /// The name the method is called by.
    pub name: String,
    /// Its values (EValues); everything else refers to them by index.
    pub values: Vec<Value>,
    /// Value indices of the inputs.
    pub inputs: Vec<usize>,
    /// Value indices of the outputs.
    pub outputs: Vec<usize>,
    /// Its instructions, run in order except where one jumps.
    pub instructions: Vec<Instruction>,
    /// The operators [`Instruction::Kernel`] calls, by index.
    pub operators: Vec<Operator>,
    /// The delegates [`Instruction::Delegate`] calls, by index.
    pub delegates: Vec<Delegate>,
    /// Planned buffer sizes, indexed by memory id (entry 0 is reserved).
    pub buffer_sizes: Vec<u64>,
    /// How many entries of `buffer_sizes` (the reserved one included) are
    /// the program's own plan; the passes append the rest.
    pub program_buffers: usize,
    /// The appended buffer that holds the temporaries the program's plan
    /// had no room for (`plan::temporaries`), if any: its bytes hold
    /// nothing between runs, nor outside those temporaries' lives.
    pub temporaries_buffer: Option<usize>,
    /// Source frames of each instruction, when the program carries them.
    pub stacktraces: Option<Vec<Vec<Frame>>>,
    /// Where each instruction came from in the program as read (its
    /// instruction there, and the XNNPACK node it was lowered from), for
    /// profiles and debug outputs in ExecuTorch's numbering; empty while
    /// no pass has renumbered the instructions (see [`Method::origin`]).
    pub origins: Vec<Origin>,
    /// The operator each instruction of the program as read calls
    /// (`aten::addmm.out`), by its index there (`None` for the others):
    /// traces name kernels as ExecuTorch's runtime does, whatever the
    /// passes made of them.
    pub read_operators: Vec<Option<String>>,
    /// The outputs of each XNNPACK call ptec lowered (the call's last
    /// arguments, in order), by its instruction in the program as read:
    /// traces log them after the call's last node, where ExecuTorch's
    /// runtime logs the call's arguments (its inputs, then these).
    pub delegate_outputs: std::collections::BTreeMap<usize, Vec<usize>>,
    /// Values the channels-last pass stores NHWC: their sizes are
    /// `[N, H, W, C]`, PyTorch's are `[N, C, H, W]` (debug outputs are
    /// logged in PyTorch's order).
    pub channels_last: std::collections::BTreeSet<usize>,
}

/// Where an instruction came from in the program as read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// Its index among the program's instructions.
    pub instruction: usize,
    /// For an instruction lowered from an XNNPACK delegate call: the debug
    /// handle of the subgraph node it computes.
    pub delegate_node: Option<u32>,
    /// The later instruction of the program as read whose result this one
    /// writes, when a pass made it do that instruction's work too (a
    /// convolution that absorbed the batch norm and clamp after it): its
    /// debug outputs are logged as that instruction's.
    pub logged_as: Option<usize>,
}

impl Method {
    /// Where instruction `n` came from.
    pub fn origin(&self, n: usize) -> Origin {
        match self.origins.get(n) {
            Some(&o) => o,
            None => Origin {
                instruction: n,
                ..Origin::default()
            },
        }
    }

    /// Whether any instruction jumps (the method has control flow).
    pub fn has_jumps(&self) -> bool {
        self.instructions
            .iter()
            .any(|i| matches!(i, Instruction::JumpFalse { .. }))
    }
}

/// An EValue.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// No value (`None`).
    Null,
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A double-precision float.
    Double(f64),
    /// A string.
    String(String),
    /// A tensor.
    Tensor(Tensor),
    /// Indices of `Int` values (not the integers themselves).
    IntList(Vec<usize>),
    /// Doubles, held in the list itself.
    DoubleList(Vec<f64>),
    /// Booleans, held in the list itself.
    BoolList(Vec<bool>),
    /// Indices of tensor values.
    TensorList(Vec<usize>),
    /// Indices of tensor values; `None` is an absent tensor.
    OptionalTensorList(Vec<Option<usize>>),
}

impl Value {
    /// The kind's name as ExecuTorch's `Tag` spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "None",
            Value::Int(_) => "Int",
            Value::Bool(_) => "Bool",
            Value::Double(_) => "Double",
            Value::String(_) => "String",
            Value::Tensor(_) => "Tensor",
            Value::IntList(_) => "IntList",
            Value::DoubleList(_) => "DoubleList",
            Value::BoolList(_) => "BoolList",
            Value::TensorList(_) => "TensorList",
            Value::OptionalTensorList(_) => "OptionalTensorList",
        }
    }

    /// The tensor, when the value is one.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

/// A tensor value.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Element type.
    pub dtype: ScalarType,
    /// Sizes, outermost first (upper bounds when dynamic).
    pub sizes: Vec<usize>,
    /// The dimensions in memory order, outermost first: a permutation of
    /// `0..sizes.len()`, `0, 1, ...` when contiguous.
    pub dim_order: Vec<u8>,
    /// Whether the sizes are fixed, bounds, or unbounded.
    pub dynamism: Dynamism,
    /// Where its data lives.
    pub placement: Placement,
}

impl Tensor {
    /// Number of elements at [`Tensor::sizes`] (1 for a scalar).
    pub fn numel(&self) -> usize {
        self.sizes.iter().product()
    }

    /// Size of its data in bytes at [`Tensor::sizes`].
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.element_size()
    }

    /// Whether the dim order is the default (contiguous) one.
    pub fn is_contiguous(&self) -> bool {
        self.dim_order.iter().enumerate().all(|(i, &d)| d as usize == i)
    }
}

/// Where a tensor's data lives.
#[derive(Clone, Debug, PartialEq)]
pub enum Placement {
    /// In a planned buffer.
    Planned {
        /// The buffer's memory id (>= 1), an index of [`Method::buffer_sizes`].
        buffer: usize,
        /// Byte offset of the data in the buffer.
        offset: u64,
    },
    /// Constant data in the program.
    Constant {
        /// The tensor's bytes.
        data: DataRef,
    },
    /// Planned, with an initial value copied in before the first run.
    Mutable {
        /// The buffer's memory id (>= 1), an index of [`Method::buffer_sizes`].
        buffer: usize,
        /// Byte offset of the data in the buffer.
        offset: u64,
        /// The bytes of the initial value.
        initial: DataRef,
    },
    /// Constant data kept in a `.ptd` file.
    External {
        /// The tensor's fully qualified name in the `.ptd` file.
        key: String,
        /// The tensor's bytes; `None` when no `.ptd` file was given to the
        /// reader.
        data: Option<DataRef>,
    },
    /// No storage in the program: the caller provides it (an unplanned
    /// input) or a kernel does at run time.
    Unplanned,
}

/// One instruction.
#[derive(Clone, Debug, PartialEq)]
pub enum Instruction {
    /// Calls an operator.
    Kernel {
        /// Index of the operator in [`Method::operators`].
        op: usize,
        /// Value indices of the operator's out-variant arguments, out tensors
        /// last.
        args: Vec<usize>,
    },
    /// Calls a delegate.
    Delegate {
        /// Index of the delegate in [`Method::delegates`].
        delegate: usize,
        /// Value indices of the arguments.
        args: Vec<usize>,
    },
    /// `values[to] = values[from]`.
    Move {
        /// Index of the value copied.
        from: usize,
        /// Index of the value it is copied to.
        to: usize,
    },
    /// Jumps when a condition is false.
    JumpFalse {
        /// Index of the condition value (a `Bool`, or a bool tensor).
        cond: usize,
        /// Index of the instruction to jump to; `instructions.len()` ends
        /// the method.
        destination: usize,
    },
    /// Releases the run-time storage of a tensor (nothing for planned data).
    Free {
        /// Index of the tensor value.
        value: usize,
    },
}

impl Instruction {
    /// The kind's name as the schema's `InstructionArguments` spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Instruction::Kernel { .. } => "KernelCall",
            Instruction::Delegate { .. } => "DelegateCall",
            Instruction::Move { .. } => "MoveCall",
            Instruction::JumpFalse { .. } => "JumpFalseCall",
            Instruction::Free { .. } => "FreeCall",
        }
    }
}

/// An operator, named as `name.overload`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Operator {
    /// The name with its namespace (`aten::add`).
    pub name: String,
    /// The overload (`out`); empty for none.
    pub overload: String,
}

impl Operator {
    /// `name.overload`, or `name` when the overload is empty.
    pub fn full_name(&self) -> String {
        if self.overload.is_empty() {
            self.name.clone()
        } else {
            format!("{}.{}", self.name, self.overload)
        }
    }
}

/// A backend delegate: its id, processed blob and compile specs.
#[derive(Clone, Debug, PartialEq)]
pub struct Delegate {
    /// Id of the backend that runs it (`XnnpackBackend`).
    pub id: String,
    /// The processed blob: what the backend's preprocessing made at export.
    pub processed: DataRef,
    /// Whether the blob came from `backend_delegate_data` (inline) or a
    /// segment.
    pub inline: bool,
    /// The backend's compile specs: keys and their value bytes.
    pub compile_specs: Vec<(String, Vec<u8>)>,
}

/// One frame of an instruction's source stack.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// The source file.
    pub filename: String,
    /// The line number in it.
    pub lineno: i32,
    /// The function the frame is in.
    pub name: String,
    /// The source code of the line.
    pub context: String,
}

/// A bundled program: a program plus test cases per method.
#[derive(Clone, Debug)]
pub struct Bundle {
    /// The program the bundle embeds.
    pub program: Program,
    /// The test cases, by method.
    pub suites: Vec<TestSuite>,
}

/// Test cases of one method.
#[derive(Clone, Debug)]
pub struct TestSuite {
    /// Name of the method tested.
    pub method: String,
    /// Its test cases.
    pub cases: Vec<TestCase>,
}

/// Inputs and the outputs eager PyTorch computed for them.
#[derive(Clone, Debug)]
pub struct TestCase {
    /// One value per method input, in order.
    pub inputs: Vec<TestValue>,
    /// The expected outputs, in the method's output order.
    pub expected: Vec<TestValue>,
}

/// A value of a test case.
#[derive(Clone, Debug, PartialEq)]
pub enum TestValue {
    /// A tensor.
    Tensor {
        /// Element type.
        dtype: ScalarType,
        /// Sizes, outermost first.
        sizes: Vec<usize>,
        /// The dimensions in memory order (the default when the bundle
        /// gives none).
        dim_order: Vec<u8>,
        /// Its bytes in the bundle, exactly as many as the sizes need.
        data: DataRef,
    },
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A double-precision float.
    Double(f64),
}

/// The operator (`namespace::name.overload`) and arguments of a kernel
/// call; None for other instructions.
pub(crate) fn kernel_name<'a>(m: &Method, ins: &'a Instruction) -> Option<(String, &'a [usize])> {
    match ins {
        Instruction::Kernel { op, args } => Some((m.operators.get(*op)?.full_name(), args)),
        _ => None,
    }
}

/// Alignment of what the passes place in their buffers (a cache line; SIMD
/// loads never straddle one at a tensor's start).
pub(crate) const PLAN_ALIGN: u64 = 64;

/// A planned buffer a pass adds to a method.
#[derive(Default)]
pub(crate) struct AddedBuffer {
    /// Its memory id, once something needs it.
    id: Option<usize>,
    pub(crate) size: u64,
}

impl AddedBuffer {
    /// The memory id, appending the buffer to the method's plan on first
    /// use (after the reserved entry 0).
    pub(crate) fn id(&mut self, m: &mut Method) -> usize {
        *self.id.get_or_insert_with(|| {
            if m.buffer_sizes.is_empty() {
                m.buffer_sizes.push(0);
            }
            m.buffer_sizes.push(0);
            m.buffer_sizes.len() - 1
        })
    }

    /// Bytes of their own, at the end, for one value for the whole run
    /// (and from run to run).
    pub(crate) fn reserve(&mut self, m: &mut Method, bytes: u64) -> Placement {
        let buffer = self.id(m);
        let offset = self.size;
        self.size = offset + bytes.div_ceil(PLAN_ALIGN) * PLAN_ALIGN;
        Placement::Planned { buffer, offset }
    }

    /// Its memory id, if it was ever needed.
    pub(crate) fn memory_id(&self) -> Option<usize> {
        self.id
    }

    /// Writes the buffer's final size into the method's plan.
    pub(crate) fn install(&self, m: &mut Method) {
        if let Some(id) = self.id {
            m.buffer_sizes[id] = self.size;
        }
    }
}
