"""Record how real JAX batches the collectives inside `shard_map` under
`jax.vmap` (issue 29: transforms over sharded programs), into
tests/fixtures/transforms/jax_vmap_<version>.json.

"cases": for every collective spelling below (psum, pmax, pmin, pmean,
all_gather tiled and untiled at each axis and with to='invarying',
psum_scatter tiled and untiled at each scatter_dimension, all_to_all tiled
and untiled at each split/concat pair, ppermute, pbroadcast,
pcast(to='varying'), axis_index) and every vmap in_axes of 0, 1 and -1
(out_axes 0), on 1-D meshes `x` of 2 and 4 CPU devices (jax.make_mesh,
Explicit axes) with a batch of 2, the recorder writes:

  * the collective's primitive and parameters in the jaxpr of the unbatched
    `shard_map(f)` ("unbatched"), and after batching ("batched", with the
    operand and result types) in the body of `shard_map(vmap(f))` (vmap
    inside) or of `vmap(shard_map(f))` (vmap outside), with every equation
    of that body ("body");
  * each rank's input block (batch dimension where in_axes puts it) and
    each rank's output block (batch dimension first), or JAX's error
    ("error" when tracing refuses, "run_error" when only running fails);
  * V1: whether each rank's batched output equals the stack of the
    unbatched `shard_map(f)` run on each batch element alone (JAX's own
    kernels give both sides); where not, the stacked values expected.

"spmd_axis_name_cases": `vmap(shard_map(f over y), spmd_axis_name='x')`
on a 2x2 mesh with Explicit and with Auto axes (an Auto run whose values
match its Explicit twin keeps none of its own: "values_as_explicit"), and
the refusals on a 1-D mesh where f names the spmd axis or where the vmap
with spmd_axis_name sits inside the shard_map. "named_axis_cases": the
collectives over a named vmap axis `b` inside `shard_map` (over 'b',
('x', 'b') and ('b', 'x'); check_vma True and False), each compared with
the same collective on a 2-D mesh whose second axis plays `b`
("mesh_twin"). "issues": minimal runs of JAX issues #17874 and #23476.

Values are small integers in float32, so every sum is exact; a tensor is
written by peers/registry_values.py's `encode`, its shape then its values
in row-major order (`2x3:1,2,3,4,5,6`).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 /path/to/jax-0.12.0.1/python peers/record_vmap_jax.py

(jax 0.12.0.1 from `pip install jax==0.12.0.1` in a Python 3.12 venv;
about 1.5 minutes on CPU. OUT=path overrides where the file goes.)
"""
import json
import os
import re
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from registry_values import encode, raised  # noqa: E402

