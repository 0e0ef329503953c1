//! Reading and verifying an XNNPACK delegate's processed blob.
//!
//! The blob is an `XH00` header, a flatbuffer (`fbs/xnnpack.fbs`) holding
//! the subgraph, and a region of constant data. Everything the lowering
//! relies on is checked here, once: the header's ranges lie in the blob,
//! the flatbuffer verifies, every value id a node names exists, constants
//! lie inside their data, sizes do not overflow, values are written before
//! they are read and only once, and external values bind the delegate
//! call's arguments one to one. The result is a [`Graph`] whose ids are
//! indices that are known to be valid.
//!
//! [`Graphs::read`] reads the blob of every XNNPACK delegate call of a
//! program when the program is read, keeping each result, good or bad,
//! for the lowering: a program whose delegates stay calls through the
//! runtime never needs its blobs, so a bad one is an error only there.
use crate::error::{Diagnostic, ErrorKind, Errors, Location, Result};
use crate::ir::*;
use crate::read::program::verifier_options;
use ptec_schema::xnnpack as fb;
use std::collections::{BTreeMap, HashMap};

/// The subgraph of each XNNPACK delegate call of a program, by method and
/// instruction, or why its blob could not be read. Each call is read
/// against its own arguments and reports at its own instruction, so a
/// delegate called twice is read twice.
#[derive(Clone, Debug, Default)]
pub struct Graphs {
    calls: BTreeMap<(usize, usize), Result<Graph>>,
}

impl Graphs {
    /// Reads the blobs of `program`'s XNNPACK delegate calls, which are
    /// byte ranges of `file`, the program's file.
    pub fn read(program: &Program, file: &[u8]) -> Graphs {
        let named = NamedSources {
            named_data: &program.named_data,
            external_files: &program.external_files,
        };
        let mut calls = BTreeMap::new();
        for (k, m) in program.methods.iter().enumerate() {
            for (n, ins) in m.instructions.iter().enumerate() {
                let Instruction::Delegate { delegate, args } = ins else {
                    continue;
                };
                let Some(d) = m
                    .delegates
                    .get(*delegate)
                    .filter(|d| d.id == crate::names::XNNPACK_BACKEND_ID)
                else {
                    continue;
                };
                let at = Location::method(&m.name).instruction(n);
                calls.insert((k, n), read_graph(file, d.processed, &named, args.len(), &at));
            }
        }
        Graphs { calls }
    }

    /// The subgraph of the call at instruction `instruction` of method
    /// `method`, taken out: `None` if no such call was read.
    pub fn take(&mut self, method: usize, instruction: usize) -> Option<Result<Graph>> {
        self.calls.remove(&(method, instruction))
    }
}

/// The id that stands for "no value" (an absent bias).
pub const NO_VALUE: u32 = u32::MAX;
const FLAG_EXTERNAL_INPUT: u32 = 1;
const FLAG_EXTERNAL_OUTPUT: u32 = 2;
/// `XNN_FLAG_TRANSPOSE_WEIGHTS` (fully connected) and `XNN_FLAG_TRANSPOSE_B`
/// (batch matrix multiply).
const FLAG_TRANSPOSE_WEIGHTS: u32 = 1;
/// XNNPACK's `XNN_FLAG_ALIGN_CORNERS` (of resizing; its other flag there,
/// TensorFlow 1.x's legacy mode, is refused).
const FLAG_ALIGN_CORNERS: u32 = 8;
/// `XNN_FLAG_KEEP_DIMS` (pooling): the output keeps its spatial dims, which
/// the output value's dims already say.
const FLAG_KEEP_DIMS: u32 = 0x40;
/// XNNPACK's `XNN_MAX_TENSOR_DIMS`.
const MAX_DIMS: usize = 6;
/// Length of the `XH00` header ExecuTorch writes.
const HEADER_LEN: usize = 30;

/// A verified subgraph.
#[derive(Clone, Debug)]
pub struct Graph {
    pub values: Vec<XValue>,
    pub nodes: Vec<XNode>,
}

/// One tensor of the subgraph: `fp32`, or statically quantized (other
/// datatypes are rejected when read).
#[derive(Clone, Debug)]
pub struct XValue {
    /// The id nodes refer to it by.
    pub id: u32,
    /// Sizes in XNNPACK's order (NHWC for images).
    pub dims: Vec<usize>,
    pub kind: ValueKind,
    /// `None` for `fp32`.
    pub quant: Option<Quantized>,
    /// Absolute byte offset of its table in the file, for error locations.
    pub offset: usize,
}

impl XValue {
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

/// The elements of a statically quantized value: `real = scale · (q -
/// zero_point)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Quantized {
    pub elem: QElem,
    pub params: QParams,
}

/// The integer type of a quantized value's elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QElem {
    /// `qint8` and `qcint8`.
    I8,
    /// `quint8`.
    U8,
    /// `qint32` and `qcint32` (biases).
    I32,
    /// `qcint4` and `qbint4`: `w + 8` two to a byte, even indices of the
    /// last dim in the low nibble.
    I4,
}

