"""add, sub, mul (every numeric dtype; integers wrap like NumPy) and div (floats)."""

from ..elementwise.spec import FLOATS, NUMERIC, elementwise

ADD = elementwise("add", ("a", "b"), NUMERIC, lambda m, a, b: a + b, doc="c = a + b")
SUB = elementwise("sub", ("a", "b"), NUMERIC, lambda m, a, b: a - b, doc="c = a - b")
MUL = elementwise("mul", ("a", "b"), NUMERIC, lambda m, a, b: a * b, doc="c = a * b")
DIV = elementwise("div", ("a", "b"), FLOATS, lambda m, a, b: a / b, doc="c = a / b (IEEE)")
