"""Per-partition produce traffic, handed to the controller's auto-scaler.

Each append adds its bytes and records to two exponentially decaying sums of the
partition: one over ``window_ms`` (the rate the scaler compares with the target) and one
over a fifth of it (how the rate moves now: a rate falling fast shows there first). The
controller reads them through ``RoutingKeyTraffic`` with each partition's point in the
key space (DESIGN.md section 3), so it splits segments only between partitions and
where the traffic divides.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from tidegate.core.controller.api import KeyTraffic
from tidegate.gateway.log.topics import partition_point

#: The short window is this fraction of the long one.
RECENT_WINDOW_FRACTION = 0.2

#: topic -> its partition count, or None for a topic this gateway does not know.
PartitionCount = Callable[[str], int | None]


class _Meters:
    """Exponentially decaying sums of bytes and events over the long and the short
    window (a sum decays by ``exp(-dt / window)``; the rate is ``sum / window``)."""

    __slots__ = ("t", "long_bytes", "long_events", "short_bytes", "short_events")

    def __init__(self, now: float) -> None:
        self.t = now
        self.long_bytes = self.long_events = self.short_bytes = self.short_events = 0.0

    def decay(self, now: float, long_s: float) -> None:
        dt = now - self.t
        if dt > 0:
            f = math.exp(-dt / long_s)
            g = f ** (1 / RECENT_WINDOW_FRACTION)  # exp(-dt / short window)
            self.long_bytes *= f
            self.long_events *= f
            self.short_bytes *= g
            self.short_events *= g
            self.t = now


class PartitionTraffic:
    """Implements ``RoutingKeyTraffic`` for the streams of ``scope`` (the Kafka topics)."""

    def __init__(
        self, scope: str, window_ms: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.scope = scope
        self._long_s = window_ms / 1000
        self._short_s = self._long_s * RECENT_WINDOW_FRACTION
        self._clock = clock
        self._meters: dict[tuple[str, int], _Meters] = {}
        self._partitions: PartitionCount | None = None

    def bind(self, partitions: PartitionCount) -> None:
        """Start answering for topics (the gateway's topic registry is loaded)."""
        self._partitions = partitions

    def record(self, topic: str, partition: int, nbytes: int, events: int) -> None:
        now = self._clock()
        m = self._meters.get((topic, partition))
        if m is None:
            m = self._meters[(topic, partition)] = _Meters(now)
        m.decay(now, self._long_s)
        m.long_bytes += nbytes
        m.long_events += events
        m.short_bytes += nbytes
        m.short_events += events

    def rates(self, topic: str, partition: int) -> tuple[float, float, float, float]:
        """bytes/s, events/s, recent bytes/s, recent events/s."""
        m = self._meters.get((topic, partition))
        if m is None:
            return 0.0, 0.0, 0.0, 0.0
        m.decay(self._clock(), self._long_s)
        long_s, short_s = self._long_s, self._short_s
        return (m.long_bytes / long_s, m.long_events / long_s,
                m.short_bytes / short_s, m.short_events / short_s)

    def key_traffic(self, scope: str, stream: str) -> Sequence[KeyTraffic] | None:
        if scope != self.scope:
            return None
        count = self._partitions(stream) if self._partitions is not None else None
        if not count:
            return []  # not loaded yet, or being created: leave the stream alone
        return [KeyTraffic(partition_point(p), *self.rates(stream, p)) for p in range(count)]

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._meters if k[0] == topic]:
            del self._meters[key]
