"""Vectorisable, accurate math functions written once against the typed expression API.

Each function is ``def name(m, x)`` over the primitives of the ``m`` namespace (+ - * /, fma,
where, bit casts, integer ops): range reduction + polynomials, FMA-based error-free
transformations where precision is needed; no tables, no libm calls, no branches on data. So
every backend renders the same operations and computes the same bits.

Two algorithms per function, chosen at trace time from ``x.dtype``:
- "f32": float32 arithmetic (16 lanes per AVX-512 vector), with double-float steps where a
  plain float32 evaluation would lose the last bit; fp16/bf16 are computed with it and rounded
  once.
- "f64": float64 arithmetic.
"""

from __future__ import annotations

_hex = float.fromhex

# ---------------------------------------------------------------------------- double-float steps


def _fast_two_sum(a, b):
    """s + e == a + b exactly, for |a| >= |b| (or a == 0)."""
    s = a + b
    return s, b - (s - a)


def _two_prod(m, a, b):
    """p + e == a * b exactly (barring underflow)."""
    p = a * b
    return p, m.fma(a, b, -p)


# ---------------------------------------------------------------------------- exp, f32

_F32_MAGIC = 12582912.0                      # 1.5 * 2^23: adding it rounds to an integer
_F32_MAGIC_BITS = 0x4B400000
_F32_LOG2E = _hex("0x1.715476p+0")
_F32_LN2_HI = _hex("0x1.62e430p-1")          # f32(ln 2): n * LN2_HI is exact in an fma
_F32_LN2_LO = _hex("-0x1.05c610p-29")        # ln 2 - LN2_HI
_F32_EXP_P = (                               # exp(r) = 1 + r + r^2/2 + r^3/2 * P(r), |r| <= ln2/2
    _hex("0x1.555556p-2"), _hex("0x1.5554e8p-4"), _hex("0x1.110ffep-6"),
    _hex("0x1.6d4ccap-9"), _hex("0x1.a250b0p-12"),
)


def _horner(m, x, coeffs):
    acc = m.const(coeffs[-1], x.dtype)
    for c in reversed(coeffs[:-1]):
        acc = m.fma(acc, x, c)
    return acc


def _exp_parts_f32(m, x):
    """exp(x) = 2^n exp(rh + rl), exp(rh) ~ 1 + rh + h + c, for x in [-112, 89].

    n is encoded in the bits of ``t``; r = x - n ln2 is exact as rh + rl (rh exact in one fma,
    |rl| < 2^-21); h = RN(rh^2/2) and c = the rest of the series (incl. the rounding error of
    h), so 1 + rh + h + c carries ~2^-31 absolute error. w = RN(h + c), u = RN(rh + w).
    """
    t = m.fma(x, _F32_LOG2E, _F32_MAGIC)
    nf = t - _F32_MAGIC
    rh = m.fma(nf, -_F32_LN2_HI, x)
    rl = nf * -_F32_LN2_LO
    hr = rh * 0.5
    h = rh * hr
    c = m.fma(h, rh * _horner(m, rh, _F32_EXP_P), m.fma(rh, hr, -h))
    w = h + c
    u = rh + w
    return t, rh, rl, h, c, u


def _exp_core_f32(m, x):
    """exp(x) = 2^n (s + sl), s + sl normalised (|sl| <= ulp(s)), ~2^-31 relative error.

    The residual of s = RN(1 + RN(rh + RN(h + c))) is recovered by subtracting back in order of
    decreasing magnitude: each step is exact (Sterbenz) or rounds a value below 2^-22.
    """
    t, rh, rl, h, c, u = _exp_parts_f32(m, x)
    s = 1.0 + u
    sl = m.fma(rl, s, (((1.0 - s) + rh) + h) + c)       # exp(rh + rl) ~ exp(rh) (1 + rl)
    return t, s, sl


def _expm1_core_f32(m, x):
    """exp(x) = 2^n (1 + u + ul), u + ul normalised and accurate relative to u."""
    t, rh, rl, h, c, u = _exp_parts_f32(m, x)
    ul = m.fma(rl, u, rl + (((rh - u) + h) + c))
    return t, u, ul


