"""JAX 0.12.0.1: primitives whose output type and whose transpose disagree
on an unreduced input inside shard_map(check_vma=True), found by the
backward section of `spmd-check registry jax` (SPEC.md §22.6; e.g.
`spmd-check registry jax --op 'lax.cumsum' --all`, rows undetermined
"the library raised").

- cumsum and rev of an unreduced operand are typed invariant (the forward
  finding of peers/repro_jax_registry.py), yet their vjp asks for the
  cotangent of an unreduced value (reduced, `{R:x}`) and refuses the
  invariant one the output's type calls for.
- concatenate of an unreduced and an invariant operand is typed
  unreduced, yet its vjp with respect to both operands asks for an
  invariant cotangent and refuses the reduced one.
- reduce_prod of an unreduced operand is typed invariant, and its vjp
  raises: its derivative multiplies two unreduced values.

Each case is a plain user program: enter per-rank values, cast them to
unreduced with lax.pcast, apply the op, and call jax.vjp with a
cotangent of the type the output's type asks for (reduced for unreduced,
invariant for invariant). It prints what JAX does and exits 0 when every
failure is still there, 1 otherwise.

    /path/to/jax-0.12.0.1/python peers/repro_jax_transposes.py
"""
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

jax.config.update("jax_enable_x64", True)
lax = jax.lax
mesh = Mesh(np.array(jax.devices()[:2]), ("x",), axis_types=(AxisType.Explicit,))
x = jax.device_put(np.array([1.0, 2.0, 3.0, 4.0]), NamedSharding(mesh, P("x")))
c = jax.device_put(np.array([5.0, 6.0]), NamedSharding(mesh, P()))

CASES = [
    ("cumsum(unreduced x, 0)", lambda u, v: lax.cumsum(u, 0)),
    ("rev(unreduced x, (0,))", lambda u, v: lax.rev(u, (0,))),
    ("concatenate([unreduced x, invariant c], 0)", lambda u, v: lax.concatenate([u, v], 0)),
    ("reduce_prod(unreduced x, (0,))", lambda u, v: lax.reduce_prod(u, (0,))),
]


def type_of_forward(f):
    """The type JAX gives the op's output, without differentiating."""
    typed = {}

    def body(xs, cs):
        m = jax.typeof(f(lax.pcast(xs, "x", to="unreduced"), cs)).mat
        typed["t"] = "unreduced" if "x" in m.unreduced else "varying" if "x" in m.varying else "invariant"
        return ()

    jax.make_jaxpr(jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P()), out_specs=(), check_vma=True))(x, c)
    return typed["t"]


still = 0
for name, f in CASES:
    typed = {"t": type_of_forward(f)}

    def body(xs, cs, f=f, typed=typed):
        u = lax.pcast(xs, "x", to="unreduced")
        y, back = jax.vjp(f, u, cs)
        ct = jax.numpy.ones(y.shape, y.dtype)
        if typed["t"] == "unreduced":
            ct = lax.pcast(ct, "x", to="reduced")
        back(ct)  # tracing the transpose is enough: no backend runs it
        return ()

    sm = jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P()), out_specs=(), check_vma=True)
    try:
        jax.make_jaxpr(sm)(x, c)
        print(f"{name}: output typed {typed.get('t')}; its vjp traces")
    except Exception as e:
        still += 1
        print(f"{name}: output typed {typed.get('t')}; its vjp raises "
              f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160]}")
raise SystemExit(0 if still == len(CASES) else 1)
