"""Dask + infiniop against Dask + NumPy: same arrays, same chunks, same scheduler.

    python benchmarks/bench_dask.py [--mib 1024] [--chunk-mib 64] [--rounds 5] [--kernel-threads 1]
                                    [--schedulers threads,distributed] [--dtypes float32,float16,bfloat16]

For each scheduler (Dask's local threaded scheduler with one thread per core, and a
``distributed.LocalCluster`` of one single-threaded worker process per core) and dtype, two
operands are generated and persisted on the scheduler's workers, then each case is computed and
persisted ``--rounds`` times, the implementations interleaved (infiniop, NumPy, NumPy, infiniop,
...) so a noisy neighbour hurts both alike; the table shows medians. ``infiniop`` runs
``infiniop.sub(a, b)`` / ``infiniop.clip(a, -0.5, 0.5)`` (our kernel per block), ``numpy`` runs
Dask's own ``a - b`` / ``da.clip(a, -0.5, 0.5)`` (NumPy per block). Both results are checked to be
bit-identical before timing. GB/s counts the operands' and the result's bytes once.

The float32 operand size defaults to four times the last-level cache (read from sysfs); half
precision operands have the same number of elements (so half the bytes).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import time

import dask
import dask.array as da
import ml_dtypes
import numpy as np

import infiniop
from infiniop.backends.cpu import runtime
from infiniop.bench.machine import describe

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
CASES = {
    "sub": (lambda a, b: infiniop.sub(a, b), lambda a, b: a - b, 3),
    "clip": (lambda a, b: infiniop.clip(a, -0.5, 0.5), lambda a, b: numpy_clip(a, -0.5, 0.5), 2),
}


def numpy_clip(a, lo, hi):
    """Dask's clip with typed bounds; for bfloat16 minimum(maximum()), since np.clip returns
    float32 for ml_dtypes' bfloat16."""
    lo, hi = a.dtype.type(lo), a.dtype.type(hi)
    if a.dtype == ml_dtypes.bfloat16:
        return da.minimum(da.maximum(a, lo), hi)
    return da.clip(a, lo, hi)


def llc_bytes() -> int:
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    for entry in sorted(os.listdir(base)) if os.path.isdir(base) else ():
        try:
            with open(os.path.join(base, entry, "size")) as f:
                text = f.read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
        best = max(best, int(text.rstrip("KMG")) * mult)
    return best or 32 << 20


class Local:
    """Dask's threaded scheduler, one thread per core."""

    name = "threads"

    def __init__(self, kernel_threads):
        self._cfg = dask.config.set(scheduler="threads", num_workers=os.cpu_count())
        self._cfg.__enter__()
        if kernel_threads:
            runtime.set_num_threads(kernel_threads)

    def persist(self, x):
        return x.persist()

    def wait(self, x):
        pass  # persist() on the threaded scheduler returns when the blocks are computed

    def close(self):
        self._cfg.__exit__(None, None, None)


class Cluster:
    """A LocalCluster of single-threaded worker processes, one per core."""

    name = "distributed"

    def __init__(self, kernel_threads):
        import distributed

        self._wait = distributed.wait
        self.cluster = distributed.LocalCluster(n_workers=os.cpu_count(), threads_per_worker=1,
                                                processes=True, dashboard_address=None)
        self.client = distributed.Client(self.cluster)
        if kernel_threads:
            self.client.run(runtime.set_num_threads, kernel_threads)

    def persist(self, x):
        return self.client.persist(x)

    def wait(self, x):
        self._wait(x)

    def close(self):
        self.client.close()
        self.cluster.close()


def operands(shape, chunks, dtype, sched):
    rng = da.random.default_rng(14)
    a = sched.persist(rng.standard_normal(shape, chunks=chunks, dtype=np.float32).astype(dtype))
    sched.wait(a)
    b = sched.persist((a * dtype(0.5) + dtype(0.25)).astype(dtype))  # computed where a lives
    sched.wait(b)
    return a, b


def same_bits(x, y) -> bool:
    u = f"u{np.dtype(x.dtype).itemsize}"
    return bool((x.view(u) == y.view(u)).all().compute())


def time_case(sched, impls, a, b, rounds):
    times = {k: [] for k in impls}
    order = list(impls)
    for r in range(rounds):
        for k in (order if r % 2 == 0 else order[::-1]):
            t0 = time.perf_counter()
            res = sched.persist(impls[k](a, b))
            sched.wait(res)
            times[k].append(time.perf_counter() - t0)
            del res
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=None, help="float32 operand size (default 4x LLC)")
    p.add_argument("--chunk-mib", type=int, default=64, help="float32 chunk size")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--schedulers", default="threads,distributed")
    p.add_argument("--dtypes", default="float32,float16,bfloat16")
    p.add_argument("--ops", default="sub,clip")
    p.add_argument("--kernel-threads", type=int, default=0,
                   help="threads per infiniop call (default: the library's default)")
    args = p.parse_args(argv)
    llc = llc_bytes()
    mib = args.mib or 4 * llc >> 20
    cols = 8192
    rows = (mib << 20) // 4 // cols
    chunk_rows = max(1, (args.chunk_mib << 20) // 4 // cols)
    m = describe()
    print(f"infiniop {infiniop.__version__} bench_dask, {datetime.date.today()}, {m['cpu']} "
          f"({m['cores']} cores), LLC {llc >> 20} MiB, dask {dask.__version__}, numpy {m['numpy']}")
    print(f"operands {rows}x{cols} ({rows * cols / 1e6:.0f}M elements, {mib} MiB in float32), "
          f"chunks {chunk_rows}x{cols} ({chunk_rows * cols * 4 >> 20} MiB in float32), "
          f"medians of {args.rounds} interleaved rounds")
    print(f"{'scheduler':12s} {'case':16s} {'infiniop':>10s} {'GB/s':>6s} {'numpy':>10s} {'GB/s':>6s} "
          f"{'x numpy':>8s}")
    for sname in args.schedulers.split(","):
        sched = (Local if sname == "threads" else Cluster)(args.kernel_threads)
        try:
            for dname in args.dtypes.split(","):
                dtype = DTYPES[dname]
                a, b = operands((rows, cols), (chunk_rows, cols), dtype, sched)
                for op in args.ops.split(","):
                    ours, theirs, n_arrays = CASES[op]
                    if not same_bits(ours(a, b), theirs(a, b)):
                        print(f"{sname:12s} {op} {dname}: ERROR infiniop and numpy disagree")
                        continue
                    t = time_case(sched, {"infiniop": ours, "numpy": theirs}, a, b, args.rounds)
                    nbytes = n_arrays * rows * cols * np.dtype(dtype).itemsize
                    print(f"{sname:12s} {op + ' ' + dname:16s} {t['infiniop'] * 1e3:8.1f}ms "
                          f"{nbytes / t['infiniop'] / 1e9:6.1f} {t['numpy'] * 1e3:8.1f}ms "
                          f"{nbytes / t['numpy'] / 1e9:6.1f} {t['numpy'] / t['infiniop']:8.2f}",
                          flush=True)
                del a, b
        finally:
            sched.close()


if __name__ == "__main__":
    main()
