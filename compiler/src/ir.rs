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
    /// `codegen::compact`), then the constants the compiler prepared (see
    /// `codegen::prepare`).
    Embedded,
    /// Bytes of the files that only the compiler reads, to prepare other
    /// constants from: the generated code holds no copy of them.
    PrepareOnly,
}

/// A byte range of a source file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DataRef {
    pub source: DataSource,
    /// Byte offset from the start of the source file.
    pub offset: usize,
    pub len: usize,
}

/// What kind of file was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A `.pte` program; `extended_header` is the length of its `eh00`
    /// header (24 or 32), or `None` when it has none.
    Program { extended_header: Option<u32> },
    /// A BP04 bundled program (`.bp`).
    BundleBp04,
    /// A BP08 bundled program (`.bpte`).
    BundleBp08,
    /// External tensor data (`.ptd`).
    TensorData,
}

impl FileKind {
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
    pub version: u32,
    /// Byte range of the program (flatbuffer and segments) in its source
    /// file: the whole file for a `.pte`, the embedded bytes for a bundle.
    pub range: DataRef,
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
    pub key: String,
    pub segment: usize,
    pub data: Option<DataRef>,
}

/// A `.ptd` file: named tensors and their bytes.
#[derive(Clone, Debug)]
pub struct ExternalFile {
    pub tensors: Vec<ExternalTensor>,
}

/// One named tensor of a `.ptd` file.
#[derive(Clone, Debug, PartialEq)]
pub struct ExternalTensor {
    pub key: String,
    pub dtype: Option<ScalarType>,
    pub sizes: Vec<i64>,
    pub dim_order: Vec<u8>,
    pub data: DataRef,
}

/// One method (ExecuTorch `ExecutionPlan`).
#[derive(Clone, Debug, PartialEq)]
pub struct Method {
    pub name: String,
    pub values: Vec<Value>,
    /// Value indices of the inputs.
    pub inputs: Vec<usize>,
    /// Value indices of the outputs.
    pub outputs: Vec<usize>,
    pub instructions: Vec<Instruction>,
    pub operators: Vec<Operator>,
    pub delegates: Vec<Delegate>,
    /// Planned buffer sizes, indexed by memory id (entry 0 is reserved).
    pub buffer_sizes: Vec<u64>,
    /// How many entries of `buffer_sizes` (the reserved one included) are
    /// the program's own plan; the passes append the rest.
    pub program_buffers: usize,
    /// Source frames of each instruction, when the program carries them.
    pub stacktraces: Option<Vec<Vec<Frame>>>,
}

impl Method {
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
    Null,
    Int(i64),
    Bool(bool),
    Double(f64),
    String(String),
    Tensor(Tensor),
    /// Indices of `Int` values (not the integers themselves).
    IntList(Vec<usize>),
    DoubleList(Vec<f64>),
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
    pub dtype: ScalarType,
    /// Sizes (upper bounds when dynamic).
    pub sizes: Vec<usize>,
    pub dim_order: Vec<u8>,
    pub dynamism: Dynamism,
    pub placement: Placement,
}

impl Tensor {
    pub fn numel(&self) -> usize {
        self.sizes.iter().product()
    }

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
    /// In planned buffer `buffer` (a memory id, >= 1) at byte `offset`.
    Planned { buffer: usize, offset: u64 },
    /// Constant data in the program.
    Constant { data: DataRef },
    /// Planned, with an initial value copied in before the first run.
    Mutable {
        buffer: usize,
        offset: u64,
        initial: DataRef,
    },
    /// Constant data kept in a `.ptd` file under `key`; `data` when the file
    /// was given to the reader.
    External { key: String, data: Option<DataRef> },
    /// No storage in the program: the caller provides it (an unplanned
    /// input) or a kernel does at run time.
    Unplanned,
}

/// One instruction.
#[derive(Clone, Debug, PartialEq)]
pub enum Instruction {
    /// Calls `Method::operators[op]` with value indices `args` (the
    /// operator's out-variant arguments, out tensors last).
    Kernel { op: usize, args: Vec<usize> },
    /// Calls `Method::delegates[delegate]` with value indices `args`.
    Delegate { delegate: usize, args: Vec<usize> },
    /// `values[to] = values[from]`.
    Move { from: usize, to: usize },
    /// Jumps to `destination` when value `cond` is false.
    JumpFalse { cond: usize, destination: usize },
    /// Releases run-time storage of value `value` (nothing for planned data).
    Free { value: usize },
}

impl Instruction {
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
    pub name: String,
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
    pub id: String,
    pub processed: DataRef,
    /// Whether the blob came from `backend_delegate_data` (inline) or a
    /// segment.
    pub inline: bool,
    pub compile_specs: Vec<(String, Vec<u8>)>,
}

/// One frame of an instruction's source stack.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    pub filename: String,
    pub lineno: i32,
    pub name: String,
    pub context: String,
}

/// A bundled program: a program plus test cases per method.
#[derive(Clone, Debug)]
pub struct Bundle {
    pub program: Program,
    pub suites: Vec<TestSuite>,
}

/// Test cases of one method.
#[derive(Clone, Debug)]
pub struct TestSuite {
    pub method: String,
    pub cases: Vec<TestCase>,
}

/// Inputs and the outputs eager PyTorch computed for them.
#[derive(Clone, Debug)]
pub struct TestCase {
    pub inputs: Vec<TestValue>,
    pub expected: Vec<TestValue>,
}

/// A value of a test case.
#[derive(Clone, Debug, PartialEq)]
pub enum TestValue {
    Tensor {
        dtype: ScalarType,
        sizes: Vec<usize>,
        dim_order: Vec<u8>,
        data: DataRef,
    },
    Int(i64),
    Bool(bool),
    Double(f64),
}
