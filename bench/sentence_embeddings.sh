#!/usr/bin/env bash
# Sentence embeddings with the pretrained all-MiniLM-L6-v2, side by side
# with what a Rust user would pick instead, in one run:
#
#   bench/sentence_embeddings.sh [--iters N] [--rounds N] [--minilm DIR]
#
# On the same token ids (sentences padded to 128 tokens), at batch 1 and 8,
# on one thread and on two, it times
#   - ptec on minilm.pte (the portable export)             "ptec"
#   - ptec on minilm_xnnpack.pte, its delegates compiled    "ptec xnn"
#   - ExecuTorch + XNNPACK on minilm_xnnpack.pte            (its Python runtime)
#   - candle's BERT on the same model.safetensors           (bench/sentence-embeddings)
# in ROUNDS interleaved rounds, and prints sentences per second (the median
# over rounds of batch / median latency) with each one's ratio to ptec xnn,
# then each one's largest difference from sentence-transformers' embeddings
# (reference.json) at batch 8.
#
# DIR (default target/minilm) is made by
#   python examples/sentence-embeddings/export.py DIR --batch 1 --batch 8
# ExecuTorch runs in the pinned venv's Python runtime ($PYTHON, default
# /opt/ptec-venv/bin/python), timed around each `execute` (a few tens of
# microseconds of Python per call, against milliseconds of model):
# et_runner fails on these programs (instruction 8, an embedding, reads
# corrupted token ids), where the Python runtime matches
# sentence-transformers.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
iters=20
rounds=3
minilm="$target/minilm"
python="${PYTHON:-/opt/ptec-venv/bin/python}"
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) iters="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --minilm) minilm="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
for f in minilm.pte minilm_xnnpack.pte minilm_b8.pte minilm_xnnpack_b8.pte ids_b1.bin ids_b8.bin hf/model.safetensors reference.json; do
  if [ ! -f "$minilm/$f" ]; then
    echo "$minilm/$f is missing: run examples/sentence-embeddings/export.py $minilm --batch 1 --batch 8" >&2
    exit 2
  fi
done

echo "building ptec and the candle bench..." >&2
(cd "$root" && cargo build --release --quiet -p ptec-cli)
ptec="$target/release/ptec"
cargo build --release --quiet --manifest-path "$root/bench/sentence-embeddings/Cargo.toml" \
  --target-dir "$target/bench-candle"
candle="$target/bench-candle/release/bench-sentence-embeddings-candle"
et=1
if ! "$python" -c "import executorch.runtime" 2>/dev/null; then
  echo "NOTE: $python has no executorch: the ExecuTorch column is skipped" >&2
  et=""
