"""TensorDescriptor: an immutable (dtype, shape, strides-in-elements) triple, validated once."""

from __future__ import annotations

import operator
from math import prod

from .dtype import DType, as_dtype
from .interop import inspect_buffer
from .status import InfiniError, Status

_INT64_MAX = 2**63 - 1


def _int_tuple(values, what: str) -> tuple[int, ...]:
    try:
        items = tuple(values)
        out = tuple(operator.index(v) for v in items)
    except TypeError:
        raise InfiniError(Status.BAD_PARAM, f"{what} must be a sequence of ints, got {values!r}") from None
    if any(isinstance(v, bool) for v in items):  # operator.index(True) == 1: refuse it
        raise InfiniError(Status.BAD_PARAM, f"{what} must be a sequence of ints, got {values!r}")
    return out


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides, in elements."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


class TensorDescriptor:
    """What a tensor looks like: element type, extents, and strides counted in elements.

    ``strides=None`` means row-major contiguous. A 0 stride repeats one element along a dim
    (broadcast); negative strides walk backwards from element 0.

    >>> import infiniop
    >>> d = infiniop.TensorDescriptor(infiniop.float32, (2, 3))
    >>> d
    TensorDescriptor(float32, shape=(2, 3), strides=(3, 1))
    >>> d.numel, d.is_contiguous(), d.reach
    (6, True, (0, 5))
    """

    __slots__ = ("_dtype", "_shape", "_strides", "_lo", "_hi")

    def __init__(self, dtype, shape, strides=None):
        dt = as_dtype(dtype)
        if isinstance(shape, int):
            shape = (shape,)
        shp = _int_tuple(shape, "shape")
        if any(n < 0 for n in shp):
            raise InfiniError(Status.BAD_TENSOR_SHAPE, f"shape {shp} has a negative extent")
        if any(n > _INT64_MAX for n in shp):  # even with another extent 0: must fit an int64
            raise InfiniError(Status.BAD_TENSOR_SHAPE, f"shape {shp} has an extent over 2**63 - 1")
        if strides is None:
            st = contiguous_strides(shp)
        else:
            st = _int_tuple(strides, "strides")
            if len(st) != len(shp):
                raise InfiniError(
                    Status.BAD_TENSOR_STRIDES,
                    f"strides {st} has {len(st)} entries but shape {shp} has {len(shp)} dims",
                )
        # kernels hold strides in int64; default strides too (an empty (0, 2**62, 2**62) has one
        # of 2**124 elements), so that TensorDescriptor(d.dtype, d.shape, d.strides) == d
        if any(abs(s) * dt.itemsize > _INT64_MAX for s in st):
            raise InfiniError(Status.BAD_TENSOR_STRIDES, f"strides {st} do not fit 2**63 bytes")
        numel = prod(shp)
        if numel * dt.itemsize > _INT64_MAX:
            raise InfiniError(Status.BAD_TENSOR_SHAPE, f"shape {shp} is larger than 2**63 bytes")
        lo = hi = 0
        if numel:
            for n, s in zip(shp, st):
                if s < 0:
                    lo += (n - 1) * s
                else:
                    hi += (n - 1) * s
        if (hi - lo + 1) * dt.itemsize > _INT64_MAX:  # the span from lowest to highest byte
            raise InfiniError(
                Status.BAD_TENSOR_STRIDES, f"strides {st} reach beyond 2**63 bytes for shape {shp}"
            )
        self._dtype, self._shape, self._strides, self._lo, self._hi = dt, shp, st, lo, hi

    def __setattr__(self, name, value):
        if hasattr(self, "_hi"):
            raise AttributeError("TensorDescriptor is immutable")
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        raise AttributeError("TensorDescriptor is immutable")

    dtype: DType = property(lambda self: self._dtype)  # type: ignore[assignment]
    shape: tuple[int, ...] = property(lambda self: self._shape)  # type: ignore[assignment]
    strides: tuple[int, ...] = property(lambda self: self._strides)  # type: ignore[assignment]

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def numel(self) -> int:
        return prod(self._shape)

    @property
    def reach(self) -> tuple[int, int]:
        """Lowest and highest element offsets from element 0 that the tensor touches
        ((0, 0) when empty: an empty tensor touches nothing, see ``is_empty``)."""
        return self._lo, self._hi

    @property
    def is_empty(self) -> bool:
        return self.numel == 0

    def is_contiguous(self) -> bool:
        """Row-major dense (size-1 dims may have any stride; empty tensors are contiguous, as
        in NumPy and torch)."""
        if self.numel == 0:
            return True
        step = 1
        for n, s in zip(reversed(self._shape), reversed(self._strides)):
            if n != 1 and s != step:
                return False
            step *= n
        return True

    def has_broadcast(self) -> bool:
        """True if a dim of extent > 1 has stride 0."""
        return any(n > 1 and s == 0 for n, s in zip(self._shape, self._strides))

    @classmethod
    def from_array(cls, obj) -> TensorDescriptor:
        """Describe a NumPy array, torch tensor, or DLPack / array-interface object."""
        info = inspect_buffer(obj)
        if info.trusted:
            raise InfiniError(Status.BAD_PARAM,
                              "a raw address has no dtype or shape; build the descriptor yourself")
        return cls(info.dtype, info.shape, info.strides)

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorDescriptor) and (
            self._dtype, self._shape, self._strides) == (other._dtype, other._shape, other._strides)

    def __hash__(self) -> int:
        return hash((self._dtype, self._shape, self._strides))

    def __repr__(self) -> str:
        return (f"TensorDescriptor({self._dtype.short_name}, shape={self._shape}, "
                f"strides={self._strides})")


def create_tensor_descriptor(shape, strides, dtype) -> TensorDescriptor:
    """C-API spelling (``infiniopCreateTensorDescriptor`` argument order)."""
    return TensorDescriptor(dtype, shape, strides)
