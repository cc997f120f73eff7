"""Record what the real JAX does inside jax.shard_map(check_vma=True):
per-rank values of collectives and of the gradients jax.vjp computes for them
(tests/fixtures/jax_collectives.json), and which local ops it accepts on
operands of each state, what type it infers and which casts it inserts
(tests/fixtures/jax_typing.json).

States per mesh axis, read from jax.typeof(v).mat: Varying (axis in varying),
Unreduced (in unreduced), Reduced (in reduced), Invariant (none of these).
Inputs of a state enter shard_map as Varying (P('x')) or Invariant (P()) and
are cast inside by the real jax.lax.pcast; outputs leave with the out_specs
their type asks for, and the per-rank values are the shards of the result.
"""
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"

import math  # noqa: E402
import platform  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from exact import tree, write  # noqa: E402

jax.config.update("jax_enable_x64", True)
lax = jax.lax
HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "tests", "fixtures")


def mesh_of(shape):
    """shape: {axis: size}, axes major first; device r is rank r (row-major)."""
    sizes = tuple(shape.values())
    devs = np.array(jax.devices()[:math.prod(sizes)]).reshape(sizes)
    return Mesh(devs, tuple(shape), axis_types=(AxisType.Explicit,) * len(sizes))


def per_axis(state, axes):
    """A state name for every axis, or already a {axis: state} table."""
    return {a: state for a in axes} if isinstance(state, str) else dict(state)


def state_of(v, axes):
    m = jax.typeof(v).mat
    st = {a: "Varying" if a in m.varying else "Unreduced" if a in m.unreduced
          else "Reduced" if a in m.reduced else "Invariant" for a in axes}
    return st[axes[0]] if len(axes) == 1 else st


def type_of(v, axes):
    t = jax.typeof(v)
    m = t.mat
    return {"state": state_of(v, axes), "vma": sorted(m.varying), "unreduced": sorted(m.unreduced),
            "reduced": sorted(m.reduced), "shape": list(t.shape), "dtype": str(t.dtype)}


def spec_of(varying, **kw):
    v = tuple(varying)
    return P(v if len(v) > 1 else v[0], **kw) if v else P(**kw)


def enter(mesh, state, per_rank):
    """Global array and in_spec carrying per_rank into shard_map: the axes
    where the value is Varying or Unreduced are split (row-major), the others
    must hold equal values."""
    axes, sizes = mesh.axis_names, mesh.devices.shape
    st = per_axis(state, axes)
    split = [i for i, a in enumerate(axes) if st[a] in ("Varying", "Unreduced")]
    a = [np.asarray(r, dtype=np.float64) for r in per_rank]
    coords = [np.unravel_index(r, sizes) for r in range(len(a))]

    def rank_at(c):
        return int(np.ravel_multi_index(tuple(c[i] if i in split else 0 for i in range(len(axes))), sizes))

    for r, c in enumerate(coords):
        assert (a[r] == a[rank_at(c)]).all(), f"{state} input must be equal along its unsplit axes"
    blocks = [a[rank_at(c)] for c in coords if all(c[i] == 0 for i in range(len(axes)) if i not in split)]
    g = np.concatenate(blocks, axis=0) if split else a[0]
    return jax.device_put(g, NamedSharding(mesh, spec_of(axes[i] for i in split))), \
        spec_of(axes[i] for i in split)


def cast(v, state, axes):
    """Real JAX casts from the state v entered in to `state`."""
    st = per_axis(state, axes)
    for to in ("unreduced", "reduced"):
        on = tuple(a for a in axes if st[a].lower() == to)
        if on:
            v = lax.pcast(v, on, to=to)
    return v


def out_spec(t, axes):
    return spec_of([a for a in axes if a in t["vma"]], unreduced=set(t["unreduced"]),
                   reduced=set(t["reduced"]))


def per_rank(arr, n):
    shards = sorted(arr.addressable_shards, key=lambda s: s.device.id)
    assert len(shards) == n
    return [tree(s.data) for s in shards]


