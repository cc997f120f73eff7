"""jax 0.12.0.1: `vmap` of an untiled `psum_scatter` inside `shard_map`
puts the batch dim in the wrong place when the batch dim comes after the
scatter dim (SPEC.md §24.3).

The untiled psum_scatter removes its scatter dim. Its batching rule
(jax/_src/lax/parallel.py, `_reduce_scatter_batcher`, line 2360) shares
the all_gather rule's step: a batch dim d after the scatter dim becomes
d + 1, where the removed dim makes it d - 1. vmap then moves the wrong
dim to `out_axes`:

- each element of shape [2, 4, 5] (dim 0 the group of 2) scatters to
  [4, 5]; vmapped over in_axes=1 of a block [2, 3, 4, 5] the result must
  be [3, 4, 5] on each rank. JAX gives [5, 3, 4], its entries moved with
  it: no error, wrong values;
- with elements of shape [2, 4] (result [4]) the claimed batch dim is
  past the end and JAX raises IndexError.

Exit 0 when JAX's result differs from the stack of the unbatched results
(reproduced), 1 when they agree. `--control` batches at in_axes=0,
before the scatter dim, where the rule is right: the script must then
exit 1.

    /path/to/jax-0.12.0.1/python peers/repro_jax_psum_scatter_vmap.py [--control]
"""
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

CONTROL = "--control" in sys.argv
mesh = jax.make_mesh((2,), ("x",))


def scatter(e):
    """One element [2, 4, 5] (dim 0 the group) -> its [4, 5] on this rank."""
    return jax.lax.psum_scatter(e, "x", scatter_dimension=0, tiled=False)


def body(y):
    y = y[0]  # the rank's block: [2, 3, 4, 5]
    if CONTROL:  # the batch first: [3, 2, 4, 5], in_axes=0
        return jax.vmap(scatter, in_axes=0, out_axes=0)(jax.numpy.moveaxis(y, 1, 0))[None]
    return jax.vmap(scatter, in_axes=1, out_axes=0)(y)[None]


x = np.arange(2 * 2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 2, 3, 4, 5)
xs = jax.device_put(x, NamedSharding(mesh, P("x")))
f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
# The meaning: rank r, batch element b gets the sum over ranks s of x[s][r, b].
want = np.stack([np.stack([x[:, r, b].sum(0) for b in range(3)]) for r in range(2)])
try:
    got = np.asarray(f(xs))
except Exception as e:  # the rank-dropping case raises instead
    print(f"JAX raised {type(e).__name__}: {e}")
    sys.exit(0)
same = got.shape == want.shape and np.array_equal(got, want)
print(f"JAX: shape {got.shape}; the stack of the unbatched results: shape {want.shape}; equal: {same}")
sys.exit(1 if same else 0)
