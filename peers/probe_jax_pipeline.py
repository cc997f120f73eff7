"""Probe what the real JAX (0.12) does with the pipeline's pieces inside
jax.shard_map(check_vma=True) on a mesh {x: 4}, x64 enabled, and record it in
tests/fixtures/jax_pipeline_<jax version>.json (the conventions of
peers/exact.py: exact rationals as "p/q" strings, per-rank lists, a version
block).

For every probe: accepted, or the exception's type and first line (and the
whole message); the input and output types (vma / reduced / unreduced); the
primitives of the shard_map body (so inserted pvary / reduced_vary_cast show);
the per-rank output; and, for a cotangent of the output's cotangent type,
the per-rank values and types jax.vjp gives each operand.

Sections:
  a  x + y, x Invariant, y Varying (auto-inserted pvary and its transpose)
  b  x * y, both Unreduced (refused: bilinear)
  c  psum / all_gather / psum_scatter / ppermute / all_to_all of an Invariant value
  d  keyword parameters of the collectives; all_gather(to='invarying'|'reduced'),
     psum of an Unreduced value
  e  jax.lax.pcast from every state to every target
  f  neg / sub / abs of Unreduced, mul of Unreduced by Invariant (and by Reduced)

Inputs of a state enter shard_map as Varying (P('x')) or Invariant (P()) and
are cast inside by jax.lax.pcast, as in peers/record_jax.py, whose helpers
this script reuses.

Usage: python peers/probe_jax_pipeline.py   (writes the fixture; needs a JAX
with jax.lax.pcast and unreduced types, i.e. >= 0.10, and Python >= 3.12 for
0.11+.)
"""
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import inspect  # noqa: E402
import math  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import record_jax as R  # noqa: E402  (sets x64, the 4 CPU devices, the helpers)
from exact import tree, write  # noqa: E402

lax = jax.lax
N = 4
AXES = ("x",)
COT = R.COT  # the cotangent type of each output state


def err_of(e):
    msg = str(e).strip()
    return {"type": type(e).__name__, "first_line": R.first_line(e), "message": msg}


def trace(fn, ins, ct=None):
    """fn on inputs [(state, per_rank)] under shard_map on {x: 4}; with
    ct=(state, per_rank) also the vjp.  Returns (record, error dict)."""
    mesh = R.mesh_of({"x": N})
    entered = [R.enter(mesh, s, pr) for s, pr in ins]
    if ct is not None:
        entered.append(R.enter(mesh, ct[0], ct[1]))
    args = [a for a, _ in entered]
    in_specs = tuple(s for _, s in entered)
    seen = {}

    def body(*xs):
        vals = [R.cast(x, s, AXES) for x, (s, _) in zip(xs, ins)]
        seen.clear()
        seen["inputs"] = [R.type_of(v, AXES) for v in vals]
        if ct is None:
            y = fn(*vals)
            seen["out"] = [R.type_of(y, AXES)]
            return (R.lift(y),)
        y, vjp = jax.vjp(fn, *vals)
        seen["out"] = [R.type_of(y, AXES)]
        try:
            gs = vjp(R.cast(xs[-1], ct[0], AXES).reshape(jnp.shape(y)))
        except Exception as e:  # the transpose is refused: keep the forward
            seen["grad_error"] = err_of(e)
            return (R.lift(y),)
        seen["out"] += [R.type_of(g, AXES) for g in gs]
        return (R.lift(y), *map(R.lift, gs))

    def sm(outs):
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=outs,
                                     check_vma=True))

    try:
        jax.eval_shape(sm(P()), *args)
    except Exception as e:
        if "out" not in seen:
            return None, err_of(e)
    specs = tuple(R.out_spec(t, AXES) for t in seen["out"])
    try:
        res = sm(specs)(*args)
        prims = R.inner_prims(sm(specs), args)
    except Exception as e:  # traced, but refused when run / lowered
        return None, {**err_of(e), "stage": "run", "traced_types": seen.get("out")}
    vals = [[v if t["shape"] else v[0] for v in R.per_rank(r, N)] for r, t in zip(res, seen["out"])]
    rec = {"inputs": seen["inputs"], "output": seen["out"][0], "output_per_rank": vals[0],
           "jaxpr": prims}
    if ct is not None:
        rec["transpose_error"] = seen.get("grad_error")
        rec["transpose"] = [{**t, "per_rank": v} for t, v in zip(seen["out"][1:], vals[1:])]
    return rec, None


