"""A connection's security state, and the node's security services handlers reach.

A connection on a SASL listener is *gated*: until it authenticated, and again once its
session expired (KIP-368, ``connections.max.reauth.ms``), only ApiVersions, SaslHandshake
and SaslAuthenticate are served; anything else closes it, as Kafka does.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tidegate.gateway.security.listeners import Listener
from tidegate.gateway.security.tls import ANONYMOUS

if TYPE_CHECKING:
    from tidegate.gateway.security.acls import AclStore
    from tidegate.gateway.security.authorizer import Authorizer
    from tidegate.gateway.security.credentials import CredentialStore
    from tidegate.gateway.security.sasl import Exchange

log = logging.getLogger(__name__)

#: ApiVersions, SaslHandshake, SaslAuthenticate: served before authentication.
PRE_AUTH_KEYS = frozenset((18, 17, 36))
#: Partitions a connection remembers as refused here (``Session.refused_leader``).
REFUSED_KEPT_MAX = 10_000


@dataclass(eq=False)
class Session:
    listener: Listener
    #: Where Metadata, FindCoordinator and DescribeCluster send this client.
    advertised: tuple[str, int]
    client_host: str
    principal: str = ANONYMOUS
    gated: bool = False
    authenticated: bool = True
    exchange: Exchange | None = None
    #: ``time.monotonic()`` when the SASL session ends (KIP-368), or None.
    expires_at: float | None = None
    #: Set after a failed login: the connection closes once the answer is written.
    closing: bool = False
    #: After SaslHandshake v0: the next frames are bare SASL tokens, not requests.
    raw_tokens: bool = False
    #: Partitions whose last produce on this connection was refused as not led here or
    #: with KAFKA_STORAGE_ERROR (``gateway/handlers/produce.py``: the next batch's sequence
    #: gap is ours, not the producer's). At most one entry per partition.
    refused_leader: set[tuple[str, int]] = field(default_factory=set)

    def refused_here(self, topic: str, partition: int) -> None:
        """Note a produce to ``topic``/``partition`` refused as not led here (or with its
        storage unavailable)."""
        if len(self.refused_leader) >= REFUSED_KEPT_MAX:
            self.refused_leader.clear()  # bounded; forgetting one gives back Kafka's answer
        self.refused_leader.add((topic, partition))

    def admits(self, api_key: int) -> bool:
        if api_key in PRE_AUTH_KEYS:
            return True
        if not self.authenticated:
            return False
        return self.expires_at is None or time.monotonic() < self.expires_at


@dataclass(frozen=True, slots=True)
class RawToken:
    """A SASL token answered as a bare size-prefixed frame (SaslHandshake v0)."""

    token: bytes


@dataclass
class LoginLog:
    """Failed logins at warning level, at most ``per_minute`` lines a minute; the lines
    left out are counted in the next one written."""

    per_minute: int
    _window_start: float = 0.0
    _written: int = 0
    _skipped: int = field(default=0)

    def failed(self, principal: str, client: str, mechanism: str, reason: str) -> None:
        now = time.monotonic()
        if now - self._window_start >= 60.0:
            self._window_start, self._written = now, 0
        if self._written >= self.per_minute:
            self._skipped += 1
            return
        self._written += 1
        skipped, self._skipped = self._skipped, 0
        log.warning(
            "failed authentication of %s from %s with %s: %s%s",
            principal or "(no user)", client, mechanism, reason,
            f" ({skipped} more failed logins not logged)" if skipped else "",
        )


class FailedLogins:
    """Failed logins per client address over the last minute. Once an address has
    ``per_minute`` of them, its logins are refused without being checked until the
    oldest is a minute old: a client opening connections in parallel guesses no faster
    (``connection.failed.authentication.delay.ms`` slows one connection only). At most
    ``addresses_max`` addresses are tracked, the least recently failed dropped first."""

    WINDOW_S = 60.0

    def __init__(self, per_minute: int, addresses_max: int = 65536,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._addresses_max = addresses_max
        self._clock = clock
        self._by_host: dict[str, deque[float]] = {}

    def _recent(self, host: str) -> deque[float] | None:
        times = self._by_host.get(host)
        if times is None:
            return None
        oldest = self._clock() - self.WINDOW_S
        while times and times[0] <= oldest:
            times.popleft()
        if not times:
            del self._by_host[host]
            return None
        return times

    def locked(self, host: str) -> bool:
        if self.per_minute <= 0:
            return False
        times = self._recent(host)
        return times is not None and len(times) >= self.per_minute

    def failed(self, host: str) -> None:
        if self.per_minute <= 0:
            return
        times = self._recent(host)
        if times is None:
            times = deque(maxlen=self.per_minute)
            while len(self._by_host) >= self._addresses_max:
                del self._by_host[next(iter(self._by_host))]
        else:
            del self._by_host[host]  # re-inserted last: the most recent failure
        times.append(self._clock())
        self._by_host[host] = times


@dataclass
class Security:
    """What the SASL and ACL handlers work with (``HandlerContext.security``)."""

    mechanisms: list[str]
    credentials: CredentialStore
    acls: AclStore
    reauth_ms: int
    login_log: LoginLog
    failed_logins: FailedLogins
    #: None: no authorizer configured (everything allowed, DescribeAcls answers
    #: SECURITY_DISABLED).
    authorizer: Authorizer | None = None
