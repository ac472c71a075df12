"""Test support for mathlib (not shipped): two evaluators of the MATH_API ``m`` interface.

- :class:`NumpyMath`: ``m`` over NumPy arrays. Every primitive is IEEE exact as MATH_API.md
  defines it, including ``m.fma`` (f32: exact product in float64 + round-to-odd sum; f64:
  Boldo-Melquiond emulation from TwoProduct/TwoSum + a round-to-odd addition).
- :func:`numba_kernel`: traces a mathlib function into SSA and renders it as a Numba loop
  (llvm.fma, bitcasts and integer ops through small intrinsics). A stand-in for the real
  pipeline's CPU codegen, to measure speed and check the NumPy evaluation bit for bit.

Both share :class:`Value`'s typing rules (constants adapt, no implicit float/int mixing).
"""

from __future__ import annotations

import itertools

import numpy as np

NP = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64,
      "u32": np.uint32, "u64": np.uint64, "bool": np.bool_}
FLOAT = {"f32", "f64"}
INT = {"i32", "i64", "u32", "u64"}
WIDTH = {"f32": 32, "f64": 64, "i32": 32, "i64": 64, "u32": 32, "u64": 64}


class Value:
    """A typed value; subclasses implement ``_op(name, *operands, dtype=...)``."""

    dtype: str

    def _adapt(self, other):
        if isinstance(other, Value):
            if other.dtype != self.dtype:
                raise TypeError(f"mixing {self.dtype} and {other.dtype}: cast explicitly")
            return other
        if isinstance(other, bool):
            raise TypeError("bool constant")
        if self.dtype in INT and isinstance(other, float):
            raise TypeError("float constant meets an int value: cast explicitly")
        return self.m.const(other, self.dtype)

    def _bin(self, name, other, swap=False, out=None):
        o = self._adapt(other)
        a, b = (o, self) if swap else (self, o)
        if name in ("add", "sub", "mul", "truediv") and self.dtype not in FLOAT | INT:
            raise TypeError(f"{name} on {self.dtype}")
        if name == "truediv" and self.dtype not in FLOAT:
            raise TypeError("/ on ints")
        return self.m._op(name, a, b, dtype=out or self.dtype)

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("truediv", o)
    def __rtruediv__(self, o): return self._bin("truediv", o, True)
    def __lt__(self, o): return self._bin("lt", o, out="bool")
    def __le__(self, o): return self._bin("le", o, out="bool")
    def __gt__(self, o): return self._bin("gt", o, out="bool")
    def __ge__(self, o): return self._bin("ge", o, out="bool")
    def __and__(self, o): return self._bin("and", o)
    def __or__(self, o): return self._bin("or", o)
    def __xor__(self, o): return self._bin("xor", o)
    def __rand__(self, o): return self._bin("and", o, True)
    def __ror__(self, o): return self._bin("or", o, True)
    def __rxor__(self, o): return self._bin("xor", o, True)

    def __lshift__(self, o):
        return self._shift("shl", o)

    def __rshift__(self, o):
        return self._shift("lshr" if self.dtype[0] == "u" else "ashr", o)

    def _shift(self, name, o):
        if self.dtype not in INT:
            raise TypeError("shift on non-int")
        o = self._adapt(o)
        return self.m._op(name, self, o, dtype=self.dtype)

    def __neg__(self): return self.m._op("neg", self, dtype=self.dtype)
    def __invert__(self): return self.m._op("invert", self, dtype=self.dtype)

    def __bool__(self):
        raise TypeError("no truth value: use m.where")


