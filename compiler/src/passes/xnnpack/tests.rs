//! The pass on subgraphs built here, value by value: what it lowers to, and
//! the located errors of subgraphs it must refuse.
use crate::error::{ErrorKind, Errors};
use crate::ir::*;
use flatbuffers::FlatBufferBuilder;
use ptec_schema::xnnpack as fb;

/// The pass on `p`, whose blobs are byte ranges of `bytes`, read first as
/// the read stage reads them.
fn lower_blobs(p: &mut Program, bytes: &[u8]) -> Result<(), Errors> {
    let graphs = crate::read::xnnpack::Graphs::read(p, bytes);
    super::lower_xnnpack_delegates(p, graphs, ptec_runtime::kernels::nhwc::Algorithm::Winograd)
}

const INPUT: u32 = 1;
const OUTPUT: u32 = 2;
const NONE: u32 = u32::MAX;

/// One subgraph value: id, dims, constant index, external id, flags.
struct V(u32, &'static [u32], u32, u32, u32);

enum N {
    Unary(fb::NodeUnion, u32, u32),
    Binary(fb::NodeUnion, u32, u32, u32),
    /// input, filter, bias, output
    Fc(u32, u32, u32, u32),
}

/// A blob: `XH00` header, the subgraph, then `consts` as its constant
/// region; `constants` are the `constant_data` entries after the reserved
/// one, `(offset, size)` in that region.
fn blob(values: &[V], nodes: &[N], constants: &[(u64, u64)], consts: &[u8], datatype: fb::Datatype) -> Vec<u8> {
    let mut b = FlatBufferBuilder::new();
    let xvalues: Vec<_> = values
        .iter()
        .map(|&V(id, dims, cidx, ext, flags)| {
            let dims = b.create_vector(dims);
            let tv = fb::TensorValue::create(
                &mut b,
                &fb::TensorValueArgs {
                    datatype,
                    num_dims: 0,
                    dims: Some(dims),
                    constant_buffer_idx: cidx,
                    external_id: ext,
                    flags,
                    id_out: id,
                    dq_datatype: fb::Datatype::invalid,
                },
            );
            fb::Value::create(
                &mut b,
                &fb::ValueArgs {
                    value_type: fb::ValueUnion::TensorValue,
                    value: Some(tv.as_union_value()),
                },
            )
        })
        .collect();
    let xnodes: Vec<_> = nodes
        .iter()
        .map(|n| {
            let (node_type, node) = match *n {
                N::Unary(t, input_id, output_id) => (
                    t,
                    fb::Node1x1::create(
                        &mut b,
                        &fb::Node1x1Args {
                            input_id,
                            output_id,
                            flags: 0,
                        },
                    )
                    .as_union_value(),
                ),
                N::Binary(t, input1_id, input2_id, output_id) => (
                    t,
                    fb::Node2x1::create(
                        &mut b,
                        &fb::Node2x1Args {
                            input1_id,
                            input2_id,
                            output_id,
                            flags: 0,
                        },
                    )
                    .as_union_value(),
                ),
                N::Fc(input1_id, filter_id, bias_id, output_id) => (
                    fb::NodeUnion::XNNFullyConnected,
                    fb::FullyConnected::create(
                        &mut b,
                        &fb::FullyConnectedArgs {
                            input1_id,
                            filter_id,
                            bias_id,
                            output_id,
                            flags: 0,
                        },
                    )
                    .as_union_value(),
                ),
            };
            fb::Node::create(
                &mut b,
                &fb::NodeArgs {
                    node_type,
                    node: Some(node),
                    debug_handle: 0,
                    output_min_max: None,
                },
            )
        })
        .collect();
    let mut entries = vec![fb::ConstantDataOffset::create(
        &mut b,
        &fb::ConstantDataOffsetArgs::default(),
    )];
    for &(offset, size_) in constants {
        entries.push(fb::ConstantDataOffset::create(
            &mut b,
            &fb::ConstantDataOffsetArgs {
                offset,
                size_,
                named_key: None,
            },
        ));
    }
    let (xvalues, xnodes, constant_data) = (
        b.create_vector(&xvalues),
        b.create_vector(&xnodes),
        b.create_vector(&entries),
    );
    let root = fb::XNNGraph::create(
        &mut b,
        &fb::XNNGraphArgs {
            xvalues: Some(xvalues),
            xnodes: Some(xnodes),
            num_externs: 4,
            constant_data: Some(constant_data),
            ..Default::default()
        },
    );
    b.finish(root, Some("XN01"));
    let graph = b.finished_data();
    let fb_end = 32 + graph.len();
    let const_off = fb_end.div_ceil(16) * 16;
    let mut out = vec![0u8; const_off + consts.len()];
    out[4..8].copy_from_slice(b"XH00");
    out[8..10].copy_from_slice(&30u16.to_le_bytes());
    out[10..14].copy_from_slice(&32u32.to_le_bytes());
    out[14..18].copy_from_slice(&(graph.len() as u32).to_le_bytes());
    out[18..22].copy_from_slice(&(const_off as u32).to_le_bytes());
    out[22..30].copy_from_slice(&(consts.len() as u64).to_le_bytes());
    out[32..fb_end].copy_from_slice(graph);
    out[const_off..].copy_from_slice(consts);
    out
}

/// A program whose method calls the delegate of `blob` (all of `file`)
/// with planned f32 tensors of `sizes` as its arguments.
fn program(blob_len: usize, sizes: &[&[usize]]) -> Program {
    let values = sizes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Value::Tensor(Tensor {
                dtype: ScalarType::Float,
                sizes: s.to_vec(),
                dim_order: (0..s.len() as u8).collect(),
                dynamism: Dynamism::Static,
                placement: Placement::Planned {
                    buffer: 1,
                    offset: i as u64 * 1024,
                },
            })
        })
        .collect();
    let data = DataRef {
        source: DataSource::Program,
        offset: 0,
        len: blob_len,
    };
    Program {
        version: 0,
        range: data,
        methods: vec![Method {
            name: "forward".into(),
            values,
            inputs: vec![0],
            outputs: vec![sizes.len() - 1],
            instructions: vec![Instruction::Delegate {
                delegate: 0,
                args: (0..sizes.len()).collect(),
            }],
            operators: vec![],
            delegates: vec![Delegate {
                id: super::BACKEND_ID.into(),
                processed: data,
                inline: true,
                compile_specs: vec![],
            }],
            buffer_sizes: vec![0, 1024 * sizes.len() as u64],
            program_buffers: 2,
            temporaries_buffer: None,
            stacktraces: None,
            origins: Vec::new(),
            read_operators: Vec::new(),
            delegate_outputs: Default::default(),
            channels_last: Default::default(),
        }],
        segments: vec![],
        named_data: vec![],
        external_files: vec![],
    }
}

