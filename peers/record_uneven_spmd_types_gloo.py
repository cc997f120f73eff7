"""Record spmd_types' uneven collectives on real processes (gloo) into
tests/fixtures/uneven/spmd_types_uneven_gloo.json.

This is the companion of peers/record_uneven_spmd_types.py, which runs the
same calls under LocalTensorMode. That simulation cannot run the uneven
reduce_scatter (the rank is symbolic there and `_ReduceScatterUneven.forward`
indexes a list by it), nor therefore the backward of the uneven all_gather.
Here each rank is its own CPU process (torch.multiprocessing spawn, backend
gloo, rendezvous through a FileStore in a temporary folder), so the rank is a
plain integer and both collectives run for real.

The cases are the ones the LocalTensorMode recorder enumerates, in the same
order and with the same inputs and cotangents (its `splits` and `block` are
imported): for 2, 3 and 4 ranks, every length of dim 0 from 0 to 2n+1,
split as DTensor chunks ("chunk"), divmod ("divmod") or all rows on the last
rank ("last"), each of
  - `all_gather(x, pg, src=S(0), dst=R, split_sizes=sizes)`, then backward
    with a P cotangent (a different block on each rank), and
  - `reduce_scatter(x, pg, src=P, dst=S(0), split_sizes=sizes)`, then
    backward with an S(0) cotangent,
the forward call made inside spmd_types' `typecheck()`, as in the existing
recorder. Per case: the key set of the existing fixture (split, op, n,
split_sizes, input, cotangent), then "output" (each rank's result) or
"refused" (the error, as a string), and "grad" (each rank's input gradient)
or "backward_error". Tensors are written by registry_values.encode. Values
are small integers in float64, so every number is exact. An error that is
not the same on every rank is written "rank R: ERROR" per rank, joined by
" | ".

Gloo's allgather wants every rank's tensor the same size, so wherever the
split sizes are not all equal the all_gather is refused ("ProcessGroupGloo::
allgather: invalid tensor size ...") and so is the reduce_scatter's backward
(an uneven all_gather): a limit of the gloo backend, not a verdict of
spmd_types. Gloo's reduce_scatter takes unequal sizes, so every
reduce_scatter forward runs. Equal split sizes still take spmd_types'
uneven code path (`_AllGatherUneven`, `_ReduceScatterUneven`), forward and
backward.

One process group per rank count serves all its cases (three spawns in all).

    /path/to/torch-2.14.1-with-spmd-types-0.3.1/python peers/record_uneven_spmd_types_gloo.py

Padded mode (environment variable PAD=1) writes
tests/fixtures/uneven/spmd_types_uneven_gloo_padded.json instead, so that
the uneven cases gloo refuses get recorded too. Each worker hands
spmd_types a replacement for torch.distributed through the library's own
hook (`spmd_types._dist.set_dist`): an object that forwards every attribute
to the real torch.distributed except `all_gather(tensor_list, tensor,
group)`. That one zero-pads this rank's tensor along dim 0 to the longest
piece tensor_list asks for, runs gloo's all_gather on the equal-sized
tensors, and copies into each tensor_list[i] the leading rows it expects,
dropping the padding. reduce_scatter and everything else stay plain gloo.
The padding is the recorder's work, not spmd_types' nor gloo's, and the
file's "recorded_by" says so; the cases, their order and their keys are
those of the unpadded file.

    PAD=1 /path/to/torch-2.14.1-with-spmd-types-0.3.1/python peers/record_uneven_spmd_types_gloo.py
"""
import datetime
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_uneven_spmd_types import block, splits, text  # noqa: E402

PAD = os.environ.get("PAD") == "1"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "uneven",
                   "spmd_types_uneven_gloo_padded.json" if PAD else "spmd_types_uneven_gloo.json")
TIMEOUT = datetime.timedelta(seconds=60)


class PaddedAllGatherDist:
    """torch.distributed as spmd_types sees it in padded mode: all_gather
    takes pieces of unequal length along dim 0 (zero padding around gloo's
    equal-size all_gather); every other name is the real torch.distributed's."""

    def __getattr__(self, name):
        return getattr(dist, name)

    @staticmethod
    def all_gather(tensor_list, tensor, group=None, async_op=False):
        if async_op:
            raise NotImplementedError("the padded all_gather is synchronous only")
        rows = max(t.shape[0] for t in tensor_list)
        padded = torch.cat([tensor, tensor.new_zeros((rows - tensor.shape[0],) + tuple(tensor.shape[1:]))])
        pieces = [padded.new_empty(padded.shape) for _ in tensor_list]
        dist.all_gather(pieces, padded.contiguous(), group=group)
        for out, piece in zip(tensor_list, pieces):
            out.copy_(piece[:out.shape[0]])


def enumerate_cases(n):
    """(split, op, sizes) in the order of the LocalTensorMode recorder."""
    for length in range(0, 2 * n + 2):
        for how, sizes in splits(length, n).items():
            for which in ("all_gather", "reduce_scatter"):
                yield how, which, sizes


