"""Record how the real JAX behaves inside jax.shard_map under two options
that switch off parts of its varying-manual-axes (vma) typing, beside the
default, so that a dialect option can model them:

  default           jax.shard_map(..., check_vma=True),  jax_auto_pcast=True
  check_vma_false   jax.shard_map(..., check_vma=False), jax_auto_pcast=True
  auto_pcast_false  jax.shard_map(..., check_vma=True),  jax_auto_pcast=False
                    (set with jax.config.update('jax_auto_pcast', False))

Mesh: Mesh(devices[:4], ('x',), axis_types=(Explicit,)) on 4 host CPU
devices, float64 (jax_enable_x64), rank r = device r. Written to
peers/recorded/jax_options_<jax version>.json (layout: see `conventions` in
the file). For every setting it records

  typing       `a + b` and `a * b` on every pair of input states among
               Invariant (in_specs P()), Varying (P('x')), Unreduced
               (P(unreduced={'x'})) and Reduced (P(reduced={'x'})), all
               declared in in_specs (no casts inside the body); plus the
               Invariant/Varying pairs again in int32. Accepted or refused
               (exception type and first line), the types jax.typeof reports
               inside the body, the primitives of the body (inserted casts)
               and the per-rank outputs.
  collectives  psum, pmean, all_gather (tiled, dim 0), psum_scatter (tiled,
               dim 0), ppermute (perm [(0,1),(1,2),(2,3),(3,0)]) and
               pcast(to='varying') on a Varying and on an Invariant input:
               accepted or refused, per-rank outputs, and the gradient for a
               given per-rank cotangent two ways: `inner` (jax.vjp called
               inside the shard_map body, the convention of record_jax.py) and
               `outer` (jax.vjp of the jitted shard_map on global arrays,
               which adds shard_map's own transpose rule), each with the
               primitives of its jaxpr and the jaxpr text of the backward.
  x_plus_y     x + y with x Invariant (P()) and y Varying (P('x')), cotangent
               [101], [201], [301], [401]: the gradients of x and y per rank
               (inner and outer), and the same with an explicit
               jax.lax.pcast(x, 'x', to='varying').

Re-record (deterministic, byte-identical output; about 20 s on a CPU):

  cd /work/main && XLA_FLAGS=--xla_force_host_platform_device_count=4 \
      /work/venv-jax012/bin/python peers/record_jax_options.py

(any Python with jax 0.12.0.1 works; the fixture name follows jax.__version__).
"""
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"

import platform  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exact import tree, write  # noqa: E402

jax.config.update("jax_enable_x64", True)
lax = jax.lax
HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "recorded")
N = 4
MESH = Mesh(np.array(jax.devices()[:N]), ("x",), axis_types=(AxisType.Explicit,))

SETTINGS = {
    "default": {"check_vma": True, "auto_pcast": True},
    "check_vma_false": {"check_vma": False, "auto_pcast": True},
    "auto_pcast_false": {"check_vma": True, "auto_pcast": False},
}

SPECS = {"Invariant": P(), "Varying": P("x"), "Unreduced": P(unreduced={"x"}), "Reduced": P(reduced={"x"})}
SPEC_TEXT = {"Invariant": "P()", "Varying": "P('x')", "Unreduced": "P(unreduced={'x'})",
             "Reduced": "P(reduced={'x'})"}


# ------------------------------------------------------------------ helpers

def refusal(e):
    return {"type": type(e).__name__, "message": str(e).strip().splitlines()[0]}


def type_of(v):
    """The type jax.typeof reports; state_as_typed reads axis x from it
    (under check_vma=False every type has an empty vma, so it says Invariant)."""
    t = jax.typeof(v)
    m = t.mat
    st = ("Varying" if "x" in m.varying else "Unreduced" if "x" in m.unreduced
          else "Reduced" if "x" in m.reduced else "Invariant")
    return {"str": str(t), "state_as_typed": st, "vma": sorted(m.varying), "unreduced": sorted(m.unreduced),
            "reduced": sorted(m.reduced), "shape": list(t.shape), "dtype": str(t.dtype)}


