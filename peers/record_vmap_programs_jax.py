"""Record how real JAX batches whole small SPMD programs with `jax.vmap`,
inside and around `jax.shard_map` (check_vma=True), forward and backward,
into tests/fixtures/transforms/jax_vmap_programs_<version>.json.

The programs (each written as the per-rank body, in PROGRAMS below):
row_parallel, row_parallel_deferred (the psum deferred past a linear op),
mlp (an invariant x that JAX pvary-s itself), seq_parallel (all_gather
tiled, then psum_scatter tiled), gather_untiled (all_gather tiled=False:
JAX types its result Varying, so it leaves through a Varying out_spec),
gather_untiled_invariant (the same with to='invarying', out_specs P()) and
scatter_untiled (psum_scatter tiled=False). For each on a 1-D mesh `x`
of 2 and 4 CPU devices (jax.make_mesh, Explicit axes), batch sizes 1 and
2, every in_axes of the catalogue (one-input programs: 0, 1, 2; others: x
alone at 0, 1, 2 and every input at 0) and the two placements of vmap
("inside": shard_map(vmap(f, in_axes, out_axes=0)), the batch in every
rank's local block; "outside": vmap(shard_map(f), in_axes, out_axes=0),
the specs written for the unbatched global arrays) a case holds:

  * "inputs": per input, per rank, the local block that rank's program
    sees (the batch dim at in_axes, or the element block when the input
    is not batched); "cotangent": per rank, the output cotangent block
    (batch first); an Invariant input or output has one block on every
    rank;
  * "forward": per rank, the output block JAX returns (batch first), or
    "forward_error";
  * "grad_of_vmap": per input, per rank, the gradient of
    jax.vjp(batched program) for that cotangent (an unbatched input's is
    its element block: JAX sums it over the batch), or
    "grad_of_vmap_error";
  * "vmap_of_grad": vmap over (in_axes..., 0) of the unbatched program's
    vjp (inside: of the local f's vjp, in the shard_map; outside: of the
    global shard_map(f)'s vjp): per input, per rank, the per-element
    gradients stacked at dim 0 (an unbatched input's too), or
    "vmap_of_grad_error";
  * the collectives (and pvary) bound in the shard_map bodies of the
    batched program ("collectives", with operand and result types, and
    "body": every equation of the forward body) and of both gradient
    programs ("collectives_grad_of_vmap", "collectives_vmap_of_grad");
    "batch_dims": where the batch dim sits in each such equation's
    operands and results, read from a trace with a batch of 5 (a size no
    block dim has), e.g. [[1], [0]];
  * V1 with JAX's own kernels: the unbatched shard_map(f) run on each
    element alone, then stacked ("v1_forward"); the per-element vjps
    stacked at in_axes, summed for an unbatched input
    ("v1_grad_of_vmap"), stacked at 0 ("v1_vmap_of_grad"). true/false, or
    null where the batched side raised. JAX-self-consistency only.

Values are small integers (inputs -3..3, cotangents -2..2, fixed seeds)
in float64, so every value is exact; a tensor is written by
peers/registry_values.py's `encode`, its shape then its values in
row-major order (`2x3:1,2,3,4,5,6`).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 /work/venv-jax012/bin/python peers/record_vmap_programs_jax.py

(jax 0.12.0.1 from `pip install jax==0.12.0.1` in a Python 3.12 venv;
about 1 minute on 2 CPU cores. OUT=path overrides where the file goes.)
"""
import json
import os
import re
import sys
import time
import zlib

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from registry_values import encode, raised  # noqa: E402

jax.config.update("jax_enable_x64", True)

COMMAND = ("XLA_FLAGS=--xla_force_host_platform_device_count=8 /work/venv-jax012/bin/python "
           "peers/record_vmap_programs_jax.py")
