#!/usr/bin/env bash
# Record what the installed DTensor and spmd_types register into
# tests/fixtures/registry/{dtensor,spmd_types}.json (SPEC.md §22.4),
# offline thereafter.
#
#   PY=/path/to/venv/bin/python bash peers/record_registry.sh
#
# PY is a Python with the pinned torch of peers/requirements.txt (2.14.1)
# and spmd-types 0.3.1.
# Steps: the peer script asks the library for every pointwise op's
# single-dim strategy and calls the real kernel on the dyadic grid (raw
# file, about 35 MB); `spmd-check registry --record` checks every claim
# and keeps only the kernel rows it looked up; the repro script of every
# incorrect claim is then run in DTensor, and what it printed is stored
# in the fixture's `repros`, so replay tells `incorrect` (reproduced)
# from `latent` (eager dispatch never uses the rule).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=tests/fixtures/registry/dtensor.json
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cargo build --release --quiet
"$PY" peers/record_registry_dtensor.py "$TMP/raw.json"
mkdir -p "$TMP/repro" "$(dirname "$OUT")"
target/release/spmd-check registry dtensor --file "$TMP/raw.json" \
    --record "$TMP/pruned.json" --repro-dir "$TMP/repro" > /dev/null || true
"$PY" peers/run_registry_repros.py "$TMP/pruned.json" "$TMP/repro" "$OUT"
target/release/spmd-check registry dtensor --file "$OUT" | tail -2 || true
# spmd_types: its elementwise registry entries (no repro scripts yet).
"$PY" peers/record_registry_spmd_types.py "$TMP/raw_st.json"
target/release/spmd-check registry spmd_types --file "$TMP/raw_st.json" \
    --record tests/fixtures/registry/spmd_types.json > /dev/null || true
target/release/spmd-check registry spmd_types | tail -2 || true
