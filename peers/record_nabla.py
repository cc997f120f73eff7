"""Record what the released Nabla (nabla-ml 26.2251344) does with partial,
replicated and sharded inputs of its local ops, on a simulated CPU mesh.

Run (SPEC.md §16.4; peers/README.md):

    /work/venv-nabla/bin/python peers/record_nabla.py \
        > tests/fixtures/nabla_typing_26.2251344.json

with the venv of peers/README.md ("Nabla as released"): nabla-ml 26.2251344
installed with --no-deps, the stable `max`/`modular` 26.3.0 (the registries
serve no Modular nightly, which nabla-ml asks for) and the two import-time
shims of peers/nabla_shims.py. Nothing of Nabla's sharding code is patched.

How a case is run. One mesh axis `x` of 2, 3 or 4 simulated CPU devices
(`DeviceMesh`, which puts every device on the host CPU when no accelerator
is there). Each operand is built from its exact per-rank local tensors
(`Tensor._create_unsafe` with one buffer per device) and a `ShardingSpec`:

  replicated  every dim `DimSpec([])`; every rank holds the same tensor
  sharded     dim 0 `DimSpec(["x"])`; rank r holds the r-th block of dim 0
  partial     every dim `DimSpec([])`, `partial_sum_axes={"x"}`: the value
              is the sum of the ranks' tensors (Nabla's "ghost" partial)

Where a sharded operand meets a replicated or partial one, those hold the
global shape (n times the block), as Nabla requires. Values are small
dyadic rationals in float64, so every result is exact but a mean over 3
ranks' worth of elements, written as the small rational whose float64 it
is (see `exact`); the recorder refuses any other number.

Per case it writes the op, the operands (state, Nabla's sharding, per-rank
tensors), and what Nabla did: the output's sharding (state per axis: the
partial axes, dims sharded), every op Nabla ran for the call in order
(`ops`: the op itself and any `shard`, `all_reduce`, `all_gather` it
inserted), the per-rank tensors the op's kernel received after Nabla's own
resharding (`seen_per_rank`), the per-rank output, or the error it raised.
"""

import itertools
import json
import os
import sys
from fractions import Fraction

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import nabla_shims  # noqa: E402

nb = nabla_shims.import_nabla()

import numpy as np  # noqa: E402
from max import driver  # noqa: E402
from max.dtype import DType  # noqa: E402
from nabla.core.sharding import spmd  # noqa: E402
from nabla.core.sharding.spec import DeviceMesh, DimSpec, ShardingSpec  # noqa: E402
from nabla.ops import base as ops_base  # noqa: E402

# Every case is traced first and realized in one graph (see realize_pending):
# MAX compiles each graph in tens of seconds on the recording host, which
# case by case took hours for the sharded cases. NABLA_RECORD_SHARDED=0
# leaves sharded operands out.
STATES = ["replicated", "sharded", "partial"]
if os.environ.get("NABLA_RECORD_SHARDED") == "0":
    STATES = ["replicated", "partial"]
STATES_2D = ["replicated", "partial"]
LETTER = {"replicated": "R", "sharded": "S", "partial": "P"}

# ---- exact values ----


def exact(x):
    """A float64 as an int or a 'p/q' string. Inputs are dyadic, and so is
    every result but a mean over 3 ranks' worth of elements: a result that is
    not a small dyadic rational is written as the rational of denominator at
    most 4096 whose float64 it is (1/3 for 0.333...), and refused if none is."""
    f = Fraction(float(x))
    if f.denominator & (f.denominator - 1) or f.denominator > 1 << 20:
        g = f.limit_denominator(4096)
        if float(g) != float(x):
            raise ValueError(f"{x} is not a small rational")
        f = g
    return int(f) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


def tolist(a):
    a = np.asarray(a)
    if a.ndim == 0:
        return exact(a)
    return [tolist(x) for x in a]


# Per-rank element patterns (flattened, row-major), all dyadic.
R_VALS = [0.5, 4.0, -1.0, 0.75, 2.0, -0.25, 1.5, 3.0]
P_VALS = [  # rank r, element i; no entry is zero, nor any sum over 2, 3, 4 ranks
    [1.0, 0.5, -1.0, 2.0],
    [-2.0, 2.0, 0.25, -0.5],
    [1.5, -0.25, 3.0, 1.0],
    [-0.25, 1.0, -0.5, 0.75],
]
V_VALS = [  # rank r's block
    [1.0, -1.0, 0.5, 2.0],
    [2.0, 1.0, -0.5, 4.0],
    [3.0, 3.0, 0.25, -1.0],
    [4.0, 5.0, -2.0, 0.5],
]


