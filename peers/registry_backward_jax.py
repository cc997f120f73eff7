"""JAX's transposes of its primitives (SPEC.md §22.6), on recorded
instances: the elementwise family, and the reductions, contractions and
shape primitives that registry_tensor_jax.py records.

For every claim of a registry file of these families (an elementwise
claim's inputs all varying (S(0)), or all among invariant/reduced (R) and
unreduced (P(sum)): bound directly, JAX refuses an invariant operand
beside a varying one, so every claim is of this kind; one that were not
is skipped, since its invariant operand would stand for its tiling; a
claim of the other families has no varying input, since a varying output
of theirs is not a claim), on one mesh axis of 2 and of 4 devices, three
seeded instances each: per-rank inputs in the claim's states (values
multiples of 1/4 of distinct magnitudes), the primitive bound inside
`jax.shard_map(check_vma=True)`, and `jax.vjp` of it with a cotangent of
the output's cotangent state. Recorded as registry_backward_dtensor.py
records DTensor's: each gradient's state as a placement (varying S(0),
invariant or reduced R, unreduced P(sum)) and its per-rank values, and
the gradient `jax.vjp` gives for the primitive on the global arrays.
Only variants with float64 inputs are recorded, and of the tensor
families only those with a float64 output (argmax's integer output has no
gradient).

Usage: registry_backward_jax.py FILE [GLOB]: adds `backward` to FILE's
entries of these families in place.
"""

import fnmatch
import random
import sys

import numpy as np

import record_registry_jax as rr
import record_jax as rj
from registry_values import attach, encode, finish, instances, load_doc

import jax  # noqa: E402  (configured by record_registry_jax)

SIZES = (2, 4)
FAMILIES = ("elementwise", "reduction", "shape", "contraction")
INSTANCES = 3
STATE = {"S(0)": "Varying", "P(sum)": "Unreduced"}
COT = {"Varying": "Varying", "Invariant": "Invariant", "Unreduced": "Reduced", "Reduced": "Unreduced"}
PLACE = {"Varying": "S(0)", "Invariant": "R", "Reduced": "R", "Unreduced": "P(sum)"}


def bind_with(prim, params):
    """The primitive bound with fixed parameters, or with parameters that
    follow its inputs' shapes (a function of them)."""
    if callable(params):
        return lambda *v: prim.bind(*v, **params([list(x.shape) for x in v]))
    return lambda *v: prim.bind(*v, **params)


def lookup():
    """(op, args) -> (bind, local shapes of the inputs) for every float64
    variant: elementwise (inputs of 2 elements per rank) and tensor."""
    import registry_tensor_jax as rt
    out = {}
    for prim, _, text, _, dts, params, local in rt.variants(rt.all_by_name(rr.all_prims())):
        if all(d == rr.F64 for d in dts):
            out[(f"lax.{prim.name}", text)] = (bind_with(prim, params), local)
    for mod, prim in rr.all_prims():
        if prim.name in rr.TENSOR or prim.name in rr.COMPLEX or not rr.is_elementwise(mod, prim):
            continue
        for text, fn, k, dts_list in rr.variants(prim):
            dts = (dts_list or [(rr.F64,) * k])[0]
            if any(d != rr.F64 for d in dts):
                continue
            try:
                params = rr.params_of(prim, fn, dts)
            except Exception:
                continue
            out[(f"lax.{prim.name}", text)] = (bind_with(prim, params), [[2]] * k)
    return out


def text(a):
    a = np.asarray(a, dtype=np.float64)
    return encode(list(a.shape), a.reshape(-1).tolist())


def shards(arr, n):
    ss = sorted(arr.addressable_shards, key=lambda s: s.device.id)
    return [np.asarray(s.data) for s in ss][:n]


def per_rank_values(state, n, draw, shape):
    split = state in ("Varying", "Unreduced")
    size = int(np.prod(shape))
    base = [draw() for _ in range(size)]
    return [np.array([draw() for _ in range(size)] if split else base, dtype=np.float64).reshape(shape)
            for _ in range(n)]


def global_of(state, xs):
    if state == "Varying":
        return np.concatenate(xs)
    if state == "Unreduced":
        return np.sum(xs, axis=0)
    return xs[0]


def out_state_of(bind, states, xs, n):
    """The state and local shape JAX types the primitive's output, on
    these inputs."""
    mesh = rj.mesh_of({"x": n})
    ents = [rj.enter(mesh, s, list(x)) for s, x in zip(states, xs)]
    seen = {}

    def body(*args):
        vs = [rj.cast(a, s, ("x",)) for a, s in zip(args, states)]
        t = rj.type_of(bind(*vs), ("x",))
        seen["out"] = (t["state"], t["shape"])
        return ()

    jax.eval_shape(jax.shard_map(body, mesh=mesh, in_specs=tuple(s for _, s in ents), out_specs=()),
                   *[a for a, _ in ents])
    return seen["out"]


