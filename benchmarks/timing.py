"""Interleaved timing: ratios measured in one process, robust to machine noise.

Each candidate runs a short block of steps in turn, round after round, so slow phases of
a shared machine hit every candidate alike; the per-step time of a candidate is the
median over rounds, and ratios are taken against the baseline's median.
"""

import statistics
import time
from typing import Callable, Dict


def interleaved_medians(
    candidates: Dict[str, Callable[[], None]], *, rounds: int = 15, steps: int = 20, warmup: int = 10,
    sync: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.perf_counter,
) -> Dict[str, float]:
    """Median seconds per step of each candidate, by ``clock`` (wall time; ``time.thread_time``
    counts only this thread's CPU time, so time spent descheduled on a shared machine is not counted)."""
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    sync()
    times = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            t0 = clock()
            for _ in range(steps):
                fn()
            sync()
            times[name].append((clock() - t0) / steps)
    return {name: statistics.median(ts) for name, ts in times.items()}
