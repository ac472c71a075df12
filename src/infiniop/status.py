"""Status codes (the reference library's numbering) and the one exception type we raise."""

from __future__ import annotations

from enum import IntEnum


class Status(IntEnum):
    """Why an operation failed; values match InfiniCore's ``infiniStatus_t``."""

    SUCCESS = 0
    INTERNAL_ERROR = 1
    NOT_IMPLEMENTED = 2
    BAD_PARAM = 3
    NULL_POINTER = 4
    DEVICE_TYPE_NOT_SUPPORTED = 5
    DEVICE_NOT_FOUND = 6
    DEVICE_NOT_INITIALIZED = 7
    DEVICE_ARCHITECTURE_NOT_SUPPORTED = 8
    BAD_TENSOR_DTYPE = 10
    BAD_TENSOR_SHAPE = 11
    BAD_TENSOR_STRIDES = 12
    INSUFFICIENT_WORKSPACE = 13

    def __str__(self) -> str:
        """The name (``print(err.status)`` shows ``BAD_PARAM``); ``int(status)`` is the number."""
        return self.name

    def __format__(self, spec: str) -> str:  # f"{status}" and f"{status:>20}": the name
        if spec and spec[-1] in "bcdoxXneEfFgG%":  # f"{status:d}": the number
            return int.__format__(self, spec)
        return format(self.name, spec)


class InfiniError(Exception):
    """Every failure the caller can cause: ``.status`` says which kind, the message says where.

    >>> try:
    ...     raise InfiniError(Status.BAD_PARAM, "operand 'a': not an array")
    ... except InfiniError as e:
    ...     print(e.status, "-", e, "-", int(e.status))
    BAD_PARAM - operand 'a': not an array - 3
    """

    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status = Status(status)

    def __repr__(self) -> str:
        return f"InfiniError({self.status.name}, {str(self)!r})"

    def __reduce__(self):
        """Pickle with the status: an error raised in a worker process (multiprocessing, Dask)
        reaches the caller as itself, not as a broken pool."""
        return type(self), (self.status, str(self)), self.__dict__


def fail(status: Status, message: str) -> InfiniError:
    """Build an InfiniError to ``raise`` (keeps raise sites short)."""
    return InfiniError(status, message)
