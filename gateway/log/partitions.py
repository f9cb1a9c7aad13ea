"""All partition logs of this gateway, the offset index rebuild, and batch reads.

At start, before any request is served, every segment of every topic is walked from its
last indexed position (``OffsetIndex.marker``) to its end; each envelope found there
becomes index entries and producer state (DESIGN.md section 3: segments describe
themselves). Partition logs are opened lazily from the index afterwards.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from tidegate.core.controller.api import SegmentRecord
from tidegate.core.segmentstore.api import (
    ContainerNotOwnedError,
    SegmentNotFoundError,
    SegmentStore,
    SegmentTruncatedError,
    StoreShutdownError,
)
from tidegate.gateway.log.envelope import ENVELOPE_BYTES, InvalidEnvelopeError, decode_envelope
from tidegate.gateway.log.log_services import IndexHook, TrafficSink
from tidegate.gateway.log.offset_index import IndexEntry, IndexWrite, OffsetIndex
from tidegate.gateway.log.partition_log import UNAVAILABLE_RETRY_S, PartitionLog
from tidegate.gateway.log.producer_state import ProducerStates
from tidegate.gateway.log.topic_io import TopicIO
from tidegate.gateway.log.topics import TopicRegistry
from tidegate.protocol.record_batch import BatchHeader, InvalidBatchError, iter_batches

log = logging.getLogger(__name__)

#: Partitions one event-loop step handles in operations over a whole topic (DeleteRecords,
#: truncation): each takes index reads and writes, so 10,000 in one step stall the loop.
PARTITIONS_PER_STEP = 128
#: Envelopes the index rebuild handles in one event-loop step: a 4 MiB read block of small
#: appends is thousands of index writes, which in one step stall everything else here.
ENVELOPES_PER_STEP = 64
#: A segment's container is elsewhere and not there now (its node down or starting).
UNAVAILABLE = (ContainerNotOwnedError, StoreShutdownError, OSError, TimeoutError)


@dataclass
class _Marker:
    """A segment's gap-free indexed end and the indexed appends beyond it (start → end)."""

    end: int
    ahead: dict[int, int] = field(default_factory=dict)


