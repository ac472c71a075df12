"""What generated kernel source is made of, and why it compiles fast (backends/cpu/codegen.py,
elementwise_kernels.py, intrinsics.py, arrays.py): typed constants are module globals that keep
their exact values; ``select``/``minimum``/``maximum`` keep the ternaries' semantics (NaN
included); each rendered body names its temporaries apart; the array launchers check layouts
with one compiled ``layout_end`` per rank, whatever the arrays' dtypes."""

from __future__ import annotations

import ast
import collections
import math
import re

import numpy as np
import pytest
from numba import njit

import infiniop
from infiniop.backends.cpu import arrays, codegen, elementwise_kernels
from infiniop.backends.cpu.intrinsics import maximum, minimum, select

FLOATS = [0.0, -0.0, 1.0, -1.5, 0.1, 1 / 3, 2.0 ** -149, 2.0 ** -1074, 3.4028234663852886e38,
          1e39, -1e300, math.inf, -math.inf, math.nan]
INTS = [0, 1, -1, 2**31 - 1, 2**31, -2**31, 2**32 - 1, 2**63 - 1, 2**63 + 5, -2**63, 2**64 + 3]
TYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64,
         "u32": np.uint32, "u64": np.uint64}


def test_literals_have_the_values_of_the_casts_they_replace():
    """Each literal, compiled from a generated module, has the bits NumPy's cast gives (floats:
    rounded to nearest, overflow to inf, NaN as np.nan's), integers wrapped to their width."""
    cases = [(v, t) for t in ("f32", "f64") for v in FLOATS]
    cases += [(v, t) for t in ("i32", "i64", "u32", "u64") for v in INTS]
    names = [codegen.literal(v, t) for v, t in cases]
    assert len(set(names)) == len({(t, _bits(_want(v, t))) for v, t in cases})  # -0.0 apart
    src = ("from numba import njit\n\n\n@njit(cache=True)\ndef values():\n"
           f"    return ({', '.join(names)},)\n")
    fn = codegen.load_module("test_literals", src).values
    got = fn()
    typed = fn.nopython_signatures[0].return_type  # the types in compiled code
    for (v, t), g, ty in zip(cases, got, typed):
        want = _want(v, t)
        assert str(ty) == want.dtype.name and _bits(TYPES[t](g)) == _bits(want), (v, t, g, want)


def _want(v, t):
    if t in ("f32", "f64"):
        with np.errstate(over="ignore"):
            return np.float64(v).astype(TYPES[t])
    width = int(t[1:])
    w = v % (1 << width)
    if t[0] == "i" and w >= 1 << (width - 1):
        w -= 1 << width
    return TYPES[t](w)


def _bits(x):
    return int(np.asarray(x).view(f"u{np.asarray(x).itemsize}"))


@njit
def _select_all(c, a, b):
    return [select(c[i], a[i], b[i]) for i in range(len(a))]


@njit
def _extrema(a, b):
    return [(minimum(a[i], b[i]), maximum(a[i], b[i])) for i in range(len(a))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint32, np.int64,
                                   np.uint64])
def test_select_minimum_maximum(dtype):
    """``minimum(a, b)`` is ``a < b ? a : b`` but ``a`` where ``a`` is NaN (so NaN from either
    side: np.minimum's values), ``maximum`` likewise; unsigned integers compare unsigned."""
    info = np.finfo(dtype) if np.issubdtype(dtype, np.floating) else np.iinfo(dtype)
    vals = [0, 1, 2, info.max, info.min]
    if np.issubdtype(dtype, np.floating):
        vals += [-0.0, np.nan, -np.inf, np.inf, 1.5, -2.5]
    a, b = (np.array(x, dtype) for x in zip(*[(x, y) for x in vals for y in vals]))
    got = np.array(_extrema(a, b), dtype)
    for k, ref in enumerate((np.minimum(a, b), np.maximum(a, b))):
        same = (got[:, k] == ref) | (np.isnan(got[:, k]) & np.isnan(ref)) if np.issubdtype(
            dtype, np.floating) else got[:, k] == ref
        assert same.all(), (dtype, a[~same], b[~same], got[~same, k])
    nan_a = np.isnan(a) if np.issubdtype(dtype, np.floating) else np.zeros(len(a), bool)
    assert (_bits_each(got[nan_a, 0]) == _bits_each(a[nan_a])).all()  # a's NaN itself
    c = np.arange(len(a)) % 3 == 0
    assert (_bits_each(np.array(_select_all(c, a, b), dtype))
            == _bits_each(np.where(c, a, b))).all()


