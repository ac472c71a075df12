"""Small compiled helpers on NumPy arrays shared by the CPU kernels."""

from __future__ import annotations

from numba import njit

from . import jit  # noqa: F401  (sets Numba up before it compiles anything)
from .checked_arrays import descr_address


@njit(cache=True, nogil=True)  # a call, not inline="always": measured faster in the launchers
def layout_end(a, meta, pos):
    """The compiled twin of ``descriptor.layout_mismatch``, for the elementwise array launchers.
    ``meta[pos:]`` holds one descriptor's layout as ``dtype, ndim, shape..., byte strides...``
    (``dtype``: the address of the NumPy dtype the array must have, 0 = checked by the caller).
    Returns where the next layout starts if ``a`` has that dtype and exactly that shape and those
    strides (the stride of an extent-1 dim is not compared), else -1. Stricter on empty arrays
    (their strides are compared): those go to the general path, which accepts them."""
    if meta[pos] != 0 and descr_address(a) != meta[pos]:
        return -1
    pos += 1
    nd = a.ndim
    if meta[pos] != nd:
        return -1
    for d in range(nd):
        n = meta[pos + 1 + d]
        if a.shape[d] != n or (n != 1 and a.strides[d] != meta[pos + 1 + nd + d]):
            return -1
    return pos + 1 + 2 * nd


@njit(cache=True, nogil=True)
def address_of(a):
    """The array's data address."""
    return a.ctypes.data
