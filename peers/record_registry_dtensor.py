"""Record what the installed DTensor registers for its pointwise ops.

For every functional pointwise aten op that DTensor registers a single-dim
sharding strategy for (torch/distributed/tensor/_ops/_pointwise_ops.py), and
for every variant of its scalar arguments, this writes:

- the strategy's claims on a one-dim mesh: each [output, input...] placement
  combination the library offers, asked of the library itself
  (`sharding_propagator.op_single_dim_strategy_funcs[op]`, the entry point
  DTensor's own `strategy_validation` uses);
- the real kernel's values: the aten op called once on float64 tensors
  holding every point of a dyadic grid (every tuple of k/8 for |k/8| <= 8,
  one argument per tensor input; k/2 up to 8 for three tensor inputs).
  A value is kept only where float64 holds it exactly in spmd-check's
  window (|v| < 2^30, at most 24 binary digits after the point); elsewhere
  the row says null. A call on the grid in a fixed shuffled order must give
  the values shuffled the same way, or the op is not recorded as
  elementwise.

The output is the raw registry file that `spmd-check registry dtensor
--from RAW --record FIXTURE` prunes to the grid points the checker visits
(peers/record_registry.sh runs both). Run with the torch of
peers/requirements.txt.
"""

import fnmatch
import itertools
import json
import os
import sys
from fractions import Fraction

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._dtensor_spec import TensorMeta
from torch.distributed.tensor._ops.single_dim_strategy import _ShardingPlaceholder

from registry_values import exact

SCALARS = [-1.0, 0.0, 0.5, 1.0]
MAX_VARIANTS = 16


def grid(step_den, bound):
    n = bound * step_den
    return [Fraction(k, step_den) for k in range(-n, n + 1)]


def shuffled(n):
    """A fixed permutation of range(n) that no flip or roll reproduces."""
    g = torch.Generator().manual_seed(0)
    return torch.randperm(n, generator=g)


def same(a, b):
    """Equal values, NaN equal to NaN (a kernel may give NaN off its domain)."""
    if a.dtype.is_floating_point:
        return torch.equal(a.isnan(), b.isnan()) and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))
    return torch.equal(a, b)


def placement(p):
    if isinstance(p, _ShardingPlaceholder):
        return f"S({p.dim})"
    s = str(p)
    return {"R": "R"}.get(s, s)


def meta(shape, dtype):
    t = torch.empty(shape, dtype=dtype)
    return TensorMeta(shape=t.shape, stride=t.stride(), dtype=t.dtype)


def arg_choices(a):
    """Values to try for one schema argument; None: a tensor input."""
    ty = str(a.type)
    if ty in ("Tensor", "Optional[Tensor]"):
        return None
    if a.name == "dtype":
        # Target dtypes whose values on the grid need no wraparound: the
        # model sums exactly, so a dtype that wraps (uint8 of -1 is 255,
        # and its all_reduce wraps back) would not be what the library
        # computes. bool is left out for the same reason.
        return [(f"torch.{d}", getattr(torch, d)) for d in ("int64", "int32", "float32", "bfloat16", "float64")]
    if a.name in ("memory_format", "layout", "device", "pin_memory"):
        return [("default", a.default_value if a.has_default_value() else None)]
    if a.kwarg_only and a.has_default_value():
        return [("default", a.default_value)]
    if ty == "number":
        return [(repr(v), v) for v in SCALARS]
    if ty == "Optional[number]":
        return [("None", None)] + [(repr(v), v) for v in (-1.0, 0.5)]
    if ty in ("float", "Optional[float]"):
        return [(repr(v), v) for v in (0.5, 1.0)]
    if ty in ("int", "Optional[int]"):
        return [(repr(v), v) for v in (0, 1, 2)]
    if ty == "str":
        return [(repr(v), v) for v in ("none", "tanh")]
    if ty == "Optional[str]":
        return [("None", None), ("'trunc'", "trunc"), ("'floor'", "floor")]
    if a.has_default_value():
        return [("default", a.default_value)]
    raise ValueError(f"argument {a.name}: {ty}")


def variants(op):
    s = op._schema
    choices = []
    for a in s.arguments:
        c = arg_choices(a)
        choices.append((a, c))
    combos = list(
        itertools.product(*[c if c is not None else [("T", None)] for _, c in choices])
    )
    return choices, combos[:MAX_VARIANTS], len(combos)


def call_spec(choices, combo):
    """The call as data, for repro scripts: tensors as {"tensor": i},
    dtypes as {"dtype": name}, other values as JSON."""
    def val(v):
        if isinstance(v, torch.dtype):
            return {"dtype": str(v).removeprefix("torch.")}
        return v
    args, kwargs, ti = [], {}, 0
    for (a, c), (label, v) in zip(choices, combo):
        if c is None:
            v = {"tensor": ti}
            ti += 1
        else:
            v = val(v)
        if a.kwarg_only:
            if label != "default" or c is None:
                kwargs[a.name] = v
        else:
            args.append(v)
    return {"args": args, "kwargs": kwargs}


