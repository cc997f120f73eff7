"""DTensor's reductions and views, for `spmd-check registry dtensor`
(SPEC.md §22.2, §22.4): the ops whose kernel is not elementwise.

Imported by record_registry_dtensor.py, which writes one entry per op,
variant of its arguments and tensor rank of its input: the claims DTensor
makes for inputs of shape [4]*rank (each [output, input...] placement
combination its strategy offers without redistributing), and an empty
`tensor_kernel`. The kernel's calls are filled in afterwards, as the
checker asks for them: `spmd-check registry dtensor --want W` lists the
shapes and input tensors a run needed, `python record_registry_dtensor.py
fill RAW W` calls the aten op there, and peers/record_registry.sh repeats
until nothing is wanted.

The claims are asked of the library for one shape, and checked on the
scope's shapes (§21.2: local shapes up to [2, 2], 2 to 4 ranks). So the
recorder also asks the library, for every input placement combination and
every case the scope visits (its global shapes and mesh size), which
outputs it offers there; where that differs from the recorded claims the
entry is marked `shape_dependent` and not checked.
"""

import itertools
import math

import registry_values

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor._op_schema import OpSchema, OpSpec, OpStrategy
from torch.distributed.tensor._ops.single_dim_strategy import _ShardingPlaceholder

# The checker's scope (SPEC.md §21.2, §22.3): local shapes and mesh sizes.
SCOPE_SHAPES = [[], [1], [2], [1, 1], [1, 2], [2, 1], [2, 2]]
MESHES = (2, 3, 4)
KINDS = ("sum", "avg", "max", "min")
# Tensor ranks each op is recorded for.
RANKS = (1, 2)

# The strategy functions of the families recorded here: reductions
# (_math_ops) and views (_view_ops, and _tensor_ops' slicing and
# reordering). Ops whose output is a tuple or list are left out.
REDUCTION = {
    "linear_reduction_single_dim_strategy", "mean_single_dim_strategy",
    "std_var_single_dim_strategy", "bool_reduction_single_dim_strategy",
    "argmax_argmin_single_dim_strategy", "vector_norm_single_dim_strategy",
    "powsum_single_dim_strategy", "logsumexp_single_dim_strategy",
    "softmax_single_dim_strategy", "scan_single_dim_strategy",
}
VIEW = {
    "reshape_strategy", "transpose_single_dim_strategy",
    "slice_single_dim_strategy", "select_int_single_dim_strategy",
    "flip_single_dim_strategy", "roll_single_dim_strategy",
    "cat_single_dim_strategy", "stack_strategy",
}


# Contractions. The scope's shapes have rank 2 at most, so bmm and
# baddbmm (rank 3) are out of reach; each op here is recorded for the
# ranks it takes (RANKS_OF).
MATMUL = {
    "mm_single_dim_strategy", "addmm_single_dim_strategy",
    "dot_single_dim_strategy", "bmm_single_dim_strategy",
    "baddbmm_single_dim_strategy",
}
RANKS_OF = {"aten.mm.default": (2,), "aten.addmm.default": (2,), "aten.dot.default": (1,),
            "aten.bmm.default": (), "aten.baddbmm.default": ()}


# The ops autograd runs for the backward of these families, with
# strategies of their own: the gradient placements DTensor gives. (The
# pointwise backward ops, threshold_backward, tanh_backward and the
# like, are in the pointwise family.)
BACKWARD = {"softmax_backward_single_dim_strategy"}


def family_of(fname):
    if fname in BACKWARD:
        return "backward"
    if fname in REDUCTION:
        return "reduction"
    if fname in VIEW:
        return "view"
    if fname in MATMUL:
        return "matmul"
    return None


def ops():
    """(op, family, kind) for every registered op of these families:
    kind "single" (single-dim strategy) or "strategy" (op strategy)."""
    prop = DTensor._op_dispatcher.sharding_propagator
    out = []
    for op, info in prop.op_single_dim_strategy_funcs.items():
        fam = family_of(getattr(info.func, "__name__", ""))
        if fam:
            out.append((op, fam, "single"))
    for op, f in prop.op_strategy_funcs.items():
        fam = family_of(getattr(f, "__name__", ""))
        if fam:
            out.append((op, fam, "strategy"))
    return sorted(out, key=lambda x: str(x[0]))


