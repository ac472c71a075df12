"""Bind a planned elementwise call (ElementwiseInfo) to its compiled CPU kernel."""

from __future__ import annotations

import numpy as np

from ...dtype import DType
from . import native, ndarray_abi, runtime
from .elementwise_kernels import (
    BLOCK_BYTES,
    is_heavy,
    kernel_functions,
    kernel_names,
    launcher_tables,
    tile_shape,
)


def staged_pattern(info) -> str:
    """The tiled kind's pattern with 't' for the inputs the kernel stages through a tile
    transposed in registers: those read with unit stride along the tile's rows (mid dim) and
    a larger one along the output's dense dim."""
    lay = info.layout
    written = {j for j, s in enumerate(info.program.slots) if s.store is not None}
    return "".join("t" if j not in written and c == "g" and lay.strides[j][-2] == 1 else c
                   for j, c in enumerate(info.pattern))


def array_dtype(dtype: DType) -> np.dtype:
    """The storage dtype an array launcher types an operand with (fp16/bf16 as uint16)."""
    return np.dtype(np.uint16) if dtype in (DType.F16, DType.BF16) else np.dtype(dtype.numpy)


def launcher_arrays(descs, written) -> list:
    """The array argument types of a generated array launcher (``launchers``), one per present
    operand (``descs``; ``written``: their positions the operator writes). Where this NumPy's
    array layout is verified (``ndarray_abi``) the launcher checks the arrays itself
    (``checked_arrays``: rank, writability; ``layout_end``: the dtype, against the
    descriptor's), and reads only their addresses, shapes and strides: each is typed as a
    uint8 array of its rank, whatever its dtype, so one compiled launcher serves every dtype
    (each dtype compiled its own, ~0.3 s). Else the fast path checks them in Python and each
    has its storage dtype (fp16/bf16 as uint16)."""
    checked = ndarray_abi.verified()
    return [native.array(np.uint8, d.ndim, access="w" if u in written else "r") if checked
            else native.array(array_dtype(d.dtype), d.ndim) for u, d in enumerate(descs)]


def parallel_threshold(program, itemsize: int) -> int:
    """Elements from which a call runs on the thread pool: runtime.PARALLEL_THRESHOLD, or for a
    math-heavy body (STAGE_MIN_NODES nodes or more, ~1 ns an element) an eighth of it, but at
    least two flat blocks. silu float32, 2 threads (AMD EPYC): 32K elements 36 -> 24 us, 64K 72
    -> 42 us, 128K 142 -> 79 us (torch: 39, 38, 71); one block on the pool cost 3.5 us more."""
    base = runtime.PARALLEL_THRESHOLD
    if not is_heavy(program.results):
        return base
    return min(base, max(base // 8, 2 * BLOCK_BYTES // itemsize))


class ElementwiseKernel:
    """``launch_pointers(addresses)`` (one address per operand in the operator's order, None
    for an absent optional one; buffers already checked by the caller) and, for the
    descriptor's NumPy fast path, ``array_launcher(*arrays, *params, *array_launcher_args)``
    (checks in compiled code; 0 = done)."""

    def __init__(self, info):
        prog = info.program
        lay = info.layout
        slots = prog.slots
        isz = [s.dtype.itemsize for s in slots]
        n = info.numel
        self.parallel = n >= parallel_threshold(prog, isz[0])
        operands = [k for k, d in enumerate(info.descs) if d is not None]
        pos = {k: u for u, k in enumerate(operands)}
        pairs = [(pos[c.w], pos[c.k]) for c in info.checks]
        pattern = info.pattern
        if info.kind == "tiled":
            pattern = staged_pattern(info)
        fns = kernel_functions(prog, info.kind, pattern, operands, pairs)
        self._origins = [info.slot_offsets[j] * isz[j] for j in range(len(slots))]
        self._slot_operand = [s.operand for s in slots]
        self.params = tuple(info.params)
        self._flat = info.kind == "flat"
        # a light body's pool loop is a shared driver calling its functions by address
        driven = self.parallel and "parallel" not in kernel_names(info.kind, prog.results)
        streamed = runtime.streams(runtime.moved_bytes(lay.shape, lay.strides, isz))
        if info.kind == "flat":
            # (n, stream, serial_at)
            sizes = [n, 0, 0]
            nt = streamed
            if driven:
                at = (*[0] * len(slots), *self.params, *sizes)
                sizes = [n, fns["streamed"].address(*at) if nt else 0, fns["serial"].address(*at)]
            elif self.parallel:
                sizes = [n, int(nt), 0]
        else:
            nt = 0
            if info.kind == "tiled":
                # column blocks per band of tile rows: enough tasks for the threads
                rows_, cols = tile_shape(isz, [j for j, c in enumerate(pattern) if c == "t"])
                tasks = n // (lay.shape[-1] * lay.shape[-2]) * -(-lay.shape[-2] // rows_) if n else 0
                nthreads = runtime.num_threads()
                chunks = 1
                if self.parallel and tasks < 4 * nthreads:
                    chunks = max(1, min(-(-lay.shape[-1] // cols), 4 * nthreads))
                nt = int(streamed)
            else:
                inner = lay.shape[-1]
                rows = n // inner if inner else 0  # empty: an extent-0 innermost dim
                nthreads = runtime.num_threads()
                chunks = 1
                if self.parallel and rows < 4 * nthreads:
                    chunks = max(1, min(inner // 4096, 4 * nthreads))
                nt = int(streamed and info.pattern[0] == "1"
                         and inner * isz[0] >= 1024)
            sizes = [chunks, nt, 0]
        self._shape = np.array(lay.shape, dtype=np.int64)
        self._strides = np.array(lay.strides, dtype=np.int64).reshape(len(slots), lay.ndim)
        if driven and not self._flat:
            at = (*[0] * len(slots), *self.params, self._shape, self._strides, *sizes, 0, -1)
            sizes[2] = fns["serial"].address(*at)
        # pointer path: (n, stream, serial_at) or (chunks, nt, serial_at, first task, last)
        self._sizes = tuple(sizes if self._flat else (*sizes, 0, -1))
        # fixed argument types (native.Kernel): addresses, the scalars as the plan typed them
        which = "parallel" if self.parallel else "serial"
        sizes_args = self._sizes if self._flat else (self._shape, self._strides, *self._sizes)
        args = (*[0] * len(slots), *self.params, *sizes_args)
        self._fn = fns[which].specialize(*args)
        self.meta = launcher_tables([*sizes, fns[which].address(*args)], info, operands,
                                    self._origins,
                                    () if self._flat else (self._shape, self._strides))
        # For callers that bind the trailing arguments themselves (the descriptor's fast path):
        # NumPy arrays of each operand's rank, any strides; see launcher_arrays for how they
        # are typed and who checks what.
        ops = info.spec.operands
        arrays = launcher_arrays([info.descs[k] for k in operands],
                                 {u for u, k in enumerate(operands) if ops[k].writes})
        self.array_launcher_checked = ndarray_abi.verified()
        self.array_launcher_args = (self.meta,)
        self.array_launcher = fns["launch"].specialize(*arrays, *self.params,
                                                       *self.array_launcher_args)

    def launch_pointers(self, addresses, stream=None) -> None:
        """Run on the calling thread; ``stream`` has no meaning on the CPU (work is done on
        return)."""
        ptrs = [addresses[o] + off for o, off in zip(self._slot_operand, self._origins)]
        if self._flat:
            self._fn(*ptrs, *self.params, *self._sizes)
        else:
            self._fn(*ptrs, *self.params, self._shape, self._strides, *self._sizes)
