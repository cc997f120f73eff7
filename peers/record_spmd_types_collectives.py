"""Record spmd_types 0.3.1's collectives and casts with values
(tests/fixtures/spmd_types_collectives.json): each runs on a fake process
group of 2 or 4 ranks under torch's LocalTensorMode (every rank simulated in
one process) inside spmd_types' typecheck(); the gradient is what torch
autograd computes from the given cotangent (y.backward(ct)).
"""
import os
import platform
import sys

import torch
from torch.distributed._local_tensor import LocalTensorMode

from spmd_types import (I, P, R, V, S, all_gather, all_reduce, all_to_all, assert_type, convert,
                        get_local_type, reduce_scatter, reinterpret)
from spmd_types._checker import typecheck
from spmd_types._mesh_axis import _reset
from spmd_types._testing import fake_pg

sys.path.insert(0, os.path.dirname(__file__))
from exact import tree, write  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "tests", "fixtures")
ST = {"R": R, "I": I, "V": V, "P": P}


def letter(t):
    for k, v in ST.items():
        if t is v:
            return k
    return repr(t)


def first_line(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"


def values(lt, n):
    return [tree(lt._local_tensors[r].detach().numpy()) for r in range(n)]


def types(t):
    try:
        return {str(k): letter(v) for k, v in get_local_type(t).items()}
    except Exception as e:  # noqa: BLE001  (an untyped tensor)
        return {"error": first_line(e)}


def run(pg, n, fn, src, x, ct):
    mode = LocalTensorMode(n)
    rec = {}
    with mode:
        xt = mode.rank_map(lambda r: torch.tensor(x[r], dtype=torch.float64))
        xt.requires_grad_(True)
        assert_type(xt, {pg: ST[src]})
        try:
            with typecheck():
                y = fn(xt, pg)
        except Exception as e:
            return {"error": first_line(e)}
        rec.update(output_type=types(y), output_per_rank=values(y, n), error=None)
        if ct is not None:
            cst, cv = ct
            c = mode.rank_map(lambda r: torch.tensor(cv[r], dtype=torch.float64))
            assert_type(c, {pg: ST[cst]})
            rec.update(cotangent_type=cst, cotangent_per_rank=cv)
            try:
                with typecheck():
                    y.backward(c)
                rec.update(transpose_type=types(xt.grad), transpose_per_rank=values(xt.grad, n),
                           transpose_error=None)
            except Exception as e:
                rec.update(transpose_type=None, transpose_per_rank=None, transpose_error=first_line(e))
    return rec


def V_(n, w=1, s=1):
    return [[s * (r * w + k + 1) for k in range(w)] for r in range(n)]


def same(n, row):
    return [list(row) for _ in range(n)]


def UNEVEN(n):
    """Per-rank sizes of an uneven split: 1, 2, 1, 2, ..."""
    return [1 + r % 2 for r in range(n)]


def table(n):
    """(id, call, fn, src, input, output state, cotangent, forward, backward)."""
    return [
        ("all_reduce_P_R", "all_reduce(x, pg, src=P, dst=R)", lambda x, g: all_reduce(x, g, src=P, dst=R),
         "P", V_(n), "R", ("P", [[4 + 2 * r] for r in range(n)]), "all_reduce(R)", "all_reduce(R)"),
        ("all_reduce_P_I", "all_reduce(x, pg, src=P, dst=I)", lambda x, g: all_reduce(x, g, src=P, dst=I),
         "P", V_(n), "I", ("I", same(n, [5])), "all_reduce(I)", "reinterpret(I,R)"),
        ("all_reduce_V_R", "all_reduce(x, pg, src=V, dst=R)", lambda x, g: all_reduce(x, g, src=V, dst=R),
         "V", V_(n), "R", ("P", [[4 + 2 * r] for r in range(n)]), "all_reduce(R)", "all_reduce"),
        ("all_gather_V_R", "all_gather(x, pg, src=V, dst=R)", lambda x, g: all_gather(x, g, src=V, dst=R),
         "V", V_(n), "R", ("P", [[[10 * (r * n + k + 1)] for k in range(n)] for r in range(n)]),
         "all_gather(R, dim=0, stack)", None),
        ("all_gather_S0_R", "all_gather(x, pg, src=S(0), dst=R)", lambda x, g: all_gather(x, g, src=S(0), dst=R),
         "V", V_(n), "R", ("P", V_(n, n, 10)), "all_gather(R, dim=0)", "reduce_scatter(dim=0)"),
        ("all_gather_S0_I", "all_gather(x, pg, src=S(0), dst=I)", lambda x, g: all_gather(x, g, src=S(0), dst=I),
         "V", V_(n), "I", ("I", same(n, [10 * (k + 1) for k in range(n)])),
         "all_gather(I, dim=0)", "convert(I,V, dim=0)"),
        ("reduce_scatter_P_S0", "reduce_scatter(x, pg, src=P, dst=S(0))",
         lambda x, g: reduce_scatter(x, g, src=P, dst=S(0)),
         "P", V_(n, n), "V", ("V", [[5 + r] for r in range(n)]), "reduce_scatter(dim=0)", "all_gather(R, dim=0)"),
        ("all_to_all_S0_S0", "all_to_all(x, pg, src=S(0), dst=S(0))",
         lambda x, g: all_to_all(x, g, src=S(0), dst=S(0)),
         "V", V_(n, n), "V", ("V", V_(n, n, 10)), "all_to_all(split=0, concat=0)", "all_to_all(split=0, concat=0)"),
        ("convert_R_S0", "convert(x, pg, src=R, dst=S(0))", lambda x, g: convert(x, g, src=R, dst=S(0)),
         "R", same(n, [k + 1 for k in range(n)]), "V", ("V", V_(n, 1, 10)), "convert(R,V, dim=0)", "convert(V,P, dim=0)"),
        ("convert_S0_P", "convert(x, pg, src=S(0), dst=P)", lambda x, g: convert(x, g, src=S(0), dst=P),
         "V", V_(n), "P", None, None, None),
        ("convert_S0_P_expert", "convert(x, pg, src=S(0), dst=P, expert_mode=True)",
         lambda x, g: convert(x, g, src=S(0), dst=P, expert_mode=True),
         "V", V_(n), "P", ("R", same(n, [10 * (k + 1) for k in range(n)])), "convert(V,P, dim=0)", "convert(R,V, dim=0)"),
        ("convert_I_P", "convert(x, pg, src=I, dst=P)", lambda x, g: convert(x, g, src=I, dst=P),
         "I", same(n, [5]), "P", None, None, None),
        ("convert_I_P_expert", "convert(x, pg, src=I, dst=P, expert_mode=True)",
         lambda x, g: convert(x, g, src=I, dst=P, expert_mode=True),
         "I", same(n, [5]), "P", ("R", same(n, [7])), "convert(I,P)", "reinterpret(R,I)"),
        ("convert_I_R", "convert(x, pg, src=I, dst=R)", lambda x, g: convert(x, g, src=I, dst=R),
         "I", same(n, [5]), "R", ("P", [[r + 1] for r in range(n)]), "convert(I,R)", "all_reduce(I)"),
        ("convert_R_I", "convert(x, pg, src=R, dst=I)", lambda x, g: convert(x, g, src=R, dst=I),
         "R", same(n, [5]), "I", None, None, None),
        ("convert_R_I_expert", "convert(x, pg, src=R, dst=I, expert_mode=True)",
         lambda x, g: convert(x, g, src=R, dst=I, expert_mode=True),
         "R", same(n, [5]), "I", ("I", same(n, [7])), "convert(R,I)", "convert(I,P)"),
        ("reinterpret_R_P", "reinterpret(x, pg, src=R, dst=P)", lambda x, g: reinterpret(x, g, src=R, dst=P),
         "R", same(n, [5]), "P", None, None, None),
        ("reinterpret_R_P_expert", "reinterpret(x, pg, src=R, dst=P, expert_mode=True)",
         lambda x, g: reinterpret(x, g, src=R, dst=P, expert_mode=True),
         "R", same(n, [5]), "P", ("R", same(n, [7])), "reinterpret(R,P)", "reinterpret(R,P)"),
        ("reinterpret_V_P", "reinterpret(x, pg, src=V, dst=P)", lambda x, g: reinterpret(x, g, src=V, dst=P),
         "V", V_(n), "P", ("R", same(n, [7])), "reinterpret(V,P)", "reinterpret(R,V)"),
        ("reinterpret_I_R", "reinterpret(x, pg, src=I, dst=R)", lambda x, g: reinterpret(x, g, src=I, dst=R),
         "I", same(n, [5]), "R", None, None, None),
        ("reinterpret_I_R_expert", "reinterpret(x, pg, src=I, dst=R, expert_mode=True)",
         lambda x, g: reinterpret(x, g, src=I, dst=R, expert_mode=True),
         "I", same(n, [5]), "R", ("P", [[r + 1] for r in range(n)]), "reinterpret(I,R)", "all_reduce(I)"),
        ("reinterpret_R_I", "reinterpret(x, pg, src=R, dst=I)", lambda x, g: reinterpret(x, g, src=R, dst=I),
         "R", same(n, [5]), "I", None, None, None),
        ("reinterpret_R_I_expert", "reinterpret(x, pg, src=R, dst=I, expert_mode=True)",
         lambda x, g: reinterpret(x, g, src=R, dst=I, expert_mode=True),
         "R", same(n, [5]), "I", ("I", same(n, [7])), "reinterpret(R,I)", "convert(I,P)"),
        ("all_reduce_I_R", "all_reduce(x, pg, src=I, dst=R)  # expected refusal",
         lambda x, g: all_reduce(x, g, src=I, dst=R), "I", same(n, [5]), None, None, None, None),
        # Uneven split_sizes (rank r holds 1 + r % 2 rows): recorded, not
        # replayed (the semantics splits a dim evenly).
        ("all_gather_S0_R_uneven", f"all_gather(x, pg, src=S(0), dst=R, split_sizes={UNEVEN(n)})",
         lambda x, g: all_gather(x, g, src=S(0), dst=R, split_sizes=UNEVEN(n)),
         "V", [[10 * r + k + 1 for k in range(1 + r % 2)] for r in range(n)], "R",
         ("P", [[r + k + 1 for k in range(sum(UNEVEN(n)))] for r in range(n)]), None, None),
        ("all_gather_S0_I_uneven", f"all_gather(x, pg, src=S(0), dst=I, split_sizes={UNEVEN(n)})",
         lambda x, g: all_gather(x, g, src=S(0), dst=I, split_sizes=UNEVEN(n)),
         "V", [[10 * r + k + 1 for k in range(1 + r % 2)] for r in range(n)], "I",
         ("I", same(n, [k + 1 for k in range(sum(UNEVEN(n)))])), None, None),
        ("reduce_scatter_P_S0_uneven", f"reduce_scatter(x, pg, src=P, dst=S(0), split_sizes={UNEVEN(n)})",
         lambda x, g: reduce_scatter(x, g, src=P, dst=S(0), split_sizes=UNEVEN(n)),
         "P", [[r * 10 + k + 1 for k in range(sum(UNEVEN(n)))] for r in range(n)], "V",
         ("V", [[5 + r + k for k in range(1 + r % 2)] for r in range(n)]), None, None),
    ]


UNEVEN_WHY = ("uneven split_sizes: spmd-check's semantics splits a dim evenly over the ranks "
              "(SPEC.md §13.1), so no type describes these pieces")
WHY = {
    "all_gather_S0_R_uneven": UNEVEN_WHY,
    "all_gather_S0_I_uneven": UNEVEN_WHY,
    "reduce_scatter_P_S0_uneven": UNEVEN_WHY,
    "all_gather_V_R": "src=V stacks: its transpose unstacks the P cotangent, which no catalogue "
                      "reduce_scatter spelling does (it keeps the dim)",
}


def cases():
    cs = []
    for n in (2, 4):
        _reset()
        with fake_pg(n) as pg:
            for cid, call, fn, src, x, out, ct, fwd, bwd in table(n):
                real = run(pg, n, fn, src, x, ct)
                real = {"call": call, **real}
                case = {"kind": "collective", "id": f"{cid}_n{n}"}
                if fwd is not None and real["error"] is None:
                    case["job"] = {"dialect": "spmd_types", "mesh": {"x": n}, "forward": fwd}
                    if bwd is not None:
                        case["job"]["backward"] = bwd
                    case["job"]["inputs"] = [{"type": src, "per_rank": x}]
                    case["job"]["output"] = out
                    if ct is not None:
                        case["job"]["cotangent"] = ct[1]
                else:
                    case["job"] = None
                if cid in WHY:
                    case["why"] = WHY[cid]
                case["real"] = real
                cs.append(case)
    return cs


def main():
    doc = {"system": "spmd_types", "version": "0.3.1",
           "recorded_with": {"python": platform.python_version(), "spmd_types": "0.3.1",
                             "torch": torch.__version__,
                             "process_group": "fake; ranks simulated by LocalTensorMode"},
           "recorded_by": "peers/record_spmd_types_collectives.py", "cases": cases()}
    write(os.path.join(FIX, "spmd_types_collectives.json"), doc)


if __name__ == "__main__":
    main()
