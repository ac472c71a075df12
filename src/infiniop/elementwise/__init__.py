"""The elementwise framework: an operator is data (spec.py), planned once (plan.py), run by a
backend kernel through one descriptor class (descriptor.py) or the functional front end."""

from .descriptor import ElementwiseDescriptor
from .expr import Expr
from .operator import elementwise
from .plan import ElementwiseInfo
from .spec import FLOATS, INTEGERS, NUMERIC, SIGNED, UNSIGNED, ElementwiseSpec

__all__ = ["ElementwiseDescriptor", "ElementwiseInfo", "ElementwiseSpec", "Expr", "FLOATS",
           "INTEGERS", "NUMERIC", "SIGNED", "UNSIGNED", "elementwise"]
