#!/usr/bin/env bash
# Compares the size of a minimal Linux binary that runs a model through
# ptec with ExecuTorch's et_runner on the same model, both stripped, and
# prints the Markdown table of docs/devtools.md:
#
#   bench/size.sh [--et-dir DIR] [--et-src DIR [--flatbuffers DIR]] [--target TRIPLE] [MODEL...]
#
# MODEL defaults to the bench corpus's MobileNetV2 and MLP, portable and
# XNNPACK exports (../shared/corpus/bench). For each, `ptec size --keep`
# builds the binary (release, opt-level 3: construct the program, run each
# method once), which is stripped with `strip`; the weights are compiled
# into it. et_runner is one binary for every model: it reads the .pte at
# run time and loads ExecuTorch's runtime, kernels and XNNPACK backend as
# the shared libraries of the executorch wheel (stripped copies are
# measured; the C++ and C libraries of the system are left out, as for
# ptec's binary). It is built by ../shared/anchors/executorch-runner/build.sh
# into --et-dir (default: $CARGO_TARGET_DIR or target, /et-runner).
# With --et-src (an ExecuTorch source tree, see bench/et_selective.sh), a
# column for ExecuTorch's selective build of each model: its runtime with
# only the portable kernels the model calls, built for size; programs
# delegated to XNNPACK get n/a (the backend's sources are not built).
# PTEC=path/to/ptec uses that ptec instead of building it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
et_dir="$target/et-runner"
triple=""
et_src=""
flatbuffers=()
models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --et-dir) et_dir="$2"; shift 2 ;;
    --target) triple="$2"; shift 2 ;;
    --et-src) et_src="$2"; shift 2 ;;
    --flatbuffers) flatbuffers=(--flatbuffers "$2"); shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) models+=("$1"); shift ;;
  esac
done
if [ ${#models[@]} -eq 0 ]; then
  corpus="$root/../shared/corpus/bench"
  models=("$corpus/mobilenet_v2.bpte" "$corpus/mobilenet_v2_xnnpack.pte" "$corpus/mlp_1024.bpte" "$corpus/mlp_1024_xnnpack.pte")
fi
for m in "${models[@]}"; do
  [ -e "$m" ] || { echo "no model $m: give MODEL files, or place the corpus at ../shared/corpus/bench" >&2; exit 2; }
done
command -v strip >/dev/null || { echo "needs strip (binutils)" >&2; exit 2; }

ptec="${PTEC:-}"
if [ -z "$ptec" ]; then
  echo "building ptec..." >&2
  (cd "$root" && cargo build --release --quiet -p ptec-cli)
  ptec="$target/release/ptec"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

kib() { awk -v b="$1" 'BEGIN { printf "%.0f KiB", b / 1024 }'; }
stripped() { strip -o "$work/stripped" "$1" && stat -c %s "$work/stripped"; }

# et_runner and the wheel's libraries it loads, stripped.
et_total=""
et_note="et_runner not found"
et_build="$root/../shared/anchors/executorch-runner/build.sh"
if [ -f "$et_build" ] && et="$(bash "$et_build" "$et_dir" 2>/dev/null | tail -n 1)" && [ -x "$et" ]; then
  et_total=$(stripped "$et")
  et_note="et_runner $(kib "$et_total")"
  # Each library apart: the core runtime (libexecutorch.so) is the floor
  # of a selective build, which drops kernels only.
  for lib in $(ldd "$et" | awk '/libexecutorch/ { print $3 }'); do
    size=$(stripped "$lib")
    et_total=$((et_total + size))
    et_note="$et_note + $(basename "$lib") $(kib "$size")"
  done
fi

host="$(rustc -vV | sed -n 's/^host: //p')"
cpu="$(sed -n 's/^model name\s*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)"
echo "Target ${triple:-$host}; built on $(uname -sm), ${cpu:-unknown CPU}, $(rustc --version), $(date -u +%Y-%m-%d)."
echo
sel_head="" sel_rule=""
[ -n "$et_src" ] && sel_head=" ExecuTorch: selective build, stripped |" && sel_rule=" ---: |"
echo "| model | ptec: binary, stripped (weights inside) | ptec: less the weights | ptec: code (.text) |$sel_head ExecuTorch: et_runner + libraries, stripped | ExecuTorch: + the file it reads |"
echo "| --- | ---: | ---: | ---: |$sel_rule ---: | ---: |"
for m in "${models[@]}"; do
  name="$(basename "$m")"
  args=(size "$m" --json --keep "$work/bin")
  [ -n "$triple" ] && args+=(--target "$triple")
  "$ptec" "${args[@]}" > "$work/report.json"
  read -r embedded code < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["embedded_bytes"], d["code_bytes"])' "$work/report.json")
  bin=$(stripped "$work/bin")
  file=$(stat -c %s "$m")
  et_col="n/a | n/a"
  [ -n "$et_total" ] && et_col="$(kib "$et_total") | $(kib $((et_total + file)))"
  sel_col=""
  if [ -n "$et_src" ]; then
    if sel="$(bash "$root/bench/et_selective.sh" --src "$et_src" "${flatbuffers[@]}" --out "$work/selective" "$m" 2>"$work/selective.log" | tail -n 1)"; then
      sel_col=" $(kib "$(stat -c %s "$sel")") |"
    elif grep -q "no portable operator" "$work/selective.log"; then
      sel_col=" n/a (delegated) |"
    else
      cat "$work/selective.log" >&2; exit 1
    fi
  fi
  echo "| $name | $(kib "$bin") | $(kib $((bin - embedded))) | $(kib "$code") |$sel_col $et_col |"
done
echo
echo "ExecuTorch: $et_note."
