"""mathlib accuracy: each function against an independent reference, rounded once.

Every function is compiled as an elementwise operator by the real pipeline (CPU backend).
float32: ~1M inputs per function (all ranges: specials, random bit patterns, subnormals, tiny and
huge magnitudes, and each function's hard regions): max error
<= 1 ulp and >= 99% correctly rounded against a float64 reference. Results that are subnormal
may be rounded twice (<= 1 ulp) and are not counted in the correctly-rounded rate. fp16 / bf16:
every value of the type, computed in float32 and rounded once, correctly rounded except where the
exact result is within one float32 ulp of a tie. float64: 2^17 inputs against long double or
mpmath, max error <= 1 ulp (the documented target is 2). NaN stays NaN everywhere. The NumPy
evaluation of the m interface (tests/mathlib_support.py: exact IEEE primitives) and the compiled
operator give the same bits, and the Triton interpreter gives the CPU's bits.

``--long`` (INFINIOP_LONG=1): 4x the samples.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from conftest import raises
from mathlib_support import (
    NumpyMath,
    correctly_rounded,
    numba_kernel,
    round_once,
    same_bits,
    sample_f32,
    sample_f64,
    ulp_error,
)

import infiniop
from infiniop import Status
from infiniop.elementwise import mathlib

torch = pytest.importorskip("torch")

LONG = os.environ.get("INFINIOP_LONG") == "1"
N32 = (1 << 22) if LONG else (1 << 20)
N64 = (1 << 19) if LONG else (1 << 17)
LD = np.longdouble


def _t64(fn):
    """A torch float64 function on NumPy input (the float32 reference)."""
    return lambda x: fn(torch.from_numpy(np.asarray(x, np.float64))).numpy()


def _x_sigmoid(v, xp=np.float64):
    """x * sigmoid(v(x)) without cancellation; limits at +-inf."""
    def ref(x):
        x = np.asarray(x).astype(xp)
        with np.errstate(all="ignore"):
            r = x / (1 + np.exp(-v(x)))
        return np.where(np.isneginf(x), xp(-0.0), np.where(np.isposinf(x), x, r))
    return _half_x_tail(ref, xp)


def _half_x_tail(ref, xp):
    """A reference for f(x) = x/2 + c x^2 + ... (c > 0) that keeps the positive tail where xp
    loses it: the exact value lies between x/2 and the next xp number up, which rounds to any
    narrower type as it does (x/2 is a tie of the result type for odd subnormal x)."""
    def tail_kept(x):
        r = ref(x)
        x = np.asarray(x).astype(xp)
        with np.errstate(invalid="ignore"):
            lost = (x != 0) & (np.abs(x) < 1e-3) & (r == x / 2)
        return np.where(lost, np.nextafter(x / 2, xp(np.inf)), r)
    return tail_kept


def _softplus(xp):
    def ref(x):
        x = np.asarray(x).astype(xp)
        with np.errstate(all="ignore"):
            return np.where(x > 20, x, np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))))
    return ref


def _hardswish(xp):
    def ref(x):
        x = np.asarray(x).astype(xp)
        with np.errstate(invalid="ignore", over="ignore"):
            return np.where(np.isneginf(x), xp(-0.0), x * np.clip(x + 3, 0, 6) / 6)
    return _half_x_tail(ref, xp)                          # x/2 + x^2/6 near 0


def _gelu(x):
    x = np.asarray(x, np.float64)
    r = x * torch.erfc(torch.from_numpy(-x / np.sqrt(2))).numpy() / 2
    return np.where(np.isneginf(x), -0.0, r)


def _ld(fn):
    return lambda x: fn(np.asarray(x).astype(LD))


_C1 = 2 * np.sqrt(2 / np.pi)
_PI_LD = 4 * np.arctan(LD(1))
_C1_LD = 2 * np.sqrt(LD(2) / _PI_LD)


@dataclass
class Case:
    ref32: object                     # float64 reference for float32 results
    iv32: list                        # hard regions sampled besides the generic inputs
    ref64: object = None              # long double / mpmath reference for float64 results
    iv64: list = field(default_factory=list)
    n64: int = 0                      # fewer float64 samples (slow mpmath reference)


def _mp(fn, dps=40):
    """An mpmath reference (exact to float64 rounding), elementwise; limits for non-finite x."""
    import mpmath as mp

    def ref(x):
        x = np.asarray(x, np.float64)
        out = np.empty(x.shape, LD)
        with mp.workdps(dps):
            for i, v in enumerate(x.flat):
                if not np.isfinite(v):
                    out.flat[i] = LD(float(fn(mp.mpf(v)))) if not np.isnan(v) else np.nan
                else:
                    r = fn(mp.mpf(float(v)))
                    out.flat[i] = (LD(mp.nstr(r, 25)) if mp.isfinite(r) else np.nan if mp.isnan(r)
                                   else np.inf if r > 0 else -np.inf)
        return out
    return ref


def _mp_gelu(z):
    import mpmath as mp
    if abs(z) > 50:                                  # mpmath's erfc overflows on huge input
        return z if z > 0 else mp.mpf(0)
    return z * mp.erfc(-z / mp.sqrt(2)) / 2


def _mp_erfc(z):
    import mpmath as mp
    if abs(z) > 30:
        return mp.mpf(0) if z > 0 else mp.mpf(2)
    return mp.erfc(z)


def _mp_erfinv(z):
    import mpmath as mp
    if abs(z) > 1:
        return mp.nan
    if abs(z) == 1:
        return mp.inf if z > 0 else -mp.inf
    return mp.erfinv(z)


CASES = {
    "exp": Case(_t64(torch.exp), [(-104, 89), (-1, 1), (-88, -87), (88, 89)],
                _ld(np.exp), [(-746, 710), (-1, 1)]),
    # softmax's exp (x - max <= 0): plain arithmetic, x > 0 taken as 0
    "exp_nonpositive": Case(lambda x: np.exp(np.minimum(np.asarray(x, np.float64), 0)),
                            [(-104, 0), (-1, 0), (-88, -87)],
                            lambda x: np.exp(np.minimum(np.asarray(x).astype(LD), 0)),
                            [(-746, 0), (-1, 0)]),
    "exp2": Case(_t64(torch.exp2), [(-151, 129), (-1, 1)], _ld(np.exp2), [(-1076, 1025), (-1, 1)]),
    "expm1": Case(_t64(torch.expm1), [(-20, 89), (-1, 1), (-1e-3, 1e-3)],
                  _ld(np.expm1), [(-40, 710), (-1, 1), (-1e-3, 1e-3)]),
    "log": Case(_t64(torch.log), [(0, 10), (0.5, 2), (0.99, 1.01)],
                _ld(np.log), [(0, 10), (0.5, 2), (0.99, 1.01)]),
    "log2": Case(_t64(torch.log2), [(0, 10), (0.5, 2), (0.99, 1.01)],
                 _ld(np.log2), [(0, 10), (0.5, 2), (0.99, 1.01)]),
    "log10": Case(_t64(torch.log10), [(0, 10), (0.5, 2), (0.99, 1.01)],
                  _ld(np.log10), [(0, 10), (0.5, 2), (0.99, 1.01)]),
    "log1p": Case(_t64(torch.log1p), [(-1, 10), (-0.5, 0.5), (-1e-3, 1e-3), (-1, -0.99)],
                  _ld(np.log1p), [(-1, 10), (-0.5, 0.5), (-1e-3, 1e-3)]),
    "atanh": Case(_t64(torch.atanh), [(-1, 1), (-0.01, 0.01), (0.99, 1)],
                  _ld(np.arctanh), [(-1, 1), (-0.01, 0.01), (0.99, 1)]),
    "tanh": Case(_t64(torch.tanh), [(-10, 10), (-1, 1), (-0.01, 0.01)],
                 _ld(np.tanh), [(-20, 20), (-1, 1), (-0.01, 0.01)]),
    "sigmoid": Case(_t64(torch.sigmoid), [(-105, 30), (-10, 10)],
                    _x_sigmoid(lambda x: x, LD) and (lambda x: 1 / (1 + np.exp(-np.asarray(x).astype(LD)))),
                    [(-750, 40), (-10, 10)]),
    "silu": Case(_x_sigmoid(lambda x: x), [(-115, 30), (-10, 10)],
                 _x_sigmoid(lambda x: x, LD), [(-770, 40), (-10, 10)]),
    "quickgelu": Case(_x_sigmoid(lambda x: 1.702 * x), [(-70, 12), (-5, 5)],
                      _x_sigmoid(lambda x: LD("1.702") * x, LD), [(-40, 25), (-5, 5)]),
    "gelu_tanh": Case(_x_sigmoid(lambda x: x * (_C1 + _C1 * 0.044715 * x * x)), [(-12, 6), (-3, 3)],
                      _x_sigmoid(lambda x: x * (_C1_LD + _C1_LD * LD("0.044715") * x * x), LD),
                      [(-8, 8), (-3, 3)]),
    "softplus": Case(_softplus(np.float64), [(-110, 30), (-5, 5), (-18, -15)],
                     _softplus(LD), [(-750, 30), (-5, 5), (-40, -30)]),
    "hardswish": Case(_hardswish(np.float64), [(-4, 4)], _hardswish(LD), [(-4, 4)]),
    "reciprocal": Case(lambda x: 1 / np.asarray(x, np.float64), [(-10, 10)],
                       lambda x: 1 / np.asarray(x).astype(LD), [(-10, 10)]),
    "erf": Case(_t64(torch.erf), [(-4, 4), (-1, 1), (-0.01, 0.01)],
                _mp(lambda z: __import__("mpmath").erf(z)), [(-7, 7), (-1, 1)], 1 << 13),
    "erfc": Case(_t64(torch.erfc), [(-4, 11), (-1, 1), (8, 10.1)],
                 _mp(_mp_erfc), [(-7, 28), (-1, 1), (0.7, 2.1)], 1 << 13),
    "erfinv": Case(_t64(torch.erfinv), [(-1, 1), (-0.01, 0.01), (0.99, 1), (0.99999, 1)],
                   _mp(_mp_erfinv, 60), [(-1, 1), (0.999, 1), (1 - 1e-12, 1)], 1 << 12),
    "gelu": Case(_half_x_tail(_gelu, np.float64), [(-16, 6), (-1, 1), (-14, -10)],
                 _mp(_mp_gelu), [(-40, 9), (-2, 2)], 1 << 13),
}


_OPS = {}


def operator(name):
    """The mathlib function as an elementwise operator (every float dtype)."""
    if name not in _OPS:
        fn = getattr(mathlib, name)
        _OPS[name] = infiniop.elementwise(f"mathlib_{name}", ("x",), infiniop.FLOATS,
                                          lambda m, x: fn(m, x), register=False)
    return _OPS[name]


def _run(name, x, dtype=None, result_bits=None):
    """The function on ``x`` through the pipeline; with ``result_bits`` (the fp16/bf16 variants)
    through the prototype kernel of mathlib_support (the pipeline passes the hint itself when
    the output is fp16/bf16: see test_half_types_through_the_pipeline)."""
    if result_bits is None:
        return operator(name)(x)
    k = numba_kernel(getattr(mathlib, name), dtype, dtype, result_bits=result_bits)
    y = np.empty_like(x)
    k(x, y)
    return y


def _cr_rate(y, ref, dtype, tiny):
    """Fraction correctly rounded among results that are not subnormal (a subnormal result may
    be rounded twice: once to the format's precision, once to the subnormal grid; <= 1 ulp)."""
    normal = ~(np.abs(np.nan_to_num(ref)) < tiny) | (ref == 0)
    return correctly_rounded(y[normal], ref[normal], dtype).mean()


def _check_nan(x, y):
    assert np.all(np.isnan(y[np.isnan(x)])), "NaN input must give NaN"


@pytest.mark.parametrize("name", list(CASES))
def test_float32(name):
    case = CASES[name]
    x = sample_f32(case.iv32, N32)
    y = _run(name, x, "f32")
    with np.errstate(all="ignore"):
        ref = case.ref32(x)
    err = ulp_error(y, ref, np.float32)
    cr = _cr_rate(y, ref, np.float32, 2.0 ** -126)
    worst = np.argmax(np.where(np.isfinite(err), err, 1e9))
    assert err.max() <= 1.0, f"{name}: {err.max():.3f} ulp at x={x[worst]!r}"
    assert cr >= F32_CR.get(name, 0.99), f"{name}: only {cr:.4%} correctly rounded"
    _check_nan(x, y)


# plain arithmetic by design (no double-float steps): within one ulp, fewer correctly rounded
F32_CR = {"exp_nonpositive": 0.88}
# cheaper for fp16/bf16 results
HALF_VARIANTS = ["silu", "sigmoid", "tanh", "gelu", "gelu_tanh", "softplus", "log", "log2", "log10",
                 "log1p", "exp_nonpositive", "erf", "erfc", "atanh", "erfinv", "quickgelu",
                 "exp", "exp2", "expm1", "hardswish"]
PIPELINE_HALF = list(CASES) if LONG else ["silu", "erfinv"]


@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("name", PIPELINE_HALF)
def test_half_types_through_the_pipeline(name, dt):
    """fp16/bf16 operands: the framework computes in float32 and rounds once, with the result's
    precision passed to mathlib (m.result_bits): the same bits as the float32 algorithm for that
    precision rounded by NumPy (so test_half_types covers every function)."""
    npdt, bits = (np.float16, 11) if dt == "f16" else (ml_dtypes.bfloat16, 8)
    x = np.arange(1 << 16, dtype=np.uint16).view(npdt)
    y = operator(name)(x)
    assert y.dtype == npdt
    x32 = x.astype(np.float32)
    want = _run(name, x32, "f32", bits) if name in HALF_VARIANTS else operator(name)(x32)
    assert same_bits(y.astype(np.float32), want.astype(npdt).astype(np.float32))


@pytest.mark.parametrize("name, x, want", [
    ("erfc", -0.00043272972106933594, 1.0009765625),      # a hair above the tie 1 + 2^-11
    ("erfc", 0.00021636486053466797, 0.99951171875),
    ("erf", 0.0014820098876953125, 0.0016717910766601562),
    ("erf", -0.0014820098876953125, -0.0016717910766601562),
    ("quickgelu", 2.0 ** -24, 2.0 ** -24)])                 # x/2 + x^2 1.702/4: above 2^-25
def test_half_results_rounded_once_from_float64(name, x, want):
    """The operators' fp16 results whose exact value lies within float32's rounding of an
    fp16 tie (values from mpmath at 150 bits): float64 -> float32 -> fp16 by round to nearest
    twice gave the even neighbour (erf, erfc and quickgelu were each wrong on 1-2 of the 63,488
    finite fp16 inputs that way). erfc's float32 half path rounds 1 - erf(x) to odd; erf's and
    quickgelu's happen to round these right (they misround 2 and 1 other near-ties,
    test_half_types)."""
    y = getattr(infiniop, name)(np.array([x], np.float16))
    assert y.dtype == np.float16 and float(y[0]) == want


@pytest.mark.parametrize("dtype, bits, k", [("f32", None, 64), ("f64", None, 600),
                                           ("f32", 8, 64), ("f32", 11, 0)])
def test_exp_nonpositive_scaled_is_exp_nonpositive_times_a_power_of_two(dtype, bits, k):
    """softmax's exp (the scale cancels in e / sum(e)): exactly exp_nonpositive(x) 2^k where
    that is normal, and normal down to the clamp (fp16 results: 0 scale, limited at -87)."""
    npdt = np.float32 if dtype == "f32" else np.float64
    lo = -104.0 if dtype == "f32" else -746.0
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.uniform(lo, 0, 1 << 16), rng.uniform(-3, 0, 1 << 14),
                        [0.0, -0.0, lo, 2 * lo, 1.0, -np.inf]]).astype(npdt)
    scaled = np.empty_like(x)
    numba_kernel(mathlib.exp_nonpositive_scaled, dtype, dtype, result_bits=bits)(x, scaled)
    plain = _run("exp_nonpositive", x, dtype, bits) if bits else operator("exp_nonpositive")(x)
    tiny = np.finfo(npdt).tiny
    normal = plain >= tiny
    assert same_bits(scaled[normal] * npdt(2.0 ** -k), plain[normal])
    assert (scaled >= tiny).all() if bits != 11 else (scaled[x >= -87] >= tiny).all()


