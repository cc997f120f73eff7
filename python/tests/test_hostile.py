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
    # Each call sleeps 0.3 s: before, the case in progress went on calling
    # the kernel after Ctrl-C (every rank, every finite-difference point),
    # so the KeyboardInterrupt came seconds later; now no call starts after
    # it.
    code = textwrap.dedent("""
        import sys, time, spmd_check
        def slow(x):
            time.sleep(0.3)
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
    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    t = time.monotonic()
    out, _ = p.communicate(timeout=60)
    took = time.monotonic() - t
    assert p.returncode == 7, out
    assert "KeyboardInterrupt" in out
    # The call in progress ends (0.3 s), then nothing more is called.
    assert took < 2.0, took


@pytest.mark.parametrize("kw, says", [
    ({"cases": -1}, "cases=-1: expected an int from 0 to 1000000"),
    ({"cases": 10**30}, "cases=1000000000000000000000000000000"),
    ({"cases": float("nan")}, "cases=nan: expected an int"),
    ({"cases": "5"}, "cases='5': expected an int"),
    ({"cases": True}, "cases=True: expected an int"),
    ({"seed": -1}, "seed=-1"),
    ({"seed": 2**64}, "seed=18446744073709551616"),
    ({"scope": "huge"}, "scope='huge': expected"),
    ({"scope": None}, "scope=None: expected"),
    ({"time_limit": float("nan")}, "time_limit=nan"),
    ({"time_limit": -1}, "time_limit=-1"),
    ({"time_limit": 10**400}, "time_limit="),
    ({"time_limit": "1"}, "time_limit='1': expected a number"),
    ({"max_rank": 0}, "max_rank=0: expected an int from 1 to 4"),
    ({"max_rank": 5}, "max_rank=5"),
    ({"max_instances": 10**9}, "max_instances=1000000000"),
    ({"max_dim": [3]}, "max_dim=[3]"),
    ({"mesh_dims": "yes"}, "mesh_dims='yes'"),
])
def test_hostile_arguments_are_one_clear_bad_input(kw, says):
    with pytest.raises(spmd_check.BadInput) as e:
        spmd_check.check(RULE, **kw)
    assert says in str(e.value), e.value
    # The twin with the argument left out is checked.
    assert spmd_check.check(RULE, cases=0, scope="small")[0].sound


def test_hostile_derive_arguments():
    for kw in ({"expr": 5}, {"dialect": 3.5}, {"global_": "yes"}, {"scope": "x"}):
        with pytest.raises(spmd_check.BadInput):
            spmd_check.derive(**({"op": "neg"} if "expr" not in kw else {}), **kw)
    assert spmd_check.derive("neg", scope="small")


def test_hostile_kernel_declarations():
    pytest.importorskip("numpy")
    ident = lambda x: x  # noqa: E731
    bad = [
        dict(degree=10**30), dict(degree=float("nan")), dict(degree=[1, 2]),
        dict(degree=-1), dict(inputs="V"), dict(inputs=[]), dict(inputs=[5]),
        dict(output=None), dict(backward=5), dict(shape="(2,)"), dict(cases=2_000_000),
        dict(time_limit=0), dict(vars="x"),
    ]
    for b in bad:
        kw = dict(inputs=["V"], output="V", degree=1, scope="small")
        kw.update(b)
        with pytest.raises(spmd_check.BadInput):
            spmd_check.check_kernel(ident, **kw)
    with pytest.raises(spmd_check.BadInput):
        spmd_check.check_kernel("not a function", inputs=["V"], output="V", degree=1)
    assert spmd_check.check_kernel(ident, inputs=["V"], output="V", degree=1, scope="small").sound


@pytest.mark.parametrize("ret", [10**30, -1, "abc", [2.5], None])
def test_a_shape_function_returning_no_shape_is_bad_input(ret):
    pytest.importorskip("numpy")
    with pytest.raises(spmd_check.BadInput, match="shape function"):
        spmd_check.check_kernel(lambda x: x, inputs=["V"], output="V", degree=1,
                                shape=lambda s: ret if isinstance(ret, list) else (ret,),
                                scope="small")


def test_a_kernel_returning_hostile_values_is_refused_not_fatal():
    np = pytest.importorskip("numpy")
    cases = {
        # A billion elements as a view of one float: never copied or listed.
        "at most 8 dims and 65536 elements": lambda x: np.broadcast_to(np.float64(0), (10**9,)),
        "outside float64's exact window": lambda x: x * np.nan,
        "raised": lambda x: "not an array",
        "raised ": lambda x: [[1.0], [1.0, 2.0]],
    }
    for says, k in cases.items():
        v = spmd_check.check_kernel(k, inputs=["V"], output="V", degree=1, scope="small")
        assert v.verdict == "undetermined" and not v.sound, (says, v.summary)
        assert says.strip() in v.reason, (says, v.reason)


def test_huge_shape_from_the_rule_text_is_refused():
    # A mesh or dims a hostile rule names are refused, never allocated.
    with pytest.raises(spmd_check.BadInput):
        spmd_check.check(dict(RULE, mesh={"x": 10**12}))
    with pytest.raises(spmd_check.BadInput):
        spmd_check.check(dict(RULE, mesh={"x": 10**40}))


def test_a_time_limit_stops_a_rule_and_is_then_cleared():
    import time
    rule = {"name": "m", "op": "mul", "inputs": ["V", "V"], "output": "V"}
    t = time.monotonic()
    [v] = spmd_check.check(rule, time_limit=1e-6)
    assert v.verdict == "undetermined" and "time limit" in v.reason, v.summary
    assert time.monotonic() - t < 30
    # The next call has no limit: the same rule is proved sound.
    [v] = spmd_check.check(rule, cases=0)
    assert v.sound and v.proof, v.summary


def test_a_sleeping_kernel_obeys_the_time_limit():
    pytest.importorskip("numpy")
    import time
    calls = []

    def slow(x):
        calls.append(1)
        time.sleep(0.05)
        return x

    t = time.monotonic()
    v = spmd_check.check_kernel(slow, inputs=["V"], output="V", degree=1, time_limit=1.0)
    took = time.monotonic() - t
    assert v.verdict == "undetermined" and "time limit" in v.reason, v.summary
    # No kernel call starts after the limit: 1 s plus at most one call
    # per worker thread, and some slack for a loaded machine.
    assert took < 4.0, took
    # The kernel calls cut short are not counted as refusals.
    assert "refused" not in v.reason, v.reason
    # The twin: a fast kernel under a generous limit is proved sound.
    v = spmd_check.check_kernel(lambda x: x, inputs=["V"], output="V", degree=1,
                                scope="small", time_limit=600)
    assert v.sound and v.proof, v.summary


def test_a_kernel_raising_keyboard_interrupt_is_ctrl_c():
    pytest.importorskip("numpy")

    def k(x):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        spmd_check.check_kernel(k, inputs=["V"], output="V", degree=1, scope="small")
    # The flag is cleared: the next run goes to its end.
    assert spmd_check.check_kernel(lambda x: x, inputs=["V"], output="V", degree=1,
                                   scope="small").sound


def test_hostile_job_values_name_their_path():
    job = {"mesh": {"x": 2}, "op": "neg",
           "inputs": [{"type": "V", "per_rank": [[1], [2]]}]}
    assert spmd_check.run(job).exit_code == 0  # the twin runs
    for bad, says in [
        (float("nan"), 'job["inputs"][0]["per_rank"][1][0]: nan'),
        (float("inf"), 'job["inputs"][0]["per_rank"][1][0]: inf'),
        ({1, 2}, 'job["inputs"][0]["per_rank"][1][0]: a value of type set'),
    ]:
        j = {**job, "inputs": [{"type": "V", "per_rank": [[1], [bad]]}]}
        with pytest.raises(spmd_check.BadInput) as e:
            spmd_check.run(j)
        assert str(e.value).startswith(says), e.value
    deep = 1
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(spmd_check.BadInput, match="nested more than"):
        spmd_check.run({**job, "inputs": [{"type": "V", "per_rank": deep}]})
