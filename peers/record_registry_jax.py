"""Record the typing rules JAX registers for its elementwise primitives.

For every primitive of jax._src.lax.lax and jax._src.lax.special that is
elementwise by construction (built by `unop`/`standard_unop`, whose shape
rule is the operand's shape, or by `naryop`/`standard_naryop`, whose shape
rule is `broadcasting_shape_rule`; plus convert_element_type, clamp,
select_n, reduce_precision, bitcast_convert_type, integer_pow, polynomial
and copy, which bring their own rules), and for every variant of its
parameters that changes the answer, this writes:

- the primitive's claims on a one-axis mesh: for each assignment of the
  states invariant (R), varying (S(0)) and unreduced (P(sum)) to its tensor
  inputs, the type JAX infers for `prim.bind(...)` inside
  `jax.shard_map(check_vma=True)` on a 2-device Explicit mesh (the
  primitive's own vma and unreduced/reduced rules; varying inputs enter as
  P('x'), unreduced ones are cast there by `jax.lax.pcast(to='unreduced')`
  as peers/record_jax.py does). Output varying is S(0), unreduced of kind
  sum is P(sum), invariant or reduced is R; a tracing error is a refusal,
  no claim. The primitive is bound directly, not through its jax.lax
  wrapper: the wrappers insert `pvary` on invariant operands of a varying
  computation, a cast whose global meaning (a tile) the registry does not
  model.
  JAX's Reduced type is invariant too (one value on every rank); JAX's mul
  and div accept an unreduced operand only beside a reduced one. Each
  primitive is asked a second time with every R input realized as reduced
  (`pcast(to='reduced')`); where that gives other claims, they are written
  as a second entry with `R=reduced` in its args.
- the real kernel's values: the primitive bound once, outside shard_map,
  on float64 arrays holding every point of the dyadic grid of
  record_registry_dtensor.py (k/8 with |k/8| <= 8 for one or two inputs,
  k/2 for three), or on int64 at the integer points if float64 is refused;
  the same exactness window and "nan"/"inf" encoding, null where float64
  does not hold the value exactly, and the shuffled-order check.

Everything else jax._src.lax registers is counted in `not_recorded`, by
family. Usage: record_registry_jax.py RAW [GLOB]; peers/record_registry.sh
prunes RAW into tests/fixtures/registry/jax.json with `spmd-check registry
jax --file RAW --record FIXTURE`. Run under the pinned JAX (0.12.0.1).
"""

import fnmatch
import functools
import importlib
import itertools
import json
import os
import pkgutil
import sys
from fractions import Fraction

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax._src import core  # noqa: E402
from jax._src.lax import lax as L  # noqa: E402
from jax._src.lax import special as S  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from registry_values import exact  # noqa: E402

jax.config.update("jax_enable_x64", True)
lax = jax.lax

STATES = {"R": "invariant", "S(0)": "varying", "P(sum)": "unreduced"}


# ------------------------------------------------------------ the dyadic grid
# As record_registry_dtensor.py writes it (that script needs torch).

def grid(step_den, bound):
    n = bound * step_den
    return [Fraction(k, step_den) for k in range(-n, n + 1)]


def shuffled(n):
    """A fixed permutation of range(n)."""
    return np.random.RandomState(0).permutation(n)


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f":
        return np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(np.nan_to_num(a), np.nan_to_num(b))
    return np.array_equal(a, b)


def first_line(e):
    s = str(e).strip()
    return f"{type(e).__name__}: {s.splitlines()[0][:200] if s else ''}"


# ------------------------------------------------------- which are elementwise

def rules(prim):
    """The arguments `standard_primitive` gave the primitive's abstract eval
    (shape_rule, dtype_rule, ...), or None."""
    ae = getattr(prim, "abstract_eval", None)
    for c in getattr(ae, "__closure__", None) or ():
        p = c.cell_contents
        if isinstance(p, functools.partial) and getattr(p.func, "__name__", "") == "standard_abstract_eval":
            return p.args
    return None


def shape_kind(prim):
    """'unop' (the operand's shape), ('nary', k) (broadcasting over k
    operands) or None."""
    r = rules(prim)
    if r is None:
        return None
    shape_rule, dtype_rule = r[1], r[2]
    if isinstance(shape_rule, functools.partial) and shape_rule.func is L.broadcasting_shape_rule:
        if isinstance(dtype_rule, functools.partial) and dtype_rule.func is L.naryop_dtype_rule:
            return ("nary", len(dtype_rule.args[1]))
        return ("nary", None)
    cells = [c.cell_contents for c in getattr(shape_rule, "__closure__", None) or ()]
    if getattr(shape_rule, "__name__", "") == "<lambda>" and cells == ["shape"]:
        return "unop"
    return None


