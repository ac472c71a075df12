"""How many swiglu results are not the correctly rounded value (the README's bf16/fp16 figures).

    PYTHONPATH=src python benchmarks/swiglu_accuracy.py [--n 33554432] [--dtype bfloat16]

Pairs: a ~ N(0, 1), b ~ 3 N(0, 1), rounded to the dtype; and every finite b of the dtype with
a in {3, 1.5, 0.75, 3.03125, 5, 7, -3, 1} (the tie-prone case: a b or a b / 2 a tie of the
dtype). The reference: a b sigmoid(b) in float64 decides each result's rounding, except where
that value lies within 2^-20 (relative) of a midpoint between two values of the dtype; those,
the product ties among them, are decided by mpmath at 600 bits (beyond b = 400, where the rest
is below that, by the sign it has).
"""

from __future__ import annotations

import argparse
import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import infiniop  # noqa: E402


def correctly_rounded(a: np.ndarray, b: np.ndarray, dtype) -> np.ndarray:
    """The correctly rounded a * silu(b) in ``dtype`` (finite a and b)."""
    import mpmath

    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        v = x * y / (1.0 + np.exp(-y))
        want = v.astype(dtype)
    w = want.astype(np.float64)
    with np.errstate(all="ignore"):
        up = np.nextafter(want, dtype(np.inf)).astype(np.float64)
        dn = np.nextafter(want, dtype(-np.inf)).astype(np.float64)
        gap = np.minimum(np.abs(v - (w + up) / 2), np.abs(v - (w + dn) / 2))
    near = gap <= np.abs(v) * 2.0 ** -20  # NumPy's cast to bf16 goes through float32
    for i in np.nonzero(near & np.isfinite(v))[0]:
        cands = [want[i], np.nextafter(want[i], dtype(np.inf)), np.nextafter(want[i], dtype(-np.inf))]
        with mpmath.workprec(600):
            exact = mpmath.mpf(x[i]) * mpmath.mpf(y[i]) / (1 + mpmath.exp(-mpmath.mpf(y[i])))
            if y[i] > 400:  # sigmoid(y) = 1 - d, 0 < d < 2^-577: any such d rounds alike
                exact = mpmath.mpf(x[i]) * mpmath.mpf(y[i]) * (1 - mpmath.mpf(2) ** -590)
            want[i] = min(cands, key=lambda c: abs(mpmath.mpf(float(c)) - exact))
    return want


def report(name: str, a: np.ndarray, b: np.ndarray, dtype) -> None:
    got = infiniop.swiglu(a, b)
    want = correctly_rounded(a, b, dtype)
    finite = np.isfinite(want.astype(np.float64))
    bits = np.uint16 if np.dtype(dtype).itemsize == 2 else np.uint32
    off = (got.view(bits) != want.view(bits)) & finite
    print(f"{name}: {int(off.sum())} of {int(finite.sum())} not correctly rounded")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 25)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    args = ap.parse_args()
    dtype = ml_dtypes.bfloat16 if args.dtype == "bfloat16" else np.float16
    rng = np.random.default_rng(0)
    a = rng.standard_normal(args.n).astype(np.float32).astype(dtype)
    b = (rng.standard_normal(args.n) * 3).astype(np.float32).astype(dtype)
    report(f"{args.dtype}, {args.n} pairs a ~ N(0, 1), b ~ 3 N(0, 1)", a, b, dtype)
    every = np.arange(1 << 16, dtype=np.uint16).view(dtype)
    with np.errstate(invalid="ignore"):
        every = every[np.isfinite(every.astype(np.float64))]
    for av in (3, 1.5, 0.75, 3.03125, 5, 7, -3, 1):
        report(f"{args.dtype}, a = {av}, every finite b", np.full(every.size, av, dtype), every, dtype)


if __name__ == "__main__":
    main()
