"""The built-in operators. Each is a few lines of data: name, operands, dtypes, expression."""

from .activation import (
                         GELU,
                         GELUTANH,
                         HARDSWISH,
                         HARDTANH,
                         QUICKGELU,
                         SIGMOID,
                         SILU,
                         SILU_AND_MUL,
                         SOFTPLUS,
                         SWIGLU,
)
from .arithmetic import ADD, ADDCMUL, DIV, MUL, SUB
from .blas import AXPY, BLAS_COPY, ROT, ROTM, SCAL, SWAP
from .clip import CLIP
from .comparison import EQUAL
from .extrema import MAXIMUM, MINIMUM
from .fill import ONES, ZEROS
from .gating import FUSED_GATED_DELTA_NET_GATING
from .mathfn import ATANH, ERF, ERFC, ERFINV, LOG1P, LOG10, RECIPROCAL, TANH
from .quant import PER_TENSOR_DEQUANT_INT8
from .unary import ABS, NEG, RELU
from .where import WHERE

ALL = [ADD, SUB, MUL, DIV, CLIP, MAXIMUM, MINIMUM, ABS, NEG, RELU, WHERE,
       EQUAL, SWIGLU, ADDCMUL, SILU, GELU, GELUTANH, QUICKGELU, SIGMOID, TANH, HARDSWISH,
       HARDTANH, SOFTPLUS, RECIPROCAL, LOG10, LOG1P, ATANH, ERF, ERFC, ERFINV, ONES, ZEROS,
       SILU_AND_MUL, AXPY, SCAL, ROT, ROTM, SWAP, BLAS_COPY, FUSED_GATED_DELTA_NET_GATING,
       PER_TENSOR_DEQUANT_INT8]
