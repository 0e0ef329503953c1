//! Lowering XNNPACK delegate calls to kernel calls (an IR-to-IR pass).
//!
//! Each subgraph value becomes a method value: the call's arguments for
//! external values, constants pointing at the program's bytes, and new
//! tensors for intermediates. Each node becomes one kernel call (two when
//! a fused clamp has no kernel to fuse into) whose arguments are
//! synthesized values. A convolution with constant weights, ungrouped or
//! depthwise, becomes the `conv2d_folded` call that the channels-last pass
//! makes of an aten convolution (its filter in XNNPACK's layout), so that
//! the passes after it fuse residual adds and chains alike.
//!
//! Intermediates are laid out by this pass in one extra planned buffer per
//! method, reusing bytes between values whose lifetimes within a call do
//! not overlap (calls never overlap, so all of a method's calls share the
//! buffer). Constant weights that kernels rearrange (pack) get a second
//! buffer, where the packing made on the first run stays for the next
//! ones.
//!
//! Shapes are checked here, against the node's parameters, so that a
//! malformed subgraph is reported at its node; the emitters check their
//! arguments again when the code is generated.
use super::BACKEND_ID;
use crate::error::{Diagnostic, ErrorKind, Errors, Location, Result};
use crate::ir::*;
use crate::names::aten::{ADD, AVG_POOL2D, CLAMP, CONVOLUTION, MAX_POOL2D_WITH_INDICES, MEAN, PERMUTE_COPY};
use crate::names::{
    conv2d_nhwc, folded, fully_connected, AVG_POOL2D_NHWC, BATCH_MATMUL, DECONV2D_NHWC, DEPTHWISE_CONV2D_NHWC,
    GLOBAL_AVG_POOL2D_NHWC, MAX_POOL2D_NHWC, PRELU,
};
use crate::passes::rewrite::{kernel_call, push_f32_tensor, push_int_list, push_tensor, push_value};
use crate::read::xnnpack::{
    BinaryOp, ConvParams, Graph, Graphs, Op, QElem, QParams, Quantized, UnaryOp, ValueKind, XNode,
};
use crate::shapes::{batch_matmul_sizes, broadcast, contiguous_strides};
use ptec_runtime::kernels::gemm::packed_len;
use ptec_runtime::kernels::nhwc::{Activation, Algorithm, Conv2dNhwc, Deconv2dNhwc, FilterLayout, Window2d};

mod quantized;

/// Replaces every `DelegateCall` to the XNNPACK backend in `program` by
/// kernel calls over the subgraphs `graphs` read for them (a call's blob
/// that could not be read is its error). Calls to other backends are left
/// alone.
pub fn lower_xnnpack_delegates(program: &mut Program, mut graphs: Graphs, algorithm: Algorithm) -> Result<()> {
    let mut errors = Vec::new();
    for (k, m) in program.methods.iter_mut().enumerate() {
        let uses_xnnpack = m.instructions.iter().any(|i| is_xnnpack_call(m, i));
        if uses_xnnpack {
            errors.extend(lower_method(m, |n| graphs.take(k, n), algorithm));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Errors(errors))
    }
}

/// A call whose blob was not read with the program: the program changed
/// after reading and was not read again, a bug of ptec's.
fn unread(at: &Location) -> Errors {
    Errors::one(
        ErrorKind::Internal {
            detail: "an XNNPACK delegate call whose blob was not read with the program".into(),
        },
        at.clone(),
    )
}

fn is_xnnpack_call(m: &Method, ins: &Instruction) -> bool {
    matches!(ins, Instruction::Delegate { delegate, .. }
        if m.delegates.get(*delegate).is_some_and(|d| d.id == BACKEND_ID))
}

/// Lowers the XNNPACK calls of one method, the subgraph of the call at
/// each instruction taken from `graph`; returns the problems found.
/// Lowers the XNNPACK calls of `m`, the subgraph of instruction `n` read
/// by `graph(n)`; its convolutions run by `algorithm`.
fn lower_method(
    m: &mut Method,
    mut graph: impl FnMut(usize) -> Option<Result<Graph>>,
    algorithm: Algorithm,
) -> Vec<Diagnostic> {
    let old = std::mem::take(&mut m.instructions);
    let old_traces = m.stacktraces.take();
    let mut errors = Vec::new();
    let mut instructions = Vec::with_capacity(old.len());
    let mut traces = old_traces.as_ref().map(|_| Vec::new());
    let mut origins = Vec::with_capacity(old.len());
    // Where each old instruction starts in the new list (and the end).
    let mut start = Vec::with_capacity(old.len() + 1);
    let mut buffers = Buffers::default();
    for (n, ins) in old.iter().enumerate() {
        start.push(instructions.len());
        let lowered = match ins {
            Instruction::Delegate { args, .. } if is_xnnpack_call(m, ins) => {
                let at = Location::method(&m.name).instruction(n);
                let read = graph(n).unwrap_or_else(|| Err(unread(&at)));
                match read.and_then(|mut g| {
                    quantized::merge_clamps(&mut g);
                    let outputs: Vec<usize> = g
                        .values
                        .iter()
                        .filter_map(|x| match x.kind {
                            ValueKind::Output { arg } => Some(arg),
                            _ => None,
                        })
                        .collect();
                    CallLowering::new(m, &g, args, at, &mut buffers, algorithm)
                        .run()
                        .map(|list| (list, outputs))
                }) {
                    Ok((list, mut outputs)) => {
                        let from = m.origin(n).instruction;
                        // Traced as ExecuTorch logs them: the arguments'
                        // tail (a call whose outputs are not is not traced
                        // as a whole).
                        outputs.sort_unstable();
                        let tail = args.len().checked_sub(outputs.len()).map(|s| s..args.len());
                        if tail.is_some_and(|t| t.eq(outputs.iter().copied())) {
                            m.delegate_outputs
                                .insert(from, outputs.iter().map(|&a| args[a]).collect());
                        }
                        let nodes = list.iter().map(|&(_, handle)| Origin {
                            instruction: from,
                            delegate_node: Some(handle),
                            logged_as: None,
                        });
                        origins.extend(nodes);
                        list.into_iter().map(|(ins, _)| ins).collect()
                    }
                    Err(e) => {
                        errors.extend(e.0);
                        Vec::new()
                    }
                }
            }
            other => {
                origins.push(m.origin(n));
                vec![other.clone()]
            }
        };
        if let (Some(t), Some(old_t)) = (traces.as_mut(), old_traces.as_ref()) {
            let frames = old_t.get(n).cloned().unwrap_or_default();
            t.extend(std::iter::repeat_n(frames, lowered.len()));
        }
        instructions.extend(lowered);
    }
    let end = instructions.len();
    start.push(end);
    for ins in &mut instructions {
        if let Instruction::JumpFalse { destination, .. } = ins {
            *destination = start.get(*destination).copied().unwrap_or(end);
        }
    }
    m.instructions = instructions;
    m.stacktraces = traces;
    m.origins = origins;
    buffers.kept.install(m);
    if errors.is_empty() {
        drop_uncalled_delegates(m);
    }
    errors
}

