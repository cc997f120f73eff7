"""How a registry file writes the real kernels' values (SPEC.md §22.2),
shared by the registry recorders (DTensor, spmd_types, JAX).

A value is kept only where float64 holds it exactly in spmd-check's
window: |v| < 2^30 with at most 24 binary digits after the point.
Elsewhere it is `None` (no exact value), or "nan", "inf", "-inf" (not
finite). A tensor is written `SHAPE:VALUES`, e.g. `2x2:1,0,-1,1/2` (a
scalar `:5`); a tensor with a value outside the window is `None`, one
with a value that is not finite "nan".
"""

import gzip
import json
import math
import sys
from fractions import Fraction

WINDOW_MAG = 1 << 30
WINDOW_DEN = 1 << 24


def exact(v):
    """A Python or numpy number (or bool) as a dyadic string if it is in
    the window; None if not; "nan", "inf" or "-inf" if not finite."""
    if hasattr(v, "item"):  # a numpy or torch scalar
        v = v.item()
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v) if abs(v) < WINDOW_MAG else None
    v = float(v)
    if v != v:
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    f = Fraction(v)
    if abs(f) >= WINDOW_MAG or f.denominator > WINDOW_DEN:
        return None
    return str(f)


def encode(shape, values):
    """A tensor (its shape and its values in row-major order) as
    `2x2:1,0,-1,1/2`; None if some value is not exact; "nan" if some
    value is not finite."""
    out = []
    for v in values:
        e = exact(v)
        if e is None:
            return None
        if e in ("nan", "inf", "-inf"):
            return "nan"
        out.append(e)
    return "x".join(str(d) for d in shape) + ":" + ",".join(out)


def decode(s):
    """`encode`'s text back: (shape, values as floats, exactly)."""
    dims, vals = s.split(":", 1)
    shape = [int(d) for d in dims.split("x")] if dims else []
    data = [float(Fraction(v)) for v in vals.split(",")] if vals else []
    return shape, data


def load_doc(path):
    """A registry file, gzipped (a `.gz` name) or plain."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def save_doc(path, doc):
    """Write a registry file, gzipped for a `.gz` name with no name or time
    in the header (the same text gives the same bytes)."""
    text = json.dumps(doc, separators=(",", ":")) + "\n"
    if path.endswith(".gz"):
        with open(path, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0,
                                                  compresslevel=9) as z:
            z.write(text.encode())
    else:
        with open(path, "w") as fh:
            fh.write(text)


# ------------------------------------------------ the instance recorders' loop

def raised(err, limit=200):
    """An exception in one line: its type and the first line of its
    message (at most `limit` characters of it)."""
    s = str(err).strip()
    return f"{type(err).__name__}: {s.splitlines()[0][:limit] if s else ''}"


def instances(claim, cot, sizes, count, make, describe=raised, passes=()):
    """`count` instances per mesh size of one claim and cotangent, as the
    backward recorders store them (SPEC.md §22.6): `make(n)` records one;
    where the library raises, the instance keeps the error instead. An
    exception of a type in `passes` is not the library's (the reference
    has no derivative): it propagates."""
    out = []
    for n in sizes:
        for _ in range(count):
            try:
                rec = make(n)
            except passes:
                raise
            except Exception as err:
                rec = {"n": n, "cotangent_placement": cot, "error": describe(err)}
            out.append({"claim": claim, **rec})
    return out


def attach(e, key, cases, what="instances"):
    """Store an entry's recorded cases under `key` and say so; 1 if there
    were any, else 0."""
    if not cases:
        return 0
    e[key] = cases
    print(f"{e['op']}({e['args']}): {len(cases)} {what}", file=sys.stderr)
    return 1


def finish(path, doc, done, what):
    save_doc(path, doc)
    print(f"{done} entries with {what}", file=sys.stderr)