# Elementwise primitives with rules of their own (not unop/naryop), and the
# tensor inputs each is recorded with.
OWN = {"convert_element_type": 1, "clamp": 3, "select_n": 3, "reduce_precision": 1,
       "bitcast_convert_type": 1, "copy": 1, "polynomial": 3}
# Elementwise, but on complex numbers only: no real grid to record on.
COMPLEX = {"complex", "real", "imag", "conj"}

F64, I64, BOOL = np.dtype("float64"), np.dtype("int64"), np.dtype("bool")


def public(name):
    """The jax.lax function that binds the primitive, if there is one."""
    alias = {"not": "bitwise_not", "and": "bitwise_and", "or": "bitwise_or",
             "xor": "bitwise_xor", "regularized_incomplete_beta": "betainc"}
    for m in (lax, L, S):
        f = getattr(m, alias.get(name, name), None)
        if callable(f) and not isinstance(f, core.Primitive):
            return f
    return None


def variants(prim):
    """(args text, the call on jax values, tensor inputs, input dtypes to
    try) per recorded variant."""
    name = prim.name
    f = public(name)
    if name == "integer_pow":
        return [(f"y={y}", (lambda x, y=y: lax.integer_pow(x, y)), 1, None) for y in (-2, -1, 0, 1, 2, 3)]
    if name == "round":
        return [(f"rounding_method={m.name}", (lambda x, m=m: lax.round(x, m)), 1, None)
                for m in (lax.RoundingMethod.AWAY_FROM_ZERO, lax.RoundingMethod.TO_NEAREST_EVEN)]
    if name == "convert_element_type":
        # Target dtypes whose values on the grid need no wraparound (as for
        # DTensor's to.dtype): the model sums exactly.
        # float64 to float64 is left out: JAX forwards the operand and
        # binds nothing (a convert_element_type_p.bind included).
        return [(f"new_dtype={d}", (lambda x, d=d: lax.convert_element_type(x, np.dtype(d))), 1, [(F64,)])
                for d in ("int64", "int32", "float32", "bfloat16", "float16")]
    if name == "reduce_precision":
        return [(f"exponent_bits={e}, mantissa_bits={m}", (lambda x, e=e, m=m: lax.reduce_precision(x, e, m)), 1, None)
                for e, m in ((8, 7), (5, 10))]
    if name == "bitcast_convert_type":
        return [("new_dtype=int64", (lambda x: lax.bitcast_convert_type(x, np.int64)), 1, [(F64,)])]
    if name == "select_n":
        # `which` is boolean: its rows are 0 and 1 only.
        return [("", (lambda w, a, b: lax.select_n(w, a, b)), 3, [(BOOL, F64, F64), (BOOL, I64, I64)])]
    if name == "polynomial":
        # Two tensor coefficients: a0 + x * a1 (Horner), three tensor inputs.
        return [("", (lambda x, a0, a1: lax.polynomial(x, [a0, a1])), 3, None)]
    if name == "copy":
        return [("", (lambda x: L.copy_p.bind(x)), 1, None)]
    k = OWN.get(name)
    if k is None:
        kind = shape_kind(prim)
        k = 1 if kind == "unop" else kind[1]
    if f is None:
        return [("", (lambda *xs: prim.bind(*xs)), k, None)]
    return [("", f, k, None)]


def params_of(prim, fn, dts):
    """The primitive's params in a call of fn on arrays of dtypes dts, read
    from the jaxpr; raises if fn refuses them or never binds prim."""
    xs = [np.ones(2, d) for d in dts]
    jaxpr = jax.make_jaxpr(fn)(*xs)
    for e in jaxpr.eqns:
        if e.primitive is prim:
            return dict(e.params)
    raise TypeError(f"{prim.name}: the call does not bind it on {[str(d) for d in dts]}")


# ------------------------------------------------------------------ the typing

MESH = Mesh(np.array(jax.devices()[:2]), ("x",), axis_types=(AxisType.Explicit,))


