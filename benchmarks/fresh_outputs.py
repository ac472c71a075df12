"""What a call without ``out=`` costs: the functional form allocating its output, against the
same call into a preallocated output, NumPy's and PyTorch's allocating calls, in one process.

Outputs of 32 MiB and more come from recycled buffers (``infiniop.memory``); with
``INFINIOP_POOL_MIB=0`` every output is fresh memory, as NumPy's and PyTorch's are here (glibc
defaults: blocks this large are mapped on allocation and unmapped on free, so every call pays
the kernel's page faults and zeroing).

    PYTHONPATH=src python benchmarks/fresh_outputs.py [--rounds 15] [--threads 2]

Medians over interleaved rounds (an untimed call before each timed one: the output of the last
call is dropped first, as in a loop ``y = f(x)``). torch is optional.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import infiniop
from infiniop import memory
from infiniop.backends.cpu import runtime

N = 1 << 24  # float32 elements: 64 MiB
ROWS = (4096, 4096)


def cases(torch):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    x = rng.standard_normal(ROWS).astype(np.float32)
    o, ox = infiniop.empty_aligned(a.shape, a.dtype), infiniop.empty_aligned(x.shape, x.dtype)
    ta, tb, tx, to = (torch.from_numpy(v) for v in (a, b, x, o)) if torch else (None,) * 4
    return {
        "sub float32 64 MiB": {
            "ours": lambda: infiniop.sub(a, b), "ours out=": lambda: infiniop.sub(a, b, out=o),
            "numpy": lambda: a - b, "torch": (lambda: ta - tb) if torch else None},
        "silu float32 64 MiB": {
            "ours": lambda: infiniop.silu(a), "ours out=": lambda: infiniop.silu(a, out=o),
            "numpy": None, "torch": (lambda: torch.nn.functional.silu(ta)) if torch else None},
        "sub float32 64 MiB, tensors": {
            "ours": (lambda: infiniop.sub(ta, tb)) if torch else None,
            "ours out=": (lambda: infiniop.sub(ta, tb, out=to)) if torch else None,
            "numpy": None, "torch": (lambda: ta - tb) if torch else None},
        "transpose float32 4096x4096": {
            "ours": lambda: infiniop.rearrange(x, "a b -> b a"),
            "ours out=": lambda: infiniop.copy_(ox, x.T),
            "numpy": lambda: np.ascontiguousarray(x.T), "torch": None},
        "softmax float32 4096x4096": {
            "ours": lambda: infiniop.softmax(x, axis=-1),
            "ours out=": lambda: infiniop.softmax(x, axis=-1, out=ox),
            "numpy": None, "torch": (lambda: torch.softmax(tx, -1)) if torch else None},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    if args.threads:
        runtime.set_num_threads(args.threads)
    if torch:
        torch.set_num_threads(runtime.num_threads())
    table = cases(torch)
    times = {(c, k): [] for c, impls in table.items() for k, f in impls.items() if f}
    for _ in range(args.rounds):
        for (c, k) in times:
            f = table[c][k]
            f()  # untimed: the output dropped right away, as a loop's previous one
            t = time.perf_counter()
            f()
            times[c, k].append(time.perf_counter() - t)
            time.sleep(0.01)  # torch's spinning threads settle before the next implementation
    print(f"recycled outputs: up to {memory.POOL_BYTES >> 20} MiB (INFINIOP_POOL_MIB); "
          f"medians of {args.rounds} rounds, ms")
    names = ["ours", "ours out=", "numpy", "torch"]
    print(f"{'case':28}" + "".join(f"{n:>11}" for n in names))
    for c in table:
        cells = [f"{np.median(times[c, n]) * 1e3:11.2f}" if (c, n) in times else f"{'-':>11}"
                 for n in names]
        print(f"{c:28}" + "".join(cells))


if __name__ == "__main__":
    main()
