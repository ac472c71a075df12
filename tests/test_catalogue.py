"""InfiniCore's elementwise catalogue (issue 11), driven by one operator table.

Each row of ``TABLE`` is one operator: its reference, the scalar parameters the table runs with,
the shapes of operands that are not the iteration shape (``alpha``, ``param``, ``A_log``...), and
which signatures run the full layout matrix. The same table runs on the CPU and, through
tests/test_triton_suite.py, on the Triton interpreter.

References: each row's own arithmetic re-evaluated by NumPy in the compute type (float32 for
fp16/bf16/fp32 signatures, float64 for float64; integers natively), each mathlib function in it
(the activations included: silu, gelu, softplus, swiglu... are single functions rounded once)
exact and rounded once: float64 NumPy/math for float32 and narrower results, mpmath (40 digits)
for float64 results; limits at +-inf as mathlib documents (silu(-inf) = -0), NaN as NaN, zeros
with their sign.
- ``exact`` rows (no math function: equal, ones/zeros, hardtanh, reciprocal, addcmul, the BLAS-1
  operators, swap/copy, dequant) are compared bit for bit.
- the others within 1 ulp (float32, fp16, bf16) or 2 ulp (float64); 2/3 for the gating's
  product of two functions.
- torch references as InfiniCore's scripts compute them, with InfiniCore's tolerances, on the
  values those scripts draw (``test_torch_reference``); the scripts' own tables are in
  tests/test_reference_catalogue.py.

Compiling a kernel variant costs ~0.2-0.5 s (raw addresses) to ~0.7 s (NumPy arrays: the
checked launcher) on a cold cache, so every declared signature runs contiguous and in place
through raw addresses or torch tensors, and the full layout matrix runs for one signature of
one operator per operand structure (unary with parameters, binary with a bool output,
operand views, BLAS updates with 0-d scalars, two outputs with broadcast heads, mixed dtypes
with an optional operand).
"""

from __future__ import annotations

import math
import os
import warnings
import zlib
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import pytest
import torch
from conftest import CANARY, assert_canary, assert_exact, place, raises, to_numpy
from test_elementwise import canary_array, draw

import infiniop
from infiniop import DType, Status, TensorDescriptor
from infiniop.elementwise import functional
from infiniop.elementwise.signature import code
from infiniop.elementwise.spec import Param

F16, BF16, F32, F64 = DType.F16, DType.BF16, DType.F32, DType.F64
I8, I16, I32, I64 = DType.I8, DType.I16, DType.I32, DType.I64
U8, U16, U32, U64 = DType.U8, DType.U16, DType.U32, DType.U64
BOOL, BYTE = DType.BOOL, DType.BYTE
FLOATS = (F16, BF16, F32, F64)
NAN, INF = float("nan"), float("inf")
ON_TRITON = os.environ.get("INFINIOP_TRITON_WORKER") == "1"


# ---------------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------------
# mathlib.py computes each function, the activations included (silu, gelu, softplus...), as one
# function rounded once, with the limits at +-inf (silu(-inf) = -0). The references: the exact
# function in float64 (NumPy, math) for float32/fp16/bf16 results, in mpmath (40 digits) for
# float64 results (float64 itself is not precise enough there: gelu's erfc(-x / sqrt 2) loses
# ~2x^2 ulps to the rounding of its argument), rounded once.


