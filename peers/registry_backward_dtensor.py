"""DTensor's backward of its registered rules (SPEC.md §22.6).

For every claim of a registry file of DTensor (inputs and output among
Replicate, Shard(d) and Partial(sum|avg|max|min), float inputs), on meshes of 2 and 3
ranks simulated by LocalTensorMode on a fake process group, and a few
seeded instances each: per-rank inputs in the claim's placements, their
values multiples of 1/4 of distinct magnitudes (no ties, no zeros)
(requires_grad), the op run on the DTensors, a cotangent in the claimed
output placement (and, where that is not Replicate, a Replicate one), and
`torch.autograd.grad`. A claim whose op torch cannot differentiate on the
global tensors (no grad, or no derivative formula) is counted in the
entry's `backward_skipped`, not recorded. Recorded per instance: the
per-rank inputs and cotangent, the placement DTensor chose for the output,
each gradient's placement and per-rank values, and the gradient
`torch.autograd.grad` gives for the op on the global tensors (the real
kernel's own derivative). Values as registry_values writes them (None
where float64 is not exact). spmd-check computes each gradient's global
value from its placement and compares.

It also adds an entry per pair of placements for `DTensor.redistribute`
(the identity on global values): its instances keep the output's
per-rank values too, and the global input, which the output must denote.

Usage: registry_backward_dtensor.py FILE [GLOB]: adds each entry's
`backward` to FILE (a registry file, gzipped or plain) in place.
"""

import fnmatch
import random
import sys
import warnings

import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.testing._internal.distributed.fake_pg import FakeStore

from registry_values import attach, encode, finish, instances, load_doc

warnings.filterwarnings("ignore")
SIZES = (2, 3)
INSTANCES = 3
VALUES = [-2, -1.5, -1, -0.5, 0.5, 1, 1.5, 2]


def parse(p):
    """A registry placement as DTensor's, or None if not checked here."""
    if p == "R":
        return Replicate()
    if p.startswith("S(") and p.endswith(")"):
        return Shard(int(p[2:-1]))
    if p in ("P(sum)", "P(avg)", "P(max)", "P(min)"):
        return Partial(p[2:-1])
    return None


def text(p):
    if isinstance(p, Replicate):
        return "R"
    if isinstance(p, Shard):
        return f"S({p.dim})"
    if isinstance(p, Partial):
        return f"P({p.reduce_op})"
    return str(p)


def tensor_text(t):
    if t._is_zerotensor():  # autograd's storage-free zeros (sgn's gradient)
        t = torch.zeros(t.shape, dtype=t.dtype)
    t = t.detach().to(torch.float64) if t.is_floating_point() else t.detach()
    return encode(list(t.shape), t.reshape(-1).tolist())


class Distinct:
    """Values of one instance: multiples of 1/4, no two of the same
    magnitude, none zero, so that no max, min, abs or norm meets a tie or
    zero (a kink, where the derivative does not exist, SPEC.md §4.7)."""

    def __init__(self, rng, count):
        self.rng = rng
        self.pool = rng.sample(range(1, 4 * count + 9), count + 8)

    def draw(self):
        k = self.pool.pop() if self.pool else self.rng.randrange(1, 64)
        return self.rng.choice((-1, 1)) * k / 4


def per_rank_of(p, shape, n, rng, values=None):
    """n local tensors in placement p of a global tensor of `shape`, and
    the global tensor; their values drawn from `values` (a Distinct), or
    from VALUES."""
    def rand(s):
        k = int(torch.Size(s).numel())
        vals = [values.draw() if values else rng.choice(VALUES) for _ in range(k)]
        return torch.tensor(vals, dtype=torch.float64).reshape(s)
    if isinstance(p, Replicate):
        g = rand(shape)
        return [g.clone() for _ in range(n)], g
    if isinstance(p, Shard):
        g = rand(shape)
        return [c.clone() for c in torch.chunk(g, n, p.dim)], g
    ts = [rand(shape) for _ in range(n)]
    st = torch.stack(ts)
    return ts, {"sum": st.sum(0), "avg": st.mean(0), "max": st.amax(0), "min": st.amin(0)}[p.reduce_op]