def enter(state, per_rank, dtype=np.float64):
    """Global array carrying per_rank into shard_map with in_spec SPECS[state]:
    Varying is split along dim 0; the others keep the per-rank shape (each
    device holds its own buffer: an Unreduced array's shards are the partial
    values; Invariant/Reduced values are equal on every rank)."""
    locs = [np.asarray(r, dtype=dtype) for r in per_rank]
    if state in ("Invariant", "Reduced"):
        assert all((a == locs[0]).all() for a in locs), f"{state} input must be equal on every rank"
    shape = (N * locs[0].shape[0], *locs[0].shape[1:]) if state == "Varying" else locs[0].shape
    bufs = [jax.device_put(a, d) for a, d in zip(locs, MESH.devices.flat)]
    return jax.make_array_from_single_device_arrays(shape, NamedSharding(MESH, SPECS[state]), bufs)


def enter_spec(spec_text, per_rank, dtype=np.float64):
    state = {v: k for k, v in SPEC_TEXT.items()}[spec_text]
    return enter(state, per_rank, dtype)


def per_rank(arr):
    shards = sorted(arr.addressable_shards, key=lambda s: s.device.id)
    assert len(shards) == N
    return [tree(s.data) for s in shards]


def spec_from_type(t):
    """out_specs a check_vma=True type asks for."""
    if t["vma"]:
        return "P('x')"
    if t["unreduced"]:
        return "P(unreduced={'x'})"
    if t["reduced"]:
        return "P(reduced={'x'})"
    return "P()"


def spec_obj(text):
    return SPECS[{v: k for k, v in SPEC_TEXT.items()}[text]]


def prim_name(e):
    axes = e.params.get("axes", e.params.get("axis_name"))
    s = e.primitive.name
    if axes is not None:
        s += f"[{','.join(map(str, axes if isinstance(axes, tuple) else (axes,)))}]"
    if "perm" in e.params:
        s += f"(perm={[tuple(map(int, p)) for p in e.params['perm']]})"
    if e.primitive.name == "reduce_scatter":
        s += f"(dim={e.params['scatter_dimension']}, tiled={e.params['tiled']})"
    if e.primitive.name == "all_gather":
        s += f"(dim={e.params['all_gather_dimension']}, tiled={e.params['tiled']})"
    return s


def sub_jaxprs(e):
    return [getattr(v, "jaxpr", v) for k, v in e.params.items() if k in ("jaxpr", "call_jaxpr")]


def body_prims(closed):
    """Primitives inside the (first) shard_map body, in order; jit bodies are entered."""
    out = []

    def walk(j):
        for e in j.eqns:
            subs = sub_jaxprs(e)
            if subs:
                for s in subs:
                    walk(s)
                continue
            out.append(prim_name(e))
    walk(closed.jaxpr)
    return out


def nested_prims(closed):
    """Every primitive with the nesting kept: 'shard_map{', ..., '}'."""
    out = []

    def walk(j):
        for e in j.eqns:
            subs = sub_jaxprs(e)
            if subs:
                out.append(e.primitive.name + "{")
                for s in subs:
                    walk(s)
                out.append("}")
                continue
            out.append(prim_name(e))
    walk(closed.jaxpr)
    return out


def last_shard_map_prims(closed):
    """Primitives inside the last shard_map eqn (the transposed body of an outer vjp)."""
    found = []

    def walk(j):
        for e in j.eqns:
            if e.primitive.name == "shard_map":
                found.append(e)
            for s in sub_jaxprs(e):
                walk(s)
    walk(closed.jaxpr)
    if not found:
        return None
    out = []

    def flat(j):
        for e in j.eqns:
            subs = sub_jaxprs(e)
            if subs:
                for s in subs:
                    flat(s)
            else:
                out.append(prim_name(e))
    flat(getattr(found[-1].params["jaxpr"], "jaxpr", found[-1].params["jaxpr"]))
    return out


def lift(v):
    return v.reshape((1,)) if v.ndim == 0 else v


def smap(body, in_specs, out_specs, cv):
    return jax.jit(jax.shard_map(body, mesh=MESH, in_specs=tuple(map(spec_obj, in_specs)),
                                 out_specs=out_specs if isinstance(out_specs, P) else
                                 tuple(map(spec_obj, out_specs)), check_vma=cv))