@pytest.mark.parametrize("bits", [11, 8])
def test_exp_nonpositive_for_half_results_on_float32_inputs(bits):
    """softmax's exp takes x - max, a float32 value, not an fp16/bf16 one: its half-result
    version (one-step reduction and x limited at -87 for fp16 results) is within 2^-21 of
    exp(x) wherever the result can reach the output (fp16: x >= -17.4, exp(x) >= 2^-25; bf16:
    every normal result), and 0 <= result < 2^-24 below that for fp16."""
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-104, 0, 1 << 18), rng.uniform(-18, 0, 1 << 18),
                        -rng.exponential(1e-3, 1 << 16), [0.0, -0.0, -87.0, -87.5, -104.0]])
    x = x.astype(np.float32)
    y = _run("exp_nonpositive", x, "f32", bits).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    reach = x >= (-17.4 if bits == 11 else -87.0)
    assert np.abs(y[reach] / ref[reach] - 1).max() < 2.0 ** -21
    assert (y[~reach] >= 0).all() and (y[~reach] < (2.0 ** -24 if bits == 11 else 2.0 ** -125)).all()


@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("variant", ["f32", "half"])
def test_half_types(name, dt, variant):
    """Every value of the type, computed in float32 and rounded once: misrounded only at
    near-ties, where the exact value lies within the float32 error of a tie. ``half``: knowing
    the result is rounded to ``dt`` (m.result_bits: the cheaper algorithms of HALF_VARIANTS).
    The rate counts normal results: subnormal ones near 0 of x/2 + c x^2 (silu, gelu, ...) are
    the documented tie class (x/2 a tie for odd subnormal x, the tail below float32's reach:
    128 bf16 inputs), still held to <= 1 ulp and to lying at a tie."""
    if variant == "half" and name not in HALF_VARIANTS:
        pytest.skip("one algorithm for float32 and half results")
    case = CASES[name]
    npdt, bits = (np.float16, 11) if dt == "f16" else (ml_dtypes.bfloat16, 8)
    x = np.arange(1 << 16, dtype=np.uint16).view(npdt).astype(np.float32)
    y = _run(name, x, "f32", bits if variant == "half" else None).astype(npdt)
    with np.errstate(all="ignore"):
        ref = case.ref32(x)
    ok = correctly_rounded(y, ref, npdt)
    err = ulp_error(y.astype(np.float64), ref, npdt)
    assert err.max() <= 1.0, f"{name} {dt}: {err.max():.3f} ulp"
    normal = np.abs(ref) >= float(ml_dtypes.finfo(npdt).smallest_normal)
    rate = ok[normal].mean()
    assert rate >= 0.999, f"{name} {dt}: only {rate:.4%} correctly rounded"
    bad = ~ok & np.isfinite(ref)
    lo = np.minimum(y[bad].astype(np.float64), round_once(ref[bad], npdt).astype(np.float64))
    hi = np.maximum(y[bad].astype(np.float64), round_once(ref[bad], npdt).astype(np.float64))
    mid = (lo + hi) / 2
    near = np.abs(ref[bad] - mid) <= np.maximum(np.abs(mid) * 2.0 ** -18, 2.0 ** -149)
    assert near.all(), f"{name} {dt}: misrounded away from a tie at x={x[bad][~near][:3]}"
    _check_nan(x, y.astype(np.float32))


