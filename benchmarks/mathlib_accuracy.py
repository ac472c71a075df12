"""Accuracy table of mathlib (the README's figures): max ulp error and % correctly rounded per
function and dtype, on the same inputs as tests/test_mathlib.py.

    PYTHONPATH=src python benchmarks/mathlib_accuracy.py [--n32 1048576] [--n64 131072] [names]

float32: the test sample (specials, random bit patterns, subnormals, hard regions) against a
float64 reference; % correctly rounded over results that are not subnormal, and separately the
% among subnormal results. fp16/bf16: every value of the type, computed knowing the result
is rounded to it (m.result_bits). float64: long double or mpmath reference.
"""

from __future__ import annotations

import argparse
import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from mathlib_support import correctly_rounded, sample_f32, sample_f64, ulp_error  # noqa: E402
from test_mathlib import CASES, _run  # noqa: E402


def _stats(y, ref, dtype, tiny):
    err = ulp_error(np.asarray(y).astype(np.float64) if dtype is not np.float64 else y, ref, dtype)
    ok = correctly_rounded(y, ref, dtype)
    sub = (np.abs(np.nan_to_num(ref)) < tiny) & (ref != 0)
    cr = ok[~sub].mean() * 100
    crs = ok[sub].mean() * 100 if sub.any() else float("nan")
    return err.max(), cr, crs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="?", default=",".join(CASES))
    ap.add_argument("--n32", type=int, default=1 << 20)
    ap.add_argument("--n64", type=int, default=1 << 17)
    a = ap.parse_args()
    print("| function | f32 max ulp | f32 CR % (subnormal results) | f16 max / CR % | "
          "bf16 max / CR % | f64 max ulp | f64 CR % |")
    print("|---|---|---|---|---|---|---|")
    for name in a.names.split(","):
        case = CASES[name]
        x = sample_f32(case.iv32, a.n32)
        with np.errstate(all="ignore"):
            e32, cr32, crs32 = _stats(_run(name, x, "f32"), case.ref32(x), np.float32, 2.0 ** -126)
        half = []
        for dt in (np.float16, ml_dtypes.bfloat16):
            xh = np.arange(1 << 16, dtype=np.uint16).view(dt).astype(np.float32)
            with np.errstate(all="ignore"):
                ref = case.ref32(xh)
            yh = _run(name, xh, "f32", 11 if dt is np.float16 else 8).astype(dt)
            tiny = float(ml_dtypes.finfo(dt).smallest_normal)
            half.append(_stats(yh, ref, dt, tiny))
        if case.ref64 is not None:
            xd = sample_f64(case.iv64, a.n64)
            with np.errstate(all="ignore"):
                e64, cr64, _ = _stats(_run(name, xd, "f64"), case.ref64(xd), np.float64, 2.0 ** -1022)
            f64 = f"{e64:.3f} | {cr64:.3f}"
        else:
            f64 = "- | -"
        sub = f" ({crs32:.1f})" if crs32 == crs32 else ""
        print(f"| {name} | {e32:.3f} | {cr32:.3f}{sub} | {half[0][0]:.2f} / {half[0][1]:.3f} | "
              f"{half[1][0]:.2f} / {half[1][1]:.3f} | {f64} |", flush=True)


if __name__ == "__main__":
    main()
