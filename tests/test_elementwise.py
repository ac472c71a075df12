"""The elementwise operators, driven by one table.

Every operator x dtype x layout is compared bit for bit with a NumPy reference: floats are
computed in float64 and rounded to the storage type through float32 (for +, -, *, / this equals
the IEEE result in float32, and for fp16/bf16 it is the promised "compute in fp32, round once to
nearest even"); integers are computed by NumPy in their own type (wrapping). NaN positions are
compared as NaN, everything else by bits (so -0.0 != 0.0).

Compiling a kernel variant costs ~0.3-1 s on a cold cache, so the full layout matrix runs for a
few (operator, dtype) pairs per operator; every declared dtype of add/sub/mul/clip runs the basic
layouts (contiguous, padded, in-place).
"""

from __future__ import annotations

import functools
import os
import re
import zlib
from dataclasses import dataclass
from fractions import Fraction
from math import prod

import ml_dtypes
import numpy as np
import pytest
import torch
from conftest import CANARY, assert_canary, assert_exact, place, raises
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import infiniop
from infiniop import DType, Status, TensorDescriptor
from infiniop.backends.cpu import runtime
from infiniop.elementwise import functional
from infiniop.elementwise.operator import ElementwiseOperator
from infiniop.elementwise.spec import REGISTRY
from infiniop.ops import ALL as _BUILTINS  # noqa: F401  (defines every built-in in REGISTRY)

F16, BF16, F32, F64 = DType.F16, DType.BF16, DType.F32, DType.F64
I8, I16, I32, I64 = DType.I8, DType.I16, DType.I32, DType.I64
U8, U16, U32, U64 = DType.U8, DType.U16, DType.U32, DType.U64
FLOATS = (F16, BF16, F32, F64)
ALL = FLOATS + (I8, I16, I32, I64, U8, U16, U32, U64)


# ---------------------------------------------------------------------------------------------
# The operator table
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    name: str
    ref: object  # NumPy function on float64 (floats) or native (integers) arrays
    declared: frozenset  # the dtypes the operator must accept (and no other)
    dtypes: tuple  # dtypes run contiguous and in-place
    padded: tuple = ()  # dtypes also run with padded strides
    full: tuple = ()  # dtypes run on every layout through NumPy arrays and the functional API
    addr: tuple = ()  # dtypes run on every layout (reduced set if `reduced`) via raw addresses
    reduced: bool = False
    fast: tuple | None = None  # dtypes run contiguous through NumPy arrays (default: `dtypes`)

    @property
    def spec(self):
        return getattr(infiniop, self.name)

    @property
    def create(self):
        return getattr(infiniop, f"create_{self.name}_descriptor")

    @property
    def arity(self) -> int:
        return self.spec.arity

    def input_dtype(self, k: int, dtype: DType) -> DType:
        return DType.BOOL if (self.name == "where" and k == 0) else dtype

    def __repr__(self) -> str:
        return self.name


def _clip(x, lo, hi):
    return np.minimum(np.maximum(x, lo), hi)


def _relu(x):
    return np.maximum(x, x.dtype.type(0))


SIGNED = (I8, I16, I32, I64)
OPS = [
    Op("add", np.add, frozenset(ALL), ALL, padded=(F16, BF16, F32, I32, I64, U8), addr=(BF16,)),
    Op("sub", np.subtract, frozenset(ALL), ALL, padded=(F16, BF16, U16), full=(F32,),
       addr=(F16,)),
    Op("mul", np.multiply, frozenset(ALL), ALL, padded=(F16, BF16, F32, U32), addr=(I8,),
       fast=(F16, BF16, F32, I32)),
    Op("clip", _clip, frozenset(ALL), ALL, padded=(F64, I8), addr=(F32,),
       fast=(F16, BF16, F32, U8)),
    Op("div", np.divide, frozenset(FLOATS), FLOATS, addr=(F32,), reduced=True),
    Op("maximum", np.maximum, frozenset(ALL), (F16, F64, I32, U8), addr=(F32,), reduced=True),
    Op("minimum", np.minimum, frozenset(ALL), (BF16, F32, I64, U32), addr=(F64,), reduced=True),
    Op("neg", np.negative, frozenset(ALL), (F16, BF16, F64, I8, U32, U64), addr=(F32,),
       reduced=True),
    Op("abs", np.abs, frozenset(FLOATS + SIGNED), (F16, F64, I8, I64), addr=(F32,),
       reduced=True),
    Op("relu", _relu, frozenset(FLOATS + SIGNED), (BF16, F64, I16), addr=(F32,), reduced=True),
    Op("where", np.where, frozenset(ALL), (F16, BF16, I8, U64), addr=(F32,), reduced=True),
]
OP = {op.name: op for op in OPS}


def test_table_matches_library(handle):
    """Each operator accepts exactly the dtypes the table declares (checked through create)."""
    for op in OPS:
        for dt in ALL:
            out = TensorDescriptor(dt, (2,))
            ins = [TensorDescriptor(op.input_dtype(k, dt), (2,)) for k in range(op.arity)]
            if dt in op.declared:
                op.create(handle, out, *ins).destroy()
            else:
                raises(Status.BAD_TENSOR_DTYPE, op.create, handle, out, *ins)


# ---------------------------------------------------------------------------------------------
# Inputs and reference
# ---------------------------------------------------------------------------------------------


def draw(rng, dtype: DType, shape) -> np.ndarray:
    """Values that stress the operator: for floats NaN, +-inf, +-0, extremes, subnormals,
    random bit patterns and moderate values; for integers the full range (overflow) and edges."""
    n, npdt = prod(shape), dtype.numpy
    if dtype is DType.BOOL:
        return rng.random(shape) < 0.5
    raw = np.frombuffer(rng.bytes(n * npdt.itemsize), npdt)
    if dtype.is_float:
        fi = ml_dtypes.finfo(npdt)
        specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 3.0,
                             float(fi.max), -float(fi.max), float(fi.smallest_subnormal),
                             -float(fi.smallest_normal)])
        with np.errstate(all="ignore"):
            moderate = (rng.standard_normal(n) * 4.0 ** rng.integers(-4, 5, n)).astype(npdt)
            special = specials[rng.integers(0, len(specials), n)].astype(npdt)
        pick = rng.integers(0, 8, n)
        vals = np.where(pick < 4, moderate, np.where(pick < 6, raw, special))
    else:
        ii = np.iinfo(npdt)
        edges = np.array([ii.min, ii.max, 0, 1, ii.max - 1, ii.min + 1], dtype=npdt)
        small = rng.integers(-20, 21, n).astype(npdt)
        pick = rng.integers(0, 6, n)
        vals = np.where(pick < 2, raw, np.where(pick < 4, small, edges[rng.integers(0, 6, n)]))
    return vals.astype(npdt).reshape(shape).copy()


def reference(op: Op, dtype: DType, inputs) -> np.ndarray:
    """The promised result, from the logical (broadcast) inputs."""
    npdt = dtype.numpy
    with np.errstate(all="ignore"):
        if dtype.is_float:
            xs = [x if x.dtype == bool else x.astype(np.float64) for x in inputs]
            r = np.asarray(op.ref(*xs), dtype=np.float64)
            if dtype is not F64:
                r = r.astype(np.float32)
            return r.astype(npdt)
        return np.asarray(op.ref(*inputs)).astype(npdt)


def canary_array(shape, dtype: DType) -> np.ndarray:
    npdt = dtype.numpy
    return np.full(prod(shape) * npdt.itemsize, CANARY, np.uint8).view(npdt).reshape(shape)


# ---------------------------------------------------------------------------------------------
# Layouts
# ---------------------------------------------------------------------------------------------

PLACES = {  # dense placements (see conftest.place)
    "dense": {}, "padded": {"pad": 3}, "transposed": {"perm": "rev"},
    "negative": {"flip": True}, "steps": {"steps": (2, 3)},
    "mixed": {"perm": "rev", "steps": (3, 2), "flip": True},
}


def _place(values, mode):
    kw = dict(PLACES[mode])
    if kw.get("perm") == "rev":
        kw["perm"] = tuple(reversed(range(values.ndim)))
    if "steps" in kw:
        kw["steps"] = (kw["steps"] * values.ndim)[:values.ndim]
    return place(values, **kw)


@dataclass(frozen=True)
class Layout:
    """Output shape, a mode per input (default 'dense'), the output's placement, in-place."""

    name: str
    shape: tuple = (5, 7)
    ins: tuple = ()
    out: str = "dense"
    inplace: int | None = None

    def mode(self, k: int) -> str:
        return self.ins[k] if k < len(self.ins) else "dense"

    def __repr__(self) -> str:
        return self.name


def _at(k: int, mode: str) -> tuple:
    return ("dense",) * k + (mode,)


def layouts(op: Op) -> list[Layout]:
    r = op.arity
    pinned = {0} if op.name == "where" else set()
    L = [Layout("contiguous"), Layout("padded", ins=("padded",) * r, out="padded")]
    L += [Layout(f"inplace_{k}", inplace=k) for k in range(r) if k not in pinned]
    for k in range(r):
        L += [
            Layout(f"zero_stride_{k}", ins=_at(k, "zero0" if k % 2 == 0 else "zero1")),
            Layout(f"numpy_broadcast_{k}", ins=_at(k, "np_lead" if k % 2 == 0 else "np_col")),
            Layout(f"transposed_{k}", ins=_at(k, "transposed")),
            Layout(f"negative_{k}", ins=_at(k, "negative")),
        ]
    return L + [
        Layout("all_scalar", ins=("zero_all",) * r),
        Layout("numpy_outer", ins=("np_col", "np_row", "np_lead")[:r]),
        Layout("strided_out", out="steps"),
        Layout("transposed_out", out="transposed"),
        Layout("negative_out", out="negative"),
        Layout("negative_all", ins=("negative",) * r, out="negative"),
        Layout("mixed", ins=("mixed", "zero1", "transposed")[:r], out="mixed"),
        Layout("strided_inplace", ins=_at(r - 1, "mixed"), inplace=r - 1, out="mixed"),
        Layout("zero_d", shape=()),
        Layout("empty", shape=(0, 7)),
        Layout("empty_inner", shape=(5, 0)),
        Layout("size1_dims", shape=(1, 7, 1), ins=("padded",) * r, out="padded"),
    ]


def reduced_layouts(op: Op) -> set[str]:
    """The layouts run for the `reduced` operators: one of each kernel kind."""
    first_inplace = 1 if op.name == "where" else 0
    return {"contiguous", f"inplace_{first_inplace}", "mixed", f"zero_stride_{op.arity - 1}",
            "zero_d", "empty"}


def build_input(rng, dtype: DType, shape, mode: str):
    """(view handed to the library, logical values as the output's shape)."""
    nd = len(shape)
    if mode.startswith("zero"):  # InfiniCore style: same shape, 0 strides
        src = [1 if (mode == "zero_all" or d == int(mode[-1])) else n for d, n in enumerate(shape)]
        view = np.broadcast_to(draw(rng, dtype, tuple(src)), shape)
    elif mode.startswith("np_"):  # NumPy style: size-1 dims, fewer leading dims
        src = {"np_lead": shape[1:], "np_col": shape[:-1] + (1,),
               "np_row": (1,) * (nd - 1) + shape[-1:]}[mode]
        view = draw(rng, dtype, src)
    else:
        view = _place(draw(rng, dtype, shape), mode)[0]
    return view, np.broadcast_to(np.array(view), shape)


def build(rng, op: Op, dtype: DType, lay: Layout):
    shape = lay.shape
    views, logical = [], []
    for k in range(op.arity):
        v, lg = build_input(rng, op.input_dtype(k, dtype), shape, lay.mode(k))
        views.append(v)
        logical.append(lg)
    if lay.inplace is not None:
        out, buf, covered = views[lay.inplace], None, None
    else:
        out, buf, covered = _place(canary_array(shape, dtype), lay.out)
    return out, views, reference(op, dtype, logical), buf, covered


