#!/usr/bin/env python3
"""The model fuzzer's fixed seed set, which `cargo test` checks
(compiler/tests/model_fuzz.rs): small generated programs, portable and
XNNPACK, committed as bundles under fuzz/models/seeds/.

    /opt/ptec-venv/bin/python fuzz/models/make_seeds.py

rewrites every bundle listed in seeds/manifest.json from the model
description it records (so that changes to the grammar do not change the
set): deterministic, the same bytes with the pinned torch/executorch.

    /opt/ptec-venv/bin/python fuzz/models/make_seeds.py --select --seed 1000 --want 120

chooses the set anew: programs 0, 1, ... of the seed, in order, that export,
are at most --max-bytes, and that the current `ptec check` (release build)
passes, or refuses naming an unsupported operator (those go to
seeds/expected_refusals.json, which the test checks). Programs that
mismatch are left out and listed, to be reported as bugs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import campaign  # noqa: E402
import exporting  # noqa: E402
import fuzzgen  # noqa: E402

SEEDS = HERE / "seeds"


def regenerate():
    manifest = json.loads((SEEDS / "manifest.json").read_text())
    for e in manifest["programs"]:
        desc = e["desc"]
        bundle, _, rtol, atol = exporting.export(desc, e["flavour"])
        assert (rtol, atol) == (e["rtol"], e["atol"]), (e["file"], rtol, atol)
        (SEEDS / e["file"]).write_bytes(bundle)
        print(f"{len(bundle):8d}  {e['file']}")


def select(seed, want, max_bytes, batch):
    SEEDS.mkdir(exist_ok=True)
    for old in SEEDS.glob("*.bpte"):
        old.unlink()
    programs, refusals, left_out = [], {}, []
    index = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        while len(programs) < want:
            items, meta = [], {}
            while len(items) < batch:
                desc, flavour, bundle, pte, rtol, atol, reasons = campaign.program(seed, index)
                name = campaign.name_of(seed, index)
                index += 1
                if desc is None or len(bundle) > max_bytes:
                    continue
                path = tmp / f"{name}.bpte"
                path.write_bytes(bundle)
                items.append((path, rtol, atol))
                meta[str(path)] = (name, desc, flavour, bundle, rtol, atol)
            res = exporting.ptec_check(items, print)
            for path, rtol, atol in items:
                name, desc, flavour, bundle, rtol, atol = meta[str(path)]
                status, detail = res[str(path)]
                if status == "refused":
                    op = exporting.refused_operator(detail)
                    if op is None:
                        left_out.append(f"{name}: refused without naming an operator: {detail.splitlines()[0]}")
                        continue
                    refusals[f"{name}.bpte"] = op
                elif status != "pass":
                    left_out.append(f"{name}: {status}: {' '.join(campaign.ops_of(desc))}")
                    continue
                if len(programs) >= want:
                    break
                (SEEDS / f"{name}.bpte").write_bytes(bundle)
                programs.append(
                    {
                        "file": f"{name}.bpte",
                        "index": desc["index"],
                        "attempt": desc["attempt"],
                        "flavour": flavour,
                        "rtol": rtol,
                        "atol": atol,
                        "cases": desc.get("cases", 1),
                        "ops": campaign.ops_of(desc),
                        "desc": desc,
                    }
                )
            print(f"{len(programs)} of {want} chosen after {index} programs", flush=True)
    refusals = {k: v for k, v in refusals.items() if any(p["file"] == k for p in programs)}
    manifest = {
        "generator": "fuzz/models/make_seeds.py",
        "versions": exporting.PINNED,
        "seed": seed,
        "programs": programs,
    }
    (SEEDS / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (SEEDS / "expected_refusals.json").write_text(json.dumps(refusals, indent=1, sort_keys=True) + "\n")
    print(f"chose {len(programs)} programs ({len(refusals)} expected refusals); left out {len(left_out)}:")
    for l in left_out:
        print("  " + l)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--select", action="store_true")
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--want", type=int, default=120)
    ap.add_argument("--max-bytes", type=int, default=24_000)
    ap.add_argument("--batch", type=int, default=60)
    args = ap.parse_args()
    if args.select:
        select(args.seed, args.want, args.max_bytes, args.batch)
    else:
        regenerate()


if __name__ == "__main__":
    main()
