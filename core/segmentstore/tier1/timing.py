"""Latency counts for metrics, kept by the one thread that observes them.

``LatencyCounts`` has no lock: only its owner thread (a Tier-1 writer) calls ``observe``;
a reader on another thread may see one observation's count before its sum, which a
metrics scrape tolerates. The gateway exports it as a Prometheus histogram.
"""

from __future__ import annotations

from bisect import bisect_left

#: Upper bounds in seconds, the same for every latency in tidegate's metrics: fine below
#: 10 ms, where an acknowledged produce should stay, coarse above.
LATENCY_BOUNDS_S: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075,
    0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip


class LatencyCounts:
    __slots__ = ("bounds_s", "counts", "sum_s")

    def __init__(self, bounds_s: tuple[float, ...] = LATENCY_BOUNDS_S) -> None:
        self.bounds_s = bounds_s
        #: ``counts[i]``: observations in ``(bounds_s[i-1], bounds_s[i]]``; the last
        #: slot holds those above every bound.
        self.counts = [0] * (len(bounds_s) + 1)
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds_s, seconds)] += 1
        self.sum_s += seconds

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations at or below it)`` per bound, ending with
        ``(inf, total)``."""
        out: list[tuple[float, int]] = []
        total = 0
        for bound, n in zip((*self.bounds_s, float("inf")), list(self.counts), strict=True):
            total += n
            out.append((bound, total))
        return out
