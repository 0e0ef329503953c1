#!/usr/bin/env bash
# Times ptec against ExecuTorch on the bench corpus, in one run:
#
#   bench/run.sh [--iters N] [--et-iters N] [--rounds N] [--threads N] [--et-dir DIR] [--no-gemm] [--json FILE] [MODEL.bpte...]
#
# For each model (default: ../shared/corpus/bench/*.bpte) it times
#   - ExecuTorch's portable/optimized kernels on MODEL.bpte   (et_runner)
#   - ExecuTorch + XNNPACK on MODEL_xnnpack.pte               (et_runner)
#   - ptec on MODEL.bpte                                      (ptec bench)
#   - ptec on MODEL_xnnpack.pte, its XNNPACK delegates compiled by ptec
#     (the "ptec xnn" columns)
# in ROUNDS interleaved rounds, so machine noise hits them all alike, and
# prints the median over rounds of each one's median latency, with ratios,
# then ptec / XNNPACK taken within each round (median, range, and in how
# many rounds ptec was the faster), then memory (planned bytes, the bytes
# ptec's program owns, each process's peak resident memory): on a
# shared machine the ratio of two runs made side by side is steadier than
# either time. --et-iters N (default: --iters) runs ExecuTorch's portable
# kernels, a hundred times slower than the rest, for fewer iterations, so
# that a round is short and its runs see the same machine; 0 skips them.
# --threads N (default 1) is given to every run: ExecuTorch's threadpool
# and ptec's kernels both use N threads; with N > 1, the share of the FMA
# throughput N threads get at once (gemm_bench --cores) is printed before
# and after the rounds: on a shared host it moves from run to run.
# Then the GEMM micro-benchmark (GFLOP/s against the measured FMA peak).
# --json FILE keeps every run's JSON line, tagged with tool, name and round
# (bench/report.sh makes the README's table from it).
#
# et_runner is built by ../shared/anchors/executorch-runner/build.sh into
# --et-dir (default: $CARGO_TARGET_DIR or target, /et-runner); a directory
# that already holds et_runner is reused. Without it the ET columns are
# skipped, with a message.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
iters=10
et_iters=""
rounds=3
threads=1
et_dir="$target/et-runner"
gemm=1
json=""
models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) iters="$2"; shift 2 ;;
    --et-iters) et_iters="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --et-dir) et_dir="$2"; shift 2 ;;
    --no-gemm) gemm=0; shift ;;
    --json) json="$2"; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) models+=("$1"); shift ;;
  esac
