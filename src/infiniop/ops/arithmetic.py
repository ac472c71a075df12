"""add, sub, mul (every numeric dtype; integers wrap like NumPy) and div (floats)."""

from ..elementwise.operator import elementwise
from ..elementwise.spec import FLOATS, NUMERIC, Param

ADD = elementwise("add", ("a", "b"), NUMERIC, lambda m, a, b: a + b, doc="c = a + b")
SUB = elementwise("sub", ("a", "b"), NUMERIC, lambda m, a, b: a - b, doc="c = a - b")
MUL = elementwise("mul", ("a", "b"), NUMERIC, lambda m, a, b: a * b, doc="c = a * b")
DIV = elementwise("div", ("a", "b"), FLOATS, lambda m, a, b: a / b, doc="c = a / b (IEEE)")
ADDCMUL = elementwise("addcmul", ("input", "tensor1", "tensor2"), FLOATS,
                     lambda m, x, t1, t2, value: x + value * t1 * t2, outputs=("out",),
                     params=(Param("value", "f32", 1.0),),
                     doc="out = input + (value * tensor1) * tensor2 (torch's order)")
