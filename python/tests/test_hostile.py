"""Input a hostile tester would give from Python (issue 26): each refusal is
BadInput, never a crash of the interpreter, and Ctrl-C is KeyboardInterrupt."""

import os
import signal
import subprocess
import tempfile
import sys
import textwrap

import pytest

import spmd_check

RULE = {"name": "neg", "op": "neg", "inputs": ["V"], "output": "V"}


def test_cases_are_capped_as_for_the_cli():
    with pytest.raises(spmd_check.BadInput, match="1000000"):
        spmd_check.check(RULE, cases=2_000_000)
    assert spmd_check.check(RULE, cases=1)[0].verdict == "sound"


def test_take_with_no_index_is_bad_input():
    with pytest.raises(spmd_check.BadInput, match="at least one index"):
        spmd_check.check({"name": "t", "op": {"expr": "take(x, 0, [])"},
                          "inputs": ["V"], "output": "V"})
    with pytest.raises(spmd_check.BadInput, match="at least one index"):
        spmd_check.derive(expr="take(x, 0, [])")


def test_an_exponent_never_wraps():
    with pytest.raises(spmd_check.BadInput, match="exponent"):
        spmd_check.derive(expr="x^4294967296")


def test_a_huge_shape_from_a_kernel_is_refused_before_allocating():
    np = pytest.importorskip("numpy")
    with pytest.raises(spmd_check.BadInput, match="shape function"):
        spmd_check.check_kernel(lambda x: x, inputs=["V"], output="V", degree=1,
                                shape=lambda s: (10**9,))
    assert np is not None


def test_ctrl_c_during_check_kernel_is_keyboard_interrupt():
    pytest.importorskip("numpy")
    # A child Python whose kernel is slow; SIGINT must end the call with
    # KeyboardInterrupt, not count as a refused kernel call.
    code = textwrap.dedent("""
        import sys, time, spmd_check
        def slow(x):
            time.sleep(0.05)
            return x
        print("start", flush=True)
        try:
            spmd_check.check_kernel(slow, inputs=["V"], output="V", degree=1)
        except KeyboardInterrupt:
            print("KeyboardInterrupt", flush=True)
            sys.exit(7)
        print("finished", flush=True)
    """)
    # Run outside the checkout: from python/, `import spmd_check` would find
    # the source folder (no compiled `_native`) before the installed package.
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    assert p.stdout.readline().strip() == "start"
    import time
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 7, out
    assert "KeyboardInterrupt" in out
