"""Small compiled helpers on NumPy arrays shared by the CPU kernels."""

from __future__ import annotations

from numba import njit

from . import jit  # noqa: F401  (sets Numba up before it compiles anything)


@njit(cache=True, nogil=True)
def extent_of(a):
    """[lo, hi) byte addresses of the memory the array's own view covers ((p, p) if empty)."""
    p = a.ctypes.data
    if a.size == 0:
        return p, p
    lo = p
    hi = p
    for d in range(a.ndim):
        span = (a.shape[d] - 1) * a.strides[d]
        if span < 0:
            lo += span
        else:
            hi += span
    return lo, hi + a.itemsize


@njit(cache=True, nogil=True)
def address_of(a):
    """The array's data address."""
    return a.ctypes.data
