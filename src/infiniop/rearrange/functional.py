"""The front end of rearrange: ``copy_(dst, src)`` and einops-style ``rearrange(x, pattern)``,
each caching its descriptor per layout, so a repeated call is a look-up and a kernel launch."""

from __future__ import annotations

from collections import OrderedDict
from math import prod

import numpy as np

from ..dask_arrays import computed_source, is_dask
from ..dask_arrays import rearrange as rearrange_dask
from ..interop import inspect_buffer
from ..layout import broadcast_strides
from ..memory import RECYCLE_MIN, empty_aligned, torch_empty
from ..status import InfiniError, Status
from ..tensor import TensorDescriptor, contiguous_strides
from . import descriptor as _descriptor
from .descriptor import RearrangeDescriptor
from .pattern import _axis_size, _plan_shapes, parse

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
            # (src itself stays referenced until the copy is done: an address is not a reference)
            at = src
            if src.shape != dst.shape:
                view = src if desc._uview is None else src.view(desc._uview)  # Numba cannot
                at = _descriptor._address_of(view.dtype, view.ndim)(view)     # type fp16/bf16
            desc.calculate(dst, at)
            return dst
    if is_dask(dst) or is_dask(src):  # dask_arrays.py: checked, then computed into NumPy
        return copy_(dst, computed_source(dst, src))
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
    if desc._run is None:  # empty: nothing to copy (an empty torch tensor's address is 0)
        return dst
    desc.calculate(d.address, s.address)  # buffers checked: they are the descriptors' own
    return dst


# rearrange's plans (a rearrange descriptor and the output shape) per pattern and input layout,
# so a repeated call costs a dictionary look-up and the kernel launch
_PLANS: OrderedDict = OrderedDict()
_PLAN_CACHE_SIZE = 256


def _new_like(x, shape, dtype):
    if type(x).__module__.startswith("torch"):
        return torch_empty(shape, x.dtype)
    return _allocator(shape, dtype.numpy)(shape, dtype=dtype.numpy)


def _allocator(shape, dtype):
    """np.empty, or for outputs empty_aligned recycles, empty_aligned (decided with the plan)."""
    return empty_aligned if prod(shape) * np.dtype(dtype).itemsize >= RECYCLE_MIN else np.empty


def rearrange(x, pattern: str, **axis_sizes):
    """Reorder the axes of ``x`` as ``pattern`` says; returns a new C-contiguous array.

    >>> import numpy as np, infiniop
    >>> x = np.arange(24).reshape(2, 3, 4)
    >>> infiniop.rearrange(x, "a b c -> c a b").shape
    (4, 2, 3)
    >>> infiniop.rearrange(x, "a (b1 b2) c -> b1 (a b2 c)", b1=1).shape
    (1, 24)
    """
    pat = parse(pattern)
    # sizes are checked before the plan cache sees them (2.0 or True must not hit the entry of 2)
    sizes_key = tuple(sorted((k, _axis_size(k, v, pattern)) for k, v in axis_sizes.items()))
    if type(x) is np.ndarray:  # fast path for repeated calls: no interop objects
        hit = _PLANS.get((pattern, x.dtype, x.shape, x.strides, sizes_key))
        if hit is not None:
            desc, out_shape, alloc = hit
            out = alloc(out_shape, dtype=x.dtype)
            if desc._run is not None:
                desc._run(out.ctypes.data, x.ctypes.data)
            return out
    if x is None:
        raise InfiniError(Status.NULL_POINTER, "operand 'x': array is None")
    if is_dask(x):  # a lazy graph instead, calling this function per block (dask_arrays.py)
        return rearrange_dask(x, pattern, axis_sizes, rearrange)
    info = inspect_buffer(x, "x")
    if info.trusted:
        raise InfiniError(Status.BAD_PARAM, "rearrange needs an array or tensor, not an address")
    if info.device != "cpu":
        raise InfiniError(Status.BAD_PARAM,
                          f"operand 'x': rearrange runs on the cpu, the array lives on {info.device}")
    if type(x) is np.ndarray:
        key = (pattern, x.dtype, x.shape, x.strides, sizes_key)
    else:
        key = (pattern, "elements", info.dtype, info.shape, info.strides, sizes_key)
    hit = _PLANS.get(key)
    if hit is None:
        it_shape, it_strides, out_shape = _plan_shapes(pat, info.shape, info.strides, axis_sizes)
        src_desc = TensorDescriptor(info.dtype, it_shape, it_strides)
        dst_desc = TensorDescriptor(info.dtype, it_shape, contiguous_strides(it_shape))
        hit = (_descriptor_for(dst_desc, src_desc), out_shape, _allocator(out_shape, info.dtype.numpy))
        _PLANS[key] = hit
        if len(_PLANS) > _PLAN_CACHE_SIZE:
            _PLANS.popitem(last=False)
    desc, out_shape, _ = hit
    out = _new_like(x, out_shape, info.dtype)
    if desc._run is not None:
        desc._run(inspect_buffer(out, "out").address, info.address)
    return out
