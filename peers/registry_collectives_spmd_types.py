"""spmd_types' collectives and casts for the registry (SPEC.md §22.5):
all_reduce, all_gather, reduce_scatter, all_to_all, redistribute (its
collectives, autograd Functions) and convert, reinterpret (its casts),
for every source and destination type among R, I, V, P, S(0), S(1), and
for convert and reinterpret also with expert_mode=True, on a fake process
group of 2 and of 4 ranks simulated by LocalTensorMode, inside
typecheck(). Per call: the output's local type or the refusal, the
per-rank values on a local block of shape [n, n], and the gradient
torch's autograd computes for a cotangent of the output's cotangent type
(P for R, R for P, I for I, V for V), with its type and per-rank values.

Usage: imported by record_registry_spmd_types.py (`entries(only)`).
"""

import fnmatch
import sys

import torch
from torch.distributed._local_tensor import LocalTensorMode

from spmd_types import (I, P, R, S, V, all_gather, all_reduce, all_to_all, assert_type, convert,
                        get_local_type, redistribute, reduce_scatter, reinterpret)
from spmd_types._checker import typecheck
from spmd_types._mesh_axis import _reset
from spmd_types._testing import fake_pg

from record_spmd_types_collectives import first_line, letter
from registry_values import encode

TYPES = {"R": R, "I": I, "V": V, "P": P, "S(0)": S(0), "S(1)": S(1)}
LETTERS = {"R": R, "I": I, "V": V, "P": P}
COT = {"R": "P", "P": "R", "I": "I", "V": "V"}
SIZES = (2, 4)
FUNCTIONS = [("all_reduce", all_reduce, False), ("all_gather", all_gather, False),
             ("reduce_scatter", reduce_scatter, False), ("all_to_all", all_to_all, False),
             ("redistribute", redistribute, False), ("convert", convert, False),
             ("convert", convert, True), ("reinterpret", reinterpret, False),
             ("reinterpret", reinterpret, True)]


def local_type(t):
    ts = list(get_local_type(t).values())
    return letter(ts[0]) if len(ts) == 1 else repr(ts)


def text(t):
    t = t.detach().to(torch.float64)
    return encode(list(t.shape), t.reshape(-1).tolist())


def per_rank(state, shape, n, base):
    """Rank r's values: the same on every rank for R and I, distinct per
    rank otherwise."""
    k = int(torch.Size(shape).numel())
    split = state not in ("R", "I")
    return [torch.tensor([base + (r if split else 0) * k + i + 1 for i in range(k)],
                         dtype=torch.float64).reshape(shape) for r in range(n)]


def run(pg, n, fn, src, dst, expert):
    kw = {"src": TYPES[src], "dst": TYPES[dst]}
    if expert:
        kw["expert_mode"] = True
    enter = "V" if src.startswith("S(") else src
    xs = per_rank(enter, [n, n], n, 0)
    rec = {"input_per_rank": [text(t) for t in xs]}
    mode = LocalTensorMode(n)
    with mode:
        x = mode.rank_map(lambda r: xs[r].clone())
        x.requires_grad_(True)
        assert_type(x, {pg: LETTERS[enter]})
        try:
            with typecheck():
                y = fn(x, pg, **kw)
            out = local_type(y)
        except Exception as e:
            return {"refused": first_line(e)}
        rec["output"] = out
        rec["output_per_rank"] = [text(y._local_tensors[r]) for r in range(n)]
        cot = COT.get(out)
        if cot is None:
            rec["backward_error"] = f"no cotangent type for {out}"
            return rec
        cts = per_rank(cot, list(y._local_tensors[0].shape), n, 100)
        rec["cotangent"] = cot
        rec["cotangent_per_rank"] = [text(t) for t in cts]
        c = mode.rank_map(lambda r: cts[r].clone())
        assert_type(c, {pg: LETTERS[cot]})
        try:
            with typecheck():
                y.backward(c)
            rec["grad"] = local_type(x.grad)
            rec["grad_per_rank"] = [text(x.grad._local_tensors[r]) for r in range(n)]
        except Exception as e:
            rec["backward_error"] = first_line(e)
    return rec


def entries(only):
    out = []
    for name, fn, expert in FUNCTIONS:
        op = f"spmd_types.{name}"
        if only is not None and not fnmatch.fnmatchcase(op, only):
            continue
        for src in TYPES:
            for dst in TYPES:
                cases = []
                for n in SIZES:
                    _reset()
                    with fake_pg(n) as pg:
                        try:
                            rec = run(pg, n, fn, src, dst, expert)
                        except Exception as e:  # a failure after typing: say so
                            rec = {"error": first_line(e)}
                    cases.append({"input": src, "n": n, **rec})
                if not any("output" in c for c in cases):
                    continue  # refused on every mesh: no claim
                args = f"src={src}, dst={dst}" + (", expert_mode=True" if expert else "")
                print(f"{op}({args}): {', '.join(str(c.get('output')) for c in cases)}", file=sys.stderr)
                out.append({"op": op, "family": "collective",
                            "schema": f"{name}(x, pg, {args})", "args": args, "inputs": 1,
                            "collective": cases})
    return out
