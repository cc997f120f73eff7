"""Record DTensor's `from_local` of uneven pieces that may not follow
torch.chunk (SPEC.md §23.17; the class of pytorch issue #144109) into
tests/fixtures/uneven/dtensor_from_local_uneven.json: on 1-D meshes of 2, 3
and 4 ranks (LocalTensorMode on a fake process group), a global vector
1, 2, …, L of every length 0 to 2n + 1 is cut into pieces by torch.chunk's
sizes, by first-ranks-longer sizes (divmod) and with every row on the last
rank; each rank's piece goes to `DTensor.from_local(..., [Shard(0)],
shape=(L,), stride=(1,), run_check=False)`, then `redistribute` to
Replicate(). Recorded: the sizes, and each rank's result, or the refusal.

    /path/to/torch-2.14.1/python peers/record_from_local_uneven.py
"""
import json
import os
import warnings

import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.testing._internal.distributed.fake_pg import FakeStore

from registry_values import encode

warnings.filterwarnings("ignore")
OUT = os.environ.get("OUT") or os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "uneven",
                                            "dtensor_from_local_uneven.json")


def splits(L, n):
    c = -(-L // n)
    return {
        "chunk": [min(c, max(0, L - r * c)) for r in range(n)],
        "divmod": [L // n + (1 if r < L % n else 0) for r in range(n)],
        "last": [0] * (n - 1) + [L],
    }


def flat(t):
    return encode(list(t.shape), t.reshape(-1).tolist())


def main():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    cases = []
    for n in (2, 3, 4):
        mesh = init_device_mesh("cpu", (n,))
        for L in range(0, 2 * n + 2):
            seen = set()
            for how, sizes in splits(L, n).items():
                if tuple(sizes) in seen:
                    continue
                seen.add(tuple(sizes))
                offs = [sum(sizes[:r]) for r in range(n)]
                rec = {"mesh": [n], "length": L, "split": how, "sizes": sizes}
                with LocalTensorMode(n) as mode:
                    try:
                        locs = mode.rank_map(lambda r: torch.arange(1 + offs[r], 1 + offs[r] + sizes[r],
                                                                    dtype=torch.float64))
                        x = DTensor.from_local(locs, mesh, [Shard(0)], shape=torch.Size([L]), stride=(1,),
                                               run_check=False)
                        y = x.redistribute(mesh, [Replicate()])
                        lt = y._local_tensor
                        rec["after"] = ([flat(lt._local_tensors[r]) for r in range(n)]
                                        if hasattr(lt, "_local_tensors") else [flat(lt)] * n)
                    except Exception as err:
                        s = str(err).strip()
                        rec["refused"] = f"{type(err).__name__}: {s.splitlines()[0][:200] if s else ''}"
                cases.append(rec)
    doc = {"torch": torch.__version__,
           "recorded_by": "peers/record_from_local_uneven.py: from_local(shape=, stride=, run_check=False) "
                          "then redistribute to Replicate(), LocalTensorMode on a fake process group",
           "cases": cases}
    with open(os.path.abspath(OUT), "w") as f:
        f.write(json.dumps(doc) + "\n")
    print(len(cases), "cases,", sum("refused" in c for c in cases), "refused")


if __name__ == "__main__":
    main()