def _sigmoid64(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


_erf64 = np.vectorize(math.erf, otypes=[np.float64])
_erfc64 = np.vectorize(math.erfc, otypes=[np.float64])


def _erfinv64(y):
    """erfinv in float64: Winitzki's approximation refined by 4 Newton steps on math.erf (to
    ~1 ulp of float64 for |y| <= 0.9), mpmath beyond (where erf is too flat for Newton)."""
    shape, y = np.shape(y), np.atleast_1d(np.asarray(y, np.float64))
    with np.errstate(all="ignore"):
        w = np.log((1 - y) * (1 + y))
        t = 2 / (np.pi * 0.147) + w / 2
        x = np.sign(y) * np.sqrt(np.sqrt(t * t - w / 0.147) - t)
        for _ in range(4):
            x = x - (_erf64(x) - y) / (2 / np.sqrt(np.pi) * np.exp(-x * x))
        far = (np.abs(y) > 0.9) & (np.abs(y) < 1)
        x[far] = [_MP["erfinv"](v) for v in y[far]]
        x = np.where(y == 0, y, x)  # keeps -0.0
        x = np.where(np.abs(y) == 1, y * INF, x)
        return np.where(np.isnan(y) | (np.abs(y) > 1), NAN, x).reshape(shape)


def _limit_at_minus_inf(f):
    """f(x) = x * (a factor that decays faster than 1/x): -0.0 at -inf (x * 0 would be NaN)."""
    return lambda x, *a: np.where(np.asarray(x) == -INF, -0.0, f(x, *a))


def _mpfn(f):
    """A float function evaluated in mpmath (mpf arguments, 40 digits): NaN in, NaN out;
    beyond float64, +-inf; NaN where mpmath gives up (R takes float64's value there, and for
    the limits at +-inf and the signs of zeros: mpmath has no signed zero)."""
    import mpmath  # a dependency of torch (sympy)

    def g(*xs):
        if any(math.isnan(v) for v in xs):
            return NAN
        with mpmath.workdps(40):
            try:
                r = f(mpmath, *[mpmath.mpf(float(v)) for v in xs])
            except OverflowError:  # mpmath's erfc on 1e300: float64's value is exact there
                return NAN
            if mpmath.isnan(r):
                return NAN
            try:
                return float(r)
            except OverflowError:
                return math.copysign(INF, float(mpmath.sign(r)))
    return g


def _mp_sigmoid(mp, x):
    return 1 / (1 + mp.exp(-x)) if x > -mp.inf else mp.mpf(0)


_C1 = "1.5957691216057307117597842397375"  # 2 sqrt(2/pi)
_MP = {  # scalar float64 -> float64 in mpmath
    "exp": _mpfn(lambda mp, x: mp.exp(x)),
    "tanh": _mpfn(lambda mp, x: mp.tanh(x)),
    "log10": _mpfn(lambda mp, x: mp.log10(x) if x >= 0 else mp.nan),
    "log1p": _mpfn(lambda mp, x: mp.log1p(x) if x >= -1 else mp.nan),
    "atanh": _mpfn(lambda mp, x: mp.atanh(x) if abs(x) <= 1 else mp.nan),
    "erf": _mpfn(lambda mp, x: mp.erf(x)),
    "erfc": _mpfn(lambda mp, x: mp.erfc(x)),
    "erfinv": _mpfn(lambda mp, x: mp.erfinv(x) if abs(x) < 1 else
                    (mp.inf * mp.sign(x) if abs(x) == 1 else mp.nan)),
    "sigmoid": _mpfn(_mp_sigmoid),
    "silu": _mpfn(lambda mp, x: x * _mp_sigmoid(mp, x)),
    "gelu": _mpfn(lambda mp, x: x * mp.erfc(-x / mp.sqrt(2)) / 2),
    "gelu_tanh": _mpfn(lambda mp, x: x * _mp_sigmoid(
        mp, x * (mp.mpf(_C1) + mp.mpf("0.044715") * mp.mpf(_C1) * x * x))),
    "quickgelu": _mpfn(lambda mp, x: x * _mp_sigmoid(mp, mp.mpf("1.702") * x)),
    "hardswish": _mpfn(lambda mp, x: x if x >= 3 else (mp.mpf(0) if x <= -3 else
                                                        x * (x + 3) / 6)),
    "softplus": _mpfn(lambda mp, x, b: mp.log1p(mp.exp(b * x)) / b),
    "swiglu": _mpfn(lambda mp, a, b: a * b * _mp_sigmoid(mp, b) if b > -mp.inf else mp.nan),
}
_NP = {  # float64 arrays in NumPy/math (for float32 and narrower results)
    "exp": np.exp, "tanh": np.tanh, "log10": np.log10, "log1p": np.log1p,
    "atanh": np.arctanh, "erf": _erf64, "erfc": _erfc64, "erfinv": _erfinv64,
    "sigmoid": _sigmoid64,
    "silu": lambda x: x * _sigmoid64(x),
    "gelu": lambda x: 0.5 * x * _erfc64(-x / np.sqrt(2.0)),
    "gelu_tanh": lambda x: x * _sigmoid64(x * (float(_C1) + 0.044715 * float(_C1) * x * x)),
    "quickgelu": lambda x: x * _sigmoid64(1.702 * x),
    "hardswish": lambda x: np.where(x >= 3, x, np.where(x <= -3, -0.0, x * (x + 3) / 6)),
    "softplus": lambda x, b: np.log1p(np.exp(b * x)) / b,
}
for _name in ("silu", "gelu", "gelu_tanh", "quickgelu"):
    _NP[_name] = _limit_at_minus_inf(_NP[_name])
_NP["swiglu"] = lambda a, b: a * _NP["silu"](b)  # a * silu(-inf) = a * -0


class R:
    """What a reference is evaluated with: the operator's own arithmetic in NumPy in the compute
    type ``ct`` (float32, or float64 for float64 signatures), each mathlib function exact and
    rounded once to ``ct`` (``r.silu(x)``...), constants as ``ct`` values (``r.c(v)``)."""

    def __init__(self, ct):
        self.ct = ct

    def c(self, v):
        return self.ct(v)

    def __getattr__(self, name):
        def fn(*xs):
            xs = [np.asarray(x, np.float64) for x in xs]
            with np.errstate(all="ignore"):
                v = np.asarray(_NP[name](*xs), np.float64)
                if self.ct is np.float64:  # mpmath's value where it is finite and not 0
                    mp = np.vectorize(_MP[name], otypes=[np.float64])(*xs)
                    v = np.where(np.isfinite(mp) & (mp != 0), mp, v)
                return v.astype(self.ct)
        return fn

    def softplus(self, x, beta, threshold):
        """mathlib's: x where beta * x (rounded) > threshold, else log1p(exp(beta x)) / beta
        with the product exact."""
        return np.where(x * beta > threshold, x, self.__getattr__("softplus")(x, beta))


def _silu_and_mul(r, x):
    gate, up = np.split(x, 2, axis=-1)
    return r.swiglu(up, gate)


def _rotm(r, x, y, p):
    flag, h11, h21, h12, h22 = (p[k] for k in range(5))
    if flag == -2:
        return x, y
    if flag < 0:
        return h11 * x + h12 * y, h21 * x + h22 * y
    if flag == 0:
        return x + h12 * y, h21 * x + y
    return h11 * x + y, -x + h22 * y


def _gating(r, A_log, a, b, dt_bias, beta, threshold):
    return -r.exp(A_log) * r.softplus(a + dt_bias, beta, threshold), r.sigmoid(b)


def _dequant(r, q, scale, zero=None):
    q = q.astype(np.float32)
    if zero is not None:
        q = q - zero
    return q * scale


# ---------------------------------------------------------------------------------------------
# The operator table
# ---------------------------------------------------------------------------------------------

ULPS = {F32: 1, F16: 1, BF16: 1, F64: 2}


@dataclass(frozen=True)
class Entry:
    name: str
    ref: object  # ref(R, *read operands (C order, compute type), **params) -> value or tuple
    exact: bool = False  # no math function: the reference is the promise, bit for bit
    params: dict = field(default_factory=dict)
    shape: tuple = (5, 7)  # the iteration shape of the layout tests
    shapes: object = None  # shapes(iteration shape) -> {operand: its own shape}
    values: object = None  # values(rng, dtype, shape, operand name) -> array (default: draw)
    full: tuple = ()  # signature ids (sig_id) that run every layout
    ulps: dict = field(default_factory=dict)  # overrides of ULPS
    torch: object = None  # torch reference as InfiniCore's script computes it
    ic_tol: dict = field(default_factory=dict)  # InfiniCore's (atol, rtol) per dtype
    ic_values: object = None  # ic_values(rng, shape) -> float32 values InfiniCore draws

    @property
    def spec(self):
        return getattr(infiniop, self.name)

    @property
    def create(self):
        return getattr(infiniop, f"create_{self.name}_descriptor")

    def own_shapes(self, shape) -> dict:
        return self.shapes(shape) if self.shapes is not None else {}

    def tol(self, dtype: DType) -> int:
        return self.ulps.get(dtype, ULPS.get(dtype, 0))

    def __repr__(self) -> str:
        return self.name


def _u01(rng, shape):
    return rng.random(shape, dtype=np.float32)


def _uniform(lo, hi):
    return lambda rng, shape: (rng.random(shape, dtype=np.float32) * np.float32(hi - lo)
                               + np.float32(lo))


def _rotm_values(rng, dtype, shape, name):
    v = draw(rng, dtype, shape)
    if name == "param":
        v[0] = rng.choice([-2.0, -1.0, 0.0, 1.0])
    return v


def _domain(lo, hi):
    """draw(), with half of the values uniform in (lo, hi) (where the function is defined)."""
    def values(rng, dtype, shape, name):
        v = draw(rng, dtype, shape)
        u = (rng.random(shape) * (hi - lo) + lo).astype(dtype.numpy)
        return np.where(rng.random(shape) < 0.5, u, v)
    return values


F = torch.nn.functional
IC3 = {F16: (1e-3, 1e-3), BF16: (1e-2, 1e-2)}
TABLE = [
    # comparison
    Entry("equal", lambda r, a, b: a == b, exact=True, full=("bool-f32",),
          torch=torch.eq, ic_tol={F16: (0, 0), F32: (0, 0), BF16: (0, 0), I32: (0, 0),
                                  I64: (0, 0)}),
    # activations
    Entry("sigmoid", lambda r, x: r.sigmoid(x), torch=torch.sigmoid,
          ic_tol={**IC3, F32: (1e-7, 1e-7)}),
    Entry("silu", lambda r, x: r.silu(x), torch=F.silu, ic_tol={**IC3, F32: (1e-7, 1e-7)}),
    Entry("gelu", lambda r, x: r.gelu(x), torch=F.gelu,
          ic_tol={**IC3, F32: (1e-5, 1e-5), F64: (1e-6, 1e-6)}),
    Entry("gelutanh", lambda r, x: r.gelu_tanh(x), torch=lambda x: F.gelu(x, approximate="tanh"),
          ic_tol={BF16: (2e-2, 2e-2), F16: (2e-3, 2e-3), F32: (1e-5, 1e-5), F64: (1e-6, 1e-6)}),
    Entry("quickgelu", lambda r, x: r.quickgelu(x), torch=lambda x: x * torch.sigmoid(1.702 * x),
          ic_tol={**IC3, F32: (1e-6, 1e-6)}),
    Entry("hardswish", lambda r, x: r.hardswish(x), torch=F.hardswish,
          ic_tol={**IC3, F32: (1e-7, 1e-7)}),
    Entry("hardtanh", lambda r, x, min_val, max_val: np.minimum(np.maximum(x, min_val), max_val),
          exact=True, params={"min_val": -1.5, "max_val": 2.25}, full=("bf16",),
          torch=F.hardtanh, ic_tol={**IC3, BF16: (1e-2, 1e-2), F32: (1e-7, 1e-7)}),
    Entry("softplus", lambda r, x, beta, threshold: r.softplus(x, beta, threshold),
          params={"beta": 2.0, "threshold": 15.0}, torch=F.softplus,
          ic_tol={F16: (1e-3, 1e-3), BF16: (1e-3, 1e-3), F32: (1e-7, 1e-7)},
          ic_values=_uniform(-1, 1)),
    Entry("swiglu", lambda r, a, b: r.swiglu(a, b),
          torch=lambda a, b: a * b / (1 + torch.exp(-b.float()).to(b.dtype)),
          ic_tol={F16: (1e-3, 1e-3), BF16: (5e-3, 1e-2), F32: (1e-5, 1e-5)}),
    Entry("silu_and_mul", _silu_and_mul, full=("f32",),
          shapes=lambda s: {"input": s[:-1] + (2 * s[-1],)},
          torch=lambda x: (lambda g, u: F.silu(g) * u)(*x.chunk(2, dim=-1)),
          ic_tol={**IC3, F32: (1e-6, 1e-6)}),
    # math functions
    Entry("tanh", lambda r, x: r.tanh(x), torch=torch.tanh, ic_tol={**IC3, F32: (1e-6, 1e-6)}),
    Entry("reciprocal", lambda r, x: r.c(1) / x, exact=True,
          torch=torch.reciprocal, ic_tol={**IC3, F32: (1e-5, 1e-5)}),
    Entry("log10", lambda r, x: r.log10(x), values=_domain(0, 100), torch=torch.log10,
          ic_tol={**IC3, F32: (1e-6, 1e-6)},
          ic_values=lambda rng, s: _u01(rng, s) + np.float32(1e-6)),
    Entry("log1p", lambda r, x: r.log1p(x), values=_domain(-1, 3), torch=torch.log1p,
          ic_tol={F16: (1e-3, 1e-2), F32: (1e-6, 1e-6)}),
    Entry("atanh", lambda r, a: r.atanh(a), values=_domain(-1, 1), torch=torch.atanh,
          ic_tol={**IC3, F32: (1e-6, 1e-6)},
          ic_values=lambda rng, s: np.minimum(_u01(rng, s), np.float32(0.99))),
    Entry("erf", lambda r, x: r.erf(x), torch=torch.erf, ic_tol={**IC3, F32: (1e-4, 1e-4)}),
    Entry("erfc", lambda r, x: r.erfc(x), torch=torch.erfc, ic_tol={**IC3, F32: (1e-4, 1e-4)}),
    Entry("erfinv", lambda r, x: r.erfinv(x), values=_domain(-1, 1), torch=torch.erfinv,
          ic_tol={**IC3, F32: (1e-4, 1e-4)}, ic_values=_uniform(-0.9, 0.9)),
    # arithmetic with a scalar parameter
    Entry("addcmul", lambda r, x, t1, t2, value: x + value * t1 * t2, exact=True,
          params={"value": -0.75},
          torch=lambda x, t1, t2, value: torch.addcmul(x, t1, t2, value=value),
          ic_tol={F16: (1e-3, 1e-2), BF16: (5e-3, 5e-2), F32: (1e-5, 1e-5)}),
    # fills: x gives only the shape and dtype
    Entry("ones", lambda r, x: np.ones(x.shape, x.dtype), exact=True),
    Entry("zeros", lambda r, x: np.zeros(x.shape, x.dtype), exact=True),
    # BLAS level 1 (vectors; updated in place)
    Entry("axpy", lambda r, alpha, x, y: alpha * x + y, exact=True, shape=(13,),
          shapes=lambda s: {"alpha": ()}, full=("f32",)),
    Entry("scal", lambda r, alpha, x: alpha * x, exact=True, shape=(13,),
          shapes=lambda s: {"alpha": (1,) if s else ()}),
    Entry("rot", lambda r, x, y, c, s: (c * x + s * y, c * y - s * x), exact=True, shape=(13,),
          shapes=lambda s: {"c": (), "s": ()}, full=("bf16",)),
    Entry("rotm", _rotm, exact=True, shape=(13,), shapes=lambda s: {"param": (5,)},
          values=_rotm_values),
    Entry("swap", lambda r, x, y: (y, x), exact=True, shape=(13,)),
    Entry("blas_copy", lambda r, x: x, exact=True, shape=(13,)),
    # several outputs, mixed dtypes, optional operands
    Entry("fused_gated_delta_net_gating", _gating, params={"beta": 1.0, "threshold": 20.0},
          shape=(2, 3, 6), shapes=lambda s: {"A_log": s[-1:], "dt_bias": s[-1:]},
          ulps={F32: 2, F64: 3}, full=("f32-bf16",)),
    Entry("per_tensor_dequant_int8", _dequant, exact=True,
          shapes=lambda s: {"x_scale": (1,) if s else (), "x_zero": (1,) if s else ()},
          full=("f16-i8-f32",)),
]
ENTRY = {e.name: e for e in TABLE}


def sig_id(sig) -> str:
    """The signature's dtypes in operand order, each once: 'f32', 'bool-f16', 'f16-i8-f32'."""
    return "-".join(dict.fromkeys(code(d) for d in sig.dtypes))


def signatures(entry: Entry):
    return entry.spec.signatures


def test_table_covers_the_catalogue():
    """Every operator added for issue 11 has a row, and every row's full-layout signatures
    exist."""
    old = {"add", "sub", "mul", "div", "clip", "maximum", "minimum", "abs", "neg", "relu",
           "where"}
    assert set(infiniop.OPERATORS) - old == set(ENTRY)
    for e in TABLE:
        ids = {sig_id(s) for s in signatures(e)}
        assert set(e.full) <= ids, (e.name, e.full, ids)


# ---------------------------------------------------------------------------------------------
# Comparison with tolerance
# ---------------------------------------------------------------------------------------------


def _ordered(a: np.ndarray) -> np.ndarray:
    """Floats as integers in the order of their values (adjacent floats differ by 1)."""
    a = np.ascontiguousarray(a)
    u = a.view(np.dtype(f"u{a.itemsize}")).astype(np.uint64)
    sign = np.uint64(1) << np.uint64(8 * a.itemsize - 1)
    mag = (u & ~sign).astype(np.int64)
    return np.where(u & sign, -mag, mag)


def ulp_distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Ulps between two arrays of one float dtype (saturating far apart)."""
    g, w = _ordered(got), _ordered(want)
    far = np.int64(1) << np.int64(40)
    same_sign = (g >= 0) == (w >= 0)
    return np.where(same_sign, np.abs(np.clip(g, -far, far) - np.clip(w, -far, far)),
                    np.minimum(np.abs(g), far) + np.minimum(np.abs(w), far))


def assert_close(got, want, ulps: int, atol=0.0, x=None) -> None:
    """NaN where want is NaN, infinities exact, zeros with their sign, else within ``ulps`` or
    ``atol`` (``x``: an input, shown for the failing elements)."""
    got, want = to_numpy(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype,
                                                                got.shape, want.shape)
    g, w = got.astype(np.float64), want.astype(np.float64)
    atol = np.broadcast_to(np.asarray(atol, np.float64), w.shape)
    with np.errstate(invalid="ignore"):
        d = ulp_distance(got, want)
        ok = np.where(np.isnan(w) | np.isinf(w), (np.isnan(g) & np.isnan(w)) | (g == w),
                      ~np.isnan(g) & ((d <= ulps) | (np.abs(g - w) <= atol)))
        ok &= (w != 0) | (np.signbit(g) == np.signbit(w)) | (atol > 0)
    if not ok.all():
        idx = [tuple(i) for i in np.argwhere(~ok)[:5]]
        try:
            xs = None if x is None else np.broadcast_to(x, want.shape)
        except ValueError:  # silu_and_mul's input is [..., 2d]
            xs = None
        detail = ", ".join(f"{i}: got {got[i]!r} want {want[i]!r} ({int(d[i])} ulp)"
                           + ("" if xs is None else f" for x={xs[i]!r}") for i in idx)
        raise AssertionError(f"{int((~ok).sum())} of {ok.size} elements beyond "
                             f"{ulps} ulp: {detail}")


# ---------------------------------------------------------------------------------------------
# Operands and layouts
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """The iteration shape, a placement per read operand (default 'dense'), the placement of
    the outputs, and in-place pairs (output name, input name)."""

    name: str
    shape: tuple | None = None  # None: the entry's shape
    modes: tuple = ()  # (operand name, mode)
    out: str = "dense"
    inplace: tuple = ()

    def mode(self, name: str) -> str:
        return dict(self.modes).get(name, "dense")

    def __repr__(self) -> str:
        return self.name


def _place(values, mode: str):
    """(view, buffer, covered) for a dense placement (see conftest.place)."""
    nd = values.ndim
    kw = {"dense": {}, "padded": {"pad": 3}, "negative": {"flip": True},
          "transposed": {"perm": tuple(reversed(range(nd)))},
          "steps": {"steps": ((2, 3) * nd)[:nd]},
          "mixed": {"perm": tuple(reversed(range(nd))), "steps": ((3, 2) * nd)[:nd],
                    "flip": True}}[mode]
    return place(values, **kw)


def placed_input(rng, entry: Entry, dtype: DType, shape, name: str, mode: str):
    """(view handed to the library, its (buffer, covered) or None, logical values)."""
    values = entry.values or (lambda rng, dt, s, n: draw(rng, dt, s))
    nd = len(shape)
    if mode.startswith("zero"):  # InfiniCore: the full shape with 0 strides
        src = [1 if (mode == "zero_all" or d == int(mode[-1])) else n for d, n in enumerate(shape)]
        view = np.broadcast_to(values(rng, dtype, tuple(src), name), shape)
        return view, None, np.broadcast_to(np.array(view), shape)
    if mode.startswith("np_"):  # NumPy: size-1 dims or missing leading dims
        src = {"np_lead": shape[1:], "np_col": shape[:-1] + (1,)}[mode] if nd else ()
        view = values(rng, dtype, src, name)
        return view, None, np.broadcast_to(view, shape)
    view, buf, covered = _place(values(rng, dtype, shape, name), mode)
    return view, (buf, covered), np.array(view)


def layouts(entry: Entry, sig) -> list[Layout]:
    """Every layout that applies to the operator's operands."""
    spec = entry.spec
    shape = entry.shape
    own = entry.own_shapes(shape)
    ops = spec.operands
    full_in = [o.name for o in ops if o.role == "in" and o.name not in own]
    inout = [o.name for o in ops if o.role == "inout"]
    outs = [o.name for o in ops if o.role == "out"]
    dts = {o.name: d for o, d in zip(ops, sig.dtypes)}
    L = [Layout("contiguous"),
         Layout("padded", modes=tuple((o.name, "padded") for o in ops if o.reads), out="padded")]
    for o in outs:
        L += [Layout(f"inplace_{o}_{k}", inplace=((o, k),)) for k in full_in if dts[k] is dts[o]
              and (len(outs) == 1 or o == outs[0])]
    for j, k in enumerate(full_in):
        if 0 < j < len(full_in) - 1:  # the first and the last input vary: enough kinds
            continue
        L += [Layout(f"zero_stride_{k}", modes=((k, f"zero{j % len(shape)}"),))]
        if len(full_in) + len(inout) > 1:  # another operand keeps the shape (out = broadcast)
            L += [Layout(f"numpy_broadcast_{k}",
                         modes=((k, "np_lead" if j % 2 == 0 else "np_col"),))]
        L += [Layout(f"transposed_{k}", modes=((k, "transposed"),)),
              Layout(f"negative_{k}", modes=((k, "negative"),))]
    for k in inout + [n for n in own if any(o.name == n for o in ops)]:
        L += [Layout(f"negative_{k}", modes=((k, "negative"),)),
              Layout(f"steps_{k}", modes=((k, "steps"),))]
    if outs:
        L += [Layout("strided_out", out="steps"), Layout("negative_out", out="negative")]
        if len(shape) > 1:
            L += [Layout("transposed_out", out="transposed")]
    L += [Layout("mixed", modes=tuple((k, "mixed") for k in full_in + inout)
                 + tuple((k, "zero_all") for k in full_in[1:2]), out="mixed")]
    if full_in:
        L += [Layout("all_scalar", modes=tuple((k, "zero_all") for k in full_in))]
    if "input" not in own:  # silu_and_mul splits the last dim: no 0-d
        L += [Layout("zero_d", shape=())]
    L += [Layout("empty", shape=(0,) + shape[1:])]
    if len(shape) > 1:
        L += [Layout("empty_inner", shape=shape[:-1] + (0,))]
    if len(shape) == 2:
        L += [Layout("size1_dims", shape=(1, shape[1], 1),
                     modes=tuple((o.name, "padded") for o in ops if o.reads), out="padded")]
    return L


BASIC = ("contiguous",)


def build(rng, entry: Entry, sig, lay: Layout):
    """The buffers of one call (C order), what the written operands must hold (see expected())
    and the (buffer, covered) pairs whose gaps must keep their canaries."""
    spec = entry.spec
    shape = entry.shape if lay.shape is None else lay.shape
    own = entry.own_shapes(shape)
    ops = spec.operands
    bufs: list = [None] * len(ops)
    logical: dict = {}
    canaries = []
    for k, o in enumerate(ops):
        if not o.reads:
            continue
        s = own.get(o.name, shape)
        view, placed, lg = placed_input(rng, entry, sig.dtypes[k], s, o.name, lay.mode(o.name))
        bufs[k], logical[o.name] = view, lg
        if placed is not None:
            canaries.append(placed)
    pairs = dict(lay.inplace)
    for k, o in enumerate(ops):
        if o.role != "out":
            continue
        if o.name in pairs:
            j = next(i for i, p in enumerate(ops) if p.name == pairs[o.name])
            bufs[k] = bufs[j]
        else:
            view, buf, covered = _place(canary_array(shape, sig.dtypes[k]), lay.out)
            bufs[k] = view
            canaries.append((buf, covered))
    want = expected(entry, sig, [logical[o.name] for o in ops if o.reads])
    return bufs, want, canaries


def expected(entry: Entry, sig, ins, params=None):
    """(values of the written operands, bitwise?): the reference, and how it compares."""
    return reference(entry, sig, ins, params), entry.exact


def reference(entry: Entry, sig, inputs, params=None) -> list[np.ndarray]:
    """The promised values of the written operands (see the module docstring)."""
    ops = entry.spec.operands
    floats = [d for d in sig.dtypes if d.is_float]
    r = R(np.float64 if F64 in floats else np.float32)
    xs = [x.astype(r.ct) if x.dtype.kind == "f" or x.dtype == ml_dtypes.bfloat16 else x
          for x in inputs]
    params = {k: r.ct(np.float32(v))  # a C float, in the compute type
              for k, v in (entry.params if params is None else params).items()}
    with np.errstate(all="ignore"):
        out = entry.ref(r, *xs, **params)
    out = out if isinstance(out, tuple) else (out,)
    written = [d for o, d in zip(ops, sig.dtypes) if o.writes]
    shape = np.broadcast_shapes(*[np.shape(v) for v in out])
    res = []
    for v, d in zip(out, written):
        v = np.broadcast_to(np.asarray(v), shape)
        with np.errstate(all="ignore"):
            res.append(v.astype(d.numpy))
    return res


def check_results(entry: Entry, sig, bufs, want, x_logical):
    """``want``: (values, bitwise) from expected(), or values (compared as the row says)."""
    want, bitwise = want if isinstance(want, tuple) else (want, entry.exact)
    written = [b for o, b in zip(entry.spec.operands, bufs) if o.writes]
    dts = [d for o, d in zip(entry.spec.operands, sig.dtypes) if o.writes]
    for got, w, d in zip(written, want, dts):
        if bitwise or not d.is_float:
            assert_exact(got, w)
        else:
            assert_close(got, w, entry.tol(d), 0.0, x_logical)


# ---------------------------------------------------------------------------------------------
# Calls
# ---------------------------------------------------------------------------------------------


def _torch(a):
    if isinstance(a, torch.Tensor):
        return a
    a = np.asarray(a)
    with warnings.catch_warnings():  # read-only (broadcast) inputs: torch warns, we only read
        warnings.simplefilter("ignore", UserWarning)
        if a.dtype == ml_dtypes.bfloat16:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)


