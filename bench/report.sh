#!/usr/bin/env bash
# Writes the README's performance table: ptec against ExecuTorch's own
# runtime (et_runner, the anchor), measured side by side in one run, with
# the machine, its ISA, the date and the commit.
#
#   bench/report.sh [--quick] [--et-dir DIR] [--keep DIR] [--render DIR] [--stdout] [README]
#
# Default: bench/run.sh on the bench corpus (../shared/corpus/bench), 7
# interleaved rounds on one thread and on two, then, when the pinned venv
# is there (PYTHON, default /opt/ptec-venv/bin/python), bench/llama.sh at
# Llama-3.2-1B's shapes in its 4-bit export (LLAMA_LOWERINGS and
# LLAMA_ROUNDS to change).
# --quick: 3 rounds of 10 iterations on one thread, no LLM (a few minutes
# once the builds are cached). The timing is those scripts'; this one only
# reads their results and keeps the ratios of each round, so a busy
# machine moves both sides alike.
#
# The table replaces what lies between `<!-- bench:begin -->` and
# `<!-- bench:end -->` in README (default: the repository's README.md);
# --stdout prints it instead. --keep DIR keeps the scripts' raw results in
# DIR; --render DIR makes the table from such a DIR without running anything.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
quick=0
et_dir="$target/et-runner"
stdout=0
keep=""
render=""
readme="$root/README.md"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --et-dir) et_dir="$2"; shift 2 ;;
    --stdout) stdout=1; shift ;;
    --keep) keep="$2"; shift 2 ;;
    --render) render="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) readme="$1"; shift ;;
  esac
done
if ! grep -q '<!-- bench:begin -->' "$readme" || ! grep -q '<!-- bench:end -->' "$readme"; then
  echo "$readme has no <!-- bench:begin --> / <!-- bench:end --> markers" >&2
  exit 2
fi

if [ -n "$render" ]; then
  work="$render"
elif [ -n "$keep" ]; then
  work="$keep"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
if [ -n "$render" ]; then
  :
elif [ "$quick" = 1 ]; then
  mode="--quick"
  "$root/bench/run.sh" --rounds 3 --iters 10 --et-iters 2 --threads 1 --no-gemm --et-dir "$et_dir" \
    --json "$work/run-1.jsonl" | tee "$work/run-1.txt" >&2
else
  mode=""
  for threads in 1 2; do
    "$root/bench/run.sh" --rounds 7 --iters 20 --et-iters 2 --threads "$threads" --no-gemm --et-dir "$et_dir" \
      --json "$work/run-$threads.jsonl" | tee "$work/run-$threads.txt" >&2
  done
  if [ -x "${PYTHON:-/opt/ptec-venv/bin/python}" ]; then
    echo "${LLAMA_ROUNDS:-3}" >"$work/llama-rounds"
    ROUNDS="${LLAMA_ROUNDS:-3}" LOWERINGS="${LLAMA_LOWERINGS:-8da4w}" "$root/bench/llama.sh" | tee "$work/llama.txt" >&2
  else
    echo "NOTE: no venv at ${PYTHON:-/opt/ptec-venv/bin/python}: the LLM rows are left out" >&2
  fi
fi
if [ -z "$render" ]; then
  # What the table names: this machine, now, this commit.
  echo "$mode" >"$work/mode"
  date -u +%Y-%m-%d >"$work/date"
  cut -d' ' -f1-3 /proc/loadavg >"$work/load"
  commit="$(git -C "$root" rev-parse --short HEAD)"
  git -C "$root" diff --quiet HEAD -- compiler/src compiler/cli/src kernels/src runtime-min/src macros/src schema \
    || commit="$commit (with uncommitted changes to the code)"
  echo "$commit" >"$work/commit"
  grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs >"$work/cpu"
  nproc >"$work/cores"
  flags="$(grep -m1 '^flags' /proc/cpuinfo)"
  isa=""
  for f in avx2 fma avx512f avx512_vnni avx_vnni; do
    case " $flags " in *" $f "*) isa="$isa${isa:+, }$f" ;; esac
  done
  echo "$isa" >"$work/isa"
fi
if ! grep -q '"tool":"xnnpack"' "$work"/run-*.jsonl; then
  echo "no ExecuTorch results (et_runner did not build or run): no table" >&2
  exit 1
fi

