"""Foreign arrays -> what a kernel needs: address, dtype, shape, strides, memory bounds, device.

Order of preference: NumPy arrays and torch tensors directly (fast), then ``__dlpack__``, then
``__cuda_array_interface__``, then ``__array_interface__``. A plain int is a raw address: trusted,
unchecked (the caller promises the memory is there).

This layer only reads arrays (it knows dtypes, not descriptors): ``TensorDescriptor.from_array``
builds a descriptor from what it reads, and the operator descriptors check a buffer against
their tensor descriptors (``descriptor.check_fits``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dtype import SUPPORTED, DType, from_numpy, from_torch
from .status import InfiniError, Status


@dataclass(frozen=True, slots=True)
class BufferInfo:
    """A foreign buffer as the library sees it. ``lo``/``hi`` bound its memory in bytes
    (absolute addresses, ``hi`` exclusive); for a raw address they are None (unchecked)."""

    address: int
    dtype: DType | None
    shape: tuple[int, ...] | None
    strides: tuple[int, ...] | None
    lo: int | None
    hi: int | None
    readonly: bool
    device: str  # "cpu", "cuda", ...
    owner: object  # keeps the memory alive while we use it

    @property
    def trusted(self) -> bool:
        return self.lo is None


def _bounds(address: int, shape, byte_strides, itemsize: int) -> tuple[int, int]:
    lo = hi = address
    if 0 in shape:
        return address, address
    for n, s in zip(shape, byte_strides):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + itemsize


def _from_ndarray(a: np.ndarray, name: str = "buffer") -> BufferInfo:
    try:
        dt = from_numpy(a.dtype)
    except InfiniError:
        raise InfiniError(Status.BAD_TENSOR_DTYPE,
                          f"operand '{name}': array dtype {a.dtype} is not supported "
                          f"(supported: {SUPPORTED})") from None
    isz = a.itemsize
    if any(s % isz for s in a.strides):
        raise InfiniError(Status.BAD_TENSOR_STRIDES, f"operand '{name}': array strides "
                          f"{a.strides} (bytes) are not multiples of {isz}")
    addr = a.__array_interface__["data"][0]
    lo, hi = _bounds(addr, a.shape, a.strides, isz)
    return BufferInfo(addr, dt, a.shape, tuple(s // isz for s in a.strides), lo, hi,
                      not a.flags.writeable, "cpu", a)


def _torch():
    import torch

    return torch


def _is_torch_tensor(obj) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _from_torch(t, name: str = "buffer") -> BufferInfo:
    try:
        dt = from_torch(t.dtype)
    except InfiniError:
        raise InfiniError(Status.BAD_TENSOR_DTYPE,
                          f"operand '{name}': tensor dtype {t.dtype} is not supported "
                          f"(supported: {SUPPORTED})") from None
    isz = dt.itemsize
    if t.layout is not _torch().strided:  # sparse, mkldnn...: no strided memory to hand out
        raise InfiniError(Status.BAD_PARAM, f"operand '{name}': tensor layout {t.layout} is "
                          "not strided")
    if t.is_neg() or t.is_conj():  # lazy negation/conjugation: memory != values
        raise InfiniError(Status.BAD_PARAM, f"operand '{name}': tensor has a lazy negation or "
                          "conjugation bit; call .resolve_neg() / .resolve_conj() first")
    addr = t.data_ptr()
    shape, strides = tuple(t.shape), tuple(t.stride())
    lo, hi = _bounds(addr, shape, [s * isz for s in strides], isz)
    dev = t.device.type
    return BufferInfo(addr, dt, shape, strides, lo, hi, False, dev, t)


def refuse_masked(obj, name: str) -> None:
    """BAD_PARAM for a NumPy masked array: read as its data, its mask was silently dropped
    (NumPy's ufuncs keep it; infiniop's Dask path already refused masked chunks)."""
    if type(obj).__module__.startswith("numpy.ma"):
        raise InfiniError(Status.BAD_PARAM, f"operand '{name}': a masked array; its mask would be "
                          "ignored: pass x.filled(value) or x.data")


def inspect_buffer(obj, name: str = "buffer") -> BufferInfo:
    """Describe ``obj`` (array, tensor, DLPack / array-interface object, or int address)."""
    if type(obj) is np.ndarray:
        return _from_ndarray(obj, name)
    if isinstance(obj, int) and not isinstance(obj, bool):
        if obj == 0:
            raise InfiniError(Status.NULL_POINTER, f"operand '{name}': null address")
        if not 0 < obj < 2**64:
            raise InfiniError(Status.BAD_PARAM, f"operand '{name}': {obj} is not an address")
        return BufferInfo(obj, None, None, None, None, None, False, "cpu", None)
    if _is_torch_tensor(obj):
        return _from_torch(obj, name)
    if isinstance(obj, np.ndarray):
        refuse_masked(obj, name)
        return _from_ndarray(obj, name)
    if hasattr(obj, "__dlpack__"):
        try:
            dev = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else 1
        except Exception as e:  # noqa: BLE001 - a broken producer is the caller's bad input
            raise InfiniError(Status.BAD_PARAM,
                              f"operand '{name}': cannot read its DLPack device ({e})") from e
        if dev in (1, 3):  # kDLCPU, kDLCUDAHost
            try:
                return _from_ndarray(np.from_dlpack(obj), name)
            except (BufferError, RuntimeError, TypeError, ValueError, AttributeError) as e:
                err = e
        else:
            err = None
        try:
            import torch

            t = torch.from_dlpack(obj)
        except Exception as e:  # noqa: BLE001 - any failure means we cannot read it
            # (the dtype check stays outside: an unsupported dtype is BAD_TENSOR_DTYPE)
            raise InfiniError(Status.BAD_PARAM,
                              f"operand '{name}': cannot read its DLPack export ({err or e})") from e
        return _from_torch(t, name)
    if hasattr(obj, "__cuda_array_interface__"):
        cai = obj.__cuda_array_interface__
        try:
            dt = from_numpy(np.dtype(cai["typestr"]))
            isz = dt.itemsize
            shape = tuple(int(n) for n in cai["shape"])
            bstrides = tuple(int(s) for s in cai.get("strides") or
                             [s * isz for s in _contig(shape)])
            addr, ro = cai["data"]
        except (KeyError, TypeError, ValueError) as e:
            raise InfiniError(Status.BAD_PARAM, f"operand '{name}': malformed "
                              f"__cuda_array_interface__ ({e!r})") from None
        if any(s % isz for s in bstrides):
            raise InfiniError(Status.BAD_TENSOR_STRIDES, f"operand '{name}': strides {bstrides} "
                              f"(bytes) are not multiples of {isz}")
        lo, hi = _bounds(addr, shape, bstrides, isz)
        return BufferInfo(addr, dt, shape, tuple(s // isz for s in bstrides), lo, hi, bool(ro),
                          "cuda", obj)
    if hasattr(obj, "__array_interface__"):
        try:
            a = np.asarray(obj)
        except (KeyError, TypeError, ValueError) as e:
            raise InfiniError(Status.BAD_PARAM, f"operand '{name}': unreadable "
                              f"__array_interface__ ({e})") from None
        if isinstance(obj, np.generic):  # a NumPy scalar: ``a`` is a copy, writes would be lost
            a.flags.writeable = False
        return _from_ndarray(a, name)
    raise InfiniError(Status.BAD_PARAM,
                      f"operand '{name}': {type(obj).__name__} is not an array, tensor or address")


def _contig(shape) -> list[int]:
    """Row-major strides in elements (a ``__cuda_array_interface__`` without strides)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return strides[::-1]