OUT = os.environ.get("OUT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                                            "transforms", f"jax_vmap_programs_{jax.__version__}.json")
DT = np.float64
PROBE = 5  # the batch size of the batch-dim probe trace: no block dim is 5

COLLECTIVE_PRIMS = {
    "psum", "psum_invariant", "pmax", "pmin", "all_gather", "all_gather_invariant", "reduce_scatter",
    "all_to_all", "ppermute", "pbroadcast", "pvary", "axis_index", "unreduced_psum",
}

# name -> (inputs [(name, element block shape given n, sharded dim of the element's global array or None for
# Invariant)], output (element block shape given n, sharded dim or None), the body's text).
PROGRAMS = [
    ("row_parallel",
     [("x", lambda n: (2, 2), 1), ("w", lambda n: (2, 3), 0)], (lambda n: (2, 3), None),
     "y = lax.psum(x @ w, 'x')"),
    ("row_parallel_deferred",
     [("x", lambda n: (2, 2), 1), ("w", lambda n: (2, 3), 0)], (lambda n: (2, 3), None),
     "h = x @ w\ny = lax.psum(2 * h + h, 'x')"),
    ("mlp",
     [("x", lambda n: (2, 2), None), ("w1", lambda n: (2, 2), 1), ("w2", lambda n: (2, 2), 0)],
     (lambda n: (2, 2), None),
     "y = lax.psum(((x @ w1) ** 2) @ w2, 'x')"),
    ("seq_parallel",
     [("x", lambda n: (1, 2), 0), ("w1", lambda n: (2, 2), 1), ("w2", lambda n: (2, 2), 0)],
     (lambda n: (1, 2), 0),
     "xg = lax.all_gather(x, 'x', axis=0, tiled=True)\no = ((xg @ w1) ** 2) @ w2\n"
     "y = lax.psum_scatter(o, 'x', scatter_dimension=0, tiled=True)"),
    # JAX types the plain all_gather's result Varying (its values are the same on every rank), so
    # out_specs=P() is refused: the output is written Varying, each rank's [n, 2, 3] block its own
    ("gather_untiled",
     [("x", lambda n: (2, 3), 0)], (lambda n: (n, 2, 3), 0),
     "y = lax.all_gather(x * x, 'x', axis=0, tiled=False)"),
    # the same gather typed Invariant (to='invarying': all_gather_invariant), out_specs=P()
    ("gather_untiled_invariant",
     [("x", lambda n: (2, 3), 0)], (lambda n: (n, 2, 3), None),
     "y = lax.all_gather(x * x, 'x', axis=0, tiled=False, to='invarying')"),
    ("scatter_untiled",
     [("x", lambda n: (n, 3), 0)], (lambda n: (3,), 0),
     "y = lax.psum_scatter(x * x, 'x', scatter_dimension=0, tiled=False)"),
]


def make_f(names, text):
    """The per-rank function `def f(<names>): <text>; return y`."""
    src = f"def f({', '.join(names)}):\n" + "".join(f"    {ln}\n" for ln in text.splitlines()) + "    return y\n"
    scope = {"lax": lax, "jnp": jnp}
    exec(src, scope)  # noqa: S102  (our own program texts)
    return scope["f"], src


def err(e):
    """An exception in one line, with the items of any printed set of
    strings sorted (Python's set order changes from run to run)."""
    def sort_set(m):
        return "{" + ", ".join(sorted(m.group(1).split(", "))) + "}"
    return re.sub(r"\{('[^{}']*'(?:, '[^{}']*')+)\}", sort_set, raised(e, 300))


# ------------------------------------------------------------------ jaxprs

def ser(v):
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


def walk(eqns):
    for e in eqns:
        yield e
        for _, j in sub_jaxprs(e.params):
            yield from walk(j.eqns)


def eqn_json(e):
    """One equation as text, `primitive[param=value ...] in_shapes -> out_shapes`;
    one carrying a jaxpr as {"primitive", "params", "sub"}."""
    subs = dict(sub_jaxprs(e.params))
    params = {k: ser(v) for k, v in e.params.items() if k not in subs}
    if not subs:
        ins = " ".join(str(getattr(v, "aval", v)) for v in e.invars)
        outs = " ".join(str(v.aval) for v in e.outvars)
        return (e.primitive.name + "[" + " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}"
                                                  for k, v in params.items()) + f"] {ins} -> {outs}")
    return {"primitive": e.primitive.name, "params": params,
            "sub": {k: [eqn_json(x) for x in j.eqns] for k, j in subs.items()}}


def shard_map_bodies(closed):
    out = []
    for e in walk(closed.jaxpr.eqns):
        if e.primitive.name == "shard_map":
            j = e.params["jaxpr"]
            out.append(getattr(j, "jaxpr", j))
    if not out:
        raise RuntimeError("no shard_map equation")
    return out


def collective_eqns(closed):
    return [e for b in shard_map_bodies(closed) for e in walk(b.eqns) if e.primitive.name in COLLECTIVE_PRIMS]


def collectives_json(closed):
    return [{"primitive": e.primitive.name,
             "params": {k: ser(v) for k, v in e.params.items() if k not in dict(sub_jaxprs(e.params))},
             "in": [str(getattr(v, "aval", v)) for v in e.invars],
             "out": [str(v.aval) for v in e.outvars]} for e in collective_eqns(closed)]


