"""The storage writer of one container.

It takes committed operations in log order. Appends (and table writes) go into a
per-segment aggregator, a contiguous byte range not yet in Tier-2, flushed in large
writes once it holds ``flush_bytes`` or its oldest byte is ``flush_interval_ms`` old.
Until then its bytes trickle into Tier-2 unsynced (``flush_trickle_bytes`` at a time, at
most every ``flush_trickle_interval_ms``) and the flush syncs them: the disk takes them
as they come, not megabytes at once in front of Tier-1's syncs. The aggregator, and with
it the Tier-1 that holds its bytes, stays until that sync.
Seal, truncate, merge and delete first flush what they depend on, then apply to Tier-2,
so Tier-2 sees every segment's changes in log order.

Reconciliation: the writer never trusts its own memory of Tier-2. The first time it
touches a segment (and after any failed call) it reads the segment's Tier-2 state and
acts from there: bytes already in Tier-2 are skipped (a re-flush after a crash writes
only the rest, never twice, never leaving a gap), a seal/concat/delete already done is
not redone. Failed Tier-2 calls that are not answers about the state (transient errors)
are retried with backoff, forever; the data stays in Tier-1 meanwhile.

Tier-1 truncation: checkpoints pass through here with their Tier-1 address. Once every
operation before a checkpoint is in Tier-2, Tier-1 is truncated right before it.

Inactive segments: see ``eviction.py``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.metadata import SegmentMeta
from tidegate.core.segmentstore.operations import (
    AppendOp,
    MergeOp,
    Operation,
    OpKind,
    TableCompactOp,
    TableWriteOp,
    TruncateOp,
)
from tidegate.core.segmentstore.tier1.api import DataLogError, DataLogFencedError, LogAddress
from tidegate.core.segmentstore.writer.eviction import SegmentEviction
from tidegate.core.segmentstore.writer.source import WriterDataSource
from tidegate.tier2.api import (
    BadOffsetError,
    DataMissingError,
    SegmentExistsError,
    SegmentInfo,
    SegmentNotFoundError,
    SegmentNotSealedError,
    SegmentSealedError,
    Storage,
    StorageFencedError,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Tier-2 errors that answer a question about the state (not worth a blind retry).
_STATE_ERRORS = (
    SegmentNotFoundError,
    SegmentExistsError,
    SegmentSealedError,
    SegmentNotSealedError,
    BadOffsetError,
    DataMissingError,
)


_DATA_KINDS = (OpKind.APPEND, OpKind.TABLE_WRITE, OpKind.TABLE_COMPACT)
#: What one not-yet-flushed operation costs in memory besides its bytes (its operation
#: object and read-index entry), counted against ``writer_lag_bytes_max``.
LAG_OVERHEAD_BYTES = 400


class WriterError(Exception):
    """Tier-2 contradicts the log (e.g. shorter than what was already flushed)."""


@dataclass
class _Aggregator:
    meta: SegmentMeta
    start: int
    end: int
    first_seq: int
    first_time: float
    ops: int = 1
    #: Bytes [start, written) went to Tier-2 unsynced (a trickle); the flush syncs them.
    written: int = field(init=False)
    trickled_at: float = field(init=False)

    def __post_init__(self) -> None:
        self.written = self.start
        self.trickled_at = self.first_time


class StorageWriter(SegmentEviction):
    def __init__(
        self,
        container: WriterDataSource,
        storage: Storage,
        config: SegmentStoreConfig,
        clock: Callable[[], float],
    ) -> None:
        self.c = container
        self.storage = storage
        self.config = config
        self.clock = clock
        self._ops: deque[Operation] = deque()
        self._aggs: dict[int, _Aggregator] = {}
        self._t2: dict[str, SegmentInfo | None] = {}  # known Tier-2 state; None: absent
        self._checkpoints: deque[tuple[int, LogAddress]] = deque()
        self._truncated: LogAddress | None = None
        self._next_seq = 0  # every op below this is processed
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._lock = asyncio.Lock()  # one of the main loop and ``flush_all`` at a time
        self.error: BaseException | None = None
        #: Bytes (plus a per-operation overhead) committed and not yet in Tier-2.
        self.lag_bytes = 0
        self.lag_bytes_max = config.writer_lag_bytes_max
        self._cache = container.read_index.cache
        self._lag_ok = asyncio.Event()
        self._lag_ok.set()
        self.tier2_writes = 0
        self.tier2_trickles = 0  # unsynced writes between flushes
        self._trickle_bytes = config.flush_trickle_bytes
        self._trickle_s = config.flush_trickle_interval_ms / 1000
        self.retries = 0
        self.evicted = 0  # segments made inactive, for tests and metrics
        self._store_calls: set[asyncio.Future[Any]] = set()
        self._next_evict = 0.0

    def add(self, op: Operation) -> None:
        self.add_many([op])

    def add_many(self, ops: list[Operation]) -> None:
        self._ops.extend(ops)
        lag = 0
        for op in ops:
            if op.kind in _DATA_KINDS:
                # (A data kind is an AppendOp or TableWriteOp; no isinstance per operation.)
                lag += op.length + LAG_OVERHEAD_BYTES  # type: ignore[attr-defined]
        if lag:
            self.lag_bytes += lag
            if self.lag_bytes > self.lag_bytes_max:
                self._lag_ok.clear()
        self._wake.set()

    def _lag_done(self, nbytes: int) -> None:
        self.lag_bytes -= nbytes
        if self.lag_bytes <= self.lag_bytes_max:
            self._lag_ok.set()

    @property
    def behind(self) -> bool:
        """Acknowledgements should wait (``wait_lag``): this writer is past its lag
        bound, or the node's cache is crowded with data not yet in Tier-2."""
        return self.lag_bytes > self.lag_bytes_max or self._cache.crowded

    async def wait_lag(self) -> None:
        """Wait until this writer is no longer ``behind`` (callers are throttled here,
        so memory does not grow with load, and the cache keeps what the writers are
        still to flush instead of evicting it to be read back from Tier-1)."""
        while self._task is not None and self.error is None:
            if self.lag_bytes > self.lag_bytes_max:
                await self._lag_ok.wait()
            elif self._cache.crowded:
                # Other containers' writers make the room; looked at again now and
                # then in case this writer stops meanwhile.
                try:
                    async with asyncio.timeout(0.1):
                        await self._cache.wait_room()
                except TimeoutError:
                    pass
            else:
                return

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._lag_ok.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        # Calls into the container's store of inactive segments that a cancellation
        # left running in their threads end before the container closes that store.
        if self._store_calls:
            await asyncio.gather(*self._store_calls, return_exceptions=True)

    async def _store_call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a thread, awaited by ``stop`` even if this call is cancelled."""
        work = asyncio.ensure_future(asyncio.to_thread(fn, *args))
        self._store_calls.add(work)
        work.add_done_callback(self._store_calls.discard)
        return await asyncio.shield(work)

    # -- main loop ----------------------------------------------------------------------

    async def _run(self) -> None:
        interval_s = self.config.flush_interval_ms / 1000
        try:
            while True:
                async with self._lock:
                    await self._drain_ops()
                    await self._flush_due(force=False)
                    await self._truncate_tier1()
                    await self._evict_inactive()
                if not self._ops:
                    self._idle.set()
                    self._wake.clear()
                    # (asyncio.timeout, not wait_for: 3.11's wait_for can swallow a
                    # cancellation that races with its timeout.)
                    try:
                        async with asyncio.timeout(max(0.01, interval_s / 2)):
                            await self._wake.wait()
                    except TimeoutError:
                        pass
                    self._idle.clear()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.error = exc
            self._idle.set()
            self._lag_ok.set()
            if isinstance(exc, (StorageFencedError, DataLogFencedError)):  # a handover, not a fault
                log.warning("storage writer of container %d stopped: fenced (%r)", self.c.id, exc)
            elif isinstance(exc, DataLogError):  # Tier-1 unavailable: the container restarts
                log.warning("storage writer of container %d stopped: %r (cause: %r)",
                            self.c.id, exc, exc.__cause__)
            else:
                log.exception("storage writer of container %d stopped", self.c.id)
            self.c.on_writer_stopped(exc)

    async def flush_all(self) -> None:
        """Process every committed operation, flush every aggregator, truncate Tier-1
        as far as checkpoints allow (for tests, benchmarks and orderly shutdown)."""
        if self.error is not None:
            raise self.error
        async with self._lock:
            await self._drain_ops()
            await self._flush_due(force=True)
            await self._truncate_tier1()
        if self.error is not None:
            raise self.error

    async def _drain_ops(self) -> None:
        ops = self._ops
        aggs = self._aggs
        flush_bytes = self.config.flush_bytes
        cache = self.c.read_index.cache
        append = OpKind.APPEND
        pressure = cache.under_pressure
        while ops:
            op = ops.popleft()
            if op.kind is append:
                # The common case without a coroutine call: extend an aggregator.
                agg = aggs.get(op.segment_id)
                # (APPEND is an AppendOp; no isinstance on the hot path.)
                if agg is not None and agg.end == op.offset:  # type: ignore[attr-defined]
                    agg.end += op.length  # type: ignore[attr-defined]
                    agg.ops += 1
                    self._next_seq = op.seq + 1
                    if agg.end - agg.start < flush_bytes and not pressure:
                        if self._trickle_due(agg):
                            await self._trickle(agg)
                        continue
                    await self._flush(agg.meta)
                    pressure = cache.under_pressure
                    continue
            await self._process(op)
            pressure = cache.under_pressure

    async def _process(self, op: Operation) -> None:
        kind = op.kind
        md = self.c.md
        if kind == OpKind.APPEND or kind == OpKind.TABLE_WRITE or kind == OpKind.TABLE_COMPACT:
            assert isinstance(op, (AppendOp, TableWriteOp))
            meta = md.by_id[op.segment_id]
            agg = self._aggs.get(meta.id)
            if agg is None:
                if op.length:
                    self._aggs[meta.id] = _Aggregator(meta, op.offset, op.offset + op.length, op.seq, self.clock())
                else:
                    self._lag_done(LAG_OVERHEAD_BYTES)
            else:
                assert agg.end == op.offset, (agg.end, op.offset)
                agg.end += op.length
                agg.ops += 1
            if kind == OpKind.TABLE_COMPACT:
                assert isinstance(op, TableCompactOp)
                await self._flush(meta)
                await self._t2_truncate(meta, op.new_start)
            elif agg is not None and agg.end - agg.start >= self.config.flush_bytes:
                await self._flush(meta)
        elif kind == OpKind.CHECKPOINT:
            assert op.address is not None
            self._checkpoints.append((op.seq, op.address))
        elif kind == OpKind.CREATE:
            meta = md.by_id[op.segment_id]
            if meta.tier2_stale:
                # The earlier segment of this name was deleted before this op (in log
                # order), and that deletion has just been applied.
                meta.tier2_stale = False
                self._t2.pop(meta.name, None)
        elif kind == OpKind.SEAL:
            meta = md.by_id[op.segment_id]
            await self._flush(meta)
            if not await self._gone(meta):
                await self._ensure(meta, "seal")
        elif kind == OpKind.TRUNCATE:
            assert isinstance(op, TruncateOp)
            meta = md.by_id[op.segment_id]
            await self._flush(meta)
            await self._t2_truncate(meta, op.offset)
        elif kind == OpKind.MERGE:
            assert isinstance(op, MergeOp)
            await self._merge(op)
        elif kind == OpKind.DELETE:
            meta = md.by_id[op.segment_id]
            self._drop_agg(meta)
            await self._ensure(meta, "delete")
            self.c.forget(meta)
        self._next_seq = op.seq + 1

    # -- Tier-2 calls -------------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        for attempt in range(1 << 30):
            try:
                return await asyncio.to_thread(fn, *args)
            except (StorageFencedError, *_STATE_ERRORS):  # fenced: another owner took over
                raise
            except Exception as exc:
                self.retries += 1
                if attempt % 20 == 19:
                    log.warning("Tier-2 %s%r failing: %s", getattr(fn, "__name__", fn), args[:1], exc)
                await asyncio.sleep(self.config.retry_delay_s(attempt))
        raise AssertionError("unreachable")

    async def _state(self, name: str) -> SegmentInfo | None:
        if name not in self._t2:
            try:
                self._t2[name] = await self._call(self.storage.get_info, name)
            except SegmentNotFoundError:
                self._t2[name] = None
        return self._t2[name]

    async def _ensure(self, meta: SegmentMeta, what: str) -> None:
        """Make Tier-2 hold the segment ("exists"), sealed ("seal"), or not ("delete"),
        whatever state a crash or a lost reply left it in."""
        name = meta.name
        while True:
            info = await self._state(name)
            try:
                if what == "delete":
                    if info is not None:
                        await self._call(self.storage.delete, name)
                    self._t2[name] = None
                    return
                if info is None:
                    self._t2[name] = await self._call(self.storage.create, name)
                    continue
                if what == "seal" and not info.sealed:
                    await self._call(self.storage.seal, name)
                    self._t2[name] = SegmentInfo(name, info.length, info.start_offset, True)
                return
            except _STATE_ERRORS:
                self._t2.pop(name, None)  # re-read the state and decide again

    def _trickle_due(self, agg: _Aggregator) -> bool:
        return (
            self._trickle_bytes > 0
            and agg.end - agg.written >= self._trickle_bytes
            and self.clock() - agg.trickled_at >= self._trickle_s
        )

    async def _trickle(self, agg: _Aggregator) -> None:
        """Write the aggregator's bytes not yet in Tier-2, unsynced (``_flush`` syncs)."""
        meta = agg.meta
        if meta.deleted:
            return  # the flush decides what happens to it
        name = meta.name
        agg.trickled_at = self.clock()
        await self._ensure(meta, "exists")
        info = self._t2[name]
        assert info is not None
        pos = info.length
        if pos < agg.start or pos >= agg.end:
            agg.written = max(agg.written, min(pos, agg.end))
            return  # nothing to send, or a state only the flush resolves
        end = min(agg.end, pos + self.config.tier2_write_bytes_max)
        idx = self.c.read_index.get(meta)
        chunks = await self.c.read_index.read(idx, pos, end)
        try:
            await self._call(functools.partial(self.storage.write, durable=False), name, pos, chunks)
        except _STATE_ERRORS:
            self._t2.pop(name, None)
            return
        self.tier2_trickles += 1
        self._t2[name] = SegmentInfo(name, end, info.start_offset, info.sealed)
        agg.written = end
        meta.storage_length = max(meta.storage_length, end)
        idx.flushed_to(meta.storage_length)

    async def _flush(self, meta: SegmentMeta) -> None:
        """Write the segment's aggregated bytes to Tier-2 (from its Tier-2 length on) and
        sync them with any it trickled there."""
        agg = self._aggs.get(meta.id)
        if agg is None:
            return
        if await self._gone(meta):
            self._drop_agg(meta)
            return
        name = meta.name
        idx = self.c.read_index.get(meta)
        synced = False
        while True:
            await self._ensure(meta, "exists")
            info = self._t2[name]
            assert info is not None
            if info.length < agg.start:
                raise WriterError(f"{name}: Tier-2 length {info.length} < flushed {agg.start}")
            pos = info.length
            if pos >= agg.end:
                if synced or info.sealed:  # (a seal synced what it sealed)
                    break
                # All of it is there already: trickled, or written unsynced by a process
                # that then died (recovery found it). An empty durable write syncs it
                # before the aggregator, and the Tier-1 holding its bytes, can go.
                try:
                    await self._call(self.storage.write, name, pos, [])
                except _STATE_ERRORS:
                    self._t2.pop(name, None)
                    continue
                break
            end = min(agg.end, pos + self.config.tier2_write_bytes_max)
            # The cached slices as they are: Tier-2 writes them back to back (pwritev),
            # no join (a copy of every flushed byte on the event loop).
            chunks = await self.c.read_index.read(idx, pos, end)
            try:
                await self._call(self.storage.write, name, pos, chunks)
                synced = True
                self.tier2_writes += 1
                self._t2[name] = SegmentInfo(name, end, info.start_offset, info.sealed)
            except _STATE_ERRORS:
                self._t2.pop(name, None)
                continue
            meta.storage_length = max(meta.storage_length, end)
            idx.flushed_to(meta.storage_length)
        meta.storage_length = max(meta.storage_length, agg.end)
        idx.flushed_to(meta.storage_length)
        del self._aggs[meta.id]
        self._lag_done(agg.end - agg.start + LAG_OVERHEAD_BYTES * agg.ops)

    def _drop_agg(self, meta: SegmentMeta) -> None:
        """Forget what the segment had waiting for Tier-2 (it is going away)."""
        dropped = self._aggs.pop(meta.id, None)
        if dropped is not None:
            self._lag_done(dropped.end - dropped.start + LAG_OVERHEAD_BYTES * dropped.ops)

    async def _gone(self, meta: SegmentMeta) -> bool:
        """Whether Tier-2 needs nothing more for this segment: it is deleted (its bytes
        are going away), or merged and already concatenated into its target (a replay
        after a crash). Creating it again would resurrect it."""
        if not meta.deleted or await self._state(meta.name) is not None:
            return False
        if meta.merged_into is None:
            return True
        target, offset, length = meta.merged_into
        tinfo = await self._state(target.name)
        return tinfo is not None and tinfo.length >= offset + length

    async def _t2_truncate(self, meta: SegmentMeta, offset: int) -> None:
        info = await self._state(meta.name)
        if info is None or offset <= info.start_offset:
            return
        try:
            await self._call(self.storage.truncate, meta.name, min(offset, info.length))
        except _STATE_ERRORS:
            pass
        self._t2.pop(meta.name, None)

    async def _merge(self, op: MergeOp) -> None:
        md = self.c.md
        target = md.by_id[op.segment_id]
        source = md.by_id[op.source_id]
        if not await self._gone(target):
            await self._flush(source)
            await self._flush(target)
        if await self._gone(target):
            # The target is deleted (later in the log) and not in Tier-2: its deletion
            # got there first (a replay after a crash), or it never reached Tier-2 and
            # its flush was dropped as the deletion is committed. Nothing is left to
            # concatenate into; the source goes with it.
            self._drop_agg(source)
            await self._ensure(source, "delete")
            self.c.forget(source)
            return
        while True:
            tinfo = await self._state(target.name)
            sinfo = await self._state(source.name)
            if sinfo is None:
                if tinfo is not None and tinfo.length >= op.offset + op.length:
                    break  # done already (before a crash, or the reply was lost)
                if op.length:
                    raise WriterError(f"{source.name}: merge source missing from Tier-2")
                await self._ensure(source, "seal")
                continue
            await self._ensure(source, "seal")
            await self._ensure(target, "exists")
            tinfo = self._t2[target.name]
            assert tinfo is not None
            if tinfo.length != op.offset:
                raise WriterError(f"{target.name}: Tier-2 length {tinfo.length}, merge at {op.offset}")
            try:
                await self._call(self.storage.concat, target.name, op.offset, source.name)
            except _STATE_ERRORS:
                pass
            self._t2.pop(target.name, None)
            self._t2.pop(source.name, None)
        self._t2[source.name] = None
        target.storage_length = max(target.storage_length, op.offset + op.length)
        self.c.read_index.get(target).flushed_to(target.storage_length)
        self.c.forget(source)

    async def _flush_due(self, *, force: bool) -> None:
        now = self.clock()
        age = self.config.flush_interval_ms / 1000
        cache = self.c.read_index.cache
        aggs = sorted(self._aggs.values(), key=lambda a: a.start - a.end)  # largest first
        for agg in aggs:
            if (
                force
                or now - agg.first_time >= age
                or agg.end - agg.start >= self.config.flush_bytes
                or cache.under_pressure
            ):
                await self._flush(agg.meta)

    async def _truncate_tier1(self) -> None:
        low = min((a.first_seq for a in self._aggs.values()), default=self._next_seq)
        target: LogAddress | None = None
        while self._checkpoints and self._checkpoints[0][0] <= low:
            seq, addr = self._checkpoints[0]
            if len(self._checkpoints) > 1 and self._checkpoints[1][0] <= low:
                self._checkpoints.popleft()
                continue
            target = addr
            break
        if target is not None and (self._truncated is None or target > self._truncated):
            inactive = self.c.inactive
            if inactive is not None and inactive.needs_sync:
                # Records of deleted segments go for good before the deletions leave
                # Tier-1 (a record outliving them would bring the segment back).
                await self._store_call(inactive.sync)
            await self.c.log.truncate(target)
            self._truncated = target

    # -- inactive segments --------------------------------------------------------------

    async def evict_now(self) -> None:
        """Flush everything, then make inactive whatever can leave and is idle or over
        the bound, without waiting for the next round (tests)."""
        async with self._lock:
            await self._drain_ops()
            await self._flush_due(force=True)
            self._next_evict = 0.0
            await self._evict_inactive()
