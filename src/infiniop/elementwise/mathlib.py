"""Vectorisable, accurate math functions written once against the typed expression API.

Each function is ``def name(m, x)`` over the primitives of the ``m`` namespace (+ - * /, fma,
where, bit casts, integer ops): range reduction + polynomials, FMA-based error-free
transformations where precision is needed; no tables, no libm calls, no branches on data. So
every backend renders the same operations and computes the same bits.

One algorithm per function, instantiated at trace time for ``x.dtype`` ("f32" or "f64") with
that type's constants (:data:`_T`): float32 arithmetic (16 lanes per AVX-512 vector) with
double-float steps where a plain float32 evaluation would lose the last bit, so results are
nearly always correctly rounded; fp16/bf16 are computed in float32 and rounded once more. The
error-function family is computed in float64 for float32 (see there).

Notation: a "double-float" is an unevaluated sum hi + lo of two floats (|lo| <= ulp(hi));
RN(a) is a rounded to nearest even.
"""

from __future__ import annotations

from types import SimpleNamespace

_hex = float.fromhex


def _wrap(v, bits):
    """A Python int as the two's complement value of a ``bits``-wide integer."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


# ---------------------------------------------------------------------------- per-type constants

_T = {
    "f32": SimpleNamespace(
        int="i32", width=32, mant=23, bias=127,
        magic=12582912.0, magic_bits=0x4B400000,          # 1.5 * 2^mant: adding rounds to an int
        log2e=_hex("0x1.715476p+0"),
        ln2_hi=_hex("0x1.62e430p-1"),                     # RN(ln 2): n * ln2_hi - x exact in an fma
        ln2_lo=_hex("-0x1.05c610p-29"),
        ln2_hi_k=_hex("0x1.62e400p-1"),                   # 16 bits: k * ln2_hi_k exact, |k| < 256
        ln2_lo_k=_hex("0x1.7f7d1cp-20"),
        # exp(r) = 1 + r + r^2/2 + r^3/2 P(r), |r| <= ln2/2: 2^-33.2
        exp_p=(_hex("0x1.555556p-2"), _hex("0x1.5554e8p-4"), _hex("0x1.110ffep-6"),
               _hex("0x1.6d4ccap-9"), _hex("0x1.a250b0p-12")),
        # 2 atanh(t/2) = t + t^3 Q(t^2), |t| <= 0.3432: 2^-38.1
        log_q=(_hex("0x1.555554p-4"), _hex("0x1.999beap-7"), _hex("0x1.23e9a2p-9"),
               _hex("0x1.ed7eccp-12")),
        sqrt_half_bits=0x3F3504F3,
        inv_ln2=(_hex("0x1.715476p+0"), _hex("0x1.4ae0c0p-26")),
        log10e=(_hex("0x1.bcb7b2p-2"), _hex("-0x1.5b235ep-27")),
        tiny=_hex("0x1p-126"), tiny_scale=_hex("0x1p24"), tiny_k=-24.0,
        big=3.4028234663852886e38,
        exp_lo=-104.0, exp_hi=89.0, exp2_lo=-151.0, exp2_hi=129.0,
        scale_split=64,                                   # 2^n = 2^(n -+ 64) 2^(+-64)
        expm1_lo=-17.5, expm1_tiny=_hex("0x1p-25"),       # expm1 < -1 + 2^-25 below -17.33
        sig_lo=-112.0, sig_hi=20.0,                       # sigmoid rounds to 0 / 1 beyond
        tanh_2x_max=20.0,                                 # tanh rounds to 1 above 9.01
        atanh_tiny=_hex("0x1p-12"),
        log1p_kmax=100,
    ),
    "f64": SimpleNamespace(
        int="i64", width=64, mant=52, bias=1023,
        magic=6755399441055744.0, magic_bits=0x4338000000000000,
        log2e=_hex("0x1.71547652b82fep+0"),
        ln2_hi=_hex("0x1.62e42fefa39efp-1"),
        ln2_lo=_hex("0x1.abc9e3b39803fp-56"),
        ln2_hi_k=_hex("0x1.62e42fee00000p-1"),            # 32 bits
        ln2_lo_k=_hex("0x1.a39ef35793c76p-33"),
        exp_p=(_hex("0x1.555555555555cp-2"), _hex("0x1.5555555555555p-4"),  # 2^-63.9
               _hex("0x1.111111110e9a5p-6"), _hex("0x1.6c16c16c16b28p-9"),
               _hex("0x1.a01a01b479925p-12"), _hex("0x1.a01a01a34b3b2p-15"),
               _hex("0x1.71ddedce86fe0p-18"), _hex("0x1.27e4e501fdb36p-21"),
               _hex("0x1.af6fc5e0805eep-25"), _hex("0x1.1f61161867beap-28")),
        log_q=(_hex("0x1.5555555555555p-4"), _hex("0x1.9999999999d11p-7"),       # 2^-66
               _hex("0x1.24924924397cfp-9"), _hex("0x1.c71c724b6d328p-12"),
               _hex("0x1.745ce1c5e6e04p-14"), _hex("0x1.3b20252108103p-16"),
               _hex("0x1.0f673372fa0bcp-18"), _hex("0x1.0f0e801fe1008p-20")),
        sqrt_half_bits=0x3FE6A09E667F3BCD,
        inv_ln2=(_hex("0x1.71547652b82fep+0"), _hex("0x1.777d0ffda0d24p-56")),
        log10e=(_hex("0x1.bcb7b1526e50ep-2"), _hex("0x1.95355baaafad3p-57")),
        tiny=_hex("0x1p-1022"), tiny_scale=_hex("0x1p54"), tiny_k=-54.0,
        big=1.7976931348623157e308,
        exp_lo=-746.0, exp_hi=710.0, exp2_lo=-1076.0, exp2_hi=1025.0,
        scale_split=600,
        expm1_lo=-38.5, expm1_tiny=_hex("0x1p-54"),
        sig_lo=-760.0, sig_hi=40.0,
        tanh_2x_max=40.0,
        atanh_tiny=_hex("0x1p-27"),
        log1p_kmax=1000,
    ),
}


def _consts(x):
    if x.dtype not in _T:
        raise TypeError(f"mathlib functions take f32 or f64 values, not {x.dtype}")
    return _T[x.dtype]


def _c(m, v, like):
    return m.const(v, like.dtype)


# ---------------------------------------------------------------------------- small steps


def _fast_two_sum(a, b):
    """s + e == a + b exactly, for |a| >= |b| (or a == 0)."""
    s = a + b
    return s, b - (s - a)


def _two_sum(a, b):
    """s + e == a + b exactly, any order (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _two_prod(m, a, b):
    """p + e == a * b exactly (barring underflow)."""
    p = a * b
    return p, m.fma(a, b, -p)


def _horner(m, x, coeffs):
    acc = m.const(coeffs[-1], x.dtype)
    for c in reversed(coeffs[:-1]):
        acc = m.fma(acc, x, c)
    return acc


def _clamp(m, x, lo, hi):
    """x limited to [lo, hi]; NaN stays NaN (a compare + select each: x86 min/max)."""
    x = m.where(x < lo, _c(m, lo, x), x)
    return m.where(x > hi, _c(m, hi, x), x)


def _copysign(m, y, x):
    T = _consts(x)
    sign = -(1 << (T.width - 1))
    mag = m.bitcast(y, T.int) & ~sign
    return m.bitcast(mag | (m.bitcast(x, T.int) & sign), x.dtype)


def _pow2(m, t, k, like):
    """2^(n + k) from the magic-number result t = MAGIC + n (n + k + bias in [1, 2 bias])."""
    T = _consts(like)
    bits = (m.bitcast(t, T.int) << T.mant) + _wrap((T.bias + k - T.magic_bits) << T.mant, T.width)
    return m.bitcast(bits, like.dtype)


def _scale(m, y, t, big):
    """y * 2^n over the whole exponent range: 2^(n -+ s) then 2^(+-s), each factor normal
    (``big``: n > 0); a subnormal result is rounded once more at most."""
    s = _consts(y).scale_split
    f = m.where(big, _pow2(m, t, -s, y), _pow2(m, t, s, y))
    return (y * f) * m.where(big, _c(m, 2.0 ** s, y), 2.0 ** -s)


# ---------------------------------------------------------------------------- exp family


def _exp_reduce(m, x, xl=None):
    """x + xl = n ln2 + rh + rl: n in the bits of ``t``, rh exact (one fma), rl tiny."""
    T = _consts(x)
    t = m.fma(x, T.log2e, T.magic)
    nf = t - T.magic
    rh = m.fma(nf, -T.ln2_hi, x)
    rl = nf * -T.ln2_lo
    return t, rh, (rl if xl is None else rl + xl)


def _exp2_reduce(m, x):
    """x = n + f, f ln2 = rh + rl (n in the bits of ``t``)."""
    T = _consts(x)
    t = x + T.magic
    f = x - (t - T.magic)
    rh = f * T.ln2_hi
    return t, rh, m.fma(f, T.ln2_hi, -rh) + f * T.ln2_lo


def _exp_parts(m, rh):
    """exp(rh) ~ 1 + rh + h + c for |rh| <= ln2/2: h = RN(rh^2/2) and c the rest of the series
    including h's rounding error, so the sum is exact to ~2^-31 (f32) / 2^-63 (f64);
    u = RN(rh + RN(h + c))."""
    T = _consts(rh)
    hr = rh * 0.5
    h = rh * hr
    c = m.fma(h, rh * _horner(m, rh, T.exp_p), m.fma(rh, hr, -h))
    return h, c, rh + (h + c)


def _exp_core(m, x, xl=None, reduced=None):
    """exp(x + xl) = 2^n (s + sl), s + sl normalised, for x within the clamps.

    The residual of s = RN(1 + u) is recovered by subtracting back in order of decreasing
    magnitude: each step is exact (Sterbenz) or rounds a value below ulp(s).
    """
    t, rh, rl = reduced or _exp_reduce(m, x, xl)
    h, c, u = _exp_parts(m, rh)
    s = 1.0 + u
    sl = m.fma(rl, s, (((1.0 - s) + rh) + h) + c)       # exp(rh + rl) ~ exp(rh) (1 + rl)
    return t, s, sl


def _expm1_core(m, x, reduced=None):
    """exp(x) = 2^n (1 + u + ul), u + ul normalised and accurate relative to u."""
    t, rh, rl = reduced or _exp_reduce(m, x)
    h, c, u = _exp_parts(m, rh)
    ul = m.fma(rl, u, rl + (((rh - u) + h) + c))
    return t, u, ul


def exp(m, x):
    T = _consts(x)
    xc = _clamp(m, x, T.exp_lo, T.exp_hi)
    t, s, sl = _exp_core(m, xc)
    return _scale(m, s + sl, t, xc > 0.0)


def exp2(m, x):
    T = _consts(x)
    xc = _clamp(m, x, T.exp2_lo, T.exp2_hi)
    t, s, sl = _exp_core(m, None, reduced=_exp2_reduce(m, xc))
    return _scale(m, s + sl, t, xc > 0.0)


def expm1(m, x):
    T = _consts(x)
    xc = _clamp(m, x, T.expm1_lo, T.exp_hi)
    t, u, ul = _expm1_core(m, xc)
    # expm1(x) / 2 = S (1 + u + ul) - 1/2 with S = 2^(n-1) (no overflow at the top)
    S = _pow2(m, t, -1, x)
    a, ae = _two_sum(S, _c(m, -0.5, x))
    b, be = _fast_two_sum(a, S * u)
    y = (b + m.fma(S, ul, be + ae)) * 2.0
    return m.where(m.abs(x) < T.expm1_tiny, x, y)          # S u would lose subnormal bits


# ---------------------------------------------------------------------------- sigmoid, silu, tanh


def _sigmoid_parts(m, x):
    """sigmoid(x) = Rh (1 + e1) * Z2 * 2^-s for x within [sig_lo, sig_hi].

    sigmoid(x) = Z / (Z + E) with exp(-x) = 2^n E, Z = 2^-n: no cancellation on either side,
    and the scale Z2 = 2^(s - n) is normal, so a subnormal result rounds once more at most.
    """
    T = _consts(x)
    t, s, sl = _exp_core(m, -x)
    z2 = _pow2(m, _c(m, 2.0 * T.magic, x) - t, T.scale_split, x)  # 2^(s - n); 2M - t = M - n
    dh, de = _two_sum(z2 * 2.0 ** -T.scale_split, s)
    rh = 1.0 / dh
    e1 = m.fma(-rh, de + sl, m.fma(-rh, dh, 1.0))          # 1 / (Z + E) = rh (1 + e1)
    return rh, e1, z2


def sigmoid(m, x):
    T = _consts(x)
    rh, e1, z2 = _sigmoid_parts(m, _clamp(m, x, T.sig_lo, T.sig_hi))
    return (m.fma(rh, e1, rh) * z2) * 2.0 ** -T.scale_split


def _x_times_sigmoid(m, x, xc, rh, e1, z2):
    """x * rh (1 + e1) * Z: x * sigmoid with one rounding; x = xc within the clamps."""
    T = _consts(x)
    ph, pl = _two_prod(m, xc, rh)
    return ((ph + m.fma(ph, e1, pl)) * z2) * 2.0 ** -T.scale_split


def silu(m, x):
    T = _consts(x)
    xc = _clamp(m, x, T.sig_lo, T.sig_hi)                  # silu(sig_lo) rounds to -0
    y = _x_times_sigmoid(m, x, xc, *_sigmoid_parts(m, xc))
    return m.where(x > T.sig_hi, x, y)


def tanh(m, x):
    T = _consts(x)
    b = _clamp(m, m.abs(x) * -2.0, -T.tanh_2x_max, 0.0)
    t, u, ul = _expm1_core(m, b)
    S = _pow2(m, t, 0, x)                                  # exp(b) = S (1 + u + ul), S <= 1
    a, ae = _fast_two_sum(_c(m, -1.0, x), S)
    bh, be = _fast_two_sum(a, S * u)
    bl = m.fma(S, ul, be + ae)                             # expm1(b) = bh + bl, in (-1, 0]
    dh, de = _fast_two_sum(_c(m, 2.0, x), bh)
    dl = de + bl                                           # 2 + expm1(b)
    rh = 1.0 / dh
    q = -bh * rh                                           # tanh|x| = -expm1(b) / (2 + expm1(b))
    rem = m.fma(-q, dl, -m.fma(q, dh, bh)) - bl
    return _copysign(m, m.fma(rem, rh, q), x)


# ---------------------------------------------------------------------------- log family


def _log_core(m, xh, xl=None, kadj=None):
    """log(xh + xl) = a + lo (~2^-31 / 2^-62 relative) for xh positive, normal, finite.

    xh = 2^k m, m in [sqrt(1/2), sqrt(2)); log(m) = 2 atanh(s) = t + t^3 Q(t^2) with
    t = 2s = 2f / (2 + f), f = m - 1: |t| <= 0.3432, so the series' tail is below 2^-6.7 of t
    and a plain evaluation of it is enough; t itself is a double-float (one division and its
    exact residual). ``kadj`` (float) is added to k (pre-scaled subnormals).
    """
    T = _consts(xh)
    xi = m.bitcast(xh, T.int)
    k = (xi - T.sqrt_half_bits) >> T.mant
    f = m.bitcast(xi - (k << T.mant), xh.dtype) - 1.0      # exact (Sterbenz)
    if xl is not None:                                     # f + fl = m - 1 exactly, normalised
        kc = m.where(k > T.log1p_kmax, m.const(T.log1p_kmax, T.int), k)  # xl negligible there
        f, fl = _fast_two_sum(f, xl * m.bitcast((T.bias - kc) << T.mant, xh.dtype))
    dh, dl = _fast_two_sum(_c(m, 2.0, xh), f)
    if xl is not None:
        dl = dl + fl
    f2 = f * 2.0
    r = 1.0 / dh
    th = f2 * r
    rem = m.fma(-th, dh, f2)
    if xl is not None:
        rem = m.fma(fl, 2.0, rem)
    tl = m.fma(-th, dl, rem) * r
    t2 = th * th
    tl = m.fma(tl, t2 * 0.25, tl)                          # (th + tl)^3 Q ~ th^3 Q + th^2 tl / 4
    corr = (th * t2) * _horner(m, t2, T.log_q)
    kf = m.cast(k, xh.dtype) if kadj is None else m.cast(k, xh.dtype) + kadj
    a, ae = _fast_two_sum(kf * T.ln2_hi_k, th)
    return a, ae + ((tl + corr) + kf * T.ln2_lo_k)


def _log_specials(m, x, y):
    """log-like results at 0 (-inf), below 0 (NaN), +inf and NaN (themselves)."""
    y = m.where(x <= _consts(x).big, y, x)
    y = m.where(x < 0.0, _c(m, float("nan"), x), y)
    return m.where(m.eq(x, 0.0), _c(m, float("-inf"), x), y)


def _log_of(m, x):
    """log(x) = a + lo for x > 0 (subnormals pre-scaled so the exponent field is meaningful)."""
    T = _consts(x)
    sub = x < T.tiny
    xs = m.where(sub, x * T.tiny_scale, x)
    return _log_core(m, xs, kadj=m.where(sub, _c(m, T.tiny_k, x), 0.0))


def _mul_df(m, a, lo, ch, cl):
    """RN((a + lo) * (ch + cl)) for a double-float constant."""
    return m.fma(a, ch, m.fma(a, cl, lo * ch))


def log(m, x):
    a, lo = _log_of(m, x)
    return _log_specials(m, x, a + lo)


def log2(m, x):
    a, lo = _log_of(m, x)
    return _log_specials(m, x, _mul_df(m, a, lo, *_consts(x).inv_ln2))


def log10(m, x):
    a, lo = _log_of(m, x)
    return _log_specials(m, x, _mul_df(m, a, lo, *_consts(x).log10e))


def log1p(m, x):
    uh, ul = _two_sum(_c(m, 1.0, x), x)
    a, lo = _log_core(m, m.where(uh > 0.0, uh, 1.0), ul)
    return _log_specials(m, uh, a + lo)


def atanh(m, x):
    T = _consts(x)
    ax = m.abs(x)
    nh, nl = _fast_two_sum(_c(m, 1.0, x), ax)
    dh, dl = _fast_two_sum(_c(m, 1.0, x), -ax)
    r = 1.0 / dh
    yh = nh * r                                            # (1 + |x|) / (1 - |x|) = yh + yl
    yl = m.fma(-yh, dl, m.fma(-yh, dh, nh) + nl) * r
    a, lo = _log_core(m, _clamp(m, yh, 1.0, T.big * 0.25), yl)
    y = (a + lo) * 0.5
    y = m.where(ax < T.atanh_tiny, ax, y)                  # atanh(x) rounds to x
    y = m.where(ax < 1.0, y, m.where(m.eq(ax, 1.0), _c(m, float("inf"), x), float("nan")))
    return _copysign(m, m.where(m.isnan(x), x, y), x)


# ---------------------------------------------------------------------------- erf family, f32
# Computed in float64 (exact products, 2^-34 relative before the final rounding): the error
# function has no cheap float32 double-float form (its series and erfc's asymptotic form both
# need several exact leading terms). float64 ops take two 8-lane vectors per 16 floats.

_F64_MAGIC = 6755399441055744.0             # 1.5 * 2^52
_F64_MAGIC_BITS = 0x4338000000000000
_F64_LOG2E = _hex("0x1.71547652b82fep+0")
_F64_LN2_HI = _hex("0x1.62e42fee00000p-1")   # 32 bits: n * LN2_HI exact for |n| < 2^20
_F64_LN2_LO = _hex("0x1.a39ef35793c76p-33")
_F64_EXP_LOWACC = (  # exp(r) = 1 + r + r^2 E(r), |r| <= ln2/2, 2^-39.6
    _hex('0x1.ffffffffeae38p-2'), _hex('0x1.5555557e958c8p-3'), _hex('0x1.5555558a86929p-5'),
    _hex('0x1.1110a136b489ep-7'), _hex('0x1.6c1622bb3bdc8p-10'), _hex('0x1.a18702c72f5b5p-13'),
    _hex('0x1.a18b4561fa329p-16'),
)
_F64_ERF_SMALL = (  # erf(x) = x P(x^2), |x| <= 0.75, 2^-35.2
    _hex('0x1.20dd75040ddc2p+0'), _hex('-0x1.812746638fb04p-2'), _hex('0x1.ce2eff38627b5p-4'),
    _hex('-0x1.b8271621d3ee0p-6'), _hex('0x1.55e41d1249c59p-8'), _hex('-0x1.b6303e9b36bf5p-11'),
    _hex('0x1.8d6e76f293241p-14'),
)
_F64_ERFC_G = (  # (z + 3) exp(z^2) erfc(z) = G(1/(z + 3) - VC), 0 <= z <= 11, 2^-34.1
    _hex("0x1.4b31af86073d1p+0"), _hex("0x1.c6b1be2cfb71bp+2"), _hex("0x1.db61ed52d35a8p+4"),
    _hex("0x1.6eff1830eb0a2p+6"), _hex("0x1.7b4835fdb0e3ep+7"), _hex("0x1.5812f90df32a5p+7"),
    _hex("-0x1.213d14fce99d1p+8"), _hex("-0x1.dda08a1116412p+9"), _hex("0x1.de047d0ee8e6fp+7"),
    _hex("0x1.ee18b3258443dp+11"), _hex("0x1.43817c5da647dp+7"), _hex("-0x1.bb484e421da06p+13"),
)
_F64_ERFC_VC = _hex("0x1.9e79e79e79e7ap-3")


def _exp_f64_lowacc(m, x):
    """exp(x) for float64 x in [-700, 700], ~2^-39 relative error (the float32 paths' need)."""
    t = m.fma(x, _F64_LOG2E, _F64_MAGIC)
    nf = t - _F64_MAGIC
    r = m.fma(nf, -_F64_LN2_LO, m.fma(nf, -_F64_LN2_HI, x))
    p = m.fma(r * r, _horner(m, r, _F64_EXP_LOWACC), r) + 1.0
    bits = (m.bitcast(t, "i64") << 52) + _wrap((1023 - _F64_MAGIC_BITS) << 52, 64)
    return p * m.bitcast(bits, "f64")


def _recip_f64_via_f32(m, d):
    """1 / d for float64 d (normal as float32): a float32 division + one Newton step, ~2^-46."""
    r = m.cast(1.0 / m.cast(d, "f32"), "f64")
    return r * m.fma(-d, r, 2.0)


def _erfc_large_f64(m, z):
    """erfc(z) for float64 z >= 0 (clamped to 11; erfc(11) < 2^-180), ~2^-34 relative, with
    x2 = z^2 passed in exactly when the caller has it."""
    return _erfc_scaled_f64(m, z, z * z)


def _erfc_scaled_f64(m, z, z2):
    """erfc(z) = exp(-z^2) v G(v - VC), v = 1/(z + 3): one division; z2 = z^2 (exact when the
    caller has it)."""
    zc = m.where(z > 11.0, m.const(11.0, "f64"), z)
    z2 = m.where(z2 > 121.0, m.const(121.0, "f64"), z2)
    v = _recip_f64_via_f32(m, zc + 3.0)
    return _exp_f64_lowacc(m, -z2) * (v * _horner(m, v - _F64_ERFC_VC, _F64_ERFC_G))


def erf(m, x):
    if x.dtype == "f32":
        xd = m.cast(x, "f64")
        ax = m.abs(xd)
        small = xd * _horner(m, xd * xd, _F64_ERF_SMALL)
        large = _copysign(m, 1.0 - _erfc_large_f64(m, ax), xd)
        return m.cast(m.where(ax < 0.75, small, large), "f32")
    raise NotImplementedError(x.dtype)


def erfc(m, x):
    if x.dtype == "f32":
        xd = m.cast(x, "f64")
        ax = m.abs(xd)
        small = 1.0 - xd * _horner(m, xd * xd, _F64_ERF_SMALL)
        q = _erfc_large_f64(m, ax)
        large = m.where(xd > 0.0, q, 2.0 - q)
        return m.cast(m.where(ax < 0.75, small, large), "f32")
    raise NotImplementedError(x.dtype)


_F64_SQRT2 = _hex("0x1.6a09e667f3bcdp+0")
_F64_SQRT_HALF = _hex("0x1.6a09e667f3bcdp-1")


def gelu(m, x):
    """x * Phi(x) = x * erfc(-x / sqrt 2) / 2 (the erf form)."""
    if x.dtype == "f32":
        xd = m.cast(m.where(x < -15.0, m.const(-15.0, "f32"), x), "f64")  # gelu(-15) rounds to -0
        y = m.abs(xd)
        q = _erfc_scaled_f64(m, y * _F64_SQRT_HALF, (y * y) * 0.5) * 0.5   # Phi(-|x|)
        g = m.cast(xd * m.where(xd < 0.0, q, 1.0 - q), "f32")
        # below 2^-20, x/2 + x^2/sqrt(2 pi) in one float32 rounding (x/2 may be a subnormal tie)
        tiny = m.fma(x, x * _hex("0x1.988454p-2"), x * 0.5)
        return m.where(m.abs(x) < _hex("0x1p-20"), tiny, g)
    raise NotImplementedError(x.dtype)
