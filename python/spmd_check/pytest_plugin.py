"""pytest plugin: rule files as test items (SPEC.md §20.1).

``pytest --spmd-rules PATH`` collects every rule file (``*.toml`` with a
``[[rule]]`` table) under PATH (a folder, searched recursively, or one
file, taken as a rule file whatever it holds) and makes one test item
per rule, named ``FILE::RULE``. An item checks its rule as
``spmd-check check`` does and passes only if the rule is sound; otherwise
its failure text is the tool's report for that rule (the verdict and the
minimal counterexample, or why it is vacuous or undetermined). A file the
tool cannot read is a collection error with the tool's one-line message.

The plugin is registered through the ``pytest11`` entry point of the
``spmd-check`` package, so installing the package is enough; without the
entry point (a source checkout on ``PYTHONPATH``), load it with
``-p spmd_check.pytest_plugin``.

Options: ``--spmd-rules PATH`` (repeatable), ``--spmd-cases N`` (random
cases per rule, default 256 as the CLI's), ``--spmd-seed N``,
``--spmd-scope default|small|large`` and ``--spmd-time-limit SECONDS`` (per
rule). With ``--spmd-rules`` and no test paths of its own, pytest runs the
rule files only; with test paths too, both.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator, List, Optional

import pytest

# Imported lazily: pytest loads every installed plugin at start-up, and a
# session that never asks for rule files should not pay for the native
# module's import.
_spmd: Any = None


def _lib() -> Any:
    global _spmd
    if _spmd is None:
        import spmd_check

        _spmd = spmd_check
    return _spmd


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("spmd-check", "spmd-check rule files")
    group.addoption("--spmd-rules", action="append", default=[], metavar="PATH",
                    help="collect the rule files (*.toml) under PATH, one test item per rule "
                         "(repeatable)")
    group.addoption("--spmd-cases", type=int, default=256, metavar="N",
                    help="random cases per rule after the exhaustive part (default 256)")
    group.addoption("--spmd-seed", type=int, default=0, metavar="N",
                    help="seed of the random cases (default 0)")
    group.addoption("--spmd-scope", default="default", choices=["default", "small", "large"],
                    help="scope preset of the exhaustive part (default: default)")
    group.addoption("--spmd-time-limit", type=float, default=None, metavar="SECONDS",
                    help="stop each rule's check after this long (it is then undetermined)")


def _roots(config: Any) -> List[Path]:
    return [Path(p).resolve() for p in config.getoption("spmd_rules") or []]


def pytest_configure(config: Any) -> None:
    roots = config.getoption("spmd_rules") or []
    if not roots:
        return
    for r in roots:
        if not os.path.exists(r):
            raise pytest.UsageError(f"--spmd-rules {r}: no such file or folder")
    # The rule paths are collected as test paths. Given no test paths of
    # its own (pytest's default of the current folder or `testpaths`), the
    # run is the rule files alone; given some, those and the rule files.
    source = getattr(config, "args_source", None)
    explicit = source is not None and source == config.ArgsSource.ARGS
    config.args[:] = (list(config.args) if explicit else []) + [str(r) for r in roots]


def pytest_collect_file(file_path: Path, parent: Any) -> Optional["RuleFile"]:
    if file_path.suffix != ".toml":
        return None
    p = file_path.resolve()
    for root in _roots(parent.config):
        # A file named on the command line is a rule file; one found in a
        # folder is one only if it has a rule table (not pyproject.toml).
        if p == root or (root in p.parents and _has_rules(p)):
            return RuleFile.from_parent(parent, path=file_path)
    return None


def _has_rules(p: Path) -> bool:
    try:
        with open(p, encoding="utf-8", errors="replace") as f:
            return "[[rule]]" in f.read(4 << 20)
    except OSError:
        return True  # let the tool say why it cannot be read


class RuleFile(pytest.File):
    """A rule file: one item per rule."""

    def collect(self) -> Iterator["RuleItem"]:
        lib = _lib()
        try:
            text = lib._native.read_rule_file(str(self.path))
            names = json.loads(lib._native.rule_names(str(self.path), text))
        except lib.BadInput as e:
            raise self.CollectError(str(e)) from None
        for name, line in names:
            yield RuleItem.from_parent(self, name=name, rule=name, line=line)


class RuleFailure(Exception):
    """A rule that is not sound; its text is the tool's report."""


class RuleItem(pytest.Item):
    """One rule of a rule file, checked as ``spmd-check check`` does."""

    def __init__(self, *, rule: str, line: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.rule = rule
        self.line = line
        self.verdict: Any = None

    def runtest(self) -> None:
        lib = _lib()
        opt = self.config.getoption
        text = lib._native.read_rule_file(str(self.path))
        raw = lib._native.check_text(
            str(self.path), text,
            lib._int("--spmd-cases", opt("spmd_cases"), 0, lib.MAX_CASES),
            lib._int("--spmd-seed", opt("spmd_seed"), 0, 2**64 - 1),
            opt("spmd_scope"), None, False, None,
            lib._time_limit(opt("spmd_time_limit")), self.rule,
        )
        [self.verdict] = [lib.Verdict(r) for r in json.loads(raw)]
        self.user_properties.append(("verdict", self.verdict.summary))
        if not self.verdict.sound:
            raise RuleFailure(self.verdict.report.rstrip())

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        lib = _lib()
        if isinstance(excinfo.value, (RuleFailure, lib.BadInput)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> Any:
        return self.path, self.line - 1, f"rule {self.rule}"
