"""Record what spmd_types registers for its elementwise torch functions.

spmd_types types a torch call by the op's entry in `_OP_REGISTRY` (its
linearity: LINEAR, MULTILINEAR, with `nonlinear_args`). For every function
of `torch` itself in that registry (the `Tensor` methods share their
entries) that acts elementwise on one or two float64 tensors, this asks the
library, under `spmd_types.typecheck()` on a fake 2-rank process group,
what type the call gets for each assignment of R or P to its inputs: a
claim `[output, inputs...]`, or a refusal (no claim). The real function's
values on the dyadic grid are recorded as for DTensor
(record_registry_dtensor.py). Usage: record_registry_spmd_types.py RAW;
peers/record_registry.sh prunes RAW into the fixture.
"""

import fnmatch
import itertools
import os
import sys

import torch

from spmd_types import P, R, assert_type, get_local_type
from spmd_types._checker import _OP_REGISTRY, typecheck
from spmd_types._testing import fake_pg

sys.path.insert(0, os.path.dirname(__file__))
from record_registry_dtensor import exact, grid, same, shuffled  # noqa: E402

TYPES = {"R": R, "P(sum)": P}


def name_of(f):
    return f"torch.{f.__name__}"


def kernel(f, k):
    """f on every point of the grid, as recorded rows, or why not."""
    pts = grid(8, 8)
    rows = list(itertools.product(pts, repeat=k))
    cols = [torch.tensor([float(r[i]) for r in rows], dtype=torch.float64) for i in range(k)]
    perm = shuffled(len(rows))
    try:
        y = f(*cols)
        y_perm = f(*[c[perm] for c in cols])
    except Exception as e:
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    if not isinstance(y, torch.Tensor) or y.shape != cols[0].shape:
        return None, "not elementwise: the output's shape is not the input's"
    if not same(y[perm], y_perm):
        return None, "not elementwise: permuted inputs give other values"
    out = [[str(x) for x in r] + [exact(v)] for r, v in zip(rows, y.tolist())]
    return {"input_dtype": "float64", "output_dtype": str(y.dtype).removeprefix("torch."),
            "rows": out}, None


def claims(f, k, pg):
    out = []
    for ins in itertools.product(TYPES, repeat=k):
        ts = [assert_type(torch.ones(2, dtype=torch.float64), {pg: TYPES[s]}) for s in ins]
        try:
            with typecheck():
                y = f(*ts)
            types = list(get_local_type(y).values())
            if len(types) != 1:
                continue
            ty = types[0]
        except Exception:
            continue  # refused: no claim
        o = next((n for n, t in TYPES.items() if t is ty), None)
        if o is not None:
            out.append([o, *ins])
    return out


def main():
    out_path = sys.argv[1]
    only = sys.argv[2] if len(sys.argv) > 2 else None
    entries, skipped = [], []
    fns = sorted({f for f in _OP_REGISTRY if getattr(f, "__module__", None) in ("torch", "torch.functional")
                  or (getattr(f, "__self__", None) is None and name_of(f) in dir(torch) and getattr(torch, f.__name__, None) is f)},
                 key=name_of)
    with fake_pg(2) as pg:
        for f in fns:
            if only is not None and not fnmatch.fnmatchcase(name_of(f), only):
                continue
            spec = _OP_REGISTRY[f]
            done = False
            for k in (1, 2):
                tab, why = kernel(f, k)
                if tab is None:
                    continue
                entries.append({"op": name_of(f), "family": f"linearity {spec.linearity.name}",
                                "schema": f"{name_of(f)}: {spec}", "args": "", "inputs": k,
                                "claims": claims(f, k, pg), "kernel": tab})
                done = True
                break
            if not done:
                skipped.append({"op": name_of(f), "why": f"not an elementwise function of one or two tensors ({why})"})
            print(f"{name_of(f)}: {'recorded' if done else 'skipped'}", file=sys.stderr)
    doc = {
        "schema": "spmd-check-registry/1",
        "system": "spmd_types",
        "versions": {"spmd_types": "0.3.1", "torch": torch.__version__.split("+")[0]},
        "recorded_by": "peers/record_registry.sh",
        "mesh": "one axis (a fake 2-rank process group); each claim is the type spmd_types.typecheck() gives the call for R or P inputs",
        "entries": entries,
        "skipped": skipped,
        "not_recorded": {},
    }
    with open(out_path, "w") as fh:
        import json
        json.dump(doc, fh, separators=(",", ":"))


if __name__ == "__main__":
    main()
