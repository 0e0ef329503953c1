#!/usr/bin/env bash
# The broad benchmark: ptec against ExecuTorch + XNNPACK on twelve models
# across families, fp32 and int8, on one thread and on two, side by side
# in one run (bench/run.sh's interleaved rounds), then one table of the
# ratios with geometric means and the targets of docs/benchmarking.md.
#
#   bench/broad.sh [--threads "1 2"] [--rounds N] [--iters N] [--keep DIR] [--readme] [NAME...]
#
# The models (bench/broad.py: torchvision's ResNet-18/50, MobileNetV2,
# MobileNetV3-Large/Small, RegNetY-400MF, EfficientNet-B0, ShuffleNetV2,
# ConvNeXt-Tiny, ViT-B/16, Swin-T, and BERT-base's encoder; the eight CNNs
# also in int8) are exported once per machine into the user's cache, in a
# folder named for the pins and the export script, with a Python
# environment made from bench/broad-pins.txt (PTEC_VENV to use another).
# That costs about an hour the first time; a second run only times.
# NAMEs (e.g. resnet50 resnet50_q8) time a subset.
# --keep DIR keeps run.sh's JSON results (t1.json, t2.json) in DIR;
# --render DIR prints the table from such a DIR without running anything.
# --readme also writes the table, with the machine, its ISA, the date and
# the commit that ran, into README.md between <!-- broad:begin --> and
# <!-- broad:end -->.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
threads="1 2"
rounds=5
iters=10
keep=""
render=""
readme=""
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --render) render="$2"; shift 2 ;;
    --readme) readme="$here/../README.md"; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done