def call_args(choices, combo, tensors):
    args, kwargs, ti = [], {}, 0
    text = []
    for (a, c), (label, v) in zip(choices, combo):
        if c is None:
            v = tensors[ti]
            ti += 1
        elif label != "default":
            text.append(f"{a.name}={label}")
        if a.kwarg_only:
            if label != "default" or c is None:
                kwargs[a.name] = v
        else:
            args.append(v)
    return args, kwargs, ", ".join(text)


def strategies(op, choices, combo, n_tensor):
    f = DTensor._op_dispatcher.sharding_propagator.op_single_dim_strategy_funcs[op]
    metas = [meta([4], torch.float64) for _ in range(n_tensor)]
    args, kwargs, _ = call_args(choices, combo, metas)
    out = []
    for c in f(op, tuple(args), kwargs):
        out.append([placement(p) for p in c])
    return out


def table(op, choices, combo, n_tensor):
    if n_tensor <= 2:
        pts = grid(8, 8)
    else:
        pts = grid(2, 8)
    rows = list(itertools.product(pts, repeat=n_tensor))
    errors = []
    for dtype in (torch.float64, torch.int64):
        use = rows if dtype == torch.float64 else [r for r in rows if all(x.denominator == 1 for x in r)]
        cols = [
            torch.tensor([float(r[i]) for r in use], dtype=torch.float64).to(dtype)
            for i in range(n_tensor)
        ]
        perm = shuffled(len(use))
        try:
            args, kwargs, _ = call_args(choices, combo, cols)
            y = op(*args, **kwargs)
            args, kwargs, _ = call_args(choices, combo, [c[perm] for c in cols])
            y_perm = op(*args, **kwargs)
        except Exception as e:  # the kernel's refusal is recorded, not hidden
            errors.append(f"{dtype}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            continue
        if not isinstance(y, torch.Tensor) or y.shape != cols[0].shape:
            errors.append(f"{dtype}: returned shape {getattr(y, 'shape', type(y))}")
            continue
        if not same(y[perm], y_perm):
            errors.append(f"{dtype}: not elementwise (permuted inputs, other values)")
            continue
        vals = y.tolist()
        out = [[str(x) for x in r] + [exact(v)] for r, v in zip(use, vals)]
        return {"input_dtype": str(dtype).removeprefix("torch."),
                "output_dtype": str(y.dtype).removeprefix("torch."),
                "rows": out}, errors
    return None, errors


def patch(prop):
    """SPMD_CHECK_REGISTRY_PATCH="OP=OUT,IN,...": add one claim to OP's
    strategy, as a wrong registration would (the live path's negative
    twin, tests/registry.rs)."""
    spec = os.environ.get("SPMD_CHECK_REGISTRY_PATCH")
    if not spec:
        return
    from torch.distributed.tensor import Partial, Replicate

    name, combo = spec.split("=", 1)
    op = next(o for o in prop.op_single_dim_strategy_funcs if str(o) == name)

    def parse(p):
        if p == "R":
            return Replicate()
        if p.startswith("P(") and p.endswith(")"):
            return Partial(p[2:-1])
        if p.startswith("S(") and p.endswith(")"):
            return _ShardingPlaceholder(int(p[2:-1]))
        raise ValueError(p)

    extra = [parse(p) for p in combo.split(",")]
    info = prop.op_single_dim_strategy_funcs[op]
    orig = info.func

    def patched(*a, **k):
        return list(orig(*a, **k)) + [extra]

    # Keep the family the recorder sorts by (the strategy's module).
    patched.__module__, patched.__name__ = orig.__module__, orig.__name__
    info.func = patched


def fill_main(raw_path, want_path):
    """Call the kernels where a run wanted them (see registry_tensor_dtensor)."""
    import registry_tensor_dtensor as rt
    with open(raw_path) as f:
        doc = json.load(f)
    with open(want_path) as f:
        want = json.load(f)
    for w in want["wanted"]:
        e = doc["entries"][w["index"]]
        assert e["op"] == w["op"] and e["args"] == w["args"], (e["op"], w["op"])
        rt.fill(e, w)
    with open(raw_path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"filled {want['shapes']} shapes and {want['calls']} calls", file=sys.stderr)


def main():
    if sys.argv[1] == "fill":
        return fill_main(sys.argv[2], sys.argv[3])
    out_path = sys.argv[1]
    only = sys.argv[2] if len(sys.argv) > 2 else None
    prop = DTensor._op_dispatcher.sharding_propagator
    patch(prop)
    # The pointwise family: every op whose single-dim strategy is the one
    # _pointwise_ops.py registers (its lists and its special cases alike).
    ops = sorted(
        (
            op
            for op, info in prop.op_single_dim_strategy_funcs.items()
            if getattr(info.func, "__module__", "").endswith("._pointwise_ops")
        ),
        key=str,
    )
    entries, skipped = [], []
    for op in ops:
        s = op._schema
        name = str(op)
        if only is not None and not fnmatch.fnmatchcase(name, only):
            continue
        if s.is_mutable or name.split(".")[1].endswith("_") and not name.split(".")[1].startswith("__"):
            skipped.append({"op": name, "why": "in-place or out= form (the functional form is checked)"})
            continue
        if len(s.returns) != 1 or str(s.returns[0].type) != "Tensor":
            skipped.append({"op": name, "why": f"returns {[str(x.type) for x in s.returns]}"})
            continue
        try:
            choices, combos, total = variants(op)
        except ValueError as e:
            skipped.append({"op": name, "why": f"argument kind not enumerated: {e}"})
            continue
        n_tensor = sum(1 for _, c in choices if c is None)
        if n_tensor == 0 or n_tensor > 3:
            skipped.append({"op": name, "why": f"{n_tensor} tensor inputs"})
            continue
        for combo in combos:
            _, _, text = call_args(choices, combo, [None] * n_tensor)
            try:
                claims = strategies(op, choices, combo, n_tensor)
            except Exception as e:
                claims, why = None, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            entry = {"op": name, "family": "pointwise", "schema": str(s), "args": text,
                     "inputs": n_tensor, "call": call_spec(choices, combo)}
            if claims is None:
                entry["strategy_error"] = why
            else:
                entry["claims"] = claims
            tab, errors = table(op, choices, combo, n_tensor)
            if tab is None:
                entry["kernel_error"] = "; ".join(errors)
            else:
                entry["kernel"] = tab
            entries.append(entry)
        if total > len(combos):
            skipped.append({"op": name, "why": f"only the first {len(combos)} of {total} argument variants"})
        print(f"{name}: {len(combos)} variants", file=sys.stderr)
    # Reductions and views: kernels recorded call by call (filled in by
    # `fill`, as the checker asks for them).
    import registry_tensor_dtensor as rt
    for op, fam, kind in rt.ops():
        s = op._schema
        name = str(op)
        if only is not None and not fnmatch.fnmatchcase(name, only):
            continue
        if s.is_mutable or name.split(".")[1].endswith("_") or "out" in name.split(".")[-1]:
            skipped.append({"op": name, "why": "in-place or out= form (the functional form is checked)"})
            continue
        if len(s.returns) != 1 or str(s.returns[0].type) != "Tensor":
            skipped.append({"op": name, "why": f"returns {[str(x.type) for x in s.returns]} (one tensor output is checked)"})
            continue
        count = 0
        ranks_of = rt.RANKS_OF.get(name, rt.RANKS)
        if not ranks_of:
            skipped.append({"op": name, "why": "takes rank-3 inputs, beyond the scope's shapes (rank 2 at most)"})
            continue
        for r in ranks_of:
            try:
                choices, combos = rt.variants(op, r)
            except ValueError as e:
                skipped.append({"op": name, "why": f"argument kind not enumerated: {e}"})
                break
            n_t = rt.n_tensors(choices)
            ranks = [r] * n_t
            for combo in combos[:MAX_VARIANTS]:
                _, _, text = rt.build(choices, combo, [None] * n_t)
                text = f"rank={r}" + (f", {text}" if text else "")
                entry = {"op": name, "family": fam, "schema": str(s), "args": text,
                         "inputs": n_t, "call": rt.call_spec(choices, combo)}
                try:
                    claims, unmodelled, differ = rt.claims_of(op, kind, choices, combo, ranks)
                    entry["claims"] = claims
                    if unmodelled:
                        entry["unmodelled"] = unmodelled
                    if differ:
                        entry["shape_dependent"] = differ
                except Exception as e:
                    entry["strategy_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                ind, outd, errors = rt.probe_dtype(entry, ranks)
                if ind is None:
                    entry["kernel_error"] = "; ".join(errors)
                else:
                    entry["tensor_kernel"] = {"input_dtype": ind, "output_dtype": outd, "ranks": ranks,
                                              "shapes": [], "calls": []}
                entries.append(entry)
                count += 1
        print(f"{name}: {count} variants", file=sys.stderr)
    recorded = {str(op) for op, _, _ in rt.ops()}
    # What the library registers outside these families: not yet
    # recorded, counted per strategy function so the report can say so.
    others = {}
    for op, info in prop.op_single_dim_strategy_funcs.items():
        mod = getattr(info.func, "__module__", "?").rsplit(".", 1)[-1]
        if mod != "_pointwise_ops" and str(op) not in recorded:
            key = f"single-dim {mod}.{getattr(info.func, '__name__', '?')}"
            others[key] = others.get(key, 0) + 1
    for op, f in prop.op_strategy_funcs.items():
        if str(op) in recorded:
            continue
        key = f"op-strategy {getattr(f, '__module__', '?').rsplit('.', 1)[-1]}.{getattr(f, '__name__', '?')}"
        others[key] = others.get(key, 0) + 1
    doc = {
        "schema": "spmd-check-registry/1",
        "system": "dtensor",
        "versions": {"torch": torch.__version__.split("+")[0]},
        "recorded_by": "peers/record_registry.sh",
        "mesh": "one dim; each claim is one [output, inputs...] combination of the single-dim strategy",
        "entries": entries,
        "skipped": skipped,
        "not_recorded": dict(sorted(others.items())),
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
