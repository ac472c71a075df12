"""The built-in operators. Each is a few lines of data: name, inputs, dtypes, expression."""

from .arithmetic import ADD, DIV, MUL, SUB
from .clip import CLIP
from .extrema import MAXIMUM, MINIMUM
from .unary import ABS, NEG, RELU
from .where import WHERE

ALL = [ADD, SUB, MUL, DIV, CLIP, MAXIMUM, MINIMUM, ABS, NEG, RELU, WHERE]
