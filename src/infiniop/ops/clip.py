"""clip(x, min, max) = minimum(maximum(x, min), max): NaN propagates, min > max gives max."""

from ..elementwise.operator import elementwise
from ..elementwise.spec import NUMERIC

CLIP = elementwise("clip", ("x", "min", "max"), NUMERIC,
                   lambda m, x, lo, hi: m.minimum(m.maximum(x, lo), hi),
                   doc="y = minimum(maximum(x, min), max)")