def trace_types(fn, args, in_specs, cv):
    """Trace fn under shard_map once (out_specs P('x') under check_vma=False, P()
    otherwise) to learn the types; returns (seen, error)."""
    seen = {}

    def body(*xs):
        seen["inputs"] = [type_of(v) for v in xs]
        y = fn(*xs)
        seen["out"] = type_of(y)
        return lift(y)
    try:
        jax.eval_shape(smap(body, in_specs, P("x") if not cv else P(), cv), *args)
    except Exception as e:  # noqa: BLE001
        if "out" not in seen:
            return seen, e
    return seen, None


# ------------------------------------------------------------------- typing

# Per-rank values of shape (2,): integers, no zeros.
VALS = {"Invariant": [[3, 5]] * N, "Reduced": [[2, 7]] * N,
        "Varying": [[r + 1, 10 * (r + 1)] for r in range(N)],
        "Unreduced": [[-(r + 1), 3 * (r + 1)] for r in range(N)]}
OPS = {"add": (lambda a, b: a + b, "a + b"), "mul": (lambda a, b: a * b, "a * b")}
ABBR = {"Invariant": "I", "Varying": "V", "Unreduced": "U", "Reduced": "R"}


def typing_case(setting, op, states, dtype=np.float64):
    cv = SETTINGS[setting]["check_vma"]
    fn, call = OPS[op]
    in_specs = [SPEC_TEXT[s] for s in states]
    case = {"id": f"{op}_" + "_".join(ABBR[s] for s in states) + ("" if dtype == np.float64 else "_int32"),
            "op": op, "call": call, "dtype": np.dtype(dtype).name,
            "inputs": [{"state": s, "in_spec": sp, "per_rank": tree(VALS[s])} for s, sp in zip(states, in_specs)]}
    try:
        args = [enter(s, VALS[s], dtype) for s in states]
    except Exception as e:  # noqa: BLE001
        case.update({"accepted": False, "refused_at": "input array", "error": refusal(e)})
        return case
    seen, err = trace_types(fn, args, in_specs, cv)
    if err is not None:
        case.update({"accepted": False, "refused_at": "op" if "inputs" in seen else "shard_map entry",
                     "error": refusal(err), "input_types": seen.get("inputs")})
        return case
    out_spec = spec_from_type(seen["out"]) if cv else "P('x')"
    f = smap(lambda a, b: lift(fn(a, b)), in_specs, spec_obj(out_spec), cv)
    prims = body_prims(jax.make_jaxpr(f)(*args))
    own = {"add": "add", "mul": "mul"}[op]
    inserted = [p for p in prims if p.split("[")[0] not in (own, "reshape")]
    case.update({"accepted": True, "error": None, "input_types": seen["inputs"], "output_type": seen["out"],
                 "jaxpr": prims, "inserted": inserted,
                 "pvary_inserted": any(p.split("[")[0] in ("pvary", "pcast", "reduced_vary_cast") for p in prims),
                 "out_spec": out_spec, "output_per_rank": per_rank(f(*args))})
    return case


def typing_cases(setting):
    cs = []
    for op in OPS:
        for s in ABBR:
            for t in ABBR:
                cs.append(typing_case(setting, op, [s, t]))
    for op in OPS:
        for s in ("Invariant", "Varying"):
            for t in ("Invariant", "Varying"):
                cs.append(typing_case(setting, op, [s, t], np.int32))
    return cs


# -------------------------------------------------------------- collectives

def ct_for(kind, width):
    """Cotangent per rank: Varying rank r, element k: 100 (r + 1) + k + 1;
    Invariant: 100 + k + 1 on every rank."""
    if kind == "P('x')":
        return [[100 * (r + 1) + k + 1 for k in range(width)] for r in range(N)]
    return [[100 + k + 1 for k in range(width)] for _ in range(N)]


V1 = [[r + 1] for r in range(N)]
I1 = [[5]] * N
V4 = [[4 * r + k + 1 for k in range(N)] for r in range(N)]
I4 = [[5, 6, 7, 8]] * N
PERM = [(0, 1), (1, 2), (2, 3), (3, 0)]