fn lower(values: &[V], nodes: &[N], sizes: &[&[usize]]) -> Result<Program, Errors> {
    lower_with(values, nodes, sizes, &[], &[], fb::Datatype::fp32)
}

fn lower_with(
    values: &[V],
    nodes: &[N],
    sizes: &[&[usize]],
    constants: &[(u64, u64)],
    consts: &[u8],
    datatype: fb::Datatype,
) -> Result<Program, Errors> {
    let bytes = blob(values, nodes, constants, consts, datatype);
    let mut p = program(bytes.len(), sizes);
    lower_blobs(&mut p, &bytes).map(|_| p)
}

fn ops(m: &Method) -> Vec<String> {
    m.instructions
        .iter()
        .map(|i| match i {
            Instruction::Kernel { op, .. } => m.operators[*op].full_name(),
            other => other.kind().to_string(),
        })
        .collect()
}

#[test]
fn nodes_become_kernel_calls_over_the_call_arguments() {
    // out = sigmoid(x) + x, through an intermediate.
    let p = lower(
        &[
            V(0, &[2, 3], 0, 0, INPUT),
            V(1, &[2, 3], 0, NONE, 0),
            V(2, &[2, 3], 0, 1, OUTPUT),
        ],
        &[
            N::Unary(fb::NodeUnion::XNNSigmoid, 0, 1),
            N::Binary(fb::NodeUnion::XNNAdd, 1, 0, 2),
        ],
        &[&[2, 3], &[2, 3]],
    )
    .unwrap();
    let m = &p.methods[0];
    assert_eq!(ops(m), ["aten::sigmoid.out", "aten::add.out"]);
    // The compiled delegate is gone: no backend is left to give the program.
    assert!(m.delegates.is_empty());
    let Instruction::Kernel { args, .. } = &m.instructions[0] else {
        unreachable!()
    };
    let (x, tmp) = (args[0], args[1]);
    assert_eq!(x, 0);
    // The pass leaves the intermediate unplanned; the temporaries' pass
    // puts it where the plan is free while it lives: past the input (bytes
    // 0..24 of the plan), before the output (at 1024).
    assert_eq!(m.values[tmp].as_tensor().unwrap().placement, Placement::Unplanned);
    let mut placed = m.clone();
    crate::plan::temporaries::plan_temporaries(&mut placed);
    let t = placed.values[tmp].as_tensor().unwrap();
    assert_eq!(t.placement, Placement::Planned { buffer: 1, offset: 64 });
    assert_eq!(placed.buffer_sizes, vec![0, 2048]);
    let Instruction::Kernel { args, .. } = &m.instructions[1] else {
        unreachable!()
    };
    assert_eq!((args[0], args[1], args[3], args[4]), (tmp, 0, 1, 1));
    assert_eq!(m.values[args[2]], Value::Int(1));
}