def run_descriptor(handle, op: Op, out, ins, *, addresses=False):
    """create + calculate through the public descriptor API (buffers as arrays or addresses)."""
    descs = [TensorDescriptor.from_array(x) for x in (out, *ins)]
    create = op.create if isinstance(op, Op) else op.create_descriptor
    with create(handle, *descs) as d:
        assert d.workspace_size == 0
        if addresses:
            d.calculate(None, out.ctypes.data, *[x.ctypes.data for x in ins])
        else:
            d.calculate(None, out, *ins)
        return d


def _cases():
    """Every layout for the ``full`` dtypes (NumPy arrays: the compiled fast path, and the
    functional front end) and the ``addr`` dtypes (raw addresses; the reduced set for the
    `reduced` operators); contiguous and in-place for every dtype in ``dtypes`` (NumPy arrays,
    raw addresses for the `reduced` operators); padded for the ``padded`` dtypes. Each new NumPy
    array signature costs a compile of the checked launcher (~0.3 s), the raw-address path only
    compiles the kernel itself."""
    for op in OPS:
        every, reduced = layouts(op), reduced_layouts(op)
        basic = {"contiguous", min(n for n in reduced if n.startswith("inplace"))}
        for dt in dict.fromkeys(op.dtypes + op.padded + op.full + op.addr):
            for lay in every:
                if dt in op.full:
                    via = "arrays"
                elif dt in op.addr and (not op.reduced or lay.name in reduced):
                    via = "addresses"
                elif dt in op.dtypes and lay.name in basic:
                    fast = not op.reduced and (op.fast is None or dt in op.fast)
                    via = "arrays" if fast else "addresses"
                elif dt in op.padded and lay.name == "padded":
                    via = "addresses"
                else:
                    continue
                yield pytest.param(op, dt, lay, via,
                                   id=f"{op.name}-{dt.short_name}-{lay.name}-{via}")


@pytest.mark.parametrize("op, dtype, lay, via", list(_cases()))
def test_operator(handle, op, dtype, lay, via):
    rng = np.random.default_rng(zlib.crc32(f"{op.name}-{dtype.short_name}-{lay.name}".encode()))
    out, ins, want, buf, covered = build(rng, op, dtype, lay)
    run_descriptor(handle, op, out, ins, addresses=via == "addresses")
    assert_exact(out, want)
    if buf is not None:
        assert_canary(buf, covered)
    if lay.inplace is None and via == "arrays":  # the functional front end on the same layout
        out2, buf2, covered2 = _place(canary_array(lay.shape, dtype), lay.out)
        res = op.spec(*ins, out=out2)
        assert res is out2
        assert_exact(out2, want)
        assert_canary(buf2, covered2)


# ---------------------------------------------------------------------------------------------
# Promised values, spelled out (2-D C-contiguous arrays: the signature test_operator compiled)
# ---------------------------------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")
CLIP_ROWS = [  # x, min, max, expected = minimum(maximum(x, min), max)
    (0.5, 0.0, 1.0, 0.5), (-3.0, 0.0, 1.0, 0.0), (3.0, 0.0, 1.0, 1.0),
    (NAN, 0.0, 1.0, NAN), (0.5, NAN, 1.0, NAN), (0.5, 0.0, NAN, NAN),
    (5.0, 3.0, 1.0, 1.0), (-5.0, 3.0, 1.0, 1.0), (2.0, 3.0, 1.0, 1.0),  # min > max gives max
    (NAN, 3.0, 1.0, NAN), (INF, 0.0, 1.0, 1.0), (-INF, 0.0, 1.0, 0.0),
    (2.0, -INF, INF, 2.0), (INF, -INF, INF, INF), (0.0, 0.0, 0.0, 0.0),
]


def call(name: str, *arrays) -> np.ndarray:
    """The operator through create + calculate with raw addresses (no launcher compile)."""
    h = infiniop.create_handle("cpu")
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    out = canary_array(shape, TensorDescriptor.from_array(arrays[-1]).dtype)
    run_descriptor(h, OP[name], out, list(arrays), addresses=True)
    return out


def row(values, dtype: DType) -> np.ndarray:
    """A (1, n) C-contiguous array."""
    return np.array(values, dtype=np.float64 if dtype.is_float else object).astype(
        dtype.numpy).reshape(1, -1)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_clip_nan_and_min_above_max(handle, dtype):
    x, lo, hi, want = (row(c, dtype) for c in zip(*CLIP_ROWS))
    assert_exact(call("clip", x, lo, hi), want)
    above = np.where(np.isnan(x.astype(np.float32)), x, dtype.numpy.type(1.0))  # min 3 > max 1
    # Python scalar bounds in the functional form
    assert_exact(infiniop.clip(x, 3.0, 1.0), above)
    # InfiniCore form: min/max one-element buffers described with all-zero strides
    d = TensorDescriptor(dtype, x.shape)
    z = TensorDescriptor(dtype, x.shape, (0, 0))
    y = canary_array(x.shape, dtype)
    lo1, hi1 = np.array([3.0], dtype.numpy), np.array([1.0], dtype.numpy)
    with infiniop.create_clip_descriptor(handle, d, d, z, z) as desc:
        desc.calculate(None, y.ctypes.data, x.ctypes.data, lo1.ctypes.data, hi1.ctypes.data)
    assert_exact(y, above)


def test_signed_zero_follows_numpy():
    # With equal operands NumPy's maximum/minimum return the second one; clip follows.
    x = row([-0.0, 0.0, -0.0, 0.0], F32)
    lo = row([0.0, -0.0, -0.0, 0.0], F32)
    assert_exact(infiniop.clip(x, lo, lo), _clip(x, lo, lo))
    assert_exact(infiniop.clip(x, lo, lo), lo)
    assert_exact(call("maximum", x.astype(np.float16), lo.astype(np.float16)),
                 np.maximum(x, lo).astype(np.float16))
    assert_exact(call("minimum", x, lo), np.minimum(x, lo))
    assert_exact(call("relu", row([-0.0, 0.0], F64)), row([0.0, 0.0], F64))


@pytest.mark.parametrize("name, dtype", [("maximum", F16), ("maximum", F64),
                                         ("minimum", BF16), ("minimum", F32)], ids=str)
def test_extrema_propagate_nan(name, dtype):
    a = row([NAN, 1.0, NAN, -INF, 2.0, INF], dtype)
    b = row([1.0, NAN, NAN, NAN, 3.0, -INF], dtype)
    r = call(name, a, b)
    assert np.isnan(r[0, :4].astype(np.float32)).all()
    assert r[0, 4:].astype(np.float64).tolist() == ([3.0, INF] if name == "maximum"
                                                    else [2.0, -INF])


@pytest.mark.parametrize("name, dtype, a, b, want", [
    ("add", I8, 127, 1, -128), ("add", U8, 255, 1, 0), ("sub", U8, 0, 1, 255),
    ("sub", I8, -128, 1, 127), ("mul", I16, 256, 256, 0), ("mul", I32, 65536, 65536, 0),
    ("mul", I32, 46341, 46341, -2147479015), ("add", I64, 2**63 - 1, 1, -2**63),
    ("sub", U64, 0, 1, 2**64 - 1), ("mul", U64, 2**63, 2, 0), ("mul", U32, 2**31 + 1, 3, 2**31 + 3),
    ("add", U16, 65535, 65535, 65534), ("sub", I16, -32768, 32767, 1),
    ("mul", I64, 2**62 + 3, 4, 12), ("mul", U64, 2**64 - 1, 2**64 - 1, 1),
    ("maximum", I32, -2**31, 2**31 - 1, 2**31 - 1), ("minimum", I64, -2**63, 2**63 - 1, -2**63),
    ("minimum", U32, 2**32 - 1, 0, 0), ("maximum", U8, 255, 0, 255),
])
def test_integer_arithmetic_wraps_like_numpy(name, dtype, a, b, want):
    x, y = row([a, b], dtype), row([b, a], dtype)
    r = getattr(infiniop, name)(x, y) if name in ("add", "sub", "mul") else call(name, x, y)
    assert r.dtype == dtype.numpy and int(r[0, 0]) == want
    npname = {"add": "add", "sub": "subtract", "mul": "multiply"}.get(name, name)
    assert_exact(r, getattr(np, npname)(x, y))


@pytest.mark.parametrize("dtype", [I8, I16, I32, I64, U8, U64], ids=str)
def test_clip_integer_extremes(dtype):
    ii = np.iinfo(dtype.numpy)
    x = row([ii.min, ii.max, 0, ii.min, ii.max], dtype)
    lo = row([ii.min + 1, ii.min, ii.max, ii.max, 5], dtype)
    hi = row([ii.max, ii.max - 1, ii.min, ii.min, 3], dtype)  # the last three: min > max
    assert_exact(call("clip", x, lo, hi), row([ii.min + 1, ii.max - 1, ii.min, ii.min, 3], dtype))


@pytest.mark.parametrize("name, dtype", [("neg", I8), ("abs", I8), ("abs", I64),
                                         ("neg", U32), ("neg", U64)], ids=str)
def test_neg_abs_wrap(name, dtype):
    ii = np.iinfo(dtype.numpy)
    x = row([ii.min, ii.min + 1, 0, 1, ii.max], dtype)
    r = call(name, x)
    assert_exact(r, getattr(np, {"neg": "negative"}.get(name, name))(x))
    if dtype.is_signed_int:
        assert int(r[0, 0]) == ii.min  # -(-128) wraps to -128, like NumPy


def test_fp16_rounds_once_to_nearest_even():
    h = np.float16
    a = row([2048, 2048, 65504, 65504, 1, 0.1, -65504], F16)
    b = row([1, 3, 15, 16, 2.0**-11, 0.2, -16], F16)
    r = infiniop.add(a, b)
    # 2049 -> 2048 and 2051 -> 2052 (ties to even), 65519 -> 65504, 65520 -> inf (tie, even),
    # 1 + 2**-11 -> 1 (tie); truncation would give 2050 and 65504 instead
    assert r[0, :5].tolist() == [2048, 2052, 65504, INF, 1] and r[0, 6] == -INF
    assert_exact(r, (a.astype(np.float32) + b.astype(np.float32)).astype(h))
    third = row([1 / 3] * 3, F16)
    assert_exact(infiniop.mul(row([3.0] * 3, F16), third),
                 (np.float32(3.0) * third.astype(np.float32)).astype(h))


def test_bf16_rounds_once_to_nearest_even():
    bf = ml_dtypes.bfloat16
    a = row([1.0, 1.0, 1.0, 1.0, 3.3e38, NAN, -NAN, INF], BF16)
    b = row([2.0**-8, 3 * 2.0**-8, -(2.0**-9), 2.0**-7, 3.3e38, 1.0, 1.0, INF], BF16)
    r = infiniop.sub(a, -b.astype(np.float32).astype(bf))  # a + b through sub
    want = (a.astype(np.float32) + b.astype(np.float32)).astype(bf)
    assert_exact(r, want)
    f = r.astype(np.float32)[0]
    assert f[:3].tolist() == [1.0, 1.0 + 2.0**-6, 1.0]  # ties to even
    assert f[4] == INF and np.isnan(f[5:7]).all() and f[7] == INF


