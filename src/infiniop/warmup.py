"""``infiniop warmup``: compile the kernels of common calls into the kernel cache ahead of time.

A kernel is compiled the first time any process needs it (0.3-1 s each); after that every
process loads it in about a millisecond without starting Numba. Warming up once after an
install (or an upgrade: the cache is per version) moves those compilations out of the first
run of a program. What is compiled, for the chosen dtypes: the arithmetic operators (add, sub,
mul, div, clip, maximum, minimum, neg, abs, relu, where) and the activations of transformer
layers (silu, gelu, gelutanh, swiglu) on contiguous operands (small and large calls: the serial,
the multi-threaded and the streaming kernels; 1-3 dimensional arrays) and with a broadcast row;
the row operators (rms_norm, add_rms_norm, layer_norm, softmax, causal_softmax, logsoftmax)
along a contiguous last axis and rope (both algorithms, int32 and int64 positions), each as a
small call and as a large one (its streaming kernel on the pool); rearrange's copy, strided and
transpose kernels for 1, 2, 4 and 8-byte elements.
The work is spread over the CPU's cores (one process each).
"""

from __future__ import annotations

import os
import sys
import time

DTYPES = ("float32", "float16", "bfloat16")
ACTIVATIONS = ("silu", "gelu", "gelutanh", "swiglu")
ROWS = ("rms_norm", "add_rms_norm", "layer_norm", "softmax", "causal_softmax", "logsoftmax")


def tasks(dtypes=DTYPES) -> list[tuple[str, str]]:
    """(what, dtype) pairs, one per group of kernels, for ``run_task``."""
    from .dtype import as_dtype
    from .ops import ABS, ADD, CLIP, DIV, MAXIMUM, MINIMUM, MUL, NEG, RELU, SUB, WHERE

    out = []
    for dt in dtypes:
        for spec in (ADD, SUB, MUL, DIV, CLIP, MAXIMUM, MINIMUM, NEG, ABS, RELU, WHERE):
            if as_dtype(dt) in spec.dtypes:
                out.append((spec.name, dt))
        out += [(name, dt) for name in ACTIVATIONS + ROWS + ("rope",)
                if _supports(name, as_dtype(dt))]
    return out + [("rearrange", w) for w in ("uint8", "uint16", "uint32", "uint64")]


def _supports(name: str, dt) -> bool:
    """Whether the operator ``name`` (elementwise, row or rope) takes ``dt`` for every float
    operand."""
    import infiniop

    spec = getattr(infiniop, name)
    if hasattr(spec, "dtypes"):
        return dt in spec.dtypes
    if name == "rope":
        from .rows.rope import SIGNATURES as sigs
    else:
        sigs = spec.signatures
    return any(all(d == dt or not d.is_float for d in sig.dtypes) for sig in sigs)


def run_task(what: str, dtype: str) -> None:
    """Make the calls that compile one group of kernels (results are thrown away)."""
    import numpy as np

    import infiniop as ip
    from infiniop.backends.cpu import runtime
    from infiniop.dtype import as_dtype

    npdt = as_dtype(dtype).numpy
    # large: the pool's kernels, with the streaming stores of a call that large
    large = max(runtime.PARALLEL_THRESHOLD, -(-runtime.NT_THRESHOLD_BYTES // npdt.itemsize))
    large = -(-large // 4096) * 4096  # whole rows of 4096, 64 rows and 2 x 2 blocks
    if what in ROWS or what == "rope":
        n = 4096
        rows = large // n
        # small and large; 2-d and 3-d (each rank has its own compiled array launcher)
        for shape in ((4, n), (2, 2, n), (rows, n), (rows // 2, 2, n)):
            x = np.zeros(shape, npdt)
            w = np.ones(n, npdt)
            if what == "rope":
                if len(shape) == 3:
                    continue
                seq = shape[0]
                x = x.reshape(seq, 32, 128)
                tab = np.zeros((seq, 64), npdt)
                for pos_dtype in (np.int32, np.int64):
                    for algo in (0, 1):
                        ip.rope(x, np.zeros(seq, pos_dtype), tab, tab, algo=algo)
                continue
            # the operands after x: a weight (rms_norm), an addend and a weight
            # (add_rms_norm), a weight and a bias (layer_norm)
            rest = {"rms_norm": [w], "add_rms_norm": [x, w], "layer_norm": [w, w]}
            getattr(ip, what)(x, *rest.get(what, []))
        return
    if what == "rearrange":
        for shape in ((8, 16), (runtime.PARALLEL_THRESHOLD // 512 + 1, 512)):
            x = np.zeros(shape, npdt)
            ip.rearrange(x, "a b -> b a")                        # transpose
            ip.rearrange(x[:, ::2], "a b -> a b")                # strided units
            ip.copy_(np.empty_like(x), x)                        # memcpy
        return
    spec = getattr(ip, what)
    for n in (64, large):
        args = []
        for k in range(spec.arity):
            want = spec.input_dtype(k, as_dtype(dtype))
            args.append(np.zeros(n, want.numpy))
        spec(*args)                                              # contiguous
        spec(*(a.reshape(2, -1) for a in args))                  # the 2-d and 3-d launchers
        spec(*(a.reshape(2, 2, -1) for a in args))
        row = [a[: n // 64] for a in args]
        spec(*([args[0].reshape(64, -1)] + row[1:]))             # broadcast row


def _worker(jobs) -> None:
    for what, dtype in jobs:
        run_task(what, dtype)


def warmup(dtypes=DTYPES, processes: int | None = None, out=sys.stdout) -> int:
    """Compile the groups of ``tasks(dtypes)`` in ``processes`` processes; 0 when all worked."""
    import multiprocessing

    from . import kernel_cache

    jobs = tasks(dtypes)
    n = max(1, min(processes or len(os.sched_getaffinity(0)), len(jobs)))
    t0 = time.perf_counter()
    before = kernel_cache.usage()
    print(f"compiling the kernels of {len(jobs)} operator/dtype groups in {n} processes "
          f"(kernel cache: {kernel_cache.root()})...", file=out, flush=True)
    ctx = multiprocessing.get_context("spawn")  # a clean interpreter: no inherited threads
    procs = [ctx.Process(target=_worker, args=(jobs[i::n],)) for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    grown = kernel_cache.usage() - before
    print(f"done in {time.perf_counter() - t0:.1f} s; the cache grew by {grown / 1e6:.1f} MB"
          + (f"; {len(failed)} worker(s) failed" if failed else ""), file=out)
    return 1 if failed else 0