if [ -z "$render" ]; then
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/ptec/bench"
  # The pins and the export script (not make_fixtures.py, whose helpers it
  # uses: its fixtures change often, its lowering helpers rarely).
  key="$(cat "$here/broad-pins.txt" "$here/broad.py" | sha256sum | cut -c1-16)"
  out="$cache/broad-$key"
  if [ ! -f "$out/complete" ]; then
    venv="$("$here/broad-venv.sh")"
    echo "broad: exporting the models into $out (resumes where it stopped)" >&2
    "$venv/bin/python" "$here/broad.py" "$out"
    touch "$out/complete"
  fi
  models=()
  if [ ${#names[@]} -eq 0 ]; then
    while read -r n; do models+=("$out/$n.bpte"); done <"$out/done"
  else
    for n in "${names[@]}"; do
      [ -f "$out/$n.bpte" ] || { echo "broad: no model $n in $out" >&2; exit 2; }
      models+=("$out/$n.bpte")
    done
  fi
  render="${keep:-$(mktemp -d)}"
  mkdir -p "$render"
  # What the table names: this machine, today, this commit.
  commit="$(git -C "$here/.." rev-parse --short HEAD)"
  git -C "$here/.." diff --quiet HEAD -- compiler/src compiler/cli/src kernels/src runtime-min/src macros/src schema \
    || commit="$commit (with uncommitted changes to the code)"
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  isa=""
  for f in avx2 fma avx512f avx512_vnni avx512vbmi avx512_bf16 avx_vnni; do
    case "$flags" in *" $f "*) isa="$isa${isa:+, }$f" ;; esac
  done
  {
    echo "date=$(date -u +%Y-%m-%d)"
    echo "commit=$commit"
    echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "family=$(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "model=$(grep -m1 '^model\s*:' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "vendor=$(grep -m1 'vendor_id' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "cores=$(nproc)"
    echo "isa=${isa:-none of AVX2, FMA, AVX-512}"
    echo "rounds=$rounds"
    echo "iters=$iters"
  } >"$render/machine"
  for t in $threads; do
    # ExecuTorch's portable kernels take 25 s an inference and more on
    # these models: they are left out (--et-iters 0).
    "$here/run.sh" --threads "$t" --rounds "$rounds" --iters "$iters" --et-iters 0 --no-gemm \
      --json "$render/t$t.json" "${models[@]}" >"$render/t$t.txt"
    cat "$render/t$t.txt"
    # The load the run shared the machine with.
    echo "load_t$t=$(cut -d' ' -f1-3 /proc/loadavg) (at its end)" >>"$render/machine"
  done
  echo
fi

README="$readme" python3 - "$render" <<'PY'
import json, math, os, statistics, sys
from pathlib import Path

d = Path(sys.argv[1])
runs = {}
for f in sorted(d.glob("t*.json")):
    runs[int(f.stem[1:])] = [json.loads(l) for l in f.read_text().splitlines() if l.strip()]
if not runs:
    sys.exit(f"broad: no t*.json results in {d}")


def per_round(rows, name, tool):
    """ptec TOOL / XNNPACK within each round, for NAME."""
    out = []
    for r in sorted({row["round"] for row in rows}):
        at = {row["tool"]: row["median_us"] for row in rows if row["name"] == name and row["round"] == r}
        if at.get(tool) and at.get("xnnpack"):
            out.append(at[tool] / at["xnnpack"])
    return out


def med(rows, name, tool):
    v = [row["median_us"] for row in rows if row["name"] == name and row["tool"] == tool]
    return statistics.median(v) if v else None


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


names = list(dict.fromkeys(row["name"] for rows in runs.values() for row in rows))
ts = sorted(runs)
print("ptec / ExecuTorch+XNNPACK, median over rounds of the ratio within a round (< 1: ptec is faster);")
print("'same file': ptec on the XNNPACK program itself (NAME_xnnpack.pte); 'portable': ptec on NAME.bpte")
head = ["model"]
for t in ts:
    head += [f"{t}T XNNPACK ms", f"{t}T same file", f"{t}T its range", f"{t}T portable"]
if 1 in runs and 2 in runs:
    head += ["2T gain ptec", "2T gain XNNPACK"]
table = [head]
best = {t: [] for t in ts}
for n in names:
    row = [n]
    for t in ts:
        same, port = per_round(runs[t], n, "ptec_xnn"), per_round(runs[t], n, "ptec")
        x = med(runs[t], n, "xnnpack")
        row.append(f"{x / 1000:.2f}" if x else "-")
        row.append(f"{statistics.median(same):.2f}x" if same else "-")
        row.append(f"{min(same):.2f}..{max(same):.2f}" if same else "-")
        row.append(f"{statistics.median(port):.2f}x" if port else "-")
        if same:
            best[t].append(statistics.median(same))
    if 1 in runs and 2 in runs:
        for tool in ("ptec_xnn", "xnnpack"):
            a, b = med(runs[1], n, tool), med(runs[2], n, tool)
            row.append(f"{a / b:.2f}x" if a and b else "-")
    table.append(row)
w = [max(len(r[i]) for r in table) for i in range(len(head))]
for k, r in enumerate(table):
    print("  ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(r)))
    if k == 0:
        print("  ".join("-" * x for x in w))
print()
for t in ts:
    g = geomean(best[t])
    slower = sum(v > 1 for v in best[t])
    goal = 0.75 if t == 1 else 0.8
    if g is not None:
        print(f"{t} thread(s), same file: geomean {g:.2f}x over {len(best[t])} models (target <= {goal}x), "
              f"{slower} slower than XNNPACK (target 0)")

readme = os.environ.get("README")
if readme:
    meta_file = d / "machine"
    if not meta_file.exists():
        sys.exit(f"broad: {meta_file} is missing (a run kept by an older broad.sh): no README table")
    meta = dict(line.split("=", 1) for line in meta_file.read_text().splitlines() if "=" in line)
    loads = "; ".join(f"{k[6:]} thread(s): {v}" for k, v in meta.items() if k.startswith("load_t"))
    # AMD's core generation, which the model name of a cloud CPU ("AMD
    # EPYC") leaves out and which decides its AVX-512 (Zen 4 runs it in
    # two halves, Zen 5 whole).
    family = f"CPU family {meta['family']}"
    if meta.get("vendor") == "AuthenticAMD" and meta.get("model", "").isdigit():
        f, m = int(meta["family"]), int(meta["model"])
        zen = {26: "Zen 5"}.get(f) or (f == 25 and ("Zen 4" if m in range(0x10, 0x20) or m in range(0x60, 0x80)
                                                        or m in range(0xA0, 0xB0) else "Zen 3"))
        family += f" ({zen})" if zen else ""
    lines = [
        f"Written by `bench/broad.sh --readme` on {meta['date']} at commit {meta['commit']}, on {meta['cpu']} "
        f"({family}, {meta['cores']} CPUs; {meta['isa']}; load average {loads}), "
        f"{meta['rounds']} rounds of {meta['iters']} iterations. Each ratio is ptec's time over "
        "ExecuTorch + XNNPACK's on the same `.pte` within a round, its median over rounds, with the range over "
        "rounds (below 1× ptec is faster); `_q8` models are XNNPACK's static int8 flow.",
        "",
    ]
    head_md = ["model"]
    for t in ts:
        head_md += [f"XNNPACK, {t} thread{'s' if t > 1 else ''}", f"ptec / XNNPACK, {t}T", "range"]
    lines.append("| " + " | ".join(head_md) + " |")
    lines.append("|" + " --- |" * len(head_md))
    for n in names:
        row = [f"`{n}`"]
        for t in ts:
            same = per_round(runs[t], n, "ptec_xnn")
            x = med(runs[t], n, "xnnpack")
            row.append(f"{x / 1000:.2f} ms" if x else "-")
            m = statistics.median(same) if same else None
            row.append((f"**{m:.2f}×**" if m <= 1 else f"{m:.2f}×") if same else "-")
            row.append(f"{min(same):.2f}–{max(same):.2f}" if same else "-")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    for t in ts:
        g = geomean(best[t])
        if g is not None:
            wins = sum(v <= 1 for v in best[t])
            lines.append(f"- {t} thread{'s' if t > 1 else ''}: geomean {g:.2f}× over {len(best[t])} models, "
                         f"ptec as fast or faster on {wins}.")
    text = Path(readme).read_text()
    begin, end = "<!-- broad:begin -->", "<!-- broad:end -->"
    if begin not in text or end not in text:
        sys.exit(f"broad: {readme} has no {begin} / {end} markers")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    Path(readme).write_text(head + begin + "\n" + "\n".join(lines) + "\n" + end + tail)
    print(f"wrote the table into {readme}", file=sys.stderr)
PY