def dim_lists(r):
    dims = list(range(r))
    return [[d] for d in dims] + ([dims] if r > 1 else [])


def arg_choices(op, a, r):
    """Values to try for one argument of an op on a tensor of rank r:
    None for a tensor input, else [(label, value)]."""
    ty, name = str(a.type), a.name
    if ty in ("Tensor", "Optional[Tensor]"):
        return None
    if ty == "List[Tensor]":
        return "list"
    opt = ty.startswith("Optional[")
    base = ty[len("Optional["):-1] if opt else ty
    none = [("None", None)] if opt else []
    short = str(op).split(".")[1]
    if short == "permute" and name == "dims":
        perms = [list(range(r)), list(range(r))[::-1]]
        return [(repr(p), p) for p in (perms if r > 1 else perms[:1])]
    if short == "roll" and name == "dims":
        # As many dims as shifts (one), or none: a roll of the flattened tensor.
        return [("[]", [])] + [(repr([d]), [d]) for d in range(r)]
    if str(op).startswith("prims."):
        none = []  # prims take no None for their dims
    if name in ("dim", "dims") and base == "List[int]":
        return none + [(repr(d), d) for d in dim_lists(r)]
    if name == "dim" and base in ("int", "SymInt"):
        return none + [(repr(d), d) for d in range(r)]
    if name == "dtype" or name == "output_dtype" or name == "input_dtype":
        if not a.has_default_value() and not opt:
            return [("default", torch.float64)]
        return [("default", a.default_value if a.has_default_value() else None)]
    if name in ("keepdim", "descending"):
        return [("False", False), ("True", True)]
    if name == "half_to_float":
        return [("False", False)]
    if name == "correction":
        return [("None", None), ("0", 0)] if opt else [("1", 1.0), ("0", 0.0)]
    if name in ("alpha", "beta"):
        return [("1", 1), ("2", 2)] if name == "alpha" else [("1", 1), ("0", 0)]
    if name in ("ord", "p"):
        # inf and -inf make the norm a max or min of |x|: DTensor gives
        # those a pending max or min.
        return [("1", 1), ("2", 2), ("inf", math.inf), ("-inf", -math.inf)]
    if str(op).split(".")[1] in ("expand", "expand_copy") and name == "size":
        # Sizes that fit every shape of the rank: keep each dim, or add a
        # leading dim of 2.
        return [(repr([-1] * r), [-1] * r), (repr([2] + [-1] * r), [2] + [-1] * r)]
    if name in ("size", "shape"):
        # Sizes that fit every shape of the rank: flatten, or add a dim.
        return [("[-1]", [-1])] if r > 1 else [("[1, -1]", [1, -1]), ("[-1, 1]", [-1, 1])]
    if name == "implicit":
        return [("default", False)]
    if name in ("dim0", "dim1"):
        return [(repr(d), d) for d in range(r)]
    if name == "start":
        return [("None", None), ("1", 1)]
    if name == "end":
        return [("None", None), ("1", 1)]
    if name == "step":
        return [("1", 1)]
    if name == "index":
        return [("0", 0), ("-1", -1)]
    if name == "shifts":
        return [("[1]", [1])]
    if name == "repeats":
        return [(repr(v), v) for v in ([[2]] if r == 1 else [[1, 2], [2, 1]])]
    if a.has_default_value():
        return [("default", a.default_value)]
    raise ValueError(f"argument {name}: {ty}")


def variants(op, r):
    s = op._schema
    choices = [(a, arg_choices(op, a, r)) for a in s.arguments]
    combos = list(itertools.product(
        *[c if isinstance(c, list) else [("T", None)] for _, c in choices]))
    return choices, combos


def n_tensors(choices):
    return sum(2 if c == "list" else 1 for _, c in choices if c is None or c == "list")


def build(choices, combo, tensors):
    """args, kwargs and the variant's text, with `tensors` in place."""
    args, kwargs, text, ti = [], {}, [], 0
    for (a, c), (label, v) in zip(choices, combo):
        if c is None:
            v = tensors[ti]
            ti += 1
        elif c == "list":
            v = [tensors[ti], tensors[ti + 1]]
            ti += 2
        elif label != "default":
            text.append(f"{a.name}={label}")
        if a.kwarg_only:
            if label != "default" or c is None:
                kwargs[a.name] = v
        else:
            args.append(v)
    return args, kwargs, ", ".join(text)


