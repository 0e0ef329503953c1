#!/usr/bin/env python3
"""Exports the broad benchmark set for bench/broad.sh:

    PYTHON bench/broad.py OUT_DIR [NAME...]

PYTHON is a venv with the pins of tests/fixtures/make_fixtures.py plus
torchvision==0.29.2 and transformers==5.24.0 (its LLAVA_PINNED). Weights
are random and seeded: speed does not depend on their values, and nothing
downloads.

For each fp32 model NAME it writes

    OUT_DIR/NAME.bpte           portable program, eager PyTorch's outputs
    OUT_DIR/NAME_xnnpack.pte    the same model through the XNNPACK partitioner

and for each int8 model NAME_q8 (ExecuTorch's documented static int8 flow:
XNNPACKQuantizer, symmetric per-channel weights, prepare_pt2e, 8
calibration inputs, convert_pt2e)

    OUT_DIR/NAME_q8.bpte          the quantized model lowered portably
                                  (quantized_decomposed ops), with eager
                                  PyTorch's outputs of the quantized model
    OUT_DIR/NAME_q8_xnnpack.pte   the same model through the XNNPACK
                                  partitioner (int8 XNNPACK subgraphs)
    OUT_DIR/NAME_q8_xnnpack.bpte  that program with ExecuTorch's runtime's
                                  outputs (which ptec gives to the bit;
                                  docs/cortex-m.md measures MobileNetV2's)

which bench/run.sh times: ptec on both programs, ExecuTorch on both.
A model whose files are already there is skipped, so an interrupted run
resumes; OUT_DIR/done lists what is complete.
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

IMAGE = (1, 3, 224, 224)


def tv(name):
    def make():
        import torchvision

        return getattr(torchvision.models, name)(weights=None)

    return make


class Bert(torch.nn.Module):
    """BERT-base's encoder (12 layers, 768 wide), its last hidden state,
    from token embeddings: et_runner sets inputs once and times repeated
    executions, and a program that reuses the bytes of integer token ids
    would index its embedding table with garbage after the first
    (docs/benchmarking.md, "The anchors")."""

    def __init__(self):
        super().__init__()
        import transformers as T

        self.bert = T.BertModel(T.BertConfig()).eval()

    def forward(self, embeds):
        return self.bert(inputs_embeds=embeds).last_hidden_state


def image():
    return (torch.randn(*IMAGE),)


def embeddings():
    return (torch.randn(1, 128, 768),)


# name -> (constructor, inputs, also int8)
MODELS = {
    "resnet18": (tv("resnet18"), image, True),
    "resnet50": (tv("resnet50"), image, True),
    "mobilenet_v2": (tv("mobilenet_v2"), image, True),
    "mobilenet_v3_large": (tv("mobilenet_v3_large"), image, True),
    "mobilenet_v3_small": (tv("mobilenet_v3_small"), image, True),
    "regnet_y_400mf": (tv("regnet_y_400mf"), image, True),
    "efficientnet_b0": (tv("efficientnet_b0"), image, True),
    "shufflenet_v2_x1_0": (tv("shufflenet_v2_x1_0"), image, True),
    "convnext_tiny": (tv("convnext_tiny"), image, False),
    "vit_b_16": (tv("vit_b_16"), image, False),
    "swin_t": (tv("swin_t"), image, False),
    "bert_base": (Bert, embeddings, False),
}


def bundle(et, cases):
    return serialize_from_bundled_program_to_flatbuffer(BundledProgram(et, [MethodTestSuite("forward", cases)]))


def export(name, out):
    make, inputs_of, int8 = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    inputs = inputs_of()
    done = out / "done"
    listed = set(done.read_text().split()) if done.exists() else set()
    if name not in listed:
        program = torch.export.export(model, inputs)
        (out / f"{name}_xnnpack.pte").write_bytes(mf.lower_xnnpack(program).buffer)
        (out / f"{name}.bpte").write_bytes(bundle(mf.lower(program), mf.eager_cases(model, [inputs])))
        with done.open("a") as f:
            f.write(name + "\n")
        print(f"{name}: fp32", flush=True)
    q8 = f"{name}_q8"
    if int8 and q8 not in listed:
        calibration = [inputs_of() for _ in range(8)]
        et, quantized = mf.quantized_xnnpack(model, inputs, calibration)
        (out / f"{q8}_xnnpack.pte").write_bytes(et.buffer)
        (out / f"{q8}_xnnpack.bpte").write_bytes(bundle(et, mf.runtime_cases(et, [inputs])))
        portable = mf.lower(torch.export.export(quantized, inputs))
        (out / f"{q8}.bpte").write_bytes(bundle(portable, mf.eager_cases(quantized, [inputs])))
        with done.open("a") as f:
            f.write(q8 + "\n")
        print(f"{name}: int8", flush=True)


def run(table, export, usage):
    """The command line `OUT_DIR [NAME...]` of this script and of
    bench/layers.py: `export(name, OUT_DIR)` for each NAME of `table`
    (all of them without names)."""
    if len(sys.argv) < 2:
        sys.exit(usage)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    names = sys.argv[2:] or list(table)
    unknown = set(names) - set(table)
    if unknown:
        script = Path(sys.argv[0]).name
        sys.exit(f"{script}: no {sorted(unknown)}; there are {list(table)}")
    for name in names:
        export(name, out)


def main():
    run(MODELS, export, __doc__)


if __name__ == "__main__":
    main()
