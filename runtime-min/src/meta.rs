//! Static descriptions of a program's methods and values.
use crate::Error;

/// Element type of a tensor, numbered as in ExecuTorch programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum ScalarType {
    Byte = 0,
    Char = 1,
    Short = 2,
    Int = 3,
    Long = 4,
    Half = 5,
    Float = 6,
    Double = 7,
    /// `complex32`: real and imaginary `f16` halves, the real part first.
    ComplexHalf = 8,
    /// `complex64`: two `f32`s.
    ComplexFloat = 9,
    /// `complex128`: two `f64`s.
    ComplexDouble = 10,
    Bool = 11,
    QInt8 = 12,
    QUInt8 = 13,
    QInt32 = 14,
    BFloat16 = 15,
    QUInt4x2 = 16,
    QUInt2x4 = 17,
    Bits16 = 22,
    Float8E5M2 = 23,
    Float8E4M3FN = 24,
    Float8E5M2FNUZ = 25,
    Float8E4M3FNUZ = 26,
    UInt16 = 27,
    UInt32 = 28,
    UInt64 = 29,
}

impl ScalarType {
    /// Every scalar type, in code order.
    pub const ALL: [ScalarType; 26] = [
        ScalarType::Byte,
        ScalarType::Char,
        ScalarType::Short,
        ScalarType::Int,
        ScalarType::Long,
        ScalarType::Half,
        ScalarType::Float,
        ScalarType::Double,
        ScalarType::ComplexHalf,
        ScalarType::ComplexFloat,
        ScalarType::ComplexDouble,
        ScalarType::Bool,
        ScalarType::QInt8,
        ScalarType::QUInt8,
        ScalarType::QInt32,
        ScalarType::BFloat16,
        ScalarType::QUInt4x2,
        ScalarType::QUInt2x4,
        ScalarType::Bits16,
        ScalarType::Float8E5M2,
        ScalarType::Float8E4M3FN,
        ScalarType::Float8E5M2FNUZ,
        ScalarType::Float8E4M3FNUZ,
        ScalarType::UInt16,
        ScalarType::UInt32,
        ScalarType::UInt64,
    ];

    /// The type with serialized code `code`, if there is one.
    pub const fn from_code(code: i8) -> Option<ScalarType> {
        let mut i = 0;
        while i < Self::ALL.len() {
            if Self::ALL[i] as i8 == code {
                return Some(Self::ALL[i]);
            }
            i += 1;
        }
        None
    }

    /// Bytes per element.
    pub const fn element_size(self) -> usize {
        use ScalarType::*;
        match self {
            Byte | Char | Bool | QInt8 | QUInt8 | QUInt4x2 | QUInt2x4 | Float8E5M2 | Float8E4M3FN | Float8E5M2FNUZ
            | Float8E4M3FNUZ => 1,
            Short | Half | BFloat16 | Bits16 | UInt16 => 2,
            Int | Float | QInt32 | UInt32 | ComplexHalf => 4,
            Long | Double | UInt64 | ComplexFloat => 8,
            ComplexDouble => 16,
        }
    }

    /// PyTorch's name for the type (`float32`, `int64`, ...).
    pub const fn name(self) -> &'static str {
        use ScalarType::*;
        match self {
            Byte => "uint8",
            Char => "int8",
            Short => "int16",
            Int => "int32",
            Long => "int64",
            Half => "float16",
            Float => "float32",
            Double => "float64",
            ComplexHalf => "complex32",
            ComplexFloat => "complex64",
            ComplexDouble => "complex128",
            Bool => "bool",
            QInt8 => "qint8",
            QUInt8 => "quint8",
            QInt32 => "qint32",
            BFloat16 => "bfloat16",
            QUInt4x2 => "quint4x2",
            QUInt2x4 => "quint2x4",
            Bits16 => "bits16",
            Float8E5M2 => "float8_e5m2",
            Float8E4M3FN => "float8_e4m3fn",
            Float8E5M2FNUZ => "float8_e5m2fnuz",
            Float8E4M3FNUZ => "float8_e4m3fnuz",
            UInt16 => "uint16",
            UInt32 => "uint32",
            UInt64 => "uint64",
        }
    }

    /// Floating-point types (including the half types).
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            ScalarType::Half | ScalarType::Float | ScalarType::Double | ScalarType::BFloat16
        )
    }

    /// Complex types.
    pub const fn is_complex(self) -> bool {
        matches!(
            self,
            ScalarType::ComplexHalf | ScalarType::ComplexFloat | ScalarType::ComplexDouble
        )
    }

    /// The type of a complex type's real and imaginary parts.
    pub const fn complex_part(self) -> Option<ScalarType> {
        match self {
            ScalarType::ComplexHalf => Some(ScalarType::Half),
            ScalarType::ComplexFloat => Some(ScalarType::Float),
            ScalarType::ComplexDouble => Some(ScalarType::Double),
            _ => None,
        }
    }

    /// Integer types, signed or not (not bool).
    pub const fn is_integer(self) -> bool {
        use ScalarType::*;
        matches!(self, Byte | Char | Short | Int | Long | UInt16 | UInt32 | UInt64)
    }
}

