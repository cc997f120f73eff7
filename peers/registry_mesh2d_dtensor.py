"""DTensor's claims on a 2x2 mesh (SPEC.md §22.7).

A single-dim strategy is a claim about one mesh dim; on a mesh of two
dims DTensor expands it to every mesh dim. For every claim of a registry
file of DTensor (placements R, S(d), P(sum|avg|max|min); float64 inputs;
not shape-dependent) this runs the op eagerly on a 2x2 mesh
(LocalTensorMode, fake process group of 4) with the claim's input
placements on mesh dim 0 and Replicate on dim 1, on dim 1 with Replicate
on dim 0, and on both dims, two seeded instances each (global shapes 4
per dim, values multiples of 1/4 of distinct magnitudes). Recorded: the
per-rank inputs (rank r = 2 i + j holds mesh coordinate (i, j)), the
output placements DTensor chose and the per-rank outputs, and the op on
the global tensors. spmd-check computes the output's global value from
the chosen placements and compares (SPEC.md §22.7).

Usage: registry_mesh2d_dtensor.py FILE [GLOB]: adds each entry's
`mesh2d` to FILE (a registry file, gzipped or plain) in place.
"""

import fnmatch
import random
import sys
import warnings

import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.testing._internal.distributed.fake_pg import FakeStore

from registry_values import attach, finish, load_doc
from registry_backward_dtensor import Distinct, build_call, checkable, claims_of, tensor_text, text

warnings.filterwarnings("ignore")
INSTANCES = 2


def split(p, g, rng, values):
    """Two pieces of g in placement p along one mesh dim."""
    if isinstance(p, Replicate):
        return [g.clone(), g.clone()]
    if isinstance(p, Shard):
        return [c.clone() for c in torch.chunk(g, 2, p.dim)]
    other = torch.tensor([values.draw() for _ in range(g.numel())], dtype=torch.float64).reshape(g.shape)
    if p.reduce_op == "sum":
        return [g - other, other]
    if p.reduce_op == "avg":
        return [2 * g - other, other]
    if p.reduce_op == "max":
        return [g.clone(), torch.minimum(other, g)]
    return [g.clone(), torch.maximum(other, g)]


def per_rank(pl, shape, rng, values):
    """Four local tensors (rank 2 i + j) in placements pl = (p0, p1) and
    the global tensor: mesh dim 0 splits the global tensor, dim 1 each
    piece."""
    g = torch.tensor([values.draw() for _ in range(int(torch.Size(shape).numel()))],
                     dtype=torch.float64).reshape(shape)
    if isinstance(pl[0], Replicate):
        # Both coordinates of mesh dim 0 hold the same local tensors.
        inner = split(pl[1], g, rng, values)
        return [t.clone() for t in inner + inner], g
    out = []
    for piece in split(pl[0], g, rng, values):
        out.extend(split(pl[1], piece, rng, values))
    return out, g


def instance(f, ins, mesh, rng):
    shapes = [[4] * r for r in ins["ranks"]]
    values = Distinct(rng, 4 * sum(int(torch.Size(s).numel()) for s in shapes) + 16)
    locs, globs = zip(*[per_rank(pl, s, rng, values) for pl, s in zip(ins["placements"], shapes)])
    rec = {"inputs": [[tensor_text(t) for t in ts] for ts in locs]}
    gy = f(*globs)
    rec["expected_output"] = tensor_text(gy)
    with LocalTensorMode(4) as mode:
        xs = [DTensor.from_local(mode.rank_map(lambda r, ts=ts: ts[r].clone()), mesh, list(pl), run_check=False)
              for ts, pl in zip(locs, ins["placements"])]
        try:
            y = f(*xs)
        except Exception as err:
            return {"error": f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200]}"}
        rec["chose"] = [text(p) for p in y.placements]
        rec["output"] = [tensor_text(y._local_tensor._local_tensors[r]) for r in range(4)]
    return rec


def main():
    path = sys.argv[1]
    only = sys.argv[2] if len(sys.argv) > 2 else None
    doc = load_doc(path)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    mesh = init_device_mesh("cpu", (2, 2))
    done = 0
    for e in doc["entries"]:
        if only is not None and not fnmatch.fnmatchcase(e["op"], only):
            continue
        e.pop("mesh2d", None)
        if not checkable(e):
            continue
        f = build_call(e)
        ranks = (e.get("tensor_kernel") or {}).get("ranks") or [1] * e["inputs"]
        cases = []
        for c, out, ins in claims_of(e):
            for where in ("dim 0", "dim 1", "both"):
                pls = [(p, Replicate()) if where == "dim 0" else (Replicate(), p) if where == "dim 1" else (p, p)
                       for p in ins]
                claimed = {"dim 0": [c[0], "R"], "dim 1": ["R", c[0]], "both": [c[0], c[0]]}[where]
                rng = random.Random(f"{e['op']}|{e['args']}|{c}|{where}")
                for _ in range(INSTANCES):
                    try:
                        rec = instance(f, {"placements": pls, "ranks": ranks}, mesh, rng)
                    except Exception as err:  # the global op raised: no instance
                        rec = {"error": f"on the global tensors: {type(err).__name__}: "
                                        f"{str(err).strip().splitlines()[0][:160]}"}
                    cases.append({"claim": c, "where": where, "claimed": claimed,
                                  "placements": [[text(p) for p in pl] for pl in pls], **rec})
        done += attach(e, "mesh2d", cases, "instances on 2x2")
    finish(path, doc, done, "2x2 instances")


if __name__ == "__main__":
    main()
