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
import glob
import os
import sys
from collections.abc import Callable

from ... import kernel_cache
from . import cpuinfo

CACHE_DIR = kernel_cache.root()
# Below this many elements a call runs serially: waking a pool costs more than it saves.
PARALLEL_THRESHOLD = int(os.environ.get("INFINIOP_PARALLEL_THRESHOLD", 1 << 18))


def _default_nt_threshold() -> int:
    """A quarter of the last-level cache, within 4-8 MiB: from there on (a binary operator then
    moves 3/4 of the cache) the operands no longer stay cached between calls, and stores that
    bypass the cache skip the read-for-ownership, a third of the traffic. Below it ordinary
    stores keep the output in cache for the next call (AMD EPYC, 32 MiB L3 of 16 MiB per core
    complex: sub float32 1M elements, 4 MiB of output, 176 us non-temporal vs 111 cached;
    2M elements 352 vs 520)."""
    llc = cpuinfo.last_level_cache_bytes() or 16 << 20
    return min(max(llc // 4, 4 << 20), 8 << 20)


# Above this many output bytes stores bypass the cache (non-temporal).
_NT_ENV = os.environ.get("INFINIOP_NT_THRESHOLD_BYTES")
NT_THRESHOLD_BYTES = int(_NT_ENV) if _NT_ENV else _default_nt_threshold()


@functools.cache
def have_tbb() -> bool:
    """Whether TBB's library loads (preloaded by absolute path on first need: ~2 ms that a
    process running only serial calls never pays)."""
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


os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # only matters if TBB is missing


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


def num_threads() -> int:
    """Threads used by large calls."""
    numba = sys.modules.get("numba")
    if numba is not None and "infiniop.backends.cpu.jit" in sys.modules:
        return numba.get_num_threads()
    return _threads


def set_num_threads(n: int) -> None:
    """Threads used by large calls (1..number of cores)."""
    global _threads
    if not 1 <= int(n) <= MAX_THREADS:
        raise ValueError(f"number of threads must be between 1 and {MAX_THREADS}, got {n}")
    _threads = int(n)
    numba = sys.modules.get("numba")
    if numba is not None and "infiniop.backends.cpu.jit" in sys.modules:
        numba.set_num_threads(_threads)
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
