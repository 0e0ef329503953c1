//! The one error type of generated programs.
use crate::meta::{ScalarType, Tag};
use ptec_kernels::KernelError;

/// Everything that can go wrong when driving a generated program. Generated
/// code never panics: each failure comes back as one of these.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// An index (input, output, method, buffer) was out of range.
    IndexOutOfRange {
        what: &'static str,
        index: usize,
        len: usize,
    },
    /// The value given for an input, or asked of an output, is not a tensor.
    NotATensor { index: usize },
    /// A value of the wrong kind was given for an input.
    WrongTag { index: usize, expected: Tag, got: Tag },
    /// A tensor of the wrong element type was given for an input.
    WrongDtype {
        index: usize,
        expected: ScalarType,
        got: ScalarType,
    },
    /// A tensor's sizes do not match the input (or exceed its bound).
    WrongSizes { index: usize },
    /// A tensor's dim order does not match the input's.
    WrongDimOrder { index: usize },
    /// A tensor's data has the wrong length for its sizes and dtype.
    WrongDataLength { index: usize, expected: usize, got: usize },
    /// A bool tensor held a byte other than 0 or 1.
    InvalidBool { index: usize },
    /// A tensor's bytes are not aligned for its element type.
    Misaligned,
    /// A kernel failed on its data (an index out of range, ...).
    Kernel { instruction: usize, error: KernelError },
    /// A shape computed at run time exceeds the planned upper bound.
    ShapeExceedsBound { instruction: usize, value: usize },
    /// A condition of a jump was not a bool scalar or tensor.
    BadCondition { instruction: usize },
    /// No method of that name.
    NoSuchMethod,
    /// No backend was provided for a delegate id.
    MissingBackend { id: &'static str },
    /// A delegate backend failed to initialise its delegate.
    BackendInit { id: &'static str, message: &'static str },
    /// A delegate backend failed.
    Backend { instruction: usize, message: &'static str },
    /// A file given at run time is not the one the program was compiled
    /// against.
    FileMismatch {
        file: &'static str,
        expected_size: usize,
        size: usize,
    },
    /// Data loaded at run time does not match what the code was generated
    /// for.
    DataMismatch { what: &'static str },
    /// Reading data at run time failed.
    Load { what: &'static str },
    /// The heap could not hold the program: `bytes` (its planned memory
    /// and state) could not be allocated.
    OutOfMemory { bytes: usize },
    /// [`Model::execute_traced`](crate::Model::execute_traced) on a program
    /// compiled without `trace = true`.
    NotTraced,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::IndexOutOfRange { what, index, len } => {
                write!(f, "{what} index {index} is out of range (there are {len})")
            }
            Error::NotATensor { index } => write!(f, "value {index} is not a tensor"),
            Error::WrongTag { index, expected, got } => {
                write!(f, "input {index}: expected a {expected:?}, got a {got:?}")
            }
            Error::WrongDtype { index, expected, got } => {
                write!(f, "input {index}: expected dtype {expected}, got {got}")
            }
            Error::WrongSizes { index } => {
                write!(f, "input {index}: sizes do not match the method's input")
            }
            Error::WrongDimOrder { index } => write!(f, "input {index}: dim order does not match"),
            Error::WrongDataLength { index, expected, got } => {
                write!(f, "input {index}: expected {expected} bytes of data, got {got}")
            }
            Error::InvalidBool { index } => write!(f, "input {index}: bool tensor holds a byte other than 0 or 1"),
            Error::Misaligned => f.write_str("tensor data is not aligned for its element type"),
            Error::Kernel { instruction, error } => write!(f, "instruction {instruction}: {error}"),
            Error::ShapeExceedsBound { instruction, value } => write!(
                f,
                "instruction {instruction}: the shape of value {value} exceeds its planned upper bound"
            ),
            Error::BadCondition { instruction } => {
                write!(f, "instruction {instruction}: jump condition is not a bool")
            }
            Error::NoSuchMethod => f.write_str("no method of that name"),
            Error::MissingBackend { id } => write!(f, "no backend was provided for delegate id `{id}`"),
            Error::BackendInit { id, message } => {
                write!(f, "backend `{id}` failed to initialise a delegate: {message}")
            }
            Error::FileMismatch {
                file,
                expected_size,
                size,
            } => {
                if size == expected_size {
                    write!(f, "the data given for `{file}` differs from the file this program was compiled against (same size, different contents); regenerate the code or pass that file")
                } else {
                    write!(f, "the data given for `{file}` is {size} bytes, but the file this program was compiled against is {expected_size} bytes; regenerate the code or pass that file")
                }
            }
            Error::Backend { instruction, message } => {
                write!(f, "instruction {instruction}: delegate failed: {message}")
            }
            Error::DataMismatch { what } => write!(f, "data does not match the compiled program: {what}"),
            Error::Load { what } => write!(f, "loading data failed: {what}"),
            Error::OutOfMemory { bytes } => write!(f, "allocating the program's {bytes} bytes failed"),
            Error::NotTraced => {
                f.write_str("this program was compiled without tracing; compile it with `trace = true`")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}
