#!/usr/bin/env python3
"""Exports the quantized benchmark cases for bench/run.sh:

    /opt/ptec-venv/bin/python bench/export_quantized.py OUT_DIR [NAME...]

For each model (torchvision's MobileNetV2 and ResNet-18 at 224 × 224,
random weights seeded; or the NAMEs given), quantized with ExecuTorch's
documented static int8 flow (XNNPACKQuantizer, symmetric per-channel
weights, prepare_pt2e, 8 calibration images, convert_pt2e), it writes

    OUT_DIR/NAME_q8.bpte          the quantized model lowered portably
                                  (quantized_decomposed ops), with eager
                                  PyTorch's outputs of the quantized model
    OUT_DIR/NAME_q8_xnnpack.pte   the same model through the XNNPACK
                                  partitioner (int8 XNNPACK subgraphs)
    OUT_DIR/NAME_q8_xnnpack.bpte  that program with ExecuTorch's runtime's
                                  outputs (which ptec gives to the bit;
                                  examples/cortex-m measures it)

which bench/run.sh OUT_DIR/*_q8.bpte then times side by side with
ExecuTorch (portable, and with XNNPACK). Versions are pinned as in
tests/fixtures/make_fixtures.py, whose helpers this uses.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "fixtures"))
import make_fixtures as mf  # noqa: E402  (checks the pinned versions)
import torch  # noqa: E402
import executorch.kernels.quantized  # noqa: E402,F401  (the quantized ops' out variants)
from executorch.devtools import BundledProgram  # noqa: E402
from executorch.devtools.bundled_program.config import MethodTestSuite  # noqa: E402
from executorch.devtools.bundled_program.serialize import (  # noqa: E402
    serialize_from_bundled_program_to_flatbuffer,
)

MODELS = {
    "mobilenet_v2": lambda tv: tv.mobilenet_v2(weights=None),
    "resnet18": lambda tv: tv.resnet18(weights=None),
}


def export(name: str, out: Path) -> None:
    import torchvision

    torch.manual_seed(0)
    model = MODELS[name](torchvision.models).eval()
    inputs = (torch.randn(1, 3, 224, 224),)
    calibration = [(torch.randn(1, 3, 224, 224),) for _ in range(8)]
    et, quantized = mf.quantized_xnnpack(model, inputs, calibration)
    (out / f"{name}_q8_xnnpack.pte").write_bytes(et.buffer)
    suite = MethodTestSuite("forward", mf.runtime_cases(et, [inputs]))
    bundle = serialize_from_bundled_program_to_flatbuffer(BundledProgram(et, [suite]))
    (out / f"{name}_q8_xnnpack.bpte").write_bytes(bundle)
    portable = mf.lower(torch.export.export(quantized, inputs))
    suite = MethodTestSuite("forward", mf.eager_cases(quantized, [inputs]))
    bundle = serialize_from_bundled_program_to_flatbuffer(BundledProgram(portable, [suite]))
    (out / f"{name}_q8.bpte").write_bytes(bundle)
    print(f"{name}: {out / f'{name}_q8.bpte'}, {out / f'{name}_q8_xnnpack.pte'}")


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    names = sys.argv[2:] or list(MODELS)
    unknown = set(names) - set(MODELS)
    if unknown:
        sys.exit(f"export_quantized.py: no model {sorted(unknown)}; they are {list(MODELS)}")
    for name in names:
        export(name, out)


if __name__ == "__main__":
    main()
