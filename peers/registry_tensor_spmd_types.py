"""spmd_types' registered torch functions that are not elementwise, for
`spmd-check registry spmd_types` (SPEC.md §22.2, §22.4).

Imported by record_registry_spmd_types.py. Each function of spmd_types'
op-linearity registry (`_OP_REGISTRY`) and of its type-level
decompositions (`_DECOMP_TYPE_RULES`: addmm, addmv, addr) that is not
elementwise -- reductions, views, concatenation, contractions -- is
recorded per variant of its non-tensor arguments and tensor rank of its
inputs (1 or 2), as one entry whose kernel is recorded call by call
(`tensor_kernel`, filled in as the checker asks, exactly as
registry_tensor_dtensor.py does for DTensor). `rules.einsum`, the one
builtin of `spmd_types.rules` that types a local computation, is recorded
the same way against `torch.einsum` of its equation.

The claims are the output types `spmd_types.typecheck(local=False)` (global
SPMD mode) gives the call on a fake process group for every assignment of
R, P and S(d) to the tensor inputs. spmd_types' local types are R, I, V and
P; a V operand alone has no global meaning, but in global mode every V axis
carries a PartitionSpec entry `S(d)` (assert_type with S(d)), whose meaning
is the concatenation of the per-rank tensors along d, and the output's
PartitionSpec says where its shard went (typecheck consults DTensor's
sharding propagation for that, and promotes V to P where DTensor says
Partial). So an output V with PartitionSpec S(d) is the claim S(d), P is
P(sum), R is R; a refusal (an SpmdTypeError or any other error raised by
typecheck) is no claim. I is not assigned: it denotes the same forward
value as R, and typecheck types I like R where it mixes at all (an I
operand that gets no gradient adopts R's flavour; one that does refuses
to mix), so it adds no claim.

The claims are asked for local shapes [2]*rank on 2 ranks; the recorder
also asks every case the checker's scope visits (local shapes up to
[2, 2], 2 to 4 ranks) where the real kernel accepts both the local and
the global shapes, and marks the entry `shape_dependent` where the typing
differs.
"""

import itertools

import torch

from registry_tensor_dtensor import decode, encode

SCOPE_SHAPES = [[], [1], [2], [1, 1], [1, 2], [2, 1], [2, 2]]
MESHES = (2, 3, 4)


def places(r):
    return ["R"] + [f"S({d})" for d in range(r)] + ["P(sum)"]


def _v(*args, **kwargs):
    return (list(args), kwargs)


def _t(i):
    return {"tensor": i}


T0, T1, T2 = _t(0), _t(1), _t(2)


def _long(vals, shape):
    return {"long": vals, "shape": shape}


def _reductions(r):
    out = [("", _v(T0))]
    for d in range(r):
        for k in (False, True):
            out.append((f"dim={d}, keepdim={k}", _v(T0, d, keepdim=k)))
    if r == 2:
        out.append(("dim=(0, 1)", _v(T0, (0, 1))))
    return out