def first_line(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"


def inner_prims(f, args):
    """Primitive names inside the shard_map body (shows inserted casts)."""
    jaxpr = jax.make_jaxpr(f)(*args).jaxpr
    out = []

    def walk(j):
        for e in j.eqns:
            subs = [v for k, v in e.params.items() if k in ("jaxpr", "call_jaxpr")]
            if subs:  # shard_map / jit bodies: list what runs inside
                for sub in subs:
                    walk(getattr(sub, "jaxpr", sub))
                continue
            axes = e.params.get("axes", e.params.get("axis_name"))
            out.append(e.primitive.name + (f"[{','.join(map(str, axes if isinstance(axes, tuple) else (axes,)))}]"
                                            if axes is not None else ""))
    walk(jaxpr)
    return out


def lift(v):
    """Rank-0 values leave shard_map as shape (1,) (a Varying scalar has no dim to split)."""
    return v.reshape((1,)) if v.ndim == 0 else v


def run(shape, fn, ins, ct=None):
    """Run fn on inputs [(state, per_rank)] under shard_map on mesh `shape`
    ({axis: size}, or n for {x: n}).
    With ct=(state, per_rank), also the gradient jax.vjp gives for each input.
    Returns (outputs dict, error)."""
    shape = {"x": shape} if isinstance(shape, int) else shape
    n, mesh = math.prod(shape.values()), mesh_of(shape)
    axes = tuple(shape)
    entered = [enter(mesh, s, pr) for s, pr in ins]
    if ct is not None:
        entered.append(enter(mesh, ct[0], ct[1]))
    args = [a for a, _ in entered]
    in_specs = tuple(s for _, s in entered)
    seen = {}

    def body(*xs):
        vals = [cast(x, s, axes) for x, (s, _) in zip(xs, ins)]
        seen.clear()
        seen["inputs"] = [type_of(v, axes) for v in vals]
        if ct is None:
            y = fn(*vals)
            seen["out"] = [type_of(y, axes)]
            return (lift(y),)
        y, vjp = jax.vjp(fn, *vals)
        seen["out"] = [type_of(y, axes)]
        try:
            gs = vjp(cast(xs[-1], ct[0], axes).reshape(jnp.shape(y)))
        except Exception as e:  # the transpose is refused: keep the forward
            seen["grad_error"] = first_line(e)
            return (lift(y),)
        seen["out"] += [type_of(g, axes) for g in gs]
        return (lift(y), *map(lift, gs))

    def sm(outs):
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=outs))

    try:  # trace once to learn the output types, then run with matching out_specs
        jax.eval_shape(sm(P()), *args)
    except Exception as e:
        if "out" not in seen:
            return None, first_line(e)
    specs = tuple(out_spec(t, axes) for t in seen["out"])
    res = sm(specs)(*args)
    prims = inner_prims(sm(specs), args)
    vals = [[v if t["shape"] else v[0] for v in per_rank(r, n)] for r, t in zip(res, seen["out"])]
    rec = {"inputs": seen["inputs"], "output": seen["out"][0],
           "output_per_rank": vals[0], "jaxpr": prims}
    if ct is not None:
        rec["transpose_error"] = seen.get("grad_error")
        rec["transpose"] = seen["out"][1:]
        rec["transpose_per_rank"] = vals[1:]
    return rec, None


# ---------------------------------------------------------------- collectives

def V(n, width=1, scale=1):
    """Varying input: rank r holds [r*width+1, ..., r*width+width] * scale."""
    return [[scale * (r * width + k + 1) for k in range(width)] for r in range(n)]


def same(n, row):
    return [list(row) for _ in range(n)]


# --versioned (the newest JAX): a case with a `user` spelling is written as
# a JAX user writes it, in JAX's own call and no backward or output, so
# that `spmd-check fidelity` replays it through elaboration (SPEC.md §15.5):
# the dialect inserts JAX's casts, infers the output and picks JAX's
# transpose, and all of that is compared with what JAX did.
USER = False


