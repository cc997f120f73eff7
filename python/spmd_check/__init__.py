"""spmd_check: the exact checker for SPMD sharding type rules, from Python.

The verdicts are computed by the Rust library (the same code as the
``spmd-check`` command); this module only carries them over. Every value of a
counterexample is exact: a ``fractions.Fraction`` per element, and a numpy
array beside it when numpy is importable (float64 when every element is
exactly a float64, else an object array of Fractions). SPEC.md §20.

    >>> import spmd_check
    >>> [v] = spmd_check.check('''
    ... [[rule]]
    ... name = "P * P -> P"
    ... op = "mul"
    ... inputs = ["P", "P"]
    ... output = "P"
    ... ''')
    >>> v.sound, v.property
    (False, 'F2')
"""

from __future__ import annotations

import json
import os
import sys
from fractions import Fraction
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _native
from ._native import BadInput

#: The version of the spmd-check crate this package was built from (the
#: CLI's ``spmd-check --version``).
__version__: str = _native.__version__

# numpy is optional (values are Fractions either way) and imported only where
# it is used: ``Value.arrays``, ``check_kernel``. ``import spmd_check`` alone
# does not import it, so a program that never asks for an array never pays
# for numpy's import.
_NUMPY_UNSET = object()
_np_module: Any = _NUMPY_UNSET


def _numpy() -> Any:
    """The numpy module, imported on first use; None when not installed."""
    global _np_module
    if _np_module is _NUMPY_UNSET:
        try:
            import numpy
        except ImportError:  # pragma: no cover - exercised where numpy is absent
            numpy = None
        _np_module = numpy
    return _np_module


__all__ = [
    "BadInput",
    "Value",
    "Counterexample",
    "Verdict",
    "JobResult",
    "check",
    "check_file",
    "derive",
    "registry",
    "run",
    "assert_sound",
    "emit",
    "check_kernel",
    "torch_kernel",
    "jax_kernel",
]

RuleLike = Union[str, Dict[str, Any], Sequence[Dict[str, Any]]]


def _fraction(text: str) -> Fraction:
    return Fraction(text)


def _nest(flat: List[Fraction], shape: Sequence[int]) -> Any:
    """Row-major flat elements -> nested lists of the given shape."""
    if not shape:
        return flat[0]
    step = 1
    for d in shape[1:]:
        step *= d
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _to_numpy(nested: Any, flat: List[Fraction], shape: Sequence[int]) -> Any:
    _np = _numpy()
    if _np is None:
        return None
    exact = all(Fraction(float(q)) == q for q in flat)
    if exact:
        return _np.array([float(q) for q in flat], dtype=_np.float64).reshape(tuple(shape))
    arr = _np.empty(len(flat), dtype=object)
    for i, q in enumerate(flat):
        arr[i] = q
    return arr.reshape(tuple(shape))


class Value:
    """One value shown in a counterexample: an input, an equivalent
    alternative to one, a cotangent or an output, on every rank.

    ``per_rank[r]`` is rank r's local tensor as nested lists of exact
    ``Fraction`` (a bare Fraction for a scalar). ``arrays[r]`` is the same as
    a numpy array (None when numpy is not installed), made on first access:
    numpy is imported only then."""

    def __init__(self, raw: Dict[str, Any]):
        self.label: str = raw["label"]
        self.type: str = raw["type"]
        self.is_input: bool = raw["input"]
        self.is_alternative: bool = raw["alternative"]
        self.shape: tuple = tuple(raw["shape"])
        self._flats = [[_fraction(x) for x in rank] for rank in raw["per_rank"]]
        self.per_rank: List[Any] = [_nest(f, self.shape) for f in self._flats]
        self._arrays: Optional[List[Any]] = None

    @property
    def arrays(self) -> List[Any]:
        if self._arrays is None:
            self._arrays = [
                _to_numpy(n, f, self.shape) for n, f in zip(self.per_rank, self._flats)
            ]
        return self._arrays

    def __repr__(self) -> str:
        return f"Value({self.label}: {self.type} = {self.per_rank!r})"


