"""jax 0.12.0.1: the transpose of `jax.lax.ragged_all_to_all` with respect
to its `output` buffer is wrong when a receiving rank has an empty segment
that starts where the next segment starts (the exclusive-cumsum layout of
an expert that received no tokens from some rank).

The forward writes each received segment into a copy of `output`; rows
that a segment overwrites do not depend on `output`, so the exact
cotangent for `output` is the result's cotangent with those rows zeroed.
JAX's transpose rule (jax/_src/lax/parallel.py, `_ragged_all_to_all_transpose`,
lines 1858-1877 of 0.12.0.1) marks the overwritten rows by a running sum
that sets 1 at each segment's start (`.at[offsets].set(1)`: several
segments starting at one row count once) and subtracts 1 at each
segment's end (`.at[offsets + sizes].add(-1)`: an empty segment's end is
its start). With an empty segment at the same offset as a written one
the sum is 0 over the written rows, and their cotangent leaks through.

Minimal case, 2 ranks, 4 rows: rank 1 receives an empty segment from rank
0 at offset 0 and its own rows 0-1 at offset 0 (recv_sizes [0, 2],
output_offsets [0, 0]). With the result's cotangent [1, 2, 3, 4] the
exact cotangent for rank 1's `output` is [0, 0, 3, 4]; JAX's rule gives
[1, 2, 3, 4].

XLA:CPU cannot run ragged_all_to_all. So this script:
- with 2 or more GPUs (or TPUs) visible, runs `jax.vjp` of the real
  collective inside `shard_map` and compares with the exact cotangent;
- otherwise traces the same `jax.vjp` on 2 CPU devices and evaluates the
  traced transpose rank by rank: JAX binds every primitive of it on the
  CPU, except the two collectives (ragged_all_to_all and a tiled
  all_to_all of the offsets), which this file computes from their
  documented meaning.
The exact cotangent is computed from the forward alone (it is linear:
each row of the result is a row of `operand` or of `output`), never from
JAX's rule. Exit 0 when JAX's cotangent differs from the exact one
(reproduced), 1 otherwise. With `--control` the empty segment starts at
row 3 instead, where JAX's rule is exact: the script must then exit 1.

    /path/to/jax-0.12.0.1/python peers/repro_jax_ragged.py [--control]
"""
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.extend import core as jcore  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

N = 2
OPERAND = [[10.0, 11.0, 12.0, 13.0], [20.0, 21.0, 22.0, 23.0]]
OUTPUT = [[-1.0, -2.0, -3.0, -4.0], [-5.0, -6.0, -7.0, -8.0]]
INPUT_OFFSETS = [[0, 0], [0, 0]]
SEND_SIZES = [[0, 0], [0, 2]]       # rank 1 sends its rows 0-1 to itself
OUTPUT_OFFSETS = [[0, 0], [0, 0]]   # where each sent segment lands
RECV_SIZES = [[0, 0], [0, 2]]       # rank 1 receives 0 rows from 0, 2 from itself
COTANGENT = [[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]]
if "--control" in sys.argv:
    # The twin: the empty segment moved to row 3, where no segment starts;
    # JAX's rule is exact there, and the script must say so (exit 1).
    OUTPUT_OFFSETS = [[0, 3], [0, 0]]


def routes(input_offsets, send_sizes, output_offsets):
    """(source, destination, first row sent, first row written, rows) of
    every segment: sender s's slice i goes to rank i // (K // n)."""
    k = len(input_offsets[0])
    per = k // len(input_offsets)
    for s in range(len(input_offsets)):
        for i in range(k):
            yield s, i // per, int(input_offsets[s][i]), int(output_offsets[s][i]), int(send_sizes[s][i])


def forward(operand, output, input_offsets, send_sizes, output_offsets):
    """The documented meaning: each segment copied into a copy of output."""
    res = [np.array(o, dtype=np.float64) for o in output]
    for s, d, a, b, size in routes(input_offsets, send_sizes, output_offsets):
        res[d][b:b + size] = np.asarray(operand[s])[a:a + size]
    return res


def exact_cotangents(cot):
    """The transpose of the forward, from the forward alone: the forward is
    linear in (operand, output), so the cotangent of an input row is the
    pairing of the result's cotangent with the forward of that row's unit
    vector (every other input zero)."""
    rows = len(OUTPUT[0])
    zero = [np.zeros(rows) for _ in range(N)]
    out = []
    for which in ("operand", "output"):
        per_rank = []
        for r in range(N):
            g = np.zeros(rows)
            for j in range(rows):
                unit = [np.zeros(rows) for _ in range(N)]
                unit[r][j] = 1.0
                args = (unit, zero) if which == "operand" else (zero, unit)
                y = forward(*args, INPUT_OFFSETS, SEND_SIZES, OUTPUT_OFFSETS)
                g[j] = sum(float(np.dot(y[d], cot[d])) for d in range(N))
            per_rank.append(g.tolist())
        out.append(per_rank)
    return out


