"""Turn generated kernel source into Numba functions, cached on disk.

Kernels are written as Python source (one module per op x dtype x layout class), saved under the
cache directory and imported from there, so ``@njit(cache=True)`` can reuse the machine code in
the next process (Numba caches only functions that live in a file).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading

from .runtime import CACHE_DIR

KERNEL_DIR = os.path.join(CACHE_DIR, "kernels")
GENERATOR_VERSION = "1"
_lock = threading.Lock()
_modules: dict[str, object] = {}


def load_module(stem: str, source: str):
    """Import ``source`` as a module stored at ``KERNEL_DIR/<stem>_<hash>.py`` (written once)."""
    digest = hashlib.sha1((GENERATOR_VERSION + source).encode()).hexdigest()[:10]
    name = f"{stem}_{digest}"
    mod = _modules.get(name)
    if mod is not None:
        return mod
    with _lock:
        mod = _modules.get(name)
        if mod is not None:
            return mod
        os.makedirs(KERNEL_DIR, exist_ok=True)
        path = os.path.join(KERNEL_DIR, name + ".py")
        if not os.path.exists(path):
            fd, tmp = tempfile.mkstemp(dir=KERNEL_DIR, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(source)
            try:
                os.link(tmp, path)  # atomic, and keeps an existing file's timestamp untouched
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
        modname = f"infiniop_kernels.{name}"
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        spec.loader.exec_module(mod)
        _modules[name] = mod
        return mod


def cache_size_bytes() -> int:
    total = 0
    for root, _, files in os.walk(CACHE_DIR):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total
