"""JAX's collectives for the registry (SPEC.md §22.5): every public
collective of jax._src.lax.parallel, called through its jax.lax function
inside jax.shard_map(check_vma=True) on one mesh axis x of 2 and of 4
devices, for an input of each state (invariant, varying, unreduced,
reduced) and each variant of its parameters.

Per call this records what JAX does, not what we think it does:
- the output's state, or JAX's refusal (a tracing error);
- the primitives the call binds (the forward jaxpr, parameters included);
- the primitives its transpose binds (jax.linear_transpose of the call,
  made into a jaxpr on a cotangent of the output's cotangent state), and
  whether jax.vjp of the call runs;
- the per-rank values of both, on integer inputs and cotangents (exact in
  float64), so that the checker can confirm that its reading of those
  primitives computes what JAX computed before it judges the pair.

Usage: imported by record_registry_jax.py (`entries(only)`).
"""

import fnmatch
import sys

import jax
import numpy as np
from jax._src.lax import parallel as par

import record_jax as rj

lax = jax.lax

STATES = ("Invariant", "Varying", "Unreduced", "Reduced")
# The state of a cotangent: JAX pairs invariant with invariant, varying with
# varying, and reduced with unreduced.
COT = {"Invariant": "Invariant", "Varying": "Varying", "Unreduced": "Reduced", "Reduced": "Unreduced"}
SIZES = (2, 4)


def calls():
    """(name, args text, fn(x, n)) for every variant recorded."""
    out = [("psum", "", lambda x, n: lax.psum(x, "x")),
           ("pmean", "", lambda x, n: lax.pmean(x, "x")),
           ("pmax", "", lambda x, n: lax.pmax(x, "x")),
           ("pmin", "", lambda x, n: lax.pmin(x, "x")),
           ("unreduced_psum", "", lambda x, n: par.unreduced_psum(x, "x"))]
    for to in ("varying", "reduced", "unreduced"):
        out.append(("pcast", f"to={to}", lambda x, n, to=to: lax.pcast(x, "x", to=to)))
    for src in (0, 1):
        out.append(("pbroadcast", f"source={src}", lambda x, n, s=src: lax.pbroadcast(x, "x", s)))
    out.append(("ppermute", "perm=shift",
                lambda x, n: lax.ppermute(x, "x", [(i, (i + 1) % n) for i in range(n)])))
    out.append(("ppermute", "perm=partial", lambda x, n: lax.ppermute(x, "x", [(0, 1)])))
    out.append(("pshuffle", "perm=reverse", lambda x, n: lax.pshuffle(x, "x", list(reversed(range(n))))))
    for a in (0, 1):
        out.append(("pswapaxes", f"axis={a}", lambda x, n, a=a: lax.pswapaxes(x, "x", a)))
    for s in (0, 1):
        for c in (0, 1):
            for tiled in (True, False):
                out.append(("all_to_all", f"split_axis={s}, concat_axis={c}, tiled={tiled}",
                            lambda x, n, s=s, c=c, t=tiled: lax.all_to_all(x, "x", s, c, tiled=t)))
    for a in (0, 1):
        for tiled in (True, False):
            for to in ("varying", "invarying", "reduced"):
                out.append(("all_gather", f"axis={a}, tiled={tiled}, to={to}",
                            lambda x, n, a=a, tl=tiled, to=to: lax.all_gather(x, "x", axis=a, tiled=tl, to=to)))
            out.append(("psum_scatter", f"scatter_dimension={a}, tiled={tiled}",
                        lambda x, n, a=a, tl=tiled: lax.psum_scatter(x, "x", scatter_dimension=a, tiled=tl)))
    return out


# The primitives of jax._src.lax.parallel the recorded calls bind.
COVERED = {"psum", "pmax", "pmin", "ppermute", "pbroadcast", "all_to_all", "all_gather",
           "all_gather_invariant", "reduce_scatter", "psum_invariant", "all_gather_reduced",
           "unreduced_reduce_scatter", "unreduced_psum", "preduced", "vary_unreduced_cast"}


def not_recorded(name):
    """Why a primitive of jax._src.lax.parallel is not recorded."""
    if name.endswith("_start") or name.endswith("_done"):
        return "asynchronous halves of the recorded collectives"
    return {
        "axis_index": "takes no operand: nothing to type or transpose",
        "ragged_all_to_all": "ragged sizes per rank (issue 28)",
        "psend": "point-to-point, deprecated in jax.lax",
        "precv": "point-to-point, deprecated in jax.lax",
        "pbroadcast_dynamic": "a broadcast from a traced root index",
        "unreduced_pmax": "needs an unreduced value of kind max, which no jax.lax call makes",
        "unreduced_pmin": "needs an unreduced value of kind min, which no jax.lax call makes",
    }.get(name, "not reached by a recorded call")


def jsonable(v):
    if isinstance(v, (bool, int, str)) or v is None:
        return v
    if isinstance(v, (tuple, list)):
        return [jsonable(x) for x in v]
    if isinstance(v, (frozenset, set)):
        return sorted(jsonable(x) for x in v)
    if isinstance(v, (np.integer,)):
        return int(v)
    return str(v)


