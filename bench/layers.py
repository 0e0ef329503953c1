#!/usr/bin/env python3
"""Exports single layers of the broad set's int8 models, for timing one
layer against ExecuTorch + XNNPACK where a whole model's ratio hides it:

    PYTHON bench/layers.py OUT_DIR [NAME...]

PYTHON is the broad set's venv (bench/broad-venv.sh prints it). Each
NAME becomes, through the same static int8 flow as bench/broad.py,

    OUT_DIR/NAME.bpte             the quantized layer lowered portably
    OUT_DIR/NAME_xnnpack.pte      the same through the XNNPACK partitioner

which `bench/run.sh --et-iters 0 OUT_DIR/NAME.bpte` times side by side.
A layer is a convolution (with its ReLU) followed by a global average
pooling, so that the program's output is small: dequantizing a whole
feature map to floats would cost more than some layers. Compare its
time with `ptec bench --profile` on the same file, which names what the
pooling and the input's quantization take.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import broad  # noqa: E402  (make_fixtures' pins and helpers, bundle())
import torch  # noqa: E402

mf = broad.mf

# name: (input size, in channels, out channels, kernel, stride, groups)
LAYERS = {
    # The stems: MobileNets', EfficientNet's and RegNet's; ResNet's.
    "stem3x3_3_32": (224, 3, 32, 3, 2, 1),
    "stem7x7_3_64": (224, 3, 64, 7, 2, 1),
    # ResNet's 3 x 3 layers at 56 and at 7.
    "conv3x3_64_at56": (56, 64, 64, 3, 1, 1),
    "conv3x3_512_at7": (7, 512, 512, 3, 1, 1),
    # MobileNetV2's depthwise layers at 112 and 56.
    "dw3x3_32_at112": (112, 32, 32, 3, 1, 32),
    "dw3x3_144_at56": (56, 144, 144, 3, 1, 144),
}


class Layer(torch.nn.Module):
    def __init__(self, cin, cout, k, stride, groups):
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.pool(torch.relu(self.conv(x)))


def export(name, out):
    size, cin, cout, k, stride, groups = LAYERS[name]
    torch.manual_seed(0)
    model = Layer(cin, cout, k, stride, groups).eval()
    inputs = (torch.randn(1, cin, size, size),)
    calibration = [(torch.randn(1, cin, size, size),) for _ in range(8)]
    et, quantized = mf.quantized_xnnpack(model, inputs, calibration)
    (out / f"{name}_xnnpack.pte").write_bytes(et.buffer)
    portable = mf.lower(torch.export.export(quantized, inputs))
    (out / f"{name}.bpte").write_bytes(broad.bundle(portable, mf.eager_cases(quantized, [inputs])))
    print(name, flush=True)


def main():
    broad.run(LAYERS, export, __doc__)


if __name__ == "__main__":
    main()
