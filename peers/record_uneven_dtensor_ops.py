"""Record DTensor's local ops on uneven shards (SPEC.md §23.16) into
tests/fixtures/uneven/dtensor_uneven_ops.json, and the `allow_uneven_sharding`
flag of every single-dim strategy the installed torch registers into
dialects/tables/dtensor_allow_uneven.toml.

Ops: add, mul, relu, sum over dim 0, mm, t and reshape(-1), on inputs
distributed onto Shard(0), Shard(1) or Replicate over 1-D meshes of 2, 3
and 4 ranks (LocalTensorMode on a fake process group), with the sharded
dim of every length from 0 to n + 1 and the other dims 2 (mm's second
factor 2x3). Each input's values are 1, 2, … in row-major order (the
second input's from 101). Recorded per case: the global shapes, the
input placements, the output placements and each rank's local output,
or the refusal, or that no result came within LIMIT_S seconds (20).

    /path/to/torch-2.14.1/python peers/record_uneven_dtensor_ops.py
"""
import json
import os
import signal
import warnings

import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.testing._internal.distributed.fake_pg import FakeStore

from registry_values import encode

warnings.filterwarnings("ignore")
ROOT = os.path.join(os.path.dirname(__file__), "..")
OUT = os.environ.get("OUT") or os.path.join(ROOT, "tests", "fixtures", "uneven", "dtensor_uneven_ops.json")
FLAGS = os.path.join(ROOT, "dialects", "tables", "dtensor_allow_uneven.toml")
PLACES = {"R": Replicate(), "S(0)": Shard(0), "S(1)": Shard(1)}


def name(p):
    if isinstance(p, Shard):
        return f"S({p.dim})"
    if isinstance(p, Replicate):
        return "R"
    return str(p)


def flat(t):
    return encode(list(t.shape), t.reshape(-1).tolist())


def per_rank(dt, ranks):
    lt = dt._local_tensor
    if not hasattr(lt, "_local_tensors"):
        return [flat(lt) for _ in range(ranks)]
    return [flat(lt._local_tensors[r]) for r in range(ranks)]


def distribute(mode, g, mesh, p):
    x = distribute_tensor(g, mesh, [PLACES[p]])
    lt = x._local_tensor
    if not hasattr(lt, "_local_tensors"):
        # One plain tensor stands for every rank: make it one per rank, or
        # the fake process group's collectives do nothing.
        x = DTensor.from_local(mode.rank_map(lambda r: lt.clone()), mesh, x.placements,
                               shape=x.shape, stride=x.stride(), run_check=False)
    return x


# (op, the aten op its strategy is registered under, input placements,
# global shapes given the sharded length L, the function).
def ops(L):
    return [
        ("add", "aten.add.Tensor", ["S(0)", "S(0)"], [[L, 2], [L, 2]], lambda x, y: x + y),
        ("add", "aten.add.Tensor", ["S(0)", "R"], [[L, 2], [L, 2]], lambda x, y: x + y),
        ("mul", "aten.mul.Tensor", ["S(0)", "S(0)"], [[L, 2], [L, 2]], lambda x, y: x * y),
        ("mul", "aten.mul.Tensor", ["S(1)", "S(1)"], [[2, L], [2, L]], lambda x, y: x * y),
        ("relu", "aten.relu.default", ["S(0)"], [[L, 2]], lambda x: torch.relu(x - 3)),
        ("sum", "aten.sum.dim_IntList", ["S(0)"], [[L, 2]], lambda x: x.sum(0)),
        ("sum", "aten.sum.dim_IntList", ["S(1)"], [[2, L]], lambda x: x.sum(0)),
        ("matmul", "aten.mm.default", ["S(0)", "R"], [[L, 2], [2, 3]], lambda x, y: x @ y),
        ("matmul", "aten.mm.default", ["R", "S(1)"], [[2, 2], [2, L]], lambda x, y: x @ y),
        ("matmul", "aten.mm.default", ["S(1)", "S(0)"], [[2, L], [L, 3]], lambda x, y: x @ y),
        ("t", "aten.t.default", ["S(0)"], [[L, 2]], lambda x: x.t()),
        ("reshape", "aten.view.default", ["S(0)"], [[L, 2]], lambda x: x.reshape(-1)),
        ("reshape", "aten.view.default", ["S(1)"], [[2, L]], lambda x: x.reshape(-1)),
    ]


# A case that has not returned after this many seconds is recorded as such:
# DTensor's view propagation on a sharded dim of length 0 does not return.
LIMIT_S = int(os.environ.get("LIMIT_S", "20"))


class NoResult(Exception):
    pass


def _alarm(*_):
    raise NoResult()


def main():
    signal.signal(signal.SIGALRM, _alarm)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    prop = DTensor._op_dispatcher.sharding_propagator
    flags = {str(k): bool(v.allow_uneven_sharding) for k, v in prop.op_single_dim_strategy_funcs.items()}
    cases = []
    for n in (2, 3, 4):
        mesh = init_device_mesh("cpu", (n,))
        for L in range(0, n + 2):
            for op, aten, places, shapes, f in ops(L):
                rec = {"mesh": [n], "op": op, "aten": aten, "inputs": places, "shapes": shapes}
                gs = [torch.arange(1 + 100 * i, 1 + 100 * i + int(torch.Size(s).numel()),
                                   dtype=torch.float64).reshape(s) for i, s in enumerate(shapes)]
                signal.alarm(LIMIT_S)
                try:
                    with LocalTensorMode(n) as mode:
                        xs = [distribute(mode, g, mesh, p) for g, p in zip(gs, places)]
                        y = f(*xs)
                        rec["output"] = [name(p) for p in y.placements]
                        rec["per_rank"] = per_rank(y, n)
                except NoResult:
                    rec["no_result"] = f"no result within {LIMIT_S} s"
                except Exception as err:
                    if isinstance(err.__cause__, NoResult) or isinstance(err.__context__, NoResult):
                        rec["no_result"] = f"no result within {LIMIT_S} s"
                    else:
                        s = str(err).strip()
                        rec["refused"] = f"{type(err).__name__}: {s.splitlines()[0][:200] if s else ''}"
                finally:
                    signal.alarm(0)
                cases.append(rec)
    doc = {"torch": torch.__version__,
           "recorded_by": "peers/record_uneven_dtensor_ops.py: distribute_tensor, then the op; "
                          "LocalTensorMode on a fake process group",
           "cases": cases}
    with open(os.path.abspath(OUT), "w") as fh:
        fh.write(json.dumps(doc) + "\n")
    with open(os.path.abspath(FLAGS), "w") as fh:
        fh.write("# Written by peers/record_uneven_dtensor_ops.py from DTensor's sharding\n"
                 "# propagator (op_single_dim_strategy_funcs): each single-dim strategy's\n"
                 "# allow_uneven_sharding flag.\n")
        fh.write(f'torch = "{torch.__version__}"\n\n[allow_uneven_sharding]\n')
        for k, v in sorted(flags.items()):
            fh.write(f'"{k}" = {"true" if v else "false"}\n')
    print(len(cases), "cases,", sum("refused" in c for c in cases), "refused,",
          sum("no_result" in c for c in cases), "without a result;",
          len(flags), "strategies,", sum(flags.values()), "allow uneven sharding")


if __name__ == "__main__":
    main()