def test_bf16_outputs_round_without_the_nan_select_only_when_nans_keep_low_bits_zero():
    """bf16 outputs of bodies over bf16 operands with NaN-keeping operations only (CPU kernels'
    ``nan_low_bits_zero``) round without f32_to_bf16's NaN select, with its bits: quiet and
    signalling NaNs and infinities through sub, mul, maximum, minimum and a division, every
    result as float32 arithmetic rounded once. A float32 operand keeps the select: its NaN
    0x7FFFFFFF (-0 without it) stays NaN."""
    from infiniop.backends.cpu import elementwise_kernels as ek

    bf = ml_dtypes.bfloat16
    specials = np.array([0x7F81, 0xFFC1, 0x7FFF, 0x7F80, 0xFF80, 0x0000, 0x8000, 0x3F80],
                        np.uint16).view(bf)
    rng = np.random.default_rng(5)
    a = np.concatenate([np.repeat(specials, 8), rng.standard_normal(4000).astype(bf)])
    b = np.concatenate([np.tile(specials, 8), rng.standard_normal(4000).astype(bf)])
    body = infiniop.elementwise("nan_keeping_bf16", ("x", "y"), [DType.BF16],
                                lambda m, x, y: m.maximum(x - y, m.minimum(x * y, x / (y + 2.0))))
    prog = body.program(body.signatures[0])
    assert ek.nan_low_bits_zero(prog)
    assert "f32_to_bf16_finite(" in ek.source(prog, "flat", "111")
    got = body(a, b)
    fa, fb = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(all="ignore"):
        d, p, q = fa - fb, fa * fb, fa / (fb + np.float32(2.0))
    lo = np.where(np.isnan(p) | (p < q), p, q)
    want = np.where(np.isnan(d) | (d > lo), d, lo)
    nan = np.isnan(want)
    assert (np.isnan(got.astype(np.float32)) == nan).all() and nan.sum() > 40
    assert_exact(got[~nan], want[~nan].astype(bf))
    assert ((got.view(np.uint16)[nan] & 0x7FC0) == 0x7FC0).all()  # quiet, as the select makes
    mixed = infiniop.elementwise("nan_keeping_f32_in", ("x", "y"), [DType.BF16],
                                 lambda m, x, y: x * y, signatures=["f32, bf16 -> bf16"])
    mprog = mixed.program(mixed.signatures[0])
    assert not ek.nan_low_bits_zero(mprog)
    x = np.array([0x7FFFFFFF, 0xFFFF8001, 0x3F800000], np.uint32).view(np.float32)
    got = mixed(x, np.ones(3, bf))
    assert np.isnan(got[:2].astype(np.float32)).all() and got[2] == 1
    for name in ("silu", "hardtanh", "sub"):  # bit steps; a scalar parameter; neither
        spec = REGISTRY[name]
        prog = spec.program(next(s for s in spec.signatures if s.dtypes[0] is DType.BF16))
        assert ek.nan_low_bits_zero(prog) is (name == "sub")


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_special_values(dtype):
    """Every pair of NaN, +-inf, +-0, +-1 through every operator tested on this dtype."""
    v = np.array([NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0], np.float64)
    a = np.repeat(v, v.size).reshape(v.size, v.size).astype(dtype.numpy)
    b = np.tile(v, v.size).reshape(v.size, v.size).astype(dtype.numpy)
    c = np.arange(a.size).reshape(a.shape) % 3 == 0
    ran = 0
    for op in OPS:
        if dtype not in op.dtypes:
            continue
        ran += 1
        args = {1: (a,), 2: (a, b), 3: (c, a, b) if op.name == "where" else (a, b, b.T.copy())}
        args = args[op.arity]
        assert_exact(call(op.name, *args), reference(op, dtype, args))
    assert ran >= 6


# ---------------------------------------------------------------------------------------------
# Layout invariance (hypothesis): any strided call == the contiguous call, bit for bit
# ---------------------------------------------------------------------------------------------


@st.composite
def random_layout(draw_, arity):
    shape = tuple(draw_(st.lists(st.integers(1, 6), min_size=0, max_size=3)))
    nd = len(shape)

    def dense():
        return {"perm": tuple(draw_(st.permutations(range(nd)))),
                "steps": tuple(draw_(st.lists(st.integers(1, 3), min_size=nd, max_size=nd))),
                "pad": draw_(st.integers(0, 2)), "flip": draw_(st.booleans())}

    ins = []
    for k in range(arity):  # input 0 keeps the full shape: the output shape is `shape`
        kind = draw_(st.sampled_from(["dense", "zero"] + (["numpy"] if k else [])))
        mask = tuple(draw_(st.lists(st.booleans(), min_size=nd, max_size=nd)))
        lead = draw_(st.integers(0, nd))
        ins.append((kind, dense(), mask, lead))
    return shape, ins, dense(), draw_(st.sampled_from([None] + list(range(arity))))


def _build_random(rng, op, dtype, layout):
    shape, ins_spec, out_kw, inplace = layout
    views, logical = [], []
    for k, (kind, kw, mask, lead) in enumerate(ins_spec):
        dt = op.input_dtype(k, dtype)
        small = tuple(1 if m else n for m, n in zip(mask, shape))
        if kind == "zero":  # InfiniCore style
            v = np.broadcast_to(draw(rng, dt, small), shape)
        elif kind == "numpy":  # size-1 dims and `lead` missing leading dims, placed strided
            kw = {"perm": [p - lead for p in kw["perm"] if p >= lead], "steps": kw["steps"][lead:],
                  "pad": kw["pad"], "flip": kw["flip"]}
            v = place(draw(rng, dt, small[lead:]), **kw)[0]
        else:
            v = place(draw(rng, dt, shape), **kw)[0]
        views.append(v)
        logical.append(np.broadcast_to(np.array(v), shape))
    if inplace is not None and ins_spec[inplace][0] == "dense" and op.input_dtype(inplace, dtype) \
            is dtype:
        return views[inplace], views, logical, None, None
    out, buf, covered = place(canary_array(shape, dtype), **out_kw)
    return out, views, logical, buf, covered


@pytest.mark.parametrize("op, dtype, via", [(OP["sub"], F16, "addresses"),
                                          (OP["clip"], F32, "addresses")], ids=str)
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_layouts_match_contiguous(handle, op, dtype, via, data):
    layout = data.draw(random_layout(op.arity))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    out, views, logical, buf, covered = _build_random(rng, op, dtype, layout)
    contiguous = [np.array(x, order="C") for x in logical]
    want = canary_array(out.shape, dtype)
    run_descriptor(handle, op, want, contiguous, addresses=via == "addresses")
    run_descriptor(handle, op, out, views, addresses=via == "addresses")
    assert_exact(out, want)  # bit-identical to the contiguous call
    assert_exact(out, reference(op, dtype, logical))
    if buf is not None:
        assert_canary(buf, covered)


# ---------------------------------------------------------------------------------------------
# Buffer kinds: NumPy fast path, torch, raw addresses, DLPack-only and array-interface objects
# ---------------------------------------------------------------------------------------------


class DLPackOnly:
    """Exposes nothing but the DLPack protocol."""

    def __init__(self, x):
        self._x = x

    def __dlpack__(self, **kw):
        return self._x.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._x.__dlpack_device__()


class ArrayInterfaceOnly:
    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


def _torch(a: np.ndarray):
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


@pytest.mark.parametrize("dtype", [F32, BF16, F16, I64], ids=str)
def test_torch_tensors(handle, dtype):
    rng = np.random.default_rng(1)
    a, b = draw(rng, dtype, (6, 5)), draw(rng, dtype, (5,))
    want = reference(OP["sub"], dtype, [a, np.broadcast_to(b, (6, 5))])
    ta, tb = _torch(a), _torch(b)
    # functional: returns a torch tensor of the right dtype
    r = infiniop.sub(ta, tb)
    assert isinstance(r, torch.Tensor) and r.dtype == ta.dtype and tuple(r.shape) == (6, 5)
    assert_exact(r, want)
    # descriptor: transposed torch views, an expanded (0-stride) input, a strided output
    tt = _torch(np.ascontiguousarray(a.T)).t()
    te = tb.expand(6, 5)
    out = _torch(canary_array((6, 10), dtype))[:, ::2]
    run_descriptor(handle, OP["sub"], out, [tt, te])
    assert_exact(out, want)
    # mixed: NumPy output, torch inputs
    out_np = canary_array((6, 5), dtype)
    infiniop.sub(ta, b, out=out_np)
    assert_exact(out_np, want)
    # torch out=, numpy inputs
    t_out = _torch(canary_array((6, 5), dtype))
    assert infiniop.sub(a, b, out=t_out) is t_out
    assert_exact(t_out, want)


def test_torch_clip_scalars_bf16():
    x = torch.tensor([-2.0, 0.25, 3.0, float("nan")], dtype=torch.bfloat16)
    r = infiniop.clip(x, -1.0, 1.0)
    assert isinstance(r, torch.Tensor) and r.dtype == torch.bfloat16
    assert_exact(r, np.array([-1.0, 0.25, 1.0, NAN], np.float32).astype(ml_dtypes.bfloat16))


@pytest.mark.parametrize("dtype", [F16], ids=str)
def test_raw_addresses(handle, dtype):
    rng = np.random.default_rng(2)
    a = draw(rng, dtype, (4, 9))
    b = draw(rng, dtype, (9, 4)).T  # transposed
    out, buf, covered = place(canary_array((4, 9), dtype), flip=True, pad=2)  # negative strides
    want = reference(OP["add"], dtype, [a, b])
    descs = [TensorDescriptor.from_array(x) for x in (out, a, b)]
    with infiniop.create_add_descriptor(handle, *descs) as d:
        d.calculate(None, out.ctypes.data, a.ctypes.data, b.ctypes.data)
    assert_exact(out, want)
    assert_canary(buf, covered)
    # in-place through addresses (the input described exactly like the output)
    with infiniop.create_add_descriptor(handle, descs[0], descs[0], descs[2]) as d:
        d.calculate(None, out.ctypes.data, out.ctypes.data, b.ctypes.data)
    assert_exact(out, reference(OP["add"], dtype, [want, b]))


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_dlpack_and_array_interface_objects(handle, dtype):
    rng = np.random.default_rng(3)
    x, lo, hi = (draw(rng, dtype, (3, 8)) for _ in range(3))
    want = reference(OP["clip"], dtype, [x, lo, hi])
    out = _torch(canary_array((3, 8), dtype))
    descs = [TensorDescriptor(dtype, (3, 8))] * 4
    with infiniop.create_clip_descriptor(handle, *descs) as d:
        ins = [DLPackOnly(_torch(x)), DLPackOnly(lo) if dtype is F32 else _torch(lo),
               ArrayInterfaceOnly(hi) if dtype is F32 else DLPackOnly(_torch(hi))]
        d.calculate(None, DLPackOnly(out), *ins)
    assert_exact(out, want)
    if dtype is F32:  # the functional form reads them too
        assert_exact(infiniop.clip(DLPackOnly(x), lo, ArrayInterfaceOnly(hi)), want)


def test_readonly_inputs_are_fine():
    a = np.arange(6, dtype=np.float32)
    a.setflags(write=False)
    assert_exact(infiniop.mul(a, a), a * a)


# ---------------------------------------------------------------------------------------------
# Large calls: parallel threshold, non-temporal stores, misaligned outputs, tiles
# ---------------------------------------------------------------------------------------------

PAR = runtime.PARALLEL_THRESHOLD
NT = 4 << 20  # the large tests pin the threshold (its default follows the CPU's cache)


@pytest.fixture
def nt_pinned(monkeypatch):
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", NT)


def test_streaming_threshold_follows_the_last_level_cache(monkeypatch):
    """Non-temporal stores from half the last-level cache in bytes moved (at most 16 MiB); each
    operand counts its own bytes once (a broadcast one its own elements)."""
    from infiniop.backends.cpu import cpuinfo

    for llc, want in [(32 << 20, 16 << 20), (16 << 20, 8 << 20), (105 << 20, 16 << 20),
                      (None, 8 << 20)]:
        monkeypatch.setattr(cpuinfo, "last_level_cache_bytes", lambda v=llc: v)
        assert runtime._default_nt_threshold() == want
    monkeypatch.undo()
    if "INFINIOP_NT_THRESHOLD_BYTES" not in os.environ:
        assert runtime.NT_THRESHOLD_BYTES == runtime._default_nt_threshold()
    # sub (1000, 300) float32 - a (1000, 1) column, written as float16
    shape, strides = (1000, 300), [(300, 1), (300, 1), (1, 0)]
    assert runtime.moved_bytes(shape, strides, [2, 4, 4]) == 300_000 * 6 + 4000
    assert runtime.moved_bytes((0, 300), strides, [2, 4, 4]) == 0
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 300_000 * 6 + 4000)
    assert runtime.streams(runtime.moved_bytes(shape, strides, [2, 4, 4]))
    assert not runtime.streams(runtime.moved_bytes(shape, strides, [2, 4, 2]))
    half = runtime.NT_THRESHOLD_BYTES // 2  # a caller's scale: strided copies stream sooner
    assert runtime.streams(half, 0.5) and not runtime.streams(half - 1, 0.5)


