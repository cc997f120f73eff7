"""The package itself: its version, and what ``import spmd_check`` imports."""

import importlib.metadata
import pathlib
import re
import subprocess
import sys
import tempfile
import textwrap

import pytest

import spmd_check

ROOT = pathlib.Path(__file__).resolve().parents[2]


def crate_version() -> str:
    """The workspace's version (Cargo.toml, [workspace.package])."""
    text = (ROOT / "Cargo.toml").read_text()
    section = text.split("[workspace.package]", 1)[1].split("\n[", 1)[0]
    return re.search(r'^version\s*=\s*"([^"]+)"', section, re.M).group(1)


def test_version_is_the_crate_version():
    assert spmd_check.__version__ == crate_version()
    # The wheel's version is the crate's too (pyproject.toml: dynamic).
    assert importlib.metadata.version("spmd-check") == spmd_check.__version__


def run_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter, outside the checkout: from
    python/, ``import spmd_check`` would find the source folder (no compiled
    ``_native``) before the installed package."""
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_import_does_not_import_numpy():
    out = run_python("""
        import sys
        import spmd_check
        print("numpy" in sys.modules)
    """)
    assert out.split() == ["False"]


def test_numpy_is_imported_where_arrays_are_asked_for():
    pytest.importorskip("numpy")
    # A verdict with a counterexample needs no numpy; its arrays do.
    out = run_python("""
        import sys
        import spmd_check
        [v] = spmd_check.check('''
        [[rule]]
        name = "P * P -> P"
        op = "mul"
        inputs = ["P", "P"]
        output = "P"
        ''', cases=0)
        assert not v.sound
        print("numpy" in sys.modules)
        arrays = v.counterexample.values[0].arrays
        print("numpy" in sys.modules, type(arrays[0]).__module__)
    """)
    assert out.split() == ["False", "True", "numpy"]
