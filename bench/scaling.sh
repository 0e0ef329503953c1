#!/usr/bin/env bash
# Where a program gains, or fails to gain, from more threads: each
# instruction's time on one thread and on N, side by side.
#
#   bench/scaling.sh [--rounds N] [--iters N] [--threads N] MODEL.bpte|MODEL.pte
#
# Builds the program's runner once (ptec bench), then alternates, ROUNDS
# times, a profiled run on one thread and one on --threads N (default 2):
# each steps through the method ITERS times (default 20) and times every
# instruction (`--profile`). Prints, per instruction, the median over
# rounds of its mean time on each, the speed-up, and what it loses against
# a perfect one (its N-thread time minus its one-thread time / N), the
# costliest first, then the totals. Alternating in rounds makes the host's
# noise hit both thread counts alike.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
rounds=5
iters=20
threads=2
model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) model="$1"; shift ;;
  esac
done
if [ -z "$model" ] || [ ! -e "$model" ]; then
  echo "give MODEL.bpte (or .pte)" >&2
  exit 2
fi
(cd "$root" && cargo build --release --quiet -p ptec-cli)
"$target/release/ptec" bench "$model" --iters 1 > /dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
runner="$work/runner"
cp "$target/ptec-bench/native/release/ptec-bench-run" "$runner"
chmod +x "$runner"
for r in $(seq "$rounds"); do
  for t in 1 "$threads"; do
    "$runner" --iters "$iters" --warmup 3 --threads "$t" --profile --profile-top 1000000 \
      > "$work/run_${t}_$r.json" 2> "$work/profile_${t}_$r.txt"
  done
done
python3 - "$work" "$rounds" "$threads" "$model" <<'PY'
import json, re, statistics, sys
work, rounds, n, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def profiles(t):
    out = []
    for r in range(1, rounds + 1):
        steps = {}
        for line in open(f"{work}/profile_{t}_{r}.txt"):
            m = re.match(r"\s*instruction\s+(\d+):\s+([\d.]+) us", line)
            if m:
                steps[int(m.group(1))] = float(m.group(2))
        out.append(steps)
    return out
one, many = profiles(1), profiles(n)
steps = sorted(set().union(*one, *many))
med = lambda runs, k: statistics.median(p.get(k, 0.0) for p in runs)
rows = [(k, med(one, k), med(many, k)) for k in steps]
rows.sort(key=lambda r: -(r[2] - r[1] / n))
print(f"{model}: each instruction's mean time, median over {rounds} alternated rounds, 1 and {n} threads")
print(f"{'instruction':>11} {'1 thread us':>12} {f'{n} threads us':>13} {'speed-up':>9} {'lost us':>9}")
for k, a, b in rows:
    if a + b < 0.5:
        continue
    print(f"{k:>11} {a:>12.1f} {b:>13.1f} {a / b if b else 0:>8.2f}x {b - a / n:>9.1f}")
ta, tb = sum(r[1] for r in rows), sum(r[2] for r in rows)
print(f"{'all':>11} {ta:>12.1f} {tb:>13.1f} {ta / tb if tb else 0:>8.2f}x {tb - ta / n:>9.1f}")
wall = lambda t: statistics.median(json.load(open(f"{work}/run_{t}_{r}.json"))["median_us"] for r in range(1, rounds + 1))
print(f"whole executions (not stepped), median of the rounds' medians: {wall(1):.1f} us on 1 thread, "
      f"{wall(n):.1f} us on {n}: {wall(1) / wall(n):.2f}x")
PY