class PartitionLogs:
    def __init__(
        self,
        topics: TopicRegistry,
        store: SegmentStore,
        index: OffsetIndex,
        producers: ProducerStates,
        *,
        rebuild_read_bytes: int = 4 << 20,
        refresh_attempts: int = 20,
        append_retries_max: int = 5,
        append_retry_delay_ms: int = 100,
        traffic: TrafficSink | None = None,
    ) -> None:
        self.topics = topics
        self.store = store
        self.index = index
        self.producers = producers
        self.refresh_attempts = refresh_attempts
        self.append_retries_max = append_retries_max
        self.append_retry_delay_ms = append_retry_delay_ms
        self.traffic = traffic
        #: Where fetch reads are counted (``gateway.log.topic_io``), if anywhere.
        self.io: TopicIO | None = None
        self._rebuild_read_bytes = rebuild_read_bytes
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._markers: dict[str, _Marker] = {}
        self._index_waiters: list[Callable[[], None]] = []
        self._index_recovering = False
        self.closed = False
        #: Set before ``rebuild`` (gateway/app.py): the transaction index.
        self.index_hook: IndexHook | None = None
        #: Set by gateway/app.py: the leader epoch appends are stamped with.
        self.epoch_source: Callable[[str, int], int] | None = None
        #: Cluster mode: a segment's container, so that a rebuild leaves the segments of
        #: an unavailable one for later instead of failing.
        self.container_of: Callable[[str], int] | None = None
        #: Cluster mode: whether this node led a partition throughout, up to the current
        #: segment a log whose segment was sealed would re-send to (``leadership.py``).
        self.succession: Callable[[str, int, SegmentRecord], Awaitable[bool]] | None = None

    def leader_epoch(self, topic: str, partition: int) -> int:
        return -1 if self.epoch_source is None else self.epoch_source(topic, partition)

    def mark_indexed(self, segment: str, start: int, end: int) -> int | None:
        """Note that the append at ``[start, end)`` of ``segment`` is indexed; return the
        segment's new marker if it moved. The marker only covers a gap-free prefix of
        indexed appends, so the rebuild never skips an unindexed one (appends of one
        partition can land out of position order after a re-send, and several
        partitions may share a segment)."""
        tracker = self._markers.get(segment)
        if tracker is None:
            tracker = self._markers[segment] = _Marker(self.index.marker(segment))
        if start != tracker.end:
            if end > tracker.end:
                tracker.ahead[start] = end
            return None
        tracker.end = end
        while tracker.end in tracker.ahead:
            tracker.end = tracker.ahead.pop(tracker.end)
        return tracker.end

    def forget_marker(self, segment: str) -> None:
        """Drop what is known of ``segment``'s indexed appends beyond its stored marker
        (after a failed index write: the next ``mark_indexed`` starts from the index)."""
        self._markers.pop(segment, None)

    def when_index_writable(self, resume: Callable[[], None]) -> None:
        self._index_waiters.append(resume)
        if not self._index_recovering and not self.closed:
            self._index_recovering = True
            self.spawn(self._recover_index())

    async def _recover_index(self) -> None:
        """Re-open the broken offset index every ``UNAVAILABLE_RETRY_S`` until it takes
        writes (space is back), then resume the partitions waiting for it."""
        try:
            while self._index_waiters:
                await asyncio.sleep(UNAVAILABLE_RETRY_S)
                try:
                    self.index.recover()
                except Exception as exc:
                    log.debug("offset index not writable yet: %r", exc)
                    continue
                waiters, self._index_waiters = self._index_waiters, []
                for resume in waiters:
                    resume()  # may wait again (it calls ``when_index_writable``)
        finally:
            self._index_recovering = False

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def get(self, topic: str, partition: int) -> PartitionLog:
        key = (topic, partition)
        plog = self._logs.get(key)
        if plog is None:
            last = self.index.last(topic, partition)
            first = self.index.first(topic, partition)
            start = self.index.log_start(topic, partition)
            if start is None:
                start = first.base_offset if first is not None else 0
            next_offset = last.last_offset + 1 if last is not None else start
            # A copy the rebuild left out may end the log: its offsets were handed out.
            next_offset = max(next_offset, self.index.end_floor(topic, partition))
            max_ts = self.index.max_timestamp(topic, partition)
            plog = PartitionLog(
                self, topic, partition, max(next_offset, start), start,
                max_ts[0] if max_ts else -(1 << 62),
            )
            self._logs[key] = plog
        return plog

    def set_log_starts(self, topic: str, starts: dict[int, int]) -> dict[int, int]:
        """Raise the log starts (partition → offset) of ``topic`` durably in one synced
        index write (raises as ``OffsetIndex`` does, nothing moved); lower or equal ones
        are left. Return each partition's log start after it. Keep ``starts`` to a few
        hundred partitions: the write runs on the event loop."""
        logs = {p: self.get(topic, p) for p in starts}
        raised = {p: o for p, o in starts.items() if o > logs[p].log_start_offset}
        if raised:
            self.index.set_log_starts(topic, raised)
        for p, offset in raised.items():
            logs[p].log_start_stored(offset)
        return {p: plog.log_start_offset for p, plog in logs.items()}

    async def retire_topic(self, topic: str) -> None:
        """``delete_topic`` in loop steps: the topic's logs are retired a slice at a time,
        then the rest is dropped at once (a topic of thousands of partitions)."""
        keys = [k for k in self._logs if k[0] == topic]
        for i in range(0, len(keys), PARTITIONS_PER_STEP):
            for key in keys[i : i + PARTITIONS_PER_STEP]:
                plog = self._logs.pop(key, None)
                if plog is not None:
                    plog.retired = True
            await asyncio.sleep(0)
        self.delete_topic(topic)

    def delete_topic(self, topic: str) -> None:
        """Forget a deleted topic's logs, index entries, markers and producer state
        (call after its stream is deleted, before a topic of the same name is created)."""
        for key in [k for k in self._logs if k[0] == topic]:
            self._logs.pop(key).retired = True
        prefix = f"{self.topics.scope}/{topic}/"
        for name in [n for n in self._markers if n.startswith(prefix)]:
            del self._markers[name]
        self.index.delete_topic(topic, f"{self.topics.scope}/{topic}/")
        self.producers.forget_topic(topic)
        if self.traffic is not None:
            self.traffic.forget_topic(topic)
        if self.index_hook is not None:
            self.index_hook.forget_topic(topic)

    def close(self) -> None:
        """Stop: appends still in flight are abandoned (not indexed, never answered as
        durable; the next start indexes whatever of them the store kept)."""
        self.closed = True
        for task in self._tasks:
            task.cancel()

    async def drain(self, timeout_s: float) -> None:
        """Wait (bounded) until every log has no append in flight."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while any(not plog.idle for plog in self._logs.values()) or self._tasks:
            if self._index_waiters:  # a full disk: what waits is in the segments
                log.warning("shutdown with appends waiting for the offset index: they are "
                            "in Tier-1 and indexed at the next start")
                return
            if asyncio.get_running_loop().time() > deadline:
                log.warning("appends still in flight at shutdown")
                return
            await asyncio.sleep(0.01)

    # -- rebuild -----------------------------------------------------------------------

    async def rebuild(self) -> int:
        """Index everything past the markers; return the number of envelopes indexed."""
        return await self.rebuild_where(lambda name: True)

    async def rebuild_where(self, pick: Callable[[str], bool], *, strict: bool = False,
                            topics: Iterable[str] | None = None,
                            down: set[int] | None = None) -> int:
        """Index what the picked segments (by name) of ``topics`` (default: all) hold past
        their markers (cluster mode: a node that newly leads partitions catches up on what
        another node appended). ``strict``: an unavailable segment fails it (a partition
        about to be served); else its container is skipped and added to ``down``, which
        passes of several calls may share."""
        count = 0
        ends: dict[tuple[str, int], int] = {}
        if not strict and down is None:
            down = set()
        names = self.topics.names()
        if topics is not None:
            wanted = set(topics)
            names = [t for t in names if t in wanted]
        for topic in names:
            segments = await self.topics.all_segments(topic)
            names_of = [self.topics.segment_name(topic, seg.id) for seg in segments]
            unread = _KeyRanges()  # older segments left for later: what follows them waits
            for seg, name in _with_predecessors(segments, names_of, pick):
                if unread.overlaps(seg.key_start, seg.key_end):
                    continue
                self.forget_marker(name)  # what this node knew of it may be behind
                count += await self._rebuild_or_skip(topic, seg.id, None if strict else down, ends)
                if down and self.container_of is not None and self.container_of(name) in down:
                    unread.add(seg.key_start, seg.key_end)
        return count

    async def _rebuild_or_skip(self, topic: str, segment_id: int, down: set[int] | None,
                               ends: dict[tuple[str, int], int]) -> int:
        """With ``container_of`` (cluster mode), a segment whose container is not
        available is left for later, and so are the rest of that container's
        in this pass: a partition is caught up before it is served
        (``gateway/cluster/leadership.py``), so start-up need not wait for it."""
        if self.container_of is None or down is None:
            return await self._rebuild_segment(topic, segment_id, ends)
        name = self.topics.segment_name(topic, segment_id)
        container = self.container_of(name)
        if container in down:
            return 0
        try:
            count = await self._rebuild_segment(topic, segment_id, ends)
        except UNAVAILABLE as exc:
            down.add(container)
            log.warning("index rebuild: container %d not available (%r); its segments are "
                        "indexed when their partitions are next led here", container, exc)
            return 0
        return count

    def cached(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def retire_where(self, drop: Callable[[str, int], bool]) -> int:
        """Forget the cached logs of the picked partitions; the next ``get`` opens them
        again from the index (their high watermark and next offset as indexed)."""
        keys = [k for k in self._logs if drop(*k)]
        for key in keys:
            self._logs.pop(key).retired = True
        return len(keys)

    def abandon_where(self, drop: Callable[[str, int], bool]) -> int:
        """``retire_where``, and the picked logs' appends not yet sent fail at once
        (``PartitionLog.abandon``): their container was given to another node."""
        keys = [k for k in self._logs if drop(*k)]
        for key in keys:
            self._logs.pop(key).abandon()
        return len(keys)

    async def _read_exact(self, name: str, offset: int, length: int) -> bytes:
        out = bytearray()
        while len(out) < length:
            result = await self.store.read(name, offset + len(out), length - len(out))
            if not result.chunks:
                raise InvalidEnvelopeError(f"{name}: short read at {offset + len(out)}")
            for chunk in result.chunks:
                out += chunk
        return bytes(out)

    async def _rebuild_segment(self, topic: str, segment_id: int,
                               ends: dict[tuple[str, int], int]) -> int:
        """Index the envelopes of one segment past its marker. ``ends``: each partition's
        indexed end as this rebuild began (filled as partitions are met)."""
        name = self.topics.segment_name(topic, segment_id)
        try:
            info = await self.store.get_info(name)
        except SegmentNotFoundError:
            return 0  # truncated away or merged
        position = max(self.index.marker(name), info.start_offset)
        count = 0
        max_ts: dict[int, int] = {}
        reader = _ForwardReader(self, name, info.length, self._rebuild_read_bytes)
        while position < info.length:
            try:
                head = await reader.read(position, ENVELOPE_BYTES)
                env = decode_envelope(head)
                payload = await reader.read(position + ENVELOPE_BYTES, env.payload_length)
                batches = list(iter_batches(payload, check_crc=False))
            except (InvalidEnvelopeError, InvalidBatchError, SegmentTruncatedError) as exc:
                log.error("index rebuild stops in %s at %d: %r", name, position, exc)
                break
            write = self.index.batch()
            end = ends.get((topic, env.partition))
            if end is None:
                last = self.index.last(topic, env.partition)
                end = ends[(topic, env.partition)] = last.last_offset + 1 if last else 0
            kept = [b for b in batches if self._indexable(write, topic, env.partition, end, b)]
            for b in kept:
                entry = IndexEntry(
                    b.base_offset, b.last_offset, segment_id,
                    position + ENVELOPE_BYTES + b.position, b.size, b.max_timestamp,
                )
                write.entry(topic, env.partition, entry)
                if env.partition not in max_ts:
                    known = self.index.max_timestamp(topic, env.partition)
                    max_ts[env.partition] = known[0] if known else -(1 << 62)
                if b.max_timestamp > max_ts[env.partition]:
                    max_ts[env.partition] = b.max_timestamp
                    write.time_entry(topic, env.partition, b.max_timestamp, b.base_offset)
                if b.is_idempotent:
                    self.producers.replay(write, topic, env.partition, b)
            if self.index_hook is not None:
                self.index_hook.on_indexed(write, topic, env.partition, kept, payload)
            position += env.size
            write.marker(name, position)
            write.commit()
            count += 1
            if count % ENVELOPES_PER_STEP == 0:
                await asyncio.sleep(0)
        return count

    def _indexable(self, write: IndexWrite, topic: str, partition: int, indexed_end: int,
                   b: BatchHeader) -> bool:
        """Whether the rebuild indexes a batch found in a segment. Left out, so that a
        batch is stored once: an append that landed though it was reported failed (a
        Tier-1 failover; its producer retried it at new offsets), which is a batch below
        the partition's indexed end that the index does not hold (the leader skipped its
        offsets and served the log without it), or past that end a copy of an idempotent
        batch already indexed. Their offsets are never handed out again (``end_floor``)."""
        held = self.index.floor(topic, partition, b.base_offset)
        if held is not None and held.base_offset == b.base_offset:
            return True  # indexed already (walked again from an older marker)
        if b.base_offset >= indexed_end and not (
            b.is_idempotent and not b.is_control and self.producers.is_copy(topic, partition, b)
        ):
            return True
        log.warning("index rebuild: %s/%d offsets %d-%d (producer %d, sequence %d) hold an "
                    "append reported failed or a copy of one stored before; left out", topic,
                    partition, b.base_offset, b.last_offset, b.producer_id, b.base_sequence)
        if b.last_offset + 1 > self.index.end_floor(topic, partition):
            write.end_floor(topic, partition, b.last_offset + 1)
        return False

    # -- reads -------------------------------------------------------------------------

    async def read_batches(
        self, plog: PartitionLog, offset: int, max_bytes: int, must_return_one: bool,
        end_offset: int | None = None,
    ) -> list[memoryview]:
        """Whole batches from ``offset`` up to the high watermark (or ``end_offset``, the
        last stable offset for ``read_committed``), at most ``max_bytes`` unless
        ``must_return_one`` and the first batch alone is larger."""
        out: list[memoryview] = []
        total = 0
        hw = plog.high_watermark if end_offset is None else min(end_offset, plog.high_watermark)
        recent = plog.recent
        entries: Iterable[IndexEntry]
        if recent and recent[0].base_offset <= offset:
            # A copy: appends may add to ``recent`` while this read awaits.
            first = max(bisect.bisect_right(recent, offset, key=_base_offset) - 1, 0)
            entries = [e for e in itertools.islice(recent, first, None) if e.last_offset >= offset]
        else:
            entries = self.index.entries_from(plog.topic, plog.partition, offset)
        records = 0
        for entry in entries:
            if entry.base_offset >= hw:
                break
            if total + entry.length > max_bytes and (out or not must_return_one):
                break
            name = self.topics.segment_name(plog.topic, entry.segment_id)
            chunks = await self._read_entry(name, entry)
            out.extend(chunks)
            total += entry.length
            records += entry.last_offset + 1 - entry.base_offset
        if total and self.io is not None:
            self.io.sent(plog.topic, total, records)
        return out

    async def _read_entry(self, name: str, entry: IndexEntry) -> list[memoryview]:
        chunks: list[memoryview] = []
        got = 0
        while got < entry.length:
            result = await self.store.read(name, entry.position + got, entry.length - got)
            if not result.chunks:
                raise SegmentNotFoundError(name, f"short read at {entry.position + got}")
            for chunk in result.chunks:
                chunks.append(chunk)
                got += len(chunk)
        return chunks

    async def read_entry(self, topic: str, entry: IndexEntry) -> bytes:
        """One whole batch as bytes (for the rare paths that decode records)."""
        name = self.topics.segment_name(topic, entry.segment_id)
        return b"".join(await self._read_entry(name, entry))


class _ForwardReader:
    """One segment read forward for the rebuild, ``block_bytes`` (``rebuild.read.bytes``)
    at a time up to its length as the rebuild began: the rebuild takes two small reads
    per append, and a segment on another node answers each read in a round trip."""

    def __init__(self, logs: PartitionLogs, name: str, end: int, block_bytes: int) -> None:
        self._logs, self._name, self._end, self._block_bytes = logs, name, end, block_bytes
        self._buffer = b""
        self._at = 0

    async def read(self, offset: int, length: int) -> bytes:
        start = offset - self._at
        if start < 0 or start + length > len(self._buffer):
            want = max(length, min(self._block_bytes, self._end - offset))
            self._buffer = await self._logs._read_exact(self._name, offset, want)
            self._at, start = offset, 0
        return self._buffer[start : start + length]


def _base_offset(entry: IndexEntry) -> int:
    return entry.base_offset


def _with_predecessors(
    segments: list[SegmentRecord], names: list[str], pick: Callable[[str], bool]
) -> list[tuple[SegmentRecord, str]]:
    """The picked segments (``segments`` oldest epoch first) and every older segment whose
    key range meets one of theirs, in that order. A partition's segments are indexed in
    the order they were written: a batch below a partition's indexed end that the index
    lacks is taken for an append reported failed and left out (``_indexable``), so an
    older segment read after a newer one (a node with an empty index that gained only the
    newer one's container) lost its batches from this node's index."""
    needed = _KeyRanges()
    chosen = []
    for seg, name in zip(reversed(segments), reversed(names), strict=True):
        if pick(name) or needed.overlaps(seg.key_start, seg.key_end):
            needed.add(seg.key_start, seg.key_end)
            chosen.append((seg, name))
    chosen.reverse()
    return chosen


class _KeyRanges:
    """A union of half-open key ranges, kept as sorted disjoint intervals."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def overlaps(self, lo: float, hi: float) -> bool:
        i = bisect.bisect_right(self.ends, lo)  # the first interval ending past lo
        return i < len(self.starts) and self.starts[i] < hi

    def add(self, lo: float, hi: float) -> None:
        i = bisect.bisect_left(self.ends, lo)  # intervals i..j-1 meet or touch [lo, hi)
        j = bisect.bisect_right(self.starts, hi)
        if i < j:
            lo, hi = min(lo, self.starts[i]), max(hi, self.ends[j - 1])
        self.starts[i:j] = [lo]
        self.ends[i:j] = [hi]
