"""Exact values for fixtures: every recorded number must be an integer or a
dyadic rational with a small denominator, written as a JSON integer or a
"p/q" string. Anything else (a rounded float) is refused loudly."""
from fractions import Fraction
import json

MAX_DEN = 1 << 16
MAX_ABS = 1 << 50


def exact(v):
    f = Fraction(float(v)) if not isinstance(v, (int, Fraction)) else Fraction(v)
    d = f.denominator
    if d > MAX_DEN or d & (d - 1) or abs(f.numerator) > MAX_ABS:
        raise ValueError(f"value {v!r} is not a small dyadic rational; refusing to record it")
    return f.numerator if d == 1 else f"{f.numerator}/{d}"


def tree(a):
    """Nested lists of exact values from an array-like (numpy or jax)."""
    import numpy as np
    a = np.asarray(a)
    if a.ndim == 0:
        return exact(a.item())
    return [tree(x) for x in a]


def write(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
