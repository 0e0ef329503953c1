#!/usr/bin/env bash
# Regenerates the committed Rust bindings in src/generated/ from fbs/*.fbs.
# Uses flatc 24.3.25 (the version the `flatbuffers` crate is pinned to), taken
# from the executorch 1.5.1 wheel so no separate install is needed:
#   schema/regen.sh            (downloads the wheel into a temp dir)
#   FLATC=/path/to/flatc schema/regen.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ -z "${FLATC:-}" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" executorch==1.5.1
  python3 -m zipfile -e "$tmp"/executorch-*.whl "$tmp/x" >/dev/null
  FLATC="$tmp/x/executorch/data/bin/flatc"
  chmod +x "$FLATC"
fi
want="flatc version 24.3.25"
got="$("$FLATC" --version)"
[ "$got" = "$want" ] || { echo "regen.sh: need $want, got $got" >&2; exit 1; }
out="$here/src/generated"
rm -rf "$out"
mkdir -p "$out"
for schema in program bundled_program_bp04 bundled_program_bp08 flat_tensor xnnpack; do
  "$FLATC" --rust --gen-all -o "$out/$schema" "$here/fbs/$schema.fbs"
done
echo "regenerated $out"
