//! Errors of reading, verifying and compiling a program.
//!
//! Every problem is a [`Diagnostic`]: a typed [`ErrorKind`] plus the
//! [`Location`] it was found at (method, instruction, value, byte offset).
//! Functions that can find several problems return all of them as
//! [`Errors`].
use std::fmt;

/// Where a problem is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Location {
    /// Name of the method.
    pub method: Option<String>,
    /// Index of the instruction in the method.
    pub instruction: Option<usize>,
    /// Index of the value in the method.
    pub value: Option<usize>,
    /// A place inside a structure nested in the instruction, such as a node
    /// or value of a delegate's subgraph (`XNNPACK node 4 (XNNConv2d)`).
    pub within: Option<String>,
    /// Byte offset in the file, where one is known.
    pub offset: Option<usize>,
}

impl Location {
    /// In method `name`.
    pub fn method(name: &str) -> Self {
        Location {
            method: Some(name.to_string()),
            ..Default::default()
        }
    }

    /// At byte `offset` of the file.
    pub fn at_offset(offset: usize) -> Self {
        Location {
            offset: Some(offset),
            ..Default::default()
        }
    }

    /// This location, at instruction `i`.
    pub fn instruction(mut self, i: usize) -> Self {
        self.instruction = Some(i);
        self
    }

    /// This location, at value `v`.
    pub fn value(mut self, v: usize) -> Self {
        self.value = Some(v);
        self
    }

    /// This location, at byte offset `o` of the file.
    pub fn offset(mut self, o: usize) -> Self {
        self.offset = Some(o);
        self
    }

    /// This location, at `place` inside a structure nested in the
    /// instruction.
    pub fn within(mut self, place: impl Into<String>) -> Self {
        self.within = Some(place.into());
        self
    }

    fn is_empty(&self) -> bool {
        *self == Location::default()
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(m) = &self.method {
            parts.push(format!("method `{m}`"));
        }
        if let Some(i) = self.instruction {
            parts.push(format!("instruction {i}"));
        }
        if let Some(v) = self.value {
            parts.push(format!("value {v}"));
        }
        if let Some(w) = &self.within {
            parts.push(w.clone());
        }
        if let Some(o) = self.offset {
            parts.push(format!("byte offset {o}"));
        }
        f.write_str(&parts.join(", "))
    }
}

