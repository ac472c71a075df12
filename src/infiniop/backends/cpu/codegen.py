"""Turn generated kernel source into Numba functions, cached on disk.

Kernels are written as Python source (one module per op x dtype x layout class), saved in the
versioned kernel cache (``kernel_cache.kernel_dir("cpu")``) and imported from there, so
``@njit(cache=True)`` can reuse the machine code in the next process (Numba caches only functions
that live in a file).

``load_module`` imports the module (and Numba). ``kernels`` gives its functions as
``native.Kernel`` objects instead (how the elementwise, row and rearrange kernels are bound): a
specialisation found in the cache then runs without importing Numba or the module at all (a new
process's first call: milliseconds, not ~0.3 s).
"""

from __future__ import annotations

import importlib.util
import sys
import threading

from ... import kernel_cache
from ...kernel_cache import sha1
from . import native

GENERATOR_VERSION = "1"
_lock = threading.Lock()
_modules: dict[str, object] = {}


def module_name(stem: str, source: str) -> str:
    """``<stem>_<hash of the source>``: the file name says which source it holds."""
    return f"{stem}_{sha1((GENERATOR_VERSION + source).encode()).hexdigest()[:10]}"


def load_module(stem: str, source: str):
    """Import ``source`` as a module stored at ``<kernel dir>/<stem>_<hash>.py`` (written once)."""
    name = module_name(stem, source)
    mod = _modules.get(name)
    if mod is not None:
        return mod
    with _lock:
        mod = _modules.get(name)
        if mod is not None:
            return mod
        from . import jit  # noqa: F401  (Numba set up before the module's decorators run)

        path = kernel_cache.write_module(kernel_cache.kernel_dir("cpu"), name, source)
        modname = f"infiniop_kernels.{name}"
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        spec.loader.exec_module(mod)
        _modules[name] = mod
        return mod


def kernels(stem: str, source: str, names) -> dict[str, native.Kernel]:
    """The functions ``names`` of the generated module as ``native.Kernel`` objects (call
    ``.specialize(*argument_types)``); the module is imported only if one must be compiled."""
    modname = f"infiniop_kernels.{module_name(stem, source)}"
    return {n: native.kernel(modname, n, lambda: load_module(stem, source)) for n in names}
