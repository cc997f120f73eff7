#!/usr/bin/env bash
# Record what the installed DTensor, spmd_types and JAX register into
# tests/fixtures/registry/{dtensor,spmd_types,jax}.json.gz
# (SPEC.md §22.4),
# offline thereafter.
#
#   PY=/path/to/venv/bin/python JAXPY=/path/to/jax/venv/bin/python \
#       bash peers/record_registry.sh [SYSTEM...]
#
# PY is a Python with the pinned torch of peers/requirements.txt (2.14.1)
# and spmd-types 0.3.1; JAXPY one with jax 0.12.0.1 (default
# /work/venv-jax012/bin/python). With SYSTEM arguments (dtensor,
# spmd_types, jax) only those are recorded; without, all three.
# Steps: the peer script asks the library for every pointwise op's
# single-dim strategy and calls the real kernel on the dyadic grid (raw
# file, about 35 MB), and asks for the claims of every reduction and view;
# the kernels of those are called where the checker asks for them
# (`--want`, then the script's `fill`, until nothing is wanted: three or
# four rounds); `spmd-check registry --record` checks every claim
# and keeps only the kernel rows it looked up; the repro script of every
# incorrect claim is then run in DTensor, and what it printed is stored
# in the fixture's `repros`, so replay tells `incorrect` (reproduced)
# from `latent` (eager dispatch never uses the rule).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
# DTENSOR_OUT: where DTensor's recording goes (another torch's recording
# is kept beside the pinned one, e.g. dtensor_2.15.0.json.gz).
OUT=${DTENSOR_OUT:-tests/fixtures/registry/dtensor.json.gz}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
JAXPY=${JAXPY:-/work/venv-jax012/bin/python}
WANT=${*:-dtensor spmd_types jax}
want() { [[ " $WANT " == *" $1 "* ]]; }
# BIN: a built spmd-check to use instead of building this checkout's.
if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet
    BIN=target/release/spmd-check
fi
# fill_loop SYSTEM PYTHON SCRIPT RAW: call the kernels a run of RAW wants
# (`--want`, then SCRIPT's `fill`) until nothing is wanted.
fill_loop() {
    local system=$1 python=$2 script=$3 raw=$4 round wanted
    for round in 1 2 3 4 5 6 7 8 9 10; do
        "$BIN" registry "$system" --file "$raw" --want "$raw.want" > /dev/null || true
        wanted=$("$python" -c 'import json, sys; w = json.load(open(sys.argv[1])); print(w["shapes"] + w["calls"])' "$raw.want")
        echo "$system round $round: $wanted shapes and calls wanted" >&2
        [ "$wanted" = 0 ] && return 0
        "$python" "$script" fill "$raw" "$raw.want"
    done
    echo "$system: still wanting calls after 10 rounds" >&2
    return 1
}
if want dtensor; then
"$PY" peers/record_registry_dtensor.py "$TMP/raw.json"
fill_loop dtensor "$PY" peers/record_registry_dtensor.py "$TMP/raw.json"
mkdir -p "$TMP/repro" "$(dirname "$OUT")"
"$BIN" registry dtensor --file "$TMP/raw.json" \
    --record "$TMP/pruned.json" --repro-dir "$TMP/repro" > /dev/null || true
rm -f tests/fixtures/registry/dtensor.json
"$PY" peers/run_registry_repros.py "$TMP/pruned.json" "$TMP/repro" "$OUT"
# The backward of every claim on seeded instances (SPEC.md §22.6), of
# from_local and to_local (§22.6), and every claim on a 2x2 mesh (§22.7).
"$PY" peers/registry_backward_dtensor.py "$OUT"
"$PY" peers/registry_local_dtensor.py "$OUT"
"$PY" peers/registry_mesh2d_dtensor.py "$OUT"
# The repro script of every incorrect backward row, run in DTensor; what
# each did goes to the fixture's `backward_repros`.
mkdir -p "$TMP/brepro"
"$BIN" registry dtensor --file "$OUT" --repro-dir "$TMP/brepro" > /dev/null || true
"$PY" peers/run_registry_repros.py "$OUT" "$TMP/brepro" "$OUT" --backward
"$BIN" registry dtensor --file "$OUT" | tail -2 || true
fi
if want spmd_types; then
# spmd_types: its elementwise registry entries, and the functions
# recorded call by call (reductions, views, concatenation, contractions,
# addmm-like decompositions, rules.einsum), filled in as for dtensor (no
# repro scripts yet).
OUT_ST=tests/fixtures/registry/spmd_types.json.gz
"$PY" peers/record_registry_spmd_types.py "$TMP/raw_st.json"
fill_loop spmd_types "$PY" peers/record_registry_spmd_types.py "$TMP/raw_st.json"
rm -f tests/fixtures/registry/spmd_types.json
"$BIN" registry spmd_types --file "$TMP/raw_st.json" \
    --record "$OUT_ST" > /dev/null || true
# The backward of its local ops: torch's per-rank VJP read in the
# gradient types spmd_types gives (SPEC.md §22.6).
"$PY" peers/registry_backward_spmd_types.py "$OUT_ST"
"$BIN" registry spmd_types | tail -2 || true
fi
if want jax; then
# jax: the types its elementwise primitives' rules give on one mesh axis
# (raw file about 12 MB; no repro scripts yet), and those of its
# reductions, dot_general and shape primitives, whose kernels are bound
# where the checker asks (`--want`, then the script's `fill`, as for
# DTensor's reductions and views); and its collectives with their
# transposes' jaxprs and values on 2 and 4 devices
# (peers/registry_collectives_jax.py).
"$JAXPY" peers/record_registry_jax.py "$TMP/raw_jax.json"
fill_loop jax "$JAXPY" peers/record_registry_jax.py "$TMP/raw_jax.json"
rm -f tests/fixtures/registry/jax.json tests/fixtures/registry/jax.json.gz
"$BIN" registry jax --file "$TMP/raw_jax.json" \
    --record tests/fixtures/registry/jax.json.gz > /dev/null || true
# The transposes of its elementwise primitives on seeded instances (SPEC.md §22.6).
"$JAXPY" peers/registry_backward_jax.py tests/fixtures/registry/jax.json.gz
"$BIN" registry jax | tail -2 || true
fi