def enter(state, dtype):
    """A global array and in_spec that enter shard_map in `state` (before
    the cast to unreduced or reduced)."""
    split = state in ("varying", "unreduced")
    g = np.ones(4 if split else 2, dtype)
    spec = P("x") if split else P()
    return jax.device_put(g, NamedSharding(MESH, spec)), spec


def out_place(m):
    if "x" in m.varying:
        return "S(0)"
    if "x" in m.unreduced:
        kind = getattr(m.unreduced_kind, "name", "sum")
        return f"P({kind})"
    return "R"


def ask(prim, params, states, dts):
    """The placement JAX types prim's output for inputs in `states`, or
    None when it refuses."""
    ents = [enter(s, d) for s, d in zip(states, dts)]
    seen = {}

    def body(*xs):
        vs = []
        for x, s in zip(xs, states):
            if s == "unreduced":
                x = lax.pcast(x, "x", to="unreduced")
            elif s == "reduced":
                x = lax.pcast(x, "x", to="reduced")
            vs.append(x)
        y = prim.bind(*vs, **params)
        seen["out"] = out_place(jax.typeof(y).mat)
        return ()

    sm = jax.shard_map(body, mesh=MESH, in_specs=tuple(s for _, s in ents), out_specs=(), check_vma=True)
    try:
        jax.make_jaxpr(sm)(*[a for a, _ in ents])
    except Exception as e:  # a refusal, unless the output was typed first
        if "out" not in seen:
            return None, first_line(e)
    return seen["out"], None


def claims(prim, params, k, dts, r_as):
    out, refusals = [], {}
    for ins in itertools.product(STATES, repeat=k):
        if all(p == "R" for p in ins):
            continue  # holds for every op; the checker drops it
        states = [r_as if p == "R" else STATES[p] for p in ins]
        o, why = ask(prim, params, states, dts)
        if o is None:
            refusals[", ".join(ins)] = why
        else:
            out.append([o, *ins])
    return out, refusals


# ------------------------------------------------------------------ the kernel

def kernel(prim, params, k, dts):
    """The primitive on every grid point (float64 points; int64 on the
    integer points; booleans on 0 and 1), or why not."""
    pts = grid(8, 8) if k <= 2 else grid(2, 8)
    cols_pts = []
    for d in dts:
        if d == BOOL:
            cols_pts.append([Fraction(0), Fraction(1)])
        elif d == I64:
            cols_pts.append([p for p in pts if p.denominator == 1])
        else:
            cols_pts.append(pts)
    rows = list(itertools.product(*cols_pts))
    cols = [np.array([float(r[i]) for r in rows], dtype=np.float64).astype(d) for i, d in enumerate(dts)]
    perm = shuffled(len(rows))
    try:
        y = np.asarray(prim.bind(*[jax.numpy.asarray(c) for c in cols], **params))
        y_perm = np.asarray(prim.bind(*[jax.numpy.asarray(c[perm]) for c in cols], **params))
    except Exception as e:
        return None, first_line(e)
    if y.shape != cols[0].shape:
        return None, f"returned shape {y.shape}"
    if not same(y[perm], y_perm):
        return None, "not elementwise (permuted inputs, other values)"
    out_dtype = str(y.dtype)
    if y.dtype.kind == "f":
        vals = y.astype(np.float64).tolist()
    elif y.dtype.kind == "c":
        return None, f"complex output ({out_dtype})"
    else:
        vals = y.tolist()
    out = [[str(x) for x in r] + [exact(v)] for r, v in zip(rows, vals)]
    in_dtype = str(dts[0]) if len(set(dts)) == 1 else ",".join(str(d) for d in dts)
    return {"input_dtype": in_dtype, "output_dtype": out_dtype, "rows": out}, None


# -------------------------------------------------------------- what is left

def family(mod, prim):
    """Why a primitive of jax._src.lax is not recorded, as a family."""
    n = prim.name
    if mod.endswith(".parallel"):
        import registry_collectives_jax as rc
        if n in rc.COVERED:
            return None
        return "collective: " + rc.not_recorded(n)
    if mod.endswith(".linalg"):
        return "linear algebra"
    if mod.endswith(".fft"):
        return "fft"
    if ".control_flow" in mod:
        return "cumulative reduction" if n.startswith("cum") else "control flow"
    if n.startswith("reduce") or n.startswith("argm") or "reduce_window" in n or n.startswith("select_and"):
        return "reduction"
    if n in ("dot_general", "ragged_dot_general", "conv_general_dilated", "scaled_dot"):
        return "contraction (dot_general and kin)"
    if n in ("broadcast_in_dim", "reshape", "transpose", "concatenate", "pad", "squeeze", "rev", "tile", "stack",
             "unstack", "split", "slice", "dynamic_slice", "dynamic_update_slice", "gather", "iota", "sort",
             "top_k", "approx_top_k") or n.startswith("scatter"):
        return "shape, layout or indexing"
    if n.startswith("rng"):
        return "random numbers"
    return "other (tokens, effects, extended dtypes, staging)"


