"""Buffers the library allocates: 64-byte aligned (NumPy's own allocations are only 16-byte
aligned, which costs vector and non-temporal stores their fast path), and large ones recycled.

Fresh memory is expensive: the kernel zeroes every page on first touch (on VMs the hypervisor may
fault it in too), which for a large output costs more than a memory-bound operation itself. glibc
hands memory back to the system on free only for blocks of 32 MiB and more (its largest dynamic
mmap threshold; smaller ones it reuses from its heap), so outputs of that size come from a bounded
set of buffers, each reused once nothing refers to it any more: every NumPy view holds a
reference to its owner, so the owner's reference count says when a buffer is free.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from . import _forksafe
from .settings import env_int

ALIGNMENT = 64


def _default_pool_mib() -> int:
    """1 GiB, or an eighth of the machine's memory where that is less."""
    try:
        return min(1024, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 23)
    except (AttributeError, ValueError, OSError):
        return 1024


# bytes of buffers kept per process at most (the Dask name too, read before this pool served
# every output)
POOL_BYTES = env_int("INFINIOP_POOL_MIB", env_int("INFINIOP_DASK_POOL_MIB", _default_pool_mib())) << 20
# the outputs empty_aligned recycles: the sizes glibc returns to the system on free (measured,
# functional sub float32 without out= against with, AMD EPYC Zen 4: 16 MiB 376 / 383 us, 32 MiB
# 2.88 / 0.94 ms, 64 MiB 6.6 / 2.2 ms, 128 MiB 12.3 / 4.7 ms)
RECYCLE_MIN = 32 << 20


def empty_aligned(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary.

    >>> empty_aligned((3, 5), np.float32).ctypes.data % 64
    0

    Outputs of ``RECYCLE_MIN`` bytes and more come from :func:`recycled_empty`.
    """
    global _address
    dt = dtype if isinstance(dtype, np.dtype) else _numpy_dtype(dtype)
    if type(shape) is not tuple:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = dt.itemsize
    for extent in shape:
        if extent < 0:  # (np.ndarray over a buffer would read -1 as "whatever fits")
            raise ValueError(f"negative dimensions are not allowed: {shape}")
        nbytes *= extent
    if nbytes >= RECYCLE_MIN:
        return recycled_empty(shape, dt, nbytes)
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    if _address is None:  # compiled: 5x cheaper than raw.ctypes.data
        from .backends.cpu.native import kernel

        _address = kernel("infiniop.backends.cpu.arrays", "address_of").specialize(raw)
    # one constructor call over the raw buffer (slice + view + reshape cost 0.5 us more)
    return np.ndarray(shape, dt, raw, -_address(raw) % ALIGNMENT)


_address = None


def _numpy_dtype(dtype) -> np.dtype:
    """A dtype as TensorDescriptor reads it where NumPy would read it otherwise: infiniop's
    DTypes, torch dtypes and dtype strings (``infiniop.bfloat16``, ``"BF16"``; ``"f16"``,
    NumPy's float128, is refused); anything else as NumPy reads it."""
    from .dtype import DType, as_dtype

    if isinstance(dtype, DType | str) or type(dtype).__module__ == "torch":
        return as_dtype(dtype).numpy
    return np.dtype(dtype)


_pool: dict[int, list[np.ndarray]] = {}  # byte size -> buffers (in use or idle)
_pool_lock = _forksafe.Lock()
_pooled = 0  # bytes of all pooled buffers


def _idle(bufs: list, i: int) -> bool:
    """No array refers to ``bufs[i]`` (only the list does)."""
    return sys.getrefcount(bufs[i]) == _IDLE


_probe = [np.empty(1, np.uint8)]
_IDLE = sys.getrefcount(_probe[0])  # measured the way _idle measures: the list's + the argument's
del _probe


def recycled_empty(shape, dtype, nbytes: int) -> np.ndarray:
    """An uninitialised 64-byte aligned array of ``nbytes`` bytes, in a buffer of that size that
    no array refers to any more, or a new one while all pooled buffers stay within
    ``POOL_BYTES`` (idle buffers of other sizes make room), else a fresh unpooled one."""
    global _pooled
    if nbytes > POOL_BYTES:
        return _fresh(shape, dtype, nbytes)
    with _pool_lock:
        bufs = _pool.setdefault(nbytes, [])
        free = next((i for i in range(len(bufs)) if _idle(bufs, i)), None)
        if free is None:
            for size, others in _pool.items():  # make room: drop idle buffers of other sizes
                for i in reversed(range(len(others))):
                    if _pooled + nbytes <= POOL_BYTES:
                        break
                    if size != nbytes and _idle(others, i):
                        del others[i]
                        _pooled -= size
            if _pooled + nbytes > POOL_BYTES:
                return _fresh(shape, dtype, nbytes)
            bufs.append(np.empty(nbytes + ALIGNMENT, np.uint8))
            _pooled += nbytes
            free = len(bufs) - 1
        buf = bufs[free]
        return np.ndarray(shape, dtype, buf, -buf.ctypes.data % ALIGNMENT)


def torch_empty(shape, dtype, device="cpu"):
    """``torch.empty(shape, dtype=dtype, device=device)``; a CPU tensor of ``RECYCLE_MIN``
    bytes or more lives in a recycled buffer (the tensor holds the NumPy array that holds it)."""
    import torch

    shape = tuple(shape)
    nbytes = dtype.itemsize
    for extent in shape:
        nbytes *= extent
    if nbytes < RECYCLE_MIN or torch.device(device).type != "cpu":
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.from_numpy(recycled_empty((nbytes,), np.uint8, nbytes)).view(dtype).view(shape)


def _fresh(shape, dtype, nbytes: int) -> np.ndarray:
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    return np.ndarray(shape, dtype, raw, -raw.ctypes.data % ALIGNMENT)


def release_idle_buffers() -> int:
    """Free the recycled buffers no array refers to (their memory goes back to the system);
    returns how many bytes. Buffers still in use stay pooled.

    >>> x = empty_aligned((RECYCLE_MIN // 4,), np.float32)   # a recycled buffer
    >>> del x                                                  # now idle
    >>> release_idle_buffers() >= RECYCLE_MIN
    True
    """
    global _pooled
    freed = 0
    with _pool_lock:
        for size, bufs in _pool.items():
            for i in reversed(range(len(bufs))):
                if _idle(bufs, i):
                    del bufs[i]
                    freed += size
        _pooled -= freed
    return freed