#[test]
fn a_varying_input_makes_the_intermediates_vary() {
    // sigmoid(x) + x with x of a dynamic shape (bounded by its sizes):
    // the intermediate varies too, and each kernel follows the live sizes.
    let values = [
        V(0, &[2, 3], 0, 0, INPUT),
        V(1, &[2, 3], 0, NONE, 0),
        V(2, &[2, 3], 0, 1, OUTPUT),
    ];
    let nodes = [
        N::Unary(fb::NodeUnion::XNNSigmoid, 0, 1),
        N::Binary(fb::NodeUnion::XNNAdd, 1, 0, 2),
    ];
    let bytes = blob(&values, &nodes, &[], &[], fb::Datatype::fp32);
    let mut p = program(bytes.len(), &[&[2, 3], &[2, 3]]);
    for v in &mut p.methods[0].values {
        if let Value::Tensor(t) = v {
            t.dynamism = Dynamism::DynamicBound;
        }
    }
    lower_blobs(&mut p, &bytes).unwrap();
    let m = &p.methods[0];
    assert_eq!(ops(m), ["aten::sigmoid.out", "aten::add.out"]);
    let Instruction::Kernel { args, .. } = &m.instructions[0] else {
        unreachable!()
    };
    assert_eq!(m.values[args[1]].as_tensor().unwrap().dynamism, Dynamism::DynamicBound);
}

#[test]
fn a_constant_weight_is_kept_packed_in_a_buffer_of_its_own() {
    let weights: Vec<u8> = (0..12).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let p = lower_with(
        &[
            V(0, &[1, 4], 0, 0, INPUT),
            V(1, &[3, 4], 1, NONE, 0),
            V(2, &[1, 3], 0, 1, OUTPUT),
        ],
        &[N::Fc(0, 1, NONE, 2)],
        &[&[1, 4], &[1, 3]],
        &[(0, 48)],
        &weights,
        fb::Datatype::fp32,
    )
    .unwrap();
    let m = &p.methods[0];
    assert_eq!(ops(m), ["ptec_xnn::fully_connected.out"]);
    let Instruction::Kernel { args, .. } = &m.instructions[0] else {
        unreachable!()
    };
    let filter = m.values[args[1]].as_tensor().unwrap();
    let Placement::Constant { data } = filter.placement else {
        panic!("{filter:?}")
    };
    assert_eq!(data.len, 48);
    assert_eq!(m.values[args[2]], Value::Null);
    let packed = m.values[args[6]].as_tensor().unwrap();
    assert_eq!(packed.placement, Placement::Planned { buffer: 2, offset: 0 });
    let len = ptec_runtime::kernels::gemm::packed_len(4, 3);
    assert_eq!(packed.sizes, [len]);
    assert_eq!(m.buffer_sizes[2], (len as u64 * 4).div_ceil(64) * 64);
}

#[test]
fn jumps_and_stack_traces_follow_the_lowered_instructions() {
    let bytes = blob(
        &[
            V(0, &[2], 0, 0, INPUT),
            V(1, &[2], 0, NONE, 0),
            V(2, &[2], 0, 1, OUTPUT),
        ],
        &[
            N::Unary(fb::NodeUnion::XNNExp, 0, 1),
            N::Unary(fb::NodeUnion::XNNTanh, 1, 2),
        ],
        &[],
        &[],
        fb::Datatype::fp32,
    );
    let mut p = program(bytes.len(), &[&[2], &[2]]);
    let m = &mut p.methods[0];
    m.values.push(Value::Bool(false));
    m.instructions.insert(
        0,
        Instruction::JumpFalse {
            cond: 2,
            destination: 2,
        },
    );
    m.instructions.push(Instruction::Free { value: 1 });
    m.stacktraces = Some(vec![vec![], vec![], vec![]]);
    lower_blobs(&mut p, &bytes).unwrap();
    let m = &p.methods[0];
    assert_eq!(ops(m), ["JumpFalseCall", "aten::exp.out", "aten::tanh.out", "FreeCall"]);
    assert_eq!(
        m.instructions[0],
        Instruction::JumpFalse {
            cond: 2,
            destination: 3
        }
    );
    assert_eq!(m.stacktraces.as_ref().map(Vec::len), Some(4));
}

