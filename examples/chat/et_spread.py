"""How far ExecuTorch's runtime is from itself on the 8da4w SmolLM2 export
when only MKL's code path changes: the yardstick for ptec's logit gap
(docs/chat.md, "The 8da4w logit gap").

ExecuTorch's pip runtime takes attention's products from libtorch's MKL
(`sgemm_`). MKL picks its kernels by CPU, and its documented
reproducibility setting MKL_CBWR pins one code path. This script runs the
same .pte through ExecuTorch's runtime under each setting, teacher-forced
on the tokens setup.sh saved, and compares the logits with the ones
setup.sh saved (ExecuTorch, MKL's default path on the machine that ran
setup.sh).

  examples/chat/setup.sh        # prints DIR
  VENV/bin/python examples/chat/et_spread.py DIR

Each setting runs in a process of its own, since MKL reads them at start.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

SETTINGS = ["", "MKL_ENABLE_INSTRUCTIONS=AVX2", "MKL_CBWR=AVX2", "MKL_CBWR=AVX512", "MKL_CBWR=COMPATIBLE"]
VOCAB = 49152


def measure(d):
    """One setting: per prompt, the largest teacher-forced logit gap, the
    steps whose best token differs, and how many free-running greedy tokens
    equal the saved ones."""
    import numpy as np
    import torch

    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401
    from executorch.runtime import Runtime

    refs = json.loads((d / "references.json").read_text())
    method = Runtime.get().load_program(d / "smollm2_8da4w.pte").load_method("forward")

    def step(tokens, pos):
        return method.execute([torch.tensor([tokens]), torch.tensor([pos])])[0][0].numpy().copy()

    rows = []
    for i, case in enumerate(refs["cases"]):
        want = np.fromfile(d / f"et_logits_8da4w_{i}.f32", dtype=np.float32).reshape(-1, VOCAB)
        ids, saved = case["ids"], case["executorch_8da4w"]
        got = [step(ids, 0)]
        for k, t in enumerate(saved[: len(want) - 1]):
            got.append(step([t], len(ids) + k))
        got = np.stack(got)
        gap = float(np.abs(got - want).max())
        flips = int((got.argmax(1) != want.argmax(1)).sum())
        tokens, logits = [], got[0]
        while len(tokens) < len(saved):
            tokens.append(int(logits.argmax()))
            if tokens[-1] == refs["eos"]:
                break
            logits = step([tokens[-1]], len(ids) + len(tokens) - 1)
        same = next((k for k, (a, b) in enumerate(zip(tokens, saved)) if a != b), len(tokens))
        rows.append({"gap": gap, "flips": flips, "steps": len(want), "same": same, "of": len(saved)})
    return rows


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(measure(Path(sys.argv[2]))))
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = Path(sys.argv[1])
    print("setting                          largest logit gap per prompt   best token differs   greedy tokens equal")
    for s in SETTINGS:
        env = dict(os.environ)
        if s:
            k, v = s.split("=")
            env[k] = v
        out = subprocess.run([sys.executable, __file__, "--one", str(d)], env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"et_spread.py: {s or 'default'} failed:\n{out.stderr}")
        rows = json.loads(out.stdout.strip().splitlines()[-1])
        gaps = " ".join(f"{r['gap']:.2f}" for r in rows)
        flips = " ".join(f"{r['flips']}/{r['steps']}" for r in rows)
        same = " ".join(f"{r['same']}/{r['of']}" for r in rows)
        print(f"{s or '(default)':32} {gaps:30} {flips:20} {same}", flush=True)


if __name__ == "__main__":
    main()