def call_spec(choices, combo):
    def val(v):
        if isinstance(v, torch.dtype):
            return {"dtype": str(v).removeprefix("torch.")}
        if isinstance(v, float) and not math.isfinite(v):
            return {"float": "inf" if v > 0 else "-inf"}
        return v
    args, kwargs, ti = [], {}, 0
    for (a, c), (label, v) in zip(choices, combo):
        if c is None:
            v = {"tensor": ti}
            ti += 1
        elif c == "list":
            v = [{"tensor": ti}, {"tensor": ti + 1}]
            ti += 2
        else:
            v = val(v)
        if a.kwarg_only:
            if label != "default" or c is None:
                kwargs[a.name] = v
        else:
            args.append(v)
    return {"args": args, "kwargs": kwargs}


def from_spec(spec, tensors):
    def val(v):
        if isinstance(v, dict) and "tensor" in v:
            return tensors[v["tensor"]]
        if isinstance(v, dict) and "dtype" in v:
            return getattr(torch, v["dtype"])
        if isinstance(v, dict) and "float" in v:
            return float(v["float"])
        if isinstance(v, list):
            return [val(x) for x in v]
        return v
    return [val(v) for v in spec["args"]], {k: val(v) for k, v in spec["kwargs"].items()}


def meta(shape, dtype=torch.float64):
    t = torch.empty(shape, dtype=dtype)
    return TensorMeta(shape=t.shape, stride=t.stride(), dtype=t.dtype)


def name(p):
    if isinstance(p, _ShardingPlaceholder):
        return f"S({p.dim})"
    return str(p)


def parse(p):
    if p == "R":
        return Replicate()
    if p.startswith("S("):
        return Shard(int(p[2:-1]))
    return Partial(p[2:-1])


_MESHES = {}


def mesh(n):
    if not dist.is_initialized():
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", rank=0, world_size=max(MESHES), store=FakeStore())
    if n not in _MESHES:
        _MESHES[n] = DeviceMesh("cpu", list(range(n)))
    return _MESHES[n]


def offered(op, kind, choices, combo, shapes, n, places=None):
    """{input placements: set of outputs} the library offers for inputs of
    these global shapes on n ranks, without redistributing. For an op
    strategy, `places` names the one input combination asked."""
    prop = DTensor._op_dispatcher.sharding_propagator
    out = {}
    if kind == "single":
        f = prop.op_single_dim_strategy_funcs[op]
        args, kwargs, _ = build(choices, combo, [meta(s) for s in shapes])
        n_out = 1
        for c in f(op, tuple(args), kwargs):
            names = [name(p) for p in c]
            ins = tuple(names[n_out:n_out + len(shapes)])
            out.setdefault(ins, set()).add(names[0])
        return out
    m = mesh(n)
    strategies = [
        OpStrategy([OpSpec(output_specs=DTensorSpec(mesh=m, placements=(parse(p),), tensor_meta=meta(s)),
                           input_specs=tuple())])
        for p, s in zip(places, shapes)
    ]
    args, kwargs, _ = build(choices, combo, strategies)
    # A list of tensors is a TupleStrategy of their strategies.
    from torch.distributed.tensor._op_schema import TupleStrategy
    args = [TupleStrategy(tuple(a)) if isinstance(a, list) and a and isinstance(a[0], OpStrategy) else a
            for a in args]
    res = prop.op_strategy_funcs[op](OpSchema(op, tuple(args), kwargs))
    for spec in res.strategies:
        ins = tuple(str(q) for s in spec.input_specs for q in s.placements)
        if ins == tuple(places):
            out.setdefault(ins, set()).add(str(spec.output_spec.placements[0]))
    return out


def places_of_rank(r):
    return ["R"] + [f"S({d})" for d in range(r)] + [f"P({k})" for k in KINDS]


def global_shape(p, s, n):
    if p.startswith("S("):
        d = int(p[2:-1])
        s = list(s)
        s[d] *= n
    return list(s)


