"""Cached kernels run without Numba (backends/cpu/native.py): a fresh process whose kernels are
in the cache gets bit-exact results without importing numba or llvmlite; a damaged or foreign
object is never run (Numba compiles instead); one thread pool and one thread count whichever
ran first."""

from __future__ import annotations

import glob
import os
import shutil

import pytest
from test_isolation import check_isolated

from infiniop.backends.cpu import native, runtime

pytestmark = pytest.mark.skipif(not native.ENABLED, reason="native loading is Linux x86-64 only")

# Small tensors through every rearrange kernel kind, serial and parallel, NT and cached stores,
# direct and staged transposes (thresholds forced to 0 below).
WORKLOAD = """
import sys
import numpy as np, infiniop
rng = np.random.default_rng(0)
def check(x, pattern, want):
    got = infiniop.rearrange(x, pattern)
    want = np.ascontiguousarray(want)
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))
x = rng.standard_normal((3, 37, 45)).astype(np.float32)
check(x, "b r c -> b c r", x.transpose(0, 2, 1))             # transpose
check(x[:, :, ::2], "b r c -> b r c", x[:, :, ::2])           # units
check(x, "b r c -> (b r c)", x.reshape(-1))                   # memcpy
y = np.empty((45, 37 * 3 + 1), np.float32)[:, 1:]             # misaligned rows: staged
infiniop.copy_(y.reshape(45, 3, 37).transpose(1, 2, 0), x)
assert np.array_equal(y.reshape(45, 3, 37).transpose(1, 2, 0), x)
h = x.astype(np.float16)
check(h, "b r c -> b c r", h.transpose(0, 2, 1))
# elementwise and row kernels: the descriptor's array fast path and the pointer path
assert np.array_equal(infiniop.sub(x, x[:1]), x - x[:1])
assert np.array_equal(infiniop.sub(h, h[:, :1]), h - h[:, :1])
hd = infiniop.create_handle("cpu")
d = infiniop.create_sub_descriptor(hd, *[infiniop.TensorDescriptor(infiniop.float32, x.shape)] * 3)
out, x2 = np.empty_like(x), x * 2
d.calculate(None, out.ctypes.data, x.ctypes.data, x2.ctypes.data)
assert np.array_equal(out, x - x2)
rows = [infiniop.rms_norm(x, x[0, 0], epsilon=1e-6), infiniop.softmax(h, axis=1),
        infiniop.causal_softmax(x), out]
import hashlib
digest = hashlib.sha1(b"".join(r.tobytes() for r in rows)).hexdigest()[:12]
from infiniop.backends.cpu import runtime
print(sys.modules.get("numba") is not None, sys.modules.get("llvmlite") is not None,
      runtime.num_threads(), digest)
"""
ENV = {"INFINIOP_PARALLEL_THRESHOLD": "0", "INFINIOP_NT_THRESHOLD_BYTES": "0"}


def _run(cache, code=WORKLOAD, **env):
    out = check_isolated(code, env={"INFINIOP_CACHE_DIR": str(cache), **ENV, **env}, prelude=False,
                         timeout=600)
    return out.strip().splitlines()[-1]


def _objects(cache):
    return sorted(glob.glob(os.path.join(cache, "k*", "native-*", "*.nko")))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A cache filled by one process that compiled the workload's kernels (with Numba)."""
    cache = tmp_path_factory.mktemp("native") / "cache"
    line = _run(cache)
    assert line.startswith(f"True True {runtime.MAX_THREADS} ")
    return cache, line.split()[-1]


def test_cached_kernels_run_without_numba(compiled):
    cache, digest = compiled
    stored = _objects(cache)
    kinds = {os.path.basename(p).split(".")[1] for p in stored}
    assert {"memcpy_parallel", "units_parallel", "transpose_parallel", "launch",
            "parallel"} <= kinds, stored
    assert any(os.path.basename(p).startswith("ew_sub") for p in stored), stored
    assert any(os.path.basename(p).startswith("rows_causal_softmax") for p in stored), stored
    # a fresh process: Numba is not even importable, the results are the same bits
    no_numba = "import sys\nsys.modules['numba'] = sys.modules['llvmlite'] = None\n"
    assert _run(cache, no_numba + WORKLOAD, NUMBA_NUM_THREADS="1") == f"False False 1 {digest}"
    assert _objects(cache) == stored