class Counterexample:
    """The minimal instance that violates ``property`` (F1..B3, J1, T1)."""

    def __init__(self, raw: Dict[str, Any]):
        self.property: str = raw["property"]
        self.title: str = raw["title"]
        self.mesh: Dict[str, int] = {a: n for a, n in raw["mesh"]}
        self.what: str = raw["what"]
        self.expected: str = raw["expected"]
        self.actual: str = raw["actual"]
        self.values: List[Value] = [Value(v) for v in raw["values"]]
        self.report: str = raw["report"]

    @property
    def inputs(self) -> List[Value]:
        """The instance's inputs, in the rule's order."""
        return [v for v in self.values if v.is_input]

    @property
    def ranks(self) -> int:
        n = 1
        for s in self.mesh.values():
            n *= s
        return n

    def __repr__(self) -> str:
        return f"Counterexample({self.property} on {self.mesh}: {self.what})"


class Verdict:
    """What the oracle concluded about one rule.

    ``verdict`` is one of ``sound``, ``unsound``, ``vacuous``,
    ``undetermined``; ``summary`` is the CLI's wording (it says whether the
    backward was checked and whether the result is a proof or bounded);
    ``report`` is the full text the CLI prints for the rule."""

    def __init__(self, raw: Dict[str, Any]):
        self.raw = raw
        self.name: str = raw["name"]
        self.verdict: str = raw["verdict"]
        self.sound: bool = raw["sound"]
        self.proof: bool = raw["proof"]
        self.property: Optional[str] = raw["property"]
        self.summary: str = raw["summary"]
        self.report: str = raw["report"]
        self.reason: Optional[str] = raw.get("reason")
        self.backward_checked: bool = raw["backward_checked"]
        self.instances: int = raw["instances"]
        self.random_cases: int = raw["random_cases"]
        self.rule_toml: str = raw["rule_toml"]
        cx = raw.get("counterexample")
        self.counterexample: Optional[Counterexample] = Counterexample(cx) if cx else None

    def __bool__(self) -> bool:
        return self.sound

    def __repr__(self) -> str:
        return f"Verdict({self.name!r}: {self.summary})"


# ---- arguments, checked here so that a wrong one is one clear BadInput ----

#: The most random cases per rule, as the CLI's ``--cases`` allows.
MAX_CASES = 1_000_000

# The scope limits, as the CLI's flags of the same names, with their ranges.
_LIMITS = {
    "max_free": (1, 64),
    "max_points": (1, 2**64 - 1),
    "max_instances": (1, 100_000_000),
    "max_rank": (1, 4),
    "max_dim": (1, 8),
}


def _int(name: str, value: Any, lo: int, hi: int) -> int:
    # bool is an int to Python, never a count to a person.
    if isinstance(value, bool) or not isinstance(value, int):
        if _numpy_int(value):
            value = int(value)
        else:
            raise BadInput(f"{name}={value!r}: expected an int from {lo} to {hi}")
    if not lo <= value <= hi:
        raise BadInput(f"{name}={value}: expected an int from {lo} to {hi}")
    return value


def _numpy_int(value: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.integer)


def _str(name: str, value: Any, optional: bool = False) -> Optional[str]:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise BadInput(f"{name}={value!r}: expected a string")
    return value


def _scope(scope: Any) -> str:
    if scope not in ("default", "small", "large"):
        raise BadInput(f"scope={scope!r}: expected \"default\", \"small\" or \"large\"")
    return scope


def _limits(limits: Dict[str, Any]) -> Dict[str, int]:
    out = {}
    for k, v in limits.items():
        if k == "mesh_dims":
            if not isinstance(v, bool):
                raise BadInput(f"mesh_dims={v!r}: expected True or False")
            if v:
                out[k] = 1
        elif v is not None:
            lo, hi = _LIMITS[k]
            out[k] = _int(k, v, lo, hi)
    return out


