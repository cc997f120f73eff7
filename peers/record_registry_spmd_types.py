"""Record what spmd_types registers for its torch functions.

spmd_types types a torch call by the op's entry in `_OP_REGISTRY` (its
linearity: LINEAR, MULTILINEAR, with `nonlinear_args`). For every function
of `torch` itself in that registry (the `Tensor` methods share their
entries) that acts elementwise on one or two float64 tensors, this asks the
library, under `spmd_types.typecheck()` on a fake 2-rank process group,
what type the call gets for each assignment of R or P to its inputs: a
claim `[output, inputs...]`, or a refusal (no claim). The real function's
values on the dyadic grid are recorded as for DTensor
(record_registry_dtensor.py). The same elementwise functions with a Python
scalar as their second operand form the family `scalar`. Every other torch
function of the registry (reductions, views, concatenation, contractions,
the addmm-like decompositions) and `rules.einsum` is recorded call by call:
see registry_tensor_spmd_types.py. Usage: record_registry_spmd_types.py
RAW [GLOB], then `record_registry_spmd_types.py fill RAW WANT` until the
checker wants nothing; peers/record_registry.sh runs the loop and prunes
RAW into the fixture.
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


SCALAR_OPS = ("add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide")
SCALAR = 2


def scalar_entries(pg):
    """The elementwise functions with a Python scalar as their second
    operand: spmd_types types the scalar apart (P + scalar is affine and
    refused, P * scalar stays P)."""
    out = []
    for n in SCALAR_OPS:
        f = getattr(torch, n)
        g = (lambda f: lambda x: f(x, SCALAR))(f)
        tab, why = kernel(g, 1)
        claims_ = []
        for s in TYPES:
            t = assert_type(torch.ones(2, dtype=torch.float64), {pg: TYPES[s]})
            try:
                with typecheck():
                    y = g(t)
                ty = list(get_local_type(y).values())
            except Exception:
                continue
            o = next((k for k, v in TYPES.items() if len(ty) == 1 and v is ty[0]), None)
            if o is not None:
                claims_.append([o, s])
        out.append({"op": f"torch.{n}", "family": "scalar", "schema": f"torch.{n}: {_OP_REGISTRY[f]}",
                    "args": f"other={SCALAR}", "inputs": 1, "claims": claims_, "kernel": tab})
    return out


def tensor_entries(only):
    """Reductions, views, concatenation, contractions, addmm-like
    decompositions and rules.einsum, with claims in global SPMD mode and an
    empty call-by-call kernel (registry_tensor_spmd_types.py)."""
    import registry_tensor_spmd_types as rt
    from spmd_types import get_partition_spec
    from spmd_types._checker import _DECOMP_TYPE_RULES
    api = (assert_type, get_local_type, get_partition_spec, typecheck)
    entries = []
    for name, (fam, per_rank) in sorted(rt.variants().items()):
        if only is not None and not fnmatch.fnmatchcase(name, only):
            continue
        f = rt.resolve(name)
        spec = _OP_REGISTRY.get(f) or (f"type decomposition {_DECOMP_TYPE_RULES[f].__name__}"
                                       if f in _DECOMP_TYPE_RULES else "spmd_types.rules builtin")
        for ranks, vs in per_rank:
            for text, (args, kwargs) in vs:
                rtext = f"rank={ranks[0]}" if len(set(ranks)) == 1 else f"ranks={ranks}"
                e = {"op": name, "family": fam, "schema": f"{name}: {spec}",
                     "args": rtext + (f", {text}" if text else ""), "inputs": len(ranks),
                     "call": rt.call_spec(args, kwargs)}
                try:
                    y = rt.run_kernel(e, [torch.ones([2] * r, dtype=torch.float64) for r in ranks])
                    e["tensor_kernel"] = {"input_dtype": "float64",
                                          "output_dtype": str(y.dtype).removeprefix("torch."),
                                          "ranks": ranks, "shapes": [], "calls": []}
                except Exception as ex:
                    e["kernel_error"] = f"{type(ex).__name__}: {str(ex).splitlines()[0][:160] if str(ex) else ''}"
                entries.append((e, ranks))
    # The claims for local shapes [2]*rank on 2 ranks, then every case of
    # the scope (2 to 4 ranks) where the kernel takes the shapes.
    base = {}
    with fake_pg(2) as pg:
        for i, (e, ranks) in enumerate(entries):
            base[i] = rt.claims_at(e, ranks, 2, pg, api)
            e["claims"] = [[o, *c] for c, o in base[i].items() if o is not None]
    for n in rt.MESHES:
        with fake_pg(n) as pg:
            for i, (e, ranks) in enumerate(entries):
                if "shape_dependent" in e:
                    continue
                got = rt.claims_at(e, ranks, n, pg, api, shapes_of=rt.scope_tuples(ranks))
                for c, per_shape in got.items():
                    for local, o in per_shape.items():
                        if o != base[i][c]:
                            e["shape_dependent"] = (
                                f"inputs {', '.join(c)} of local shapes {[list(s) for s in local]} on {n} ranks: "
                                f"{o or 'nothing'} typed, {base[i][c] or 'nothing'} for local shapes [2]*rank on 2 ranks")
                            break
                    if "shape_dependent" in e:
                        break
        print(f"scope checked on {n} ranks", file=sys.stderr)
    return [e for e, _ in entries]


NOT_RECORDED_FNS = {"torch.split", "torch.chunk", "torch.unbind", "torch.bmm"}
NOT_RECORDED = {
    "torch functions with a tuple output (split, chunk, unbind): one tensor output is checked": 3,
    "torch functions of rank-3 inputs (bmm, addbmm, baddbmm): beyond the scope's shapes (rank 2 at most)": 3,
    "Tensor methods and operators typed by the entry of a recorded torch function (Tensor.sum, __add__, ...)": 0,
    "in-place Tensor methods (add_, t_, __iadd__, ...): their functional form is recorded": 0,
    "Tensor property getters (T, mT, H, mH, real, imag)": 6,
    "Tensor methods without a recorded torch function (view_as, expand_as, contiguous)": 3,
}


def not_recorded():
    """What spmd_types registers and this recording leaves out, by reason."""
    from spmd_types._checker import _DECOMP_TYPE_RULES
    nr = dict(NOT_RECORDED)
    recorded_methods = {"view", "expand", "repeat", "unfold"}
    methods = [f for f in list(_OP_REGISTRY) + list(_DECOMP_TYPE_RULES)
               if getattr(torch, getattr(f, "__name__", ""), None) is not f
               and getattr(f, "__name__", "") != "__get__"]
    inplace = [f for f in methods if f.__name__.endswith("_") and not f.__name__.endswith("__")
               or f.__name__.startswith("__i")]
    rest = [f for f in methods if f not in inplace and f.__name__ not in recorded_methods
            and f.__name__ not in ("view_as", "expand_as", "contiguous")]
    nr["in-place Tensor methods (add_, t_, __iadd__, ...): their functional form is recorded"] = len(inplace)
    nr["Tensor methods and operators typed by the entry of a recorded torch function (Tensor.sum, __add__, ...)"] = len(rest)
    return dict(sorted(nr.items()))


def fill_main(raw_path, want_path):
    """Call the kernels where a run wanted them (registry_tensor_spmd_types)."""
    import json
    import registry_tensor_spmd_types as rt
    with open(raw_path) as f:
        doc = json.load(f)
    with open(want_path) as f:
        want = json.load(f)
    for w in want["wanted"]:
        e = doc["entries"][w["index"]]
        assert e["op"] == w["op"] and e["args"] == w["args"], (e["op"], w["op"])
        rt.fill(e, w)
    with open(raw_path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"filled {want['shapes']} shapes and {want['calls']} calls", file=sys.stderr)


def main():
    if sys.argv[1] == "fill":
        return fill_main(sys.argv[2], sys.argv[3])
    out_path = sys.argv[1]
    only = sys.argv[2] if len(sys.argv) > 2 else None
    entries, skipped = [], []
    fns = sorted({f for f in _OP_REGISTRY if getattr(f, "__module__", None) in ("torch", "torch.functional")
                  or (getattr(f, "__self__", None) is None and name_of(f) in dir(torch) and getattr(torch, f.__name__, None) is f)},
                 key=name_of)
    import registry_tensor_spmd_types as rt
    tensor_fns = set(rt.variants())
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
            if not done and name_of(f) not in tensor_fns | NOT_RECORDED_FNS:
                skipped.append({"op": name_of(f), "why": f"not an elementwise function of one or two tensors ({why})"})
            print(f"{name_of(f)}: {'recorded' if done else 'not elementwise'}", file=sys.stderr)
        if only is None or any(fnmatch.fnmatchcase(f"torch.{n}", only) for n in SCALAR_OPS):
            entries += [e for e in scalar_entries(pg) if only is None or fnmatch.fnmatchcase(e["op"], only)]
    entries += tensor_entries(only)
    # Its collectives and casts with their autograd backward (SPEC.md §22.5).
    import registry_collectives_spmd_types as rc
    entries += rc.entries(only)
    doc = {
        "schema": "spmd-check-registry/1",
        "system": "spmd_types",
        "versions": {"spmd_types": "0.3.1", "torch": torch.__version__.split("+")[0]},
        "recorded_by": "peers/record_registry.sh",
        "mesh": "one axis (a fake process group); each claim is the type spmd_types.typecheck() gives the call for R or P inputs, and typecheck(local=False) for R, P and S(d) inputs of the functions recorded call by call; its collectives and casts (family collective) on 2 and 4 ranks, with autograd's gradient",
        "entries": entries,
        "skipped": skipped,
        "not_recorded": not_recorded(),
    }
    with open(out_path, "w") as fh:
        import json
        json.dump(doc, fh, separators=(",", ":"))


if __name__ == "__main__":
    main()
