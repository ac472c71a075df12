"""where(cond, a, b): a where cond is true, else b; cond is a bool tensor."""

from ..dtype import DType
from ..elementwise.operator import elementwise
from ..elementwise.spec import NUMERIC

WHERE = elementwise("where", ("cond", "a", "b"), NUMERIC, lambda m, c, a, b: m.where(c, a, b),
                    input_dtypes={0: DType.BOOL})
