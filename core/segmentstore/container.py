"""A segment container: the segments of one hash bucket, with their durable log, read
index, table indexes and storage writer.

Every mutating call is validated against the pending metadata and queued into the
durable log *synchronously* (``queue_*`` methods return a future without having
suspended), so the order of calls is the order in the log, and a call rejected at
validation leaves everything before it untouched. The future completes when the
operation is durable and applied.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tidegate.core.segmentstore.api import (
    NOT_EXISTS,
    AttributeUpdate,
    BadAttributeUpdateError,
    BadKeyVersionError,
    BadOffsetError,
    DataCorruptionError,
    ReadResult,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentProperties,
    SegmentSealedError,
    SegmentTruncatedError,
    StoreShutdownError,
    TableEntry,
    TableNotEmptyError,
    TableRemoval,
    TableUpdate,
    TooLargeError,
)
from tidegate.core.segmentstore.apply import Applier
from tidegate.core.segmentstore.callbacks import DoneCallback
from tidegate.core.segmentstore.config import SegmentStoreConfig
from tidegate.core.segmentstore.durablelog.frames import read_operations
from tidegate.core.segmentstore.durablelog.log import DurableLog
from tidegate.core.segmentstore.fence import FencedStorage, Tier2Fence
from tidegate.core.segmentstore.metadata import (
    ContainerMetadata,
    SegmentMeta,
    decode_segment,
    durable_view,
    encode_segment,
)
from tidegate.core.segmentstore.metastore import InactiveSegments
from tidegate.core.segmentstore.operations import (
    AppendOp,
    AttrsOp,
    CheckpointOp,
    CreateOp,
    DeleteOp,
    MapOp,
    MergeOp,
    Operation,
    SealOp,
    TableCompactOp,
    TableWriteOp,
    TruncateOp,
)
from tidegate.core.segmentstore.reading.cache import Cache
from tidegate.core.segmentstore.reading.index import ReadIndex
from tidegate.core.segmentstore.recovery import recover
from tidegate.core.segmentstore.tables import PUT, REMOVE, TableIndex, encode
from tidegate.core.segmentstore.tier1.api import DurableDataLog, LogAddress
from tidegate.core.segmentstore.traffic import Traffic
from tidegate.core.segmentstore.writer.writer import StorageWriter
from tidegate.tier2.api import Storage

STOPPED, STARTING, RUNNING, STOPPING, FAILED = "stopped", "starting", "running", "stopping", "failed"


class SegmentContainer:
    def __init__(
        self,
        container_id: int,
        config: SegmentStoreConfig,
        log: DurableDataLog,
        storage: Storage,
        cache: Cache,
        traffic: Traffic,
        *,
        index_dir: Path,
        metadata_dir: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.id = container_id
        self.config = config
        self.log = log
        self.storage = storage
        self.traffic = traffic
        #: Where the ``Tier1Index`` (RocksDB) of each epoch lives.
        self.index_dir = index_dir
        #: Where the records of inactive segments live (``metastore.py``); None: every
        #: segment stays in memory.
        self.metadata_dir = metadata_dir
        self.inactive: InactiveSegments | None = None
        self.activations = 0  # inactive segments brought back, for tests and metrics
        self.clock = clock
        self.wall_clock = wall_clock
        self.state = STOPPED
        self.epoch = 0
        #: Sequence number of the last durable operation.
        self.committed_seq = 0
        self.failure: BaseException | None = None
        #: Set when the container cannot go on as it is (its Tier-1 log failed or its
        #: storage writer stopped): the store restarts it (``StreamSegmentStore``).
        self.needs_restart = asyncio.Event()
        self.md = ContainerMetadata()
        self.md.activate = self._activate
        self.tables: dict[int, TableIndex] = {}
        self.read_index = ReadIndex(
            cache,
            storage,
            self._tier1_read,
            config.tier2_read_block_bytes,
            config.tier2_read_attempts,
            config.writer_retry_delay_ms,
        )
        #: Cluster mode: this owner's epoch claimed in Tier-2 before its writer writes.
        self.tier2_fence: Tier2Fence | None = None
        writer_storage = storage
        if config.tier2_fence_dir is not None:
            self.tier2_fence = Tier2Fence(Path(config.tier2_fence_dir) / f"container-{container_id}")
            writer_storage = FencedStorage(storage, self.tier2_fence)
        self.writer = StorageWriter(self, writer_storage, config, clock)
        self.applier = Applier(self)
        self.durable: DurableLog | None = None
        self._ckpt_bytes = 0
        self._ckpt_ops = 0
        self._ckpt_interval_bytes = config.checkpoint_interval_bytes
        self._ckpt_interval_ops = config.checkpoint_interval_ops
        self._loop: asyncio.AbstractEventLoop

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Recover from Tier-1 (and Tier-2), then start the storage writer and accept
        calls: the seed's "Container Startup"."""
        if self.state != STOPPED:
            raise RuntimeError(f"container {self.id} is {self.state}")
        self.state = STARTING
        self._loop = asyncio.get_running_loop()
        try:
            await recover(self)
            self.epoch = self.log.epoch
            self.durable = DurableLog(
                self.log,
                frame_bytes_max=self.config.frame_bytes_max,
                frames_in_flight_max=self.config.frames_in_flight_max,
                on_commit=self.applier.commit,
                on_failure=self._on_log_failure,
            )
            self.durable.start()
            self.writer.start()
            self.state = RUNNING
            self.queue_checkpoint()
        except BaseException:
            self.state = FAILED
            raise

    async def stop(self) -> None:
        """Finish what is queued, stop the writer and close the log."""
        if self.state in (STOPPED, STOPPING):
            return
        was_running = self.state == RUNNING
        self.state = STOPPING
        if self.durable is not None:
            if was_running:
                await self.durable.drain()
            await self.durable.stop()
        await self.writer.stop()
        for idx in self.read_index.segments.values():
            idx.notify()
        self.read_index.clear_all()
        tier1, self.read_index.tier1 = self.read_index.tier1, None
        inactive, self.inactive = self.inactive, None
        try:
            if tier1 is not None:
                tier1.close()
            if inactive is not None:
                inactive.close()
            await self.log.close()
        finally:
            self.state = STOPPED

    def _on_log_failure(self, exc: BaseException) -> None:
        self.failure = exc
        self.state = FAILED
        for idx in self.read_index.segments.values():
            idx.notify()
        self.needs_restart.set()

    def on_writer_stopped(self, exc: BaseException) -> None:
        """The storage writer met an error it cannot retry (Tier-2 contradicts the log,
        a Tier-1 read-back failed): nothing more would reach Tier-2 and Tier-1 would
        grow. The container keeps serving until the store restarts it; the restart
        drains what is queued, then recovers and reconciles every segment with Tier-2."""
        if self.failure is None:
            self.failure = exc
        self.needs_restart.set()

    def _check(self, name: str) -> None:
        if self.state != RUNNING:
            raise StoreShutdownError(name, f"container {self.id} is {self.state}")

    def _tier1_read(self, address: LogAddress, frame_pos: int) -> AsyncGenerator[Operation, None]:
        return read_operations(self.log, address, frame_pos)

    # -- inactive segments --------------------------------------------------------------

    def _inactive_meta(self, name: str) -> SegmentMeta | None:
        """The inactive segment ``name`` as its record has it, not brought back."""
        inactive = self.inactive
        record = inactive.get(name) if inactive is not None else None
        if record is None:
            return None
        meta, _ = decode_segment(record)
        if meta.id in self.md.by_id:
            return None  # deleted or merged; its record goes once the writer is done
        meta.storage_length = meta.length
        return meta

    def _activate(self, name: str) -> SegmentMeta | None:
        """Bring the inactive segment ``name`` back into memory (same id), logging a MAP
        operation with its record ahead of whatever the caller queues next; None if
        there is none. Everything of it is in Tier-2 (the writer made sure of that
        before it left memory)."""
        if self.state != RUNNING:
            return None
        meta = self._inactive_meta(name)
        if meta is None:
            return None
        self.md.by_name[name] = meta
        self.md.by_id[meta.id] = meta
        self.activations += 1
        self._queue(MapOp(encode_segment(meta))).add_done_callback(_consume)
        return meta

    def forget(self, meta: SegmentMeta) -> None:
        """Drop a deleted or merged segment the log and the writer are done with: its
        metadata, its read index, and its inactive record if it has one."""
        self.read_index.remove(meta)
        self.md.forget(meta)
        if self.inactive is not None:
            self.inactive.remove(meta.name, meta.id)

    # -- queueing -----------------------------------------------------------------------

    def _queue(self, op: Operation) -> asyncio.Future[Any]:
        durable = self.durable
        assert durable is not None
        md = self.md
        md.seq += 1
        op.seq = md.seq
        meta = md.by_id.get(op.segment_id)
        if meta is not None:
            meta.p_ops += 1
        fut: asyncio.Future[Any] = self._loop.create_future()
        op.future = fut
        durable.add(op)
        if (
            durable.bytes_logged - self._ckpt_bytes >= self._ckpt_interval_bytes
            or durable.ops_logged - self._ckpt_ops >= self._ckpt_interval_ops
        ):
            self.queue_checkpoint()
        return fut

    def queue_checkpoint(self) -> asyncio.Future[Any]:
        """A metadata checkpoint; Tier-1 can be truncated right before it once the
        storage writer has moved everything earlier to Tier-2."""
        op = CheckpointOp(b"")
        durable = self.durable
        assert durable is not None
        op.seq = self.md.next_seq()
        op.data = self.md.snapshot()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        op.future = fut
        durable.add(op, new_frame=True)
        fut.add_done_callback(_consume)
        self._ckpt_bytes, self._ckpt_ops = durable.bytes_logged, durable.ops_logged
        return fut

    @staticmethod
    def _check_attrs(name: str, current: dict[str, int], updates: Sequence[AttributeUpdate]) -> None:
        for u in updates:
            if u.expected is not None and current.get(u.key, NOT_EXISTS) != u.expected:
                raise BadAttributeUpdateError(
                    name, f"attribute {u.key}={current.get(u.key, NOT_EXISTS)}, expected {u.expected}"
                )

    def queue_create(
        self, name: str, attributes: Mapping[str, int] | None, is_table: bool
    ) -> asyncio.Future[Any]:
        self._check(name)
        if self.md.lookup(name) is not None:
            raise SegmentExistsError(name)
        meta = self.md.new_segment(name, is_table, dict(attributes or {}))
        if is_table:
            self.tables[meta.id] = TableIndex()
        return self._queue(CreateOp(meta.id, name, is_table, tuple(meta.p_attributes.items())))

    def queue_append(
        self,
        name: str,
        data: bytes | memoryview,
        expected_offset: int | None,
        attribute_updates: Sequence[AttributeUpdate],
        event_count: int,
        on_done: DoneCallback | None = None,
    ) -> asyncio.Future[Any]:
        """Queue an append; its future completes once it is durable, and ``on_done``
        is called right after (by the durable log, no event-loop hop)."""
        if self.state != RUNNING:
            self._check(name)
        meta = self.md.by_name.get(name) or self.md.lookup(name)
        if meta is None or meta.is_table:
            raise SegmentNotFoundError(name)
        if meta.p_sealed:
            raise SegmentSealedError(name)
        offset = meta.p_length
        if expected_offset is not None and expected_offset != offset:
            raise BadOffsetError(name, f"expected offset {expected_offset}, length {offset}", actual=offset)
        n = data.nbytes if isinstance(data, memoryview) else len(data)
        if n > self.config.append_bytes_max:
            raise TooLargeError(name, f"append of {n} bytes > {self.config.append_bytes_max}")
        attrs: tuple[tuple[str, int], ...] = ()
        if attribute_updates:
            self._check_attrs(name, meta.p_attributes, attribute_updates)
            attrs = tuple((u.key, u.value) for u in attribute_updates)
        if type(data) is not bytes and (
            not isinstance(data, memoryview)
            or not data.readonly
            or not data.c_contiguous
            or data.format != "B"
            or data.nbytes * 2 < _nbytes(data.obj)
        ):
            # Kept without a copy: ``bytes`` and read-only byte views covering most of
            # their buffer. Otherwise a copy: the caller may reuse a writable buffer, a
            # small slice of a big one would pin all of it, other formats count items.
            data = bytes(data)
        if attrs:
            meta.p_attributes.update(attrs)
        meta.p_length = offset + n
        meta.p_ops += 1
        op = AppendOp(meta.id, name, offset, data, attrs, event_count)
        op.result = offset
        op.on_done = on_done
        # _queue, inlined (the per-append hot path).
        md = self.md
        md.seq += 1
        op.seq = md.seq
        fut: asyncio.Future[Any] = self._loop.create_future()
        op.future = fut
        durable = self.durable
        assert durable is not None
        durable.add(op)
        if (
            durable.bytes_logged - self._ckpt_bytes >= self._ckpt_interval_bytes
            or durable.ops_logged - self._ckpt_ops >= self._ckpt_interval_ops
        ):
            self.queue_checkpoint()
        return fut

    def queue_update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> asyncio.Future[Any]:
        self._check(name)
        meta = self.md.mutable(name)
        if meta.p_sealed:
            raise SegmentSealedError(name)
        self._check_attrs(name, meta.p_attributes, updates)
        attrs = tuple((u.key, u.value) for u in updates)
        meta.p_attributes.update(attrs)
        return self._queue(AttrsOp(meta.id, name, attrs))

    def queue_seal(self, name: str) -> asyncio.Future[Any]:
        self._check(name)
        meta = self.md.mutable(name)
        meta.p_sealed = True
        op = SealOp(meta.id, name)
        op.result = meta.p_length
        return self._queue(op)

    def queue_truncate(self, name: str, offset: int) -> asyncio.Future[Any]:
        self._check(name)
        meta = self.md.mutable(name)
        if not meta.p_start <= offset <= meta.p_length:
            raise BadOffsetError(
                name, f"truncate to {offset} outside [{meta.p_start}, {meta.p_length}]", actual=meta.p_length
            )
        meta.p_start = offset
        return self._queue(TruncateOp(meta.id, name, offset))

    def queue_merge(self, target: str, source: str) -> asyncio.Future[Any]:
        self._check(target)
        tgt = self.md.mutable(target)
        src = self.md.mutable(source)
        if tgt.p_sealed:
            raise SegmentSealedError(target)
        if tgt is src:
            raise BadOffsetError(target, "cannot merge a segment into itself")
        if src.p_start != 0:
            raise BadOffsetError(source, "cannot merge a truncated segment")
        offset = tgt.p_length
        tgt.p_length += src.p_length
        src.p_sealed = src.p_deleted = True
        del self.md.by_name[source]
        op = MergeOp(tgt.id, target, src.id, offset, src.p_length)
        op.result = offset
        return self._queue(op)

    def queue_delete(self, name: str, is_table: bool, must_be_empty: bool = False) -> asyncio.Future[Any]:
        self._check(name)
        meta = self.md.mutable(name, is_table)
        if must_be_empty and not self.tables[meta.id].pending_empty():
            raise TableNotEmptyError(name)
        meta.p_deleted = True
        del self.md.by_name[name]
        return self._queue(DeleteOp(meta.id, name))

    # -- tables -------------------------------------------------------------------------

    def _table_write(self, meta: SegmentMeta, data: bytes, result: Any = None) -> asyncio.Future[Any]:
        op = TableWriteOp(meta.id, meta.name, meta.p_length, data)
        op.result = result
        meta.p_length += len(data)
        return self._queue(op)

    def queue_table_put(self, name: str, updates: Sequence[TableUpdate]) -> asyncio.Future[Any] | list[int]:
        self._check(name)
        meta = self.md.mutable(name, is_table=True)
        table = self.tables[meta.id]
        cfg = self.config
        for u in updates:
            if len(u.key) > cfg.table_key_bytes_max or len(u.value) > cfg.table_value_bytes_max:
                raise TooLargeError(name, f"table entry for key {u.key[:32]!r} too large")
            if u.expected_version is not None and table.version(u.key) != u.expected_version:
                raise BadKeyVersionError(name, u.key)
        if not updates:
            return []
        parts = []
        versions = []
        loc = meta.p_length
        for u in updates:
            rec = encode(PUT, u.key, u.value, loc)
            parts.append(rec)
            versions.append(loc)
            table.queue(u.key, loc)
            loc += len(rec)
        return self._table_write(meta, b"".join(parts), versions)

    def queue_table_remove(self, name: str, removals: Sequence[TableRemoval]) -> asyncio.Future[Any] | None:
        self._check(name)
        meta = self.md.mutable(name, is_table=True)
        table = self.tables[meta.id]
        for r in removals:
            if r.expected_version is not None and table.version(r.key) != r.expected_version:
                raise BadKeyVersionError(name, r.key)
        parts = []
        for r in removals:
            if table.version(r.key) != NOT_EXISTS:
                parts.append(encode(REMOVE, r.key, b"", 0))
                table.queue(r.key, NOT_EXISTS)
        if not parts:
            return None
        return self._table_write(meta, b"".join(parts))

    def maybe_compact(self, meta: SegmentMeta) -> None:
        """Queue a compaction of a table whose retained bytes outgrew its live data."""
        table = self.tables[meta.id]
        size = meta.length - meta.start_offset
        if (
            table.compacting
            or self.state != RUNNING
            or meta.p_deleted
            or size < self.config.table_compact_bytes_min
            or size < 2 * table.live_bytes
        ):
            return
        below = meta.length
        data = table.compaction_data(below)
        table.compacting = True
        op = TableCompactOp(meta.id, meta.name, meta.p_length, below, data)
        meta.p_length += len(data)
        meta.p_start = max(meta.p_start, below)
        self._queue(op).add_done_callback(_consume)

    # -- reads --------------------------------------------------------------------------

    async def read(self, name: str, offset: int, max_length: int, timeout_ms: int) -> ReadResult:
        self._check(name)
        meta = self.md.readable(name)
        meta.last_read_ms = int(self.wall_clock() * 1000)
        if offset < meta.start_offset:
            raise SegmentTruncatedError(name, f"offset {offset} < start {meta.start_offset}", actual=meta.length)
        if offset > meta.length:
            raise BadOffsetError(name, f"offset {offset} > length {meta.length}", actual=meta.length)
        idx = self.read_index.get(meta)
        if offset == meta.length and not meta.sealed and timeout_ms > 0 and max_length > 0:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            idx.waiters.append(waiter)
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    await waiter
            except TimeoutError:
                pass
            finally:
                if waiter in idx.waiters:
                    idx.waiters.remove(waiter)
            self._check(name)
            meta = self.md.readable(name)
            if offset < meta.start_offset:
                raise SegmentTruncatedError(name, f"offset {offset} < start {meta.start_offset}")
        end = min(meta.length, offset + max(0, max_length))
        try:
            chunks = await self.read_index.read(idx, offset, end) if end > offset else []
        except DataCorruptionError:
            # Raced with a deletion or truncation (its Tier-2 part was applied while
            # this read was under way): report that, not corruption.
            if meta.deleted:
                raise SegmentNotFoundError(name) from None
            if offset < meta.start_offset:
                raise SegmentTruncatedError(name, f"offset {offset} < start {meta.start_offset}") from None
            raise
        return ReadResult(offset, chunks, meta.sealed and end == meta.length)

    def info(self, name: str) -> SegmentProperties:
        """An inactive segment's properties come from its record: it stays inactive
        (the controller's retention and the gateway ask for them periodically)."""
        self._check(name)
        m = durable_view(name, self.md.by_name.get(name) or self._inactive_meta(name))
        return SegmentProperties(
            name=name,
            length=m.length,
            storage_length=min(m.storage_length, m.length),
            start_offset=m.start_offset,
            sealed=m.sealed,
            attributes=dict(m.attributes),
            last_modified_ms=m.last_modified_ms,
        )

    def table(self, name: str) -> TableIndex:
        self._check(name)
        return self.tables[self.md.readable(name, is_table=True).id]

    def table_get(self, name: str, keys: Sequence[bytes]) -> list[TableEntry | None]:
        t = self.table(name)
        return [t.get(k) for k in keys]



def _nbytes(obj: Any) -> int:
    try:
        return memoryview(obj).nbytes
    except TypeError:
        return 0


def _consume(fut: asyncio.Future[Any]) -> None:
    """Retrieve the outcome of an operation nobody awaits (checkpoints, compactions);
    a failure of theirs stops the container, which is reported there."""
    if not fut.cancelled():
        fut.exception()
