"""The log cleaner of compacted topics (``docs/compaction.md``): per partition, find the
cleanable dirty range, map its keys to their latest offsets (bounded map, several passes),
rewrite the partition up to the range's end into a new clean segment, and switch the
offset index to it in one synced RocksDB write.

Contract: a pass never blocks produce or fetch for longer than one batch's decoding; the
index switch is the only moment readers change version and both versions are durable
then; a ``kill -9`` anywhere leaves at most an unreferenced clean segment, deleted by
the next pass over that partition.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any, Protocol

from tidegate.core.controller.api import RetentionType
from tidegate.core.segmentstore.api import (
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentStore,
)
from tidegate.gateway.log import topic_config
from tidegate.gateway.log.compaction.checkpoint import Checkpoint
from tidegate.gateway.log.compaction.policy import CleaningConfig, cleanable, should_clean
from tidegate.gateway.log.compaction.records import iter_records, records_area
from tidegate.gateway.log.compaction.retain import Retention, key_digest
from tidegate.gateway.log.compaction.stepped import SteppedRewrite
from tidegate.gateway.log.compaction.txns import CleanedTxns, TxnIndex
from tidegate.gateway.log.offset_index import IndexEntry, OffsetIndex
from tidegate.gateway.log.partition_log import PartitionLog
from tidegate.gateway.log.partitions import PARTITIONS_PER_STEP
from tidegate.gateway.log.topics import TopicInfo
from tidegate.gateway.txn.markers import marker_type
from tidegate.protocol.record_batch import read_header

log = logging.getLogger(__name__)

#: Clean segments live outside the controller's epochs: epoch field 2**30 + partition,
#: number field the generation (``qualified_segment_name`` gives their store names).
CLEAN_EPOCH_BASE = 1 << 30
#: What one key of the map costs in CPython (a 16-byte digest object, an int, a slot).
KEY_ENTRY_BYTES = 120
#: Index entries one pass looks at in the dirty section.
ENTRIES_PER_PASS_MAX = 100_000


def clean_segment_id(partition: int, generation: int) -> int:
    return ((CLEAN_EPOCH_BASE + partition) << 32) | (generation & 0xFFFFFFFF)


@dataclass
class PassStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    seconds: float = 0.0


class Topics(Protocol):
    def names(self) -> list[str]: ...

    def get(self, name: str) -> TopicInfo | None: ...

    def segment_name(self, topic: str, segment_id: int) -> str: ...


class Partitions(Protocol):
    def get(self, topic: str, partition: int) -> PartitionLog: ...

    async def read_entry(self, topic: str, entry: IndexEntry) -> bytes: ...


class LogCleaner:
    """Held by ``gateway.app.Gateway`` (``cleaner``), started and closed with it."""

    def __init__(
        self, topics: Topics, logs: Partitions, index: OffsetIndex, store: SegmentStore, *,
        backoff_ms: int = 15_000, dedupe_buffer_bytes: int = 128 << 20,
        switch_entries_max: int = 50_000,
        append_bytes_max: int = 1 << 20, clock_ms: Callable[[], int] | None = None,
        reclaim: Callable[[str], Awaitable[object]] | None = None,
        io_bytes_per_second_max: float = 0, txns: TxnIndex | None = None,
    ) -> None:
        self.topics = topics
        self.logs = logs
        self.index = index
        self.store = store
        self.backoff_ms = backoff_ms
        self.keys_max = max(dedupe_buffer_bytes // KEY_ENTRY_BYTES, 1)
        self.append_bytes_max = append_bytes_max
        #: Index entries one pass holds before switching them (its memory bound beyond
        #: the key map): the rewrite is switched in steps of at most this many batches.
        self.switch_entries_max = max(switch_entries_max, 1)
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        #: Truncates the topic's stream as far as what still refers to it allows.
        self.reclaim = reclaim
        #: Bytes read per second over a pass (0: no bound): the cleaner shares the event
        #: loop and the CPU with produce and fetch.
        self.io_bytes_per_second_max = io_bytes_per_second_max
        #: The transaction index: the last stable offset bounds what is cleaned, aborted
        #: records go, markers go once safe (``compaction/txns.py``).
        self.txns = txns
        self._pass_started = 0.0
        self._pass_bytes = 0
        self.stats = PassStats()
        self._task: asyncio.Task[None] | None = None
        self._deletions: set[asyncio.Task[None]] = set()
        self._swept: set[tuple[str, int]] = set()
        self._reclaimed: set[str] = set()
        #: Topics whose log start retention moved in this pass: their stream is truncated
        #: behind it.
        self._retained: set[str] = set()

    def start(self) -> None:
        if self.backoff_ms > 0 and self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        for task in [self._task, *self._deletions]:
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.backoff_ms / 1000)
            await self.run_once()

    async def run_once(self) -> int:
        """One pass over every compacted partition; the number cleaned."""
        cleaned = 0
        for topic in self.topics.names():
            info = self.topics.get(topic)
            if info is None:
                continue
            if not topic_config.is_compacted(info.configs):
                await self._expire_cleaned(info)
                continue
            done = 0
            for p in range(info.partitions):
                try:
                    done += await self.clean_partition(info, p)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("cleaning %s/%d", topic, p)
            retained = topic in self._retained
            self._retained.discard(topic)
            if self.reclaim is not None and (done or retained or topic not in self._reclaimed):
                # Not at once: a fetch may still be reading the bytes just replaced
                # (at the first pass of a process, none is).
                delay_ms = CleaningConfig.of(info.configs).file_delete_delay_ms
                self._later(delay_ms if topic in self._reclaimed else 0,
                            functools.partial(self._reclaim, topic))
                self._reclaimed.add(topic)
            cleaned += done
        return cleaned

    def checkpoint(self, topic: str, partition: int) -> Checkpoint | None:
        raw = self.index.clean_checkpoint(topic, partition)
        return None if raw is None else Checkpoint.decode(raw)

    async def clean_partition(self, info: TopicInfo, partition: int) -> bool:
        topic = info.name
        cfg = CleaningConfig.of(info.configs)
        plog = self.logs.get(topic, partition)
        if plog.failed is not None or plog.retired:
            return False
        now = self.clock_ms()
        cp = self.checkpoint(topic, partition) or Checkpoint(plog.log_start_offset, 0, 0)
        if (topic, partition) not in self._swept:
            await self._sweep(topic, partition, cp.generations)
        last = self.index.last(topic, partition)
        if last is None:
            return False
        if cfg.retention_ms >= 0 or cfg.retention_bytes >= 0:
            if self._apply_retention(plog, last, cfg, now):
                self._retained.add(topic)
        start = max(cp.end_offset, plog.log_start_offset)
        dirty = list(islice(self.index.entries_from(topic, partition, start), ENTRIES_PER_PASS_MAX))
        storage: dict[int, int] = {}
        for seg_id in {e.segment_id for e in dirty}:
            if seg_id >> 32 >= CLEAN_EPOCH_BASE:  # a step of a pass that did not finish
                storage[seg_id] = 1 << 62
                continue
            try:
                props = await self.store.get_info(self.topics.segment_name(topic, seg_id))
                storage[seg_id] = props.storage_length
            except SegmentNotFoundError:
                storage[seg_id] = -1
        # An open transaction's records (from the last stable offset on) are never cleaned.
        stable = last.base_offset if self.txns is None else min(
            last.base_offset, self.txns.last_stable_offset(topic, partition, plog.high_watermark))
        range_ = cleanable(dirty, dirty[0].base_offset if dirty else start, stable,
                           cfg, now, lambda e: e.position + e.length <= storage[e.segment_id])
        tombstones_due = cp.tombstone_ms <= now - cfg.delete_retention_ms
        if not should_clean(range_, cp.clean_bytes, cfg, now) and not tombstones_due:
            return False
        t0, read0 = time.monotonic(), self.stats.bytes_read
        self._pass_started, self._pass_bytes = t0, 0
        mapped = [e for e in dirty if e.base_offset < range_.end]
        keys, end = await self._map_keys(topic, partition, mapped) if mapped else ({}, start)
        if end <= plog.log_start_offset or (end <= range_.start and not tombstones_due):
            return False
        done = await self._rewrite(info, plog, cp, keys, end, cfg, now)
        seconds = time.monotonic() - t0
        self.stats.seconds += seconds
        if done:
            log.info("cleaned %s/%d below offset %d: %d bytes read in %.3f s, %d keys mapped",
                     topic, partition, end, self.stats.bytes_read - read0, seconds, len(keys))
        return done

    async def _expire_cleaned(self, info: TopicInfo) -> None:
        """A topic no longer compacted keeps what was cleaned in its clean segments,
        which the stream's retention does not reach: its time retention moves the log
        start past them instead. Only partitions with a checkpoint are visited (a topic
        never compacted has none, however many partitions it has)."""
        retention = topic_config.stream_config(info.configs, info.partitions).retention
        if retention is None or retention.type != RetentionType.TIME:
            return
        now = self.clock_ms()
        cleaned = list(self.index.clean_checkpoints(info.name))
        for n, (p, raw) in enumerate(cleaned):
            if n % PARTITIONS_PER_STEP == PARTITIONS_PER_STEP - 1:
                await asyncio.sleep(0)  # index reads of a slice of partitions per loop step
            if self.topics.get(info.name) is not info:
                return  # deleted or changed meanwhile: a later pass catches up
            if p >= info.partitions:
                continue
            plog = self.logs.get(info.name, p)
            last = self.index.last(info.name, p)
            if last is not None and plog.log_start_offset < Checkpoint.decode(raw).end_offset:
                cfg = replace(CleaningConfig.of(info.configs), retention_ms=retention.value,
                              retention_bytes=-1)
                self._apply_retention(plog, last, cfg, now)

    def _apply_retention(
        self, plog: PartitionLog, last: IndexEntry, cfg: CleaningConfig, now: int
    ) -> bool:
        """``compact,delete``: the log start passes batches older than ``retention.ms``
        and the oldest while the partition holds more than ``retention.bytes`` (never
        its last batch). The stream is truncated behind it later (``reclaim``), so an
        offset at or past the log start always has its bytes."""
        topic, partition, start = plog.topic, plog.partition, plog.log_start_offset
        excess = -1
        if cfg.retention_bytes >= 0:
            excess = sum(e.length for e in self.index.entries_from(topic, partition, start))
            excess -= cfg.retention_bytes
        for e in self.index.entries_from(topic, partition, start):
            if e.base_offset >= last.base_offset:
                break
            expired = 0 <= cfg.retention_ms and e.max_timestamp <= now - cfg.retention_ms
            if not expired and excess <= 0:
                break
            excess -= e.length
            start = e.last_offset + 1
        if start > plog.log_start_offset:
            plog.set_log_start(start)
            return True
        return False

    def _cleaned_txns(self, topic: str, partition: int, start: int, end: int) -> CleanedTxns:
        aborted = [] if self.txns is None else self.txns.aborted(topic, partition, start, end)
        return CleanedTxns(aborted)

    async def _map_keys(
        self, topic: str, partition: int, entries: list[IndexEntry]
    ) -> tuple[dict[bytes, int], int]:
        """Key digest → latest offset over ``entries``, and the offset where the map
        stopped (it fills: the rest waits for the next pass). Records of aborted
        transactions are not mapped: they never replace a committed value."""
        keys: dict[bytes, int] = {}
        end = entries[0].base_offset if entries else 0
        txns = self._cleaned_txns(topic, partition, end, entries[-1].last_offset + 1) if entries \
            else CleanedTxns([])
        for e in entries:
            data = await self.logs.read_entry(topic, e)
            self.stats.bytes_read += len(data)
            header = read_header(data)
            # Markers are not keyed data (but end their transaction); aborted records
            # never replace a committed value.
            if header.is_control:
                txns.on_marker(header, marker_type(data, header))
            skip = header.is_control or txns.on_batch(header)
            found = [] if skip else [
                (key_digest(r.key), header.base_offset + r.offset_delta)
                for r in iter_records(records_area(data, header), header.record_count)
                if r.key is not None]
            fresh = sum(1 for d, _ in found if d not in keys)
            if keys and len(keys) + fresh > self.keys_max:
                break
            keys.update(found)
            end = e.last_offset + 1
            await self._throttle(len(data))
        return keys, end

    async def _rewrite(
        self, info: TopicInfo, plog: PartitionLog, cp: Checkpoint, keys: dict[bytes, int],
        end: int, cfg: CleaningConfig, now: int,
    ) -> bool:
        topic, partition = info.name, plog.partition
        generation = cp.generations[-1] + 1
        seg_id = clean_segment_id(partition, generation)
        name = self.topics.segment_name(topic, seg_id)
        try:
            await self.store.create_segment(name)
        except SegmentExistsError:  # left by a pass that crashed before its first switch
            await self.store.delete_segment(name)
            await self.store.create_segment(name)
        rewrite = SteppedRewrite(
            _PassIO(self), self.index, self.txns, lambda: self.topics.get(topic) is info,
            plog, cp, generation, seg_id, name, self.append_bytes_max, self.switch_entries_max)
        try:
            done = await rewrite.run(
                Retention(keys, self._cleaned_txns(topic, partition, plog.log_start_offset, end),
                          functools.partial(cp.first_cleaned_ms, now_ms=now),
                          now - cfg.delete_retention_ms), end, now)
        except BaseException:
            if not rewrite.switched:  # nothing points into it yet
                await self.store.delete_segment(name)
            raise
        if not done:
            if not rewrite.switched:
                await self.store.delete_segment(name)
            return False
        self.stats.bytes_written += rewrite.written
        self.stats.records_removed += rewrite.removed
        for g in cp.generations:
            if g > 0:
                old = self.topics.segment_name(topic, clean_segment_id(partition, g))
                self._later(cfg.file_delete_delay_ms, functools.partial(self._delete, old))
        return True

    async def _throttle(self, size: int) -> None:
        """Yield to the event loop, and sleep while the pass reads faster than its bound."""
        self._pass_bytes += size
        delay_s = 0.0
        if self.io_bytes_per_second_max > 0:
            elapsed_s = time.monotonic() - self._pass_started
            delay_s = max(self._pass_bytes / self.io_bytes_per_second_max - elapsed_s, 0.0)
        await asyncio.sleep(delay_s)

    async def _append(self, name: str, buffer: bytearray, expected: int) -> int:
        size = len(buffer)
        await self.store.append(name, bytes(buffer), expected_offset=expected)
        buffer.clear()
        return size

    async def _reclaim(self, topic: str) -> None:
        assert self.reclaim is not None
        await self.reclaim(topic)

    async def _delete(self, name: str) -> None:
        try:
            await self.store.delete_segment(name)
        except SegmentNotFoundError:
            pass

    def _later(self, delay_ms: int, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        async def run() -> None:
            await asyncio.sleep(delay_ms / 1000)
            try:
                await work()
            except Exception:
                log.exception("the cleaner's delayed work failed")

        task = asyncio.ensure_future(run())
        self._deletions.add(task)
        task.add_done_callback(self._deletions.discard)

    async def _sweep(self, topic: str, partition: int, live: range) -> None:
        """Delete the clean segments a crash may have left: the generation before the
        live ones (its delayed deletion) and the one after (a pass before its first
        switch)."""
        for g in (live[0] - 1, live[-1] + 1):
            if g > 0:
                try:
                    await self.store.delete_segment(
                        self.topics.segment_name(topic, clean_segment_id(partition, g)))
                except SegmentNotFoundError:
                    pass
        self._swept.add((topic, partition))


async def delete_clean_segments(
    topics: Topics, index: OffsetIndex, store: SegmentStore, topic: str, partitions: int,
) -> Callable[[], Awaitable[None]]:
    """For DeleteTopics: note the clean segments of ``topic`` now (its checkpoints go
    with its index keys) and return the call that deletes them once its logs are retired
    (the generations around each checkpoint: a delayed deletion, a pass in flight)."""
    names = []
    for p in range(partitions):
        if p % PARTITIONS_PER_STEP == PARTITIONS_PER_STEP - 1:
            await asyncio.sleep(0)  # an index read per partition: a loop step per slice
        raw = index.clean_checkpoint(topic, p)
        if raw is not None:
            live = Checkpoint.decode(raw).generations
            names += [topics.segment_name(topic, clean_segment_id(p, x))
                      for x in range(live[0] - 1, live[-1] + 2) if x > 0]

    async def delete() -> None:
        for name in names:
            try:
                await store.delete_segment(name)
            except SegmentNotFoundError:
                pass

    return delete



class _PassIO:
    """The cleaner's reads, appends and read-rate bound, for ``SteppedRewrite``."""

    def __init__(self, cleaner: LogCleaner) -> None:
        self._cleaner = cleaner

    async def read(self, topic: str, entry: IndexEntry) -> bytes:
        data = await self._cleaner.logs.read_entry(topic, entry)
        self._cleaner.stats.bytes_read += len(data)
        return data

    async def append(self, name: str, buffer: bytearray, expected: int) -> int:
        return await self._cleaner._append(name, buffer, expected)

    async def throttle(self, size: int) -> None:
        await self._cleaner._throttle(size)
