"""Record the backward DTensor itself runs for `redistribute` on uneven
shards into tests/fixtures/uneven/dtensor_uneven_backward.json: the
companion of record_uneven_dtensor.py, which records only the forward.

Setting: 1-D meshes of 2, 3 and 4 ranks, simulated by LocalTensorMode on a
fake process group (torch 2.14.1, CPU, float64). Global shape [L, 2] for
every L from 0 to 2n + 1, so that dim 0 is shorter than, equal to and
longer than the mesh and often not a multiple of it.

For every ordered pair (src, dst) of placements among Replicate ("R"),
Shard(0) ("S(0)"), Shard(1) ("S(1)") and Partial(sum) ("P(sum)"), the
pair src == dst included:

  * source: each rank gets a leaf local tensor (requires_grad) holding its
    piece of the global tensor 1, 2, ... (row-major): the whole tensor on
    every rank for R; torch.chunk's pieces along the dim for S(d), ranks
    past the last chunk holding an empty piece (DTensor's own uneven
    layout); for P(sum) the whole tensor on rank 0 and zeros elsewhere.
    They are wrapped by `DTensor.from_local(..., [src], shape=, stride=,
    run_check=False)`, giving x, and `y = x.redistribute(mesh, [dst])`.
    A pair whose forward DTensor refuses is recorded once per (n, L) with
    the refusal and no cotangent.
  * cotangents: for each k in 0 .. 2L - 1 one cotangent DTensor, placed
    dst, whose global value is the basis tensor e_k (1 at flat row-major
    index k, zeros elsewhere). Its local pieces: for R, e_k on every rank;
    for S(d), torch.chunk(e_k, n, d) with empty pieces for the ranks past
    the last chunk; for P(sum), e_k on rank 0 and zeros on every other
    rank. (L = 0 has no basis element: one case with index null and empty
    pieces is recorded so the pair is still seen.)
  * backward: `torch.autograd.grad(y, [x, leaves], cotangent)`. Recorded:
    "grad", each rank's local tensor of the gradient DTensor that
    DTensor's redistribute backward hands to x, with "grad_placements" its
    placements; and "grad_local", each rank's gradient with respect to
    the leaf local tensors (what `.grad` on the pieces gives after
    from_local's own backward, which may redistribute once more). An
    exception in the backward is recorded as "error".

Values are written as registry_values.encode does (`2x2:1,0/…`). Each case
is {"mesh": [n], "shape": [L, 2], "src": [...], "dst": [...],
"cotangent_global_index": k, "cotangent": per-rank pieces, "grad",
"grad_placements", "grad_local"}, or "refused" in place of the last five.

LocalTensorMode's autograd does give each rank its own gradient: the same
calls run in 2, 3 and 4 real processes (gloo, CPU) gave the same bytes for
all 2709 cases (24 of them refusals, R -> P(sum)), when this was written.

    /work/venv-torch/bin/python peers/record_uneven_dtensor_backward.py

(any Python with torch 2.14.1; OUT=path writes elsewhere, a `.gz` name
gzipped.)
"""
import itertools
import os
import sys
import warnings

import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.testing._internal.distributed.fake_pg import FakeStore

from registry_values import encode, raised, save_doc

warnings.filterwarnings("ignore")
OUT = os.environ.get("OUT") or os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "uneven",
                                            "dtensor_uneven_backward.json")
PLACES = {"R": Replicate(), "S(0)": Shard(0), "S(1)": Shard(1), "P(sum)": Partial()}
COLS = 2


def text(p):
    if isinstance(p, Replicate):
        return "R"
    if isinstance(p, Shard):
        return f"S({p.dim})"
    if isinstance(p, Partial):
        return f"P({p.reduce_op})"
    return str(p)


def flat(t):
    if t._is_zerotensor():
        t = torch.zeros(t.shape, dtype=t.dtype)
    t = t.detach()
    return encode(list(t.shape), t.reshape(-1).tolist())


