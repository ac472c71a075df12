"""What machine the numbers come from, and its copy bandwidth (the ceiling we compare with)."""

from __future__ import annotations

import os
import platform

import numpy as np

from .timing import interleaved


def describe() -> dict:
    """CPU model, cores, library versions: enough to tell two machines' numbers apart."""
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "platform": platform.platform()}
    try:
        import numba

        from ..backends.cpu import runtime

        info.update(numba=numba.__version__, threads=runtime.num_threads(),
                    threading_layer=runtime.threading_layer())
    except ImportError:
        pass
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        pass
    from .. import __version__

    info["infiniop"] = __version__
    return info


_OPS: dict = {}


def _op(name: str, arity: int):
    if name not in _OPS:
        from ..elementwise import NUMERIC, elementwise

        fn = (lambda m, x: x) if arity == 1 else (lambda m, x, y: x + y)
        _OPS[name] = elementwise(f"bench_{name}", ("x", "y")[:arity], NUMERIC, fn, register=False)
    return _OPS[name]


def bandwidth(nbytes: int = 512 << 20, rounds: int = 5) -> dict:
    """The machine's streaming bandwidth in GB/s (bytes read + written), two ways:

    - ``copy``: one array read, one written (``np.copyto`` and ours, non-temporal stores);
    - ``triad``: two read, one written (``np.add`` and ours): what binary operators move.

    Each ceiling is the best implementation's median. On many CPUs reads are cheaper than
    writes, so the triad ceiling is higher than the copy ceiling: each case is compared with the
    ceiling of its own traffic pattern (one input: copy; two or more: triad)."""
    from ..handle import create_handle
    from ..memory import empty_aligned
    from ..tensor import TensorDescriptor

    n = nbytes // 4
    x, y, z = (empty_aligned(n, np.float32) for _ in range(3))
    for v in (x, y, z):
        v.fill(1.0)
    d = TensorDescriptor.from_array(x)
    h = create_handle("cpu")
    copy, triad = _op("copy", 1).create_descriptor(h, d, d), _op("add", 2).create_descriptor(h, d, d, d)
    t = interleaved({"copy/numpy": lambda: np.copyto(z, x),
                     "copy/infiniop": lambda: copy.calculate(None, z, x),
                     "triad/numpy": lambda: np.add(x, y, out=z),
                     "triad/infiniop": lambda: triad.calculate(None, z, x, y)},
                    rounds=rounds, min_time=0.05)
    gbps = {k: (2 if k.startswith("copy") else 3) * n * 4 / v.median / 1e9 for k, v in t.items()}
    out = {k.replace("/", "_") + "_gbps": v for k, v in gbps.items()}
    out["copy_gbps"] = max(gbps["copy/numpy"], gbps["copy/infiniop"])
    out["triad_gbps"] = max(gbps["triad/numpy"], gbps["triad/infiniop"])
    out["array_bytes"] = n * 4
    return out
