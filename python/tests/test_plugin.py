"""The pytest plugin (``pytest --spmd-rules PATH``): one test item per rule
of each rule file, the tool's report as the failure. Run inside pytester;
examples/rules.toml holds a rule that is not sound (P * P -> P, F2) beside
sound ones, and the all-sound twin passes."""

import shutil
from importlib import metadata

FAST = ["--spmd-cases", "0", "--spmd-scope", "small"]


def test_each_rule_is_an_item_and_the_unsound_one_fails(pytester, examples):
    shutil.copy(examples / "rules.toml", pytester.path / "rules.toml")
    r = pytester.runpytest("-p", "spmd_check.pytest_plugin", "--spmd-rules",
                           str(pytester.path), "-v", *FAST)
    r.assert_outcomes(passed=4, failed=1)
    out = r.stdout.str()
    assert "rules.toml::partial times partial FAILED" in out, out
    assert "rules.toml::scaled partial PASSED" in out, out
    # The failure text is the tool's report for that rule.
    assert 'rule "partial times partial": unsound' in out, out
    assert "violates F2" in out, out
    assert "Traceback" not in out and "RuleFailure" not in out, out


def test_the_sound_twin_passes(pytester):
    (pytester.path / "rules").mkdir()
    (pytester.path / "rules" / "ok.toml").write_text(
        '[[rule]]\nname = "neg"\nop = "neg"\ninputs = ["V"]\noutput = "V"\n'
        '[[rule]]\nname = "scaled"\nop = { expr = "2 * x" }\ninputs = ["P"]\noutput = "P"\n')
    (pytester.path / "rules" / "notes.txt").write_text("not a rule file")
    # A TOML file of another tool in the folder is not a rule file.
    (pytester.path / "rules" / "pyproject.toml").write_text('[project]\nname = "x"\n')
    r = pytester.runpytest("-p", "spmd_check.pytest_plugin", "--spmd-rules", "rules", *FAST)
    r.assert_outcomes(passed=2)
    assert r.ret == 0


def test_a_bad_rule_file_is_a_collection_error_with_the_tools_message(pytester):
    (pytester.path / "bad.toml").write_text(
        '[[rule]]\nname = "r"\nop = "neg"\ninputs = [5]\noutput = "V"\n')
    r = pytester.runpytest("-p", "spmd_check.pytest_plugin", "--spmd-rules", "bad.toml", *FAST)
    assert r.ret != 0
    r.assert_outcomes(errors=1)
    assert 'a state name like "V"' in r.stdout.str()


def test_the_entry_point_registers_it():
    eps = metadata.entry_points()
    group = eps.select(group="pytest11") if hasattr(eps, "select") else eps.get("pytest11", [])
    assert any(ep.value == "spmd_check.pytest_plugin" for ep in group)


def test_without_p_through_the_entry_point(pytester, examples):
    # A fresh interpreter, as a user runs it: the installed entry point
    # loads the plugin with no -p.
    shutil.copy(examples / "rules.toml", pytester.path / "rules.toml")
    r = pytester.runpytest_subprocess("--spmd-rules", "rules.toml", *FAST)
    r.assert_outcomes(passed=4, failed=1)


def test_p_without_the_entry_point(pytester, monkeypatch):
    (pytester.path / "ok.toml").write_text(
        '[[rule]]\nname = "neg"\nop = "neg"\ninputs = ["V"]\noutput = "V"\n')
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    r = pytester.runpytest_subprocess("-p", "spmd_check.pytest_plugin", "--spmd-rules",
                                      "ok.toml", *FAST)
    r.assert_outcomes(passed=1)