class MathBase:
    """The primitives of MATH_API.md, in terms of ``_op``."""

    def fma(self, a, b, c):
        a, b, c = self._same(a, b, c)
        return self._op("fma", a, b, c, dtype=a.dtype)

    def where(self, c, a, b):
        if not isinstance(a, Value):
            a = b._adapt(a)
        if not isinstance(b, Value):
            b = a._adapt(b)
        if a.dtype != b.dtype or c.dtype != "bool":
            raise TypeError("where types")
        return self._op("where", c, a, b, dtype=a.dtype)

    def _same(self, *vals):
        t = next(v for v in vals if isinstance(v, Value))
        return [t._adapt(v) for v in vals]

    def _binary(self, name, a, b, dtype=None):
        a, b = self._same(a, b)
        return self._op(name, a, b, dtype=dtype or a.dtype)

    def minimum(self, a, b): return self._binary("minimum", a, b)
    def maximum(self, a, b): return self._binary("maximum", a, b)
    def eq(self, a, b): return self._binary("eq", a, b, "bool")
    def ne(self, a, b): return self._binary("ne", a, b, "bool")
    def abs(self, x): return self._op("abs", x, dtype=x.dtype)
    def sqrt(self, x): return self._op("sqrt", x, dtype=x.dtype)
    def floor(self, x): return self._op("floor", x, dtype=x.dtype)
    def ceil(self, x): return self._op("ceil", x, dtype=x.dtype)
    def trunc(self, x): return self._op("trunc", x, dtype=x.dtype)
    def rint(self, x): return self._op("rint", x, dtype=x.dtype)
    def isnan(self, x): return self._op("isnan", x, dtype="bool")

    def cast(self, x, dtype):
        return x if x.dtype == dtype else self._op("cast", x, dtype=dtype)

    def bitcast(self, x, dtype):
        if WIDTH[x.dtype] != WIDTH[dtype]:
            raise TypeError("bitcast width")
        return x if x.dtype == dtype else self._op("bitcast", x, dtype=dtype)


# ============================================================================ NumPy evaluator

class NV(Value):
    __slots__ = ("a", "dtype", "m")

    def __init__(self, a, dtype, m):
        self.a, self.dtype, self.m = a, dtype, m


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _round_to_odd_bits(s, e):
    """s = RN(x), e = x - s exactly: the round-to-odd value of x (same float type)."""
    ibits = np.int64 if s.dtype == np.float64 else np.int32
    bits = s.view(ibits).copy()
    fix = (e != 0) & ((bits & 1) == 0) & np.isfinite(s)
    step = np.where(np.signbit(e) == np.signbit(s), 1, -1).astype(ibits)
    bits[fix] += step[fix]
    return bits.view(s.dtype)


def _split(a):
    g = a * 134217729.0
    hi = g - (g - a)
    return hi, a - hi


def fma_f32(a, b, c):
    """Exact single-rounding f32 fma via float64 (product exact; sum rounded to odd)."""
    p = a.astype(np.float64) * b.astype(np.float64)
    s, e = _two_sum(p, c.astype(np.float64))
    r = _round_to_odd_bits(s, np.where(np.isfinite(e), e, 0.0)).astype(np.float32)
    return np.where(np.isfinite(s), r, (p + c).astype(np.float32))


def _fma_f64_parts(a, b, c):
    """a * b + c == uh + t + te exactly (no under/overflow): TwoProduct + TwoSums."""
    ph = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    pl = ((ah * bh - ph) + ah * bl + al * bh) + al * bl
    uh, ul = _two_sum(c, ph)
    t, te = _two_sum(ul, pl)
    return uh, t, te


def _fma_exact_scalar(a, b, c):
    from fractions import Fraction
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    try:
        return float(exact)                                   # correctly rounded, subnormals too
    except OverflowError:
        return float("inf") if exact > 0 else float("-inf")


def fma_f64(a, b, c):
    """f64 fma, exact: RN(uh + RO(t + te)) (Boldo & Melquiond 2008) when nothing under- or
    overflows; the rare others (tiny products, huge operands) exactly through fractions."""
    with np.errstate(all="ignore"):
        a, b, c = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                      np.asarray(c, np.float64))
        uh, t, te = _fma_f64_parts(a, b, c)
        v = uh + _round_to_odd_bits(t, te)
        fin = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
        hard = fin & ((np.abs(a * b) < 2.0 ** -900) & (a != 0) & (b != 0)
                      | (np.maximum(np.abs(a), np.abs(b)) > 2.0 ** 900) | ~np.isfinite(v))
        naive = a * b + c
        v = np.where(fin, v, naive)
        # an exact zero: +0 (round to nearest) unless product and addend are both zeros
        zero_terms = (a * b == 0) & (c == 0) & ~((a != 0) & (b != 0))
        v = np.where(v == 0, np.where(zero_terms, naive, 0.0), v)
        idx = np.nonzero(hard)
        if idx[0].size:
            v = v.copy()
            v[idx] = [_fma_exact_scalar(x, y, z) for x, y, z in zip(a[idx], b[idx], c[idx])]
        return v


