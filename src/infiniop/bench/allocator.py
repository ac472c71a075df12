"""The C allocator kept from handing back freed memory, so that a peer that allocates its outputs
(torch's row operators have no ``out=`` form) is timed at its kernels' speed, not at the page
faults of fresh memory.

glibc serves a large ``malloc`` with a new ``mmap`` and returns it to the system on ``free``: every
call of such a peer then faults its output in page by page, and the kernel zeroes each page. On
the 2-core AMD EPYC (2026-11-28, torch 2.13, 2 threads), ``torch.softmax`` of a float32
(4096, 4096) took 23-25 ms that way and 6.3 ms with freed memory kept (``_softmax.out`` into a
preallocated tensor: 5.4-7.1 ms); ``F.rms_norm`` of (2048, 4096) 33 -> 6.9 ms. A caching
allocator (jemalloc, tcmalloc, which PyTorch's CPU tuning guides recommend, or a framework's own)
gives the same. Our own cases and NumPy's write into preallocated outputs either way.
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
_M_MMAP_MAX = -4

_state = {"kept": False}


def keep_freed_memory() -> bool:
    """Ask glibc to serve every block from its heap (no ``mmap``) and never to trim it, for the
    rest of the process; True if it took (glibc), False elsewhere (nothing changed)."""
    if _state["kept"]:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl without mallopt, Windows)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    kept = mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
    _state["kept"] = kept
    return kept


def allocator() -> str:
    """How freed memory is treated in this process, for the bench's machine record."""
    return "glibc, freed memory kept" if _state["kept"] else "system default"
