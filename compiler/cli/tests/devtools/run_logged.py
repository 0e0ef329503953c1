"""Runs a bundle's first case on ExecuTorch's runtime with ETDump and a
debug buffer of the given size, as `ptec check` runs its reference, for
compiler/cli/tests/devtools.rs. ExecuTorch stops the process (SIGABRT)
when the buffer cannot hold what it logs.

    python run_logged.py BUNDLE DEBUG_BUFFER_SIZE SCRATCH_DIR
"""

import importlib.util
import os
import sys

from executorch.devtools.bundled_program.serialize import deserialize_from_flatbuffer_to_bundled_program
from executorch.extension.pybindings import portable_lib

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("reference", os.path.join(here, "../../src/reference.py"))
reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reference)


def main(bundle, size, scratch):
    with open(bundle, "rb") as f:
        bp = deserialize_from_flatbuffer_to_bundled_program(f.read())
    module = portable_lib._load_for_executorch_from_buffer(bp.program, enable_etdump=True, debug_buffer_size=int(size))
    suite = bp.method_test_suites[0]
    case = suite.test_cases[0]
    module.run_method(suite.method_name, [reference.to_torch(v) for v in case.inputs])
    module.write_etdump_result_to_file(os.path.join(scratch, "run.etdp"), os.path.join(scratch, "run.bin"))


if __name__ == "__main__":
    main(*sys.argv[1:])