def _time_limit(t: Any) -> Optional[float]:
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, (int, float)) and not _numpy_int(t):
        raise BadInput(f"time_limit={t!r}: expected a number of seconds")
    try:
        f = float(t)
    except OverflowError:
        f = float("inf")
    if not (f > 0 and f <= 365 * 86400):  # also refuses NaN
        raise BadInput(f"time_limit={t!r}: expected seconds above 0 and at most a year")
    return f


def _common(cases: Any, seed: Any, scope: Any, limits: Dict[str, Any]) -> tuple:
    return (_int("cases", cases, 0, MAX_CASES), _int("seed", seed, 0, 2**64 - 1),
            _scope(scope), _limits(limits))


#: How deep a rule dict may nest (a rule needs 4).
_MAX_DEPTH = 32


def _plain(x: Any, path: str, depth: int = 0) -> Any:
    """A rule dict's value as JSON takes it, or BadInput naming its key path."""
    if depth > _MAX_DEPTH:
        raise BadInput(f"{path}: nested more than {_MAX_DEPTH} deep; no rule is")
    if isinstance(x, str) or x is None or isinstance(x, bool):
        return x
    if isinstance(x, int) or _numpy_int(x):
        return int(x)
    if isinstance(x, float):
        if x != x or x in (float("inf"), float("-inf")):
            raise BadInput(f"{path}: {x!r} is not a number a rule can hold")
        return x
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            if not isinstance(k, str):
                raise BadInput(f"{path}: key {k!r} is not a string")
            out[k] = _plain(v, f"{path}[{json.dumps(k)}]", depth + 1)
        return out
    if isinstance(x, (list, tuple)):
        return [_plain(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(x)]
    raise BadInput(f"{path}: a value of type {type(x).__name__} is not a rule value "
                   "(strings, numbers, lists and dicts are)")


def _rule_args(rule: RuleLike) -> tuple:
    """(text, dicts, single) for the native calls: a rule text as it is,
    dicts as a JSON list, so that errors name their key paths."""
    if isinstance(rule, str):
        return rule, None, False
    if isinstance(rule, dict):
        return "", json.dumps([_plain(rule, "rule")]), True
    if isinstance(rule, (list, tuple)):
        if not all(isinstance(r, dict) for r in rule):
            bad = next(i for i, r in enumerate(rule) if not isinstance(r, dict))
            raise BadInput(f"rule[{bad}]: expected a dict, got {type(rule[bad]).__name__}")
        return "", json.dumps([_plain(r, f"rule[{i}]") for i, r in enumerate(rule)]), False
    raise BadInput(f"rule: expected a rule text, a dict or a list of dicts, got {type(rule).__name__}")


def check(rule: RuleLike, *, cases: int = 256, seed: int = 0, scope: str = "default",
          time_limit: Optional[float] = None, max_free: Optional[int] = None,
          max_points: Optional[int] = None, max_instances: Optional[int] = None,
          max_rank: Optional[int] = None, max_dim: Optional[int] = None,
          mesh_dims: bool = False) -> List[Verdict]:
    """Check every rule of a rule text (TOML, or JSON), a rule given as a
    dict with the rule file's keys, or a list of such dicts. Returns one
    ``Verdict`` per rule, in order.

    Raises ``BadInput`` on a malformed rule or argument (the CLI's exit code
    2); for a dict the message names the key path, e.g.
    ``rule["inputs"][1]: ...`` (``rule[2]["inputs"][1]`` in a list).
    ``scope`` is ``default``, ``small`` or ``large`` as the CLI's
    ``--scope``; ``cases`` (at most 1,000,000) random cases follow the
    exhaustive part (SPEC.md §11.2). ``time_limit`` (seconds) stops the run
    as ``--time-limit`` does: a rule not finished is undetermined.
    ``max_free``, ``max_points``, ``max_instances``, ``max_rank``,
    ``max_dim`` and ``mesh_dims`` are the CLI's ``--max-*`` and
    ``--mesh-dims``, with the same ranges."""
    cases, seed, scope, limits = _common(cases, seed, scope, dict(
        max_free=max_free, max_points=max_points, max_instances=max_instances,
        max_rank=max_rank, max_dim=max_dim, mesh_dims=mesh_dims))
    text, dicts, single = _rule_args(rule)
    raw = _native.check_text("<string>", text, cases, seed, scope, dicts, single, limits,
                             _time_limit(time_limit))
    return [Verdict(r) for r in json.loads(raw)]


def check_file(path: Union[str, os.PathLike], *, cases: int = 256, seed: int = 0,
               scope: str = "default", time_limit: Optional[float] = None,
               max_free: Optional[int] = None, max_points: Optional[int] = None,
               max_instances: Optional[int] = None, max_rank: Optional[int] = None,
               max_dim: Optional[int] = None, mesh_dims: bool = False) -> List[Verdict]:
    """``check`` on a rule file (TOML or JSON); errors name ``path:line:col``.
    Unlike the CLI it neither reads nor writes the regression file."""
    cases, seed, scope, limits = _common(cases, seed, scope, dict(
        max_free=max_free, max_points=max_points, max_instances=max_instances,
        max_rank=max_rank, max_dim=max_dim, mesh_dims=mesh_dims))
    if not isinstance(path, (str, os.PathLike)):
        raise BadInput(f"path={path!r}: expected a path")
    p = os.fspath(path)
    text = _native.read_rule_file(p)
    raw = _native.check_text(p, text, cases, seed, scope, None, False, limits,
                             _time_limit(time_limit))
    return [Verdict(r) for r in json.loads(raw)]


def derive(op: Optional[str] = None, *, expr: Optional[str] = None, dialect: Optional[str] = None,
           global_: bool = False, scope: str = "default", time_limit: Optional[float] = None,
           max_free: Optional[int] = None, max_points: Optional[int] = None,
           max_instances: Optional[int] = None, max_rank: Optional[int] = None,
           max_dim: Optional[int] = None, mesh_dims: bool = False) -> List[Dict[str, Any]]:
    """The derived table of a built-in op (``derive("mul")``) or of any local
    function (``derive(expr="x / (y + 1)")``): one dict per typing with its
    verdict, as ``spmd-check derive --json`` prints it. With ``dialect``,
    each row also says what that system does and how it is classed
    (SPEC.md §9.1, §15.3). The scope arguments are ``check``'s."""
    _, _, scope, limits = _common(0, 0, scope, dict(
        max_free=max_free, max_points=max_points, max_instances=max_instances,
        max_rank=max_rank, max_dim=max_dim, mesh_dims=mesh_dims))
    if not isinstance(global_, bool):
        raise BadInput(f"global_={global_!r}: expected True or False")
    return json.loads(_native.derive(_str("op", op, True), _str("expr", expr, True),
                                     _str("dialect", dialect, True), global_, scope, limits,
                                     _time_limit(time_limit)))


def registry(system: str, *, op: Optional[str] = None,
             file: Optional[Union[str, os.PathLike]] = None, live: bool = False,
             python: Optional[str] = None, missing: bool = True,
             incorrect_only: bool = False, show_repro: bool = False,
             time_limit: Optional[float] = None) -> Dict[str, Any]:
    """What a library registers, checked against its own kernel
    (``spmd-check registry SYSTEM --json``, SPEC.md §22): one row per
    claimed placement combination (``class``: correct, incorrect, latent,
    missing or undetermined) and the ``totals``. ``op`` is a glob
    (``"aten.threshold*"``); ``file`` a registry file (default: the
    recording in the checkout); ``live=True`` runs the installed library
    through the checkout's peer script, under ``python`` (default: this
    interpreter); ``show_repro`` adds a PyTorch script to each incorrect
    row. Where the recording holds the library's gradients (DTensor's
    claims, ``DTensor.redistribute``, ``from_local`` and ``to_local``;
    JAX's transposes; SPEC.md §22.6), ``backward``
    has their rows (correct, incorrect or undetermined, on the recorded
    instances), ``totals`` and ``not_recorded``. Collectives (JAX's and
    spmd_types', §22.5) are rows like the others, each with its
    transpose in ``detail``."""
    sys_name = _str("system", system)
    for name, flag in (("live", live), ("missing", missing),
                       ("incorrect_only", incorrect_only), ("show_repro", show_repro)):
        if not isinstance(flag, bool):
            raise BadInput(f"{name}={flag!r}: expected True or False")
    path = None if file is None else os.fspath(file)
    if path is not None and not isinstance(path, str):
        raise BadInput(f"file={file!r}: expected a path")
    py = _str("python", python, True) if python is not None else (sys.executable if live else None)
    return json.loads(_native.registry(sys_name, _str("op", op, True), path, live, py, missing,
                                       incorrect_only, show_repro, _time_limit(time_limit)))


class JobResult:
    """The result of ``run``: ``json`` is ``spmd-check run --json``'s object,
    ``text`` its text report, ``exit_code`` the CLI's exit code (0 pass or
    no check, 1 a violation, 2 outside the op's domain)."""

    def __init__(self, raw: Dict[str, Any]):
        self.exit_code: int = raw.pop("exit_code")
        self.text: str = raw.pop("text")
        self.json: Dict[str, Any] = raw

    @property
    def output(self) -> List[Any]:
        """The output per rank, exact (Fractions in nested lists)."""
        return _exact(self.json["output"]["per_rank"])

    def __repr__(self) -> str:
        return f"JobResult(exit_code={self.exit_code})"


def _exact(x: Any) -> Any:
    if isinstance(x, list):
        return [_exact(y) for y in x]
    if isinstance(x, (int, str)):
        return Fraction(x)
    return x


def _key(k: Any) -> str:
    return json.dumps(k) if isinstance(k, str) else repr(k)


def _job_value(x: Any, path: str = "job", depth: int = 0) -> Any:
    if depth > _MAX_DEPTH:
        raise BadInput(f"{path}: nested more than {_MAX_DEPTH} deep; no job is")
    if isinstance(x, Fraction):
        return str(x) if x.denominator != 1 else x.numerator
    if isinstance(x, float):
        if x != x or x in (float("inf"), float("-inf")):
            raise BadInput(f"{path}: {x!r} is not a value a job can hold (it has no exact value)")
        q = Fraction(x)
        return str(q) if q.denominator != 1 else q.numerator
    if isinstance(x, (list, tuple)):
        return [_job_value(y, f"{path}[{i}]", depth + 1) for i, y in enumerate(x)]
    if isinstance(x, dict):
        return {k: _job_value(v, f"{path}[{_key(k)}]", depth + 1) for k, v in x.items()}
    # An ndarray exists only if numpy was imported already: not imported here.
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.ndarray):
        return _job_value(x.tolist(), path, depth)
    if np is not None and isinstance(x, np.floating):
        return _job_value(float(x), path, depth)
    if np is not None and isinstance(x, np.integer):
        return int(x)
    if x is None or isinstance(x, (str, int)):
        return x
    raise BadInput(f"{path}: a value of type {type(x).__name__} is not a job value "
                   "(ints, Fractions, floats, strings, lists, dicts and numpy arrays are)")


