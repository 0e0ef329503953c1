"""The LLM benchmark's Python half (bench/llama.sh drives it):

  llama.py export SHAPE LOWERING OUT.pte   # export_llama, random weights
  llama.py time OUT.pte THREADS PROMPT DECODE

`export` writes a Llama of SHAPE (`1b`: Llama-3.2-1B's, `tiny`: a few MB
to try the script) with random well-scaled weights, exported the
documented way (`-kv --use_sdpa_with_kv_cache -d fp32`, dynamic sequence
length), portably, with `-X`, or with `-X -qmode 8da4w -G 32` (4-bit
weights in blocks of 32, int8 activations; LOWERING `portable`,
`xnnpack`, `8da4w`).

`time` runs it on ExecuTorch's runtime (its Python bindings, with the
`llama::` kernels loaded) on THREADS threads: a PROMPT-token prompt at
position 0, then DECODE tokens one at a time, greedily; prints one line,
`prefill_s decode_s tokens...`, the best of 3 prefills and the decode loop
after the last.
"""
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

SHAPES = {
    # Llama-3.2-1B (params.json of meta-llama/Llama-3.2-1B), untied output.
    "1b": {
        "dim": 2048,
        "n_layers": 16,
        "n_heads": 32,
        "n_kv_heads": 8,
        "vocab_size": 128256,
        "ffn_dim_multiplier": 1.5,
        "multiple_of": 256,
        "norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "use_scaled_rope": True,
    },
    "tiny": {
        "dim": 64,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": 2,
        "vocab_size": 512,
        "hidden_dim": 128,
        "norm_eps": 1e-5,
        "rope_theta": 10000.0,
    },
}
MAX_SEQ = 256


def export(shape, lowering, out):
    from executorch.examples.models.llama.export_llama_lib import _export_llama, build_args_parser
    from executorch.extension.llm.export.config.llm_config import LlmConfig

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "fixtures"))
    from make_fixtures import llama_export_argv

    params = dict(SHAPES[shape])
    params["n_layers"] = int(os.environ.get("LAYERS", params["n_layers"]))
    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(dir=Path(out).parent))
    argv = llama_export_argv(params, MAX_SEQ, tmp) + ["--use_sdpa_with_kv_cache"]
    argv += {"portable": [], "xnnpack": ["-X"], "8da4w": ["-X", "-qmode", "8da4w", "-G", "32"]}[lowering]
    _export_llama(LlmConfig.from_args(build_args_parser().parse_args(argv)))
    (tmp / "model.pte").rename(out)
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()


def timed(pte, threads, prompt_len, decode):
    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401
    from executorch.extension.pybindings import portable_lib
    from executorch.runtime import Runtime

    portable_lib._unsafe_reset_threadpool(threads)
    method = Runtime.get().load_program(Path(pte)).load_method("forward")
    prompt = [(7 * i + 3) % 500 for i in range(prompt_len)]
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        logits = method.execute([torch.tensor([prompt]), torch.tensor([0])])[0]
        best = min(best, time.perf_counter() - t)
    tokens, pos = [int(logits[0].argmax())], prompt_len
    t = time.perf_counter()
    for _ in range(decode):
        logits = method.execute([torch.tensor([tokens[-1:]]), torch.tensor([pos])])[0]
        pos += 1
        tokens.append(int(logits[0].argmax()))
    decode_s = time.perf_counter() - t
    print(f"{best:.6f} {decode_s:.6f} " + " ".join(map(str, tokens)))


if __name__ == "__main__":
    if sys.argv[1] == "export":
        export(*sys.argv[2:5])
    elif sys.argv[1] == "time":
        timed(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(__doc__)