def descriptors(bufs) -> list:
    return [TensorDescriptor.from_array(b) for b in bufs]


def run_descriptor(handle, entry: Entry, bufs, via: str, params=None):
    """create (InfiniCore's argument order, scalars as keywords) + calculate(workspace, ...)."""
    descs = descriptors(bufs)
    desc = entry.create(handle, *descs, **(entry.params if params is None else params))
    del descs  # the descriptor keeps what it needs (InfiniCore drops its tensor descriptors)
    assert desc.workspace_size == 0
    if via == "addresses":
        args = [b.ctypes.data for b in bufs]
    elif via == "torch":
        args = [_torch(b) for b in bufs]
    else:
        args = list(bufs)
    desc.calculate(None, *args)
    desc.destroy()


def first_input(entry: Entry, bufs):
    """The logical values of the first read operand (gelu's x, for its tolerance)."""
    k = next(k for k, o in enumerate(entry.spec.operands) if o.reads)
    return np.array(bufs[k])


def _has_negative_strides(bufs) -> bool:
    return any(isinstance(b, np.ndarray) and any(st < 0 for st in b.strides) for b in bufs)


def _cases():
    """Every declared signature: contiguous, and in place for every other one (raw addresses,
    or torch tensors for every third signature). Every layout for the ``full`` signatures:
    contiguous through NumPy arrays (the compiled fast path), the others alternately through
    raw addresses and torch tensors (no launcher compile per layout), each also through the
    functional form with the same buffer kind."""
    for e in TABLE:
        for n, sig in enumerate(signatures(e)):
            sid = sig_id(sig)
            full = sid in e.full
            for i, lay in enumerate(layouts(e, sig)):
                if full:
                    via = "arrays" if lay.name in BASIC else ("torch" if i % 2 else "addresses")
                elif lay.name in BASIC or (lay.name.startswith("inplace") and n % 2 == 0):
                    via = "torch" if n % 3 == 1 else "addresses"
                else:
                    continue
                yield pytest.param(e, sig, lay, via, id=f"{e.name}-{sid}-{lay.name}-{via}")