OUT = os.environ.get("OUT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                            "fixtures", "transforms", f"jax_vmap_{jax.__version__}.json")
B = 2  # batch size of every vmap but the spmd_axis_name group
DT = np.float32

# the primitives whose equations are "the collective" in a body
COLLECTIVE_PRIMS = {
    "psum", "psum_invariant", "pmax", "pmin", "all_gather", "all_gather_invariant", "reduce_scatter",
    "all_to_all", "ppermute", "pbroadcast", "pvary", "axis_index", "unreduced_psum",
}


def err(e):
    """An exception in one line, with the items of any printed set of
    strings sorted (Python's set order changes from run to run)."""
    def sort_set(m):
        return "{" + ", ".join(sorted(m.group(1).split(", "))) + "}"
    return re.sub(r"\{('[^{}']*'(?:, '[^{}']*')+)\}", sort_set, raised(e, 300))


# ------------------------------------------------------------------ jaxprs

def ser(v):
    """A primitive parameter as JSON."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (tuple, list)):
        return [ser(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return sorted(str(x) for x in v)
    return str(v)


def sub_jaxprs(params):
    for k, v in params.items():
        j = v if hasattr(v, "eqns") else getattr(v, "jaxpr", None)
        if j is not None and hasattr(j, "eqns"):
            yield k, j


def eqn_json(e):
    """One equation as text, `primitive[param=value ...]` with the values
    as JSON (a collective by its name only: its params are in the case's
    "batched"); one carrying a jaxpr (pjit, closed_call) as
    {"primitive", "params", "sub": {param: [its equations]}}."""
    if e.primitive.name in COLLECTIVE_PRIMS:
        return e.primitive.name
    subs = dict(sub_jaxprs(e.params))
    params = {k: ser(v) for k, v in e.params.items() if k not in subs}
    if not subs:
        return e.primitive.name + "[" + " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}"
                                                 for k, v in params.items()) + "]"
    return {"primitive": e.primitive.name, "params": params,
            "sub": {k: [eqn_json(x) for x in j.eqns] for k, j in subs.items()}}


def walk(eqns):
    for e in eqns:
        yield e
        for _, j in sub_jaxprs(e.params):
            yield from walk(j.eqns)


def shard_map_body(closed):
    """The body of the (first) shard_map equation of a traced jaxpr."""
    for e in walk(closed.jaxpr.eqns):
        if e.primitive.name == "shard_map":
            j = e.params["jaxpr"]
            return getattr(j, "jaxpr", j)
    raise RuntimeError("no shard_map equation")


def collective_of(body, avals=True):
    """The collective equations of a body (as JSON), in order, with their
    operand and result types (shape and varying axes) if `avals`."""
    out = []
    for e in walk(body.eqns):
        if e.primitive.name in COLLECTIVE_PRIMS:
            rec = {"primitive": e.primitive.name,
                   "params": {k: ser(v) for k, v in e.params.items() if k not in dict(sub_jaxprs(e.params))}}
            if avals:
                rec["in"] = [str(getattr(v, "aval", v)) for v in e.invars]
                rec["out"] = [str(v.aval) for v in e.outvars]
            out.append(rec)
    return out


# ------------------------------------------------------------------ values

def enc(a):
    a = np.asarray(a)
    return encode(a.shape, a.ravel().tolist())


def shards_in_mesh_order(arr, mesh):
    order = {d.id: i for i, d in enumerate(mesh.devices.flat)}
    return [np.asarray(s.data) for s in sorted(arr.addressable_shards, key=lambda s: order[s.device.id])]


def mesh1(n):
    return jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])  # Explicit axes, jax.make_mesh's default


def mesh2(names, kind):
    types = (AxisType.Explicit if kind == "Explicit" else AxisType.Auto,) * 2
    return jax.make_mesh((2, 2), names, devices=jax.devices()[:4], axis_types=types)


def insert(shape, axis, size):
    s = list(shape)
    s.insert(axis, size)
    return tuple(s)


# ------------------------------------------------------------------ the catalogue

def catalogue(n, extra=False):
    """(collective, user-level params, per-example per-rank block shape,
    body f, in-spec kind) for a mesh axis 'x' of size n (the group size
    for the shapes); `extra` adds a second block shape for psum_scatter."""
    out = []
    two, three = (2, 3), (2, 3, 2)
    for name in ("psum", "pmax", "pmin", "pmean"):
        out.append((name, {"axis_name": "x"}, two, "x"))
    for tiled in (False, True):
        for ax in range(3 if not tiled else 2):
            out.append(("all_gather", {"axis_name": "x", "axis": ax, "tiled": tiled}, two, "x"))
    for ax, tiled in ((0, False), (1, True)):
        out.append(("all_gather", {"axis_name": "x", "axis": ax, "tiled": tiled, "to": "invarying"}, two, "x"))
    for tiled in (False, True):
        for sd in range(3):
            shape = list(three)
            shape[sd] = 2 * n if tiled else n
            out.append(("psum_scatter", {"axis_name": "x", "scatter_dimension": sd, "tiled": tiled}, tuple(shape),
                        "x"))
    if extra:  # a block whose batched result has the right shape whichever trailing dim is the batch dim
        out.append(("psum_scatter", {"axis_name": "x", "scatter_dimension": 0, "tiled": False}, (n, 2, 2), "x"))
    for tiled in (False, True):
        for sa in range(3):
            for ca in range(3):
                shape = list(three)
                shape[sa] = 2 * n if tiled else n
                out.append(("all_to_all", {"axis_name": "x", "split_axis": sa, "concat_axis": ca, "tiled": tiled},
                            tuple(shape), "x"))
    shift = [[i, (i + 1) % n] for i in range(n)]
    swap = [[i, i ^ 1] for i in range(n)]
    for perm in ([shift, swap] if swap != shift else [shift]):
        out.append(("ppermute", {"axis_name": "x", "perm": perm}, two, "x"))
    out.append(("pbroadcast", {"axis_name": "x", "source": 1}, two, "x"))
    out.append(("pcast", {"axis_name": "x", "to": "varying"}, two, "replicated"))
    out.append(("axis_index", {"axis_name": "x", "body": "a + axis_index(axis_name)"}, two, "x"))
    return [(c, p, s, _over(c, p, "x"), k) for c, p, s, k in out]


def rank_blocks(n, shape, b, axis, spec_kind):
    """Per-rank input blocks with the batch of b at `axis`: distinct small
    integers (one block shared by every rank when the spec is P())."""
    bshape = insert(shape, axis, b)
    k = 1 if spec_kind == "replicated" else n
    vals = np.arange(1, 1 + k * int(np.prod(bshape)), dtype=DT).reshape((k,) + bshape)
    return [vals[0 if k == 1 else r] for r in range(n)]


def put(mesh, arr, spec):
    return jax.device_put(jnp.asarray(arr), NamedSharding(mesh, spec))


def run_blocks(fn, mesh, g):
    y = fn(g)
    return [np.asarray(s) for s in shards_in_mesh_order(y, mesh)]


UNBATCHED = {}


def one_case(n, coll, params, shape, f, spec_kind, in_axes, where):
    mesh = mesh1(n)
    ndim = len(shape) + 1
    axis = in_axes % ndim
    blocks = rank_blocks(n, shape, B, axis, spec_kind)
    in_spec = P() if spec_kind == "replicated" else P("x")
    rec = {"collective": coll, "params": params, "in_axes": in_axes, "in_axis": axis, "out_axes": 0,
           "mesh": [n], "batch": B, "where": where,
           "in_spec": "P()" if spec_kind == "replicated" else "P('x')", "out_spec": "P('x')",
           "block_shape": list(shape), "inputs": [enc(b) for b in blocks]}

    # the unbatched program on one batch element: primitive, params, per-rank outputs
    ukey = (n, coll, json.dumps(params), shape)
    if ukey not in UNBATCHED:  # one compile of the unbatched program per spelling
        UNBATCHED[ukey] = [jax.jit(jax.shard_map(f, mesh=mesh, in_specs=in_spec, out_specs=P("x"))), None]
    sm_f = UNBATCHED[ukey][0]
    refs, ref_err = [], None
    for i in range(B):
        ex = [np.take(b, i, axis=axis) for b in blocks]
        g = ex[0] if spec_kind == "replicated" else np.concatenate(ex, axis=0)
        gi = put(mesh, g, in_spec)
        if i == 0:
            if UNBATCHED[ukey][1] is None:
                try:
                    UNBATCHED[ukey][1] = {"unbatched": collective_of(shard_map_body(jax.make_jaxpr(sm_f)(gi)),
                                                                     avals=False)}
                except Exception as e:
                    UNBATCHED[ukey][1] = {"unbatched_error": err(e)}
            rec.update(UNBATCHED[ukey][1])
        try:
            refs.append(run_blocks(sm_f, mesh, gi))
        except Exception as e:
            ref_err = err(e)
            break
    if ref_err:
        rec["unbatched_run_error"] = ref_err

    # the batched program
    if where == "shard_map(vmap)":
        prog = jax.shard_map(jax.vmap(f, in_axes=in_axes, out_axes=0), mesh=mesh, in_specs=in_spec,
                             out_specs=P("x"))
        gspec = in_spec
        G = blocks[0] if spec_kind == "replicated" else np.concatenate(blocks, axis=0)
    else:
        prog = jax.vmap(jax.shard_map(f, mesh=mesh, in_specs=in_spec, out_specs=P("x")), in_axes=in_axes,
                        out_axes=0)
        if spec_kind == "replicated":
            gspec, G = P(), blocks[0]
        else:
            cat = 1 if axis == 0 else 0  # where the unbatched dim 0 sits in the batched array
            gspec = P(*([None] * cat + ["x"]))
            G = np.concatenate(blocks, axis=cat)
    Gd = put(mesh, G, gspec)
    assert all((a == b).all() for a, b in zip(shards_in_mesh_order(Gd, mesh), blocks)), "input layout"
    try:
        body = shard_map_body(jax.make_jaxpr(prog)(Gd))
        rec["batched"] = collective_of(body)
        rec["body"] = [eqn_json(e) for e in body.eqns]
    except Exception as e:
        rec["error"] = err(e)
        return rec
    try:
        outs = run_blocks(jax.jit(prog), mesh, Gd)
    except Exception as e:
        rec["run_error"] = err(e)
        return rec
    rec["outputs"] = [enc(o) for o in outs]
    if len(refs) == B:
        expected = [np.stack([refs[i][r] for i in range(B)], axis=0) for r in range(n)]
        holds = all(o.shape == x.shape and (o == x).all() for o, x in zip(outs, expected))
        rec["v1"] = {"holds": bool(holds)}
        if not holds:
            rec["v1"]["expected"] = [enc(x) for x in expected]
    return rec


def main_cases():
    cases = []
    for n in (2, 4):
        for coll, params, shape, f, spec_kind in catalogue(n, extra=True):
            for where in ("shard_map(vmap)", "vmap(shard_map)"):
                for in_axes in (0, 1, -1):
                    cases.append(one_case(n, coll, params, shape, f, spec_kind, in_axes, where))
    return cases


# ------------------------------------------------------------------ spmd_axis_name

def spmd_cases():
    """vmap(shard_map(f over 'y'), spmd_axis_name='x') on a 2x2 mesh, batch 4
    (2 per 'x' rank); and the refusals."""
    out = []
    ny, b = 2, 4
    for kind, coll, params, shape, f, spec_kind in [(k, *c) for k in ("Explicit", "Auto") for c in catalogue(ny)]:
        mesh = mesh2(("x", "y"), kind)
        if coll in ("pmin", "pmean") or (coll == "all_to_all" and params["split_axis"] != params["concat_axis"]
                                         and params["tiled"]):
            continue
        params = dict(params, axis_name="y")
        fy = _over(coll, params, "y")
        in_spec = P() if spec_kind == "replicated" else P("y")
        for in_axes in (0, 1, -1):
            axis = in_axes % (len(shape) + 1)
            blocks = rank_blocks(ny, shape, b, axis, spec_kind)  # per 'y' rank
            rec = {"collective": coll, "params": params, "in_axes": in_axes, "in_axis": axis, "out_axes": 0,
                   "mesh": [2, 2], "mesh_axes": ["x", "y"], "axis_types": kind, "batch": b, "spmd_axis_name": "x",
                   "where": "vmap(shard_map)",
                   "in_spec": "P()" if spec_kind == "replicated" else "P('y')", "out_spec": "P('y')",
                   "block_shape": list(shape)}
            if spec_kind == "replicated":
                G = blocks[0]
                gspec = P(*([None] * axis + ["x"]))
            else:
                cat = 1 if axis == 0 else 0
                G = np.concatenate(blocks, axis=cat)
                spec = [None] * G.ndim
                spec[axis], spec[cat] = "x", "y"
                gspec = P(*spec)
            prog = jax.vmap(jax.shard_map(fy, mesh=mesh, in_specs=in_spec, out_specs=P("y")),
                            in_axes=in_axes, out_axes=0, spmd_axis_name="x")
            try:
                Gd = put(mesh, G, gspec)
                rec["inputs"] = [enc(s) for s in shards_in_mesh_order(Gd, mesh)]
                closed = jax.make_jaxpr(prog)(Gd)
                sm = next(e for e in walk(closed.jaxpr.eqns) if e.primitive.name == "shard_map")
                rec["shard_map_specs"] = {"in_specs": ser(sm.params["in_specs"]),
                                          "out_specs": ser(sm.params["out_specs"])}
                body = shard_map_body(closed)
                rec["batched"] = collective_of(body)
            except Exception as e:
                rec["error"] = err(e)
                out.append(rec)
                continue
            try:
                y = jax.jit(prog)(Gd)
                outs = shards_in_mesh_order(y, mesh)
                rec["outputs"] = [enc(o) for o in outs]
                rec["output_sharding"] = str(y.sharding.spec)
            except Exception as e:
                rec["run_error"] = err(e)
                out.append(rec)
                continue
            # V1 on global values: stack of the unbatched shard_map(f) on each element
            sm_f = jax.jit(jax.shard_map(fy, mesh=mesh, in_specs=in_spec, out_specs=P("y")))
            try:
                ys = [np.asarray(sm_f(put(mesh, np.take(G, i, axis=axis), in_spec))) for i in range(b)]
                exp = np.stack(ys, axis=0)
                glob = np.asarray(y)
                holds = glob.shape == exp.shape and bool((glob == exp).all())
                rec["v1"] = {"holds": holds}
                if not holds:
                    rec["v1"]["expected_global"] = enc(exp)
            except Exception as e:
                rec["unbatched_run_error"] = err(e)
            out.append(rec)
    # an Auto-axes run that matches its Explicit twin keeps no values of its own
    key = lambda r: (r["collective"], json.dumps(r["params"]), tuple(r["block_shape"]), r["in_axes"])  # noqa: E731
    explicit = {key(r): r for r in out if r["axis_types"] == "Explicit"}
    for r in out:
        t = explicit.get(key(r)) if r["axis_types"] == "Auto" else None
        if t and all(r.get(k) == t.get(k) for k in ("inputs", "outputs", "error", "run_error", "v1")):
            for k in ("inputs", "outputs"):
                r.pop(k, None)
            r["values_as_explicit"] = True
    # refusals: the body names the spmd axis (1-D mesh), and spmd_axis_name inside shard_map
    for n in (4,):
        mesh = mesh1(n)
        for coll, params, shape, f, spec_kind in catalogue(n):
            if coll not in ("psum", "all_gather", "psum_scatter", "all_to_all", "ppermute", "pcast", "axis_index"):
                continue
            if coll in ("all_gather", "psum_scatter", "all_to_all") and params.get("to") is None and (
                    params.get("axis", params.get("scatter_dimension", params.get("split_axis"))) != 0
                    or params.get("concat_axis", 0) != 0):
                continue
            in_spec = P() if spec_kind == "replicated" else P("x")
            blocks = rank_blocks(n, shape, n, 0, spec_kind)
            for where in ("vmap(shard_map)", "shard_map(vmap)"):
                rec = {"collective": coll, "params": params, "in_axes": 0, "out_axes": 0, "mesh": [n],
                       "axis_types": "Explicit", "batch": n, "spmd_axis_name": "x", "where": where,
                       "block_shape": list(shape)}
                if where == "vmap(shard_map)":
                    prog = jax.vmap(jax.shard_map(f, mesh=mesh, in_specs=in_spec, out_specs=P("x")),
                                    spmd_axis_name="x")
                    G = blocks[0] if spec_kind == "replicated" else np.concatenate(blocks, axis=1)
                    gspec = P() if spec_kind == "replicated" else P(None, "x")
                else:
                    prog = jax.shard_map(jax.vmap(f, spmd_axis_name="x"), mesh=mesh, in_specs=in_spec,
                                         out_specs=P("x"))
                    G = blocks[0] if spec_kind == "replicated" else np.concatenate(blocks, axis=0)
                    gspec = in_spec
                try:
                    Gd = put(mesh, G, gspec)
                    rec["batched"] = collective_of(shard_map_body(jax.make_jaxpr(prog)(Gd)))
                    y = jax.jit(prog)(Gd)
                    rec["outputs"] = [enc(o) for o in shards_in_mesh_order(y, mesh)]
                except Exception as e:
                    rec["error"] = err(e)
                out.append(rec)
    return out


def _over(coll, params, ax):
    """The body for a catalogue entry, over mesh/vmap axis `ax` (a name or
    a tuple of names)."""
    p = params
    if coll == "psum":
        return lambda a: lax.psum(a, ax)
    if coll == "pmax":
        return lambda a: lax.pmax(a, ax)
    if coll == "pmin":
        return lambda a: lax.pmin(a, ax)
    if coll == "pmean":
        return lambda a: lax.pmean(a, ax)
    if coll == "all_gather":
        kw = {"to": p["to"]} if "to" in p else {}
        return lambda a: lax.all_gather(a, ax, axis=p["axis"], tiled=p["tiled"], **kw)
    if coll == "psum_scatter":
        return lambda a: lax.psum_scatter(a, ax, scatter_dimension=p["scatter_dimension"], tiled=p["tiled"])
    if coll == "all_to_all":
        return lambda a: lax.all_to_all(a, ax, p["split_axis"], p["concat_axis"], tiled=p["tiled"])
    if coll == "ppermute":
        return lambda a: lax.ppermute(a, ax, perm=[tuple(q) for q in p["perm"]])
    if coll == "pbroadcast":
        return lambda a: lax.pbroadcast(a, ax, source=p["source"])
    if coll == "pcast":
        return lambda a: lax.pcast(a, ax, to="varying")
    if coll == "axis_index":
        return lambda a: a + lax.axis_index(ax).astype(a.dtype)
    raise ValueError(coll)


# ------------------------------------------------------------------ named vmap axis

def named_cases():
    """shard_map(vmap(f, axis_name='b')) on {x: 2}, batch 2, with f's
    collective over 'b', ('x', 'b') or ('b', 'x'); compared with the same
    collective inside shard_map on a 2-D mesh (x: 2, b: 2) where each
    device holds one batch element."""
    out = []
    n, b = 2, 2
    m1 = mesh1(n)
    m2 = jax.make_mesh((n, b), ("x", "b"), devices=jax.devices()[:n * b])
    for check_vma, ax in [(c, a) for c in (True, False) for a in ("b", ("x", "b"), ("b", "x"))]:
        g = n * b if isinstance(ax, tuple) else b  # the group size
        for coll, params, shape, _f, spec_kind in catalogue(g):
            if coll in ("pmin", "pmean", "pcast") or (coll == "all_to_all" and params["split_axis"] == 2) or (
                    coll in ("all_gather", "psum_scatter") and params.get("axis", params.get("scatter_dimension"))
                    == 2):
                continue
            if coll == "all_to_all" and params["concat_axis"] == 2:
                continue
            params = dict(params, axis_name=list(ax) if isinstance(ax, tuple) else ax)
            f = _over(coll, params, ax)
            blocks = rank_blocks(n, shape, b, 0, "x")
            rec = {"collective": coll, "params": params, "in_axes": 0, "out_axes": 0, "mesh": [n],
                   "axis_types": "Explicit", "batch": b, "vmap_axis_name": "b", "check_vma": check_vma,
                   "where": "shard_map(vmap)",
                   "in_spec": "P('x')", "out_spec": "P('x')", "block_shape": list(shape),
                   "inputs": [enc(x) for x in blocks]}
            prog = jax.shard_map(jax.vmap(f, axis_name="b"), mesh=m1, in_specs=P("x"), out_specs=P("x"),
                                 check_vma=check_vma)
            try:
                Gd = put(m1, np.concatenate(blocks, axis=0), P("x"))
                body = shard_map_body(jax.make_jaxpr(prog)(Gd))
                rec["batched"] = collective_of(body)
                rec["body"] = [eqn_json(e) for e in body.eqns]
                outs = run_blocks(jax.jit(prog), m1, Gd)
                rec["outputs"] = [enc(o) for o in outs]
            except Exception as e:
                rec["error"] = err(e)
                outs = None
            # the 2-D mesh twin: device (x=r, b=i) holds blocks[r][i]
            twin = jax.jit(jax.shard_map(lambda a: f(a[0, 0])[None, None], mesh=m2, in_specs=P("x", "b"),
                                         out_specs=P("x", "b"), check_vma=check_vma))
            try:
                G2 = np.stack(blocks, axis=0)  # (n, b, *shape)
                y2 = np.asarray(twin(put(m2, G2, P("x", "b"))))  # (n, b, *out)
                exp = [y2[r] for r in range(n)]
                if outs is not None:
                    holds = all(o.shape == x.shape and (o == x).all() for o, x in zip(outs, exp))
                    rec["mesh_twin"] = {"holds": bool(holds)}
                    if not holds:
                        rec["mesh_twin"]["expected"] = [enc(x) for x in exp]
                else:
                    rec["mesh_twin"] = {"expected": [enc(x) for x in exp]}
            except Exception as e:
                rec["mesh_twin"] = {"error": err(e)}
            out.append(rec)
    return out


# ------------------------------------------------------------------ issues

def issue_17874():
    """shard_map with a closed-over argument under vmap(spmd_axis_name):
    the issue saw shape (n*n,) for a (n,) input (here n = 4), on a
    jax.sharding.Mesh (Auto axes) as in the issue and on jax.make_mesh's
    Explicit axes; the input unsharded or put on P('x')."""
    res = {"url": "https://github.com/jax-ml/jax/issues/17874",
           "title": "shard_map with a closed over argument produces the wrong batched axis size when using "
                    "spmd_axis_name", "expected_shape": [4]}
    for kind in ("Auto", "Explicit"):
        mesh = (jax.sharding.Mesh(np.array(jax.devices()[:4]), ("x",)) if kind == "Auto" else mesh1(4))

        def explicit(x, mesh=mesh):
            return jax.shard_map(lambda x: x, mesh=mesh, in_specs=(P(),), out_specs=P())(x)

        def closed(x, mesh=mesh):
            return jax.shard_map(lambda: x, mesh=mesh, in_specs=(), out_specs=P())()

        for placed in ("unsharded", "P('x')"):
            x = jnp.arange(1, 5, dtype=DT)
            x = x if placed == "unsharded" else put(mesh, x, P("x"))
            for name, fn in (("explicit_arg", explicit), ("closed_arg", closed)):
                for spmd in ("x", None):
                    for jit in (False, True):
                        prog = jax.vmap(fn, spmd_axis_name=spmd)
                        prog = jax.jit(prog) if jit else prog
                        r = {"mesh_axis_types": kind, "input": placed, "arg": name, "spmd_axis_name": spmd,
                             "jit": jit}
                        try:
                            y = prog(x)
                            r.update(shape=list(y.shape), value=enc(y))
                        except Exception as e:
                            r["error"] = err(e)
                        res.setdefault("runs", []).append(r)
    res["reproduces"] = any(r.get("shape") not in (None, [4]) for r in res["runs"])
    res["reproduces_where"] = sorted({f"{r['mesh_axis_types']} mesh, {r['arg']}, spmd_axis_name={r['spmd_axis_name']}"
                                      for r in res["runs"] if r.get("shape") not in (None, [4])})
    return res


def issue_23476():
    """vmap(spmd_axis_name)/shard_map/vmap-with-capture on a 2x2 mesh:
    the issue saw inconsistent batch sizes; JAX's test
    test_nested_vmap_with_capture_spmd_axis_name is skipped for it. Run
    as in that test (unsharded inputs) and as in the issue (inputs put on
    P('x') and P('x', 'y')), on Auto and Explicit mesh axes."""
    res = {"url": "https://github.com/jax-ml/jax/issues/23476",
           "title": "vmap(SPMD axis)/shmap/(vmap with capture) pattern breaks batching"}
    x = np.arange(2, dtype=DT)
    y = np.arange(4, dtype=DT).reshape(2, 2)
    expected = x[:, None] + y
    res["expected"] = enc(expected)
    for kind in ("Auto", "Explicit"):
        mesh = (jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y")) if kind == "Auto"
                else mesh2(("x", "y"), "Explicit"))

        def to_map_with_capture(x, y, mesh=mesh):
            def with_capture(y_slice):
                return x + y_slice
            return jax.shard_map(jax.vmap(with_capture), mesh=mesh, in_specs=P("y"), out_specs=P("y"))(y)

        for placed in ("unsharded", "sharded"):
            xa, ya = ((jnp.asarray(x), jnp.asarray(y)) if placed == "unsharded"
                      else (put(mesh, x, P("x")), put(mesh, y, P("x", "y"))))
            for spmd in ("x", None):
                prog = jax.vmap(to_map_with_capture, spmd_axis_name=spmd)
                r = {"mesh_axis_types": kind, "inputs": placed, "spmd_axis_name": spmd}
                try:
                    jax.make_jaxpr(prog)(xa, ya)
                    r["trace"] = "ok"
                except Exception as e:
                    r["trace_error"] = err(e)
                try:
                    out = np.asarray(jax.jit(prog)(xa, ya))
                    r["value"] = enc(out)
                    r["equals_expected"] = bool(out.shape == expected.shape and (out == expected).all())
                except Exception as e:
                    r["run_error"] = err(e)
                res.setdefault("runs", []).append(r)
    # the issue's symptom: vmap sees inconsistent sizes for the batch axis
    res["reproduces"] = any("inconsistent sizes" in r.get("trace_error", "") + r.get("run_error", "")
                            or r.get("equals_expected") is False for r in res["runs"])
    res["pattern_fails_where"] = sorted(
        {f"{r['mesh_axis_types']} mesh, {r['inputs']} inputs, spmd_axis_name={r['spmd_axis_name']}: "
         f"{(r.get('trace_error') or r.get('run_error'))[:90]}"
         for r in res["runs"] if r["spmd_axis_name"] and ("trace_error" in r or "run_error" in r)
         and "does not match the specs of the input" not in r.get("trace_error", "")})
    return res


def main():
    t0 = time.time()
    cases = main_cases()
    print(f"main: {len(cases)} cases, {time.time() - t0:.1f} s", file=sys.stderr)
    spmd = spmd_cases()
    print(f"spmd_axis_name: {len(spmd)} cases, {time.time() - t0:.1f} s", file=sys.stderr)
    named = named_cases()
    print(f"named vmap axis: {len(named)} cases, {time.time() - t0:.1f} s", file=sys.stderr)
    issues = {"17874": issue_17874(), "23476": issue_23476()}
    doc = {"jax": jax.__version__, "dtype": "float32", "cases_mesh_axis_types": "Explicit",
           "recorded_by": "peers/record_vmap_jax.py: jax.vmap over and inside jax.shard_map on host CPU devices, "
                          "every collective's batched primitive and per-rank values",
           "cases": cases, "spmd_axis_name_cases": spmd, "named_axis_cases": named, "issues": issues}
    path = os.path.abspath(OUT)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(json.dumps(doc, separators=(",", ":")) + "\n")
    allc = cases + spmd + named
    print(f"{len(allc)} cases ({sum('error' in c for c in allc)} refused, "
          f"{sum('run_error' in c for c in allc)} failed to run, "
          f"{sum(c.get('v1', {}).get('holds') is False for c in allc)} break V1, "
          f"{sum(c.get('mesh_twin', {}).get('holds') is False for c in allc)} differ from the 2-D mesh twin); "
          f"issues: 17874 reproduces={issues['17874']['reproduces']}, 23476 reproduces="
          f"{issues['23476']['reproduces']}; {time.time() - t0:.1f} s -> {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