/// Removes the delegates no instruction calls any more (the compiled
/// XNNPACK ones), renumbering the calls of the others: what is left are
/// the backends the generated code must be given.
fn drop_uncalled_delegates(m: &mut Method) {
    let mut called = vec![false; m.delegates.len()];
    for ins in &m.instructions {
        if let Instruction::Delegate { delegate, .. } = ins {
            if let Some(c) = called.get_mut(*delegate) {
                *c = true;
            }
        }
    }
    let mut new_index = Vec::with_capacity(called.len());
    let mut next = 0;
    for &c in &called {
        new_index.push(next);
        next += usize::from(c);
    }
    let mut k = 0;
    m.delegates.retain(|_| {
        k += 1;
        called[k - 1]
    });
    for ins in &mut m.instructions {
        if let Instruction::Delegate { delegate, .. } = ins {
            if let Some(&i) = new_index.get(*delegate) {
                *delegate = i;
            }
        }
    }
}

/// The buffer the pass adds to a method, for packed weights (kept from run
/// to run, so each has bytes of its own). The calls' intermediates are
/// left unplanned, for [`crate::plan::temporaries`].
#[derive(Default)]
struct Buffers {
    kept: AddedBuffer,
}

/// The lowering of one call.
struct CallLowering<'a> {
    m: &'a mut Method,
    g: &'a Graph,
    args: &'a [usize],
    at: Location,
    /// Method value of each subgraph value, once created.
    slots: Vec<Option<usize>>,
    out: Vec<Instruction>,
    /// The debug handle of the node each of `out` computes.
    out_nodes: Vec<u32>,
    /// The debug handle of the node being lowered.
    node_handle: u32,
    buffers: &'a mut Buffers,
    /// How the folded convolutions run their products.
    algorithm: Algorithm,
    /// An argument's shape varies (up to the bound its dims give): the
    /// call's intermediates vary too, and every kernel sets their live
    /// sizes from its inputs', as XNNPACK reshapes the subgraph.
    dynamic: bool,
}

type Step = Result<()>;

impl<'a> CallLowering<'a> {
    fn new(
        m: &'a mut Method,
        g: &'a Graph,
        args: &'a [usize],
        at: Location,
        buffers: &'a mut Buffers,
        algorithm: Algorithm,
    ) -> Self {
        CallLowering {
            slots: vec![None; g.values.len()],
            m,
            g,
            args,
            at,
            out: Vec::new(),
            out_nodes: Vec::new(),
            node_handle: 0,
            buffers,
            algorithm,
            dynamic: false,
        }
    }

    /// The lowered calls, each with the debug handle of its node.
    fn run(mut self) -> Result<Vec<(Instruction, u32)>> {
        for (i, v) in self.g.values.iter().enumerate() {
            if let ValueKind::Input { .. } | ValueKind::Output { .. } = v.kind {
                self.bind_argument(i)?;
            }
        }
        self.outputs_apart()?;
        self.softmax_layouts()?;
        for (i, node) in self.g.nodes.iter().enumerate() {
            self.node_handle = node.debug_handle;
            self.node(i, node)?;
        }
        Ok(self.out.into_iter().zip(self.out_nodes).collect())
    }