F64_CASES = [n for n, c in CASES.items() if c.ref64 is not None]
# without --long, the float64 variants of the functions with their own float64 parts (the
# rest share the float32 code and differ only in constants); compiling is most of the time
F64_DEFAULT = ["exp", "exp_nonpositive", "expm1", "log1p", "tanh", "silu", "softplus", "erf",
               "erfc", "gelu", "erfinv"]


@pytest.mark.parametrize("name", F64_CASES if LONG else F64_DEFAULT)
def test_float64(name):
    case = CASES[name]
    x = sample_f64(case.iv64, case.n64 or N64)
    y = _run(name, x, "f64")
    with np.errstate(all="ignore"):
        ref = case.ref64(x)
    err = ulp_error(y, ref, np.float64)
    cr = _cr_rate(y, ref, np.float64, 2.0 ** -1022)
    worst = np.argmax(np.where(np.isfinite(err), err, 1e9))
    limit, rate = F64_LIMITS.get(name, (1.0, 0.99))
    assert err.max() <= limit, f"{name}: {err.max():.3f} ulp at x={x[worst]!r}"
    assert cr >= rate, f"{name}: only {cr:.4%} correctly rounded"
    _check_nan(x, y)


# the float64 error-function family: plain float64 polynomials (still within one ulp); so is
# softmax's exp
F64_LIMITS = {"erf": (1.0, 0.95), "erfc": (1.0, 0.95), "erfinv": (1.0, 0.95), "gelu": (1.0, 0.95),
              "exp_nonpositive": (1.0, 0.88)}


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", list(CASES))
def test_numpy_evaluation_same_bits(name, dtype):
    """The NumPy evaluator of the m interface (IEEE primitives, exact fma) and the compiled
    kernel agree bit for bit: the algorithm uses only exactly specified operations."""
    if dtype == "f64" and name not in (F64_CASES if LONG else F64_DEFAULT):
        pytest.skip("float64 variant tested with --long")
    case = CASES[name]
    x = (sample_f32 if dtype == "f32" else sample_f64)(case.iv32 if dtype == "f32" else case.iv64,
                                                        1 << 12, seed=1)
    got, want = _run(name, x), NumpyMath().run(getattr(mathlib, name), x)
    bad = ~np.isnan(got) & ((got != want) | (np.signbit(got) != np.signbit(want)))
    assert same_bits(got, want), (x[bad][:4], got[bad][:4], want[bad][:4])
    if dtype == "f32" and name in HALF_VARIANTS:          # the fp16/bf16-result variants too
        assert same_bits(_run(name, x, dtype, 11),
                         NumpyMath(result_bits=11).run(getattr(mathlib, name), x))