def default_ct(out):
    """Cotangent of the output's cotangent type: distinct per rank for
    Varying / Unreduced (rank r, element k: 100 (r+1) + k + 1), equal for
    Invariant / Reduced (7, 8, ...)."""
    st = COT[out["state"]]
    size = max(1, math.prod(out["shape"]))
    if st in ("Varying", "Unreduced"):
        pr = [[100 * (r + 1) + k + 1 for k in range(size)] for r in range(N)]
    else:
        pr = [[7 + k for k in range(size)] for _ in range(N)]
    return st, pr


def reshape_ct(ct, shape):
    import numpy as np
    return [np.asarray(c, dtype=np.float64).reshape(shape if shape else (1,)).tolist() for c in ct]


def probe(pid, call, fn, ins, ct=None, note=None):
    """Forward alone (its jaxpr shows what JAX inserted), then the vjp."""
    fwd, err = trace(fn, ins)
    case = {"id": pid, "call": call,
            "inputs": [{"state": s, "per_rank": tree(pr)} for s, pr in ins]}
    if note:
        case["note"] = note
    if fwd is None:
        case.update({"accepted": False, "error": err})
        return case
    out = fwd["output"]
    case.update({"accepted": True, "error": None, "input_types": fwd["inputs"],
                 "output": out, "output_per_rank": fwd["output_per_rank"],
                 "jaxpr_forward": fwd["jaxpr"]})
    st, pr = ct if ct is not None else default_ct(out)
    pr = reshape_ct(pr, out["shape"])
    bwd, berr = trace(fn, ins, (st, pr))
    case["cotangent"] = {"state": st, "per_rank": tree(pr) if out["shape"] else [tree(p)[0] for p in pr]}
    if bwd is None:
        case["transpose"] = None
        case["transpose_error"] = berr
        return case
    case["jaxpr_with_transpose"] = bwd["jaxpr"]
    case["transpose_error"] = bwd["transpose_error"]
    case["transpose"] = bwd["transpose"]
    return case


def V(width=1, scale=1):
    return [[scale * (r * width + k + 1) for k in range(width)] for r in range(N)]


def same(row):
    return [list(row) for _ in range(N)]


def inv4():
    return same([1, 2, 3, 4])


# ---------------------------------------------------------------- sections

def section_a():
    return [
        probe("a_add_I_V", "x + y  # x Invariant (P()), y Varying (P('x'))", lambda x, y: x + y,
              [("Invariant", same([1])), ("Varying", V(1, 10))],
              ("Varying", [[101], [201], [301], [401]])),
        probe("a_add_I_V_w2", "x + y  # x Invariant = [1, 2], y Varying, 2 elements",
              lambda x, y: x + y,
              [("Invariant", same([1, 2])), ("Varying", V(2, 10))],
              ("Varying", [[101, 102], [201, 202], [301, 302], [401, 402]])),
    ]


def section_b():
    return [
        probe("b_mul_U_U", "x * y  # both Unreduced", lambda x, y: x * y,
              [("Unreduced", V(1)), ("Unreduced", V(1, 10))]),
    ]


def section_c():
    perm = [(k, (k + 1) % N) for k in range(N)]
    I5 = ("Invariant", same([5]))
    return [
        probe("c_psum_I", "jax.lax.psum(x, 'x')  # x Invariant", lambda x: lax.psum(x, "x"), [I5]),
        probe("c_all_gather_tiled_I", "jax.lax.all_gather(x, 'x', axis=0, tiled=True)  # x Invariant",
              lambda x: lax.all_gather(x, "x", axis=0, tiled=True), [I5]),
        probe("c_all_gather_untiled_I", "jax.lax.all_gather(x, 'x', axis=0, tiled=False)  # x Invariant",
              lambda x: lax.all_gather(x, "x", axis=0, tiled=False), [I5]),
        probe("c_psum_scatter_tiled_I",
              "jax.lax.psum_scatter(x, 'x', scatter_dimension=0, tiled=True)  # x Invariant [1,2,3,4]",
              lambda x: lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True), [("Invariant", inv4())]),
        probe("c_psum_scatter_untiled_I",
              "jax.lax.psum_scatter(x, 'x', scatter_dimension=0, tiled=False)  # x Invariant [1,2,3,4]",
              lambda x: lax.psum_scatter(x, "x", scatter_dimension=0, tiled=False), [("Invariant", inv4())]),
        probe("c_ppermute_cycle_I", f"jax.lax.ppermute(x, 'x', perm={perm})  # x Invariant",
              lambda x: lax.ppermute(x, "x", perm), [I5]),
        probe("c_ppermute_partial_I", "jax.lax.ppermute(x, 'x', perm=[(0, 1)])  # x Invariant",
              lambda x: lax.ppermute(x, "x", [(0, 1)]), [I5]),
        probe("c_all_to_all_tiled_I", "jax.lax.all_to_all(x, 'x', 0, 0, tiled=True)  # x Invariant [1,2,3,4]",
              lambda x: lax.all_to_all(x, "x", 0, 0, tiled=True), [("Invariant", inv4())]),
        probe("c_all_to_all_untiled_I",
              "jax.lax.all_to_all(x, 'x', 0, 0, tiled=False)  # x Invariant [[1],[2],[3],[4]]",
              lambda x: lax.all_to_all(x, "x", 0, 0, tiled=False),
              [("Invariant", same([[1], [2], [3], [4]]))]),
    ]


