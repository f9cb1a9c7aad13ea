"""Connection limits of the Kafka listener, with Kafka's names: ``max.connections``,
``max.connections.per.ip``, ``max.connections.per.ip.overrides`` and
``connections.max.idle.ms``.

- ``max.connections`` of 0 (the default) is chosen from the file-descriptor limit, raised
  from soft to hard at start (``raise_fd_limit``): what is left after ``FD_RESERVE`` for
  the store's files, listeners and the like.
- A connection over a limit is closed as it is accepted; refusals are logged at most once
  per ``REFUSAL_LOG_INTERVAL_S`` with their count, so a flood of them cannot flood the log.
- A connection with no request read and no answer written for ``connections.max.idle.ms``
  while nothing of it is in flight is closed, as Kafka's selector does: idle sockets
  cannot hold the limits for good.
"""

from __future__ import annotations

import logging
import resource
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: File descriptors kept for everything but client connections (segment files, RocksDB,
#: Tier-2, the REST and gRPC listeners): at least this many, or a quarter of the limit.
FD_RESERVE = 256
REFUSAL_LOG_INTERVAL_S = 1.0


def raise_fd_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("file-descriptor limit stays %d (hard %d): %s", soft, hard, exc)
    return int(soft)


def max_connections_for_fd_limit(fd_limit: int) -> int:
    """Client connections a process with ``fd_limit`` descriptors can take."""
    return max(1, fd_limit - max(FD_RESERVE, fd_limit // 4))


def parse_ip_overrides(value: str) -> dict[str, int]:
    """Kafka's ``max.connections.per.ip.overrides``: ``"host:count,host:count"``."""
    out: dict[str, int] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(
                f"max.connections.per.ip.overrides: expected HOST:COUNT, got {item!r}"
            )
        out[host.strip().strip("[]")] = int(count)
    return out


class ConnectionLimits:
    """Counts connections per address and decides which are let in."""

    def __init__(
        self,
        max_connections: int,
        per_ip: int,
        per_ip_overrides: dict[str, int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_connections = max_connections
        self._per_ip = per_ip
        self._overrides = per_ip_overrides
        self._clock = clock
        self.total = 0
        self._by_ip: dict[str, int] = {}
        self.refused = 0  # since start, for tests and stats
        self._unlogged = 0
        self._unlogged_reason = ""
        self._logged_at = float("-inf")

    def admit(self, ip: str) -> bool:
        """Count a new connection from ``ip`` if the limits let it in (then ``release``
        it once closed)."""
        per_ip = self._overrides.get(ip, self._per_ip)
        if self.total >= self.max_connections:
            self._refuse(f"max.connections {self.max_connections} reached")
            return False
        have = self._by_ip.get(ip, 0)
        if per_ip > 0 and have >= per_ip:
            self._refuse(f"max.connections.per.ip {per_ip} reached by {ip}")
            return False
        self.total += 1
        self._by_ip[ip] = have + 1
        return True

    def release(self, ip: str) -> None:
        self.total -= 1
        left = self._by_ip[ip] - 1
        if left:
            self._by_ip[ip] = left
        else:
            del self._by_ip[ip]

    def _refuse(self, reason: str) -> None:
        self.refused += 1
        self._unlogged += 1
        self._unlogged_reason = reason
        now = self._clock()
        if now - self._logged_at >= REFUSAL_LOG_INTERVAL_S:
            log.warning(
                "refused %d connection(s) since the last such line; last: %s",
                self._unlogged,
                reason,
            )
            self._logged_at = now
            self._unlogged = 0
