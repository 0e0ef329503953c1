#!/usr/bin/env bash
# LLM benchmark: prefill and decode tokens/s of a Llama from ExecuTorch's
# LLM export (KV cache, custom SDPA, dynamic sequence length), on
# ExecuTorch's runtime and compiled by ptec, side by side in one run: the
# same .pte, prompt and greedy tokens; fp32 portable, fp32 `-X` (XNNPACK)
# and `-X -qmode 8da4w -G 32` (4-bit weights); on 1 and 2 threads.
# Prefill is the best of 3 PROMPT-token prompts, decode DECODE single
# tokens after it; each row takes the medians of ROUNDS (default 3)
# interleaved runs of each runtime. `wins` counts the rounds in which
# ptec decoded faster; `same` says whether both gave the same greedy
# tokens in every round.
#
#   bench/llama.sh                  # Llama-3.2-1B's shapes (random weights)
#   SHAPE=tiny bench/llama.sh       # a few MB, to try the script
#   LAYERS=4 bench/llama.sh         # 1B's widths, fewer layers
#   LOWERINGS=8da4w bench/llama.sh  # some of portable, xnnpack, 8da4w
#
# Exports (6 GB each at 1B in fp32, not committed) go to target/llama-bench/; needs
# the pinned venv (PYTHON, default /opt/ptec-venv/bin/python).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-/opt/ptec-venv/bin/python}"
shape="${SHAPE:-1b}"
prompt="${PROMPT:-128}"
decode="${DECODE:-32}"
rounds="${ROUNDS:-3}"
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
work="$repo/target/llama-bench"
mkdir -p "$work"
cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p ptec-cli
ptec="${CARGO_TARGET_DIR:-$repo/target}/release/ptec"
export CARGO_TARGET_DIR="$work/target"
tag="$shape${LAYERS:+-$LAYERS}"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(grep -o -w 'avx512f\|avx2\|fma' /proc/cpuinfo | sort -u | xargs)"
echo "# $tag: prompt $prompt tokens, decode $decode tokens"
printf '%-9s %7s %14s %14s %7s %14s %14s %7s %5s %5s\n' lowering threads \
  et_prefill_t/s ptec_prefill_t/s ratio et_decode_t/s ptec_decode_t/s ratio wins same

for lowering in ${LOWERINGS:-portable xnnpack 8da4w}; do
  pte="$work/$tag-$lowering.pte"
  [ -f "$pte" ] || "$python" "$repo/bench/llama.py" export "$shape" "$lowering" "$pte" >&2
  # A package per export, each with its own binary.
  dir="$work/crate-$tag-$lowering"
  mkdir -p "$dir/src"
  cat > "$dir/Cargo.toml" <<TOML
[package]
name = "llama-bench-$tag-$lowering"
version = "0.0.0"
edition = "2021"
publish = false
[dependencies]
ptec-runtime = { path = "$repo/runtime-min", features = ["std"] }
[workspace]
TOML
  cat > "$dir/src/main.rs" <<'RS'
mod model;
use std::time::Instant;
fn argmax(x: &[f32]) -> usize {
    (0..x.len()).fold(0, |b, i| if x[i] > x[b] { i } else { b })
}
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (threads, prompt_len, decode): (usize, usize, usize) =
        (a[2].parse().unwrap(), a[3].parse().unwrap(), a[4].parse().unwrap());
    ptec_runtime::set_threads(threads);
    let mut m = model::Llama::boxed([ptec_runtime::Blob::open(&a[1]).unwrap()]).unwrap();
    let prompt: Vec<i64> = (0..prompt_len).map(|i| ((7 * i + 3) % 500) as i64).collect();
    let (mut best, mut token) = (f64::INFINITY, 0);
    for _ in 0..3 {
        let t = Instant::now();
        let logits = m.forward(ptec_runtime::TensorRef::from_slice(&[1, prompt_len], &prompt), &[0]).unwrap();
        best = best.min(t.elapsed().as_secs_f64());
        token = argmax(&logits[0]);
    }
    let (mut tokens, mut pos) = (vec![token], prompt_len as i64);
    let t = Instant::now();
    for _ in 0..decode {
        let step = [*tokens.last().unwrap() as i64];
        let logits = m.forward(ptec_runtime::TensorRef::from_slice(&[1, 1], &step), &[pos]).unwrap();
        pos += 1;
        tokens.push(argmax(&logits[0]));
    }
    let decode_s = t.elapsed().as_secs_f64();
    let tokens: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
    println!("{best:.6} {decode_s:.6} {}", tokens.join(" "));
}
RS
  "$ptec" "$pte" --weights external --name Llama -o "$dir/src/model.rs"
  cargo build --quiet --release --manifest-path "$dir/Cargo.toml"
  for threads in 1 2; do
    # ROUNDS interleaved runs of each; the medians, and in how many rounds
    # ptec decoded faster (the host's load moves single runs by tens of %).
    et_ps=() et_ds=() pt_ps=() pt_ds=() wins=0 same=yes
    for _ in $(seq "$rounds"); do
      et=$("$python" "$repo/bench/llama.py" time "$pte" "$threads" "$prompt" "$decode" 2>/dev/null | tail -1)
      pt=$("$CARGO_TARGET_DIR/release/llama-bench-$tag-$lowering" "$pte" "$threads" "$prompt" "$decode")
      read -r et_p et_d et_tok <<<"$et"
      read -r pt_p pt_d pt_tok <<<"$pt"
      [ "$et_tok" = "$pt_tok" ] || same=no
      [ "$(echo "$pt_d < $et_d" | bc -l)" = 1 ] && wins=$((wins + 1))
      et_ps+=("$et_p") et_ds+=("$et_d") pt_ps+=("$pt_p") pt_ds+=("$pt_d")
    done
    et_p=$(median "${et_ps[@]}") et_d=$(median "${et_ds[@]}") pt_p=$(median "${pt_ps[@]}") pt_d=$(median "${pt_ds[@]}")
    # Ratios are ptec's throughput over ExecuTorch's: above 1, ptec is faster.
    printf '%-9s %7s %14.1f %14.1f %7.2f %14.2f %14.2f %7.2f %5s %5s\n' "$lowering" "$threads" \
      "$(echo "$prompt / $et_p" | bc -l)" "$(echo "$prompt / $pt_p" | bc -l)" "$(echo "$et_p / $pt_p" | bc -l)" \
      "$(echo "$decode / $et_d" | bc -l)" "$(echo "$decode / $pt_d" | bc -l)" "$(echo "$et_d / $pt_d" | bc -l)" \
      "$wins/$rounds" "$same"
  done
done
