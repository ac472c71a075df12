"""Math-heavy fp16/bf16 unary operators looked up in a table (backends/cpu/tabulated.py): the
same bits as computing them, on every input pattern, layout, size and thread count."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

import infiniop
from infiniop import DType, TensorDescriptor
from infiniop.memory import empty_aligned

# the Triton suite runs CPU test files with its backend: tables are the CPU backend's own
pytestmark = pytest.mark.skipif(os.environ.get("INFINIOP_TRITON_WORKER") == "1",
                                reason="a CPU backend feature")

tabulated = pytest.importorskip("infiniop.backends.cpu.tabulated")
from infiniop.backends.cpu import cpuinfo  # noqa: E402

NEEDS_GATHER = pytest.mark.skipif(not cpuinfo.fast_gathers(), reason="tables need fast gathers")
HALF = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
ALL = np.arange(1 << 16, dtype=np.uint16)  # every 16-bit pattern: NaNs, infinities, subnormals


def _unary_operators() -> list[str]:
    """The built-in operators with one input and one output that take fp16 and bf16."""
    names = []
    for name in infiniop.__all__:
        spec = getattr(infiniop, name, None)
        ops = getattr(spec, "operands", None)
        if ops is None or not hasattr(spec, "match") or len(ops) != 2 or name in ("ones", "zeros"):
            continue
        if sum(o.reads for o in ops) != 1 or sum(o.writes for o in ops) != 1 or \
                any(o.nviews != 1 for o in ops):
            continue
        try:
            for dt in (DType.F16, DType.BF16):
                spec.match((dt, dt))
        except infiniop.InfiniError:
            continue
        names.append(name)
    return names


UNARY = [n for n in _unary_operators() if n not in ("softmax", "causal_softmax", "logsoftmax")]
# an input and a parameter each operator accepts over the whole 16-bit range
PARAMS = {"hardtanh": {"min_val": -0.75, "max_val": 2.5}, "softplus": {"beta": 1.5, "threshold": 12.0}}


@pytest.fixture
def every_body(monkeypatch):
    """Tables for every unary body, light ones too: the most bodies through the lookup."""
    monkeypatch.setattr(tabulated, "MIN_NODES", {DType.F16: 0, DType.BF16: 0})


@pytest.fixture
def no_tables(monkeypatch):
    monkeypatch.setattr(tabulated, "MIN_NODES", {DType.F16: 1 << 30, DType.BF16: 1 << 30})


def _create(spec, y, x, **params):
    """A descriptor for output y and input x, in the operator's own operand order (BLAS copy
    takes its input first)."""
    td = TensorDescriptor.from_array
    descs = [td(y) if o.writes else td(x) for o in spec.operands]
    return spec.create_descriptor(infiniop.create_handle("cpu"), *descs, **params)


def _run(spec, d, y, x, raw=False):
    bufs = [y if o.writes else x for o in spec.operands]
    d.calculate(None, *[b.ctypes.data for b in bufs] if raw else bufs)


def _computed(op, x: np.ndarray, **params) -> np.ndarray:
    """The operator (or its name) computed, not looked up: a strided output is never
    tabulated."""
    out = np.empty(2 * x.size, x.dtype)[::2]
    (getattr(infiniop, op) if isinstance(op, str) else op)(x, out=out, **params)
    return out.copy()


def test_the_operators_exist():
    assert {"gelu", "erfc", "erfinv", "softplus", "log1p", "atanh", "silu", "tanh"} <= set(UNARY)


@NEEDS_GATHER
@pytest.mark.parametrize("dtype", list(HALF))
@pytest.mark.parametrize("name", UNARY)
def test_every_input_pattern_gives_the_computed_bits(every_body, name, dtype):
    x = ALL.view(HALF[dtype])
    params = PARAMS.get(name, {})
    spec = getattr(infiniop, name)
    y = empty_aligned(x.shape, x.dtype)
    d = _create(spec, y, x, **params)
    assert type(d._kernel).__name__ == "TabulatedKernel"
    _run(spec, d, y, x)
    want = _computed(name, x, **params).view(np.uint16)
    np.testing.assert_array_equal(y.view(np.uint16), want)
    y[...] = 0  # the raw-address path too
    _run(spec, d, y, x, raw=True)
    np.testing.assert_array_equal(y.view(np.uint16), want)
    np.testing.assert_array_equal(x.view(np.uint16), ALL)


@NEEDS_GATHER
@pytest.mark.parametrize("dtype", list(HALF))
def test_heavy_bodies_are_looked_up_and_light_ones_computed(dtype):
    x = np.ones(64, HALF[dtype])
    h = infiniop.create_handle("cpu")
    td = TensorDescriptor.from_array
    kind = {n: type(getattr(infiniop, n).create_descriptor(h, td(x), td(x))._kernel).__name__
            for n in ("erfinv", "erfc", "relu", "neg", "abs")}
    assert kind["erfinv"] == kind["erfc"] == "TabulatedKernel"
    assert kind["relu"] == kind["neg"] == kind["abs"] == "ElementwiseKernel"
    # float32 and strided calls compute
    x32 = np.ones(64, np.float32)
    assert type(infiniop.erfc.create_descriptor(h, td(x32), td(x32))._kernel).__name__ \
        == "ElementwiseKernel"
    xs = np.ones(128, HALF[dtype])[::2]
    assert type(infiniop.erfc.create_descriptor(h, td(x), td(xs))._kernel).__name__ \
        == "ElementwiseKernel"


@NEEDS_GATHER
@pytest.mark.parametrize("dtype", list(HALF))
@pytest.mark.parametrize("n, shift", [(1, 0), (31, 1), (33, 0), (1000, 3), (70_001, 5),
                                      (300_001, 7), (2_000_003, 1)])
def test_sizes_offsets_and_threads(n, shift, dtype):
    """Heads before the first 64-byte line, whole streamed lines, tails, the thread pool
    (from 256K elements) and non-temporal stores (large outputs); inputs at other offsets
    mod 4096 than their outputs."""
    rng = np.random.default_rng(n)
    bits = rng.integers(0, 1 << 16, n + 64, dtype=np.uint16)
    x = bits[shift:shift + n].view(HALF[dtype])
    raw = empty_aligned((n + 64,), np.uint16)
    y = raw[2 * shift + 1:2 * shift + 1 + n].view(HALF[dtype])
    infiniop.erfc(x, out=y)
    np.testing.assert_array_equal(y.view(np.uint16), _computed("erfc", x).view(np.uint16))


@NEEDS_GATHER
@pytest.mark.parametrize("dtype", list(HALF))
def test_in_place_and_shapes(dtype):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 1 << 16, (3, 700, 257), dtype=np.uint16).view(HALF[dtype])
    want = _computed("erfinv", x.ravel()).reshape(x.shape)
    got = infiniop.erfinv(x)
    assert got.shape == x.shape and got.dtype == x.dtype
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    infiniop.erfinv(x, out=x)  # y is x
    np.testing.assert_array_equal(x.view(np.uint16), want.view(np.uint16))
    e = np.empty((0, 5), HALF[dtype])
    assert infiniop.erfinv(e).shape == (0, 5)
    z = np.array(0.5, HALF[dtype])
    assert infiniop.erfinv(z).view(np.uint16) == _computed("erfinv", z.reshape(1)).view(np.uint16)


@NEEDS_GATHER
def test_torch_tensors():
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(ALL.view(np.int16).copy()).view(torch.bfloat16)
    got = infiniop.gelu(x)
    want = _computed("gelu", ALL.view(ml_dtypes.bfloat16))
    assert torch.equal(got.view(torch.int16), torch.from_numpy(want.view(np.int16)))


@NEEDS_GATHER
def test_each_parameter_value_has_its_table_and_no_new_kernel(every_body):
    """softplus bf16 with 100 (beta, threshold) pairs: each value's own results, one lookup
    kernel (tables are data, not code)."""
    x = ALL.view(ml_dtypes.bfloat16)
    h = infiniop.create_handle("cpu")
    td = TensorDescriptor.from_array
    y = empty_aligned(x.shape, x.dtype)
    fns = set()
    for k in range(100):
        p = {"beta": 0.5 + k / 16, "threshold": 5.0 + k / 4}
        d = infiniop.softplus.create_descriptor(h, td(y), td(x), **p)
        assert type(d._kernel).__name__ == "TabulatedKernel"
        fns.add((id(d._kernel._fn), id(d._kernel.array_launcher)))
        d.calculate(None, y, x)
        if k % 9 == 0:
            np.testing.assert_array_equal(y.view(np.uint16),
                                          _computed("softplus", x, **p).view(np.uint16))
    assert len(fns) == 1
    assert len(tabulated._tables) <= tabulated.TABLE_CACHE


@NEEDS_GATHER
def test_user_operators_are_tabulated_too():
    op = infiniop.elementwise(
        "tabulated_probe", ("x",), infiniop.FLOATS,
        lambda m, x: m.erfc(x) * m.log1p(m.abs(x)) + m.tanh(x) * 0.25)
    x = ALL.view(ml_dtypes.bfloat16)
    h = infiniop.create_handle("cpu")
    td = TensorDescriptor.from_array
    assert type(op.create_descriptor(h, td(x), td(x))._kernel).__name__ == "TabulatedKernel"
    np.testing.assert_array_equal(op(x).view(np.uint16), _computed(op, x).view(np.uint16))



def test_without_tables_the_same_results(no_tables):
    x = ALL.view(ml_dtypes.bfloat16)
    h = infiniop.create_handle("cpu")
    td = TensorDescriptor.from_array
    d = infiniop.gelu.create_descriptor(h, td(x), td(x))
    assert type(d._kernel).__name__ == "ElementwiseKernel"
    y = np.empty_like(x)
    d.calculate(None, y, x)
    np.testing.assert_array_equal(y.view(np.uint16), _computed("gelu", x).view(np.uint16))


@pytest.mark.parametrize("state, vendor, want", [
    ("Not affected", "AuthenticAMD", True), ("Vulnerable", "GenuineIntel", True),
    ("Vulnerable: No microcode", "GenuineIntel", True),
    ("Mitigation: Microcode", "GenuineIntel", False),
    ("Unknown: Dependent on hypervisor status", "GenuineIntel", False),
    (None, "AuthenticAMD", True), (None, "GenuineIntel", False)])
def test_tables_only_where_gathers_are_fast(monkeypatch, tmp_path, state, vendor, want):
    """Gather Data Sampling's microcode mitigation slows every gather of affected Intel CPUs:
    tables only where Linux says it is not applied (or the CPU is not affected)."""
    import builtins

    real_open = builtins.open
    sysfs = "/sys/devices/system/cpu/vulnerabilities/gather_data_sampling"

    def fake_open(path, *a, **k):
        if path == sysfs:
            if state is None:
                raise FileNotFoundError(path)
            f = tmp_path / "gds"
            f.write_text(state + "\n")
            return real_open(f, *a, **k)
        return real_open(path, *a, **k)

    monkeypatch.delenv("INFINIOP_TABLES", raising=False)
    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(cpuinfo, "compiles_avx512", lambda: True)
    monkeypatch.setattr(cpuinfo, "_fields", lambda: {"vendor_id": vendor})
    cpuinfo.fast_gathers.cache_clear()
    try:
        assert cpuinfo.fast_gathers() is want
        monkeypatch.setenv("INFINIOP_TABLES", "0")
        cpuinfo.fast_gathers.cache_clear()
        assert cpuinfo.fast_gathers() is False
        monkeypatch.setenv("INFINIOP_TABLES", "1")
        cpuinfo.fast_gathers.cache_clear()
        assert cpuinfo.fast_gathers() is True
        monkeypatch.setattr(cpuinfo, "compiles_avx512", lambda: False)
        monkeypatch.delenv("INFINIOP_TABLES")
        cpuinfo.fast_gathers.cache_clear()
        assert cpuinfo.fast_gathers() is False
    finally:
        monkeypatch.undo()
        cpuinfo.fast_gathers.cache_clear()


def test_avx512_code_only_for_this_cpu(monkeypatch):
    """NUMBA_CPU_NAME / NUMBA_CPU_FEATURES aimed at another CPU: no AVX-512 gathers emitted."""
    monkeypatch.setattr(cpuinfo, "avx512", lambda: True)
    monkeypatch.delenv("NUMBA_CPU_NAME", raising=False)
    monkeypatch.delenv("NUMBA_CPU_FEATURES", raising=False)
    assert cpuinfo.compiles_avx512()
    monkeypatch.setenv("NUMBA_CPU_NAME", "generic")
    assert not cpuinfo.compiles_avx512()
    monkeypatch.setenv("NUMBA_CPU_NAME", "host")
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx2,+fma")
    assert not cpuinfo.compiles_avx512()
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx2,+avx512f,+avx512bw")
    assert cpuinfo.compiles_avx512()


@NEEDS_GATHER
@pytest.mark.parametrize("dtype", list(HALF))
def test_looked_up_erfc_is_the_exact_value_rounded_once(dtype):
    """Against an independent reference: float64 ``math.erfc`` (2^-52 or better here) rounded
    once to the type, every input pattern (erfc is correctly rounded on all of them, README)."""
    import math

    from mathlib_support import round_once

    x = ALL.view(HALF[dtype])
    d = _create(infiniop.erfc, np.empty_like(x), x)
    assert type(d._kernel).__name__ == "TabulatedKernel"
    y = np.empty_like(x)
    d.calculate(None, y, x)
    xf = x.astype(np.float64)
    ref = round_once(np.array([math.erfc(v) if not math.isnan(v) else v for v in xf]), x.dtype)
    ok = np.isnan(xf)
    np.testing.assert_array_equal(np.isnan(y.astype(np.float64)), ok)
    np.testing.assert_array_equal(y.view(np.uint16)[~ok], ref.view(np.uint16)[~ok])