# fn name -> (family, [(ranks, [(args text, (args, kwargs))])])
def variants():
    V = {}
    for f in ("torch.sum", "torch.mean", "torch.nansum", "torch.nanmean"):
        V[f] = ("reduction", [([r], _reductions(r)) for r in (1, 2)])
    V["torch.cumsum"] = ("reduction", [([r], [(f"dim={d}", _v(T0, d)) for d in range(r)]) for r in (1, 2)])
    V["torch.reshape"] = ("view", [([1], [("shape=[1, -1]", _v(T0, [1, -1])), ("shape=[-1, 1]", _v(T0, [-1, 1]))]),
                                   ([2], [("shape=[-1]", _v(T0, [-1]))])])
    V["torch.Tensor.view"] = ("view", [([1], [("shape=[1, -1]", _v(T0, 1, -1))]), ([2], [("shape=[-1]", _v(T0, -1))])])
    for f in ("torch.transpose", "torch.swapaxes", "torch.swapdims"):
        V[f] = ("view", [([2], [("0, 1", _v(T0, 0, 1))])])
    for f in ("torch.movedim", "torch.moveaxis"):
        V[f] = ("view", [([2], [("0, 1", _v(T0, 0, 1))])])
    V["torch.t"] = ("view", [([2], [("", _v(T0))])])
    V["torch.permute"] = ("view", [([2], [("dims=[1, 0]", _v(T0, [1, 0]))])])
    V["torch.flatten"] = ("view", [([2], [("", _v(T0))])])
    V["torch.ravel"] = ("view", [([2], [("", _v(T0))])])
    V["torch.unflatten"] = ("view", [([1], [("0, (1, -1)", _v(T0, 0, (1, -1))), ("0, (-1, 1)", _v(T0, 0, (-1, 1)))]),
                                     ([2], [("1, (1, -1)", _v(T0, 1, (1, -1)))])])
    V["torch.squeeze"] = ("view", [([2], [("", _v(T0)), ("dim=0", _v(T0, 0)), ("dim=1", _v(T0, 1))])])
    V["torch.unsqueeze"] = ("view", [([r], [(f"dim={d}", _v(T0, d)) for d in range(r + 1)]) for r in (1, 2)])
    V["torch.broadcast_to"] = ("view", [([1], [("size=[2, -1]", _v(T0, [2, -1]))]),
                                        ([2], [("size=[2, -1, -1]", _v(T0, [2, -1, -1]))])])
    V["torch.Tensor.expand"] = ("view", [([1], [("size=[2, -1]", _v(T0, 2, -1))]),
                                         ([2], [("size=[2, -1, -1]", _v(T0, 2, -1, -1))])])
    V["torch.narrow"] = ("view", [([r], [(f"dim={d}, start=0, length=1", _v(T0, d, 0, 1)) for d in range(r)]) for r in (1, 2)])
    V["torch.select"] = ("view", [([r], [(f"dim={d}, index={i}", _v(T0, d, i)) for d in range(r) for i in (0, -1)]) for r in (1, 2)])
    V["torch.index_select"] = ("view", [([r], [(f"dim={d}, index=R [0]", _v(T0, d, _long([0], [1]))) for d in range(r)]) for r in (1, 2)])
    V["torch.gather"] = ("view", [([r], [(f"dim={d}, index=R zeros {[1] * r}", _v(T0, d, _long([0], [1] * r))) for d in range(r)]) for r in (1, 2)])
    V["torch.flip"] = ("view", [([r], [(f"dims=[{d}]", _v(T0, [d])) for d in range(r)]) for r in (1, 2)])
    V["torch.fliplr"] = ("view", [([2], [("", _v(T0))])])
    V["torch.flipud"] = ("view", [([r], [("", _v(T0))]) for r in (1, 2)])
    V["torch.roll"] = ("view", [([r], [("shifts=1", _v(T0, 1))] + [(f"shifts=1, dims={d}", _v(T0, 1, d)) for d in range(r)]) for r in (1, 2)])
    V["torch.diagonal"] = ("view", [([2], [("", _v(T0)), ("offset=1", _v(T0, 1))])])
    V["torch.tile"] = ("view", [([1], [("dims=(2,)", _v(T0, (2,)))]), ([2], [("dims=(1, 2)", _v(T0, (1, 2))), ("dims=(2, 1)", _v(T0, (2, 1)))])])
    V["torch.Tensor.repeat"] = ("view", [([1], [("2", _v(T0, 2))]), ([2], [("1, 2", _v(T0, 1, 2)), ("2, 1", _v(T0, 2, 1))])])
    V["torch.repeat_interleave"] = ("view", [([r], [("repeats=2", _v(T0, 2))] + [(f"repeats=2, dim={d}", _v(T0, 2, dim=d)) for d in range(r)]) for r in (1, 2)])
    V["torch.Tensor.unfold"] = ("view", [([r], [(f"dimension={d}, size=1, step=1", _v(T0, d, 1, 1)) for d in range(r)]) for r in (1, 2)])
    for f in ("torch.cat", "torch.concat", "torch.concatenate"):
        V[f] = ("concatenation", [([r, r], [(f"dim={d}", _v([T0, T1], d)) for d in range(r)]) for r in (1, 2)])
    V["torch.stack"] = ("concatenation", [([r, r], [(f"dim={d}", _v([T0, T1], d)) for d in range(r + 1)]) for r in (1, 2)])
    for f in ("torch.hstack", "torch.vstack", "torch.dstack", "torch.column_stack", "torch.row_stack"):
        V[f] = ("concatenation", [([r, r], [("", _v([T0, T1]))]) for r in (1, 2)])
    V["torch.block_diag"] = ("concatenation", [([r, r], [("", _v(T0, T1))]) for r in (1, 2)])
    V["torch.matmul"] = ("contraction", [([a, b], [("", _v(T0, T1))]) for a in (1, 2) for b in (1, 2)])
    V["torch.mm"] = ("contraction", [([2, 2], [("", _v(T0, T1))])])
    V["torch.dot"] = ("contraction", [([1, 1], [("", _v(T0, T1))])])
    V["torch.mv"] = ("contraction", [([2, 1], [("", _v(T0, T1))])])
    V["torch.einsum"] = ("contraction", EINSUMS)
    V["torch.addmm"] = ("decomposition", [([2, 2, 2], [("", _v(T0, T1, T2))])])
    V["torch.addmv"] = ("decomposition", [([1, 2, 1], [("", _v(T0, T1, T2))])])
    V["torch.addr"] = ("decomposition", [([2, 1, 1], [("", _v(T0, T1, T2))])])
    V["spmd_types.rules.einsum"] = ("rules", [(rk, [(t, (a, {"linear_in": list(range(len(rk)))}))
                                                     for t, (a, _) in vs]) for rk, vs in EINSUMS])
    return V