def eqns(jaxpr):
    """The primitives a jaxpr binds, in order: name, parameters, the
    literal or constant operands (pmean's division by the group size is
    one), the operands' shapes, and the state of the result."""
    out = []
    consts = dict(zip(jaxpr.jaxpr.constvars, jaxpr.consts))

    def value(x):
        try:
            x = np.asarray(x)
        except Exception:  # a residual of the enclosing trace: not a constant
            return None
        return x.item() if x.ndim == 0 else x.tolist()

    for e in jaxpr.jaxpr.eqns:
        lits = []
        for v in e.invars:
            if hasattr(v, "val"):
                lits.append(value(v.val))
            elif v in consts:
                lits.append(value(consts[v]))
            else:
                lits.append(None)
        rec = {"prim": e.primitive.name,
               "params": {k: jsonable(p) for k, p in sorted(e.params.items())},
               "operands": lits,
               "shapes": [list(getattr(v.aval, "shape", ())) for v in e.invars]}
        m = getattr(e.outvars[0].aval, "mat", None) if e.outvars else None
        if m is not None:  # the state of its result on x
            rec["out"] = ("Varying" if "x" in m.varying else "Unreduced" if "x" in m.unreduced
                          else "Reduced" if "x" in m.reduced else "Invariant")
        out.append(rec)
    return out


def per_rank_input(n, state):
    """Rank r's local (n, n) block: distinct integers for varying and
    unreduced values, the same on every rank for invariant and reduced."""
    split = state in ("Varying", "Unreduced")
    return [[[(r if split else 0) * n * n + i * n + j + 1 for j in range(n)] for i in range(n)]
            for r in range(n)]


def cotangent(n, state, shape):
    size = int(np.prod(shape)) if shape else 1
    split = state in ("Varying", "Unreduced")
    return [np.reshape([100 + 10 * (r if split else 0) * size + k for k in range(size)], shape).tolist()
            for r in range(n)]


def run(fn, n, state):
    """What JAX does for fn on an input of `state` on n devices."""
    mesh = rj.mesh_of({"x": n})
    axes = ("x",)
    x_pr = per_rank_input(n, state)
    xa, xs = rj.enter(mesh, state, x_pr)
    seen = {}

    def probe(x):
        x = rj.cast(x, state, axes)
        y = fn(x, n)
        seen["out"] = rj.type_of(y, axes)
        seen["fwd"] = eqns(jax.make_jaxpr(lambda v: fn(v, n))(x))
        return ()

    try:
        jax.make_jaxpr(jax.shard_map(probe, mesh=mesh, in_specs=(xs,), out_specs=(), check_vma=True))(xa)
    except Exception as e:
        if "out" not in seen:
            return {"refused": rj.first_line(e)}
    out_t = seen["out"]
    rec = {"output": out_t["state"], "forward": seen["fwd"], "input_per_rank": x_pr}
    cot = COT[out_t["state"]]
    c_pr = cotangent(n, cot, out_t["shape"])
    ca, cs = rj.enter(mesh, cot, c_pr)

    def body(x, c):
        x = rj.cast(x, state, axes)
        c = rj.cast(c, cot, axes)
        try:
            y, vjp = jax.vjp(lambda v: fn(v, n), x)
            (g,) = vjp(c)
        except Exception as e:
            seen["bwd_error"] = "jax.vjp raises " + rj.first_line(e)
            return (rj.lift(fn(x, n)),)
        # The transpose's primitives, traced on their own so that its
        # constants (pmean's n) are literals, not residual tracers; where
        # jax.linear_transpose refuses the cotangent jax.vjp takes (it wants
        # a reduced output's cotangent reduced, vjp unreduced), the
        # primitives of vjp's own closure. The values compared are vjp's.
        try:
            with jax.ensure_compile_time_eval():
                seen["bwd"] = eqns(jax.make_jaxpr(jax.linear_transpose(lambda v: fn(v, n), x))(c))
        except Exception:
            seen["bwd"] = eqns(jax.make_jaxpr(vjp)(c))
        seen["grad"] = rj.type_of(g, axes)
        return (rj.lift(y), rj.lift(g))

    def sm(outs):
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(xs, cs), out_specs=outs))

    try:
        jax.eval_shape(sm((rj.P(),) * 2), xa, ca)
    except Exception:
        pass  # the out_specs were wrong: the types are now known
    if "bwd_error" in seen:
        specs = (rj.out_spec(out_t, axes),)
    else:
        specs = (rj.out_spec(out_t, axes), rj.out_spec(seen["grad"], axes))
    rec["cotangent"] = cot
    rec["cotangent_per_rank"] = c_pr
    if "bwd_error" in seen:
        rec["backward_error"] = seen["bwd_error"]
    else:
        rec["backward"] = seen["bwd"]
        rec["grad"] = seen["grad"]["state"]
    try:
        res = sm(specs)(xa, ca)
    except Exception as e:  # typed, but XLA:CPU cannot run it
        rec["run_error"] = rj.first_line(e)
        return rec
    vals = [rj.per_rank(r, n) for r in res]
    rec["output_per_rank"] = vals[0]
    if "bwd_error" not in seen:
        rec["grad_per_rank"] = vals[1]
    return rec


def entries(only):
    """One registry entry per call variant: per input state, per mesh size,
    what JAX did."""
    out = []
    for name, text, fn in calls():
        op = f"lax.{name}"
        if only is not None and not fnmatch.fnmatchcase(op, only):
            continue
        cases = []
        for state in STATES:
            for n in SIZES:
                try:
                    rec = run(fn, n, state)
                except Exception as e:  # a failure after tracing: say so
                    rec = {"error": rj.first_line(e)}
                cases.append({"input": state, "n": n, **rec})
        accepted = sorted({c["input"] for c in cases if "output" in c})
        print(f"{op}({text}): accepts {', '.join(accepted) or 'nothing'}", file=sys.stderr)
        out.append({"op": op, "family": "collective", "schema": f"jax.lax.{name}(x, 'x'{', ' + text if text else ''})",
                    "args": text, "inputs": 1, "collective": cases})
    return out
