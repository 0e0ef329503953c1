#!/usr/bin/env python3
"""A differential model-fuzzing campaign: N random small models (program i of
seed S is always the same model; even i exported portably, odd i through the
XNNPACK partitioner), each bundled with eager PyTorch's outputs and checked
with `ptec check` (release build, `cargo build --release -p ptec-cli`), many
bundles per call.

    /opt/ptec-venv/bin/python fuzz/models/campaign.py --count 200 --seed 1 [--out DIR]

Prints at the end exactly one line

    N programs, P passed, M mismatched, R refused

(mismatched also counts programs whose generated code did not build or
crashed; refused: ptec did not compile them), then a line saying how many
generated models were skipped (the exporter failed on them, or they were not
well-posed tests) and regenerated, and the refusal reasons.  Each mismatch is
shrunk (layers dropped while it still fails) and saved under
DIR/mismatches/NAME/: the description (desc.json, shrunk, and original.json),
a readable listing (model.txt), the bundle and program, and ptec's report.

    campaign.py --replay DIR/mismatches/NAME/desc.json --flavour portable --bundle OUT.bpte

re-exports one description (e.g. to make it a fixture).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import exporting  # noqa: E402
import fuzzgen  # noqa: E402

MAX_ATTEMPTS = 20


def program(seed, index):
    """(description, attempts skipped, skip reasons): the first attempt of
    program `index` that generates and exports."""
    reasons = []
    flavour = fuzzgen.flavour(index)
    for attempt in range(MAX_ATTEMPTS):
        desc = fuzzgen.generate(seed, index, attempt)
        if desc is None:
            reasons.append("empty")
            continue
        try:
            bundle, pte, rtol, atol = exporting.export(desc, flavour)
        except fuzzgen.Rejected as e:
            reasons.append(f"rejected: {str(e)[:80]}")
            continue
        except exporting.ExportFailed as e:
            reasons.append(f"export: {str(e)[:120]}")
            continue
        return desc, flavour, bundle, pte, rtol, atol, reasons
    return None, flavour, None, None, None, None, reasons


def name_of(seed, index):
    return f"s{seed}_p{index:05d}_{fuzzgen.flavour(index)}"


def ops_of(desc):
    out = []
    for l in desc["layers"]:
        p = l["p"]
        sub = p.get("kind") or p.get("f") or p.get("op") or p.get("mode") or ""
        out.append(f"{l['op']}:{sub}" if sub else l["op"])
    return out


def shrink(failures, work, log):
    """failures: {name: (desc, flavour, status)}. Drops layers (or cuts the
    model after a layer) while ptec check still reports the same status;
    all programs shrink together, one ptec check per round.
    Returns {name: (desc, bundle, pte, rtol, atol, detail)}."""
    best = {}
    for name, (desc, flavour, status, detail, files) in failures.items():
        best[name] = (desc, files, detail)
    active = set(failures)
    rnd = 0
    while active:
        rnd += 1
        cands = []  # (name, desc, path, rtol, atol, bundle, pte)
        for name in sorted(active):
            desc = best[name][0]
            flavour = failures[name][1]
            n_in = len(desc["inputs"])
            tried = set()
            options = []
            for j in range(len(desc["layers"])):
                d = fuzzgen.drop_layer(desc, j)
                if d is not None:
                    options.append(fuzzgen.prune(d))
            for j in range(len(desc["layers"]) - 1):
                d = dict(desc, outputs=[n_in + j])
                options.append(fuzzgen.prune(d))
            for d in options:
                key = json.dumps(d, sort_keys=True)
                if key in tried or len(d["layers"]) >= len(desc["layers"]):
                    continue
                tried.add(key)
                try:
                    bundle, pte, rtol, atol = exporting.export(d, flavour)
                except (fuzzgen.Rejected, exporting.ExportFailed):
                    continue
                path = work / f"{name}_r{rnd}_c{len(cands)}.bpte"
                path.write_bytes(bundle)
                cands.append((name, d, path, rtol, atol, bundle, pte))
        if not cands:
            break
        log(f"shrinking: round {rnd}, {len(cands)} candidate(s) for {len(active)} program(s)")
        res = exporting.ptec_check([(c[2], c[3], c[4]) for c in cands], log)
        progressed = set()
        for name, d, path, rtol, atol, bundle, pte in cands:
            status, detail = res[str(path)]
            if status != failures[name][2]:
                continue
            if len(d["layers"]) < len(best[name][0]["layers"]):
                best[name] = (d, (bundle, pte, rtol, atol), detail)
                progressed.add(name)
        for c in cands:
            c[2].unlink(missing_ok=True)
        active = progressed
    return best


def save_failure(out, name, original, flavour, status, shrunk, files, detail):
    d = out / "mismatches" / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    bundle, pte, rtol, atol = files
    (d / "desc.json").write_text(json.dumps(shrunk, indent=1, sort_keys=True) + "\n")
    (d / "original.json").write_text(json.dumps(original, indent=1, sort_keys=True) + "\n")
    (d / f"{name}.bpte").write_bytes(bundle)
    (d / f"{name}.pte").write_bytes(pte)
    (d / "model.txt").write_text(
        f"{name}: {status} ({flavour}, rtol {rtol}, atol {atol})\n"
        f"shrunk from {len(original['layers'])} to {len(shrunk['layers'])} layer(s)\n\n"
        + fuzzgen.describe(shrunk)
        + "\n\nptec check:\n"
        + detail
        + "\n\n"
        + exporting.executorch_verdict(shrunk, pte)
        + "\n\nreproduce:\n"
        f"  target/release/ptec check --rtol {rtol} --atol {atol} {d / (name + '.bpte')}\n"
        f"  /opt/ptec-venv/bin/python fuzz/models/campaign.py --replay {d / 'desc.json'} --flavour {flavour} --bundle OUT.bpte\n"
    )


def campaign(args):
    out = Path(args.out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    log_file = open(out / "campaign.log", "a")

    def log(msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, file=sys.stderr, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    log(f"campaign --count {args.count} --seed {args.seed} --out {out}")
    counts = collections.Counter()
    skipped = collections.Counter()
    n_skipped = 0
    refusals = collections.Counter()
    failures = {}
    results = open(out / "results.jsonl", "w")
    t0 = time.time()
    indices = list(range(args.start, args.start + args.count))
    for b in range(0, len(indices), args.batch):
        batch = indices[b : b + args.batch]
        items, meta = [], {}
        gen_t = time.time()
        for i in batch:
            desc, flavour, bundle, pte, rtol, atol, reasons = program(args.seed, i)
            n_skipped += len(reasons)
            for r in reasons:
                skipped[r.split(":")[0]] += 1
            name = name_of(args.seed, i)
            if desc is None:
                counts["unexported"] += 1
                log(f"{name}: no exportable model in {MAX_ATTEMPTS} attempts: {reasons[-3:]}")
                continue
            path = work / f"{name}.bpte"
            path.write_bytes(bundle)
            items.append((path, rtol, atol))
            meta[str(path)] = (name, desc, flavour, (bundle, pte, rtol, atol))
        log(f"batch {b // args.batch}: exported {len(items)} in {time.time() - gen_t:.0f} s; checking")
        chk_t = time.time()
        res = exporting.ptec_check(items, log)
        log(f"batch {b // args.batch}: checked in {time.time() - chk_t:.0f} s")
        for path, rtol, atol in items:
            name, desc, flavour, files = meta[str(path)]
            status, detail = res[str(path)]
            key = {"pass": "passed", "refused": "refused"}.get(status, "mismatched")
            counts[key] += 1
            rec = {
                "name": name,
                "flavour": flavour,
                "status": status,
                "layers": len(desc["layers"]),
                "ops": ops_of(desc),
                "rtol": rtol,
                "atol": atol,
            }
            if status == "refused":
                op = exporting.refused_operator(detail)
                reason = op or detail.splitlines()[0][:160] if detail else "?"
                refusals[reason] += 1
                rec["reason"] = reason
                rec["detail"] = detail[:1000]
            elif status != "pass":
                rec["detail"] = detail[:2000]
                failures[name] = (desc, flavour, status, detail, files)
                log(f"{name}: {status} ({len(desc['layers'])} layers: {' '.join(ops_of(desc))})")
            results.write(json.dumps(rec) + "\n")
            results.flush()
            path.unlink(missing_ok=True)
        done = counts["passed"] + counts["mismatched"] + counts["refused"]
        log(f"so far: {done} programs, {counts['passed']} passed, {counts['mismatched']} mismatched, {counts['refused']} refused, {time.time() - t0:.0f} s")
    if failures and not args.no_shrink:
        log(f"shrinking {len(failures)} failure(s)")
        best = shrink(failures, work, log)
        for name, (desc, flavour, status, detail, files) in failures.items():
            sdesc, sfiles, sdetail = best[name]
            save_failure(out, name, desc, flavour, status, sdesc, sfiles, sdetail)
            log(f"{name}: saved, {len(desc['layers'])} -> {len(sdesc['layers'])} layers")
    elif failures:
        for name, (desc, flavour, status, detail, files) in failures.items():
            save_failure(out, name, desc, flavour, status, desc, files, detail)
    shutil.rmtree(work, ignore_errors=True)
    n = counts["passed"] + counts["mismatched"] + counts["refused"]
    log(f"elapsed {time.time() - t0:.0f} s")
    summary = f"{n} programs, {counts['passed']} passed, {counts['mismatched']} mismatched, {counts['refused']} refused"
    extra = (
        f"skipped and regenerated: {n_skipped} generated model(s) ({dict(sorted(skipped.items()))})"
        + (f"; {counts['unexported']} program(s) with no exportable model" if counts["unexported"] else "")
    )
    reasons = "refusals: " + ", ".join(f"{k} x{v}" for k, v in refusals.most_common()) if refusals else "refusals: none"
    log(extra)
    log(reasons)
    (out / "summary.txt").write_text(summary + "\n" + extra + "\n" + reasons + "\n")
    print(extra)
    print(reasons)
    print(summary)


def replay(args):
    desc = json.loads(Path(args.replay).read_text())
    bundle, pte, rtol, atol = exporting.export(desc, args.flavour)
    Path(args.bundle).write_bytes(bundle)
    print(fuzzgen.describe(desc))
    print(f"wrote {args.bundle} ({len(bundle)} bytes); check with: ptec check --rtol {rtol} --atol {atol} {args.bundle}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first program index")
    ap.add_argument("--out", default=None, help="default target/model-fuzz/seed-S")
    ap.add_argument("--batch", type=int, default=100, help="bundles per ptec check")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--replay", help="re-export one description (desc.json)")
    ap.add_argument("--flavour", choices=["portable", "xnnpack"], default="portable")
    ap.add_argument("--bundle", help="with --replay: where to write the bundle")
    args = ap.parse_args()
    if args.replay:
        if not args.bundle:
            ap.error("--replay needs --bundle")
        return replay(args)
    if not exporting.PTEC.exists():
        sys.exit(f"{exporting.PTEC} is missing: cargo build --release -p ptec-cli")
    if args.out is None:
        args.out = str(exporting.REPO / "target" / "model-fuzz" / f"seed-{args.seed}")
    campaign(args)


if __name__ == "__main__":
    main()
