"""JAX's reductions, contractions and shape primitives, for `spmd-check
registry jax` (SPEC.md §22): the primitives whose kernel is not
elementwise, recorded call by call as DTensor's reductions and views are
(peers/registry_tensor_dtensor.py).

Imported by record_registry_jax.py, which writes one entry per primitive,
variant of its parameters and tensor rank of its inputs:

- the claims: for each assignment of JAX's states to the tensor inputs,
  the type JAX's own rules give `prim.bind(...)` inside
  `jax.shard_map(check_vma=True)` on one Explicit mesh axis `x` of 2
  devices. An input's states are invariant (R), unreduced (P(sum): entered
  as P('x') on dim 0 and cast by `pcast(to='unreduced')`) and varying, for
  a tensor of rank r one per dim d < r: S(d) is the input entering through
  an in_spec with `x` at dim d (`P('x')` for d = 0, `P(None, 'x')` for
  d = 1), whose global value is the concatenation of the per-rank blocks
  along dim d, which is what the checker's S(d) denotes. JAX's type of a
  varying value names no dim: the dim is chosen by the in_spec and by the
  out_spec, and the type promises nothing about the global value
  (shard_map is per-device). So a varying output is listed as S(d') for
  every dim d' of the output in the entry's `unmodelled`, not as a claim
  (record_registry_jax.py moves it there): the checker neither holds JAX
  to it nor reports those outputs missing. A varying output of rank 0 has
  no out_spec that shard_map accepts (a scalar has no dim to put `x` on,
  and P() asks for an invariant value); it is listed in the entry's
  `call.no_placement`.
  An unreduced output of kind k is P(k), invariant or reduced R. A tracing
  error is a refusal, no claim.
- an empty `tensor_kernel`: its shapes and calls are filled in later, as
  the checker asks for them (`spmd-check registry jax --want W`, then
  `record_registry_jax.py fill RAW W`), by binding the primitive on
  float64 (bool for reduce_and/or/xor) arrays with jax_enable_x64.

Parameters that name sizes (reshape's new_sizes, broadcast_in_dim's shape,
slice's limits) follow the input's shape by a fixed recipe, the variant's
args naming the recipe (`to=flat`, `limit=1`): the recipe, not one shape,
is what is checked.
"""

import itertools

import jax
import numpy as np
from jax._src import core

import registry_values
from jax.sharding import NamedSharding, PartitionSpec as P

lax = jax.lax
F64, BOOL = np.dtype("float64"), np.dtype("bool")


# --------------------------------------------------------------- the variants

def _reduce(axes):
    return lambda shapes: {"axes": axes, "out_sharding": None}


def _axes_only(axes):
    return lambda shapes: {"axes": axes}


def _axes_of(r):
    return [(0,)] if r == 1 else [(0,), (1,), (0, 1)]