def _pow2_f32(m, t, bias):
    """2^(n + bias) as f32 from the magic-number result t (n + bias + 127 in [1, 254])."""
    bits = (m.bitcast(t, "i32") << 23) + _wrap_i32((127 + bias - _F32_MAGIC_BITS) << 23)
    return m.bitcast(bits, "f32")


def _wrap_i32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _clamp(m, x, lo, hi):
    """x limited to [lo, hi]; NaN stays NaN (a compare + select each: x86 min/max)."""
    x = m.where(x < lo, m.const(lo, x.dtype), x)
    return m.where(x > hi, m.const(hi, x.dtype), x)


def _copysign(m, y, x):
    it = "i32" if x.dtype == "f32" else "i64"
    sign = -(1 << 31) if it == "i32" else -(1 << 63)
    mag = m.bitcast(y, it) & ~sign
    return m.bitcast(mag | (m.bitcast(x, it) & sign), x.dtype)


def exp(m, x):
    if x.dtype == "f32":
        xc = _clamp(m, x, -104.0, 89.0)
        t, s, sl = _exp_core_f32(m, xc)
        y = s + sl
        # 2^n = 2^(n+64) * 2^-64 or 2^(n-64) * 2^64: each factor normal for n in [-150, 129]
        big = xc > 0.0
        scale = m.where(big, _pow2_f32(m, t, -64), _pow2_f32(m, t, 64))
        return (y * scale) * m.where(big, m.const(_hex("0x1p64"), "f32"), _hex("0x1p-64"))
    raise NotImplementedError(x.dtype)


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _sigmoid_parts_f32(m, x):
    """sigmoid(x) = Rh (1 + e1) * Z64 * 2^-64 for x in [-112, 20].

    sigmoid(x) = Z / (Z + E) with exp(-x) = 2^n E, Z = 2^-n: no cancellation on either side,
    and the scale Z64 = 2^(64 - n) is normal, so a subnormal result rounds once more at most.
    """
    t, s, sl = _exp_core_f32(m, -x)
    z64 = m.bitcast(_wrap_i32((_F32_MAGIC_BITS + 191) << 23) - (m.bitcast(t, "i32") << 23), "f32")
    dh, de = _two_sum(z64 * _hex("0x1p-64"), s)
    rh = 1.0 / dh
    e1 = m.fma(-rh, de + sl, m.fma(-rh, dh, 1.0))          # 1 / (Z + E) = rh (1 + e1)
    return rh, e1, z64


def sigmoid(m, x):
    if x.dtype == "f32":
        rh, e1, z64 = _sigmoid_parts_f32(m, _clamp(m, x, -112.0, 20.0))
        return (m.fma(rh, e1, rh) * z64) * _hex("0x1p-64")
    raise NotImplementedError(x.dtype)


def silu(m, x):
    if x.dtype == "f32":
        xc = _clamp(m, x, -112.0, 20.0)                       # silu(-112) rounds to -0
        rh, e1, z64 = _sigmoid_parts_f32(m, xc)
        ph, pl = _two_prod(m, xc, rh)
        y = ((ph + m.fma(ph, e1, pl)) * z64) * _hex("0x1p-64")
        return m.where(x > 20.0, x, y)
    raise NotImplementedError(x.dtype)


def tanh(m, x):
    if x.dtype == "f32":
        b = _clamp(m, m.abs(x) * -2.0, -20.0, 0.0)
        t, u, ul = _expm1_core_f32(m, b)
        S = _pow2_f32(m, t, 0)                               # exp(b) = S (1 + u + ul), S <= 1
        a, ae = _fast_two_sum(m.const(-1.0, "f32"), S)
        bh, be = _fast_two_sum(a, S * u)
        bl = m.fma(S, ul, be + ae)                           # expm1(b) = bh + bl, in (-1, 0]
        dh, de = _fast_two_sum(m.const(2.0, "f32"), bh)
        dl = de + bl                                         # 2 + expm1(b)
        rh = 1.0 / dh
        q = -bh * rh                                         # tanh|x| = -expm1(b) / (2 + expm1(b))
        rem = m.fma(-q, dl, -m.fma(q, dh, bh)) - bl
        return _copysign(m, m.fma(rem, rh, q), x)
    raise NotImplementedError(x.dtype)
