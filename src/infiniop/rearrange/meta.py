"""RearrangeMeta: the plan of a strided copy, made once per descriptor, in pure Python.

Pipeline (``plan``):

1. drop size-1 dims, walk every dim forwards in the destination (negative destination strides
   are flipped, moving the origin), order dims by destination stride, merge dims that are
   contiguous in both tensors (``layout.normalize``);
2. fold the innermost dim into the copy *unit* when it is contiguous in both tensors;
3. pick the kernel:

   - ``memcpy``: nothing left but the unit (one contiguous run);
   - ``transpose``: the destination's fastest dim is not the source's and a unit is 1, 2, 4 or
     8 bytes. Dims that form a contiguous chain in the destination (from its stride-``unit``
     dim up) become the *rows* side, dims that form a contiguous chain in the source become the
     *columns* side; the split between the two chains is chosen so that micro-tiles are full
     and destination rows start on cache lines. The rest are batch dims.
   - ``units``: any other layout; a loop of unit copies over the remaining dims.

Nothing here limits rank, extents or strides (the reference GPU planner's block/grid limits and
its division by zero do not exist): every layout that passes descriptor validation gets a plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import numpy as np

from ..layout import normalize

_EMPTY = np.zeros(0, np.int64)
_MIN_TILE_EFFICIENCY = 0.2  # below this share of useful lanes the unit loop is used instead
_TABLE_CAP = 1 << 21  # entries of a row/column offset table (16 MiB); bigger sides use the unit loop


@dataclass(frozen=True, eq=False)
class RearrangeMeta:
    """What the kernel needs, all sizes and strides in bytes.

    kind: 'empty', 'memcpy', 'units' or 'transpose'. ``dst_offset``/``src_offset``: bytes from
    element 0 of each tensor to the iteration origin. ``unit``: bytes copied as one contiguous
    piece (for 'memcpy', all of them). ``word``: the machine word the kernel moves (1/2/4/8).
    For 'units': ``shape``/``dst_strides``/``src_strides`` are the loop dims (outer to inner)
    and ``units`` their product. For 'transpose': those arrays are the batch dims, ``rows``
    units are contiguous in the destination (row r of the source starts at ``row_src[r]``),
    ``cols`` units are contiguous in the source (column c of the destination starts at
    ``col_dst[c]``), ``batches`` = product of the batch dims, and ``rows_aligned`` says that
    every destination row starts at the same offset modulo 64 bytes.
    """

    kind: str
    itemsize: int
    numel: int
    nbytes: int
    dst_offset: int = 0
    src_offset: int = 0
    unit: int = 0
    word: int = 1
    shape: np.ndarray = field(default_factory=lambda: _EMPTY)
    dst_strides: np.ndarray = field(default_factory=lambda: _EMPTY)
    src_strides: np.ndarray = field(default_factory=lambda: _EMPTY)
    units: int = 0
    rows: int = 0
    cols: int = 0
    row_src: np.ndarray = field(default_factory=lambda: _EMPTY)
    col_dst: np.ndarray = field(default_factory=lambda: _EMPTY)
    batches: int = 0
    rows_aligned: bool = False

    def describe(self) -> str:
        """One line for humans (benchmarks, debugging)."""
        if self.kind == "transpose":
            return (f"transpose unit={self.unit}B rows={self.rows} cols={self.cols} "
                    f"batch={tuple(self.shape.tolist())}")
        if self.kind == "units":
            return (f"units unit={self.unit}B word={self.word} shape={tuple(self.shape.tolist())} "
                    f"dst={tuple(self.dst_strides.tolist())} src={tuple(self.src_strides.tolist())}")
        return f"{self.kind} {self.unit}B" if self.kind == "memcpy" else self.kind


def _arr(values) -> np.ndarray:
    return np.asarray(list(values), dtype=np.int64).reshape(-1)


def _offset_table(dims, which: int) -> np.ndarray:
    """Byte offsets of the mixed-radix index over ``dims`` (first dim fastest)."""
    offs = np.zeros(1, np.int64)
    for d in dims:
        offs = (np.arange(d[0], dtype=np.int64)[:, None] * d[which] + offs[None, :]).ravel()
    return offs


def _choose_split(dims, unit):
    """Best (row dims, column dims) for the transpose kernel, or None."""
    lanes = 64 // unit
    dchain, expect = [], unit
    for i in sorted(range(len(dims)), key=lambda i: dims[i][1]):
        if dims[i][1] != expect:
            break
        dchain.append(i)
        expect *= dims[i][0]
    schain, expect = [], unit
    for i in sorted(range(len(dims)), key=lambda i: abs(dims[i][2])):
        if abs(dims[i][2]) != expect:
            break
        schain.append(i)
        expect *= dims[i][0]
    if not dchain or not schain or dchain[0] == schain[0]:
        return None
    best, best_score = None, 0.0
    for a in range(1, len(dchain) + 1):
        rows_side = set(dchain[:a])
        for b in range(1, len(schain) + 1):
            if rows_side & set(schain[:b]):
                break
            r = prod(dims[i][0] for i in dchain[:a])
            c = prod(dims[i][0] for i in schain[:b])
            if r > _TABLE_CAP or c > _TABLE_CAP:
                break
            eff = (r / (-(-r // lanes) * lanes)) * (c / (-(-c // lanes) * lanes))
            if eff < _MIN_TILE_EFFICIENCY:
                continue
            aligned = all(dims[i][1] % 64 == 0 for i in range(len(dims)) if i not in rows_side)
            score = eff * (1.0 if aligned else 0.6)
            if score > best_score + 1e-9:
                best, best_score = (dchain[:a], schain[:b]), score
    return best


def plan(shape, dst_strides, src_strides, itemsize: int) -> RearrangeMeta:
    """Plan ``dst[...] = src[...]`` for tensors of ``shape`` with element strides given."""
    shape = tuple(int(n) for n in shape)
    numel = prod(shape)
    nbytes = numel * itemsize
    if numel == 0:
        return RearrangeMeta("empty", itemsize, 0, 0)
    lay = normalize(shape, [tuple(dst_strides), tuple(src_strides)])
    dims = [(n, d * itemsize, s * itemsize)
            for n, d, s in zip(lay.shape, lay.strides[0], lay.strides[1]) if n > 1]
    doff, soff = lay.offsets[0] * itemsize, lay.offsets[1] * itemsize
    unit = itemsize
    while dims and dims[-1][1] == unit and dims[-1][2] == unit:
        unit *= dims[-1][0]
        dims.pop()
    common = dict(itemsize=itemsize, numel=numel, nbytes=nbytes, dst_offset=doff,
                  src_offset=soff, unit=unit)
    if not dims:
        return RearrangeMeta("memcpy", word=1, **common)

    if unit in (1, 2, 4, 8):
        split = _choose_split(dims, unit)
        if split is not None:
            rows_i, cols_i = split
            cols_dims = []
            for i in cols_i:  # walk the source forwards along the column side
                n, d, s = dims[i]
                if s < 0:
                    doff += (n - 1) * d
                    soff += (n - 1) * s
                    d, s = -d, -s
                cols_dims.append((n, d, s))
            rows_dims = [dims[i] for i in rows_i]
            batch = [dims[i] for i in range(len(dims)) if i not in rows_i and i not in cols_i]
            rows = prod(d[0] for d in rows_dims)
            cols = prod(d[0] for d in cols_dims)
            common.update(dst_offset=doff, src_offset=soff)
            return RearrangeMeta(
                "transpose", word=unit, shape=_arr(d[0] for d in batch),
                dst_strides=_arr(d[1] for d in batch), src_strides=_arr(d[2] for d in batch),
                rows=rows, cols=cols, row_src=_offset_table(rows_dims, 2),
                col_dst=_offset_table(cols_dims, 1),
                batches=prod(d[0] for d in batch),
                rows_aligned=all(d[1] % 64 == 0 for d in batch + cols_dims), **common)

    inner_d, inner_s = dims[-1][1], dims[-1][2]
    word = next(w for w in (8, 4, 2, 1) if unit % w == 0 and inner_d % w == 0 and inner_s % w == 0)
    return RearrangeMeta(
        "units", word=word, shape=_arr(d[0] for d in dims), dst_strides=_arr(d[1] for d in dims),
        src_strides=_arr(d[2] for d in dims), units=prod(d[0] for d in dims), **common)
