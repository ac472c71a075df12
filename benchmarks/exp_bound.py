"""How fast the softmax family could be at best on this machine: its exp alone, as an
elementwise kernel over the same bytes, against a copy of them and the row operators.

softmax, logsoftmax and causal_softmax read a row, take its max, then ``exp_nonpositive(x - max)``
of every element, a sum, and a scaled output: strictly more work than the ``exp`` row below,
which reads and writes the same bytes once and computes only the exp. Where that row is
below 80% of the copy (issue #12's target), the row operators cannot reach it with this exp.

    PYTHONPATH=src python benchmarks/exp_bound.py [--dtypes float16,bfloat16,float32] [--rounds 15]

Medians over interleaved rounds (a pause and an untimed call before each), one process.
"""

from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np

import infiniop

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}

SHAPE = (4096, 4096)

copy = infiniop.elementwise("bound_copy", ("x",), infiniop.FLOATS, lambda m, x: x)
exp_alone = infiniop.elementwise("bound_exp", ("x",), infiniop.FLOATS,
                                 lambda m, x: m.exp_nonpositive(x))


def measure(dtype: str, rounds: int) -> dict[str, float]:
    """Median seconds of each implementation on a (4096, 4096) array of ``dtype``."""
    x = (np.random.default_rng(0).standard_normal(SHAPE) - 4.0).astype(DTYPES[dtype])
    y = np.empty_like(x)
    impls = {
        "copy": lambda: copy(x, out=y),
        "exp alone": lambda: exp_alone(x, out=y),
        "softmax": lambda: infiniop.softmax(x, axis=-1, out=y),
        "logsoftmax": lambda: infiniop.logsoftmax(x, dim=-1, out=y),
    }
    times: dict[str, list[float]] = {k: [] for k in impls}
    for _ in range(rounds):
        for name, call in impls.items():
            time.sleep(0.01)
            call()
            t = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t)
    return {k: float(np.median(v)) for k, v in times.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtypes", default="float16,bfloat16,float32")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args(argv)
    for dtype in args.dtypes.split(","):
        med = measure(dtype, args.rounds)
        row = ", ".join(f"{k} {v * 1e3:.2f} ms ({med['copy'] / v:.0%})" for k, v in med.items())
        print(f"{dtype} {SHAPE}: {row}  (% = of the copy)")


if __name__ == "__main__":
    main()
