#!/usr/bin/env bash
# Large-model benchmark: ptec's generation time and peak memory, and the
# release build time and binary size of the generated module, for a
# ResNet-18-size program (~47 MB of weights), with the weights embedded and
# external (read from the .pte at run time); then load time, the first run
# (which touches the planned memory and weights) and the best of five.
#
#   bench/large_model.sh [MODEL.pte]
#
# Without an argument it exports ResNet-18 with tests/fixtures/make_fixtures.py
# (needs the pinned torch/executorch venv: PYTHON=/path/to/python, default
# /opt/ptec-venv/bin/python) into target/large-model/. Needs GNU time.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$repo/target/large-model"
mkdir -p "$work"
model="${1:-$work/resnet18.pte}"
if [ ! -f "$model" ]; then
  "${PYTHON:-/opt/ptec-venv/bin/python}" "$repo/tests/fixtures/make_fixtures.py" --large resnet18 "$model"
fi
model="$(cd "$(dirname "$model")" && pwd)/$(basename "$model")"
cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p ptec-cli
ptec="${CARGO_TARGET_DIR:-$repo/target}/release/ptec"
export CARGO_TARGET_DIR="$work/target"

# One crate per mode: the generated module and a main that runs it once.
make_crate() { # mode dir
  local mode="$1" dir="$2"
  mkdir -p "$dir/src"
  cat > "$dir/Cargo.toml" <<TOML
[package]
name = "large-model-$mode"
version = "0.0.0"
edition = "2021"
publish = false
[dependencies]
ptec-runtime = { path = "$repo/runtime-min", features = ["std"] }
[workspace]
TOML
  if [ "$mode" = embedded ]; then
    construct='Model::boxed()'
  else
    construct="Model::boxed([ptec_runtime::Blob::open(\"$model\").unwrap()]).unwrap()"
  fi
  cat > "$dir/src/main.rs" <<RS
mod model;
use model::Model;
use ptec_runtime::Model as _;
fn main() {
    let t = std::time::Instant::now();
    let mut m = $construct;
    let load = t.elapsed();
    let meta = &m.methods()[0];
    let t = meta.input_tensor_meta(0).unwrap();
    let n: usize = t.sizes.iter().product();
    let x: Vec<f32> = (0..n).map(|i| (0.1 * i as f64).sin() as f32).collect();
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    m.set_input(0, 0, ptec_runtime::Value::Tensor(ptec_runtime::TensorRef::new(t.dtype, t.sizes, &bytes))).unwrap();
    let mut runs = Vec::new();
    for _ in 0..5 {
        let t0 = std::time::Instant::now();
        m.execute(0).unwrap();
        runs.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let best = runs.iter().cloned().fold(f64::INFINITY, f64::min);
    println!("load_us {:.1} first_ms {:.1} best_ms {:.1}", load.as_secs_f64() * 1e6, runs[0], best);
}
RS
}

printf '%-9s %8s %12s %9s %10s %10s %9s %8s\n' mode gen_s gen_peak_MB build_s binary_MB load_us first_ms best_ms
for mode in embedded external; do
  dir="$work/crate-$mode"
  make_crate "$mode" "$dir"
  # Build the runtime once untimed, so build_s is the generated module's.
  echo 'fn main() {}' > "$dir/src/warm.rs"
  : > "$dir/src/model.rs"
  cargo build --quiet --release --manifest-path "$dir/Cargo.toml" 2>/dev/null || true
  gen=$( { /usr/bin/time -f '%e %M' "$ptec" "$model" --weights "$mode" --name Model -o "$dir/src/model.rs"; } 2>&1 | tail -1)
  start=$(date +%s.%N)
  cargo build --quiet --release --manifest-path "$dir/Cargo.toml"
  end=$(date +%s.%N)
  bin="$CARGO_TARGET_DIR/release/large-model-$mode"
  run=$("$bin")
  read -r gen_s gen_kb <<<"$gen"
  printf '%-9s %8s %12.1f %9.1f %10.1f %10s %9s %8s\n' "$mode" "$gen_s" "$(echo "$gen_kb / 1024" | bc -l)" \
    "$(echo "$end - $start" | bc -l)" "$(echo "$(stat -c %s "$bin") / 1048576" | bc -l)" \
    "$(echo "$run" | awk '{print $2}')" "$(echo "$run" | awk '{print $4}')" "$(echo "$run" | awk '{print $6}')"
done