impl QElem {
    /// Bytes of `numel` elements.
    pub fn bytes_of(self, numel: usize) -> Option<usize> {
        match self {
            QElem::I8 | QElem::U8 => Some(numel),
            QElem::I32 => numel.checked_mul(4),
            QElem::I4 => Some(numel.div_ceil(2)),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum QParams {
    PerTensor {
        scale: f32,
        zero_point: i32,
    },
    /// One scale (`count` `f32`s at `scales`) per index of dim
    /// `channel_dim`; zero points are 0 (8 for 4-bit elements).
    PerChannel {
        scales: DataRef,
        count: usize,
        channel_dim: usize,
    },
    /// One bf16 scale (`count` of them at `scales`, `[n, k / group]`) per
    /// block of `group` elements of the last dim of each index of dim 0;
    /// zero points are 8.
    Blockwise {
        scales: DataRef,
        count: usize,
        group: usize,
    },
    /// `qdint8`: quantized when the subgraph runs, one scale and zero
    /// point per row of the last `num_nonbatch_dims` dims.
    Dynamic {
        num_nonbatch_dims: usize,
    },
}

/// Where a value's data comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueKind {
    /// Written by a node and read by later ones, inside the call.
    Internal,
    /// Constant data (exactly `numel · 4` bytes).
    Constant(DataRef),
    /// Argument `arg` of the delegate call, read.
    Input { arg: usize },
    /// Argument `arg` of the delegate call, written.
    Output { arg: usize },
}

/// One node: its operation over value indices (into [`Graph::values`]).
#[derive(Clone, Debug)]
pub struct XNode {
    /// The node kind's name in the schema (`XNNConv2d`).
    pub kind: &'static str,
    pub op: Op,
    /// The fused output clamp (`-inf, inf` when absent or when XNNPACK
    /// ignores it for this kind).
    pub min: f32,
    pub max: f32,
    /// Absolute byte offset of the node's table in the file.
    pub offset: usize,
    /// The node's debug handle: its operator's in the exported graph, which
    /// ExecuTorch's devtools know it by.
    pub debug_handle: u32,
}

/// Element-wise operations of two inputs (broadcast as in NumPy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Subtract,
    Multiply,
    Divide,
    Minimum,
    Maximum,
    /// `a` where it is not negative, else `a` times `b` (the slope, one per
    /// channel of the last dimension).
    PReLU,
}

/// Operations of one input with an output of the same shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    Clamp,
    /// Over the last dimension.
    Softmax,
    Sigmoid,
    Floor,
    Ceiling,
    SquareRoot,
    ReciprocalSquareRoot,
    Hardswish,
    Negate,
    Square,
    Abs,
    Log,
    Exp,
    Tanh,
    Sin,
    Cos,
    Gelu,
    Copy,
    /// Between `fp32` and a quantized datatype (or between two
    /// quantizations).
    Convert,
    LeakyRelu {
        negative_slope: f32,
    },
    Elu {
        alpha: f32,
    },
}

/// A node's operation. Fields named like values are indices into
/// [`Graph::values`].
#[derive(Clone, Debug)]
pub enum Op {
    Binary {
        op: BinaryOp,
        a: usize,
        b: usize,
        out: usize,
    },
    Unary {
        op: UnaryOp,
        input: usize,
        out: usize,
    },
    /// `out[.., n] = input[.., k] · filterᵀ + bias`; the filter is `[n, k]`
    /// (`[k, n]` when `weight_transposed`).
    FullyConnected {
        input: usize,
        filter: usize,
        bias: Option<usize>,
        out: usize,
        weight_transposed: bool,
    },
    /// Regular (or `depthwise`) 2-d convolution over NHWC images.
    Conv2d {
        depthwise: bool,
        conv: ConvParams,
    },
    /// Transposed 2-d convolution over NHWC images; the filter is
    /// `[groups · group_output_channels, kH, kW, group_input_channels]`.
    /// `conv.padding` is the output cropped at each side, `conv.stride`
    /// the upsampling of the input.
    Deconv2d {
        conv: ConvParams,
        /// `[height, width]` added at the bottom and right.
        adjustment: [usize; 2],
    },
    /// Max or average pooling over NHWC images.
    Pool2d {
        max: bool,
        input: usize,
        out: usize,
        padding: [usize; 4],
        kernel: [usize; 2],
        stride: [usize; 2],
        dilation: [usize; 2],
    },
    /// Mean over the spatial dims of NHWC images.
    GlobalAvgPool {
        input: usize,
        out: usize,
    },
    /// `out` dim `i` is `input` dim `perm[i]`.
    Transpose {
        perm: Vec<usize>,
        input: usize,
        out: usize,
    },
    /// Bilinear resizing of an NHWC image to `height × width`, with
    /// PyTorch's half-pixel centers or, when `align_corners`, its corner
    /// pixels aligned.
    ResizeBilinear {
        height: usize,
        width: usize,
        align_corners: bool,
        input: usize,
        out: usize,
    },
    /// Same elements, new shape (a 0 in `new_shape` is inferred).
    Reshape {
        new_shape: Vec<usize>,
        input: usize,
        out: usize,
    },
    /// The box `offsets .. offsets + sizes` of `input`.
    Slice {
        offsets: Vec<usize>,
        sizes: Vec<usize>,
        input: usize,
        out: usize,
    },
    /// `input` padded with `value`, `pre[i]` before and `post[i]` after dim `i`.
    Pad {
        pre: Vec<usize>,
        post: Vec<usize>,
        value: f32,
        input: usize,
        out: usize,
    },
    /// Concatenation along `axis`.
    Concat {
        axis: usize,
        inputs: Vec<usize>,
        out: usize,
    },
    /// `out[.., m, n] = a[.., m, k] · b[.., k, n]` (`b[.., n, k]` when
    /// `transpose_b`), batch dims broadcast.
    BatchMatMul {
        a: usize,
        b: usize,
        out: usize,
        transpose_b: bool,
    },
}

/// The values and geometry of a (transposed) convolution node.
#[derive(Clone, Debug)]
pub struct ConvParams {
    pub input: usize,
    pub filter: usize,
    pub bias: Option<usize>,
    pub out: usize,
    /// `[top, right, bottom, left]`.
    pub padding: [usize; 4],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
    pub group_input_channels: usize,
    pub group_output_channels: usize,
}

/// `body` with `out` bound to the output field of whichever operation
/// `op` is.
macro_rules! with_output {
    ($op:expr, $out:ident => $body:expr) => {
        match $op {
            Op::Binary { out: $out, .. }
            | Op::Unary { out: $out, .. }
            | Op::FullyConnected { out: $out, .. }
            | Op::Conv2d {
                conv: ConvParams { out: $out, .. },
                ..
            }
            | Op::Deconv2d {
                conv: ConvParams { out: $out, .. },
                ..
            }
            | Op::Pool2d { out: $out, .. }
            | Op::GlobalAvgPool { out: $out, .. }
            | Op::Transpose { out: $out, .. }
            | Op::ResizeBilinear { out: $out, .. }
            | Op::Reshape { out: $out, .. }
            | Op::Slice { out: $out, .. }
            | Op::Pad { out: $out, .. }
            | Op::Concat { out: $out, .. }
            | Op::BatchMatMul { out: $out, .. } => $body,
        }
    };
}

