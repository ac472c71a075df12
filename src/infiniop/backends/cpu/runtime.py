"""Settings of the CPU backend and its thread count; Numba itself is not imported here.

A process whose kernels are all in the disk cache runs them without ever importing Numba (see
``native.py``): Numba is set up by ``jit.py`` only when something must be compiled. The threads
are one pool either way (Numba's TBB layer; the same C library serves both), so the thread
count below works before, after and without Numba.

TBB is the threading layer because it sleeps instead of spinning: on a shared 2-vCPU VM,
OpenMP's default spin-wait stalls for milliseconds when the other core is busy (measured; see
docs). The pip ``tbb`` wheel puts ``libtbb.so.12`` in ``<prefix>/lib``, which is not on the loader
path, so we preload it by absolute path.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Callable

from ... import kernel_cache
from ...settings import env_int
from . import cpuinfo

CACHE_DIR = kernel_cache.root()
# Below this many elements a call runs serially: waking a pool costs more than it saves.
PARALLEL_THRESHOLD = env_int("INFINIOP_PARALLEL_THRESHOLD", 1 << 18)


def _default_nt_threshold() -> int:
    """Half the last-level cache, at most 16 MiB (8 MiB where sysfs does not say): see
    ``streams``."""
    return min(cpuinfo.last_level_cache_bytes() or 16 << 20, 32 << 20) // 2


# The bytes moved by a call (each operand's own bytes, read or written, once) from which its
# stores bypass the cache (non-temporal), times the caller's scale.
NT_THRESHOLD_BYTES = env_int("INFINIOP_NT_THRESHOLD_BYTES", -1)
if NT_THRESHOLD_BYTES < 0:
    NT_THRESHOLD_BYTES = _default_nt_threshold()


def streams(moved: int, scale: float = 1.0) -> bool:
    """Whether a call moving ``moved`` bytes stores non-temporally.

    While a call's operands fit well inside the last-level cache, the next call finds them
    there and ordinary stores keep its output cached; once they do not, stores that bypass the
    cache skip the read-for-ownership. Measured on a shared AMD EPYC (32 MiB of L3, 2 threads,
    2026-11-27): cached stores 1.3-2x faster at 8-12 MiB moved (sub/clip float32 1M elements,
    rms_norm float32 (256, 4096)); from 24 to 48 MiB either could win by 1.3-1.9x from one run
    to the next (what the neighbours leave of the cache), so half the cache is where the
    elementwise and row kernels start streaming. Scales (the thresholds these copies had
    before, measured then and again): contiguous copies 2 (cached 3x faster at 8 MiB copied; at
    16 MiB each won by 1.3x in one of two runs), transposes and other strided copies 0.5
    (non-temporal 1.15-1.3x faster at 4-6 MiB copied).
    """
    return moved >= NT_THRESHOLD_BYTES * scale


def moved_bytes(shape, strides, itemsizes) -> int:
    """Bytes a call moves: per operand, its itemsize times the extents it steps along (a
    broadcast dimension, stride 0, counts once)."""
    total = 0
    for st, isz in zip(strides, itemsizes):
        covered = isz
        for extent, step in zip(shape, st):
            covered *= extent if step else min(extent, 1)
        total += covered
    return total


@functools.cache
def have_tbb() -> bool:
    """Whether TBB's library loads (preloaded by absolute path on first need: ~2 ms that a
    process running only serial calls never pays, nor glob's import)."""
    import glob

    candidates = []
    for prefix in dict.fromkeys([sys.prefix, sys.base_prefix, sys.exec_prefix]):
        candidates += sorted(glob.glob(os.path.join(prefix, "lib", "libtbb.so.12*")))
    for path in candidates + ["libtbb.so.12"]:
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return True
        except OSError:
            continue
    return False


def chosen_layer() -> str:
    """The threading layer parallel kernels start (Numba's name: "tbb", "omp", "workqueue"...)."""
    tbb = have_tbb()  # preloaded even when the environment names the layer
    return os.environ.get("NUMBA_THREADING_LAYER") or ("tbb" if tbb else "omp")


def _default_threads() -> int:
    env = os.environ.get("NUMBA_NUM_THREADS")
    if env:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


MAX_THREADS = _default_threads()
_threads = MAX_THREADS  # what set_num_threads asked for (applied to whichever pool runs)
# Pools started without Numba (native.py) register their setter here, so that this module,
# below them, never imports them.
_pool_setters: list[Callable[[int], None]] = []


# Set by jit.py once Numba is imported and configured. Not "numba in sys.modules": a module is
# there as soon as some thread starts importing it, and other threads calling
# numba.get_num_threads() on the half-imported module failed (AttributeError).
_numba_ready = False


def num_threads() -> int:
    """Threads used by large calls."""
    if _numba_ready:
        return sys.modules["numba"].get_num_threads()
    return _threads


def set_num_threads(n: int) -> None:
    """Threads used by large calls (1..number of cores)."""
    global _threads
    if not 1 <= int(n) <= MAX_THREADS:
        raise ValueError(f"number of threads must be between 1 and {MAX_THREADS}, got {n}")
    _threads = int(n)
    if _numba_ready:
        sys.modules["numba"].set_num_threads(_threads)
    for setter in _pool_setters:
        setter(_threads)


def follow_threads(setter: Callable[[int], None]) -> None:
    """Apply the thread count to a newly started pool now and on every later set_num_threads."""
    setter(_threads)
    _pool_setters.append(setter)


def threading_layer() -> str:
    """The threading layer in use (or that will be used once a parallel kernel runs)."""
    if "infiniop.backends.cpu.jit" in sys.modules:
        import numba

        try:
            return numba.threading_layer()
        except ValueError:  # no parallel kernel has run yet
            pass
    return chosen_layer()
