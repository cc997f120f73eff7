"""Errors a rule designer in Python can act on (issue 26): a rule given as a
dict is blamed by its key path (``rule["inputs"][1]``), never by a line and
column of a JSON text the user never wrote, never in serde's words; hints
name this package's parameters (``max_instances=``), not the CLI's flags.
Each refusal has a twin that is accepted."""

import pytest

import spmd_check

OK = {"name": "r", "op": "neg", "inputs": ["V"], "output": "V"}


def refused(rule, **kw):
    with pytest.raises(spmd_check.BadInput) as e:
        spmd_check.check(rule, cases=0, scope="small", **kw)
    msg = str(e.value)
    for leak in ("untagged", "variant", "$serde_json", "<dict>", "<string>", " at line ", "column"):
        assert leak not in msg, msg
    return msg


def test_the_twin_is_accepted():
    [v] = spmd_check.check(OK, cases=0, scope="small")
    assert v.sound
    [a, b] = spmd_check.check([OK, dict(OK, name="s")], cases=0, scope="small")
    assert a.sound and b.sound


def test_a_number_as_a_type_names_its_key_path():
    msg = refused(dict(OK, inputs=["V", 5]))
    assert msg.startswith('rule["inputs"][1]: '), msg
    assert 'a state name like "V" or a table of axis → state' in msg, msg


def test_in_a_list_the_path_has_the_rule_index():
    msg = refused([OK, dict(OK, name="s", inputs=[{"x": 1}])])
    assert msg.startswith('rule[1]["inputs"][0]["x"]: '), msg
    assert 'a state name like "V" for this axis' in msg


def test_an_unknown_state_and_an_unknown_key():
    msg = refused(dict(OK, inputs=["Q"]))
    assert msg.startswith('rule["inputs"][0]: '), msg
    assert "`Q` is not a state" in msg
    msg = refused(dict(OK, extra=1))
    assert msg.startswith('rule["extra"]: '), msg
    assert "unknown field `extra`" in msg
    msg = refused(dict(OK, op={"expr": "-x", "extra": 1}))
    assert msg.startswith('rule["op"]'), msg


def test_a_missing_key_blames_the_rule():
    rule = dict(OK)
    del rule["output"]
    msg = refused(rule)
    assert msg.startswith("rule: "), msg
    assert "missing field `output`" in msg


def test_values_json_cannot_hold_name_their_path():
    msg = refused(dict(OK, mesh={"x": float("nan")}))
    assert msg.startswith('rule["mesh"]["x"]: nan'), msg
    msg = refused(dict(OK, op={1, 2}))
    assert msg.startswith('rule["op"]: a value of type set'), msg
    msg = refused(dict(OK, inputs=[{1: "V"}]))
    assert msg.startswith('rule["inputs"][0]: key 1'), msg
    deep = "V"
    for _ in range(10_000):
        deep = [deep]
    msg = refused(dict(OK, inputs=deep))
    assert "nested more than" in msg
    msg = refused(5)
    assert msg.startswith("rule: expected a rule text, a dict or a list of dicts"), msg
    msg = refused([OK, "not a dict"])
    assert msg.startswith("rule[1]: expected a dict"), msg


def test_a_rule_text_keeps_its_lines():
    # A text the user wrote is still blamed by line and column.
    with pytest.raises(spmd_check.BadInput) as e:
        spmd_check.check('[[rule]]\nname = "r"\nop = "neg"\ninputs = [5]\noutput = "V"\n')
    assert str(e.value).startswith("<string>:4:"), e.value
    assert "untagged" not in str(e.value)


def test_hints_name_the_python_parameter():
    rule = {"name": "m", "op": "mul", "inputs": ["V", "V"], "output": "V"}
    msg = refused(rule, max_instances=1)
    assert "scope too large" in msg and "max_instances=" in msg, msg
    assert "--" not in msg, msg
    # The twin: the limit it names, raised as it says, lets the check run.
    need = int(msg.split("max_instances=")[1].split()[0])
    [v] = spmd_check.check(rule, cases=0, scope="small", max_instances=need)
    assert v.sound, v.summary


def test_pythonic_hints_in_reports():
    # On a mesh of 2 with dims up to 1 no shape splits: vacuous, and the
    # hint names the keyword that widens the scope, not --mesh-dims.
    rule = {"name": "rs", "forward": "reduce_scatter(dim=0)",
            "backward": "all_gather(R, dim=0)", "inputs": ["P"], "output": "V",
            "mesh": {"x": 2}}
    [v] = spmd_check.check(rule, cases=0, max_dim=1)
    assert v.verdict == "vacuous", v.summary
    assert "mesh_dims=True" in v.summary and "mesh_dims=True" in v.report, v.report
    assert "--" not in v.summary + v.report, v.report
    # The twin: the keyword it names, given, makes the check run.
    [v] = spmd_check.check(rule, cases=0, max_dim=1, mesh_dims=True)
    assert v.sound and v.proof, v.summary