impl Op {
    /// Values the operation reads.
    pub fn inputs(&self) -> Vec<usize> {
        match self {
            Op::Binary { a, b, .. } | Op::BatchMatMul { a, b, .. } => vec![*a, *b],
            Op::Unary { input, .. }
            | Op::Pool2d { input, .. }
            | Op::GlobalAvgPool { input, .. }
            | Op::Transpose { input, .. }
            | Op::ResizeBilinear { input, .. }
            | Op::Reshape { input, .. }
            | Op::Slice { input, .. }
            | Op::Pad { input, .. } => vec![*input],
            Op::FullyConnected {
                input, filter, bias, ..
            }
            | Op::Conv2d {
                conv: ConvParams {
                    input, filter, bias, ..
                },
                ..
            }
            | Op::Deconv2d {
                conv: ConvParams {
                    input, filter, bias, ..
                },
                ..
            } => [Some(*input), Some(*filter), *bias].into_iter().flatten().collect(),
            Op::Concat { inputs, .. } => inputs.clone(),
        }
    }

    /// Makes the operation write `x`.
    pub fn set_output(&mut self, x: usize) {
        with_output!(self, out => *out = x)
    }

    /// The value the operation writes.
    pub fn output(&self) -> usize {
        with_output!(self, out => *out)
    }
}

/// An error of the blob, located at `at` (the delegate call), a place in
/// the subgraph and a byte offset of the file.
fn bad(at: &Location, within: Option<String>, offset: usize, kind: ErrorKind) -> Errors {
    let mut loc = at.clone().offset(offset);
    loc.within = within;
    Errors::from(Diagnostic::new(kind, loc))
}

fn invalid(detail: impl Into<String>) -> ErrorKind {
    ErrorKind::BadDelegate {
        backend: crate::names::XNNPACK_BACKEND_ID,
        detail: detail.into(),
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Byte ranges, within the blob, of the flatbuffer and the constant data.
struct Layout {
    flatbuffer: (usize, usize),
    constants: (usize, usize),
}

/// Parses the `XH00` header (a blob without one is all flatbuffer, as old
/// writers made it). Errors carry the offset within the blob.
fn layout(b: &[u8]) -> Result<Layout, (ErrorKind, usize)> {
    if b.len() < 8 || &b[4..8] != b"XH00" {
        return Ok(Layout {
            flatbuffer: (0, b.len()),
            constants: (b.len(), 0),
        });
    }
    if b.len() < HEADER_LEN {
        return Err((
            ErrorKind::Truncated {
                what: "XNNPACK blob header",
                needed: HEADER_LEN as u64,
                available: b.len() as u64,
            },
            0,
        ));
    }
    let header_len = u16::from_le_bytes([b[8], b[9]]) as usize;
    if header_len < HEADER_LEN {
        return Err((
            ErrorKind::BadHeader {
                what: format!("XNNPACK blob header length {header_len} is below {HEADER_LEN}"),
            },
            8,
        ));
    }
    let fb_offset = u32_at(b, 10) as u64;
    let fb_size = u32_at(b, 14) as u64;
    let const_offset = u32_at(b, 18) as u64;
    let const_size = u64::from_le_bytes(b[22..30].try_into().expect("8 bytes"));
    let len = b.len() as u64;
    if fb_size < 8 || fb_offset + fb_size > len || fb_offset < header_len as u64 {
        return Err((
            ErrorKind::OutsideData {
                what: "XNNPACK flatbuffer",
                offset: fb_offset,
                len: fb_size,
                limit: len,
            },
            10,
        ));
    }
    let const_end = const_offset.checked_add(const_size);
    if const_end.is_none_or(|e| e > len) || const_offset < fb_offset + fb_size {
        return Err((
            ErrorKind::OutsideData {
                what: "XNNPACK constant data",
                offset: const_offset,
                len: const_size,
                limit: len,
            },
            18,
        ));
    }
    Ok(Layout {
        flatbuffer: (fb_offset as usize, fb_size as usize),
        constants: (const_offset as usize, const_size as usize),
    })
}

/// Reads and verifies the subgraph of a delegate whose blob is `blob` (in
/// `file`), called at `at` with `args` arguments.
fn read_graph(file: &[u8], blob: DataRef, named: &NamedSources<'_>, args: usize, at: &Location) -> Result<Graph> {
    let bytes = match (blob.source, file.get(blob.offset..blob.offset.saturating_add(blob.len))) {
        (DataSource::Program, Some(b)) => b,
        _ => {
            return Err(bad(
                at,
                None,
                blob.offset,
                ErrorKind::OutsideData {
                    what: "XNNPACK blob",
                    offset: blob.offset as u64,
                    len: blob.len as u64,
                    limit: file.len() as u64,
                },
            ))
        }
    };
    let base = blob.offset;
    let lay = layout(bytes).map_err(|(kind, off)| bad(at, None, base + off, kind))?;
    let (fb_off, fb_len) = lay.flatbuffer;
    let fb_bytes = &bytes[fb_off..fb_off + fb_len];
    let ident = fb_bytes.get(4..8).unwrap_or(&[]);
    if ident != b"XN01" && ident != b"XN00" {
        return Err(bad(
            at,
            None,
            base + fb_off + 4,
            ErrorKind::BadHeader {
                what: format!(
                    "XNNPACK flatbuffer identifier is {:?}, not XN01 or XN00",
                    String::from_utf8_lossy(ident)
                ),
            },
        ));
    }
    let graph = fb::root_as_xnngraph_with_opts(&verifier_options(), fb_bytes).map_err(|e| {
        bad(
            at,
            None,
            base + fb_off,
            ErrorKind::Flatbuffer {
                what: "XNNPACK subgraph",
                detail: e.to_string(),
            },
        )
    })?;
    let r = GraphReader {
        file,
        at,
        fb_base: base + fb_off,
        constants: DataRef {
            source: DataSource::Program,
            offset: base + lay.constants.0,
            len: lay.constants.1,
        },
        named,
        args,
    };
    r.read(graph)
}

struct GraphReader<'a> {
    file: &'a [u8],
    at: &'a Location,
    /// Absolute offset of the flatbuffer.
    fb_base: usize,
    /// The blob's constant region.
    constants: DataRef,
    named: &'a NamedSources<'a>,
    args: usize,
}

/// Where named constants can be: the program's named data and the tensors
/// of the `.ptd` files given to the compiler.
struct NamedSources<'a> {
    named_data: &'a [NamedData],
    external_files: &'a [ExternalFile],
}