def _torch_ok(sig, bufs) -> bool:
    """torch has no negative strides, and no uint16/32/64 arithmetic we rely on."""
    return not _has_negative_strides(bufs) and not any(d in (U16, U32, U64) for d in sig.dtypes)


@pytest.mark.parametrize("entry, sig, lay, via", list(_cases()))
def test_operator(handle, entry, sig, lay, via):
    rng = np.random.default_rng(zlib.crc32(f"{entry.name}-{sig_id(sig)}-{lay.name}".encode()))
    bufs, want, canaries = build(rng, entry, sig, lay)
    x = first_input(entry, bufs)
    if via == "torch" and not _torch_ok(sig, bufs):
        via = "addresses"
    run_descriptor(handle, entry, bufs, via)
    check_results(entry, sig, bufs, want, x)
    for buf, covered in canaries:
        assert_canary(buf, covered)
    if via != "addresses" and not lay.inplace and sig_id(sig) in entry.full:
        # the functional form on the same layout and buffer kind
        bufs2, want2, canaries2 = build(np.random.default_rng(1), entry, sig, lay)
        x2 = first_input(entry, bufs2)
        args = bufs2 if via == "arrays" else [_torch(b) for b in bufs2]
        res = call_functional(entry, args)
        res = res if isinstance(res, tuple) else (res,)
        written = [b for o, b in zip(entry.spec.operands, args) if o.writes]
        assert len(res) == len(written) and all(a is b for a, b in zip(res, written))
        check_results(entry, sig, bufs2, want2, x2)
        for buf, covered in canaries2:
            assert_canary(buf, covered)


def call_functional(entry: Entry, bufs, params=None):
    """infiniop.<op>(*read-or-updated operands, out=..., **params) on the given buffers."""
    ops = entry.spec.operands
    args = [b for o, b in zip(ops, bufs) if o.role != "out"]
    outs = [b for o, b in zip(ops, bufs) if o.role == "out"]
    kw = dict(entry.params if params is None else params)
    if outs:
        kw["out"] = outs[0] if len(outs) == 1 else tuple(outs)
    return entry.spec(*args, **kw)


# ---------------------------------------------------------------------------------------------
# Values: many inputs per signature, NaN/inf/+-0/subnormal/huge, every range of the functions
# ---------------------------------------------------------------------------------------------

VALUES_SHAPE = (64, 32)


def _wide(rng, dtype, shape, name, base):
    """base() values, a quarter of them replaced by +-10**U(-8, 3) (every scale a function
    changes behaviour at: the float32 and float64 underflow of exp near -88 and -709
    included)."""
    v = base(rng, dtype, shape, name)
    if not dtype.is_float or name == "param":
        return v
    hi = 3 if dtype is not F16 else 4.5
    w = (rng.choice([-1.0, 1.0], shape) * 10.0 ** rng.uniform(-8, hi, shape))
    if dtype is F64:
        w = np.where(rng.random(shape) < 0.1, rng.uniform(-760, -700, shape), w)
    with np.errstate(over="ignore"):
        w = w.astype(dtype.numpy)
    return np.where(rng.random(shape) < 0.25, w, v)


def _values_cases():
    for e in TABLE:
        for sig in signatures(e):
            yield pytest.param(e, sig, id=f"{e.name}-{sig_id(sig)}")


@pytest.mark.parametrize("entry, sig", list(_values_cases()))
def test_values(handle, entry, sig):
    """2048 values per operand (draw(): NaN, +-inf, +-0, subnormals, extremes, random bits,
    moderate values; the function's domain; every scale, the underflow of exp near -88 and
    -709 included) against the reference."""
    rng = np.random.default_rng(zlib.crc32(f"values-{entry.name}-{sig_id(sig)}".encode()))
    base = entry.values or (lambda rng, dt, s, n: draw(rng, dt, s))
    wide = Entry(**{**entry.__dict__, "values": lambda r, d, s, n: _wide(r, d, s, n, base)})
    bufs, _, _ = build(rng, wide, sig, Layout("contiguous", shape=VALUES_SHAPE))
    ins = [np.array(b) for o, b in zip(entry.spec.operands, bufs) if o.reads]
    want = reference(entry, sig, ins)
    run_descriptor(handle, entry, bufs, "addresses")
    check_results(entry, sig, bufs, want, first_input(entry, bufs))


