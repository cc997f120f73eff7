"""spmd_check.check / check_file / assert_sound (SPEC.md §11, §20.1).
Every sound rule here has a wrong twin the oracle must reject, with the
property named."""

from fractions import Fraction

import pytest

import spmd_check

SCALED = """
[[rule]]
name = "scaled partial"
op = { expr = "2 * x" }
inputs = ["P"]
output = "P"
"""

# The twin: bilinear in its two Partial inputs, so not well defined (F2).
P_TIMES_P = """
[[rule]]
name = "P * P -> P"
op = "mul"
inputs = ["P", "P"]
output = "P"
"""


def denote_partial(per_rank):
    """What a Partial value on one axis denotes: the sum over ranks."""
    return sum(per_rank, Fraction(0))


def test_sound_rule_is_a_proof():
    [v] = spmd_check.check(SCALED)
    assert v.sound and v.verdict == "sound" and v.proof
    assert v.counterexample is None and v.property is None
    assert v.backward_checked and v.summary.startswith("sound (proof)")


def test_twin_fails_f2_with_exact_values():
    [v] = spmd_check.check(P_TIMES_P)
    assert not v.sound and v.verdict == "unsound" and v.property == "F2"
    cx = v.counterexample
    assert cx.property == "F2" and cx.mesh == {"x": 2}
    by = {val.label: val for val in cx.values}
    # y and y' denote the same; the outputs do not.
    assert denote_partial(by["y"].per_rank) == denote_partial(by["y'"].per_rank)
    assert denote_partial(by["out"].per_rank) != denote_partial(by["out'"].per_rank)
    # Each output is rank-wise x * y, recomputed here in Fractions.
    for r in range(cx.ranks):
        assert by["out"].per_rank[r] == by["x"].per_rank[r] * by["y"].per_rank[r]
        assert by["out'"].per_rank[r] == by["x"].per_rank[r] * by["y'"].per_rank[r]
    assert all(isinstance(q, Fraction) for val in cx.values for q in val.per_rank)
    assert [i.label for i in cx.inputs] == ["x", "y"]
    assert "violates F2" in v.report


def test_dict_rules_and_lists():
    rules = [
        {"name": "a", "op": {"expr": "2 * x"}, "inputs": ["P"], "output": "P"},
        {"name": "b", "op": {"expr": "2 * x + 1"}, "inputs": ["P"], "output": "P"},
    ]
    a, b = spmd_check.check(rules)
    assert a.sound
    assert not b.sound and b.property == "F3"


def test_assert_sound_passes_and_its_twin_fails_with_the_report():
    spmd_check.assert_sound(SCALED)
    with pytest.raises(AssertionError) as e:
        spmd_check.assert_sound(P_TIMES_P)
    msg = str(e.value)
    assert 'rule "P * P -> P": unsound F2' in msg
    assert "violates F2 well-defined" in msg and "rank 0:" in msg


def test_check_file(examples):
    vs = spmd_check.check_file(examples / "rules.toml")
    by = {v.name: v for v in vs}
    assert by["partial times partial"].property == "F2"
    assert by["scaled partial"].sound
    with pytest.raises(AssertionError, match="partial times partial"):
        spmd_check.assert_sound(str(examples / "rules.toml"))


def test_backward_not_declared_is_said():
    [v] = spmd_check.check("""
[[rule]]
name = "gather, no backward"
forward = "all_gather(dim = 0)"
inputs = ["V"]
output = "R"
""")
    assert v.sound and not v.backward_checked
    assert "backward not checked" in v.summary


def test_bad_input_is_one_line_with_a_location(tmp_path):
    with pytest.raises(spmd_check.BadInput) as e:
        spmd_check.check("[[rule]]\nname = 1\n")
    assert str(e.value).startswith("<string>:2:")
    assert "\n" not in str(e.value)
    f = tmp_path / "r.toml"
    f.write_text('[[rule]]\nname = "x"\nop = "no_such_op"\ninputs = ["P"]\noutput = "P"\n')
    with pytest.raises(spmd_check.BadInput, match="r.toml"):
        spmd_check.check_file(f)
    with pytest.raises(spmd_check.BadInput):
        spmd_check.check(SCALED, scope="huge")
    assert issubclass(spmd_check.BadInput, ValueError)


def test_emit_writes_a_script_for_the_twin_only():
    import ast
    floor = {"name": "floor keeps P", "dialect": "spmd_types", "op": {"expr": "floor(x / y)"},
             "inputs": ["P", "R"], "output": "P"}
    true_div = dict(floor, name="true division keeps P", op={"expr": "x / y"})
    [e] = spmd_check.emit([floor, true_div], "pytorch")
    assert e["name"] == "floor keeps P" and e["why"] is None
    ast.parse(e["script"])
    assert 'rounding_mode="floor"' in e["script"]
    [j] = spmd_check.emit(floor, "jax")
    assert "xla_force_host_platform_device_count=2" in j["script"]
    gather = {"name": "pmean/pvary", "dialect": "jax", "forward": "pmean", "backward": "pvary",
              "inputs": ["Varying"], "output": "Invariant"}
    [g] = spmd_check.emit(gather, "jax")
    assert g["why"] is None and "lax.pmean(a0" in g["script"]
    # pmean has no spmd_types call either.
    [g] = spmd_check.emit(gather, "pytorch")
    assert g["script"] is None and "no spmd_types call" in g["why"]
    with pytest.raises(spmd_check.BadInput):
        spmd_check.emit(floor, "tensorflow")


# Pending kinds beyond sums (SPEC.md §21.7): bounded, never a proof, and a
# wrong kind rule is refuted with its counterexample, exact, per rank.
RELU_MAX = """
[[rule]]
name = "relu keeps a pending max"
dialect = "dtensor"
op = { expr = "relu(x)" }
inputs = [{ x = 'Partial("max")' }]
output = { x = 'Partial("max")' }
"""

# The twin: a sum over a dim does not commute with a pending max.
SUM_OF_MAX = """
[[rule]]
name = "sum over a dim of a pending max"
dialect = "dtensor"
op = { expr = "sum(x, 0)" }
inputs = [{ x = 'Partial("max")' }]
output = { x = 'Partial("max")' }
"""


def test_a_pending_max_rule_defers_bounded():
    [v] = spmd_check.check(RELU_MAX, cases=16)
    assert v.sound and v.verdict == "sound" and not v.proof
    assert v.summary.startswith("defers (bounded") and not v.backward_checked
    assert v.counterexample is None


def test_a_wrong_pending_max_rule_is_refuted_with_exact_values():
    [v] = spmd_check.check(SUM_OF_MAX, cases=16)
    assert not v.sound and v.verdict == "unsound" and v.property == "F3"
    cx = v.counterexample
    assert cx is not None and cx.property == "F3"
    [x, out] = cx.values
    assert x.is_input and x.type == 'Partial(max)' and not out.is_input
    # The minimal instance is a vector per rank. The input denotes the
    # elementwise max over ranks, so the op should give the sum of that;
    # the per-rank sums, read under Partial(max), give their max instead.
    assert len(x.shape) == 1 and out.shape == ()
    denoted = [max(r[i] for r in x.per_rank) for i in range(x.shape[0])]
    assert Fraction(cx.expected) == sum(denoted, Fraction(0))
    assert out.per_rank == [sum(r, Fraction(0)) for r in x.per_rank]
    assert Fraction(cx.actual) == max(out.per_rank)
    assert Fraction(cx.expected) != Fraction(cx.actual)