# id, call, fn, input state, input per rank, out_specs (the type the default gives it), output width
COLLECTIVES = [
    ("psum_V", "jax.lax.psum(x, 'x')", lambda x: lax.psum(x, "x"), "Varying", V1, "P()", 1),
    ("psum_I", "jax.lax.psum(x, 'x')", lambda x: lax.psum(x, "x"), "Invariant", I1, "P()", 1),
    ("pmean_V", "jax.lax.pmean(x, 'x')", lambda x: lax.pmean(x, "x"), "Varying", V1, "P()", 1),
    ("pmean_I", "jax.lax.pmean(x, 'x')", lambda x: lax.pmean(x, "x"), "Invariant", I1, "P()", 1),
    ("all_gather_V", "jax.lax.all_gather(x, 'x', axis=0, tiled=True)",
     lambda x: lax.all_gather(x, "x", axis=0, tiled=True), "Varying", V1, "P('x')", N),
    ("all_gather_I", "jax.lax.all_gather(x, 'x', axis=0, tiled=True)",
     lambda x: lax.all_gather(x, "x", axis=0, tiled=True), "Invariant", I1, "P('x')", N),
    ("psum_scatter_V", "jax.lax.psum_scatter(x, 'x', scatter_dimension=0, tiled=True)",
     lambda x: lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True), "Varying", V4, "P('x')", 1),
    ("psum_scatter_I", "jax.lax.psum_scatter(x, 'x', scatter_dimension=0, tiled=True)",
     lambda x: lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True), "Invariant", I4, "P('x')", 1),
    ("ppermute_V", f"jax.lax.ppermute(x, 'x', perm={PERM})", lambda x: lax.ppermute(x, "x", PERM),
     "Varying", V1, "P('x')", 1),
    ("ppermute_I", f"jax.lax.ppermute(x, 'x', perm={PERM})", lambda x: lax.ppermute(x, "x", PERM),
     "Invariant", I1, "P('x')", 1),
    ("pvary_I", "jax.lax.pcast(x, 'x', to='varying')", lambda x: lax.pcast(x, "x", to="varying"),
     "Invariant", I1, "P('x')", 1),
    ("pvary_V", "jax.lax.pcast(x, 'x', to='varying')", lambda x: lax.pcast(x, "x", to="varying"),
     "Varying", V1, "P('x')", 1),
    # out_specs P('x') on psum's (invariant) result: the output leaves as 4 stacked
    # copies, so the outer cotangent is per rank and no 1/4 is applied to it.
    ("psum_V_out_Px", "jax.lax.psum(x, 'x')  # out_specs=P('x')", lambda x: lax.psum(x, "x"),
     "Varying", V1, "P('x')", 1),
]


NOTES = {"psum_V_out_Px": "out_specs P('x') on psum's result in every setting; the cotangent is per rank. With "
                          "check_vma=True the body's output stays Invariant (the default pvaries it only at the "
                          "shard_map boundary), so the inner jax.vjp is handed a Varying cotangent for an Invariant "
                          "output and refuses it: the inner record there is that refusal, not a typing rule"}


def inner_vjp(fns, states, pr, out_spec, ct, cv):
    """jax.vjp inside the body: the cotangent enters with in_spec out_spec."""
    k = len(states)
    args = [enter(s, p) for s, p in zip(states, pr)] + [enter_spec(out_spec, ct)]
    in_specs = [SPEC_TEXT[s] for s in states] + [out_spec]
    seen = {}

    def body(*xs):
        vals, c = xs[:k], xs[k]
        y, pull = jax.vjp(fns, *vals)
        gs = pull(c.reshape(jnp.shape(y)))
        seen["grad_types"] = [type_of(g) for g in gs]
        return (lift(y), *map(lift, gs))

    # gradients leave as P('x') under check_vma=False (each rank's own buffer),
    # else with the spec their type asks for (traced once with a placeholder)
    try:
        jax.eval_shape(smap(body, in_specs, (out_spec, *[("P()" if cv else "P('x')")] * k), cv), *args)
    except Exception as e:  # noqa: BLE001
        if "grad_types" not in seen:
            return {"error": refusal(e)}
    gspecs = [spec_from_type(t) if cv else "P('x')" for t in seen["grad_types"]]
    f = smap(body, in_specs, (out_spec, *gspecs), cv)
    try:
        res = f(*args)
    except Exception as e:  # noqa: BLE001
        return {"error": refusal(e)}
    closed = jax.make_jaxpr(f)(*args)
    return {"error": None, "cotangent_in_spec": out_spec, "grad_out_specs": gspecs,
            "grad_types": seen["grad_types"], "grad_per_rank": [per_rank(g) for g in res[1:]],
            "jaxpr": body_prims(closed), "jaxpr_text": str(closed).splitlines()}