def all_prims():
    import jax._src.lax as pkg
    seen = {}
    for m in pkgutil.walk_packages(pkg.__path__, "jax._src.lax."):
        try:
            mod = importlib.import_module(m.name)
        except Exception:  # a backend-only module: not importable here
            continue
        for v in vars(mod).values():
            if isinstance(v, core.Primitive) and id(v) not in seen:
                seen[id(v)] = (m.name, v)
    return sorted(seen.values(), key=lambda t: t[1].name)


def is_elementwise(mod, prim):
    if mod not in ("jax._src.lax.lax", "jax._src.lax.special"):
        return False
    return prim.name in OWN or prim.name == "integer_pow" or shape_kind(prim) is not None


def entry_for(prim, text, fn, k, dts_list):
    """The entries of one variant (a second with `R=reduced` where that
    realization of R gives other claims), or (None, why)."""
    errors = []
    for dts in dts_list or [(F64,) * k, (I64,) * k]:
        try:
            params = params_of(prim, fn, dts)
        except Exception as e:
            errors.append(f"{','.join(map(str, dts))}: {first_line(e)}")
            continue
        tab, why = kernel(prim, params, k, dts)
        schema = f"{prim.name}({', '.join(f'x{i}: {d}' for i, d in enumerate(dts))}; " + \
            ", ".join(f"{p}={v!r}" for p, v in sorted(params.items())) + ")"
        call = {"primitive": prim.name, "params": {p: str(v) for p, v in sorted(params.items())},
                "dtypes": [str(d) for d in dts]}
        base = {"op": f"lax.{prim.name}", "family": "elementwise", "schema": schema, "args": text,
                "inputs": k}
        out = []
        first = None
        for r_as in ("invariant", "reduced"):
            cl, refusals = claims(prim, params, k, dts, r_as)
            if r_as == "reduced" and sorted(cl) == sorted(first):
                break
            if r_as == "invariant":
                first = cl
            e = dict(base)
            if r_as == "reduced":
                e["args"] = ", ".join(a for a in (text, "R=reduced") if a)
            e["claims"] = cl
            e["call"] = {**call, "R": r_as, "refused": refusals}
            if tab is None:
                e["kernel_error"] = why
            else:
                e["kernel"] = tab
            out.append(e)
        return out, None
    return None, "; ".join(errors)


def tensor_entries(prims, only):
    """The reductions, contractions and shape primitives
    (peers/registry_tensor_jax.py): entries with claims and an empty
    `tensor_kernel`, and the skipped variants."""
    import registry_tensor_jax as rt
    entries, skipped = [], []
    for prim, fam, text, ranks, dts, params, local in rt.variants(prims):
        name = f"lax.{prim.name}"
        if only is not None and not fnmatch.fnmatchcase(name, only):
            continue
        out_dt, why = rt.probe(prim, params, local, dts)
        ps = params(local)
        schema = f"{prim.name}({', '.join(f'x{i}: {d}[rank {r}]' for i, (d, r) in enumerate(zip(dts, ranks)))}; " + \
            ", ".join(f"{p}={v!r}" for p, v in sorted(ps.items())) + ")"
        base = {"op": name, "family": fam, "schema": schema, "args": text, "inputs": len(ranks)}
        first = None
        n = 0
        for r_as in ("invariant", "reduced"):
            cl, refused, no_place = rt.claims_of(MESH, prim, params, ranks, local, dts, r_as)
            if r_as == "reduced" and sorted(cl) == sorted(first):
                break
            if r_as == "invariant":
                first = cl
            e = dict(base)
            if r_as == "reduced":
                e["args"] = f"{text}, R=reduced"
            # A varying output names no dim and promises nothing about the
            # global value (shard_map is per-device): not a claim the
            # checker can hold JAX to. Listed as not modelled.
            e["claims"] = [c for c in cl if not c[0].startswith("S(")]
            varying = [c for c in cl if c[0].startswith("S(")]
            if varying:
                e["unmodelled"] = varying
            e["call"] = {"primitive": prim.name, "params_on": {"local shapes": local,
                                                               **{p: str(v) for p, v in sorted(ps.items())}},
                         "dtypes": [str(d) for d in dts], "R": r_as, "refused": refused,
                         "no_placement": no_place}
            if out_dt is None:
                e["kernel_error"] = why
            else:
                in_dt = str(dts[0]) if len(set(dts)) == 1 else ",".join(str(d) for d in dts)
                e["tensor_kernel"] = {"input_dtype": in_dt, "output_dtype": out_dt, "ranks": ranks,
                                      "shapes": [], "calls": []}
            entries.append(e)
            n += len(cl)
        print(f"{name}({text}): {n} claims", file=sys.stderr)
    return entries, skipped


