"""spmd_check.derive and spmd_check.run (SPEC.md §9.1, §14)."""

from fractions import Fraction

import pytest

import spmd_check


def test_derive_mul_has_every_typing_and_rejects_p_times_p():
    rows = spmd_check.derive("mul")
    assert len(rows) == 64
    row = {(tuple(r["inputs"]), r["output"]): r for r in rows}
    assert row[(("P", "P"), "P")]["verdict"] == "unsound"
    assert row[(("P", "P"), "P")]["property"] == "F2"
    assert row[(("P", "R"), "P")]["verdict"] == "sound"


def test_derive_expr_and_dialect():
    rows = spmd_check.derive(expr="x / (y + 1)", scope="small")
    assert all(len(r["inputs"]) == 2 for r in rows)
    rows = spmd_check.derive("mul", dialect="jax", scope="small")
    assert rows  # each row says what JAX does
    with pytest.raises(spmd_check.BadInput):
        spmd_check.derive("mul", expr="x * y")
    with pytest.raises(spmd_check.BadInput):
        spmd_check.derive(expr="x +")


GATHER = {
    "dialect": "jax",
    "mesh": {"x": 4},
    "forward": "all_gather_reduced(dim=0)",
    "backward": "unreduced_psum_scatter(dim=0)",
    "inputs": [{"type": "Varying", "per_rank": [[1], [2], [3], [4]]}],
    "cotangent": [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]],
}


def test_run_gather_exactly(examples):
    r = spmd_check.run(GATHER, check=True)
    assert r.exit_code == 0
    assert r.output == [[Fraction(k) for k in (1, 2, 3, 4)]] * 4
    assert spmd_check.run(examples / "run_gather.json").output == r.output


def test_run_fractions_in_and_a_wrong_backward_is_caught():
    job = dict(GATHER)
    job["inputs"] = [{"type": "Varying", "per_rank": [[Fraction(1, 2)], [2], [3], [0.25]]}]
    r = spmd_check.run(job)
    assert r.output[0] == [Fraction(1, 2), 2, 3, Fraction(1, 4)]


def test_run_check_psum_passes_and_its_pmean_twin_fails_b3():
    job = {"dialect": "jax", "mesh": {"x": 2}, "forward": "psum", "backward": "pvary",
           "inputs": [{"type": "Varying", "per_rank": [[1], [2]]}]}
    r = spmd_check.run(job, check=True)
    assert r.exit_code == 0 and r.json["check"]["outcome"] == "pass"
    # pmean with pvary as its backward is off by the mesh size.
    r = spmd_check.run(dict(job, forward="pmean"), check=True)
    assert r.exit_code == 1 and r.json["check"]["property"] == "B3"


def test_run_bad_values():
    job = dict(GATHER, inputs=[{"type": "Varying", "per_rank": [[1], [2]]}])
    with pytest.raises(spmd_check.BadInput, match="inputs"):
        spmd_check.run(job)