impl GraphReader<'_> {
    fn read(&self, g: fb::XNNGraph<'_>) -> Result<Graph> {
        let num_externs = g.num_externs() as usize;
        let mut values = Vec::new();
        let mut index: HashMap<u32, usize> = HashMap::new();
        let mut bound: Vec<Option<usize>> = vec![None; self.args];
        for (i, v) in g.xvalues().iter().flatten().enumerate() {
            let offset = self.fb_base + v._tab.loc();
            let value = self.value(&g, v, i, offset, num_externs)?;
            let place = || Some(format!("XNNPACK value id {}", value.id));
            if index.insert(value.id, values.len()).is_some() {
                return Err(bad(self.at, place(), offset, invalid("two values have this id")));
            }
            if let ValueKind::Input { arg } | ValueKind::Output { arg } = value.kind {
                if let Some(other) = bound[arg].replace(value.id as usize) {
                    return Err(bad(
                        self.at,
                        place(),
                        offset,
                        invalid(format!(
                            "delegate argument {arg} is bound to value ids {other} and {}",
                            value.id
                        )),
                    ));
                }
            }
            values.push(value);
        }
        if let Some(arg) = bound.iter().position(Option::is_none) {
            return Err(bad(
                self.at,
                None,
                self.fb_base,
                invalid(format!(
                    "delegate argument {arg} of {} is bound to no value of the subgraph",
                    self.args
                )),
            ));
        }
        for ids in [g.input_ids(), g.output_ids()].into_iter().flatten() {
            if let Some(id) = ids.iter().find(|id| !index.contains_key(id)) {
                return Err(bad(
                    self.at,
                    None,
                    self.fb_base,
                    invalid(format!("input_ids/output_ids name value id {id}, which is not defined")),
                ));
            }
        }
        let mut nodes = Vec::new();
        for (i, n) in g.xnodes().iter().flatten().enumerate() {
            nodes.push(self.node(n, i, &index)?);
        }
        let graph = Graph { values, nodes };
        check_dataflow(&graph, self.at)?;
        Ok(graph)
    }

    fn value(
        &self,
        g: &fb::XNNGraph<'_>,
        v: fb::Value<'_>,
        i: usize,
        offset: usize,
        num_externs: usize,
    ) -> Result<XValue> {
        let place = Some(format!("XNNPACK value {i}"));
        let err = |kind| bad(self.at, place.clone(), offset, kind);
        let (tv, quantized) = match v.value_type() {
            fb::ValueUnion::TensorValue => (v.value_as_tensor_value(), false),
            fb::ValueUnion::QuantizedTensorValue => {
                (v.value_as_quantized_tensor_value().and_then(|q| q.tensor_value()), true)
            }
            other => {
                return Err(err(invalid(format!("value of unknown kind {}", other.0))));
            }
        };
        let tv = tv.ok_or_else(|| {
            err(ErrorKind::Missing {
                what: "XNNPACK tensor value",
            })
        })?;
        let id = tv.id_out();
        let place = Some(format!("XNNPACK value id {id}"));
        let err = |kind| bad(self.at, place.clone(), offset, kind);
        let dtype = tv.datatype();
        let elem = match (quantized, dtype) {
            (false, fb::Datatype::fp32) => None,
            (true, fb::Datatype::qint8 | fb::Datatype::qcint8) => Some(QElem::I8),
            (true, fb::Datatype::quint8) => Some(QElem::U8),
            (true, fb::Datatype::qint32 | fb::Datatype::qcint32) => Some(QElem::I32),
            (true, fb::Datatype::qdint8) => Some(QElem::I8),
            (true, fb::Datatype::qcint4 | fb::Datatype::qbint4) => Some(QElem::I4),
            _ => {
                let name = dtype.variant_name().unwrap_or("unknown");
                return Err(err(ErrorKind::Unsupported {
                    detail: format!(
                        "XNNPACK {}value of datatype {name}; ptec compiles fp32 subgraphs and quantized ones of qint8, quint8, qcint8, qint32, qcint32, qdint8, qcint4 and qbint4",
                        if quantized { "quantized " } else { "" }
                    ),
                }));
            }
        };
        let dims: Vec<usize> = tv
            .dims()
            .map(|d| d.iter().map(|x| x as usize).collect())
            .unwrap_or_default();
        if dims.len() > MAX_DIMS {
            return Err(err(ErrorKind::BadSizes {
                detail: format!("{} dims; XNNPACK allows at most {MAX_DIMS}", dims.len()),
            }));
        }
        let nbytes = dims
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .and_then(|numel| elem.map_or(numel.checked_mul(4), |e| e.bytes_of(numel)))
            .filter(|&n| n <= isize::MAX as usize / 2);
        let Some(nbytes) = nbytes else {
            return Err(err(ErrorKind::BadSizes {
                detail: format!("dims {dims:?} overflow"),
            }));
        };
        let flags = tv.flags();
        if flags & !(FLAG_EXTERNAL_INPUT | FLAG_EXTERNAL_OUTPUT) != 0 {
            return Err(err(invalid(format!("unknown value flags {flags:#x}"))));
        }
        let external = |arg: u32| -> Result<usize> {
            let arg = arg as usize;
            if arg >= self.args || arg >= num_externs {
                return Err(err(ErrorKind::IndexOutOfRange {
                    what: "delegate argument (XNNPACK external id)",
                    index: arg as i64,
                    len: self.args.min(num_externs),
                }));
            }
            Ok(arg)
        };
        let cidx = tv.constant_buffer_idx() as usize;
        let kind = match (flags, cidx) {
            (0, 0) => ValueKind::Internal,
            (0, _) => ValueKind::Constant(self.constant(g, cidx, nbytes).map_err(err)?),
            (_, c) if c > 0 => return Err(err(invalid("a constant value is also an input or output"))),
            (FLAG_EXTERNAL_INPUT, _) => ValueKind::Input {
                arg: external(tv.external_id())?,
            },
            (FLAG_EXTERNAL_OUTPUT, _) => ValueKind::Output {
                arg: external(tv.external_id())?,
            },
            _ => {
                return Err(err(ErrorKind::Unsupported {
                    detail: "an XNNPACK value that is both an input and an output".into(),
                }))
            }
        };
        let quant = match elem {
            None => None,
            Some(elem) => {
                let q = v.value_as_quantized_tensor_value().expect("read above");
                let params = self.quant_params(g, q, &dims).map_err(err)?;
                use fb::Datatype as D;
                let fits = match (dtype, &params) {
                    (D::qdint8, QParams::Dynamic { .. }) | (D::qbint4, QParams::Blockwise { .. }) => true,
                    (D::qcint8 | D::qcint32, QParams::PerChannel { .. }) => true,
                    (D::qcint4, QParams::PerChannel { channel_dim: 0, .. }) => {
                        dims.len() == 2 && dims[1].is_multiple_of(2)
                    }
                    (D::qint8 | D::quint8 | D::qint32, QParams::PerTensor { .. }) => true,
                    _ => false,
                };
                if !fits {
                    let name = dtype.variant_name().unwrap_or("unknown");
                    return Err(err(invalid(format!(
                        "datatype {name} of dims {dims:?} with {} quantization",
                        q.quant_params_type().variant_name().unwrap_or("unknown")
                    ))));
                }
                Some(Quantized { elem, params })
            }
        };
        Ok(XValue {
            id,
            dims,
            kind,
            quant,
            offset,
        })
    }

    /// The scales and zero point of a quantized value of `dims`.
    fn quant_params(
        &self,
        g: &fb::XNNGraph<'_>,
        q: fb::QuantizedTensorValue<'_>,
        dims: &[usize],
    ) -> Result<QParams, ErrorKind> {
        use fb::QuantParams as P;
        match q.quant_params_type() {
            P::PerTensorQuant => {
                let p = q.quant_params_as_per_tensor_quant().ok_or(ErrorKind::Missing {
                    what: "XNNPACK PerTensorQuant",
                })?;
                let (scale, zero_point) = (p.scale(), p.zero_point());
                if !(scale.is_finite() && scale > 0.0) {
                    return Err(invalid(format!("quantization scale {scale} is not positive")));
                }
                Ok(QParams::PerTensor { scale, zero_point })
            }
            P::PerChannelQuant => {
                let p = q.quant_params_as_per_channel_quant().ok_or(ErrorKind::Missing {
                    what: "XNNPACK PerChannelQuant",
                })?;
                let channel_dim = usize::try_from(p.channel_dim())
                    .ok()
                    .filter(|&d| d < dims.len())
                    .ok_or_else(|| {
                        invalid(format!(
                            "channel_dim {} of a value of {} dims",
                            p.channel_dim(),
                            dims.len()
                        ))
                    })?;
                let count = dims[channel_dim];
                let scales = match p.scale().filter(|s| !s.is_empty()) {
                    Some(inline) => {
                        if inline.len() != count {
                            return Err(invalid(format!(
                                "{} scales for the {count} channels of dim {channel_dim}",
                                inline.len()
                            )));
                        }
                        let bytes = inline.bytes();
                        DataRef {
                            source: DataSource::Program,
                            offset: (bytes.as_ptr() as usize).wrapping_sub(self.file.as_ptr() as usize),
                            len: bytes.len(),
                        }
                    }
                    None => {
                        if p.num_scales() as usize != count {
                            return Err(invalid(format!(
                                "num_scales {} for the {count} channels of dim {channel_dim}",
                                p.num_scales()
                            )));
                        }
                        let idx = p.scale_buffer_idx() as usize;
                        if idx == 0 {
                            return Err(invalid("per-channel scales with neither a list nor a buffer"));
                        }
                        self.constant(g, idx, count * 4)?
                    }
                };
                Ok(QParams::PerChannel {
                    scales,
                    count,
                    channel_dim,
                })
            }
            P::PerChannelGroupQuant => {
                let p = q.quant_params_as_per_channel_group_quant().ok_or(ErrorKind::Missing {
                    what: "XNNPACK PerChannelGroupQuant",
                })?;
                let (n, k) = match *dims {
                    [n, k] => (n, k),
                    _ => return Err(invalid(format!("blockwise scales of a value of {} dims", dims.len()))),
                };
                let group = usize::try_from(p.group_size()).unwrap_or(0);
                if p.channel_dim() != 0 || group == 0 || k % group != 0 || group % 2 != 0 {
                    return Err(invalid(format!(
                        "blocks of {} along dim 1 of [{n}, {k}] (channel dim {})",
                        p.group_size(),
                        p.channel_dim()
                    )));
                }
                let count = n * (k / group);
                if p.num_scales() as usize != count || p.scale_buffer_idx() == 0 {
                    return Err(invalid(format!(
                        "{} blockwise scales (buffer {}) for {count} blocks",
                        p.num_scales(),
                        p.scale_buffer_idx()
                    )));
                }
                let scales = self.constant(g, p.scale_buffer_idx() as usize, count * 2)?;
                Ok(QParams::Blockwise { scales, count, group })
            }
            P::PerTokenDynamicQuant => {
                let p = q.quant_params_as_per_token_dynamic_quant().ok_or(ErrorKind::Missing {
                    what: "XNNPACK PerTokenDynamicQuant",
                })?;
                let nnb = usize::try_from(p.num_nonbatch_dims())
                    .ok()
                    .filter(|&d| d >= 1 && d <= dims.len())
                    .ok_or_else(|| {
                        invalid(format!(
                            "num_nonbatch_dims {} of a value of {} dims",
                            p.num_nonbatch_dims(),
                            dims.len()
                        ))
                    })?;
                Ok(QParams::Dynamic { num_nonbatch_dims: nnb })
            }
            other => Err(ErrorKind::Unsupported {
                detail: format!(
                    "XNNPACK quantization {}; ptec compiles per-tensor and per-channel static quantization",
                    other.variant_name().unwrap_or("unknown")
                ),
            }),
        }
    }

    /// The data of constant `idx`, of which the value needs `need` bytes.
    fn constant(&self, g: &fb::XNNGraph<'_>, idx: usize, need: usize) -> Result<DataRef, ErrorKind> {
        let (data, available) = match (g.constant_data(), g.constant_buffer()) {
            (Some(table), _) if !table.is_empty() => {
                let entry = (idx < table.len())
                    .then(|| table.get(idx))
                    .ok_or(ErrorKind::IndexOutOfRange {
                        what: "XNNPACK constant_data",
                        index: idx as i64,
                        len: table.len(),
                    })?;
                let size = entry.size_();
                match entry.named_key().filter(|k| !k.is_empty()) {
                    Some(key) => {
                        let d = self.named(key)?;
                        if size > d.len as u64 {
                            return Err(ErrorKind::OutsideData {
                                what: "XNNPACK named constant",
                                offset: d.offset as u64,
                                len: size,
                                limit: d.len as u64,
                            });
                        }
                        (d, size)
                    }
                    None => {
                        let off = entry.offset();
                        if off.checked_add(size).is_none_or(|e| e > self.constants.len as u64) {
                            return Err(ErrorKind::OutsideData {
                                what: "XNNPACK constant",
                                offset: off,
                                len: size,
                                limit: self.constants.len as u64,
                            });
                        }
                        let d = DataRef {
                            offset: self.constants.offset + off as usize,
                            ..self.constants
                        };
                        (d, size)
                    }
                }
            }
            (_, Some(table)) if !table.is_empty() => {
                let entry = (idx < table.len())
                    .then(|| table.get(idx))
                    .ok_or(ErrorKind::IndexOutOfRange {
                        what: "XNNPACK constant_buffer",
                        index: idx as i64,
                        len: table.len(),
                    })?;
                let bytes = entry.storage().map(|s| s.bytes()).unwrap_or(&[]);
                let offset = (bytes.as_ptr() as usize).wrapping_sub(self.file.as_ptr() as usize);
                let d = DataRef {
                    source: DataSource::Program,
                    offset,
                    len: bytes.len(),
                };
                (d, bytes.len() as u64)
            }
            _ => {
                return Err(invalid(format!(
                    "constant {idx} is named but the subgraph has no constants"
                )))
            }
        };
        if available < need as u64 {
            return Err(ErrorKind::OutsideData {
                what: "XNNPACK constant",
                offset: data.offset as u64,
                len: need as u64,
                limit: available,
            });
        }
        Ok(DataRef { len: need, ..data })
    }

    /// The data the program keeps under `key`: its named data, or a tensor
    /// of a `.ptd` file given to the compiler.
    fn named(&self, key: &str) -> Result<DataRef, ErrorKind> {
        if let Some(nd) = self.named.named_data.iter().find(|n| n.key == key) {
            return nd.data.ok_or(invalid(format!("named data `{key}` has no segment")));
        }
        let mut external = self.named.external_files.iter().flat_map(|f| &f.tensors);
        if let Some(t) = external.find(|t| t.key == key) {
            return Ok(t.data);
        }
        Err(invalid(format!(
            "constant `{key}` is neither in the program's named data nor in a given .ptd file"
        )))
    }

    fn node(&self, n: fb::Node<'_>, i: usize, index: &HashMap<u32, usize>) -> Result<XNode> {
        let t = n.node_type();
        let kind = t.variant_name().unwrap_or("unknown");
        let offset = self.fb_base + n._tab.loc();
        let place = Some(format!("XNNPACK node {i} ({kind})"));
        let err = |k| bad(self.at, place.clone(), offset, k);
        let missing = || err(ErrorKind::Missing { what: "XNNPACK node" });
        let id = |raw: u32| -> Result<usize> {
            index
                .get(&raw)
                .copied()
                .ok_or_else(|| err(invalid(format!("the node names value id {raw}, which is not defined"))))
        };
        let opt = |raw: u32| -> Result<Option<usize>> {
            if raw == NO_VALUE {
                Ok(None)
            } else {
                id(raw).map(Some)
            }
        };
        let flags_ok = |flags: u32, allowed: u32| -> Result<()> {
            if flags & !allowed != 0 {
                Err(err(ErrorKind::Unsupported {
                    detail: format!("XNNPACK {kind} with flags {flags:#x}"),
                }))
            } else {
                Ok(())
            }
        };
        let unsupported = || {
            err(ErrorKind::Unsupported {
                detail: format!("XNNPACK node kind {kind}"),
            })
        };
        let binary = |node: Option<fb::Node2x1<'_>>, op: BinaryOp| -> Result<Op> {
            let node = node.ok_or_else(missing)?;
            flags_ok(node.flags(), 0)?;
            Ok(Op::Binary {
                op,
                a: id(node.input1_id())?,
                b: id(node.input2_id())?,
                out: id(node.output_id())?,
            })
        };
        let unary = |node: Option<fb::Node1x1<'_>>, op: UnaryOp| -> Result<Op> {
            let node = node.ok_or_else(missing)?;
            flags_ok(node.flags(), 0)?;
            Ok(Op::Unary {
                op,
                input: id(node.input_id())?,
                out: id(node.output_id())?,
            })
        };
        // Convolutions and transposed ones share their table.
        let conv_params = |c: fb::Conv<'_>| -> Result<ConvParams> {
            flags_ok(c.flags(), 0)?;
            let u = |x: u32| x as usize;
            let params = ConvParams {
                input: id(c.input1_id())?,
                filter: id(c.filter_id())?,
                bias: opt(c.bias_id())?,
                out: id(c.output_id())?,
                padding: [c.padding_top(), c.padding_right(), c.padding_bottom(), c.padding_left()].map(u),
                kernel: [c.kernel_height(), c.kernel_width()].map(u),
                stride: [c.subsampling_height(), c.subsampling_width()].map(u),
                dilation: [c.dilation_height(), c.dilation_width()].map(u),
                groups: u(c.groups()),
                group_input_channels: u(c.group_input_channels()),
                group_output_channels: u(c.group_output_channels()),
            };
            Ok(params)
        };
        let conv = |node: Option<fb::Conv<'_>>, depthwise: bool| -> Result<Op> {
            let conv = conv_params(node.ok_or_else(missing)?)?;
            Ok(Op::Conv2d { depthwise, conv })
        };
        let deconv = |node: Option<fb::Conv<'_>>| -> Result<Op> {
            let c = node.ok_or_else(missing)?;
            let adjustment = [c.adjustment_height(), c.adjustment_width()].map(|x| x as usize);
            let conv = conv_params(c)?;
            Ok(Op::Deconv2d { conv, adjustment })
        };
        let pool = |node: Option<fb::Pooling2d<'_>>, max: bool| -> Result<Op> {
            let p = node.ok_or_else(missing)?;
            flags_ok(p.flags(), FLAG_KEEP_DIMS)?;
            let u = |x: u32| x as usize;
            // Average pooling has no dilation (ExecuTorch writes 0 there).
            let dilation = if max {
                [p.dilation_height(), p.dilation_width()].map(u)
            } else {
                [1, 1]
            };
            Ok(Op::Pool2d {
                max,
                input: id(p.input_id())?,
                out: id(p.output_id())?,
                padding: [p.padding_top(), p.padding_right(), p.padding_bottom(), p.padding_left()].map(u),
                kernel: [p.pooling_height(), p.pooling_width()].map(u),
                stride: [p.stride_height(), p.stride_width()].map(u),
                dilation,
            })
        };
        let concat = |node: Option<fb::Concatenate<'_>>, count: usize| -> Result<Op> {
            let c = node.ok_or_else(missing)?;
            flags_ok(c.flags(), 0)?;
            let ids = [
                c.input1_id(),
                c.input2_id(),
                c.input3_id(),
                c.input4_id(),
                c.input5_id(),
            ];
            Ok(Op::Concat {
                axis: c.axis() as usize,
                inputs: ids[..count].iter().map(|&x| id(x)).collect::<Result<_, _>>()?,
                out: id(c.output_id())?,
            })
        };
        let list = |v: Option<flatbuffers::Vector<'_, u32>>| -> Vec<usize> {
            v.map(|v| v.iter().map(|x| x as usize).collect()).unwrap_or_default()
        };
        use fb::NodeUnion as N;
        let op = match t {
            N::XNNAdd => binary(n.node_as_xnnadd(), BinaryOp::Add)?,
            N::XNNSubtract => binary(n.node_as_xnnsubtract(), BinaryOp::Subtract)?,
            N::XNNMultiply => binary(n.node_as_xnnmultiply(), BinaryOp::Multiply)?,
            N::XNNDiv => binary(n.node_as_xnndiv(), BinaryOp::Divide)?,
            N::XNNMinimum => binary(n.node_as_xnnminimum(), BinaryOp::Minimum)?,
            N::XNNMaximum => binary(n.node_as_xnnmaximum(), BinaryOp::Maximum)?,
            N::XNNPReLU => binary(n.node_as_xnnpre_lu(), BinaryOp::PReLU)?,
            N::XNNClamp => unary(n.node_as_xnnclamp(), UnaryOp::Clamp)?,
            N::XNNSoftmax => unary(n.node_as_xnnsoftmax(), UnaryOp::Softmax)?,
            N::XNNSigmoid => unary(n.node_as_xnnsigmoid(), UnaryOp::Sigmoid)?,
            N::XNNFloor => unary(n.node_as_xnnfloor(), UnaryOp::Floor)?,
            N::XNNCeiling => unary(n.node_as_xnnceiling(), UnaryOp::Ceiling)?,
            N::XNNSquareRoot => unary(n.node_as_xnnsquare_root(), UnaryOp::SquareRoot)?,
            N::XNNReciprocalSquareRoot => unary(n.node_as_xnnreciprocal_square_root(), UnaryOp::ReciprocalSquareRoot)?,
            N::XNNHardswish => unary(n.node_as_xnnhardswish(), UnaryOp::Hardswish)?,
            N::XNNNegate => unary(n.node_as_xnnnegate(), UnaryOp::Negate)?,
            N::XNNSquare => unary(n.node_as_xnnsquare(), UnaryOp::Square)?,
            N::XNNAbs => unary(n.node_as_xnnabs(), UnaryOp::Abs)?,
            N::XNNLog => unary(n.node_as_xnnlog(), UnaryOp::Log)?,
            N::XNNExp => unary(n.node_as_xnnexp(), UnaryOp::Exp)?,
            N::XNNTanh => unary(n.node_as_xnntanh(), UnaryOp::Tanh)?,
            N::XNNSin => unary(n.node_as_xnnsin(), UnaryOp::Sin)?,
            N::XNNCos => unary(n.node_as_xnncos(), UnaryOp::Cos)?,
            N::XNNGelu => unary(n.node_as_xnngelu(), UnaryOp::Gelu)?,
            N::XNNCopy => unary(n.node_as_xnncopy(), UnaryOp::Copy)?,
            N::XNNConvert => unary(n.node_as_xnnconvert(), UnaryOp::Convert)?,
            N::XNNLeakyReLU => {
                let l = n.node_as_xnnleaky_re_lu().ok_or_else(missing)?;
                flags_ok(l.flags(), 0)?;
                Op::Unary {
                    op: UnaryOp::LeakyRelu {
                        negative_slope: l.negative_slope(),
                    },
                    input: id(l.input_id())?,
                    out: id(l.output_id())?,
                }
            }
            N::XNNELU => {
                let e = n.node_as_xnnelu().ok_or_else(missing)?;
                flags_ok(e.flags(), 0)?;
                Op::Unary {
                    op: UnaryOp::Elu { alpha: e.alpha() },
                    input: id(e.input_id())?,
                    out: id(e.output_id())?,
                }
            }
            N::XNNFullyConnected => {
                let f = n.node_as_xnnfully_connected().ok_or_else(missing)?;
                flags_ok(f.flags(), FLAG_TRANSPOSE_WEIGHTS)?;
                Op::FullyConnected {
                    input: id(f.input1_id())?,
                    filter: id(f.filter_id())?,
                    bias: opt(f.bias_id())?,
                    out: id(f.output_id())?,
                    weight_transposed: f.flags() & FLAG_TRANSPOSE_WEIGHTS != 0,
                }
            }
            N::XNNConv2d => conv(n.node_as_xnnconv_2d(), false)?,
            N::XNNDepthwiseConv2d => conv(n.node_as_xnndepthwise_conv_2d(), true)?,
            N::XNNConvTranspose2d => deconv(n.node_as_xnnconv_transpose_2d())?,
            N::XNNMaxPooling2d => pool(n.node_as_xnnmax_pooling_2d(), true)?,
            N::XNNAvgPooling2d => pool(n.node_as_xnnavg_pooling_2d(), false)?,
            N::XNNGlobalAvgPooling2d => {
                let g = n.node_as_xnnglobal_avg_pooling_2d().ok_or_else(missing)?;
                flags_ok(g.flags(), FLAG_KEEP_DIMS)?;
                Op::GlobalAvgPool {
                    input: id(g.input_id())?,
                    out: id(g.output_id())?,
                }
            }
            N::XNNStaticTranspose => {
                let s = n.node_as_xnnstatic_transpose().ok_or_else(missing)?;
                flags_ok(s.flags(), 0)?;
                Op::Transpose {
                    perm: list(s.perm()),
                    input: id(s.input_id())?,
                    out: id(s.output_id())?,
                }
            }
            N::XNNStaticResizeBilinear2D => {
                let r = n.node_as_xnnstatic_resize_bilinear_2_d().ok_or_else(missing)?;
                flags_ok(r.flags(), FLAG_ALIGN_CORNERS)?;
                Op::ResizeBilinear {
                    height: r.new_height() as usize,
                    width: r.new_width() as usize,
                    align_corners: r.flags() & FLAG_ALIGN_CORNERS != 0,
                    input: id(r.input_id())?,
                    out: id(r.output_id())?,
                }
            }
            N::XNNStaticReshape => {
                let s = n.node_as_xnnstatic_reshape().ok_or_else(missing)?;
                flags_ok(s.flags(), 0)?;
                Op::Reshape {
                    new_shape: list(s.new_shape()),
                    input: id(s.input_id())?,
                    out: id(s.output_id())?,
                }
            }
            N::XNNStaticSlice => {
                let s = n.node_as_xnnstatic_slice().ok_or_else(missing)?;
                flags_ok(s.flags(), 0)?;
                Op::Slice {
                    offsets: list(s.offsets()),
                    sizes: list(s.sizes()),
                    input: id(s.input_id())?,
                    out: id(s.output_id())?,
                }
            }
            N::XNNStaticConstantPad => {
                let s = n.node_as_xnnstatic_constant_pad().ok_or_else(missing)?;
                flags_ok(s.flags(), 0)?;
                Op::Pad {
                    pre: list(s.pre_paddings()),
                    post: list(s.post_paddings()),
                    value: s.padding_value(),
                    input: id(s.input_id())?,
                    out: id(s.output_id())?,
                }
            }
            N::XNNConcatenate2 => concat(n.node_as_xnnconcatenate_2(), 2)?,
            N::XNNConcatenate3 => concat(n.node_as_xnnconcatenate_3(), 3)?,
            N::XNNConcatenate4 => concat(n.node_as_xnnconcatenate_4(), 4)?,
            N::XNNConcatenate5 => concat(n.node_as_xnnconcatenate_5(), 5)?,
            N::XNNBatchMatrixMultiply => {
                let b = n.node_as_xnnbatch_matrix_multiply().ok_or_else(missing)?;
                flags_ok(b.flags(), FLAG_TRANSPOSE_WEIGHTS)?;
                Op::BatchMatMul {
                    a: id(b.input1_id())?,
                    b: id(b.input2_id())?,
                    out: id(b.output_id())?,
                    transpose_b: b.flags() & FLAG_TRANSPOSE_WEIGHTS != 0,
                }
            }
            N::NONE => return Err(missing()),
            _ => return Err(unsupported()),
        };
        // XNNPACK applies the fused clamp only to these kinds.
        let clamped = matches!(
            t,
            N::XNNAdd
                | N::XNNSubtract
                | N::XNNMultiply
                | N::XNNDiv
                | N::XNNClamp
                | N::XNNFullyConnected
                | N::XNNConv2d
                | N::XNNDepthwiseConv2d
                | N::XNNConvTranspose2d
                | N::XNNMaxPooling2d
                | N::XNNAvgPooling2d
                | N::XNNGlobalAvgPooling2d
        );
        let (min, max) = match n.output_min_max() {
            Some(mm) if clamped => (mm.output_min(), mm.output_max()),
            _ => (f32::NEG_INFINITY, f32::INFINITY),
        };
        // NaN bounds fail this too.
        if min.partial_cmp(&max).is_none_or(|o| o.is_gt()) {
            return Err(err(invalid(format!("output range [{min}, {max}] is empty"))));
        }
        Ok(XNode {
            kind,
            op,
            min,
            max,
            offset,
            debug_handle: n.debug_handle(),
        })
    }
}