def build_call(e):
    call = e["call"]

    def val(v, xs):
        if isinstance(v, dict) and "tensor" in v:
            return xs[v["tensor"]]
        if isinstance(v, dict) and "dtype" in v:
            return getattr(torch, v["dtype"])
        if isinstance(v, dict) and "float" in v:
            return float(v["float"])
        if isinstance(v, list):
            return [val(x, xs) for x in v]
        return v
    ns, pkt, ov = e["op"].split(".")
    op = getattr(getattr(getattr(torch.ops, ns), pkt), ov)

    def f(*xs):
        return op(*[val(a, xs) for a in call["args"]], **{k: val(v, xs) for k, v in call["kwargs"].items()})
    return f


def shape_of(e, n):
    ranks = (e.get("tensor_kernel") or {}).get("ranks") or [1] * e["inputs"]
    return [[2 * n] * r for r in ranks]


class Refused(Exception):
    """DTensor refused the forward call."""


class NoDerivative(Exception):
    """torch has no gradient for the op on the global tensors."""


def instance(f, e, ins, out, cot, n, mesh, rng, dt=None, shapes=None):
    """One instance: f on the global tensors (its gradient is the
    reference), and on the DTensors f, or `dt` where the DTensor call
    differs (redistribute: the identity on global values). With `dt` the
    output's per-rank values and f's global output are kept as well."""
    shapes = shapes or shape_of(e, n)
    distinct = Distinct(rng, sum(n * int(torch.Size(s).numel()) for s in shapes))
    locs, globs = zip(*[per_rank_of(p, s, n, rng, distinct) for p, s in zip(ins, shapes)])
    rec = {"n": n, "cotangent_placement": text(cot),
           "inputs": [[tensor_text(t) for t in ts] for ts in locs]}
    # The global op and its gradient: the kernel's own derivative.
    gx = [g.clone().requires_grad_() for g in globs]
    try:
        gy = f(*gx)
        if not isinstance(gy, torch.Tensor) or not gy.requires_grad:
            raise NoDerivative("the op's output does not require grad")
        cts, gct = per_rank_of(cot, list(gy.shape), n, rng)
        want = torch.autograd.grad(gy, gx, gct, allow_unused=True)
    except NoDerivative:
        raise
    except Exception as err:
        raise NoDerivative(f"torch raised on the global tensors: {type(err).__name__}: "
                           f"{str(err).strip().splitlines()[0][:120]}")
    rec["cotangent"] = [tensor_text(t) for t in cts]
    rec["expected"] = [None if w is None else tensor_text(w) for w in want]
    rec["expected_zero"] = [w is None for w in want]
    with LocalTensorMode(n) as mode:
        xs = [DTensor.from_local(mode.rank_map(lambda r, ts=ts: ts[r].clone()), mesh, [p], run_check=False)
              .requires_grad_() for ts, p in zip(locs, ins)]
        try:
            y = (dt or f)(*xs)
        except Exception as err:
            raise Refused(f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200]}")
        rec["chose"] = text(y.placements[0])
        if dt is not None:
            rec["output"] = [tensor_text(y._local_tensor._local_tensors[r]) for r in range(n)]
            rec["expected_output"] = tensor_text(gy)
        if y.placements[0] != out:
            return rec
        ct = DTensor.from_local(mode.rank_map(lambda r: cts[r].clone()), mesh, [cot], run_check=False)
        gs = torch.autograd.grad(y, xs, ct, allow_unused=True)
        grads = []
        for g in gs:
            if g is None:
                grads.append(None)
                continue
            if not isinstance(g, DTensor):
                return {"n": n, "cotangent_placement": text(cot),
                        "error": f"DTensor returned a {type(g).__name__}, not a DTensor, as a gradient"}
            lt = g._local_tensor
            grads.append({"placement": text(g.placements[0]),
                          "per_rank": [tensor_text(lt._local_tensors[r]) for r in range(n)]})
        rec["grads"] = grads
    return rec


PLACES = ["R", "S(0)", "S(1)", "P(sum)", "P(avg)", "P(max)", "P(min)"]