def _offset_out(n, dtype: DType, offset: int):
    """A contiguous output whose first byte is ``offset`` bytes past a 64-byte boundary, inside
    a canary-filled buffer (returns the output, the buffer and the output's start in it)."""
    isz = dtype.itemsize
    raw = np.full(n * isz + 192, CANARY, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    out = raw[start:start + n * isz].view(dtype.numpy)
    assert out.ctypes.data % 64 == offset
    return out, raw, start


def _check_raw(raw, start, nbytes):
    assert (raw[:start] == CANARY).all() and (raw[start + nbytes:] == CANARY).all()


@pytest.mark.parametrize("dtype, n, offsets", [
    (F32, PAR + 37, (0,)),  # parallel, below the NT threshold
    (F32, NT // 4 + 37, (0, 4, 36, 1)),  # NT stores: aligned, peeled heads, odd (unaligned) address
    (F16, NT // 2 + 11, (2,)),
], ids=["f32-parallel", "f32-nt", "f16-nt"])
def test_large_flat(handle, nt_pinned, dtype, n, offsets):
    assert n >= PAR
    rng = np.random.default_rng(4)
    a, b = draw(rng, dtype, (n,)), draw(rng, dtype, (n,))
    want = reference(OP["sub"], dtype, [a, b])
    for off in offsets:
        out, raw, start = _offset_out(n, dtype, off)
        if off == 36:  # through addresses too
            d = TensorDescriptor(dtype, (n,))
            with infiniop.create_sub_descriptor(handle, d, d, d) as desc:
                desc.calculate(None, out.ctypes.data, a.ctypes.data, b.ctypes.data)
        else:
            infiniop.sub(a, b, out=out)
        assert_exact(out, want)
        _check_raw(raw, start, n * dtype.itemsize)
    if dtype is F32 and n * 4 >= NT:  # in-place with a broadcast scalar at the same size
        c = a.copy()
        infiniop.sub(c, b[:1], out=c)
        assert_exact(c, reference(OP["sub"], dtype, [a, np.broadcast_to(b[:1], (n,))]))


def test_large_rows_broadcast_and_chunks(handle, nt_pinned):
    """Strided kind, parallel, NT rows: many rows with a broadcast row input; then two long
    rows split into chunks (each chunk starts misaligned)."""
    rng = np.random.default_rng(5)
    for shape in [(1100, 1000), (2, NT // 8 + 4096 + 3)]:
        assert prod(shape) >= PAR and prod(shape) * 4 >= NT
        a, b = draw(rng, F32, shape), draw(rng, F32, shape[1:])
        want = reference(OP["add"], F32, [a, np.broadcast_to(b, shape)])
        out, raw, start = _offset_out(prod(shape), F32, 8)
        out = out.reshape(shape)
        infiniop.add(a, b, out=out)
        assert_exact(out, want)
        _check_raw(raw, start, out.nbytes)


def test_large_transposed_and_strided_output(handle):
    rng = np.random.default_rng(6)
    shape = (700, 401)  # tiles do not divide either extent
    assert prod(shape) >= PAR
    a = draw(rng, F32, shape[::-1]).T
    b = draw(rng, F32, shape)
    want = reference(OP["mul"], F32, [a, b])
    out = canary_array(shape, F32)
    run_descriptor(handle, OP["mul"], out, [a, b])
    assert_exact(out, want)
    # a strided output (every other column) over the parallel threshold, via addresses
    big, buf, covered = place(canary_array(shape, F32), steps=(1, 2))
    run_descriptor(handle, OP["mul"], big, [a, b], addresses=True)
    assert_exact(big, want)
    assert_canary(buf, covered)


def _desc_call(handle, name, out, ins):
    descs = [TensorDescriptor.from_array(x) for x in (out, *ins)]
    with getattr(infiniop, f"create_{name}_descriptor")(handle, *descs) as d:
        d.calculate(None, out, *ins)


def test_forced_parallel_and_nt_on_small_sizes(handle, monkeypatch):
    """The parallel/NT kernels of the large tests (same variants, so no new compile) with the
    thresholds lowered, on the sizes where head peeling and block/chunk splitting have edge
    cases: n below, at and just past the 64-byte head, one NT block plus a tail, rows of
    1200 bytes, two long rows split into chunks, ragged tiles."""
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    rng = np.random.default_rng(9)
    for n in (1, 5, 15, 16, 17, 100, 16384 + 37):
        a, b = draw(rng, F32, (n,)), draw(rng, F32, (n,))
        want = reference(OP["sub"], F32, [a, b])
        for off in (0, 4, 60, 1):
            out, raw, start = _offset_out(n, F32, off)
            _desc_call(handle, "sub", out, [a, b])
            assert_exact(out, want)
            _check_raw(raw, start, n * 4)
    for shape in [(3, 300), (2, 20011), (5, 257)]:
        a, b = draw(rng, F32, shape), draw(rng, F32, shape[1:])
        out, raw, start = _offset_out(prod(shape), F32, 12)
        out = out.reshape(shape)
        _desc_call(handle, "add", out, [a, b])
        assert_exact(out, reference(OP["add"], F32, [a, np.broadcast_to(b, shape)]))
        _check_raw(raw, start, out.nbytes)
    for shape in [(37, 45), (1, 70), (70, 2)]:
        a, b = draw(rng, F32, shape[::-1]).T, draw(rng, F32, shape)
        out = canary_array(shape, F32)
        _desc_call(handle, "mul", out, [a, b])
        assert_exact(out, reference(OP["mul"], F32, [a, b]))


def test_bf16_pairs_read_and_written_as_words(handle):
    """A light bf16 body's plain loop runs two elements per 32-bit word of each dense operand
    (``_Gen.paired``): odd lengths (the last element alone), operands starting at an odd
    element (words at 2 mod 4 bytes), in place, a broadcast scalar, strided rows; bits as the
    reference, nothing written past the output."""
    from infiniop.backends.cpu import elementwise_kernels as ek

    sub = REGISTRY["sub"]
    prog = sub.program(next(s for s in sub.signatures if s.dtypes[0] is BF16))
    assert "wd1 = u1[i]" in ek.source(prog, "flat", "111")
    rng = np.random.default_rng(12)
    for n in (1, 2, 3, 17, 64, 1001):
        a0, b0 = draw(rng, BF16, (n + 1,)), draw(rng, BF16, (n + 1,))
        for sa, sb, off in ((0, 0, 0), (1, 0, 2), (0, 1, 6), (1, 1, 0)):
            a, b = a0[sa:sa + n], b0[sb:sb + n]
            for name, ins in (("sub", [a, b]), ("neg", [a]), ("clip", [a, b0[:1], b0[-1:]])):
                want = reference(OP[name], BF16, [np.broadcast_to(x, (n,)) for x in ins])
                out, raw, start = _offset_out(n, BF16, off)
                _desc_call(handle, name, out, ins)
                assert_exact(out, want)
                _check_raw(raw, start, 2 * n)
        x = a0[1:].copy()
        want = reference(OP["sub"], BF16, [x, b0[:n]])
        _desc_call(handle, "sub", x, [x, b0[:n]])
        assert_exact(x, want)
    # rows of the strided kind: a broadcast row or column, rows starting at odd elements
    a = draw(rng, BF16, (9, 36))[:, 1:]
    for b in (draw(rng, BF16, (35,)), draw(rng, BF16, (9, 1)), draw(rng, BF16, (9, 37))[:, 2:]):
        want = reference(OP["sub"], BF16, [a, np.broadcast_to(b, a.shape)])
        out = canary_array(a.shape, BF16)
        _desc_call(handle, "sub", out, [a, b])
        assert_exact(out, want)


def test_forced_tiled_staged_inputs(handle, monkeypatch):
    """The tiled kind's staged inputs (transposed through a scratch tile in registers) with
    the thresholds lowered: full tiles stored non-temporally (64-byte aligned rows of whole
    lines, packed for fp16), ragged edges, few bands split into column blocks, two staged
    inputs over a batch dim, a staged input read backwards along the output's dense dim, an
    in-place output."""
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    rng = np.random.default_rng(11)
    from infiniop.backends.cpu import elementwise_kernels as ek

    # this CPU's tiles (R x C, elementwise_kernels.tile_shape): ragged and whole bands and
    # column blocks
    cases = []
    for dtype in (F32, F16, I8):
        R, C = ek.tile_shape([dtype.itemsize] * 3, [1])
        cases += [(dtype, (R // 2 + 2, C + C // 2)), (dtype, (2 * R + 3, 2 * C)),
                  (dtype, (37, 3 * C + 5))]
    for dtype, shape in cases:
        a, b = draw(rng, dtype, shape[::-1]).T, draw(rng, dtype, shape)
        out, raw, start = _offset_out(prod(shape), dtype, 0)
        out = out.reshape(shape)
        _desc_call(handle, "sub", out, [a, b])
        assert_exact(out, reference(OP["sub"], dtype, [a, b]))
        _check_raw(raw, start, out.nbytes)
    a = draw(rng, F32, (3, 90, 70)).transpose(0, 2, 1)
    b = draw(rng, F32, (3, 90, 70)).transpose(0, 2, 1)[:, :, ::-1]
    out = canary_array(a.shape, F32)
    _desc_call(handle, "add", out, [a, b])
    assert_exact(out, reference(OP["add"], F32, [a, b]))
    a, b = draw(rng, F64, (50, 40)), draw(rng, F64, (40, 50))
    want = reference(OP["mul"], F64, [a, b.T])
    _desc_call(handle, "mul", a, [a, b.T])
    assert_exact(a, want)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=["f32", "f16", "bf16"])
def test_forced_nt_rows_stream_whole_lines_only(handle, monkeypatch, dtype):
    """Streamed rows of the strided kind (a row broadcast, ``x - b[:, None]``) store their whole
    cache lines non-temporally and the row's last, partial line with ordinary stores: a line
    written partly by non-temporal stores and partly by the next row's head cost 2.5x into
    NumPy's 16-byte aligned outputs (elementwise_kernels' ``strided``). The loop as generated,
    and the bits where rows leave partial lines (odd lengths, outputs 16 bytes into a line)."""
    from infiniop.backends.cpu import elementwise_kernels as ek
    from infiniop.elementwise.spec import REGISTRY

    spec = REGISTRY["sub"]
    prog = spec.program(next(s for s in spec.signatures if s.dtypes[0] is dtype))
    line = 64 // dtype.itemsize
    src = ek.source(prog, "strided", "110")
    assert f"lines = (m - head) // {line} * {line}" in src
    assert "for i in range(lines, m - head):" in src
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    rng = np.random.default_rng(14)
    for shape in [(37, 1030), (5, 4099)]:
        a, b = draw(rng, dtype, shape), draw(rng, dtype, (shape[0], 1))
        want = reference(OP["sub"], dtype, [a, np.broadcast_to(b, shape)])
        for off in (0, 16):
            out, raw, start = _offset_out(prod(shape), dtype, off)
            out = out.reshape(shape)
            _desc_call(handle, "sub", out, [a, b])
            assert_exact(out, want)
            _check_raw(raw, start, out.nbytes)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=["f32", "f16", "bf16"])
def test_forced_nt_in_place_is_staged(handle, monkeypatch, dtype):
    """A streamed call that updates an operand in place computes each chunk into a stack chunk
    and streams it from there (as where 4K aliasing threatens): streamed straight from the
    compute loop, its non-temporal stores hit lines the loop reads next and LLVM's overlap
    check kept the loop scalar (sub float16 (4096, 4096) in place 722 ms, 1.5 out of place).
    The condition as generated (flat and strided kinds); the bits of in-place calls, flat and
    row-broadcast, against out-of-place ones."""
    from infiniop.backends.cpu import elementwise_kernels as ek
    from infiniop.elementwise.spec import REGISTRY

    spec = REGISTRY["sub"]
    prog = spec.program(next(s for s in spec.signatures if s.dtypes[0] is dtype))
    for kind, pattern in (("flat", "111"), ("strided", "110")):
        assert "pointer_address(q0) == pointer_address(q1)" in ek.source(prog, kind, pattern)
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    rng = np.random.default_rng(15)
    for shape, bshape in [((65536 + 37,), (65536 + 37,)), ((37, 1030), (37, 1)), ((3, 40000), (3, 1))]:
        a, b = draw(rng, dtype, shape), draw(rng, dtype, bshape)
        want = reference(OP["sub"], dtype, [a, np.broadcast_to(b, shape)])
        x = a.copy()
        _desc_call(handle, "sub", x, [x, b])
        assert_exact(x, want)


@pytest.mark.parametrize("dtype", [F32, F16, BF16, I8], ids=["f32", "f16", "bf16", "i8"])
def test_in_place_below_streaming_is_staged(handle, dtype):
    """Calls that update an operand in place below the streaming size go through the stack
    chunk with ordinary stores (``plain_loop``): with one array behind two pointers LLVM ran
    the scalar loop (sub float16 64K in place 0.21 ms, 0.01 out of place). The condition as
    generated; in-place bits against out of place: flat light and heavy bodies (sub, silu),
    odd lengths (a word's tail), a row broadcast (strided), the second operand in place."""
    from infiniop.backends.cpu import elementwise_kernels as ek
    from infiniop.elementwise.spec import REGISTRY

    spec = REGISTRY["sub"]
    prog = spec.program(next(s for s in spec.signatures if s.dtypes[0] is dtype))
    assert "if pointer_address(q0) == pointer_address(q1) or" in ek.source(prog, "flat", "111")
    rng = np.random.default_rng(18)
    for shape, bshape in [((4099,), (4099,)), ((33, 517), (33, 1)), ((70001,), (70001,))]:
        a, b = draw(rng, dtype, shape), draw(rng, dtype, bshape)
        want = infiniop.sub(a, b)
        x = a.copy()
        assert_exact(infiniop.sub(x, b, out=x), want)
        if bshape == shape:
            y = b.copy()
            assert_exact(infiniop.sub(a, y, out=y), want)
        if dtype is not I8:
            x = a.copy()
            assert_exact(infiniop.silu(x, out=x), infiniop.silu(a))


def test_forced_nt_narrow_outputs(handle, monkeypatch):
    """Outputs narrower than 4 bytes are streamed as packed 32-bit words (then a tail of
    ordinary stores): fp16, int8 and bool outputs, two outputs at once (swap), rows with an odd
    length and split into chunks; heads peeled to 64 bytes, odd addresses, outputs whose
    alignments differ (not streamed), each over one full NT block."""
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    rng = np.random.default_rng(10)
    for dtype, n, offsets in [(F16, 5, (2,)), (F16, 32768 + 61, (0, 2, 62, 1)),
                              (I8, 65536 + 100, (0, 1, 63))]:
        a, b = draw(rng, dtype, (n,)), draw(rng, dtype, (n,))
        want = reference(OP["sub"], dtype, [a, b])
        for off in offsets:
            out, raw, start = _offset_out(n, dtype, off)
            _desc_call(handle, "sub", out, [a, b])
            assert_exact(out, want)
            _check_raw(raw, start, n * dtype.itemsize)
    n = 65536 + 100
    a = draw(rng, F32, (n,))
    b = np.where(rng.random(n) < 0.5, a, draw(rng, F32, (n,)))
    for off in (0, 3):
        out, raw, start = _offset_out(n, DType.BOOL, off)
        _desc_call(handle, "equal", out, [a, b])
        assert_exact(out, a == b)
        _check_raw(raw, start, n)
    for shape in [(3, 701), (2, 40011)]:
        a, b = draw(rng, F16, shape), draw(rng, F16, shape[1:])
        out, raw, start = _offset_out(prod(shape), F16, 6)
        out = out.reshape(shape)
        _desc_call(handle, "sub", out, [a, b])
        assert_exact(out, reference(OP["sub"], F16, [a, np.broadcast_to(b, shape)]))
        _check_raw(raw, start, out.nbytes)
    n = 32768 + 61
    x0, y0 = draw(rng, F16, (n,)), draw(rng, F16, (n,))
    for offs in [(2, 2), (2, 4)]:
        (x, xraw, xs), (y, yraw, ys) = (_offset_out(n, F16, o) for o in offs)
        x[:], y[:] = x0, y0
        infiniop.swap(x, y)
        assert_exact(x, y0)
        assert_exact(y, x0)
        _check_raw(xraw, xs, 2 * n)
        _check_raw(yraw, ys, 2 * n)


def test_light_half_streams_stage_where_stores_would_alias(handle, monkeypatch):
    """Light fp16/bf16 bodies stream packed 32-bit words, except where an output starts 1-80
    bytes ahead of a unit-stride input mod 4096 (4K aliasing: ``aliasing_risk``), where they
    take the staged loop. Flat (neg, sub, clip with 0-stride bounds; two blocks and a tail) and
    strided rows (sub with a padded input) give the serial loop's bits at every 64-byte output
    offset in a page against inputs at 16 mod 4096, with NaN, infinities and signed zeros, and
    no byte outside the output is touched. The generated source has the switch for fp16/bf16
    outputs, not for float32 ones (stored element by element; they stage only in place)."""
    from infiniop.backends.cpu import elementwise_kernels as ek
    from infiniop.elementwise.spec import REGISTRY

    def switch_in(op, dt):
        spec = REGISTRY[op]
        prog = spec.program(next(s for s in spec.signatures if s.dtypes[0] is dt))
        ns = len(prog.slots)
        return "& 4095) <= 80" in ek.source(prog, "flat", "1" * ns)

    assert switch_in("neg", F16) and switch_in("sub", BF16) and not switch_in("sub", F32)
    assert not switch_in("silu", F16)  # math-heavy: always staged
    rng = np.random.default_rng(21)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 65504.0], np.float32)

    def page_array(shape, dtype, page_offset):
        nbytes = prod(shape) * dtype.itemsize
        raw = np.empty(nbytes + 8192, np.uint8)
        start = (-raw.ctypes.data) % 4096 + page_offset
        x = (rng.standard_normal(prod(shape)) * 3).astype(np.float32)
        x[rng.integers(0, x.size, 50)] = rng.choice(specials, 50)
        a = raw[start:start + nbytes].view(dtype.numpy).reshape(shape)
        a[...] = x.astype(dtype.numpy).reshape(shape)
        return a

    for dtype in (F16, BF16):
        n = 2 * 32768 + 37
        a, b = page_array((n,), dtype, 16), page_array((n,), dtype, 16)
        lo = np.broadcast_to(np.array(-1.0, dtype.numpy), (n,))
        hi = np.broadcast_to(np.array(1.0, dtype.numpy), (n,))
        rows = page_array((4, 2 * 2100), dtype, 16)[:, :2100]
        rb = page_array((4, 2100), dtype, 16)
        cases = [("neg", [a]), ("sub", [a, b]), ("clip", [a, lo, hi]), ("sub", [rows, rb])]
        wants = [getattr(infiniop, name)(*ins) for name, ins in cases]  # serial, plain stores
        with monkeypatch.context() as mp:
            mp.setattr(runtime, "PARALLEL_THRESHOLD", 1)
            mp.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
            for (name, ins), want in zip(cases, wants):
                for page_offset in range(0, 4096, 64):
                    raw = np.full(want.nbytes + 8192, CANARY, np.uint8)
                    start = (-raw.ctypes.data) % 4096 + page_offset
                    out = raw[start:start + want.nbytes].view(dtype.numpy).reshape(want.shape)
                    _desc_call(handle, name, out, ins)
                    assert_exact(out, want)
                    _check_raw(raw, start, out.nbytes)


def test_few_float_constants_are_named_once_per_function():
    """A body with at most NAMED_CONSTANTS distinct float constants reads them from variables
    defined through ``opaque`` where each function and each prange body starts, and names no
    literal in its loops; a body with more keeps its literals. The bits: every value table."""
    from infiniop.backends.cpu import elementwise_kernels as ek
    from infiniop.elementwise.spec import REGISTRY

    def src(op, dt):
        spec = REGISTRY[op]
        prog = spec.program(next(s for s in spec.signatures if s.dtypes[0] is dt))
        return ek.source(prog, "flat", "11")

    hardswish = src("hardswish", F16)
    kernels = [fn for fn in hardswish.split("\ndef ")[1:] if not fn.startswith("_")]
    assert len(kernels) >= 1
    for fn in kernels:
        lines = [line.strip() for line in fn.splitlines()]
        blocks = 1 + sum("in prange(" in line for line in lines)  # the function, its pranges
        defs = [line.split(" = ")[0] for line in lines
                if re.fullmatch(r"kc\d+ = opaque\(_cf32_[0-9a-f]+\)", line)]
        assert defs and len(defs) == blocks * len(set(defs)), fn
        body = [line for line in lines if re.match(r"t\d*c\d+_\d+ = ", line)]
        assert body and not any("_cf32_" in line for line in body)
        assert set(re.findall(r"\bkc\d+\b", " ".join(body))) == set(defs)
    gelu = src("gelu", F32)
    assert "kc0" not in gelu and "_cf64_" in gelu


def test_fp16_comparisons_stay_in_float32(handle):
    """fp16 inputs that a minimum/maximum compares with a constant, a parameter or a hoisted
    operand are loaded through ``canonical`` (hoisted ones through ``opaque``) so that LLVM
    keeps the comparison and the NaN test in float32 (narrowed to half, x86 without FP16 packs
    the masks through 16-bit lanes: clip float16 1.7x slower in cache); not for two streamed
    inputs, and never for other dtypes. Values: clip/hardtanh/relu/maximum float16 with NaN,
    infinities and signed zeros in inputs and bounds, against NumPy in float32 rounded once."""
    from infiniop.backends.cpu import elementwise_kernels as ek
    from infiniop.elementwise.spec import REGISTRY

    def src(op, dt, pattern):
        spec = REGISTRY[op]
        prog = spec.program(next(s for s in spec.signatures if s.dtypes[0] is dt))
        return ek.source(prog, "flat", pattern)

    clip = src("clip", F16, "1100")  # out, x streamed; bounds hoisted
    assert "canonical(f16_to_f32(" in clip and "opaque(f16_to_f32(" in clip
    assert "canonical(" not in src("maximum", F16, "111") and "opaque(" not in src("sub", F16, "111")
    assert "canonical(f16_to_f32(" in src("hardtanh", F16, "11")
    assert "canonical(" not in src("clip", F32, "1100") and "canonical(" not in src("clip", BF16, "1100")
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 65504.0, 6e-8],
                        np.float16)
    x = np.concatenate([np.repeat(specials, 11), np.tile(specials, 11),
                        np.random.default_rng(2).standard_normal(4099).astype(np.float16)])
    f32 = x.astype(np.float32)

    def nan_max(a, b):  # NaN from either side, the first one's if both
        return np.where(np.isnan(a), a, np.where(np.isnan(b), b, np.maximum(a, b)))

    def nan_min(a, b):
        return np.where(np.isnan(a), a, np.where(np.isnan(b), b, np.minimum(a, b)))

    for lo, hi in ((-1.0, 1.0), (np.nan, 1.0), (-np.inf, np.nan), (0.0, -0.0)):
        lo16, hi16 = np.float16(lo), np.float16(hi)
        got = infiniop.clip(x, np.broadcast_to(lo16, x.shape), np.broadcast_to(hi16, x.shape))
        want = nan_min(nan_max(f32, np.float32(lo16)), np.float32(hi16)).astype(np.float16)
        assert_exact(got, want)
    y = x[::-1].copy()
    assert_exact(infiniop.maximum(x, y), nan_max(f32, y.astype(np.float32)).astype(np.float16))


def test_fission_cuts_heavy_bodies_only():
    """Light bodies stay one loop; silu float64 is cut into two, handing over at most
    MAX_CROSSING non-boolean values that the first loop computes; a body whose cut would
    need more (log1p) stays one loop (LLVM stops vectorising past its runtime alias checks)."""
    from infiniop.backends.cpu import fission
    from infiniop.elementwise.expr import topo
    from infiniop.elementwise.spec import REGISTRY

    def program(op, dt):
        spec = REGISTRY[op]
        return spec.program(next(s for s in spec.signatures if s.dtypes[0] is dt))

    assert fission.split(program("sub", F32).results) is None
    assert fission.split(program("silu", F16).results) is None        # 24 nodes: light
    assert fission.split(program("log1p", F32).results) is None       # 13 values at the cut
    assert fission.split(program("silu", F32).results) is None        # one float64 quotient
    assert fission.split(program("tanh", F32).results) is None        # likewise
    results = program("silu", F64).results
    cut = fission.split(results)
    assert 1 <= len(cut) <= fission.MAX_CROSSING
    assert all(n.dtype != "bool" and n.op not in fission.LEAVES for n in cut)
    first = topo(cut)
    second = topo(results, {id(n) for n in cut})
    assert len(second) - len(cut) >= fission.MIN_NODES // 4
    assert not {id(n) for n in results} & {id(n) for n in first}


def test_fission_keeps_the_bits(handle, monkeypatch):
    """Kernels whose bodies fission.split cuts give the same bits as the same kernels generated
    as one loop (split turned off), serial (one chunk and a tail), on the pool without
    streaming stores (from two flat blocks: elementwise.parallel_threshold) and streamed
    (staged), with NaN, infinities, signed zeros and tiny values."""
    from infiniop.backends.cpu import elementwise as cpu_ew
    from infiniop.backends.cpu import fission

    rng = np.random.default_rng(21)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 88.0, -120.0],
                        np.float32)

    def data(dtype, n):
        x = (rng.standard_normal(n) * 8).astype(np.float32)
        x[rng.integers(0, n, min(n, 60))] = rng.choice(specials, min(n, 60))
        return x.astype(dtype.numpy)

    def run(name, x, nt_bytes):
        with monkeypatch.context() as mp:
            mp.setattr(runtime, "NT_THRESHOLD_BYTES", nt_bytes)
            out = np.empty_like(x)
            _desc_call(handle, name, out, [x])
            return out

    cases = [("sigmoid", F64), ("gelutanh", F64), ("silu", F64), ("log10", F64)]
    for name, dtype in cases:
        spec = infiniop.OPERATORS[name]
        prog = spec.program(next(s for s in spec.signatures if s.dtypes[0] is dtype))
        assert fission.split(prog.results), name
        pool = cpu_ew.parallel_threshold(prog, dtype.itemsize)
        assert pool < runtime.PARALLEL_THRESHOLD
        for n, nt_bytes in ((5, 1 << 50), (1500, 1 << 50), (pool + 1000, 1 << 50),
                            (pool + 1000, 64)):
            x = data(dtype, n)
            got = run(name, x, nt_bytes)
            with monkeypatch.context() as mp:
                mp.setattr(fission, "split", lambda results: None)
                want = run(name, x, nt_bytes)
            assert_exact(got, want)