def local_values(state, r, shape, n, global_shape):
    """Rank r's local tensor of an operand in `state`."""
    size = int(np.prod(shape))
    if state == "replicated":
        gsize = int(np.prod(global_shape))
        vals = [R_VALS[i % len(R_VALS)] + (i // len(R_VALS)) for i in range(gsize)]
        return np.array(vals, dtype=np.float64).reshape(global_shape)
    if state == "partial":
        gsize = int(np.prod(global_shape))
        vals = [P_VALS[r][i % 4] + (i // 4) * (r + 2) for i in range(gsize)]
        return np.array(vals, dtype=np.float64).reshape(global_shape)
    vals = [V_VALS[r][i % 4] + (i // 4) for i in range(size)]
    return np.array(vals, dtype=np.float64).reshape(shape)


def make(mesh, state, locals_):
    bufs = [driver.Buffer.from_numpy(np.ascontiguousarray(a)) for a in locals_]
    t = nb.Tensor._create_unsafe(bufferss=bufs)
    rank = locals_[0].ndim
    if state == "replicated":
        spec = ShardingSpec(mesh, [DimSpec([]) for _ in range(rank)])
    elif state == "sharded":
        spec = ShardingSpec(mesh, [DimSpec(["x"])] + [DimSpec([]) for _ in range(rank - 1)])
    else:
        spec = ShardingSpec(mesh, [DimSpec([]) for _ in range(rank)], partial_sum_axes={"x"})
    t.sharding = spec
    return t


def per_rank(t):
    t.realize()
    bufs = t._impl._buffers
    return [tolist(np.from_dlpack(b)) for b in bufs]


def describe(spec):
    """Nabla's sharding of a tensor on the one axis `x`, in the fixture's words."""
    if spec is None:
        return {"state": "replicated", "partial_axes": [], "sharded_dims": [], "sharding": None}
    partial = set(spec.partial_sum_axes)
    dims = []
    for d, ds in enumerate(spec.dim_specs):
        if ds.partial:
            partial.update(ds.axes)
        if ds.axes:
            dims.append(d)
    if "x" in partial:
        state = "partial"
    elif dims:
        state = "sharded"
    else:
        state = "replicated"
    return {
        "state": state,
        "partial_axes": sorted(partial),
        "sharded_dims": dims,
        "sharding": repr(spec),
    }


# ---- what Nabla ran: every Operation call, and the resharded operands ----

LOG = {"depth": 0, "ops": [], "seen": None}
_call = ops_base.Operation.__call__


def logged_call(self, args, kwargs):
    LOG["depth"] += 1
    LOG["ops"].append((LOG["depth"], self.name))
    try:
        return _call(self, args, kwargs)
    finally:
        LOG["depth"] -= 1


ops_base.Operation.__call__ = logged_call
_reshard = spmd.reshard_inputs


def logged_reshard(args, required, mesh):
    out = _reshard(args, required, mesh)
    if LOG["depth"] == 1 and LOG["seen"] is None:
        LOG["seen"] = out
    return out


spmd.reshard_inputs = logged_reshard


# ---- the ops ----

UNARY_1D = [
    # name, call, expression over a, b, class
    ("neg", lambda a: nb.neg(a), "-a"),
    ("mul_const", lambda a: a * 2.0, "2 * a"),
    ("add_const", lambda a: a + 1.0, "a + 1"),
    ("relu", lambda a: nb.relu(a), "relu(a)"),
    ("abs", lambda a: nb.abs(a), "abs(a)"),
    ("sum", lambda a: nb.sum(a, axis=0), "sum(a, 0)"),
    ("mean", lambda a: nb.mean(a, axis=0), "mean(a, 0)"),
    ("max", lambda a: nb.reduce_max(a, axis=0), "max(a, 0)"),
    ("cumsum", lambda a: nb.cumsum(a, axis=0), "cumsum(a, 0)"),
    ("slice", lambda a: nb.slice_tensor(a, [0], [1]), "slice(a, 0, 0, 1)"),
    ("cast_f32", lambda a: nb.cast(a, DType.float32), None),
]
UNARY_2D = [
    ("transpose", lambda a: nb.transpose(a, 0, 1), "transpose(a)"),
    ("reshape", lambda a: nb.reshape(a, (4,)), "reshape(a, [4])"),
]
BINARY_1D = [
    ("add", lambda a, b: nb.add(a, b), "a + b"),
    ("sub", lambda a, b: nb.sub(a, b), "a - b"),
    ("mul", lambda a, b: nb.mul(a, b), "a * b"),
    ("div", lambda a, b: nb.div(a, b), "a / b"),
    ("concat", lambda a, b: nb.concatenate([a, b], axis=0), "concat(a, b, 0)"),
]
BINARY_2D = [
    ("matmul", lambda a, b: nb.matmul(a, b), "matmul(a, b)"),
]


def run_case(n, name, fn, expr, states, block):
    mesh = DeviceMesh(f"m{n}", (n,), ("x",))
    any_sharded = "sharded" in states
    gshape = (block[0] * n,) + tuple(block[1:]) if any_sharded else tuple(block)
    inputs = []
    tensors = []
    for s in states:
        loc = [local_values(s, r, block, n, gshape) for r in range(n)]
        tensors.append(make(mesh, s, loc))
        inputs.append(
            {
                "state": s,
                "sharding": repr(tensors[-1].sharding),
                "sharded_dim": 0 if s == "sharded" else None,
                "per_rank": [tolist(x) for x in loc],
            }
        )
    LOG["ops"] = []
    LOG["seen"] = None
    case = {
        "kind": "typing",
        "id": f"{name}_{'_'.join(LETTER[s] for s in states)}_n{n}",
        "op": name,
        "expr": expr,
        "mesh": {"x": n},
        "inputs": inputs,
    }
    try:
        out = fn(*tensors)
        ops = [op for _, op in LOG["ops"]]
        case["real"] = {
            "accepted": True,
            "output": describe(out.sharding),
            "ops": ops,
            "top_level_ops": [op for d, op in LOG["ops"] if d == 1],
            "inserted": [op for d, op in LOG["ops"] if d > 1 or op in COLLECTIVES],
            "seen_per_rank": None,
            "output_per_rank": None,
            "error": None,
        }
        PENDING.append((case, out, list(LOG["seen"]) if LOG["seen"] is not None else None))
    except Exception as e:  # noqa: BLE001 - the refusal is what is recorded
        msg = f"{type(e).__name__}: {e}".splitlines()[0]
        case["real"] = {"accepted": False, "output": None, "ops": [o for _, o in LOG["ops"]],
                        "error": msg[:400]}
    return case


PENDING = []  # (case, output tensor, operands as the op saw them)


def realize_pending():
    """Realize every traced case in one graph (MAX compiles a graph in tens
    of seconds on this host; one graph for all cases is compiled once and
    then cached by MAX on disk), then read the per-rank values."""
    ts = []
    for _, out, seen in PENDING:
        ts.append(out)
        ts.extend(t for t in (seen or []) if isinstance(t, nb.Tensor))
    nb.realize_all(*ts)
    for case, out, seen in PENDING:
        case["real"]["output_per_rank"] = per_rank(out)
        if seen is not None:
            case["real"]["seen_per_rank"] = [per_rank(t) for t in seen]


COLLECTIVES = {"all_reduce", "all_gather", "reduce_scatter", "shard", "reshard", "all_to_all"}


def collective_cases(n):
    """nabla.all_reduce and nabla.reduce_scatter of a partial vector and
    nabla.all_gather of a sharded one, with the gradient nabla.vjp gives
    for a cotangent of distinct values (replicated, or sharded like the
    output). Each case carries an `spmd-check run` job
    in seed 003's catalogue spelling (the dialect the other recorded
    collectives use): the call Nabla's collective corresponds to and the
    transpose its gradient matches."""
    mesh = DeviceMesh(f"c{n}", (n,), ("x",))
    out = []
    specs = [
        ("all_reduce_P", "partial", lambda x: nb.all_reduce(x), "all_reduce(I)",
         "reinterpret(I,R)", "P", "I", 2),
        ("all_gather_S", "sharded", lambda x: nb.all_gather(x, axis=0), "all_gather(I, dim=0)",
         "convert(I,V, dim=0)", "V", "I", 2 * n),
        # A partial vector of 2n elements, scattered in blocks of 2; the
        # cotangent is sharded like the output.
        ("reduce_scatter_P", "partial", lambda x: nb.reduce_scatter(x, axis=0),
         "reduce_scatter(dim=0)", "all_gather(R, dim=0)", "P", "V", 2),
    ]
    for name, state, fn, fwd, bwd, tin, tout, out_len in specs:
        size = (2 * n,) if name.startswith("reduce_scatter") else (2,)
        loc = [local_values(state, r, size, n, size) for r in range(n)]
        x = make(mesh, state, loc)
        case = {"kind": "collective", "id": f"{name}_n{n}", "mesh": {"x": n}}
        try:
            y, pull = nb.vjp(fn, x)
            if tout == "V":
                cts = [np.array([10.0 * (out_len * r + i + 1) for i in range(out_len)])
                       for r in range(n)]
                ct = make(mesh, "sharded", cts)
            else:
                cts = [np.array([10.0 * (i + 1) for i in range(out_len)]) for _ in range(n)]
                ct = make(mesh, "replicated", cts)
            g = pull(ct)
            g = g[0] if isinstance(g, (tuple, list)) else g
            ct_pr = [tolist(c) for c in cts]
            case["job"] = {
                "dialect": "spmd_types", "mesh": {"x": n}, "forward": fwd, "backward": bwd,
                "inputs": [{"type": tin, "per_rank": [tolist(a) for a in loc]}],
                "output": tout, "cotangent": ct_pr,
            }
            case["real"] = {
                "call": f"nabla.{name.rsplit('_', 1)[0]}(x) on a {state} vector; nabla.vjp",
                "output": describe(y.sharding),
                "output_per_rank": per_rank(y),
                "error": None,
                "cotangent_per_rank": ct_pr,
                "transpose_sharding": repr(g.sharding),
                "transpose_per_rank": per_rank(g),
                "transpose_error": None,
            }
        except Exception as e:  # noqa: BLE001
            case["job"] = None
            case["real"] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:400]}
        out.append(case)
    return out


def main():
    cases = []
    for n in (2, 3, 4):
        for name, fn, expr in UNARY_1D:
            for s in STATES:
                cases.append(run_case(n, name, fn, expr, [s], (2,)))
        # The 2-D ops take replicated and partial operands only: a sharded
        # (2, 2) block is a (2n, 2) global tensor, which these calls
        # (reshape to (4,), a square matmul) do not fit.
        for name, fn, expr in UNARY_2D:
            for s in STATES_2D:
                cases.append(run_case(n, name, fn, expr, [s], (2, 2)))
        for name, fn, expr in BINARY_1D:
            for s in itertools.product(STATES, repeat=2):
                cases.append(run_case(n, name, fn, expr, list(s), (2,)))
        for name, fn, expr in BINARY_2D:
            for s in itertools.product(STATES_2D, repeat=2):
                cases.append(run_case(n, name, fn, expr, list(s), (2, 2)))
        print(f"n={n}: {len(cases)} cases traced", file=sys.stderr)
    realize_pending()
    for n in (2, 3, 4):
        cases.extend(collective_cases(n))
    v = nabla_shims.versions()
    doc = {
        "system": "nabla",
        "version": v["nabla-ml"],
        "recorded_with": {
            "python": sys.version.split()[0],
            "nabla-ml": v["nabla-ml"],
            "modular": v["modular"],
            "max": v["max"],
            "max-core": v["max-core"],
            "numpy": v["numpy"],
            "platform": "cpu",
            "devices": "simulated: DeviceMesh on one host CPU, meshes (2,), (3,), (4,)",
            "dtype": "float64",
            "install": "pip install --no-deps nabla-ml==26.2251344; pip install max==26.3.0; "
            "pip install --no-deps modular==26.3.0 (modular's own dependencies, max[serve] "
            "and max[benchmark], are not needed and do not resolve)",
            "shims": nabla_shims.SHIMS,
            "note": "nabla-ml 26.2251344 asks for a Modular nightly, which the registries do not "
            "serve; it was run on the stable 26.3.0 with the two import-time shims of "
            "peers/nabla_shims.py, which touch no sharding code",
        },
        "recorded_by": "peers/record_nabla.py",
        "cases": cases,
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