def collective(cid, n, call, fn, inp, ct, forward=None, backward=None, why=None, user=None):
    real, err = run(n, fn, [inp], ct)
    case = {"kind": "collective", "id": cid}
    if USER and user is not None and err is None:
        case["job"] = {"dialect": "jax", "mesh": {"x": n} if isinstance(n, int) else n,
                       "forward": user, "inputs": [{"type": inp[0], "per_rank": inp[1]}]}
        if ct is not None:
            case["job"]["cotangent"] = ct[1]
    elif forward is not None and err is None:
        case["job"] = {"dialect": "jax", "mesh": {"x": n} if isinstance(n, int) else n, "forward": forward}
        if backward is not None:
            case["job"]["backward"] = backward
        case["job"]["inputs"] = [{"type": inp[0], "per_rank": inp[1]}]
        case["job"]["output"] = real["output"]["state"]
        if ct is not None:
            case["job"]["cotangent"] = ct[1]
    else:
        case["job"] = None
    if why is not None:
        case["why"] = why
    r = {"call": call}
    if real is not None:
        r.update({"input_types": real["inputs"], "output_type": real["output"],
                  "output_vma": real["output"]["vma"],
                  "output_per_rank": real["output_per_rank"], "jaxpr": real["jaxpr"]})
        if ct is not None:
            r["cotangent_type"] = ct[0]
            r["cotangent_per_rank"] = ct[1]
            r["transpose_types"] = real["transpose"]
            r["transpose_per_rank"] = real["transpose_per_rank"][0] if real["transpose_per_rank"] else None
            r["transpose_error"] = real["transpose_error"]
    r["error"] = err
    case["real"] = r
    return case