def _torch_cases():
    for e in TABLE:
        if e.torch is None:
            continue
        for dt in e.ic_tol:
            sig = next(s for s in signatures(e) if s.dtypes[1] is dt)
            yield pytest.param(e, sig, dt, id=f"{e.name}-{dt.short_name}")


@pytest.mark.parametrize("entry, sig, dtype", list(_torch_cases()))
def test_torch_reference(entry, sig, dtype):
    """The torch reference of InfiniCore's script, on the values it draws (U[0, 1) unless the
    script says otherwise), within its tolerances; torch tensors in, torch tensors out."""
    rng = np.random.default_rng(zlib.crc32(f"torch-{entry.name}-{dtype}".encode()))
    gen = entry.ic_values or _u01
    ins = []
    for o, d in zip(entry.spec.operands, sig.dtypes):
        if not o.reads:
            continue
        shape = entry.own_shapes((13, 4)).get(o.name, (13, 4))
        if d.is_float:
            ins.append(torch.from_numpy(gen(rng, shape)).to(_torch(np.zeros(0, d.numpy)).dtype))
        else:
            ins.append(torch.from_numpy(rng.integers(-2 * 10**9, 2 * 10**9, shape)).to(
                _torch(np.zeros(0, d.numpy)).dtype))
    want = entry.torch(*ins, **entry.params)
    got = entry.spec(*ins, **entry.params)
    assert isinstance(got, torch.Tensor) and got.dtype == want.dtype
    atol, rtol = entry.ic_tol[dtype]
    assert torch.allclose(got, want, atol=atol, rtol=rtol), (got, want)


# ---------------------------------------------------------------------------------------------
# The functional form
# ---------------------------------------------------------------------------------------------

X8 = np.array([-3.0, -1.5, -0.0, 0.0, 0.5, 2.0, 7.0, NAN], np.float32)


def _clamp(x, lo, hi):
    return np.minimum(np.maximum(x, np.float32(lo)), np.float32(hi))


def test_functional_scalar_parameters(handle):
    assert_exact(infiniop.hardtanh(X8), _clamp(X8, -1, 1))  # defaults: the C header's
    assert_exact(infiniop.hardtanh(X8, min_val=0.0, max_val=6.0), _clamp(X8, 0, 6))
    assert_exact(infiniop.hardtanh(X8, min_val=np.float32(-2.5), max_val=2), _clamp(X8, -2.5, 2))
    assert_exact(infiniop.hardtanh(X8, min_val=-INF, max_val=INF), X8)
    big = np.array([30.0, 21.0, 5.0, -40.0], np.float32)  # threshold 20: x itself above it
    sp_entry = ENTRY["softplus"]
    sig = next(s for s in signatures(sp_entry) if s.dtypes[0] is F32)
    for kw in ({}, {"threshold": 3.0}, {"beta": 0.5}, {"beta": -1.0, "threshold": -30.0}):
        p = {"beta": 1.0, "threshold": 20.0, **kw}
        sp = infiniop.softplus(big, **kw)
        check_results(sp_entry, sig, [sp, big], expected(sp_entry, sig, [big], p),
                      big)
        passed = big * np.float32(p["beta"]) > np.float32(p["threshold"])
        assert_exact(sp[passed], big[passed])  # x itself where beta * x > threshold
    assert infiniop.softplus(big)[2] != 5.0
    a, b, c = (np.full(4, v, np.float32) for v in (1.0, 2.0, 3.0))
    assert_exact(infiniop.addcmul(a, b, c), np.full(4, 7.0, np.float32))  # value=1
    assert_exact(infiniop.addcmul(a, b, c, value=-2), np.full(4, -11.0, np.float32))
    d = infiniop.create_hardtanh_descriptor(infiniop.create_handle("cpu"),
                                            *descriptors([X8, X8]), max_val=0.5)
    assert d.params == {"min_val": np.float32(-1.0), "max_val": np.float32(0.5)}


def test_create_takes_scalars_in_the_c_order(handle):
    """create_hardtanh_descriptor(h, y, x, -0.5, 0.5) as InfiniCore's C call orders it (the row
    operators took their scalars so already; this was "takes 2 tensor descriptors, got 4")."""
    x2 = descriptors([X8, X8])
    d = infiniop.create_hardtanh_descriptor(handle, *x2, -0.5, 0.5)
    assert d.params == {"min_val": np.float32(-0.5), "max_val": np.float32(0.5)}
    d = infiniop.create_hardtanh_descriptor(handle, *x2, -0.25, max_val=2.0)  # then keywords
    assert d.params == {"min_val": np.float32(-0.25), "max_val": np.float32(2.0)}
    x4 = descriptors([X8] * 4)
    d = infiniop.create_addcmul_descriptor(handle, *x4, 0.5)
    assert d.params == {"value": np.float32(0.5)}
    d = infiniop.create_softplus_descriptor(handle, *x2, 2.0, 10.0)
    assert d.params == {"beta": np.float32(2.0), "threshold": np.float32(10.0)}
    raises(Status.BAD_PARAM, infiniop.create_hardtanh_descriptor, handle, *x2, -0.5, min_val=0.1,
           match="hardtanh: 'min_val' given twice")
    raises(Status.BAD_PARAM, infiniop.create_hardtanh_descriptor, handle, *x2, 1.0, 2.0, 3.0,
           match="at most 2 scalars (min_val, max_val), got 3 more")
    raises(Status.BAD_PARAM, infiniop.create_hardtanh_descriptor, handle, *x2, -2.0, -3.0,
           match="max_val")  # validated as keywords are
    raises(Status.BAD_PARAM, infiniop.create_hardtanh_descriptor, handle, *x2, x2[0],
           match="takes 2 tensor descriptors (output, input), got 3")
    raises(Status.BAD_PARAM, infiniop.create_sub_descriptor, handle, *descriptors([X8] * 3), 1.0,
           match="takes 3 tensor descriptors")


def test_functional_outputs_and_dtypes(handle):
    x16 = X8.astype(np.float16)
    e = infiniop.equal(x16, x16)
    assert e.dtype == np.bool_ and e.tolist() == [True] * 7 + [False]  # NaN != NaN, -0 == 0
    for dt in (np.float16, np.int8, np.bool_, np.uint64, ml_dtypes.bfloat16):
        v = X8[:4].astype(dt) if dt is not np.bool_ else X8[:4] > 0
        assert_exact(infiniop.ones(v), np.ones(4, dt))
        assert_exact(infiniop.zeros(v), np.zeros(4, dt))
    inp = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 12
    r = infiniop.silu_and_mul(inp)
    assert r.shape == (2, 3, 2)
    g, u = inp[..., :2], inp[..., 2:]
    assert_close(r, (g / (1 + np.exp(-g.astype(np.float64))) * u).astype(np.float32), 2)
    # two float32 outputs from bfloat16 inputs; A_log and dt_bias broadcast along heads
    rng = np.random.default_rng(3)
    A, a, b, dt = (rng.standard_normal(s).astype(ml_dtypes.bfloat16)
                   for s in [(5,), (2, 3, 5), (2, 3, 5), (5,)])
    out = infiniop.fused_gated_delta_net_gating(A, a, b, dt)
    assert isinstance(out, tuple) and [o.dtype for o in out] == [np.float32, np.float32]
    gating = ENTRY["fused_gated_delta_net_gating"]
    sig = next(s for s in signatures(gating) if s.dtypes[2] is BF16)
    check_results(gating, sig, [*out, A, a, b, dt],
                  expected(gating, sig, [A, a, b, dt]), a)
    g2, b2 = (np.full((2, 3, 5), CANARY, np.float32) for _ in range(2))
    res = infiniop.fused_gated_delta_net_gating(A, a, b, dt, out=(g2, b2), beta=1.0)
    assert res[0] is g2 and res[1] is b2
    assert_exact(g2, out[0])
    assert_exact(b2, out[1])
    # torch in, torch out (a tuple of tensors)
    t = [_torch(v) for v in (A, a, b, dt)]
    tout = infiniop.fused_gated_delta_net_gating(*t)
    assert all(isinstance(o, torch.Tensor) and o.dtype == torch.float32 for o in tout)
    assert_exact(tout[0], out[0])


