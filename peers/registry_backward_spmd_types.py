"""spmd_types' backward of its local ops (SPEC.md §22.6), on recorded
instances.

spmd_types types plain per-rank tensors; differentiating a program runs
torch's autograd on each rank, and the gradient of an input has the type
`backward_type()` of the input's type (types.py: R -> P, P -> R,
S(d) -> S(d)). So the library's backward of a claim `[output, inputs...]`
is torch's per-rank VJP of the op, its cotangent of type
backward_type(output) and each input's gradient read in
backward_type(input). For every claim of a registry file of spmd_types
(not its collectives, which registry_collectives_spmd_types.py records;
not the shape-dependent ones), on meshes of 2, 3 and 4 ranks, three
seeded instances each: per-rank inputs of the claim's local shapes in its
types (values multiples of 1/4 of distinct magnitudes, none zero; equal
on every rank for R), the op run on each rank under
`spmd_types.typecheck(local=False)` (whose output type must be the
claim's) and `torch.autograd.grad` of it outside the checker (inside,
spmd_types types the call to `torch.autograd.grad` itself as a nonlinear
op and refuses a Partial cotangent), and, as
the reference, torch's gradient of the op on the global tensors. A claim
whose op torch cannot differentiate on the global tensors is counted in
the entry's `backward_skipped`.

Usage: registry_backward_spmd_types.py FILE [GLOB]: adds `backward` to
FILE's entries in place.
"""

import fnmatch
import random
import sys
import warnings

import torch
from spmd_types import P, R, S, assert_type, get_local_type
from spmd_types._checker import typecheck
from spmd_types._testing import fake_pg

import registry_tensor_spmd_types as rt
from registry_backward_dtensor import Distinct, VALUES, tensor_text
from registry_values import attach, finish, instances, load_doc

warnings.filterwarnings("ignore")
SIZES = (2, 3, 4)
INSTANCES = 3
SCALAR = 2


def type_of(p):
    return R if p == "R" else P if p == "P(sum)" else S(int(p[2:-1]))


def text_of(t):
    if t is R:
        return "R"
    if t is P:
        return "P(sum)"
    return f"S({t.dim})"


def function_of(e):
    """The op as a function of its tensors (and of how to make a constant
    index operand), and the local shapes its claims were asked on."""
    if e.get("call") is not None:
        ranks = (e.get("tensor_kernel") or {}).get("ranks") or [1] * e["inputs"]

        def f(*ts, index=lambda t: t):
            args, kwargs = rt.build(e["call"], list(ts), index=index)
            kwargs = {k: v for k, v in kwargs.items() if k != "linear_in"}
            return rt.kernel_fn(e["op"])(*args, **kwargs)
        return f, [[2] * r for r in ranks]
    g = rt.resolve(e["op"])
    if e["family"] == "scalar":
        return (lambda x, index=None: g(x, SCALAR)), [[2]]
    return (lambda *ts, index=None: g(*ts)), [[2]] * e["inputs"]


def per_rank(p, shape, n, draw):
    if p == "R":
        t = torch.tensor([draw() for _ in range(int(torch.Size(shape).numel()))],
                         dtype=torch.float64).reshape(shape)
        return [t.clone() for _ in range(n)]
    return [torch.tensor([draw() for _ in range(int(torch.Size(shape).numel()))],
                         dtype=torch.float64).reshape(shape) for _ in range(n)]


def meaning(p, ts):
    if p == "R":
        return ts[0].clone()
    if p == "P(sum)":
        return torch.stack(ts).sum(0)
    return torch.cat(ts, int(p[2:-1]))


class NoDerivative(Exception):
    pass


def instance(f, claim, shapes, n, pg, rng):
    out, ins = claim[0], claim[1:]
    distinct = Distinct(rng, sum(n * int(torch.Size(s).numel()) for s in shapes))
    xs = [per_rank(p, s, n, distinct.draw) for p, s in zip(ins, shapes)]
    cot = text_of(type_of(out).backward_type())
    out_local = list(f(*[x[0] for x in xs]).shape)
    cts = per_rank(cot, out_local, n, lambda: rng.choice(VALUES))
    gx = [meaning(p, x).requires_grad_() for p, x in zip(ins, xs)]
    try:
        gy = f(*gx)
        if not gy.requires_grad:
            raise NoDerivative("the op's output does not require grad")
        want = torch.autograd.grad(gy, gx, meaning(cot, cts), allow_unused=True)
    except NoDerivative:
        raise
    except Exception as err:
        raise NoDerivative(f"torch raised on the global tensors: {type(err).__name__}: "
                           f"{str(err).strip().splitlines()[0][:120]}")
    rec = {"n": n, "cotangent_placement": cot, "inputs": [[tensor_text(t) for t in x] for x in xs],
           "cotangent": [tensor_text(t) for t in cts],
           "expected": [None if w is None else tensor_text(w) for w in want],
           "expected_zero": [w is None for w in want]}
    per = [[] for _ in ins]
    chose = set()
    for r in range(n):
        leaves = [x[r].clone().requires_grad_() for x in xs]
        typed = [assert_type(t, {pg: type_of(p)}) for t, p in zip(leaves, ins)]
        with typecheck(local=False):
            # An index operand is typed R, as when the claim was asked.
            y = f(*typed, index=lambda t: assert_type(t, {pg: R}))
        lt = list(get_local_type(y).values())
        chose.add(text_of(lt[0]) if len(lt) == 1 and lt[0] in (R, P) else out)
        # Differentiating is torch's autograd, outside the type checker
        # (inside it, spmd_types types `torch.autograd.grad` itself as an op).
        gs = torch.autograd.grad(y, leaves, cts[r], allow_unused=True)
        for i, g in enumerate(gs):
            per[i].append(g)
    rec["chose"] = out if chose == {out} else ", ".join(sorted(chose))
    rec["grads"] = [None if all(g is None for g in gs) else
                    {"placement": text_of(type_of(p).backward_type()),
                     "per_rank": [tensor_text(torch.zeros(s) if g is None else g) for g, s in
                                  zip(gs, [shape] * n)]}
                    for gs, p, shape in zip(per, ins, [list(x[0].shape) for x in xs])]
    return rec


def main():
    path = sys.argv[1]
    only = sys.argv[2] if len(sys.argv) > 2 else None
    doc = load_doc(path)
    done = 0
    with fake_pg(max(SIZES)) as pg:
        for e in doc["entries"]:
            if e["family"] == "collective" or (only is not None and not fnmatch.fnmatchcase(e["op"], only)):
                continue
            e.pop("backward", None)
            e.pop("backward_skipped", None)
            k = e.get("kernel") or e.get("tensor_kernel") or {}
            if e.get("shape_dependent") or k.get("input_dtype") != "float64":
                continue
            f, shapes = function_of(e)
            cases, skipped = [], {}
            for c in e.get("claims") or []:
                rng = random.Random(f"{e['op']}|{e['args']}|{c}")
                cot = text_of(type_of(c[0]).backward_type())
                try:
                    cases += instances(c, cot, SIZES, INSTANCES,
                                       lambda n, c=c, rng=rng: instance(f, c, shapes, n, pg, rng),
                                       passes=NoDerivative)
                except NoDerivative as why:
                    skipped[str(why)] = skipped.get(str(why), 0) + 1
            if skipped:
                e["backward_skipped"] = skipped
            done += attach(e, "backward", cases)
    finish(path, doc, done, "backward instances")

if __name__ == "__main__":
    main()