def signatures():
    out = {}
    for name in ("psum", "pmean", "all_gather", "psum_scatter", "ppermute", "all_to_all", "pcast"):
        f = getattr(lax, name)
        sig = inspect.signature(f)
        out[name] = {"signature": str(sig),
                     "keyword_parameters": [p for p, v in sig.parameters.items()
                                            if v.kind in (v.KEYWORD_ONLY, v.POSITIONAL_OR_KEYWORD)
                                            and v.default is not inspect.Parameter.empty]}
    public = ["pvary", "pcast", "pbroadcast", "all_gather_invariant", "psum_invariant", "unreduced_psum",
              "unreduced_psum_scatter", "preduced", "all_gather_reduced", "vary_unreduced_cast",
              "reduced_vary_cast", "psum_scatter_start", "all_gather_start"]
    out["public_in_jax_lax"] = {n: hasattr(lax, n) for n in public}

    # the allowed values of `to`, as the functions themselves report them
    def bad_to(f):
        try:
            f()
        except Exception as e:
            return R.first_line(e)
        return None
    x = jnp.zeros((1,))
    out["all_gather"]["to_refusal"] = bad_to(lambda: lax.all_gather(x, "x", to="bogus"))
    out["pcast"]["to_refusal"] = bad_to(lambda: lax.pcast(x, "x", to="bogus"))
    from jax._src.lax import parallel
    out["pcast"]["allowed_to"] = sorted(parallel._allowed_pcast_to)
    out["pcast"]["routes"] = sorted(f"{a} -> {b}: {f.__name__}" for (a, b), f in parallel._pcast_funcs.items())
    return out