def test_heavy_kernels_ask_llvm_to_interleave():
    """Generated modules of math-heavy bodies (elementwise and row) carry LOOP_INTERLEAVE, light
    ones do not; jit.loop_interleave compiles inside it and leaves LLVM's own choice after."""
    from infiniop.backends.cpu import elementwise_kernels as ek
    from infiniop.backends.cpu import jit, row_kernels
    from infiniop.elementwise.spec import REGISTRY
    from infiniop.rows import ops as row_ops

    def program(op, dt):
        spec = REGISTRY[op]
        return spec.program(next(s for s in spec.signatures if s.dtypes[0] is dt))

    def src(op, dt):
        n = len(program(op, dt).slots)
        return ek.source(program(op, dt), "flat", "1" * n)

    assert f"LOOP_INTERLEAVE = {ek.HEAVY_INTERLEAVE}" in src("log1p", F32)
    assert "LOOP_INTERLEAVE" not in src("sub", F32)
    assert ek.interleave(program("gelu", F32).results) == 2 * ek.HEAVY_INTERLEAVE  # in float64
    assert ek.interleave(program("silu", F32).results) == 2 * ek.HEAVY_INTERLEAVE
    assert ek.interleave(program("tanh", F32).results) == 2 * ek.HEAVY_INTERLEAVE
    assert ek.interleave(program("silu", F64).results) == 2 * ek.HEAVY_INTERLEAVE

    def rows(op, dt):
        return row_kernels.interleave(op.program(next(s for s in op.signatures
                                                      if s.dtypes[0] is dt)))

    assert rows(row_ops.SOFTMAX, F32) == ek.HEAVY_INTERLEAVE
    assert rows(row_ops.LAYER_NORM, BF16) == ek.HEAVY_INTERLEAVE   # bf16 row output
    assert rows(row_ops.LAYER_NORM, F32) == 0

    with jit.loop_interleave(2):
        got = _axpy()(np.float32(2.0), np.arange(37, dtype=np.float32), np.ones(37, np.float32))
    assert_exact(got, 2 * np.arange(37, dtype=np.float32) + 1)