def run(job: Union[str, os.PathLike, Dict[str, Any]], *, check: bool = False) -> JobResult:
    """Run one instance (SPEC.md §14): ``job`` is a dict with the job file's
    keys (values may be ints, Fractions, floats or numpy arrays; a float is
    taken at its exact binary value), a JSON text, or a path to a job file.
    With ``check=True`` the oracle also checks this instance."""
    if isinstance(job, dict):
        text, name = json.dumps(_job_value(job)), "<job>"
    elif isinstance(job, str) and job.lstrip().startswith("{"):
        text, name = job, "<job>"
    else:
        name = os.fspath(job)
        text = _native.read_rule_file(name)
    return JobResult(json.loads(_native.run_job(name, text, check)))


def assert_sound(rule: RuleLike, *, cases: int = 256, seed: int = 0, scope: str = "default",
                 **limits: Any) -> List[Verdict]:
    """For pytest: fail unless every rule is sound. The failure message is
    the tool's report (the verdict and the minimal counterexample); a rule
    that is vacuous or undetermined fails too, saying why. ``rule`` is a
    rule text, dict, list of dicts, or a path to a rule file. Other keyword
    arguments (``time_limit``, ``max_instances``, ...) are ``check``'s."""
    if isinstance(rule, os.PathLike) or (
        isinstance(rule, str) and "\n" not in rule and rule.endswith((".toml", ".json"))
        and os.path.exists(rule)
    ):
        verdicts = check_file(rule, cases=cases, seed=seed, scope=scope, **limits)
    else:
        verdicts = check(rule, cases=cases, seed=seed, scope=scope, **limits)
    bad = [v for v in verdicts if not v.sound]
    if bad:
        __tracebackhide__ = True
        raise AssertionError("\n".join(v.report.rstrip() for v in bad))
    return verdicts


