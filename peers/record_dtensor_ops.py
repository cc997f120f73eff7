"""Record how PyTorch DTensor types local ops (tests/fixtures/dtensor_ops.json):
for each op and each combination of input placements among Replicate(),
Shard(0) and Partial() on a 1-D mesh of 2 ranks, the output placement DTensor
infers, the redistributions its sharding propagation inserts before the op
(each input's placement before and after, read by wrapping
torch.distributed.tensor._dispatch.redistribute_local_tensor), the per-rank
local results, and the gradient autograd gives each input for a cotangent of
the output's placement (Replicate() for a Partial() output). All values are
small integers or dyadic rationals, so float64 is exact.
Ranks are simulated in one process by LocalTensorMode on a fake process group.
"""
import os
import platform
import sys
import warnings

import torch
import torch.distributed.tensor._dispatch as dispatch
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

from spmd_types._testing import fake_pg

sys.path.insert(0, os.path.dirname(__file__))
from exact import tree, write  # noqa: E402

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "tests", "fixtures")
PL = {"Replicate()": Replicate(), "Shard(0)": Shard(0), "Partial()": Partial()}
COT = {**PL, "Shard(1)": Shard(1)}
N = 2

# (name, arity, torch function, rank of the operands)
OPS = [
    ("neg", 1, lambda x: -x, 1),
    ("scale", 1, lambda x: 3 * x, 1),
    ("add_const", 1, lambda x: x + 1, 1),
    ("square", 1, lambda x: x * x, 1),
    ("relu", 1, torch.relu, 1),
    ("abs", 1, torch.abs, 1),
    ("sum", 1, lambda x: x.sum(0), 1),
    ("mean", 1, lambda x: x.mean(0), 1),
    ("amax", 1, lambda x: x.amax(0), 1),
    ("transpose", 1, lambda x: x.t(), 2),
    ("floor", 1, torch.floor, 1),
    ("add", 2, lambda x, y: x + y, 1),
    ("sub", 2, lambda x, y: x - y, 1),
    ("mul", 2, lambda x, y: x * y, 1),
    ("div", 2, lambda x, y: x / y, 1),
    ("matmul", 2, lambda x, y: x @ y, 2),
    ("cat", 2, lambda x, y: torch.cat([x, y], 0), 1),
]


def spell(p):
    if isinstance(p, Replicate):
        return "Replicate()"
    if isinstance(p, Shard):
        return f"Shard({p.dim})"
    if isinstance(p, Partial):
        return "Partial()" if p.reduce_op == "sum" else f"Partial({p.reduce_op})"
    return repr(p)


def first_line(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"


def local_values(pl, k, rank2, op):
    """Per-rank local values of operand k with placement pl: a global tensor
    of 2 (or 2x2) elements; Shard(0) keeps rows, Partial() splits a global
    value into per-rank pieces. Denominators of `div` are powers of two."""
    shape = (2, 2) if rank2 else (2,)
    size = 4 if rank2 else 2

    def val(r, i):
        if op == "div" and k == 1:
            return 2 ** (i % 3)
        return (k * 5 + r * 3 + i * 2) % 7 - 3 + (i + 1) * (1 if k == 0 else -1)

    out = []
    for r in range(N):
        if pl == "Shard(0)":
            rows = [r]
            vals = [[val(r, j + 2 * rr) for j in range(2)] for rr in rows] if rank2 else [val(r, r)]
        else:
            vals = [val(r, i) for i in range(size)]
            if rank2:
                vals = [vals[0:2], vals[2:4]]
        if pl == "Replicate()":
            vals = out[0] if out else vals
        out.append(vals)
    return out, shape


def run(mesh, mode, name, f, pls, rank2):
    log = []
    orig = dispatch.redistribute_local_tensor

    def wrapped(local, cur, tgt, *a, **kw):
        log.append(([spell(p) for p in cur.placements], [spell(p) for p in tgt.placements], local))
        return orig(local, cur, tgt, *a, **kw)

    vals = [local_values(pl, k, rank2, name)[0] for k, pl in enumerate(pls)]
    rec = {}
    with mode:
        ds = []
        for k, pl in enumerate(pls):
            xl = mode.rank_map(lambda r, k=k: torch.tensor(vals[k][r], dtype=torch.float64))
            ds.append(DTensor.from_local(xl, mesh, [PL[pl]], run_check=False).detach().requires_grad_(True))
        dispatch.redistribute_local_tensor = wrapped
        try:
            y = f(*ds)
        except Exception as e:
            return vals, {"accepted": False, "error": first_line(e)}
        finally:
            dispatch.redistribute_local_tensor = orig
        # Each logged move names the operand whose local tensor it moved
        # (specs are shared between equal placements; local tensors are not).
        inserted = []
        for src, dst, local in log:
            k = next((i for i, d in enumerate(ds) if d._local_tensor is local), None)
            inserted.append({"input": k, "from": src[0], "to": dst[0]})
        rec = {"accepted": True, "error": None, "inserted": inserted,
               "output": spell(y.placements[0]),
               "output_per_rank": [tree(y.to_local()._local_tensors[r].detach().numpy()) for r in range(N)]}
        cpl = "Replicate()" if rec["output"].startswith("Partial") else rec["output"]
        shape = list(y.to_local()._local_tensors[0].shape)
        cot = []
        for r in range(N):
            n = 1
            for s in shape:
                n *= s
            flat = [10 * (i + 1) + (r if cpl.startswith("Shard") else 0) for i in range(n)]
            t = torch.tensor(flat, dtype=torch.float64).reshape(shape)
            cot.append(tree(t.numpy()))
        cl = mode.rank_map(lambda r: torch.tensor(cot[r], dtype=torch.float64).reshape(shape))
        rec["cotangent"] = {"placement": cpl, "per_rank": cot}
        try:
            y.backward(DTensor.from_local(cl, mesh, [COT[cpl]], run_check=False))
            rec["transpose"] = [{"placement": spell(d.grad.placements[0]),
                                 "per_rank": [tree(d.grad.to_local()._local_tensors[r].detach().numpy())
                                              for r in range(N)]} if d.grad is not None else None for d in ds]
            rec["transpose_error"] = None
        except Exception as e:
            rec["transpose"] = None
            rec["transpose_error"] = first_line(e)
    return vals, rec


def cases():
    cs = []
    with fake_pg(N):
        mesh = init_device_mesh("cpu", (N,), mesh_dim_names=("x",))
        for name, arity, f, rank in OPS:
            combos = [[p] for p in PL] if arity == 1 else [[a, b] for a in PL for b in PL]
            for pls in combos:
                mode = LocalTensorMode(N)
                vals, real = run(mesh, mode, name, f, pls, rank == 2)
                short = "_".join(p[0] for p in pls)
                cs.append({"kind": "typing", "source": "dtensor_propagation",
                           "id": f"{name}_{short}", "op": name, "mesh": {"x": N},
                           "inputs": [{"placement": p, "per_rank": v} for p, v in zip(pls, vals)],
                           "real": real})
    return cs


def main():
    doc = {"system": "dtensor", "version": torch.__version__,
           "recorded_with": {"python": platform.python_version(), "torch": torch.__version__,
                             "process_group": "fake; ranks simulated by LocalTensorMode"},
           "recorded_by": "peers/record_dtensor_ops.py", "cases": cases()}
    write(os.path.join(FIX, "dtensor_ops.json"), doc)


if __name__ == "__main__":
    main()
