"""maximum, minimum: NumPy's NaN-propagating elementwise extrema."""

from ..elementwise.operator import elementwise
from ..elementwise.spec import NUMERIC

MAXIMUM = elementwise("maximum", ("a", "b"), NUMERIC, lambda m, a, b: m.maximum(a, b))
MINIMUM = elementwise("minimum", ("a", "b"), NUMERIC, lambda m, a, b: m.minimum(a, b))
