"""ones, zeros: y filled with 1 / 0; x gives only the shape and dtype (it is not read)."""

from ..dtype import DType
from ..elementwise.operator import elementwise
from ..elementwise.spec import NUMERIC

_ALL = NUMERIC | {DType.BOOL, DType.BYTE}
ONES = elementwise("ones", ("x",), _ALL, lambda m, x: 1, outputs=("y",), doc="y = 1")
ZEROS = elementwise("zeros", ("x",), _ALL, lambda m, x: 0, outputs=("y",), doc="y = 0")