def test_damaged_objects_are_never_run(compiled, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(compiled[0], cache)
    for path in _objects(cache):
        with open(path, "r+b") as f:  # flip one byte of the machine code
            f.seek(-100, os.SEEK_END)
            b = f.read(1)
            f.seek(-100, os.SEEK_END)
            f.write(bytes([b[0] ^ 0xFF]))
    assert _run(cache) == f"True True {runtime.MAX_THREADS} {compiled[1]}"  # Numba ran instead


def test_thread_count_carries_over_to_numba(compiled):
    cache = compiled[0]
    code = WORKLOAD + """
runtime.set_num_threads(1)
infiniop.mul(np.ones(8, np.float32), np.ones(8, np.float32))  # not cached: imports Numba
import numba
assert "numba" in sys.modules and numba.get_num_threads() == 1 == runtime.num_threads()
big = rng.standard_normal((700, 900)).astype(np.float32)
check(big, "a b -> b a", big.T)
print("ok")
"""
    assert _run(cache, code) == "ok"


def test_argument_types():
    import numpy as np

    sig = native.describe((np.empty(0, np.uint32), 3, True, 2.0, native.array(np.float16, 2),
                           np.empty((3, 4)).T))
    assert sig[1:4] == ("int64", "bool", "float64")
    assert sig[0] == native.ArrayType(np.dtype(np.uint32), 1, "C")
    assert sig[4] == native.ArrayType(np.dtype(np.float16), 2, "A")
    assert sig[5].layout == "A"
    with pytest.raises(TypeError):
        native.describe(("text",))


def test_machine_code_is_linked_once_per_process():
    """Descriptors made again and again reuse their kernels' specialisations: nothing is
    compiled or linked again (the memory soak would see it otherwise)."""
    import numpy as np

    import infiniop

    h = infiniop.create_handle("cpu")
    k = native.kernel("infiniop.backends.cpu.arrays", "address_of")
    assert k is native.kernel("infiniop.backends.cpu.arrays", "address_of")
    x = np.zeros((5, 7), np.float32)

    def make():
        d = infiniop.create_rearrange_descriptor(
            h, infiniop.TensorDescriptor.from_array(x.T.copy().T), infiniop.TensorDescriptor.from_array(x))
        d.calculate(np.empty((7, 5), np.float32).T, x)

    make()
    linked = len(native._KEEP)
    specs = len(k._specs)
    for _ in range(20):
        make()
    assert len(native._KEEP) == linked and len(k._specs) == specs


def test_one_array_launcher_serves_every_kernel_of_its_structure():
    """The fast path's compiled launcher calls its kernel by address (``call_kernel``), so
    operators with the same operands share it (compiled once), each still running its own
    kernel; rows and rope reach theirs the same way."""
    import numpy as np

    import infiniop

    h = infiniop.create_handle("cpu")
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((6, 40)).astype(np.float32) for _ in range(2))
    descs = {}
    for op in ("sub", "add", "mul", "maximum"):
        d = getattr(infiniop, f"create_{op}_descriptor")(
            h, *[infiniop.TensorDescriptor.from_array(a)] * 3)
        out = np.full_like(a, np.nan)
        d.calculate(None, out, a, b)
        ref = {"sub": a - b, "add": a + b, "mul": a * b, "maximum": np.maximum(a, b)}[op]
        assert np.array_equal(out, ref), op
        descs[op] = d
    launchers = {id(d._kernel.array_launcher) for d in descs.values()}
    kernels_ = {id(d._kernel._fn) for d in descs.values()}
    assert len(launchers) == 1 and len(kernels_) == 4
    # a different structure (a broadcast operand) has a launcher of its own
    d = infiniop.create_sub_descriptor(h, *[infiniop.TensorDescriptor.from_array(a)] * 2,
                                       infiniop.TensorDescriptor.from_array(b[:, :1]))
    assert d._kernel.array_launcher is not descs["sub"]._kernel.array_launcher
    out = np.empty_like(a)
    d.calculate(None, out, a, b[:, :1])
    assert np.array_equal(out, a - b[:, :1])
    # rows: rms_norm's launcher calls its kernel with the row sizes and layouts from the table
    x, w = rng.standard_normal((5, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    got = infiniop.rms_norm(x, w, epsilon=1e-6)
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_light_kernels_share_one_pool_driver(monkeypatch):
    """A light body's thread-pool loop is one compiled driver per operand structure
    (``elementwise_kernels.flat_driver``, ``task_driver``) calling the kernel's functions by
    address: sub and add share it, each reaching its own; a math-heavy body (silu) is driven
    too, its ``serial`` streaming full blocks itself. Values through the head, streamed blocks
    and the tail, strided rows and transposed tiles."""
    import numpy as np

    import infiniop

    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    h = infiniop.create_handle("cpu")
    rng = np.random.default_rng(6)
    n = 2 * 16384 + 37  # two whole 64 KiB blocks of float32, a head and a tail
    a, b = (rng.standard_normal(n + 1).astype(np.float32)[1:] for _ in range(2))
    kernels_ = {}
    for op, ref in (("sub", a - b), ("add", a + b)):
        d = getattr(infiniop, f"create_{op}_descriptor")(
            h, *[infiniop.TensorDescriptor.from_array(a)] * 3)
        for out in (np.full(n, np.nan, np.float32), np.full(n + 3, np.nan, np.float32)[3:]):
            d.calculate(None, out, a, b)
            assert np.array_equal(out, ref), (op, out.ctypes.data % 64)
        kernels_[op] = d._kernel
    assert kernels_["sub"]._fn is kernels_["add"]._fn                  # the driver
    assert kernels_["sub"].meta[1] and kernels_["sub"].meta[2]         # streamed, serial
    assert kernels_["sub"].meta[2] != kernels_["add"].meta[2]
    d = infiniop.create_silu_descriptor(h, *[infiniop.TensorDescriptor.from_array(a)] * 2)
    assert d._kernel.meta[1] == d._kernel.meta[2] != 0                # serial, streaming
    out = np.empty_like(a)
    d.calculate(None, out, a)
    np.testing.assert_allclose(out, a / (1 + np.exp(-a.astype(np.float64))), rtol=2e-7)
    # strided (a broadcast column) and tiled (a transposed operand): one task per call
    x, y = (rng.standard_normal((130, 70)).astype(np.float32) for _ in range(2))
    for layout, (u, v) in (("strided", (x, y[:, :1])), ("tiled", (y.T.copy().T, x))):
        drivers = set()
        for op, ref in (("sub", u - v), ("add", u + v)):
            out = np.full(x.shape, np.nan, np.float32)
            d = getattr(infiniop, f"create_{op}_descriptor")(
                h, *(infiniop.TensorDescriptor.from_array(t) for t in (out, u, v)))
            d.calculate(None, out, u, v)
            assert np.array_equal(out, ref), (layout, op)
            assert d._kernel.meta[2], (layout, op)                     # serial's address
            drivers.add(id(d._kernel._fn))
        assert len(drivers) == 1, layout
