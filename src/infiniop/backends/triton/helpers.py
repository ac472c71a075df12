"""Device functions shared by every generated kernel (the math namespace ``m`` on a GPU).

Written in the portable subset of ``triton.language``: no libdevice, no inline asm, no bf16
arithmetic, bit operations where the semantics must be exact. Each helper dispatches on its
operand types at compile time (``if x.dtype == ...`` is resolved while tracing), so one
expression tree renders to one source for every dtype.

Semantics are the CPU backend's (Numba, ``error_model="numpy"``): NaN-propagating
minimum/maximum that return their first operand on ties, ``-x`` flips the sign bit, division is
IEEE-rounded, integer floor division and modulo follow Python (and give 0 for a zero divisor),
integers compute in 64 bits.
"""

import triton
import triton.language as tl


@triton.jit
def bf16_to_f32(bits):
    """bfloat16 bits (uint16) -> float32, exact."""
    return (bits.to(tl.uint32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def f32_to_bf16(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even; NaN stays NaN (quietened).
    Written with integer ops: the interpreter truncates on ``.to(tl.bfloat16)``."""
    b = x.to(tl.uint32, bitcast=True)
    hi = b >> 16
    r = (b + (0x7FFF + (hi & 1))) >> 16
    r = tl.where(x != x, hi | 0x40, r)
    return r.to(tl.uint16)


@triton.jit
def f64_to_f32_odd(v):
    """float64 -> float32 rounded to odd (the CPU's ``intrinsics.f64_to_f32_odd``): the rounding
    to fp16/bf16 after it is then the one correct rounding of the float64 value."""
    f = v.to(tl.float32)
    fd = f.to(tl.float64)
    b = f.to(tl.uint32, bitcast=True)
    odd = tl.where((v > fd) != (v < 0.0), b + 1, b - 1)
    return tl.where((v != fd) & (v == v) & ((b & 1) == 0), odd, b).to(tl.float32, bitcast=True)


@triton.jit
def minimum(a, b):
    """NumPy's minimum: NaN wins, else the smaller; on ties the second operand (as the CPU)."""
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def maximum(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def neg(x):
    """-x; for floats a sign-bit flip (Triton's ``-x`` is ``0 - x``: wrong for 0.0 and NaN)."""
    if x.dtype == tl.float32:
        return (x.to(tl.uint32, bitcast=True) ^ 0x80000000).to(tl.float32, bitcast=True)
    elif x.dtype == tl.float64:
        return (x.to(tl.uint64, bitcast=True) ^ 0x8000000000000000).to(tl.float64, bitcast=True)
    else:
        return 0 - x


@triton.jit
def to_float(x):
    """Integers and booleans -> float64 (NumPy's type for math on integers); floats unchanged."""
    if x.dtype.is_floating():
        return x
    else:
        return x.to(tl.float64)


@triton.jit
def truediv(a, b):
    """IEEE-rounded division (``/`` on float32 is approximate on NVIDIA); ints -> float64.
    (Nested ifs, not ``or``: Triton 3.0/3.1 cannot combine compile-time conditions.)"""
    if a.dtype == tl.float64:
        return a / b.to(tl.float64)
    elif b.dtype == tl.float64:
        return a.to(tl.float64) / b
    elif a.dtype.is_floating():
        return tl.div_rn(a.to(tl.float32), b.to(tl.float32))
    elif b.dtype.is_floating():
        return tl.div_rn(a.to(tl.float32), b.to(tl.float32))
    else:
        return a.to(tl.float64) / b.to(tl.float64)


@triton.jit
def _signed_zero(x):
    """+0.0 or -0.0 with the sign bit of float ``x``."""
    if x.dtype == tl.float64:
        return (x.to(tl.uint64, bitcast=True) & 0x8000000000000000).to(tl.float64, bitcast=True)
    else:
        return (x.to(tl.uint32, bitcast=True) & 0x80000000).to(tl.float32, bitcast=True)


@triton.jit
def _frem(a, b):
    """C's fmod. NVIDIA's lowering of ``%`` returns ``a`` when ``b`` is infinite, also for an
    infinite ``a`` (seen on an H200: fmod(inf, inf) gave inf, not NaN)."""
    m = a % b
    return tl.where(a - a == 0, m, a - a)


@triton.jit
def _fdivmod_floor(a, b):
    """NumPy's npy_divmod floor quotient for floats."""
    m = _frem(a, b)
    d = a - m
    if a.dtype == tl.float32:
        d = tl.div_rn(d, b)
    else:
        d = d / b
    adj = (m != 0) & ((b < 0) != (m < 0))
    d = tl.where(adj, d - 1, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1, f)
    t = truediv(a, b)
    q = tl.where(d == 0, _signed_zero(t), f)
    return tl.where(b == 0, t, q)


@triton.jit
def _ifloordiv(a, b):
    nz = b != 0
    bb = tl.where(nz, b, 1)
    q = a // bb
    r = a - q * bb
    q = tl.where((r != 0) & ((r < 0) != (bb < 0)), q - 1, q)
    return tl.where(nz, q, 0)


@triton.jit
def floordiv(a, b):
    """Python/NumPy floor division; integer division by zero gives 0 (Numba's numpy model)."""
    if a.dtype.is_floating():
        return _fdivmod_floor(a, b)
    elif b.dtype.is_floating():
        return _fdivmod_floor(a, b)
    else:
        return _ifloordiv(a, b)


@triton.jit
def _fmod(a, b):
    m = _frem(a, b)
    adj = (m != 0) & ((b < 0) != (m < 0))
    m = tl.where(adj, m + b, m)
    return tl.where(m == 0, _signed_zero(b + m * 0), m)


@triton.jit
def _imod(a, b):
    nz = b != 0
    bb = tl.where(nz, b, 1)
    r = a - (a // bb) * bb
    r = tl.where((r != 0) & ((r < 0) != (bb < 0)), r + bb, r)
    return tl.where(nz, r, 0)


@triton.jit
def mod(a, b):
    """Python/NumPy modulo (sign of the divisor); integer modulo by zero gives 0."""
    if a.dtype.is_floating():
        return _fmod(a, b)
    elif b.dtype.is_floating():
        return _fmod(a, b)
    else:
        return _imod(a, b)


@triton.jit
def sqrt(x):
    x = to_float(x)
    if x.dtype == tl.float32:
        return tl.sqrt_rn(x)
    else:
        return tl.sqrt(x)


@triton.jit
def exp(x):
    return tl.exp(to_float(x))


@triton.jit
def log(x):
    return tl.log(to_float(x))


@triton.jit
def sin(x):
    return tl.sin(to_float(x))


@triton.jit
def cos(x):
    return tl.cos(to_float(x))


@triton.jit
def floor(x):
    return tl.floor(to_float(x))


@triton.jit
def ceil(x):
    return tl.ceil(to_float(x))


@triton.jit
def tanh(x):
    """tanh from exp (no libdevice): -expm1(-2|x|) / (expm1(-2|x|) + 2), with Kahan's expm1."""
    x = to_float(x)
    y = -2.0 * tl.abs(x)
    u = tl.exp(y)
    um1 = u - 1.0
    lu = tl.log(u)
    lu = tl.where(lu == 0, 1.0, lu)
    em = tl.where(u == 1.0, y, tl.where(um1 == -1.0, -1.0, truediv(um1 * y, lu)))
    t = truediv(-em, em + 2.0)
    t = tl.where(x < 0, -t, t)
    return tl.where(x != x, x, t)


@triton.jit
def abs_(x):
    return tl.abs(x)


@triton.jit
def isnan(x):
    return x != x


@triton.jit
def tan(x):
    x = to_float(x)
    return truediv(tl.sin(x), tl.cos(x))


@triton.jit
def trunc(x):
    """Round toward zero (exact): ceil below zero, floor above (-0.0 and NaN kept)."""
    x = to_float(x)
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def rint(x):
    """Round half to even (exact): (|x| + 2**p) - 2**p rounds at the unit in IEEE arithmetic
    (p = 23 for float32, 52 for float64); |x| >= 2**p, inf and NaN are already integral."""
    x = to_float(x)
    a = tl.abs(x)
    if x.dtype == tl.float64:
        big = tl.full([], 4503599627370496.0, tl.float64)
        r = (a + big) - big
        r = (r.to(tl.uint64, bitcast=True) | (x.to(tl.uint64, bitcast=True)
                                              & 0x8000000000000000)).to(tl.float64, bitcast=True)
    else:
        big = tl.full([], 8388608.0, tl.float32)
        r = (a + big) - big
        r = (r.to(tl.uint32, bitcast=True) | (x.to(tl.uint32, bitcast=True)
                                              & 0x80000000)).to(tl.float32, bitcast=True)
    return tl.where(a < big, r, x)


# Placeholders of the backend's own math (not bit-identical to the CPU) until mathlib.py
# defines these functions in primitives.
@triton.jit
def exp2(x):
    return tl.exp2(to_float(x))


@triton.jit
def expm1(x):
    return tl.exp(to_float(x)) - 1.0


@triton.jit
def log2(x):
    return tl.log2(to_float(x))


@triton.jit
def log10(x):
    return tl.log(to_float(x)) * 0.4342944819032518


@triton.jit
def log1p(x):
    return tl.log(1.0 + to_float(x))


@triton.jit
def erf(x):
    return tl.erf(to_float(x))


@triton.jit
def erfc(x):
    return 1.0 - tl.erf(to_float(x))


@triton.jit
def atanh(x):
    x = to_float(x)
    return 0.5 * tl.log(truediv(1.0 + x, 1.0 - x))
