"""Activation functions (InfiniCore's argument order: output first, then the input; scalars fixed
at create are keyword parameters named as in its C headers). fp16/bf16 are computed in float32
and rounded once; the math functions come from mathlib.py."""

from ..elementwise.operator import elementwise
from ..elementwise.spec import FLOATS, Operand, Param, split_last

SIGMOID = elementwise("sigmoid", ("x",), FLOATS, lambda m, x: m.sigmoid(x), outputs=("y",),
                      doc="y = 1 / (1 + exp(-x))")
SILU = elementwise("silu", ("input",), FLOATS, lambda m, x: m.silu(x),
                   outputs=("output",), doc="output = input * sigmoid(input)")
GELU = elementwise("gelu", ("input",), FLOATS, lambda m, x: m.gelu(x),
                   outputs=("output",), doc="output = x * 0.5 * (1 + erf(x / sqrt(2)))")
GELUTANH = elementwise(
    "gelutanh", ("x",), FLOATS, lambda m, x: m.gelu_tanh(x),
    outputs=("y",), doc="y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))")
QUICKGELU = elementwise("quickgelu", ("x",), FLOATS, lambda m, x: m.quickgelu(x),
                        outputs=("y",), doc="y = x * sigmoid(1.702 x)")
HARDSWISH = elementwise("hardswish", ("input",), FLOATS, lambda m, x: m.hardswish(x),
                        outputs=("output",), doc="output = x * min(max(x + 3, 0), 6) / 6")


def _not_nan(v):
    return "must not be NaN" if v != v else None


HARDTANH = elementwise(
    "hardtanh", ("input",), FLOATS,
    lambda m, x, min_val, max_val: m.minimum(m.maximum(x, min_val), max_val),
    outputs=("output",),
    params=(Param("min_val", "f32", -1.0, _not_nan), Param("max_val", "f32", 1.0, _not_nan)),
    validate=lambda p: "min_val must not exceed max_val" if p["min_val"] > p["max_val"] else None,
    doc="output = min(max(input, min_val), max_val); min_val <= max_val")


def _beta_in_range(v):
    """softplus's beta: finite, |beta| >= 2^-10. Below it, exp(beta x) leaves the range the
    kernels evaluate it in (float32 exp(-112), float64 exp(-760)) while exp(beta x) / beta is
    still representable: such results were 2-10^5 ulp off (beta = 7e-5: 2 ulp in float32,
    beta = 1e-12: 2e5 ulp of a float64 subnormal) or NaN (1 / beta overflowing float32)."""
    if not (v == v and abs(v) != float("inf") and abs(v) >= 2.0 ** -10):
        return "must be finite with |beta| >= 2^-10 (0.0009765625)"
    return None


SOFTPLUS = elementwise(
    "softplus", ("x",), FLOATS, lambda m, x, beta, threshold: m.softplus(x, beta, threshold),
    outputs=("y",),
    params=(Param("beta", "f32", 1.0, _beta_in_range),
            Param("threshold", "f32", 20.0, _not_nan)),
    doc="y = x if beta*x > threshold else log1p(exp(beta*x)) / beta")
SWIGLU = elementwise("swiglu", ("a", "b"), FLOATS, lambda m, a, b: m.swiglu(a, b),
                     outputs=("c",), doc="c = a * silu(b)")
SILU_AND_MUL = elementwise(
    "silu_and_mul", dtypes=FLOATS, expr=lambda m, gate, up: m.swiglu(up, gate),
    operands=(Operand("output", "out"), Operand("input", views=(split_last, 2))),
    doc="output = silu(input[..., :d]) * input[..., d:]; input is [..., 2d]")
