"""Run kernels from the disk cache without importing Numba (a process's first call in
milliseconds instead of ~0.3 s).

Importing and initialising Numba costs ~0.3 s before it can run even a cached kernel. The
kernel itself needs none of it: its machine code is one relocatable object (what Numba's own
cache stores) that calls a few C helpers of Numba's runtime, which live in Numba's small C
extension modules (``_helperlib``, ``_dynfunc``, ``_nrt_python``, the threading layer). So:

- when Numba compiles (or loads) a kernel for us, ``Kernel.specialize`` also writes its object
  code to the kernel cache (``<versioned folder>/native-<machine>/``);
- a later process links that object with the loader below (relocations only: one RWX-free
  mapping for code, one for data), binds the helpers from Numba's extension modules (imported
  on their own, under their real names, so a later ``import numba`` shares them: one thread
  pool, one allocator), and wraps the entry point as a builtin function exactly as Numba does
  (``_dynfunc.make_function``). The call skips Numba's type dispatch.

Safety: a native function trusts its arguments' types, so it is only reached through
``Kernel.specialize`` for fixed argument types (``array(dtype, ndim, layout)``, int, bool,
float), and its callers must keep to them (the descriptors do: they check dtype and layout
before calling). Objects are keyed by the kernel cache's fingerprint and by this machine (CPU,
Numba, llvmlite and Python versions); anything unexpected (another OS or CPU architecture, an
unknown relocation, a missing helper, a damaged file) means ``None`` and the caller compiles
with Numba. ``INFINIOP_NATIVE=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import mmap
import os
import platform
import struct
import sys
import threading
import types
from typing import NamedTuple

import numpy as np

from ... import _forksafe, kernel_cache
from ...kernel_cache import sha1
from . import runtime

ENABLED = (os.environ.get("INFINIOP_NATIVE", "1") != "0" and sys.platform.startswith("linux")
           and platform.machine() == "x86_64")


# ------------------------------------------------------------------------------ argument types

class ArrayType(NamedTuple):
    """An array argument: dtype (NumPy), number of dims, layout ('C' contiguous, or 'A' any);
    ``access`` 'r' or 'w' for a ``checked_arrays.CheckedArray`` (read-only, or written: the
    launcher checks rank and writability itself), '' for Numba's own array."""

    dtype: np.dtype
    ndim: int
    layout: str = "A"
    access: str = ""


def array(dtype, ndim: int, layout: str = "A", access: str = "") -> ArrayType:
    return ArrayType(np.dtype(dtype), int(ndim), layout, access)


def describe(args) -> tuple:
    """The argument types of a call (arrays, ``ArrayType`` placeholders, ints, bools, floats;
    NumPy float32 scalars stay float32)."""
    out = []
    for a in args:
        if isinstance(a, ArrayType):
            out.append(a)
        elif isinstance(a, np.ndarray):
            out.append(ArrayType(a.dtype, a.ndim, "C" if a.flags.c_contiguous else "A"))
        elif isinstance(a, bool | np.bool_):
            out.append("bool")
        elif isinstance(a, int | np.integer):
            out.append("int64")
        elif isinstance(a, np.float32):  # as Numba types it (a kernel's float32 parameter)
            out.append("float32")
        elif isinstance(a, float | np.floating):
            out.append("float64")
        else:
            raise TypeError(f"no kernel argument type for {type(a).__name__}")
    return tuple(out)


def _text(sig: tuple) -> str:
    return ",".join(f"{t.dtype.str}[{t.ndim}{t.layout}{t.access}]" if isinstance(t, ArrayType)
                    else t for t in sig)


def _numba_types(sig: tuple) -> tuple:
    from numba import from_dtype
    from numba import types as nt

    from .checked_arrays import CheckedArray

    def array_type(t: ArrayType):
        if t.access:
            return CheckedArray(from_dtype(t.dtype), t.ndim, t.layout, readonly=t.access == "r")
        return nt.Array(from_dtype(t.dtype), t.ndim, t.layout)

    return tuple(array_type(t) if isinstance(t, ArrayType) else getattr(nt, t) for t in sig)


# ------------------------------------------------------------------------------ Numba's C runtime