def case_values(n, which, sizes):
    """Every rank's input and cotangent, as the LocalTensorMode recorder
    builds them."""
    length = sum(sizes)
    if which == "all_gather":
        xs = [block(s, 100 * r) for r, s in enumerate(sizes)]
        cts = [block(length, 1000 + 100 * r) for r in range(n)]
    else:
        xs = [block(length, 100 * r) for r in range(n)]
        cts = [block(s, 1000 + 100 * r) for r, s in enumerate(sizes)]
    return xs, cts


def describe(err):
    s = str(err).strip()
    return f"{type(err).__name__}: {s.splitlines()[0][:200] if s else ''}"


def run_case(pg, rank, n, which, sizes):
    """This rank's part of one case: its output (or the error) and its
    input gradient (or the error)."""
    from spmd_types import P, R, S, all_gather, assert_type, reduce_scatter
    from spmd_types._checker import typecheck
    from spmd_types._mesh_axis import _reset

    _reset()
    xs, cts = case_values(n, which, sizes)
    in_type, cot_type = (S(0), P) if which == "all_gather" else (P, S(0))
    got = {}
    x = xs[rank].clone().requires_grad_(True)
    assert_type(x, {pg: in_type})
    try:
        with typecheck():
            if which == "all_gather":
                y = all_gather(x, pg, src=S(0), dst=R, split_sizes=sizes)
            else:
                y = reduce_scatter(x, pg, src=P, dst=S(0), split_sizes=sizes)
        got["output"] = text(y)
    except Exception as err:
        got["refused"] = describe(err)
        return got
    try:
        c = cts[rank].clone()
        assert_type(c, {pg: cot_type})
        with typecheck():
            y.backward(c)
        got["grad"] = text(x.grad)
    except Exception as err:
        got["backward_error"] = describe(err)
    return got


def worker(rank, n, store_path, out_dir, pad):
    if pad:
        from spmd_types._dist import set_dist
        set_dist(PaddedAllGatherDist())
    store = dist.FileStore(store_path, n)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=n, timeout=TIMEOUT)
    pg = dist.distributed_c10d._get_default_group()
    results = []
    for _how, which, sizes in enumerate_cases(n):
        results.append(run_case(pg, rank, n, which, sizes))
        # Keep the ranks in step, so that a case that failed on one rank
        # cannot leave a collective half-done under the next case.
        dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)


def merge_error(per_rank, key):
    """One string for an error, or None where no rank had it."""
    texts = [got.get(key) for got in per_rank]
    if all(t is None for t in texts):
        return None
    if len(set(texts)) == 1:
        return texts[0]
    return " | ".join(f"rank {r}: {t}" for r, t in enumerate(texts))


def record_n(n):
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(n, os.path.join(tmp, "store"), tmp, PAD), nprocs=n, join=True)
        per_rank = []
        for r in range(n):
            with open(os.path.join(tmp, f"rank{r}.json")) as f:
                per_rank.append(json.load(f))
    cases = []
    for i, (how, which, sizes) in enumerate(enumerate_cases(n)):
        xs, cts = case_values(n, which, sizes)
        rec = {"split": how, "op": which, "n": n, "split_sizes": sizes,
               "input": [text(t) for t in xs], "cotangent": [text(t) for t in cts]}
        got = [per_rank[r][i] for r in range(n)]
        refused = merge_error(got, "refused")
        if refused is not None:
            rec["refused"] = refused
            cases.append(rec)
            continue
        rec["output"] = [g["output"] for g in got]
        backward_error = merge_error(got, "backward_error")
        if backward_error is not None:
            rec["backward_error"] = backward_error
        else:
            rec["grad"] = [g["grad"] for g in got]
        cases.append(rec)
    return cases


def main():
    cases = []
    for n in (2, 3, 4):
        cases.extend(record_n(n))
    recorded_by = ("peers/record_uneven_spmd_types_gloo.py: one CPU process per rank "
                   "(torch.multiprocessing spawn), backend gloo, inside typecheck()")
    if PAD:
        recorded_by = ("PAD=1 " + recorded_by + "; all_gather is padded by the recorder, not plain "
                       "gloo: spmd_types._dist.set_dist installs a torch.distributed whose all_gather "
                       "zero-pads each rank's tensor along dim 0 to the longest piece, calls gloo's "
                       "all_gather and cuts each piece back to its size; reduce_scatter and the rest "
                       "are plain gloo")
    doc = {"spmd_types": "0.3.1", "torch": torch.__version__,
           "recorded_by": recorded_by,
           "cases": cases}
    with open(os.path.abspath(OUT), "w") as f:
        f.write(json.dumps(doc) + "\n")
    print(len(cases), "cases,", sum("refused" in c for c in cases), "refused,",
          sum("backward_error" in c for c in cases), "with a backward error", file=sys.stderr)


if __name__ == "__main__":
    main()
