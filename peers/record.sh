#!/usr/bin/env bash
# Re-record tests/fixtures/{jax,spmd_types,dtensor}_*.json from the real libraries.
# Usage: bash peers/record.sh   (CI never runs this; the fixtures are committed.)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --upgrade pip
  "$venv/bin/pip" install -r "$here/requirements.txt"
fi
export PYTHONHASHSEED=0
for s in record_jax.py record_spmd_types.py record_spmd_types_collectives.py record_dtensor.py record_dtensor_ops.py; do
  echo "== $s"
  "$venv/bin/python" "$here/$s"
done
