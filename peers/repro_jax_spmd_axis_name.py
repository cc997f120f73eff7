"""jax 0.12.0.1: on a mesh with Explicit axes, `psum_scatter` and untiled
`all_gather` inside `shard_map(over 'y')` fail under
`vmap(..., spmd_axis_name='x')`, where every batch element's shard_map
is well defined and the same program on Auto axes gives the right values.

Mesh 2x2 ('x', 'y'); batch of 4 sharded over 'x' (2 per 'x' rank), the
way peers/record_vmap_jax.py built its "spmd_axis_name_cases"; each
element g of shape [4, 3] is split over 'y' by in_specs=P('y'),
out_specs=P('y'). Inside the body the operand's type keeps the batch
dim's Explicit 'x' sharding (e.g. f32[4@x,2,3]{V:y}), and three rules in
jax/_src/lax/parallel.py build an output type from it without fixing its
sharding spec:

- psum_scatter_tiled: `psum_scatter(v, 'y', scatter_dimension=0,
  tiled=True)`, in_axes=0. Traces; jit fails in lowering:
  "ValueError: Length of sharding.spec (3) must be equal to aval's ndim
  (0)". `_reduce_scatter_lowering` (parallel.py:2277) makes the reducer's
  scalar type as `x_aval.update(shape=())`, keeping the operand's
  sharding P('x', None, None); the psum lowering (parallel.py:1127)
  builds its scalar with P() and works. The rank-0 aval is this scalar,
  not anything the recorder computed.
- psum_scatter_untiled: the same with tiled=False, in_axes=0. Fails at
  trace time: "Length of sharding.spec (3) must be equal to aval's ndim
  (2)". `_reduce_scatter_effectful_abstract_eval` (parallel.py:2348)
  deletes the scatter dim from the shape, not from the spec.
- all_gather_untiled: `all_gather(v, 'y', axis=0, tiled=False)`,
  in_axes=-1. Fails at trace time: "Sharding spec ('x',) implies that
  array axis 2 is partitioned 2 times, but does not evenly divide the
  dimension size 3". `_all_gather_effectful_abstract_eval`
  (parallel.py:2116) inserts the gather dim into the shape, not the spec,
  so the batch dim's 'x' lands on the dim before it. (Where that dim
  happens to divide by 2, e.g. in_axes=1, there is no error: the values
  are right but the output is sharded P(None, 'y', 'x', None), 'x' on a
  gather dim instead of the batch dim.)

All three also fail with check_vma=False, and with a plain vmap (no
spmd_axis_name) of the same 'x'-sharded input, and (1), (2) and (3)
without any vmap in a partial-manual shard_map(axis_names={'y'}) whose
input is sharded over 'x': spmd_axis_name is one way of getting an
Explicit 'x' into the body's types, not the cause. None is an artifact of
the recorder: the minimal programs below reproduce its errors.

Exit 0 when every selected case reproduces (JAX raises, or returns
values other than the stack of the per-element results computed with
numpy), 1 otherwise. `--control` runs the same programs on a mesh with
Auto axes, where JAX gives the right values: the script must then exit 1.
`--case NAME` picks one case (default: all; each runs in its own process).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 /path/to/jax-0.12.0.1/python \\
        peers/repro_jax_spmd_axis_name.py [--control] [--case psum_scatter_tiled|psum_scatter_untiled|all_gather_untiled]
"""
import os
import subprocess
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np  # noqa: E402

CASES = ("psum_scatter_tiled", "psum_scatter_untiled", "all_gather_untiled")
CONTROL = "--control" in sys.argv
B = 4  # the batch, 2 per 'x' rank


def per_element(case, g):
    """The meaning of shard_map(f, in_specs=P('y'), out_specs=P('y')) on
    one element g [4, 3]: rank r of 'y' holds b_r = g[2r:2r+2]."""
    b0, b1 = g[:2], g[2:]
    if case == "psum_scatter_tiled":  # rank r: row r of b0 + b1, [1, 3] -> [2, 3]
        return b0 + b1
    if case == "psum_scatter_untiled":  # rank r: (b0 + b1)[r], [3] -> [6]
        return (b0 + b1).reshape(-1)
    return np.concatenate([np.stack([b0, b1])] * 2)  # every rank: [2, 2, 3] -> [4, 2, 3]


def run_one(case):
    import jax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    kind = AxisType.Auto if CONTROL else AxisType.Explicit
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(kind, kind), devices=jax.devices()[:4])
    if case == "all_gather_untiled":
        body, in_axes = (lambda v: jax.lax.all_gather(v, "y", axis=0, tiled=False)), -1
    else:
        tiled = case == "psum_scatter_tiled"
        body, in_axes = (lambda v: jax.lax.psum_scatter(v, "y", scatter_dimension=0, tiled=tiled)), 0
    elems = np.arange(B * 4 * 3, dtype=np.float32).reshape(B, 4, 3) % 11
    if in_axes == 0:  # [B@x, 4@y, 3]
        g, spec = elems, P("x", "y")
    else:  # [4@y, 3, B@x]
        g, spec = np.moveaxis(elems, 0, -1), P("y", None, "x")
    f = jax.vmap(jax.shard_map(body, mesh=mesh, in_specs=P("y"), out_specs=P("y")),
                 in_axes=in_axes, out_axes=0, spmd_axis_name="x")
    want = np.stack([per_element(case, e) for e in elems])
    try:
        got = np.asarray(jax.jit(f)(jax.device_put(g, NamedSharding(mesh, spec))))
    except Exception as e:
        print(f"{case}: JAX raised {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        return True
    same = got.shape == want.shape and np.array_equal(got, want)
    print(f"{case}: JAX shape {got.shape}, the stack of the per-element results {want.shape}; equal: {same}")
    return not same


if "--case" in sys.argv:
    selected = [sys.argv[sys.argv.index("--case") + 1]]
    assert selected[0] in CASES, f"--case must be one of {CASES}"
else:
    selected = list(CASES)

if len(selected) == 1:
    sys.exit(0 if run_one(selected[0]) else 1)
# one process per case: a failed lowering can leave JAX's tracing state
# unusable for the programs that follow it in the same process
rcs = [subprocess.run([sys.executable, os.path.abspath(__file__), "--case", c] + (["--control"] if CONTROL else []),
                      env=os.environ).returncode for c in selected]
sys.exit(0 if all(rc == 0 for rc in rcs) else 1)