def test_two_input_swiglu():
    """swiglu(a, b) = a * silu(b), rounded once (two inputs: NumPy evaluation)."""
    rng = np.random.default_rng(0)
    b = np.concatenate([sample_f32([(-20, 20)], 1 << 14), rng.uniform(-5, 5, 1 << 14)]).astype(np.float32)
    a = rng.uniform(-4, 4, b.size).astype(np.float32)
    y = NumpyMath().run(mathlib.swiglu, a, b)
    ref = a.astype(np.float64) * _x_sigmoid(lambda v: v)(b)
    ok = np.isfinite(ref)
    assert ulp_error(y[ok], ref[ok], np.float32).max() <= 1.0
    assert correctly_rounded(y[ok], ref[ok], np.float32).mean() >= 0.99


def _swiglu_exact(a: float, b: float) -> float:
    """a * b * sigmoid(b) in mpmath (40 digits), as a float64; silu(b) taken as -0 where
    float64's silu rounds to zero (b < -745, -inf): inf * silu(b) is NaN there."""
    import mpmath  # a dependency of torch (sympy)

    if np.isnan(a) or np.isnan(b):
        return float("nan")
    if b < -745 and (np.isinf(a) or np.isinf(b)):
        return a * -0.0
    if np.isinf(a) or np.isinf(b):
        return a * b if b > 0 else a * (-1e-300 if b < 0 else b)
    with mpmath.workdps(40):
        v = mpmath.mpf(a) * mpmath.mpf(b) / (1 + mpmath.exp(-mpmath.mpf(b)))
        return float(v) if v != 0 else a * b * 0.5


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_swiglu_extremes(dtype):
    """Every pair of a (up to the largest float, zeros, subnormals, +-inf) and b (far below the
    exp range, where a huge a still gives a normal result, up to +-inf): within 1 ulp, zeros
    with the product's sign, no spurious overflow, underflow or NaN (each was wrong before)."""
    big = np.finfo(dtype).max
    tiny = np.finfo(dtype).smallest_subnormal
    a = np.array([0.0, 1.0, 3.5, 1e-30, 1e25, 1e30, big, big / 3, tiny, 4 * tiny, np.inf, 1e-300,
                  1e300], dtype)
    a = np.concatenate([a, -a])
    b = np.array([0.0, 1e-40, 1e-30, 1e-10, 0.5, 1.0, 19.0, 21.0, 40.0, 60.0, 200.0, 1e30, np.inf,
                  np.nan, 800.0, 1000.0, 1400.0], dtype)
    b = np.concatenate([b, -b, -np.array([100.0, 112.0, 113.0, 150.0, 199.0, 690.0, 705.0, 740.0],
                                         dtype)])
    A, B = (v.ravel() for v in np.meshgrid(a, b))
    got = NumpyMath().run(mathlib.swiglu, A, B)
    want = np.array([_swiglu_exact(float(x), float(y)) for x, y in zip(A, B)]).astype(dtype)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), (A[np.isnan(got) != nan], B[np.isnan(got) != nan])
    assert np.array_equal(np.signbit(got[~nan]), np.signbit(want[~nan]))
    err = ulp_error(got[~nan], want[~nan].astype(np.float64), dtype)
    assert err.max() <= 1.0, (A[~nan][err > 1], B[~nan][err > 1], got[~nan][err > 1])


