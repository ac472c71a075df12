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


_COPY = None


def _copy_op():
    global _COPY
    if _COPY is None:
        from ..elementwise import NUMERIC, elementwise

        _COPY = elementwise("bench_copy", ("x",), NUMERIC, lambda m, x: x, register=False)
    return _COPY


def copy_bandwidth(nbytes: int = 512 << 20, rounds: int = 5) -> dict:
    """GB/s (read + write bytes) of a large contiguous copy: NumPy's and ours (non-temporal
    stores). The higher one is the machine's copy ceiling for this run."""
    from ..device import create_handle
    from ..memory import empty_aligned
    from ..tensor import TensorDescriptor

    n = nbytes // 4
    src, dst = empty_aligned(n, np.float32), empty_aligned(n, np.float32)
    src.fill(1.0)
    dst.fill(0.0)
    desc = TensorDescriptor.from_array(src)
    op = _copy_op().create_descriptor(create_handle("cpu"), desc, desc)
    t = interleaved({"numpy": lambda: np.copyto(dst, src),
                     "infiniop": lambda: op.calculate(None, dst, src)}, rounds=rounds, min_time=0.05)
    gbps = {k: 2 * n * 4 / v.median / 1e9 for k, v in t.items()}
    return {"bytes": 2 * n * 4, "numpy_gbps": gbps["numpy"], "infiniop_gbps": gbps["infiniop"],
            "ceiling_gbps": max(gbps.values())}
