"""Record the typing rules of the real spmd_types package (PyTorch) into
tests/fixtures/spmd_types_typing.json:

1. kind "typing", source "infer_local_type_for_axis": the package's per-axis
   local typing function (spmd_types._checker.infer_local_type_for_axis) on
   every linearity (NONLINEAR, LINEAR, MULTILINEAR), every one- or
   two-operand combination of R, I, V, P and Scalar, every no_grad marking
   (None or one bool per operand) and out_partial False/True.
2. kind "op_linearity": the op registry (_OP_REGISTRY) that decides which
   linearity a torch op is typed with.
3. kind "typing", source "torch": real torch ops on annotated tensors under
   spmd_types.typecheck() on a fake 2-rank process group, with and without
   requires_grad / torch.no_grad(), to see the registry and the typing
   function at work together.

With --three it records only three-operand cases of
infer_local_type_for_axis into tests/fixtures/spmd_types_typing3.json (same
top-level keys and case layout as spmd_types_typing.json; ids
{lin}_{a}_{b}_{c}): every linearity, every triple of R, I, V, P and Scalar,
no_grad None and out_partial False only (to keep it small). Without --three
the script records spmd_types_typing.json exactly as before and does not
touch spmd_types_typing3.json.

Re-record (from the repository root, in a venv with peers/requirements.txt's
torch==2.14.1 spmd-types==0.3.1 numpy==2.4.6):
    python peers/record_spmd_types.py            # tests/fixtures/spmd_types_typing.json
    python peers/record_spmd_types.py --three    # tests/fixtures/spmd_types_typing3.json
"""
import itertools
import os
import platform
import sys

import torch
import torch.distributed as dist

import spmd_types
from spmd_types import I, P, R, V, assert_type, get_local_type
from spmd_types._checker import typecheck
from spmd_types._checker import _OP_REGISTRY, OpLinearity, infer_local_type_for_axis
from spmd_types._scalar_sentinel import _Scalar
from spmd_types._testing import fake_pg

sys.path.insert(0, os.path.dirname(__file__))
from exact import write  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "tests", "fixtures")
STATES = {"R": R, "I": I, "V": V, "P": P, "Scalar": _Scalar}


def name(t):
    for k, v in STATES.items():
        if t is v:
            return k
    return repr(t)


def first_line(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"


def local_cases(axis, arities=(1, 2), variants=True):
    """variants=False keeps only no_grad=None and out_partial=False."""
    cs = []
    for lin in OpLinearity:
        for k in arities:
            for ins in itertools.product(STATES, repeat=k):
                for ng in [None, *itertools.product([False, True], repeat=k)] if variants else [None]:
                    for outp in (False, True) if variants else (False,):
                        try:
                            out = name(infer_local_type_for_axis(
                                axis, [STATES[s] for s in ins], out_partial=outp, linearity=lin,
                                no_grad=None if ng is None else list(ng)))
                            real = {"accepted": True, "output": out, "error": None}
                        except Exception as e:
                            real = {"accepted": False, "output": None, "error": first_line(e)}
                        cs.append({
                            "kind": "typing", "source": "infer_local_type_for_axis",
                            "id": f"{lin.name.lower()}_{'_'.join(ins)}"
                                  + ("" if ng is None else "_nograd" + "".join("1" if b else "0" for b in ng))
                                  + ("_outpartial" if outp else ""),
                            "op": f"linearity={lin.name}", "inputs": list(ins),
                            "no_grad": None if ng is None else list(ng), "out_partial": outp, "real": real})
    return cs


def _property_name(f):
    for cls in (torch.Tensor, torch._C.TensorBase):
        for k, v in sorted(cls.__dict__.items()):
            if getattr(v, "__get__", None) == f:
                return f"torch.Tensor.{k}.__get__"
    raise ValueError(f"cannot name registry entry {f!r}")


def op_name(f):
    if getattr(f, "__name__", None) == "__get__":  # a property such as Tensor.T
        return _property_name(f)
    q = getattr(f, "__qualname__", None) or getattr(f, "__name__", repr(f))
    head, _, tail = q.rpartition(".")
    if head in ("_VariableFunctionsClass", ""):
        return f"{getattr(f, '__module__', None) or 'torch'}.{tail}"
    if head in ("TensorBase", "Tensor"):
        return f"torch.Tensor.{tail}"
    return f"{getattr(f, '__module__', 'torch')}.{q}"


def registry_cases():
    cs = []
    for f, spec in _OP_REGISTRY.items():
        cs.append({"kind": "op_linearity", "id": op_name(f), "linearity": spec.linearity.name,
                   "tensor_args": list(spec.tensor_args), "tensor_kwargs": list(spec.tensor_kwargs),
                   "tensor_varargs_from": spec.tensor_varargs_from,
                   "nonlinear_args": list(spec.nonlinear_args)})
    cs.sort(key=lambda c: c["id"])
    for a, b in zip(cs, cs[1:]):
        assert a["id"] != b["id"], f"two registry entries named {a['id']}"
    return cs


UNARY = {"neg": lambda a: -a, "sum": lambda a: a.sum(), "mul_scalar": lambda a: a * 2,
         "add_scalar": lambda a: a + 1, "sin": torch.sin, "clone": torch.clone}
BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
          "matmul": torch.matmul, "maximum": torch.maximum}


def torch_cases(pg):
    cs = []

    def run(op, fn, states, grad, nograd_mode):
        ts = []
        for s in states:
            t = torch.ones(2, dtype=torch.float64, requires_grad=grad)
            ts.append(assert_type(t, {pg: STATES[s]}))
        try:
            with typecheck():
                if nograd_mode:
                    with torch.no_grad():
                        y = fn(*ts)
                else:
                    y = fn(*ts)
            ty = get_local_type(y)
            real = {"accepted": True, "output": {str(k): name(v) for k, v in ty.items()}, "error": None}
        except Exception as e:
            real = {"accepted": False, "output": None, "error": first_line(e)}
        mode = "nograd" if nograd_mode else ("grad" if grad else "plain")
        cs.append({"kind": "typing", "source": "torch", "id": f"torch_{op}_{'_'.join(states)}_{mode}",
                   "op": op, "inputs": list(states), "requires_grad": grad, "torch_no_grad": nograd_mode,
                   "real": real})

    for grad, ngm in ((False, False), (True, False), (True, True)):
        for op, fn in UNARY.items():
            for s in "RIVP":
                run(op, fn, [s], grad, ngm)
        for op, fn in BINARY.items():
            for s, t in itertools.product("RIVP", repeat=2):
                run(op, fn, [s, t], grad, ngm)
    return cs


def header(cases):
    return {"system": "spmd_types", "version": spmd_types.__version__ if hasattr(spmd_types, "__version__")
            else "0.3.1",
            "recorded_with": {"python": platform.python_version(), "spmd_types": "0.3.1",
                              "torch": torch.__version__, "process_group": "fake, world_size 2"},
            "recorded_by": "peers/record_spmd_types.py",
            "cases": cases}


def main():
    args = sys.argv[1:]
    if args not in ([], ["--three"]):
        sys.exit("usage: record_spmd_types.py [--three]")
    if args == ["--three"]:
        with fake_pg(2) as pg:
            lc = local_cases(pg, arities=(3,), variants=False)
        write(os.path.join(FIX, "spmd_types_typing3.json"), header(lc))
        return
    with fake_pg(2) as pg:  # the axis is the default process group, named default_pg
        lc = local_cases(pg)
        tc = torch_cases(pg)
    write(os.path.join(FIX, "spmd_types_typing.json"), header(lc + registry_cases() + tc))


if __name__ == "__main__":
    main()
