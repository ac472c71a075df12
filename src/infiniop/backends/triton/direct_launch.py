"""Launch a compiled Triton kernel without the JIT's per-call dispatch.

``kernel[grid](*args)`` binds the arguments, builds the specialisation key and looks the
compiled kernel up on every call: 47 us of host time per 4K-element sub on an H200 machine
(Triton 3.6), where torch takes 5.7 us. A launch's scalars are fixed at create; of the
operand addresses only their 16-byte alignment enters the key. So the first launch of each
alignment pattern goes through the JIT (which compiles or finds the kernel and returns it) and
later ones call that kernel's launcher directly (6.1 us measured the same way).

The launcher's calling convention is Triton's internal one, stable from 3.3 on (every argument,
constexprs included, after the launch metadata); it was measured on 3.6. Other versions, a
launch hook (profilers set one), another current device or ``INFINIOP_TRITON_DIRECT=0`` take
the JIT path.
"""

from __future__ import annotations

import os

from .memory import stream_handle


def _enabled() -> bool:
    if os.environ.get("INFINIOP_TRITON_DIRECT", "1") == "0":
        return False
    try:
        import triton
    except ImportError:
        return False
    major, minor = (int(x) for x in triton.__version__.split(".")[:2])
    return (major, minor) >= (3, 6)


ENABLED = _enabled()


def _hooked(hook) -> bool:
    """A launch hook is set: None (Triton < 3.5) or an empty HookChain (later) is none."""
    return hook is not None and bool(getattr(hook, "calls", True))


class DirectLaunch:
    """``launch(addresses, stream)`` -> True when launched directly, False when the caller must
    launch through the JIT once and hand the result to ``remember``."""

    def __init__(self, origins, grid: int, tail_args, device_id):
        self._origins = tuple(origins)
        self._grid = grid
        self._tail = tuple(tail_args)
        self._device_id = device_id or 0
        self._compiled: dict = {}

    def _key(self, addresses) -> tuple:
        return tuple((a + o) & 15 == 0 for a, o in zip(addresses, self._origins))

    def launch(self, addresses, stream) -> bool:
        ck = self._compiled.get(self._key(addresses))
        if ck is None or _hooked(self._knobs.launch_enter_hook):
            return False
        dev = self._device()
        if dev != self._device_id:
            return False
        st = self._stream(dev) if stream is None else stream_handle(stream)
        ck.run(self._grid, 1, 1, st, ck.function, ck.packed_metadata, None, None, None,
               *[a + o for a, o in zip(addresses, self._origins)], *self._tail)
        return True

    def remember(self, addresses, compiled) -> None:
        if not hasattr(self, "_device"):  # looked up once a kernel exists (i.e. on a GPU)
            import torch
            from triton import knobs

            self._knobs = knobs.runtime
            # what torch.cuda.current_device() returns, without its Python wrapper
            self._device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
            self._stream = torch._C._cuda_getCurrentRawStream
        if compiled is not None and self._device() == self._device_id:
            self._compiled[self._key(addresses)] = compiled

    def fast(self, order):
        """``go(addresses, stream) -> bool``: ``launch`` unrolled for one operand order
        (``order[j]``: the index in ``addresses`` of the kernel's j-th pointer), for the
        descriptors' per-call fast path (~1.5 us less than ``launch``)."""
        n = len(order)
        ps = [f"p{j}" for j in range(n)]
        src = (
            "def go(u, stream):\n"
            + "".join(f"    p{j} = u[{i}] + {o}\n" for j, (i, o) in enumerate(zip(order,
                                                                             self._origins)))
            + f"    ck = compiled.get(({''.join(f'{p} & 15 == 0, ' for p in ps)}))\n"
            "    if ck is None or hooked(me._knobs.launch_enter_hook):\n        return False\n"
            "    dev = me._device()\n"
            f"    if dev != {self._device_id}:\n        return False\n"
            "    ck.run(grid, 1, 1, me._stream(dev) if stream is None else handle(stream), "
            f"ck.function, ck.packed_metadata, None, None, None, {', '.join(ps)}, *tail)\n"
            "    return True\n")
        # (me._knobs & co. exist once a kernel was remembered, i.e. once ck can be found)
        env = {"compiled": self._compiled, "me": self, "grid": self._grid, "tail": self._tail,
               "handle": stream_handle, "hooked": _hooked}
        exec(src, env)
        return env["go"]
