//! Lowering the nodes of statically quantized (QS8) subgraphs.
//!
//! Quantized values become `i8` tensors (biases `i32`); their scales and
//! zero points become arguments of `ptec_xnn::qs8_*` calls, whose kernels
//! compute what XNNPACK's do, to the quantum. Nodes that only move bytes
//! (reshape, transpose, slice, concatenate, pad) keep their aten calls on
//! the `i8` tensors, when every value they touch shares one quantization,
//! as XNNPACK requires.
use super::*;
use crate::names::{qd8_fully_connected, qs8};
use ptec_runtime::kernels::qs8 as qs8_kernels;
use ptec_runtime::kernels::qs8::quantize_bound;

/// Folds each quantized clamp into the node that produces its input, as
/// XNNPACK's subgraph optimization does (`merge_clamps`): when the clamp
/// alone reads that value and a convolution, fully connected layer, max
/// pooling or another clamp writes it, the producer takes the
/// intersection of both ranges (in `f32`) and writes the clamp's output.
pub(super) fn merge_clamps(g: &mut Graph) {
    let mut readers = vec![0usize; g.values.len()];
    for n in &g.nodes {
        for x in n.op.inputs() {
            readers[x] += 1;
        }
    }
    let mut producer: Vec<Option<usize>> = vec![None; g.values.len()];
    let mut dropped = vec![false; g.nodes.len()];
    for i in 0..g.nodes.len() {
        producer[g.nodes[i].op.output()] = Some(i);
        let Op::Unary {
            op: UnaryOp::Clamp,
            input,
            out,
        } = g.nodes[i].op
        else {
            continue;
        };
        let Some(p) = producer[input] else { continue };
        let v = &g.values[input];
        let mergeable = matches!(
            g.nodes[p].op,
            Op::Conv2d { .. }
                | Op::FullyConnected { .. }
                | Op::Pool2d { max: true, .. }
                | Op::Unary { op: UnaryOp::Clamp, .. }
        );
        if !mergeable || readers[input] != 1 || v.quant.is_none() || v.kind != ValueKind::Internal {
            continue;
        }
        let (min, max) = (g.nodes[i].min, g.nodes[i].max);
        let node = &mut g.nodes[p];
        node.min = node.min.max(min);
        node.max = node.max.min(max);
        node.op.set_output(out);
        producer[out] = Some(p);
        dropped[i] = true;
    }
    let mut k = 0;
    g.nodes.retain(|_| {
        k += 1;
        !dropped[k - 1]
    });
}

/// An activation's per-tensor quantization.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Act {
    pub scale: f32,
    pub zero_point: i32,
}

