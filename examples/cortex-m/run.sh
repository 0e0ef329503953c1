#!/usr/bin/env bash
# Builds the firmware for three emulated boards, boots it under QEMU and
# fails unless every model passed its bundled cases:
#   mps2-an386 (Cortex-M4F, thumbv7em-none-eabihf, qemu-system-arm)
#   mps3-an547 (Cortex-M55, thumbv8m.main-none-eabihf, qemu-system-arm)
#   virt (RISC-V rv32imac, riscv32imac-unknown-none-elf, qemu-system-riscv32)
# The models go in three firmwares per board, fp32, int8 (portable and
# XNNPACK) and the Cortex-M backend's (`_cortex_m`): all of them overflow
# the AN386's 4 MiB of code memory.
# QEMU runs with -icount shift=0, so that the firmware's timer counts
# instructions (src/counter.rs): each model prints those of one inference.
#
#   ./run.sh              # build, boot and check (CI runs this)
#   ./run.sh --footprint  # also one firmware per model: the size and
#                         # instruction table of docs/cortex-m.md, in Markdown
# PTEC_CORTEX_M_EXTRA="/abs/a.bpte ..." adds bundles from elsewhere to the
# table (a model too large to commit).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")"
footprint=false
[[ "${1:-}" == --footprint ]] && footprint=true

for q in qemu-system-arm:qemu-system-arm qemu-system-riscv32:qemu-system-misc; do
    if ! command -v "${q%%:*}" >/dev/null; then
        echo "run.sh: ${q%%:*} is missing (Debian: apt-get install ${q#*:})" >&2
        exit 1
    fi
done
target_dir=../../target/cortex-m
boards="mps2-an386:thumbv7em-none-eabihf mps3-an547:thumbv8m.main-none-eabihf virt:riscv32imac-unknown-none-elf"
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
# boot MACHINE ELF: the firmware's output; fails when it does, or when
# its instruction counter is off by more than a timer tick.
boot() {
    local qemu=qemu-system-arm out
    [[ "$1" == virt ]] && qemu="qemu-system-riscv32 -bios none"
    # shellcheck disable=SC2086 # $qemu is the command and its option
    out="$(timeout 900 $qemu -M "$1" -icount shift=0 -nographic -semihosting-config enable=on,target=native -kernel "$2")" || { echo "$out"; return 1; }
    echo "$out"
    python3 -c '
import re, sys
m = re.search(r"^instruction counter: a loop of (\d+) instructions counted as (\d+)$", sys.stdin.read(), re.M)
sys.exit(0 if m and abs(int(m[2]) - int(m[1])) <= 100 else "run.sh: the instruction counter is off: " + (m[0] if m else "no count"))
' <<<"$out"
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
code_of() { section_sum "$1" .boot_vector .vector_table .text .init.rust .eh_frame; }
consts_of() { section_sum "$1" .rodata .data; }
ram_of() { section_sum "$1" .data .bss .uninit; }
stack_of() { sed -n 's/^stack high-water mark: \([0-9]*\) bytes$/\1/p' <<<"$1"; }
insns_of() { sed -n 's/^.*: \([0-9]*\) instructions per inference$/\1/p' <<<"$1"; }
naive_of() { sed -n 's/^naive int8 reference: \([0-9]*\) instructions for \([0-9]*\) multiply-accumulates$/\1 \2/p' <<<"$1"; }
mega() { awk -v n="$1" 'BEGIN { printf "%.2f", n / 1e6 }'; }
# Multiply-accumulates of one inference (the convolutions' and linear
# layers'), counted with forward hooks on executorch.examples.models.mlperf_tiny.
declare -A macs=([ds_cnn]=2656768 [mobilenet_v1_025]=7489664 [resnet8]=12501632 [deep_autoencoder]=264192)
echo
echo "Flash is code (.vector_table, .text; on RISC-V also .init.rust and the unwind"
echo "tables, .eh_frame) plus constants (.rodata, .data's initial"
echo "values); RAM is .data, .bss and the stack's high-water mark. A model's code"
echo "and weights are what it adds to the firmware without models; its test data"
echo "(inputs and expected outputs) is left out of its weights. Instructions are"
echo "those of one inference, counted under QEMU's -icount shift=0; the naive"
echo "estimate (int8 models) is the model's multiply-accumulates times the"
echo "instructions per multiply-accumulate of a naive scalar int8 loop on the"
echo "same board (src/counter.rs)."
echo
echo "| model | board | flash KiB | code KiB | weights KiB | test data KiB | RAM KiB | arena KiB | stack bytes | M instructions per inference | naive int8 loop, M instructions |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
extra="${PTEC_CORTEX_M_EXTRA:-}"
for b in $boards; do
    machine="${b%%:*}" target="${b#*:}"
    elf="$(build "$target" none)"
    base_code="$(code_of "$elf")" base_consts="$(consts_of "$elf")"
    out="$(boot "$machine" "$elf")"
    base_stack="$(stack_of "$out")"
    read -r naive naive_macs <<<"$(naive_of "$out")"
    rt=cortex-m-rt
    [[ "$machine" == virt ]] && rt=riscv-rt
    echo "| none ($rt, semihosting, the harness) | $machine | $(kib $((base_code + base_consts))) | $(kib "$base_code") | | | $(kib $(( $(ram_of "$elf") + base_stack ))) | | $base_stack | | |"
    for model in $(tr ',' ' ' <<<"$fp32,$int8,$cortex_m") $extra; do
        if ! elf="$(build "$target" "$model" 2>/dev/null)"; then
            [[ "$model" == *.bpte ]] || exit 1
            echo "| $(basename "$model") | $machine | does not fit | | | | | | | | |"
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
        base="${model%_fp32}" base="${base%_int8}" base="${base%_xnnpack}" base="${base%_nhwc}" base="${base%_cortex_m}"
        estimate=""
        # The integer programs (not the Cortex-M flow's `_nchw`, whose
        # convolutions stay fp32).
        if [[ "$model" =~ _int8$|_cortex_m$|_cortex_m_nhwc$ && -n "${macs[$base]:-}" ]]; then
            estimate="$(mega $((macs[$base] * naive / naive_macs)))"
        fi
        echo "| $(basename "$model") | $machine | $(kib $((code + consts))) | $(kib $((code - base_code))) | $(kib $((consts - base_consts - test_data))) | $(kib "$test_data") | $(kib $(( $(ram_of "$elf") + stack ))) | $(kib "$arena") | $stack | $(mega "$(insns_of "$out")") | $estimate |"
    done
done
echo "| TensorFlow Lite Micro's core: published figure, not measured here | Cortex-M3 | about 16 KB of code | | | | | | | | |"
echo "| ExecuTorch's runtime without kernels: published figure, not measured here | | about 50 KB of code | | | | | | | | |"