def variants(prims):
    """(primitive, family, args text, ranks, dtypes, params(shapes),
    local shapes the claims are asked on) per recorded variant; `prims`
    maps a primitive's name to it."""
    out = []

    def add(name, fam, text, ranks, dts, params, local=None):
        local = local or [[2] * r for r in ranks]
        out.append((prims[name], fam, text, list(ranks), list(dts), params, local))

    for r in (1, 2):
        for axes in _axes_of(r):
            t = f"rank={r}, axes={axes}"
            for n in ("reduce_sum", "reduce_max", "reduce_min"):
                add(n, "reduction", t, [r], [F64], _reduce(axes))
            add("reduce_prod", "reduction", t, [r], [F64], _axes_only(axes))
            for n in ("reduce_and", "reduce_or", "reduce_xor"):
                add(n, "reduction", t, [r], [BOOL], _axes_only(axes))
        for d in range(r):
            for n in ("argmax", "argmin"):
                add(n, "reduction", f"rank={r}, axes=({d},)", [r], [F64],
                    (lambda d: lambda shapes: {"axes": (d,), "index_dtype": np.dtype("int64")})(d))
            for n in ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"):
                for rev in (False, True):
                    add(n, "reduction", f"rank={r}, axis={d}, reverse={rev}", [r], [F64],
                        (lambda d, rev: lambda shapes: {"axis": d, "reverse": rev})(d, rev))

    def dot(dn):
        return lambda shapes: {"dimension_numbers": dn, "precision": None,
                               "preferred_element_type": None, "out_sharding": None}

    for ranks, dn, what in [
        ((1, 1), (((0,), (0,)), ((), ())), "inner"),
        ((1, 1), (((), ()), ((), ())), "outer"),
        ((2, 1), (((1,), (0,)), ((), ())), "matvec"),
        ((2, 2), (((1,), (0,)), ((), ())), "matmul"),
        ((2, 2), (((0,), (0,)), ((), ())), "lhs-transposed"),
        ((2, 2), (((1,), (1,)), ((0,), (0,))), "batched inner"),
    ]:
        add("dot_general", "contraction", f"ranks={list(ranks)}, {what}, dimension_numbers={dn}",
            ranks, [F64, F64], dot(dn))

    add("transpose", "shape", "rank=2, permutation=(1, 0)", [2], [F64],
        lambda shapes: {"permutation": (1, 0)})
    add("reshape", "shape", "rank=2, to=flat", [2], [F64],
        lambda shapes: {"new_sizes": (int(np.prod(shapes[0])),), "dimensions": None, "sharding": None})
    add("reshape", "shape", "rank=1, to=[1, n]", [1], [F64],
        lambda shapes: {"new_sizes": (1, shapes[0][0]), "dimensions": None, "sharding": None})
    for d in (0, 1):
        local = [[1, 2] if d == 0 else [2, 1]]
        add("squeeze", "shape", f"rank=2, dimensions=({d},)", [2], [F64],
            (lambda d: lambda shapes: {"dimensions": (d,)})(d), local)
    for lead in (1, 2):
        add("broadcast_in_dim", "shape", f"rank=1, shape=[{lead}, n], broadcast_dimensions=(1,)", [1], [F64],
            (lambda lead: lambda shapes: {"shape": (lead, shapes[0][0]), "broadcast_dimensions": (1,),
                                          "sharding": None})(lead))
    for r in (1, 2):
        for d in range(r):
            add("concatenate", "shape", f"rank={r}, dimension={d}", [r, r], [F64, F64],
                (lambda d: lambda shapes: {"dimension": d})(d))
            add("rev", "shape", f"rank={r}, dimensions=({d},)", [r], [F64],
                (lambda d: lambda shapes: {"dimensions": (d,)})(d))
            add("slice", "shape", f"rank={r}, dim={d}, start=0, limit=1", [r], [F64],
                (lambda d: lambda shapes: {"start_indices": (0,) * len(shapes[0]),
                                           "limit_indices": tuple(1 if i == d else n for i, n in enumerate(shapes[0])),
                                           "strides": None})(d))
    return out


# ----------------------------------------------------------------- the claims

def states_of_rank(r):
    """(placement, JAX state, dim of x in the in_spec) for an input of rank r."""
    return [("R", "invariant", None)] + [(f"S({d})", "varying", d) for d in range(r)] + \
        [("P(sum)", "unreduced", 0)]