/// The first error of a lowering that must fail, and its location.
fn error(r: Result<Program, Errors>) -> (ErrorKind, String) {
    let e = r.expect_err("the pass accepted a bad subgraph");
    let d = e.first().clone();
    assert_eq!(d.at.method.as_deref(), Some("forward"), "{d}");
    assert_eq!(d.at.instruction, Some(0), "{d}");
    (d.kind, d.at.within.unwrap_or_default())
}

#[test]
fn prelu_becomes_ptecs_prelu_over_the_slope() {
    // out = prelu(x, slope), the slope one per channel of the last dim.
    let p = lower(
        &[
            V(0, &[2, 3], 0, 0, INPUT),
            V(1, &[3], 0, 1, INPUT),
            V(2, &[2, 3], 0, 2, OUTPUT),
        ],
        &[N::Binary(fb::NodeUnion::XNNPReLU, 0, 1, 2)],
        &[&[2, 3], &[3], &[2, 3]],
    )
    .unwrap();
    let m = &p.methods[0];
    assert_eq!(ops(m), [crate::names::PRELU]);
    let Instruction::Kernel { args, .. } = &m.instructions[0] else {
        unreachable!()
    };
    assert_eq!(args[..], [0, 1, 2, 2]);
}

#[test]
fn unsupported_nodes_and_datatypes_are_named() {
    let (kind, within) = error(lower(
        &[V(0, &[4], 0, 0, INPUT), V(1, &[4], 0, 1, OUTPUT)],
        &[N::Unary(fb::NodeUnion::XNNConvert, 0, 1)],
        &[&[4], &[4]],
    ));
    assert!(
        matches!(&kind, ErrorKind::Unsupported { detail } if detail.contains("XNNConvert")),
        "{kind}"
    );
    assert_eq!(within, "XNNPACK node 0 (XNNConvert)");
    let (kind, within) = error(lower_with(
        &[V(0, &[4], 0, 0, INPUT), V(1, &[4], 0, 1, OUTPUT)],
        &[N::Unary(fb::NodeUnion::XNNSigmoid, 0, 1)],
        &[&[4], &[4]],
        &[],
        &[],
        fb::Datatype::qint8,
    ));
    assert!(
        matches!(&kind, ErrorKind::Unsupported { detail } if detail.contains("qint8")),
        "{kind}"
    );
    assert_eq!(within, "XNNPACK value id 0");
}

#[test]
fn inconsistent_subgraphs_are_located() {
    let io = |out_dims: &'static [u32]| [V(0, &[4], 0, 0, INPUT), V(1, out_dims, 0, 1, OUTPUT)];
    // A node naming an undefined value.
    let (kind, within) = error(lower(
        &io(&[4]),
        &[N::Unary(fb::NodeUnion::XNNExp, 0, 7)],
        &[&[4], &[4]],
    ));
    assert!(matches!(kind, ErrorKind::BadDelegate { .. }), "{kind}");
    assert_eq!(within, "XNNPACK node 0 (XNNExp)");
    // An output that does not have the node's shape.
    let (kind, _) = error(lower(
        &io(&[5]),
        &[N::Unary(fb::NodeUnion::XNNExp, 0, 1)],
        &[&[4], &[5]],
    ));
    assert!(
        matches!(&kind, ErrorKind::BadDelegate { detail, .. } if detail.contains("[5]")),
        "{kind}"
    );
    // A value read before any node writes it.
    let (kind, within) = error(lower(
        &[
            V(0, &[4], 0, 0, INPUT),
            V(1, &[4], 0, NONE, 0),
            V(2, &[4], 0, 1, OUTPUT),
        ],
        &[
            N::Unary(fb::NodeUnion::XNNExp, 1, 2),
            N::Unary(fb::NodeUnion::XNNExp, 0, 1),
        ],
        &[&[4], &[4]],
    ));
    assert!(matches!(kind, ErrorKind::BadDelegate { .. }), "{kind}");
    assert_eq!(within, "XNNPACK node 0 (XNNExp)");
    // An external id past the call's arguments.
    let (kind, _) = error(lower(
        &[V(0, &[4], 0, 3, INPUT), V(1, &[4], 0, 1, OUTPUT)],
        &[N::Unary(fb::NodeUnion::XNNExp, 0, 1)],
        &[&[4], &[4]],
    ));
    assert!(matches!(kind, ErrorKind::IndexOutOfRange { index: 3, .. }), "{kind}");
    // An argument whose sizes differ from its value's dims.
    let (kind, _) = error(lower(
        &io(&[4]),
        &[N::Unary(fb::NodeUnion::XNNExp, 0, 1)],
        &[&[2, 2], &[4]],
    ));
    assert!(matches!(kind, ErrorKind::BadDelegate { .. }), "{kind}");
    // A constant past the constant region.
    let (kind, within) = error(lower_with(
        &[
            V(0, &[1, 4], 0, 0, INPUT),
            V(1, &[3, 4], 1, NONE, 0),
            V(2, &[1, 3], 0, 1, OUTPUT),
        ],
        &[N::Fc(0, 1, NONE, 2)],
        &[&[1, 4], &[1, 3]],
        &[(16, 48)],
        &[0; 48],
        fb::Datatype::fp32,
    ));
    assert!(matches!(kind, ErrorKind::OutsideData { .. }), "{kind}");
    assert_eq!(within, "XNNPACK value id 1");
}