class NumpyMath(MathBase):
    """``m`` over NumPy arrays: ``NumpyMath().run(fn, x)`` evaluates ``fn(m, x)`` elementwise.

    ``result_bits``: the significand bits of the type the result is stored in (11 fp16, 8 bf16),
    the trace-time hint mathlib reads as ``m.result_bits``; None: as precise as the compute type.
    """

    def __init__(self, result_bits=None):
        if result_bits is not None:
            self.result_bits = result_bits

    def run(self, fn, *arrays, dtype=None):
        vals = []
        for a in arrays:
            a = np.asarray(a)
            dt = dtype or {np.float32: "f32", np.float64: "f64"}[a.dtype.type]
            vals.append(NV(a.astype(NP[dt]), dt, self))
        with np.errstate(all="ignore"):
            r = fn(self, *vals)
        return r.a

    def const(self, v, dtype):
        return NV(np.array(v).astype(NP[dtype]) if dtype in FLOAT else np.array(v, NP[dtype]),
                  dtype, self)

    def _op(self, name, *args, dtype):
        v = [x.a for x in args]
        t = NP[dtype]
        with np.errstate(all="ignore"):
            if name == "fma":
                r = fma_f32(*v) if dtype == "f32" else fma_f64(*v)
            elif name == "cast":
                r = v[0].astype(t)
            elif name == "bitcast":
                r = np.ascontiguousarray(v[0]).view(t)
            else:
                r = _NP_OPS[name](*v)
        return NV(np.asarray(r).astype(t, copy=False), dtype, self)


_NP_OPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.divide,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal, "and": np.bitwise_and, "or": np.bitwise_or,
    "xor": np.bitwise_xor, "shl": np.left_shift, "ashr": np.right_shift, "lshr": np.right_shift,
    "neg": np.negative, "invert": lambda a: ~a, "where": np.where, "minimum": np.minimum,
    "maximum": np.maximum, "abs": np.abs, "sqrt": np.sqrt, "floor": np.floor, "ceil": np.ceil,
    "trunc": np.trunc, "rint": np.rint, "isnan": np.isnan,
}


# ============================================================================ Numba tracer

class TV(Value):
    """A traced value: node ``idx`` of the tracer's SSA list."""

    __slots__ = ("idx", "dtype", "m")

    def __init__(self, idx, dtype, m):
        self.idx, self.dtype, self.m = idx, dtype, m


class TraceMath(MathBase):
    def __init__(self, result_bits=None):
        self.nodes = []          # (op, arg indices or constant, dtype)
        self.memo = {}
        if result_bits is not None:
            self.result_bits = result_bits

    def _add(self, key, dtype):
        if key in self.memo:
            return TV(self.memo[key], dtype, self)
        self.nodes.append(key + (dtype,))
        self.memo[key] = len(self.nodes) - 1
        return TV(len(self.nodes) - 1, dtype, self)

    def input(self, k, dtype):
        return self._add(("input", k), dtype)

    def const(self, v, dtype):
        v = float(NP[dtype](v)) if dtype in FLOAT else int(v)
        return self._add(("const", v, dtype), dtype)

    def _op(self, name, *args, dtype):
        return self._add((name, tuple(a.idx for a in args), dtype), dtype)


_NB_BIN = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "lt": "<", "le": "<=", "gt": ">",
           "ge": ">=", "eq": "==", "ne": "!="}
_INT_IR = {"add": "add", "sub": "sub", "mul": "mul", "and": "and_", "or": "or_", "xor": "xor",
           "shl": "shl", "ashr": "ashr", "lshr": "lshr"}


