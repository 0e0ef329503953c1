#!/usr/bin/env bash
# Builds ExecuTorch's selective build of one model, the way its CMake
# build does with EXECUTORCH_SELECT_OPS_MODEL and DTYPE_SELECTIVE_BUILD,
# but with plain g++ (no CMake, no submodules): the core runtime, the
# selected prim ops, and only the portable kernels the model calls,
# compiled for only the dtypes it calls them with; the runner is
# bench/et-selective/runner.cpp. ExecuTorch's smallest configuration:
# -Os, no logging, no program verification, sections collected; the C++
# runtime linked in statically (Rust's standard library is inside ptec's
# binary too), the C library shared on both sides.
#
#   bench/et_selective.sh --src EXECUTORCH_SRC [--flatbuffers DIR] [--out DIR] MODEL
#
# MODEL is a .pte or a .bpte (its program is taken out). EXECUTORCH_SRC is
# a checkout of pytorch/executorch; of its submodules only flatbuffers'
# headers are needed: --flatbuffers names a google/flatbuffers checkout at
# the version of the flatc the executorch wheel ships (24.3.25 for 1.5.1;
# default: EXECUTORCH_SRC/third-party/flatbuffers). The codegen and that
# flatc run from the broad benchmark's venv (bench/broad-pins.txt). Checks the binary against the
# full runtime's et_runner on the same inputs when it is built (see
# bench/size.sh), and prints the stripped binary's path last.
#
# XNNPACK exports need the XNNPACK backend, whose sources are submodules:
# refused.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
src="" out="" model="" flatbuffers=""
while [ $# -gt 0 ]; do
  case "$1" in
    --src) src="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --flatbuffers) flatbuffers="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) model="$1"; shift ;;
  esac
done
[ -n "$src" ] && [ -f "$src/runtime/executor/program.cpp" ] \
  || { echo "--src must be an ExecuTorch source tree (runtime/executor/program.cpp)" >&2; exit 2; }
[ "$(basename "$src")" = executorch ] \
  || { echo "--src must be a directory named executorch (its headers are included as <executorch/...>)" >&2; exit 2; }
[ -f "$model" ] || { echo "no model file '$model'" >&2; exit 2; }
src="$(cd "$src" && pwd)"
flatbuffers="${flatbuffers:-$src/third-party/flatbuffers}"
[ -f "$flatbuffers/include/flatbuffers/base.h" ] \
  || { echo "no flatbuffers headers in '$flatbuffers/include' (give --flatbuffers)" >&2; exit 2; }
name="$(basename "$model")"; name="${name%.*}"
out="${out:-${CARGO_TARGET_DIR:-$root/target}/et-selective/$name}"
rm -rf "$out"; mkdir -p "$out/obj" "$out/include/executorch/schema" "$out/include/executorch/runtime/core" "$out/include/executorch/runtime/kernel"
out="$(cd "$out" && pwd)"

py="$("$here/broad-venv.sh")/bin/python"
flatc="$("$py" -c 'import importlib.util as u; print(u.find_spec("executorch").submodule_search_locations[0])')/data/bin/flatc"
want="$("$flatc" --version | sed 's/.* //')"
have="$(sed -n 's/^#define FLATBUFFERS_VERSION_\(MAJOR\|MINOR\|REVISION\) //p' "$flatbuffers/include/flatbuffers/base.h" | paste -sd.)"
[ "$want" = "$have" ] || { echo "the wheel's flatc is $want, the flatbuffers headers $have: they must agree" >&2; exit 2; }

# The program: a bundle's `program` field (BP08: field 2 of the root table).
if [ "${model##*.}" = bpte ]; then
  "$py" - "$model" "$out/model.pte" <<'EOF'
import struct, sys
b = open(sys.argv[1], "rb").read()
if b[4:8] != b"BP08":
    sys.exit(f"{sys.argv[1]}: not a BP08 bundled program")
root = struct.unpack_from("<I", b, 0)[0]
vtable = root - struct.unpack_from("<i", b, root)[0]
field = struct.unpack_from("<H", b, vtable + 4 + 2 * 2)[0]
vec = root + field + struct.unpack_from("<I", b, root + field)[0]
n = struct.unpack_from("<I", b, vec)[0]
open(sys.argv[2], "wb").write(b[vec + 4 : vec + 4 + n])
EOF
else
  cp "$model" "$out/model.pte"
fi

# ExecuTorch's codegen, run from its tree as its CMake build runs it.
sel="$out/selected_operators.yaml"
torchgen="$("$py" -c 'import torchgen, os; print(os.path.dirname(torchgen.__file__))')"
(
  cd "$src"
  "$py" -m codegen.tools.gen_oplist --output_path="$sel" --model_file_path="$out/model.pte" >/dev/null
  grep -q '^  aten::' "$sel" || { echo "et_selective: $model calls no portable operator (a delegate-only program?): refused" >&2; exit 1; }
  "$py" -m codegen.gen --source-path="$src/codegen" --install-dir="$out" \
    --tags-path="$torchgen/packaged/ATen/native/tags.yaml" \
    --aten-yaml-path="$torchgen/packaged/ATen/native/native_functions.yaml" \
    --op-selection-yaml-path="$sel" --functions-yaml-path="$src/kernels/portable/functions.yaml" >/dev/null
  "$py" -m codegen.tools.gen_selected_prim_ops --op-selection-yaml-path="$sel" --output-dir="$out" >/dev/null
  "$py" -m codegen.tools.gen_selected_op_variants --yaml-file="$sel" --output-dir="$out/" >/dev/null
  "$py" -m codegen.tools.gen_max_kernel_num --oplist-yaml="$sel" \
    --prim-ops-source="$src/kernels/prim_ops/register_prim_ops.cpp" \
    --output-path="$out/include/executorch/runtime/kernel/selected_max_kernel_num.h" >/dev/null
)
"$flatc" --cpp --cpp-std c++11 --gen-mutable --scoped-enums -o "$out/include/executorch/schema" \
  "$src/schema/program.fbs" "$src/schema/scalar_type.fbs"
