"""Bind a planned row call (rows.plan.RowInfo) to its compiled CPU kernel."""

from __future__ import annotations

import numpy as np

from ...rows.spec import lanes_for
from . import ndarray_abi, runtime
from .elementwise import launcher_arrays
from .elementwise_kernels import launcher_tables
from .row_kernels import kernel_functions, math_heavy

# elements a parallel task takes once there are 8 tasks a thread (fewer tasks: fewer scratch
# allocations and cold task starts). 2^18 against 2^15, AMD EPYC Zen 4, 2026-11-27, same bits,
# 21 rounds alternating: rms_norm (2048, 4096) float32 -5.9%, float16 -4.2%, softmax (4096, 4096)
# float32 -2.8%, bfloat16 -1.5%, layer_norm float32 -2.5%; causal_softmax and the col kind
# (softmax along axis 0) within 1%
TASK_ELEMS = 1 << 18
# the col kind's block: lanes x adjacent rows of scratch, here 1024 lanes x 64 float32 columns
# (256 bytes of each row a pass reads; 64 bytes at 2^15, a page walk per 64 bytes). Softmax
# along a strided axis, AMD EPYC Zen 4, 2026-11-28, alternating processes (ms), 2^15 -> 2^18:
# (4096, 4096) axis 0 float32 34 -> 12.1-12.9 (torch 21), bfloat16 24.4-24.7 -> 11.2-12.4,
# (512, 8192) 7.4 -> 3.2, (50257, 256) 43-44 -> 20-21, (64, 512, 512) axis 1 19-21 -> 13.1,
# logsoftmax bfloat16 (2048, 4096) axis 0 15.8-15.9 -> 7.9-8.8, (64, 64, 1024) axis 1 equal;
# 2^17: 18.5-25.7 and 2^19: 19.2-19.7 at (4096, 4096) float32
LANE_BYTES = 1 << 18


def pool_threshold(program) -> int:
    """Elements from which a row call runs on the thread pool: runtime.PARALLEL_THRESHOLD, or an
    eighth of it for a math-heavy program (the softmax family, ~1 ns an element), as for
    elementwise bodies (``elementwise.parallel_threshold``). AMD EPYC Zen 3, 2 threads, 2026-11-29,
    serial and pool descriptors alternating in one process, medians of 3001 calls, three runs:
    softmax float32 (32, 2048) 43-58 -> 27-48 us, (64, 1024) 40-52 -> 27-38, (16, 2048) 21-30 ->
    16-26, logsoftmax (32, 2048) 42-55 -> 28-51, causal_softmax (32, 4, 512) 61-67 -> 40-51,
    (32, 1, 2048) 43-63 -> 40-50; fp16/bf16 likewise (softmax (32, 2048) 47-52 -> 30-39)."""
    base = runtime.PARALLEL_THRESHOLD
    return base // 8 if math_heavy(program) else base


class RowKernel:
    """``launch_pointers(addresses)`` (one address per operand, None for an absent optional
    one; buffers checked by the caller) and ``array_launcher(*arrays, *params,
    *array_launcher_args)`` for the descriptor's NumPy fast path (0 = done)."""

    def __init__(self, info):
        prog = info.program
        lay = info.layout
        slots = prog.slots
        isz = [s.dtype.itemsize for s in slots]
        n, rows = info.n, info.rows
        threads = runtime.num_threads()
        self.parallel = rows > 1 and rows * max(n, 1) >= pool_threshold(prog)
        inner = "".join("1" if st[-1] == 1 else "0" if st[-1] == 0 else "g"
                        for st in lay.strides) if info.kind == "col" else ""
        row_outputs = [j for j, (s, kd) in enumerate(zip(slots, prog.kinds))
                       if s.store is not None and kd == "row"]
        stream = (info.kind == "row" and all(info.pattern[j] == "1" and isz[j] == isz[0]
                                             for j in row_outputs)
                  and n * isz[0] >= 1024
                  and runtime.streams(runtime.moved_bytes(
                      (*lay.shape, n), [(*o, a) for o, a in zip(lay.strides, info.axis_strides)], isz)))
        if info.kind == "col":
            lp = lanes_for(n)
            cb = max(16, min(256, LANE_BYTES // (4 * lp)))
            units = (rows // lay.shape[-1]) * -(-lay.shape[-1] // cb)  # blocks of adjacent rows
            per_unit = cb * n
            cfg = cb
        else:
            units, per_unit, cfg = rows, max(n, 1), int(stream)
        per_task = units
        if self.parallel:
            per_task = max(1, min(-(-units // (8 * threads)), -(-TASK_ELEMS // per_unit)))
        operands = [k for k, d in enumerate(info.descs) if d is not None]
        pos = {k: u for u, k in enumerate(operands)}
        pairs = [(pos[c.w], pos[c.k]) for c in info.checks]
        fns = kernel_functions(prog, info.kind, info.pattern, inner, stream, operands, pairs)
        self._origins = [info.slot_offsets[j] * isz[j] for j in range(len(slots))]
        self._slot_operand = [s.operand for s in slots]
        self.params = tuple(info.params)
        self._shape = np.array(lay.shape, dtype=np.int64)
        self._strides = np.array(lay.strides, dtype=np.int64).reshape(len(slots), lay.ndim)
        self._astr = np.array(info.axis_strides, dtype=np.int64)
        sizes = (n, self._shape, self._strides, self._astr, per_task, cfg)
        serial_at = fns["serial"].address(*[0] * len(slots), *self.params, *sizes, 0, 0, -1)
        self._sizes = (*sizes, serial_at, 0, -1)  # every task (the driver: serial_at's)
        # fixed argument types (native.Kernel), as in elementwise.ElementwiseKernel
        which = "parallel" if self.parallel else "serial"
        args = (*[0] * len(slots), *self.params, *self._sizes)
        self._fn = fns[which].specialize(*args)
        self.meta = launcher_tables([n, per_task, cfg, fns[which].address(*args)], info, operands,
                                    self._origins, (self._shape, self._strides, self._astr,
                                                    [serial_at]))
        self.array_launcher_args = (self.meta,)
        ops = info.spec.operands
        arrays = launcher_arrays([info.descs[k] for k in operands],
                                 {u for u, k in enumerate(operands) if ops[k].writes})
        self.array_launcher_checked = ndarray_abi.verified()
        self.array_launcher = fns["launch"].specialize(*arrays, *self.params,
                                                       *self.array_launcher_args)

    def launch_pointers(self, addresses, stream=None) -> None:
        """Run on the calling thread (``stream`` has no meaning on the CPU)."""
        ptrs = [addresses[o] + off for o, off in zip(self._slot_operand, self._origins)]
        self._fn(*ptrs, *self.params, *self._sizes)
