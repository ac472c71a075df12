"""infiniop: tensor operators with one descriptor API on the CPU and on GPUs.

The public API is re-exported here; see README.md for the descriptor contract.
"""

from ._version import __version__ as __version__
from .device import Device, Handle, create_handle
from .dtype import (
    DType,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .elementwise import (
    FLOATS,
    INTEGERS,
    NUMERIC,
    SIGNED,
    UNSIGNED,
    ElementwiseDescriptor,
    ElementwiseSpec,
    elementwise,
)
from .memory import empty_aligned
from .ops import ABS, ADD, CLIP, DIV, MAXIMUM, MINIMUM, MUL, NEG, RELU, SUB, WHERE
from .rearrange import copy_, create_rearrange_descriptor, rearrange
from .status import InfiniError, Status
from .tensor import TensorDescriptor, create_tensor_descriptor

# Functional front end: infiniop.sub(a, b, out=None) ... (see elementwise/functional.py).
add, sub, mul, div, clip = ADD, SUB, MUL, DIV, CLIP
maximum, minimum, neg, abs, relu, where = MAXIMUM, MINIMUM, NEG, ABS, RELU, WHERE

# Descriptor API: create_<op>_descriptor(handle, out_desc, *in_descs).
create_add_descriptor = ADD.create_descriptor
create_sub_descriptor = SUB.create_descriptor
create_mul_descriptor = MUL.create_descriptor
create_div_descriptor = DIV.create_descriptor
create_clip_descriptor = CLIP.create_descriptor
create_maximum_descriptor = MAXIMUM.create_descriptor
create_minimum_descriptor = MINIMUM.create_descriptor
create_neg_descriptor = NEG.create_descriptor
create_abs_descriptor = ABS.create_descriptor
create_relu_descriptor = RELU.create_descriptor
create_where_descriptor = WHERE.create_descriptor

__all__ = [
    "FLOATS", "INTEGERS", "NUMERIC", "SIGNED", "UNSIGNED", "ElementwiseDescriptor",
    "ElementwiseSpec", "elementwise", "empty_aligned",
    "add", "sub", "mul", "div", "clip", "maximum", "minimum", "neg", "abs", "relu", "where",
    "create_add_descriptor", "create_sub_descriptor", "create_mul_descriptor",
    "create_div_descriptor", "create_clip_descriptor", "create_maximum_descriptor",
    "create_minimum_descriptor", "create_neg_descriptor", "create_abs_descriptor",
    "create_relu_descriptor", "create_where_descriptor",
    "copy_", "create_rearrange_descriptor", "rearrange",
    "DType", "Device", "Handle", "InfiniError", "Status", "TensorDescriptor",
    "bfloat16", "bool_", "create_handle", "create_tensor_descriptor", "float16", "float32",
    "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
]