def section_d():
    V1 = ("Varying", V(1))
    U1 = ("Unreduced", V(1))
    I5 = ("Invariant", same([5]))
    return [
        probe("d_all_gather_invarying_tiled_V", "jax.lax.all_gather(x, 'x', axis=0, tiled=True, to='invarying')",
              lambda x: lax.all_gather(x, "x", axis=0, tiled=True, to="invarying"), [V1]),
        probe("d_all_gather_invarying_untiled_V",
              "jax.lax.all_gather(x, 'x', axis=0, tiled=False, to='invarying')",
              lambda x: lax.all_gather(x, "x", axis=0, tiled=False, to="invarying"), [V1]),
        probe("d_all_gather_invarying_tiled_I",
              "jax.lax.all_gather(x, 'x', axis=0, tiled=True, to='invarying')  # x Invariant",
              lambda x: lax.all_gather(x, "x", axis=0, tiled=True, to="invarying"), [I5]),
        probe("d_all_gather_reduced_tiled_V", "jax.lax.all_gather(x, 'x', axis=0, tiled=True, to='reduced')",
              lambda x: lax.all_gather(x, "x", axis=0, tiled=True, to="reduced"), [V1]),
        probe("d_all_gather_reduced_untiled_V",
              "jax.lax.all_gather(x, 'x', axis=0, tiled=False, to='reduced')",
              lambda x: lax.all_gather(x, "x", axis=0, tiled=False, to="reduced"), [V1]),
        probe("d_all_gather_reduced_tiled_I",
              "jax.lax.all_gather(x, 'x', axis=0, tiled=True, to='reduced')  # x Invariant",
              lambda x: lax.all_gather(x, "x", axis=0, tiled=True, to="reduced"), [I5]),
        probe("d_all_gather_varying_U",
              "jax.lax.all_gather(x, 'x', axis=0, tiled=True)  # x Unreduced",
              lambda x: lax.all_gather(x, "x", axis=0, tiled=True), [U1]),
        probe("d_psum_to_reduced_V", "jax.lax.psum(x, 'x', to='reduced')",
              lambda x: lax.psum(x, "x", to="reduced"), [V1]),
        probe("d_psum_scatter_to_reduced_V", "jax.lax.psum_scatter(x, 'x', tiled=True, to='reduced')",
              lambda x: lax.psum_scatter(x, "x", tiled=True, to="reduced"), [("Varying", V(4))]),
        probe("d_psum_U", "jax.lax.psum(x, 'x')  # x Unreduced: dispatches to unreduced_psum",
              lambda x: lax.psum(x, "x"), [U1]),
        probe("d_pmean_U", "jax.lax.pmean(x, 'x')  # x Unreduced",
              lambda x: lax.pmean(x, "x"), [U1]),
        probe("d_psum_scatter_tiled_U",
              "jax.lax.psum_scatter(x, 'x', scatter_dimension=0, tiled=True)  # x Unreduced",
              lambda x: lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True), [("Unreduced", V(4))]),
        probe("d_psum_R", "jax.lax.psum(x, 'x')  # x Reduced",
              lambda x: lax.psum(x, "x"), [("Reduced", same([5]))]),
        probe("d_psum_V", "jax.lax.psum(x, 'x')  # x Varying (reference)",
              lambda x: lax.psum(x, "x"), [V1]),
    ]


STATE_VALS = {"Invariant": same([5]), "Reduced": same([5]), "Varying": V(1), "Unreduced": V(1)}


def section_e():
    cs = []
    for src in ("Invariant", "Varying", "Reduced", "Unreduced"):
        for to in ("varying", "reduced", "unreduced", "invarying", "invariant"):
            cs.append(probe(f"e_pcast_{src[0]}_to_{to}", f"jax.lax.pcast(x, 'x', to='{to}')  # x {src}",
                            lambda x, to=to: lax.pcast(x, "x", to=to), [(src, STATE_VALS[src])]))
    return cs


def section_f():
    U1, U2 = ("Unreduced", V(1)), ("Unreduced", V(1, 10))
    I3, R3 = ("Invariant", same([3])), ("Reduced", same([3]))
    return [
        probe("f_neg_U", "-x  # x Unreduced", lambda x: -x, [U1]),
        probe("f_sub_U_U", "x - y  # both Unreduced", lambda x, y: x - y, [U1, U2]),
        probe("f_add_U_U", "x + y  # both Unreduced", lambda x, y: x + y, [U1, U2]),
        probe("f_abs_U", "jnp.abs(x)  # x Unreduced", lambda x: jnp.abs(x), [U1]),
        probe("f_sub_U_I", "x - y  # x Unreduced, y Invariant", lambda x, y: x - y, [U1, I3]),
        probe("f_mul_U_I", "x * y  # x Unreduced, y Invariant", lambda x, y: x * y, [U1, I3]),
        probe("f_mul_I_U", "x * y  # x Invariant, y Unreduced", lambda x, y: x * y, [I3, U1]),
        probe("f_mul_U_R", "x * y  # x Unreduced, y Reduced", lambda x, y: x * y, [U1, R3]),
        probe("f_mul_const_U", "2.0 * x  # x Unreduced", lambda x: 2.0 * x, [U1]),
        probe("f_mul_U_V", "x * y  # x Unreduced, y Varying", lambda x, y: x * y, [U1, ("Varying", V(1, 10))]),
    ]