EINSUMS = [
    ([2, 2], [("'ij,jk->ik'", _v("ij,jk->ik", T0, T1)), ("'ij,ij->ij'", _v("ij,ij->ij", T0, T1)),
              ("'ij,ij->'", _v("ij,ij->", T0, T1))]),
    ([1, 1], [("'i,i->'", _v("i,i->", T0, T1)), ("'i,j->ij'", _v("i,j->ij", T0, T1))]),
    ([2, 1], [("'ij,j->i'", _v("ij,j->i", T0, T1))]),
    ([2], [("'ij->j'", _v("ij->j", T0)), ("'ij->ji'", _v("ij->ji", T0)), ("'ij->'", _v("ij->", T0))]),
]


def resolve(name):
    if name.startswith("spmd_types.rules."):
        from spmd_types import rules
        return getattr(rules, name.rsplit(".", 1)[1])
    obj = torch
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def kernel_fn(name):
    """The real kernel: rules.einsum types an einsum, run by torch.einsum."""
    if name == "spmd_types.rules.einsum":
        return torch.einsum
    return resolve(name)


def build(call, tensors, index=lambda t: t):
    """The call's args and kwargs with `tensors` in place; each constant
    index tensor (`{"long": ...}`) passed through `index` (which types it R
    when asking typecheck: in strict mode an untyped operand is refused)."""
    def val(v):
        if isinstance(v, dict) and "tensor" in v:
            return tensors[v["tensor"]]
        if isinstance(v, dict) and "long" in v:
            return index(torch.tensor(v["long"], dtype=torch.int64).reshape(v["shape"]))
        if isinstance(v, list):
            return [val(x) for x in v]
        return v
    return [val(v) for v in call["args"]], {k: val(v) for k, v in call["kwargs"].items()}


