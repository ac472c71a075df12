"""Interleaved timing: every implementation is timed once per round, rounds alternate, and the
median over rounds is reported, so a noisy neighbour hurts every implementation alike."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median


@dataclass
class Timing:
    median: float  # seconds per call
    low: float
    high: float

    @property
    def spread(self) -> float:
        """(high - low) / median: how much the rounds disagreed."""
        return (self.high - self.low) / self.median if self.median else 0.0


def _per_call(fn: Callable[[], object], min_time: float) -> float:
    """Seconds per call, looping long enough to make the clock's resolution irrelevant."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time or n >= 1 << 20:
            return dt / n
        n = max(n * 2, int(n * min_time / max(dt, 1e-9) * 1.2))


def interleaved(fns: dict[str, Callable[[], object]], rounds: int = 5,
                min_time: float = 0.02) -> dict[str, Timing]:
    """Time each callable ``rounds`` times, alternating between them; warm each up first."""
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            samples[k].append(_per_call(fn, min_time))
    return {k: Timing(median(v), min(v), max(v)) for k, v in samples.items()}
