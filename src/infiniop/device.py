"""Devices and handles: a Handle names the device an operator descriptor runs on.

This is vocabulary: opening a device (``handle.create_handle``) loads its backend, a layer up.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from .status import InfiniError, Status


class Device(IntEnum):
    """A kind of device; values match InfiniCore's ``infiniDevice_t``."""

    CPU = 0
    NVIDIA = 1
    CAMBRICON = 2
    ASCEND = 3
    METAX = 4
    MOORE = 5
    ILUVATAR = 6
    KUNLUN = 7
    HYGON = 8
    QY = 9    # CUDA-like (InfiniCore builds its NVIDIA kernels for them); no backend here yet
    ALI = 10

    @property
    def backend_name(self) -> str | None:
        """Which backend runs this device ('cpu', 'triton'), or None if none is planned."""
        return _BACKEND.get(self)


_BACKEND = {
    Device.CPU: "cpu",
    Device.NVIDIA: "triton", Device.METAX: "triton", Device.MOORE: "triton",
    Device.ILUVATAR: "triton", Device.KUNLUN: "triton", Device.HYGON: "triton",
}


def as_device(value: Device | str | int) -> Device:
    """Accept a Device, its lower-case name ('cpu', 'nvidia'...) or its int value."""
    if isinstance(value, Device):
        return value
    if isinstance(value, str):
        try:
            return Device[value.upper()]
        except KeyError:
            pass
        names = ", ".join(d.name.lower() for d in Device)
        hint = ""
        kind, _, index = value.lower().partition(":")
        if kind in ("cuda", "gpu"):  # torch's spelling: devices are named by vendor here
            index = index if index.isdigit() else "0"
            hint = (f"; infiniop names GPUs by vendor: for an NVIDIA GPU use 'nvidia' "
                    f"(create_handle('nvidia', {index}))")
        raise InfiniError(Status.BAD_PARAM, f"unknown device {value!r}{hint}; known: {names}")
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return Device(value)
        except ValueError:
            pass
    raise InfiniError(Status.BAD_PARAM, f"unknown device {value!r}")


@dataclass(frozen=True)
class Handle:
    """A device and its index. Create with :func:`create_handle`; cheap and immutable."""

    device: Device
    device_id: int
    backend: object  # the backend module that runs this device's kernels

    def __repr__(self) -> str:
        return f"Handle({self.device.name.lower()}:{self.device_id})"

    def destroy(self) -> None:
        """Kept for parity with the C API; a handle holds no resources."""
