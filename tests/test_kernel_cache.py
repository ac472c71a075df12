"""The kernel cache: keyed on the package version and the kernel sources (an edit or an upgrade
recompiles), and ``infiniop clear-cache`` deletes only what the library wrote (issue #10)."""

from __future__ import annotations

import json
import os
import sys

import pytest
from test_isolation import check_isolated

from infiniop import cli, kernel_cache

FP = "0123456789abcdef"


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """kernel_cache looking at a package of our own making (fingerprint recomputed each call)."""
    pkg = tmp_path / "pkg"
    (pkg / "backends" / "cpu").mkdir(parents=True)
    (pkg / "backends" / "cpu" / "intrinsics.py").write_text("A = 1\n")
    monkeypatch.setattr(kernel_cache, "_PACKAGE", pkg)
    fingerprint = kernel_cache.fingerprint.__wrapped__
    monkeypatch.setattr(kernel_cache, "fingerprint", fingerprint)
    return pkg


def test_fingerprint_follows_every_backend_source_and_the_version(fake_package, monkeypatch):
    cpu = fake_package / "backends" / "cpu"
    first = kernel_cache.fingerprint()
    assert first == kernel_cache.fingerprint()  # deterministic
    (cpu / "intrinsics.py").write_text("A = 2\n")  # an edit of an inlined helper
    edited = kernel_cache.fingerprint()
    (cpu / "row_kernels.py").write_text("")  # a new kernel module: covered without listing it
    added = kernel_cache.fingerprint()
    monkeypatch.setattr(kernel_cache, "__version__", "9.9.9")  # an upgrade
    upgraded = kernel_cache.fingerprint()
    assert len({first, edited, added, upgraded}) == 4
    assert [os.path.basename(p) for p in kernel_cache.sources()] == ["intrinsics.py",
                                                                     "row_kernels.py"]


def test_the_real_fingerprint_covers_the_kernel_sources():
    names = {os.path.relpath(p, kernel_cache._PACKAGE).replace(os.sep, "/")
             for p in kernel_cache.sources()}
    for f in ("backends/cpu/intrinsics.py", "backends/cpu/transpose.py",
              "backends/cpu/arrays.py", "backends/cpu/rearrange_kernels.py",
              "backends/cpu/elementwise_kernels.py", "backends/cpu/codegen.py",
              "backends/triton/helpers.py", "backends/triton/codegen.py"):
        assert f in names, f


PROBE = """
import json, sys
import numpy as np
from infiniop import kernel_cache
if len(sys.argv) > 1:
    kernel_cache.fingerprint = lambda: sys.argv[1]   # as if a kernel source had been edited
from infiniop.backends.cpu import arrays, codegen
mod = codegen.load_module("probe", "from numba import njit\\n\\n\\n"
                          "@njit(cache=True)\\ndef plus_one(x):\\n    return x + 1\\n")
assert mod.plus_one(41) == 42
x = np.zeros(3)
assert arrays.address_of(x) == x.ctypes.data
report = {}
for name, fn in (("generated", mod.plus_one), ("package", arrays.address_of)):
    report[name] = [sum(fn.stats.cache_hits.values()), sum(fn.stats.cache_misses.values()),
                    fn.stats.cache_path]
report["module"] = mod.__file__
print(json.dumps(report))
"""


def _probe(cache, *argv):
    code = f"import sys; sys.argv[1:] = {list(argv)!r}\n" + PROBE
    out = check_isolated(code, env={"INFINIOP_CACHE_DIR": str(cache)}, prelude=False, timeout=300)
    return json.loads(out.strip().splitlines()[-1])


def test_a_changed_fingerprint_recompiles(tmp_path):
    """Same sources: machine code loaded from the cache. Another fingerprint (an edit or an
    upgrade): a new folder, a new module file, and Numba compiles again instead of loading the
    stale entries; the old entries still serve the old fingerprint."""
    cache = tmp_path / "cache"
    first = _probe(cache)
    again = _probe(cache)
    edited = _probe(cache, FP)
    back = _probe(cache)
    for kind in ("generated", "package"):
        assert first[kind][:2] == [0, 1], first        # compiled and written
        assert again[kind][:2] == [1, 0], again        # loaded
        assert edited[kind][:2] == [0, 1], edited      # compiled again: nothing stale reachable
        assert back[kind][:2] == [1, 0], back
        assert f"-{FP}{os.sep}numba" in edited[kind][2]
        assert f"-{FP}{os.sep}" not in first[kind][2]
    assert first["module"] == again["module"] == back["module"] != edited["module"]
    assert f"-{FP}{os.sep}cpu{os.sep}" in edited["module"]
    tags = sorted(os.listdir(cache))
    assert len(tags) == 2 and sum(t.endswith(FP) for t in tags) == 1, tags