version="$(head -n 1 "$src/version.txt" | sed 's/[^0-9.].*//')"
IFS=. read -r major minor patch <<<"$version"
sed -e "s/@ET_VERSION_MAJOR@/$major/g" -e "s/@ET_VERSION_MINOR@/$minor/g" -e "s/@ET_VERSION_PATCH@/${patch:-0}/g" \
  "$src/runtime/core/version.h.in" > "$out/include/executorch/runtime/core/version.h"

# The sources: the lists of ExecuTorch's build_variables.bzl (read, not
# copied), and the portable kernels that define the selected kernels.
mapfile -t sources < <("$py" - "$src" "$sel" <<'EOF'
import os, re, sys, yaml
src, sel = sys.argv[1], sys.argv[2]
names = {}
exec(open(os.path.join(src, "shim_et/xplat/executorch/build/build_variables.bzl")).read(), names)
files = list(names["EXECUTORCH_CORE_SRCS"])
files = [f for f in files if not f.startswith("runtime/platform/default/")]
files += ["runtime/platform/default/posix.cpp"]
files += ["kernels/prim_ops/et_copy_index.cpp", "kernels/prim_ops/et_view.cpp", "kernels/prim_ops/register_prim_ops.cpp"]
files += names["KERNELS_UTIL_ALL_DEPS_SRCS"]
files += ["kernels/portable/cpu/pattern/" + f for f in names["PATTERN_SRCS"]]
files += ["extension/data_loader/file_data_loader.cpp"]
selected = set(yaml.safe_load(open(sel))["operators"])
kernels = set()
for entry in yaml.safe_load(open(os.path.join(src, "kernels/portable/functions.yaml"))):
    if "aten::" + entry.get("op", "") in selected:
        for k in entry["kernels"]:
            kernels.add(k["kernel_name"].split("::")[-1])
cpu = os.path.join(src, "kernels/portable/cpu")
for f in sorted(os.listdir(cpu)):
    if f.startswith("op_") and f.endswith(".cpp"):
        text = open(os.path.join(cpu, f)).read()
        if any(re.search(r"\b" + k + r"\s*\(", text) for k in kernels):
            files.append("kernels/portable/cpu/" + f)
for f in files:
    print(os.path.join(src, f))
EOF
)
[ ${#sources[@]} -gt 40 ] || { echo "et_selective: could not list ExecuTorch's sources" >&2; exit 1; }
sources+=("$out/RegisterCodegenUnboxedKernelsEverything.cpp" "$here/et-selective/runner.cpp")

flags=(-std=c++17 -Os -DNDEBUG -fno-exceptions -fno-rtti -ffunction-sections -fdata-sections
  -DET_LOG_ENABLED=0 -DET_ENABLE_PROGRAM_VERIFICATION=0 -DET_ENABLE_DEPRECATED_CONSTANT_BUFFER=0
  -DEXECUTORCH_SELECTIVE_BUILD_DTYPE -DET_PRIM_OPS_SELECTIVE_BUILD -DC10_USING_CUSTOM_GENERATED_MACROS
  -I"$(dirname "$src")" -I"$src/runtime/core/portable_type/c10" -I"$out/include" -I"$out"
  -I"$flatbuffers/include" -w)
echo "et_selective: compiling ${#sources[@]} files" >&2
printf '%s\n' "${sources[@]}" > "$out/sources.txt"
objs=()
for s in "${sources[@]}"; do
  objs+=("$out/obj/$(echo "$s" | sha1sum | cut -c1-12)-$(basename "${s%.cpp}").o")
done
for i in "${!sources[@]}"; do
  echo "g++ ${flags[*]} -c ${sources[$i]} -o ${objs[$i]}"
done | xargs -P "$(nproc)" -I{} sh -c '{}'
g++ -Os -Wl,--gc-sections -static-libstdc++ -static-libgcc "${objs[@]}" -o "$out/runner" -lm
strip -o "$out/runner.stripped" "$out/runner"

# The binary runs the model; against the full runtime where it is built.
mkdir -p "$out/outputs"
"$out/runner" "$out/model.pte" "$out/outputs"
et="${CARGO_TARGET_DIR:-$root/target}/et-runner/et_runner"
if [ -x "$et" ]; then
  mkdir -p "$out/reference"
  "$et" "$out/model.pte" --iters 1 --warmup 0 --dump-outputs "$out/reference" >/dev/null
  "$py" - "$out/outputs" "$out/reference" <<'EOF'
import os, sys
import numpy as np
got_dir, ref_dir = sys.argv[1], sys.argv[2]
names = sorted(os.listdir(ref_dir))
assert names and names == sorted(os.listdir(got_dir)), (names, os.listdir(got_dir))
for n in names:
    got = np.fromfile(os.path.join(got_dir, n), np.float32)
    ref = np.fromfile(os.path.join(ref_dir, n), np.float32)
    err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    if got.shape != ref.shape or not err <= 1e-4 * max(scale, 1.0):
        sys.exit(f"et_selective: {n} differs from et_runner's: max |diff| {err} on outputs up to {scale}")
    print(f"et_selective: {n} agrees with et_runner's (max |diff| {err:.2g} on outputs up to {scale:.3g})", file=sys.stderr)
EOF
fi
echo "$out/runner.stripped"
