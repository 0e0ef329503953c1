"""Reads a ptec ETDump with ExecuTorch's own Inspector and prints what it
found as one JSON document, for compiler/cli/tests/devtools.rs to check.

    python read_etdump.py ETRECORD ETDUMP [DEBUG_BUFFER]

Prints {"blocks": [{"name", "events": [{"name", "instruction", "ops",
"delegated", "delegate_id", "times_ms"}]}], "gaps": [{"aot_ops",
"runtime_ops", "gap"}]}; "gaps" (the Inspector's calculate_numeric_gap,
MSE, against the ETRecord's edge program run by PyTorch on its
representative inputs) only with a debug buffer.
"""

import json
import logging
import sys
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

from executorch.devtools import Inspector  # noqa: E402


def main(etrecord, etdump, debug_buffer=None):
    inspector = Inspector(etdump_path=etdump, etrecord=etrecord, debug_buffer_path=debug_buffer)
    blocks = []
    for block in inspector.event_blocks:
        events = []
        for e in block.events:
            events.append(
                {
                    "name": e.name,
                    "instruction": e._instruction_id,
                    "ops": list(e.op_types or []),
                    "delegated": bool(e.is_delegated_op),
                    "delegate_id": e.delegate_debug_identifier,
                    "times_ms": list(e.perf_data.raw) if e.perf_data is not None else [],
                }
            )
        blocks.append({"name": block.name, "events": events})
    gaps = []
    if debug_buffer is not None:
        df = inspector.calculate_numeric_gap("MSE")
        for _, row in df.iterrows():
            gaps.append(
                {
                    "aot_ops": [str(o) for o in row["aot_ops"]],
                    "runtime_ops": [str(o) for o in row["runtime_ops"]],
                    "gap": [float(g) for g in row["gap"]],
                }
            )
    json.dump({"blocks": blocks, "gaps": gaps}, sys.stdout)


if __name__ == "__main__":
    main(*sys.argv[1:])
