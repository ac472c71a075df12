"""What this CPU is, from ``/proc/cpuinfo`` and sysfs (no Numba or LLVM import: kernel sources are
generated in processes that never start Numba)."""

from __future__ import annotations

import os
from functools import cache


@cache
def _fields() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key and key not in out:
                    out[key] = value.strip()
                if not line.strip() and out:
                    break  # the first processor is enough
    except OSError:
        pass
    return out


@cache
def last_level_cache_bytes() -> int | None:
    """Size of the largest CPU cache (Linux sysfs), or None where it cannot be read."""
    best = None
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in os.listdir(base):
            if not index.startswith("index"):
                continue
            with open(os.path.join(base, index, "size")) as f:
                text = f.read().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            size = int(text.rstrip("KMG")) * mult
            best = size if best is None else max(best, size)
    except (OSError, ValueError):
        return None
    return best


def intel() -> bool:
    return _fields().get("vendor_id") == "GenuineIntel"


def avx512() -> bool:
    """AVX-512F: 32 vector registers of 64 bytes (AVX2: 16 of 32)."""
    return "avx512f" in _fields().get("flags", "").split()


def compiles_avx512() -> bool:
    """Whether Numba compiles for this CPU with AVX-512 (not for a named other CPU or feature
    set: ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES``), so AVX-512 intrinsics may be emitted."""
    name = os.environ.get("NUMBA_CPU_NAME", "host")
    features = os.environ.get("NUMBA_CPU_FEATURES")
    return avx512() and name == "host" and (features is None or "+avx512f" in features)


@cache
def fast_gathers() -> bool:
    """Whether 16-lane gathers run at the hardware's speed: AVX-512, and no microcode
    mitigation of Gather Data Sampling (CVE-2022-40982), which makes every gather of affected
    Intel CPUs several times slower (Linux reports it in sysfs; AMD CPUs are not affected).
    ``INFINIOP_TABLES=0``/``1`` overrides it for the lookups that depend on it (tabulated.py)."""
    env = os.environ.get("INFINIOP_TABLES")
    if env in ("0", "1"):
        return env == "1"
    if not compiles_avx512():
        return False
    try:
        with open("/sys/devices/system/cpu/vulnerabilities/gather_data_sampling") as f:
            state = f.read().strip()
    except OSError:
        return _fields().get("vendor_id") == "AuthenticAMD"
    return state == "Not affected" or state.startswith("Vulnerable")


# Rows of the elementwise tiled kind's micro-tiles: a 16 x 16 float32 tile is 16 registers on
# AVX-512, but 32 of AVX2's 16 (LLVM spilled ~100 of them per tile on an AMD EPYC)
TILE_ROW_BYTES = 64 if avx512() else 32
