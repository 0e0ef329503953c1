#!/usr/bin/env bash
# Builds the firmware for both emulated boards, boots it under
# qemu-system-arm and fails unless every model passed its bundled cases:
#   mps2-an386 (Cortex-M4F, thumbv7em-none-eabihf)
#   mps3-an547 (Cortex-M55, thumbv8m.main-none-eabihf)
# The models go in three firmwares per board, fp32, int8 (portable and
# XNNPACK) and the Cortex-M backend's (`_cortex_m`): all of them overflow
# the AN386's 4 MiB of code memory.
#
#   ./run.sh              # build, boot and check (CI runs this)
#   ./run.sh --footprint  # also one firmware per model: the size table
#                         # of docs/cortex-m.md, in Markdown
# PTEC_CORTEX_M_EXTRA="/abs/a.bpte ..." adds bundles from elsewhere to the
# table (a model too large to commit).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")"
footprint=false
[[ "${1:-}" == --footprint ]] && footprint=true

if ! command -v qemu-system-arm >/dev/null; then
    echo "run.sh: qemu-system-arm is missing (Debian: apt-get install qemu-system-arm)" >&2
    exit 1
fi
target_dir=../../target/cortex-m
boards="mps2-an386:thumbv7em-none-eabihf mps3-an547:thumbv8m.main-none-eabihf"
models() { # the manifest's model names matching $1, comma-separated
    python3 -c "import json,sys; print(','.join(m for m in json.load(open('models/manifest.json'))['models'] if sys.argv[1] in m))" "$1"
}
fp32="$(models _fp32)"
int8="$(models int8)"
cortex_m="$(models _cortex_m)"

# build TARGET MODELS: prints the firmware's path.
build() {
    rustup target add "$1" >/dev/null 2>&1 || true
    PTEC_CORTEX_M_MODELS="$2" cargo build --quiet --release --target "$1" --target-dir "$target_dir" >&2 || return 1
    echo "$target_dir/$1/release/example-cortex-m"
}
# boot MACHINE ELF: the firmware's output; fails when it does.
boot() {
    timeout 900 qemu-system-arm -M "$1" -nographic -semihosting-config enable=on,target=native -kernel "$2"
}

failed=0
for b in $boards; do
    machine="${b%%:*}" target="${b#*:}"
    for set in "$fp32" "$int8" "$cortex_m"; do
        n="$(tr ',' '\n' <<<"$set" | wc -l)"
        echo "== $machine: $set"
        elf="$(build "$target" "$set")"
        if out="$(boot "$machine" "$elf")" && grep -qx "$n of $n models passed" <<<"$out"; then
            echo "$out"
        else
            echo "$out"
            echo "FAILED on $machine"
            failed=1
        fi
    done
done
[[ $failed == 0 ]] || exit 1
$footprint || exit 0

section_sum() { # ELF SECTIONS...: the sum of the sections' sizes
    readelf -SW "$1" | python3 -c '
import re, sys
want = set(sys.argv[1:])
print(sum(int(m.group(2), 16) for m in (re.search(r"\] (\S+)\s+\S+\s+\S+\s+\S+\s+(\S+)", l) for l in sys.stdin) if m and m.group(1) in want))
' "${@:2}"
}
kib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1024 }'; }
code_of() { section_sum "$1" .boot_vector .vector_table .text; }
consts_of() { section_sum "$1" .rodata .data; }
ram_of() { section_sum "$1" .data .bss .uninit; }
stack_of() { sed -n 's/^stack high-water mark: \([0-9]*\) bytes$/\1/p' <<<"$1"; }
echo
echo "Flash is code (.vector_table, .text) plus constants (.rodata, .data's initial"
echo "values); RAM is .data, .bss and the stack's high-water mark. A model's code"
echo "and weights are what it adds to the firmware without models; its test data"
echo "(inputs and expected outputs) is left out of its weights."
echo
echo "| model | board | flash KiB | code KiB | weights KiB | test data KiB | RAM KiB | arena KiB | stack bytes |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
extra="${PTEC_CORTEX_M_EXTRA:-}"
for b in $boards; do
    machine="${b%%:*}" target="${b#*:}"
    elf="$(build "$target" none)"
    base_code="$(code_of "$elf")" base_consts="$(consts_of "$elf")"
    base_stack="$(stack_of "$(boot "$machine" "$elf")")"
    echo "| none (cortex-m-rt, semihosting, the harness) | $machine | $(kib $((base_code + base_consts))) | $(kib "$base_code") | | | $(kib $(( $(ram_of "$elf") + base_stack ))) | | $base_stack |"
    for model in $(tr ',' ' ' <<<"$fp32,$int8,$cortex_m") $extra; do
        if ! elf="$(build "$target" "$model" 2>/dev/null)"; then
            [[ "$model" == *.bpte ]] || exit 1
            echo "| $(basename "$model") | $machine | does not fit | | | | | | |"
            continue
        fi
        out="$(boot "$machine" "$elf")"
        grep -qx "1 of 1 models passed" <<<"$out" || { echo "$out" >&2; exit 1; }
        stack="$(stack_of "$out")"
        arena="$(sed -n 's/.*(\([0-9]*\) bytes of planned memory and state)$/\1/p' <<<"$out")"
        if [[ "$model" == *.bpte ]]; then
            # Not in the manifest: the inputs' and outputs' bytes, per case.
            test_data="$(../../target/release/ptec inspect --json "$model" | python3 -c '
import json, sys
print(sum(m["test_data_bytes"] for m in json.load(sys.stdin)["methods"]))')"
        else
            test_data="$(python3 -c "import json,sys; print(json.load(open('models/manifest.json'))['models'][sys.argv[1]]['test_data_bytes'])" "$model")"
        fi
        code="$(code_of "$elf")" consts="$(consts_of "$elf")"
        echo "| $(basename "$model") | $machine | $(kib $((code + consts))) | $(kib $((code - base_code))) | $(kib $((consts - base_consts - test_data))) | $(kib "$test_data") | $(kib $(( $(ram_of "$elf") + stack ))) | $(kib "$arena") | $stack |"
    done
done