table="$(python3 - "$work" <<'PY'
import glob, json, os, re, statistics, sys
work = sys.argv[1]
mode, date, commit, cpu, cores, isa, load = (
    open(os.path.join(work, k)).read().strip() for k in ("mode", "date", "commit", "cpu", "cores", "isa", "load"))
def ratio(r):
    """Two decimals, or two significant digits below 0.1."""
    return f"{r:.2f}×" if r >= 0.1 else f"{r:.2g}×"
rows = []
for path in sorted(glob.glob(os.path.join(work, "run-*.jsonl"))):
    threads = int(re.search(r"run-(\d+)", path).group(1))
    runs = [json.loads(l) for l in open(path)]
    for name in dict.fromkeys(r["name"] for r in runs):
        def at(tool, rnd):
            return next((r["median_us"] for r in runs
                         if r["name"] == name and r["tool"] == tool and r["round"] == rnd), None)
        rounds = sorted({r["round"] for r in runs if r["name"] == name})
        for tool, anchor, program in (("xnnpack", "ExecuTorch + XNNPACK", "the XNNPACK export"),
                                      ("et", "ExecuTorch, portable + optimized kernels", "the portable export")):
            for ours, ptec_reads in (("ptec", "the portable export"), ("ptec_xnn", "the XNNPACK export")):
                if tool == "et" and ours == "ptec_xnn":
                    continue
                pairs = [(at(ours, r), at(tool, r)) for r in rounds]
                pairs = [(p, e) for p, e in pairs if p is not None and e]
                if not pairs:
                    continue
                ratios = [p / e for p, e in pairs]
                rows.append([f"`{name}`", anchor, f"ptec on {ptec_reads}", str(threads),
                             f"{statistics.median(p for p, _ in pairs) / 1000:.2f} ms",
                             f"{statistics.median(e for _, e in pairs) / 1000:.2f} ms",
                             f"**{ratio(statistics.median(ratios))}**",
                             f"{sum(r < 1 for r in ratios)}/{len(ratios)}"])
llama = os.path.join(work, "llama.txt")
if os.path.exists(llama):
    # bench/llama.sh's rows: lowering threads et_prefill ptec_prefill ratio et_decode ptec_decode ratio wins same
    shape = ""
    for line in open(llama):
        if line.startswith("# ") and "prompt" in line:
            shape = line[2:].strip()
        f = line.split()
        if len(f) == 10 and f[1].isdigit():
            lowering, threads = f[0], f[1]
            et_p, pt_p, et_d, pt_d = (float(f[i]) for i in (2, 3, 5, 6))
            rounds = open(os.path.join(work, "llama-rounds")).read().strip()
            # llama.sh counts the rounds ptec decoded faster in, not prefilled.
            for what, et, pt, wins in (("prefill", et_p, pt_p, "-"), ("decode", et_d, pt_d, f"{f[8]}/{rounds}")):
                rows.append([f"Llama-3.2-1B shapes, {lowering}, {what}", "ExecuTorch (same `.pte`)",
                             "ptec on the same `.pte`", threads,
                             f"{1000 / pt:.1f} ms/token", f"{1000 / et:.1f} ms/token",
                             f"**{ratio(et / pt)}**", wins])
isa_text = isa or "none of AVX2, FMA, AVX-512"
runner = f"bench/report.sh {mode}".strip()
out = [
    f"Written by `{runner}` on {date} at commit {commit}, on {cpu} ({cores} CPUs; "
    f"{isa_text}; load average {load} at the end). Times are medians over interleaved rounds; "
    "the ratio is ptec's time over ExecuTorch's within each round, its median over rounds "
    "(below 1× ptec is faster; steadier than the times on a busy machine).",
    "",
    "| program | ExecuTorch runs | ptec runs | threads | ptec time | ExecuTorch time | ptec / ExecuTorch | rounds ptec was faster |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
]
out += ["| " + " | ".join(r) + " |" for r in rows]
print("\n".join(out))
PY
)"

if [ "$stdout" = 1 ]; then
  echo "$table"
  exit 0
fi
TABLE="$table" python3 - "$readme" <<'PY'
import os, re, sys
path = sys.argv[1]
text = open(path).read()
begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(path, "w").write(head + begin + "\n" + os.environ["TABLE"] + "\n" + end + tail)
PY
echo "wrote the table into $readme" >&2
