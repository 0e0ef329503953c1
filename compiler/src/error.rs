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
    pub method: Option<String>,
    pub instruction: Option<usize>,
    pub value: Option<usize>,
    /// A place inside a structure nested in the instruction, such as a node
    /// or value of a delegate's subgraph (`XNNPACK node 4 (XNNConv2d)`).
    pub within: Option<String>,
    /// Byte offset in the file, where one is known.
    pub offset: Option<usize>,
}

impl Location {
    pub fn method(name: &str) -> Self {
        Location {
            method: Some(name.to_string()),
            ..Default::default()
        }
    }

    pub fn at_offset(offset: usize) -> Self {
        Location {
            offset: Some(offset),
            ..Default::default()
        }
    }

    pub fn instruction(mut self, i: usize) -> Self {
        self.instruction = Some(i);
        self
    }

    pub fn value(mut self, v: usize) -> Self {
        self.value = Some(v);
        self
    }

    pub fn offset(mut self, o: usize) -> Self {
        self.offset = Some(o);
        self
    }

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
    /// The file is not one ptec reads; `looks_like` names what it seems to
    /// be when its magic is recognisable.
    NotExecuTorch { looks_like: Option<&'static str> },
    /// The file ends before a structure it declares.
    Truncated {
        what: &'static str,
        needed: u64,
        available: u64,
    },
    /// A header field is invalid.
    BadHeader { what: String },
    /// The flatbuffer does not verify.
    Flatbuffer { what: &'static str, detail: String },
    /// A required field is absent.
    Missing { what: &'static str },
    /// An index is outside the table it indexes.
    IndexOutOfRange { what: &'static str, index: i64, len: usize },
    /// A value is of another kind than its use requires.
    WrongValueKind {
        expected: &'static str,
        found: &'static str,
    },
    /// An unknown scalar type code.
    UnknownScalarType { code: i8 },
    /// A negative size, or sizes whose element count or byte size overflow.
    BadSizes { detail: String },
    /// `dim_order` is not a permutation of the tensor's dimensions.
    BadDimOrder { dim_order: Vec<u8>, rank: usize },
    /// `storage_offset` is not 0.
    StorageOffset { offset: i32 },
    /// A planned tensor does not fit in its buffer.
    OutsideBuffer {
        buffer: usize,
        offset: u64,
        nbytes: u64,
        buffer_size: u64,
    },
    /// Data of a tensor or delegate lies outside the file or its segment.
    OutsideData {
        what: &'static str,
        offset: u64,
        len: u64,
        limit: u64,
    },
    /// A planned tensor's offset is not aligned for its element type.
    Misaligned { offset: u64, align: usize },
    /// The tensor's data placement is contradictory or unsupported.
    BadPlacement { detail: String },
    /// An external tensor's key is missing from the given `.ptd` files, or
    /// its layout there differs.
    External { key: String, detail: String },
    /// Two methods share a name.
    DuplicateMethod,
    /// A bundle's test case does not fit its method.
    BadTestCase { detail: String },
    /// A delegate's processed data is invalid (dangling ids, inconsistent
    /// shapes, arguments that do not match the call).
    BadDelegate { backend: &'static str, detail: String },
    /// The program uses an operator ptec cannot compile.
    UnsupportedOperator { name: String },
    /// The program uses a feature ptec cannot compile.
    Unsupported { detail: String },
    /// An operator's arguments are invalid (count, kinds, dtypes, shapes).
    BadArguments { operator: String, detail: String },
    /// An I/O failure reading or writing a file.
    Io { path: String, detail: String },
    /// A bug in ptec (it panicked); please report it with the file.
    Internal { detail: String },
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
            Internal { detail } => write!(f, "internal compiler error (a bug in ptec, please report it): {detail}"),
        }
    }
}

/// One problem and where it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub kind: ErrorKind,
    pub at: Location,
}

impl Diagnostic {
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
    pub fn one(kind: ErrorKind, at: Location) -> Self {
        Errors(vec![Diagnostic::new(kind, at)])
    }

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

pub type Result<T, E = Errors> = std::result::Result<T, E>;