def batch_dims_json(closed):
    """Per collective equation: [primitive, [batch dim of each operand], [of each result]]
    (None where an operand has no dim of PROBE's size)."""
    def bd(v):
        shape = getattr(getattr(v, "aval", None), "shape", ())
        hits = [i for i, d in enumerate(shape) if d == PROBE]
        return hits[0] if len(hits) == 1 else (hits if hits else None)
    return [[e.primitive.name, [bd(v) for v in e.invars], [bd(v) for v in e.outvars]]
            for e in collective_eqns(closed)]


# ------------------------------------------------------------------ values

def enc(a):
    a = np.asarray(a)
    return encode(a.shape, a.ravel().tolist())


def mesh1(n):
    return jax.make_mesh((n,), ("x",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:n])


def spec_of(ndim, dim):
    """P with 'x' at `dim` (P() when dim is None)."""
    if dim is None:
        return P()
    s = [None] * ndim
    s[dim] = "x"
    return P(*s)


def shifted(dim, batch_at):
    """Where an element dim sits once a batch dim is inserted at `batch_at`."""
    if dim is None or batch_at is None:
        return dim
    return dim + 1 if batch_at <= dim else dim


def insert(shape, axis, size):
    s = list(shape)
    s.insert(axis, size)
    return tuple(s)


def to_global(blocks, dim):
    """Per-rank local blocks -> the global array (blocks concatenated along
    the sharded dim; an Invariant array is rank 0's block)."""
    return blocks[0] if dim is None else np.concatenate(blocks, axis=dim)


def to_blocks(arr, dim, n):
    """A global array -> each rank's local block (the same block on every
    rank for an Invariant array)."""
    arr = np.asarray(arr)
    return [arr] * n if dim is None else np.split(arr, n, axis=dim)


def put(mesh, arr, ndim_dim):
    ndim, dim = ndim_dim
    return jax.device_put(jnp.asarray(arr), NamedSharding(mesh, spec_of(ndim, dim)))


def draw(rng, shape, lo, hi, k, batch_at):
    """Small integers with the k batch elements all different."""
    while True:
        a = rng.integers(lo, hi + 1, size=shape).astype(DT)
        if batch_at is None or k == 1:
            return a
        els = [np.take(a, i, axis=batch_at) for i in range(k)]
        if all(not np.array_equal(els[i], els[j]) for i in range(k) for j in range(i)):
            return a


def in_axes_catalogue(inputs, n):
    names = [nm for nm, _, _ in inputs]
    if len(names) == 1:
        rank = len(inputs[0][1](n))
        return [[a] for a in range(rank + 1)]
    return [[a] + [None] * (len(names) - 1) for a in (0, 1, 2)] + [[0] * len(names)]


# ------------------------------------------------------------------ references (per element, unbatched)

REF = {}


def reference(name, n):
    """The unbatched shard_map(f) and its vjp, jitted once per (program, n)."""
    key = (name, n)
    if key not in REF:
        _, inputs, (oshape, odim), text = next(p for p in PROGRAMS if p[0] == name)
        f, _ = make_f([nm for nm, _, _ in inputs], text)
        mesh = mesh1(n)
        ins = tuple(spec_of(len(s(n)), d) for _, s, d in inputs)
        sm = jax.shard_map(f, mesh=mesh, in_specs=ins, out_specs=spec_of(len(oshape(n)), odim))
        fwd = jax.jit(sm)
        bwd = jax.jit(lambda *a: jax.vjp(sm, *a[:-1])[1](a[-1]))
        REF[key] = (mesh, f, sm, fwd, bwd)
    return REF[key]


# ------------------------------------------------------------------ one case