def test_functional_blas_updates_in_place():
    x = np.arange(6, dtype=np.float32) - 2
    y = np.linspace(-1, 1, 6).astype(np.float32)
    y0 = y.copy()
    r = infiniop.axpy(2.5, x, y)  # a Python float alpha takes the vectors' dtype
    assert r is y
    assert_exact(y, np.float32(2.5) * x + y0)
    r = infiniop.scal(np.array([0.5], np.float32), x)
    assert r is x and x.tolist() == [-1.0, -0.5, 0.0, 0.5, 1.0, 1.5]
    x0, y0 = x.copy(), y.copy()
    rx, ry = infiniop.rot(x, y, 0.6, 0.8)
    assert rx is x and ry is y
    c, s_ = np.float32(0.6), np.float32(0.8)
    assert_exact(x, c * x0 + s_ * y0)
    assert_exact(y, c * y0 - s_ * x0)
    x0, y0 = x.copy(), y.copy()
    rx, ry = infiniop.swap(x, y)
    assert rx is x and ry is y
    assert_exact(x, y0)
    assert_exact(y, x0)
    for flag in (-2.0, -1.0, 0.0, 1.0):
        p = np.array([flag, 1.5, -0.25, 0.5, 2.0], np.float32)
        x0, y0 = x.copy(), y.copy()
        infiniop.rotm(x, y, p)
        wx, wy = _rotm(R(np.float32), x0, y0, p)
        assert_exact(x, wx)
        assert_exact(y, wy)
    copy = infiniop.blas_copy(x)
    assert copy is not x
    assert_exact(copy, x)
    y2 = np.zeros(6, np.float32)
    assert infiniop.blas_copy(x, out=y2) is y2
    assert_exact(y2, x)
    tx, ty = torch.arange(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    assert infiniop.axpy(torch.tensor(2.0, dtype=torch.float64), tx, ty) is ty
    assert ty.tolist() == [1.0, 3.0, 5.0, 7.0]


def test_functional_dequant_dtype_and_optional_zero():
    q = np.array([[-128, -1, 0], [1, 64, 127]], np.int8)
    scale, zero = np.array([0.5], np.float32), np.array([1.0], np.float32)
    raises(Status.BAD_PARAM, infiniop.per_tensor_dequant_int8, q, scale,
           match="is ambiguous (float16, float32, bfloat16); pass dtype= or out=")
    for dt in (np.float16, ml_dtypes.bfloat16, np.float32):
        got = infiniop.per_tensor_dequant_int8(q, scale, dtype=dt)  # NumPy's ufunc keyword
        assert got.dtype == dt
        assert_exact(got, (q.astype(np.float32) * scale).astype(dt))
        assert infiniop.per_tensor_dequant_int8(q, scale, dtype=dt).dtype == dt  # cached path
        raises(Status.BAD_PARAM, infiniop.per_tensor_dequant_int8, q, scale,
               match="ambiguous")  # the calls before did not decide it for this one
        out = np.empty(q.shape, dt)
        assert infiniop.per_tensor_dequant_int8(q, scale, out=out) is out
        assert_exact(out, (q.astype(np.float32) * scale).astype(dt))
        assert infiniop.per_tensor_dequant_int8(q, scale, None, out=out) is out
        assert_exact(out, (q.astype(np.float32) * scale).astype(dt))
        infiniop.per_tensor_dequant_int8(q, scale, zero, out=out)
        assert_exact(out, ((q.astype(np.float32) - zero) * scale).astype(dt))
        assert infiniop.per_tensor_dequant_int8(q, scale, out=out, dtype=dt) is out
    raises(Status.BAD_PARAM, infiniop.per_tensor_dequant_int8, q, scale,
           out=np.empty(q.shape, np.float32), dtype=np.float16,
           match="dtype=float16 but out= operand")
    raises(Status.BAD_PARAM, infiniop.per_tensor_dequant_int8, q, scale, dtype="f17",
           match="dtype='f17' is not a dtype")
    x = np.ones(3, np.float16)
    assert infiniop.sub(x, x, dtype=np.float16).dtype == np.float16
    raises(Status.BAD_TENSOR_DTYPE, infiniop.sub, x, x, dtype=np.float32)  # no promotion
    scaled = infiniop.elementwise("scaled_by_dtype", ("x",), infiniop.FLOATS,
                                  lambda m, x, dtype: x * dtype, register=False,
                                  params=(Param("dtype", "f32", 1.0),))
    assert_exact(scaled(x, dtype=3.0), np.full(3, 3.0, np.float16))  # its own parameter


# ---------------------------------------------------------------------------------------------
# Bad inputs: the exact Status
# ---------------------------------------------------------------------------------------------


def td(shape, dtype=F32, strides=None):
    return TensorDescriptor(dtype, shape, strides)


S3 = (3, 4)
DT, SH, ST, PA = (Status.BAD_TENSOR_DTYPE, Status.BAD_TENSOR_SHAPE, Status.BAD_TENSOR_STRIDES,
                  Status.BAD_PARAM)
CREATE_ERRORS = [  # id, operator, descriptors, scalars, status, text the message contains
    # a dtype combination that matches no signature names the operand
    ("equal-out-f32", "equal", [td(S3), td(S3), td(S3)], {}, DT, "'c'"),
    ("equal-b-f16", "equal", [td(S3, BOOL), td(S3), td(S3, F16)], {}, DT, "'b'"),
    ("silu-int", "silu", [td(S3, I32), td(S3, I32)], {}, DT, "'output'"),
    ("swiglu-b-f64", "swiglu", [td(S3), td(S3), td(S3, F64)], {}, DT, "'b'"),
    ("ones-f8", "ones", [td(S3, DType.F8), td(S3, DType.F8)], {}, DT, "'y'"),
    ("zeros-x-other", "zeros", [td(S3, I32), td(S3, U32)], {}, DT, "'x'"),
    ("log1p-out-f16-in-f32", "log1p", [td(S3, F16), td(S3)], {}, DT, "'x'"),
    ("dequant-out-f64", "per_tensor_dequant_int8", [td(S3, F64), td(S3, I8), td((1,)), None],
     {}, DT, "'x'"),
    ("dequant-packed-u8", "per_tensor_dequant_int8", [td(S3, F16), td(S3, U8), td((1,)), None],
     {}, DT, "'x_packed'"),
    ("dequant-scale-f16", "per_tensor_dequant_int8", [td(S3), td(S3, I8), td((1,), F16), None],
     {}, DT, "'x_scale'"),
    ("dequant-zero-f64", "per_tensor_dequant_int8",
     [td(S3), td(S3, I8), td((1,)), td((1,), F64)], {}, DT, "'x_zero'"),
    ("gating-g-f16", "fused_gated_delta_net_gating",
     [td(S3, F16), td(S3), td((4,), F16), td(S3, F16), td(S3, F16), td((4,), F16)], {}, DT,
     "'g'"),
    ("gating-f64", "fused_gated_delta_net_gating",
     [td(S3), td(S3), td((4,), F64), td(S3, F64), td(S3, F64), td((4,), F64)], {}, DT,
     "'A_log'"),
    ("gating-b-mixed", "fused_gated_delta_net_gating",
     [td(S3), td(S3), td((4,), F16), td(S3, F16), td(S3, BF16), td((4,), F16)], {}, DT, "'b'"),
    ("axpy-y-f64", "axpy", [td(()), td((5,)), td((5,), F64)], {}, DT, "'y'"),
    ("rotm-f32-param-f64", "rotm", [td((5,)), td((5,)), td((5,), F64)], {}, DT, "'param'"),
    ("swap-mixed", "swap", [td((5,), I32), td((5,), I64)], {}, DT, "'y'"),
    # bad scalars
    ("hardtanh-min-nan", "hardtanh", [td(S3), td(S3)], {"min_val": NAN}, PA, "min_val"),
    ("hardtanh-max-nan", "hardtanh", [td(S3), td(S3)], {"max_val": NAN}, PA, "max_val"),
    ("hardtanh-min-above-max", "hardtanh", [td(S3), td(S3)], {"min_val": 2.0, "max_val": 1.0},
     PA, "min_val"),
    ("hardtanh-min-above-default-max", "hardtanh", [td(S3), td(S3)], {"min_val": 1.5}, PA,
     "max_val"),
    ("hardtanh-str", "hardtanh", [td(S3), td(S3)], {"min_val": "-1"}, PA, "min_val"),
    ("hardtanh-bool", "hardtanh", [td(S3), td(S3)], {"max_val": True}, PA, "max_val"),
    ("hardtanh-complex", "hardtanh", [td(S3), td(S3)], {"max_val": 1j}, PA, "max_val"),
    ("hardtanh-array", "hardtanh", [td(S3), td(S3)], {"max_val": np.ones(1)}, PA, "max_val"),
    ("hardtanh-none", "hardtanh", [td(S3), td(S3)], {"max_val": None}, PA, "max_val"),
    ("hardtanh-unknown", "hardtanh", [td(S3), td(S3)], {"min": -1.0}, PA, "min"),
    ("softplus-beta-0", "softplus", [td(S3), td(S3)], {"beta": 0.0}, PA, "beta"),
    ("softplus-beta--0", "softplus", [td(S3), td(S3)], {"beta": -0.0}, PA, "beta"),
    ("softplus-beta-inf", "softplus", [td(S3), td(S3)], {"beta": INF}, PA, "beta"),
    ("softplus-beta-nan", "softplus", [td(S3), td(S3)], {"beta": NAN}, PA, "beta"),
    ("softplus-beta-underflows", "softplus", [td(S3), td(S3)], {"beta": 1e-50}, PA, "beta"),
    ("softplus-threshold-nan", "softplus", [td(S3), td(S3)], {"threshold": NAN}, PA,
     "threshold"),
    ("softplus-threshold-overflow", "softplus", [td(S3), td(S3)], {"threshold": 1e39}, PA,
     "threshold"),
    ("addcmul-value-overflow", "addcmul", [td(S3)] * 4, {"value": -3.5e38}, PA, "value"),
    ("addcmul-value-huge-int", "addcmul", [td(S3)] * 4, {"value": 2**1000}, PA, "value"),
    ("addcmul-value-int-beyond-f64", "addcmul", [td(S3)] * 4, {"value": -(2**1100)}, PA,
     "overflows"),
    ("addcmul-unknown", "addcmul", [td(S3)] * 4, {"alpha": 2.0}, PA, "alpha"),
    ("silu-any-scalar", "silu", [td(S3)] * 2, {"beta": 1.0}, PA, "beta"),
    ("gating-beta-0", "fused_gated_delta_net_gating",
     [td(S3), td(S3), td((4,)), td(S3), td(S3), td((4,))], {"beta": 0.0}, PA, "beta"),
    ("gating-threshold-nan", "fused_gated_delta_net_gating",
     [td(S3), td(S3), td((4,)), td(S3), td(S3), td((4,))], {"threshold": NAN}, PA,
     "threshold"),
    # None where not optional; wrong counts
    ("silu-none", "silu", [td(S3), None], {}, Status.NULL_POINTER, "input"),
    ("dequant-scale-none", "per_tensor_dequant_int8", [td(S3), td(S3, I8), None, None], {},
     Status.NULL_POINTER, "x_scale"),
    ("gating-five", "fused_gated_delta_net_gating",
     [td(S3), td(S3), td((4,)), td(S3), td(S3)], {}, PA, "6 tensor descriptors"),
    ("axpy-four", "axpy", [td(()), td((5,)), td((5,)), td((5,))], {}, PA, "3 tensor"),
    ("dequant-three", "per_tensor_dequant_int8", [td(S3), td(S3, I8), td((1,))], {}, PA,
     "4 tensor"),
    # shapes
    ("silu_and_mul-odd", "silu_and_mul", [td((3, 2)), td((3, 5))], {}, SH, "multiple of 2"),
    ("silu_and_mul-out-mismatch", "silu_and_mul", [td((3, 3)), td((3, 8))], {}, SH,
     "'input': shape (3, 8) is read as 2 parts of shape (3, 4), which cannot broadcast to output "
     "shape (3, 3)"),  # was "shape (3, 4) cannot broadcast": a shape the caller never passed
    ("silu_and_mul-out-full", "silu_and_mul", [td((3, 8)), td((3, 8))], {}, SH, "output"),
    ("silu_and_mul-0d", "silu_and_mul", [td(()), td(())], {}, SH, "input"),
    ("rotm-param-4", "rotm", [td((5,)), td((5,)), td((4,))], {}, SH, "(5,)"),
    ("rotm-param-6", "rotm", [td((5,)), td((5,)), td((6,))], {}, SH, "(5,)"),
    ("rotm-param-1x5", "rotm", [td((5,)), td((5,)), td((1, 5))], {}, SH, "(5,)"),
    ("rotm-param-0d", "rotm", [td((5,)), td((5,)), td(())], {}, SH, "(5,)"),
    ("axpy-alpha-2", "axpy", [td((2,)), td((5,)), td((5,))], {}, SH, "'alpha'"),
    ("axpy-x-longer", "axpy", [td(()), td((6,)), td((5,))], {}, SH, "'x'"),
    ("rot-y-shorter", "rot", [td((5,)), td((4,)), td(()), td(())], {}, SH, "'y'"),
    ("swap-broadcast-y", "swap", [td((5,)), td((5,), F32, (0,))], {}, ST, "'y'"),
    ("scal-broadcast-x", "scal", [td((1,)), td((5,), F32, (0,))], {}, ST, "'x'"),
    ("gating-A_log-heads", "fused_gated_delta_net_gating",
     [td(S3), td(S3), td((3,)), td(S3), td(S3), td((4,))], {}, SH, "'A_log'"),
    ("gating-outputs-differ", "fused_gated_delta_net_gating",
     [td(S3), td((4,)), td((4,)), td(S3), td(S3), td((4,))], {}, SH, "'beta_output'"),
    ("ones-shape", "ones", [td(S3), td((3, 5))], {}, SH, "'x'"),
    ("dequant-scale-2", "per_tensor_dequant_int8", [td(S3), td(S3, I8), td((2,)), None], {},
     SH, "'x_scale'"),
]


@pytest.mark.parametrize("op, descs, scalars, status, text",
                         [pytest.param(*c[1:], id=c[0]) for c in CREATE_ERRORS])
def test_create_errors(handle, op, descs, scalars, status, text):
    create = getattr(infiniop, f"create_{op}_descriptor")
    raises(status, create, handle, *descs, match=text, **scalars)


def test_bad_dtype_message_lists_the_signatures(handle):
    e = raises(DT, infiniop.create_per_tensor_dequant_int8_descriptor, handle, td(S3, F64),
               td(S3, I8), td((1,)), None)
    assert "(int8, float32, float32) -> (float16 | bfloat16 | float32)" in str(e), str(e)
    e = raises(DT, infiniop.create_equal_descriptor, handle, td(S3), td(S3), td(S3))
    assert "-> (bool)" in str(e) and "bool" in str(e)


@pytest.mark.parametrize("op, args, scalars", [
    ("hardtanh", (X8,), {"min_val": NAN}), ("hardtanh", (X8,), {"min_val": 3.0}),
    ("softplus", (X8,), {"beta": 0}), ("softplus", (X8,), {"threshold": "20"}),
    ("addcmul", (X8, X8, X8), {"value": 1e39}), ("addcmul", (X8, X8, X8), {"valu": 1.0}),
    ("silu", (X8,), {"min_val": 0.0}),
    ("fused_gated_delta_net_gating", (X8,) * 4, {"beta": 0.0}),
], ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v)) if isinstance(v, dict)
    else "")