def claims_of(op, kind, choices, combo, ranks):
    """The claims for shape [4]*rank (2 ranks for an op strategy), the
    claims whose placements the checker does not model, and where the
    library's offers differ on a case the scope visits (None if nowhere)."""
    primary = [[4] * r for r in ranks]
    combos = list(itertools.product(*[places_of_rank(r) for r in ranks]))

    def ask(shapes, n, places):
        try:
            o = offered(op, kind, choices, combo, shapes, n, places)
        except Exception as e:  # a refusal offers nothing
            return set(), f"{type(e).__name__}"
        return o.get(tuple(places), set()), None

    base = {}
    if kind == "single":
        o = offered(op, kind, choices, combo, primary, 2)
        base = {c: o.get(tuple(c), set()) for c in combos}
        # Single-dim strategies may offer inputs outside `combos` (never
        # for these families); keep what they offer.
        for c, outs in o.items():
            base.setdefault(c, outs)
    else:
        for c in combos:
            base[c] = ask(primary, 2, list(c))[0]
    claims, unmodelled = [], []
    for c, outs in sorted(base.items()):
        for o in sorted(outs):
            row = [o, *c]
            # Modelled: Replicate, Shard and the pending kinds sum, avg,
            # max and min (not _StridedShard, not Partial(product)).
            if all(p == "R" or p.startswith("S(") or p in [f"P({k})" for k in KINDS] for p in row):
                claims.append(row)
            else:
                unmodelled.append(row)
    differ = None
    cache = {}
    for c in combos:
        for n in MESHES:
            for local in itertools.product(*[[s for s in SCOPE_SHAPES if len(s) == r] for r in ranks]):
                g = [global_shape(p, s, n) for p, s in zip(c, local)]
                if kind == "single":
                    key = tuple(map(tuple, g))
                    if key not in cache:
                        try:
                            cache[key] = offered(op, kind, choices, combo, g, n)
                        except Exception as e:
                            cache[key] = e
                    o = cache[key]
                    got = set() if isinstance(o, Exception) else o.get(tuple(c), set())
                else:
                    got = ask(g, n, list(c))[0]
                if got != base.get(c, set()):
                    differ = (f"inputs {', '.join(c)} of global shapes {g} on {n} ranks: "
                              f"{sorted(got) or 'nothing'} offered, {sorted(base.get(c, set())) or 'nothing'} for shape {primary}")
                    return claims, unmodelled, differ
    return claims, unmodelled, differ


def encode(t):
    """A tensor as `2x2:1,0,-1,1/2` (registry_values.encode)."""
    return registry_values.encode(list(t.shape), t.flatten().tolist())


def decode(s, dtype):
    shape, data = registry_values.decode(s)
    return torch.tensor(data, dtype=torch.float64).reshape(shape).to(dtype)


def resolve(opname):
    ns, rest = opname.split(".", 1)
    packet, overload = rest.rsplit(".", 1)
    return getattr(getattr(getattr(torch.ops, ns), packet), overload)


def run_kernel(entry, tensors):
    op = resolve(entry["op"])
    args, kwargs = from_spec(entry["call"], tensors)
    y = op(*args, **kwargs)
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"returned {type(y).__name__}")
    return y


def probe_dtype(entry, ranks):
    """The dtype the kernel is called on (float64, else int64), the
    output's dtype, and the errors met."""
    errors = []
    for dtype in (torch.float64, torch.int64):
        try:
            y = run_kernel(entry, [torch.ones([2] * r, dtype=dtype) for r in ranks])
            return str(dtype).removeprefix("torch."), str(y.dtype).removeprefix("torch."), errors
        except Exception as e:
            errors.append(f"{dtype}: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
    return None, None, errors


def fill(entry, wanted):
    """Call the kernel on what a run wanted; add to the entry's records."""
    k = entry["tensor_kernel"]
    dtype = getattr(torch, k["input_dtype"])
    for shapes in wanted.get("shapes", []):
        rec = {"in": shapes}
        try:
            y = run_kernel(entry, [torch.zeros(s, dtype=dtype) for s in shapes])
            rec["out"] = list(y.shape)
        except Exception as e:
            rec["refused"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        k["shapes"].append(rec)
    for call in wanted.get("calls", []):
        if not dtype.is_floating_point and any("/" in s.split(":", 1)[1] for s in call):
            # An integer kernel has no value off the integers: no call.
            k["calls"].append(call + [None])
            continue
        ts = [decode(s, dtype) for s in call]
        try:
            y = run_kernel(entry, ts)
            out = encode(y)
        except Exception:
            out = "nan"  # a kernel that raises on values: no rational there
        k["calls"].append(call + [out])
