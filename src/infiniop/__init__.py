"""infiniop: tensor operators with one descriptor API on the CPU and on GPUs.

The public API is re-exported here; see README.md for the descriptor contract.
"""

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
from .status import InfiniError, Status
from .tensor import TensorDescriptor, create_tensor_descriptor

__version__ = "0.1.0"

__all__ = [
    "DType", "Device", "Handle", "InfiniError", "Status", "TensorDescriptor",
    "bfloat16", "bool_", "create_handle", "create_tensor_descriptor", "float16", "float32",
    "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
]