def instance(bind, states, shapes, n, rng):
    pool = rng.sample(range(1, 200), 120)

    def draw():
        return rng.choice((-1, 1)) * (pool.pop() if pool else rng.randrange(1, 200)) / 4

    xs = [per_rank_values(s, n, draw, shape) for s, shape in zip(states, shapes)]
    out, out_shape = out_state_of(bind, states, xs, n)
    cot = COT[out]
    cts = per_rank_values(cot, n, lambda: rng.choice((-2, -1.5, -1, -0.5, 0.5, 1, 1.5, 2)), out_shape)
    rec = {"n": n, "cotangent_placement": PLACE[cot], "inputs": [[text(t) for t in x] for x in xs],
           "cotangent": [text(t) for t in cts]}
    # The primitive on the global arrays, and its gradient: the reference.
    gx = [jax.numpy.asarray(global_of(s, x)) for s, x in zip(states, xs)]
    gy, vjp = jax.vjp(bind, *gx)
    want = vjp(jax.numpy.asarray(global_of(cot, cts)).reshape(gy.shape).astype(gy.dtype))
    rec["expected"] = [text(w) for w in want]
    rec["expected_zero"] = [False for _ in want]
    mesh = rj.mesh_of({"x": n})
    ents = [rj.enter(mesh, s, list(x)) for s, x in zip(states, xs)]
    cent = rj.enter(mesh, cot, list(cts))
    seen = {}

    def body(*args):
        vs = [rj.cast(a, s, ("x",)) for a, s in zip(args[:-1], states)]
        y, f = jax.vjp(bind, *vs)
        seen["out"] = rj.type_of(y, ("x",))
        gs = f(rj.cast(args[-1], cot, ("x",)).reshape(y.shape).astype(y.dtype))
        seen["grads"] = [rj.type_of(g, ("x",)) for g in gs]
        return tuple(gs)

    in_specs = tuple(s for _, s in ents) + (cent[1],)
    args = [a for a, _ in ents] + [cent[0]]
    try:
        jax.eval_shape(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=(rj.P(),) * len(xs)), *args)
    except Exception as err:
        if "grads" not in seen:
            return {"n": n, "cotangent_placement": PLACE[cot], "error": rj.first_line(err)}
    rec["chose"] = PLACE[seen["out"]["state"]]
    specs = tuple(rj.out_spec(t, ("x",)) for t in seen["grads"])
    res = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=specs))(*args)
    rec["grads"] = [{"placement": PLACE[t["state"]], "per_rank": [text(v) for v in shards(r, n)]}
                    for t, r in zip(seen["grads"], res)]
    return rec


def main():
    path = sys.argv[1]
    only = sys.argv[2] if len(sys.argv) > 2 else None
    doc = load_doc(path)
    prims = lookup()
    done = 0
    for e in doc["entries"]:
        if e["family"] not in FAMILIES or (only is not None and not fnmatch.fnmatchcase(e["op"], only)):
            continue
        e.pop("backward", None)
        base = e["args"].removesuffix(", R=reduced").removesuffix("R=reduced")
        r_as = "Reduced" if e["args"].endswith("R=reduced") else "Invariant"
        kernel = e.get("kernel") or e.get("tensor_kernel") or {}
        if (e["op"], base) not in prims or kernel.get("input_dtype") != "float64":
            continue
        if e["family"] != "elementwise" and kernel.get("output_dtype") != "float64":
            continue  # argmax, argmin: an integer output has no gradient
        bind, shapes = prims[(e["op"], base)]
        cases = []
        for c in e.get("claims") or []:
            ins = c[1:]
            if any(p.startswith("S(") for p in ins) and \
                    (e["family"] != "elementwise" or not all(p == "S(0)" for p in ins)):
                continue  # an invariant operand beside a varying one stands for its tiling
            states = [STATE.get(p, r_as) for p in ins]
            rng = random.Random(f"{e['op']}|{e['args']}|{c}")
            cases += instances(c, "R", SIZES, INSTANCES,
                               lambda n, states=states, rng=rng: instance(bind, states, shapes, n, rng),
                               describe=rj.first_line)
        done += attach(e, "backward", cases)
    finish(path, doc, done, "backward instances")


if __name__ == "__main__":
    main()