def test_functional_bad_scalars(op, args, scalars):
    raises(Status.BAD_PARAM, getattr(infiniop, op), *args, **scalars)


def test_overlapping_outputs(handle):
    """Written operands checked against each other at calculate (BAD_PARAM), as single outputs
    are against their inputs; nothing is written when it fails."""
    v = np.arange(8, dtype=np.float32)
    d5 = td((5,))
    rot = infiniop.create_rot_descriptor(handle, d5, d5, td(()), td(()))
    c, s = np.float32(0.6), np.float32(0.8)
    before = v.copy()
    raises(PA, rot.calculate, None, v[:5], v[:5], c, s, match="share memory")
    raises(PA, rot.calculate, None, v[:5], v[1:6], c, s, match="share memory")
    raises(PA, rot.calculate, None, v[:5], v[3:8], c, s)
    raises(PA, rot.calculate, None, v[:5], np.ones(5, np.float32), v[:1].reshape(()),
           s)  # c inside x
    assert_exact(v, before)
    rot.calculate(None, v[:5], np.ones(5, np.float32), c, s)
    swap = infiniop.create_swap_descriptor(handle, d5, d5)
    raises(PA, swap.calculate, None, v[:5], v[:5], match="share memory")
    raises(PA, infiniop.swap, v[:5], v[2:7])
    # the two float32 outputs of the gating aliased, exactly or partially
    g = infiniop.create_fused_gated_delta_net_gating_descriptor(
        handle, td(S3), td(S3), td((4,)), td(S3), td(S3), td((4,)))
    out = np.zeros(24, np.float32)
    a, b, h = np.ones(S3, np.float32), np.ones(S3, np.float32), np.ones(4, np.float32)
    raises(PA, g.calculate, None, out[:12].reshape(S3), out[:12].reshape(S3), h, a, b, h,
           match="share memory")
    raises(PA, g.calculate, None, out[:12].reshape(S3), out[4:16].reshape(S3), h, a, b, h)
    assert not out.any()
    g.calculate(None, out[:12].reshape(S3), out[12:].reshape(S3), h, a, b, h)
    raises(PA, infiniop.fused_gated_delta_net_gating, h, a, b, h, out=(out[:12].reshape(S3),) * 2)
    # in place on float32 inputs is fine (exact aliasing of an input)
    infiniop.fused_gated_delta_net_gating(h, a, b, h, out=(a, b))
    # outputs over a silu_and_mul input (split into two views: never in place)
    inp = np.ones((3, 8), np.float32)
    raises(PA, infiniop.silu_and_mul, inp, out=inp[:, :4])
    raises(PA, infiniop.silu_and_mul, inp, out=inp[:, 4:])
    # dequant output over its int8 input; axpy's y over alpha
    q = np.zeros(16, np.int8)
    raises(PA, infiniop.per_tensor_dequant_int8, q[:8], np.ones(1, np.float32),
           out=q.view(np.float16))
    y = np.ones(5, np.float32)
    raises(PA, infiniop.axpy, y[2:3].reshape(()), np.ones(5, np.float32), y)
    # axpy with x == y is in place: y = alpha * y + y
    infiniop.axpy(np.float32(2), y, y)
    assert y.tolist() == [3.0] * 5