def redistribute_entries(meshes):
    """DTensor.redistribute between every two placements: the identity on
    global values, forward (the output must denote the input) and backward
    (the gradient must denote the cotangent). A pair DTensor refuses is
    no claim: it goes to the file's `skipped`, with the refusal."""
    out, refused = [], []
    for src in PLACES:
        for dst in PLACES:
            if src == dst:
                continue
            cases = []
            try:
                instance(lambda x: x.clone(), None, [parse(src)], parse(dst), parse(dst), 2, meshes[2],
                         random.Random(0), dt=lambda x, d=dst: x.redistribute(meshes[2], [parse(d)]),
                         shapes=[[4, 4]])
            except Refused as why:
                refused.append({"op": f"DTensor.redistribute {src} -> {dst}", "why": f"DTensor refuses: {why}"})
                continue
            except Exception:
                pass  # recorded below, instance by instance
            for cot in [dst] + ([] if dst == "R" else ["R"]):
                rng = random.Random(f"redistribute|{src}|{dst}|{cot}")
                cases += instances(
                    [dst, src], cot, SIZES, INSTANCES,
                    lambda n, cot=cot, rng=rng: instance(
                        lambda x: x.clone(), None, [parse(src)], parse(dst), parse(cot), n, meshes[n], rng,
                        dt=lambda x, d=dst, m=meshes[n]: x.redistribute(m, [parse(d)]),
                        shapes=[[2 * n, 2 * n]]))
            out.append({"op": "DTensor.redistribute", "family": "redistribute",
                        "schema": "DTensor.redistribute(device_mesh, [dst])", "args": "", "inputs": 1,
                        "backward": cases})
            print(f"DTensor.redistribute {src} -> {dst}: {len(cases)} instances", file=sys.stderr)
    return out, refused


def claims_of(e):
    out = []
    for c in e.get("claims") or []:
        ps = [parse(p) for p in c]
        if any(p is None for p in ps) or all(isinstance(p, Replicate) for p in ps):
            continue
        out.append((c, ps[0], ps[1:]))
    return out


def checkable(e):
    k = e.get("kernel") or e.get("tensor_kernel") or {}
    return (e.get("call") is not None and not e.get("shape_dependent") and not e.get("strategy_error")
            and k.get("input_dtype") == "float64" and str(k.get("output_dtype", "")).startswith("float"))


def main():
    path = sys.argv[1]
    only = sys.argv[2] if len(sys.argv) > 2 else None
    doc = load_doc(path)
    meshes = {}
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=max(SIZES))
    for n in SIZES:
        meshes[n] = init_device_mesh("cpu", (n,))
    done = 0
    doc["entries"] = [e for e in doc["entries"] if e["op"] != "DTensor.redistribute"]
    doc["skipped"] = [k for k in doc.get("skipped", []) if not k["op"].startswith("DTensor.redistribute ")]
    if only is None or fnmatch.fnmatchcase("DTensor.redistribute", only):
        entries, refused = redistribute_entries(meshes)
        doc["entries"].extend(entries)
        doc["skipped"].extend(refused)
    for e in doc["entries"]:
        if e["op"] == "DTensor.redistribute" or e.get("family") == "local":
            continue  # recorded above, or by registry_local_dtensor.py
        if only is not None and not fnmatch.fnmatchcase(e["op"], only):
            continue
        e.pop("backward", None)
        e.pop("backward_skipped", None)
        if not checkable(e):
            continue
        f = build_call(e)
        cases, skipped = [], {}
        for c, out, ins in claims_of(e):
            # The cotangent in the claimed output placement, and (where
            # that is not Replicate) a Replicate one, which is what a loss
            # computed after a redistribute hands back.
            for cot in [out] + ([] if isinstance(out, Replicate) else [Replicate()]):
                rng = random.Random(f"{e['op']}|{e['args']}|{c}|{text(cot)}")
                try:
                    cases += instances(c, text(cot), SIZES, INSTANCES,
                                       lambda n, ins=ins, out=out, cot=cot, rng=rng:
                                       instance(f, e, ins, out, cot, n, meshes[n], rng),
                                       passes=NoDerivative)
                except NoDerivative as why:
                    skipped[str(why)] = skipped.get(str(why), 0) + 1
        if skipped:
            e["backward_skipped"] = skipped
        done += attach(e, "backward", cases)
    finish(path, doc, done, "backward instances")


if __name__ == "__main__":
    main()