/// What is wrong.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file is empty.
    Empty,
    /// The file is not one ptec reads.
    NotExecuTorch {
        /// What the file seems to be, when its magic is recognisable.
        looks_like: Option<&'static str>,
    },
    /// The file ends before a structure it declares.
    Truncated {
        /// The structure (`program header`, `segment data`, ...).
        what: &'static str,
        /// Bytes the file (or blob) must have to hold it.
        needed: u64,
        /// Bytes it has.
        available: u64,
    },
    /// A header field is invalid.
    BadHeader {
        /// Which field, and what is wrong with it.
        what: String,
    },
    /// The flatbuffer does not verify.
    Flatbuffer {
        /// Which flatbuffer (`program`, `BP08 bundle`, ...).
        what: &'static str,
        /// The flatbuffers verifier's message.
        detail: String,
    },
    /// A required field is absent.
    Missing {
        /// The absent field.
        what: &'static str,
    },
    /// An index is outside the table it indexes.
    IndexOutOfRange {
        /// What the index refers to (`operator`, `input value`, ...).
        what: &'static str,
        /// The index, as the file gives it (it may be negative).
        index: i64,
        /// Entries in the table; 0 when the reader rejects the index (a
        /// negative one, say) without it.
        len: usize,
    },
    /// A value is of another kind than its use requires.
    WrongValueKind {
        /// The kind (or kinds) the use requires.
        expected: &'static str,
        /// The value's kind, as [`Value::kind`](crate::ir::Value::kind) names it.
        found: &'static str,
    },
    /// An unknown scalar type code.
    UnknownScalarType {
        /// The code, as the file gives it.
        code: i8,
    },
    /// A negative size, or sizes whose element count or byte size overflow.
    BadSizes {
        /// The sizes, and what is wrong with them.
        detail: String,
    },
    /// `dim_order` is not a permutation of the tensor's dimensions.
    BadDimOrder {
        /// The tensor's dim order.
        dim_order: Vec<u8>,
        /// Its number of dimensions (the length of its sizes).
        rank: usize,
    },
    /// `storage_offset` is not 0.
    StorageOffset {
        /// The tensor's `storage_offset`.
        offset: i32,
    },
    /// A planned tensor does not fit in its buffer.
    OutsideBuffer {
        /// The buffer's memory id.
        buffer: usize,
        /// Byte offset of the tensor in the buffer.
        offset: u64,
        /// Size of the tensor's data in bytes.
        nbytes: u64,
        /// Size of the buffer in bytes.
        buffer_size: u64,
    },
    /// Data of a tensor or delegate lies outside the file or its segment.
    OutsideData {
        /// What the data is (`segment`, `constant`, `XNNPACK blob`, ...).
        what: &'static str,
        /// Byte offset of the data, in the file or in the segment or blob
        /// that holds it.
        offset: u64,
        /// Length of the data in bytes.
        len: u64,
        /// Size in bytes of the file, segment or blob that must hold it.
        limit: u64,
    },
    /// A tensor's offset is not aligned for its element type.
    Misaligned {
        /// The byte offset: in its planned buffer, or of its data in its file.
        offset: u64,
        /// The alignment required, in bytes (the element size).
        align: usize,
    },
    /// The tensor's data placement is contradictory or unsupported.
    BadPlacement {
        /// What is contradictory or unsupported.
        detail: String,
    },
    /// An external tensor's key is missing from the given `.ptd` files, or
    /// its layout there differs.
    External {
        /// The tensor's fully qualified name.
        key: String,
        /// What is wrong.
        detail: String,
    },
    /// Two methods share a name.
    DuplicateMethod,
    /// A bundle's test case does not fit its method.
    BadTestCase {
        /// What does not fit.
        detail: String,
    },
    /// A delegate's processed data is invalid (dangling ids, inconsistent
    /// shapes, arguments that do not match the call).
    BadDelegate {
        /// Id of the delegate's backend (`XnnpackBackend`).
        backend: &'static str,
        /// What is invalid.
        detail: String,
    },
    /// The program uses an operator ptec cannot compile.
    UnsupportedOperator {
        /// The operator's full name (`name.overload`).
        name: String,
    },
    /// The program uses a feature ptec cannot compile.
    Unsupported {
        /// The feature.
        detail: String,
    },
    /// An operator's arguments are invalid (count, kinds, dtypes, shapes).
    BadArguments {
        /// The operator's full name (`name.overload`).
        operator: String,
        /// What is invalid.
        detail: String,
    },
    /// An I/O failure reading or writing a file.
    Io {
        /// The file's path.
        path: String,
        /// The I/O error's message.
        detail: String,
    },
    /// An option a front end was given is unknown or has a bad value.
    BadOption {
        /// The option's name.
        name: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A bug in ptec (it panicked, or broke an invariant); please report it
    /// with the file.
    Internal {
        /// The panic's message, or the invariant broken.
        detail: String,
    },
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorKind::*;
        match self {
            Empty => f.write_str("the file is empty"),
            NotExecuTorch { looks_like: Some(k) } => write!(
                f,
                "not an ExecuTorch program, bundle or .ptd file: it looks like {k}"
            ),
            NotExecuTorch { looks_like: None } => f.write_str(
                "not an ExecuTorch program, bundle or .ptd file (no ET12/BP04/BP08/FT01 identifier at byte 4)",
            ),
            Truncated { what, needed, available } => {
                write!(f, "truncated: {what} needs {needed} bytes but only {available} are there")
            }
            BadHeader { what } => write!(f, "bad header: {what}"),
            Flatbuffer { what, detail } => write!(f, "malformed {what} flatbuffer: {detail}"),
            Missing { what } => write!(f, "missing {what}"),
            IndexOutOfRange { what, index, len } => {
                write!(f, "{what} index {index} is out of range (there are {len})")
            }
            WrongValueKind { expected, found } => write!(f, "expected a {expected} value, found a {found}"),
            UnknownScalarType { code } => write!(f, "unknown scalar type code {code}"),
            BadSizes { detail } => write!(f, "bad tensor sizes: {detail}"),
            BadDimOrder { dim_order, rank } => {
                write!(f, "dim_order {dim_order:?} is not a permutation of 0..{rank}")
            }
            StorageOffset { offset } => write!(f, "storage_offset is {offset}; only 0 is supported"),
            OutsideBuffer { buffer, offset, nbytes, buffer_size } => write!(
                f,
                "tensor of {nbytes} bytes at offset {offset} does not fit in planned buffer {buffer} of {buffer_size} bytes"
            ),
            OutsideData { what, offset, len, limit } => {
                write!(f, "{what} at offset {offset} with {len} bytes lies outside its {limit} bytes of data")
            }
            Misaligned { offset, align } => write!(f, "offset {offset} is not a multiple of {align}"),
            BadPlacement { detail } => write!(f, "bad tensor placement: {detail}"),
            External { key, detail } => write!(f, "external tensor `{key}`: {detail}"),
            DuplicateMethod => f.write_str("two methods have the same name"),
            BadTestCase { detail } => write!(f, "bad test case: {detail}"),
            BadDelegate { backend, detail } => write!(f, "invalid {backend} delegate: {detail}"),
            UnsupportedOperator { name } => write!(f, "unsupported operator `{name}`"),
            Unsupported { detail } => write!(f, "unsupported: {detail}"),
            BadArguments { operator, detail } => write!(f, "`{operator}`: {detail}"),
            Io { path, detail } => write!(f, "{path}: {detail}"),
            BadOption { name, detail } => write!(f, "option `{name}`: {detail}"),
            Internal { detail } => write!(f, "internal compiler error (a bug in ptec, please report it): {detail}"),
        }
    }
}

/// One problem and where it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    /// What is wrong.
    pub kind: ErrorKind,
    /// Where.
    pub at: Location,
}

impl Diagnostic {
    /// The problem `kind`, at `at`.
    pub fn new(kind: ErrorKind, at: Location) -> Self {
        Diagnostic { kind, at }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.at.is_empty() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}: {}", self.at, self.kind)
        }
    }
}

impl std::error::Error for Diagnostic {}

/// All the problems found, at least one.
#[derive(Clone, Debug, PartialEq)]
pub struct Errors(pub Vec<Diagnostic>);

impl Errors {
    /// A single problem.
    pub fn one(kind: ErrorKind, at: Location) -> Self {
        Errors(vec![Diagnostic::new(kind, at)])
    }

    /// The first problem found.
    pub fn first(&self) -> &Diagnostic {
        &self.0[0]
    }
}

impl From<Diagnostic> for Errors {
    fn from(d: Diagnostic) -> Self {
        Errors(vec![d])
    }
}

impl fmt::Display for Errors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Errors {}

/// A result whose error is every problem found.
pub type Result<T, E = Errors> = std::result::Result<T, E>;