def outer_vjp(fns, states, pr, out_spec, ct, cv):
    """jax.vjp of the jitted shard_map on global arrays; the global cotangent
    is the per-rank cotangent stacked (P('x')) or the one shared value (P())."""
    args = [enter(s, p) for s, p in zip(states, pr)]
    ctg = enter_spec(out_spec, ct)
    f = smap(fns, [SPEC_TEXT[s] for s in states], spec_obj(out_spec), cv)
    try:
        _, pull = jax.vjp(f, *args)
        gs = pull(ctg)
        closed = jax.make_jaxpr(lambda *a: jax.vjp(f, *a[:-1])[1](a[-1]))(*args, ctg)
    except Exception as e:  # noqa: BLE001
        return {"error": refusal(e)}
    return {"error": None, "cotangent_global": tree(ctg), "grad_per_rank": [per_rank(g) for g in gs],
            "grad_global_shapes": [list(g.shape) for g in gs],
            "jaxpr": nested_prims(closed), "transposed_body": last_shard_map_prims(closed),
            "jaxpr_text": str(closed).splitlines()}


def collective_case(setting, cid, call, fn, state, pr, default_spec, width):
    cv = SETTINGS[setting]["check_vma"]
    x = enter(state, pr)
    case = {"id": cid, "call": call, "input": {"state": state, "in_spec": SPEC_TEXT[state], "per_rank": tree(pr)}}
    if cid in NOTES:
        case["note"] = NOTES[cid]
    seen, err = trace_types(fn, [x], [SPEC_TEXT[state]], cv)
    if err is not None:
        case.update({"accepted": False, "error": refusal(err), "input_types": seen.get("inputs")})
        return case
    out_spec = default_spec if (not cv or cid.endswith("_out_Px")) else spec_from_type(seen["out"])
    f = smap(fn, [SPEC_TEXT[state]], spec_obj(out_spec), cv)
    try:
        y = f(x)
    except Exception as e:  # noqa: BLE001 (out_specs refused)
        case.update({"accepted": False, "error": refusal(e), "input_types": seen["inputs"],
                     "output_type": seen["out"], "out_spec": out_spec})
        return case
    ct = ct_for(out_spec, width)
    case.update({"accepted": True, "error": None, "input_types": seen["inputs"], "output_type": seen["out"],
                 "out_spec": out_spec, "output_per_rank": per_rank(y),
                 "jaxpr": body_prims(jax.make_jaxpr(f)(x)),
                 "cotangent_per_rank": ct,
                 "inner": inner_vjp(fn, [state], [pr], out_spec, ct, cv),
                 "outer": outer_vjp(fn, [state], [pr], out_spec, ct, cv)})
    return case


def collective_cases(setting):
    return [collective_case(setting, *c) for c in COLLECTIVES]


# ------------------------------------------------------------------- x + y

