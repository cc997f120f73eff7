#!/usr/bin/env bash
# Record what the installed DTensor registers into
# tests/fixtures/registry/dtensor.json (SPEC.md §22.4), offline thereafter.
#
#   PY=/path/to/venv/bin/python bash peers/record_registry.sh
#
# PY is a Python with the pinned torch of peers/requirements.txt (2.14.1).
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
target/release/spmd-check registry dtensor --file "$OUT" | tail -2
