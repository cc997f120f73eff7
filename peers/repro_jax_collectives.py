"""JAX 0.12.0.1 calls whose transpose raises inside shard_map: two
collectives (SPEC.md §22.5; `spmd-check registry jax --op 'lax.all_to_all'
--all` lists them as undetermined) and erf, hence exact gelu (§22.6;
`--op 'lax.erf*'`). Each case is a plain user program; this prints what
JAX does and exits 0 when every failure is still there.

    /path/to/jax-0.12.0.1/python peers/repro_jax_collectives.py
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

mesh = Mesh(np.array(jax.devices()[:2]), ("x",), axis_types=(AxisType.Explicit,))
x = jax.device_put(np.arange(8.0).reshape(4, 2), NamedSharding(mesh, P("x")))


def untiled_all_to_all(v):
    # Rank r's block is 2x2; split dim 0 into the 2 ranks, stack on dim 1.
    return jax.lax.all_to_all(v, "x", 0, 1, tiled=False)


def pbroadcast(v):
    return jax.lax.pbroadcast(v, "x", 0)


def erf(v):
    return jax.lax.erf(v)


def gelu(v):
    return jax.nn.gelu(v, approximate=False)


CASES = [("all_to_all(split_axis=0, concat_axis=1, tiled=False)", untiled_all_to_all),
         ("pbroadcast(source=0)", pbroadcast), ("erf", erf), ("gelu(approximate=False)", gelu)]
still = 0
for name, f in CASES:
    sm = jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    out = jax.eval_shape(sm, x)
    try:
        # Tracing the gradient is enough: no backend runs it.
        jax.make_jaxpr(lambda v: jax.vjp(sm, v)[1](jax.numpy.ones(out.shape, out.dtype)))(x)
        print(f"{name}: its vjp traces")
    except Exception as e:
        still += 1
        print(f"{name}: the forward types ({out.shape}), its vjp raises "
              f"{type(e).__name__}: {str(e).splitlines()[0]}")
raise SystemExit(0 if still == len(CASES) else 1)
