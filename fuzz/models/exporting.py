"""Export a fuzz model description to an ExecuTorch program and a BP08 bundle
(eager PyTorch's outputs as the expected values), with tolerances sized from
a float64 reference run; and run `ptec check` over many bundles at once."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "tests" / "fixtures"))

# The fixtures' script pins the versions (and refuses to run with others).
from make_fixtures import PINNED  # noqa: E402,F401

import torch  # noqa: E402
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner  # noqa: E402
from executorch.devtools import BundledProgram  # noqa: E402
from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite  # noqa: E402
from executorch.devtools.bundled_program.serialize import (  # noqa: E402
    serialize_from_bundled_program_to_flatbuffer,
)
from executorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower  # noqa: E402
from executorch.exir.passes import MemoryPlanningPass  # noqa: E402

import fuzzgen  # noqa: E402

PTEC = REPO / "target" / "release" / "ptec"

RTOL = 1e-4
# Tolerances are rounded up to one of these, so that a batch of bundles needs
# only a few `ptec check` calls (the CLI takes one rtol/atol per call).
ATOL_LADDER = [2e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1]
# How far beyond eager float32's own distance from the float64 result ptec's
# float32 result may be (another summation order).
ERR_FACTOR = 20.0

warnings.filterwarnings("ignore")


class ExportFailed(Exception):
    pass


def tolerance(model, inputs, outs32):
    """(rtol, atol): atol from how far eager float32 is from the same model in
    float64. Raises fuzzgen.Rejected when a non-float output differs between
    the two (a step landed differently: not a well-posed test)."""
    ref = copy.deepcopy(model).double()
    fuzzgen.Cfg.fdt = torch.float64
    try:
        err = 0.0
        with torch.no_grad():
            for xs, o32 in zip(inputs, outs32):
                # Every float input, so that a bfloat16 or half model's
                # tolerance reflects its own precision.
                xs64 = tuple(x.double() if x.is_floating_point() else x for x in xs)
                o64 = ref(*xs64)
                # A lone tensor is one output, not a sequence of its rows.
                o64 = o64 if isinstance(o64, (tuple, list)) else (o64,)
                for a, b in zip(o32, o64):
                    if a.dtype.is_floating_point:
                        err = max(err, (a.double() - b.double()).abs().max().item())
                    elif not torch.equal(a, b.to(a.dtype)):
                        raise fuzzgen.Rejected("an integer output depends on rounding")
    finally:
        fuzzgen.Cfg.fdt = torch.float32
    # A bfloat16 or half output's distance from float64 is its own
    # rounding, not an error that grows with the order of sums: two such
    # distances are as far as two implementations that round well differ.
    low = any(o.dtype in (torch.bfloat16, torch.float16) for o32 in outs32 for o in o32)
    # Outputs far below 1 (untrained normalisation can shrink a deep
    # model's to 1e-8) are measured in their own unit: a fixed floor above
    # them would pass any result.
    unit = output_unit(outs32)
    want = max(ATOL_LADDER[0], (2.0 if low else ERR_FACTOR) * err / unit)
    for a in ATOL_LADDER:
        if a >= want:
            return RTOL, a * unit
    return RTOL, want * unit


def output_unit(outs):
    """The unit tolerances are measured in: 1, or the outputs' largest
    magnitude when that is below 1 (and not 0)."""
    return min(1.0, output_scale(outs)) or 1.0


def output_scale(outs):
    """The largest finite magnitude among the float outputs of all cases
    (0 when there is none)."""
    mags = [o.abs().nan_to_num(0.0, 0.0, 0.0).max().item() for os_ in outs for o in os_ if o.is_floating_point() and o.numel()]
    return max(mags, default=0.0)


def export(desc, flavour):
    """-> (bundle bytes, program bytes, rtol, atol). Raises fuzzgen.Rejected
    (the description does not build) or ExportFailed (the exporter failed)."""
    model, inputs = fuzzgen.build(desc, cases=desc.get("cases", 1))
    with torch.no_grad():
        outs = [tuple(o.detach().contiguous().clone() for o in model(*xs)) for xs in inputs]
    rtol, atol = tolerance(model, inputs, outs)
    try:
        bundle, pte = lower_and_bundle(model, inputs, outs, flavour)
    except Exception as e:  # the exporter's failure, not ptec's
        raise ExportFailed(f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
    return bundle, pte, rtol, atol


def lower_and_bundle(model, inputs, outs, flavour):
    """-> (BP08 bundle, program): `model` exported on `inputs[0]`, portably
    or through the XNNPACK partitioner, with one case per input tuple."""
    ep = torch.export.export(model, inputs[0])
    if flavour == "xnnpack":
        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    else:
        edge = to_edge(ep)
    et = edge.to_executorch(ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass()))
    cases = [MethodTestCase(inputs=list(xs), expected_outputs=list(o)) for xs, o in zip(inputs, outs)]
    bundle = serialize_from_bundled_program_to_flatbuffer(BundledProgram(et, [MethodTestSuite("forward", cases)]))
    return bundle, et.buffer


def executorch_verdict(desc, pte):
    """How ExecuTorch's own runtime (from the wheel) does on the program, on
    the description's inputs: a line saying whether it agrees with eager
    PyTorch. A mismatch ExecuTorch shares is the exporter's bug, not ptec's
    (ptec should then refuse the program, not copy the wrong numbers)."""
    try:
        from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401
        from executorch.kernels import quantized  # noqa: F401
        from executorch.runtime import Runtime

        model, inputs = fuzzgen.build(desc, cases=desc.get("cases", 1))
        method = Runtime.get().load_program(pte).load_method("forward")
        worst = 0.0
        for xs in inputs:
            with torch.no_grad():
                want = [o.detach() for o in model(*xs)]
            got = method.execute(list(xs))
            for g, w in zip(got, want):
                if g.dtype.is_floating_point:
                    worst = max(worst, float((g.double() - w.double()).abs().nan_to_num(float("inf")).max()))
                elif not torch.equal(g, w):
                    worst = float("inf")
        return f"ExecuTorch's runtime vs eager PyTorch: largest difference {worst:.3g}"
    except Exception as e:  # a verdict, not a failure of the campaign
        return f"ExecuTorch's runtime did not run it: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


# --------------------------------------------------------------------------
# ptec check
# --------------------------------------------------------------------------


def ptec_check_group(paths, rtol, atol, timeout=3600):
    """Runs one `ptec check` over `paths` with one tolerance. Returns
    {path: (status, detail)} with status pass / mismatch / refused, or None
    when the check as a whole failed (a build failure or a crash of the
    generated program: the caller bisects)."""
    cmd = [str(PTEC), "check", "--threads", "1,2", "--rtol", repr(rtol), "--atol", repr(atol)] + [str(p) for p in paths]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "timeout"
    lines = r.stdout.splitlines()
    if not lines or not re.fullmatch(r"\d+ passed, \d+ failed", lines[-1]):
        return None, (r.stdout + r.stderr)[-4000:]
    per = {str(p): [] for p in paths}
    current = None
    prefixes = [(str(p) + ": ", str(p)) for p in paths]
    for line in lines[:-1]:
        if len(paths) == 1:
            per[str(paths[0])].append(line)
            continue
        for pre, p in prefixes:
            if line.startswith(pre):
                current = p
                line = line[len(pre):]
                break
        if current is not None:
            per[current].append(line)
    out = {}
    for p, ls in per.items():
        if any(l.startswith("not compiled: ") for l in ls):
            out[p] = ("refused", "\n".join(ls)[len("not compiled: "):])
        elif ls and all(l.endswith(": ok") for l in ls):
            out[p] = ("pass", "")
        else:
            out[p] = ("mismatch", "\n".join(l for l in ls if not l.endswith(": ok"))[:4000])
    return out, ""


def ptec_check(items, log=print):
    """items: [(path, rtol, atol)]. Returns {path: (status, detail)}; status
    is pass, mismatch, refused, or crash (the program did not build or
    crashed; found by bisecting the failing call)."""
    groups = {}
    for path, rtol, atol in items:
        groups.setdefault((rtol, atol), []).append(path)
    results = {}
    for (rtol, atol), paths in sorted(groups.items()):
        results.update(_check_bisect(paths, rtol, atol, log))
    return results


def _check_bisect(paths, rtol, atol, log):
    res, err = ptec_check_group(paths, rtol, atol)
    if res is not None:
        return res
    if len(paths) == 1:
        return {str(paths[0]): ("crash", err)}
    log(f"ptec check of {len(paths)} bundles failed as a whole; bisecting")
    mid = len(paths) // 2
    out = _check_bisect(paths[:mid], rtol, atol, log)
    out.update(_check_bisect(paths[mid:], rtol, atol, log))
    return out


def refused_operator(detail):
    """The phrase of ptec's refusal that names what it does not support (an
    operator or an XNNPACK node kind), if it names one."""
    m = re.search(r"unsupported operator `[^`]+`", detail)
    if m:
        return m.group(0)
    m = re.search(r"unsupported: XNNPACK node kind \w+", detail)
    if m:
        return m.group(0)
    return None


def cpu_count_hint():
    return os.cpu_count() or 1