def test_triton_modules_live_in_the_versioned_folder(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    from infiniop.backends.triton import codegen

    monkeypatch.setattr(kernel_cache, "root", lambda: tmp_path)
    monkeypatch.setattr(kernel_cache, "fingerprint", lambda: FP)
    src = "import triton\n\n\n@triton.jit\ndef kernel(x):\n    pass\n"
    kernel = codegen.load(codegen.KernelSource("probe", src, ("fp32",), (), ()))
    where = sys.modules[kernel.fn.__module__].__file__
    assert os.path.dirname(where) == str(tmp_path / f"k{kernel_cache.__version__}-{FP}" / "triton")


# --------------------------------------------------------------------------- clear-cache

def _write(path, data=b"x"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    """A cache root holding the library's files of two versions, the pre-versioning layout, and
    the user's own files in between (which must all survive)."""
    root = tmp_path / "cache"
    tag = root / f"k0.1.0-{FP}"
    ours = [
        _write(tag / "cpu" / "ew_sub_0123456789ab_float32_flat_111_5bcdc4035d.py", b"a" * 100),
        _write(tag / "cpu" / "__pycache__" / "ew_sub_5bcdc4035d.cpython-311.pyc", b"b" * 10),
        _write(tag / "numba" / "generated" / "ew_sub_5bcdc4035d.serial-21.py311.nbi", b"c" * 7),
        _write(tag / "numba" / "generated" / "ew_sub_5bcdc4035d.serial-21.py311.1.nbc", b"d" * 1000),
        _write(tag / "triton" / "flat_2_fp32_0123456789ab.py", b"e" * 3),
        _write(root / "k0.0.9-fedcba9876543210" / "cpu" / "x_0123456789.py", b"f" * 5),
        _write(root / "kernels" / "ew_neg_0123456789.py", b"g" * 11),  # before versioning
        _write(root / "numba" / "kernels_" / "m.f-3.py311.nbi", b"h" * 13),
        _write(root / "triton_kernels" / "tmpab12cd.tmp", b"i" * 17),
    ]
    users = [
        _write(root / "my_notes.txt"),
        _write(root / "numbers" / "data.nbi"),           # not a folder the library makes
        _write(root / "kernels" / "train.py"),           # in our folder, not our name
        _write(tag / "cpu" / "README"),
        _write(tmp_path / "elsewhere" / "k.py311.nbi"),  # reachable only through a symlink
    ]
    (root / "k0.1.0-aaaaaaaaaaaaaaaa").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setattr(kernel_cache, "root", lambda: str(root))  # a str, as the real one returns
    return root, ours, users


def test_clear_removes_only_what_the_library_wrote(cache_root):
    root, ours, users = cache_root
    total = sum(p.stat().st_size for p in ours)
    planned = kernel_cache.clear(dry_run=True)
    assert all(p.exists() for p in ours + users)  # a dry run deletes nothing
    assert sorted(f for e in planned for f in e.files) == sorted(ours)
    assert sum(e.nbytes for e in planned) == total == kernel_cache.usage()
    assert {e.name for e in planned if e.legacy} == {"kernels", "numba", "triton_kernels"}
    done = kernel_cache.clear()
    assert sorted(f for e in done for f in e.files) == sorted(ours)
    assert sum(e.nbytes for e in done) == total
    assert not any(p.exists() for p in ours)
    assert all(p.exists() for p in users)
    # folders the library made are gone once empty; one holding a user's file stays
    assert sorted(os.listdir(root)) == sorted(["k0.1.0-aaaaaaaaaaaaaaaa", f"k0.1.0-{FP}", "kernels",
                                               "my_notes.txt", "numbers"])
    assert os.listdir(root / f"k0.1.0-{FP}") == ["cpu"]
    assert kernel_cache.clear() == [] and kernel_cache.usage() == 0


def test_clear_cache_command(cache_root, capsys):
    root, ours, users = cache_root
    total = sum(p.stat().st_size for p in ours)
    assert cli.main(["clear-cache", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would remove {len(ours)} files" in out and f"({total} bytes)" in out
    assert all(p.exists() for p in ours)
    assert cli.main(["clear-cache"]) == 0
    out = capsys.readouterr().out
    assert f"removed {len(ours)} files" in out and f"({total} bytes) in all" in out
    assert str(root / "kernels") in out and "older infiniop" in out
    assert all(p.exists() for p in users) and not any(p.exists() for p in ours)
    assert cli.main(["clear-cache"]) == 0
    out = capsys.readouterr().out
    assert "nothing to remove" in out and "removed" not in out


def test_operator_names_of_any_characters_compile_and_clear(tmp_path):
    """A user's operator name went into its kernel files' names as it was: "a/b" failed
    (FileNotFoundError: a folder "ew_a"), a 300-character name hit ENAMETOOLONG, and "my-op"
    or "größe" compiled into files clear-cache did not recognise (so their folders stayed).
    In a fresh process and cache: each computes, and clear() leaves nothing behind."""
    import subprocess
    import sys

    code = (
        "import os, numpy as np, infiniop\n"
        "from infiniop import kernel_cache\n"
        "x = np.arange(5, dtype=np.float32)\n"
        "for name in ('my-op', 'a/b', 'größe ü', 'x' * 300, '../up'):\n"
        "    op = infiniop.elementwise(name, ('x',), infiniop.FLOATS, lambda m, x: x * 3 + 1)\n"
        "    assert op(x).tolist() == (x * 3 + 1).tolist(), name\n"
        "    r = infiniop.row_operator(name, 'y:out, x', lambda m, x: x - m.max(x))\n"
        "    assert r(x).tolist() == (x - 4).tolist(), name\n"
        "kernel_cache.clear()\n"
        "left = [os.path.join(d, f) for d, _, fs in os.walk(kernel_cache.root()) for f in fs]\n"
        "print('left', len(left), left[:3])\n")
    env = dict(os.environ, INFINIOP_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split()[:2] == ["left", "0"], p.stdout
    assert not (tmp_path / "up").exists()


def _run_op(env, code="print(op(np.ones(3, np.float32)).tolist())"):
    import subprocess
    import sys

    head = ("import numpy as np, infiniop\n"
            "op = infiniop.elementwise('kc', ('x',), infiniop.FLOATS, lambda m, x: x * 2 + 1)\n")
    return subprocess.run([sys.executable, "-c", head + code], env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_damaged_cache_entry_is_compiled_again(tmp_path):
    """A truncated Numba index or data file, or a truncated generated module, made every later
    process fail (UnpicklingError, NameError in Numba's typing) until the cache was cleared:
    each is a miss now, compiled again and rewritten, and the next process loads it."""
    env = dict(os.environ, INFINIOP_CACHE_DIR=str(tmp_path))
    assert _run_op(env).stdout.split() == ["[3.0,", "3.0,", "3.0]"]
    (tag,) = tmp_path.glob("k*")

    def damage(pattern: str, how: str) -> None:
        for f in tag.glob("native-*/ew_kc_*.nko"):   # so that Numba's entries are read
            f.unlink()
        files = list(tag.glob(pattern))
        assert files, pattern
        for f in files:
            data = f.read_bytes()
            f.write_bytes(data[: len(data) // 2] if how == "truncate" else os.urandom(len(data)))

    for pattern, how in (("numba/generated/ew_kc_*.nbi", "truncate"),
                         ("numba/generated/ew_kc_*.nbc", "truncate"),
                         ("numba/generated/ew_kc_*.nbc", "random"),
                         ("cpu/ew_kc_*.py", "truncate")):
        damage(pattern, how)
        for _ in range(2):                            # repaired, then loaded as usual
            p = _run_op(env)
            assert p.stdout.split() == ["[3.0,", "3.0,", "3.0]"], (pattern, how, p.stderr[-2000:])


def test_an_unwritable_cache_folder_falls_back_to_a_temporary_one(tmp_path):
    """A cache folder that cannot be made or written (here: a file in its place) failed every
    call that needed a new kernel with an OSError; now the kernels go to a folder in the
    temporary directory, with a warning that names both, and clear-cache works there."""
    blocker = tmp_path / "notadir"
    blocker.write_text("")
    env = dict(os.environ, INFINIOP_CACHE_DIR=str(blocker / "cache"), TMPDIR=str(tmp_path))
    p = _run_op(env, "print(op(np.ones(3, np.float32)).tolist()); "
                     "from infiniop import kernel_cache; print(kernel_cache.root())")
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout.split("\n")
    assert out[0] == "[3.0, 3.0, 3.0]" and out[1].startswith(str(tmp_path / "infiniop-cache-"))
    assert "RuntimeWarning" in p.stderr and "is not a folder" in p.stderr
    assert any((tmp_path / out[1]).rglob("ew_kc_*.py"))
    p = _run_op(env, "from infiniop import cli; raise SystemExit(cli.main(['clear-cache']))")
    assert p.returncode == 0 and "removed" in p.stdout, p.stdout + p.stderr
    assert not any((tmp_path / out[1]).rglob("ew_kc_*.py"))


def test_clear_cache_reports_files_it_cannot_remove(cache_root, monkeypatch, capsys):
    """clear-cache stopped with a traceback at the first file it could not delete (a read-only
    folder); it removes what it can, names what it could not and exits with 1."""
    root, ours, users = cache_root
    stuck = ours[0]
    real = type(stuck).unlink

    def unlink(self, *a, **k):
        if self == stuck:
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)

    monkeypatch.setattr(type(stuck), "unlink", unlink)
    assert cli.main(["clear-cache"]) == 1
    io = capsys.readouterr()
    assert f"removed {len(ours) - 1} files" in io.out
    assert f"could not remove 1 files, e.g. {stuck}: Permission denied" in io.err
    assert stuck.exists() and not any(p.exists() for p in ours[1:])


def test_clear_cache_on_a_missing_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(kernel_cache, "root", lambda: tmp_path / "never-created")
    assert cli.main(["clear-cache"]) == 0
    assert "nothing to remove" in capsys.readouterr().out
    assert not (tmp_path / "never-created").exists()


def test_warmup_compiles_into_the_cache(tmp_path, monkeypatch, capsys):
    """``infiniop warmup`` runs the calls of each group in worker processes (here: one group,
    in a cache of its own) and says how much the cache grew."""
    from infiniop import warmup

    assert ("sub", "float32") in warmup.tasks(("float32",))
    assert ("rearrange", "uint16") in warmup.tasks(("float32",))
    assert all(dt == "float64" for op, dt in warmup.tasks(("float64",)) if op != "rearrange")
    groups = {op for op, dt in warmup.tasks(("bfloat16",))}  # what a transformer layer calls
    assert {"silu", "swiglu", "rms_norm", "layer_norm", "softmax", "causal_softmax",
            "rope"} <= groups, groups
    monkeypatch.setattr(warmup, "tasks", lambda dtypes: [("neg", "float64"),
                                                         ("rms_norm", "float64")])
    monkeypatch.setenv("INFINIOP_CACHE_DIR", str(tmp_path))  # read by the workers
    monkeypatch.setattr(kernel_cache, "root", lambda: tmp_path)
    assert cli.main(["warmup", "--processes", "1"]) == 0
    out = capsys.readouterr().out
    assert "2 operator/dtype groups in 1 processes" in out and "the cache grew by" in out
    assert kernel_cache.usage(tmp_path) > 0
    assert any("ew_neg" in p.name for p in tmp_path.rglob("*.py"))
    # the large call's functions: the kernel's plain and streaming loops, the pool's driver
    stored = {p.name.split(".")[1] for p in tmp_path.rglob("*.nko")
              if p.name.startswith(("ew_neg", "flat_"))}
    assert {"serial", "streamed", "parallel"} <= stored, stored
    # rms_norm: small and large (streamed) row kernels and the row kinds' pool driver
    rows = {p.name for p in tmp_path.rglob("*.nko") if p.name.startswith("rows_")}
    assert any("_nt" in n and ".serial." in n for n in rows) and \
        any("_nt" not in n and ".serial." in n for n in rows) and \
        any(n.startswith("rows_row") and ".parallel." in n for n in rows), rows


def test_numba_cache_entries_never_share_a_data_file(tmp_path, monkeypatch):
    """Two processes adding different signatures of one function to Numba's cache at once both
    read the index before either writes it. Numba numbers a new entry's data file by counting
    the index it read, so both took ``<base>.1.nbc``: the index then mapped one signature to
    the other's machine code (found after a ``pytest -n 2`` run: a launcher's ``layout_end``
    failed to type on that cache from then on). In infiniop's cache a data file is named by its
    key, so an entry's file always holds that entry's data."""
    from numba.core import caching

    from infiniop.backends.cpu import jit

    monkeypatch.setattr(jit, "_KERNEL_ROOT", os.path.realpath(tmp_path) + os.sep)
    entries = caching.IndexDataCacheFile(str(tmp_path), "arrays.layout_end-11.py311", "stamp")
    monkeypatch.setattr(entries, "_load_index", lambda: {})  # every save reads an empty index
    written = {}
    monkeypatch.setattr(entries, "_save_index", lambda overloads: written.update(overloads))
    entries.save(("sig", "int32 readonly"), b"checked array code")
    entries.save(("sig", "int32"), b"plain array code")
    assert len(set(written.values())) == 2
    for key, data in ((("sig", "int32 readonly"), b"checked array code"),
                      (("sig", "int32"), b"plain array code")):
        assert entries._load_data(written[key]) == data
    outside = tmp_path / "elsewhere"  # other code's Numba caches keep Numba's own naming
    monkeypatch.setattr(jit, "_KERNEL_ROOT", os.path.realpath(outside) + os.sep)
    written.clear()
    entries.save(("sig", "int64"), b"x")
    assert list(written.values()) == ["arrays.layout_end-11.py311.1.nbc"]
