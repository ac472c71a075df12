"""Element types: the reference numbering, and the mapping to NumPy and torch dtypes."""

from __future__ import annotations

import warnings
from enum import IntEnum

import numpy as np

from .status import InfiniError, Status


class DType(IntEnum):
    """An element type; values match InfiniCore's ``infiniDtype_t``."""

    BYTE = 1
    BOOL = 2
    I8 = 3
    I16 = 4
    I32 = 5
    I64 = 6
    U8 = 7
    U16 = 8
    U32 = 9
    U64 = 10
    F8 = 11
    F16 = 12
    F32 = 13
    F64 = 14
    BF16 = 19

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _ITEMSIZE[self]

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype that stores this type (bf16 and f8 through ml_dtypes)."""
        try:
            return _TO_NUMPY[self]
        except KeyError:
            _add_ml_dtypes()
            return _TO_NUMPY[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.F8, DType.F16, DType.BF16, DType.F32, DType.F64)

    @property
    def is_signed_int(self) -> bool:
        return self in (DType.I8, DType.I16, DType.I32, DType.I64)

    @property
    def is_unsigned_int(self) -> bool:
        return self in (DType.U8, DType.U16, DType.U32, DType.U64, DType.BYTE)

    @property
    def short_name(self) -> str:
        """Readable name, as NumPy/torch users spell it (``float16``, ``bfloat16``...)."""
        return _SHORT[self]

    def __str__(self) -> str:
        return self.short_name

    def __repr__(self) -> str:
        return f"infiniop.{self.short_name}"


_ITEMSIZE = {
    DType.BYTE: 1, DType.BOOL: 1, DType.I8: 1, DType.U8: 1, DType.F8: 1,
    DType.I16: 2, DType.U16: 2, DType.F16: 2, DType.BF16: 2,
    DType.I32: 4, DType.U32: 4, DType.F32: 4,
    DType.I64: 8, DType.U64: 8, DType.F64: 8,
}
_SHORT = {
    DType.BYTE: "byte", DType.BOOL: "bool", DType.I8: "int8", DType.I16: "int16",
    DType.I32: "int32", DType.I64: "int64", DType.U8: "uint8", DType.U16: "uint16",
    DType.U32: "uint32", DType.U64: "uint64", DType.F8: "float8_e4m3fn", DType.F16: "float16",
    DType.F32: "float32", DType.F64: "float64", DType.BF16: "bfloat16",
}
_TO_NUMPY = {
    DType.BYTE: np.dtype(np.uint8), DType.BOOL: np.dtype(np.bool_),
    DType.I8: np.dtype(np.int8), DType.I16: np.dtype(np.int16),
    DType.I32: np.dtype(np.int32), DType.I64: np.dtype(np.int64),
    DType.U8: np.dtype(np.uint8), DType.U16: np.dtype(np.uint16),
    DType.U32: np.dtype(np.uint32), DType.U64: np.dtype(np.uint64),
    DType.F16: np.dtype(np.float16), DType.F32: np.dtype(np.float32),
    DType.F64: np.dtype(np.float64),
}
# uint8 maps back to U8 (BYTE is the reference's untyped byte; it shares NumPy's uint8).
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items() if k is not DType.BYTE}


def _add_ml_dtypes() -> None:
    """bf16 and f8 enter the tables on first need: ml_dtypes costs ~5 ms of import, and an array
    of those dtypes cannot exist before its user has imported ml_dtypes."""
    import ml_dtypes

    for d, t in ((DType.F8, ml_dtypes.float8_e4m3fn), (DType.BF16, ml_dtypes.bfloat16)):
        _TO_NUMPY[d] = np.dtype(t)
        _FROM_NUMPY[np.dtype(t)] = d


float16, bfloat16, float32, float64 = DType.F16, DType.BF16, DType.F32, DType.F64
int8, int16, int32, int64 = DType.I8, DType.I16, DType.I32, DType.I64
uint8, uint16, uint32, uint64 = DType.U8, DType.U16, DType.U32, DType.U64
bool_ = DType.BOOL


# What an array can hold, for messages: every DType that NumPy (with ml_dtypes) or torch stores.
SUPPORTED = ", ".join(_SHORT[d] for d in DType if d is not DType.BYTE)


def from_numpy(dt) -> DType:
    """The DType of a NumPy dtype (or anything ``np.dtype`` accepts)."""
    try:
        return _FROM_NUMPY[np.dtype(dt)]
    except Exception:  # noqa: BLE001 - maybe a bf16/f8 dtype or name before the tables have it
        pass
    _add_ml_dtypes()
    try:
        return _FROM_NUMPY[np.dtype(dt)]
    except Exception as e:  # noqa: BLE001 - np.dtype('01') is a SyntaxError, '0:' a ValueError
        raise InfiniError(Status.BAD_TENSOR_DTYPE,
                          f"NumPy dtype {dt!r} has no infiniop DType (supported: {SUPPORTED})") from e


def _torch_table() -> dict:
    import torch

    return {
        DType.BOOL: torch.bool, DType.I8: torch.int8, DType.I16: torch.int16,
        DType.I32: torch.int32, DType.I64: torch.int64, DType.U8: torch.uint8,
        DType.U16: torch.uint16, DType.U32: torch.uint32, DType.U64: torch.uint64,
        DType.F8: torch.float8_e4m3fn, DType.F16: torch.float16, DType.BF16: torch.bfloat16,
        DType.F32: torch.float32, DType.F64: torch.float64,
    }


_TORCH_CACHE: dict = {}


def to_torch(dt: DType):
    """The torch dtype of a DType (needs torch installed)."""
    if not _TORCH_CACHE:
        _TORCH_CACHE.update(_torch_table())
    return _TORCH_CACHE[DType(dt)] if DType(dt) is not DType.BYTE else _TORCH_CACHE[DType.U8]


def from_torch(tdt) -> DType:
    """The DType of a torch dtype."""
    if not _TORCH_CACHE:
        _TORCH_CACHE.update(_torch_table())
    for k, v in _TORCH_CACHE.items():
        if v == tdt:
            return k
    raise InfiniError(Status.BAD_TENSOR_DTYPE,
                      f"torch dtype {tdt} has no infiniop DType (supported: {SUPPORTED})")


def as_dtype(value) -> DType:
    """Accept a DType, its int value (InfiniCore's numbering), a NumPy or torch dtype, or a string.

    A string is read, in this order, as
    1. one of infiniop's names: ``'float16'``, ``'bfloat16'``, ``'float8_e4m3fn'``, ``'int8'``...
       ``'bool'``, and ``'byte'`` (infiniop's untyped byte, BYTE; NumPy's ``np.byte`` is int8,
       spell that ``'int8'`` or ``'i1'``);
    2. a NumPy dtype string, with NumPy's meaning: ``'f4'`` float32, ``'i8'`` int64, ``'u1'``
       uint8, ``'b'`` int8, ``'?'`` bool, ``'e'`` float16, ``'<f2'``, ``'half'``, ``'float'``
       (float64)... A NumPy type infiniop cannot hold (``'f16'`` float128, ``'c8'``, ``'>f4'``,
       ``'U8'``, a unicode string) is refused, never read as another size;
    3. an upper-case member name NumPy does not read: ``'F16'``, ``'BF16'``, ``'F8'``, ``'I8'``...
       ``'BYTE'``, ``'BOOL'``. (``'U8'``..``'U64'`` are NumPy's unicode strings: use ``'uint8'``.)

    >>> as_dtype("i8"), as_dtype("I8"), as_dtype("f4"), as_dtype("F16")
    (infiniop.int64, infiniop.int8, infiniop.float32, infiniop.float16)
    """
    if isinstance(value, DType):
        return value
    if value is None:  # np.dtype(None) is float64: never let a missing dtype mean float64
        raise InfiniError(Status.BAD_TENSOR_DTYPE, "dtype is None")
    if isinstance(value, str):
        return _from_string(value)
    if type(value).__module__ == "torch":
        return from_torch(value)
    if isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_):
        try:
            return DType(int(value))
        except ValueError:
            pass
    elif not isinstance(value, bool | bytes):
        try:
            return from_numpy(value)
        except InfiniError:
            pass
    raise InfiniError(Status.BAD_TENSOR_DTYPE,
                      f"{value!r} is not an infiniop DType (supported: {SUPPORTED})")


_BY_NAME = {name: d for d, name in _SHORT.items()}


def _from_string(text: str) -> DType:
    d = _BY_NAME.get(text)
    if d is not None:
        return d
    with warnings.catch_warnings():  # NumPy deprecates some aliases ('a'): still its meaning
        warnings.simplefilter("ignore")
        try:
            npdt = np.dtype(text)
        except Exception:  # noqa: BLE001 - not a NumPy dtype string (TypeError, SyntaxError...)
            npdt = None
    if npdt is not None:
        d = _FROM_NUMPY.get(npdt)
        if d is None:
            member = DType.__members__.get(text)  # 'U8': a member name NumPy reads otherwise
            hint = f"; infiniop's {text} is spelled {_SHORT[member]!r}" if member else ""
            raise InfiniError(Status.BAD_TENSOR_DTYPE,
                              f"{text!r} is NumPy's {npdt} ({npdt.itemsize} bytes), which infiniop "
                              f"does not support{hint} (supported: {SUPPORTED})")
        return d
    d = DType.__members__.get(text)
    if d is not None:
        return d
    raise InfiniError(Status.BAD_TENSOR_DTYPE,
                      f"{text!r} is not a dtype name (supported: {SUPPORTED}, or NumPy's codes "
                      "such as 'f4', or member names such as 'F16' and 'BF16')")
