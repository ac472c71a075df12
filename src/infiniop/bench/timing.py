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
                min_time: float = 0.02, settle: float = 0.02) -> dict[str, Timing]:
    """Time each callable ``rounds`` times, alternating between them; warm each up first.

    Before each turn: ``settle`` seconds of sleep, then one untimed call. PyTorch's OpenMP
    threads (at their default policy) spin for milliseconds after its calls, on the cores the
    next implementation wants: a 9 ms float32 sub right after torch's took 12.5 ms, 10.5 ms
    after a 10 ms pause (AMD EPYC, 2026-11-28); the untimed call wakes the next one's pool."""
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            if settle:
                time.sleep(settle)
            fn()
            samples[k].append(_per_call(fn, min_time))
    return {k: Timing(median(v), min(v), max(v)) for k, v in samples.items()}
