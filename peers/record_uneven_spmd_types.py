"""Record spmd_types' uneven collectives (SPEC.md §23.7) into
tests/fixtures/uneven/spmd_types_uneven.json: `all_gather(src=S(0), dst=R,
split_sizes=…)` and `reduce_scatter(src=P, dst=S(0), split_sizes=…)` on
fake process groups of 2, 3 and 4 ranks (LocalTensorMode) inside
`typecheck()`, for every dim length from 0 to 2n+1 split three ways: as
DTensor splits (chunk), the first L mod n ranks one longer (divmod), and
everything on the last rank. Per call: the per-rank input and output, and
autograd's gradient for a cotangent of the output type's cotangent (P for
R, S(0) for S(0)), per rank. Values are integers (exact).

Under LocalTensorMode the rank is a symbolic per-rank integer, and
spmd_types' uneven reduce_scatter (`_ReduceScatterUneven.forward`) indexes
a Python list by it, which raises; so reduce_scatter with split_sizes, and
the backward of all_gather with split_sizes (a reduce_scatter), are
recorded with that error: a limit of the simulation, not a verdict.

    /path/to/torch-2.14.1-with-spmd-types-0.3.1/python peers/record_uneven_spmd_types.py
"""
import json
import os
import sys

import torch
from torch.distributed._local_tensor import LocalTensorMode

from spmd_types import P, R, S, all_gather, assert_type, reduce_scatter
from spmd_types._checker import typecheck
from spmd_types._mesh_axis import _reset
from spmd_types._testing import fake_pg

sys.path.insert(0, os.path.dirname(__file__))
from registry_values import encode  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "uneven", "spmd_types_uneven.json")
WIDTH = 2


def splits(length, n):
    c = -(-length // n)
    chunk = [max(0, min(c, length - r * c)) for r in range(n)]
    divmod_ = [length // n + (1 if r < length % n else 0) for r in range(n)]
    last = [0] * (n - 1) + [length]
    return {"chunk": chunk, "divmod": divmod_, "last": last}


def text(t):
    return encode(list(t.shape), t.reshape(-1).tolist())


def block(rows, base):
    return torch.arange(base + 1, base + 1 + rows * WIDTH, dtype=torch.float64).reshape(rows, WIDTH)


def call(pg, n, which, sizes):
    length = sum(sizes)
    if which == "all_gather":
        xs = [block(s, 100 * r) for r, s in enumerate(sizes)]
        in_type, cot_type = S(0), P
        cts = [block(length, 1000 + 100 * r) for r in range(n)]
    else:
        xs = [block(length, 100 * r) for r in range(n)]
        in_type, cot_type = P, S(0)
        cts = [block(s, 1000 + 100 * r) for r, s in enumerate(sizes)]
    rec = {"op": which, "n": n, "split_sizes": sizes, "input": [text(t) for t in xs],
           "cotangent": [text(t) for t in cts]}
    mode = LocalTensorMode(n)
    with mode:
        x = mode.rank_map(lambda r: xs[r].clone())
        x.requires_grad_(True)
        assert_type(x, {pg: in_type})
        try:
            with typecheck():
                if which == "all_gather":
                    y = all_gather(x, pg, src=S(0), dst=R, split_sizes=sizes)
                else:
                    y = reduce_scatter(x, pg, src=P, dst=S(0), split_sizes=sizes)
            rec["output"] = [text(y._local_tensors[r]) for r in range(n)]
        except Exception as err:
            s = str(err).strip()
            rec["refused"] = f"{type(err).__name__}: {s.splitlines()[0][:200] if s else ''}"
            return rec
        try:
            c = mode.rank_map(lambda r: cts[r].clone())
            assert_type(c, {pg: cot_type})
            with typecheck():
                y.backward(c)
            rec["grad"] = [text(x.grad._local_tensors[r]) for r in range(n)]
        except Exception as err:
            s = str(err).strip()
            rec["backward_error"] = f"{type(err).__name__}: {s.splitlines()[0][:200] if s else ''}"
    return rec


def main():
    cases = []
    for n in (2, 3, 4):
        for length in range(0, 2 * n + 2):
            for how, sizes in splits(length, n).items():
                for which in ("all_gather", "reduce_scatter"):
                    _reset()
                    with fake_pg(n) as pg:
                        cases.append({"split": how, **call(pg, n, which, sizes)})
    doc = {"spmd_types": "0.3.1", "torch": torch.__version__,
           "recorded_by": "peers/record_uneven_spmd_types.py: LocalTensorMode on a fake process group, "
                          "inside typecheck()",
           "cases": cases}
    with open(os.path.abspath(OUT), "w") as f:
        f.write(json.dumps(doc) + "\n")
    print(len(cases), "cases,", sum("refused" in c for c in cases), "refused", file=sys.stderr)


if __name__ == "__main__":
    main()
