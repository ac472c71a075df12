"""CPU kernels for rearrange (strided copies), chosen once per descriptor by ``build(meta)``.

Three kernel families, each specialised only by the size of the word it moves (a ``marker``
argument: an empty uint8/16/32/64 array), never by dtype or operator:

- ``memcpy``: one contiguous run of bytes; split in 64-byte aligned chunks across threads, with
  non-temporal 64-byte line stores where ``runtime.streams`` says so (about the last-level
  cache's size, read + written).
- ``units``: an N-D loop over contiguous units (words, small word groups, or big runs copied with
  memcpy / NT lines); the innermost loop walks the destination's fastest dim.
- ``transpose``: a batched generalised 2-D transpose. Rows r are units contiguous in the
  destination, columns c are units contiguous in the source; row r of the source starts at byte
  ``row_src[r]``, column c of the destination at ``col_dst[c]`` (tables built at plan time, so
  several dims can be folded into one side). Tasks of 32 rows walk along source rows in L x L
  micro-tiles transposed in registers (``transpose.tile_transpose``); edges use masks or a stack tile. With
  non-temporal stores, destinations whose rows do not all start on cache lines (misaligned base
  with short rows, odd row lengths) go through the *staged* variant: blocks are transposed into
  an L1/L2 scratch and streamed out as contiguous runs of whole NT lines.

All kernels take raw addresses; the descriptor has checked the buffers. Serial variants run
below ``runtime.PARALLEL_THRESHOLD`` elements; above it the pool (``prange``, TBB): memcpy's own
loop, and for units and transposes a small driver calling their ``serial`` by address
(``_bind``). Their Numba source is in ``rearrange_jit``; ``build`` binds a plan to a
``native.Kernel`` specialisation, so a cached kernel runs without importing Numba.
"""

from __future__ import annotations

import numpy as np

from . import native, runtime

# unit bytes -> (source rows per task, micro-tiles per column step). 32 source rows per task
# (32 read streams) is what the hardware prefetcher keeps up with.
TILES = {1: (64, 1), 2: (32, 2), 4: (32, 2), 8: (32, 2)}
_PARALLEL_COPY_BYTES = 1 << 19  # contiguous copies from here on use both threads
# staged transposes (non-temporal output through an L1/L2 scratch), see ``staging``
STAGE_SHORT_ROW_BYTES = 8192
STAGE_SCRATCH_BYTES = 4096
DIRECT_MIN_ROW_BYTES = 2048
STAGE_SEGMENT_BYTES = 2048
STAGE_LONG_COLS = 16
MARKERS = {w: np.empty(0, dtype=f"u{w}") for w in (1, 2, 4, 8)}


_JIT = "infiniop.backends.cpu.rearrange_jit"
memcpy_serial, memcpy_parallel, units_serial, units_parallel, transpose_serial, transpose_parallel = (
    native.kernel(_JIT, name) for name in ("memcpy_serial", "memcpy_parallel", "units_serial",
                                           "units_parallel", "transpose_serial", "transpose_parallel"))


# ---------------------------------------------------------------------------- plan -> callable

def staging(meta):
    """(rows per task, columns per task, rows per pass) of the staged transpose."""
    unit = meta.unit
    lanes = 64 // unit
    row_bytes = meta.rows * unit
    group = max(TILES[unit][0], lanes)
    if row_bytes <= STAGE_SHORT_ROW_BYTES:
        # whole destination rows per task: adjacent rows merge into long contiguous runs
        kb = max(lanes, STAGE_SCRATCH_BYTES // max(row_bytes, 1) // lanes * lanes)
        return meta.rows, kb, group
    return STAGE_SEGMENT_BYTES // unit, STAGE_LONG_COLS, group


def _bind(serial, driver, marker, args, parallel: bool) -> tuple:
    """(callable, its trailing arguments): ``serial`` doing every task (0, -1), or the pool's
    ``driver`` handing runs of tasks to ``serial`` at its address. Fixed argument types: see
    ``native.Kernel``."""
    if not parallel:
        return serial.specialize(marker, 0, 0, *args, 0, -1), (0, -1)
    tail = (serial.address(marker, 0, 0, *args, 0, -1),)
    return driver.specialize(marker, 0, 0, *args, *tail), tail


def build(meta):
    """A callable ``run(dst_address, src_address)`` for a planned rearrange (``RearrangeMeta``).

    The addresses are those of element 0 of each tensor; the plan's origin offsets are added here.
    Transposes with non-temporal stores pick, per call, between the direct kernel (destination
    rows share one alignment phase: the row tiling is shifted so full micro-tiles store aligned
    lines) and the staged kernel (short rows on a misaligned base, or rows of mixed phase).
    """
    kind = meta.kind
    if kind == "empty":
        return None
    parallel = meta.numel >= runtime.PARALLEL_THRESHOLD
    moved = 2 * meta.nbytes  # read and written
    nt = runtime.streams(moved, 0.5)  # strided stores: see runtime.streams
    doff, soff = meta.dst_offset, meta.src_offset
    marker = MARKERS[meta.word]
    if kind == "memcpy":
        big = meta.unit >= _PARALLEL_COPY_BYTES or runtime.PARALLEL_THRESHOLD == 0
        args = (meta.unit, runtime.streams(moved, 2))
        kernel = (memcpy_parallel if big else memcpy_serial).specialize(marker, 0, 0, *args)
    elif kind == "units":
        args = (meta.shape, meta.dst_strides, meta.src_strides, meta.unit, meta.units, nt)
        kernel, tail = _bind(units_serial, units_parallel, marker, args, parallel)
        args += tail
    else:
        tr, ct = TILES[meta.unit]
        common = (meta.shape, meta.dst_strides, meta.src_strides, meta.rows, meta.cols,
                  meta.row_src, meta.col_dst, meta.batches)
        args = common + (tr, ct, meta.cols, tr)
        if nt and parallel:
            unit = meta.unit
            trb, kb, group = staging(meta)
            staged = common + (trb, 1, kb, group, 0, True, True)
            kernel, tail = _bind(transpose_serial, transpose_parallel, marker, staged, True)
            staged += tail
            if meta.rows_aligned:
                long_rows = meta.rows * unit >= DIRECT_MIN_ROW_BYTES

                def run(dst, src, _k=kernel, _m=marker, _d=doff, _s=soff, _a=args, _st=staged,
                        _t=tail, _long=long_rows, stream=None):
                    d = dst + _d
                    head = ((-d) & 63) // unit if d % unit == 0 else 0
                    if head == 0 or (_long and d % unit == 0):
                        _k(_m, d, src + _s, *_a, head, True, False, *_t)
                    else:
                        _k(_m, d, src + _s, *_st)

                return run
            args = staged
        else:
            args += (0, nt, False)
            kernel, tail = _bind(transpose_serial, transpose_parallel, marker, args, parallel)
            args += tail

    def run(dst, src, _k=kernel, _m=marker, _d=doff, _s=soff, _a=args, stream=None):
        _k(_m, dst + _d, src + _s, *_a)

    return run