def collective_cases():
    cs = []
    for n in (2, 4):
        perm = [(k, (k + 1) % n) for k in range(n)]
        fwd_perm = [(k + 1) % n for k in range(n)]
        inv_perm = [(k - 1) % n for k in range(n)]
        cs += [
            collective(f"psum_V_n{n}", n, "jax.lax.psum(x, 'x')", lambda x: lax.psum(x, "x"),
                       ("Varying", V(n)), ("Invariant", same(n, [5])), "psum", "pvary", user="psum"),
            collective(f"psum_I_n{n}", n, "jax.lax.psum(x, 'x')", lambda x: lax.psum(x, "x"),
                       ("Invariant", same(n, [5])), ("Invariant", same(n, [7])),
                       why="psum of an Invariant value: JAX inserts pvary first (auto_pcast); "
                           "the catalogue's psum cannot start from Invariant", user="psum"),
            collective(f"psum_U_n{n}", n, "jax.lax.psum(x, 'x')  # x Unreduced: dispatches to unreduced_psum",
                       lambda x: lax.psum(x, "x"),
                       ("Unreduced", V(n)), ("Invariant", same(n, [5])), "unreduced_psum", "preduced", user="psum"),
            collective(f"psum_R_n{n}", n, "jax.lax.psum(x, 'x')", lambda x: lax.psum(x, "x"),
                       ("Reduced", same(n, [5])), ("Invariant", same(n, [7])),
                       why="psum of a Reduced value (not in the catalogue)"),
            collective(f"pmean_V_n{n}", n, "jax.lax.pmean(x, 'x')", lambda x: lax.pmean(x, "x"),
                       ("Varying", V(n)), ("Invariant", same(n, [5])), "pmean",
                       "divide_by_group_size |> pvary", user="pmean"),
            collective(f"pmean_U_n{n}", n, "jax.lax.pmean(x, 'x')", lambda x: lax.pmean(x, "x"),
                       ("Unreduced", V(n)), ("Invariant", same(n, [5])),
                       why="pmean of an Unreduced value is unreduced_psum then a division: no single catalogue spelling"),
            collective(f"all_gather_tiled_n{n}", n, "jax.lax.all_gather(x, 'x', axis=0, tiled=True)",
                       lambda x: lax.all_gather(x, "x", axis=0, tiled=True),
                       ("Varying", V(n)), ("Varying", V(n, n, 10)), "all_gather(dim=0)", "psum_scatter(dim=0)",
                       user="all_gather(dim=0)"),
            collective(f"all_gather_untiled_n{n}", n, "jax.lax.all_gather(x, 'x', axis=0, tiled=False)",
                       lambda x: lax.all_gather(x, "x", axis=0, tiled=False),
                       ("Varying", V(n)), ("Varying", [[[10 * (r * n + k + 1)] for k in range(n)] for r in range(n)]),
                       "all_gather(dim=0, stack)", None,
                       why="JAX transposes it with untiled psum_scatter (drops the dim): no catalogue spelling"),
            collective(f"all_gather_I_n{n}", n, "jax.lax.all_gather(x, 'x', axis=0, tiled=True)",
                       lambda x: lax.all_gather(x, "x", axis=0, tiled=True),
                       ("Invariant", same(n, [5])), ("Varying", V(n, n, 10)),
                       why="all_gather of an Invariant value: JAX inserts pvary first; the catalogue's gather needs Varying pieces",
                       user="all_gather(dim=0)"),
            collective(f"all_gather_invariant_n{n}", n, "jax.lax.all_gather(x, 'x', axis=0, tiled=True, to='invarying')",
                       lambda x: lax.all_gather(x, "x", axis=0, tiled=True, to="invarying"),
                       ("Varying", V(n)), ("Invariant", same(n, [10 * (k + 1) for k in range(n)])),
                       "all_gather_invariant(dim=0)", "convert(dim=0)", user="all_gather(dim=0, to='invarying')"),
            collective(f"all_gather_reduced_n{n}", n, "jax.lax.all_gather(x, 'x', axis=0, tiled=True, to='reduced')",
                       lambda x: lax.all_gather(x, "x", axis=0, tiled=True, to="reduced"),
                       ("Varying", V(n)), ("Unreduced", V(n, n)),
                       "all_gather_reduced(dim=0)", "unreduced_psum_scatter(dim=0)", user="all_gather(dim=0, to='reduced')"),
            collective(f"psum_scatter_tiled_n{n}", n, "jax.lax.psum_scatter(x, 'x', scatter_dimension=0, tiled=True)",
                       lambda x: lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True),
                       ("Varying", V(n, n)), ("Varying", V(n, 1, 10)), "psum_scatter(dim=0)", "all_gather(dim=0)",
                       user="psum_scatter(dim=0)"),
            collective(f"psum_scatter_untiled_n{n}", n, "jax.lax.psum_scatter(x, 'x', scatter_dimension=0, tiled=False)",
                       lambda x: lax.psum_scatter(x, "x", scatter_dimension=0, tiled=False),
                       ("Varying", [[[v] for v in row] for row in V(n, n)]), ("Varying", V(n, 1, 10)),
                       why="untiled psum_scatter drops the scatter dimension; the catalogue's reduce-scatter keeps it"),
            collective(f"psum_scatter_U_n{n}", n, "jax.lax.psum_scatter(x, 'x', scatter_dimension=0, tiled=True)  # x Unreduced",
                       lambda x: lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True),
                       ("Unreduced", V(n, n)), ("Varying", V(n, 1, 10)),
                       "unreduced_psum_scatter(dim=0)", "all_gather_reduced(dim=0)", user="psum_scatter(dim=0)"),
            collective(f"all_to_all_n{n}", n, "jax.lax.all_to_all(x, 'x', 0, 0, tiled=True)",
                       lambda x: lax.all_to_all(x, "x", 0, 0, tiled=True),
                       ("Varying", V(n, n)), ("Varying", V(n, n, 10)),
                       "all_to_all(split=0, concat=0)", "all_to_all(split=0, concat=0)",
                       user="all_to_all(split=0, concat=0)"),
            collective(f"ppermute_shift_n{n}", n, f"jax.lax.ppermute(x, 'x', perm={perm})",
                       lambda x, perm=perm: lax.ppermute(x, "x", perm),
                       ("Varying", V(n)), ("Varying", V(n, 1, 10)),
                       f"ppermute(perm=[{', '.join(map(str, fwd_perm))}])",
                       f"ppermute(perm=[{', '.join(map(str, inv_perm))}])",
                       user=f"ppermute(perm=[{', '.join(map(str, fwd_perm))}])"),
            collective(f"ppermute_partial_n{n}", n, "jax.lax.ppermute(x, 'x', perm=[(0, 1)])",
                       lambda x: lax.ppermute(x, "x", [(0, 1)]),
                       ("Varying", V(n)), ("Varying", V(n, 1, 10)),
                       "ppermute(perm=[1" + ", _" * (n - 1) + "])",
                       "ppermute(perm=[_, 0" + ", _" * (n - 2) + "])",
                       user="ppermute(perm=[(0, 1)])"),
            collective(f"ppermute_I_n{n}", n, f"jax.lax.ppermute(x, 'x', perm={perm})",
                       lambda x, perm=perm: lax.ppermute(x, "x", perm),
                       ("Invariant", same(n, [5])), ("Varying", V(n, 1, 10)),
                       why="ppermute of an Invariant value (the catalogue's ppermute needs Varying pieces)",
                       user=f"ppermute(perm=[{', '.join(map(str, fwd_perm))}])"),
            collective(f"pvary_n{n}", n, "jax.lax.pcast(x, 'x', to='varying')",
                       lambda x: lax.pcast(x, "x", to="varying"),
                       ("Invariant", same(n, [5])), ("Varying", V(n)), "pvary", "psum_invariant",
                       user="pcast(to='varying')"),
            collective(f"preduced_n{n}", n, "jax.lax.pcast(x, 'x', to='reduced')",
                       lambda x: lax.pcast(x, "x", to="reduced"),
                       ("Invariant", same(n, [5])), ("Unreduced", V(n)), "preduced", "unreduced_psum",
                       user="pcast(to='reduced')"),
            collective(f"vary_unreduced_cast_n{n}", n, "jax.lax.pcast(x, 'x', to='unreduced')",
                       lambda x: lax.pcast(x, "x", to="unreduced"),
                       ("Varying", V(n)), ("Reduced", same(n, [7])), "vary_unreduced_cast", "reduced_vary_cast",
                       user="pcast(to='unreduced')"),
            collective(f"reduced_vary_cast_n{n}", n, "jax.lax.pcast(x, 'x', to='varying')  # x Reduced",
                       lambda x: lax.pcast(x, "x", to="varying"),
                       ("Reduced", same(n, [5])), ("Varying", V(n, 1, 10)), "reduced_vary_cast", "vary_unreduced_cast",
                       user="pcast(to='varying')"),
            collective(f"pcast_V_to_reduced_n{n}", n, "jax.lax.pcast(x, 'x', to='reduced')  # x Varying",
                       lambda x: lax.pcast(x, "x", to="reduced"),
                       ("Varying", V(n)), None, why="no pcast route from varying to reduced (expected refusal)"),
            collective(f"axis_index_n{n}", n, "jax.lax.axis_index('x') (+ 0 * x)",
                       lambda x: (lax.axis_index("x") + 0 * x).astype(jnp.float64),
                       ("Invariant", same(n, [0])), None,
                       why="axis_index has no operand; recorded for its vma and values"),
        ]
    return cs