def emit(rule: RuleLike, lang: str, *, scope: str = "default") -> List[Dict[str, Any]]:
    """For each rule with a counterexample (exhaustive scope, no random
    cases): ``{"name", "script", "why"}`` where ``script`` is a runnable
    ``lang`` (``jax`` or ``pytorch``) script reproducing it in the real
    framework (SPEC.md §20.2), or None with ``why`` it cannot be written.
    Sound rules give nothing."""
    text, dicts, single = _rule_args(rule)
    return json.loads(_native.emit(text, _str("lang", lang), _scope(scope), dicts, single))


# ---- external kernels (SPEC.md §20.4) ----

def _need_numpy():
    if _numpy() is None:
        raise ImportError("spmd_check.check_kernel needs numpy: kernels receive numpy float64 arrays")


def _to_arrays(args):
    _np = _numpy()
    return [_np.array(v, dtype=_np.float64).reshape(tuple(s)) for s, v in args]


#: The most elements a kernel's result may have (as a shape function's).
_MAX_KERNEL_ELEMENTS = 65536


def _from_array(x):
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    _np = _numpy()
    a = _np.asarray(x, dtype=_np.float64)
    if a.size > _MAX_KERNEL_ELEMENTS or a.ndim > 8:
        # Refused before it becomes a Python list of floats.
        raise ValueError(f"the kernel returned shape {a.shape}: at most 8 dims and "
                         f"{_MAX_KERNEL_ELEMENTS} elements")
    return (list(a.shape), a.ravel().tolist())


