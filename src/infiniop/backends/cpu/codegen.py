"""Turn generated kernel source into Numba functions, cached on disk.

Kernels are written as Python source (one module per op x dtype x layout class), saved in the
versioned kernel cache (``kernel_cache.kernel_dir("cpu")``) and imported from there, so
``@njit(cache=True)`` can reuse the machine code in the next process (Numba caches only functions
that live in a file).

``load_module`` imports the module (and Numba). ``kernels`` gives its functions as
``native.Kernel`` objects instead (how the elementwise, row and rearrange kernels are bound): a
specialisation found in the cache then runs without importing Numba or the module at all (a new
process's first call: milliseconds, not ~0.3 s). ``literal`` names a typed constant of
generated source; ``load_module`` defines the ones a module uses as its globals.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys

import numpy as np

from ... import _forksafe, kernel_cache
from ...kernel_cache import sha1
from . import native

GENERATOR_VERSION = "1"
_lock = _forksafe.Lock()
_modules: dict[str, object] = {}


# ------------------------------------------------------------------ typed constants as globals

_NUMPY = {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64", "u32": "uint32",
          "u64": "uint64"}
_CONSTANT = re.compile(r"\b_c(f32|f64|i32|i64|u32|u64)_(m?[0-9a-f]+)\b")


def literal(value, t: str) -> str:
    """A typed constant of generated source (``t``: f32, f64, i32, i64, u32, u64) as the name
    of a module global that ``load_module`` defines: ``_cf32_3f800000`` is float32 1.0 (its
    bits), ``_ci64_m2`` int64 -2. Numba folds a global NumPy scalar into the code as it does a
    call ``np.float32(1.0)``, but types a call per use: the calls took ~2 ms each to compile,
    and a math body holds hundreds."""
    if t in ("f32", "f64"):
        with np.errstate(over="ignore"):  # as the cast in compiled code: inf
            x = np.float64(np.nan if math.isnan(value) else value).astype(_NUMPY[t])  # np.nan's
        return f"_c{t}_{int(x.view(_NUMPY[t].replace('float', 'uint'))):x}"
    width = int(t[1:])
    v = int(value) % (1 << width)  # wrapped to the type, as the cast in compiled code
    if t[0] == "i" and v >= 1 << (width - 1):
        v -= 1 << width
    return f"_c{t}_{'m' if v < 0 else ''}{abs(v)}"


def _define_literals(source: str) -> str:
    """``source`` with a definition of each ``literal`` it names appended (globals are looked
    up when a function compiles, after the module has run)."""
    names = sorted(set(_CONSTANT.findall(source)))
    if not names:
        return source
    lines = ["", "", "import numpy as _np  # the typed constants (codegen.literal)"]
    for t, text in names:
        if t in ("f32", "f64"):
            lines.append(f"_c{t}_{text} = _np.u{_NUMPY[t].replace('float', 'int')}(0x{text})"
                         f".view(_np.{_NUMPY[t]})")
        else:
            lines.append(f"_c{t}_{text} = _np.{_NUMPY[t]}({text.replace('m', '-')})")
    return source + "\n".join(lines) + "\n"


def module_name(stem: str, source: str) -> str:
    """``<stem>_<hash of the source>``: the file name says which source it holds."""
    # a user's operator name may hold any character ('my-op', 'a/b', unicode, 300 chars): keep
    # file names to what kernel_cache._FILE (clear-cache) knows and to one path component
    stem = re.sub(r"[^A-Za-z0-9_]", "_", stem)[:80]
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

        path = kernel_cache.write_module(kernel_cache.kernel_dir("cpu"), name,
                                         _define_literals(source))
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
