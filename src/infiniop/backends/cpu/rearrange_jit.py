"""The Numba source of the rearrange kernels (see ``rearrange_kernels`` for what they do and
how a plan picks one). Imported only when a kernel must be compiled: a process whose kernels
are cached runs them without Numba (``native``).

All kernels take raw addresses; the descriptor has checked the buffers. Serial variants run
below ``runtime.PARALLEL_THRESHOLD`` elements; ``prange`` (TBB) drivers above.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numba.extending import overload

from . import jit  # noqa: F401  (sets Numba up before the decorators below run)
from .cpuinfo import TILE_ROW_BYTES
from .intrinsics import address_as_pointer, call_kernel
from .transpose import copy_line, memcpy_bytes, store_fence, tile_transpose, tile_transpose_stacked

# a micro-tile's source rows hold TILE_ROW_BYTES (one register); its destination rows 64 bytes,
# whole lines: on AVX2 two stacked 8 x 8 float32 tiles (a 16 x 16 one spilled its registers; 8 x
# 8 tiles storing half lines ran 1.4-1.8x slower, AMD EPYC Zen 3, 4096^2, same process)
_tile = tile_transpose if TILE_ROW_BYTES == 64 else tile_transpose_stacked

_CHUNK_BYTES = 1 << 18  # smallest chunk of a parallel contiguous copy


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


def _columns_outer(marker):
    """Whether a step's micro-tiles go column by column (each destination row then receives its
    lines back to back) rather than row by row; a constant of the unit's type, so each kernel
    keeps one loop nest. Columns first for 4-byte units, the order of the C probe that reached
    89-98% of a copy: float32 4096^2 on an AMD EPYC (Zen 4), 2026-11-27, 4.97 -> 4.65 ms (faster
    in 22 of 30 alternating rounds; 8192 x 4096 and 3000 x 1001 likewise). float64 that way was
    slower (2 of 21 rounds); fp16 and int8 showed no difference."""


@overload(_columns_outer)
def _columns_outer_impl(marker):
    outer = marker.dtype.bitwidth == 32
    return lambda marker: outer


@njit(inline="always")
def _aligned_column(row_start, u, clanes):
    """The first column (mod ``clanes``) at which a source row starting at address
    ``row_start`` is TILE_ROW_BYTES aligned (0 where no column is: units not aligned to their
    size). NumPy's large arrays start 16 bytes into a page: read from column 0, every other
    32-byte row load of a tile straddled two lines, and float32 4096^2 transposes took 7.7 ms
    instead of 6.2, NCHW -> NHWC (32, 64, 128, 128) 16.1 instead of 10.8 (AMD EPYC Zen 3,
    2026-11-29, one process, the source at 16 and at 0 bytes into a page)."""
    if row_start % u != 0:
        return 0
    return ((-row_start) & (TILE_ROW_BYTES - 1)) // u % clanes


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
    lanes = 64 // u  # source rows a micro-tile (destination units a line)
    clanes = TILE_ROW_BYTES // u  # its columns
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
    rsp = address_as_pointer(rs, np.int64)
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
        # micro-tiles on the grid of columns where the block's source rows are TILE_ROW_BYTES
        # aligned (a partial tile first), so that their loads do not straddle lines (see
        # _aligned_column); not where the rows' alignments differ: (3001, 3001).T float32 took
        # 7.1-7.2 ms shifted to its first row's, 4.3-5.0 not
        grid = c_s
        if r_e - r_s > 1 and (rsp[r_s + 1] - rsp[r_s]) % TILE_ROW_BYTES == 0:
            grid -= (c_s - _aligned_column(sb + rsp[r_s], u, clanes)) % clanes
        for g in range(r_s, r_e, group):
            g_e = min(r_e, g + group)
            for cc in range(grid, c_e, cstep):
                cc_e = min(c_e, cc + cstep)
                if _columns_outer(marker):
                    for t0c in range(cc, cc_e, clanes):
                        c0 = max(t0c, c_s)
                        kc = min(clanes, cc_e - t0c) - (c0 - t0c)
                        for r0 in range(g, g_e, lanes):
                            _tile(marker, sb, rs + 8 * r0, c0, target, table + 8 * c0, r0,
                                  min(lanes, g_e - r0), kc, tile_nt)
                else:
                    for r0 in range(g, g_e, lanes):
                        kr = min(lanes, g_e - r0)
                        for t0c in range(cc, cc_e, clanes):
                            c0 = max(t0c, c_s)
                            _tile(marker, sb, rs + 8 * r0, c0, target, table + 8 * c0, r0,
                                  kr, min(clanes, cc_e - t0c) - (c0 - t0c), tile_nt)
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


# units and transpose: ``serial`` does tasks t0..t1-1 (a whole call: 0 and -1); the pool's
# ``parallel`` hands runs of tasks to it by address (``intrinsics.call_kernel``), so a kernel's
# body compiles once for both. A prange loop around the body compiled 1.9x as long as ``serial``
# (transpose float32: 7.3-7.6 s against 3.9 s, AMD EPYC Zen 3, empty cache).

@njit(cache=True)
def units_serial(marker, dst, src, shape, dstr, sstr, unit, total, nt, t0, t1):
    _units_range(marker, dst, src, shape, dstr, sstr, unit, nt, t0, total if t1 < 0 else t1)
    if nt:
        store_fence()
    return 0


@njit(cache=True, parallel=True)
def units_parallel(marker, dst, src, shape, dstr, sstr, unit, total, nt, serial_at):
    nchunks = min(total, 64)
    for c in prange(nchunks):
        call_kernel(serial_at, (marker, dst, src, shape, dstr, sstr, unit, total, nt,
                                total * c // nchunks, total * (c + 1) // nchunks))
    return 0


@njit(cache=True)
def transpose_serial(marker, dst, src, bshape, bdstr, bsstr, rows, cols, row_src, col_dst, nbatch,
                     tr, ct, kb, group, head, nt, staged, t0, t1):
    if t1 < 0:
        t1 = _transpose_tasks(rows, cols, nbatch, tr, kb, head)
    _transpose_range(marker, dst, src, bshape, bdstr, bsstr, rows, cols, row_src, col_dst, tr, ct,
                     kb, group, head, nt, staged, t0, t1)
    return 0


@njit(cache=True, parallel=True)
def transpose_parallel(marker, dst, src, bshape, bdstr, bsstr, rows, cols, row_src, col_dst,
                       nbatch, tr, ct, kb, group, head, nt, staged, serial_at):
    ntasks = _transpose_tasks(rows, cols, nbatch, tr, kb, head)
    nchunks = min(ntasks, 64)
    for c in prange(nchunks):
        call_kernel(serial_at, (marker, dst, src, bshape, bdstr, bsstr, rows, cols, row_src,
                                col_dst, nbatch, tr, ct, kb, group, head, nt, staged,
                                ntasks * c // nchunks, ntasks * (c + 1) // nchunks))
    return 0