def check_kernel(forward, *, inputs: Sequence[str], output: str, degree: Union[int, Sequence[int]],
                 backward=None, shape=None, name: Optional[str] = None,
                 vars: Optional[Sequence[str]] = None, dialect: str = "spmd_types",
                 cases: int = 0, seed: int = 0, scope: str = "default",
                 time_limit: Optional[float] = None, max_free: Optional[int] = None,
                 max_points: Optional[int] = None, max_instances: Optional[int] = None,
                 max_rank: Optional[int] = None, max_dim: Optional[int] = None,
                 mesh_dims: bool = False) -> Verdict:
    """Check a real kernel, typed ``inputs -> output`` (one state per input,
    in ``dialect``'s names), as a local op (SPEC.md §20.4).

    ``forward(*arrays)`` gets one numpy float64 array per input (one rank's
    local tensor) and returns an array (numpy, torch or JAX). ``backward``,
    if given, gets the same arrays and the output cotangent and returns one
    cotangent per input; without it only the forward properties are
    checked, and the verdict says so. ``degree`` (one int, or one per input)
    declares that along any direction moving one input the kernel is a
    polynomial of at most that degree: the exact derivative the backward is
    checked against rests on it. ``shape(*shapes)`` gives the output shape
    (default: element-wise, every input of the output's shape).

    The kernel is called only on values float64 holds exactly (|v| < 2^30,
    at most 24 binary digits after the point), and every value it returns
    must be such a value too; a call that is refused, or raises, leaves its
    case unchecked and the verdict undetermined (with the first reason).
    Random cases (``cases``, default 0) draw values such as 1/3 that no
    float64 holds, so each of those calls is refused. The oracle never calls
    ``backward`` to compute the gradient it checks it against.

    ``time_limit`` (seconds) stops the run as ``check``'s does; once it has
    passed, or on Ctrl-C, the kernel is not called again (a call already
    running is let finish: Python cannot cut a call short), and Ctrl-C
    raises ``KeyboardInterrupt``. The scope arguments are ``check``'s."""
    _need_numpy()
    import inspect
    cases, seed, scope, limits = _common(cases, seed, scope, dict(
        max_free=max_free, max_points=max_points, max_instances=max_instances,
        max_rank=max_rank, max_dim=max_dim, mesh_dims=mesh_dims))
    tl = _time_limit(time_limit)
    if not callable(forward):
        raise BadInput(f"forward={forward!r}: expected a function")
    for what, f in (("backward", backward), ("shape", shape)):
        if f is not None and not callable(f):
            raise BadInput(f"{what}={f!r}: expected a function or None")
    if isinstance(inputs, str) or not isinstance(inputs, (list, tuple)):
        raise BadInput(f"inputs={inputs!r}: expected a list of states, one per input")
    for i, t in enumerate(inputs):
        _str(f"inputs[{i}]", t)
    _str("output", output)
    _str("dialect", dialect)
    n = len(inputs)
    if n == 0:
        raise BadInput("inputs=[]: a kernel takes at least one input")
    if vars is None:
        try:
            ps = [p.name for p in inspect.signature(forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            ps = []
        vars = ps if len(ps) == n else [f"x{i}" for i in range(n)]
    if isinstance(degree, (list, tuple)):
        degrees = [_int(f"degree[{i}]", d, 0, 16) for i, d in enumerate(degree)]
    else:
        degrees = [_int("degree", degree, 0, 16)] * n
    if isinstance(vars, str) or not isinstance(vars, (list, tuple)):
        raise BadInput(f"vars={vars!r}: expected a list of names, one per input")
    vars = [_str(f"vars[{i}]", v) for i, v in enumerate(vars)]
    name = name or getattr(forward, "__name__", "kernel")
    _str("name", name)

    def fwd(args):
        return _from_array(forward(*_to_arrays(args)))

    bwd = None
    if backward is not None:
        def bwd(args, g):
            out = backward(*_to_arrays(args), _to_arrays([g])[0])
            if n == 1 and not isinstance(out, (list, tuple)):
                out = [out]
            return [_from_array(o) for o in out]

    shp = None
    if shape is not None:
        def shp(shapes):
            return list(shape(*[tuple(s) for s in shapes]))

    raw = _native.check_kernel(name, list(vars), degrees, fwd, bwd, shp, list(inputs), output,
                               dialect, cases, seed, scope, limits, tl)
    return Verdict(json.loads(raw))


def torch_kernel(fn):
    """(forward, backward) for ``check_kernel`` from a PyTorch function
    (an autograd ``Function``'s ``apply``, say): the backward is the one
    torch autograd computes, so a wrong ``backward`` method is what gets
    checked."""
    import torch

    def forward(*xs):
        with torch.no_grad():
            return fn(*[torch.from_numpy(x) for x in xs])

    def backward(*args):
        *xs, g = args
        ts = [torch.from_numpy(x).requires_grad_(True) for x in xs]
        y = fn(*ts)
        return list(torch.autograd.grad(y, ts, torch.from_numpy(g), allow_unused=True))

    owner = getattr(fn, "__self__", None)
    forward.__name__ = getattr(owner, "__name__", None) or getattr(fn, "__name__", "torch_kernel")
    return forward, backward


def jax_kernel(fn):
    """(forward, backward) for ``check_kernel`` from a JAX function; the
    backward is ``jax.vjp``'s (custom VJPs included). Enable float64 first
    (``jax.config.update("jax_enable_x64", True)``)."""
    import jax

    def forward(*xs):
        return fn(*xs)

    def backward(*args):
        *xs, g = args
        _, pullback = jax.vjp(fn, *xs)
        return list(pullback(g))

    forward.__name__ = getattr(fn, "__name__", "jax_kernel")
    return forward, backward
