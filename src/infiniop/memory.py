"""Buffers the library allocates: 64-byte aligned (NumPy's own allocations are only 16-byte
aligned, which costs vector and non-temporal stores their fast path)."""

from __future__ import annotations

from math import prod

import numpy as np

ALIGNMENT = 64


def empty_aligned(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary.

    >>> empty_aligned((3, 5), np.float32).ctypes.data % 64
    0
    """
    global _address
    dt = np.dtype(dtype)
    shape = tuple(shape) if not isinstance(shape, int) else (shape,)
    nbytes = prod(shape) * dt.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    if _address is None:  # compiled: 5x cheaper than raw.ctypes.data
        from .backends.cpu.native import kernel

        _address = kernel("infiniop.backends.cpu.arrays", "address_of").specialize(raw)
    off = -_address(raw) % ALIGNMENT
    return raw[off:off + nbytes].view(dt).reshape(shape)


_address = None
