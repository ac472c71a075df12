"""The built-in operators. Each is a few lines of data: name, operands, dtypes, expression.

Their modules are imported on first use (PEP 562): ``from infiniop.ops import SUB`` imports
``arithmetic`` only; ``ALL`` imports every module. ``MODULES`` says which module defines which
operator (as ``NAME.upper()``), without importing any.
"""

from __future__ import annotations

import importlib

MODULES = {
    "arithmetic": ("add", "sub", "mul", "div", "addcmul"),
    "clip": ("clip",),
    "extrema": ("maximum", "minimum"),
    "unary": ("abs", "neg", "relu"),
    "where": ("where",),
    "comparison": ("equal",),
    "activation": ("swiglu", "silu", "gelu", "gelutanh", "quickgelu", "sigmoid", "hardswish",
                   "hardtanh", "softplus", "silu_and_mul"),
    "mathfn": ("tanh", "reciprocal", "log10", "log1p", "atanh", "erf", "erfc", "erfinv"),
    "fill": ("ones", "zeros"),
    "blas": ("axpy", "scal", "rot", "rotm", "swap", "blas_copy"),
    "gating": ("fused_gated_delta_net_gating",),
    "quant": ("per_tensor_dequant_int8",),
}
MODULE_OF = {name: module for module, names in MODULES.items() for name in names}
# the built-in row operators (``infiniop.rows.ops``; rope is a descriptor of its own)
ROW_OPERATORS = ("rms_norm", "add_rms_norm", "layer_norm", "softmax", "causal_softmax",
                 "logsoftmax")


def _operator(name: str):
    return getattr(importlib.import_module(f".{MODULE_OF[name]}", __name__), name.upper())


def __getattr__(name: str):
    if name == "ALL":
        value = [_operator(op) for op in MODULE_OF]
    elif name.lower() in MODULE_OF and name.isupper():
        value = _operator(name.lower())
    else:
        raise AttributeError(f"module 'infiniop.ops' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"ALL"} | {name.upper() for name in MODULE_OF})
