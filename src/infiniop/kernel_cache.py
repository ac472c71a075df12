"""The on-disk kernel cache: where compiled kernels live, what keys them, what may be deleted.

Layout (root: ``$INFINIOP_CACHE_DIR``, else ``$XDG_CACHE_HOME/infiniop`` or ``~/.cache/infiniop``)::

    <root>/k<version>-<fingerprint>/cpu/      generated Numba modules, <stem>_<hash>.py
                                   /numba/    Numba's index and machine code (.nbi, .nbc)
                                   /native-<machine>/  the same machine code, run without
                                              Numba (.nko, see backends/cpu/native.py)
                                   /triton/   generated Triton modules

The folder name carries the package version and a hash of every source file that kernels are
generated from or that is inlined into them (``sources()``: every ``.py`` under
``infiniop/backends/``): an upgrade or an edit of any of them gives a new folder, so a stale kernel
can never be loaded. Folders of other versions are only disk space; ``infiniop clear-cache``
removes them.

``clear`` deletes only files whose names the library writes, inside folders it made, then those
folders if they end up empty: whatever else lives under the root survives.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ._version import __version__

try:  # CPython's own SHA-1: importing hashlib loads OpenSSL, ~3 ms of a warm first call
    from _sha1 import sha1
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import sha1
try:  # CPython's own BLAKE2b hashes the ~320 KB of sources 3x faster (fingerprint 1.6 -> 0.5 ms)
    from _blake2 import blake2b as _bulk_hash
except ImportError:  # pragma: no cover - an interpreter built without it
    _bulk_hash = sha1

if TYPE_CHECKING:
    from pathlib import Path

# Paths on the warm path are strings (os.path): pathlib's import costs ~3 ms of a first call.
_PACKAGE = os.path.dirname(os.path.realpath(__file__))
# Sources outside backends/ that kernels inline (one line per file, relative to the package).
EXTRA_SOURCES: tuple[str, ...] = ()

# What the library writes: folders directly under the root, and file names inside them.
_TAG = r"k[0-9A-Za-z.+_-]+-[0-9a-f]{16}"
_LEGACY = {"kernels", "numba", "triton_kernels"}  # layout of infiniop 0.1.0 before versioning
_FILE = (
    r"[A-Za-z0-9_]+_[0-9a-f]{10,12}\.py"   # a generated module (name ends with its hash)
    r"|[A-Za-z0-9_.]+\.cpython-[0-9a-z_.-]+\.pyc"  # its bytecode, in __pycache__
    r"|.+\.nb[ic]|.+\.nb[ic]\.tmp\.[0-9a-f]+"  # Numba's index and data files (and half-written)
    r"|tmp[A-Za-z0-9_]+\.tmp"               # a module being written (tempfile.mkstemp)
    r"|[A-Za-z0-9_.]+\.nko(\.[0-9]+\.[0-9]+\.tmp)?"  # object code run without Numba (native.py)
)


@functools.cache
def root() -> str:
    """The cache root (read once per process, like every setting). Where the configured folder
    cannot be made or written (a read-only home, a file in the way), a folder of this user's
    in the temporary directory, with a warning: every new kernel failed with an OSError."""
    env = os.environ.get("INFINIOP_CACHE_DIR")
    if env:
        path = os.path.expanduser(env)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        path = os.path.join(base, "infiniop")
    why = _unwritable(path)
    if why is None:
        return path
    import tempfile
    import warnings

    uid = os.getuid() if hasattr(os, "getuid") else 0
    fallback = os.path.join(tempfile.gettempdir(), f"infiniop-cache-{uid}")
    warnings.warn(f"infiniop: the kernel cache folder {path} {why}; compiled kernels go to "
                  f"{fallback} in this process (set INFINIOP_CACHE_DIR to a writable folder)",
                  RuntimeWarning, stacklevel=2)
    return fallback


def _unwritable(path: str) -> str | None:
    """Why ``path`` cannot serve as the cache folder, or None: it, or the nearest folder above
    it that exists (where it would be made), must be a folder this process may write."""
    p = os.path.abspath(path)
    while not os.path.lexists(p):
        p = os.path.dirname(p)
    if not os.path.isdir(p):
        return f"cannot be made ({p} is not a folder)"
    if not os.access(p, os.W_OK | os.X_OK):
        return "is not writable" if p == os.path.abspath(path) else f"cannot be made in {p}"
    return None


def _relative(path: str) -> str:
    """A path under the package (as ``sources()`` builds them) relative to it, with '/'."""
    return path[len(os.fspath(_PACKAGE)) + 1:].replace(os.sep, "/")


def sources() -> list[str]:
    """Every source file a kernel is generated from or inlines: all of ``backends/`` (so a new
    kernel module is covered without being listed), plus ``EXTRA_SOURCES``; sorted by their
    path in the package."""
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(os.fspath(_PACKAGE), "backends")):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        found += [os.path.join(dirpath, f) for f in filenames if f.endswith(".py")]
    extra = [os.path.join(os.fspath(_PACKAGE), p) for p in EXTRA_SOURCES]
    return sorted(found, key=_relative) + extra


@functools.cache
def fingerprint() -> str:
    """Hash of the package version and of ``sources()`` (computed once per process; ~0.5 ms)."""
    h = _bulk_hash(__version__.encode())
    for path in sources():
        h.update(b"\0" + _relative(path).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def kernel_dir(kind: str) -> str:
    """``<root>/k<version>-<fingerprint>/<kind>`` (``cpu``, ``numba``, ``triton``), created."""
    path = os.path.join(root(), f"k{__version__}-{fingerprint()}", kind)
    os.makedirs(path, exist_ok=True)
    return path


def write_module(directory: str, name: str, source: str) -> str:
    """``directory/name.py`` holding ``source``, written once and atomically (safe when several
    threads or processes write the same module at once; an existing file that holds ``source``
    is left untouched, so its timestamp, and the caches keyed on it, stay valid; one that does
    not, a truncated or damaged file, is replaced: it failed every later import)."""
    path = os.path.join(directory, name + ".py")
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == source:
                    return path
        except (OSError, UnicodeDecodeError):
            pass
    import tempfile  # only when writing: 4 ms of a cached first call

    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(source)
    try:
        if os.path.exists(path):
            os.replace(tmp, path)  # damaged: replaced whole
            return path
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


# ----------------------------------------------------------------------------- clearing

@dataclass
class Entry:
    """One folder the library made directly under the root, and its files the library wrote."""

    name: str
    files: list[Path] = field(default_factory=list)
    nbytes: int = 0
    legacy: bool = False
    kept: list[tuple[Path, str]] = field(default_factory=list)  # could not be removed, and why


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _own_files(folder: Path) -> list[Path]:
    from pathlib import Path

    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for f in filenames:
            p = Path(dirpath) / f
            if re.fullmatch(_FILE, f) and not p.is_symlink():
                out.append(p)
    return sorted(out)


def entries(at: Path | None = None) -> list[Entry]:
    """What the library wrote under ``at`` (default: the cache root), folder by folder."""
    from pathlib import Path

    base = Path(at if at is not None else root())
    found = []
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    for name in names:
        p = base / name
        if p.is_symlink() or not p.is_dir():
            continue
        if re.fullmatch(_TAG, name) or name in _LEGACY:
            files = _own_files(p)
            if files:
                found.append(Entry(name, files, sum(_size(f) for f in files), name in _LEGACY))
    return found


def usage(at: Path | None = None) -> int:
    """Bytes of cache files the library wrote under ``at`` (default: the cache root)."""
    return sum(e.nbytes for e in entries(at))


def clear(at: Path | None = None, dry_run: bool = False) -> list[Entry]:
    """Delete the library's files under ``at`` (default: the cache root) and the folders that
    held them once they are empty. Returns what was (or, with ``dry_run``, would be) removed."""
    from pathlib import Path

    base = Path(at if at is not None else root())
    found = entries(base)
    if dry_run:
        return found
    for e in found:
        for f in e.files:
            try:
                f.unlink()
            except FileNotFoundError:
                pass
            except OSError as err:  # a read-only folder, another user's file
                e.kept.append((f, err.strerror or str(err)))
        if e.kept:
            e.nbytes -= sum(_size(f) for f, _ in e.kept)
            e.files = [f for f in e.files if f not in {k for k, _ in e.kept}]
        top = base / e.name
        for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])):
            try:
                os.rmdir(dirpath)  # only succeeds on an empty folder
            except OSError:
                pass
    return found