PAR, CORE, LAX = "jax/_src/lax/parallel.py", "jax/_src/core.py", "jax/_src/lax/lax.py"
# Read by hand from the installed jax 0.12.0.1 wheel (site-packages); written
# into the fixture only when the running JAX is that version.
SOURCE_RULES_VERSION = "0.12.0.1"
SOURCE_RULES = {
    "auto_pcast": f"{PAR}:insert_collective_pvary (all_gather, psum_scatter, ppermute, all_to_all) and "
                  f"{PAR}:bind_psum_invariant (psum) and {PAR}:_all_gather_invariant pvary the missing axes "
                  "of a non-varying operand first when config jax_auto_pcast (default True) and check_vma; "
                  f"{CORE}:auto_insert_reshard does the same for binary lax ops (reduced_vary_cast when the "
                  "operand is Reduced on exactly the missing axes, else pvary)",
    "check_unreduced_args": f"{CORE}:check_unreduced_args: operand may be neither unreduced nor reduced on the "
                            "collective's axes, and any unreduced kind must be sum (used by psum_p, ppermute, "
                            "all_gather, reduce_scatter, all_to_all, all_gather_invariant, psum_invariant, pvary)",
    "collective_vma_rule": f"{PAR}:collective_vma_rule: every named axis must be in vma (else ValueError "
                           "'Collective X must be applied to a device-varying type'); out vma = in vma",
    "psum": {"dispatch": f"{PAR}:_psum_is_async: _get_from state of the axes: unreduced -> unreduced_psum, "
                         "else _psum -> bind_psum_invariant (check_vma) or psum_p (check_vma=False); "
                         "no `to` keyword",
             "typing": f"{PAR}:_psum_invariant_abstract_eval: axes must intersect vma; out vma = vma - axes",
             "transpose": f"{PAR}:_psum_invariant_transpose_rule: pvary(ct, axes)"},
    "psum_p (check_vma=False only)": {"transpose": f"{PAR}:_psum_transpose_rule: psum_p over the named axes"},
    "pvary": {"typing": f"{PAR}:_pvary_abstract_eval: axes must not be in vma, not unreduced/reduced on them; "
                        "out vma = vma | axes",
              "transpose": f"{PAR}:_pvary_transpose_rule: psum_invariant(ct, axes)"},
    "all_gather": {"dispatch": f"{PAR}:_all_gather_is_async: to in {{'varying','reduced','invarying'}}; "
                               "'varying' -> all_gather_p, 'invarying' -> all_gather_invariant_p, "
                               "'reduced' -> all_gather_reduced_p",
                   "typing": f"{PAR}:_all_gather_effectful_abstract_eval: collective_vma_rule; out vma = in vma",
                   "transpose": f"{PAR}:_all_gather_transpose_rule: psum_scatter(ct, same dim, same tiled)"},
    "all_gather_invariant": {"typing": f"{PAR}:_all_gather_invariant_effectful_abstract_eval: no vma check "
                                       "(the traceable pvaries first); out vma = vma - axes",
                             "transpose": f"{PAR}:_all_gather_invariant_transpose_rule: dynamic_slice of ct at "
                                          "axis_index * slice (squeezed if untiled): no communication"},
    "all_gather_reduced": {"typing": f"{PAR}:_all_gather_reduced_effectful_abstract_eval: operand must be "
                                     "varying on some axis named, not reduced on them, no auto pvary; out vma = "
                                     "vma - axes, reduced |= axes",
                           "transpose": f"{PAR}:_all_gather_reduced_transpose_rule: unreduced_psum_scatter"},
    "psum_scatter (reduce_scatter)": {
        "dispatch": f"{PAR}:_psum_scatter_is_async: unreduced operand -> unreduced_psum_scatter, else "
                    "reduce_scatter_p after insert_collective_pvary; no `to` keyword",
        "typing": f"{PAR}:_reduce_scatter_effectful_abstract_eval: collective_vma_rule; out vma = in vma",
        "transpose": f"{PAR}:_reduce_scatter_transpose_rule: all_gather(ct, axis=scatter_dimension, tiled)"},
    "unreduced_psum_scatter": {
        "typing": f"{PAR}:_unreduced_reduce_scatter_effectful_abstract_eval: operand unreduced (kind sum) on the "
                  "axes, not varying on them; out unreduced -= axes, vma |= axes",
        "transpose": f"{PAR}:_unreduced_reduce_scatter_transpose_rule: all_gather_reduced"},
    "unreduced_psum": {"typing": f"{PAR}:_unreduced_psum_pmax_pmin_abstract_eval: unreduced (kind sum) on the "
                                 "axes, not varying on them; out unreduced -= axes (Invariant)",
                       "transpose": f"{PAR}:_unreduced_psum_transpose_rule: preduced(ct)"},
    "unreduced_pmax / unreduced_pmin": {"typing": "same rule with kind max / min",
                                        "transpose": "none registered"},
    "ppermute": {"typing": f"{PAR}:_raise_to_shaped_abstract_eval: collective_vma_rule, check_unreduced_args; "
                           "type unchanged",
                 "transpose": f"{PAR}:_ppermute_transpose_rule: ppermute with the inverted pairs"},
    "all_to_all": {"typing": f"{PAR}:_all_to_all_effectful_abstract_eval: collective_vma_rule; out vma = in vma",
                   "transpose": f"{PAR}:_all_to_all_transpose_rule: all_to_all with split/concat swapped, "
                                "same tiled"},
    "preduced": {"typing": f"{PAR}:_preduced_abstract_eval: not varying, not already reduced on the axes; "
                           "reduced |= axes",
                 "transpose": f"{PAR}:_preduced_transpose_rule: unreduced_psum(ct)"},
    "vary_unreduced_cast": {"typing": f"{PAR}:_vary_unreduced_cast_abstract_eval: varying on the axes, not "
                                      "unreduced on them; vma -= axes, unreduced |= axes",
                            "transpose": f"{PAR}:_vary_unreduced_cast_transpose_rule: reduced_vary_cast(ct)"},
    "reduced_vary_cast": {"typing": f"{PAR}:_reduced_vary_cast_abstract_eval: reduced on the axes, not varying "
                                    f"on them; reduced -= axes, vma |= axes (traceable: {CORE}:reduced_vary_cast)",
                          "transpose": f"{PAR}:_reduced_vary_cast_transpose_rule: vary_unreduced_cast(ct)"},
    "pcast": {"where": f"{PAR}:pcast, _get_from, _pcast_funcs, _allowed_pcast_to",
              "to": ["varying", "reduced", "unreduced"],
              "legal": {"invarying -> varying": "pvary", "invarying -> reduced": "preduced",
                        "varying -> unreduced": "vary_unreduced_cast",
                        "reduced -> varying": "reduced_vary_cast"},
              "refused": "every other (from, to): ValueError 'Unsupported pcast from=F, to=T'; a `to` outside "
                         "the three: ValueError 'Got unexpected `to` value'; axes in mixed states: ValueError "
                         "from _get_from"},
    "local ops on Unreduced": {
        "neg": f"{LAX}:_neg_ur_rule: keeps unreduced (kind sum), linear transpose neg",
        "add/sub": f"{LAX}:_add_ur_rule: both unreduced on equal axes -> unreduced; exactly one unreduced -> "
                   "ShardingTypeError 'lhs is unreduced while rhs is not'",
        "mul": f"{LAX}:_mul_ur_rule: both unreduced -> 'cannot be unreduced since mul is bilinear'; one "
               "unreduced needs the other reduced on exactly those axes",
        "div": f"{LAX}:_div_ur_rule: denominator never unreduced; unreduced numerator needs denominator reduced "
               "on the same axes",
        "other unary ops (abs, ...)": f"{LAX}:unop_ur_rule: ShardingTypeError 'non-linear operation'",
        "other n-ary ops": f"{LAX}:nary_ur_rule: ShardingTypeError 'non-linear operation'"},
}


