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
from .status import InfiniError, Status
from .tensor import TensorDescriptor, create_tensor_descriptor

# Every built-in operator: the functional form ``infiniop.<op>(...)`` (the operator object itself)
# and the descriptor API ``infiniop.create_<op>_descriptor(handle, *tensor_descs, **scalars)``.
OPERATORS = {spec.name: spec for spec in _OPERATORS}
for _spec in _OPERATORS:
    globals()[_spec.name] = _spec
    globals()[f"create_{_spec.name}_descriptor"] = _spec.create_descriptor
del _spec

# Row operators (InfiniCore's argument order; scalars after the tensors or as keywords) and
# rope are imported on first use (PEP 562): a process that calls only elementwise operators
# does not pay for their modules at import (~7 ms of the ~100 ms budget for import + first
# result).
_ROW_OPERATORS = ("rms_norm", "add_rms_norm", "layer_norm", "softmax", "causal_softmax",
                  "logsoftmax")
_LAZY = {
    "RowDescriptor": ("rows", "RowDescriptor"), "RowSpec": ("rows", "RowSpec"),
    "row_operator": ("rows", "row_operator"),
    "rope": ("rows.rope", "rope"), "create_rope_descriptor": ("rows.rope", "create_rope_descriptor"),
    **{name: ("rows.ops", name.upper()) for name in _ROW_OPERATORS},
    **{f"create_{name}_descriptor": ("rows.ops", name.upper(), "create_descriptor")
       for name in _ROW_OPERATORS},
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'infiniop' has no attribute {name!r}")
    import importlib

    module, attr, *method = _LAZY[name]
    value = getattr(importlib.import_module(f".{module}", __name__), attr)
    if method:
        value = getattr(value, method[0])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

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
