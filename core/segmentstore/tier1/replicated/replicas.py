"""``Replicas``: the replicated log's connections to plog servers, with the calls it
makes on a whole persistence group (create, seal at the smallest end, delete) and the
servers it has given up on.

A server is *suspect* once a call to it failed or went unanswered for ``timeout_ms``:
its connection is closed (so its late answers are never seen) and new plogs avoid it
for ``suspect_ms``. A watchdog closes any connection whose oldest request waited longer
than ``timeout_ms`` (a stopped server answers nothing but keeps its socket open).

Suspicion is shared by every log of a node (``Suspicions``): a server one log waited
``timeout_ms`` for is given up on by all of them at once, and a container recovered here
after a move does not wait for it again. The cluster node also gives up on a plog server
as soon as its node's ZooKeeper session ends (a frozen node's server keeps its socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import weakref
from collections.abc import Callable, Iterable

from tidegate.core.plog.wire import (
    OFFSET_MAX,
    STATUS_NAMES,
    U64,
    U64U32,
    U64U64,
    Op,
    Status,
    pack_id,
)
from tidegate.core.segmentstore.tier1.api import DataLogError, DataLogFencedError
from tidegate.core.segmentstore.tier1.replicated.conn import (
    Answer,
    PlogConnection,
    ServerUnavailableError,
)
from tidegate.core.segmentstore.tier1.replicated.meta import PlogCoordinator

log = logging.getLogger(__name__)


class TooFewServersError(DataLogError):
    """Fewer live plog servers than the replication factor: ``missing`` more are needed."""

    def __init__(self, message: str, missing: int = 0) -> None:
        super().__init__(message)
        self.missing = missing


class NoReplicaError(DataLogError):
    """No server of a plog's group holds it (or none answers)."""


def status_name(status: int) -> str:
    return STATUS_NAMES.get(status, str(status))


class Suspicions:
    """The plog servers given up on, and when, shared by the ``Replicas`` of one node's
    logs: each is told when a server becomes suspect, so it closes its connection
    (pending calls fail) and its log fails over from plogs on that server."""

    def __init__(self, suspect_ms: int = 10_000) -> None:
        self.suspect_s = suspect_ms / 1000
        self.since: dict[str, float] = {}  # server id -> when it became suspect
        #: Servers whose node left the cluster: suspect until it is back (or answers).
        self.gone: set[str] = set()
        self._members: weakref.WeakSet[Replicas] = weakref.WeakSet()

    def join(self, replicas: Replicas) -> None:
        self._members.add(replicas)

    def is_suspect(self, sid: str) -> bool:
        if sid in self.gone:
            return True
        at = self.since.get(sid)
        if at is None:
            return False
        if time.monotonic() - at > self.suspect_s:
            del self.since[sid]
            return False
        return True

    def suspect(self, sid: str, reason: str, *, until_back: bool = False) -> None:
        """``until_back``: its node left; suspect until ``clear`` (not only ``suspect_ms``)."""
        first = not self.is_suspect(sid)
        if first:
            log.warning("plog server %s given up on: %s", sid, reason)
        self.since[sid] = time.monotonic()
        if until_back:
            self.gone.add(sid)
        for replicas in list(self._members):
            replicas.given_up(sid, reason, first)

    def clear(self, sid: str) -> None:
        self.since.pop(sid, None)
        self.gone.discard(sid)