def fill_main(raw_path, want_path):
    """Bind the primitives where a run wanted them (registry_tensor_jax)."""
    import registry_tensor_jax as rt
    with open(raw_path) as f:
        doc = json.load(f)
    with open(want_path) as f:
        want = json.load(f)
    by = {(f"lax.{prim.name}", text): (prim, params)
          for prim, _, text, _, _, params, _ in rt.variants(rt.all_by_name(all_prims()))}
    for w in want["wanted"]:
        e = doc["entries"][w["index"]]
        assert e["op"] == w["op"] and e["args"] == w["args"], (e["op"], w["op"])
        prim, params = by[(e["op"], e["args"].removesuffix(", R=reduced"))]
        rt.fill(e, w, prim, params)
    with open(raw_path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"filled {want['shapes']} shapes and {want['calls']} calls", file=sys.stderr)


# Primitives of jax._src.lax recorded call by call (registry_tensor_jax.py).
TENSOR = {"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or", "reduce_xor",
          "argmax", "argmin", "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp", "dot_general",
          "transpose", "reshape", "squeeze", "broadcast_in_dim", "concatenate", "rev", "slice"}


def main():
    if sys.argv[1] == "fill":
        return fill_main(sys.argv[2], sys.argv[3])
    out_path = sys.argv[1]
    only = sys.argv[2] if len(sys.argv) > 2 else None
    entries, skipped, others = [], [], {}
    prims = all_prims()
    for mod, prim in prims:
        name = f"lax.{prim.name}"
        if prim.name in TENSOR:
            continue
        if not is_elementwise(mod, prim):
            key = family(mod, prim)
            if key is not None:  # None: a collective, recorded below
                others[key] = others.get(key, 0) + 1
            continue
        if only is not None and not fnmatch.fnmatchcase(name, only):
            continue
        if prim.name in COMPLEX:
            skipped.append({"op": name, "why": "elementwise on complex numbers only: no real grid"})
            continue
        for text, fn, k, dts_list in variants(prim):
            es, why = entry_for(prim, text, fn, k, dts_list)
            if es is None:
                skipped.append({"op": name + (f"({text})" if text else ""),
                                "why": f"no dtype tried is accepted: {why}"})
                continue
            entries.extend(es)
            print(f"{name}({text}): {len(es)} entries, {sum(len(e['claims']) for e in es)} claims", file=sys.stderr)
    import registry_tensor_jax as rt
    more, more_skipped = tensor_entries(rt.all_by_name(prims), only)
    entries.extend(more)
    skipped.extend(more_skipped)
    import registry_collectives_jax as rc
    entries.extend(rc.entries(only))
    import jaxlib
    doc = {
        "schema": "spmd-check-registry/1",
        "system": "jax",
        "versions": {"jax": jax.__version__, "jaxlib": jaxlib.__version__},
        "recorded_by": "peers/record_registry.sh",
        "mesh": "one axis x of 2 devices (XLA:CPU, AxisType.Explicit); each claim is the type "
                "prim.bind gets inside jax.shard_map(check_vma=True) for inputs invariant (R), "
                "varying (S(0)) or unreduced (P(sum)); `R=reduced`: R inputs realized as reduced",
        "entries": entries,
        "skipped": skipped,
        "not_recorded": dict(sorted(others.items())),
    }
    with open(out_path, "w") as fh:
        json.dump(doc, fh, separators=(",", ":"))


if __name__ == "__main__":
    main()