    /// The lowered nodes write each output while later nodes may still
    /// read the inputs: an output planned over an input's bytes (or over
    /// another output's) would corrupt them, so such a call is refused.
    fn outputs_apart(&self) -> Step {
        let arg = |x: &crate::read::xnnpack::XValue| match x.kind {
            ValueKind::Input { arg } => Some((false, arg)),
            ValueKind::Output { arg } => Some((true, arg)),
            _ => None,
        };
        let args: Vec<(bool, usize)> = self.g.values.iter().filter_map(arg).collect();
        for (k, &(writes, a)) in args.iter().enumerate() {
            for &(other_writes, b) in &args[k + 1..] {
                let (va, vb) = (self.args[a], self.args[b]);
                if (writes || other_writes) && va != vb && crate::analysis::alias::share_bytes(self.m, va, vb) {
                    return Err(Errors::one(
                        ErrorKind::Unsupported {
                            detail: format!(
                                "XNNPACK delegate arguments {a} and {b} (values {va} and {vb}) share planned bytes, one of them an output"
                            ),
                        },
                        self.at.clone(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Refuses a softmax over a tensor ExecuTorch's partitioner laid out
    /// channels-last. The partitioner keeps the images that convolutions,
    /// pooling, resizing and PReLU produce in NHWC through the layout-blind
    /// nodes after them, but serializes softmax (which it only accepts
    /// over the model's last dim, the width) unchanged, so XNNPACK
    /// normalizes the channels instead: ExecuTorch 1.5.1's own runtime
    /// returns those wrong numbers. A refusal beats a faithful copy of them.
    fn softmax_layouts(&self) -> Step {
        let Some(i) = channels_last_softmax(self.g) else {
            return Ok(());
        };
        let node = &self.g.nodes[i];
        Err(self.node_unsupported(
            i,
            node,
            "softmax over the channels of an image that ExecuTorch's XNNPACK partitioner laid out \
             channels-last, where the model takes it over the width: ExecuTorch's runtime computes \
             those wrong numbers too; export with the softmax outside the XNNPACK partition"
                .into(),
        ))
    }

    // -----------------------------------------------------------------
    // Values

    /// An invalid-subgraph error at `within` (a value or node) and byte
    /// `offset` of the call's blob.
    fn error(&self, within: String, offset: usize, detail: String) -> Errors {
        Errors::one(
            ErrorKind::BadDelegate {
                backend: BACKEND_ID,
                detail,
            },
            self.at.clone().within(within).offset(offset),
        )
    }

    fn value_error(&self, x: usize, detail: String) -> Errors {
        let v = &self.g.values[x];
        self.error(format!("XNNPACK value id {}", v.id), v.offset, detail)
    }

    /// Binds an external value to its argument of the call, through an
    /// alias with the value's dims when the argument's differ: a dim order
    /// that is not the default (XNNPACK sees the tensor's bytes in memory
    /// order) or a 0-d tensor.
    fn bind_argument(&mut self, x: usize) -> Step {
        let v = &self.g.values[x];
        let (ValueKind::Input { arg } | ValueKind::Output { arg }) = v.kind else {
            return Ok(());
        };
        let writes = matches!(v.kind, ValueKind::Output { .. });
        let vi = self.args[arg];
        let t = match self.m.values.get(vi) {
            Some(Value::Tensor(t)) => t.clone(),
            Some(other) => {
                return Err(self.value_error(
                    x,
                    format!(
                        "delegate argument {arg} (value {vi}) is a {}, not a tensor",
                        other.kind()
                    ),
                ))
            }
            None => return Err(self.value_error(x, format!("delegate argument {arg} names value {vi}, out of range"))),
        };
        if t.dtype != self.dtype_of(x) {
            return Err(self.value_error(
                x,
                format!(
                    "delegate argument {arg} (value {vi}) has dtype {}, the subgraph's value {}",
                    t.dtype,
                    self.dtype_of(x)
                ),
            ));
        }
        if t.dynamism == Dynamism::DynamicUnbound || (t.dynamism != Dynamism::Static && !t.is_contiguous()) {
            return Err(Errors::one(
                ErrorKind::Unsupported {
                    detail: format!(
                        "XNNPACK delegate argument {arg} (value {vi}) with a dynamic shape {}",
                        if t.is_contiguous() {
                            "and no bound"
                        } else {
                            "in a dim order other than the default"
                        }
                    ),
                },
                self.at.clone().value(vi),
            ));
        }
        self.dynamic |= t.dynamism != Dynamism::Static;
        let memory_order: Vec<usize> = t
            .dim_order
            .iter()
            .map(|&d| t.sizes.get(d as usize).copied().unwrap_or(0))
            .collect();
        // A 0-d tensor is a 1-element value of any rank to XNNPACK.
        let scalar = t.sizes.is_empty() && v.dims.iter().all(|&d| d == 1);
        if memory_order != v.dims && !scalar {
            return Err(self.value_error(
                x,
                format!(
                    "delegate argument {arg} (value {vi}) has sizes {:?} in dim order {:?}, the subgraph's value dims {:?}",
                    t.sizes, t.dim_order, v.dims
                ),
            ));
        }
        if writes && matches!(t.placement, Placement::Constant { .. } | Placement::External { .. }) {
            return Err(self.value_error(x, format!("the call writes argument {arg} (value {vi}), a constant")));
        }
        let slot = if t.is_contiguous() && t.sizes == v.dims {
            vi
        } else {
            let placement = match &t.placement {
                Placement::Mutable { buffer, offset, .. } => Placement::Planned {
                    buffer: *buffer,
                    offset: *offset,
                },
                Placement::Unplanned => {
                    return Err(Errors::one(
                        ErrorKind::Unsupported {
                            detail: format!(
                            "XNNPACK delegate argument {arg} (value {vi}) with dim order {:?} and no planned memory",
                            t.dim_order
                        ),
                        },
                        self.at.clone().value(vi),
                    ))
                }
                p => p.clone(),
            };
            push_tensor(self.m, t.dtype, v.dims.clone(), placement)
        };
        self.slots[x] = Some(slot);
        Ok(())
    }

    fn push_tensor(&mut self, sizes: Vec<usize>, placement: Placement) -> usize {
        push_f32_tensor(self.m, sizes, placement)
    }

    /// The dtype of subgraph value `x`'s method value.
    fn dtype_of(&self, x: usize) -> ScalarType {
        match &self.g.values[x].quant {
            None => ScalarType::Float,
            // Quantized when read: the value is its `f32` source.
            Some(Quantized {
                params: QParams::Dynamic { .. },
                ..
            }) => ScalarType::Float,
            Some(q) => match q.elem {
                QElem::I8 => ScalarType::Char,
                QElem::U8 | QElem::I4 => ScalarType::Byte,
                QElem::I32 => ScalarType::Int,
            },
        }
    }

    /// The sizes of subgraph value `x`'s method value: its dims, the last
    /// halved for 4-bit elements (two to a byte).
    fn sizes_of(&self, x: usize) -> Vec<usize> {
        let v = &self.g.values[x];
        let mut sizes = v.dims.clone();
        if let (Some(Quantized { elem: QElem::I4, .. }), Some(last)) = (&v.quant, sizes.last_mut()) {
            *last = last.div_ceil(2);
        }
        sizes
    }

    /// A new `f32` intermediate tensor of this call.
    fn temp(&mut self, sizes: Vec<usize>) -> usize {
        self.temp_of(ScalarType::Float, sizes)
    }

    /// A new intermediate tensor of this call (unplanned, see
    /// [`Buffers`]).
    fn temp_of(&mut self, dtype: ScalarType, sizes: Vec<usize>) -> usize {
        let v = push_tensor(self.m, dtype, sizes, Placement::Unplanned);
        if self.dynamic {
            if let Some(Value::Tensor(t)) = self.m.values.get_mut(v) {
                t.dynamism = Dynamism::DynamicBound;
            }
        }
        v
    }

    /// The method value of subgraph value `x`, created on first use.
    fn slot(&mut self, x: usize) -> usize {
        if let Some(s) = self.slots[x] {
            return s;
        }
        let (dtype, sizes) = (self.dtype_of(x), self.sizes_of(x));
        let s = match &self.g.values[x].kind {
            ValueKind::Constant(data) => push_tensor(self.m, dtype, sizes, Placement::Constant { data: *data }),
            // Arguments are bound before any node is lowered.
            _ => self.temp_of(dtype, sizes),
        };
        self.slots[x] = Some(s);
        s
    }

    fn is_constant(&self, x: usize) -> bool {
        matches!(self.g.values[x].kind, ValueKind::Constant(_))
    }

    /// Where a kernel keeps subgraph value `x` packed (`len` floats) from
    /// run to run: a tensor of its own in the kept buffer when `x` is a
    /// constant, else None (the kernel packs it on every call).
    fn kept_packing(&mut self, x: usize, len: usize) -> usize {
        if !self.is_constant(x) {
            return self.null();
        }
        let placement = self.buffers.kept.reserve(self.m, len as u64 * 4);
        self.push_tensor(vec![len], placement)
    }

    fn push(&mut self, v: Value) -> usize {
        push_value(self.m, v)
    }

    fn int(&mut self, x: usize) -> usize {
        self.push(Value::Int(x as i64))
    }

    fn int_list(&mut self, xs: &[usize]) -> usize {
        push_int_list(self.m, xs)
    }

    fn double(&mut self, x: f32) -> usize {
        self.push(Value::Double(x as f64))
    }

    fn null(&mut self) -> usize {
        self.push(Value::Null)
    }

    /// Appends a call of `name.overload` with `args`.
    fn kernel(&mut self, full_name: &str, args: Vec<usize>) {
        let call = kernel_call(self.m, full_name, args);
        self.out.push(call);
        self.out_nodes.push(self.node_handle);
    }

    /// An aten out-variant call: the out tensor is passed and returned.
    fn aten(&mut self, full_name: &str, mut args: Vec<usize>, out: usize) {
        args.extend([out, out]);
        self.kernel(full_name, args);
    }

    // -----------------------------------------------------------------
    // Nodes

    /// An unsupported-construct error at node `i`.
    fn node_unsupported(&self, i: usize, node: &XNode, detail: String) -> Errors {
        Errors::one(
            ErrorKind::Unsupported { detail },
            self.at
                .clone()
                .within(format!("XNNPACK node {i} ({})", node.kind))
                .offset(node.offset),
        )
    }

    fn node_error(&self, i: usize, node: &XNode, detail: String) -> Errors {
        self.error(format!("XNNPACK node {i} ({})", node.kind), node.offset, detail)
    }

    fn dims(&self, x: usize) -> &'a [usize] {
        &self.g.values[x].dims
    }

    /// Fails unless value `out` has dims `want`.
    fn expect_dims(&self, i: usize, node: &XNode, out: usize, want: &[usize]) -> Step {
        if self.dims(out) == want {
            Ok(())
        } else {
            Err(self.node_error(
                i,
                node,
                format!(
                    "output value id {} has dims {:?}, the node computes {want:?}",
                    self.g.values[out].id,
                    self.dims(out)
                ),
            ))
        }
    }

    /// Where a node whose kernel cannot clamp writes: `out` itself, or a
    /// temporary that [`Self::finish_clamp`] clamps into `out`.
    fn clamp_target(&mut self, node: &XNode, out: usize) -> (usize, usize) {
        let o = self.slot(out);
        if has_clamp(node) {
            (self.temp(self.dims(out).to_vec()), o)
        } else {
            (o, o)
        }
    }

    fn finish_clamp(&mut self, node: &XNode, written: usize, out: usize) {
        if written != out {
            let lo = self.bound(node.min);
            let hi = self.bound(node.max);
            self.aten(CLAMP, vec![written, lo, hi], out);
        }
    }

    /// A clamp bound: the value, or None for an infinite one.
    fn bound(&mut self, b: f32) -> usize {
        if b.is_infinite() {
            self.null()
        } else {
            self.double(b)
        }
    }

    fn node(&mut self, i: usize, node: &XNode) -> Step {
        // With a varying input, only nodes whose lowering follows the live
        // shape are lowered (a convolution through aten's, a reshape
        // inferring its varying dim); shapes checked against the bound
        // above would not hold for the others.
        let dynamic_convert = matches!(
            node.op,
            Op::Unary { op: UnaryOp::Convert, out, .. }
                if matches!(self.g.values[out].quant, Some(Quantized { params: QParams::Dynamic { .. }, .. }))
        );
        let follows_live = matches!(
            node.op,
            Op::FullyConnected { .. }
                | Op::Binary { .. }
                | Op::Unary { .. }
                | Op::Reshape { .. }
                | Op::Transpose { .. }
                | Op::Concat { .. }
                | Op::Conv2d { .. }
                | Op::BatchMatMul { .. }
                | Op::Pad { .. }
                | Op::Pool2d { .. }
                | Op::GlobalAvgPool { .. }
        );
        if self.dynamic && !follows_live && !dynamic_convert {
            return Err(self.node_unsupported(
                i,
                node,
                format!("XNNPACK node {i} ({}) in a subgraph with a dynamic input", node.kind),
            ));
        }
        if self.is_quantized(node) && self.quantized_node(i, node)? {
            return Ok(());
        }
        match &node.op {
            Op::Binary { op, a, b, out } => self.binary(i, node, *op, [*a, *b, *out]),
            Op::Unary { op, input, out } => {
                let want = self.dims(*input).to_vec();
                self.expect_dims(i, node, *out, &want)?;
                self.unary(i, node, *op, *input, *out)
            }
            Op::FullyConnected {
                input,
                filter,
                bias,
                out,
                weight_transposed,
            } => self.fully_connected(i, node, [*input, *filter, *out], *bias, *weight_transposed),
            Op::BatchMatMul { a, b, out, transpose_b } => self.batch_matmul(i, node, [*a, *b, *out], *transpose_b),
            Op::Conv2d { depthwise, conv } => self.conv2d(i, node, *depthwise, conv),
            Op::Deconv2d { conv, adjustment } => self.deconv2d(i, node, conv, *adjustment),
            Op::Pool2d {
                max,
                input,
                out,
                padding,
                kernel,
                stride,
                dilation,
            } => self.pool2d(i, node, *max, [*input, *out], padding, [kernel, stride, dilation]),
            Op::GlobalAvgPool { input, out } => self.global_avg_pool(i, node, *input, *out),
            Op::Transpose { perm, input, out } => self.transpose(i, node, perm, [*input, *out]),
            Op::ResizeBilinear {
                height,
                width,
                align_corners,
                input,
                out,
            } => self.resize_bilinear(i, node, [*height, *width], *align_corners, [*input, *out]),
            Op::Reshape { new_shape, input, out } => self.reshape(i, node, new_shape, [*input, *out]),
            Op::Slice {
                offsets,
                sizes,
                input,
                out,
            } => self.slice(i, node, [offsets, sizes], [*input, *out]),
            Op::Pad {
                pre,
                post,
                value,
                input,
                out,
            } => self.pad(i, node, [pre, post], *value, [*input, *out]),
            Op::Concat { axis, inputs, out } => self.concat(i, node, *axis, inputs, *out),
        }
    }

    // Elementwise nodes (unary ones: `unary`).

    /// `out = a op b`, broadcast, with the node's clamp.
    fn binary(&mut self, i: usize, node: &XNode, op: BinaryOp, [a, b, out]: [usize; 3]) -> Step {
        let want = broadcast(self.dims(a), self.dims(b)).ok_or_else(|| {
            self.node_error(
                i,
                node,
                format!("dims {:?} and {:?} do not broadcast", self.dims(a), self.dims(b)),
            )
        })?;
        self.expect_dims(i, node, out, &want)?;
        let (sa, sb) = (self.slot(a), self.slot(b));
        let (dst, o) = self.clamp_target(node, out);
        match op {
            BinaryOp::Add | BinaryOp::Subtract => {
                let alpha = self.push(Value::Int(1));
                let name = if op == BinaryOp::Add { ADD } else { "aten::sub.out" };
                self.aten(name, vec![sa, sb, alpha], dst);
            }
            BinaryOp::Multiply => self.aten("aten::mul.out", vec![sa, sb], dst),
            BinaryOp::Divide => self.aten("aten::div.out", vec![sa, sb], dst),
            BinaryOp::Minimum => self.aten("aten::minimum.out", vec![sa, sb], dst),
            BinaryOp::Maximum => self.aten("aten::maximum.out", vec![sa, sb], dst),
            BinaryOp::PReLU => self.kernel(PRELU, vec![sa, sb, dst, dst]),
        }
        self.finish_clamp(node, dst, o);
        Ok(())
    }

    // Products (convolutions: `conv2d`, `deconv2d`).

    /// `out = input · filterᵀ + bias`, the filter packed once and kept.
    fn fully_connected(
        &mut self,
        i: usize,
        node: &XNode,
        [input, filter, out]: [usize; 3],
        bias: Option<usize>,
        weight_transposed: bool,
    ) -> Step {
        let (k, n) = self.fc_sizes(i, node)?;
        let args = vec![
            self.slot(input),
            self.slot(filter),
            self.opt_slot(bias),
            self.push(Value::Bool(weight_transposed)),
            self.double(node.min),
            self.double(node.max),
            self.kept_packing(filter, packed_len(k, n)),
            self.slot(out),
        ];
        self.kernel(fully_connected::NAME, args);
        Ok(())
    }

    /// `out = a · b` (`a · bᵀ` when `transpose_b`), batch dims broadcast.
    fn batch_matmul(&mut self, i: usize, node: &XNode, [a, b, out]: [usize; 3], transpose_b: bool) -> Step {
        let (da, db) = (self.dims(a), self.dims(b));
        let want = batch_matmul_sizes(da, db, transpose_b).ok_or_else(|| {
            self.node_error(
                i,
                node,
                format!("batch matrix multiply of {da:?} and {db:?} does not fit"),
            )
        })?;
        self.expect_dims(i, node, out, &want)?;
        if self.dynamic {
            return self.dynamic_batch_matmul(i, node, [a, b, out], transpose_b);
        }
        let args = vec![
            self.slot(a),
            self.slot(b),
            self.push(Value::Bool(transpose_b)),
            self.slot(out),
        ];
        self.kernel(BATCH_MATMUL, args);
        Ok(())
    }

    // Pooling.

    /// Max or average pooling over NHWC images.
    fn pool2d(
        &mut self,
        i: usize,
        node: &XNode,
        max: bool,
        [input, out]: [usize; 2],
        padding: &[usize; 4],
        [kernel, stride, dilation]: [&[usize; 2]; 3],
    ) -> Step {
        let win = self.pool_window(i, node)?;
        if self.dynamic {
            let [top, right, bottom, left] = *padding;
            if top != bottom || left != right {
                return Err(self.node_unsupported(
                    i,
                    node,
                    format!("pooling with uneven padding {padding:?} in a subgraph with a dynamic input"),
                ));
            }
            return self.dynamic_pool(i, node, max, [input, out], &win);
        }
        let mut args = vec![
            self.slot(input),
            self.int_list(kernel),
            self.int_list(stride),
            self.int_list(padding),
        ];
        if max {
            args.push(self.int_list(dilation));
        }
        args.extend([self.double(node.min), self.double(node.max), self.slot(out)]);
        let name = if max { MAX_POOL2D_NHWC } else { AVG_POOL2D_NHWC };
        self.kernel(name, args);
        Ok(())
    }

    /// The mean over the spatial dims of NHWC images.
    fn global_avg_pool(&mut self, i: usize, node: &XNode, input: usize, out: usize) -> Step {
        let x = self.dims(input);
        let [n, _, _, c] = *x else {
            return Err(self.node_error(i, node, format!("input dims {x:?} are not [N, H, W, C]")));
        };
        let o = self.dims(out);
        if o.iter().product::<usize>() != n * c || o.last() != Some(&c) {
            self.expect_dims(i, node, out, &[n, 1, 1, c])?;
        }
        if self.dynamic {
            return self.dynamic_global_avg_pool(i, node, input, out);
        }
        let args = vec![
            self.slot(input),
            self.double(node.min),
            self.double(node.max),
            self.slot(out),
        ];
        self.kernel(GLOBAL_AVG_POOL2D_NHWC, args);
        Ok(())
    }

    // Nodes that move elements: shapes, layouts, copies.

    /// `out` dim `d` is `input` dim `perm[d]`.
    fn transpose(&mut self, i: usize, node: &XNode, perm: &[usize], [input, out]: [usize; 2]) -> Step {
        let x = self.dims(input);
        let mut seen = vec![false; x.len()];
        let is_perm = perm.len() == x.len()
            && perm
                .iter()
                .all(|&p| p < x.len() && !std::mem::replace(&mut seen[p], true));
        if !is_perm {
            return Err(self.node_error(i, node, format!("{perm:?} is not a permutation of {} dims", x.len())));
        }
        let want: Vec<usize> = perm.iter().map(|&p| x[p]).collect();
        self.expect_dims(i, node, out, &want)?;
        let (si, p) = (self.slot(input), self.int_list(perm));
        let o = self.slot(out);
        self.aten(PERMUTE_COPY, vec![si, p], o);
        Ok(())
    }

    /// Bilinear resizing of an NHWC image to `height × width`.
    fn resize_bilinear(
        &mut self,
        i: usize,
        node: &XNode,
        [height, width]: [usize; 2],
        align_corners: bool,
        [input, out]: [usize; 2],
    ) -> Step {
        let &[n, h, w, c] = self.dims(input) else {
            return Err(self.node_error(i, node, format!("input of dims {:?}, not NHWC", self.dims(input))));
        };
        if h == 0 || w == 0 || height == 0 || width == 0 {
            return Err(self.node_error(i, node, "an empty image".into()));
        }
        self.expect_dims(i, node, out, &[n, height, width, c])?;
        // aten's kernel runs on NCHW images: the image goes there and back.
        let (si, o) = (self.slot(input), self.slot(out));
        let nchw_in = self.temp(vec![n, c, h, w]);
        let to_nchw = self.int_list(&[0, 3, 1, 2]);
        self.aten(PERMUTE_COPY, vec![si, to_nchw], nchw_in);
        let nchw_out = self.temp(vec![n, c, height, width]);
        let size = self.int_list(&[height, width]);
        let align = self.push(Value::Bool(align_corners));
        let scales = self.null();
        self.aten(
            "aten::upsample_bilinear2d.vec_out",
            vec![nchw_in, size, align, scales],
            nchw_out,
        );
        let to_nhwc = self.int_list(&[0, 2, 3, 1]);
        self.aten(PERMUTE_COPY, vec![nchw_out, to_nhwc], o);
        Ok(())
    }

    /// The same elements in `new_shape` (a 0 in it inferred).
    fn reshape(&mut self, i: usize, node: &XNode, new_shape: &[usize], [input, out]: [usize; 2]) -> Step {
        let (x, o) = (self.dims(input), self.dims(out));
        let fits = new_shape.len() == o.len() && new_shape.iter().zip(o).all(|(&s, &d)| s == 0 || s == d);
        if !fits || x.iter().product::<usize>() != o.iter().product::<usize>() {
            return Err(self.node_error(
                i,
                node,
                format!("reshape of {x:?} to {new_shape:?} does not give the output's dims {o:?}"),
            ));
        }
        // A varying input: XNNPACK's 0 (at most one) is inferred
        // from the live element count, as view_copy's -1 is.
        let shape = if self.dynamic && new_shape.contains(&0) {
            let items = new_shape
                .iter()
                .map(|&s| {
                    let v = if s == 0 { -1 } else { s as i64 };
                    self.push(Value::Int(v))
                })
                .collect();
            self.push(Value::IntList(items))
        } else {
            self.int_list(o)
        };
        let (si, so) = (self.slot(input), self.slot(out));
        self.aten("aten::view_copy.out", vec![si, shape], so);
        Ok(())
    }

    /// The box `offsets .. offsets + sizes` of `input`.
    fn slice(&mut self, i: usize, node: &XNode, [offsets, sizes]: [&[usize]; 2], [input, out]: [usize; 2]) -> Step {
        let (x, o) = (self.dims(input), self.dims(out));
        let fits = offsets.len() == x.len()
            && sizes.len() == x.len()
            && o.len() == x.len()
            && (0..x.len()).all(|d| {
                (sizes[d] == 0 || sizes[d] == o[d]) && offsets[d].checked_add(o[d]).is_some_and(|e| e <= x[d])
            });
        if !fits {
            return Err(self.node_error(
                i,
                node,
                format!("slice at {offsets:?} of sizes {sizes:?} does not fit input {x:?} and output {o:?}"),
            ));
        }
        let strides = contiguous_strides(x);
        let start: usize = offsets.iter().zip(&strides).map(|(a, b)| a * b).sum();
        let args = vec![
            self.slot(input),
            self.int_list(o),
            self.int_list(&strides),
            self.int(start),
        ];
        let so = self.slot(out);
        self.aten("aten::as_strided_copy.out", args, so);
        Ok(())
    }

    /// `input` padded with `value`, `pre[d]` before and `post[d]` after dim `d`.
    fn pad(
        &mut self,
        i: usize,
        node: &XNode,
        [pre, post]: [&[usize]; 2],
        value: f32,
        [input, out]: [usize; 2],
    ) -> Step {
        let x = self.dims(input);
        if pre.len() != x.len() || post.len() != x.len() {
            return Err(self.node_error(
                i,
                node,
                format!("paddings for {} dims, input has {}", pre.len(), x.len()),
            ));
        }
        let want: Option<Vec<usize>> = (0..x.len())
            .map(|d| x[d].checked_add(pre[d])?.checked_add(post[d]))
            .collect();
        let want = want.ok_or_else(|| self.node_error(i, node, "padded sizes overflow".into()))?;
        self.expect_dims(i, node, out, &want)?;
        // aten's pad list runs from the last dim to the first.
        let pads: Vec<usize> = (0..x.len()).rev().flat_map(|d| [pre[d], post[d]]).collect();
        let args = vec![self.slot(input), self.int_list(&pads), self.pad_value(input, value)];
        let so = self.slot(out);
        self.aten("aten::constant_pad_nd.out", args, so);
        Ok(())
    }

    /// `inputs` concatenated along `axis`.
    fn concat(&mut self, i: usize, node: &XNode, axis: usize, inputs: &[usize], out: usize) -> Step {
        let first = self.dims(inputs[0]);
        let mut want = first.to_vec();
        let mut fits = axis < first.len();
        if fits {
            want[axis] = 0;
            for &t in inputs {
                let d = self.dims(t);
                fits &= d.len() == first.len() && (0..d.len()).all(|j| j == axis || d[j] == first[j]);
                if fits {
                    want[axis] += d[axis];
                }
            }
        }
        if !fits {
            let all: Vec<&[usize]> = inputs.iter().map(|&t| self.dims(t)).collect();
            return Err(self.node_error(i, node, format!("inputs {all:?} do not concatenate along dim {axis}")));
        }
        self.expect_dims(i, node, out, &want)?;
        let items = inputs.iter().map(|&t| self.slot(t)).collect();
        let list = self.push(Value::TensorList(items));
        let ax = self.int(axis);
        let so = self.slot(out);
        self.aten("aten::cat.out", vec![list, ax], so);
        Ok(())
    }

    /// A convolution node: on NHWC images with XNNPACK's filter layout, or
    /// through aten's with a varying input.
    fn conv2d(&mut self, i: usize, node: &XNode, depthwise: bool, conv: &ConvParams) -> Step {
        let ConvParams {
            input,
            filter,
            bias,
            out,
            padding,
            stride,
            dilation,
            groups,
            ..
        } = conv;
        let g = self.conv_geometry(i, node, depthwise, conv)?;
        if self.dynamic && !self.is_quantized(node) {
            return self.dynamic_conv(i, node, depthwise, conv, g.groups);
        }
        let (x, w) = (self.dims(*input), self.dims(*filter));
        // The geometry the call's emitter will find for the
        // filter in XNNPACK's layout (ungrouped, or depthwise with
        // more than one channel).
        let as_folded = Conv2dNhwc::folded(FilterLayout::Xnnpack, x, w, *stride, *padding, *dilation, g.groups);
        if as_folded == Some(g) && self.is_constant(*filter) && bias.is_none_or(|b| self.is_constant(b)) {
            // The call the channels-last pass makes of an aten
            // convolution: the passes after this one fuse residual
            // adds and chains of such calls.
            let groups = g.groups;
            let algorithm = g.algorithm(self.algorithm);
            let [weight, bias] = [self.slot(*filter), self.opt_slot(*bias)];
            let null = self.null();
            let args = folded::Args {
                x: self.slot(*input),
                weight,
                bias,
                bn: [null; 5],
                padding: self.int_list(padding),
                stride: self.int_list(stride),
                dilation: self.int_list(dilation),
                groups: self.int(groups),
                min: self.double(node.min),
                max: self.double(node.max),
                residual: null,
                kept: self.kept_packing(*filter, g.folded_len(algorithm)),
                layout: self.push(Value::Int(folded::layout_code(FilterLayout::Xnnpack))),
                activation: self.push(Value::Int(folded::activation_code(Activation::Identity))),
                algorithm: self.push(Value::Int(folded::algorithm_code(algorithm))),
                out: self.slot(*out),
            };
            self.kernel(folded::NAME, args.to_vec());
            return Ok(());
        }
        let mut args = vec![
            self.slot(*input),
            self.slot(*filter),
            self.opt_slot(*bias),
            self.int_list(padding),
            self.int_list(stride),
            self.int_list(dilation),
        ];
        if !depthwise {
            args.push(self.int(*groups));
        }
        args.extend([self.double(node.min), self.double(node.max)]);
        if !depthwise {
            let kept = if g.keeps_packed_filter() {
                self.kept_packing(*filter, g.packed_filter_len())
            } else {
                self.null()
            };
            args.push(kept);
        }
        args.push(self.slot(*out));
        let name = if depthwise {
            DEPTHWISE_CONV2D_NHWC
        } else {
            conv2d_nhwc::NAME
        };
        self.kernel(name, args);
        Ok(())
    }

    /// A transposed convolution node, on NHWC images.
    fn deconv2d(&mut self, i: usize, node: &XNode, conv: &ConvParams, adjustment: [usize; 2]) -> Step {
        let ConvParams {
            input,
            filter,
            bias,
            out,
            padding,
            kernel,
            stride,
            dilation,
            groups,
            group_input_channels,
            group_output_channels,
        } = conv;
        let (gi, go) = (*group_input_channels, *group_output_channels);
        let geometry = Deconv2dNhwc::new(
            self.dims(*input),
            *kernel,
            *stride,
            *dilation,
            *padding,
            adjustment,
            *groups,
            gi,
            go,
        );
        let g = geometry.ok_or_else(|| {
        self.node_error(
            i,
            node,
            format!(
                "input dims {:?}, kernel {kernel:?}, stride {stride:?}, padding {padding:?}, dilation {dilation:?}, adjustment {adjustment:?}, {groups} groups of {gi} -> {go} channels do not fit",
                self.dims(*input)
            ),
        )
    })?;
        let want = [groups * go, kernel[0], kernel[1], gi];
        if self.dims(*filter) != want {
            return Err(self.node_error(
                i,
                node,
                format!("filter dims {:?}, expected {want:?}", self.dims(*filter)),
            ));
        }
        if let Some(b) = bias {
            if self.g.values[*b].numel() != groups * go {
                return Err(self.node_error(i, node, format!("the bias does not have {} elements", groups * go)));
            }
        }
        self.expect_dims(i, node, *out, &g.output_sizes())?;
        let args = vec![
            self.slot(*input),
            self.slot(*filter),
            self.opt_slot(*bias),
            self.int_list(padding),
            self.int_list(stride),
            self.int_list(dilation),
            self.int_list(&adjustment),
            self.int(*groups),
            self.double(node.min),
            self.double(node.max),
            self.slot(*out),
        ];
        self.kernel(DECONV2D_NHWC, args);
        Ok(())
    }

    /// The inner and output sizes `(k, n)` of a fully connected node,
    /// checked against its values.
    fn fc_sizes(&self, i: usize, node: &XNode) -> Result<(usize, usize)> {
        let Op::FullyConnected {
            input,
            filter,
            bias,
            out,
            weight_transposed,
        } = &node.op
        else {
            unreachable!("called on fully connected nodes")
        };
        let (x, w) = (self.dims(*input), self.dims(*filter));
        let k = x.last().copied().unwrap_or(0);
        let n = match (w, weight_transposed) {
            (&[n, wk], false) | (&[wk, n], true) if wk == k => n,
            _ => return Err(self.node_error(i, node, format!("input dims {x:?} and filter dims {w:?} do not fit"))),
        };
        if x.is_empty() || bias.is_some_and(|b| self.g.values[b].numel() != n) {
            return Err(self.node_error(i, node, format!("input dims {x:?} or the bias do not fit {n} outputs")));
        }
        let mut want = x.to_vec();
        *want.last_mut().expect("rank >= 1") = n;
        // XNNPACK keeps the leading dims; only their product matters.
        let (o, got) = (self.dims(*out), want.iter().product::<usize>());
        if o.last() != Some(&n) || o.iter().product::<usize>() != got {
            self.expect_dims(i, node, *out, &want)?;
        }
        Ok((k, n))
    }

    /// The window of a pooling node, checked against its values.
    fn pool_window(&self, i: usize, node: &XNode) -> Result<Window2d> {
        let Op::Pool2d {
            input,
            out,
            padding,
            kernel,
            stride,
            dilation,
            ..
        } = &node.op
        else {
            unreachable!("called on pooling nodes")
        };
        let x = self.dims(*input);
        let window = match *x {
            [n, h, w, _] => Window2d::new(n, h, w, *kernel, *stride, *padding, *dilation),
            _ => None,
        };
        let win = window.ok_or_else(|| {
            self.node_error(
                i,
                node,
                format!(
                    "input dims {x:?}, window {kernel:?}, stride {stride:?}, padding {padding:?}, dilation {dilation:?} do not fit"
                ),
            )
        })?;
        self.expect_dims(i, node, *out, &[win.batch, win.out_h, win.out_w, x[3]])?;
        Ok(win)
    }

    /// A batch matrix multiply whose operands vary: aten's `bmm`, which
    /// follows the live sizes, over 3-d operands of one batch (a
    /// transposed right operand transposed first).
    fn dynamic_batch_matmul(&mut self, i: usize, node: &XNode, [a, b, out]: [usize; 3], transpose_b: bool) -> Step {
        let (da, db) = (self.dims(a).to_vec(), self.dims(b).to_vec());
        if da.len() != 3 || db.len() != 3 || da[0] != db[0] {
            return Err(self.node_unsupported(
                i,
                node,
                format!("a batch matrix multiply of {da:?} and {db:?} (not 3-d of one batch) in a subgraph with a dynamic input"),
            ));
        }
        let sb = if transpose_b {
            let t = self.temp(vec![db[0], db[2], db[1]]);
            let (sb, perm) = (self.slot(b), self.int_list(&[0, 2, 1]));
            self.aten(PERMUTE_COPY, vec![sb, perm], t);
            t
        } else {
            self.slot(b)
        };
        let (sa, so) = (self.slot(a), self.slot(out));
        self.aten("aten::bmm.out", vec![sa, sb], so);
        Ok(())
    }

    /// A pooling node whose input varies: aten's pooling, which follows
    /// the live sizes, on NCHW images (there and back, as for a
    /// convolution). XNNPACK leaves padding out of an average, so
    /// `count_include_pad` is false.
    fn dynamic_pool(&mut self, i: usize, node: &XNode, max: bool, [input, out]: [usize; 2], win: &Window2d) -> Step {
        let (kernel, stride) = ([win.kernel_h, win.kernel_w], [win.stride_h, win.stride_w]);
        let padding = [win.pad_top, win.pad_left];
        // aten's average pooling takes at most half the window as padding.
        if !max && (2 * padding[0] > kernel[0] || 2 * padding[1] > kernel[1]) {
            return Err(self.node_unsupported(
                i,
                node,
                format!("average pooling with padding {padding:?} over more than half the window {kernel:?} in a subgraph with a dynamic input"),
            ));
        }
        let (x, o) = (self.dims(input).to_vec(), self.dims(out).to_vec());
        let nchw = |d: &[usize]| vec![d[0], d[3], d[1], d[2]];
        let si = self.slot(input);
        let nchw_in = self.temp(nchw(&x));
        let to_nchw = self.int_list(&[0, 3, 1, 2]);
        self.aten(PERMUTE_COPY, vec![si, to_nchw], nchw_in);
        let nchw_out = self.temp(nchw(&o));
        let window = [
            nchw_in,
            self.int_list(&kernel),
            self.int_list(&stride),
            self.int_list(&padding),
        ];
        let ceil_mode = self.push(Value::Bool(false));
        if max {
            let indices = self.temp_of(ScalarType::Long, nchw(&o));
            let mut args = window.to_vec();
            let dilation = self.int_list(&[win.dilation_h, win.dilation_w]);
            args.extend([dilation, ceil_mode, nchw_out, indices, nchw_out]);
            self.kernel(MAX_POOL2D_WITH_INDICES, args);
        } else {
            let mut args = window.to_vec();
            args.extend([ceil_mode, self.push(Value::Bool(false)), self.null()]);
            self.aten(AVG_POOL2D, args, nchw_out);
        }
        let clamped = if has_clamp(node) { self.temp(nchw(&o)) } else { nchw_out };
        self.finish_clamp(node, nchw_out, clamped);
        let (so, to_nhwc) = (self.slot(out), self.int_list(&[0, 2, 3, 1]));
        self.aten(PERMUTE_COPY, vec![clamped, to_nhwc], so);
        Ok(())
    }

    /// A global average pool whose input varies: aten's mean over the
    /// spatial dims of the NHWC image, which follows the live sizes.
    fn dynamic_global_avg_pool(&mut self, i: usize, node: &XNode, input: usize, out: usize) -> Step {
        let keepdim = match self.dims(out).len() {
            4 => true,
            2 => false,
            _ => {
                return Err(self.node_unsupported(
                    i,
                    node,
                    format!(
                        "a global average pool into dims {:?} in a subgraph with a dynamic input",
                        self.dims(out)
                    ),
                ))
            }
        };
        let (si, spatial) = (self.slot(input), self.int_list(&[1, 2]));
        let keep = self.push(Value::Bool(keepdim));
        let dtype = self.null();
        let (dst, o) = self.clamp_target(node, out);
        self.aten(MEAN, vec![si, spatial, keep, dtype], dst);
        self.finish_clamp(node, dst, o);
        Ok(())
    }

    /// A float convolution whose input varies: aten's, which follows the
    /// live sizes, on NCHW images (the image goes there and back), with
    /// the filter rearranged into PyTorch's layout on each run.
    fn dynamic_conv(&mut self, i: usize, node: &XNode, depthwise: bool, conv: &ConvParams, groups: usize) -> Step {
        let (input, filter, out) = (&conv.input, &conv.filter, &conv.out);
        let (padding, stride, dilation) = (&conv.padding, &conv.stride, &conv.dilation);
        let [top, right, bottom, left] = *padding;
        if top != bottom || left != right {
            return Err(self.node_unsupported(
                i,
                node,
                format!("a convolution with uneven padding {padding:?} in a subgraph with a dynamic input"),
            ));
        }
        let (x, w, o) = (
            self.dims(*input).to_vec(),
            self.dims(*filter).to_vec(),
            self.dims(*out).to_vec(),
        );
        let nchw = |d: &[usize]| vec![d[0], d[3], d[1], d[2]];
        let si = self.slot(*input);
        let nchw_in = self.temp(nchw(&x));
        let to_nchw = self.int_list(&[0, 3, 1, 2]);
        self.aten(PERMUTE_COPY, vec![si, to_nchw], nchw_in);
        // XNNPACK's [1, kH, kW, O] (depthwise) or [O, kH, kW, I] to
        // PyTorch's [O, I, kH, kW]: a static tensor.
        let perm = if depthwise { [3, 0, 1, 2] } else { [0, 3, 1, 2] };
        let weight = push_tensor(
            self.m,
            ScalarType::Float,
            perm.iter().map(|&p| w[p]).collect(),
            Placement::Unplanned,
        );
        let (sf, to_oihw) = (self.slot(*filter), self.int_list(&perm));
        self.aten(PERMUTE_COPY, vec![sf, to_oihw], weight);
        let nchw_out = self.temp(nchw(&o));
        let args = vec![
            nchw_in,
            weight,
            self.opt_slot(conv.bias),
            self.int_list(stride),
            self.int_list(&[top, left]),
            self.int_list(dilation),
            self.push(Value::Bool(false)),
            self.int_list(&[0, 0]),
            self.int(groups),
        ];
        self.aten(CONVOLUTION, args, nchw_out);
        let clamped = if has_clamp(node) { self.temp(nchw(&o)) } else { nchw_out };
        self.finish_clamp(node, nchw_out, clamped);
        let (so, to_nhwc) = (self.slot(*out), self.int_list(&[0, 2, 3, 1]));
        self.aten(PERMUTE_COPY, vec![clamped, to_nhwc], so);
        Ok(())
    }

    /// The geometry of a convolution node, checked against its values.
    fn conv_geometry(&self, i: usize, node: &XNode, depthwise: bool, conv: &ConvParams) -> Result<Conv2dNhwc> {
        let ConvParams {
            input,
            filter,
            bias,
            out,
            padding,
            kernel,
            stride,
            dilation,
            groups,
            group_input_channels,
            group_output_channels,
        } = conv;
        let (x, w) = (self.dims(*input), self.dims(*filter));
        let geometry = if depthwise {
            Conv2dNhwc::depthwise(x, w, *stride, *padding, *dilation).filter(|g| {
                g.groups == *groups
                    && *group_input_channels > 0
                    && g.out_c == groups * (group_output_channels / group_input_channels)
            })
        } else {
            Conv2dNhwc::regular(x, w, *stride, *padding, *dilation, *groups)
                .filter(|g| g.out_c == groups * group_output_channels && g.in_c == groups * group_input_channels)
        };
        let g = geometry
            .filter(|g| [g.window.kernel_h, g.window.kernel_w] == *kernel)
            .ok_or_else(|| {
                self.node_error(
                    i,
                    node,
                    format!(
                        "input dims {x:?}, filter dims {w:?}, kernel {kernel:?}, stride {stride:?}, padding {padding:?}, dilation {dilation:?}, {groups} groups of {group_input_channels} → {group_output_channels} channels do not fit"
                    ),
                )
            })?;
        if bias.is_some_and(|b| self.g.values[b].numel() != g.out_c) {
            return Err(self.node_error(i, node, format!("the bias does not have {} elements", g.out_c)));
        }
        self.expect_dims(i, node, *out, &g.output_sizes())?;
        Ok(g)
    }

    fn opt_slot(&mut self, x: Option<usize>) -> usize {
        match x {
            Some(x) => self.slot(x),
            None => self.null(),
        }
    }

    fn unary(&mut self, i: usize, node: &XNode, op: UnaryOp, input: usize, out: usize) -> Step {
        let si = self.slot(input);
        let so = self.slot(out);
        let simple = |op| match op {
            UnaryOp::Sigmoid => Some("aten::sigmoid.out"),
            UnaryOp::Floor => Some("aten::floor.out"),
            UnaryOp::Ceiling => Some("aten::ceil.out"),
            UnaryOp::SquareRoot => Some("aten::sqrt.out"),
            UnaryOp::ReciprocalSquareRoot => Some("aten::rsqrt.out"),
            UnaryOp::Hardswish => Some("aten::hardswish.out"),
            UnaryOp::Negate => Some("aten::neg.out"),
            UnaryOp::Abs => Some("aten::abs.out"),
            UnaryOp::Log => Some("aten::log.out"),
            UnaryOp::Exp => Some("aten::exp.out"),
            UnaryOp::Tanh => Some("aten::tanh.out"),
            UnaryOp::Sin => Some("aten::sin.out"),
            UnaryOp::Cos => Some("aten::cos.out"),
            _ => None,
        };
        if let Some(name) = simple(op) {
            self.aten(name, vec![si], so);
            return Ok(());
        }
        match op {
            UnaryOp::Clamp if has_clamp(node) => {
                let (lo, hi) = (self.bound(node.min), self.bound(node.max));
                self.aten(CLAMP, vec![si, lo, hi], so);
            }
            UnaryOp::Convert => {
                return Err(self.node_unsupported(
                    i,
                    node,
                    format!("XNNPACK node kind {} between two fp32 values", node.kind),
                ))
            }
            UnaryOp::Clamp | UnaryOp::Copy => {
                let fmt = self.null();
                self.aten("aten::clone.out", vec![si, fmt], so);
            }
            UnaryOp::Softmax => {
                if self.dims(input).is_empty() {
                    return Err(self.node_error(i, node, "softmax of a 0-d tensor".into()));
                }
                let dim = self.push(Value::Int(-1));
                let half = self.push(Value::Bool(false));
                self.aten("aten::_softmax.out", vec![si, dim, half], so);
            }
            UnaryOp::Square => self.aten("aten::mul.out", vec![si, si], so),
            UnaryOp::Gelu => {
                let exact = self.push(Value::String("none".into()));
                self.aten("aten::gelu.out", vec![si, exact], so);
            }
            UnaryOp::LeakyRelu { negative_slope } => {
                let s = self.double(negative_slope);
                self.aten("aten::leaky_relu.out", vec![si, s], so);
            }
            UnaryOp::Elu { alpha } => {
                let (a, one, one2) = (self.double(alpha), self.double(1.0), self.double(1.0));
                self.aten("aten::elu.out", vec![si, a, one, one2], so);
            }
            _ => unreachable!("simple unary operations are handled above"),
        }
        Ok(())
    }
}

/// The first softmax node whose input is surely a channels-last image (a
/// 4-d tensor the partitioner stores NHWC: the output of a node that works
/// on NHWC images, or of a layout-blind node over one), unless its width
/// and channels are both 1, when both orders give ones. The partitioner
/// keeps a user's permute of such an image channels-last too (its `perm`
/// rewritten), but its own conversion back to NCHW is a transpose by
/// `[0, 3, 1, 2]`, as is a user's `permute(0, 3, 1, 2)`: that one ends the
/// trail, as do reshapes, which the partitioner only feeds NCHW.
fn channels_last_softmax(g: &Graph) -> Option<usize> {
    let mut nhwc = vec![false; g.values.len()];
    for (i, node) in g.nodes.iter().enumerate() {
        let four_d = |x: usize| g.values.get(x).is_some_and(|v| v.dims.len() == 4);
        let from_input = |input: usize| nhwc.get(input).copied().unwrap_or(false);
        let out_nhwc = match &node.op {
            Op::Conv2d { .. }
            | Op::Deconv2d { .. }
            | Op::Pool2d { .. }
            | Op::GlobalAvgPool { .. }
            | Op::ResizeBilinear { .. } => true,
            Op::Binary {
                op: BinaryOp::PReLU, ..
            } => true,
            Op::Unary {
                op: UnaryOp::Softmax,
                input,
                ..
            } => {
                let d = g.values.get(*input).map(|v| v.dims.as_slice()).unwrap_or(&[]);
                if from_input(*input) && d.len() == 4 && (d[2] != 1 || d[3] != 1) {
                    return Some(i);
                }
                from_input(*input)
            }
            Op::Unary { input, .. } | Op::Slice { input, .. } | Op::Pad { input, .. } => from_input(*input),
            Op::Binary { a, b, .. } => from_input(*a) || from_input(*b),
            Op::Concat { inputs, .. } => inputs.iter().any(|&x| from_input(x)),
            Op::Transpose { perm, input, .. } => from_input(*input) && perm.as_slice() != [0, 3, 1, 2],
            Op::FullyConnected { .. } | Op::Reshape { .. } | Op::BatchMatMul { .. } => false,
        };
        let out = node.op.output();
        if out_nhwc && four_d(out) {
            nhwc[out] = true;
        }
    }
    None
}

fn has_clamp(node: &XNode) -> bool {
    node.min > f32::NEG_INFINITY || node.max < f32::INFINITY
}