done
if [ ${#models[@]} -eq 0 ]; then
  models=("$root"/../shared/corpus/bench/*.bpte)
  if [ ! -e "${models[0]}" ]; then
    echo "no models: give MODEL.bpte files, or place the corpus at ../shared/corpus/bench" >&2
    exit 2
  fi
fi

echo "building ptec..." >&2
(cd "$root" && cargo build --release --quiet -p ptec-cli)
ptec="$target/release/ptec"

et=""
et_build="$root/../shared/anchors/executorch-runner/build.sh"
if [ -f "$et_build" ]; then
  echo "building et_runner in $et_dir..." >&2
  if et="$(bash "$et_build" "$et_dir" 2>&2 | tail -n 1)" && [ -x "$et" ]; then :; else
    echo "NOTE: building et_runner failed: the ExecuTorch columns are skipped" >&2
    et=""
  fi
else
  echo "NOTE: $et_build not found: the ExecuTorch columns are skipped" >&2
fi

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
# record TOOL MODEL COMMAND...: runs COMMAND, stores its JSON line tagged.
record() {
  local tool="$1" model="$2"; shift 2
  local line
  if line="$("$@" 2>/dev/null | tail -n 1)" && [ -n "$line" ]; then
    echo "$line" | jq -c --arg tool "$tool" --arg m "$model" --argjson r "$r" '. + {tool: $tool, name: $m, round: $r}' >>"$results"
  else
    echo "NOTE: $tool failed on $model" >&2
  fi
}

# rss COMMAND...: runs COMMAND and adds its peak resident memory to the JSON
# line it printed last (ptec's runner reports its own).
rss() {
  python3 - "$@" <<'PY'
import json, resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(r.stderr)
lines = r.stdout.strip().splitlines()
if r.returncode != 0 or not lines:
    sys.exit(r.returncode or 1)
d = json.loads(lines[-1])
d["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps(d))
PY
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load average $(cut -d' ' -f1-3 /proc/loadavg)"
# What N threads get of the FMA throughput at once on this host, now and
# after the rounds: bounds every N-thread speed-up measured in between.
cores() {
  [ "$threads" -gt 1 ] || return 0
  echo "$1 $(cd "$root" && cargo run --release --quiet -p ptec-kernels --example gemm_bench -- --cores "$threads")"
}
cores before
for r in $(seq 1 "$rounds"); do
  for m in "${models[@]}"; do
    name="$(basename "$m" .bpte)"
    echo "round $r/$rounds: $name" >&2
    xnn="$(dirname "$m")/${name}_xnnpack.pte"
    if [ -n "$et" ]; then
      [ "${et_iters:-$iters}" = 0 ] || record et "$name" rss "$et" "$m" --iters "${et_iters:-$iters}" --threads "$threads"
      [ -f "$xnn" ] && record xnnpack "$name" rss "$et" "$xnn" --iters "$iters" --threads "$threads"
    fi
    record ptec "$name" "$ptec" bench "$m" --iters "$iters" --threads "$threads"
    [ -f "$xnn" ] && record ptec_xnn "$name" "$ptec" bench "$xnn" --iters "$iters" --threads "$threads"
  done
done

cores after
[ -z "$json" ] || cp "$results" "$json"
echo
echo "median latency over $rounds round(s) of $iters iterations, $threads thread(s); ratios < 1: ptec is faster"
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = list(dict.fromkeys(r["name"] for r in rows))
def med(name, tool, key):
    v = [r[key] for r in rows if r["name"] == name and r["tool"] == tool]
    return statistics.median(v) if v else None
def ms(x): return f"{x / 1000:.2f}" if x is not None else "-"
def ratio(a, b): return f"{a / b:.2f}x" if a is not None and b else "-"
def show(table):
    """Prints rows of strings as columns, the first row a heading."""
    w = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for k, r in enumerate(table):
        print("  ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(r)))
        if k == 0:
            print("  ".join("-" * x for x in w))
head = ["model", "ET ms", "XNNPACK ms", "ptec ms", "ptec/XNNPACK", "ptec/ET",
        "ptec xnn ms", "ptec xnn/XNNPACK", "build s", "load us", "load/ET load", "binary MB"]
table = [head]
for n in names:
    et, xnn, pt, px = (med(n, t, "median_us") for t in ("et", "xnnpack", "ptec", "ptec_xnn"))
    load, et_load = med(n, "ptec", "load_us"), med(n, "et", "load_us")
    build, size = med(n, "ptec", "build_s"), med(n, "ptec", "binary_bytes")
    table.append([n, ms(et), ms(xnn), ms(pt), ratio(pt, xnn), ratio(pt, et), ms(px), ratio(px, xnn),
                  f"{build:.1f}" if build is not None else "-",
                  f"{load:.0f}" if load is not None else "-", ratio(load, et_load),
                  f"{size / 1e6:.1f}" if size is not None else "-"])
show(table)
print()
print("ptec / XNNPACK within each round (median, lowest..highest, rounds where ptec was faster, each round's ratio):")
for n in names:
    for tool, label in (("ptec", "ptec"), ("ptec_xnn", "ptec xnn")):
        per_round = []
        for r in sorted({row["round"] for row in rows}):
            def at(t):
                return next((row["median_us"] for row in rows
                             if row["name"] == n and row["tool"] == t and row["round"] == r), None)
            p, x = at(tool), at("xnnpack")
            if p is not None and x:
                per_round.append(p / x)
        if per_round:
            faster = sum(v < 1 for v in per_round)
            print(f"  {n:12s} {label:8s} {statistics.median(per_round):.2f}x  "
                  f"{min(per_round):.2f}..{max(per_round):.2f}  "
                  f"faster {faster}/{len(per_round)}  "
                  + " ".join(f"{v:.2f}" for v in per_round))
print()
print("start-up: construction (ExecuTorch: program and method load, which is where XNNPACK packs its")
print("weights) and ptec's first run; ExecuTorch does not report its first run, so its median stands in")
head = ["model", "XNNPACK load ms", "ptec load ms", "ptec first run ms", "ptec load+first / XNNPACK load+median"]
table = [head]
for n in names:
    xl, xm = med(n, "xnnpack", "load_us"), med(n, "xnnpack", "median_us")
    pl, pf = med(n, "ptec", "load_us"), med(n, "ptec", "first_us")
    ready = pl + pf if pl is not None and pf is not None else None
    table.append([n, ms(xl), ms(pl), ms(pf), ratio(ready, xl + xm if xl is not None and xm is not None else None)])
show(table)
print()
print("memory, MB: the planned buffers each reports; everything ptec's program object owns (the plan and")
print("what did not fit in it); each process's peak resident memory (median over rounds)")
def mb(x): return f"{x / 1e6:.1f}" if x is not None else "-"
head = ["model", "ET plan", "XNNPACK plan", "ptec plan", "ptec state", "ET peak", "XNNPACK peak", "ptec peak",
        "ptec/XNNPACK peak"]
table = [head]
for n in names:
    plans = [med(n, t, "planned_bytes") for t in ("et", "xnnpack", "ptec")]
    state = med(n, "ptec", "state_bytes")
    peaks = [med(n, t, "peak_rss_bytes") for t in ("et", "xnnpack", "ptec")]
    table.append([n] + [mb(x) for x in plans] + [mb(state)] + [mb(x) for x in peaks] + [ratio(peaks[2], peaks[1])])
show(table)
PY

if [ "$gemm" = 1 ]; then
  echo
  (cd "$root" && cargo run --release --quiet -p ptec-kernels --example gemm_bench)
fi
