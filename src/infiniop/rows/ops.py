"""The built-in row operators, each a few lines of data (InfiniCore's argument order)."""

from __future__ import annotations

from ..elementwise import mathlib
from ..elementwise.spec import FLOATS, Param
from .operator import row_operator

_HALF_OR_SINGLE_W = [f"{t}, f16|bf16|f32 -> {t}" for t in ("f16", "bf16", "f32")]


def _non_negative(v):
    """epsilon/eps: NaN made every row NaN and a negative value the rows whose mean square (or
    variance) is below it; neither is ever meant (inf is accepted: zero rows)."""
    return "must be >= 0 (and not NaN)" if not v >= 0 else None


def _eps(name):
    return [Param(name, "f32", 1e-5, _non_negative)]


def _rms(m, x, w, epsilon):
    return x * (1 / m.sqrt(m.mean(x * x) + epsilon)) * w


RMS_NORM = row_operator(
    "rms_norm", "y:out, x, w:col", _rms,
    signatures=_HALF_OR_SINGLE_W + ["f64, f64 -> f64"], params=_eps("epsilon"),
    # a finite sum of squares bounds every x, and |x r| <= sqrt(n): x r w is finite or inf
    nan_free_if_finite=True, doc="y = x / sqrt(mean(x^2) + epsilon) * w along the last axis")


def _add_rms(m, a, b, weight, epsilon):
    s = a + b
    return _rms(m, s, weight, epsilon), s


ADD_RMS_NORM = row_operator(
    "add_rms_norm", "y:out, residual_out:out, a, b, weight:col", _add_rms,
    signatures=[f"{t}, {t}, f16|bf16|f32 -> {t}, {t}" for t in ("f16", "bf16", "f32")]
    + ["f64, f64, f64 -> f64, f64"], params=_eps("epsilon"),
    nan_free_if_finite=True, doc="residual_out = a + b; y = rms_norm(a + b) (of the float32 sum)")


def _layer_norm(m, x, w, b, eps):
    d = x - m.mean(x)
    std = m.sqrt(m.mean(d * d) + eps)
    z = d * (1 / std)  # one division per row, as torch and InfiniCore compute it
    y = z * w if b is None else z * w + b
    return y, z, std


LAYER_NORM = row_operator(
    "layer_norm", "output:out, input_standardization:out, input_std_deviation:out:stat, input, "
    "weight:col, bias?:col", _layer_norm, dtypes=FLOATS, params=_eps("eps"),
    # a finite sum of d^2 bounds every d, 1/std finite: z w + b is finite or inf
    nan_free_if_finite=True,
    doc="z = (x - mean) * (1 / sqrt(var + eps)) (biased variance); output = z * weight + bias")


def _softmax(m, x):
    # x - max <= 0: the plain exp of that range (within 1 ulp, half the work of m.exp), times a
    # power of two that cancels in the quotient (no subnormal terms: one multiply fewer)
    e = mathlib.exp_nonpositive_scaled(m, x - m.max(x))
    return e * (1 / m.sum(e))  # one division per row (as torch does), not one per element


# a finite max: x - max in [-inf, 0], the terms in [0, 2^k], the sum finite
SOFTMAX = row_operator("softmax", "y:out, x", _softmax, dtypes=FLOATS, axis="axis",
                       nan_free_if_finite=True,
                       doc="y = exp(x - max) * (1 / sum(exp(x - max))) along any axis")
CAUSAL_SOFTMAX = row_operator(
    "causal_softmax", "y:out, x", _softmax, dtypes=FLOATS, causal=True, nan_free_if_finite=True,
    doc="softmax over the last axis keeping columns j <= i + n - r (bottom-right aligned); "
        "the others are 0")


def _logsoftmax(m, x):
    # the terms scaled as softmax's; the sum scaled back once a row (exactly: it is >= 2^k)
    d = x - m.max(x)
    s = m.sum(mathlib.exp_nonpositive_scaled(m, d))
    return d - m.log(s * 2.0 ** -mathlib.nonpositive_scale(m, d))


LOGSOFTMAX = row_operator("logsoftmax", "output:out, input", _logsoftmax, dtypes=FLOATS,
                          signatures=["T -> T", "f16|bf16 -> f32"], axis="dim",
                          nan_free_if_finite=True,
                          doc="log(softmax(x)) = (x - max) - log(sum(exp(x - max)))")

ALL = [RMS_NORM, ADD_RMS_NORM, LAYER_NORM, SOFTMAX, CAUSAL_SOFTMAX, LOGSOFTMAX]