def _correctly_rounded_mp(v, dtype):
    """The value of ``dtype`` nearest to the mpmath number v (v is never a tie here)."""
    import mpmath

    f = np.array([float(v)]).astype(dtype)
    cands = [f, np.nextafter(f, dtype(np.inf)), np.nextafter(f, dtype(-np.inf))]
    return min(cands, key=lambda c: abs(mpmath.mpf(float(c[0])) - v))[0]


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16])
def test_swiglu_near_ties(dtype):
    """a * silu(b) where a b / 2 or a b is a tie of the result's type (a with few bits: 3, -5;
    half of all b for a = 3) and only the tiny rest decides: a b^2 / 4 for small |b|, -a b e^-b
    for large b. Correctly rounded through the public operator, against mpmath at 400 bits.
    Before: float32 results off by one ulp for 208 million of the 2^32 b (a = 3, every tie
    below |b| ~ 2^-37) and beyond b = 37; bf16 and fp16 ones too (rounded twice, through
    float32, and e^-b below float32's rounding)."""
    import mpmath

    rng = np.random.default_rng(3)
    if dtype is np.float32:                 # log-uniform over the tie-prone ranges, both signs
        mag = np.concatenate([2.0 ** rng.uniform(-70, -20, 3000), 2.0 ** rng.uniform(3.5, 7.6, 1000)])
        b = (mag * rng.choice([-1.0, 1.0], mag.size)).astype(np.float32)
    else:                                   # every value of the half type in those ranges
        allb = np.arange(1 << 16, dtype=np.uint16).view(dtype)
        ab = np.abs(allb.astype(np.float64))
        b = allb[((ab > 2.0 ** -40) & (ab < 2.0 ** -6)) | ((ab > 12) & (ab < 200))]
    with mpmath.workprec(400):
        for av in (3.0, -5.0):
            a = np.full(b.size, av, dtype)
            got = infiniop.swiglu(a, b)
            want = np.array([_correctly_rounded_mp(mpmath.mpf(av) * mpmath.mpf(float(x))
                                                   / (1 + mpmath.exp(-mpmath.mpf(float(x)))), dtype)
                             for x in b], dtype)
            bad = got.view(np.uint16 if dtype is not np.float32 else np.uint32) != \
                want.view(np.uint16 if dtype is not np.float32 else np.uint32)
            assert not bad.any(), (av, int(bad.sum()), b[bad][:4], got[bad][:4], want[bad][:4])