#[test]
fn calls_of_other_backends_stay_and_are_renumbered() {
    let bytes = blob(
        &[V(0, &[2], 0, 0, INPUT), V(1, &[2], 0, 1, OUTPUT)],
        &[N::Unary(fb::NodeUnion::XNNExp, 0, 1)],
        &[],
        &[],
        fb::Datatype::fp32,
    );
    let mut p = program(bytes.len(), &[&[2], &[2]]);
    let m = &mut p.methods[0];
    let mut other = m.delegates[0].clone();
    other.id = "SomeOtherBackend".into();
    m.delegates.push(other);
    m.instructions.push(Instruction::Delegate {
        delegate: 1,
        args: vec![1, 0],
    });
    lower_blobs(&mut p, &bytes).unwrap();
    let m = &p.methods[0];
    assert_eq!(ops(m), ["aten::exp.out", "DelegateCall"]);
    assert_eq!(m.delegates.len(), 1);
    assert_eq!(m.delegates[0].id, "SomeOtherBackend");
    assert_eq!(
        m.instructions[1],
        Instruction::Delegate {
            delegate: 0,
            args: vec![1, 0]
        }
    );
}

/// tests/fixtures/xnnpack_conv.pte (a stem convolution, a depthwise one,
/// and a pointwise one whose result is added to its input): lowered, its
/// convolutions are the channels-last pass's calls with XNNPACK's filters,
/// and that pass then absorbs the residual add.
#[test]
fn convolutions_become_folded_calls_that_absorb_the_residual_add() {
    use crate::names::folded;
    use crate::passes::channels_last::int;
    use ptec_runtime::kernels::nhwc::Algorithm;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/xnnpack_conv.pte");
    let bytes = std::fs::read(path).unwrap();
    // The subgraphs the read stage read with the program.
    let mut loaded = crate::load(&bytes, &[]).unwrap();
    crate::passes::lower_delegates(&mut loaded, &crate::Options::new()).unwrap();
    let mut program = loaded.program.unwrap();
    let lowered = program.methods[0].clone();
    let folded_calls = |m: &Method| -> Vec<Vec<usize>> {
        m.instructions
            .iter()
            .filter_map(|i| crate::ir::kernel_name(m, i))
            .filter(|(name, _)| name == folded::NAME)
            .map(|(_, args)| args.to_vec())
            .collect()
    };
    let calls = folded_calls(&lowered);
    assert_eq!(calls.len(), 3);
    for args in &calls {
        assert_eq!(int(&lowered, args[folded::LAYOUT]), Some(1));
        assert_eq!(lowered.values[args[folded::RESIDUAL]], Value::Null);
    }
    assert_eq!(ops(&lowered).iter().filter(|o| o.starts_with("aten::add")).count(), 1);
    for m in &mut program.methods {
        crate::passes::channels_last::convert_method(m, Algorithm::Winograd);
        crate::passes::conv_chains::fuse_residual_adds(m);
        crate::passes::conv_chains::fuse_chains(m);
    }
    crate::verify::verify_program(&program, &[]).unwrap();
    let m = &program.methods[0];
    assert!(!ops(m).iter().any(|o| o.starts_with("aten::add")));
    let calls = folded_calls(m);
    let with_residual: Vec<_> = calls
        .iter()
        .filter(|a| m.values[a[folded::RESIDUAL]] != Value::Null)
        .collect();
    // The pointwise convolution adds its own input.
    assert_eq!(with_residual.len(), 1);
    assert_eq!(with_residual[0][folded::RESIDUAL], with_residual[0][folded::X]);
}
