#!/usr/bin/env bash
# Remakes fuzz/corpus/merge_part/: the --json parts of partitioned runs, each
# seed the parts of one run separated by NUL bytes (as the merge_part target
# reads them). Run from the repository root after `cargo build --release`;
# about three minutes on 2 cores. The runs' exit codes (1 for a rule file
# with deliberately unsound rules) are expected.
set -uo pipefail
B=${SPMD_CHECK:-target/release/spmd-check}
out=fuzz/corpus/merge_part
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# join OUT PART... : the parts, NUL between them.
join() {
    local f=$1 sep=""
    shift
    : > "$f"
    for p in "$@"; do
        printf '%b' "$sep" >> "$f"
        cat "$p" >> "$f"
        sep='\0'
    done
}
for k in 1 2; do "$B" check examples/rules.toml --cases 8 --json --partition "$k/2" > "$tmp/r$k.json"; done
join "$out/check_rules_2parts.json" "$tmp/r2.json" "$tmp/r1.json"
join "$out/check_rules_part1_only.json" "$tmp/r1.json"
for k in 1 2 3; do "$B" check examples/partial_kinds.toml --cases 8 --json --partition "$k/3" > "$tmp/pk$k.json"; done
join "$out/check_pk_3parts.json" "$tmp/pk1.json" "$tmp/pk2.json" "$tmp/pk3.json"
for k in 1 2; do "$B" conform --dialect nabla --json --partition "$k/2" > "$tmp/c$k.json"; done
join "$out/conform_nabla_2parts.json" "$tmp/c1.json" "$tmp/c2.json"
for k in 1 2 3 4; do "$B" programs --dialect jax --json --partition "$k/4" > "$tmp/pj$k.json"; done
join "$out/programs_jax_4parts.json" "$tmp/pj1.json" "$tmp/pj2.json" "$tmp/pj3.json" "$tmp/pj4.json"
for k in 1 2; do "$B" programs --dialect nabla --json --partition "$k/2" > "$tmp/pn$k.json"; done
join "$out/programs_nabla_2parts.json" "$tmp/pn1.json" "$tmp/pn2.json"
# Each seed merges (exit 0 or 1: a verdict, never 2).
for f in "$out"/*.json; do
    python3 - "$f" "$tmp" <<'PY'
import sys, os
data = open(sys.argv[1], 'rb').read().split(b'\0')
for i, p in enumerate(data):
    open(os.path.join(sys.argv[2], f'm{i}.json'), 'wb').write(p)
PY
    n=$(python3 -c "print(open('$f','rb').read().count(b'\0') + 1)")
    parts=()
    for ((i = 0; i < n; i++)); do parts+=("$tmp/m$i.json"); done
    "$B" merge "${parts[@]}" > /dev/null
    rc=$?
    [ "$rc" -le 1 ] || [ "$f" = "$out/check_rules_part1_only.json" ] || { echo "$f: merge exit $rc" >&2; exit 1; }
done
echo "remade $(ls "$out" | wc -l) seeds in $out"
