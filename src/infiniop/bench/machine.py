"""What machine the numbers come from, and its copy bandwidth (the ceiling we compare with)."""

from __future__ import annotations

import os
import platform

import numpy as np

from ..backends.cpu.cpuinfo import last_level_cache_bytes
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
    from .suite import _torch

    torch = _torch()  # (imported as a user gets it alone: see there)
    if torch is not None:
        info["torch"] = torch.__version__
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

    - ``copy``: one array read, one written (``np.copyto``, our copy operator and our rearrange
      memcpy; ours with non-temporal stores);
    - ``triad``: two read, one written (``np.add`` and ours): what binary operators move.

    Each ceiling is the best round of the best implementation: a ceiling is the most the memory
    was seen to deliver, and on a shared machine a round that a neighbour slowed down says
    nothing about the hardware. On many CPUs reads are cheaper than writes, so the triad ceiling
    is higher than the copy ceiling: each case is compared with the ceiling of its own traffic
    pattern (one input: copy; two or more: triad). ``nbytes`` per array should be well above
    the last-level cache (see ``last_level_cache_bytes``)."""
    from ..handle import create_handle
    from ..memory import empty_aligned
    from ..rearrange import create_rearrange_descriptor
    from ..tensor import TensorDescriptor

    n = nbytes // 4
    x, y, z = (empty_aligned(n, np.float32) for _ in range(3))
    for v in (x, y, z):
        v.fill(1.0)
    d = TensorDescriptor.from_array(x)
    h = create_handle("cpu")
    copy, triad = _op("copy", 1).create_descriptor(h, d, d), _op("add", 2).create_descriptor(h, d, d, d)
    memcpy = create_rearrange_descriptor(h, d, d)
    t = interleaved({"copy/numpy": lambda: np.copyto(z, x),
                     "copy/infiniop": lambda: copy.calculate(None, z, x),
                     "copy/rearrange": lambda: memcpy.calculate(z, x),
                     "triad/numpy": lambda: np.add(x, y, out=z),
                     "triad/infiniop": lambda: triad.calculate(None, z, x, y)},
                    rounds=rounds, min_time=0.05)
    gbps = {k: (2 if k.startswith("copy") else 3) * n * 4 / v.low / 1e9 for k, v in t.items()}
    out = {k.replace("/", "_") + "_gbps": v for k, v in gbps.items()}
    out["copy_infiniop_gbps"] = max(out["copy_infiniop_gbps"], out.pop("copy_rearrange_gbps"))
    out["copy_gbps"] = max(gbps["copy/numpy"], gbps["copy/infiniop"], gbps["copy/rearrange"])
    out["triad_gbps"] = max(gbps["triad/numpy"], gbps["triad/infiniop"])
    out["array_bytes"] = n * 4
    out["llc_bytes"] = last_level_cache_bytes()
    return out


def twin(nbytes: int, streams_in: int):
    """A callable moving ``nbytes`` the way a case does: a copy (one input read, one written) or,
    for cases reading two or more arrays, an add (two read, one written), our streaming kernels.
    Timed in the case's own interleaved rounds, it is the ceiling at the case's moment: on a
    shared machine the bandwidth can change by half between the start and the end of a run.
    Returns (callable, bytes it moves)."""
    from ..handle import create_handle
    from ..memory import empty_aligned
    from ..tensor import TensorDescriptor

    k = 2 if streams_in <= 1 else 3
    n = max(nbytes // (4 * k), 16)
    arrays = [empty_aligned(n, np.float32) for _ in range(k)]
    for a in arrays:
        a.fill(1.0)
    d = TensorDescriptor.from_array(arrays[0])
    desc = _op("copy" if k == 2 else "add", k - 1).create_descriptor(create_handle("cpu"), *[d] * k)
    return (lambda: desc.calculate(None, *arrays)), k * n * 4


def best_of(first: dict, *later: dict) -> dict:
    """One ceiling from several measurements of ``bandwidth`` (taken before and after the cases):
    the best rate of each kind, with every measurement kept (``copy_runs``/``triad_runs``)."""
    out = dict(first)
    runs = [first, *later]
    for key in first:
        if key.endswith("_gbps"):
            out[key] = max(r[key] for r in runs)
    out["copy_runs"] = [r["copy_gbps"] for r in runs]
    out["triad_runs"] = [r["triad_gbps"] for r in runs]
    return out


def bandwidth_line(bw: dict) -> str:
    """The ceiling as printed above the table, with each measurement it is the best of."""
    def runs(kind):
        return "/".join(f"{v:.1f}" for v in bw.get(kind + "_runs", [bw[kind + "_gbps"]]))

    return (f"bandwidth: copy {bw['copy_gbps']:.1f} GB/s (best of {runs('copy')} before/after the "
            f"cases; numpy {bw['copy_numpy_gbps']:.1f}, infiniop {bw['copy_infiniop_gbps']:.1f}); "
            f"triad {bw['triad_gbps']:.1f} GB/s (best of {runs('triad')}; numpy "
            f"{bw['triad_numpy_gbps']:.1f}, infiniop {bw['triad_infiniop_gbps']:.1f})")


def rate(records: list[dict], bw: dict) -> None:
    """(Re)compute each case's ``of_ceiling`` against ``bw`` and say why a rate may exceed it:
    ``cache_resident`` when the case's bytes fit in the last-level cache (repeated calls are then
    served partly from the cache, not from memory)."""
    llc = bw.get("llc_bytes")
    for rec in records:
        if "impls" not in rec:
            continue
        ceiling = bw[rec["ceiling"] + "_gbps"]
        for t in rec["impls"].values():
            t["of_ceiling"] = t["gbps"] / ceiling
        rec["cache_resident"] = bool(llc) and rec["bytes"] <= llc


def ceiling_mark(rec: dict) -> str:
    """Mark printed beside %ceil: 'c' (cache-resident) or '!' (above the ceiling from memory)."""
    if rec["impls"]["infiniop"]["of_ceiling"] <= 1.0:
        return ""
    return "c" if rec.get("cache_resident") else "!"


def ceiling_legend(records: list[dict]) -> list[str]:
    """Lines explaining the marks used in the table (none when no rate exceeds the ceiling)."""
    bw = records[0]["bandwidth"]
    marks = {ceiling_mark(r) for r in records[1:] if "impls" in r}
    lines = []
    if "c" in marks:
        lines.append(f"c: the case's data fits in the {bw['llc_bytes'] / 2**20:.0f} MiB last-level "
                     "cache, so repeated calls run from the cache, above the memory ceiling")
    if "!" in marks:
        runs = ", ".join(f"{v:.1f}" for v in bw.get("copy_runs", [bw["copy_gbps"]]))
        lines.append(f"!: above the ceiling from memory: the machine's bandwidth changed during "
                     f"the run (copy ceiling measured {runs} GB/s); compare within rows")
    return lines
