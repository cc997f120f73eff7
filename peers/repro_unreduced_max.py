"""jax 0.11.2: reduce_max / reduce_min of an Unreduced (pending sum) array
is typed Unreduced of kind max / min, and resharding it gives the maximum
over ranks of each rank's partial maximum, not the maximum of the sum
(SPEC.md §21.6; peers/README.md, findings). Run on host CPU:

    python3.12 -m venv v && v/bin/pip install "jax[cpu]==0.11.2"
    v/bin/python peers/repro_unreduced_max.py

jax 0.10.2 has no unreduced kinds (no jax.sharding.UnreducedKind)."""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P

jax.config.update("jax_enable_x64", True)
mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,))
with jax.set_mesh(mesh):
    # z = lhs @ rhs with the contraction split over x: rank 0 holds 1 * 0,
    # rank 1 holds 1 * b; z = b is still an unreduced sum (the oracle's
    # counterexamples: b = -1 for max, b = 1 for min).
    lhs = jax.device_put(np.array([[1.0, 1.0]]), P(None, "x"))
    for name, red, ref, b in [("reduce_max", jax.lax.reduce_max, np.max, -1.0),
                              ("reduce_min", jax.lax.reduce_min, np.min, 1.0)]:
        rhs = jax.device_put(np.array([[0.0], [b]]), P("x", None))
        @jax.jit
        def f(l, r):
            z = jnp.dot(l, r, out_sharding=P(None, None, unreduced={"x"}))
            m = red(z, axes=(0,))
            print(f"{name}: z {jax.typeof(z)} -> {jax.typeof(m)}")
            return jax.reshard(m, P(None)), jax.reshard(z, P(None, None))

        m, z = f(lhs, rhs)
        got, want = np.asarray(m).tolist(), ref(np.asarray(z), axis=0).tolist()
        print(f"  {name} resharded: {got}; of the reduced z: {want}; "
              + ("values_differ" if got != want else "same"))
