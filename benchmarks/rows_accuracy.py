"""fp16/bf16 softmax, logsoftmax and causal_softmax against float64 references.

    PYTHONPATH=src python benchmarks/rows_accuracy.py

Rows of N(0, scale^2) values (scale 1 and 8 on (2048, 4096), 30 on (4096, 512), 0.01 on (512,
50257)); the reference is computed in float64 from the same fp16/bf16 inputs and rounded once
to the type. Prints the share of correctly rounded outputs and the largest error in ulps.
(logsoftmax's output nearest 0, -log(sum) with the sum just above 1, carries float32's absolute
error: many ulps of a tiny value, as in torch.)
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import infiniop


def ulps(got, ref64, dt) -> tuple[float, int]:
    """(percent correctly rounded, max ulps) of ``got`` against ``ref64`` rounded to ``dt``."""
    def ordinal(a):
        b = a.view(np.int16).astype(np.int64)
        return np.where(b < 0, -(b & 0x7FFF), b)
    g, c = ordinal(got), ordinal(ref64.astype(dt))
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
            logsoft = ulps(infiniop.logsoftmax(x, out=np.empty_like(x)), d - np.log(s), dt)
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