impl core::fmt::Display for ScalarType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Kind of an EValue, as ExecuTorch's `Tag`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tag {
    None,
    Int,
    Double,
    Bool,
    String,
    Tensor,
    ListInt,
    ListDouble,
    ListBool,
    ListTensor,
    ListOptionalTensor,
}

/// How a tensor's shape may change at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dynamism {
    /// The sizes are fixed.
    Static,
    /// The sizes are upper bounds; the live sizes are set by inputs and
    /// kernels.
    DynamicBound,
    /// No bound is known.
    DynamicUnbound,
}

/// Type, shape and layout of a tensor input or output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMeta {
    pub dtype: ScalarType,
    /// The sizes (upper bounds when dynamic).
    pub sizes: &'static [usize],
    pub dim_order: &'static [u8],
    pub dynamism: Dynamism,
}

impl TensorMeta {
    /// Element count at the (upper-bound) sizes.
    pub fn numel(&self) -> usize {
        self.sizes.iter().product()
    }

    /// Bytes at the (upper-bound) sizes.
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.element_size()
    }
}

/// An input or output of a method.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValueMeta {
    pub tag: Tag,
    /// Present when `tag` is [`Tag::Tensor`].
    pub tensor: Option<TensorMeta>,
}

/// Description of one method of a program, as ExecuTorch's `MethodMeta`.
#[derive(Clone, Copy, Debug)]
pub struct MethodMeta {
    pub name: &'static str,
    pub inputs: &'static [ValueMeta],
    pub outputs: &'static [ValueMeta],
    /// Sizes in bytes of the memory-planned buffers (ExecuTorch's buffer
    /// ids 1.., without the reserved entry 0).
    pub planned_buffers: &'static [usize],
    /// Number of instructions of the method.
    pub num_instructions: usize,
}

impl MethodMeta {
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    pub fn input_tag(&self, index: usize) -> Result<Tag, Error> {
        Ok(self.input(index)?.tag)
    }

    pub fn input_tensor_meta(&self, index: usize) -> Result<&'static TensorMeta, Error> {
        self.input(index)?.tensor.as_ref().ok_or(Error::NotATensor { index })
    }

    pub fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    pub fn output_tag(&self, index: usize) -> Result<Tag, Error> {
        Ok(self.output(index)?.tag)
    }

    pub fn output_tensor_meta(&self, index: usize) -> Result<&'static TensorMeta, Error> {
        self.output(index)?.tensor.as_ref().ok_or(Error::NotATensor { index })
    }

    pub fn num_memory_planned_buffers(&self) -> usize {
        self.planned_buffers.len()
    }

    pub fn memory_planned_buffer_size(&self, index: usize) -> Result<usize, Error> {
        self.planned_buffers.get(index).copied().ok_or(Error::IndexOutOfRange {
            what: "planned buffer",
            index,
            len: self.planned_buffers.len(),
        })
    }

    fn input(&self, index: usize) -> Result<&'static ValueMeta, Error> {
        self.inputs.get(index).ok_or(Error::IndexOutOfRange {
            what: "input",
            index,
            len: self.inputs.len(),
        })
    }

    fn output(&self, index: usize) -> Result<&'static ValueMeta, Error> {
        self.outputs.get(index).ok_or(Error::IndexOutOfRange {
            what: "output",
            index,
            len: self.outputs.len(),
        })
    }
}
