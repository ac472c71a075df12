"""Numba set-up for the CPU backend: TBB threading layer, thread count, on-disk kernel cache.

Import this before anything else imports numba. TBB is the threading layer because it sleeps
instead of spinning: on a shared 2-vCPU VM, OpenMP's default spin-wait stalls for milliseconds
when the other core is busy (measured; see docs). The pip ``tbb`` wheel puts ``libtbb.so.12`` in
``<prefix>/lib``, which is not on the loader path, so we preload it by absolute path.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

CACHE_DIR = os.environ.get("INFINIOP_CACHE_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "infiniop"
)


def _preload_tbb() -> bool:
    candidates = []
    for prefix in dict.fromkeys([sys.prefix, sys.base_prefix, sys.exec_prefix]):
        candidates += sorted(glob.glob(os.path.join(prefix, "lib", "libtbb.so.12*")))
    for path in candidates:
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return True
        except OSError:
            continue
    try:
        ctypes.CDLL("libtbb.so.12", mode=ctypes.RTLD_GLOBAL)
        return True
    except OSError:
        return False


HAVE_TBB = _preload_tbb()
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(CACHE_DIR, "numba"))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # only matters if TBB is missing

import numba  # noqa: E402

if not os.environ.get("NUMBA_THREADING_LAYER"):
    numba.config.THREADING_LAYER = "tbb" if HAVE_TBB else "omp"

# Below this many elements a call runs serially: waking a pool costs more than it saves.
PARALLEL_THRESHOLD = int(os.environ.get("INFINIOP_PARALLEL_THRESHOLD", 1 << 18))
# Above this many output bytes stores bypass the cache (non-temporal): the output cannot stay
# cached anyway, and skipping the read-for-ownership saves a third of the traffic.
NT_THRESHOLD_BYTES = int(os.environ.get("INFINIOP_NT_THRESHOLD_BYTES", 4 << 20))


def num_threads() -> int:
    return numba.get_num_threads()


def set_num_threads(n: int) -> None:
    """Threads used by large calls (1..number of cores)."""
    numba.set_num_threads(n)


def threading_layer() -> str:
    try:
        return numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet
        return str(numba.config.THREADING_LAYER)
