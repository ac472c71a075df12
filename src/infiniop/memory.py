"""Buffers the library allocates: 64-byte aligned (NumPy's own allocations are only 16-byte
aligned, which costs vector and non-temporal stores their fast path)."""

from __future__ import annotations

import numpy as np

ALIGNMENT = 64


def empty_aligned(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary.

    >>> empty_aligned((3, 5), np.float32).ctypes.data % 64
    0
    """
    global _address
    dt = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
    if type(shape) is not tuple:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = dt.itemsize
    for extent in shape:
        if extent < 0:  # (np.ndarray over a buffer would read -1 as "whatever fits")
            raise ValueError(f"negative dimensions are not allowed: {shape}")
        nbytes *= extent
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    if _address is None:  # compiled: 5x cheaper than raw.ctypes.data
        from .backends.cpu.native import kernel

        _address = kernel("infiniop.backends.cpu.arrays", "address_of").specialize(raw)
    # one constructor call over the raw buffer (slice + view + reshape cost 0.5 us more)
    return np.ndarray(shape, dt, raw, -_address(raw) % ALIGNMENT)


_address = None
