"""The functional front end: ``infiniop.sub(a, b, out=None)`` on NumPy arrays or torch tensors.

Broadcasts like NumPy, returns the kind of array it was given, and caches descriptors in a
bounded LRU keyed by the operands' layouts, so a repeated call does no planning.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from ..dtype import DType, as_dtype, from_numpy
from ..layout import broadcast_shape
from ..memory import empty_aligned
from ..status import InfiniError, Status
from ..tensor import TensorDescriptor

CACHE_SIZE = 1024  # entries kept per cache (least recently used dropped first)
_cache: OrderedDict = OrderedDict()  # NumPy call signature -> (descriptor, out shape, out dtype)
_descriptors: OrderedDict = OrderedDict()  # operand layouts -> descriptor (every array kind)
_cache_lock = threading.Lock()
_handle = None


def _cpu_handle():
    global _handle
    if _handle is None:
        from ..handle import create_handle

        _handle = create_handle("cpu")
    return _handle


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def _layout(x):
    if type(x) is np.ndarray:
        isz = x.itemsize
        if any(s % isz for s in x.strides):  # s // isz would describe other elements
            raise InfiniError(Status.BAD_TENSOR_STRIDES, f"array strides {x.strides} (bytes) "
                              f"are not multiples of its itemsize {isz}")
        return x.dtype, x.shape, tuple(s // isz for s in x.strides)
    return x.dtype, tuple(x.shape), tuple(x.stride())


def _descriptor(spec, out, ins):
    """Create (or reuse) the descriptor for these operands' layouts."""
    key = (spec,) + tuple(_layout(a) for a in (out,) + ins)  # the spec itself: its dtypes too
    hit = _descriptors.get(key)
    if hit is not None:
        try:
            _descriptors.move_to_end(key)  # least recently used is evicted first
        except KeyError:
            pass
        return hit
    descs = [TensorDescriptor(as_dtype(dt), shape, strides) for dt, shape, strides in key[1:]]
    d = spec.create_descriptor(_cpu_handle(), descs[0], *descs[1:])
    with _cache_lock:
        _descriptors[key] = d
        while len(_descriptors) > CACHE_SIZE:
            _descriptors.popitem(last=False)
    return d


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()
        _descriptors.clear()


def call(spec, args, out=None):
    """Run ``spec`` on arrays/tensors/scalars. Scalars take the dtype of the array operands."""
    # Fast path: NumPy arrays only, layouts seen before -> one dict lookup, no planning.
    key = _numpy_key(spec, args, out)
    if key is not None:
        hit = _cache.get(key)
        if hit is not None:
            try:
                _cache.move_to_end(key)
            except KeyError:  # evicted by another thread meanwhile: harmless
                pass
            desc, shape, npdt = hit
            if out is None:
                out = empty_aligned(shape, npdt)
            desc.calculate(None, out, *args)
            return out
    return _call_general(spec, args, out, key)


def _numpy_key(spec, args, out):
    if out is not None and type(out) is not np.ndarray:
        return None
    key = [spec, None if out is None else (out.shape, out.strides, out.dtype)]
    for a in args:
        if type(a) is not np.ndarray:
            return None
        key.append((a.shape, a.strides, a.dtype))
    return tuple(key)


def _call_general(spec, args, out, key):
    if len(args) != spec.arity:
        raise InfiniError(Status.BAD_PARAM, f"{spec.name} takes {spec.arity} inputs "
                          f"({', '.join(spec.inputs)}), got {len(args)}")
    for k, a in enumerate(args):
        if a is None:
            raise InfiniError(Status.NULL_POINTER, f"operand '{spec.inputs[k]}' is None")
    use_torch = any(_is_torch(a) for a in args) or _is_torch(out)
    if out is not None and type(out) is not np.ndarray and not _is_torch(out):
        if not isinstance(out, np.ndarray):
            raise InfiniError(Status.BAD_PARAM, f"operand 'out': cannot use {type(out).__name__}")
        _call_general(spec, args, out.view(np.ndarray), None)  # a subclass: memmap, ...
        return out
    arrays = [a for k, a in enumerate(args) if k not in spec.input_dtypes]
    dtype = None
    for a in arrays + ([out] if out is not None else []):
        if isinstance(a, np.ndarray) or _is_torch(a):
            dtype = as_dtype(a.dtype)
            break
    if dtype is None:
        raise InfiniError(Status.BAD_PARAM, f"{spec.name}: at least one operand must be an array")
    ins = []
    for k, a in enumerate(args):
        want = spec.input_dtype(k, dtype)
        if type(a) is np.ndarray or _is_torch(a):
            ins.append(a)
        elif isinstance(a, bool | int | float | np.generic):
            try:
                v = np.asarray(a, dtype=want.numpy)
            except (OverflowError, ValueError, TypeError) as e:  # 1000 as int8, nan as int
                raise InfiniError(Status.BAD_PARAM, f"operand '{spec.inputs[k]}': scalar {a!r} "
                                  f"does not fit {want}: {e}") from None
            if not want.is_float and want is not DType.BOOL and v != a:  # 1.5 on an int array
                raise InfiniError(Status.BAD_PARAM, f"operand '{spec.inputs[k]}': scalar {a!r} "
                                  f"is not exactly representable as {want} (no type promotion)")
            if use_torch:
                import torch

                v = torch.from_numpy(v.view(np.int16) if want is DType.BF16 else v)
                if want is DType.BF16:
                    v = v.view(torch.bfloat16)
            ins.append(v)
        elif hasattr(a, "__dlpack__") or hasattr(a, "__array_interface__"):
            from ..interop import inspect_buffer

            info = inspect_buffer(a, spec.inputs[k])  # an InfiniError for anything unreadable
            if info.device != "cpu":
                raise InfiniError(Status.BAD_PARAM,
                                  f"operand '{spec.inputs[k]}': buffer lives on {info.device}")
            o = info.owner  # the ndarray (maybe a subclass) or torch tensor it was read through
            ins.append(np.asarray(o) if isinstance(o, np.ndarray) else o)
        else:
            raise InfiniError(Status.BAD_PARAM,
                              f"operand '{spec.inputs[k]}': cannot use {type(a).__name__}")
    shape = broadcast_shape([tuple(a.shape) for a in ins], list(spec.inputs))
    fresh = out is None
    if fresh:
        if use_torch:
            import torch

            from ..dtype import to_torch

            out = torch.empty(shape, dtype=to_torch(dtype))
        else:
            out = empty_aligned(shape, dtype.numpy)
    desc = _descriptor(spec, out, tuple(ins))
    desc.calculate(None, out, *ins)
    if key is not None and all(type(a) is np.ndarray for a in ins):
        _remember(key, (desc, shape, dtype.numpy))
    return out


def _remember(key, value) -> None:
    with _cache_lock:
        _cache[key] = value
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)


def result_dtype(x) -> DType:
    return from_numpy(x.dtype) if isinstance(x, np.ndarray) else as_dtype(x.dtype)
