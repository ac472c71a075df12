"""The Triton backend: NVIDIA, Metax, Moore Threads, Iluvatar, Kunlunxin and Hygon devices.

One set of kernels generated from the operators' expression trees (codegen.py), launched with
a per-vendor configuration (vendors.py). Vendors other than NVIDIA (and AMD) need their
vendor's Triton build (FlagTree); the kernels stay within what Triton 3.0/3.1 accepts.

Memory: on a GPU, torch device memory (anything the interop layer reports as "cuda": torch
tensors, DLPack, ``__cuda_array_interface__``, raw addresses). With ``TRITON_INTERPRET=1`` set
before this module is imported, the devices run the same kernels in Triton's interpreter on CPU
memory (NumPy arrays, CPU torch tensors): slow (~1-7 M elements/s), for tests.

With ``INFINIOP_TRITON_STAGED=1`` (a test mode, see memory.py) the kernels run on the GPU but
take host memory, staged through device copies around each launch: how the CPU backend's test
suite runs on a real GPU (``python -m pytest tests/test_triton_suite.py --gpu``).

Importing this module needs neither triton nor torch; ``check_device`` says what is missing.
"""

from __future__ import annotations

import importlib.util
import os

from ...device import Device
from ...status import InfiniError, Status
from .vendors import VENDORS, config_for

NAME = "triton"
INTERPRET = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
STAGED = os.environ.get("INFINIOP_TRITON_STAGED", "0") == "1"  # host memory, GPU kernels
MEMORY_KIND = "cpu" if INTERPRET or STAGED else "cuda"

_last = (Device.NVIDIA, 0)  # the device of the latest handle, for hooks that get no handle


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def check_device(device, device_id: int) -> None:
    """Raise unless ``device`` (one of VENDORS) can run here: DEVICE_TYPE_NOT_SUPPORTED when
    triton/torch are missing, DEVICE_NOT_FOUND when there is no such GPU."""
    global _last
    dev = Device(device)
    name = dev.name.lower()
    if dev not in VENDORS:
        raise InfiniError(Status.DEVICE_TYPE_NOT_SUPPORTED, f"the Triton backend does not run {name}")
    if not _installed("triton"):
        raise InfiniError(Status.DEVICE_TYPE_NOT_SUPPORTED,
                          f"device {name} runs on Triton, which is not installed; install it with "
                          "pip install 'infiniop[gpu]' (vendors other than NVIDIA/AMD: their "
                          "vendor's Triton build)")
    if not _installed("torch"):
        raise InfiniError(Status.DEVICE_TYPE_NOT_SUPPORTED,
                          f"device {name} needs torch (memory and streams); install it with "
                          "pip install 'infiniop[gpu]'")
    if INTERPRET:
        if device_id != 0:
            raise InfiniError(Status.DEVICE_NOT_FOUND,
                              f"under TRITON_INTERPRET=1 the {name} device is the CPU: device 0 "
                              f"only, got device_id={device_id}")
        _last = (dev, device_id)
        return
    import torch

    hint = ("to run the Triton kernels on the CPU instead (slow, for testing), set "
            "TRITON_INTERPRET=1 before importing infiniop")
    if not torch.cuda.is_available():
        raise InfiniError(Status.DEVICE_NOT_FOUND,
                          f"no {name} GPU found (torch {torch.__version__}: "
                          f"torch.cuda.is_available() is False); {hint}")
    count = torch.cuda.device_count()
    if device_id >= count:
        raise InfiniError(Status.DEVICE_NOT_FOUND,
                          f"{name} device_id={device_id} does not exist ({count} device(s) found)")
    expected = VENDORS[dev].target
    if expected is not None:
        from triton.runtime import driver

        with torch.cuda.device(device_id):
            backend = driver.active.get_current_target().backend
        if backend != expected:
            raise InfiniError(Status.DEVICE_NOT_FOUND,
                              f"no {name} device: the GPU found runs Triton target '{backend}', "
                              f"{name} needs '{expected}'")
    _last = (dev, device_id)


def _device_of(handle):
    if handle is not None:
        return handle.device, handle.device_id
    return _last


def launch_config(device=None):
    """The vendors.py row in use for ``device`` (default: the latest handle's)."""
    return config_for(Device(device) if device is not None else _last[0], INTERPRET)


def elementwise_kernel(info, handle=None):
    """A kernel with ``launch_pointers(addresses, stream=None)`` for a planned elementwise call.
    ``handle`` picks the vendor's launch row (without it: the latest handle's device)."""
    from .elementwise import ElementwiseKernel

    dev, dev_id = _device_of(handle)
    return ElementwiseKernel(info, config_for(dev, INTERPRET), INTERPRET, dev_id)


def row_kernel(info, handle=None):
    """A kernel with ``launch_pointers(addresses, stream=None)`` for a planned row call."""
    from .rows import RowKernel

    dev, dev_id = _device_of(handle)
    return RowKernel(info, config_for(dev, INTERPRET), INTERPRET, dev_id)


def rope_kernel(info, handle=None):
    """The rope kernel for a planned call (see rope.py)."""
    from .rope import RopeKernel

    dev, dev_id = _device_of(handle)
    return RopeKernel(info, config_for(dev, INTERPRET), INTERPRET, dev_id)


def rearrange_kernel(meta, handle=None):
    """A callable ``run(dst_address, src_address, stream=None)`` for a ``RearrangeMeta``, or
    None when there is nothing to copy."""
    from .rearrange_kernels import build

    return build(meta, handle)