def all_to_all_tiled(xs):
    per = len(xs[0]) // len(xs)
    return [np.concatenate([np.asarray(xs[j])[d * per:(d + 1) * per] for j in range(len(xs))])
            for d in range(len(xs))]


def body(operand, output, io, ss, oo, rs, t):
    y, back = jax.vjp(lambda a, b: jax.lax.ragged_all_to_all(a, b, io, ss, oo, rs, axis_name="x"),
                      operand, output)
    return (y,) + back(t)


def arrays():
    f, i = np.float32, np.int32
    return [np.array(x, dt) for x, dt in [(OPERAND, f), (OUTPUT, f), (INPUT_OFFSETS, i), (SEND_SIZES, i),
                                          (OUTPUT_OFFSETS, i), (RECV_SIZES, i), (COTANGENT, f)]]


def on_devices(mesh):
    sh = NamedSharding(mesh, P("x"))
    args = [jax.device_put(np.concatenate(x), sh) for x in arrays()]
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 7, out_specs=(P("x"),) * 3))
    outs = f(*args)
    return [[np.asarray(o).reshape(N, -1)[r].tolist() for o in outs] for r in range(N)]


def on_cpu_trace(mesh):
    """Evaluate the traced jaxpr of `body` per rank, in lock step."""
    sh = NamedSharding(mesh, P("x"))
    xs = arrays()
    glob = [jax.device_put(np.concatenate(x), sh) for x in xs]
    traced = jax.make_jaxpr(jax.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 7,
                                          out_specs=(P("x"),) * 3))(*glob)
    (eqn,) = traced.jaxpr.eqns
    # One instance: a batch dim of 1 in front of every per-rank argument.
    res = evaluate(eqn.params["jaxpr"], [[x[r][None] for r in range(N)] for x in xs], 1)
    return [[o[0].tolist() for o in res[r]] for r in range(N)]


def evaluate(inner, args, batch):
    """The per-rank jaxpr on per-rank args, in lock step, over a leading
    batch dim of `batch` instances at once (each primitive bound under
    `jax.vmap`; the collectives run instance by instance)."""
    env = [dict() for _ in range(N)]

    def read(r, v):
        if isinstance(v, jcore.Literal):
            return np.broadcast_to(np.asarray(v.val), (batch,) + np.shape(v.val))
        return env[r][v]

    for r in range(N):
        for v, x in zip(inner.invars, args):
            env[r][v] = np.asarray(x[r])
    for e in inner.eqns:
        ins = [[np.asarray(read(r, v)) for v in e.invars] for r in range(N)]
        name = e.primitive.name
        if name == "ragged_all_to_all":
            outs = [[np.empty_like(ins[r][1])] for r in range(N)]
            for b in range(batch):
                res = forward(*[[ins[r][k][b] for r in range(N)] for k in (0, 1, 2, 3, 4)])
                for r in range(N):
                    outs[r][0][b] = res[r]
        elif name == "all_to_all":
            assert e.params["tiled"] and e.params["split_axis"] == 0 == e.params["concat_axis"]
            per = ins[0][0].shape[1] // N
            outs = [[np.concatenate([ins[j][0][:, d * per:(d + 1) * per] for j in range(N)], axis=1)]
                    for d in range(N)]
        elif name == "pvary":
            outs = [list(ins[r]) for r in range(N)]
        else:
            def one(*xs, e=e):
                o = e.primitive.bind(*xs, **e.params)
                return tuple(o) if e.primitive.multiple_results else (o,)
            outs = [[np.asarray(o) for o in jax.vmap(one)(*[jax.numpy.asarray(x) for x in ins[r]])]
                    for r in range(N)]
        for r in range(N):
            for v, x in zip(e.outvars, outs[r]):
                env[r][v] = np.asarray(x)
    return [[np.asarray(read(r, v)) for v in inner.outvars] for r in range(N)]


def main():
    accel = [d for d in jax.devices() if d.platform != "cpu"]
    if len(accel) >= N:
        how = f"run on {N} {accel[0].platform} devices"
        got = on_devices(jax.sharding.Mesh(np.array(accel[:N]), ("x",)))
    else:
        cpus = jax.devices("cpu")
        how = f"its vjp traced on {N} CPU devices, the transpose evaluated rank by rank"
        got = on_cpu_trace(jax.make_mesh((N,), ("x",), devices=cpus[:N]))
    want_operand, want_output = exact_cotangents(np.array(COTANGENT, dtype=np.float64))
    print(f"jax {jax.__version__}: ragged_all_to_all, {how}")
    wrong = False
    for r in range(N):
        y, op_t, out_t = got[r]
        print(f"rank {r}: result {y}; cotangent for operand {op_t} (exact {want_operand[r]}), "
              f"for output {out_t} (exact {want_output[r]})")
        wrong |= op_t != want_operand[r] or out_t != want_output[r]
    print("reproduced: JAX's transpose differs from the exact one" if wrong
          else "not reproduced: JAX's transpose is exact here")
    sys.exit(0 if wrong else 1)


if __name__ == "__main__":
    main()
