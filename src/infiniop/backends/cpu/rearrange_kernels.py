"""CPU kernels for rearrange (strided copies), chosen once per descriptor by ``build(meta)``.

Three kernel families, each specialised only by the size of the word it moves (a ``marker``
argument: an empty uint8/16/32/64 array), never by dtype or operator:

- ``memcpy``: one contiguous run of bytes; split in 64-byte aligned chunks across threads, with
  non-temporal 64-byte line stores above ``runtime.NT_THRESHOLD_BYTES``.
- ``units``: an N-D loop over contiguous units (words, small word groups, or big runs copied with
  memcpy / NT lines); the innermost loop walks the destination's fastest dim.
- ``transpose``: a batched generalised 2-D transpose. Rows r are units contiguous in the
  destination, columns c are units contiguous in the source; row r of the source starts at byte
  ``row_src[r]``, column c of the destination at ``col_dst[c]`` (tables built at plan time, so
  several dims can be folded into one side). Tasks of 32 rows walk along source rows in L x L
  micro-tiles transposed in registers (``transpose.tile_transpose``); edges use masks. With
  non-temporal stores, destinations whose rows do not all start on cache lines (misaligned base
  with short rows, odd row lengths) go through the *staged* variant: blocks are transposed into
  an L1/L2 scratch and streamed out as contiguous runs of whole NT lines.

All kernels take raw addresses; the descriptor has checked the buffers. Serial variants run
below ``runtime.PARALLEL_THRESHOLD`` elements; ``prange`` (TBB) above.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import runtime
from .intrinsics import address_as_pointer
from .transpose import copy_line, memcpy_bytes, store_fence, tile_transpose

# unit bytes -> (source rows per task, micro-tiles per column step). 32 source rows per task
# (32 read streams) is what the hardware prefetcher keeps up with.
TILES = {1: (64, 1), 2: (32, 2), 4: (32, 2), 8: (32, 2)}
_CHUNK_BYTES = 1 << 18  # smallest chunk of a parallel contiguous copy
_PARALLEL_COPY_BYTES = 1 << 19  # contiguous copies from here on use both threads
# contiguous copies keep ordinary (cached) stores up to about the L3 size: measured faster than
# NT below ~16 MiB when the data is reused; the NT threshold of runtime applies above it
COPY_NT_MIN_BYTES = 16 << 20
# staged transposes (non-temporal output through an L1/L2 scratch), see ``staging``
STAGE_SHORT_ROW_BYTES = 8192
STAGE_SCRATCH_BYTES = 4096
DIRECT_MIN_ROW_BYTES = 2048
STAGE_SEGMENT_BYTES = 2048
STAGE_LONG_COLS = 16
MARKERS = {w: np.empty(0, dtype=f"u{w}") for w in (1, 2, 4, 8)}


# ---------------------------------------------------------------------------- helpers (inlined)

@njit(inline="always")
def _copy_run(dst, src, n, nt):
    """Copy n contiguous bytes; NT 64-byte lines for the aligned middle when ``nt``."""
    if nt and n >= 512:
        head = (-dst) & 63
        memcpy_bytes(dst, src, head)
        lines = (n - head) >> 6
        d = dst + head
        s = src + head
        for i in range(lines):
            copy_line(d + 64 * i, s + 64 * i, True)
        done = head + 64 * lines
        memcpy_bytes(dst + done, src + done, n - done)
    else:
        memcpy_bytes(dst, src, n)


@njit(inline="always")
def _inner(marker, d, s, m, ds, ss, unit, nt):
    """m units of ``unit`` bytes, destination stride ds, source stride ss (bytes)."""
    w = marker.itemsize
    if unit == w:
        dp = address_as_pointer(d, marker.dtype)
        sp = address_as_pointer(s, marker.dtype)
        dw = ds // w
        sw = ss // w
        if dw == 1:
            if sw == 0:
                v = sp[0]
                for k in range(m):
                    dp[k] = v
            elif sw == 1:
                for k in range(m):
                    dp[k] = sp[k]
            elif sw == -1:
                for k in range(m):
                    dp[k] = sp[-k]
            else:
                for k in range(m):
                    dp[k] = sp[k * sw]
        else:
            for k in range(m):
                dp[k * dw] = sp[k * sw]
    elif unit <= 64:
        kw = unit // w
        for k in range(m):
            dp = address_as_pointer(d + k * ds, marker.dtype)
            sp = address_as_pointer(s + k * ss, marker.dtype)
            for t in range(kw):
                dp[t] = sp[t]
    else:
        for k in range(m):
            _copy_run(d + k * ds, s + k * ss, unit, nt)


@njit(inline="always")
def _units_range(marker, dst, src, shape, dstr, sstr, unit, nt, start, stop):
    """Units start..stop-1 of the row-major iteration over ``shape`` (last dim innermost)."""
    nd = shape.shape[0]
    n = shape[nd - 1]
    ds = dstr[nd - 1]
    ss = sstr[nd - 1]
    idx = np.zeros(nd, np.int64)
    rem = start // n
    i = start - rem * n
    doff = 0
    soff = 0
    for j in range(nd - 1):
        k = nd - 2 - j
        q = rem // shape[k]
        idx[k] = rem - q * shape[k]
        rem = q
        doff += idx[k] * dstr[k]
        soff += idx[k] * sstr[k]
    pos = start
    while pos < stop:
        m = min(n - i, stop - pos)
        _inner(marker, dst + doff + i * ds, src + soff + i * ss, m, ds, ss, unit, nt)
        pos += m
        i = 0
        for j in range(nd - 1):
            k = nd - 2 - j
            idx[k] += 1
            doff += dstr[k]
            soff += sstr[k]
            if idx[k] < shape[k]:
                break
            doff -= shape[k] * dstr[k]
            soff -= shape[k] * sstr[k]
            idx[k] = 0


@njit(inline="always")
def _batch_offsets(b, bshape, bdstr, bsstr):
    nb = bshape.shape[0]
    db = 0
    sb = 0
    rem = b
    for j in range(nb):
        kk = nb - 1 - j
        q = rem // bshape[kk]
        i = rem - q * bshape[kk]
        rem = q
        db += i * bdstr[kk]
        sb += i * bsstr[kk]
    return db, sb


@njit(inline="always")
def _transpose_tasks(rows, cols, nbatch, tr, kb, head):
    first = head - tr if head > 0 else 0
    return nbatch * ((rows - first + tr - 1) // tr) * ((cols + kb - 1) // kb)


@njit(inline="always")
def _transpose_range(marker, dst, src, bshape, bdstr, bsstr, rows, cols, row_src, col_dst, tr, ct,
                     kb, group, head, nt, staged, t0, t1):
    """Tasks t0..t1-1 of (batch, row block of ``tr`` rows, column block of ``kb`` columns).

    Direct (``staged`` false): micro-tiles go straight to the destination; row blocks start at
    ``head`` (block 0 is rows 0..head-1 when head > 0) so that full micro-tiles start where the
    destination rows are 64-byte aligned, and tasks walk along source rows (``kb`` = cols).

    Staged: each task transposes its block into an L1/L2-resident scratch laid out like the
    destination (column j's rows contiguous), ``group`` source rows at a time, then streams it
    out with non-temporal 64-byte lines, merging columns whose destination segments are adjacent:
    the stores are whole aligned lines whatever the destination's alignment or row length.
    """
    u = marker.itemsize
    lanes = 64 // u
    first = head - tr if head > 0 else 0
    nrb = (rows - first + tr - 1) // tr
    ncb = (cols + kb - 1) // kb
    cstep = lanes * ct
    seg = tr * u
    # scratch and its offset table: only ever addressed through these arrays inside the loop, so
    # they stay alive (Numba frees an array after its last use, raw pointers do not count)
    raw = np.empty(kb * seg + 64 if staged else 0, np.uint8)
    lin = np.arange(kb + lanes if staged else 0, dtype=np.int64) * seg
    rs = row_src.ctypes.data
    cd = col_dst.ctypes.data
    cdp = address_as_pointer(cd, np.int64)
    tile_nt = nt and not staged
    for t in range(t0, t1):
        b = t // (nrb * ncb)
        rest = t - b * (nrb * ncb)
        rb = rest // ncb
        cb = rest - rb * ncb
        r_s = max(0, first + rb * tr)
        r_e = min(rows, first + (rb + 1) * tr)
        c_s = cb * kb
        c_e = min(cols, c_s + kb)
        db, sb = _batch_offsets(b, bshape, bdstr, bsstr)
        db += dst
        sb += src
        scratch = raw.ctypes.data + ((-raw.ctypes.data) & 63)
        if staged:
            target = scratch - r_s * u
            table = lin.ctypes.data - 8 * c_s
        else:
            target = db
            table = cd
        for g in range(r_s, r_e, group):
            g_e = min(r_e, g + group)
            for cc in range(c_s, c_e, cstep):
                cc_e = min(c_e, cc + cstep)
                for r0 in range(g, g_e, lanes):
                    kr = min(lanes, g_e - r0)
                    for c0 in range(cc, cc_e, lanes):
                        kc = min(lanes, cc_e - c0)
                        tile_transpose(marker, sb, rs + 8 * r0, c0, target, table + 8 * c0, r0, kr,
                                       kc, tile_nt)
        if staged:
            n = (r_e - r_s) * u
            run_dst = db + cdp[c_s] + r_s * u
            run_src = scratch
            run_len = n
            for col in range(c_s + 1, c_e):
                d = db + cdp[col] + r_s * u
                s_ = scratch + (col - c_s) * seg
                if d == run_dst + run_len and s_ == run_src + run_len:
                    run_len += n
                else:
                    _copy_run(run_dst, run_src, run_len, nt)
                    run_dst = d
                    run_src = s_
                    run_len = n
            _copy_run(run_dst, run_src, run_len, nt)
    if nt:
        store_fence()


# ---------------------------------------------------------------------------- kernels

@njit(cache=True)
def memcpy_serial(marker, dst, src, nbytes, nt):
    _copy_run(dst, src, nbytes, nt)
    if nt:
        store_fence()


@njit(cache=True, parallel=True)
def memcpy_parallel(marker, dst, src, nbytes, nt):
    # chunk boundaries on 64-byte boundaries of dst, so every NT line is whole and aligned
    nchunks = max(1, min(64, nbytes // _CHUNK_BYTES))
    head = (-dst) & 63
    for c in prange(nchunks):
        a = 0 if c == 0 else head + ((nbytes - head) * c // nchunks) // 64 * 64
        b = nbytes if c == nchunks - 1 else head + ((nbytes - head) * (c + 1) // nchunks) // 64 * 64
        _copy_run(dst + a, src + a, b - a, nt)
        if nt:
            store_fence()


@njit(cache=True)
def units_serial(marker, dst, src, shape, dstr, sstr, unit, total, nt):
    _units_range(marker, dst, src, shape, dstr, sstr, unit, nt, 0, total)
    if nt:
        store_fence()


@njit(cache=True, parallel=True)
def units_parallel(marker, dst, src, shape, dstr, sstr, unit, total, nt):
    nchunks = min(total, 64)
    for c in prange(nchunks):
        _units_range(marker, dst, src, shape, dstr, sstr, unit, nt,
                     total * c // nchunks, total * (c + 1) // nchunks)
        if nt:
            store_fence()


@njit(cache=True)
def transpose_serial(marker, dst, src, bshape, bdstr, bsstr, rows, cols, row_src, col_dst, nbatch,
                     tr, ct, kb, group, head, nt, staged):
    ntasks = _transpose_tasks(rows, cols, nbatch, tr, kb, head)
    _transpose_range(marker, dst, src, bshape, bdstr, bsstr, rows, cols, row_src, col_dst, tr, ct,
                     kb, group, head, nt, staged, 0, ntasks)


@njit(cache=True, parallel=True)
def transpose_parallel(marker, dst, src, bshape, bdstr, bsstr, rows, cols, row_src, col_dst,
                       nbatch, tr, ct, kb, group, head, nt, staged):
    ntasks = _transpose_tasks(rows, cols, nbatch, tr, kb, head)
    nchunks = min(ntasks, 64)
    for c in prange(nchunks):
        _transpose_range(marker, dst, src, bshape, bdstr, bsstr, rows, cols, row_src, col_dst, tr,
                         ct, kb, group, head, nt, staged, ntasks * c // nchunks,
                         ntasks * (c + 1) // nchunks)


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
    nt = meta.nbytes >= runtime.NT_THRESHOLD_BYTES
    doff, soff = meta.dst_offset, meta.src_offset
    marker = MARKERS[meta.word]
    if kind == "memcpy":
        big = meta.unit >= _PARALLEL_COPY_BYTES or runtime.PARALLEL_THRESHOLD == 0
        fn = memcpy_parallel if big else memcpy_serial
        args = (meta.unit, nt and meta.unit >= COPY_NT_MIN_BYTES)
    elif kind == "units":
        fn = units_parallel if parallel else units_serial
        args = (meta.shape, meta.dst_strides, meta.src_strides, meta.unit, meta.units, nt)
    else:
        fn = transpose_parallel if parallel else transpose_serial
        tr, ct = TILES[meta.unit]
        common = (meta.shape, meta.dst_strides, meta.src_strides, meta.rows, meta.cols,
                  meta.row_src, meta.col_dst, meta.batches)
        args = common + (tr, ct, meta.cols, tr)
        if nt and parallel:
            unit = meta.unit
            trb, kb, group = staging(meta)
            staged = common + (trb, 1, kb, group, 0, True, True)
            if not meta.rows_aligned:
                args = staged
            else:
                long_rows = meta.rows * unit >= DIRECT_MIN_ROW_BYTES

                def run(dst, src, _m=marker, _d=doff, _s=soff, _a=args, _st=staged, _long=long_rows,
                        stream=None):
                    d = dst + _d
                    head = ((-d) & 63) // unit if d % unit == 0 else 0
                    if head == 0 or (_long and d % unit == 0):
                        transpose_parallel(_m, d, src + _s, *_a, head, True, False)
                    else:
                        transpose_parallel(_m, d, src + _s, *_st)

                return run
        else:
            args += (0, nt, False)

    def run(dst, src, _fn=fn, _m=marker, _d=doff, _s=soff, _a=args, stream=None):
        _fn(_m, dst + _d, src + _s, *_a)

    return run