def ask(mesh, prim, params, states, local, dts):
    """JAX's type for prim.bind on inputs entered in `states` ((state, dim)
    per input) with these local shapes: ("varying", rank), ("unreduced",
    kind) or ("invariant", None); None and why when it refuses."""
    ents = []
    for (st, d), s, dt in zip(states, local, dts):
        g = list(s)
        spec = P()
        if d is not None and st in ("varying", "unreduced"):
            g[d] *= 2
            spec = P(*([None] * d + ["x"]))
        ents.append((jax.device_put(np.ones(g, dt), NamedSharding(mesh, spec)), spec))
    seen = {}

    def body(*xs):
        vs = []
        for x, (st, _) in zip(xs, states):
            if st == "unreduced":
                x = lax.pcast(x, "x", to="unreduced")
            elif st == "reduced":
                x = lax.pcast(x, "x", to="reduced")
            vs.append(x)
        y = prim.bind(*vs, **params([list(v.shape) for v in vs]))
        t = jax.typeof(y)
        m = t.mat
        if "x" in m.varying:
            seen["out"] = ("varying", len(t.shape))
        elif "x" in m.unreduced:
            seen["out"] = ("unreduced", getattr(m.unreduced_kind, "name", "sum"))
        else:
            seen["out"] = ("invariant", None)
        return ()

    sm = jax.shard_map(body, mesh=mesh, in_specs=tuple(s for _, s in ents), out_specs=(), check_vma=True)
    try:
        jax.make_jaxpr(sm)(*[a for a, _ in ents])
    except Exception as e:  # a refusal, unless the output was typed first
        if "out" not in seen:
            s = str(e).strip()
            return None, f"{type(e).__name__}: {s.splitlines()[0][:200] if s else ''}"
    return seen["out"], None


def claims_of(mesh, prim, params, ranks, local, dts, r_as):
    """The claims ([output, inputs...]), refusals and the assignments whose
    output is varying of rank 0 (no placement)."""
    claims, refused, no_place = [], {}, []
    for combo in itertools.product(*[states_of_rank(r) for r in ranks]):
        names = [c[0] for c in combo]
        if all(n == "R" for n in names):
            continue
        states = [(r_as if st == "invariant" else st, d) for _, st, d in combo]
        o, why = ask(mesh, prim, params, states, local, dts)
        if o is None:
            refused[", ".join(names)] = why
            continue
        kind, x = o
        if kind == "varying":
            if x == 0:
                no_place.append(", ".join(names))
            claims.extend([f"S({d})", *names] for d in range(x))
        elif kind == "unreduced":
            claims.append([f"P({x})", *names])
        else:
            claims.append(["R", *names])
    return claims, refused, no_place


# ----------------------------------------------------------------- the kernel

def encode(y):
    """An array as `2x2:1,0,-1,1/2` (registry_values.encode)."""
    y = np.asarray(y)
    return registry_values.encode(list(y.shape), y.reshape(-1).tolist())


def decode(s, dtype):
    shape, data = registry_values.decode(s)
    return np.array(data, dtype=np.float64).reshape(shape).astype(dtype)


def bind(prim, params, arrays):
    ps = params([list(a.shape) for a in arrays])
    return np.asarray(prim.bind(*[jax.numpy.asarray(a) for a in arrays], **ps))


def fill(entry, wanted, prim, params):
    """Bind the primitive on what a run wanted; add to the entry's records."""
    k = entry["tensor_kernel"]
    dts = [np.dtype(d) for d in k["input_dtype"].split(",")]
    if len(dts) == 1:
        dts = dts * len(k["ranks"])
    for shapes in wanted.get("shapes", []):
        rec = {"in": shapes}
        try:
            y = bind(prim, params, [np.zeros(s, d) for s, d in zip(shapes, dts)])
            rec["out"] = list(y.shape)
        except Exception as e:
            s = str(e).strip()
            rec["refused"] = f"{type(e).__name__}: {s.splitlines()[0][:160] if s else ''}"
        k["shapes"].append(rec)
    for call in wanted.get("calls", []):
        try:
            y = bind(prim, params, [decode(s, d) for s, d in zip(call, dts)])
            out = encode(y)
        except Exception:
            out = "nan"  # a kernel that raises on values: no rational there
        k["calls"].append(call + [out])


def probe(prim, params, local, dts):
    """The output dtype of a bind on ones of the claims' local shapes, or
    why not."""
    try:
        y = bind(prim, params, [np.ones(s, d) for s, d in zip(local, dts)])
        return str(y.dtype), None
    except Exception as e:
        s = str(e).strip()
        return None, f"{type(e).__name__}: {s.splitlines()[0][:160] if s else ''}"


def all_by_name(all_prims):
    return {p.name: p for _, p in all_prims if isinstance(p, core.Primitive)}
