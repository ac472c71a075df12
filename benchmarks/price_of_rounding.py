"""What correct rounding costs: float32 silu three ways in one process, speed and accuracy.

- ``infiniop``: the library's silu (one float64 quotient rounded once, mathlib);
- ``plain_f32``: the same formula ``x / (1 + exp(-x))`` in plain float32 arithmetic through
  the same framework (the fp16/bf16 paths' degree-5 exp, one float32 division): torch's kind
  of evaluation, so the difference to ``infiniop`` is the price of the accuracy, not of the
  framework;
- ``torch``: ``torch.ops.aten.silu.out`` on the same threads.

    PYTHONPATH=src python benchmarks/price_of_rounding.py [--n 33554432] [--rounds 11]

Accuracy: 2^20 of the inputs against a float64 reference rounded to float32 (its own error,
2^-52, decides a float32 rounding wrongly only within that of a tie: negligible here).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import infiniop
from infiniop.backends.cpu import runtime
from infiniop.elementwise import mathlib as ml


def plain_silu(m, x):
    """x / (1 + exp(-x)) in float32: degree-5 exp (~2^-22), one division; no extra precision."""
    a = ml._at_most(m, ml._at_least(m, -x, -87.0), 87.0)
    t, p = ml._expm1_plain(m, a)
    return x / ((p + 1.0) * ml._pow2(m, t, 0, a) + 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 25)
    ap.add_argument("--rounds", type=int, default=11)
    args = ap.parse_args()
    plain = infiniop.elementwise("plain_silu", ("x",), infiniop.FLOATS, plain_silu)
    x = (np.random.default_rng(0).standard_normal(args.n) * 4).astype(np.float32)
    y = np.empty_like(x)
    impls = {"infiniop": (lambda: infiniop.silu(x, out=y), lambda a: infiniop.silu(a)),
             "plain_f32": (lambda: plain(x, out=y), lambda a: plain(a))}
    try:
        import torch
        torch.set_num_threads(runtime.num_threads())
        tx, ty = torch.from_numpy(x), torch.empty(args.n)
        impls["torch"] = (lambda: torch.ops.aten.silu.out(tx, out=ty),
                          lambda a: torch.nn.functional.silu(torch.from_numpy(a)).numpy())
    except ImportError:
        pass
    for run, _ in impls.values():
        run()
    times: dict[str, list[float]] = {k: [] for k in impls}
    for _ in range(args.rounds):
        for k, (run, _) in impls.items():
            t = time.perf_counter()
            run()
            times[k].append(time.perf_counter() - t)
    xs = x[: 1 << 20]
    xd = xs.astype(np.float64)
    ref = xd / (1.0 + np.exp(-xd))
    r32 = ref.astype(np.float32)
    print(f"silu float32, {args.n} elements, medians of {args.rounds} interleaved rounds")
    for k, (_, once) in impls.items():
        out = once(xs)
        cr = 100.0 * np.mean(out.view(np.uint32) == r32.view(np.uint32))
        ulp = np.abs(out.astype(np.float64) - ref) / np.spacing(np.abs(r32)).astype(np.float64)
        print(f"{k:10s} {np.median(times[k]) * 1e3:8.2f} ms   correctly rounded {cr:7.3f}%   "
              f"max {np.nanmax(ulp):.2f} ulp")


if __name__ == "__main__":
    main()
