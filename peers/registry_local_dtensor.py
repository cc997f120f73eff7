"""DTensor's backward of `DTensor.from_local` and `DTensor.to_local`
(SPEC.md §22.6), on recorded instances.

These two cross between a rank's plain tensor and the global value a
DTensor denotes, so the gradient each gives is checked against the
derivative of a function between global values, with the plain tensors
of all ranks read as one value (the reading named in the claim):

- `local`: the per-rank tensors, independent of one another, read as
  their stack along a new dim 0 (seed 003's Varying; its cotangent is
  the stack of per-rank cotangents, paired by summing over ranks);
- `R`: the per-rank tensors are equal and read as that one tensor (an
  Invariant value: its cotangent is equal on every rank and counted
  once);
- `S(d)`: read as their concatenation along d.

`from_local(x, mesh, [p])` is the function from the reading of x (`R`
for p = Replicate, `local` otherwise) to the DTensor's global value: for
`local` the concatenation along d (Shard(d)) or the sum, mean, max or min
over ranks (Partial); for `R` the identity. `to_local()` is the function
from the DTensor's global value to the reading of the plain tensors that
`grad_placements` states (the caller's promise about the local
gradient): the default (Partial -> Replicate as the from_local docstring
tabulates, otherwise the forward placement) reads them in that
placement, and `grad_placements=[Partial()]` on a Replicate input reads
them as `local` (the per-rank cotangents are summed). `to_local` of a
Partial DTensor hands out one rank's pending piece, which is not a
function of the global value; it has no global derivative to compare
with and is not recorded.

For each, on meshes of 2, 3 and 4 ranks simulated by LocalTensorMode on a
fake process group, three seeded instances per cotangent placement:
per-rank values multiples of 1/4 of distinct magnitudes (no ties, none
zero), the cotangent in the output's placement or reading (and, for
from_local onto a non-Replicate placement, also in Replicate),
`torch.autograd.grad` through the call, and, as the reference, torch's
gradient of the global function written with torch ops on the global
tensors (stack, cat, sum, mean, amax, amin). Each gradient is recorded
with its reading: a from_local gradient (plain tensors) in its input's
reading, a to_local gradient (a DTensor) in the placement DTensor gave
it.

Usage: registry_local_dtensor.py FILE [GLOB]: replaces FILE's entries of
family `local` (those whose op GLOB matches) in place.
"""

import fnmatch
import random
import sys
import warnings

import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial
from torch.testing._internal.distributed.fake_pg import FakeStore

from registry_backward_dtensor import Distinct, VALUES, parse, tensor_text, text
from registry_values import instances, load_doc, save_doc

warnings.filterwarnings("ignore")
SIZES = (2, 3, 4)
INSTANCES = 3
SHAPE = [2, 2]  # a rank's tensor; a Shard's global tensor is n times as long along its dim


def values(shape, draw):
    k = int(torch.Size(shape).numel())
    return torch.tensor([draw() for _ in range(k)], dtype=torch.float64).reshape(shape)


def per_rank(reading, n, draw):
    """n per-rank tensors of SHAPE for a reading or placement: equal for R,
    independent otherwise (Shard pieces, Partial pieces, local)."""
    if reading == "R":
        t = values(SHAPE, draw)
        return [t.clone() for _ in range(n)]
    return [values(SHAPE, draw) for _ in range(n)]


def global_of(reading, ts):
    """What the per-rank tensors mean under a reading or placement."""
    if reading == "local":
        return torch.stack(ts)
    if reading == "R":
        return ts[0].clone()
    if reading.startswith("S("):
        return torch.cat(ts, int(reading[2:-1]))
    st = torch.stack(ts)
    return {"P(sum)": st.sum(0), "P(avg)": st.mean(0), "P(max)": st.amax(0), "P(min)": st.amin(0)}[reading]


def from_local_global(p):
    """from_local onto p as a function of its input's reading."""
    if p == "R":
        return lambda x: x * 1
    if p.startswith("S("):
        return lambda x: torch.cat(x.unbind(0), int(p[2:-1]))
    k = p[2:-1]
    return {"sum": lambda x: x.sum(0), "avg": lambda x: x.mean(0),
            "max": lambda x: x.amax(0), "min": lambda x: x.amin(0)}[k]