def one_case(prog, n, k, in_axes, where):
    name, inputs, (oshape_n, odim), text = prog
    mesh, f, sm, ref_fwd, ref_bwd = reference(name, n)
    names = [nm for nm, _, _ in inputs]
    eshapes = [s(n) for _, s, _ in inputs]
    dims = [d for _, _, d in inputs]
    oshape = oshape_n(n)
    seed = zlib.crc32(f"{name}/{n}/{k}/{in_axes}".encode())
    rng = np.random.default_rng(seed)

    # inputs: per input, per rank, the local block (batch at in_axes)
    blocks = []
    for shp, d, a in zip(eshapes, dims, in_axes):
        bshape = shp if a is None else insert(shp, a, k)
        if d is None:
            one = draw(rng, bshape, -3, 3, k, a)
            blocks.append([one] * n)
        else:
            blocks.append([draw(rng, bshape, -3, 3, k, a) for _ in range(n)])
    cshape = insert(oshape, 0, k)
    if odim is None:
        one = draw(rng, cshape, -2, 2, k, 0)
        cot = [one] * n
    else:
        cot = [draw(rng, cshape, -2, 2, k, 0) for _ in range(n)]

    # global arrays: an input's sharded dim moves past a batch dim inserted at or before it
    gdims = [shifted(d, a) for d, a in zip(dims, in_axes)]
    gnd = [len(s) + (a is not None) for s, a in zip(eshapes, in_axes)]
    godim, gond = shifted(odim, 0), len(oshape) + 1
    G = [put(mesh, to_global(b, gd), (nd, gd)) for b, gd, nd in zip(blocks, gdims, gnd)]
    GC = put(mesh, to_global(cot, godim), (gond, godim))
    for g, b, gd in zip(G, blocks, gdims):  # the global array really gives these local blocks
        assert all(np.array_equal(x, y) for x, y in zip(to_blocks(g, gd, n), b)), "input layout"

    rec = {"program": name, "text": text, "inputs_names": names, "n": n, "k": k, "in_axes": list(in_axes),
           "out_axes": 0, "where": where,
           "element_in_specs": [str(spec_of(len(s), d)) for s, d in zip(eshapes, dims)],
           "element_out_spec": str(spec_of(len(oshape), odim)),
           "element_block_shapes": [list(s) for s in eshapes], "element_out_block_shape": list(oshape),
           "inputs": [[enc(x) for x in b] for b in blocks], "cotangent": [enc(x) for x in cot]}

    ia = tuple(in_axes)
    if where == "inside":
        in_specs = tuple(spec_of(nd, gd) for nd, gd in zip(gnd, gdims))
        out_spec = spec_of(gond, godim)
        batched = jax.shard_map(jax.vmap(f, in_axes=ia, out_axes=0), mesh=mesh, in_specs=in_specs,
                                out_specs=out_spec)
        # vmap of the local vjp, in the shard_map: every gradient stacked at 0
        gspecs = tuple(spec_of(len(s) + 1, shifted(d, 0)) for s, d in zip(eshapes, dims))

        def local_vjp(*a_g):
            return jax.vjp(f, *a_g[:-1])[1](a_g[-1])
        vog = jax.shard_map(jax.vmap(local_vjp, in_axes=ia + (0,), out_axes=0), mesh=mesh,
                            in_specs=in_specs + (out_spec,), out_specs=gspecs)
    else:
        batched = jax.vmap(sm, in_axes=ia, out_axes=0)
        vog = jax.vmap(lambda *a_g: jax.vjp(sm, *a_g[:-1])[1](a_g[-1]), in_axes=ia + (0,), out_axes=0)

    def gov(*a_g):
        return jax.vjp(batched, *a_g[:-1])[1](a_g[-1])

    # jaxprs: the collectives bound, and (with a batch of PROBE) where the batch dim sits
    for key, fn, args in (("collectives", batched, G), ("collectives_grad_of_vmap", gov, G + [GC]),
                          ("collectives_vmap_of_grad", vog, G + [GC])):
        try:
            closed = jax.make_jaxpr(fn)(*args)
            rec[key] = collectives_json(closed)
            if key == "collectives":
                rec["body"] = [eqn_json(e) for b in shard_map_bodies(closed) for e in b.eqns]
        except Exception as e:
            rec[key + "_error"] = err(e)
    pkey = (name, n, ia, where)
    if pkey not in PROBED:
        PG = [put(mesh, np.zeros(_global_shape(s if a is None else insert(s, a, PROBE), gd, n), DT), (nd, gd))
              for s, a, nd, gd in zip(eshapes, in_axes, gnd, gdims)]
        PC = put(mesh, np.zeros(_global_shape(insert(oshape, 0, PROBE), godim, n), DT), (gond, godim))
        bd = {}
        for key, fn, args in (("forward", batched, PG), ("grad_of_vmap", gov, PG + [PC]),
                              ("vmap_of_grad", vog, PG + [PC])):
            try:
                bd[key] = batch_dims_json(jax.make_jaxpr(fn)(*args))
            except Exception as e:
                bd[key] = err(e)
        PROBED[pkey] = bd
    rec["batch_dims"] = PROBED[pkey]

    # per-element references (JAX's own kernels on the unbatched program)
    ref_out, ref_grads, ref_err = [], [], None
    for i in range(k):
        el = [b if a is None else [np.take(x, i, axis=a) for x in b] for b, a in zip(blocks, in_axes)]
        EG = [put(mesh, to_global(b, d), (len(s), d)) for b, d, s in zip(el, dims, eshapes)]
        EC = put(mesh, to_global([c[i] for c in cot], odim), (len(oshape), odim))
        try:
            ref_out.append(to_blocks(ref_fwd(*EG), odim, n))
            ref_grads.append([to_blocks(g, d, n) for g, d in zip(ref_bwd(*EG, EC), dims)])
        except Exception as e:
            ref_err = err(e)
            break
    if ref_err:
        rec["unbatched_error"] = ref_err

    def same(xs, ys):
        return all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(xs, ys))

    # forward
    try:
        out = to_blocks(jax.jit(batched)(*G), godim, n)
        rec["forward"] = [enc(o) for o in out]
        rec["v1_forward"] = (same(out, [np.stack([ref_out[i][r] for i in range(k)]) for r in range(n)])
                             if not ref_err else None)
    except Exception as e:
        rec["forward_error"] = err(e)
        rec["v1_forward"] = None

    # grad of vmap: a batched input's gradient against the per-element ones stacked at in_axes,
    # an unbatched one's against their sum
    try:
        grads = jax.jit(gov)(*G, GC)
        gb = [to_blocks(g, gd, n) for g, gd in zip(grads, gdims)]
        rec["grad_of_vmap"] = [[enc(x) for x in b] for b in gb]
        if ref_err:
            rec["v1_grad_of_vmap"] = None
        else:
            ok = True
            for j, a in enumerate(in_axes):
                per = [[ref_grads[i][j][r] for i in range(k)] for r in range(n)]
                want = [np.stack(p, axis=a) if a is not None else np.sum(p, axis=0) for p in per]
                ok = ok and same(gb[j], want)
            rec["v1_grad_of_vmap"] = bool(ok)
    except Exception as e:
        rec["grad_of_vmap_error"] = err(e)
        rec["v1_grad_of_vmap"] = None

    # vmap of grad: every gradient stacked at 0
    try:
        grads = jax.jit(vog)(*G, GC)
        vb = [to_blocks(g, shifted(d, 0), n) for g, d in zip(grads, dims)]
        rec["vmap_of_grad"] = [[enc(x) for x in b] for b in vb]
        if ref_err:
            rec["v1_vmap_of_grad"] = None
        else:
            rec["v1_vmap_of_grad"] = bool(all(
                same(vb[j], [np.stack([ref_grads[i][j][r] for i in range(k)]) for r in range(n)])
                for j in range(len(inputs))))
    except Exception as e:
        rec["vmap_of_grad_error"] = err(e)
        rec["v1_vmap_of_grad"] = None
    return rec


