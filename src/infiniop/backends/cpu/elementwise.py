"""Bind a planned elementwise call (ElementwiseInfo) to its compiled CPU kernel."""

from __future__ import annotations

from functools import partial

import numpy as np

from . import runtime
from .elementwise_kernels import kernel_module


class ElementwiseKernel:
    """``launch_arrays(*ndarrays) -> code`` (checks in compiled code, 0 = done) and
    ``launch_pointers(addresses)`` (buffers already checked by the caller)."""

    def __init__(self, info):
        lay = info.layout
        nops = len(info.descs)
        isz = [d.dtype.itemsize for d in info.descs]
        n = lay.numel
        self.parallel = n >= runtime.PARALLEL_THRESHOLD
        mod = kernel_module(info.spec, info.dtype, info.kind, info.pattern)
        self._origins = [lay.offsets[j] * isz[j] for j in range(nops)]
        if info.kind == "flat":
            nt = int(n * isz[0] >= runtime.NT_THRESHOLD_BYTES)
            sizes = [n, nt, 0]
            fn = mod.parallel if self.parallel else mod.serial
            self._run = partial(_run_flat, fn, n, nt)
        else:
            nt = 0
            if info.kind == "tiled":
                chunks = 32 if isz[0] >= 4 else 64  # tile edge, in elements
            else:
                inner = lay.shape[-1]
                rows = n // inner if inner else 0  # empty: an extent-0 innermost dim
                nthreads = runtime.num_threads()
                chunks = 1
                if self.parallel and rows < 4 * nthreads:
                    chunks = max(1, min(inner // 4096, 4 * nthreads))
                nt = int(n * isz[0] >= runtime.NT_THRESHOLD_BYTES and info.pattern[0] == "1"
                         and inner * isz[0] >= 1024)
            sizes = [chunks, nt, 0]
            fn = mod.parallel if self.parallel else mod.serial
            self._shape = np.array(lay.shape, dtype=np.int64)
            self._strides = np.array(lay.strides, dtype=np.int64).reshape(nops, lay.ndim)
            self._run = partial(_run_strided, fn, self._shape, self._strides, chunks, nt)
        meta = list(sizes)
        for j, d in enumerate(info.descs):
            lo, hi = d.reach
            meta += [lo * isz[j], (hi + 1) * isz[j], self._origins[j]]
        meta += [int(a) for a in info.aliasable]
        for d in info.descs:  # what the array launcher compares each array's layout with
            meta += [d.ndim, *d.shape, *(s * d.dtype.itemsize for s in d.strides)]
        self.meta = np.array(meta, dtype=np.int64)
        shape = getattr(self, "_shape", np.zeros(1, np.int64))
        strides = getattr(self, "_strides", np.zeros((1, 1), np.int64))
        launcher = mod.launch_parallel if self.parallel else mod.launch_serial
        self.launch_arrays = partial(_launch_arrays, launcher, self.meta, shape, strides)
        # For callers that bind the trailing arguments themselves (the descriptor's fast path).
        self.array_launcher, self.array_launcher_args = launcher, (self.meta, shape, strides)

    def launch_pointers(self, addresses, stream=None) -> None:
        """Run on the calling thread; ``stream`` has no meaning on the CPU (work is done on
        return)."""
        self._run(*[a + o for a, o in zip(addresses, self._origins)])


def _run_flat(fn, n, nt, *ptrs):
    fn(*ptrs, n, nt)


def _run_strided(fn, shape, strides, chunks, nt, *ptrs):
    fn(*ptrs, shape, strides, chunks, nt)


def _launch_arrays(launcher, meta, shape, strides, *arrays):
    return launcher(*arrays, meta, shape, strides)
