"""jax 0.12.0.1: `vmap(grad(f))` differs from `grad(vmap(f))` for an
untiled `all_gather` inside `shard_map` batched after its gather dim
(SPEC.md §24.8).

f gathers each rank's element e of shape [2, 3] into [n, 2, 3]
(all_gather, axis=0, tiled=False). Its transpose is the untiled
psum_scatter. With the batch at dim 1 of e:

- grad(vmap(f)) transposes the batched all_gather and is right;
- vmap(grad(f)) batches the transpose, an untiled psum_scatter whose
  batch dim (2 in the cotangent) comes after its scatter dim (0), and
  JAX's batching rule for it (`_reduce_scatter_batcher`) puts the
  result's batch dim at 3 where it is 1: JAX raises, or on more dims
  returns moved entries.

The exact cotangent is computed from the meaning (each rank's element
gets the sum over ranks of the cotangent's slice at its own index), not
from JAX. Exit 0 when vmap(grad(f)) fails or differs while grad(vmap(f))
is exact (reproduced), 1 otherwise. `--control` batches at dim 0, before
the gather dim, where both are exact: the script must then exit 1.

    /path/to/jax-0.12.0.1/python peers/repro_jax_vmap_grad.py [--control]
"""
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

N, B = 2, 4
AXIS = 0 if "--control" in sys.argv else 1
# Where vmap(f) leaves the output's batch dim: before the gather dim it
# stays; after it, the inserted gather dim pushes it up one.
CT_AXIS = AXIS + 1 if AXIS >= 1 else AXIS
mesh = jax.make_mesh((N,), ("x",))


def f(e):  # e: [2, 3, 5] -> [N, 2, 3, 5]
    return jax.lax.all_gather(e, "x", axis=0, tiled=False)


def vjp_one(e, ct):
    return jax.vjp(f, e)[1](ct)[0]


def vmap_grad(x, ct):
    """vmap(grad(f)): batch the per-element transpose."""
    return jax.vmap(vjp_one, in_axes=(AXIS, CT_AXIS), out_axes=AXIS)(x[0], ct[0])[None]


def grad_vmap(x, ct):
    """grad(vmap(f)): transpose the batched gather."""
    return jax.vjp(jax.vmap(f, in_axes=AXIS, out_axes=CT_AXIS), x[0])[1](ct[0])[0][None]


shape = [2, 3, 5]
shape.insert(AXIS, B)
rng = np.arange(N * int(np.prod(shape)), dtype=np.float32).reshape([N] + shape) % 7
ct_shape = [N, 2, 3, 5]
ct_shape.insert(CT_AXIS, B)
cts = (np.arange(N * int(np.prod(ct_shape)), dtype=np.float32).reshape([N] + ct_shape) % 5) + 1

sh = NamedSharding(mesh, P("x"))


def run(body):
    g = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x")))
    try:
        return np.asarray(g(jax.device_put(rng, sh), jax.device_put(cts, sh))), None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"


# The meaning: rank r's element gets the sum over ranks s of the
# cotangent s holds at gather index r.
moved = [np.moveaxis(cts[s], CT_AXIS, 0) for s in range(N)]  # [B, N, 2, 3, 5]
want = np.stack([np.moveaxis(sum(m[:, r] for m in moved), 0, AXIS) for r in range(N)])
vg, vg_err = run(vmap_grad)
gv, gv_err = run(grad_vmap)
gv_ok = gv is not None and gv.shape == want.shape and np.array_equal(gv, want)
vg_ok = vg is not None and vg.shape == want.shape and np.array_equal(vg, want)
print(f"grad(vmap(f)): {'exact' if gv_ok else (gv_err or 'WRONG')}")
print(f"vmap(grad(f)): {'exact' if vg_ok else (vg_err or 'WRONG')}")
sys.exit(0 if gv_ok and not vg_ok else 1)