impl CallLowering<'_> {
    /// Whether `node` reads or writes a quantized value.
    pub(super) fn is_quantized(&self, node: &XNode) -> bool {
        let mut values = node.op.inputs();
        values.push(node.op.output());
        values.iter().any(|&x| self.g.values[x].quant.is_some())
    }

    /// Lowers a node over quantized values; `Ok(false)` leaves a node that
    /// only moves bytes to the `f32` lowering, whose aten calls serve
    /// `i8` tensors alike.
    pub(super) fn quantized_node(&mut self, i: usize, node: &XNode) -> Result<bool> {
        match &node.op {
            Op::Unary {
                op: UnaryOp::Convert,
                input,
                out,
            } if self.is_dynamic_quant(*out) => {
                self.dynamic_convert(i, node, *input, *out)?;
                return Ok(true);
            }
            Op::FullyConnected { input, .. } if self.is_dynamic_quant(*input) => {
                self.qd8_fully_connected(i, node)?;
                return Ok(true);
            }
            _ => {}
        }
        if self.dynamic {
            return Err(self.node_unsupported(
                i,
                node,
                format!(
                    "XNNPACK node kind {} over quantized values of a dynamic shape",
                    node.kind
                ),
            ));
        }
        match &node.op {
            Op::Unary {
                op: UnaryOp::Convert,
                input,
                out,
            } => self.convert(i, node, *input, *out)?,
            Op::Conv2d { depthwise, conv } => self.qs8_conv(i, node, *depthwise, conv)?,
            Op::FullyConnected {
                input,
                filter,
                bias,
                out,
                weight_transposed,
            } => {
                let (k, n) = self.fc_sizes(i, node)?;
                let (x, y) = (self.act(i, node, *input)?, self.act(i, node, *out)?);
                let (scales, scale) = self.weight_scales(i, node, *filter, 0)?;
                let mut args = vec![
                    self.slot(*input),
                    self.slot(*filter),
                    self.bias(i, node, *bias)?,
                    scales,
                    self.double(scale),
                    self.push(Value::Bool(*weight_transposed)),
                ];
                let kept = self.kept_packing(*filter, qs8_kernels::Layout::fully_connected(k, n).packed_len());
                args.push(kept);
                self.tail(&mut args, node, x, y, *out);
                self.kernel(qs8::FULLY_CONNECTED, args);
            }
            Op::Pool2d {
                max: true,
                input,
                out,
                padding,
                kernel,
                stride,
                dilation,
            } => {
                self.pool_window(i, node)?;
                let (x, y) = (self.act(i, node, *input)?, self.act(i, node, *out)?);
                if x != y {
                    return Err(self.node_error(i, node, "max pooling between different quantizations".into()));
                }
                let mut args = vec![
                    self.slot(*input),
                    self.int_list(kernel),
                    self.int_list(stride),
                    self.int_list(padding),
                    self.int_list(dilation),
                ];
                self.tail(&mut args, node, x, y, *out);
                self.kernel(qs8::MAX_POOL2D_NHWC, args);
            }
            Op::GlobalAvgPool { input, out } => {
                let (x, y) = (self.act(i, node, *input)?, self.act(i, node, *out)?);
                let d = self.dims(*input);
                let [n, _, _, c] = *d else {
                    return Err(self.node_error(i, node, format!("input dims {d:?} are not [N, H, W, C]")));
                };
                let o = self.dims(*out);
                if o.iter().product::<usize>() != n * c || o.last() != Some(&c) {
                    self.expect_dims(i, node, *out, &[n, 1, 1, c])?;
                }
                let mut args = vec![self.slot(*input)];
                self.tail(&mut args, node, x, y, *out);
                self.kernel(qs8::GLOBAL_AVG_POOL2D_NHWC, args);
            }
            Op::Binary {
                op: op @ (BinaryOp::Add | BinaryOp::Subtract | BinaryOp::Multiply),
                a,
                b,
                out,
            } => {
                let want = broadcast(self.dims(*a), self.dims(*b)).ok_or_else(|| {
                    self.node_error(
                        i,
                        node,
                        format!("dims {:?} and {:?} do not broadcast", self.dims(*a), self.dims(*b)),
                    )
                })?;
                self.expect_dims(i, node, *out, &want)?;
                let (xa, xb, y) = (self.act(i, node, *a)?, self.act(i, node, *b)?, self.act(i, node, *out)?);
                let mut args = vec![
                    self.slot(*a),
                    self.slot(*b),
                    self.double(xb.scale),
                    self.int_signed(xb.zero_point),
                ];
                self.tail(&mut args, node, xa, y, *out);
                let name = match op {
                    BinaryOp::Add => qs8::ADD,
                    BinaryOp::Subtract => qs8::SUB,
                    _ => qs8::MUL,
                };
                self.kernel(name, args);
            }
            Op::Unary {
                op: UnaryOp::Clamp,
                input,
                out,
            } => {
                self.same_quantization(i, node, &[*input, *out])?;
                let y = self.act(i, node, *out)?;
                let lo = quantize_bound(node.min, y.scale, y.zero_point);
                let hi = quantize_bound(node.max, y.scale, y.zero_point);
                let args = vec![self.slot(*input), self.int_signed(lo), self.int_signed(hi)];
                let o = self.slot(*out);
                self.aten(CLAMP, args, o);
            }
            Op::Transpose { input, out, .. }
            | Op::Reshape { input, out, .. }
            | Op::Slice { input, out, .. }
            | Op::Pad { input, out, .. } => {
                self.same_quantization(i, node, &[*input, *out])?;
                return Ok(false);
            }
            Op::Concat { inputs, out, .. } => {
                let mut all = inputs.clone();
                all.push(*out);
                self.same_quantization(i, node, &all)?;
                return Ok(false);
            }
            _ => {
                return Err(self.node_unsupported(
                    i,
                    node,
                    format!("XNNPACK node kind {} over quantized values", node.kind),
                ))
            }
        }
        Ok(true)
    }

    fn is_dynamic_quant(&self, x: usize) -> bool {
        matches!(
            self.g.values[x].quant,
            Some(Quantized {
                params: QParams::Dynamic { .. },
                ..
            })
        )
    }

    /// A convert to `qdint8`: XNNPACK quantizes each row inside the fully
    /// connected layers that read the result (the only readers ptec
    /// accepts), so the value is its `f32` input.
    fn dynamic_convert(&mut self, i: usize, node: &XNode, input: usize, out: usize) -> Step {
        let want = self.dims(input).to_vec();
        self.expect_dims(i, node, out, &want)?;
        if self.g.values[input].quant.is_some() {
            return Err(self.node_unsupported(i, node, "a convert to qdint8 from a quantized value".into()));
        }
        let fc_only = self.g.nodes.iter().all(|n| match &n.op {
            Op::FullyConnected {
                input, filter, bias, ..
            } => *filter != out && *bias != Some(out) && (*input != out || self.fc_rows(out)),
            other => !other.inputs().contains(&out),
        });
        if !fc_only {
            return Err(self.node_unsupported(
                i,
                node,
                "a qdint8 value read by another node than a fully connected layer over rows of its last dim".into(),
            ));
        }
        let s = self.slot(input);
        self.slots[out] = Some(s);
        Ok(())
    }

    /// Whether dynamically quantized `x` has one quantization per row of
    /// its last dim, as fully connected layers read it.
    fn fc_rows(&self, x: usize) -> bool {
        matches!(
            self.g.values[x].quant,
            Some(Quantized {
                params: QParams::Dynamic { num_nonbatch_dims: 1 },
                ..
            })
        )
    }

    /// A fully connected layer over a `qdint8` input and `qcint8`,
    /// `qcint4` or `qbint4` weights, with an `f32` bias and output.
    fn qd8_fully_connected(&mut self, i: usize, node: &XNode) -> Step {
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
        let (k, n) = self.fc_sizes(i, node)?;
        if *weight_transposed || !self.fc_rows(*input) {
            return Err(self.node_unsupported(
                i,
                node,
                "a dynamically quantized fully connected layer with transposed weights or rows other than the last dim"
                    .into(),
            ));
        }
        let plain = |x: Option<usize>| x.is_none_or(|x| self.g.values[x].quant.is_none());
        if !plain(*bias) || !plain(Some(*out)) {
            return Err(self.node_error(i, node, "the bias and output of a qdint8 layer must be fp32".into()));
        }
        let w = &self.g.values[*filter];
        let (scales, group) = match &w.quant {
            Some(Quantized {
                elem: QElem::I8 | QElem::I4,
                params:
                    QParams::PerChannel {
                        scales,
                        count,
                        channel_dim: 0,
                    },
            }) => (
                push_f32_tensor(self.m, vec![*count], Placement::Constant { data: *scales }),
                0,
            ),
            Some(Quantized {
                elem: QElem::I4,
                params: QParams::Blockwise { scales, count, group },
            }) => {
                let (data, count, group) = (*scales, *count, *group);
                let t = push_tensor(self.m, ScalarType::BFloat16, vec![count], Placement::Constant { data });
                (t, group)
            }
            _ => {
                return Err(self.node_error(
                    i,
                    node,
                    format!(
                        "weight value id {} of a qdint8 layer is not qcint8, qcint4 or qbint4 by output channel",
                        w.id
                    ),
                ))
            }
        };
        // A blockwise layer keeps its weight sums from run to run.
        let kept = match group {
            0 => self.null(),
            _ => self.kept_packing(*filter, ptec_runtime::kernels::qd8::blockwise_kept_len(k, n, group)),
        };
        let args = vec![
            self.slot(*input),
            self.slot(*filter),
            scales,
            self.int(group),
            self.opt_slot(*bias),
            self.double(node.min),
            self.double(node.max),
            kept,
            self.slot(*out),
        ];
        self.kernel(qd8_fully_connected::NAME, args);
        Ok(())
    }

    /// The per-tensor `i8` quantization of activation `x`.
    fn act(&self, i: usize, node: &XNode, x: usize) -> Result<Act> {
        let v = &self.g.values[x];
        match &v.quant {
            Some(Quantized {
                elem: QElem::I8,
                params: QParams::PerTensor { scale, zero_point },
            }) if (-128..=127).contains(zero_point) => Ok(Act {
                scale: *scale,
                zero_point: *zero_point,
            }),
            Some(Quantized { elem: QElem::U8, .. }) => Err(self.node_unsupported(
                i,
                node,
                format!("XNNPACK quint8 value id {} (ptec computes qint8 activations)", v.id),
            )),
            _ => Err(self.node_error(
                i,
                node,
                format!(
                    "value id {} is not an int8 activation quantized per tensor (zero point within int8)",
                    v.id
                ),
            )),
        }
    }

    /// Fails unless `values` share one per-tensor `i8` quantization.
    fn same_quantization(&self, i: usize, node: &XNode, values: &[usize]) -> Step {
        let first = self.act(i, node, values[0])?;
        for &x in &values[1..] {
            if self.act(i, node, x)? != first {
                return Err(self.node_error(
                    i,
                    node,
                    format!(
                        "values ids {} and {} differ in quantization; XNNPACK moves bytes here",
                        self.g.values[values[0]].id, self.g.values[x].id
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A weight's scales: a tensor of one per index of dim `channel_dim`
    /// (and 0), or null and the one scale of a per-tensor weight.
    fn weight_scales(&mut self, i: usize, node: &XNode, w: usize, channel_dim: usize) -> Result<(usize, f32)> {
        let v = &self.g.values[w];
        match &v.quant {
            Some(Quantized {
                elem: QElem::I8,
                params:
                    QParams::PerChannel {
                        scales,
                        count,
                        channel_dim: d,
                    },
            }) if *d == channel_dim => {
                let (scales, count) = (*scales, *count);
                let t = push_f32_tensor(self.m, vec![count], Placement::Constant { data: scales });
                Ok((t, 0.0))
            }
            Some(Quantized {
                elem: QElem::I8,
                params: QParams::PerTensor { scale, zero_point: 0 },
            }) => {
                let scale = *scale;
                Ok((self.null(), scale))
            }
            _ => Err(self.node_error(
                i,
                node,
                format!(
                    "weight value id {} is not int8 with zero point 0, per tensor or per channel of dim {channel_dim}",
                    v.id
                ),
            )),
        }
    }

    /// The `i32` bias, or null.
    fn bias(&mut self, i: usize, node: &XNode, bias: Option<usize>) -> Result<usize> {
        let Some(b) = bias else {
            return Ok(self.null());
        };
        match &self.g.values[b].quant {
            Some(Quantized { elem: QElem::I32, .. }) => Ok(self.slot(b)),
            _ => Err(self.node_error(
                i,
                node,
                format!("bias value id {} of a quantized node is not int32", self.g.values[b].id),
            )),
        }
    }

    fn int_signed(&mut self, x: i32) -> usize {
        self.push(Value::Int(x as i64))
    }

    /// Appends the [`qs8::TAIL`]: `x` and the output `y`'s quantizations,
    /// the node's clamp in quanta of `y`, and the output value.
    fn tail(&mut self, args: &mut Vec<usize>, node: &XNode, x: Act, y: Act, out: usize) {
        let qmin = quantize_bound(node.min, y.scale, y.zero_point);
        let qmax = quantize_bound(node.max, y.scale, y.zero_point);
        let tail = [
            self.double(x.scale),
            self.int_signed(x.zero_point),
            self.double(y.scale),
            self.int_signed(y.zero_point),
            self.int_signed(qmin),
            self.int_signed(qmax),
            self.slot(out),
        ];
        debug_assert_eq!(tail.len(), qs8::TAIL);
        args.extend(tail);
    }

    /// A convert between `f32` and `qint8`.
    fn convert(&mut self, i: usize, node: &XNode, input: usize, out: usize) -> Step {
        let want = self.dims(input).to_vec();
        self.expect_dims(i, node, out, &want)?;
        let (qi, qo) = (&self.g.values[input].quant, &self.g.values[out].quant);
        let (name, q) = match (qi.is_some(), qo.is_some()) {
            (false, true) => (qs8::QUANTIZE, self.act(i, node, out)?),
            (true, false) => (qs8::DEQUANTIZE, self.act(i, node, input)?),
            _ => return Err(self.node_unsupported(i, node, "an XNNPACK convert between two quantizations".into())),
        };
        let args = vec![
            self.slot(input),
            self.double(q.scale),
            self.int_signed(q.zero_point),
            self.slot(out),
        ];
        self.kernel(name, args);
        Ok(())
    }

    fn qs8_conv(&mut self, i: usize, node: &XNode, depthwise: bool, conv: &ConvParams) -> Step {
        let g = self.conv_geometry(i, node, depthwise, conv)?;
        let (x, y) = (self.act(i, node, conv.input)?, self.act(i, node, conv.out)?);
        // Output channels are the filter's first dim, the last depthwise.
        let channel_dim = if depthwise { 3 } else { 0 };
        let (scales, scale) = self.weight_scales(i, node, conv.filter, channel_dim)?;
        let mut args = vec![
            self.slot(conv.input),
            self.slot(conv.filter),
            self.bias(i, node, conv.bias)?,
            scales,
            self.double(scale),
            self.int_list(&conv.padding),
            self.int_list(&conv.stride),
            self.int_list(&conv.dilation),
            self.int(conv.groups),
            self.push(Value::Bool(depthwise)),
        ];
        // A regular convolution keeps its filter packed.
        let kept = match depthwise {
            true => self.null(),
            false => self.kept_packing(conv.filter, qs8_kernels::Layout::conv(&g).packed_len()),
        };
        args.push(kept);
        self.tail(&mut args, node, x, y, conv.out);
        self.kernel(qs8::CONV2D_NHWC, args);
        Ok(())
    }

    /// The value a constant pad writes: `value` in `input`'s quanta when
    /// it is quantized.
    pub(super) fn pad_value(&mut self, input: usize, value: f32) -> usize {
        match &self.g.values[input].quant {
            Some(Quantized {
                params: QParams::PerTensor { scale, zero_point },
                ..
            }) => {
                let q = quantize_bound(value, *scale, *zero_point);
                self.int_signed(q)
            }
            _ => self.double(value),
        }
    }
}