_BF16_MAX = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)


def test_swiglu_bf16_extremes():
    """bf16 results (float32 arithmetic with the scales kept apart): pairs over bf16's whole
    range, subnormal to the largest, are the correctly rounded value (mpmath at 600 bits):
    products that overflow or underflow float32 before silu's factor brings them back (a huge,
    b far below the exp range; a and b tiny), results near the overflow threshold, subnormal
    results, and subnormal ties of the product (a = 3 2^-133, b = 16.5: 49.5 2^-133 less a rest
    below float32's subnormal step, so rounding to float32 first lands on the tie). Zeros keep
    their sign; infinities and NaN as float64's rules (see _swiglu_exact)."""
    import mpmath

    bf16 = ml_dtypes.bfloat16
    a = np.array([1.0, 3.0, 1.5, 2.0 ** -133, 3 * 2.0 ** -133, 5 * 2.0 ** -130, 2.0 ** -126,
                  1e-30, 1e-20, 2.0 ** 64, 1e30, 2.0 ** 127, _BF16_MAX, 0.0, np.inf, np.nan])
    b = np.array([2.0 ** -133, 1e-30, 2.0 ** -41, 2.0 ** -40, 1e-10, 2.0 ** -7, 2.0 ** -6, 0.5,
                  1.0, 2.5, 12.5, 16.5, 20.5, 40.0, 88.0, 100.0, 200.0, 1e10, 2.0 ** 100,
                  _BF16_MAX, 0.0, np.inf, np.nan])
    a = np.concatenate([a, -a]).astype(bf16)
    b = np.concatenate([b, -b, [-250.0, -290.0, -301.0, -400.0, -800.0]]).astype(bf16)
    A, B = (v.ravel() for v in np.meshgrid(a, b))
    got = infiniop.swiglu(A, B)
    threshold = (2 - 2.0 ** -8) * 2.0 ** 127                # beyond, bf16 rounds to inf
    want = []
    with mpmath.workprec(600):
        for x, y in zip(A.astype(np.float64), B.astype(np.float64)):
            if not (np.isfinite(x) and np.isfinite(y)) or x == 0 or y == 0:
                want.append(np.array(_swiglu_exact(x, y)).astype(bf16))
                continue
            v = mpmath.mpf(x) * mpmath.mpf(y) / (1 + mpmath.exp(-mpmath.mpf(y)))
            if y > 400:      # sigmoid(y) = 1 - d, 0 < d < 2^-577: any such d rounds alike
                v = mpmath.mpf(x) * mpmath.mpf(y) * (1 - mpmath.mpf(2) ** -590)
            want.append(bf16(np.copysign(np.inf, float(v))) if abs(v) >= threshold
                        else _correctly_rounded_mp(v, bf16))
    want = np.array(want, bf16)
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    bad = (got.view(np.uint16) != want.view(np.uint16)) & ~nan
    assert not bad.any(), list(zip(A[bad][:6], B[bad][:6], got[bad][:6], want[bad][:6]))