/// Every value a node reads must hold data by then (a call input, a
/// constant, or the output of an earlier node); every value is written at
/// most once and never when it is an input or constant; every call output
/// is written.
fn check_dataflow(g: &Graph, at: &Location) -> Result<()> {
    let mut ready: Vec<bool> = g
        .values
        .iter()
        .map(|v| matches!(v.kind, ValueKind::Input { .. } | ValueKind::Constant(_)))
        .collect();
    for (i, n) in g.nodes.iter().enumerate() {
        let place = || Some(format!("XNNPACK node {i} ({})", n.kind));
        for v in n.op.inputs() {
            if !ready[v] {
                return Err(bad(
                    at,
                    place(),
                    n.offset,
                    invalid(format!("reads value id {} before any node writes it", g.values[v].id)),
                ));
            }
        }
        let out = n.op.output();
        if ready[out] {
            return Err(bad(
                at,
                place(),
                n.offset,
                invalid(format!(
                    "writes value id {}, which is an input, a constant or already written",
                    g.values[out].id
                )),
            ));
        }
        ready[out] = true;
    }
    let unwritten = g
        .values
        .iter()
        .zip(&ready)
        .find(|(v, &r)| !r && matches!(v.kind, ValueKind::Output { .. }));
    if let Some((v, _)) = unwritten {
        return Err(bad(
            at,
            Some(format!("XNNPACK value id {}", v.id)),
            v.offset,
            invalid("an output of the delegate call that no node writes"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(fb: (u32, u32), consts: (u32, u64), len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        b[4..8].copy_from_slice(b"XH00");
        b[8..10].copy_from_slice(&30u16.to_le_bytes());
        b[10..14].copy_from_slice(&fb.0.to_le_bytes());
        b[14..18].copy_from_slice(&fb.1.to_le_bytes());
        b[18..22].copy_from_slice(&consts.0.to_le_bytes());
        b[22..30].copy_from_slice(&consts.1.to_le_bytes());
        b
    }

    #[test]
    fn header_ranges_are_checked() {
        let ok = layout(&header((32, 64), (96, 16), 112)).unwrap();
        assert_eq!((ok.flatbuffer, ok.constants), ((32, 64), (96, 16)));
        // Flatbuffer past the end, constants overlapping it, constants past
        // the end, a size that overflows, a truncated header.
        assert!(layout(&header((32, 100), (132, 0), 112)).is_err());
        assert!(layout(&header((32, 64), (90, 0), 112)).is_err());
        assert!(layout(&header((32, 64), (96, 17), 112)).is_err());
        assert!(layout(&header((32, 64), (96, u64::MAX), 112)).is_err());
        assert!(layout(&header((32, 64), (96, 0), 112)[..20]).is_err());
        // No header: the whole blob is the flatbuffer.
        let none = layout(b"\x10\0\0\0XN01rest").unwrap();
        assert_eq!(none.flatbuffer, (0, 12));
    }
}
