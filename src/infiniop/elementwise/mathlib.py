"""Vectorisable, accurate math functions written once against the typed expression API.

Each function is ``def name(m, x)`` over the primitives of the ``m`` namespace (+ - * /, fma,
where, bit casts, integer ops): range reduction + polynomials, FMA-based error-free
transformations where precision is needed; no tables, no libm calls, no branches on data. So
every backend renders the same operations and computes the same bits (NaN payloads aside).

Functions: exp, exp_nonpositive (softmax's: x <= 0, plain arithmetic; the softmax family takes
:func:`exp_nonpositive_scaled`, times a power of two that cancels), exp2, expm1, log, log2,
log10, log1p, atanh, tanh, sigmoid, silu, erf, erfc, erfinv, and the activations built on them:
gelu (erf form), gelu_tanh, quickgelu, softplus(x, beta, threshold), swiglu(a, b) = a * silu(b)
(for every pair: see :func:`swiglu`), hardswish, reciprocal.

One algorithm per function, instantiated at trace time for ``x.dtype`` with that type's
constants (:data:`_T`):
- "f32": float32 arithmetic (16 lanes per AVX-512 vector) with double-float steps (an
  unevaluated sum hi + lo, |lo| <= ulp(hi), formed with FMA and Fast2Sum/TwoSum) where a plain
  evaluation would lose the last bit: max error <= 0.76 ulp, >= 99.6% correctly rounded
  (measured on 1M inputs per function; tests/test_mathlib.py, benchmarks/mathlib_accuracy.py).
  A subnormal result is rounded twice at most (<= 1 ulp). The error-function family (erf,
  erfc, erfinv) takes its smooth factor from a float64 polynomial; float32 gelu, tanh, and
  sigmoid, silu, quickgelu and gelu_tanh (a quotient by 1 + exp(-v):
  :func:`_over_one_plus_exp_f64`), are computed in float64 and rounded once (<= 0.506 ulp,
  >= 99.95% correctly rounded, fewer operations than the double-float steps).
- fp16/bf16 results: computed in float32 and rounded once by the framework. When the trace says
  so (``m.result_bits`` <= 11: the significand bits of the stored type), exp, exp2, expm1,
  silu, sigmoid, tanh, gelu, gelu_tanh, quickgelu, softplus, log, log2, log10, log1p, atanh,
  erf, erfc and erfinv use plain float32 versions (about half the operations, a degree-5 exp
  or a degree-7 log1p polynomial), still correctly rounded except when the exact value lies
  within their float32 error (~2^-21) of a half-type tie.
- "f64": the same algorithms with float64 constants: max error <= 0.95 ulp, >= 96% correctly
  rounded.
At +-inf the functions give their limits (silu(-inf) = -0, gelu(+inf) = inf, hardswish(-inf) =
-0; torch gives NaN there); NaN stays NaN.

RN(a) below is a rounded to nearest even.
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
        gelu_tanh_c=((_hex("0x1.988454p+0"), _hex("-0x1.857936p-25")),    # 2 sqrt(2/pi)
                     (_hex("0x1.2444f2p-4"), _hex("0x1.49b16ap-29"))),     # 0.044715 c1
        gelu_tanh_range=(-10.9, 5.4),                     # results round to -0 / x beyond
        softplus_small=-16.0,                             # e^z < 2^-23
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
        quickgelu_k=(_hex("0x1.b3b645a1cac08p+0"), _hex("0x1.89374bc6a7efap-55")),
        gelu_tanh_c=((_hex("0x1.9884533d43651p+0"), _hex("-0x1.cbc0d30ebfd15p-54")),
                     (_hex("0x1.2444f2a4d8b4bp-4"), _hex("-0x1.6c843a29d1c70p-61"))),
        gelu_tanh_range=(-21.6, 7.3),
        quickgelu_range=(-450.0, 23.6),
        softplus_small=-36.0,
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
    return _at_most(m, _at_least(m, x, lo), hi)


def _at_least(m, x, lo):
    return m.where(x < lo, _c(m, lo, x), x)


def _at_most(m, x, hi):
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
    if _half_result(m, x):
        t, p = _expm1_plain(m, xc)
        return _scale(m, p + 1.0, t, xc > 0.0)
    t, s, sl = _exp_core(m, xc)
    return _scale(m, s + sl, t, xc > 0.0)


def exp_nonpositive(m, x):
    """exp(x) for x <= 0 in plain arithmetic, for softmax's exp(x - max) (x > 0 is taken as 0).

    Half the operations of :func:`exp`: no double-float steps, so about one ulp instead of a
    correctly rounded result (f32: max 1.0 ulp; f64 likewise, measured in tests/test_mathlib.py);
    a row's sum of such terms is as accurate as the terms. Results below the normal range go
    through a 2-step scale. fp16/bf16 results: :func:`_exp_nonpositive_half`.
    """
    k = nonpositive_scale(m, x)
    e = exp_nonpositive_scaled(m, x)
    return e * 2.0 ** -k if k else e


def nonpositive_scale(m, x) -> int:
    """k of :func:`exp_nonpositive_scaled` (2^k exp(x)) for ``x``'s type and the result's."""
    return 0 if _half_result(m, x) and m.result_bits > 8 else _consts(x).scale_split


def exp_nonpositive_scaled(m, x):
    """:func:`exp_nonpositive` times 2^k, k = 64 (float32, bf16 results), 600 (float64) or 0
    (fp16 results): every result normal, so without the second scaling's multiply. For
    quotients where the scale cancels: softmax's e / sum(e) of these terms has the bits of
    unscaled terms wherever those are normal, and rounds a subnormal output once."""
    T = _consts(x)
    if _half_result(m, x):
        return _exp_nonpositive_half(m, x)
    xc = _clamp(m, x, T.exp_lo, 0.0)
    t = m.fma(xc, T.log2e, T.magic)
    nf = t - T.magic
    r = m.fma(nf, -T.ln2_lo, m.fma(nf, -T.ln2_hi, xc))     # the first fma is exact
    p = m.fma(r * r, m.fma(r * 0.5, _horner(m, r, T.exp_p), 0.5), r)   # r + r^2/2 + r^3/2 P(r)
    s = _pow2(m, t, T.scale_split, x)
    return m.fma(p, s, s)                                  # RN(1 + p) s: s and the result normal


def _exp_nonpositive_half(m, x):
    """exp_nonpositive_scaled for fp16/bf16 results with fewer multiplies (the softmax family's
    exp pass is bound by them): 2^n (1 + p) as one fma; for fp16 results also r = x - n RN(ln 2)
    in one fma (off by n (ln 2 - RN(ln 2)), < 2^-24.3 relative where fp16 results are not 0:
    n >= -25), and x limited at -87 (exp(-87) N is below any row sum's rounding and rounds to 0
    in fp16), so that 2^n is normal unscaled. bf16 results (down to 2^-133) keep the two-step
    reduction and the scale."""
    T = _consts(x)
    if m.result_bits > 8:
        xc = _clamp(m, x, -87.0, 0.0)
        t = m.fma(xc, T.log2e, T.magic)
        p = _half_expm1_poly(m, m.fma(t - T.magic, -T.ln2_hi, xc))
        s = _pow2(m, t, 0, x)
        return m.fma(p, s, s)
    t, p = _expm1_plain(m, _clamp(m, x, T.exp_lo, 0.0))
    s = _pow2(m, t, T.scale_split, x)
    return m.fma(p, s, s)


def exp2(m, x):
    T = _consts(x)
    xc = _clamp(m, x, T.exp2_lo, T.exp2_hi)
    if _half_result(m, x):                                 # x = n + f exactly, f ln2 rounded
        t = xc + T.magic
        f = xc - (t - T.magic)
        p = _half_expm1_poly(m, m.fma(f, T.ln2_hi, f * T.ln2_lo))
        return _scale(m, p + 1.0, t, xc > 0.0)
    t, s, sl = _exp_core(m, None, reduced=_exp2_reduce(m, xc))
    return _scale(m, s + sl, t, xc > 0.0)


def expm1(m, x):
    T = _consts(x)
    xc = _clamp(m, x, T.expm1_lo, T.exp_hi)
    if _half_result(m, x):                                 # 2 (S (1 + p) - 1/2), S = 2^(n-1)
        t, p = _expm1_plain(m, xc)
        S = _pow2(m, t, -1, x)
        return m.where(m.abs(x) < T.expm1_tiny, x, m.fma(S, p, S - 0.5) * 2.0)
    t, u, ul = _expm1_core(m, xc)
    # expm1(x) / 2 = S (1 + u + ul) - 1/2 with S = 2^(n-1) (no overflow at the top)
    S = _pow2(m, t, -1, x)
    a, ae = _two_sum(S, _c(m, -0.5, x))
    b, be = _fast_two_sum(a, S * u)
    y = (b + m.fma(S, ul, be + ae)) * 2.0
    return m.where(m.abs(x) < T.expm1_tiny, x, y)          # S u would lose subnormal bits


# ---------------------------------------------------------------------------- sigmoid, silu, tanh


def _sigmoid_parts(m, x, xl=None):
    """sigmoid(x + xl) = Z / (dh + dl) with Z = Z2 * 2^-s, for x within [sig_lo, sig_hi];
    rh = RN(1 / dh).

    sigmoid(x) = Z / (Z + E) with exp(-x) = 2^n E, Z = 2^-n: no cancellation on either side,
    and Z2 = 2^(s - n) is normal, so scaling by Z2 then 2^-s rounds a subnormal result once
    more at most.
    """
    T = _consts(x)
    t, s, sl = _exp_core(m, -x, None if xl is None else -xl)
    z2 = _pow2(m, _c(m, 2.0 * T.magic, x) - t, T.scale_split, x)  # 2^(s - n); 2M - t = M - n
    z = z2 * 2.0 ** -T.scale_split
    big = z > s                                            # Fast2Sum of the larger and smaller
    dh, de = _fast_two_sum(m.where(big, z, s), m.where(big, s, z))
    return 1.0 / dh, dh, de + sl, z2


def _recip_err(m, rh, dh, dl):
    """e1 with 1 / (dh + dl) = rh (1 + e1)."""
    return m.fma(-rh, dl, m.fma(-rh, dh, 1.0))


def sigmoid(m, x):
    if _half_result(m, x):
        # x > a (a = -|x| limited below) selects the same lanes as x >= 0 except x = +0, where
        # t = 1 gives the same 1/2; comparing with a lets LLVM keep |x| in float32 (16% faster
        # for fp16 results on AVX2: it otherwise converts twice)
        return _sigmoid_half(m, x, lambda a, t: m.where(x > a, _c(m, 1.0, x), t))
    if x.dtype == "f32":
        return _over_one_plus_exp_f64(m, x, lambda xd: 1.0)
    T = _consts(x)
    rh, dh, dl, z2 = _sigmoid_parts(m, _clamp(m, x, T.sig_lo, T.sig_hi))
    return (m.fma(rh, _recip_err(m, rh, dh, dl), rh) * z2) * 2.0 ** -T.scale_split


def _times_sigmoid(m, x, v, vl=None):
    """x * sigmoid(v + vl) with one rounding, for v within [sig_lo, sig_hi] and |x| below
    ~2^(bias - s)."""
    T = _consts(x)
    rh, dh, dl, z2 = _sigmoid_parts(m, v, vl)
    q = x * rh                                             # x sigmoid(v) / Z = x / (dh + dl):
    y = m.fma(m.fma(-q, dl, m.fma(-q, dh, x)), rh, q)      # the quotient and its remainder
    return (y * z2) * 2.0 ** -T.scale_split               # (rounded once here)


def _silu(m, x):
    T = _consts(x)
    xc = _clamp(m, x, T.sig_lo, T.sig_hi)                  # silu(sig_lo) rounds to -0
    return m.where(x > T.sig_hi, x, _times_sigmoid(m, xc, xc))


def swiglu(m, a, b):
    """a * silu(b) (InfiniCore's SwiGLU: c = a * b / (1 + exp(-b))), for every a and b: no
    intermediate overflows or underflows early (a up to the largest float, b far below the
    exp range when a is huge), a * silu(-inf) = a * -0, zeros keep the product's sign.

    float32 results: in float64 (to ~2^-38); fp16 results: in float32 (inputs of at most 11
    bits and 65504: a b exact); bf16 results: in float32 with the scales kept apart
    (:func:`_swiglu_bf16`); float64: double-float steps with the scale kept apart
    (:func:`_swiglu_f64`). The near-ties of the product are decided exactly
    (:func:`_swiglu_split`): the head and rest are rounded to odd before the one rounding to
    the result's type."""
    if b.dtype == "f64":
        return _swiglu_f64(m, a, b)
    if _half_result(m, b):
        if m.result_bits <= 8:
            return _swiglu_bf16(m, a, b)
        split, s, e, g = _swiglu_split(m, a, b, -40.0, 2.0 ** -6)  # 65504^2 e^-40 < 2^-25:
        return m.where(split, _to_odd(m, s, e, False), g)          # below -40 all round to 0
    ad, bd = m.cast(a, "f64"), m.cast(b, "f64")            # 2^128 * 700 e^-700 < 2^-860
    split, s, e, g = _swiglu_split(m, ad, bd, -700.0, 2.0 ** -20)
    return m.cast(m.where(split, _to_odd(m, s, e, False), g), "f32")


def _swiglu_split(m, a, b, lo, lim):
    """(split, s, e, g): a silu(b) = s + e where split (a and b finite and not 0), else g.

    Split: h + l with h exact (a b has at most 48 bits in float64, 22 for fp16 inputs in
    float32), summed exactly (s + e = h + l), for the caller to round to odd so that the one
    rounding after it is correct: a b (or a b / 2) is often a tie of the result's type (a = 3:
    half of all b), and only the small rest decides, below a plain evaluation's error or lost
    entirely (e^-b below float64's precision for b > 37). Measured before, a = 3: 208,492,596
    of the 2^32 float32 b off by one ulp (every tie below |b| ~ 2^-37), and more beyond b = 37.
    With q = e^-|b| / (1 + e^-|b|) (|b| limited to -``lo``; at least 2^-900 in float64, so that
    its sign survives where e^-b would flush): see :func:`_swiglu_head_rest`.
    g, for a or b zero, infinite or NaN: a b / 2 (the product's sign and specials), and
    a * -0 below b = -745, where float64's silu rounds to -0 (inf * silu(b) is NaN there)."""
    T = _consts(b)
    t = _exp_neg_scaled(m, _at_least(m, -m.abs(b), lo))   # e^-|b|
    q = t / (t + 1.0)                                      # sigmoid(-|b|)
    P = a * b                     # exact: finite and not 0 exactly when a and b are
    split = (m.abs(P) <= T.big) & (m.abs(P) > 0.0)
    if b.dtype == "f64":
        q = _at_least(m, q, 2.0 ** -900)
    s, e = _swiglu_head_rest(m, P, b, b, q, split & (m.abs(b) < lim))
    return split, s, e, _swiglu_special(m, a, b)


def _swiglu_head_rest(m, P, b, bs, q, small):
    """s + e = P sigmoid(b), summed exactly from an exact head h and a rest l, for P = a b
    (exact) and q = sigmoid(-|b|) (for b <= -lim any power-of-two multiple of it: the whole
    result scales alike, :func:`_swiglu_bf16`):
    - ``small`` (0 < |b| < lim): silu's series, h = P / 2, l = P b / 4 - P b^3 / 48 with the
      product's rounding error (P / 2 + P b / 4 is itself a tie when b is a power of two; the
      next term, b^4 / 240 of the result, is below every rounding here); ``bs`` is b, or b
      limited away from 0 where that changes nothing but l's underflow;
    - b >= lim: h = P, l = -P q;  b <= -lim: h = 0, l = P q (no product ties there)."""
    pos = b > 0.0
    h = m.where(small, P * 0.5, m.where(pos, P, _c(m, 0.0, b)))
    l1 = (P * 0.25) * bs                                   # a b^2 / 4, rounded
    rest = m.fma(P * 0.25, bs, -l1) + (l1 * (bs * bs)) * (-1.0 / 12.0)   # its error - a b^4 / 48
    Pq = P * q
    l = m.where(small, l1, m.where(pos, -Pq, Pq))
    s = h + l
    return s, (l - (s - h)) + m.where(small, rest, _c(m, 0.0, b))


def _swiglu_special(m, a, b):
    """a silu(b) where a or b is zero, infinite or NaN: a b / 2, and a * -0 below b = -745."""
    return m.where(b < -745.0, a * -0.0, (a * b) * 0.5)


def _swiglu_bf16(m, a, b):
    """a silu(b) for bf16 results in float32 (twice float64's lanes; bf16 swiglu 32M on Zen 4
    31.6 -> 22.7 ms), the scales kept apart: a = A 2^ka, b = B 2^kb with A, B in [1, 2), so
    P = A B is exact (8-bit inputs) and in [1, 4), and e^-|b| = 2^n (1 + p) with n apart where
    it scales the result (b < 0). :func:`_swiglu_head_rest` gives s + e = A B sigmoid(b)
    (times 2^-n for b < 0) in [0.35, 8); s is scaled by 2^K, K = ka + kb (+ n), in two steps, the
    first exact; the second rounds only below 2^-126, and what it drops (d, exact) joins e to
    round the result to odd, subnormals included, for the framework's rounding to bf16.
    q has float32's accuracy (~2^-23, the degree-7 exp): a result within that of a tie of bf16
    may round the other way (141 of 2^25 pairs of normal a and b, benchmarks/swiglu_accuracy.py;
    487 with the degree-5 exp); the ties of the product itself are decided exactly."""
    big = _T["f32"].big
    A, ka = _normalised(m, a)
    B, kb = _normalised(m, b)
    ab = m.abs(b)
    split = (m.abs(a) > 0.0) & (m.abs(a) <= big) & (ab > 0.0) & (ab <= big)
    # |a b| <= 2^256 and e^-300 < 2^-432: beyond, every product rounds to 0 (with its sign)
    t, p = _expm1_plain(m, _at_least(m, -ab, -300.0), precise=True)
    n = m.bitcast(t, "i32") - _T["f32"].magic_bits
    E = p + 1.0
    Et = E * _pow2i(m, m.where(n < -100, m.const(-100, "i32"), n))   # e^-|b|, at least 2^-101
    pos = b > 0.0
    q = m.where(pos, Et, E) * (1.0 / (Et + 1.0))           # b > 0: q; b < 0: q 2^-n
    small = ab < 2.0 ** -6
    bs = m.where(ab < 2.0 ** -40, _copysign(m, _c(m, 2.0 ** -40, b), b), b)
    s, e = _swiglu_head_rest(m, A * B, b, bs, q, small)
    K = ka + kb + m.where(pos | small, m.const(0, "i32"), n)
    K = m.where(K < -200, m.const(-200, "i32"), m.where(K > 140, m.const(140, "i32"), K))
    K2 = K >> 1                                            # K, K - K2 in [-100, 70]
    y1 = m.bitcast(m.bitcast(s, "i32") + ((K - K2) << 23), "f32")   # s 2^(K - K2), exact
    f = _pow2i(m, K2)
    y = y1 * f
    d = y1 - y * m.bitcast(0x7F000000 - m.bitcast(f, "i32"), "f32")   # y1 - y 2^-K2, exact
    r = _to_odd(m, y, m.where(m.abs(d) > 0.0, d, e))
    r = m.where(m.abs(y) <= big, r, y)                     # overflow: inf
    return m.where(split, r, _swiglu_special(m, a, b))


def _normalised(m, x):
    """(X, k): x = X 2^k with |X| in [1, 2) for finite, nonzero float32 x (subnormals too)."""
    sub = m.abs(x) < 2.0 ** -126
    bits = m.bitcast(m.where(sub, x * 2.0 ** 64, x), "i32")
    k = ((bits >> 23) & 255) - m.where(sub, m.const(127 + 64, "i32"), m.const(127, "i32"))
    return m.bitcast((bits & -0x7F800001) | 0x3F800000, "f32"), k


def _pow2i(m, k):
    """2^k as a float32 for an i32 k in [-126, 127]."""
    return m.bitcast((k + 127) << 23, "f32")


def _to_odd(m, s, e, zero=True):
    """s + e (e exact, |e| <= ulp(s) / 2) rounded to odd: truncated toward zero and the last
    bit set when inexact, so that one more rounding to at most p - 2 bits is the correct
    rounding of s + e (where s alone may sit on a tie of the narrower type). ``zero=False``:
    the caller knows s != 0."""
    it = "i64" if s.dtype == "f64" else "i32"
    if zero:                                               # s = 0: zero with the sign of e
        ez = e * 0.0 if e.dtype == s.dtype else m.cast(e * 0.0, s.dtype)
        s0 = m.where(m.eq(s, 0.0), ez, s)
    else:
        s0 = s
    bits = m.bitcast(s0, it)
    inward = (bits < 0) ^ (e < 0.0)                        # s + e nearer zero (when e != 0)
    bits = bits - m.where(inward, m.const(1, it), m.const(0, it))
    return m.where(m.abs(e) > 0.0, m.bitcast(bits | m.const(1, it), s.dtype), s)


def _exp_neg_scaled(m, a):
    """exp(a) in plain arithmetic for a in [lo, 0] with exp(lo) normal (one scaling); float32:
    the degree-7 polynomial (fp16 swiglu, 2^25 pairs of normal a and b: 2940 -> 1374 results
    off by one ulp at near-ties, benchmarks/swiglu_accuracy.py; 5% slower)."""
    if a.dtype == "f64":
        return _exp_f64_lowacc(m, a)
    t, p = _expm1_plain(m, a, precise=True)
    return (p + 1.0) * _pow2(m, t, 0, a)


def _swiglu_f64(m, a, b):
    """float64 a * silu(b), rounded once where the result is normal (twice at most below).

    silu(b) = Q 2^-n with exp(-b) = 2^n (s + sl) and Q = b / (s + sl + 2^-n) a double-float.
    The exact factor 2^-n goes into Q up to 2^-900 (so Q keeps every bit: all of it for
    b >= 0, where a * Q is the result), the rest scales the product: a huge a meets a tiny
    silu(b) without overflowing, down to b = -1500 (beyond, every product rounds to zero)."""
    T = _consts(b)
    M = T.magic
    bc = _clamp(m, b, -1500.0, T.sig_hi)
    t, s, sl = _exp_core(m, -bc)                           # exp(-b) = 2^n (s + sl), t = M + n
    z = _pow2(m, 2.0 * M - _at_most(m, t, M + 100.0), 0, b)   # 2^-min(n, 100): beyond, below
    big = z > s                                            # s's last bit
    dh, de = _fast_two_sum(m.where(big, z, s), m.where(big, s, z))
    dl = de + sl
    rh = 1.0 / dh
    qh = bc * rh
    ql = m.fma(-qh, dl, m.fma(-qh, dh, bc)) * rh            # Q = qh + ql
    f = _pow2(m, 2.0 * M - _at_most(m, t, M + 900.0), 0, b)   # 2^-min(n, 900)
    lo = a * (ql * f)
    y = m.fma(a, qh * f, m.where(m.abs(a) <= T.big, lo, _c(m, 0.0, b)))  # a = inf: no inf - inf
    e = _at_least(m, t - (M + 900.0), 0.0)                 # 2^-e after: e = n - 900 > 0
    e1 = _at_most(m, e, 1000.0)
    y = (y * _pow2(m, M - e1, 0, b)) * _pow2(m, M - (e - e1), 0, b)
    y = m.where(b > T.sig_hi, a * b, y)
    # silu(b) is taken as -0 below -745 (as float64's rounds: a = inf gives NaN, like inf * -0)
    y = m.where(b < -745.0, m.where(m.abs(a) <= T.big, y, a * -0.0), y)
    # tiny b: silu(b) = b/2 (1 + b/2 + ...) rounds as b/2 (it may be subnormal before a scales it)
    y = m.where(m.abs(b) < 2.0 ** -59, (a * 0.5) * b, y)
    far = m.where(b < -745.0, _c(m, -0.0, b), b)
    return m.where(m.eq(a, 0.0), a * far, y)               # the product's sign (fma loses it)


def _quickgelu(m, x):
    """float64 x * sigmoid(1.702 x), 1.702 x exact as a double-float."""
    T = _consts(x)
    kh, kl = T.quickgelu_k
    lo, hi = T.quickgelu_range
    xc = _clamp(m, x, lo, hi)
    vh, ve = _two_prod(m, xc, _c(m, kh, x))
    return m.where(x > hi, x, _times_sigmoid(m, xc, vh, m.fma(xc, kl, ve)))


def _gelu_tanh(m, x):
    """x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) = x * sigmoid(x (c1 + c2 x^2)), with
    c1 = 2 sqrt(2/pi), c2 = 0.044715 c1: no cancellation for x < 0; v = x (c1 + c2 x^2) is
    kept as a double-float (sigmoid(v) is sensitive to v's absolute error)."""
    T = _consts(x)
    (c1h, c1l), (c2h, c2l) = T.gelu_tanh_c
    lo, hi = T.gelu_tanh_range
    xc = _clamp(m, x, lo, hi)
    xh, xe = _two_prod(m, xc, xc)
    wh, we = _two_prod(m, xh, _c(m, c2h, x))
    ah, ae = _two_sum(_c(m, c1h, x), wh)
    al = ae + (m.fma(xe, c2h, m.fma(xh, c2l, we)) + c1l)  # c1 + c2 x^2 = ah + al
    vh, ve = _two_prod(m, xc, ah)
    y = _times_sigmoid(m, xc, vh, m.fma(xc, al, ve))
    return m.where(x > hi, x, y)


def _hardswish(m, x):
    """x * min(max(x + 3, 0), 6) / 6: x (x + 3) / 6 rounded once inside (-3, 3).

    float32/float64 results: a double-float x (x + 3), divided with its remainder; where the
    result is x/2 exactly (x an odd subnormal, x/2 not representable) it is rounded up, as x/2
    plus the positive tail x^2/6 is. fp16/bf16 results: :func:`_hardswish_half`. x is not
    clamped: beyond (-3, 3) the selects at the end decide (NaN and infinities in the unused
    lanes; 4 operations fewer)."""
    if _half_result(m, x):
        return _hardswish_half(m, x)
    T = _consts(x)
    sh, se = _fast_two_sum(_c(m, 3.0, x), x)
    ph, pe = _two_prod(m, x, sh)
    # the division stays (with a product, 66 of 6.3M float32 results were 1 ulp off, each time
    # the other one was the correctly rounded value)
    q = ph / 6.0
    rem = m.fma(-q, 6.0, ph) + m.fma(x, se, pe)
    y = m.fma(rem, 1.0 / 6.0, q)
    sub = T.tiny * 2.0 ** -T.mant  # odd subnormal x: x/2 + tail rounds up, (x + 1 ulp) / 2 exactly
    odd = (m.abs(x) < 2.0 * T.tiny) & ((m.bitcast(x, T.int) & 1) > 0)
    y = m.where(odd, _copysign(m, (x + sub) * 0.5, x), y)          # x = -sub: -0, not +0
    return m.where(x >= 3.0, x, m.where(x <= -3.0, _c(m, -0.0, x), y))


def _hardswish_half(m, x):
    """hardswish for fp16/bf16 results (x float32 from fp16/bf16): x (x + 3) / 6 = x/2 + x^2/6,
    with x/2 and x^2 exact (x has at most 11 bits), one fma rounded once in float32 and then to
    the half type. For tiny x the tail x^2/6 falls below float32's last bit of x/2, and x/2 is a
    tie for every odd subnormal x (fp16 x = 2^-24 gives 2^-25 + 2^-48/6, which rounds up to
    2^-24, not to the even 0): where the result is x/2 exactly it is rounded to odd toward the
    tail (-1 on the magnitude if negative). Correctly rounded on all 65,536 inputs of each type
    (the same bits as the double-float evaluation this replaced, 22-24% faster on Zen 4)."""
    T = _consts(x)
    h = x * 0.5
    y = m.fma(x * x, 1.0 / 6.0, h)
    hb = m.bitcast(h, T.int)
    y = m.where(m.eq(y, h), m.bitcast((hb + (hb >> (T.width - 1))) | 1, x.dtype), y)
    return m.where(x >= 3.0, x, m.where(x <= -3.0, _c(m, -0.0, x), y))


def reciprocal(m, x):
    return 1.0 / x


def softplus(m, x, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, or x where beta x > threshold (torch's, InfiniCore's rule).

    softplus(z) = max(z, 0) + log1p(exp(-|z|)) with z = beta x a double-float: no overflow,
    no cancellation. ``beta``/``threshold``: Python numbers or runtime scalar values.
    fp16/bf16 results: :func:`_softplus_half`.
    """
    if _half_result(m, x):
        return _softplus_half(m, x, beta, threshold)
    T = _consts(x)
    one = isinstance(beta, int | float) and beta == 1
    # a run-time beta is a float32 scalar: in x's type, so that 1 / beta below is float64 for
    # float64 x (a float32 reciprocal cost float64 results up to 2^21 ulp: beta = 3)
    beta = _c(m, beta, x) if isinstance(beta, int | float) else m.cast(beta, x.dtype)
    zh, zl = (x, None) if one else _two_prod(m, x, beta)
    if zl is not None:  # the error term of beta x: none where -|beta x| is clamped below (it
        zl = m.where(m.abs(zh) <= -T.sig_lo, zl, _c(m, 0.0, x))  # is huge or NaN there)
    az = m.abs(zh)
    neg = -az
    t, s, sl = _exp_core(m, _clamp(m, neg, T.sig_lo, 0.0),
                         None if zl is None else m.where(zh > 0.0, -zl, zl))
    S = _pow2(m, t, T.scale_split, x) * 2.0 ** -T.scale_split  # 2^n, n <= 0 (0 below min)
    uh, ue = _fast_two_sum(_c(m, 1.0, x), s * S)            # 1 + exp(-|z|)
    a, lo = _log_core(m, uh, m.fma(sl, S, ue))
    pos = zh > 0.0
    hh, he = _two_sum(m.where(pos, zh, _c(m, 0.0, x)), a)
    lo = he + lo
    if zl is not None:
        lo = lo + m.where(pos, zl, _c(m, 0.0, x))
    # far below 0 the log's input 1 + e^z loses e^z's low part: log1p(e^z) = e^z (1 - e^z/2),
    # scaled once (no double rounding of subnormals)
    # (hh + lo kept apart: a division by beta follows, and rounding ys first cost 1.3 ulp)
    small = zh < T.softplus_small
    P = _pow2(m, t, T.scale_split, x)
    hh = m.where(small, s * P, hh)
    lo = m.where(small, m.fma(s, (s * S) * -0.5, sl) * P, lo)
    f = m.where(small, _c(m, 2.0 ** -T.scale_split, x), 1.0)
    if one:
        y = (hh + lo) * f
    else:
        rb = 1.0 / beta
        qh = hh * rb
        y = m.fma(m.fma(-qh, beta, hh) + lo, rb, qh) * f   # (hh + lo) / beta, rounded once
    # beta x = +inf: softplus(z) / beta = z / beta = x (also where threshold is inf)
    return m.where((zh > threshold) | (zh > T.big), x, y)


# log1p(t) = t P(t), t in [0, 1]: 2^-21.9 relative (Lawson's weighted least squares, float32
# coefficients), the accuracy of the fp16/bf16 paths' exp
_HALF_LOG1P_P = (
    _hex("0x1.fffffap-1"), _hex("-0x1.fff9f4p-2"), _hex("0x1.54c9d8p-2"), _hex("-0x1.f63d10p-3"),
    _hex("0x1.6d0e7cp-3"), _hex("-0x1.bddc2ap-4"), _hex("0x1.702928p-5"), _hex("-0x1.1fca8cp-7"),
)


def _softplus_half(m, x, beta, threshold):
    """softplus for fp16/bf16 results in plain float32 (~2^-21 before the final rounding):
    z = beta x rounded (its error, |z| 2^-24, moved none of the fp16/bf16 results measured
    with beta = 1.7, 1e-3), t = exp(-|z|) over float32's whole range (beta may be small),
    log1p(t) = t P(t) (no log: t is in [0, 1], and tiny t keep their relative accuracy), z
    added back for z > 0, one division by beta."""
    T = _consts(x)
    one = isinstance(beta, int | float) and beta == 1
    b = beta if not isinstance(beta, int | float) else _c(m, beta, x)
    z = x if one else x * b
    t = _exp_neg_plain(m, _at_least(m, -m.abs(z), T.sig_lo))
    L = t * _horner(m, t, _HALF_LOG1P_P)                    # log1p(t)
    y = m.where(z > 0.0, z + L, L)
    return m.where(z > threshold, x, y if one else y / b)


def tanh(m, x):
    if _half_result(m, x):
        return _tanh_half(m, x)
    if x.dtype == "f32":
        return _tanh_via_f64(m, x)
    T = _consts(x)
    b = _at_least(m, m.abs(x) * -2.0, -T.tanh_2x_max)
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


# ---------------------------------------------------------------------------- fp16/bf16 results
# When the result is rounded to fp16/bf16 (``m.result_bits`` <= 11: the significand bits of the
# type the framework stores), a plain float32 evaluation (a few float32 ulps: 2^-21 relative)
# is already correctly rounded except when the exact value lies within that error of a
# half-type tie; these versions skip the double-float steps (about half the operations).

_F32_ERFC_G7 = (  # (z + 3) exp(z^2) erfc(z) = G(1/(z + 3) - VC), 0 <= z <= 11, 2^-22.8
    _hex("0x1.4b31aep+0"), _hex("0x1.c6b1a0p+2"), _hex("0x1.db62fep+4"), _hex("0x1.6f0606p+6"),
    _hex("0x1.7b1e3ep+7"), _hex("0x1.54eca2p+7"), _hex("-0x1.193850p+8"), _hex("-0x1.9aca0ap+9"),
)
_F32_ERFC_VC = _hex("0x1.9e79e8p-3")


def _half_result(m, x):
    """True when the caller rounds the float32 result to fp16 / bf16 (see above)."""
    return x.dtype == "f32" and getattr(m, "result_bits", 24) <= 11


# expm1(r) = r + r^2 (1/2 + r B(r)), |r| <= ln2/2: 2^-21.9 relative to exp(r) (B fitted by
# Lawson's weighted least squares; degree 7 in float32 paths): fp16/bf16 results round the same
_HALF_EXP_B = (_hex("0x1.555a92p-3"), _hex("0x1.568de6p-5"), _hex("0x1.0e8d20p-7"))


def _expm1_plain(m, x, precise=False):
    """exp(x) = 2^n (1 + p) in plain float32 (p ~2^-21; ``precise``: the degree-7 polynomial,
    2^-33 before the roundings of its last steps), x within the clamps."""
    T = _consts(x)
    t = m.fma(x, T.log2e, T.magic)
    nf = t - T.magic
    r = m.fma(nf, -T.ln2_lo, m.fma(nf, -T.ln2_hi, x))
    if precise:                                            # 1 + r + r^2/2 + r^3/2 P(r)
        return t, m.fma(r * r, m.fma(r * 0.5, _horner(m, r, T.exp_p), 0.5), r)
    return t, _half_expm1_poly(m, r)


def _half_expm1_poly(m, r):
    """exp(r) - 1 = r + r^2 (1/2 + r B(r)) for |r| <= ln2/2, plain float32 (2^-21.9)."""
    return m.fma(r * r, m.fma(r, _horner(m, r, _HALF_EXP_B), 0.5), r)


def _exp_neg_plain(m, a):
    """exp(a) for a in [sig_lo, 0], plain float32 (subnormal results through a 2-step scale)."""
    T = _consts(a)
    t, p = _expm1_plain(m, a)
    return ((p + 1.0) * _pow2(m, t, T.scale_split, a)) * 2.0 ** -T.scale_split


def _exp_neg_limited(m, a):
    """(a', exp(a')) with a' = a limited below, for a <= 0 (sigmoid, silu, gelu_tanh): to -24
    for fp16 results (e^-24 = 2^-34.6 is below their rounding wherever the limit applies, and
    2^n stays normal: one scaling), to sig_lo for bf16 (float32's range)."""
    if m.result_bits > 8:
        a = _at_least(m, a, -24.0)
        t, p = _expm1_plain(m, a)
        return a, (p + 1.0) * _pow2(m, t, 0, a)
    a = _at_least(m, a, _consts(a).sig_lo)
    return a, _exp_neg_plain(m, a)


def _sigmoid_half(m, x, numer):
    """numer(a, t) / (1 + t) with a = -|x| (limited below) and t = exp(a): sigmoid (numer 1 or
    t), silu (x or a t). No upper clamp: for large x, t is below 2^-24 and 1 + t rounds to 1;
    a t gives silu's -0 at -inf."""
    a, t = _exp_neg_limited(m, -m.abs(x))
    return numer(a, t) / (t + 1.0)


def _silu_half(m, x):
    return _sigmoid_half(m, x, lambda a, t: m.where(x >= 0.0, x, a * t))   # x = -0: -0 / 2


def _tanh_half(m, x):
    T = _consts(x)
    b = _at_least(m, m.abs(x) * -2.0, -T.tanh_2x_max)
    t, p = _expm1_plain(m, b)
    S = _pow2(m, t, 0, x)
    e = m.fma(S, p, S - 1.0)                               # expm1(b), S - 1 exact
    return _copysign(m, -e / (e + 2.0), x)


def _gelu_half(m, x):
    """x Phi(x) with Phi(-y) = exp(-y^2/2) v G(v - VC) / 2, v = 1/(y/sqrt 2 + 3), y = |x|
    limited to L (beyond, x (1 - Phi(-y)) rounds to x) and x below -L to -L (rounds to -0):
    L = 6.1 for fp16 results (exp(-y^2/2) / 2 normal: one scaling), 15 for bf16 (two)."""
    T = _consts(x)
    f16 = m.result_bits > 8
    lim = 6.1 if f16 else 15.0
    xc = _at_least(m, x, -lim)
    y = _at_most(m, m.abs(xc), lim)
    t, p = _expm1_plain(m, (y * y) * -0.5)
    E = (p + 1.0) * _pow2(m, t, -1 if f16 else T.scale_split - 1, x)   # exp(-y^2/2) / 2 (2^s)
    v = 1.0 / m.fma(y, _hex("0x1.6a09e6p-1"), 3.0)
    q = E * (v * _horner(m, v - _F32_ERFC_VC, _F32_ERFC_G7))          # Phi(-|x|)
    if not f16:
        q = q * 2.0 ** -T.scale_split
    return xc * m.where(xc < 0.0, q, 1.0 - q)                          # x = -0: -0 (1 - q)


_F32_ERF_SMALL = (  # erf(x) = x P(x^2), |x| <= 0.75: 2^-23.7 (mathlib_fit.py erf_half)
    _hex("0x1.20dd74p+0"), _hex("-0x1.81258ap-2"), _hex("0x1.cdc8bcp-4"), _hex("-0x1.afff46p-6"),
    _hex("0x1.10e5dcp-8"),
)


_F32_ERF_W = (  # erf(x) = x P(x^2 - 4.5), |x| <= 3: 2^-25.4 (float32 evaluation ~2^-22)
    _hex("0x1.e16a3cp-2"), _hex("-0x1.a083bcp-5"), _hex("0x1.fdb6f6p-8"), _hex("-0x1.3cb84ep-10"),
    _hex("0x1.72f314p-13"), _hex("-0x1.8e9bc2p-16"), _hex("0x1.865e1ap-19"),
    _hex("-0x1.5dfe98p-22"), _hex("0x1.1a9742p-25"), _hex("-0x1.89da8ap-29"),
    _hex("0x1.1a0054p-32"), _hex("-0x1.fafef8p-36"), _hex("0x1.128b0cp-39"),
)


def _erf_half(m, x):
    """erf for fp16/bf16 results in plain float32: one polynomial, x P(x^2 - 4.5) for |x| <= 3
    (2^-22; x^2 is exact: half inputs have at most 11 bits; beyond 3, erf(3) rounds to +-1 as
    erf does)."""
    xc = _clamp(m, x, -3.0, 3.0)
    return xc * _horner(m, m.fma(xc, xc, -4.5), _F32_ERF_W)


def _erfc_half(m, x):
    """erfc for fp16/bf16 results in plain float32 (~2^-22): 1 - x P4(x^2) for |x| < 0.75,
    rounded to odd (near 1 the float32 difference would round the last bits of the small term
    onto an fp16 tie: erfc(-0.000433)); else erfc(z) = exp(-z^2) v G(v - VC), v = 1/(z + 3),
    z = |x| (gelu's half path's G), 2 - erfc(z) for x < 0. z is limited to 4.5, or to 10 for
    bf16 results, whose tiny values keep exp(-z^2) 2^s normal and are scaled by 2^-s last."""
    T = _consts(x)
    scaled = m.result_bits <= 8
    z = m.abs(x)
    zc = _at_most(m, z, 10.0 if scaled else 4.5)
    t, p = _expm1_plain(m, -(zc * zc))
    E = (p + 1.0) * _pow2(m, t, T.scale_split if scaled else 0, x)
    v = 1.0 / (zc + 3.0)
    q = E * (v * _horner(m, v - _F32_ERFC_VC, _F32_ERFC_G7))        # erfc(z) (2^s)
    if scaled:
        q = q * 2.0 ** -T.scale_split
    s = x * _horner(m, x * x, _F32_ERF_SMALL)                       # erf(x), |x| < 0.75
    a = 1.0 - s
    small = _to_odd(m, a, (1.0 - a) - s, False)
    return m.where(z < 0.75, small, m.where(x > 0.0, q, 2.0 - q))


def _gelu_tanh_half(m, x):
    """x / (1 + exp(-v)), v = x (c1 + c2 x^2): x limited below (rounds to -0), -|v| too (for
    large x, x / (1 + t) rounds to x; x = -0: -0 / 2)."""
    T = _consts(x)
    (c1h, _), (c2h, _) = T.gelu_tanh_c
    xc = _at_least(m, x, T.gelu_tanh_range[0])
    v = xc * m.fma(xc * xc, c2h, c1h)
    _, t = _exp_neg_limited(m, -m.abs(v))
    return m.where(v >= 0.0, xc, xc * t) / (t + 1.0)


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
    if _half_result(m, x):
        return _log_specials(m, x, _log_half(m, x))
    a, lo = _log_of(m, x)
    return _log_specials(m, x, a + lo)


def log2(m, x):
    if _half_result(m, x):
        return _log_specials(m, x, _log_half(m, x) * _consts(x).inv_ln2[0])
    a, lo = _log_of(m, x)
    return _log_specials(m, x, _mul_df(m, a, lo, *_consts(x).inv_ln2))


def log10(m, x):
    if _half_result(m, x):
        return _log_specials(m, x, _log_half(m, x) * _consts(x).log10e[0])
    a, lo = _log_of(m, x)
    return _log_specials(m, x, _mul_df(m, a, lo, *_consts(x).log10e))


def _log_half(m, x):
    """log(x) for fp16/bf16 results in plain float32 (~2^-21), x > 0 (the caller's specials
    handle the rest): subnormals pre-scaled, then :func:`_log_parts_half`."""
    T = _consts(x)
    sub = x < T.tiny
    xs = m.where(sub, x * T.tiny_scale, x)
    kf, f, P = _log_parts_half(m, m.where(xs > 0.0, xs, 1.0))
    kf = kf + m.where(sub, _c(m, T.tiny_k, x), 0.0)
    return m.fma(kf, T.ln2_hi_k, m.fma(f, P, kf * T.ln2_lo_k))


def _log1p(m, x):
    uh, ul = _two_sum(_c(m, 1.0, x), x)
    a, lo = _log_core(m, m.where(uh > 0.0, uh, 1.0), ul)
    return _log_specials(m, uh, a + lo)


def _atanh_half(m, x):
    """atanh for fp16/bf16 results in plain float32: log1p(q) / 2 with q = 2|x| / (1 - |x|),
    through log1p's half path; 1 - |x| is exact for fp16 inputs (their last bit is at least
    2^-24) and q is rounded once (2^-24 relative), which moves log1p(q) by at most as much.
    |x| = 1 gives q = inf, so inf; above 1, q < -1: NaN. The sign is x's."""
    ax = m.abs(x)
    return _copysign(m, _log1p_half(m, (ax + ax) / (1.0 - ax)) * 0.5, x)


def atanh(m, x):
    if _half_result(m, x):
        return _atanh_half(m, x)
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
_F64_LN2 = _hex("0x1.62e42fefa39efp-1")
_F64_EXP_D7 = (  # exp(r) = 1 + r + r^2 E(r), |r| <= ln2/2, 2^-34.2: float32 results rounded once
    _hex("0x1.0000003a2c5e2p-1"), _hex("0x1.5555544356615p-3"), _hex("0x1.55548db3b40cap-5"),
    _hex("0x1.1112707ce3ef7p-7"), _hex("0x1.6d8d150ca547fp-10"), _hex("0x1.9f08f55929a8ep-13"),
)
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


def _over_one_plus_exp_f64(m, x, numer, lo=-150.0, v=None):
    """numer(x) / (1 + exp(-v(x))) for float32 x (v(x) = x unless given), in float64 and
    rounded once: ~2^-34 before that rounding (the exp polynomial), so float32 results are
    correctly rounded but for ~0.1% within that of a tie, subnormal ones included; half the
    operations of float32 double-float steps (silu float32 32M on Zen 4: 25.7-29.6 -> 12.1-12.4 ms).
    sigmoid: numer 1; silu: x; quickgelu: x with v = 1.702 x; gelu_tanh: x with v cubic.

    x is limited below to ``lo`` (where every quotient rounds to -0 / 0: silu(-inf) = -0;
    -v(lo) <= 150) and the exponent -v to -20 (above v = 20, every float32 quotient rounds as
    with exp(-20): numer / 1), so 2^n stays normal and no lane overflows; NaN stays NaN.

    The division stays float64: :func:`_recip_f64` instead measured within noise here, and it
    moved 13 (silu) to 227 (sigmoid) of the 2^32 results, mostly away from the correct one."""
    xd = m.cast(_at_least(m, x, lo), "f64")
    p, e = _exp_neg_f64(m, _at_most(m, xd if v is None else v(xd), 20.0))
    return m.cast(numer(xd) / m.fma(p, e, e + 1.0), "f32")   # 1 + 2^n (1 + p)


def _recip_f64(m, d):
    """1 / d for float64 d in float32's range, to ~2^-46: a float32 division and one Newton
    step, cheaper than a float64 division (Zen 4 divides 16 float32 lanes in the time of 8
    float64 ones). Where the float32 results are rounded once from it (tanh, gelu, erf, erfc),
    it moves at most 27 of the 2^32 results (a float64 tie-break), and they were 10-14% faster."""
    r = m.cast(1.0 / m.cast(d, "f32"), "f64")
    return m.fma(r, m.fma(-d, r, 1.0), r)


def _exp_neg_f64(m, w, k=0):
    """(p, e) with exp(-w) 2^k = e (1 + p), e = 2^(n + k), |p| < 0.42, to 2^-34 (float32 results
    rounded once), for float64 w in [-20, 700]: a degree-7 polynomial, ln 2 as one constant
    (n ln2's error < 2^-45 for |n| < 1100)."""
    t = m.fma(w, -_F64_LOG2E, _F64_MAGIC)
    r = m.fma(t - _F64_MAGIC, -_F64_LN2, -w)
    p = m.fma(r * r, _horner(m, r, _F64_EXP_D7), r)          # exp(r) - 1
    bits = (m.bitcast(t, "i64") << 52) + _wrap((1023 + k - _F64_MAGIC_BITS) << 52, 64)
    return p, m.bitcast(bits, "f64")


def _tanh_via_f64(m, x):
    """float32 tanh in float64, rounded once: tanh|x| = -expm1(-w) / (2 + expm1(-w)), w = 2|x|
    (limited to 40: tanh rounds to 1 above 9.01), expm1(-w) = 2^n (1 + p) - 1 with 2^n - 1
    exact (p itself where n = 0, so small |x| keep their relative accuracy); the sign is x's."""
    p, e = _exp_neg_f64(m, m.cast(_at_most(m, m.abs(x) * 2.0, 40.0), "f64"))  # 2|x| exact
    em1 = m.fma(e, p, e - 1.0)                               # in (-1, 0]
    return _copysign(m, m.cast(-em1 * _recip_f64(m, em1 + 2.0), "f32"), x)


_F64_GELU_TANH_C1 = 2.0 * (2.0 / 3.141592653589793) ** 0.5
_F64_GELU_TANH_C2 = 0.044715 * _F64_GELU_TANH_C1


def _erfc_large_f64(m, z):
    """erfc(z) for float64 z >= 0 (clamped to 11; erfc(11) < 2^-180), ~2^-34 relative, with
    x2 = z^2 passed in exactly when the caller has it."""
    return _erfc_scaled_f64(m, z, z * z)


def _erfc_scaled_f64(m, z, z2):
    """erfc(z) = exp(-z^2) v G(v - VC), v = 1/(z + 3): one division; z2 = z^2 (exact when the
    caller has it)."""
    zc = m.where(z > 11.0, m.const(11.0, "f64"), z)
    p, e = _exp_neg_f64(m, m.where(z2 > 121.0, m.const(121.0, "f64"), z2))
    v = _recip_f64(m, zc + 3.0)
    return m.fma(p, e, e) * (v * _horner(m, v - _F64_ERFC_VC, _F64_ERFC_G))


def erf(m, x):
    if _half_result(m, x):
        return _erf_half(m, x)
    if x.dtype == "f32":
        xd = m.cast(x, "f64")
        ax = m.abs(xd)
        small = xd * _horner(m, xd * xd, _F64_ERF_SMALL)
        large = _copysign(m, 1.0 - _erfc_large_f64(m, ax), xd)
        return m.cast(m.where(ax < 0.75, small, large), "f32")
    return _erf_f64(m, x)


def erfc(m, x):
    if _half_result(m, x):
        return _erfc_half(m, x)
    if x.dtype == "f32":
        xd = m.cast(x, "f64")
        ax = m.abs(xd)
        small = 1.0 - xd * _horner(m, xd * xd, _F64_ERF_SMALL)
        q = _erfc_large_f64(m, ax)
        large = m.where(xd > 0.0, q, 2.0 - q)
        return m.cast(m.where(ax < 0.75, small, large), "f32")
    return _erfc_f64(m, x)


# ---------------------------------------------------------------------------- erf family, f64
# erf = x + x P(x^2) for |x| <= 0.75; erfc(z) = exp(-z^2) v G_i(v - VC_i), v = 1/(z + 3), on
# [0.75, 2.05), [2.05, 6.05), [6.05, 27.3]: each G_i well conditioned (terms well below G).
_F64_ERF_P = (  # |x| <= 0.75, 2^-56.2 absolute
    _hex("0x1.06eba8214db69p-3"), _hex("-0x1.812746b0379e7p-2"), _hex("0x1.ce2f21a042be1p-4"),
    _hex("-0x1.b82ce31288b16p-6"), _hex("0x1.565bcd0e69265p-8"), _hex("-0x1.c02db3ffce511p-11"),
    _hex("0x1.f9a326dddb894p-14"), _hex("-0x1.f4d257b12334dp-17"), _hex("0x1.b9e6477da65aap-20"),
    _hex("-0x1.5f6a24d34dfb1p-23"), _hex("0x1.fbb91b5403e71p-27"), _hex("-0x1.48b8bc0258c93p-30"),
    _hex("0x1.3fe95c8b4dc89p-34"),
)
_F64_ERFC_GA = (  # 0.7 <= z <= 2.1, 2^-54.5 with the low parts
    _hex("0x1.8b24b75c90eb2p+0"), _hex("0x1.26fc4a1977ac1p+3"), _hex("0x1.3a7eda42179f8p+5"),
    _hex("0x1.d229dec66d2f0p+6"), _hex("0x1.a622953138428p+7"), _hex("0x1.919ccb17328e3p+6"),
    _hex("-0x1.df45bdbe752a0p+8"), _hex("-0x1.7decea76e326bp+9"), _hex("0x1.3fcfdf86c3ea3p+10"),
    _hex("0x1.8b356ba606832p+11"), _hex("-0x1.506e010f9120dp+12"), _hex("-0x1.69e66392961e6p+13"),
    _hex("0x1.da2d271a7e85dp+14"), _hex("0x1.d3a1484755f20p+14"), _hex("-0x1.4aa65892e92c1p+17"),
    _hex("0x1.2ae65065477cdp+15"),
)
_F64_ERFC_GB = (  # 2 <= z <= 6.1
    _hex("0x1.03c2e1036a5c1p+0"), _hex("0x1.350cc14ac88d6p+2"), _hex("0x1.303ad6f4750bcp+4"),
    _hex("0x1.e0af96d4c4e68p+5"), _hex("0x1.1d3942f659b00p+7"), _hex("0x1.a4737e3417cefp+7"),
    _hex("0x1.2759905d25269p+3"), _hex("-0x1.7740ac2204bccp+9"), _hex("-0x1.251babf5fac77p+10"),
    _hex("0x1.e97334309df1ep+10"), _hex("0x1.d84c3b2b02d65p+12"), _hex("-0x1.420564e5d8375p+12"),
    _hex("-0x1.5b73d46c19cb8p+15"), _hex("0x1.468eeff5e4fc9p+14"), _hex("0x1.0dfe99e166654p+18"),
    _hex("-0x1.6f76e2405ec10p+17"), _hex("-0x1.b7e289dab388dp+20"), _hex("0x1.fc1151038e8eep+20"),
    _hex("0x1.4ea3f8f935e29p+23"),
)
_F64_ERFC_GC = (  # 6 <= z <= 27.3
    _hex("0x1.6efe3bf050e67p-1"), _hex("0x1.51b52648a1a1bp+1"), _hex("0x1.19f5fd479f045p+3"),
    _hex("0x1.a2fc5869a4f74p+4"), _hex("0x1.0c475a1126db3p+6"), _hex("0x1.16245649383c9p+7"),
    _hex("0x1.8a6c4a0f2c1b8p+7"), _hex("0x1.3d82aa04e2a33p+5"), _hex("-0x1.61fce2d0f143bp+9"),
    _hex("-0x1.d85c91934c7d4p+10"), _hex("-0x1.3156061ad49afp+9"), _hex("0x1.2849f7576dbf3p+13"),
    _hex("0x1.615fbaae2a9bep+14"), _hex("-0x1.579d8d9335b62p+14"), _hex("-0x1.881eff6a22522p+17"),
    _hex("-0x1.fb15b6c3bf2e2p+16"), _hex("0x1.4b13fc34626e3p+20"),
)
_F64_ERFC_VCS = (_hex("0x1.dd8a83985a14ep-3"), _hex("0x1.3d53d53d53d54p-3"), _hex("0x1.272574e02d0f8p-4"))
_F64_ERFC_LO = (  # the low parts of c0, c1 (double-double leading coefficients)
    (_hex("-0x1.1c886d520ec69p-54"), _hex("-0x1.6b3438c7aad27p-52")),
    (_hex("0x1.7d562e3d3334fp-54"), _hex("-0x1.6949aeb33d175p-53")),
    (_hex("-0x1.b1406c2dde7a7p-58"), _hex("-0x1.8d6802738addfp-53")),
)


def _erfc_parts_f64(m, z, X, Xe, zl=None):
    """erfc(z) = 2^n (ph + pl) for float64 z >= 0.75 (clamped at 27.3: erfc rounds to 0 beyond),
    X + Xe = z^2 exactly: exp(-z^2) from the exp core, (z + 3) exp(z^2) erfc(z) from the
    polynomial of z's piece in 1/(z + 3) (a double-double reciprocal)."""
    zc = m.where(z > 27.3, m.const(27.3, "f64"), z)
    big = z > 27.3
    X = m.where(big, m.const(27.3 * 27.3, "f64"), X)
    Xe = m.where(big, m.const(0.0, "f64"), Xe)
    t, s, sl = _exp_core(m, -X, -Xe)
    dh, dl = _two_sum(zc, m.const(3.0, "f64"))
    vh = 1.0 / dh
    vl = vh * m.fma(-vh, dl, m.fma(-vh, dh, 1.0))
    a, b = zc < 2.05, zc < 6.05

    def pick(p, q, r):
        return m.where(a, p, m.where(b, q, r))

    def const(v):
        return m.const(v, "f64")
    w = (vh - pick(*map(const, _F64_ERFC_VCS))) + vl           # exact difference, then vl
    tail = pick(*(_horner(m, w, G[1:]) for G in (_F64_ERFC_GA, _F64_ERFC_GB, _F64_ERFC_GC)))
    c0 = pick(*(const(G[0]) for G in (_F64_ERFC_GA, _F64_ERFC_GB, _F64_ERFC_GC)))
    c0l = pick(*(const(lo[0]) for lo in _F64_ERFC_LO))
    c1l = pick(*(const(lo[1]) for lo in _F64_ERFC_LO))
    q, qe = _two_prod(m, w, tail)
    g, ge = _two_sum(c0, q)                                 # G = c0 + w tail: last step exact
    gl = ge + (m.fma(w, c1l, qe) + c0l)
    fh, fe = _two_prod(m, vh, g)
    fl = m.fma(vl, g, m.fma(vh, gl, fe))
    if zl is not None:                                      # F(z + zl) = F + zl (2 z F - 2/sqrt pi)
        fl = m.fma(zl, m.fma(zc * 2.0, fh, -_hex("0x1.20dd750429b6dp+0")), fl)
    ph, pe = _two_prod(m, s, fh)
    return t, ph, pe + m.fma(s, fl, sl * fh)


def _erf_small_f64(m, x):
    """erf(x) = x + x P(x^2) = eh + el for |x| <= 0.75."""
    p = x * _horner(m, x * x, _F64_ERF_P)
    return _fast_two_sum(x, p)


def _erf_f64(m, x):
    ax = m.abs(x)
    X, Xe = _two_prod(m, ax, ax)
    t, ph, pl = _erfc_parts_f64(m, m.where(ax > 6.0, m.const(6.0, "f64"), ax), X, Xe)
    S = _pow2(m, t, 0, x)                                   # n >= -53: normal
    a, ae = _fast_two_sum(m.const(1.0, "f64"), -(ph * S))
    large = _copysign(m, a + (ae - pl * S), x)             # 1 - erfc(|x|)
    eh, el = _erf_small_f64(m, x)
    return m.where(ax < 0.75, eh + el, m.where(ax > 6.0, _copysign(m, m.const(1.0, "f64"), x), large))


def _erfc_f64(m, x):
    ax = m.abs(x)
    X, Xe = _two_prod(m, ax, ax)
    t, ph, pl = _erfc_parts_f64(m, m.where(ax < 0.75, m.const(0.75, "f64"), ax), X, Xe)
    pos = _scale(m, ph + pl, t, ax < 0.0)                   # erfc(|x|), |x| >= 0.75
    S = _pow2(m, t, 0, x)                                   # valid for |x| < 26.6
    a, ae = _fast_two_sum(m.const(2.0, "f64"), -(ph * S))
    neg = m.where(ax > 26.0, m.const(2.0, "f64"), a + (ae - pl * S))   # 2 - erfc(|x|)
    eh, el = _erf_small_f64(m, x)
    b, be = _fast_two_sum(m.const(1.0, "f64"), -eh)
    small = b + (be - el)                                   # 1 - erf(x)
    return m.where(ax < 0.75, small, m.where(x > 0.0, pos, neg))


_F64_SQRT2 = _hex("0x1.6a09e667f3bcdp+0")
_F64_SQRT_HALF = _hex("0x1.6a09e667f3bcdp-1")


def _gelu(m, x):
    """x * Phi(x) = x * erfc(-x / sqrt 2) / 2 (the erf form).

    float32: in float64 (one rounding at the end), Phi(-|x|) = exp(-x^2/2) F(z) / 2 with
    z = |x| / sqrt 2, x^2 exact, exp(-x^2/2) to 2^-39 and the smooth factor F(z) = exp(z^2)
    erfc(z) a polynomial in 1/(z + 3) (2^-34); Phi(x) = 1 - Phi(-x) for x > 0 (no
    cancellation: Phi(-x) <= 1/2). Fewer operations than float32 double-float steps around a
    float64 F (measured 1.3x faster), and subnormal results are rounded once.
    """
    if x.dtype == "f32":
        xc = m.cast(_at_least(m, x, -15.0), "f64")          # gelu rounds to -0 below
        y = _at_most(m, m.abs(xc), 15.0)                    # and to x above 5.5
        p, e = _exp_neg_f64(m, (y * y) * 0.5, -1)           # exp(-x^2/2) / 2 = e (1 + p)
        v = _recip_f64(m, m.fma(y, _F64_SQRT_HALF, 3.0))
        q = m.fma(p, e, e) * (v * _horner(m, v - _F64_ERFC_VC, _F64_ERFC_G))   # Phi(-|x|)
        # |x| < 2^-30: x Phi(x) = x/2 + x^2/sqrt(2 pi) rounds as x/2 + |x| 2^-40 does (x/2
        # may be a float32 tie: the positive tail decides), which q's error would not keep
        q = m.where(y < 2.0 ** -30, m.const(0.5 - 2.0 ** -40, "f64"), q)
        return m.cast(xc * m.where(xc < 0.0, q, 1.0 - q), "f32")   # x = -0: -0 (1 - q)
    return _gelu_f64(m, x)


def _gelu_f64(m, x):
    """float64 gelu: Phi from erf (|x| / sqrt 2 < 0.75) or erfc (exp(-x^2/2) with x^2 exact)."""
    xc = _clamp(m, x, -40.0, 8.3)                           # gelu rounds to -0 / x beyond
    y = m.abs(xc)
    X, Xe = _two_prod(m, y, y)
    z = y * _F64_SQRT_HALF
    zl = m.fma(y, _F64_SQRT_HALF, -z) + y * _hex("-0x1.bdd3413b26456p-55")  # z + zl = |x|/sqrt 2
    t, ph, pl = _erfc_parts_f64(m, m.where(z < 0.75, m.const(0.75, "f64"), z), X * 0.5, Xe * 0.5, zl)
    s2 = _pow2(m, t, 599, x)                                # 2^(n - 1 + 600): normal
    neg = (m.fma(xc, ph, xc * pl) * s2) * 2.0 ** -600       # x Phi(x) = x erfc(|z|) / 2
    s1 = s2 * 2.0 ** -600                                   # x > 0: n >= -50
    a, ae = _fast_two_sum(m.const(1.0, "f64"), -(ph * s1))
    pos = m.fma(xc, a, xc * (ae - pl * s1))                 # x (1 - erfc(z) / 2)
    zs = _copysign(m, z, xc)
    eh, el = _erf_small_f64(m, zs)
    # z = |x| / sqrt 2 rounded: add erf'(z) (z - RN(z)) = 2/sqrt(pi) e^-z^2 zl, e^-z^2 ~ 1 - z^2
    zl = m.fma(xc, _F64_SQRT_HALF, -zs) + xc * _hex("-0x1.bdd3413b26456p-55")
    el = m.fma(zl * _hex("0x1.20dd750429b6dp+0"), m.fma(-zs, zs * m.fma(zs * zs, -0.5, 1.0), 1.0), el)
    b, be = _fast_two_sum(m.const(0.5, "f64"), eh * 0.5)
    small = m.fma(xc, b, xc * m.fma(el, 0.5, be))           # x (1 + erf(x / sqrt 2)) / 2
    g = m.where(z < 0.75, small, m.where(xc < 0.0, neg, pos))
    return m.where(x > 8.3, x, g)


_F32_ERFINV_A = (
    _hex("0x1.805c5ep+0"), _hex("0x1.f91ec6p-3"), _hex("-0x1.11c9f6p-8"), _hex("-0x1.48a6f8p-10"),
    _hex("0x1.ca6b00p-13"), _hex("-0x1.270866p-18"), _hex("-0x1.d94ff8p-19"),
    _hex("0x1.710622p-22"), _hex("0x1.e74e78p-26"),
)  # erfinv(x) = x P_a(w - 2.5), w = -log(1 - x^2) < 5
_F32_ERFINV_B = (
    _hex("0x1.6a9efep+1"), _hex("0x1.006dbcp+0"), _hex("0x1.351f80p-7"), _hex("-0x1.f3f51cp-8"),
    _hex("0x1.7a59e0p-8"), _hex("-0x1.de2c3ap-9"), _hex("0x1.4eb3f0p-10"), _hex("0x1.3994d6p-14"),
    _hex("-0x1.389bfap-13"),
)  # erfinv(x) = x P_b(sqrt(w) - 3), 5 <= w < 17
_F64_SQRT_PI_2 = _hex("0x1.c5bf891b4ef6ap-1")  # sqrt(pi) / 2


def erfinv(m, x):
    """Inverse error function: a float32 initial guess (relative error 2^-23) and one Newton
    step in float64 on erf(y) = x, with the residual from erfc near +-1 (1 - |x| is exact).
    fp16/bf16 results take the guess itself (its log is the half path's: ~2^-22 in all)."""
    if x.dtype == "f32":
        ax = m.abs(x)
        w = -log(m, (1.0 - ax) * (1.0 + ax))
        pa = _horner(m, w - 2.5, _F32_ERFINV_A)
        pb = _horner(m, m.sqrt(m.where(w < 5.0, _c(m, 5.0, x), w)) - 3.0, _F32_ERFINV_B)
        y = ax * m.where(w < 5.0, pa, pb)
        if not _half_result(m, x):
            y0 = m.cast(y, "f64")
            y0 = m.where(y0 < 4.5, y0, m.const(4.5, "f64"))      # erf(4.5) = 1 - 2^-33
            axd = m.cast(ax, "f64")
            small = y0 < 0.75
            r = m.where(small, y0 * _horner(m, y0 * y0, _F64_ERF_SMALL) - axd,
                        (1.0 - axd) - _erfc_large_f64(m, y0))  # erf(y0) - |x|
            y = m.cast(y0 - r * (_exp_f64_lowacc(m, y0 * y0) * _F64_SQRT_PI_2), "f32")
        y = m.where(ax < 1.0, y, m.where(m.eq(ax, 1.0), _c(m, float("inf"), x), float("nan")))
        return _copysign(m, m.where(m.isnan(x), x, y), x)
    return _erfinv_f64(m, x)


_F32_ERFINV_C = (  # erfinv(x) = x P_c(sqrt(w) - 5), 16.5 <= w < 38 (float64 inputs), 2^-26.7
    _hex("0x1.3664dep+2"), _hex("0x1.02a30ep+0"), _hex("-0x1.242816p-13"), _hex("-0x1.c36a28p-13"),
    _hex("0x1.44114ap-14"), _hex("-0x1.4a16c6p-16"), _hex("0x1.0d9b72p-18"), _hex("-0x1.b638c4p-21"),
)


def _erfinv_f64(m, x):
    """float64: the float32 initial guess (plus a branch for |x| closer to 1) and one Halley
    step with the float64 erf/erfc (cubic convergence: 2^-23 -> below 2^-60)."""
    ax = m.abs(x)
    w = -log(m, (1.0 - ax) * (1.0 + ax))
    pa = _horner(m, w - 2.5, _F32_ERFINV_A)
    sw = m.sqrt(m.where(w < 5.0, m.const(5.0, "f64"), w))
    pb = _horner(m, sw - 3.0, _F32_ERFINV_B)
    pc = _horner(m, sw - 5.0, _F32_ERFINV_C)
    y0 = ax * m.where(w < 5.0, pa, m.where(w < 16.5, pb, pc))
    y0 = m.where(y0 < 8.3, y0, m.const(8.3, "f64"))        # erfinv(1 - 2^-53) = 5.9
    X, Xe = _two_prod(m, y0, y0)
    t, ph, pl = _erfc_parts_f64(m, m.where(y0 < 0.75, m.const(0.75, "f64"), y0), X, Xe)
    S = _pow2(m, t, 0, x)
    r_large = ((1.0 - ax) - ph * S) - pl * S                # erf(y0) - |x| = (1 - |x|) - erfc(y0)
    eh, el = _erf_small_f64(m, y0)
    r = m.where(y0 < 0.75, (eh - ax) + el, r_large)
    d = _exp_f64_lowacc(m, -X) * _hex("0x1.20dd750429b6dp+0")   # erf'(y0) = 2/sqrt(pi) e^-y0^2
    y = y0 - r / (d + y0 * r)                               # Halley: erf'' = -2 y erf'
    y = m.where(ax < 1.0, y, m.where(m.eq(ax, 1.0), _c(m, float("inf"), x), float("nan")))
    return _copysign(m, m.where(m.isnan(x), x, y), x)


# ---------------------------------------------------------------------------- the m namespace

# m.<name> looks here first (expr.Math); the rest falls back to the backend's libm.

# ------------------------------------------------------------------------ odd at 0: f(-0) = -0
# log1p, silu and the activations built like x * f(x) have f(+-0) = +-0 (as torch and libm
# give); their double-float arithmetic rounds -0 to +0 (1 + -0, hi + lo), so the sign is
# taken back from x.


def _keep_zero(m, x, y):
    return m.where(m.eq(x, 0.0), x, y)


def log1p(m, x):
    return _keep_zero(m, x, _log1p_half(m, x) if _half_result(m, x) else _log1p(m, x))


# log1p(f) = f P(f), f in [sqrt(1/2) - 1, sqrt(2) - 1]: 2^-22.1 relative (Lawson's weighted least
# squares, float32 coefficients)
_HALF_LOG1P_F = (
    _hex("0x1.fffffep-1"), _hex("-0x1.000074p-1"), _hex("0x1.555b4ap-2"), _hex("-0x1.ff6af6p-3"),
    _hex("0x1.973b16p-3"), _hex("-0x1.608220p-3"), _hex("0x1.4e9742p-3"), _hex("-0x1.a917a6p-4"),
)


def _log1p_half(m, x):
    """log1p for fp16/bf16 results in plain float32 (~2^-21 before the final rounding): u = 1 + x
    = 2^k (1 + f), f in [sqrt(1/2) - 1, sqrt(2) - 1] from the bits, log1p(f) = f P(f), and the
    rounding error c of 1 + x added as c / u ~ c (2 - u) where |x| < 1/2 (above, 1 + x of an
    fp16/bf16 x is exact, or c / u is below 2^-24 of the result); no division."""
    T = _consts(x)
    u = x + 1.0
    small = m.abs(x) < 0.5
    cu = m.where(small, (x - (u - 1.0)) * (2.0 - u), _c(m, 0.0, x))   # (1 + x - u) / u
    kf, f, P = _log_parts_half(m, m.where(u > 0.0, u, 1.0))
    y = m.fma(kf, T.ln2_hi_k, m.fma(f, P, m.fma(kf, T.ln2_lo_k, cu)))
    return _log_specials(m, u, y)


def _log_parts_half(m, u):
    """(k, f, P): log(u) = k ln2 + f P(f) (plain float32, 2^-22.1) for u positive, normal and
    finite: u = 2^k (1 + f), f in [sqrt(1/2) - 1, sqrt(2) - 1], from the bits."""
    T = _consts(u)
    ui = m.bitcast(u, "i32")
    k = (ui - T.sqrt_half_bits) >> T.mant
    f = m.bitcast(ui - (k << T.mant), "f32") - 1.0          # exact (Sterbenz)
    return m.cast(k, "f32"), f, _horner(m, f, _HALF_LOG1P_F)


def silu(m, x):
    if _half_result(m, x):
        return _silu_half(m, x)
    if x.dtype == "f32":
        return _over_one_plus_exp_f64(m, x, lambda xd: xd)
    return _keep_zero(m, x, _silu(m, x))


def _quickgelu_half(m, x):
    """x sigmoid(1.702 x) for fp16/bf16 results in plain float32, as silu's half path on
    v = 1.702 x + vl (vl: the product's rounding error and 1.702's float32 error, carried into
    t = exp(-|v|) as t (1 -+ vl); |v| up to 112 would otherwise move t by up to 2^-17.6).
    x is limited to where |v| reaches exp's limit (-24 for fp16, sig_lo for bf16: below, the
    result rounds to -0; above 24, to x), so that vl stays finite; x itself is the numerator for
    x >= 0 (inf / 1 = inf)."""
    ch = 1.7020000219345093                                # RN(1.702) in float32
    lim = 24.0 if m.result_bits > 8 else -_consts(x).sig_lo
    xc = _clamp(m, x, -lim / 1.702, 24.0)
    v = xc * ch
    vl = m.fma(xc, ch, -v) + xc * (1.702 - ch)
    pos = v >= 0.0
    _, t = _exp_neg_limited(m, -m.abs(v))
    t = m.fma(t, m.where(pos, -vl, vl), t)
    return m.where(pos, x, xc * t) / (t + 1.0)             # x = -0: -0 / 2


def quickgelu(m, x):
    if _half_result(m, x):
        return _quickgelu_half(m, x)
    if x.dtype == "f32":                                   # 1.702 x in float64: 2^-52
        return _over_one_plus_exp_f64(m, x, lambda xd: xd, -88.0, lambda xd: xd * 1.702)  # -150/1.702
    return _keep_zero(m, x, _quickgelu(m, x))


def gelu(m, x):
    if _half_result(m, x):
        return _gelu_half(m, x)
    return _gelu(m, x) if x.dtype == "f32" else _keep_zero(m, x, _gelu(m, x))


def gelu_tanh(m, x):
    if _half_result(m, x):
        return _gelu_tanh_half(m, x)
    if x.dtype == "f32":                                   # v = x (c1 + c2 x^2) to 2^-51
        return _over_one_plus_exp_f64(
            m, x, lambda xd: xd, _consts(x).gelu_tanh_range[0],
            lambda xd: xd * m.fma(xd * xd, _F64_GELU_TANH_C2, _F64_GELU_TANH_C1))
    return _keep_zero(m, x, _gelu_tanh(m, x))


def hardswish(m, x):
    return _keep_zero(m, x, _hardswish(m, x))


FUNCTIONS: dict = {f.__name__: f for f in (
    exp, exp_nonpositive, exp2, expm1, log, log2, log10, log1p, atanh, tanh, sigmoid, silu, swiglu, quickgelu,
    gelu, gelu_tanh, hardswish, reciprocal, softplus, erf, erfc, erfinv)}
