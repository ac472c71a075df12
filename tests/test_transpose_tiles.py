"""The CPU backend's in-register micro-tile transpose (backends/cpu/transpose.py) on its own:
both row widths (64-byte rows, and 32-byte rows for AVX2 hosts, alone and two tiles stacked as
AVX2's rearrange uses them: 2L source rows, 64-byte destination rows), every unit size, every edge
shape (kr x kc live rows and columns), unaligned bases; nothing outside the live block of the
destination is written. The host decides masked or staged edges (``_native_masks``); the
rearrange and elementwise tables cover whichever path the host takes, this covers both widths."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from infiniop.backends.cpu.transpose import (
    network,
    tile_transpose,
    tile_transpose_256,
    tile_transpose_stacked,
)


@njit(cache=False)
def _run64(marker, src, s_off, c0, dst, d_off, r0, kr, kc):
    tile_transpose(marker, src, s_off, c0, dst, d_off, r0, kr, kc, False)


@njit(cache=False)
def _run32(marker, src, s_off, c0, dst, d_off, r0, kr, kc):
    tile_transpose_256(marker, src, s_off, c0, dst, d_off, r0, kr, kc, False)


@njit(cache=False)
def _run32x2(marker, src, s_off, c0, dst, d_off, r0, kr, kc):
    tile_transpose_stacked(marker, src, s_off, c0, dst, d_off, r0, kr, kc, False)


RUN = {(64, 1): _run64, (32, 1): _run32, (32, 2): _run32x2}


@pytest.mark.parametrize("lanes, blocks", [(8, 2), (16, 2), (32, 2), (16, 4), (32, 4), (64, 4)])
def test_network_is_a_transpose(lanes, blocks):
    rounds, order = network(lanes, blocks)  # network() checks itself by simulation
    assert sorted(order) == list(range(lanes))


@pytest.mark.parametrize("row_bytes, stack", list(RUN))
@pytest.mark.parametrize("unit", [1, 2, 4, 8])
def test_every_edge_shape(row_bytes, stack, unit):
    run = RUN[row_bytes, stack]
    lanes = row_bytes // unit
    height = stack * lanes  # source rows (destination units a row)
    dt = np.dtype(f"u{unit}")
    marker = np.empty(0, dt)
    rng = np.random.default_rng(unit)
    c0, r0 = 3, 5  # units into the source rows / destination rows (unaligned on purpose)
    spitch, dpitch = (c0 + lanes + 7) * unit, (r0 + height + 9) * unit
    src = rng.integers(0, 2 ** (8 * unit) - 1, (height, spitch // unit), dtype=dt, endpoint=True)
    s_off = np.arange(height, dtype=np.int64) * spitch
    d_off = np.arange(lanes, dtype=np.int64) * dpitch
    sentinel = np.array(0x5A5A5A5A5A5A5A5A, np.uint64).astype(dt)
    for kr in range(1, height + 1):
        for kc in range(1, lanes + 1):
            dst = np.full((lanes, dpitch // unit), sentinel, dt)
            run(marker, src.ctypes.data, s_off.ctypes.data, c0, dst.ctypes.data,
                d_off.ctypes.data, r0, kr, kc)
            want = np.full_like(dst, sentinel)
            want[:kc, r0:r0 + kr] = src[:kr, c0:c0 + kc].T
            if not np.array_equal(dst, want):
                raise AssertionError(f"kr={kr} kc={kc}: {int((dst != want).sum())} units differ")
