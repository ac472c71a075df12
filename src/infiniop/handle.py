"""Opening a device: ``create_handle`` reads the device's name (device.py), loads the backend that
runs it (backends/, which reads device.py too) and returns a Handle; so it sits above both.
"""

from __future__ import annotations

from . import backends
from .device import Device, Handle, as_device
from .status import InfiniError, Status


def create_handle(device: Device | str | int = "cpu", device_id: int = 0) -> Handle:
    """Open a device.

    >>> import infiniop
    >>> infiniop.create_handle("cpu")
    Handle(cpu:0)

    An unknown name is ``BAD_PARAM``; a device whose backend is not usable here is
    ``DEVICE_TYPE_NOT_SUPPORTED`` (or ``DEVICE_NOT_FOUND`` when the backend is installed but the
    device is absent), with a message that says what to install.
    """
    dev = as_device(device)
    if not isinstance(device_id, int) or isinstance(device_id, bool) or device_id < 0:
        raise InfiniError(Status.BAD_PARAM, f"device_id must be an int >= 0, got {device_id!r}")
    backend = backends.load(dev, device_id)
    return Handle(dev, device_id, backend)
