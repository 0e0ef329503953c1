"""The LLM benchmark's Python half (bench/llama.sh drives it):

  llama.py export SHAPE LOWERING OUT.pte   # export_llama, random weights
  llama.py time OUT.pte THREADS PROMPT DECODE

`export` writes a Llama of SHAPE (`1b`: Llama-3.2-1B's, `tiny`: a few MB
to try the script) with random well-scaled weights, exported the
documented way (`-kv --use_sdpa_with_kv_cache -d fp32`, dynamic sequence
length), portably or with `-X` (LOWERING `portable` / `xnnpack`).

`time` runs it on ExecuTorch's runtime (its Python bindings, with the
`llama::` kernels loaded) on THREADS threads: a PROMPT-token prompt at
position 0, then DECODE tokens one at a time, greedily; prints one line,
`prefill_s decode_s tokens...`, the best of 3 prefills and the decode loop
after the last.
"""
import copy
import json
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
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs
    from executorch.extension.llm.export.config.llm_config import LlmConfig

    params = dict(SHAPES[shape])
    layers = int(__import__("os").environ.get("LAYERS", params["n_layers"]))
    params["n_layers"] = layers
    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(dir=Path(out).parent))
    (tmp / "params.json").write_text(json.dumps(params))
    weights = {}
    with torch.no_grad():
        model = construct_transformer(ModelArgs(**params, max_seq_len=MAX_SEQ, max_context_len=MAX_SEQ))
        for key, v in model.state_dict().items():
            if "norm" in key:
                weights[key] = 1.0 + 0.1 * torch.randn_like(v)
            elif v.dtype.is_floating_point:
                weights[key] = torch.randn_like(v) / v.shape[-1] ** 0.5
            else:
                weights[key] = v
        del model
    torch.save(weights, tmp / "ckpt.pth")
    del weights
    argv = ["-p", str(tmp / "params.json"), "-c", str(tmp / "ckpt.pth"), "-kv", "--use_sdpa_with_kv_cache",
            "-d", "fp32", "--max_seq_length", str(MAX_SEQ), "--max_context_length", str(MAX_SEQ),
            "--output-dir", str(tmp), "--output_name", str(tmp / "model.pte")]
    if lowering == "xnnpack":
        argv.append("-X")
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
