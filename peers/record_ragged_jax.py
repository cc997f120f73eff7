"""Record JAX's own transpose of `ragged_all_to_all` on every small layout
(SPEC.md §23.3) into tests/fixtures/uneven/ragged_jax_0.12.0.1.json.gz.

XLA:CPU cannot run the collective, so this traces `jax.vjp` of it inside
`shard_map` on 2 CPU devices once per buffer size (the layout's offsets
and sizes are runtime arrays, so one trace serves every layout) and
evaluates the traced transpose rank by rank: JAX binds every primitive of
it on the CPU, except the two collectives (ragged_all_to_all, run from
its documented meaning, and a tiled all_to_all of the offsets), as
peers/repro_jax_ragged.py does for one layout. For each layout and each
basis cotangent (1 at one rank and row of the result) it stores the
cotangents JAX gives for `operand` and `output`. The checker compares
them with the derivative of the forward (tests/ragged.rs).

The layouts are those of spmd-check's `generators::ragged::layouts`:
2 ranks, one slice per destination, rows of one element, and
- buffers of 3 rows, segments of up to 2 rows, input offsets packed;
- buffers of 2 rows, segments of up to 1 row, input offsets anywhere.
The test checks that the file holds every one of them.

    /path/to/jax-0.12.0.1/python peers/record_ragged_jax.py
"""
import itertools
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from repro_jax_ragged import body, evaluate  # noqa: E402
from registry_values import save_doc  # noqa: E402

N = 2
OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "uneven", "ragged_jax_0.12.0.1.json.gz")


def layouts(rows, max_rows, packed):
    """As generators::ragged::layouts (order aside): per sender and slice a
    size, an output offset and (unless packed) an input offset."""
    starts = range(1) if packed else range(rows)
    choices = [(sz, off, at) for sz in range(max_rows + 1) for off in range(rows) for at in starts]
    for pick in itertools.product(choices, repeat=N * N):
        send = [[pick[s * N + i][0] for i in range(N)] for s in range(N)]
        out_off = [[pick[s * N + i][1] for i in range(N)] for s in range(N)]
        if packed:
            in_off = [[sum(send[s][:i]) for i in range(N)] for s in range(N)]
        else:
            in_off = [[pick[s * N + i][2] for i in range(N)] for s in range(N)]
        recv = [[send[j][d] for j in range(N)] for d in range(N)]
        if valid(rows, in_off, send, out_off):
            yield {"input_offsets": in_off, "send_sizes": send, "output_offsets": out_off, "recv_sizes": recv}


def valid(rows, in_off, send, out_off):
    written = [[False] * rows for _ in range(N)]
    for s in range(N):
        for i in range(N):
            sz, a, b = send[s][i], in_off[s][i], out_off[s][i]
            if a + sz > rows or b + sz > rows:
                return False
            for r in range(b, b + sz):
                if written[i][r]:
                    return False
                written[i][r] = True
    return True


def traced(rows):
    mesh = jax.make_mesh((N,), ("x",), devices=jax.devices("cpu")[:N])
    sh = NamedSharding(mesh, P("x"))
    f, i = np.float32, np.int32
    glob = [jax.device_put(np.zeros(N * k, dt), sh) for k, dt in
            [(rows, f), (rows, f), (N, i), (N, i), (N, i), (N, i), (rows, f)]]
    jaxpr = jax.make_jaxpr(jax.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 7,
                                         out_specs=(P("x"),) * 3))(*glob)
    (eqn,) = jaxpr.jaxpr.eqns
    return eqn.params["jaxpr"]


def record(rows, max_rows, packed):
    inner = traced(rows)
    lays = list(layouts(rows, max_rows, packed))
    basis = [(cr, row) for cr in range(N) for row in range(rows)]
    batch = len(lays) * len(basis)
    keys = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")
    # Per rank, per argument: the instances stacked (layout-major, then basis).
    ints = [[np.array([lay[k][r] for lay in lays for _ in basis], np.int32) for r in range(N)] for k in keys]
    cot = np.zeros((N, batch, rows), np.float32)
    for li in range(len(lays)):
        for bi, (cr, row) in enumerate(basis):
            cot[cr, li * len(basis) + bi, row] = 1
    zero = [np.zeros((batch, rows), np.float32)] * N
    args = [zero, zero] + ints + [list(cot)]
    res = evaluate(inner, args, batch)
    out = []
    for li, lay in enumerate(lays):
        at = [li * len(basis) + bi for bi in range(len(basis))]
        out.append({**lay,
                    "operand_t": [[[int(v) for v in res[r][1][b]] for r in range(N)] for b in at],
                    "output_t": [[[int(v) for v in res[r][2][b]] for r in range(N)] for b in at]})
    print(f"{len(out)} layouts of {rows} rows ({'packed' if packed else 'any input offsets'})", file=sys.stderr)
    return {"rows": rows, "max_rows": max_rows, "packed": packed, "layouts": out}


def main():
    doc = {"jax": jax.__version__, "ranks": N,
           "recorded_by": "peers/record_ragged_jax.py: JAX's traced transpose, evaluated per rank on CPU "
                          "with the two collectives from their documented meaning",
           "basis": "one cotangent per (rank, row) of the result, in that order; operand_t[b][r] and "
                    "output_t[b][r] are rank r's cotangents for basis b",
           "sets": [record(3, 2, True), record(2, 1, False)]}
    save_doc(os.path.abspath(OUT), doc)


if __name__ == "__main__":
    main()
