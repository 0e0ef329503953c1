#!/usr/bin/env python3
"""The model-zoo harness: models from torchvision, timm and Hugging Face
transformers (built from constructors and configs with seeded random
weights; nothing is downloaded), each exported portably and through the
XNNPACK partitioner, bundled with eager PyTorch's outputs and checked with
`ptec check` (the release CLI, `cargo build --release -p ptec-cli`).

    /opt/ptec-venv/bin/python tests/zoo/zoo.py             # the default list
    /opt/ptec-venv/bin/python tests/zoo/zoo.py --full      # every list
    /opt/ptec-venv/bin/python tests/zoo/zoo.py --only NAME...

writes a table (model, lowering, instructions, result with the first
reason, generation time) to stdout and, for --full, docs/model-coverage.md.
The default list holds tiny configurations of each family; its bundles
are committed under tests/zoo/default/ with manifest.json, which
`compiler/cli/tests/zoo.rs` checks without Python (`--commit` rewrites
them).

Pinned: torch 2.14.1, executorch 1.5.1, torchvision 0.29.2, timm 1.0.31,
transformers 5.24.0 (`pip install -c <(echo torch==2.14.1) torchvision==0.29.2
timm==1.0.31 transformers==5.24.0`).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "fuzz" / "models"))

import exporting  # noqa: E402  (export helpers and the `ptec check` driver)
import torch  # noqa: E402

PINNED = {
    "torch": "2.14.1",
    "executorch": "1.5.1",
    "torchvision": "0.29.2",
    "timm": "1.0.31",
    "transformers": "5.24.0",
}
DEFAULT_DIR = HERE / "default"


def image(h=32, w=32, c=3, batch=1):
    return lambda g: (torch.randn(batch, c, h, w, generator=g),)


def tokens(vocab=100, seq=16, mask=True):
    def make(g):
        ids = torch.randint(0, vocab, (1, seq), generator=g)
        if not mask:
            return (ids,)
        m = torch.ones(1, seq, dtype=torch.long)
        m[0, seq - 3 :] = 0
        return (ids, m)

    return make


class Outputs(torch.nn.Module):
    """A model whose output is a dict or a ModelOutput, as a tuple of its
    tensors (`keys`, in order)."""

    def __init__(self, model, keys):
        super().__init__()
        self.model = model
        self.keys = keys

    def forward(self, *xs):
        out = self.model(*xs)
        return tuple(out[k] for k in self.keys)


# --------------------------------------------------------------------------
# The lists: name -> (constructor, inputs). Constructors import lazily, so
# that a missing zoo only fails its own models.


def tv(name, **kw):
    def make():
        import torchvision.models
        import torchvision.models.segmentation

        if hasattr(torchvision.models.segmentation, name):
            # Segmentation models return {"out": ...}.
            return Outputs(getattr(torchvision.models.segmentation, name)(weights=None, **kw), ["out"])
        return getattr(torchvision.models, name)(weights=None, **kw)

    return make


def tv_tiny(which):
    def make():
        import torchvision.models as M
        from torchvision.models.convnext import CNBlockConfig
        from torchvision.models.efficientnet import _efficientnet_conf
        from torchvision.models.regnet import BlockParams

        if which == "efficientnet":
            settings, last = _efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.25)
            return M.EfficientNet(settings, 0.2, last_channel=last, num_classes=10)
        if which == "convnext":
            blocks = [CNBlockConfig(8, 16, 1), CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)]
            return M.ConvNeXt(blocks, num_classes=10)
        if which == "regnet":
            return M.RegNet(BlockParams.from_init_params(depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=8), num_classes=10)
        if which == "shufflenet":
            return M.ShuffleNetV2([1, 1, 1], [8, 16, 32, 64, 128], num_classes=10)
        if which == "swin":
            return M.SwinTransformer([4, 4], 16, [1, 1], [1, 2], [4, 4], num_classes=10)
        if which == "vit":
            return M.VisionTransformer(32, 8, 2, 2, 32, 64, num_classes=10)
        if which == "mnasnet":
            return M.MNASNet(0.25, num_classes=10)
        if which == "densenet":
            return M.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, num_classes=10)
        raise KeyError(which)

    return make


def timm_model(name, **kw):
    def make():
        import timm

        return timm.create_model(name, pretrained=False, **kw)

    return make


def hf(which, seq=16):
    def make():
        import transformers as T

        small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
        if which == "bert":
            cfg = T.BertConfig(vocab_size=100, max_position_embeddings=64, **small)
            return Outputs(T.BertModel(cfg).eval(), ["last_hidden_state", "pooler_output"])
        if which == "distilbert":
            cfg = T.DistilBertConfig(vocab_size=100, max_position_embeddings=64, dim=32, n_layers=2, n_heads=2, hidden_dim=64)
            return Outputs(T.DistilBertModel(cfg).eval(), ["last_hidden_state"])
        if which == "gpt2":
            cfg = T.GPT2Config(vocab_size=100, n_positions=64, n_embd=32, n_layer=2, n_head=2, use_cache=False)
            return Outputs(T.GPT2LMHeadModel(cfg).eval(), ["logits"])
        if which == "vit":
            cfg = T.ViTConfig(image_size=32, patch_size=8, **small)
            return Outputs(T.ViTModel(cfg).eval(), ["last_hidden_state"])
        if which == "t5_encoder":
            cfg = T.T5Config(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2)
            return Outputs(T.T5EncoderModel(cfg).eval(), ["last_hidden_state"])
        if which == "whisper_encoder":
            cfg = T.WhisperConfig(
                vocab_size=100, num_mel_bins=16, d_model=32, encoder_layers=2, encoder_attention_heads=2,
                encoder_ffn_dim=64, decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=64,
                max_source_positions=16, max_target_positions=16, pad_token_id=1, bos_token_id=1,
                eos_token_id=2, decoder_start_token_id=1,
            )
            return Outputs(T.WhisperModel(cfg).get_encoder().eval(), ["last_hidden_state"])
        if which == "wav2vec2":
            cfg = T.Wav2Vec2Config(
                conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=2, **small,
            )
            return Outputs(T.Wav2Vec2Model(cfg).eval(), ["last_hidden_state"])
        raise KeyError(which)

    return make


def audio(*shape):
    return lambda g: (torch.randn(*shape, generator=g),)


DEFAULT = {
    "tv_mobilenet_v2": (tv("mobilenet_v2", width_mult=0.25, num_classes=10), image()),
    "tv_mobilenet_v3_small": (tv("mobilenet_v3_small", width_mult=0.25, num_classes=10), image()),
    "tv_efficientnet": (tv_tiny("efficientnet"), image()),
    "tv_convnext": (tv_tiny("convnext"), image()),
    "tv_regnet": (tv_tiny("regnet"), image()),
    "tv_shufflenet_v2": (tv_tiny("shufflenet"), image()),
    "tv_swin": (tv_tiny("swin"), image(64, 64)),
    "tv_vit": (tv_tiny("vit"), image()),
    "tv_densenet": (tv_tiny("densenet"), image()),
    "timm_vit": (
        timm_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=10),
        image(),
    ),
    "timm_convnext": (timm_model("convnext_atto", dims=(8, 16, 32, 64), depths=(1, 1, 1, 1), num_classes=10), image()),
    "hf_bert": (hf("bert"), tokens()),
    "hf_distilbert": (hf("distilbert"), tokens()),
    "hf_gpt2": (hf("gpt2"), tokens(mask=False)),
    "hf_vit": (hf("vit"), image()),
    "hf_t5_encoder": (hf("t5_encoder"), tokens()),
    # 16 mel bins by 32 frames (the encoder's two convolutions halve them to its 16 positions).
    "hf_whisper_encoder": (hf("whisper_encoder"), audio(1, 16, 32)),
    "hf_wav2vec2": (hf("wav2vec2"), audio(1, 400)),
}

# Beyond the default list, smallest first, then the default list: a run
# cut short has done the most of what the default list does not show.
FULL = dict(
    {
        "tv_mnasnet_tiny": (tv_tiny("mnasnet"), image()),
        # 2.6 MB each way at its smallest (a 1280-wide head): not in the default list.
        "timm_mobilenetv4_035": (timm_model("mobilenetv4_conv_small_035", num_classes=10), image()),
        "tv_squeezenet1_1": (tv("squeezenet1_1"), image(64, 64)),
        "timm_mobilevit_xxs": (timm_model("mobilevit_xxs"), image(64, 64)),
        "tv_mnasnet0_5": (tv("mnasnet0_5"), image(64, 64)),
        "timm_regnety_002": (timm_model("regnety_002"), image(64, 64)),
        "tv_lraspp": (tv("lraspp_mobilenet_v3_large", weights_backbone=None, num_classes=3), image(64, 64)),
        "tv_regnet_y_400mf": (tv("regnet_y_400mf"), image(64, 64)),
        "tv_efficientnet_b0": (tv("efficientnet_b0"), image(64, 64)),
        "tv_mobilenet_v3_large": (tv("mobilenet_v3_large"), image(64, 64)),
        "timm_resnet10t": (timm_model("resnet10t"), image(64, 64)),
        "timm_deit_tiny": (timm_model("deit_tiny_patch16_224", img_size=64), image(64, 64)),
        "tv_googlenet": (tv("googlenet", aux_logits=False, init_weights=True), image(64, 64)),
        "tv_densenet121": (tv("densenet121"), image(64, 64)),
        "tv_deeplabv3_mobilenet": (tv("deeplabv3_mobilenet_v3_large", weights_backbone=None, num_classes=3), image(64, 64)),
        # Its attention's position biases are sized for 7 x 7 tokens: 224 x 224 images.
        "timm_efficientformer_l1": (timm_model("efficientformer_l1"), image(224, 224)),
        "timm_efficientnetv2": (timm_model("efficientnetv2_rw_t"), image(64, 64)),
        "timm_cspresnet50": (timm_model("cspresnet50"), image(64, 64)),
        "tv_resnet50": (tv("resnet50"), image(64, 64)),
        "tv_swin_t": (tv("swin_t"), image(64, 64)),
        "tv_convnext_tiny": (tv("convnext_tiny"), image(64, 64)),
        "timm_swin_tiny": (timm_model("swin_tiny_patch4_window7_224", img_size=64, window_size=4), image(64, 64)),
        "tv_vit_b_16": (tv("vit_b_16", image_size=64), image(64, 64)),
    }
)
FULL.update(DEFAULT)


# --------------------------------------------------------------------------


def check_versions():
    wrong = {}
    for pkg, want in PINNED.items():
        try:
            have = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have != want:
            wrong[pkg] = have
    if wrong:
        sys.exit(f"zoo.py: pinned {PINNED}; this environment has {wrong}")


def build(make, inputs_of):
    """The model in eval mode, two inputs, eager outputs and tolerances."""
    torch.manual_seed(0)
    model = make().eval()
    g = torch.Generator().manual_seed(1)
    inputs = [inputs_of(g), inputs_of(g)]
    with torch.no_grad():
        outs = [as_tuple(model(*xs)) for xs in inputs]
    rtol, atol = exporting.tolerance(model, inputs, outs)
    atol = max(atol, 1e-4)
    return model, inputs, outs, rtol, atol


def as_tuple(out):
    out = out if isinstance(out, tuple) else (out,)
    return tuple(o.detach().contiguous().clone() for o in out)


def instructions(path):
    r = subprocess.run([str(exporting.PTEC), "inspect", "--json", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    doc = json.loads(r.stdout)
    program = doc.get("program", doc)
    return sum(sum(m.get("instruction_kinds", {}).values()) for m in program.get("methods", []))


def generation_ms(path):
    t = time.time()
    r = subprocess.run([str(exporting.PTEC), str(path), "-o", "/dev/null"], capture_output=True, text=True)
    return round((time.time() - t) * 1000) if r.returncode == 0 else None


def run(models, out_dir, log, per_model=False, progress=None):
    """Exports every model both ways into out_dir and checks the bundles:
    all at once, or (`per_model`) each model's as it is exported, its
    bundles deleted after (large models), with `progress(rows)` called
    after each. Returns one row per (model, lowering)."""
    rows, items = [], []
    for name, (make, inputs_of) in models.items():
        t = time.time()
        mine = []
        try:
            model, inputs, outs, rtol, atol = build(make, inputs_of)
        except Exception as e:  # the zoo's or PyTorch's failure, not ptec's
            for lowering in ("portable", "xnnpack"):
                rows.append({"model": name, "lowering": lowering, "result": "not built", "reason": first_line(e)})
            log(f"{name}: not built: {first_line(e)}")
            continue
        for lowering in ("portable", "xnnpack"):
            row = {"model": name, "lowering": lowering, "rtol": rtol, "atol": atol}
            rows.append(row)
            try:
                bundle, _ = exporting.lower_and_bundle(model, inputs, outs, lowering)
            except Exception as e:
                row.update(result="not exported", reason=first_line(e))
                log(f"{name} {lowering}: ExecuTorch did not export it: {row['reason']}")
                continue
            path = out_dir / f"{name}_{lowering}.bpte"
            path.write_bytes(bundle)
            row.update(file=path.name, bytes=len(bundle), instructions=instructions(path), gen_ms=generation_ms(path))
            mine.append((row, (path, rtol, atol)))
        log(f"{name}: exported in {time.time() - t:.0f} s")
        if per_model:
            t = time.time()
            check(mine, out_dir, log)
            for row, _ in mine:
                row["check_s"] = round(time.time() - t)
                (out_dir / row["file"]).unlink(missing_ok=True)
            if progress:
                progress(rows)
        else:
            items += mine
    if not per_model:
        check(items, out_dir, log)
    return rows


def check(items, out_dir, log):
    """Runs `ptec check` over the (row, item) pairs and records each
    result in its row."""
    t = time.time()
    results = exporting.ptec_check([item for _, item in items], log)
    log(f"checked {len(items)} bundles in {time.time() - t:.0f} s")
    for row, _ in items:
        status, detail = results[str(out_dir / row["file"])]
        row["result"] = {"pass": "pass", "refused": "refused", "mismatch": "mismatch"}.get(status, "crash")
        if status == "refused":
            # What ptec does not support, without the bundle's path.
            row["reason"] = exporting.refused_operator(detail) or first_line(detail.split(": ", 2)[-1])
        elif status != "pass":
            row["reason"] = first_line(detail)


def first_line(e):
    s = str(e).strip()
    s = s.splitlines()[0] if s else type(e).__name__
    return s[:240]


def table(rows):
    lines = [
        "| model | lowering | instructions | result | generation | build and check |",
        "|---|---|---:|---|---:|---:|",
    ]
    for r in rows:
        result = r["result"] + (f": {r['reason']}" if r.get("reason") else "")
        result = result.replace("|", "\\|")
        gen = f"{r['gen_ms']} ms" if r.get("gen_ms") is not None else ""
        chk = f"{r['check_s']} s" if r.get("check_s") is not None else ""
        lines.append(f"| {r['model']} | {r['lowering']} | {r.get('instructions') or ''} | {result} | {gen} | {chk} |")
    return "\n".join(lines)


def summary(rows):
    n = len(rows)
    counts = {k: sum(1 for r in rows if r["result"] == k) for k in ("pass", "mismatch", "refused", "crash", "not exported", "not built")}
    return f"{n} programs: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="every list, and write docs/model-coverage.md")
    ap.add_argument("--only", nargs="+", help="these models only")
    ap.add_argument("--commit", action="store_true", help="rewrite tests/zoo/default/ from the default list")
    ap.add_argument("--out", help="where the bundles go (default: a temporary directory)")
    args = ap.parse_args()
    check_versions()
    models = FULL if args.full else DEFAULT
    if args.only:
        unknown = set(args.only) - set(FULL)
        if unknown:
            sys.exit(f"zoo.py: no model {sorted(unknown)}")
        models = {k: FULL[k] for k in args.only}
    if not exporting.PTEC.exists():
        sys.exit(f"zoo.py: {exporting.PTEC} missing; run `cargo build --release -p ptec-cli`")

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    t0 = time.time()
    total = len(models)

    def write_coverage(rows):
        """docs/model-coverage.md from the rows so far (rewritten after each
        model, so that a run cut short leaves what it did)."""
        done = len({r["model"] for r in rows})
        cpu = cpu_name()
        doc = (
            "# Model coverage\n\n"
            f"Generated by `tests/zoo/zoo.py --full` on {datetime.date.today().isoformat()} "
            f"({', '.join(f'{k} {v}' for k, v in PINNED.items())}; {cpu}, {os_cpus()} CPUs), "
            f"{done} of {total} models, in {(time.time() - t0) / 60:.0f} min. "
            "Each model is built with seeded random weights, exported portably and through the XNNPACK "
            "partitioner, bundled with eager PyTorch's outputs on two inputs and checked with `ptec check` "
            "on one and two threads (the last column: building the generated code and running the cases). "
            "`not built`: the model's constructor or PyTorch failed; `not exported`: ExecuTorch's exporter "
            "failed (neither counted against ptec).\n\n"
            f"{summary(rows)}\n\n{table(rows)}\n"
        )
        (REPO / "docs" / "model-coverage.md").write_text(doc)

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.commit and DEFAULT_DIR or args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        before = []
        if args.commit:
            # With --only, the other models' entries stay.
            if args.only and (out / "manifest.json").exists():
                before = [p for p in json.loads((out / "manifest.json").read_text())["programs"] if p["model"] not in models]
            for f in out.glob("*.bpte"):
                if f.name not in {p["file"] for p in before}:
                    f.unlink()
        if args.full:
            rows = run(models, out, log, per_model=True, progress=write_coverage)
        else:
            rows = run(models, out, log)
        if args.commit:
            for r in rows:
                if r["result"] not in ("pass", "refused") and r.get("file"):
                    (out / r["file"]).unlink()
            kept = before + [
                {k: r[k] for k in ("file", "model", "lowering", "rtol", "atol", "result", "reason") if k in r}
                for r in rows
                if r.get("file") and r["result"] in ("pass", "refused")
            ]
            doc = {"generator": "tests/zoo/zoo.py --commit", "versions": PINNED, "programs": kept}
            (out / "manifest.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(table(rows))
    print(summary(rows))
    if args.full:
        write_coverage(rows)


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def os_cpus():
    import os

    return os.cpu_count()


if __name__ == "__main__":
    main()