def x_plus_y_cases(setting):
    cv = SETTINGS[setting]["check_vma"]
    xs, ys, ct = [[3]] * N, V1, ct_for("P('x')", 1)
    out = []
    for cid, call, fn in [
            ("x_plus_y", "x + y", lambda x, y: x + y),
            ("pvary_x_plus_y", "jax.lax.pcast(x, 'x', to='varying') + y",
             lambda x, y: lax.pcast(x, "x", to="varying") + y)]:
        args = [enter("Invariant", xs), enter("Varying", ys)]
        case = {"id": cid, "call": call,
                "inputs": [{"name": "x", "state": "Invariant", "in_spec": "P()", "per_rank": xs},
                           {"name": "y", "state": "Varying", "in_spec": "P('x')", "per_rank": ys}],
                "out_spec": "P('x')", "cotangent_per_rank": ct}
        seen, err = trace_types(fn, args, ["P()", "P('x')"], cv)
        if err is not None:
            case.update({"accepted": False, "error": refusal(err)})
            out.append(case)
            continue
        f = smap(fn, ["P()", "P('x')"], P("x"), cv)
        case.update({"accepted": True, "error": None, "output_type": seen["out"],
                     "output_per_rank": per_rank(f(*args)), "jaxpr": body_prims(jax.make_jaxpr(f)(*args)),
                     "inner": inner_vjp(fn, ["Invariant", "Varying"], [xs, ys], "P('x')", ct, cv),
                     "outer": outer_vjp(fn, ["Invariant", "Varying"], [xs, ys], "P('x')", ct, cv)})
        out.append(case)
    return out


# --------------------------------------------------------------------- main

CONVENTIONS = {
    "mesh": "Mesh(devices[:4], ('x',), axis_types=(Explicit,)); rank r = device r; float64 unless dtype says int32",
    "states": "Invariant enters with in_specs P(), Varying P('x') (rank r holds block r), Unreduced "
              "P(unreduced={'x'}) (rank r holds its partial), Reduced P(reduced={'x'}); arrays are built with "
              "jax.make_array_from_single_device_arrays from the per-rank values",
    "type": "jax.typeof(v) inside the body: str, vma, unreduced, reduced, shape, dtype; state_as_typed reads axis x "
            "(under check_vma=False every vma is empty, so it always says Invariant)",
    "refusal": "accepted false with error {type, message (first line)}",
    "jaxpr": "primitive names inside the shard_map body in order, name[axes]; reshape comes from this recorder "
             "(scalars leave as shape (1,)); typing.inserted = primitives other than the op and reshape",
    "out_spec": "check_vma=True: the spec the output's type asks for; check_vma=False: typing outputs and all "
                "inner gradients leave as P('x') (each rank's own buffer), collective outputs with the spec the "
                "default gives (P() for psum/pmean, P('x') otherwise), psum_V_out_Px with P('x') in every setting",
    "cotangent": "per rank, shaped like the per-rank output: out_spec P('x'): rank r element k = 100(r+1)+k+1; "
                 "out_spec P(): 100+k+1 on every rank",
    "inner": "jax.vjp called inside the shard_map body; the cotangent enters with the output's out_spec; "
             "grad_per_rank[i] = gradient of input i per rank; jaxpr = the whole body (forward then transpose), "
             "jaxpr_text = str of make_jaxpr of that jitted shard_map",
    "outer": "jax.vjp of jax.jit(jax.shard_map(...)) on global arrays; cotangent_global = the per-rank cotangents "
             "stacked (P('x')) or the shared value (P()); grad_per_rank = each device's shard of the global "
             "gradient; jaxpr = make_jaxpr of the pullback with nesting ('shard_map{' ... '}'), transposed_body = "
             "primitives inside the last shard_map (the transposed body), jaxpr_text = str of that jaxpr",
    "numbers": "integers or exact 'p/q' strings (peers/exact.py)",
}


def main():
    import jaxlib
    settings = {}
    for name, s in SETTINGS.items():
        jax.config.update("jax_auto_pcast", s["auto_pcast"])
        try:
            settings[name] = {**s, "typing": typing_cases(name), "collectives": collective_cases(name),
                              "x_plus_y": x_plus_y_cases(name)}
        finally:
            jax.config.update("jax_auto_pcast", True)
    doc = {"jax": jax.__version__, "recorded_by": "peers/record_jax_options.py", "devices": N,
           "recorded_with": {"python": platform.python_version(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
                             "numpy": np.__version__, "platform": "cpu", "x64": True,
                             "mesh": {"x": N}, "mesh_axis_types": "Explicit"},
           "conventions": CONVENTIONS, "settings": settings}
    write(os.path.join(FIX, f"jax_options_{jax.__version__}.json"), doc)


if __name__ == "__main__":
    main()