M22 = {"x": 2, "y": 2}  # rank r = 2 * x + y
VV = {"x": "Varying", "y": "Varying"}
VI = {"x": "Varying", "y": "Invariant"}
IV = {"x": "Invariant", "y": "Varying"}
II = {"x": "Invariant", "y": "Invariant"}


def mesh22_cases():
    """Two mesh axes: collectives over one axis or both (a flattened, row-major group)."""
    vi = [[1], [1], [2], [2]]  # Varying along x, equal along y
    return [
        collective("psum_x_VV_m22", M22, "jax.lax.psum(x, 'x')", lambda x: lax.psum(x, "x"),
                   (VV, V(4)), (IV, [[10], [20], [10], [20]]), "psum(axis=x)", "pvary(axis=x)"),
        collective("psum_xy_VV_m22", M22, "jax.lax.psum(x, ('x', 'y'))", lambda x: lax.psum(x, ("x", "y")),
                   (VV, V(4)), (II, same(4, [5])), "psum", "pvary"),
        collective("psum_x_VI_m22", M22, "jax.lax.psum(x, 'x')", lambda x: lax.psum(x, "x"),
                   (VI, vi), (II, same(4, [5])), "psum(axis=x)", "pvary(axis=x)"),
        collective("psum_y_VI_m22", M22, "jax.lax.psum(x, 'y')  # x Invariant along y",
                   lambda x: lax.psum(x, "y"), (VI, vi), (VI, [[5], [5], [7], [7]]),
                   why="psum over an axis where the value is Invariant: JAX inserts pvary on y first"),
        collective("all_gather_y_VV_m22", M22, "jax.lax.all_gather(x, 'y', axis=0, tiled=True)",
                   lambda x: lax.all_gather(x, "y", axis=0, tiled=True),
                   (VV, V(4)), (VV, V(4, 2, 10)), "all_gather(dim=0, axis=y)", "psum_scatter(dim=0, axis=y)"),
        collective("all_gather_xy_VV_m22", M22, "jax.lax.all_gather(x, ('x', 'y'), axis=0, tiled=True)",
                   lambda x: lax.all_gather(x, ("x", "y"), axis=0, tiled=True),
                   (VV, V(4)), (VV, V(4, 4, 10)), "all_gather(dim=0)", "psum_scatter(dim=0)"),
        collective("psum_scatter_xy_VV_m22", M22,
                   "jax.lax.psum_scatter(x, ('x', 'y'), scatter_dimension=0, tiled=True)",
                   lambda x: lax.psum_scatter(x, ("x", "y"), scatter_dimension=0, tiled=True),
                   (VV, V(4, 4)), (VV, V(4, 1, 10)), "psum_scatter(dim=0)", "all_gather(dim=0)"),
        collective("pvary_y_VI_m22", M22, "jax.lax.pcast(x, 'y', to='varying')",
                   lambda x: lax.pcast(x, "y", to="varying"),
                   (VI, vi), (VV, V(4, 1, 10)), "pvary(axis=y)", "psum_invariant(axis=y)"),
        collective("ppermute_x_VV_m22", M22, "jax.lax.ppermute(x, 'x', perm=[(0, 1), (1, 0)])",
                   lambda x: lax.ppermute(x, "x", [(0, 1), (1, 0)]),
                   (VV, V(4)), (VV, V(4, 1, 10)), "ppermute(perm=[1, 0], axis=x)", "ppermute(perm=[1, 0], axis=x)"),
        collective("all_to_all_x_VV_m22", M22, "jax.lax.all_to_all(x, 'x', 0, 0, tiled=True)",
                   lambda x: lax.all_to_all(x, "x", 0, 0, tiled=True),
                   (VV, V(4, 2)), (VV, V(4, 2, 10)), "all_to_all(split=0, concat=0, axis=x)",
                   "all_to_all(split=0, concat=0, axis=x)"),
    ]


