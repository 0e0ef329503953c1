#!/usr/bin/env bash
# Prints the path of the broad benchmark's Python environment
# (bench/broad-pins.txt: torch, executorch, torchvision, transformers),
# making it first when it is missing or its pins changed; PTEC_VENV names
# another. Used by bench/broad.sh and bench/et_selective.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ptec/bench"
venv="${PTEC_VENV:-$cache/venv-$(sha256sum <"$here/broad-pins.txt" | cut -c1-16)}"
if [ ! -f "$venv/pins.ok" ] || ! cmp -s "$venv/pins.ok" "$here/broad-pins.txt"; then
  echo "broad: installing the pinned packages into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/broad-pins.txt"
  cp "$here/broad-pins.txt" "$venv/pins.ok"
fi
echo "$venv"