@functools.cache
def _axpy():
    """A Numba function that lives as long as the process (a dispatcher made inside a test and
    dropped leaves dead weak proxies that gc.get_objects() then lists)."""
    import numba

    @numba.njit
    def axpy(a, x, y):
        for i in range(x.size):
            y[i] = a * x[i] + y[i]
        return y
    return axpy


@pytest.mark.parametrize("name, dtype", [("swiglu", BF16), ("silu", F32), ("gelu", F16)])
def test_heavy_body_is_rendered_twice_per_function(name, dtype):
    """A math-heavy body has two copies per kernel function, whatever the layout kind: a full
    stack chunk's loop (a trip count LLVM knows) and any other chunk's; the head, the streamed
    lines, the last line, in-place calls and plain calls all go through them (``heavy_loop``).
    One copy per path compiled swiglu bfloat16's strided ``parallel`` in 45 s, 9 s now. A flat
    float32 call's single-loop body has a third: a full chunk streamed as computed (``direct``)."""
    import re

    from infiniop.backends.cpu import elementwise_kernels as ek
    from infiniop.elementwise.spec import REGISTRY

    spec = REGISTRY[name]
    prog = spec.program(next(s for s in spec.signatures if s.dtypes[0] is dtype))
    assert ek.is_heavy(prog.results)
    n = len(prog.slots)
    for kind, pattern in (("flat", "1" * n), ("strided", "1" * n), ("strided", "g" + "1" * (n - 1)),
                          ("tiled", "1" + "t" * (n - 1))):
        functions = [f for f in ek.source(prog, kind, pattern).split("\n@njit")[1:]
                     if "def _" not in f]  # (not the prelude's helpers)
        assert [re.search(r"def (\w+)\(", f)[1] for f in functions] == ["serial"]  # (driven)
        for f in functions:
            assert len(re.findall(r"^ +sp0\[i\] = ", f, re.M)) == 2, (kind, pattern)
            assert not re.search(r"^ +q0\[[^]]*\] = .*\bt\d+", f, re.M), (kind, pattern)
            direct = len(re.findall(r"^ +nt_store\(q0, z0 \+ i, ", f, re.M))
            assert direct == (kind == "flat" and dtype is F32), (kind, pattern)


def test_forced_nt_staged_math(handle, monkeypatch):
    """Math-heavy bodies are computed a stack chunk at a time and then streamed (``heavy_loop``;
    fp16/bf16 as words, bf16 staged as float32 and rounded while streaming): flat over chunk
    and block boundaries and with odd tails, strided rows, tiled (transposed input) and two
    inputs (swiglu), with NaN, infinities and signed zeros, for every float dtype; each result
    equals, bit for bit, the same operator's result from the serial loop (thresholds at their
    defaults), and no byte outside the output is touched. Bodies that fission.split cuts
    (silu, sigmoid and tanh f32, silu/sigmoid f64, quickgelu) run as two loops over each
    chunk. A float32 output's start is also swept over a page in 64-byte steps, so that some
    blocks move their stage chunk (the 4K aliasing guard)."""
    rng = np.random.default_rng(12)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 60000.0], np.float32)

    def data(dtype, shape):
        x = (rng.standard_normal(prod(shape)) * 6).astype(np.float32)
        x[rng.integers(0, x.size, 40)] = rng.choice(specials, 40)
        return x.astype(dtype.numpy).reshape(shape)

    def serial(name, ins):
        with monkeypatch.context() as mp:  # defaults: a serial loop, ordinary stores
            mp.setattr(runtime, "PARALLEL_THRESHOLD", 1 << 40)
            mp.setattr(runtime, "NT_THRESHOLD_BYTES", 1 << 50)
            return getattr(infiniop, name)(*ins)

    for dtype in (F16, BF16, F32, F64):
        cases = [("silu", [data(dtype, (n,))]) for n in (5, 2048 * 2 + 61, 32768 + 61)]
        cases += [("tanh", [data(dtype, (3, 2 * 2100))[:, ::2]]),       # strided rows
                  ("sigmoid", [data(dtype, (300, 260)).T]),             # tiled
                  ("swiglu", [data(dtype, (4099,)), data(dtype, (4099,))]),
                  ("quickgelu", [data(dtype, (2048 * 2 + 61,))])]         # two loops, any dtype
        wants = [serial(name, ins) for name, ins in cases]
        monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
        monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
        for (name, ins), want in zip(cases, wants):
            for off in (0, 2, 62, 1, 16):
                out, raw, start = _offset_out(want.size, dtype, off)
                out = out.reshape(want.shape)
                _desc_call(handle, name, out, ins)
                assert_exact(out, want)
                _check_raw(raw, start, out.nbytes)
        monkeypatch.undo()
    x = data(F32, (2 * 16384 + 61,))
    want = serial("sigmoid", [x])
    monkeypatch.setattr(runtime, "PARALLEL_THRESHOLD", 1)
    monkeypatch.setattr(runtime, "NT_THRESHOLD_BYTES", 64)
    for page_offset in range(0, 4096, 64):
        raw = np.full(want.nbytes + 8192 + 256, CANARY, np.uint8)
        start = (-raw.ctypes.data) % 4096 + page_offset + 16
        out = raw[start:start + want.nbytes].view(np.float32)
        _desc_call(handle, "sigmoid", out, [x])
        assert_exact(out, want)
        _check_raw(raw, start, want.nbytes)


# ---------------------------------------------------------------------------------------------
# User-defined operators
# ---------------------------------------------------------------------------------------------

AXPBY = infiniop.elementwise(
    "test_axpby_where", ("x", "y", "z"), infiniop.FLOATS,
    lambda m, x, y, z: m.where(x > y, 2 * x + z, m.abs(y) - 1.5), register=False)
MULSUB = infiniop.elementwise("test_mulsub", ("a", "b"), infiniop.INTEGERS,
                              lambda m, a, b: a * 3 - b, register=False)


def _axpby_ref(x, y, z, ct):
    x, y, z = (v.astype(ct) for v in (x, y, z))
    with np.errstate(all="ignore"):
        return np.where(x > y, ct(2) * x + z, np.abs(y) - ct(1.5))


NUDGED = infiniop.elementwise(  # a float64 value just off a product of two half values
    "test_nudged_product", ("x", "y", "z"), infiniop.FLOATS,
    lambda m, x, y, z: m.cast(x, "f64") * m.cast(y, "f64") + m.cast(z, "f64") * 2.0 ** -40,
    register=False)


def _heavy_nudged(m, x, y, z):
    """NUDGED's value through enough exact no-op nodes that a large call stages its output
    (elementwise_kernels.STAGE_MIN_NODES): bf16 then goes through a float32 scratch."""
    v = m.cast(x, "f64") * m.cast(y, "f64") + m.cast(z, "f64") * 2.0 ** -40
    for _ in range(6):
        v = m.where(m.abs(v) < 1e300, v, v)
    return v


