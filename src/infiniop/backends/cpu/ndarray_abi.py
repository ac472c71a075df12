"""Where a NumPy array keeps its fields, checked against this process's NumPy.

The descriptors' NumPy fast path hands arrays to compiled launchers that read these fields
themselves (``checked_arrays.py``) instead of asking NumPy from Python (a dtype, rank or
``flags.writeable`` test costs 35-80 ns each here) and instead of Numba's own unboxing (which
allocates a reference-counting record per array). These are the C struct
``PyArrayObject_fields`` of NumPy's headers, unchanged since NumPy 1.7 and in NumPy 2.
``verified()`` reads a few arrays through ctypes and compares with what NumPy says about them;
if anything differs the launchers take ordinary Numba arrays and Python checks them as before.
Pure Python: the check runs in processes that never import Numba.
"""

from __future__ import annotations

import ctypes
import functools
import sys

import numpy as np

# byte offsets in PyArrayObject (64-bit builds)
DATA, NDIM, DIMS, STRIDES, DESCR, FLAGS = 16, 24, 32, 40, 56, 64
C_CONTIGUOUS, WRITEABLE = 0x0001, 0x0400  # NPY_ARRAY_C_CONTIGUOUS, NPY_ARRAY_WRITEABLE


def _fields(a: np.ndarray) -> tuple:
    """(data, ndim, shape, strides, descr address, flags) as read from the object's memory."""
    base = id(a)

    def word(off):
        return ctypes.c_ssize_t.from_address(base + off).value

    nd = ctypes.c_int.from_address(base + NDIM).value
    shape = tuple((ctypes.c_ssize_t * nd).from_address(word(DIMS))) if nd else ()
    strides = tuple((ctypes.c_ssize_t * nd).from_address(word(STRIDES))) if nd else ()
    return (word(DATA), nd, shape, strides, word(DESCR),
            ctypes.c_int.from_address(base + FLAGS).value)


def _expected(a: np.ndarray) -> tuple:
    flags = (C_CONTIGUOUS if a.flags.c_contiguous else 0) | (WRITEABLE if a.flags.writeable else 0)
    return a.__array_interface__["data"][0], a.ndim, a.shape, a.strides, id(a.dtype), flags


@functools.cache
def verified() -> bool:
    """True when this NumPy lays arrays out as the offsets above say (64-bit CPython only)."""
    if sys.maxsize != 2**63 - 1 or sys.implementation.name != "cpython":
        return False
    base = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    frozen = np.zeros(5, np.float16)
    frozen.flags.writeable = False
    samples = [base, base.transpose(2, 0, 1)[:, ::2], base[1, 2], np.zeros(0, np.int8), frozen,
               np.array(1.5)]
    mask = C_CONTIGUOUS | WRITEABLE
    for a in samples:
        got, want = _fields(a), _expected(a)
        if got[:5] != want[:5] or got[5] & mask != want[5]:
            return False
    return True
