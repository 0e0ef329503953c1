#!/usr/bin/env bash
# Whether a change makes a model faster: two builds of ptec timed against
# each other, alternated in rounds, optionally beside ExecuTorch + XNNPACK.
#
#   bench/ab.sh [--rounds N] [--iters N] [--threads N] [--xnnpack] [--et-dir DIR]
#               [--per-instruction] [--a-options ARGS] [--b-options ARGS]
#               MODEL.bpte A [B]
#
# A and B are revisions of this repository (anything `git rev-parse`
# takes) or `.` for the working tree; B defaults to `.`. Each is built in
# a temporary git worktree (the runners of committed revisions are kept in
# $CARGO_TARGET_DIR/ab, so a second comparison reuses them), and
# `ptec bench` makes its runner for MODEL. Then, ROUNDS times (default
# 12), each runner times ITERS iterations (default 40) on --threads N
# (default 1), which one goes first alternating. With --xnnpack, et_runner
# (built as bench/run.sh builds it) times MODEL_xnnpack.pte in each round
# too. Prints each one's median over rounds, B / A in each round, in how
# many rounds B was faster, and each / XNNPACK; then whether A and B
# produced the same output bytes. With --per-instruction, every run steps
# through the method with `--profile` instead, and the table lists each
# instruction's median time under A and B, the largest differences first.
# --a-options / --b-options pass compiler options to `ptec bench` when it
# makes A's or B's runner, so one revision can be timed against itself:
#   bench/ab.sh --a-options "--winograd false" resnet18.bpte . .
#
# Nothing runs beside a timed run: each run's output is kept and parsed
# after all rounds (a parser starting next to a two-thread run takes one
# of its CPUs). On a shared host the ratio within a round is the result;
# the cores line before and after (with --threads > 1) shows the host's
# phase, including the cache-line round trip between two threads.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
rounds=12
iters=40
threads=1
xnnpack=0
per_instruction=0
options_a=""
options_b=""
et_dir="$target/et-runner"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --xnnpack) xnnpack=1; shift ;;
    --et-dir) et_dir="$2"; shift 2 ;;
    --per-instruction) per_instruction=1; shift ;;
    --a-options) options_a="$2"; shift 2 ;;
    --b-options) options_b="$2"; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ ${#args[@]} -lt 2 ] || [ ${#args[@]} -gt 3 ] || [ ! -f "${args[0]}" ]; then
  echo "usage: bench/ab.sh [options] MODEL.bpte A [B]   (see --help)" >&2
  exit 2
fi
model="$(cd "$(dirname "${args[0]}")" && pwd)/$(basename "${args[0]}")"
rev_a="${args[1]}"
rev_b="${args[2]:-.}"
name="$(basename "$model")"; name="${name%.*}"

work="$(mktemp -d)"
cleanup() {
  for w in "$work"/tree-*; do
    [ -d "$w" ] && git -C "$root" worktree remove --force "$w" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# runner REV OPTIONS OUT: builds ptec at REV and its runner for MODEL,
# compiled with OPTIONS (words for `ptec bench`), into OUT.
runner() {
  local rev="$1" out="$3" sha tree cache
  local -a options
  read -r -a options <<<"$2"
  if [ "$rev" = "." ]; then
    echo "building the working tree's runner${2:+ ($2)}..." >&2
    (cd "$root" && cargo build --release --quiet -p ptec-cli)
    "$target/release/ptec" bench "$model" --iters 1 "${options[@]}" >/dev/null
    cp "$target/ptec-bench/native/release/ptec-bench-run" "$out"
    return
  fi
  if ! sha="$(git -C "$root" rev-parse --verify --quiet "$rev^{commit}")"; then
    echo "bench/ab.sh: $rev is not a revision of this repository" >&2
    exit 2
  fi
  cache="$target/ab/runners/$sha-$name-$(cat "$model" <(echo "$2") | cksum | cut -d' ' -f1)"
  if [ ! -x "$cache" ]; then
    echo "building $rev ($sha)'s runner${2:+ ($2)}..." >&2
    tree="$work/tree-$sha"
    # (A and B may be one revision with different options: one tree.)
    [ -d "$tree" ] || git -C "$root" worktree add --quiet --detach "$tree" "$sha"
    # ptec's dependencies are shared between revisions; each revision's
    # runner crate gets its own directory, since it builds that revision's
    # kernels.
    # The command line is its own package (ptec-cli) from 0.1 on; older
    # revisions build it with the library.
    (cd "$tree" && { [ -d compiler/cli ] && pkg=ptec-cli || pkg=ptec
      CARGO_TARGET_DIR="$target/ab/build" cargo build --release --quiet -p "$pkg"; })
    CARGO_TARGET_DIR="$target/ab/build" PTEC_BENCH_TARGET_DIR="$target/ab/bench-$sha" \
      "$target/ab/build/release/ptec" bench "$model" --iters 1 "${options[@]}" >/dev/null
    mkdir -p "$(dirname "$cache")"
    cp "$target/ab/bench-$sha/native/release/ptec-bench-run" "$cache"
  fi
  cp "$cache" "$out"
}
runner "$rev_a" "$options_a" "$work/A"
runner "$rev_b" "$options_b" "$work/B"

et=""
xnn="$(dirname "$model")/${name}_xnnpack.pte"
if [ "$xnnpack" = 1 ]; then
  et_build="$root/../shared/anchors/executorch-runner/build.sh"
  if [ ! -f "$xnn" ]; then
    echo "NOTE: $xnn not found: no XNNPACK column" >&2
  elif [ ! -f "$et_build" ]; then
    echo "NOTE: $et_build not found: no XNNPACK column" >&2
  elif ! et="$(bash "$et_build" "$et_dir" | tail -n 1)" || [ ! -x "$et" ]; then
    echo "NOTE: building et_runner failed: no XNNPACK column" >&2
    et=""
  fi
fi

cores() {
  [ "$threads" -gt 1 ] || return 0
  echo "$1 $(cd "$root" && cargo run --release --quiet -p ptec-kernels --example gemm_bench -- --cores "$threads")"
}
echo "A = $rev_a${options_a:+ ($options_a)}, B = $rev_b${options_b:+ ($options_b)}; $name, $threads thread(s), $rounds rounds of $iters iterations"
cores before
profile=()
[ "$per_instruction" = 1 ] && profile=(--profile --profile-top 1000000)
for r in $(seq "$rounds"); do
  order=(A B)
  [ $((r % 2)) = 0 ] && order=(B A)
  [ -n "$et" ] && "$et" "$xnn" --iters "$iters" --threads "$threads" >"$work/xnnpack.$r" 2>/dev/null
  for x in "${order[@]}"; do
    "$work/$x" --iters "$iters" --warmup 5 --threads "$threads" "${profile[@]}" \
      >"$work/$x.$r" 2>"$work/$x.$r.profile"
  done
done
cores after

for x in A B; do
  mkdir -p "$work/out-$x"
  "$work/$x" --iters 1 --warmup 0 --threads "$threads" --dump-outputs "$work/out-$x" >/dev/null 2>&1
done

python3 - "$work" "$rounds" "$per_instruction" "$([ -n "$et" ] && echo 1 || echo 0)" <<'PY'
import json, re, statistics, sys
work, rounds, per_instruction, has_xnnpack = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
def median_us(tool, r):
    lines = open(f"{work}/{tool}.{r}").read().strip().splitlines()
    return json.loads(lines[-1])["median_us"] if lines else None
if per_instruction:
    def steps(tool):
        per = {}
        for r in range(1, rounds + 1):
            for line in open(f"{work}/{tool}.{r}.profile"):
                m = re.match(r"\s*instruction\s+(\d+):\s+([\d.]+) us", line)
                if m:
                    per.setdefault(int(m.group(1)), []).append(float(m.group(2)))
        return {k: statistics.median(v) for k, v in per.items()}
    a, b = steps("A"), steps("B")
    print(f"{'instruction':>11} {'A us':>9} {'B us':>9} {'B - A':>8}")
    for k in sorted(set(a) & set(b), key=lambda k: -abs(b[k] - a[k])):
        print(f"{k:11d} {a[k]:9.1f} {b[k]:9.1f} {b[k] - a[k]:+8.1f}")
    print(f"{'all':>11} {sum(a.values()):9.1f} {sum(b.values()):9.1f} {sum(b.values()) - sum(a.values()):+8.1f}")
else:
    rows = [(median_us("A", r), median_us("B", r), median_us("xnnpack", r) if has_xnnpack else None)
            for r in range(1, rounds + 1)]
    ratio = [b / a for a, b, _ in rows]
    print(f"A median {statistics.median(a for a, _, _ in rows):.0f} us, B median {statistics.median(b for _, b, _ in rows):.0f} us")
    print(f"B / A median {statistics.median(ratio):.3f}, B faster in {sum(x < 1 for x in ratio)}/{len(ratio)} rounds")
    print("B / A by round: " + " ".join(f"{x:.2f}" for x in ratio))
    if has_xnnpack:
        print(f"XNNPACK median {statistics.median(x for _, _, x in rows):.0f} us")
        for i, tool in enumerate("AB"):
            rel = [row[i] / row[2] for row in rows]
            print(f"{tool} / XNNPACK median {statistics.median(rel):.3f}, faster in {sum(x < 1 for x in rel)}/{len(rel)} rounds: "
                  + " ".join(f"{x:.2f}" for x in rel))
PY
if diff -rq "$work/out-A" "$work/out-B" >/dev/null && [ -n "$(ls "$work/out-A")" ]; then
  echo "outputs: A and B wrote the same bytes"
else
  echo "outputs: A and B differ (or one wrote none)"
fi