def _bits_each(x):
    return x.view(f"u{x.itemsize}")


_TEMPORARY = re.compile(r"[thx]\d*c(\d+)_\d+")  # a rendered body's: <t|h|x><lane>c<copy>_<k>


def _assigned_twice(source: str) -> dict[str, list[str]]:
    """Per function of ``source``: the rendered bodies' temporaries assigned in more than one
    statement."""
    out = {}
    for fn in ast.parse(source).body:
        if isinstance(fn, ast.FunctionDef):
            names = collections.Counter(n.id for node in ast.walk(fn) if isinstance(node, ast.Assign)
                                        for t in node.targets for n in ast.walk(t)
                                        if isinstance(n, ast.Name) and _TEMPORARY.fullmatch(n.id))
            out[fn.name] = [k for k, v in names.items() if v > 1]
    return out


@pytest.mark.parametrize("op, dtype, shape", [("gelu", infiniop.float16, (64, 40)),
                                              ("erfinv", infiniop.float32, (64, 40)),
                                              ("silu", infiniop.bfloat16, (3, 64, 40))])
def test_rendered_bodies_name_their_temporaries_apart(op, dtype, shape):
    """A kernel renders its body several times (block loop, tail, packed lanes); each copy has
    its own names, so no temporary is assigned twice (Numba's SSA pass would rewrite the whole
    function once for each)."""
    h = infiniop.create_handle("cpu")
    td = infiniop.TensorDescriptor(dtype, shape)
    strided = infiniop.TensorDescriptor(dtype, shape, tuple(2 * s for s in td.strides))
    for x in (td, strided):
        info = getattr(infiniop, f"create_{op}_descriptor")(h, td, x).info
        src = elementwise_kernels.source(info.program, info.kind, info.pattern)
        assert len(set(_TEMPORARY.findall(src))) >= 2  # several copies were rendered
        assert not any(_assigned_twice(src).values()), _assigned_twice(src)


def test_array_launchers_check_layouts_with_one_compilation_per_rank():
    """``layout_end`` takes an array's dtype address, shape and strides, not the array: its
    compilations are one per rank, shared by arrays of every dtype and layout."""
    rng = np.random.default_rng(0)
    for dt in (np.float32, np.float64, np.int32, np.float16):
        for shape in ((5,), (3, 4), (2, 3, 4)):
            a = rng.standard_normal(shape).astype(dt)
            np.testing.assert_array_equal(infiniop.add(a, a), a + a)
            np.testing.assert_array_equal(infiniop.add(a.T, a.T), a.T + a.T)
    sigs = arrays.layout_end.signatures
    assert sigs and all(not any(isinstance(t, np.ndarray) or "array" in str(t) for t in s[:3])
                        for s in sigs)
    ranks = [len(s[1]) for s in sigs]
    assert len(ranks) == len(set(ranks)), sigs


def test_one_array_launcher_serves_every_dtype():
    """Where the launcher checks the arrays itself (``ndarray_abi.verified``), they enter as
    uint8 arrays of their rank: sub of float32, float64, float16, bfloat16 and int32 operands
    of one shape share one compiled launcher (the dtype is checked against the descriptor's:
    an array of another dtype of the same size takes the general path, which refuses it)."""
    from infiniop.backends.cpu import ndarray_abi

    if not ndarray_abi.verified():
        pytest.skip("the fast path checks arrays in Python here")
    import ml_dtypes

    h = infiniop.create_handle("cpu")
    rng = np.random.default_rng(3)
    launchers = set()
    for dt in (np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int32):
        a, b = (rng.integers(-50, 50, (6, 40)).astype(dt) for _ in range(2))
        d = infiniop.create_sub_descriptor(h, *[infiniop.TensorDescriptor.from_array(a)] * 3)
        out = np.zeros_like(a)
        d.calculate(None, out, a, b)
        np.testing.assert_array_equal(out.astype(np.float64), a.astype(np.float64) - b)
        launchers.add(id(d._kernel.array_launcher))
        if dt is np.float32:
            with pytest.raises(infiniop.InfiniError) as err:
                d.calculate(None, out, a.view(np.int32), b)
            assert err.value.status is infiniop.Status.BAD_TENSOR_DTYPE
    assert len(launchers) == 1