def render_numba(fn, in_dtypes, result_bits=None):
    """SSA lines computing ``fn(m, x0..)`` from ``x0..`` into ``r``, plus the result dtype."""
    tm = TraceMath(result_bits)
    out = fn(tm, *[tm.input(k, d) for k, d in enumerate(in_dtypes)])
    lines = []
    for i, node in enumerate(tm.nodes):
        op, args, dtype = node[0], node[1], node[-1]
        nm = NP[dtype].__name__
        v = [f"v{a}" for a in args] if isinstance(args, tuple) else []
        if op == "input":
            e = f"x{args}"
        elif op == "const":
            e = f"np.{nm}({float(args)!r})" if dtype in FLOAT else f"np.{nm}({args!r})"
            e = e.replace("(nan)", "(np.nan)").replace("(inf)", "(np.inf)").replace("(-inf)", "(-np.inf)")
        elif op == "fma":
            e = f"fma({v[0]}, {v[1]}, {v[2]})"
        elif op in _INT_IR and tm.nodes[args[0]][-1] in INT:
            e = f"i{_INT_IR[op]}({v[0]}, {v[1]})"
        elif op in ("and", "or", "xor"):
            e = f"({v[0]} {dict(zip(('and', 'or', 'xor'), '&|^'))[op]} {v[1]})"
        elif op in _NB_BIN:
            e = f"({v[0]} {_NB_BIN[op]} {v[1]})"
        elif op == "neg":
            e = f"fneg({v[0]})" if dtype in FLOAT else f"isub(np.{nm}(0), {v[0]})"
        elif op == "invert":
            e = f"(not {v[0]})" if dtype == "bool" else f"ixor({v[0]}, np.{nm}(-1))"
        elif op == "where":
            e = f"({v[1]} if {v[0]} else {v[2]})"
        elif op in ("minimum", "maximum"):
            e = f"_{op}({v[0]}, {v[1]})"
        elif op == "isnan":
            e = f"({v[0]} != {v[0]})"
        elif op in ("abs", "sqrt", "floor", "ceil", "trunc", "rint"):
            e = f"f{op}({v[0]})"
        elif op == "cast":
            e = f"np.{nm}({v[0]})"
        elif op == "bitcast":
            e = f"bitcast({v[0]}, np.{nm})"
        else:
            raise NotImplementedError(op)
        lines.append(f"v{i} = {e}")
    lines.append(f"r = v{out.idx}")
    return lines, out.dtype


PRELUDE = '''
import numpy as np
from numba import njit, prange
from mathlib_intrinsics import (fma, bitcast, fneg, fabs, fsqrt, ffloor, fceil, ftrunc, frint,
    iadd, isub, imul, iand_, ior_, ixor, ishl, iashr, ilshr, _minimum, _maximum)
from infiniop.backends.cpu.intrinsics import (f16_to_f32, f32_to_f16, bf16_to_f32, f32_to_bf16,
    prefer_512_bit_vectors)
'''

_counter = itertools.count()
_cache = {}


