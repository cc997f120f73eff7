"""Record JAX's answer to uneven shards (SPEC.md §23.18) into
tests/fixtures/uneven/jax_uneven_0.12.0.1.json: on 1-D meshes of 2, 3 and 4
CPU devices, a vector of every length 0 to n + 1 is put on the mesh with
NamedSharding(P('x')) (recorded: each device's shard size, or the
refusal), and given to `shard_map(lambda a: 2 * a, in_specs=P('x'),
out_specs=P('x'))` (recorded: the result, or the refusal).

    XLA_FLAGS=--xla_force_host_platform_device_count=4 /path/to/jax-0.12.0.1/python peers/record_uneven_jax.py
"""
import json
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

OUT = os.environ.get("OUT") or os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "uneven",
                                            f"jax_uneven_{jax.__version__}.json")


def refusal(err):
    s = str(err).strip()
    return f"{type(err).__name__}: {s.splitlines()[0][:200] if s else ''}"


def main():
    cases = []
    for n in (2, 3, 4):
        mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])
        double = jax.shard_map(lambda a: 2 * a, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
        for L in range(0, n + 2):
            rec = {"mesh": [n], "length": L}
            x = jnp.arange(1, L + 1, dtype=jnp.float32)
            try:
                y = jax.device_put(x, NamedSharding(mesh, P("x")))
                rec["shard_sizes"] = [int(s.data.shape[0])
                                      for s in sorted(y.addressable_shards, key=lambda s: s.device.id)]
            except Exception as err:
                y = x
                rec["device_put_refused"] = refusal(err)
            try:
                rec["result"] = [float(v) for v in double(y)]
            except Exception as err:
                rec["shard_map_refused"] = refusal(err)
            cases.append(rec)
    doc = {"jax": jax.__version__,
           "recorded_by": "peers/record_uneven_jax.py: device_put with NamedSharding(P('x')) and "
                          "shard_map(2 * a) on CPU devices",
           "cases": cases}
    with open(os.path.abspath(OUT), "w") as f:
        f.write(json.dumps(doc) + "\n")
    print(len(cases), "cases,", sum("shard_map_refused" in c for c in cases), "refused by shard_map")


if __name__ == "__main__":
    main()
