"""Smoothed per-segment traffic (bytes/s, events/s) for the auto-scaler.

Exponentially decaying sums with time constant ``window_s``: a sum decays by
``exp(-dt / window_s)`` and each append adds its bytes and events; the rate is
``sum / window_s``, which converges to the true rate for steady traffic.
"""

from __future__ import annotations

import math
from collections.abc import Callable


class TrafficMeter:
    __slots__ = ("_bytes", "_events", "_t")

    def __init__(self, now: float) -> None:
        self._bytes = 0.0
        self._events = 0.0
        self._t = now

    def _decay(self, now: float, window_s: float) -> None:
        dt = now - self._t
        if dt > 0:
            f = math.exp(-dt / window_s)
            self._bytes *= f
            self._events *= f
            self._t = now

    def record(self, now: float, window_s: float, nbytes: int, events: int) -> None:
        self._decay(now, window_s)
        self._bytes += nbytes
        self._events += events

    def rates(self, now: float, window_s: float) -> tuple[float, float]:
        self._decay(now, window_s)
        return self._bytes / window_s, self._events / window_s


class Traffic:
    def __init__(self, clock: Callable[[], float], window_ms: int) -> None:
        self._clock = clock
        self._window_s = window_ms / 1000
        self._meters: dict[str, TrafficMeter] = {}

    def record(self, name: str, nbytes: int, events: int) -> None:
        now = self._clock()
        m = self._meters.get(name)
        if m is None:
            m = self._meters[name] = TrafficMeter(now)
        m.record(now, self._window_s, nbytes, events)

    def rates(self, name: str) -> tuple[float, float]:
        m = self._meters.get(name)
        if m is None:
            return 0.0, 0.0
        return m.rates(self._clock(), self._window_s)

    def forget(self, name: str) -> None:
        self._meters.pop(name, None)
