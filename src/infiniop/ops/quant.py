"""per_tensor_dequant_int8: x = (x_packed - x_zero) * x_scale, in float32, rounded once to x's
dtype; x_scale (and the optional x_zero, absent for symmetric quantisation) are float32 tensors
of one element."""

from ..elementwise.operator import elementwise
from ..elementwise.spec import Operand


def _dequant(m, x_packed, x_scale, x_zero):
    q = m.cast(x_packed, "f32")
    if x_zero is not None:
        q = q - x_zero
    return q * x_scale


PER_TENSOR_DEQUANT_INT8 = elementwise(
    "per_tensor_dequant_int8", dtypes=(), expr=_dequant,
    operands=(Operand("x", "out"), Operand("x_packed"), Operand("x_scale"),
              Operand("x_zero", optional=True)),
    signatures="i8, f32, f32 -> f16 | bf16 | f32",
    doc="x = (x_packed - x_zero) * x_scale (x_zero may be None)")
