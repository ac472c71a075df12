"""infiniop: tensor operators with one descriptor API on the CPU and on GPUs.

The public API is re-exported here; see README.md for the descriptor contract.
"""

from ._version import __version__ as __version__
from .device import Device, Handle
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
from .handle import create_handle
from .memory import empty_aligned
from .ops import ALL as _OPERATORS
from .rearrange import copy_, create_rearrange_descriptor, rearrange
from .rows import RowDescriptor, RowSpec, row_operator
from .rows.ops import ADD_RMS_NORM, CAUSAL_SOFTMAX, LAYER_NORM, LOGSOFTMAX, RMS_NORM, SOFTMAX
from .rows.rope import create_rope_descriptor, rope
from .status import InfiniError, Status
from .tensor import TensorDescriptor, create_tensor_descriptor

# Every built-in operator: the functional form ``infiniop.<op>(...)`` (the operator object itself)
# and the descriptor API ``infiniop.create_<op>_descriptor(handle, *tensor_descs, **scalars)``.
OPERATORS = {spec.name: spec for spec in _OPERATORS}
for _spec in _OPERATORS:
    globals()[_spec.name] = _spec
    globals()[f"create_{_spec.name}_descriptor"] = _spec.create_descriptor
del _spec

# Row operators (InfiniCore's argument order; scalars after the tensors or as keywords).
rms_norm, add_rms_norm, layer_norm = RMS_NORM, ADD_RMS_NORM, LAYER_NORM
softmax, causal_softmax, logsoftmax = SOFTMAX, CAUSAL_SOFTMAX, LOGSOFTMAX
create_rms_norm_descriptor = RMS_NORM.create_descriptor
create_add_rms_norm_descriptor = ADD_RMS_NORM.create_descriptor
create_layer_norm_descriptor = LAYER_NORM.create_descriptor
create_softmax_descriptor = SOFTMAX.create_descriptor
create_causal_softmax_descriptor = CAUSAL_SOFTMAX.create_descriptor
create_logsoftmax_descriptor = LOGSOFTMAX.create_descriptor

__all__ = [
    "FLOATS", "INTEGERS", "NUMERIC", "SIGNED", "UNSIGNED", "ElementwiseDescriptor",
    "ElementwiseSpec", "OPERATORS", "elementwise", "empty_aligned",
    *OPERATORS, *(f"create_{name}_descriptor" for name in OPERATORS),
    "copy_", "create_rearrange_descriptor", "rearrange",
    "RowDescriptor", "RowSpec", "row_operator", "rms_norm", "add_rms_norm", "layer_norm",
    "softmax", "causal_softmax", "logsoftmax", "create_rms_norm_descriptor",
    "create_add_rms_norm_descriptor", "create_layer_norm_descriptor", "create_softmax_descriptor",
    "create_causal_softmax_descriptor", "create_logsoftmax_descriptor", "rope",
    "create_rope_descriptor",
    "DType", "Device", "Handle", "InfiniError", "Status", "TensorDescriptor",
    "bfloat16", "bool_", "create_handle", "create_tensor_descriptor", "float16", "float32",
    "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
]
