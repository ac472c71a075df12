"""Layout algebra shared by every operator: broadcasting, self-overlap, normalisation, aliasing.

Pure Python, run once per descriptor (never per call). ``normalize`` is the TensorIterator-style
pipeline: drop size-1 dims, flip dims the output walks backwards, order dims by the output's
strides, merge dims that are contiguous for every operand.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from math import prod

import numpy as np

from .status import InfiniError, Status
from .tensor import TensorDescriptor

_BRUTE_FORCE_LIMIT = 1 << 22  # elements; above it an undecided self-overlap is refused


def broadcast_shape(shapes: list[tuple[int, ...]], names: list[str]) -> tuple[int, ...]:
    """NumPy's rule: align trailing dims; extents must match or be 1."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, n in enumerate(shape):
            j = ndim - len(shape) + i
            if n != 1:
                if out[j] not in (1, n):
                    raise InfiniError(Status.BAD_TENSOR_SHAPE,
                                      f"shapes {', '.join(map(str, shapes))} do not broadcast")
                out[j] = n
    return tuple(out)


def broadcast_strides(desc: TensorDescriptor, out_shape: tuple[int, ...], name: str) -> tuple[int, ...]:
    """Strides that read ``desc`` as a tensor of ``out_shape``: missing leading dims and size-1
    dims get stride 0 (NumPy's way); equal shapes keep their strides, 0 included (InfiniCore's)."""
    shape, strides = desc.shape, desc.strides
    if len(shape) > len(out_shape):
        raise InfiniError(Status.BAD_TENSOR_SHAPE,
                          f"operand '{name}': {len(shape)} dims cannot broadcast to output shape "
                          f"{out_shape} ({len(out_shape)} dims)")
    lead = len(out_shape) - len(shape)
    result = [0] * lead
    for n, s, m in zip(shape, strides, out_shape[lead:]):
        if n == m:
            result.append(s if m != 1 else 0)
        elif n == 1:
            result.append(0)
        else:
            raise InfiniError(Status.BAD_TENSOR_SHAPE,
                              f"operand '{name}': shape {shape} cannot broadcast to output shape "
                              f"{out_shape}")
    return tuple(result)


def memory_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...] | None:
    """The axes of a dense (shape, strides) from the largest |stride| to the smallest, size-1
    axes first: the order a copy of it would be laid out in to keep its layout; None where it
    is not dense (gaps, overlaps, broadcasts) or empty. Strides in elements, any sign."""
    if 0 in shape:
        return None
    ones = [i for i, n in enumerate(shape) if n == 1]
    rest = sorted((i for i, n in enumerate(shape) if n != 1), key=lambda i: -abs(strides[i]))
    step = 1
    for i in reversed(rest):
        if abs(strides[i]) != step:
            return None
        step *= shape[i]
    return (*ones, *rest)


def result_order(shape: tuple[int, ...], operands) -> tuple[int, ...] | None:
    """The axis order (outermost first) for a fresh output of ``shape``, given the inputs'
    (shape, element strides): NumPy's and torch's "keep the inputs' layout", simplified. The
    inputs of that very shape that are dense vote with their :func:`memory_order`; one order
    that is not row-major wins, anything else (no vote, disagreement) is row-major (None).
    ``silu(x.T)`` then runs as a flat loop into an output laid out like x.T (2x a transposing
    one here) and returns what NumPy's ``np.exp(x.T)`` would."""
    shape = tuple(shape)
    votes = {memory_order(tuple(s), tuple(st)) for s, st in operands if tuple(s) == shape}
    if len(votes) != 1:
        return None
    order = votes.pop()
    if order is None:
        return None
    rest = [i for i in order if shape[i] != 1]
    return None if rest == sorted(rest) else order


