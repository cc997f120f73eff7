"""Record PyTorch DTensor's redistribute between Shard(0), Replicate() and
Partial() on a 1-D mesh of 2 or 4 ranks (tests/fixtures/dtensor_collectives.json):
per-rank local values of the result, and the gradient autograd gives the input
(its placements and local values) for a cotangent of the output's placement
(Replicate() for a Partial() output).
Ranks are simulated in one process by torch's LocalTensorMode on a fake
process group.
"""
import os
import platform
import sys
import warnings

import torch
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

from spmd_types._testing import fake_pg

sys.path.insert(0, os.path.dirname(__file__))
from exact import tree, write  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)
HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "tests", "fixtures")
PL = {"Shard(0)": Shard(0), "Replicate()": Replicate(), "Partial()": Partial()}


def first_line(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"


def spell(p):
    return {Shard(0): "Shard(0)", Replicate(): "Replicate()", Partial(): "Partial()"}.get(p, repr(p))


def values(lt, n):
    return [tree(lt._local_tensors[r].detach().numpy()) for r in range(n)]


def inputs_for(pl, n):
    """Per-rank local values for a placement on {x: n}."""
    if pl == "Replicate()":
        return [[k + 1 for k in range(n)] for _ in range(n)]
    return [[r * n + k + 1 for k in range(n)] for r in range(n)] if pl == "Partial()" else [[r + 1] for r in range(n)]


def cot_for(pl, n):
    """Cotangent placement and per-rank values for an output placement. A
    Partial() output's cotangent is replicated data (spmd-check: cot(P) = R),
    handed to DTensor as Replicate()."""
    if pl in ("Replicate()", "Partial()"):
        return "Replicate()", [[10 * (k + 1) for k in range(n)] for _ in range(n)]
    return pl, [[10 * (r + 1)] for r in range(n)]


def run(mesh, n, src, dst):
    mode = LocalTensorMode(n)
    x, (cpl, c) = inputs_for(src, n), cot_for(dst, n)
    rec = {"call": f"DTensor.from_local(x, mesh, [{src}]).redistribute(mesh, [{dst}])"}
    with mode:
        xl = mode.rank_map(lambda r: torch.tensor(x[r], dtype=torch.float64))
        d = DTensor.from_local(xl, mesh, [PL[src]], run_check=False).detach().requires_grad_(True)
        try:
            y = d.redistribute(mesh, [PL[dst]])
        except Exception as e:
            return x, None, {**rec, "error": first_line(e)}
        rec.update(output_placements=[spell(p) for p in y.placements],
                   output_per_rank=values(y.to_local(), n), error=None,
                   cotangent_placements=[cpl], cotangent_per_rank=c)
        cl = mode.rank_map(lambda r: torch.tensor(c[r], dtype=torch.float64))
        try:
            y.backward(DTensor.from_local(cl, mesh, [PL[cpl]], run_check=False))
            rec.update(transpose_placements=[spell(p) for p in d.grad.placements],
                       transpose_per_rank=values(d.grad.to_local(), n), transpose_error=None)
        except Exception as e:
            rec.update(transpose_placements=None, transpose_per_rank=None, transpose_error=first_line(e))
    return x, c, rec


def cases():
    cs = []
    for n in (2, 4):
        with fake_pg(n):
            mesh = init_device_mesh("cpu", (n,), mesh_dim_names=("x",))
            for src in PL:
                for dst in PL:
                    x, c, real = run(mesh, n, src, dst)
                    case = {"kind": "collective", "id": f"redistribute_{src[0]}_{dst[0]}_n{n}"}
                    if real["error"] is None:
                        case["job"] = {"dialect": "dtensor", "mesh": {"x": n}, "forward": "redistribute",
                                       "backward": "redistribute", "inputs": [{"type": src, "per_rank": x}],
                                       "output": real["output_placements"][0], "cotangent": c}
                    else:
                        case["job"] = None
                    case["real"] = real
                    cs.append(case)
    return cs


def main():
    doc = {"system": "dtensor", "version": torch.__version__,
           "recorded_with": {"python": platform.python_version(), "torch": torch.__version__,
                             "process_group": "fake; ranks simulated by LocalTensorMode"},
           "recorded_by": "peers/record_dtensor.py", "cases": cases()}
    write(os.path.join(FIX, "dtensor_collectives.json"), doc)


if __name__ == "__main__":
    main()