HEAVY_NUDGED = infiniop.elementwise("test_heavy_nudged_product", ("x", "y", "z"),
                                    infiniop.FLOATS, _heavy_nudged, register=False)


def _rounded_once(v, bits: int) -> float:
    """The exact rational ``v`` (0.5 < v < 8) to ``bits`` significant bits, ties to even."""
    e = 0
    while v >= 2 ** (e + 1):
        e += 1
    while v < 2 ** e:
        e -= 1
    ulp = Fraction(2) ** (e - bits + 1)
    q, r = divmod(v, ulp)
    if 2 * r > ulp or (2 * r == ulp and q % 2):
        q += 1
    return float(q * ulp)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_half_results_of_float64_values_are_rounded_once(handle, dtype):
    """A float64 result stored to fp16/bf16 is rounded once. x y is often exactly a midpoint of
    the half type; x y +- 2^-40 then rounds away from it, but float32 in between (the store did
    float64 -> float32 -> half) lands on the midpoint and rounds to even: wrong for half of them,
    and on the GPU f64 -> fp16 was one rounding, so the backends differed."""
    nt = np.float16 if dtype is F16 else ml_dtypes.bfloat16
    every = np.arange(1.0, 2.0, 2.0 ** -(10 if dtype is F16 else 7))   # every value in [1, 2)
    rng = np.random.default_rng(5)
    x = np.repeat(rng.choice(every, 48), every.size).astype(nt)
    y = np.tile(every, 48).astype(nt)
    z = np.where(np.arange(x.size) % 3 == 0, 1.0, -1.0).astype(nt)
    z[2::3] = 0.0                                                         # exact products too
    out = np.empty_like(x)
    d = NUDGED.create_descriptor(handle, *(TensorDescriptor.from_array(t) for t in (out, x, y, z)))
    d.calculate(None, out, x, y, z)
    bits = 11 if dtype is F16 else 8
    want = np.array([_rounded_once(Fraction(float(a)) * Fraction(float(b))
                                   + Fraction(int(c)) / 2 ** 40, bits)
                     for a, b, c in zip(x, y, z)]).astype(nt)   # exact in the half type
    assert_exact(out, want)
    # a call large enough to stream its stores (bf16 staged through float32), the same values
    reps = -(-(3 << 23) // (8 * x.size))            # 3 inputs + 1 output of 2 bytes: >= 48 MiB
    big = [np.tile(t, reps) for t in (x, y, z)]
    out = np.empty_like(big[0])
    for op in (NUDGED, HEAVY_NUDGED):
        d = op.create_descriptor(handle, *(TensorDescriptor.from_array(t) for t in (out, *big)))
        d.calculate(None, out, *big)
        assert_exact(out, np.tile(want, reps))


@pytest.mark.parametrize("dtype", [F32, F16], ids=str)
def test_user_defined_operator(handle, dtype):
    rng = np.random.default_rng(7)
    x = draw(rng, dtype, (4, 6))
    y = draw(rng, dtype, (6,))  # NumPy broadcast
    z = draw(rng, dtype, (4, 1))
    want = _axpby_ref(x, np.broadcast_to(y, (4, 6)), np.broadcast_to(z, (4, 6)), np.float32)
    want = want.astype(dtype.numpy)
    assert_exact(AXPBY(x, y, z), want)  # functional
    out = canary_array((6, 4), dtype).T  # transposed output through the descriptor
    descs = [TensorDescriptor.from_array(v) for v in (out, x, y, z)]
    with AXPBY.create_descriptor(handle, *descs) as d:
        d.calculate(None, out.ctypes.data, x.ctypes.data, y.ctypes.data, z.ctypes.data)
    assert_exact(out, want)
    out2 = _torch(canary_array((4, 6), dtype))
    AXPBY(_torch(x), _torch(y), _torch(z), out=out2)  # torch through the functional form
    assert_exact(out2, want)
    assert AXPBY.arity == 3 and AXPBY.inputs == ("x", "y", "z")
    assert "test_axpby_where" not in REGISTRY  # register=False


def test_user_defined_integer_operator_wraps(handle):
    rng = np.random.default_rng(8)
    for dtype in (I8, U32, I64, U64):
        a, b = draw(rng, dtype, (33,)), draw(rng, dtype, (33,))
        with np.errstate(all="ignore"):
            want = (a * dtype.numpy.type(3) - b).astype(dtype.numpy)
        out = canary_array((33,), dtype)
        run_descriptor(handle, MULSUB, out, [a, b], addresses=True)
        assert_exact(out, want)


SHIFTS = infiniop.elementwise("test_shifts", ("a", "b"), infiniop.INTEGERS,
                              lambda m, a, b: (a << b, a >> b), outputs=("l", "r"), register=False)
DIVMOD = infiniop.elementwise("test_divmod", ("a", "b"), infiniop.INTEGERS,
                              lambda m, a, b: (a // b, a % b), outputs=("q", "r"), register=False)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.uint64], ids=str)
def test_user_shifts_and_division_at_the_edges_match_numpy(dtype):
    """Shift counts outside [0, width) (undefined in LLVM: 3 >> 65 was 1 in a strided call and
    0 in a contiguous one) give NumPy's 0 / sign fill, the same for every layout; the minimum
    // -1 wraps to the minimum (it gave 0) and % -1 is 0."""
    info = np.iinfo(dtype)
    vals = np.array([0, 1, 3, 100, info.max, info.min, info.min + 1] + ([-3, -1] if info.min else []),
                    dtype)
    counts = np.arange(-70 if info.min else 0, 131).astype(dtype)
    a, b = np.meshgrid(vals, counts, indexing="ij")
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    with np.errstate(all="ignore"):
        want_l, want_r = a << b, a >> b
    for layout in (lambda v: v, lambda v: v.T.copy().T, lambda v: np.repeat(v, 2, 1)[:, ::2]):
        got_l, got_r = SHIFTS(layout(a), layout(b))
        assert_exact(got_l, want_l)
        assert_exact(got_r, want_r)
    if info.min:
        x = np.array([info.min, info.min, info.min + 1, 7, -7], dtype)
        y = np.array([-1, 1, -1, -1, -1], dtype)
        with np.errstate(all="ignore"):
            want_q, want_m = x // y, x % y
        got_q, got_m = DIVMOD(x, y)
        assert_exact(got_q, want_q)
        assert_exact(got_m, want_m)


def test_floats_into_uint64_keep_values_above_2_63():
    """A float stored into a uint64 output (and m.cast to u64) went through int64: every value
    in [2^63, 2^64) became 2^63 (on the CPU, and on the Triton backend's store, where a cast
    saw the CPU's fix)."""
    x = np.array([1e19, 1.5 * 2.0**63, 2.0**64 - 2048, 5.0, 2.0**62, 2.0**63], np.float64)
    want = x.astype(np.uint64)
    store = infiniop.elementwise("test_f2u64_store", ("x",), infiniop.FLOATS, lambda m, x: x * 1.0,
                                 signatures="f64 -> u64", register=False)
    cast = infiniop.elementwise("test_f2u64_cast", ("x",), infiniop.FLOATS,
                                lambda m, x: m.cast(x, "u64"), signatures="f64 -> u64",
                                register=False)
    for op in (store, cast):
        assert_exact(op(x), want)
        assert_exact(op(np.repeat(x, 2)[::2]), want)


def _nearest(v: int, dtype):
    """The value of ``dtype`` nearest to the integer v, ties to even (exact, with Fractions)."""
    c = np.array([float(v)]).astype(np.float32).astype(dtype)
    u = np.uint16
    bits = int(c.view(u)[0])
    cands = [c[0]] + [np.array([bits + d], u).view(dtype)[0] for d in (-1, 1)
                      if 0 < bits + d < 1 << 16]
    best = []
    for x in cands:
        if not np.isfinite(np.float64(x)):
            continue
        dist = abs(Fraction(float(x)) - v)
        best.append((dist, int(np.array([x]).view(u)[0]) & 1, x))
    dist, _, x = min(best, key=lambda t: (t[0], t[1]))
    fi = ml_dtypes.finfo(dtype)
    limit = Fraction(float(fi.max)) + Fraction(2) ** (fi.maxexp - fi.nmant - 2)  # + ulp / 2
    return dtype(np.copysign(np.inf, v)) if abs(v) >= limit else x


def test_64_bit_integers_into_half_outputs_are_rounded_once():
    """An int64/uint64 result stored to bf16 went through float64 rounded to nearest, then
    float32 to odd: two roundings above 2^53 (2^53 + 2^45 + 1 gave 2^53, not 2^53 + 2^46). Now
    float64 rounded to odd: every value below is the nearest bf16/fp16 (ties to even),
    near-ties of bf16 at every scale, the extremes, and random values."""
    rng = np.random.default_rng(64)
    near = []
    for s in range(8, 63):                                  # bf16 ties: k 2^s + 2^(s-1) +- {0, 1}
        for k in (129, 255, 256, 300):
            t = k * 2**s + 2 ** (s - 1)
            near += [t - 1, t, t + 1]
    ints = [2**53 + 2**45 + 1, 0, 1, -1, 2**53, 2**53 + 1, 2**63 - 1, -(2**63), 65504, 65520,
            65519, -65520, *near, *rng.integers(-(2**63), 2**63 - 1, 300, dtype=np.int64).tolist()]
    ints = [v for v in ints if -(2**63) <= v < 2**63]
    uints = [v for v in ints if v >= 0] + [2**64 - 1, 2**64 - 2048, 2**63, 2**63 + 2**55 + 1]
    for sig, vals, npt in (("i64 -> bf16", ints, np.int64), ("u64 -> bf16", uints, np.uint64),
                           ("i64 -> f16", ints, np.int64), ("u64 -> f16", uints, np.uint64)):
        dtype = ml_dtypes.bfloat16 if sig.endswith("bf16") else np.float16
        op = infiniop.elementwise("test_int_to_half", ("x",), infiniop.NUMERIC, lambda m, x: x,
                                  signatures=sig, register=False)
        got = op(np.array(vals, npt))
        want = np.array([_nearest(v, dtype) for v in vals], dtype)
        bad = got.view(np.uint16) != want.view(np.uint16)
        assert not bad.any(), (sig, np.array(vals, object)[bad][:4], got[bad][:4], want[bad][:4])


def test_integer_constants_must_fit_the_type_they_meet():
    """A Python int beside an integer value takes that value's type (NumPy 2's rule) and must
    fit it: ``x > -1`` on uint8 compared with 0xFFFFFFFF (all False), ``x < 2**64`` on int64
    with 0. NumPy raises OverflowError for such constants; so does tracing now, naming the
    ways out (a cast, or an explicit m.const that wraps). NumPy scalars are constants too
    (``x * np.float32(0.5)`` was a TypeError while ``np.float32(0.5) * x`` worked)."""
    u8 = np.array([0, 5, 255], np.uint8)
    i64 = np.array([-(2**63), 0, 2**63 - 1], np.int64)
    for expr, sig, x in ((lambda m, x: x > -1, "u8 -> bool", u8),
                         (lambda m, x: x + (-1), "u8 -> u8", u8),
                         (lambda m, x: x < 2**64, "i64 -> bool", i64),
                         (lambda m, x: x > -(2**63) - 1, "i64 -> bool", i64)):
        op = infiniop.elementwise("test_const_range", ("x",), infiniop.NUMERIC, expr,
                                  signatures=sig, register=False)
        with pytest.raises(OverflowError, match="does not fit"):
            op(x)
    fits = [(lambda m, x: m.cast(x, "i64") > -1, "u8 -> bool", u8, u8.astype(np.int64) > -1),
            (lambda m, x: m.eq(x, m.const(-1, "u32")), "u8 -> bool", u8, np.zeros(3, bool)),
            (lambda m, x: x + 4294967295, "u8 -> u8", u8, u8 - np.uint8(1)),     # wraps like u32
            (lambda m, x: (x > -(2**63)) & (x < 2**63 - 1), "i64 -> bool", i64,
             np.array([False, True, False])),
            (lambda m, x: x * np.float32(0.5) + np.int64(1), "f32 -> f32",
             np.array([1.0, -3.0], np.float32), np.array([1.5, -0.5], np.float32))]
    for expr, sig, x, want in fits:
        op = infiniop.elementwise("test_const_range", ("x",), infiniop.NUMERIC, expr,
                                  signatures=sig, register=False)
        assert_exact(op(x), want)
    bad_type = infiniop.elementwise("test_const_type", ("x",), infiniop.FLOATS,
                                    lambda m, x: x + m.const(1, "f16"), register=False)
    with pytest.raises(TypeError, match="unknown type 'f16'"):
        bad_type(np.ones(2, np.float32))


def test_user_defined_operator_rejects_other_dtypes(handle):
    d = TensorDescriptor(I32, (3,))
    raises(Status.BAD_TENSOR_DTYPE, AXPBY.create_descriptor, handle, d, d, d, d)
    raises(Status.BAD_TENSOR_DTYPE, AXPBY, *(np.ones(3, np.int32),) * 3)
    raises(Status.BAD_TENSOR_DTYPE, MULSUB.create_descriptor, handle,
           *(TensorDescriptor(F32, (3,)),) * 3)


# ---------------------------------------------------------------------------------------------
# The functional front end: return types and the descriptor cache
# ---------------------------------------------------------------------------------------------


def test_functional_allocates_broadcast_shape():
    a = np.arange(4, dtype=np.float32)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    r = infiniop.sub(a, b)  # NumPy broadcast: the result has the broadcast shape
    assert isinstance(r, np.ndarray) and r.shape == (3, 4) and r.dtype == np.float32
    assert r.flags.c_contiguous
    assert_exact(r, a - b)
    s = infiniop.sub(np.array(2.5, np.float32), np.array(1.0, np.float32))  # 0-d
    assert s.shape == () and float(s) == 1.5
    e = infiniop.add(np.ones((0, 4), np.int16), np.ones(4, np.int16))
    assert e.shape == (0, 4) and e.dtype == np.int16
    w = infiniop.where(np.array([True, False]), np.float32(1), np.zeros(2, np.float32))
    assert_exact(w, np.array([1, 0], np.float32))


def _same_layout(got, want) -> bool:
    """Same strides on every axis of extent > 1 (NumPy gives extent-1 axes any stride, and
    empty arrays strides 0)."""
    return want.size == 0 or all(g == w for g, w, n in zip(got.strides, want.strides, want.shape) if n > 1)


def test_functional_outputs_keep_the_inputs_layout():
    """A fresh output is laid out like its inputs, as NumPy's ufuncs and torch's pointwise
    operators lay theirs out: ``silu(x.T)`` came back row-major, which made the kernel transpose
    (float32 4096^2: 55-60 ms against 28-30 ms into a matching layout, same process) and gave
    other strides than ``np.exp(x.T)``. Inputs that disagree, gaps and empty arrays give
    row-major, as NumPy does; broadcast operands and scalars do not vote; every call path
    (first call, cached layout, repeated-call shortcut, scalar parameters) agrees."""
    x = (np.arange(120, dtype=np.float32).reshape(4, 5, 6) - 60) / 7
    m = x[0]
    c = np.ascontiguousarray(m.T)
    cases = [
        ((m.T,), infiniop.neg, np.negative),
        ((x.transpose(2, 0, 1),), infiniop.neg, np.negative),
        ((x.transpose(1, 2, 0)[::-1],), infiniop.neg, np.negative),     # reversed: positive
        ((x[:, ::2],), infiniop.neg, np.negative),                       # gaps: row-major
        ((np.ones((1, 4, 3), np.float32).transpose(0, 2, 1),), infiniop.neg, np.negative),
        ((np.ones((0, 4), np.float32).T,), infiniop.neg, np.negative),
        ((m.T, m.T), infiniop.add, np.add),
        ((m.T, c), infiniop.add, np.add),                                # disagree: row-major
        ((m.T, np.float32(1.5)), infiniop.add, np.add),
        ((m.T, np.arange(6, dtype=np.float32)[:, None]), infiniop.add, np.add),
    ]
    for args, op, ref in cases:
        want = ref(*args)
        for _ in range(3):
            got = op(*args)
            assert _same_layout(got, want), (op.name, [np.shape(a) for a in args], got.strides,
                                             want.strides)
            assert_exact(got, want)
    for _ in range(3):
        got = infiniop.hardtanh(m.T, min_val=-0.5, max_val=0.5)
        assert got.strides == np.negative(m.T).strides
        assert_exact(got, np.clip(m.T, -0.5, 0.5))
    g, b = infiniop.fused_gated_delta_net_gating(m.T, m.T, m.T, m.T)   # several outputs
    assert g.strides == b.strides == np.negative(m.T).strides
    gc, bc = infiniop.fused_gated_delta_net_gating(*(c,) * 4)
    assert_exact(g, gc) and assert_exact(b, bc)
    out = np.empty_like(c)                                               # out= is as given
    assert infiniop.neg(m.T, out=out) is out and out.flags.c_contiguous
    t = torch.from_numpy(np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5) - 60)
    for tt in (t.to(memory_format=torch.channels_last), t.transpose(1, 3)):
        for _ in range(3):
            got = infiniop.relu(tt)
            assert got.stride() == torch.relu(tt).stride()
            assert torch.equal(got, torch.relu(tt))
    if os.environ.get("INFINIOP_TRITON_WORKER") != "1":  # a recycled buffer (>= 32 MiB)
        big = np.arange(4096 * 2048, dtype=np.float32).reshape(2048, 4096).T
        got = infiniop.neg(big)
        assert got.strides == np.negative(big).strides
        assert_exact(got, -big)


def test_functional_cache_hits(monkeypatch):
    calls = []
    real = ElementwiseOperator.create_descriptor  # every operator's class derives from it

    def counting(self, *args, **kw):
        calls.append(self.name)
        return real(self, *args, **kw)

    monkeypatch.setattr(ElementwiseOperator, "create_descriptor", counting)
    functional.clear_cache()
    a, b = np.ones((3, 4), np.float32), np.ones((3, 4), np.float32)
    for _ in range(5):
        infiniop.sub(a, b)
        infiniop.sub(a + 1, b * 2)  # same layouts, different data
    assert calls == ["sub"] and len(functional._cache) == 1
    infiniop.sub(a.T, b.T)  # new layout
    infiniop.add(a, b)  # new operator
    infiniop.sub(a.astype(np.float64), b.astype(np.float64))  # new dtype
    assert calls == ["sub", "sub", "add", "sub"] and len(functional._cache) == 4
    infiniop.sub(a, b)
    assert len(calls) == 4


def test_functional_repeated_calls_with_scalars(handle):
    """The shortcut for a repeated call with scalar parameters (the operator's last NumPy call:
    its scalars and descriptor fast path) gives what a fresh descriptor gives whenever anything
    changed: the scalars' values, their types (0 is not 0.0, np.float32(2) is not 2.0), the
    sign of a zero, shapes, dtypes, out= or not, in place."""
    def fresh(op, x, **params):
        d = TensorDescriptor(DType[x.dtype.name.upper().replace("FLOAT", "F")], x.shape)
        y = np.empty_like(x)
        getattr(infiniop, f"create_{op}_descriptor")(handle, d, d, **params).calculate(None, y, x)
        return y

    functional.clear_cache()
    x = np.array([-0.0, 0.0, -1.0, 0.25, 2.0, np.nan, -np.inf], np.float32)
    for lo in (-0.5, -0.5, 0.0, 0.0, -0.0, -0.0, 0, np.float32(0.0), -0.5):
        want = fresh("hardtanh", x, min_val=lo, max_val=1.0)
        assert_exact(infiniop.hardtanh(x, min_val=lo, max_val=1.0), want)
        out = np.full_like(x, 7.0)
        assert infiniop.hardtanh(x, out=out, min_val=lo, max_val=1.0) is out
        assert_exact(out, want)
    if os.environ.get("INFINIOP_TRITON_WORKER") != "1":  # the CPU fast path's shortcut
        assert infiniop.hardtanh in functional._last_scalar_call
    assert_exact(infiniop.hardtanh(x, max_val=1.0, min_val=-0.5),  # keyword order
                 fresh("hardtanh", x, min_val=-0.5, max_val=1.0))
    assert_exact(infiniop.hardtanh(x, min_val=-0.5), fresh("hardtanh", x, min_val=-0.5))
    for beta in (2.0, 2.0, 3.0, np.float32(3.0), 3):
        assert_exact(infiniop.softplus(x, beta=beta), fresh("softplus", x, beta=beta))
    x2 = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)  # another shape, dtype, layout
    for a in (x2, x2.astype(np.float16), x2.T, x2[:, ::2]):
        want = fresh("softplus", np.ascontiguousarray(a), beta=3)
        assert_exact(infiniop.softplus(a, beta=3), want)
    xi = x2.copy()
    assert infiniop.softplus(xi, out=xi, beta=3) is xi  # in place
    assert_exact(xi, fresh("softplus", x2, beta=3))
    raises(Status.BAD_PARAM, lambda: infiniop.softplus(x2, x2, beta=3))  # one operand too many


def test_functional_cache_does_not_mix_operators_with_the_same_name():
    """Two operators sharing a name and expression but not their dtypes must not share cached
    descriptors: the second one's dtype check would be skipped. Found: the cache key is
    ``spec.key`` (name + expression digest), so FLOATS-only ``b`` ran on int32 arrays after
    ``a`` had been called on them (BAD_TENSOR_DTYPE only after ``functional.clear_cache()``)."""
    a = infiniop.elementwise("test_samename", ("x", "y"), infiniop.NUMERIC,
                             lambda m, x, y: x + y, register=False)
    b = infiniop.elementwise("test_samename", ("x", "y"), infiniop.FLOATS,
                             lambda m, x, y: x + y, register=False)
    x = np.arange(3, dtype=np.int32).reshape(1, 3)
    assert a(x, x).tolist() == [[0, 2, 4]]
    raises(Status.BAD_TENSOR_DTYPE, b, x, x)


def test_functional_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(functional, "CACHE_SIZE", 2)
    functional.clear_cache()
    a = np.ones(8, np.float32)
    for n in (2, 3, 4, 5):
        infiniop.add(a[:n], a[:n])
    assert len(functional._cache) == 2
    functional.clear_cache()
    assert len(functional._cache) == 0


def test_descriptor_reused_many_times(handle):
    d = TensorDescriptor(F32, (16,))
    desc = infiniop.create_mul_descriptor(handle, d, d, d)
    for i in range(20):
        a = np.full(16, i, np.float32)
        out = canary_array((16,), F32)
        desc.calculate(None, out, a, a)
        assert_exact(out, a * a)
    desc.destroy()
    raises(Status.BAD_PARAM, desc.calculate, None, out, a, a)


def test_user_operator_dtypes_spelled_as_tensor_descriptors_accept_them():
    """``dtypes`` took only DType sets: "float32", ["f4"] or np.float32 failed inside with
    internal messages ('str' object has no attribute 'short_name')."""
    x = np.ones(3, np.float32)
    for spelled in ("float32", ["f4"], [np.float32], infiniop.float32, np.dtype("float32"),
                    {"F32", "float64"}):
        op = infiniop.elementwise("test_spelled", ("x",), spelled, lambda m, x: x + 1, register=False)
        assert DType.F32 in op.tvars
        assert_exact(op(x), x + 1)
    rows = infiniop.row_operator("test_spelled_row", "y:out, x", lambda m, v: v - m.max(v),
                                 dtypes="f4", register=False)
    assert rows.tvars == frozenset({DType.F32})
    raises(Status.BAD_TENSOR_DTYPE, infiniop.elementwise, "test_spelled", ("x",), "f16",
           lambda m, x: x, register=False)  # NumPy's float128: refused, as everywhere