PROBED = {}


def _global_shape(shape, dim, n):
    """A local block shape -> the global shape (dim None: Invariant, the same)."""
    s = list(shape)
    if dim is not None:
        s[dim] *= n
    return tuple(s)


def main():
    t0 = time.time()
    cases = []
    for prog in PROGRAMS:
        for n in (2, 4):
            for in_axes in in_axes_catalogue(prog[1], n):
                for k in (1, 2):
                    for where in ("inside", "outside"):
                        cases.append(one_case(prog, n, k, in_axes, where))
        print(f"{prog[0]}: {len(cases)} cases, {time.time() - t0:.1f} s", file=sys.stderr)
    doc = {"jax_version": jax.__version__, "recorded_by": "peers/record_vmap_programs_jax.py", "command": COMMAND,
           "dtype": "float64", "mesh": "jax.make_mesh((n,), ('x',), axis_types=(AxisType.Explicit,)), CPU devices",
           "value_encoding": "peers/registry_values.py encode: shape 'x'-joined, ':', row-major values "
                             "(e.g. 2x3:1,2,3,4,5,6); per-rank lists are indexed by rank",
           "cases": cases}
    path = os.path.abspath(OUT)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n")
    bad = [c for c in cases if any(c.get(v) is False for v in ("v1_forward", "v1_grad_of_vmap", "v1_vmap_of_grad"))
           or any(k.endswith("_error") for k in c)]
    print(f"{len(cases)} cases, {len(bad)} with a V1 break or an error; {time.time() - t0:.1f} s -> {path}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
