"""rearrange: strided copies between any two layouts, and an einops-style front end.

- ``create_rearrange_descriptor(handle, dst_desc, src_desc)``: the descriptor API.
- ``rearrange(x, pattern, **axis_sizes)``: einops semantics, returns a new array.
- ``copy_(dst, src)``: ``dst[...] = src`` for arrays/tensors (``src`` broadcasts to ``dst``).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..dask_arrays import copy_ as copy_dask
from ..dask_arrays import is_dask
from ..interop import inspect_buffer
from ..layout import broadcast_strides
from ..status import InfiniError, Status
from ..tensor import TensorDescriptor
from . import descriptor as _descriptor
from .descriptor import RearrangeDescriptor, create_rearrange_descriptor
from .meta import RearrangeMeta, plan
from .pattern import parse, rearrange

__all__ = ["RearrangeDescriptor", "RearrangeMeta", "copy_", "create_rearrange_descriptor",
           "parse", "plan", "rearrange"]

_HANDLE = None
_COPIES: OrderedDict = OrderedDict()
_CACHE_SIZE = 256


def _descriptor_for(dst_desc: TensorDescriptor, src_desc: TensorDescriptor) -> RearrangeDescriptor:
    global _HANDLE
    if _HANDLE is None:
        from ..handle import create_handle

        _HANDLE = create_handle("cpu")
    return RearrangeDescriptor(_HANDLE, dst_desc, src_desc)


def copy_(dst, src):
    """``dst[...] = src`` through the rearrange kernel; ``src`` broadcasts to ``dst``'s shape
    (NumPy rules). Same dtype required (BAD_TENSOR_DTYPE). Returns ``dst``.

    >>> import numpy as np, infiniop
    >>> a = np.zeros((2, 3), np.float32)
    >>> infiniop.copy_(a, np.arange(3, dtype=np.float32))[1].tolist()
    [0.0, 1.0, 2.0]
    """
    if type(dst) is np.ndarray and type(src) is np.ndarray:  # fast path: no interop objects
        desc = _COPIES.get((dst.dtype, dst.shape, dst.strides, src.dtype, src.shape, src.strides))
        if desc is not None:
            # a broadcast src is not laid out as its descriptor (that has dst's shape): its
            # layout is the cache key's, so its memory holds what the descriptor reaches
            desc.calculate(dst, src if src.shape == dst.shape
                           else _descriptor._address_of(src.dtype, src.ndim)(src))
            return dst
    if is_dask(dst) or is_dask(src):  # dask_arrays.py
        return copy_dask(dst, src)
    for obj, name in ((dst, "dst"), (src, "src")):
        if obj is None:
            raise InfiniError(Status.NULL_POINTER, f"operand '{name}': array is None")
    d = inspect_buffer(dst, "dst")
    s = inspect_buffer(src, "src")
    if d.trusted or s.trusted:
        raise InfiniError(Status.BAD_PARAM, "copy_ needs arrays or tensors; for raw addresses use "
                                            "create_rearrange_descriptor")
    if d.device != "cpu" or s.device != "cpu":
        raise InfiniError(Status.BAD_PARAM, f"copy_ runs on the cpu; got {d.device} and {s.device}")
    if d.dtype is not s.dtype:
        raise InfiniError(Status.BAD_TENSOR_DTYPE,
                          f"operand 'src' is {s.dtype} but 'dst' is {d.dtype}; copy_ does not convert")
    dst_desc = TensorDescriptor(d.dtype, d.shape, d.strides)
    bstrides = broadcast_strides(TensorDescriptor(s.dtype, s.shape, s.strides), d.shape, "src")
    desc = _descriptor_for(dst_desc, TensorDescriptor(s.dtype, d.shape, bstrides))
    if type(dst) is np.ndarray and type(src) is np.ndarray:
        _COPIES[(dst.dtype, dst.shape, dst.strides, src.dtype, src.shape, src.strides)] = desc
        if len(_COPIES) > _CACHE_SIZE:
            _COPIES.popitem(last=False)
    if d.readonly:
        raise InfiniError(Status.BAD_PARAM, "operand 'dst': output buffer is read-only")
    desc.calculate(d.address, s.address)  # buffers checked: they are the descriptors' own
    return dst
