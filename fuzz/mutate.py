#!/usr/bin/env python3
"""Mutation fuzzing of ptec without a nightly toolchain.

    python3 fuzz/mutate.py [--seconds N] [--seed N] [--check] [--out DIR] [FILE...]

Mutates the given programs and bundles (default: tests/fixtures/*.pte,
*.bpte, *.bp, and ../shared/corpus's small ones when present) a few bytes at
a time (bit flips, boundary integers, deleted and inserted runs) and
compiles each (`ptec FILE -o ...`). ptec must accept it (exit 0) or reject it
with an error (exit 1); anything else (a panic, a signal, a hang past 20 s)
is a finding. With --check, mutated bundles that compile are also built and
run in batches of eight (`ptec check`): the generated programs may fail
their cases, but not crash, panic or fail to build. Each finding's inputs
and output go to --out (default target/fuzz-findings); the exit status is 1
when there were any.

Build ptec first: cargo build --release -p ptec-cli.
"""
import argparse
import glob
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PTEC = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "ptec")
# Integers at the edges of the flatbuffer fields' ranges (counts, offsets,
# sizes), and float infinities and NaN.
BOUNDARIES = [0, 1, 2, 3, 7, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000,
              0xFFFFFFFF, 0x7F800000, 0xFF800000, 0x7FC00000]
# What the generated program's build or run may not print.
CRASHES = ["crashed", "panicked", "building the generated code failed", "SIGSEGV", "SIGABRT"]


def mutate(data: bytearray, rng: random.Random) -> bytearray:
    for _ in range(rng.randint(1, 6)):
        if not data:
            break
        i = rng.randrange(len(data))
        r = rng.random()
        if r < 0.4:
            data[i] ^= 1 << rng.randrange(8)
        elif r < 0.8:
            width = rng.choice([1, 2, 4, 8])
            i -= i % width
            value = rng.choice(BOUNDARIES) & ((1 << (8 * width)) - 1)
            data[i:i + width] = value.to_bytes(width, "little")
        elif r < 0.9:
            del data[i:i + rng.randint(1, 64)]
        else:
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return data


def run(args, timeout):
    try:
        p = subprocess.run(args, capture_output=True, timeout=timeout)
        return p.returncode, (p.stdout + p.stderr).decode(errors="replace")
    except subprocess.TimeoutExpired:
        return "timeout", "timed out after %d s" % timeout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "fuzz-findings"))
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    if not os.access(PTEC, os.X_OK):
        print(f"no {PTEC}: run cargo build --release -p ptec-cli", file=sys.stderr)
        return 2
    files = a.files or sorted(
        f for pattern in ["tests/fixtures/*.pte", "tests/fixtures/*.bpte", "tests/fixtures/*.bp",
                          "../shared/corpus/*.pte", "../shared/corpus/*.bpte"]
        for f in glob.glob(os.path.join(ROOT, pattern))
        if os.path.getsize(f) < 300_000 and "external_weights" not in f)
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="ptec-mutate-")
    os.makedirs(a.out, exist_ok=True)
    counts = {}
    findings = 0
    checked = 0
    pending = []  # compiled bundles waiting for a `ptec check` batch

    def finding(what, inputs, output):
        nonlocal findings, checked
        d = os.path.join(a.out, "finding_%d_%d" % (a.seed, findings))
        findings += 1
        os.makedirs(d, exist_ok=True)
        for f in inputs:
            shutil.copy(f, d)
        with open(os.path.join(d, "output.txt"), "w") as o:
            o.write(output)
        print(f"finding ({what}): {d}", flush=True)

    start = time.time()
    n = 0
    while time.time() - start < a.seconds:
        source = rng.choice(files)
        ext = os.path.splitext(source)[1]
        case = os.path.join(work, "case%d%s" % (n % 8, ext))
        with open(source, "rb") as f:
            data = mutate(bytearray(f.read()), rng)
        with open(case, "wb") as f:
            f.write(data)
        n += 1
        cmd = [PTEC, case, "-o", os.path.join(work, "out.rs")]
        if ext != ".pte" and rng.random() < 0.5:
            cmd.append("--tests")
        code, out = run(cmd, 20)
        counts[code] = counts.get(code, 0) + 1
        if code not in (0, 1):
            finding(f"compile exit {code}", [case], " ".join(cmd) + "\n" + out)
            continue
        if a.check and code == 0 and ext != ".pte":
            kept = os.path.join(work, "check%d%s" % (len(pending), ext))
            shutil.copy(case, kept)
            pending.append(kept)
            if len(pending) == 8:
                code, out = run([PTEC, "check"] + pending, 600)
                checked += len(pending)
                if code not in (0, 1) or any(c in out for c in CRASHES):
                    finding(f"check exit {code}", pending, out)
                pending = []
    ran = f", {checked} built and run" if a.check else ""
    print(f"{n} mutants in {time.time() - start:.0f} s: compile exit codes {counts}{ran}; {findings} finding(s)")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