fi
# et_python PTE IDS MASK BATCH THREADS [--dump-outputs DIR]: et_runner's
# JSON keys, from ExecuTorch's Python runtime.
et_python() {
  "$python" - "$@" "$iters" <<'PY'
import json, statistics, sys, time
import numpy as np, torch
from executorch.extension.pybindings import portable_lib
from executorch.runtime import Runtime
pte, ids, mask, batch, threads = sys.argv[1:6]
dump = sys.argv[7] if len(sys.argv) > 8 and sys.argv[6] == "--dump-outputs" else None
iters = int(sys.argv[-1])
portable_lib._unsafe_reset_threadpool(int(threads))
method = Runtime.get().load_program(pte).load_method("forward")
inputs = [torch.from_numpy(np.fromfile(f, dtype="<i8").reshape(int(batch), -1)) for f in (ids, mask)]
for _ in range(3):
    method.execute(inputs)
times = []
for _ in range(iters):
    t = time.perf_counter()
    out = method.execute(inputs)
    times.append((time.perf_counter() - t) * 1e6)
times.sort()
if dump:
    out[0].numpy().astype("<f4").tofile(f"{dump}/output0.bin")
print(json.dumps({"model": pte, "threads": int(threads), "iters": iters, "min_us": times[0],
                  "median_us": statistics.median(times), "max_us": times[-1]}))
PY
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# record TOOL BATCH THREADS COMMAND...: runs COMMAND, keeps its last line
# (et_runner's JSON keys), tagged.
record() {
  local tool="$1" batch="$2" threads="$3"; shift 3
  local line
  if line="$("$@" 2>"$work/err" | tail -n 1)" && [ -n "$line" ]; then
    echo "{\"tool\": \"$tool\", \"batch\": $batch, \"threads\": $threads, \"round\": $r, \"run\": $line}" >>"$work/results"
  else
    echo "NOTE: $tool failed at batch $batch, $threads thread(s):" >&2
    tail -n 5 "$work/err" >&2
  fi
}
suffix() { [ "$1" = 1 ] && echo "" || echo "_b$1"; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(grep -o -w -m1 -e avx512f -e avx2 /proc/cpuinfo | sort -u | tr '\n' ' ')load average $(cut -d' ' -f1-3 /proc/loadavg)"
# Each tool runs its two thread counts back to back: ptec bench then builds
# each program once per round.
for r in $(seq 1 "$rounds"); do
  for batch in 1 8; do
    s="$(suffix "$batch")"
    echo "round $r/$rounds: batch $batch" >&2
    inputs=(--input "0=$minilm/ids_b$batch.bin" --input "1=$minilm/mask_b$batch.bin")
    dump() { if [ "$r" = 1 ] && [ "$threads" = 1 ]; then mkdir -p "$work/$1$s"; echo "--dump-outputs $work/$1$s"; fi; }
    for threads in 1 2; do
      # shellcheck disable=SC2046
      record ptec "$batch" "$threads" "$ptec" bench "$minilm/minilm$s.pte" "${inputs[@]}" --iters "$iters" --threads "$threads" $(dump ptec)
    done
    for threads in 1 2; do
      # shellcheck disable=SC2046
      record ptec_xnn "$batch" "$threads" "$ptec" bench "$minilm/minilm_xnnpack$s.pte" "${inputs[@]}" --iters "$iters" --threads "$threads" $(dump ptec_xnn)
    done
    for threads in 1 2; do
      [ -n "$et" ] || break
      # shellcheck disable=SC2046
      record et_xnnpack "$batch" "$threads" et_python "$minilm/minilm_xnnpack$s.pte" "$minilm/ids_b$batch.bin" "$minilm/mask_b$batch.bin" "$batch" "$threads" $(dump et_xnnpack)
    done
    mkdir -p "$work/candle$s"
    for threads in 1 2; do
      record candle "$batch" "$threads" env RAYON_NUM_THREADS="$threads" "$candle" "$minilm/hf" \
        "$minilm/ids_b$batch.bin" "$minilm/mask_b$batch.bin" "$batch" --iters "$iters" \
        --dump-output "$work/candle$s/output0.bin"
    done
  done
done
echo "machine after: load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo

python3 - "$work" "$minilm/reference.json" "$rounds" "$iters" <<'PY'
import json, os, statistics, struct, sys
work, reference, rounds, iters = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = [json.loads(l) for l in open(os.path.join(work, "results"))]
tools = [t for t in ("ptec", "ptec_xnn", "et_xnnpack", "candle") if any(r["tool"] == t for r in rows)]
label = {"ptec": "ptec (portable .pte)", "ptec_xnn": "ptec (XNNPACK .pte)", "et_xnnpack": "ExecuTorch+XNNPACK", "candle": "candle"}
print(f"sentences/s (batch / median latency; median over {rounds} rounds of {iters} iterations); ratio: to ptec (XNNPACK .pte)")
print(f"{'':24}" + "".join(f"{f'batch {b}, {t} thr':>22}" for b in (1, 8) for t in (1, 2)))
def rate(tool, b, t):
    v = [b / (r["run"]["median_us"] / 1e6) for r in rows if r["tool"] == tool and r["batch"] == b and r["threads"] == t]
    return statistics.median(v) if v else None
for tool in tools:
    cells = []
    for b in (1, 8):
        for t in (1, 2):
            x, base = rate(tool, b, t), rate("ptec_xnn", b, t)
            cells.append("-" if x is None else f"{x:8.1f} ({x / base:.2f}x)" if base else f"{x:8.1f}")
    print(f"{label[tool]:24}" + "".join(f"{c:>22}" for c in cells))
ref = json.load(open(reference))["embeddings"]
print()
print("largest difference from sentence-transformers' embeddings, batch 8:")
for tool in tools:
    path = os.path.join(work, f"{tool}_b8", "output0.bin")
    if not os.path.exists(path):
        print(f"  {label[tool]:24} no output")
        continue
    data = open(path, "rb").read()
    got = struct.unpack(f"<{len(data) // 4}f", data)
    dim = len(ref[0])
    worst = max(abs(got[i * dim + j] - ref[i % len(ref)][j]) for i in range(len(got) // dim) for j in range(dim))
    print(f"  {label[tool]:24} {worst:.2e}")
PY