class _Runtime:
    """Numba's C helpers and threading layer, loaded without importing the numba package."""

    def __init__(self):
        spec = importlib.machinery.PathFinder.find_spec("numba")  # without importing it
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("numba is not installed")
        self.root = spec.submodule_search_locations[0]
        helper = self._ext("numba._helperlib")
        self.dynfunc = self._ext("numba._dynfunc")
        nrt = self._ext("numba.core.runtime._nrt_python")
        syms = {"_Py_NoneStruct": id(None)}
        for k, v in {**helper.c_helpers, **self.dynfunc.c_helpers}.items():
            syms["numba_" + k] = v
        self.math = dict(helper.c_helpers)
        for k, v in nrt.c_helpers.items():
            syms[k if k.startswith("_") else "NRT_" + k] = v
        for exc in _builtin_exceptions():  # Numba's code takes their addresses, not pointers
            syms["PyExc_" + exc.__name__] = id(exc)
        self.symbols = syms
        self._process = ctypes.CDLL(None)
        self.pool = None

    def launch(self):
        """The threading layer, its thread pool started (once: serial kernels never need it)."""
        if self.pool is None:
            layer = runtime.chosen_layer()
            parallel = sys.modules.get("numba.np.ufunc.parallel")
            if parallel is not None and getattr(parallel, "_is_initialized", False):
                layer = parallel._threading_layer  # Numba runs already: share its pool
            elif layer == "tbb":
                _check_tbb()
            if layer not in _POOLS:
                raise ImportError(f"threading layer {layer!r} is chosen by Numba at run time")
            pool = self._ext("numba.np.ufunc." + _POOLS[layer])
            ctypes.CFUNCTYPE(None, ctypes.c_int)(pool.launch_threads)(runtime.MAX_THREADS)
            runtime.follow_threads(ctypes.CFUNCTYPE(None, ctypes.c_int)(pool.set_num_threads))
            self.pool = pool
        return self.pool

    def _ext(self, fullname: str):
        """Import one of Numba's C extension modules by file, without its package."""
        mod = sys.modules.get(fullname)
        if mod is not None:
            return mod
        parts = fullname.split(".")[1:]
        stem = os.path.join(self.root, *parts)
        found = [stem + s for s in importlib.machinery.EXTENSION_SUFFIXES if os.path.exists(stem + s)]
        if not found:
            raise ImportError(f"{fullname}: no extension module")
        loader = importlib.machinery.ExtensionFileLoader(fullname, found[0])
        spec = importlib.util.spec_from_file_location(fullname, found[0], loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        sys.modules[fullname] = mod
        return mod

    def resolve(self, name: str) -> int | None:
        addr = self.symbols.get(name) or self.math.get(name)
        if addr:
            return addr
        if name in _THREAD_SYMBOLS:  # a parallel kernel
            try:
                return getattr(self.launch(), _THREAD_SYMBOLS[name])
            except (ImportError, OSError):
                return None
        try:
            return ctypes.cast(getattr(self._process, name), ctypes.c_void_p).value
        except AttributeError:
            return None


_POOLS = {"tbb": "tbbpool", "omp": "omppool", "workqueue": "workqueue"}
# symbol in kernels -> attribute of the threading layer's module (Numba's names, parallel.py)
_THREAD_SYMBOLS = {"numba_parallel_for": "parallel_for", **{n: n for n in (
    "do_scheduling_signed", "do_scheduling_unsigned", "allocate_sched", "deallocate_sched",
    "get_num_threads", "set_num_threads", "get_thread_id", "set_parallel_chunksize",
    "get_parallel_chunksize", "get_sched_size")}}


def _builtin_exceptions():
    import builtins

    return [o for o in vars(builtins).values() if isinstance(o, type) and issubclass(o, BaseException)]


def _check_tbb() -> None:
    """Numba's own condition for its TBB layer (interface version 12060 or newer)."""
    try:
        version = ctypes.CDLL("libtbb.so.12").TBB_runtime_interface_version()
    except (OSError, AttributeError) as e:
        raise ImportError(f"TBB: {e}") from e
    if version < 12060:
        raise ImportError(f"TBB interface version {version} < 12060")


_runtime: _Runtime | None = None
_runtime_failed = False
_lock = _forksafe.RLock()


def _get_runtime() -> _Runtime | None:
    global _runtime, _runtime_failed
    if _runtime is None and not _runtime_failed:
        try:
            _runtime = _Runtime()
        except (ImportError, OSError, AttributeError):
            _runtime_failed = True
    return _runtime


def started() -> bool:
    """Whether kernels run (or ran) natively in this process."""
    return _runtime is not None


# ------------------------------------------------------------------------------ object loader

_KEEP: list = []  # mappings of loaded objects: kernels live as long as the process


class _Section(NamedTuple):
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    align: int


_SHF_WRITE, _SHF_ALLOC, _SHF_TLS = 1, 2, 0x400
_RELOCS = {1, 2, 4, 10, 11, 24}  # R_X86_64_64, PC32, PLT32, 32, 32S, PC64


def _link(data: bytes, resolve) -> dict[str, int] | None:
    """Load an x86-64 ELF relocatable object into memory; its defined symbols' addresses.
    None when it uses anything this loader does not handle."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    if e_type != 1 or e_machine != 62:
        return None
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def cstr(base: int, off: int) -> str:
        return data[base + off:data.index(b"\0", base + off)].decode()

    names_at = raw[shstrndx][4]
    secs = [_Section(cstr(names_at, r[0]), r[1], r[2], r[4], r[5], r[6], r[7], max(r[8], 1))
            for r in raw]
    # layout: code and constants in one mapping, writable data (and common symbols) in another
    place: dict[int, tuple[int, int]] = {}  # section -> (mapping 0/1, offset)
    size = [0, 0]
    for i, s in enumerate(secs):
        if s.flags & _SHF_ALLOC and s.size and s.name != ".eh_frame":
            if s.type not in (1, 8) or s.flags & _SHF_TLS:  # PROGBITS, NOBITS; no init arrays, TLS
                return None
            m = 1 if s.flags & _SHF_WRITE else 0
            size[m] = -(-size[m] // s.align) * s.align
            place[i] = (m, size[m])
            size[m] += s.size
    symtab = next((s for s in secs if s.type == 2), None)
    if symtab is None:
        return None
    names = secs[symtab.link].offset
    syms = []
    common = {}
    for k in range(symtab.size // 24):
        name_off, _, _, shndx, value, sz = struct.unpack_from("<IBBHQQ", data, symtab.offset + 24 * k)
        syms.append((cstr(names, name_off) if name_off else "", shndx, value))
        if shndx == 0xFFF2:  # common: value is the alignment
            size[1] = -(-size[1] // value) * value
            common[k] = size[1]
            size[1] += sz
    maps = [mmap.mmap(-1, max(-(-n // mmap.PAGESIZE), 1) * mmap.PAGESIZE) for n in size]
    bases = [ctypes.addressof(ctypes.c_char.from_buffer(m)) for m in maps]
    for i, (m, off) in place.items():
        s = secs[i]
        if s.type == 1:
            maps[m][off:off + s.size] = data[s.offset:s.offset + s.size]
    addr: list[int | None] = []
    defined = {}
    for k, (name, shndx, value) in enumerate(syms):
        if shndx == 0:
            a = resolve(name) if name else 0
            if a is None:
                return None
        elif shndx == 0xFFF1:
            a = value
        elif shndx == 0xFFF2:
            a = bases[1] + common[k]
        elif shndx in place:
            m, off = place[shndx]
            a = bases[m] + off + value
        else:
            a = None  # a section we did not load (debug info, unwind tables)
        addr.append(a)
        if name and shndx != 0 and a is not None:
            defined[name] = a
    for s in secs:
        if s.type != 4 or s.info not in place:  # RELA for a loaded section
            continue
        m, off = place[s.info]
        for k in range(s.size // 24):
            r_off, r_info, addend = struct.unpack_from("<QQq", data, s.offset + 24 * k)
            kind, sym = r_info & 0xFFFFFFFF, r_info >> 32
            target = addr[sym]
            if kind not in _RELOCS or target is None:
                return None
            at = off + r_off
            here = bases[m] + at
            if kind == 1:
                struct.pack_into("<Q", maps[m], at, (target + addend) % 2**64)
            elif kind == 24:
                struct.pack_into("<q", maps[m], at, target + addend - here)
            else:
                v = target + addend - (here if kind in (2, 4) else 0)
                lo, hi = (0, 2**32) if kind == 10 else (-2**31, 2**31)
                if not lo <= v < hi:
                    return None
                struct.pack_into("<I" if kind == 10 else "<i", maps[m], at, v)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    if libc.mprotect(bases[0], len(maps[0]), mmap.PROT_READ | mmap.PROT_EXEC) != 0:
        return None
    _KEEP.append(maps)
    return defined


# ------------------------------------------------------------------------------ the store

_MAGIC = b"INFINIOP-NATIVE-3\n"


def _dist_version(package: str) -> str:
    spec = importlib.machinery.PathFinder.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return "-"
    site = os.path.dirname(spec.submodule_search_locations[0])
    found = [n for n in os.listdir(site) if n.startswith(package + "-") and n.endswith(".dist-info")]
    if found:
        return found[0]
    init = os.path.join(spec.submodule_search_locations[0], "__init__.py")
    return f"{init}:{os.stat(init).st_mtime_ns}"


def _cpu_identity() -> str:
    keep = ("vendor_id", "cpu family", "model", "model name", "flags")
    lines = []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor describes them all
                if line.split(":")[0].strip() in keep:
                    lines.append(line.strip())
    except OSError:
        return platform.processor()
    return "\n".join(lines)


_store: str | None = None


def store_dir() -> str:
    """``<versioned kernel folder>/native-<hash of CPU, Numba, llvmlite, Python>``."""
    global _store
    if _store is None:
        key = "\0".join([_dist_version("numba"), _dist_version("llvmlite"), sys.version,
                         sys.implementation.cache_tag, _cpu_identity()])
        _store = kernel_cache.kernel_dir("native-" + sha1(key.encode()).hexdigest()[:12])
    return _store


def save(key: str, cres, obj: bytes) -> None:
    """Store the object code of a compiled overload (``cres``) under ``key`` (atomically)."""
    fd = cres.fndesc  # the header: five names, NUL-separated (json costs 1.5 ms of a first call)
    head = "\0".join([fd.llvm_cpython_wrapper_name, fd.env_name, fd.qualname, fd.llvm_func_name,
                      sha1(obj).hexdigest()]).encode()
    path = os.path.join(store_dir(), key + ".nko")
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "wb") as f:
        f.write(_MAGIC + struct.pack("<I", len(head)) + head + obj)
    os.replace(tmp, path)


def load(key: str, module_name: str):
    """The builtin function stored under ``key`` and the address of the compiled function it
    wraps (Numba's calling convention, see ``Kernel.address``), or None (nothing stored, or not
    loadable)."""
    path = os.path.join(store_dir(), key + ".nko")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    rt = _get_runtime()
    if rt is None or not data.startswith(_MAGIC):
        return None
    try:
        n = len(_MAGIC)
        (hlen,) = struct.unpack_from("<I", data, n)
        wrapper, env_name, name, function, digest = data[n + 4:n + 4 + hlen].decode().split("\0")
        obj = data[n + 4 + hlen:]
        if sha1(obj).hexdigest() != digest:
            return None
        syms = _link(obj, rt.resolve)
        if syms is None or not {wrapper, env_name, function} <= syms.keys():
            return None
    except (ValueError, struct.error, UnicodeDecodeError):
        return None
    env = rt.dynfunc.Environment({"__name__": module_name})
    ctypes.c_void_p.from_address(syms[env_name]).value = id(env)
    module = sys.modules.get(module_name) or types.ModuleType(module_name)
    doc = f"compiled wrapper for {name!r} (loaded without Numba)"
    fn = rt.dynfunc.make_function(module, name.split(".")[-1], doc, syms[wrapper], env, (env,))
    return fn, syms[function]


# ------------------------------------------------------------------------------ kernels

_kernels: dict[tuple[str, str], Kernel] = {}


def kernel(module_name: str, name: str, importer=None) -> Kernel:
    """The one ``Kernel`` for ``module_name.name`` (its specialisations are shared: a kernel's
    code is linked once per process)."""
    k = _kernels.get((module_name, name))
    if k is None:
        with _lock:
            k = _kernels.setdefault((module_name, name), Kernel(module_name, name, importer))
    return k


class Kernel:
    """A kernel function defined with ``@njit`` in a module that is imported only when needed.
    Get it with ``kernel()``: each ``Kernel`` object keeps its own specialisations.

    ``specialize(*args)`` returns a callable for calls whose arguments have the types of
    ``args`` (sample values or ``array(...)`` placeholders): the stored machine code when this
    process may run it without Numba, else Numba's compiled overload (whose object code is
    then stored for the next process). Either way the call skips type dispatch: the caller
    keeps to the types it asked for.
    """

    def __init__(self, module_name: str, name: str, importer=None):
        self.module_name = module_name
        self.name = name
        self._import = importer or (lambda: importlib.import_module(module_name))
        self._specs: dict[tuple, object] = {}

    def __repr__(self) -> str:
        return f"Kernel({self.module_name}.{self.name})"

    def key(self, sig: tuple) -> str:
        digest = sha1(_text(sig).encode()).hexdigest()[:16]
        return f"{self.module_name.rsplit('.', 1)[-1]}.{self.name}.{digest}"

    def specialize(self, *args):
        return self._get(describe(args))[0]

    def address(self, *args) -> int:
        """The address of the compiled function behind ``specialize(*args)`` (Numba's calling
        convention: ``intrinsics.call_kernel`` calls it); valid as long as the process runs."""
        return self._get(describe(args))[1]

    def _get(self, sig: tuple) -> tuple:
        got = self._specs.get(sig)
        if got is not None:
            return got
        with _lock:
            got = self._specs.get(sig)
            if got is None:
                got = load(self.key(sig), self.module_name) if ENABLED else None
                if got is None:
                    got = self._compile(sig)
                self._specs[sig] = got
        return got

    def dispatcher(self):
        """The Numba dispatcher (imports Numba and the kernel's module)."""
        return getattr(self._import(), self.name)

    def _compile(self, sig: tuple):
        from . import jit

        disp = self.dispatcher()
        nsig = _numba_types(sig)
        with jit.loop_interleave(getattr(self._import(), "LOOP_INTERLEAVE", 0)):
            disp.compile(nsig)
        cres = disp.overloads[nsig]
        obj = jit.object_code(cres.library)
        if ENABLED and obj is not None:
            try:
                save(self.key(sig), cres, obj)
            except OSError:
                pass  # a read-only cache: this process still runs, the next one compiles
        return cres.entry_point, cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
