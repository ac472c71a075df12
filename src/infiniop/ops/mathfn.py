"""Unary math operators (output, input), from mathlib.py's functions."""

from ..elementwise.operator import elementwise
from ..elementwise.spec import FLOATS


def _unary(name: str, fn, out="y", inp="x", doc=""):
    return elementwise(name, (inp,), FLOATS, fn, outputs=(out,), doc=doc)


TANH = _unary("tanh", lambda m, x: m.tanh(x), "output", "input")
LOG10 = _unary("log10", lambda m, x: m.log10(x))
LOG1P = _unary("log1p", lambda m, x: m.log1p(x))
ATANH = _unary("atanh", lambda m, a: m.atanh(a), "y", "a")
ERF = _unary("erf", lambda m, x: m.erf(x))
ERFC = _unary("erfc", lambda m, x: m.erfc(x))
ERFINV = _unary("erfinv", lambda m, x: m.erfinv(x))
RECIPROCAL = _unary("reciprocal", lambda m, x: 1.0 / x, doc="y = 1 / x (IEEE)")
