"""ExecuTorch's runtime as the reference of `ptec check`: runs a bundled
case with ExecuTorch's Python runtime (its pybindings), logging every
instruction's outputs to an ETDump debug buffer as ptec's traced run
does, and names the first instruction whose outputs differ.

    python reference.py REQUEST.json

The request (written by compiler/cli/src/reference.rs) names the program
(`program`, `program_is_bundle`), the bundle of the cases (`cases`), the
case (`method`, `index`; the cases before it in `before`, replayed first
as ptec does), ptec's ETDump and debug buffer, the tolerance and a
scratch directory. Prints one JSON document: see reference.rs.
"""

import json
import logging
import os
import sys
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import torch  # noqa: E402
from executorch.devtools.bundled_program.serialize import (  # noqa: E402
    deserialize_from_flatbuffer_to_bundled_program,
)
from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc  # noqa: E402
from executorch.exir.scalar_type import ScalarType  # noqa: E402
from executorch.extension.pybindings import portable_lib  # noqa: E402

# The kernels of the `llama::` and quantized operators of LLM exports are
# registered by loading their libraries; without them the runtime stops
# at the first such call (OperatorMissing, 0x14).
try:
    import executorch.kernels.quantized  # noqa: E402, F401
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: E402, F401
except ImportError:
    pass

DTYPES = {
    ScalarType.BYTE: torch.uint8,
    ScalarType.CHAR: torch.int8,
    ScalarType.SHORT: torch.int16,
    ScalarType.INT: torch.int32,
    ScalarType.LONG: torch.int64,
    ScalarType.HALF: torch.float16,
    ScalarType.FLOAT: torch.float32,
    ScalarType.DOUBLE: torch.float64,
    ScalarType.BOOL: torch.bool,
    ScalarType.BFLOAT16: torch.bfloat16,
}


def to_torch(value):
    v = value.val
    if hasattr(v, "int_val"):
        return v.int_val
    if hasattr(v, "double_val"):
        return v.double_val
    if hasattr(v, "bool_val"):
        return v.bool_val
    dtype = DTYPES[ScalarType(v.scalar_type)]
    order = [int(d) for d in v.dim_order] or list(range(len(v.sizes)))
    stored = [v.sizes[d] for d in order]
    t = torch.frombuffer(bytearray(v.data), dtype=dtype) if v.data else torch.empty(0, dtype=dtype)
    t = t.reshape(stored)
    # Stored in dim order: permute back to the logical order.
    inverse = sorted(range(len(order)), key=lambda k: order[k])
    return t.permute(inverse).contiguous()


def logged(dump, debug):
    """{(instruction, node): [tensor, ...]} of the last run in an ETDump,
    and the name of each one's events. `node` is the delegate debug id of
    an output ptec logs for one node of a delegate call it compiled, None
    for an instruction's own."""
    runs = [r for r in dump.run_data if r.events]
    outputs, names = {}, {}
    for e in runs[-1].events if runs else []:
        d = e.debug_event
        if d is None or d.debug_entry is None:
            continue
        entry = d.debug_entry
        node = d.delegate_debug_id_int
        key = (d.instruction_id, None if node is None or node < 0 else node)
        tensors = [entry.tensor] if entry.tensor is not None else list(entry.tensor_list.tensors) if entry.tensor_list is not None else []
        for t in tensors:
            dtype = DTYPES.get(ScalarType(t.scalar_type))
            if dtype is None:
                continue
            count = 1
            for s in t.sizes:
                count *= s
            nbytes = count * torch.empty(0, dtype=dtype).element_size()
            raw = bytearray(debug[t.offset : t.offset + nbytes])
            x = torch.frombuffer(raw, dtype=dtype) if nbytes else torch.empty(0, dtype=dtype)
            outputs.setdefault(key, []).append(x.reshape(list(t.sizes)))
        if d.name:
            names.setdefault(key, d.name)
    return outputs, names


def main(request):
    with open(request) as f:
        req = json.load(f)
    with open(req["program"], "rb") as f:
        program = f.read()
    if req["program_is_bundle"]:
        program = deserialize_from_flatbuffer_to_bundled_program(program).program
    with open(req["cases"], "rb") as f:
        suites = deserialize_from_flatbuffer_to_bundled_program(f.read()).method_test_suites
    case = lambda method, index: next(s for s in suites if s.method_name == method).test_cases[index]
    data = None
    if req.get("data"):
        with open(req["data"], "rb") as f:
            data = f.read()
    extra = {"data_map_buffer": data} if data is not None else {}
    module = portable_lib._load_for_executorch_from_buffer(
        program, enable_etdump=True, debug_buffer_size=req["debug_buffer_size"], **extra
    )
    for method, index in req["before"]:
        module.run_method(method, [to_torch(v) for v in case(method, index).inputs])
    target = case(req["method"], req["index"])
    outputs = module.run_method(req["method"], [to_torch(v) for v in target.inputs])
    expected = [to_torch(v) for v in target.expected_outputs]
    rtol, atol = req["rtol"], req["atol"]

    def close(a, b):
        return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol, equal_nan=True))

    matches_expected = len(outputs) == len(expected) and all(
        close(o, e) if isinstance(o, torch.Tensor) and isinstance(e, torch.Tensor) else o == e
        for o, e in zip(outputs, expected)
    )
    etdump = os.path.join(req["scratch"], "reference.etdp")
    buffer = os.path.join(req["scratch"], "reference.bin")
    module.write_etdump_result_to_file(etdump, buffer)
    with open(etdump, "rb") as f:
        ref_dump = deserialize_from_etdump_flatcc(f.read())
    with open(buffer, "rb") as f:
        ref, ref_names = logged(ref_dump, f.read())
    with open(req["etdump"], "rb") as f:
        ptec_dump = deserialize_from_etdump_flatcc(f.read())
    with open(req["debug_buffer"], "rb") as f:
        ours, our_names = logged(ptec_dump, f.read())

    # In the order ptec ran them: the first whose outputs ExecuTorch's do
    # not match is where the numbers go wrong.
    compared, unmatched, first = 0, [], None
    for (instruction, node), tensors in ours.items():
        # ExecuTorch logs no node of a delegate call, only the call's
        # arguments: its inputs, then its outputs, which ptec logs.
        theirs = ref.get((instruction, None)) if node is None else None
        if theirs is not None and our_names.get((instruction, None)) == "DELEGATE_CALL":
            theirs = theirs[len(theirs) - len(tensors) :] if len(theirs) >= len(tensors) else None
        # ptec may log fewer outputs than the operator has (a max pooling's
        # values without the indices it never computes): the first ones.
        if theirs is None or len(theirs) < len(tensors):
            unmatched.append(instruction)
            continue
        compared += 1
        for k, (a, b) in enumerate(zip(tensors, theirs)):
            if a.numel() != b.numel():
                first = first or {"output": k, "why": f"sizes {list(a.shape)}, ExecuTorch's {list(b.shape)}"}
            elif not close(a.reshape(b.shape), b):
                diff = (a.double().reshape(b.shape) - b.double()).abs()
                diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
                first = {
                    "output": k,
                    "why": f"max |ptec - ExecuTorch| {diff.max().item():.3g} where ExecuTorch's values reach {b.double().abs().max().item():.3g}",
                }
            if first is not None:
                key = (instruction, None)
                first.update(instruction=instruction, name=our_names.get(key) or ref_names.get(key, ""))
                break
        if first is not None:
            break
    json.dump(
        {
            "compared": compared,
            "unmatched": unmatched,
            "first": first,
            "reference_matches_expected": matches_expected,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
