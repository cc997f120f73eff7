"""jax 0.12.0.1: the incorrect claims `spmd-check registry jax` finds on an
unreduced input (elementwise, reductions, shape primitives), run
end to end through the public jax.lax functions inside
jax.shard_map(check_vma=True) on 2 host CPU devices. Each case enters
per-rank values as varying, casts them to unreduced (a pending sum) with
jax.lax.pcast, applies the op, and leaves shard_map with the out_specs the
output's type asks for (an unreduced output is summed first with psum).
It prints JAX's value beside the op of the summed input and exits 0 when
every case differs (reproduced), 1 otherwise.

    /work/venv-jax012/bin/python peers/repro_jax_registry.py
"""
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

jax.config.update("jax_enable_x64", True)
lax = jax.lax
MESH = Mesh(np.array(jax.devices()[:2]), ("x",), axis_types=(AxisType.Explicit,))


def run(fn, per_rank):
    """fn on x unreduced (x = the sum of per_rank): JAX's type and value."""
    g = jax.device_put(np.array(per_rank, np.float64).reshape(-1), NamedSharding(MESH, P("x")))
    typed = {}

    def body(x):
        y = fn(lax.pcast(x, "x", to="unreduced"))
        m = jax.typeof(y).mat
        typed["t"] = "varying" if "x" in m.varying else "unreduced" if "x" in m.unreduced else "invariant"
        return lax.psum(y, "x") if typed["t"] == "unreduced" else y

    out = jax.jit(jax.shard_map(body, mesh=MESH, in_specs=P("x"), out_specs=P(), check_vma=True))(g)
    return typed["t"], np.asarray(out).tolist()


CASES = [
    ("integer_pow(x, 2)", lambda x: lax.integer_pow(x, 2), [[1.0], [2.0]]),
    ("clamp(0, x, 10)", lambda x: lax.clamp(0.0, x, 10.0), [[-1.0], [4.0]]),
    ("convert_element_type(x, int32)", lambda x: lax.convert_element_type(x, np.int32), [[-1.0], [0.5]]),
    ("select_n(True, x, 1.0)", lambda x: lax.select_n(np.array([True]), x, np.array([1.0])), [[0.0], [0.0]]),
    # Primitives with no unreduced rule: jax._src.lax.utils.call_ur_rule
    # looks for unreduced in the sharding spec only (explicit mode), so an
    # operand unreduced over a manual axis (in `aval.mat`) passes and the
    # output is typed invariant, and out_specs=P() then reads one rank's
    # value.
    ("reduce_prod(x, axes=(0,))", lambda x: lax.reduce_prod_p.bind(x, axes=(0,)), [[0.0], [1.0]]),
    ("argmax(x, 0)", lambda x: lax.argmax(x, 0, np.int64), [[0.0, 0.0], [0.0, 1.0]]),
    ("cumsum(x, 0)", lambda x: lax.cumsum(x, 0), [[0.0], [1.0]]),
    ("cummax(x, 0)", lambda x: lax.cummax(x, 0), [[0.0], [1.0]]),
    ("rev(x, (0,))", lambda x: lax.rev(x, (0,)), [[0.0], [1.0]]),
    # concatenate's unreduced rule keeps the one unreduced operand's
    # state and ignores the invariant one, which the psum then counts on
    # every rank.
    ("concatenate([1.0], x)", lambda x: lax.concatenate([np.array([1.0]), x], 0), [[0.0], [0.0]]),
]


def main():
    reproduced = 0
    for text, fn, per_rank in CASES:
        typed, got = run(fn, per_rank)
        total = np.array(per_rank, np.float64).sum(axis=0)
        want = np.asarray(fn(total)).tolist()
        differs = got != want
        reproduced += differs
        print(f"{text}: x unreduced, per rank {per_rank} (x = {total.tolist()}): typed {typed}; "
              f"JAX gives {got}, the op on the sum is {want}: "
              + ("reproduced" if differs else "not reproduced"))
    sys.exit(0 if reproduced == len(CASES) else 1)


if __name__ == "__main__":
    main()
