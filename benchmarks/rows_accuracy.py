"""fp16/bf16 softmax, logsoftmax and causal_softmax against float64 references.

    PYTHONPATH=src python benchmarks/rows_accuracy.py

Rows of N(0, scale^2) values (scale 1 and 8 on (2048, 4096), 30 on (4096, 512), 0.01 on (512,
50257)); the reference is computed in float64 from the same fp16/bf16 inputs and rounded once
to the type (logsoftmax's: see logsoftmax_ref). Prints the share of correctly rounded outputs
and the largest error in ulps.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import infiniop


def round_once(ref64, dt):
    """``ref64`` rounded once to ``dt``: ml_dtypes casts float64 to bfloat16 through float32 (a
    second rounding, which put this script's bf16 logsoftmax at 99.936% where it was 97.96%);
    float32 rounded to odd first keeps the one rounding correct."""
    if dt is np.float16:
        return ref64.astype(dt)
    with np.errstate(all="ignore"):
        f = ref64.astype(np.float32)
        step = (f.astype(np.float64) != ref64) & np.isfinite(f) & ((f.view(np.uint32) & 1) == 0)
        f = np.where(step, np.nextafter(f, np.where(ref64 > f, np.float32(np.inf),
                                                     np.float32(-np.inf))), f)
    return f.astype(dt)


def logsoftmax_ref(d):
    """d - log(sum(exp(d))) for float64 rows d = x - max: log1p of the sum without its 1s (in
    float64, log(s) for s near 1 keeps only s's absolute error), and where d - log(s) is not
    a float64, that float64 rounded to odd (d is often a tie of the half type, and a log(s)
    below float64's resolution beside it still decides the rounding)."""
    top = d == 0
    t = np.where(top, 0.0, np.exp(d)).sum(-1, keepdims=True)
    lg = np.log1p(top.sum(-1, keepdims=True) - 1 + t)
    h = d - lg
    bb = h - d
    e = (d - (h - bb)) + (-lg - bb)                   # two-sum: h + e == d - lg exactly
    bits = h.view(np.int64)
    inward = (bits < 0) ^ (e < 0)
    odd = ((bits - inward.astype(np.int64)) | 1).view(np.float64)
    return np.where((e != 0) & np.isfinite(h), odd, h)


def ulps(got, ref64, dt) -> tuple[float, int]:
    """(percent correctly rounded, max ulps) of ``got`` against ``ref64`` rounded to ``dt``."""
    def ordinal(a):
        b = a.view(np.int16).astype(np.int64)
        return np.where(b < 0, -(b & 0x7FFF), b)
    g, c = ordinal(got), ordinal(round_once(ref64, dt))
    return float((g == c).mean() * 100), int(np.abs(g - c).max())


def main() -> None:
    rng = np.random.default_rng(3)
    for dt in (np.float16, ml_dtypes.bfloat16):
        for scale, shape in ((1, (2048, 4096)), (8, (2048, 4096)), (30, (4096, 512)),
                             (0.01, (512, 50257))):
            x = (rng.standard_normal(shape) * scale).astype(dt)
            d = x.astype(np.float64)
            d = d - d.max(-1, keepdims=True)
            s = np.exp(d).sum(-1, keepdims=True)
            soft = ulps(infiniop.softmax(x), np.exp(d) / s, dt)
            logsoft = ulps(infiniop.logsoftmax(x, out=np.empty_like(x)), logsoftmax_ref(d), dt)
            n, r = shape[-1], 256
            keep = np.arange(n)[None, :] <= np.arange(r)[:, None] + n - r
            dc = np.where(keep, x[:r].astype(np.float64), -np.inf)
            ec = np.exp(dc - dc.max(-1, keepdims=True))
            causal = ulps(infiniop.causal_softmax(x[:r]), ec / ec.sum(-1, keepdims=True), dt)
            print(f"{np.dtype(dt).name:8} scale {scale:<4} {str(shape):13} "
                  "softmax %.4f%% max %d ulp | logsoftmax %.4f%% max %d | causal_softmax %.4f%% "
                  "max %d" % (soft + logsoft + causal))


if __name__ == "__main__":
    main()