class Replicas:
    def __init__(
        self,
        coordinator: PlogCoordinator,
        *,
        timeout_ms: int,
        suspect_ms: int = 10_000,
        rng: random.Random | None = None,
        on_suspect: Callable[[str], None] | None = None,
        suspicions: Suspicions | None = None,
    ) -> None:
        """``suspicions``: shared with the node's other logs (default: this log's own)."""
        self._coordinator = coordinator
        self.timeout_s = timeout_ms / 1000
        self._suspect_s = suspect_ms / 1000
        self._rng = rng or random.Random()
        self._on_suspect = on_suspect
        self.addresses: dict[str, tuple[str, int]] = {}
        self._conns: dict[str, PlogConnection] = {}
        self.suspicions = suspicions if suspicions is not None else Suspicions(suspect_ms)
        self.suspicions.join(self)
        #: Servers that refused a plog for lack of disk -> when: new plogs avoid them
        #: for ``suspect_ms``, but their connections (and plogs) are kept.
        self.full: dict[str, float] = {}
        self._watchdog: asyncio.Task[None] | None = None
        #: When ``judge`` last ran, and when this process was last found standing still.
        self._judged: float | None = None
        self._awake_since = float("-inf")

    def start(self) -> None:
        self._watchdog = asyncio.ensure_future(self._watch())

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    async def _watch(self) -> None:
        period = max(0.01, min(self.timeout_s / 4, 0.25))
        while True:
            await asyncio.sleep(period)
            self.judge(time.monotonic())

    def judge(self, now: float) -> None:
        """Give up on servers with a request unanswered for ``timeout_ms``, counted from
        when this process last stood still (frozen, or its loop held up) if that is later:
        such silence was its own, not the servers'."""
        if self._judged is not None and now - self._judged > self.timeout_s / 2:
            self._awake_since = now
        self._judged = now
        for sid, conn in list(self._conns.items()):
            if min(conn.oldest_age_s(now), now - self._awake_since) > self.timeout_s:
                self.suspect(sid, f"no answer in {self.timeout_s * 1000:.0f} ms")

    def is_suspect(self, sid: str) -> bool:
        return self.suspicions.is_suspect(sid)

    def suspect(self, sid: str, reason: str) -> None:
        """Give up on ``sid`` (every log of the node sharing these suspicions does)."""
        self.suspicions.suspect(sid, reason)

    def given_up(self, sid: str, reason: str, first: bool) -> None:
        """``sid`` became suspect: close its connection (its pending calls fail)."""
        conn = self._conns.pop(sid, None)
        if conn is not None:
            conn.close(reason)
        if first and self._on_suspect is not None:
            self._on_suspect(sid)

    async def refresh(self) -> dict[str, tuple[str, int]]:
        try:
            live = await self._coordinator.live_servers()
        except Exception as exc:  # noqa: BLE001 - any coordination failure is a log error
            raise DataLogError(f"cannot list plog servers: {exc!r}") from exc
        self.addresses.update(live)
        return live

    def conn(self, sid: str) -> PlogConnection:
        """A connection to ``sid`` (made if there is none); its address must be known."""
        conn = self._conns.get(sid)
        if conn is None or conn.closed:
            addr = self.addresses.get(sid)
            if addr is None:
                raise ServerUnavailableError(f"{sid}: address unknown")
            conn = self._conns[sid] = PlogConnection(sid, *addr, connect_timeout_s=self.timeout_s)
        return conn

    async def call(self, sid: str, op: int, *parts: bytes | memoryview) -> Answer:
        """One request answered within the timeout; ``ServerUnavailableError`` otherwise
        (the server is then suspect)."""
        try:
            if sid not in self.addresses:
                await self.refresh()
            fut = self.conn(sid).request(op, *parts)
            return await asyncio.wait_for(fut, self.timeout_s)
        except (ServerUnavailableError, TimeoutError) as exc:
            self.suspect(sid, repr(exc))
            raise ServerUnavailableError(f"{sid}: {exc!r}") from exc

    # ------------------------------------------------------------ groups

    async def choose_group(self, count: int, least: int | None = None) -> list[str]:
        """``count`` healthy servers at random; while fewer are healthy, all of them if
        they are at least ``least`` (default ``count``)."""
        least = count if least is None else min(least, count)
        live = await self.refresh()
        healthy = self._healthy(live)
        if len(healthy) < least and await self._probe([s for s in live if self.is_suspect(s)]):
            healthy = self._healthy(live)
        if len(healthy) < least:
            needs = f"the replication factor needs {count}"
            if least < count:
                needs += f" (at least {least} while servers are down)"
            full = sorted(s for s in live if s not in healthy and not self.is_suspect(s))
            room = f", {len(full)} more without disk room" if full else ""
            raise TooFewServersError(
                f"{len(healthy)} live plog servers ({', '.join(healthy) or 'none'}){room}, {needs}",
                least - len(healthy),
            )
        return self._rng.sample(healthy, min(count, len(healthy)))

    def _healthy(self, live: Iterable[str]) -> list[str]:
        now = time.monotonic()
        return sorted(
            s for s in live if not self.is_suspect(s) and now - self.full.get(s, -1e9) > self._suspect_s
        )

    async def _probe(self, sids: list[str]) -> bool:
        """Ask each suspect server, on a connection of its own, for any answer: one that
        answers (restarted, resumed) is healthy again. Only when too few servers are
        healthy: otherwise a suspect waits out ``suspect_ms``. Whether any answered."""

        async def probe(sid: str) -> bool:
            conn = PlogConnection(sid, *self.addresses[sid], connect_timeout_s=self.timeout_s)
            try:
                await asyncio.wait_for(conn.request(Op.INFO, pack_id("probe")), self.timeout_s)
            except (ServerUnavailableError, TimeoutError):
                return False
            finally:
                conn.close()
            self.suspicions.clear(sid)
            log.info("plog server %s answers again", sid)
            return True

        return any(await asyncio.gather(*(probe(s) for s in sids if s in self.addresses)))

    async def create(self, plog_id: str, servers: list[str], capacity: int) -> None:
        """Create ``plog_id`` on every server of the group, or on none (what was made is
        deleted again, the failed servers become suspect)."""
        body = (pack_id(plog_id), U64.pack(capacity))
        answers = await asyncio.gather(
            *(self.call(s, Op.CREATE, *body) for s in servers), return_exceptions=True
        )
        failed = []
        for sid, a in zip(servers, answers, strict=True):
            if isinstance(a, BaseException):
                failed.append(sid)
            elif a[0] == Status.NO_SPACE:
                log.warning("plog server %s has no room for a plog: %s", sid, bytes(a[1]).decode(errors="replace"))
                self.full[sid] = time.monotonic()
                failed.append(sid)
            elif a[0] != Status.OK:
                self.suspect(sid, f"create refused: {status_name(a[0])} {bytes(a[1])!r}")
                failed.append(sid)
        if failed:
            await self.delete(plog_id, [s for s in servers if s not in failed])
            raise ServerUnavailableError(f"creating {plog_id} failed on {failed}")

    async def delete(self, plog_id: str, servers: Iterable[str]) -> None:
        """Best effort: a server that is down or suspect keeps the plog (the caller's
        record of it is gone, so nothing reads it again, and the server's orphan sweep,
        ``core/plog/sweep.py``, deletes it). Suspect servers are not asked: a frozen one
        would hold a recovery up for ``timeout_ms``."""
        ids = [s for s in servers if not self.is_suspect(s)]
        await asyncio.gather(
            *(self.call(s, Op.DELETE, pack_id(plog_id)) for s in ids), return_exceptions=True
        )

    async def seal_min(self, plog_id: str, servers: list[str], epoch: int) -> int:
        """Seal ``plog_id`` at the smallest end its reachable servers hold.

        First every server seals at its own durable end (no append lands after that),
        then all of them at the smallest such end, which holds every append any owner
        acknowledged (each was durable on all of them). A server that lost the plog is
        left out; ``NoReplicaError`` if none holds it."""
        ends: dict[str, int] = {}
        first = await asyncio.gather(
            *(self._seal(s, plog_id, epoch, OFFSET_MAX) for s in servers if not self.is_suspect(s)),
            return_exceptions=True,
        )
        for a in first:
            if isinstance(a, DataLogFencedError):
                raise a
            if isinstance(a, tuple):
                ends[a[0]] = a[1]
        if not ends:
            raise NoReplicaError(f"no server of {servers} holds plog {plog_id}")
        end = min(ends.values())
        await asyncio.gather(
            *(self._seal(s, plog_id, epoch, end) for s in ends), return_exceptions=True
        )
        return end

    async def _seal(self, sid: str, plog_id: str, epoch: int, offset: int) -> tuple[str, int]:
        status, body = await self.call(sid, Op.SEAL, pack_id(plog_id), U64U64.pack(epoch, offset))
        if status == Status.OK:
            return sid, U64.unpack_from(body)[0]
        if status == Status.FENCED:
            end, by = U64U64.unpack_from(body)
            raise DataLogFencedError(f"plog {plog_id} sealed at {end} by epoch {by} > {epoch}")
        raise NoReplicaError(f"{sid}: seal of {plog_id}: {status_name(status)} {bytes(body)!r}")

    async def read(self, sid: str, plog_id: str, offset: int, max_bytes: int) -> memoryview:
        """Bytes of ``plog_id`` from ``offset`` (at most ``max_bytes``; fewer at its end)."""
        status, body = await self.call(sid, Op.READ, pack_id(plog_id), U64U32.pack(offset, max_bytes))
        if status != Status.OK:
            raise NoReplicaError(f"{sid}: read of {plog_id}: {status_name(status)}")
        return body[9:]

    async def aclose(self) -> None:
        self.close()
        with contextlib.suppress(Exception):
            await asyncio.sleep(0)