def test_softplus_parameters():
    """beta/threshold as runtime values: log1p(exp(beta x)) / beta, x where beta x > threshold."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-30, 30, 1 << 14).astype(np.float32)
    for beta, threshold in [(2.0, 20.0), (0.5, 10.0), (1.0, 5.0)]:
        def fn(m, v, beta=beta, threshold=threshold):
            return mathlib.softplus(m, v, m.const(beta, "f32"), m.const(threshold, "f32"))
        y = NumpyMath().run(fn, x)
        z = x.astype(np.float64) * beta
        ref = np.where(x * np.float32(beta) > threshold, x,
                       (np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))) / beta)
        assert ulp_error(y, ref, np.float32).max() <= 1.0, (beta, threshold)
        assert correctly_rounded(y, ref, np.float32).mean() >= 0.99, (beta, threshold)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_softplus_operator_for_any_accepted_beta(dt):
    """The operator with betas that are not powers of two (a float32 1 / beta cost float64
    results up to 2^21 ulp at beta = 3; rounding the small branch before the division cost
    float32 1.3 ulp), tiny and huge ones, and the limits: within 1 ulp of the longdouble
    value; beyond z = beta x's range the results must be 0 / x, never exp(clamp) / beta."""
    rng = np.random.default_rng(7)
    tol = 1.0
    for beta in (3.0, -3.0, 1.7, 1e-3, -1e-3, 100.0, 2.0 ** -10, 1e38, -7.5e30):
        b = np.float32(beta)
        z = np.concatenate([rng.uniform(-200, 30, 3000), rng.uniform(-20, 20, 3000),
                            -np.logspace(0, 12, 200)])
        with np.errstate(over="ignore"):
            x = np.concatenate([(z / np.float64(b)).astype(dt), np.array([-np.inf, np.inf, 0.0, -0.0], dt)])
        y = infiniop.softplus(x, beta=beta)
        xl = x.astype(LD)
        with np.errstate(all="ignore"):
            zl = xl * LD(b)
            soft = (np.maximum(zl, 0) + np.log1p(np.exp(-np.abs(zl)))) / LD(b)
            ref = np.where(x.astype(np.float64) * np.float64(b) > 20.0, xl, soft)  # threshold on the exact z
        ref = np.where(np.isinf(x) & (x * b > 0), xl, np.where(np.isinf(x), LD(0) / LD(b), ref))
        err = ulp_error(y, ref, dt)
        assert err.max() <= tol, (beta, x[np.argmax(err)], y[np.argmax(err)], err.max())
    # threshold inf: +inf stays inf (it went through the log: inf - inf)
    assert infiniop.softplus(np.array([np.inf, -np.inf], dt), threshold=np.inf).tolist() == [np.inf, 0.0]
    for beta in (2.0 ** -10.5, 1e-30, 1e-45, -1e-12):  # below the kernels' exp range: refused
        raises(Status.BAD_PARAM, infiniop.softplus, x, beta=beta, match="|beta| >= 2^-10")


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_softplus_half_parameters(dt):
    """fp16/bf16 softplus through the operator (plain float32, _softplus_half) for every input
    and several runtime beta/threshold: within 1 ulp of log1p(exp(beta x)) / beta, >= 99.9%
    correctly rounded, the rest only at near-ties; x where beta x (rounded) > threshold."""
    npdt = np.float16 if dt == "f16" else ml_dtypes.bfloat16
    x = np.arange(1 << 16, dtype=np.uint16).view(npdt)
    with np.errstate(invalid="ignore"):
        x = x[np.isfinite(x.astype(np.float32))]
    x32 = x.astype(np.float32)
    for beta, threshold in [(2.0, 20.0), (0.5, 10.0), (1.0, 5.0), (-1.5, 20.0), (1.7, 20.0),
                            (1e-3, 20.0)]:
        y = infiniop.softplus(x, beta=beta, threshold=threshold)
        z = x32.astype(np.float64) * np.float32(beta)          # exact
        with np.errstate(all="ignore"):
            soft = (np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))) / np.float32(beta)
        ref = np.where(x32 * np.float32(beta) > threshold, x32.astype(np.float64), soft)
        err = ulp_error(y.astype(np.float64), ref, npdt)
        ok = correctly_rounded(y, ref, npdt)
        assert err.max() <= 1.0, (beta, threshold, x[np.argmax(err)], err.max())
        assert ok.mean() >= 0.999, (beta, threshold, ok.mean())
        bad = ~ok
        lo = np.minimum(y[bad].astype(np.float64), round_once(ref[bad], npdt).astype(np.float64))
        hi = np.maximum(y[bad].astype(np.float64), round_once(ref[bad], npdt).astype(np.float64))
        mid = (lo + hi) / 2
        near = np.abs(ref[bad] - mid) <= np.maximum(np.abs(mid) * 2.0 ** -18, 2.0 ** -149)
        assert near.all(), (beta, threshold, x[bad][~near][:4])


