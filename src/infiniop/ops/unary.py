"""neg, abs, relu (relu keeps NaN: maximum(x, 0) propagates it)."""

from ..elementwise.operator import elementwise
from ..elementwise.spec import FLOATS, NUMERIC, SIGNED

NEG = elementwise("neg", ("x",), NUMERIC, lambda m, x: -x)
ABS = elementwise("abs", ("x",), FLOATS | SIGNED, lambda m, x: m.abs(x))
RELU = elementwise("relu", ("x",), FLOATS | SIGNED, lambda m, x: m.maximum(x, 0))