# --------------------------------------------------------------------- typing

STATES = ["Invariant", "Varying", "Unreduced", "Reduced"]
# Powers of two only (a / b stays exact), no zeros (no division by zero); mesh {x: 2}.
VALS = {"Invariant": [[1 / 2, 4], [1 / 2, 4]], "Reduced": [[2, 1 / 4], [2, 1 / 4]],
        "Varying": [[1, -1], [2, 4]], "Unreduced": [[1, 1 / 2], [-2, 2]]}
UNARY = {"neg": (lambda a: -a, "-a"), "sum": (lambda a: jnp.sum(a), "jnp.sum(a)"),
         "mul_const": (lambda a: 2.0 * a, "2.0 * a"), "abs": (lambda a: jnp.abs(a), "jnp.abs(a)")}
BINARY = {"add": (lambda a, b: a + b, "a + b"), "sub": (lambda a, b: a - b, "a - b"),
          "mul": (lambda a, b: a * b, "a * b"), "div": (lambda a, b: a / b, "a / b"),
          "dot": (lambda a, b: jnp.dot(a, b), "jnp.dot(a, b)")}


def mat(t):
    return {"vma": t["vma"], "reduced": t["reduced"], "unreduced": t["unreduced"]}


def typing_case(op, call, fn, states, n=2):
    ins = [(s, VALS[s]) for s in states]
    real, err = run(n, fn, ins)
    case = {"kind": "typing", "id": f"{op}_" + "_".join(s[0] for s in states), "op": op,
            "call": call, "mesh": {"x": n},
            "inputs": [{"state": s, "vma": ["x"] if s == "Varying" else [],
                        "reduced": ["x"] if s == "Reduced" else [],
                        "unreduced": ["x"] if s == "Unreduced" else [], "per_rank": tree(pr)} for s, pr in ins]}
    if real is None:
        case["real"] = {"accepted": False, "output": None, "inserted": [], "error": err}
    else:
        own = {"neg": "neg", "sum": "reduce_sum", "mul_const": "mul", "abs": "abs", "add": "add",
               "sub": "sub", "mul": "mul", "div": "div", "dot": "dot_general",
               "add3": "add", "mul3": "mul", "fma": ("mul", "add")}[op]
        own = own if isinstance(own, tuple) else (own,)
        k = sum(s in ("Unreduced", "Reduced") for s in states)  # our own input casts come first
        inserted = [p for p in real["jaxpr"][k:] if p.split("[")[0] not in (*own, "reshape")]  # reshape: our lift
        case["real"] = {"accepted": True, "output": {"state": real["output"]["state"], **mat(real["output"])},
                        "inserted": inserted, "jaxpr": real["jaxpr"],
                        "output_per_rank": real["output_per_rank"], "error": None}
        case["real"].update(transpose_of(n, fn, ins, real["output"]))
    return case


