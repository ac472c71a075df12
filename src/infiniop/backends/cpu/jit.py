"""Numba, imported and set up the first time a kernel must be compiled (or found by Numba).

Every module that defines ``@njit`` functions imports this first. It:

- picks the threading layer (``runtime.chosen_layer()``) and the thread count;
- points Numba's cache for infiniop's kernels (this package's ``@njit(cache=True)`` functions and
  the generated modules) at the versioned kernel cache, stamped with its fingerprint as well as
  the file's own hash, so a kernel that inlines a helper from another file (intrinsics,
  transpose) is recompiled when that helper changes. Other code's Numba cache is left where
  Numba puts it (``NUMBA_CACHE_DIR`` is not touched);
- keeps each compiled library's object code (``object_code``) so that ``native`` can store it
  for processes that run without Numba.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import numba
from numba.core import caching
from numba.core import codegen as _codegen

from ... import kernel_cache
from . import runtime

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

if not os.environ.get("NUMBA_THREADING_LAYER"):
    numba.config.THREADING_LAYER = runtime.chosen_layer()


class KernelCacheLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
    """Numba's cache folder and freshness stamp for infiniop's own kernels."""

    def __init__(self, py_func, py_file, subdir):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(kernel_cache.kernel_dir("numba"), subdir)

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


_impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # renamed in numba 0.62
if KernelCacheLocator not in _impl._locator_classes:
    _impl._locator_classes.insert(0, KernelCacheLocator)


# Numba names a new entry's data file by counting the entries of the index it has just read,
# so two processes adding different signatures of one function at once can both pick the same
# name: the index then maps one signature to the other's machine code, and a later process
# fails to type the call (found: a launcher's ``layout_end`` for read-only checked arrays got a
# plain array's code after a `pytest -n 2` run; TypingError on that cache from then on). In
# infiniop's cache the name is a digest of the entry's key instead: a key's code is never
# written under another key's name (losing an index entry to the race costs a recompile only).
_save_entry = caching.IndexDataCacheFile.save


def _save_by_key(self, key, data):
    if not (os.path.realpath(self._cache_path) + os.sep).startswith(_KERNEL_ROOT):
        return _save_entry(self, key, data)
    overloads = self._load_index()
    name = overloads.get(key)
    if name is None:
        from hashlib import sha1

        name = f"{self._index_name[:-4]}.{sha1(self._dump(key)).hexdigest()[:20]}.nbc"
        overloads[key] = name
        self._save_index(overloads)
    self._save_data(name, data)


# A damaged entry in infiniop's cache (a truncated index or data file: a full disk, a killed
# process, a copied cache) made every later process fail with UnpicklingError until the cache
# was cleared; it is a miss instead: the kernel is compiled again and the entry rewritten.
_load_index = caching.IndexDataCacheFile._load_index
_load_entry = caching.IndexDataCacheFile.load


def _ours(cache_file) -> bool:
    return (os.path.realpath(cache_file._cache_path) + os.sep).startswith(_KERNEL_ROOT)


def _index_or_empty(self):
    try:
        return _load_index(self)
    except Exception:
        if not _ours(self):
            raise
        return {}


def _entry_or_miss(self, key):
    try:
        return _load_entry(self, key)
    except Exception:
        if not _ours(self):
            raise
        return None


_KERNEL_ROOT = os.path.realpath(kernel_cache.root()) + os.sep
if not getattr(caching.IndexDataCacheFile, "_infiniop_keyed", False):
    caching.IndexDataCacheFile.save = _save_by_key
    caching.IndexDataCacheFile._load_index = _index_or_empty
    caching.IndexDataCacheFile.load = _entry_or_miss
    caching.IndexDataCacheFile._infiniop_keyed = True


# Object code: Numba hands a library's object code to its JIT engine and then drops it; keep a
# copy on the library (the hooks are registered when Numba's JIT engine is created, which has
# not happened yet unless other code compiled with Numba before infiniop did: then no copy is
# kept and kernels simply keep loading through Numba).
_Library = _codegen.JITCodeLibrary
_compiled_hook = _Library._object_compiled_hook.__func__
_getbuffer_hook = _Library._object_getbuffer_hook.__func__
_LIB_ATTR = "_CPUCodeLibrary__library"  # where Numba remembers a module's library


def _keep(ll_module, buf):
    lib = getattr(ll_module, _LIB_ATTR, None)
    if lib is not None and buf:
        try:
            lib._infiniop_object = bytes(buf)
        except ReferenceError:
            pass


def _on_compiled(cls, ll_module, buf):
    _keep(ll_module, buf)
    return _compiled_hook(cls, ll_module, buf)


def _on_getbuffer(cls, ll_module):
    buf = _getbuffer_hook(cls, ll_module)
    _keep(ll_module, buf)
    return buf


if not getattr(_Library, "_infiniop_hooked", False):
    _Library._object_compiled_hook = classmethod(_on_compiled)
    _Library._object_getbuffer_hook = classmethod(_on_getbuffer)
    _Library._infiniop_hooked = True


def object_code(library) -> bytes | None:
    """The relocatable object (ELF) of a finalized library, if this process saw it."""
    return getattr(library, "_infiniop_object", None)


# One pool: if kernels already ran natively, Numba adopts the same threading library (it finds
# the extension module registered under its own name); a thread count asked for before Numba
# was imported applies to it too (read after the flag is up: a count set in between is applied
# here or by set_num_threads itself).
runtime._numba_ready = True
if runtime._threads != runtime.MAX_THREADS:
    numba.set_num_threads(runtime._threads)


@contextmanager
def loop_interleave(count: int):
    """Compile with LLVM's loop vectoriser interleaving ``count`` vector iterations (0: LLVM's
    own choice). A generated module asks for it with ``LOOP_INTERLEAVE``: math-heavy bodies are
    latency-bound (one long dependency chain per vector), and two chains side by side fill the
    out-of-order window better. The option is LLVM-global, so it is set and reset under
    Numba's compiler lock: other code compiled in this process keeps LLVM's choice."""
    if not count:
        yield
        return
    import llvmlite.binding as llvm
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        llvm.set_option("infiniop", f"-force-vector-interleave={int(count)}")
        try:
            yield
        finally:
            llvm.set_option("infiniop", "-force-vector-interleave=0")
