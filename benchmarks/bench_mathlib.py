"""ns/element of mathlib functions as plain Numba loops (tests/mathlib_support.numba_kernel),
side by side with torch's CPU kernels, in one process (interleaved rounds; min and median).
One thread by default; ``--threads 2``: prange loops (no non-temporal stores) and torch threads.

    PYTHONPATH=src python benchmarks/bench_mathlib.py silu,tanh [--n 1048576] [--dtypes f32,f16,bf16]

512-bit vectors: run with NUMBA_CPU_FEATURES="$F,-prefer-256-bit" where F is
    python -c 'import llvmlite.binding as ll; print(ll.get_host_cpu_features().flatten())'
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from mathlib_support import numba_kernel  # noqa: E402

from infiniop.elementwise import mathlib  # noqa: E402

TORCH = {
    "exp": "torch.exp(x, out=o)", "sigmoid": "torch.sigmoid(x, out=o)", "tanh": "torch.tanh(x, out=o)",
    "silu": "torch.ops.aten.silu.out(x, out=o)", "gelu": "torch.ops.aten.gelu.out(x, out=o)",
    "gelu_tanh": "torch.ops.aten.gelu.out(x, approximate='tanh', out=o)",
    "erf": "torch.erf(x, out=o)", "erfc": "torch.erfc(x, out=o)", "log": "torch.log(x, out=o)",
    "log1p": "torch.log1p(x, out=o)", "expm1": "torch.expm1(x, out=o)",
    "erfinv": "torch.erfinv(x, out=o)", "atanh": "torch.atanh(x, out=o)",
    "log10": "torch.log10(x, out=o)", "log2": "torch.log2(x, out=o)", "exp2": "torch.exp2(x, out=o)",
    "copy": "o.copy_(x)",
}
DOMAIN = {"log": (0.01, 100), "log10": (0.01, 100), "log2": (0.01, 100), "log1p": (-0.5, 100),
          "erfinv": (-0.99, 0.99), "atanh": (-0.99, 0.99)}


def timeit(f, n, rounds):
    f()
    reps = max(3, int(3e7 / n))
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        ts.append((time.perf_counter() - t0) / reps)
    return ts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names")
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--dtypes", default="f32")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="> 1: prange kernels, torch threads")
    ap.add_argument("--pipeline", action="store_true",
                    help="the real operator (functional form with out=) instead of the prototype")
    a = ap.parse_args()
    import ml_dtypes
    import torch
    torch.set_num_threads(a.threads)
    import numba
    numba.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    for name in a.names.split(","):
        fn = (lambda m, x: x) if name == "copy" else getattr(mathlib, name)
        lo, hi = DOMAIN.get(name, (-10, 10))
        for dt in a.dtypes.split(","):
            x32 = rng.uniform(lo, hi, a.n).astype(np.float32)
            npdt = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}[dt]
            xs = x32.astype(npdt)
            xa = xs.view(np.uint16) if dt != "f32" else xs
            out = np.empty_like(xa)
            if a.pipeline:
                import infiniop
                op = infiniop.elementwise(f"bench_{name}", ("x",), infiniop.FLOATS,
                                          lambda m, x, fn=fn: fn(m, x), register=False)
                xs_arr, o_arr = xs, np.empty_like(xs)

                def k(xa, out, op=op, xs_arr=xs_arr, o=o_arr):
                    return op(xs_arr, out=o)
            else:
                k = numba_kernel(fn, "f32", dt, parallel=a.threads > 1)
            tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dt]
            x = torch.from_numpy(x32).to(tdt)
            o = torch.empty_like(x)
            tf = eval(f"lambda: {TORCH[name]}", {"torch": torch, "x": x, "o": o}) if name in TORCH else None
            ours, theirs = [], []
            for _ in range(a.rounds):                      # interleaved
                ours += timeit(lambda k=k, xa=xa, out=out: k(xa, out), a.n, 3)
                if tf:
                    theirs += timeit(tf, a.n, 3)
            if a.pipeline:
                width, calls = "pipeline", "-"
            else:
                asm = next(iter(k.inspect_asm().values()))
                width = "zmm" if "zmm" in asm else "ymm" if "ymm" in asm else "scalar"
                calls = len(re.findall(r"call\w*\s+\S*(exp|log|tanh|erf)", asm))
            # min over rounds: on a shared machine the least-disturbed sample (medians in brackets)
            t_o, m_o = np.min(ours) / a.n * 1e9, np.median(ours) / a.n * 1e9
            t_t = np.min(theirs) / a.n * 1e9 if tf else float("nan")
            m_t = np.median(theirs) / a.n * 1e9 if tf else float("nan")
            print(f"{name:10s} {dt:5s} n={a.n:<9d} ours {t_o:6.3f} ({m_o:6.3f}) ns/elem   torch "
                  f"{t_t:6.3f} ({m_t:6.3f})   torch/ours {t_t / t_o:5.2f}   [{width}, libm calls "
                  f"{calls}]", flush=True)


if __name__ == "__main__":
    main()
