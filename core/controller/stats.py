"""Counters of what the controller did since it started, for monitoring (``/metrics``).

Counts live in memory only: a restart starts them at zero, as Prometheus counters may.
"""

from __future__ import annotations

from collections import Counter


class ControllerStats:
    def __init__(self) -> None:
        #: (scope, stream, kind) -> completed scales; kind is ``split``, ``merge`` (the
        #: auto-scaler) or ``manual`` (an API call).
        self.scales: Counter[tuple[str, str, str]] = Counter()
        #: (scope, stream, reason) -> completed truncations; reason is ``retention``
        #: (the retention policy) or ``request`` (an API call such as DeleteRecords).
        self.truncations: Counter[tuple[str, str, str]] = Counter()

    def scaled(self, scope: str, stream: str, kind: str) -> None:
        self.scales[(scope, stream, kind)] += 1

    def truncated(self, scope: str, stream: str, reason: str) -> None:
        self.truncations[(scope, stream, reason)] += 1

    def forget(self, scope: str, stream: str) -> None:
        """Drop a deleted stream's counts (a later stream of that name starts afresh)."""
        for counter in (self.scales, self.truncations):
            for key in [k for k in counter if k[0] == scope and k[1] == stream]:
                del counter[key]
