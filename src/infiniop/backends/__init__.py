"""Backends are found by name; each is a package with ``check_device`` and kernel builders.

A backend never imports another backend. ``load`` turns "not installed" and "no device" into the
statuses the user sees, with what to do about it.
"""

from __future__ import annotations

import importlib

from ..device import Device
from ..status import InfiniError, Status


def load(device: Device, device_id: int):
    """Import and return the backend module that runs ``device``, or raise why it can't."""
    name = device.backend_name
    if name is None:
        raise InfiniError(
            Status.DEVICE_TYPE_NOT_SUPPORTED,
            f"device {device.name.lower()} has no backend in infiniop "
            "(supported: cpu; nvidia, metax, moore, iluvatar, kunlun, hygon through Triton)",
        )
    try:
        module = importlib.import_module(f".{name}", __name__)
    except ImportError as e:
        raise InfiniError(
            Status.DEVICE_TYPE_NOT_SUPPORTED,
            f"device {device.name.lower()} needs the {name} backend, which cannot be imported "
            f"({e}); install it with: pip install 'infiniop[gpu]'",
        ) from e
    module.check_device(device, device_id)
    return module
