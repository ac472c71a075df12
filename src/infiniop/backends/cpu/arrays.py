"""Small compiled helpers on NumPy arrays shared by the CPU kernels."""

from __future__ import annotations

from numba import njit

from . import jit  # noqa: F401  (sets Numba up before it compiles anything)


@njit(cache=True, nogil=True)  # a call, not inline="always": measured faster in the launchers
def layout_end(descr, shape, strides, meta, pos):
    """The compiled twin of ``descriptor.layout_mismatch``, for the elementwise array launchers,
    on an array's ``descr_address``, shape and strides (not the array: then one compilation
    per rank serves every dtype and layout of array, where each array type compiled its own,
    0.3-0.4 s a launcher). ``meta[pos:]`` holds one descriptor's layout as ``dtype, ndim,
    shape..., byte strides...`` (``dtype``: the address of the NumPy dtype the array must have,
    0 = checked by the caller). Returns where the next layout starts if the array has that
    dtype and exactly that shape and those strides (the stride of an extent-1 dim is not
    compared), else -1. Stricter on empty arrays (their strides are compared): those go to the
    general path, which accepts them."""
    if meta[pos] != 0 and descr != meta[pos]:
        return -1
    pos += 1
    nd = len(shape)
    if meta[pos] != nd:
        return -1
    for d in range(nd):
        n = meta[pos + 1 + d]
        if shape[d] != n or (n != 1 and strides[d] != meta[pos + 1 + nd + d]):
            return -1
    return pos + 1 + 2 * nd


@njit(cache=True, nogil=True)
def address_of(a):
    """The array's data address."""
    return a.ctypes.data