def _round_exact(v: Fraction, p: int, emin: int) -> float:
    """The rational v rounded to nearest even with p significand bits, exponents >= emin."""
    if v == 0:
        return 0.0
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    e = max(e - (Fraction(2) ** e > a), emin)
    n = a / Fraction(2) ** (e - p + 1)
    k, r = divmod(n.numerator, n.denominator)
    k += 2 * r > n.denominator or (2 * r == n.denominator and k % 2 == 1)
    return float(k * Fraction(2) ** (e - p + 1)) * (1 if v > 0 else -1)


@pytest.mark.parametrize("dt", ["f16", "bf16", "f32", "f64"])
def test_hardswish_correctly_rounded_near_0_and_3(dt):
    """hardswish through the operator against the exact rational x (x + 3) / 6 rounded once:
    every fp16/bf16 input in (-3, 3), float32/float64 subnormals and tiny ones, and float32
    ones near -3 (where x + 3 cancels; float64 is within one ulp there, not always rounded right).
    Near 0 the value is x/2 plus a positive tail that the working precision does not hold, and
    x/2 is a tie for every odd subnormal x (fp16 2^-24: 2^-25 + 2^-48/6 rounds up to 2^-24;
    1 fp16, 128 bf16 inputs and half of the float32 subnormals were rounded to even)."""
    npdt, p, emin = {"f16": (np.float16, 11, -14), "bf16": (ml_dtypes.bfloat16, 8, -126),
                     "f32": (np.float32, 24, -126), "f64": (np.float64, 53, -1022)}[dt]
    if p <= 11:
        x = np.arange(1 << 16, dtype=np.uint16).view(npdt)
    else:
        rng = np.random.default_rng(3)
        ibits = np.uint32 if p == 24 else np.uint64
        sub = rng.integers(1, 1 << (p - 1), 3000, dtype=np.uint64).astype(ibits)
        sub[:2] = 1                                       # +-the smallest subnormal
        x = np.concatenate([sub.view(npdt), -sub[:1000].view(npdt),
                            np.nextafter(npdt(-3), npdt(0)) + np.arange(300 if p == 24 else 0)
                            * np.spacing(npdt(3)),
                            npdt(2.0) ** rng.integers(emin - 10, -20, 500) * rng.uniform(1, 2, 500)
                            * rng.choice([-1, 1], 500)]).astype(npdt)
    with np.errstate(invalid="ignore"):
        x = x[(np.abs(x.astype(np.float64)) < 3) & (x.astype(np.float64) != 0)]
    y = infiniop.hardswish(x).astype(np.float64)
    want = np.array([_round_exact(Fraction(v) * (Fraction(v) + 3) / 6, p, emin)
                     for v in x.astype(np.float64)])
    bad = (y != want) | (np.signbit(y) != np.signbit(want))  # -2^-149 (x + 3) / 6 rounds to -0
    assert not bad.any(), (x[bad][:4], y[bad][:4], want[bad][:4])


TRITON_SCRIPT = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
from infiniop import TensorDescriptor
from infiniop.handle import create_handle
from mathlib_support import same_bits, sample_f32, sample_f64
from test_mathlib import CASES, operator
TD = TensorDescriptor.from_array
cpu, nv = create_handle("cpu"), create_handle("nvidia")
for name in sys.argv[2].split(","):
    case = CASES[name]
    for x in (sample_f32(case.iv32, 2048, seed=7), sample_f64(case.iv64 or case.iv32, 1024, seed=7),
              np.arange(0, 1 << 16, 37, dtype=np.uint16).view(np.float16)):
        outs = []
        for h in (cpu, nv):
            o = np.empty_like(x)
            with operator(name).create_descriptor(h, TD(o), TD(x)) as d:
                d.calculate(None, o, x)
            outs.append(o)
        print(name, x.dtype, same_bits(*outs), flush=True)
"""


def test_triton_interpreter_same_bits():
    """The Triton rendering of every function (TRITON_INTERPRET=1, in a child process) computes
    the CPU's bits for float32, float64 and fp16."""
    pytest.importorskip("triton")
    import subprocess
    import sys

    names = list(CASES) if LONG else ["exp", "log1p", "tanh", "silu", "softplus", "erf", "gelu",
                                      "erfinv"]
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, "-c", TRITON_SCRIPT, here, ",".join(names)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.split("\n")
    assert sum(ln.endswith("True") for ln in lines) == 3 * len(names), p.stdout