COT = {"Varying": "Varying", "Invariant": "Invariant", "Reduced": "Unreduced", "Unreduced": "Reduced"}


def transpose_of(n, fn, ins, out):
    """The gradients jax.vjp gives every operand for a cotangent of the
    output's cotangent type (scalars enter as shape (1,) and are reshaped)."""
    size = max(1, math.prod(out["shape"]))
    if COT[out["state"]] in ("Varying", "Unreduced"):
        ct = [[10 * (r + 1) * (k + 1) for k in range(size)] for r in range(n)]
    else:
        ct = [[8 * (k + 1) for k in range(size)] for _ in range(n)]
    real, err = run(n, fn, ins, (COT[out["state"]], ct))
    if real is None:
        return {"cotangent": {"state": COT[out["state"]], "per_rank": ct}, "transpose": None, "transpose_error": err}
    return {"cotangent": {"state": COT[out["state"]], "per_rank": ct if out["shape"] else [c[0] for c in ct]},
            "transpose": [{"state": t["state"], **mat(t), "per_rank": v}
                          for t, v in zip(real["transpose"], real["transpose_per_rank"])],
            "transpose_error": real["transpose_error"]}


# Three operands (--versioned only): compositions JAX types node by node,
# so the casts it inserts may sit on an intermediate value.
TERNARY = {"add3": (lambda a, b, c: a + b + c, "a + b + c"),
           "mul3": (lambda a, b, c: a * b * c, "a * b * c"),
           "fma": (lambda a, b, c: a * b + c, "a * b + c")}


def typing_cases():
    cs = []
    if USER:
        for op, (fn, call) in TERNARY.items():
            for s in STATES:
                for t in STATES:
                    for u in STATES:
                        cs.append(typing_case(op, call, fn, [s, t, u]))
    for op, (fn, call) in UNARY.items():
        for s in STATES:
            cs.append(typing_case(op, call, fn, [s]))
    for op, (fn, call) in BINARY.items():
        for s in STATES:
            for t in STATES:
                cs.append(typing_case(op, call, fn, [s, t]))
    return cs


def header():
    import jaxlib
    return {"system": "jax", "version": jax.__version__,
            "recorded_with": {"python": platform.python_version(), "jax": jax.__version__,
                              "jaxlib": jaxlib.__version__, "numpy": np.__version__,
                              "platform": "cpu", "devices": 4, "x64": True, "check_vma": True,
                              "mesh_axis_types": "Explicit"},
            "recorded_by": "peers/record_jax.py"}


def main():
    # --versioned: write jax_collectives_<jax version>.json and
    # jax_typing_<jax version>.json beside the pinned, unversioned fixtures
    # (for recording another JAX release without overwriting them).
    global USER
    USER = "--versioned" in sys.argv[1:]
    suffix = f"_{jax.__version__}" if USER else ""
    write(os.path.join(FIX, f"jax_collectives{suffix}.json"), {**header(), "cases": collective_cases() + mesh22_cases()})
    write(os.path.join(FIX, f"jax_typing{suffix}.json"), {**header(), "cases": typing_cases()})


if __name__ == "__main__":
    main()