def pieces(g, place, n):
    """The n local pieces of global tensor g in placement `place` (see the
    module docstring)."""
    if place == "R":
        return [g.clone() for _ in range(n)]
    if place == "P(sum)":
        return [g.clone()] + [torch.zeros_like(g) for _ in range(n - 1)]
    d = PLACES[place].dim
    ch = [c.clone() for c in torch.chunk(g, n, d)]
    if not ch:  # torch.chunk of a length-0 dim gives one empty chunk, not none
        ch = [g.clone()]
    empty = list(g.shape)
    empty[d] = 0
    return ch + [torch.zeros(empty, dtype=g.dtype) for _ in range(n - len(ch))]


def per_rank(t, n):
    """Each rank's local tensor of a DTensor's local (a LocalTensor, or one
    plain tensor standing for every rank)."""
    if hasattr(t, "_local_tensors"):
        return [t._local_tensors[r] for r in range(n)]
    return [t] * n


def pair(mesh, n, L, src, dst):
    shape = [L, COLS]
    size = torch.Size(shape)
    g = torch.arange(1, 1 + size.numel(), dtype=torch.float64).reshape(shape)
    src_pieces = pieces(g, src, n)
    base = {"mesh": [n], "shape": shape, "src": [src], "dst": [dst]}
    out = []
    ks = list(range(size.numel())) or [None]
    for k in ks:
        e = torch.zeros(size.numel(), dtype=torch.float64)
        if k is not None:
            e[k] = 1
        cot = pieces(e.reshape(shape), dst, n)
        rec = dict(base, cotangent_global_index=k)
        with LocalTensorMode(n) as mode:
            leaves = mode.rank_map(lambda r: src_pieces[r].clone()).requires_grad_()
            try:
                x = DTensor.from_local(leaves, mesh, [PLACES[src]], shape=size, stride=g.stride(),
                                       run_check=False)
                y = x.redistribute(mesh, [PLACES[dst]])
            except Exception as err:
                out.append(dict(base, refused=raised(err)))
                return out
            # The pieces above follow DTensor's own layout: the output's.
            assert [list(t.shape) for t in per_rank(y._local_tensor, n)] == [list(c.shape) for c in cot], \
                (n, L, src, dst)
            rec["cotangent"] = [flat(c) for c in cot]
            try:
                ct = DTensor.from_local(mode.rank_map(lambda r: cot[r].clone()), mesh, [PLACES[dst]],
                                        shape=size, stride=g.stride(), run_check=False)
                gx, gl = torch.autograd.grad(y, [x, leaves], ct, allow_unused=True)
            except Exception as err:
                rec["error"] = raised(err)
                out.append(rec)
                continue
            if isinstance(gx, DTensor):
                rec["grad"] = [flat(t) for t in per_rank(gx._local_tensor, n)]
                rec["grad_placements"] = [text(p) for p in gx.placements]
            else:
                rec["grad"] = None if gx is None else [flat(t) for t in per_rank(gx, n)]
                rec["grad_placements"] = None
            rec["grad_local"] = None if gl is None else [flat(t) for t in per_rank(gl, n)]
        out.append(rec)
    return out


def main():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    cases = []
    for n in (2, 3, 4):
        mesh = init_device_mesh("cpu", (n,))
        for L in range(0, 2 * n + 2):
            for src, dst in itertools.product(PLACES, PLACES):
                cases += pair(mesh, n, L, src, dst)
    doc = {"torch": torch.__version__,
           "recorded_by": "peers/record_uneven_dtensor_backward.py: from_local of leaf pieces, redistribute, "
                          "torch.autograd.grad with each basis cotangent, LocalTensorMode on a fake process group",
           "cases": cases}
    save_doc(os.path.abspath(OUT), doc)
    print(len(cases), "cases,", sum("refused" in c for c in cases), "refused,",
          sum("error" in c for c in cases), "backward errors", file=sys.stderr)


if __name__ == "__main__":
    main()
