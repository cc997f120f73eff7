"""Record what real JAX does for two collective spellings spmd-check's
catalogue did not take (issue 25): ppermute with a partial permutation
(some ranks receive from nobody) and the untiled all_to_all
(tiled=False), each with the gradient jax.vjp gives (JAX's own
transpose), plus the perm and split-size errors JAX raises.

Runs on 4 host CPU devices with x64, inside jax.shard_map(check_vma=True)
on a mesh {x: 4}, driven by peers/probe_jax_pipeline.py's `probe` (the
same recording conventions). Writes peers/recorded/jax_catalogue_<version>.json.

Usage: python peers/probe_jax_catalogue.py   (needs JAX >= 0.10; recorded
with jax 0.12.0.1 under Python 3.12.)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import probe_jax_pipeline as PP  # noqa: E402  (sets the 4 CPU devices and x64)
from exact import write  # noqa: E402

jax = PP.jax
lax = jax.lax
N = PP.N


def vec(scale):
    """Rank r holds [scale * (r + 1)]."""
    return [[scale * (r + 1)] for r in range(N)]


def block(rows, cols, base):
    """Rank r holds a rows x cols matrix with entry (i, j) = base*(r+1) + 10 i + j."""
    return [[[base * (r + 1) + 10 * i + j for j in range(cols)] for i in range(rows)]
            for r in range(N)]


def ppermute_cases():
    out = []
    for pid, perm in [("partial_01", [(0, 1)]),
                      ("partial_02_31", [(0, 2), (3, 1)]),
                      ("partial_10_23_32", [(1, 0), (2, 3), (3, 2)])]:
        out.append(PP.probe(f"ppermute_{pid}", f"jax.lax.ppermute(x, 'x', perm={perm})",
                            lambda x, perm=perm: lax.ppermute(x, "x", perm=perm),
                            [("Varying", vec(1))], ("Varying", vec(10))))
    # perms JAX refuses, or reads modulo the group size
    for pid, perm in [("dup_source", [(0, 1), (0, 2)]),
                      ("dup_dest", [(0, 1), (2, 1)]),
                      ("dest_out_of_range", [(0, 4)]),
                      ("source_out_of_range", [(5, 0)]),
                      ("negative_dest", [(0, -1)])]:
        out.append(PP.probe(f"ppermute_{pid}", f"jax.lax.ppermute(x, 'x', perm={perm})",
                            lambda x, perm=perm: lax.ppermute(x, "x", perm=perm),
                            [("Varying", vec(1))], ("Varying", vec(10))))
    return out


def all_to_all_cases():
    out = []
    # split axis of size 4 (the group size), a second dim of size 2
    for s, c, shape in [(0, 1, (4, 2)), (0, 0, (4, 2)), (1, 0, (2, 4)), (1, 1, (2, 4))]:
        rows, cols = shape
        out.append(PP.probe(
            f"all_to_all_untiled_s{s}_c{c}",
            f"jax.lax.all_to_all(x, 'x', {s}, {c}, tiled=False)  # x Varying, local {list(shape)}",
            lambda x, s=s, c=c: lax.all_to_all(x, "x", s, c, tiled=False),
            [("Varying", block(rows, cols, 100))]))
        if s != c and out[-1]["accepted"] and not out[-1]["transpose"]:
            # jax 0.12.0.1's vjp raises here (its transpose rule expands the
            # cotangent a second time). The transpose the rule means is the
            # untiled all_to_all with split and concat swapped: record real
            # JAX running that forward on the cotangent.
            ct = out[-1]["cotangent"]["per_rank"]
            out.append(PP.probe(
                f"all_to_all_untiled_s{c}_c{s}_on_cotangent_of_s{s}_c{c}",
                f"jax.lax.all_to_all(ct, 'x', {c}, {s}, tiled=False)  # ct: the cotangent above",
                lambda x, s=s, c=c: lax.all_to_all(x, "x", c, s, tiled=False),
                [("Varying", ct)]))
    out.append(PP.probe(
        "all_to_all_untiled_bad_size",
        "jax.lax.all_to_all(x, 'x', 0, 1, tiled=False)  # x Varying, local [2, 2]",
        lambda x: lax.all_to_all(x, "x", 0, 1, tiled=False),
        [("Varying", block(2, 2, 100))]))
    return out


def main():
    h = PP.header()
    h["recorded_by"] = "peers/probe_jax_catalogue.py"
    doc = {**h, "cases": [],
           "sections": {"ppermute": ppermute_cases(), "all_to_all": all_to_all_cases()}}
    here = os.path.dirname(os.path.abspath(__file__))
    write(os.path.join(here, "recorded", f"jax_catalogue_{jax.__version__}.json"), doc)


if __name__ == "__main__":
    main()
