"""equal: c = (a == b) as bool, for every numeric dtype (IEEE: NaN is not equal to itself)."""

from ..dtype import DType
from ..elementwise.operator import elementwise
from ..elementwise.spec import NUMERIC

EQUAL = elementwise("equal", ("a", "b"), NUMERIC | {DType.BOOL}, lambda m, a, b: m.eq(a, b),
                    outputs=("c",), signatures="T, T -> bool", doc="c = (a == b)")