def header():
    h = R.header()
    h["recorded_by"] = "peers/probe_jax_pipeline.py"
    h["recorded_with"]["devices"] = N
    h["mesh"] = {"x": N}
    h["conventions"] = ("per_rank lists are indexed by rank (device r holds rank r); values are exact: "
                        "integers or 'p/q' strings (peers/exact.py); states per mesh axis read from "
                        "jax.typeof(v).mat; Reduced inputs are made by pcast(to='reduced') of an "
                        "Invariant input, Unreduced ones by pcast(to='unreduced') of a Varying input; "
                        "the cotangent has the output's cotangent type (Varying<->Varying, "
                        "Invariant<->Invariant, Reduced<->Unreduced) unless the section says otherwise")
    return h


def main():
    doc = {**header(), "signatures": signatures(),
           **({"source_rules": SOURCE_RULES} if jax.__version__ == SOURCE_RULES_VERSION else {}),
           # spmd-check fidelity reads every tests/fixtures/*.json and needs a
           # `cases` list: these probes are not replayable cases, so it is empty.
           "cases": [],
           "sections": {"a": section_a(), "b": section_b(), "c": section_c(), "d": section_d(),
                        "e": section_e(), "f": section_f()}}
    write(os.path.join(R.FIX, f"jax_pipeline_{jax.__version__}.json"), doc)


if __name__ == "__main__":
    main()