def self_overlaps(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True if two different indices of (shape, strides) address the same element."""
    dims = sorted((abs(s), n) for n, s in zip(shape, strides) if n > 1)
    if not dims or 0 in shape:
        return False
    span = 0  # highest offset reachable by the dims already seen
    nested = True
    for s, n in dims:
        if s == 0:
            return True
        if s <= span:
            nested = False
        span += (n - 1) * s
    if nested:
        return False
    numel = prod(n for _, n in dims)
    if numel > _BRUTE_FORCE_LIMIT:
        return True  # undecided and too big to enumerate: refuse rather than risk a race
    offsets = np.zeros(1, dtype=np.int64)
    for s, n in dims:
        offsets = (offsets[:, None] + np.arange(n, dtype=np.int64)[None, :] * s).ravel()
    return np.unique(offsets).size != numel


def check_writable_layout(desc: TensorDescriptor, name: str) -> None:
    """An output may not broadcast (0 stride on an extent > 1) nor address one element twice.
    An empty output writes nothing, so any strides are fine."""
    if desc.is_empty:
        return
    for i, (n, s) in enumerate(zip(desc.shape, desc.strides)):
        if n > 1 and s == 0:
            raise InfiniError(Status.BAD_TENSOR_STRIDES,
                              f"operand '{name}': output has stride 0 on dim {i} (extent {n}); "
                              "outputs cannot broadcast")
    if self_overlaps(desc.shape, desc.strides):
        raise InfiniError(Status.BAD_TENSOR_STRIDES,
                          f"operand '{name}': strides {desc.strides} for shape {desc.shape} make "
                          "two elements share an address")


@dataclass(frozen=True)
class Layout:
    """A normalised iteration space: ``shape`` (outer to inner, at least one dim), per-operand
    ``strides`` and ``offsets`` (element offset of the iteration origin from element 0)."""

    shape: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return prod(self.shape)


def normalize(shape: tuple[int, ...], operand_strides: list[tuple[int, ...]]) -> Layout:
    """Simplify the iteration over ``shape`` for operands whose strides (aligned to ``shape``)
    are given; operand 0 (the output) decides the order. Visits the same (offset...) tuples."""
    k = len(operand_strides)
    offsets = [0] * k
    dims = []
    for d, n in enumerate(shape):
        if n == 1:
            continue
        st = [operand_strides[j][d] for j in range(k)]
        if st[0] < 0:  # walk this dim forwards for the output: start from its far end
            for j in range(k):
                offsets[j] += (n - 1) * st[j]
            st = [-s for s in st]
        dims.append((n, st))
    dims.sort(key=lambda d: tuple(-abs(s) for s in d[1]))
    merged: list[tuple[int, list[int]]] = []
    for n, st in dims:
        if merged:
            pn, pst = merged[-1]
            if all(pst[j] == st[j] * n for j in range(k)):
                merged[-1] = (pn * n, st)
                continue
        merged.append((n, st))
    if not merged:
        merged = [(1, [0] * k)]
    return Layout(
        shape=tuple(n for n, _ in merged),
        strides=tuple(tuple(st[j] for _, st in merged) for j in range(k)),
        offsets=tuple(offsets),
    )


def overlap(addr_a: int, a: TensorDescriptor, addr_b: int, b: TensorDescriptor) -> str:
    """'none', 'same' (identical element placement) or 'partial' for two views of memory."""
    if a.is_empty or b.is_empty:
        return "none"
    ia, ib = a.dtype.itemsize, b.dtype.itemsize
    a_lo, a_hi = addr_a + a.reach[0] * ia, addr_a + (a.reach[1] + 1) * ia
    b_lo, b_hi = addr_b + b.reach[0] * ib, addr_b + (b.reach[1] + 1) * ib
    if a_hi <= b_lo or b_hi <= a_lo:
        return "none"
    if addr_a == addr_b and ia == ib and a.shape == b.shape and all(
        sa == sb or n == 1 for sa, sb, n in zip(a.strides, b.strides, a.shape)
    ):
        return "same"
    va, vb = raw_view(addr_a, a), raw_view(addr_b, b)
    try:
        shared = np.shares_memory(va, vb, max_work=1 << 20)
    except np.exceptions.TooHardError:
        shared = True
    return "partial" if shared else "none"


def raw_view(address: int, desc: TensorDescriptor, dtype=None) -> np.ndarray:
    """A NumPy view of ``desc`` at ``address`` (no checks: callers checked or trust it)."""
    dt = np.dtype(dtype) if dtype is not None else desc.dtype.numpy
    isz = desc.dtype.itemsize
    if desc.is_empty:
        return np.empty(desc.shape, dt)
    lo_e, hi_e = desc.reach
    nbytes = (hi_e - lo_e + 1) * isz
    buf = (ctypes.c_char * nbytes).from_address(address + lo_e * isz)
    base = np.frombuffer(buf, dtype=np.uint8)
    return np.ndarray(desc.shape, dt, buffer=base, offset=-lo_e * isz,
                      strides=[s * isz for s in desc.strides])
