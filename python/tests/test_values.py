"""Exact values: Fractions always; numpy arrays float64 only where exact."""

from fractions import Fraction

import pytest

import spmd_check
from spmd_check import Value

np = pytest.importorskip("numpy")


def raw(per_rank, shape):
    return {"label": "x", "type": "V", "input": True, "alternative": False,
            "shape": shape, "per_rank": per_rank}


def test_dyadic_values_become_float64_arrays():
    v = Value(raw([["1/2", "-3", "0", "5/4"]], [2, 2]))
    assert v.per_rank[0] == [[Fraction(1, 2), Fraction(-3)], [Fraction(0), Fraction(5, 4)]]
    a = v.arrays[0]
    assert a.dtype == np.float64 and a.shape == (2, 2)
    assert a[1, 1] == 1.25


def test_inexact_values_stay_fractions_in_numpy():
    # 1/3 has no float64: the array holds the Fraction itself.
    v = Value(raw([["1/3"]], [1]))
    assert v.arrays[0].dtype == object and v.arrays[0][0] == Fraction(1, 3)


def test_scalars():
    v = Value(raw([["7"], ["-1/8"]], []))
    assert v.per_rank == [Fraction(7), Fraction(-1, 8)]
    assert v.arrays[1].shape == () and float(v.arrays[1]) == -0.125


def test_counterexample_arrays_match_fractions():
    [v] = spmd_check.check({"name": "t", "op": "mul", "inputs": ["P", "P"], "output": "P"})
    for val in v.counterexample.values:
        for q, a in zip(val.per_rank, val.arrays):
            assert Fraction(float(a)) == q