def test_none_and_optional_operands(handle):
    d = [td(S3), td(S3, I8), td((1,))]
    q, scale = np.ones(S3, np.int8), np.full(1, 0.5, np.float32)
    out = np.zeros(S3, np.float32)
    desc = infiniop.create_per_tensor_dequant_int8_descriptor(handle, *d, None)  # x_zero?
    desc.calculate(None, out, q, scale, None)
    assert (out == 0.5).all()
    raises(PA, desc.calculate, None, out, q, scale, np.ones(1, np.float32), match="None")
    raises(Status.NULL_POINTER, desc.calculate, None, out, q, None, None)
    raises(Status.NULL_POINTER, desc.calculate, None, None, q, scale, None)
    raises(PA, desc.calculate, None, out, q, scale)  # three buffers for four operands
    with_zero = infiniop.create_per_tensor_dequant_int8_descriptor(handle, *d, td((1,)))
    raises(Status.NULL_POINTER, with_zero.calculate, None, out, q, scale, None)
    with_zero.calculate(None, out, q, scale, np.full(1, 3.0, np.float32))
    assert (out == -1.0).all()
    # the functional form: a missing or None optional operand is fine, a required one is not
    raises(Status.NULL_POINTER, infiniop.per_tensor_dequant_int8, q, None, out=out)
    raises(Status.NULL_POINTER, infiniop.axpy, None, np.ones(3, np.float32),
           np.ones(3, np.float32))
    raises(Status.NULL_POINTER, infiniop.rot, np.ones(3, np.float32), None, 0.5, 0.5)
    raises(PA, infiniop.per_tensor_dequant_int8, q, out=out)  # x_scale missing
    raises(PA, infiniop.axpy, 1.0, np.ones(3, np.float32))  # y missing
    raises(PA, infiniop.silu, X8, X8)  # one operand too many
    raises(PA, infiniop.axpy, 1.0, X8, X8.copy(), out=X8.copy())  # updates in place: no out=
    raises(PA, infiniop.fused_gated_delta_net_gating, *(np.ones(4, np.float32),) * 4,
           out=np.zeros(4, np.float32))  # two outputs need a tuple
    raises(PA, infiniop.rot, X8.copy(), X8.copy(), 0.5, 0.5, out=(X8.copy(), X8.copy()))
    raises(PA, infiniop.scal, 2.0, 3.0)  # an updated operand must be an array
    desc = infiniop.create_rot_descriptor(handle, td((5,)), td((5,)), td(()), td(()))
    v = np.ones(5, np.float32)
    raises(Status.NULL_POINTER, desc.calculate, None, v, v.copy(), None, np.float32(1))
    raises(PA, desc.calculate, None, v, v.copy(), np.float32(1))


# ---------------------------------------------------------------------------------------------
# Scalar parameters reach the kernel at run time: 100 values, one compiled kernel
# ---------------------------------------------------------------------------------------------


def _kernel_state(desc):
    """What compiling a new kernel would change: the loaded kernel modules and, on the CPU, the
    entry points of the raw-address and the checked-array kernels (``native.Kernel`` keeps one
    per argument types: a new signature or a new module gives a new function)."""
    kern = desc._kernel
    if ON_TRITON:
        from infiniop.backends.triton import codegen

        ks = kern.launch.source
        return len(codegen._modules), ks.digest, id(codegen.load(ks))
    from infiniop.backends.cpu import codegen

    return len(codegen._modules), id(kern._fn), id(kern.array_launcher)


@pytest.mark.parametrize("name, values", [
    ("hardtanh", [{"min_val": -1.0 - k / 64, "max_val": 0.5 + k / 32} for k in range(100)]),
    ("softplus", [{"beta": 0.5 + k / 16, "threshold": 5.0 + k / 4} for k in range(100)]),
    ("addcmul", [{"value": k / 8 - 6} for k in range(100)]),
], ids=["hardtanh", "softplus", "addcmul"])
def test_one_kernel_for_100_parameter_values(handle, name, values):
    """create with 100 different parameter values compiles one kernel (CPU: one module, one
    specialisation of each entry point; Triton: one kernel source, parameters passed as fp32
    arguments, which Triton never specialises on), and each value is the one used."""
    entry = ENTRY[name]
    sig = next(s for s in signatures(entry) if s.dtypes[0] is F32)
    bufs, _, _ = build(np.random.default_rng(5), entry, sig, Layout("contiguous"))
    ins = [np.array(b) for o, b in zip(entry.spec.operands, bufs) if o.reads]
    descs = descriptors(bufs)
    first = entry.create(handle, *descs, **values[0])
    first.calculate(None, *[b.ctypes.data for b in bufs])
    first.calculate(None, *bufs)
    state = _kernel_state(first)
    if ON_TRITON:
        assert all(isinstance(v, float) for v in first._kernel.launch.scalars[-len(values[0]):])
    for n, p in enumerate(values):
        d = entry.create(handle, *descs, **p)
        bufs[0][...] = 0
        d.calculate(None, *([b.ctypes.data for b in bufs] if n % 2 else bufs))
        assert _kernel_state(d) == state
        want = expected(entry, sig, ins, params=p)
        check_results(entry, sig, bufs, want, ins[0])
        if n % 10 == 0:  # the functional form: its own descriptors, the same kernel
            got = entry.spec(*ins, **p)
            check_results(entry, sig, [got] + ins, want, ins[0])
        d.destroy()
    assert _kernel_state(first) == state


# ---------------------------------------------------------------------------------------------
# Found bugs (regression tests)
# ---------------------------------------------------------------------------------------------


def test_traced_equality_is_an_error(handle):
    """``x == 1.0`` in an expression compared the Expr object with 1.0 (False, silently): the
    placeholder erfinv's ``m.abs(y) == 1.0`` made erfinv(+-1) NaN instead of +-inf. == and !=
    on traced values now raise TypeError (use m.eq / m.ne)."""
    bad = infiniop.elementwise("test_eq_on_expr", ("x",), infiniop.FLOATS,
                               lambda m, x: m.where(x == 1.0, x, -x), register=False)
    d = TensorDescriptor(F32, (3,))
    with pytest.raises(TypeError, match="m.eq"):
        bad.create_descriptor(handle, d, d)
    ne = infiniop.elementwise("test_ne_on_expr", ("x",), infiniop.FLOATS,
                              lambda m, x: m.where(x != 1.0, x, -x), register=False)
    with pytest.raises(TypeError, match="m.ne"):
        ne.create_descriptor(handle, d, d)
    for dt in FLOATS:
        x = np.array([1.0, -1.0, 0.0, -0.0, 2.0, NAN], np.float64).astype(dt.numpy)
        want = np.array([INF, -INF, 0.0, -0.0, NAN, NAN]).astype(dt.numpy)
        assert_exact(infiniop.erfinv(x), want)


def test_functional_cache_keeps_signed_zero_parameters_apart():
    """The functional descriptor cache keyed parameters by ==, so hardtanh(x, min_val=-0.0)
    after hardtanh(x, min_val=0.0) reused the 0.0 descriptor: +0.0 where -0.0 was promised
    (maximum(+-0, -0.0) is -0.0). Same for addcmul's value."""
    functional.clear_cache()
    x = np.array([-0.0, 0.0, 0.5], np.float32)
    for first, second in ((0.0, -0.0), (-0.0, 0.0)):
        for lo in (first, second):
            for arr in (x, _torch(x)):  # the NumPy fast path and the general path
                got = infiniop.hardtanh(arr, min_val=lo, max_val=1.0)
                assert_exact(got, np.maximum(x, np.float32(lo)))
    ones, z = np.ones(3, np.float32), np.array([-0.0, -0.0, -0.0], np.float32)
    assert_exact(infiniop.addcmul(z, ones, ones, value=0.0), np.zeros(3, np.float32))
    assert_exact(infiniop.addcmul(z, ones, ones, value=-0.0), z)


@pytest.mark.parametrize("value", [[1.0], np.ones(1, np.float32), {"v": 1}], ids=str)
def test_functional_unhashable_parameter_is_bad_param(value):
    """An unhashable parameter value raised TypeError from the descriptor cache lookup."""
    raises(Status.BAD_PARAM, infiniop.hardtanh, X8, max_val=value)
    raises(Status.BAD_PARAM, infiniop.hardtanh, _torch(X8), max_val=value)


def test_parameter_conversion_errors_are_bad_param():
    """A Python int beyond float64 raised OverflowError, and a float32 overflow warned
    (RuntimeWarning) before BAD_PARAM; the gating's beta/threshold were not validated at all
    (beta=0 gave -inf, NaN thresholds were accepted): they are softplus's parameters now."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for v in (2**1100, -(2**1100), 1e39, np.float64(-1e300)):
            raises(Status.BAD_PARAM, infiniop.addcmul, X8, X8, X8, value=v, match="overflows")
    for kw in ({"beta": 0.0}, {"beta": NAN}, {"beta": INF}, {"threshold": NAN}):
        raises(Status.BAD_PARAM, infiniop.fused_gated_delta_net_gating, *(X8,) * 4, **kw)
    assert infiniop.fused_gated_delta_net_gating.params == infiniop.softplus.params


def test_help_names_a_descriptor_api_that_exists():
    """help(op) shows how to create a descriptor: a function of infiniop for a built-in, the
    operator's own method for a user's (there is no infiniop.create_<user op>_descriptor)."""

    def creator(op):
        line = next(x for x in type(op).__doc__.splitlines() if x.startswith("Descriptor API:"))
        return line.split(": ", 1)[1].split("(", 1)[0]

    assert creator(infiniop.hardtanh) == "infiniop.create_hardtanh_descriptor"
    assert infiniop.create_hardtanh_descriptor is not None
    mine = infiniop.elementwise("help_softclamp", ("x",), infiniop.FLOATS, lambda m, x: x * 0.5,
                                register=False)
    assert creator(mine) == "help_softclamp.create_descriptor"
    assert not hasattr(infiniop, "create_help_softclamp_descriptor")
