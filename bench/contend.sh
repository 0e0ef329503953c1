#!/usr/bin/env bash
# Does a busy process beside the model hurt ptec more than ExecuTorch + XNNPACK?
#
#   bench/contend.sh [--pairs N] [--threads N] [--et-dir DIR] MODEL.bpte
#
# Builds ptec's runner for MODEL.bpte (ptec bench), then times N alternated
# pairs (ptec on MODEL.bpte, et_runner on MODEL_xnnpack.pte; 20 iterations
# each, --threads N, default 2), first alone, then beside a shell busy loop.
# Prints each side's median and minimum over the pairs' medians.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
pairs=5
threads=2
et_dir="$target/et-runner"
model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) pairs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --et-dir) et_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) model="$1"; shift ;;
  esac
done
xnn="${model%.bpte}_xnnpack.pte"
if [ -z "$model" ] || [ ! -e "$model" ] || [ ! -e "$xnn" ]; then
  echo "give MODEL.bpte with MODEL_xnnpack.pte beside it" >&2
  exit 2
fi
if [ ! -x "$et_dir/et_runner" ]; then
  echo "no $et_dir/et_runner: build it with ../shared/anchors/executorch-runner/build.sh $et_dir" >&2
  exit 2
fi
(cd "$root" && cargo build --release --quiet -p ptec-cli)
"$target/release/ptec" bench "$model" --iters 1 > /dev/null
runner="$(mktemp)"
cp "$target/ptec-bench/native/release/ptec-bench-run" "$runner"
chmod +x "$runner"
median_us() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["median_us"])'; }
summary() { python3 -c 'import sys; v=sorted(map(float, sys.argv[1:])); print(f"median {v[len(v)//2]/1000:7.2f} ms  min {v[0]/1000:7.2f} ms")' "$@"; }
busy=""
trap '[ -n "$busy" ] && kill "$busy" 2>/dev/null; rm -f "$runner"' EXIT
for beside in alone busy; do
  if [ "$beside" = busy ]; then
    (while :; do :; done) &
    busy=$!
  fi
  p=(); x=()
  for _ in $(seq "$pairs"); do
    p+=("$("$runner" --iters 20 --warmup 3 --threads "$threads" | median_us)")
    x+=("$("$et_dir/et_runner" "$xnn" --iters 20 --threads "$threads" 2>/dev/null | median_us)")
  done
  echo "$beside: ptec $(summary "${p[@]}")   XNNPACK $(summary "${x[@]}")"
done