def from_local_instance(p, cot, n, mesh, rng):
    """from_local(x, [p]) with a cotangent in placement `cot`."""
    reading = "R" if p == "R" else "local"
    distinct = Distinct(rng, n * 4)
    xs = per_rank(reading, n, distinct.draw)
    out_shape = list(global_of(p, xs).shape)
    ct_shape = SHAPE if not cot.startswith("S(") else out_shape
    pick = lambda: rng.choice(VALUES)  # noqa: E731
    if cot == "R":
        t = values(out_shape, pick)
        cts = [t.clone() for _ in range(n)]
    elif cot.startswith("S("):
        cts = [c.clone() for c in torch.chunk(values(out_shape, pick), n, int(cot[2:-1]))]
    else:
        cts = [values(ct_shape, pick) for _ in range(n)]
    gx = global_of(reading, xs).requires_grad_()
    (want,) = torch.autograd.grad(from_local_global(p)(gx), [gx], global_of(cot, cts))
    rec = {"n": n, "cotangent_placement": cot, "inputs": [[tensor_text(t) for t in xs]],
           "cotangent": [tensor_text(t) for t in cts], "expected": [tensor_text(want)],
           "expected_zero": [False]}
    with LocalTensorMode(n) as mode:
        x = mode.rank_map(lambda r: xs[r].clone()).requires_grad_()
        y = DTensor.from_local(x, mesh, [parse(p)], run_check=False)
        rec["chose"] = text(y.placements[0])
        ct = DTensor.from_local(mode.rank_map(lambda r: cts[r].clone()), mesh, [parse(cot)], run_check=False)
        (g,) = torch.autograd.grad(y, [x], ct)
        rec["grads"] = [{"placement": reading,
                         "per_rank": [tensor_text(g._local_tensors[r]) for r in range(n)]}]
    return rec


def to_local_instance(p, grad_placements, reading, n, mesh, rng):
    """x.to_local(grad_placements=...) for x in placement p, its output
    read as `reading`, with a cotangent of that reading."""
    distinct = Distinct(rng, n * 4)
    xs = per_rank(p, n, distinct.draw)
    pick = lambda: rng.choice(VALUES)  # noqa: E731
    cts = per_rank(reading, n, pick)
    gx = global_of(p, xs).requires_grad_()
    f = (lambda x: torch.stack([x] * n)) if reading == "local" else (lambda x: x * 1)
    (want,) = torch.autograd.grad(f(gx), [gx], global_of(reading, cts))
    rec = {"n": n, "cotangent_placement": reading, "inputs": [[tensor_text(t) for t in xs]],
           "cotangent": [tensor_text(t) for t in cts], "expected": [tensor_text(want)],
           "expected_zero": [False], "chose": reading}
    with LocalTensorMode(n) as mode:
        x = DTensor.from_local(mode.rank_map(lambda r: xs[r].clone()), mesh, [parse(p)],
                               run_check=False).requires_grad_()
        y = x.to_local(grad_placements=grad_placements)
        (g,) = torch.autograd.grad(y, [x], mode.rank_map(lambda r: cts[r].clone()))
        if not isinstance(g, DTensor):
            return {"n": n, "cotangent_placement": reading,
                    "error": f"DTensor returned a {type(g).__name__}, not a DTensor, as a gradient"}
        rec["grads"] = [{"placement": text(g.placements[0]),
                         "per_rank": [tensor_text(g._local_tensor._local_tensors[r]) for r in range(n)]}]
    return rec


def entries(meshes):
    fl = []
    for p in ["R", "S(0)", "S(1)", "P(sum)", "P(avg)", "P(max)", "P(min)"]:
        reading = "R" if p == "R" else "local"
        for cot in [p] + ([] if p == "R" else ["R"]):
            rng = random.Random(f"from_local|{p}|{cot}")
            fl += instances([p, reading], cot, SIZES, INSTANCES,
                            lambda n, p=p, cot=cot, rng=rng: from_local_instance(p, cot, n, meshes[n], rng))
    out = [{"op": "DTensor.from_local", "family": "local", "schema": "DTensor.from_local(local, mesh, [p])",
            "args": "", "inputs": 1, "backward": fl}]
    for args, grad_placements, pairs in [
        ("", None, [("R", "R"), ("S(0)", "S(0)"), ("S(1)", "S(1)")]),
        ("grad_placements=[Partial(sum)]", [Partial()], [("R", "local")]),
    ]:
        tl = []
        for p, reading in pairs:
            rng = random.Random(f"to_local|{args}|{p}")
            tl += instances([reading, p], reading, SIZES, INSTANCES,
                            lambda n, p=p, reading=reading, rng=rng:
                            to_local_instance(p, grad_placements, reading, n, meshes[n], rng))
        out.append({"op": "DTensor.to_local", "family": "local",
                    "schema": "DTensor.to_local(grad_placements=...)", "args": args, "inputs": 1,
                    "backward": tl})
    return out


def main():
    path = sys.argv[1]
    only = sys.argv[2] if len(sys.argv) > 2 else None
    doc = load_doc(path)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=max(SIZES))
    meshes = {n: init_device_mesh("cpu", (n,)) for n in SIZES}
    doc["entries"] = [e for e in doc["entries"] if e.get("family") != "local"]
    new = [e for e in entries(meshes) if only is None or fnmatch.fnmatchcase(e["op"], only)]
    doc["entries"].extend(new)
    doc["skipped"] = [k for k in doc.get("skipped", []) if not k["op"].startswith("DTensor.to_local ")]
    doc["skipped"].extend({"op": f"DTensor.to_local {p}",
                           "why": "not a function of the global value: each rank gets its own pending "
                                  "piece, so there is no global derivative to compare with"}
                          for p in ["P(sum)", "P(avg)", "P(max)", "P(min)"])
    for e in new:
        print(f"{e['op']}({e['args']}): {len(e['backward'])} instances", file=sys.stderr)
    save_doc(path, doc)


if __name__ == "__main__":
    main()
