"""Row operators: reductions along one axis with elementwise prologue/epilogue (spec.py),
planned once (plan.py), run by a backend kernel through one descriptor class (descriptor.py)
or the functional front end (functional.py)."""

from .descriptor import RowDescriptor
from .operator import row_operator
from .spec import LANES, RowOperand, RowSpec

__all__ = ["LANES", "RowDescriptor", "RowOperand", "RowSpec", "row_operator"]
