"""Emit and run the JAX and PyTorch repros of the seed findings that concern
those frameworks (SPEC.md §20.3), and assert each framework does what was
recorded: the wrong value reproduced, or the framework's own error.

Usage: python peers/repro_findings.py SPMD_CHECK_BINARY PYTHON_WITH_FRAMEWORKS
       [--jax PYTHON_WITH_JAX] [--pytorch PYTHON_WITH_TORCH]
(peers/repro.sh sets both up; --jax and --pytorch run one framework's
scripts in another interpreter, e.g. a venv with a newer jax). Standard
library only; prints one line per finding and framework, then a JSON
summary; exits 1 if any expectation fails.

A refusal is expected as `error=TYPE` (or `error=T1|T2`): the framework
raised an exception of that type. Its message is printed but not compared, since frameworks reword
them between releases (jax 0.12 reworded the floor-division refusal).
"""
import json
import os
import subprocess
import sys
import tempfile

# Each finding: a rule as the framework types it, and per framework the
# outcome its emitted script must report (`--expect`, SPEC.md §20.2).
FINDINGS = [
    {
        "id": "spmd_types_floor_div_keeps_P",
        "why": "spmd_types registers torch.div as MULTILINEAR with only the divisor nonlinear, "
               "so rounding_mode='floor' keeps P: floor is not linear in the dividend",
        "rule": """
[[rule]]
name = "spmd_types: torch.div(x, y, rounding_mode='floor'), x P, y R -> P"
dialect = "spmd_types"
op = { expr = "floor(x / y)" }
inputs = ["P", "R"]
output = "P"
""",
        "expect": {
            "pytorch": "reproduced",
            # JAX refuses floor division of an unreduced value: 0.10.2 with
            # NotImplementedError ("unreduced rule for rem is not
            # implemented"), 0.12 with ShardingTypeError ("rem is a
            # non-linear operation and cannot accept inputs that are
            # unreduced").
            "jax": "error=NotImplementedError|ShardingTypeError",
        },
    },
    {
        "id": "jax_dot_general_reduced_no_out_sharding",
        "why": "dot_general does not propagate reduced: two Reduced operands give an Invariant "
               "output, whose Invariant cotangent would be read as Unreduced (a factor n)",
        "rule": """
[[rule]]
name = "jax: dot_general of two reduced operands, out_sharding not given"
dialect = "jax"
op = "matmul"
inputs = ["P(None, None, reduced={'x'})", "P(None, None, reduced={'x'})"]
output = "P(None, None)"
""",
        "expect": {
            # JAX types the output Invariant (as the rule says) and refuses the
            # pullback of an Invariant cotangent ("Expected cotangent type ...").
            "jax": "error=ValueError",
            # spmd_types types R @ R as R, not I.
            "pytorch": "typed_otherwise",
        },
    },
    {
        "id": "jax_dot_invariant_reduced",
        "why": "dot of an Invariant and a Reduced operand is accepted and typed Invariant",
        "rule": """
[[rule]]
name = "jax: dot(I, R) -> I"
dialect = "jax"
op = "matmul"
inputs = ["Invariant", "Reduced"]
output = "Invariant"
""",
        # JAX: "Expected cotangent type ..."; spmd_types: "Invariant type ...
        # cannot mix with other types".
        "expect": {"jax": "error=ValueError", "pytorch": "error=SpmdTypeError"},
    },
    {
        "id": "partial_times_partial",
        "why": "seed 003 forbids P * P (bilinear); both frameworks refuse it (the rule is "
               "written without a dialect: spmd-check's spmd_types dialect refuses it too)",
        "rule": """
[[rule]]
name = "P * P -> P"
op = "mul"
inputs = ["P", "P"]
output = "P"
""",
        # JAX: "mul is bilinear ..."; spmd_types: "Partial in multiple factors
        # ... is forbidden".
        "expect": {"jax": "error=ShardingTypeError", "pytorch": "error=SpmdTypeError"},
    },
]


def emit(binary, rule_file, lang, out_dir):
    p = subprocess.run([binary, "check", rule_file, "--cases", "0", "--emit", lang,
                        "--emit-dir", out_dir], capture_output=True, text=True)
    if p.returncode != 1:
        raise SystemExit(f"{rule_file}: expected a counterexample (exit 1), got {p.returncode}: {p.stderr}")
    paths = [line.rsplit(" ", 1)[1] for line in p.stdout.splitlines() if "repro written to" in line]
    if len(paths) != 1:
        raise SystemExit(f"{rule_file}: expected one {lang} script:\n{p.stdout}")
    return paths[0]


def main():
    args = sys.argv[1:]
    pythons = {}
    for lang in ("jax", "pytorch"):
        if f"--{lang}" in args:
            k = args.index(f"--{lang}")
            pythons[lang] = args[k + 1]
            del args[k:k + 2]
    if len(args) != 2:
        raise SystemExit(__doc__)
    binary, python = args
    results, failed = [], False
    with tempfile.TemporaryDirectory() as tmp:
        for f in FINDINGS:
            rule_file = os.path.join(tmp, f["id"] + ".toml")
            with open(rule_file, "w") as fh:
                fh.write(f["rule"])
            for lang, expect in f["expect"].items():
                script = emit(binary, rule_file, lang, tmp)
                p = subprocess.run([pythons.get(lang, python), script, "--expect", expect],
                                   capture_output=True, text=True)
                last = (p.stdout.strip().splitlines() or ["{}"])[-1]
                try:
                    outcome = json.loads(last)
                except json.JSONDecodeError:
                    outcome = {"outcome": "crashed", "detail": (p.stderr.strip().splitlines() or [""])[-1]}
                ok = p.returncode == 0
                failed |= not ok
                print(f"{'ok  ' if ok else 'FAIL'} {f['id']} [{lang}] expect {expect}: "
                      f"{outcome.get('outcome')}: {outcome.get('detail')}")
                if not ok:
                    print(p.stdout + p.stderr)
                results.append({"finding": f["id"], "framework": lang, "expect": expect, "ok": ok,
                                **outcome})
    print(json.dumps(results, indent=1))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
