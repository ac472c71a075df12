"""The CPU backend: kernels JIT-compiled by Numba, multi-threaded on TBB."""

from __future__ import annotations

from . import runtime  # noqa: F401  (configures numba before anything imports it)

MEMORY_KIND = "cpu"
NAME = "cpu"


def check_device(device, device_id: int) -> None:
    from ...status import InfiniError, Status

    if device_id != 0:
        raise InfiniError(Status.DEVICE_NOT_FOUND, f"the CPU is device 0, got device_id={device_id}")


def elementwise_kernel(info, handle=None):
    """A callable kernel for a planned elementwise call (see elementwise.py). The CPU has one
    device, so ``handle`` is not needed; GPU backends use it to pick the vendor's launch table."""
    from .elementwise import ElementwiseKernel
    from .tabulated import kernel_for

    return kernel_for(info) or ElementwiseKernel(info)


def row_kernel(info, handle=None):
    """A callable kernel for a planned row call (see rows.py)."""
    from .rows import RowKernel

    return RowKernel(info)


def rope_kernel(info, handle=None):
    """The rope kernel for a planned call (see rope.py)."""
    from .rope import RopeKernel

    return RopeKernel(info)
