"""How far ExecuTorch + XNNPACK's outputs lie from PyTorch's on the broad
set's models (bench/broad.py: same seeds, same input), to set beside
`ptec check --rtol 0 --atol X NAME.bpte` (ptec against the same PyTorch
outputs, which the bundle holds).

    $(bench/broad-venv.sh)/bin/python bench/rounding.py CACHE_DIR NAME...

CACHE_DIR is the broad set's export folder (~/.cache/ptec/bench/broad-*);
NAME a fp32 model (e.g. resnet50). Prints, per model, the largest absolute
difference, how many outputs differ by more than 1e-5, 2e-5, 3e-5 and
5e-5, and how many fail ptec check's default tolerance (rtol 1e-4, atol
1e-5).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import broad  # noqa: E402  (its models and seeds)
import torch  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402


def main(cache, *names):
    runtime = Runtime.get()
    for name in names:
        make, inputs_of, _ = broad.MODELS[name]
        torch.manual_seed(0)
        model = make().eval()
        inputs = inputs_of()
        with torch.no_grad():
            want = broad.mf.as_tuple(model(*inputs))[0]
        program = runtime.load_program(str(Path(cache) / f"{name}_xnnpack.pte"))
        got = program.load_method("forward").execute(list(inputs))[0]
        d = (got - want).abs()
        over = " ".join(f">{a:g}: {int((d > a).sum())}" for a in (1e-5, 2e-5, 3e-5, 5e-5))
        fails = int((d > 1e-5 + 1e-4 * want.abs()).sum())
        print(f"{name}: {d.numel()} outputs, max |XNNPACK - PyTorch| {d.max().item():.3g}; {over}; "
              f"beyond rtol 1e-4 + atol 1e-5: {fails}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
