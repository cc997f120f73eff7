"""Record how DTensor splits one tensor dim over n ranks (SPEC.md §23.4)
into tests/fixtures/uneven/dtensor_split_sizes.json: for lengths 0..9 and 1..5
ranks, each rank's size and offset from `Shard.local_shard_size_and_offset`,
checked here against `torch.chunk` padded with empty shards (DTensor's
`_split_tensor`). spmd-check's `chunk` rule must give the same sizes.

    /path/to/torch-2.14.1/python peers/record_split_sizes.py
"""
import json
import os

import torch
from torch.distributed.tensor.placement_types import Shard

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "uneven", "dtensor_split_sizes.json")


def main():
    rows = []
    for n in range(1, 6):
        for length in range(0, 10):
            got = [Shard.local_shard_size_and_offset(length, n, r) for r in range(n)]
            sizes = [int(s) for s, _ in got]
            chunks = [c.shape[0] for c in torch.chunk(torch.arange(length), n)] if length else []
            chunks += [0] * (n - len(chunks))
            assert sizes == chunks, (length, n, sizes, chunks)
            rows.append({"len": length, "n": n, "sizes": sizes, "offsets": [int(o) for _, o in got]})
    doc = {"torch": torch.__version__,
           "recorded_by": "peers/record_split_sizes.py: Shard.local_shard_size_and_offset, checked against "
                          "torch.chunk padded with empty shards",
           "rows": rows}
    with open(os.path.abspath(OUT), "w") as f:
        f.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
