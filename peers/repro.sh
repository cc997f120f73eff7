#!/usr/bin/env bash
# Emit and run the JAX and PyTorch repros of the seed findings (SPEC.md §20.3)
# against the real frameworks pinned in peers/requirements.txt, and assert
# each reproduces as recorded. Not part of .ci/run: the venv is several GB.
# Usage: bash peers/repro.sh
# SPMD_CHECK_JAX_PYTHON / SPMD_CHECK_TORCH_PYTHON, where set, run that
# framework's scripts in another interpreter (e.g. a venv with jax 0.12).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --upgrade pip
  "$venv/bin/pip" install -r "$here/requirements.txt"
fi
(cd "$root" && cargo build --release)
export PYTHONHASHSEED=0
extra=()
[ -n "${SPMD_CHECK_JAX_PYTHON:-}" ] && extra+=(--jax "$SPMD_CHECK_JAX_PYTHON")
[ -n "${SPMD_CHECK_TORCH_PYTHON:-}" ] && extra+=(--pytorch "$SPMD_CHECK_TORCH_PYTHON")
"$venv/bin/python" "$here/repro_findings.py" "$root/target/release/spmd-check" "$venv/bin/python" "${extra[@]}"
