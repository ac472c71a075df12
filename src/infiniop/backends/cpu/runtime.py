"""Numba set-up for the CPU backend: TBB threading layer, thread count, on-disk kernel cache.

Import this before anything else imports numba (``backends/cpu/__init__`` does). TBB is the
threading layer because it sleeps instead of spinning: on a shared 2-vCPU VM, OpenMP's default
spin-wait stalls for milliseconds when the other core is busy (measured; see docs). The pip
``tbb`` wheel puts ``libtbb.so.12`` in ``<prefix>/lib``, which is not on the loader path, so we
preload it by absolute path.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

from ... import kernel_cache

CACHE_DIR = str(kernel_cache.root())


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
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # only matters if TBB is missing

import numba  # noqa: E402

if not os.environ.get("NUMBA_THREADING_LAYER"):
    numba.config.THREADING_LAYER = "tbb" if HAVE_TBB else "omp"


def _install_cache_locator() -> None:
    """Numba caches infiniop's kernels (this package's ``@njit(cache=True)`` functions and the
    generated modules) under the versioned kernel cache, stamped with its fingerprint as well as
    the file's own hash: a kernel that inlines a helper from another file (intrinsics, transpose)
    is recompiled when that helper changes. Other code's Numba cache is left where Numba puts it
    (``NUMBA_CACHE_DIR`` is not touched)."""
    from numba.core import caching

    class KernelCacheLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        def __init__(self, py_func, py_file, subdir):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = str(kernel_cache.kernel_dir("numba") / subdir)

        def get_cache_path(self):
            return self._cache_path

        def get_source_stamp(self):
            return kernel_cache.fingerprint(), super().get_source_stamp()

        @classmethod
        def from_function(cls, py_func, py_file):
            folder = os.path.dirname(os.path.realpath(py_file))
            try:
                if folder == os.path.realpath(kernel_cache.kernel_dir("cpu")):
                    subdir = "generated"
                elif (folder + os.sep).startswith(_PACKAGE_DIR + os.sep):
                    subdir = "package-" + os.path.relpath(folder, _PACKAGE_DIR).replace(os.sep, "-")
                else:
                    return None
                self = cls(py_func, py_file, subdir)
                self.ensure_cache_path()
            except OSError:  # the cache folder is not writable: Numba's own locators decide
                return None
            return self

    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # renamed in numba 0.62
    impl._locator_classes.insert(0, KernelCacheLocator)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
_install_cache_locator()

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
