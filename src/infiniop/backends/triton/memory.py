"""Memory adapters: turn the raw addresses a descriptor hands over into kernel arguments.

- On a GPU, a pointer argument is any object with ``data_ptr()`` and a ``dtype``: a tiny
  :class:`DevicePointer` (no tensor is built per call).
- Under ``TRITON_INTERPRET=1`` the interpreter wants torch tensors whose *storage* covers every
  byte the kernel touches (it indexes from ``data_ptr()`` with our offsets, negative ones
  included). :class:`HostMemory` wraps the byte range ``[lo, hi)`` of each operand (known at
  create from the descriptor's reach) in a CPU tensor with ``torch.frombuffer`` and points it at
  the iteration origin. Nothing goes through DLPack, so negative strides are safe (DLPack of a
  negative-stride NumPy view aborts torch). Operands whose ranges start at the same address
  share one storage (the interpreter keys storages by address).
- With ``INFINIOP_TRITON_STAGED=1`` on a real GPU, :class:`StagedMemory` runs the kernels on
  *host* buffers: the bytes each launch may touch are copied to the device, the kernel runs
  there, and the bytes come back. It exists so that the CPU backend's whole test suite (NumPy
  buffers, canary-filled gaps, raw host addresses) runs unchanged on a GPU; every staged range
  is fenced by guard bytes that must survive the launch (a write outside an operand's reach
  fails the call). Slow by design: a test mode, never a user's path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass

from ...settings import env_int

STAGED = os.environ.get("INFINIOP_TRITON_STAGED", "0") == "1"
STAGED_PAD = env_int("INFINIOP_TRITON_STAGED_PAD", 4096)  # guard bytes per side

_TORCH_NAMES = {"fp16": "float16", "fp32": "float32", "fp64": "float64", "i8": "int8",
                "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16",
                "u32": "uint32", "u64": "uint64"}


def torch_dtype(ty: str):
    import torch

    return getattr(torch, _TORCH_NAMES[ty])


@dataclass(frozen=True)
class Operand:
    """One pointer argument: Triton element type, element size, and byte offsets from the
    address the caller passes (element 0): ``origin`` (where the kernel's offsets start) and
    the reach ``[lo, hi)``."""

    ty: str
    itemsize: int
    origin: int
    lo: int
    hi: int


class DevicePointer:
    """What Triton's launcher needs of a pointer argument."""

    __slots__ = ("_ptr", "dtype")

    def __init__(self, ptr: int, dtype):
        self._ptr = ptr
        self.dtype = dtype

    def data_ptr(self) -> int:
        return self._ptr


class DeviceMemory:
    def __init__(self, operands: list[Operand]):
        self._ops = [(op.origin, torch_dtype(op.ty)) for op in operands]

    def __call__(self, addresses):
        return [DevicePointer(a + o, dt) for a, (o, dt) in zip(addresses, self._ops)]


class HostMemory:
    def __init__(self, operands: list[Operand]):
        self._ops = [(op, torch_dtype(op.ty)) for op in operands]

    def __call__(self, addresses):
        import torch

        ends: dict[int, int] = {}
        for a, (op, _) in zip(addresses, self._ops):
            s = a + op.lo
            ends[s] = max(ends.get(s, s), a + op.hi)
        bases = {s: torch.frombuffer((ctypes.c_char * (e - s)).from_address(s), dtype=torch.uint8)
                 for s, e in ends.items()}
        out = []
        for a, (op, dt) in zip(addresses, self._ops):
            base = bases[a + op.lo]
            t = base[: op.hi - op.lo].view(dt)
            out.append(t[(op.origin - op.lo) // op.itemsize:])
        return out


GUARD = 0x5A  # the byte value of the fences around a staged range


class StagedMemory:
    """Host buffers on a GPU (see the module docstring): ``stage(addresses)`` copies in and
    returns the device pointers and a ``finish()`` that copies back and checks the fences."""

    def __init__(self, operands: list[Operand], device_id, pad: int, interpret: bool):
        self._ops = [(op, torch_dtype(op.ty)) for op in operands]
        # under the interpreter the "device" copy is a second host buffer: the staging logic
        # is tested without a GPU
        self._device = "cpu" if interpret else f"cuda:{device_id or 0}"
        self._pad = pad

    def stage(self, addresses):
        import torch

        spans = sorted((a + op.lo, a + op.hi) for a, (op, _) in zip(addresses, self._ops))
        merged: list[list[int]] = []
        for s, e in spans:  # operands that share bytes (in-place, overlapping views) share a copy
            if merged and (s < merged[-1][1] or s == merged[-1][0]):
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        sync = torch.cuda.synchronize if self._device != "cpu" else lambda _: None
        sync(self._device)
        pad, staged = self._pad, []
        for s, e in merged:
            n = e - s
            # the copy keeps the host address modulo 256 (the same alignment, so the same
            # kernel variants and the same misaligned-address fallbacks run)
            at = pad + s % 256
            dev = torch.full((at + n + pad,), GUARD, dtype=torch.uint8, device=self._device)
            host = (torch.frombuffer((ctypes.c_char * n).from_address(s), dtype=torch.uint8)
                    if n else None)
            if n:
                dev[at:at + n].copy_(host)
            staged.append((s, e, dev, host, at))
        ptrs = []
        for a, (op, dt) in zip(addresses, self._ops):
            s, _, dev, _, at = next(x for x in staged if x[0] <= a + op.lo and a + op.hi <= x[1])
            if self._device == "cpu":  # the interpreter wants a tensor covering the reach
                t = dev[at + a + op.lo - s: at + a + op.hi - s].view(dt)
                ptrs.append(t[(op.origin - op.lo) // op.itemsize:])
            else:
                ptrs.append(DevicePointer(dev.data_ptr() + at + (a + op.origin - s), dt))

        def finish():
            sync(self._device)
            for s, e, dev, host, at in staged:
                back = dev.cpu()
                n = e - s
                if bool((back[:at] != GUARD).any()) or bool((back[at + n:] != GUARD).any()):
                    raise RuntimeError(f"a kernel wrote outside its operands' reach (the guard "
                                       f"bytes around host range {s:#x}..{e:#x} changed)")
                if host is not None and not torch.equal(back[at:at + n], host):
                    host.copy_(back[at:at + n])  # only what changed: inputs stay untouched
        return ptrs, finish


def adapter(operands: list[Operand], interpret: bool, device_id=None):
    if STAGED:
        return StagedMemory(operands, device_id, STAGED_PAD, interpret)
    return HostMemory(operands) if interpret else DeviceMemory(operands)


def stream_context(stream, device_id: int | None, interpret: bool):
    """A context that makes ``stream`` (torch stream, raw ``cudaStream_t`` int, or an object
    with ``cuda_stream`` / ``__cuda_stream__``) and ``device_id`` current for a launch."""
    if interpret:
        return contextlib.nullcontext()
    import torch

    stack = contextlib.ExitStack()
    if device_id is not None and torch.cuda.current_device() != device_id:
        stack.enter_context(torch.cuda.device(device_id))
    if stream is not None:
        if not isinstance(stream, torch.cuda.Stream):
            stream = torch.cuda.ExternalStream(stream_handle(stream))
        stack.enter_context(torch.cuda.stream(stream))
    return stack


def stream_handle(stream) -> int:
    """The raw ``cudaStream_t`` of a stream: an int as is, an object's ``__cuda_stream__`` or
    ``cuda_stream`` (torch streams)."""
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return stream.__cuda_stream__()[1]
    if hasattr(stream, "cuda_stream"):
        return stream.cuda_stream
    return int(stream)