def call_spec(args, kwargs):
    return {"args": args, "kwargs": kwargs}


def run_kernel(entry, tensors):
    args, kwargs = build(entry["call"], tensors)
    kwargs = {k: v for k, v in kwargs.items() if k != "linear_in"}
    y = kernel_fn(entry["op"])(*args, **kwargs)
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"returned {type(y).__name__}")
    return y


def typed(entry, shapes, assignment, pg, assert_type, get_local_type, get_partition_spec, typecheck):
    """The claim typecheck makes for these inputs, or None (a refusal or no
    global meaning)."""
    from spmd_types import P, R, S, V
    ts = []
    for s, p in zip(shapes, assignment):
        t = torch.ones(s, dtype=torch.float64)
        ty = R if p == "R" else P if p == "P(sum)" else S(int(p[2:-1]))
        ts.append(assert_type(t, {pg: ty}))
    args, kwargs = build(entry["call"], ts, index=lambda t: assert_type(t, {pg: R}))
    if entry["op"] == "spmd_types.rules.einsum":
        kwargs = {"linear_in": tuple(kwargs["linear_in"])}
    f = resolve(entry["op"])
    try:
        with typecheck(local=False):
            y = f(*args, **kwargs)
        lt = list(get_local_type(y).values())
    except Exception:
        return None
    if len(lt) != 1:
        return None
    t = lt[0]
    if t is R:
        return "R"
    if t is P:
        return "P(sum)"
    if t is V:
        spec = get_partition_spec(y)
        if spec is None:
            return None
        dims = [d for d, e in enumerate(spec) if e is not None]
        return f"S({dims[0]})" if len(dims) == 1 else None
    return None


def kernel_accepts(entry, shapes):
    try:
        run_kernel(entry, [torch.zeros(s, dtype=torch.float64) for s in shapes])
        return True
    except Exception:
        return False


def global_shape(p, s, n):
    s = list(s)
    if p.startswith("S("):
        d = int(p[2:-1])
        if d >= len(s):
            return None
        s[d] *= n
    return s


def claims_at(entry, ranks, n, pg, api, shapes_of=None):
    """{assignment: claim or None} for every assignment of R, S(d), P(sum)."""
    combos = list(itertools.product(*[places(r) for r in ranks]))
    out = {}
    for c in combos:
        if shapes_of is None:
            out[c] = typed(entry, [[2] * r for r in ranks], c, pg, *api)
        else:
            out[c] = {}
            for local in shapes_of:
                g = [global_shape(p, s, n) for p, s in zip(c, local)]
                if any(x is None for x in g) or not kernel_accepts(entry, local) or not kernel_accepts(entry, g):
                    continue
                out[c][tuple(map(tuple, local))] = typed(entry, local, c, pg, *api)
    return out


def scope_tuples(ranks):
    per = [[s for s in SCOPE_SHAPES if len(s) == r] for r in ranks]
    tuples = list(itertools.product(*per))
    if len(ranks) == 3:
        # Three inputs: the shapes of the primary tuple's pattern, one size
        # per tuple (216 tuples per assignment would take minutes).
        tuples = [t for t in tuples if len({x for s in t for x in s}) <= 1]
    return tuples


def fill(entry, wanted):
    """Call the kernel on what a run wanted; add to the entry's records."""
    k = entry["tensor_kernel"]
    for shapes in wanted.get("shapes", []):
        rec = {"in": shapes}
        try:
            y = run_kernel(entry, [torch.zeros(s, dtype=torch.float64) for s in shapes])
            rec["out"] = list(y.shape)
        except Exception as e:
            rec["refused"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        k["shapes"].append(rec)
    for call in wanted.get("calls", []):
        ts = [decode(s, torch.float64) for s in call]
        try:
            out = encode(run_kernel(entry, ts))
        except Exception:
            out = "nan"
        k["calls"].append(call + [out])
