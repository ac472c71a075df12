"""infiniop: tensor operators with one descriptor API on the CPU and on GPUs.

The public API is re-exported here; see README.md for the descriptor contract.
"""

from . import _omp  # noqa: F401 (first: OMP_WAIT_POLICY before anyone imports torch)
from . import ops as _ops
from . import rearrange as _rearrange_package  # noqa: F401 (see below)
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
from .memory import empty_aligned, release_idle_buffers
from .status import InfiniError, Status
from .tensor import TensorDescriptor, create_tensor_descriptor

# ``infiniop.rearrange`` is the function (loaded on first use, below); its package was imported
# above (it is cheap: its names load on first use) and its name is dropped here, so that no
# later import of ``infiniop.rearrange.<module>`` can bind the package over the function
del globals()["rearrange"]

# Every built-in operator: the functional form ``infiniop.<op>(...)`` (the operator object itself)
# and the descriptor API ``infiniop.create_<op>_descriptor(handle, *tensor_descs, **scalars)``.
# All are imported on first use (PEP 562), each from its module: a process pays at import for
# none of them (the 41 elementwise operators took ~4 ms, the row operators' modules ~7 ms, of the
# ~100 ms budget for import + first result), and at its first call for that module only.
_OPERATOR_MODULES = {name: (f"ops.{module}", name.upper()) for name, module in _ops.MODULE_OF.items()}
_ROW_OPERATORS = _ops.ROW_OPERATORS
_OPERATOR_MODULES |= {name: ("rows.ops", name.upper()) for name in _ROW_OPERATORS}
_LAZY = {
    "RowDescriptor": ("rows", "RowDescriptor"), "RowSpec": ("rows", "RowSpec"),
    "row_operator": ("rows", "row_operator"),
    "rearrange": ("rearrange.functional", "rearrange"), "copy_": ("rearrange.functional", "copy_"),
    "create_rearrange_descriptor": ("rearrange.descriptor", "create_rearrange_descriptor"),
    "rope": ("rows.rope", "rope"), "create_rope_descriptor": ("rows.rope", "create_rope_descriptor"),
    **_OPERATOR_MODULES,
    **{f"create_{name}_descriptor": (*where, "create_descriptor")
       for name, where in _OPERATOR_MODULES.items()},
}


def __getattr__(name: str):
    if name == "OPERATORS":
        globals()[name] = value = {spec.name: spec for spec in _ops.ALL}  # imports them all
        return value
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
    return sorted(set(globals()) | set(_LAZY) | {"OPERATORS"})

__all__ = [
    "FLOATS", "INTEGERS", "NUMERIC", "SIGNED", "UNSIGNED", "ElementwiseDescriptor",
    "ElementwiseSpec", "OPERATORS", "elementwise", "empty_aligned", "release_idle_buffers",
    *_OPERATOR_MODULES, *(f"create_{name}_descriptor" for name in _OPERATOR_MODULES),
    "copy_", "create_rearrange_descriptor", "rearrange", "RowDescriptor", "RowSpec", "row_operator",
    "rope", "create_rope_descriptor",
    "DType", "Device", "Handle", "InfiniError", "Status", "TensorDescriptor",
    "bfloat16", "bool_", "create_handle", "create_tensor_descriptor", "float16", "float32",
    "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
]
