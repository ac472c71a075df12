"""Accuracy of torch's activations beside ours: what torch's speed is bought with.

    PYTHONPATH=src python benchmarks/torch_accuracy.py

float32: 2^21 inputs (uniform over the function's interesting range, and 3 N(0, 1)) against a
float64 reference (math.erfc for gelu, NumPy's exp for silu/sigmoid; their own error, ~2^-52,
decides a float32 rounding wrongly only within that of a tie); fp16/bf16 gelu: every finite
value of the type, the reference's rounding decided in float64 among the neighbours. Prints the
share of correctly rounded results, the largest error in ulps and how many are more than 1 (and
100) ulps off.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import torch

import infiniop

_ERFC = np.vectorize(math.erfc)


def _gelu64(x: np.ndarray) -> np.ndarray:
    return x * 0.5 * _ERFC(-x / math.sqrt(2))


def _report(name: str, got: np.ndarray, ref: np.ndarray) -> None:
    want = ref.astype(np.float32)
    err = np.abs(got.astype(np.float64) - ref) / np.spacing(np.abs(want)).astype(np.float64)
    print(f"{name:28s} correctly rounded {100 * np.mean(got == want):8.4f}%  max {err.max():10.3g} ulp"
          f"  > 1 ulp: {int((err > 1).sum()):8d}  > 100 ulp: {int((err > 100).sum()):8d}")


def _report_half(name: str, got: np.ndarray, ref: np.ndarray, dt) -> None:
    first = ref.astype(np.float32).astype(dt)
    with np.errstate(over="ignore", invalid="ignore"):
        cands = np.stack([first, np.nextafter(first, dt(np.inf)), np.nextafter(first, dt(-np.inf))])
        dist = np.abs(cands.astype(np.float64) - ref)
    want = cands[np.argmin(np.where(np.isnan(dist), np.inf, dist), axis=0), np.arange(ref.size)]

    def order(a):  # the values' positions on the number line, as integers
        i = a.view(np.uint16).astype(np.int32)
        return np.where(i & 0x8000, -(i & 0x7FFF), i)

    ulp = np.abs(order(got) - order(want))
    print(f"{name:28s} correctly rounded {100 * np.mean(ulp == 0):8.4f}%  max {ulp.max():10d} ulp"
          f"  > 1 ulp: {int((ulp > 1).sum()):8d}  of {ref.size} inputs")


def main() -> None:
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    normal = rng.standard_normal(1 << 20) * 3
    cases = {
        "gelu": (rng.uniform(-15, 6, 1 << 20), _gelu64, torch.nn.functional.gelu),
        "silu": (rng.uniform(-100, 30, 1 << 20), lambda x: x / (1 + np.exp(-x)), torch.nn.functional.silu),
        "sigmoid": (rng.uniform(-100, 30, 1 << 20), lambda x: 1 / (1 + np.exp(-x)), torch.sigmoid),
    }
    for op, (wide, ref, tfn) in cases.items():
        x = np.concatenate([wide, normal]).astype(np.float32)
        r = ref(x.astype(np.float64))
        _report(f"{op} float32 infiniop", getattr(infiniop, op)(x), r)
        _report(f"{op} float32 torch", tfn(torch.from_numpy(x)).numpy(), r)
    for dt, tdt in ((ml_dtypes.bfloat16, torch.bfloat16), (np.float16, torch.float16)):
        every = np.arange(1 << 16, dtype=np.uint16).view(dt)
        with np.errstate(invalid="ignore"):
            x = every[np.isfinite(every.astype(np.float64))]
        r = _gelu64(x.astype(np.float64))
        t = torch.from_numpy(x.view(np.int16)).view(tdt)
        got_t = torch.nn.functional.gelu(t).view(torch.int16).numpy().view(dt)
        name = np.dtype(dt).name
        _report_half(f"gelu {name} infiniop", infiniop.gelu(x), r, dt)
        _report_half(f"gelu {name} torch", got_t, r, dt)


if __name__ == "__main__":
    main()
