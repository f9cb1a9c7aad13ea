"""``ReplicatedDurableDataLog``: the Tier-1 ``DurableDataLog`` over plog servers.

The log is a chain of plogs (the seed's log stream) recorded in the coordinator
(``meta.py``); a ``LogAddress`` is ``(the plog's index in the chain, byte position in
it)``. Behaviour, beyond the contract in ``api.py``:

- Appends. Every entry goes, in order, to all servers of the active plog's group, many
  appends in flight, several entries per request. An entry is acknowledged once every
  server of its group has it durable and its plog is recorded in the chain.
- Rolling (the seed's plog switch). When an entry would take the active plog past
  ``plog_bytes_max``, the log moves to a pre-allocated spare at once and keeps sending;
  the old plog is sealed, and the switch is recorded once the old plog is durable on
  all of its servers. Entries in the new plog are acknowledged only after that record.
- Failover (``failover.py``). When a server of a plog in use fails (an error, a closed
  connection, or no answer within ``timeout_ms``), that plog is sealed at the smallest
  end its other servers hold, the seal and a fresh plog on servers still healthy are
  recorded together, the entries below the seal are acknowledged and every later one
  is sent again to the fresh plog: nothing acknowledged is lost (it was on every
  server) or acknowledged twice (an entry is acknowledged from exactly one plog).
- Fencing. ``open`` bumps the epoch in the record, seals the previous owner's active
  plog (servers refuse seals of an older epoch) and records its end before recovery
  reads; the previous owner's next append meets a sealed plog or its next record meets
  a newer version, and it fails with ``DataLogFencedError``.
- Truncation removes whole plogs below the checkpoint from the record, then deletes
  them from their servers.
- Re-replication (``repair.py``). In the background, sealed plogs with fewer live
  servers than the replication factor are copied to healthy servers and their new
  group recorded; an active plog made on a short group is rolled away from once a full
  group is healthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial

from tidegate.core.plog.wire import APPEND_BYTES_MAX, U64, U64U64, Op, Status, pack_id
from tidegate.core.segmentstore.callbacks import DoneCallback, call_now, when_done
from tidegate.core.segmentstore.tier1.api import (
    DataLogClosedError,
    DataLogError,
    DataLogFencedError,
    Entry,
    EntryData,
    LogAddress,
)
from tidegate.core.segmentstore.tier1.replicated.chain import Chain
from tidegate.core.segmentstore.tier1.replicated.conn import Answer, ServerUnavailableError
from tidegate.core.segmentstore.tier1.replicated.failover import seal_and_switch
from tidegate.core.segmentstore.tier1.replicated.meta import (
    LogMeta,
    PlogCoordinator,
    PlogRecord,
    Spare,
)
from tidegate.core.segmentstore.tier1.replicated.reader import (
    ENTRY_HEADER_BYTES,
    entry_header,
    read_chain,
)
from tidegate.core.segmentstore.tier1.replicated.repair import repair_one
from tidegate.core.segmentstore.tier1.replicated.replicas import (
    Replicas,
    Suspicions,
    TooFewServersError,
)
from tidegate.core.segmentstore.tier1.replicated.window import InFlight, WritePlog
from tidegate.tier2.fileio import as_views, split_views

log = logging.getLogger(__name__)

MiB = 1024 * 1024


class ReplicatedDurableDataLog:
    def __init__(
        self,
        name: str,
        coordinator: PlogCoordinator,
        *,
        replication_factor: int = 3,
        min_replicas: int | None = None,
        plog_bytes_max: int = 64 * MiB,
        entry_bytes_max: int = 16 * MiB,
        in_flight_bytes_max: int = 64 * MiB,
        timeout_ms: int = 2000,
        failover_timeout_ms: int = 30_000,
        suspect_ms: int = 10_000,
        repair_interval_ms: int = 5_000,
        seed: int | None = None,
        before_seal_recorded: Callable[[], Awaitable[None]] | None = None,
        suspicions: Suspicions | None = None,
    ) -> None:
        """``before_seal_recorded`` (tests) runs in a failover between sealing a plog
        and recording the seal; ``suspicions``: the servers given up on, shared with the
        node's other logs."""
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ValueError(f"log name {name!r}: letters, digits, '_' and '-' only")
        self.name = name
        self._rf = replication_factor
        # Kafka's min.insync.replicas: while fewer than ``replication_factor`` servers
        # are healthy, new plogs go on as few as this (default: no fewer).
        least = replication_factor if min_replicas is None else min_replicas
        self._min_rf = max(1, min(least, replication_factor))
        self._plog_bytes_max = plog_bytes_max
        self._entry_bytes_max = entry_bytes_max
        self._in_flight_bytes_max = in_flight_bytes_max
        # Room for a whole in-flight window re-sent after a failover, and one big entry.
        self._capacity = plog_bytes_max + in_flight_bytes_max + entry_bytes_max + MiB
        self._failover_timeout_s = failover_timeout_ms / 1000
        self._repair_interval_s = repair_interval_ms / 1000
        self._before_seal_recorded = before_seal_recorded
        self.replicas = Replicas(
            coordinator, timeout_ms=timeout_ms, suspect_ms=suspect_ms, rng=random.Random(seed),
            on_suspect=self._on_suspect, suspicions=suspicions,
        )
        self._epoch = 0
        self._state = "new"  # new -> open -> closed
        self._failed: BaseException | None = None
        self._failure_reported = False  # an append has failed with ``_failed``
        self._chain = Chain(name, coordinator)
        self._segs: list[WritePlog] = []
        self._spares: list[Spare] = []
        self._pending: deque[InFlight] = deque()
        self._unacked: deque[InFlight] = deque()
        self._in_flight_bytes = 0
        self._acked_to = LogAddress(0, 0)
        self._flush_scheduled = False
        self._failing = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._record_wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._spare_task: asyncio.Task[None] | None = None
        self._failover_task: asyncio.Task[None] | None = None
        #: Failovers done (tests and metrics).
        self.failovers = 0
        #: Plogs copied to more servers, active plogs rolled for a full group (``repair.py``).
        self.repairs = 0

    @property
    def epoch(self) -> int:
        return self._epoch

    # ------------------------------------------------------------ open

    async def open(self) -> None:
        if self._state != "new":
            raise DataLogError(f"cannot open a log that is {self._state}")
        self.replicas.start()
        try:
            await self._open()
        except BaseException:
            self.replicas.close()
            raise
        self._state = "open"
        self._spawn(self._recorder())
        self._want_spare()
        if self._repair_interval_s > 0:
            self._spawn(self._repairer())

    async def _open(self) -> None:
        first = await self._chain.take_over(self.replicas, self._rf, self._min_rf, self._capacity)
        self._epoch = self._chain.epoch
        self._segs = [WritePlog(first.index, first.id, first.servers, recorded=True)]
        self._acked_to = LogAddress(first.index, 0)

    # ------------------------------------------------------------ append

    def _check_usable(self) -> None:
        if isinstance(self._failed, DataLogFencedError) and not self._failure_reported:
            # Fenced in the background (a record or a spare): the next append says so.
            self._failure_reported = True
            raise DataLogFencedError(str(self._failed)) from self._failed
        if self._failed is not None:
            raise DataLogClosedError("log closed after a failed append") from self._failed
        if self._state != "open":
            raise DataLogClosedError(f"log is {self._state}")

    async def append(self, entry: Entry) -> LogAddress:
        return await self.append_future(entry)

    def append_future(self, entry: Entry, on_done: DoneCallback | None = None) -> asyncio.Future[LogAddress]:
        fut: asyncio.Future[LogAddress] = asyncio.get_running_loop().create_future()
        try:
            self._check_usable()
            views = as_views(entry)
            size = sum(v.nbytes for v in views)
            if size > self._entry_bytes_max:
                raise DataLogError(f"entry of {size} bytes exceeds {self._entry_bytes_max}")
        except DataLogError as exc:
            fut.set_exception(exc)
            when_done(fut, on_done)
            return fut
        self._idle.clear()
        self._pending.append(InFlight(views, size, fut, on_done))
        self._admit()
        return fut

    def _admit(self) -> None:
        if self._failing or self._failed is not None or not self._segs:
            return
        while self._pending:
            e = self._pending[0]
            size = e.size + ENTRY_HEADER_BYTES
            if self._in_flight_bytes and self._in_flight_bytes + size > self._in_flight_bytes_max:
                break
            seg = self._segs[-1]
            if seg.sent and seg.sent + size > self._plog_bytes_max:
                if not self._spares:
                    self._want_spare()
                    break
                seg = self._roll()
            self._pending.popleft()
            self._assign(e, seg)
            self._in_flight_bytes += size
            self._unacked.append(e)
        if not self._flush_scheduled and any(s.outbox for s in self._segs):
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _assign(self, e: InFlight, seg: WritePlog) -> None:
        e.seg, e.start = seg, seg.sent
        e.end = seg.sent + ENTRY_HEADER_BYTES + e.size
        seg.outbox.append(memoryview(entry_header(e.views, e.size, seg.seed)))
        seg.outbox.extend(e.views)
        seg.sent = e.end

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._failing and self._failed is None:
            self._flush_now()

    def _flush_now(self) -> None:
        for seg in self._segs:
            while seg.outbox:
                part, seg.outbox = split_views(seg.outbox, APPEND_BYTES_MAX)
                n = sum(v.nbytes for v in part)
                head = (pack_id(seg.id), U64.pack(seg.flushed))
                for sid in seg.servers:
                    self._send(seg, sid, Op.APPEND, *head, *part)
                seg.flushed += n

    def _send(self, seg: WritePlog, sid: str, op: int, *parts: bytes | memoryview) -> None:
        try:
            fut = self.replicas.conn(sid).request(op, *parts)
        except ServerUnavailableError as exc:
            self.replicas.suspect(sid, repr(exc))
            return
        fut.add_done_callback(partial(self._on_reply, seg, sid))

    def _on_reply(self, seg: WritePlog, sid: str, fut: asyncio.Future[Answer]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()  # taken even when unwanted: asyncio logs an untaken one as an ERROR
        if self._failed is not None or seg.final is not None:
            return
        if exc is not None:
            self.replicas.suspect(sid, repr(exc))  # starts a failover
            return
        status, body = fut.result()
        if status == Status.OK:
            if len(body) == U64.size:  # an append; a seal answers with its end too
                seg.durable[sid] = max(seg.durable[sid], U64.unpack_from(body)[0])
            self._advance()
            self._record_wake.set()
        elif status in (Status.SEALED, Status.FENCED):
            end, by = U64U64.unpack_from(body)
            if by > self._epoch:
                self._fail(DataLogFencedError(f"plog {seg.id} sealed at {end} by epoch {by} > {self._epoch}"))
            # Sealed by this owner: an append that crossed a failover's seal, resent.
        else:
            self.replicas.suspect(sid, f"refused: status {status} {bytes(body[:200])!r}")

    def _advance(self) -> None:
        progressed = False
        while self._unacked:
            e = self._unacked[0]
            seg = e.seg
            assert seg is not None
            if not seg.recorded or e.end > seg.ack_end():
                break
            self._unacked.popleft()
            self._in_flight_bytes -= e.size + ENTRY_HEADER_BYTES
            self._acked_to = LogAddress(seg.index, e.end)
            progressed = True
            if not e.fut.done():
                e.fut.set_result(LogAddress(seg.index, e.start))
                if e.on_done is not None:
                    call_now(e.on_done, e.fut)
        if progressed:
            self._admit()
        if not self._unacked and not self._pending:
            self._idle.set()

    # ------------------------------------------------------------ rolling

    def _roll(self) -> WritePlog:
        old = self._segs[-1]
        spare = self._spares.pop(0)
        new = WritePlog(old.index + 1, spare.id, spare.servers, recorded=False)
        self._segs.append(new)
        self._flush()  # the old plog's last appends go before its seal on each connection
        for sid in old.servers:
            self._send(old, sid, Op.SEAL, pack_id(old.id), U64U64.pack(self._epoch, old.sent))
        self._want_spare()
        self._record_wake.set()
        return new

    async def _recorder(self) -> None:
        """Records each switch once the plog switched away from is durable everywhere."""
        while True:
            await self._record_wake.wait()
            self._record_wake.clear()
            while len(self._segs) > 1 and not self._failing and self._failed is None:
                old, new = self._segs[0], self._segs[1]
                if old.ack_end() < old.sent:
                    break
                async with self._chain.lock:
                    if self._failing or self._failed is not None or self._segs[:2] != [old, new]:
                        break
                    end = old.sent

                    def switch(m: LogMeta, old: WritePlog = old, new: WritePlog = new, end: int = end) -> None:
                        m.plogs[-1].end = end
                        m.spares = [s for s in m.spares if s.id != new.id]
                        m.plogs.append(PlogRecord(new.index, new.id, new.servers, None))

                    try:
                        await self._chain.update(switch)
                    except DataLogError as exc:
                        self._fail(exc)
                        return
                    old.final = end
                    new.recorded = True
                    self._segs.pop(0)
                self._advance()

    def _want_spare(self) -> None:
        if self._spare_task is None or self._spare_task.done():
            self._spare_task = self._spawn(self._make_spare())

    async def _make_spare(self) -> None:
        delay = 0.05
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._failover_timeout_s
        while not self._spares and self._state == "open" and self._failed is None:
            if self._failing:
                await asyncio.sleep(0.01)
                continue
            try:
                async with self._chain.lock:
                    spare = await self._chain.new_plog(self.replicas, self._rf, self._min_rf, self._capacity)
            except TooFewServersError as exc:
                if not self._pending:
                    deadline = loop.time() + self._failover_timeout_s
                elif loop.time() > deadline:
                    self._fail(exc)  # appends wait for a roll that cannot happen
                    return
                log.warning("log %s: no spare plog: %s", self.name, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            except DataLogError as exc:
                self._fail(exc)
                return
            self._spares.append(spare)
            self._admit()

    # ------------------------------------------------------------ failover

    def _on_suspect(self, sid: str) -> None:
        if self._state != "open" or self._failed is not None:
            return
        gone = [s for s in self._spares if sid in s.servers]
        if gone:
            self._spares = [s for s in self._spares if sid not in s.servers]
            self._want_spare()
        if any(sid in seg.servers for seg in self._segs) and not self._failing:
            self._failing = True
            self._failover_task = self._spawn(self._failover())

    def _needs_failover(self) -> bool:
        return any(self.replicas.is_suspect(s) for seg in self._segs for s in seg.servers)

    async def _failover(self) -> None:
        deadline = asyncio.get_running_loop().time() + self._failover_timeout_s
        # Done once, even if the server's suspicion lapses while it waits: what it was
        # sent on the closed connection is lost to it, and nothing would send it again.
        done = False
        try:
            while (not done or self._needs_failover()) and self._failed is None and self._state == "open":
                try:
                    async with self._chain.lock:
                        await self._failover_once()
                    self.failovers += 1
                    done = True
                except TooFewServersError as exc:
                    if asyncio.get_running_loop().time() > deadline:
                        raise
                    log.warning("log %s: failover waits: %s", self.name, exc)
                    await asyncio.sleep(0.2)
        except DataLogError as exc:
            self._fail(exc)
        finally:
            self._failing = False
        self._admit()
        self._flush()

    async def _failover_once(self) -> None:
        switch = await seal_and_switch(
            self._segs, self._spares, self.replicas, self._chain, self._epoch,
            partial(self._chain.new_plog, self.replicas, self._rf, self._min_rf, self._capacity),
            self._before_seal_recorded,
        )
        for seg, end in switch.kept:
            seg.final, seg.recorded = end, True
        self._advance()
        new = WritePlog(switch.index, switch.fresh.id, switch.fresh.servers, recorded=True)
        self._segs = [new]
        resend = list(self._unacked)
        for e in resend:
            self._assign(e, new)
        log.warning(
            "log %s: failover sealed %s, %d entries sent again to plog %s on %s", self.name,
            [(s.id, end) for s, end in switch.kept], len(resend), new.id, new.servers,
        )
        for seg in switch.abandoned:
            self._spawn(self.replicas.delete(seg.id, seg.servers))
        self._flush_now()

    # ------------------------------------------------------------ re-replication

    async def _repairer(self) -> None:
        """Every ``repair_interval_ms`` (jittered): copy sealed plogs short of the
        replication factor to more servers, and move off an active plog made on a short
        group once a full group is healthy (``repair.py``)."""
        rng = random.Random()
        while self._state == "open" and self._failed is None:
            await asyncio.sleep(self._repair_interval_s * rng.uniform(0.5, 1.5))
            if self._failing or self._failed is not None or self._state != "open":
                continue
            try:
                while await repair_one(self._chain, self.replicas, self._rf, {s.id for s in self._segs}):
                    self.repairs += 1
                await self._leave_short_active()
            except DataLogFencedError:
                return  # the next append says so
            except (DataLogError, ServerUnavailableError) as exc:
                log.warning("log %s: re-replication deferred: %r", self.name, exc)

    async def _leave_short_active(self) -> None:
        """Roll away from an active plog on fewer live servers than the replication
        factor (made on a short group, or a server of it is gone while the log idles)
        once that many are healthy: sealed, it is then re-replicated like any other."""
        if len(self._segs) != 1 or self._failing:
            return
        live = await self.replicas.refresh()
        if len([s for s in self._segs[0].servers if s in live]) >= self._rf:
            return
        if len([s for s in live if not self.replicas.is_suspect(s)]) < self._rf:
            return
        short: list[Spare] = []
        async with self._chain.lock:
            # Under the lock: a failover (which holds it) may have just made one of these
            # spares the active plog; it must then not be dropped and deleted.
            if self._failing or len(self._segs) != 1:
                return
            active = {seg.id for seg in self._segs}
            short = [s for s in self._spares
                     if s.id not in active and len([x for x in s.servers if x in live]) < self._rf]
            if short:
                gone = {s.id for s in short}
                self._spares[:] = [s for s in self._spares if s.id not in gone]

                def drop(m: LogMeta) -> None:
                    m.spares = [s for s in m.spares if s.id not in gone]

                await self._chain.update(drop)
        for spare in short:
            await self.replicas.delete(spare.id, spare.servers)
        if not self._spares:
            self._want_spare()  # the next round rolls onto it
            return
        full = len([x for x in self._spares[0].servers if x in live]) >= self._rf
        if full and len(self._segs) == 1 and not self._failing and self._failed is None:
            self._roll()
            self.repairs += 1

    # ------------------------------------------------------------ failure, close

    def _fail(self, exc: BaseException) -> None:
        if self._failed is not None:
            return
        self._failed = exc
        self._failure_reported = bool(self._unacked)
        log.warning("log %s closed: %r", self.name, exc)
        closed = DataLogClosedError("log closed after a failed append")
        closed.__cause__ = exc
        unacked, self._unacked = self._unacked, deque()
        pending, self._pending = self._pending, deque()
        for items, error in ((unacked, exc), (pending, closed)):
            for e in items:
                if not e.fut.done():
                    e.fut.set_exception(error)
                    if e.on_done is not None:
                        call_now(e.on_done, e.fut)
        self._in_flight_bytes = 0
        self._idle.set()

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Wait until every append made so far is acknowledged (or failed), then stop."""
        if self._state == "closed":
            return
        if self._state == "open":
            await self._idle.wait()
        self._state = "closed"
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        self.replicas.close()

    # ------------------------------------------------------------ read, truncate

    async def read(self, start: LogAddress | None = None) -> AsyncIterator[tuple[LogAddress, EntryData]]:
        if self._state == "new":
            raise DataLogClosedError("open the log before reading it")
        async for address, payload in read_chain(self.replicas, self._chain.meta, self._acked_to, start):
            yield address, payload

    async def truncate(self, upto: LogAddress) -> None:
        self._check_usable()
        if upto > self._acked_to:
            raise DataLogError(f"truncate at {upto}, past the durable end {self._acked_to}")
        async with self._chain.lock:
            if self._chain.meta.start is not None and upto <= self._chain.meta.start:
                return
            dead = [p for p in self._chain.meta.plogs if p.index < upto.file_id]

            def cut(m: LogMeta) -> None:
                m.start = upto
                m.plogs = [p for p in m.plogs if p.index >= upto.file_id]

            await self._chain.update(cut)
        await asyncio.gather(*(self.replicas.delete(p.id, p.servers) for p in dead))