def numba_kernel(fn, dtype="f32", store="f32", parallel=False, result_bits=None):
    """A compiled ``kernel(x, out)`` applying ``fn`` elementwise (one input).

    ``store``: 'f32'/'f64' plain arrays, 'f16'/'bf16' uint16 storage (loaded/stored through the
    framework's conversions, computed in f32, with ``m.result_bits`` 11 / 8 unless given).
    512-bit vectors, as the pipeline's kernels ask for (a prange body is a function of its own).
    """
    if result_bits is None:
        result_bits = {"f16": 11, "bf16": 8}.get(store)
    key = (fn, dtype, store, parallel, result_bits)
    if key in _cache:
        return _cache[key]
    import importlib.util
    import os
    import sys
    import tempfile
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    lines, _ = render_numba(fn, [dtype], result_bits)
    load = {"f16": "f16_to_f32(x[i])", "bf16": "bf16_to_f32(x[i])"}.get(store, "x[i]")
    put = {"f16": "f32_to_f16(r)", "bf16": "f32_to_bf16(r)"}.get(store, "r")
    body = "\n".join("        " + ln for ln in lines)
    src = PRELUDE + f'''

@njit(nogil=True, error_model="numpy", boundscheck=False, parallel={parallel})
def kernel(x, out):
    prefer_512_bit_vectors()
    for i in {"prange" if parallel else "range"}(x.shape[0]):
        prefer_512_bit_vectors()
        x0 = {load}
{body}
        out[i] = {put}
'''
    d = os.path.join(tempfile.gettempdir(), "mathlib_proto")
    os.makedirs(d, exist_ok=True)
    name = f"mathlib_k{next(_counter)}_{os.getpid()}"
    path = os.path.join(d, name + ".py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.source = src
    _cache[key] = mod.kernel
    return mod.kernel


# ============================================================================ measuring

def ulp_error(y, ref, dtype):
    """|y - ref| in ulps of the result type (ref: float64 or longdouble, the exact value).

    The ulp is that of the correctly rounded reference's binade (subnormal ulp below it).
    Equal infinities / both NaN count as 0; NaN vs non-NaN as inf.
    """
    import ml_dtypes
    info = ml_dtypes.finfo(dtype)
    ref = np.asarray(ref)
    wide = np.longdouble if ref.dtype == np.longdouble else np.float64
    r = ref.astype(wide)
    yw = np.asarray(y).astype(wide)
    with np.errstate(all="ignore"):
        rr = round_once(r, dtype)
        mag = np.abs(rr).astype(wide)
        e = np.floor(np.log2(np.maximum(mag, np.asarray(info.smallest_normal, wide))))
        ulp = np.ldexp(np.asarray(1.0, wide), (e - info.nmant).astype(int))
        # at an exact power of two, the ulp below is half; the ref may lie just below it
        err = np.abs(yw - r) / ulp
        same = (yw == r) | (np.isnan(yw) & np.isnan(r))
        err = np.where(same, 0, err)
        inf_r = np.isinf(rr) & ~np.isinf(r)  # reference overflows when rounded
        err = np.where(inf_r & (yw == rr), 0, err)
        err = np.where(np.isnan(yw) != np.isnan(r), np.inf, err)
    return err.astype(np.float64)


def round_once(ref, dtype):
    """``ref`` (float64 or longdouble, the exact value) rounded once to ``dtype``.

    NumPy/ml_dtypes cast float64 to bfloat16, and longdouble to float16, through float32: a
    second rounding (1 + 2^-8 + 2^-30 became 1, the even side of the tie its float32 rounding
    lands on). Here such casts go through float64, then float32 rounded to odd (a float32
    value whose last bit is set when inexact), from which one more rounding to at most 22 bits
    is the correct one (float64's own rounding of a longdouble reference is far below that)."""
    ref = np.asarray(ref)
    if np.dtype(dtype).itemsize >= 4 or (np.dtype(dtype) == np.float16 and ref.dtype == np.float64):
        return ref.astype(dtype)
    r = ref.astype(np.float64)
    with np.errstate(all="ignore"):
        f = r.astype(np.float32)
        step = (f.astype(np.float64) != r) & np.isfinite(f) & ((f.view(np.uint32) & 1) == 0)
        f = np.where(step, np.nextafter(f, np.where(r > f, np.float32(np.inf), np.float32(-np.inf))), f)
        return f.astype(dtype)


def correctly_rounded(y, ref, dtype):
    """True where y equals the reference rounded once to ``dtype`` (NaN matches NaN)."""
    rr = round_once(ref, dtype)
    y = np.asarray(y).astype(dtype)
    return (y == rr) | (np.isnan(y) & np.isnan(rr))


# ============================================================================ samples

def sample_f32(intervals, n=1 << 20, seed=0):
    """~n float32 inputs: specials, random bit patterns (all finite magnitudes, subnormals) and
    values uniform in each (lo, hi) interval and log-uniform in magnitude near 0."""
    rng = np.random.default_rng(seed)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-45, -1e-45,
                         1.1754944e-38, -1.1754944e-38, 3.4028235e38, -3.4028235e38],
                        np.float32)
    parts = [specials,
             rng.integers(0, 1 << 32, n // 8, dtype=np.uint64).astype(np.uint32).view(np.float32),
             (rng.choice([-1, 1], n // 8)
              * np.exp2(rng.uniform(-150, 8, n // 8))).astype(np.float32)]
    per = (n - sum(len(p) for p in parts)) // max(1, len(intervals))
    for lo, hi in intervals:
        parts.append(rng.uniform(lo, hi, per).astype(np.float32))
    return np.concatenate(parts)


def same_bits(a, b):
    """Bit-identical results, any NaN matching any NaN (payloads differ between hardware)."""
    a, b = np.asarray(a), np.asarray(b)
    it = {4: np.int32, 8: np.int64, 2: np.int16}[a.dtype.itemsize]
    return bool(np.all((a.view(it) == b.view(it)) | (np.isnan(a) & np.isnan(b))))


def sample_f64(intervals, n=1 << 18, seed=0):
    """Like :func:`sample_f32` for float64."""
    rng = np.random.default_rng(seed)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 5e-324, -5e-324,
                         2.2250738585072014e-308, -2.2250738585072014e-308,
                         1.7976931348623157e308, -1.7976931348623157e308])
    parts = [specials,
             rng.integers(0, 1 << 63, n // 8, dtype=np.uint64).view(np.float64)
             * rng.choice([-1, 1], n // 8),
             rng.choice([-1, 1], n // 8) * np.exp2(rng.uniform(-1075, 12, n // 8))]
    per = (n - sum(len(p) for p in parts)) // max(1, len(intervals))
    for lo, hi in intervals:
        parts.append(rng.uniform(lo, hi, per))
    return np.concatenate(parts)
