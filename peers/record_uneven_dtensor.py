"""Record DTensor's redistribute on uneven shards (SPEC.md §23.5) into
tests/fixtures/uneven/dtensor_uneven.json: on meshes of 2, 3 and 4 ranks and of
2x2 (LocalTensorMode on a fake process group), tensors whose sharded dim
is shorter than, equal to or longer than the ranks and not a multiple of
them (lengths 0 to 2n+1, the other dim 2), `distribute_tensor` onto each
source placement among Replicate, Shard(0), Shard(1) and Partial(sum)
(on 2x2: every pair of R, S(0), S(1)), then `redistribute` to each other
placement; recorded: the global tensor's shape (its values are 1, 2, …
in row-major order), and the per-rank local tensors before and after.
A refusal is recorded as such.

    /path/to/torch-2.14.1/python peers/record_uneven_dtensor.py
    OUT=tests/fixtures/uneven/dtensor_uneven_2.15.0.json /path/to/torch-2.15.0/python peers/record_uneven_dtensor.py
"""
import itertools
import json
import os
import warnings

import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.testing._internal.distributed.fake_pg import FakeStore

from registry_values import encode

warnings.filterwarnings("ignore")
# Another torch's recording goes beside the pinned one (OUT=…).
OUT = os.environ.get("OUT") or os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "uneven",
                                            "dtensor_uneven.json")
PLACES = {"R": Replicate(), "S(0)": Shard(0), "S(1)": Shard(1), "P(sum)": Partial()}


def flat(t):
    return encode(list(t.shape), t.reshape(-1).tolist())


def local_values(dt, ranks):
    """Each rank's local tensor as registry_values writes it (`2x2:1,1/2,…`,
    None where float64 is not exact, as Partial(sum) pieces of a value
    split over 3 ranks are)."""
    lt = dt._local_tensor
    if not hasattr(lt, "_local_tensors"):  # the same plain tensor on every rank
        return [flat(lt) for _ in range(ranks)]
    return [flat(lt._local_tensors[r]) for r in range(ranks)]


def one(mesh, ranks, shape, src, dst):
    g = torch.arange(1, 1 + int(torch.Size(shape).numel()), dtype=torch.float64).reshape(shape)
    rec = {"shape": shape, "src": src, "dst": dst}
    with LocalTensorMode(ranks) as mode:
        try:
            x = distribute_tensor(g, mesh, [PLACES[p] for p in src])
            lt = x._local_tensor
            if not hasattr(lt, "_local_tensors"):
                # The same tensor on every rank comes back as one plain
                # tensor, on which the fake process group's collectives do
                # nothing: make it one tensor per rank again.
                x = DTensor.from_local(mode.rank_map(lambda r: lt.clone()), mesh, x.placements,
                                       shape=x.shape, stride=x.stride(), run_check=False)
            rec["before"] = local_values(x, ranks)
            y = x.redistribute(mesh, [PLACES[p] for p in dst])
            rec["after"] = local_values(y, ranks)
        except Exception as err:
            s = str(err).strip()
            rec["refused"] = f"{type(err).__name__}: {s.splitlines()[0][:200] if s else ''}"
    return rec


def main():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    cases = []
    for n in (2, 3, 4):
        mesh = init_device_mesh("cpu", (n,))
        for length in range(0, 2 * n + 2):
            for src, dst in itertools.permutations(PLACES, 2):
                if src == "P(sum)" and dst == "P(sum)":
                    continue
                for d in (0, 1):
                    shape = [length, 2] if d == 0 else [2, length]
                    cases.append({"mesh": [n], **one(mesh, n, shape, [src], [dst])})
    mesh = init_device_mesh("cpu", (2, 2))
    two = ["R", "S(0)", "S(1)"]
    for length in range(0, 6):
        for src in itertools.product(two, repeat=2):
            for dst in itertools.product(two, repeat=2):
                if src == dst:
                    continue
                for d in (0, 1):
                    shape = [length, 3] if d == 0 else [3, length]
                    cases.append({"mesh": [2, 2], **one(mesh, 4, shape, list(src), list(dst))})
    doc = {"torch": torch.__version__,
           "recorded_by": "peers/record_uneven_dtensor.py: distribute_tensor then redistribute, "
                          "LocalTensorMode on a fake process group",
           "cases": cases}
    with open(os.path.abspath(OUT), "w") as f:
        f.write(json.dumps(doc) + "\n")
    print(len(cases), "cases,", sum("refused" in c for c in cases), "refused")


if __name__ == "__main__":
    main()
