"""Log start offsets and the stream's truncation point, kept consistent both ways.

A partition's log start offset is logical, per partition and durable (the offset index's
``s`` key); a segment may hold several partitions, so the stream can only be truncated
where *every* partition in a segment allows:

- ``truncate_to_log_starts`` (after DeleteRecords) moves the stream's truncation point
  forward as far as all log starts allow. In each segment the cut is the least of, over
  the topic's partitions, the envelope start of the partition's first retained batch
  there, and of the segment's indexed end
  (``OffsetIndex.marker``: nothing unindexed, such as an append in flight, is cut). A
  sealed segment cut at its end is replaced in the cut by its successors once all their
  predecessors are as well. The cut is always an envelope start, so the index rebuild,
  which starts at a segment's start offset, stays on envelope boundaries.
- ``follow_truncation`` (after the controller's retention truncated the stream) raises
  each partition's log start past batches whose bytes are gone.

Partition entries are scanned from the log start for at most ``scan_entries_max``
entries: retained batches of a partition in a segment lie at the front of its retained
entries, except for re-sends reordered around a seal, which the in-flight window bounds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from tidegate.core.controller.api import (
    ConflictError,
    Controller,
    SegmentRecord,
    StreamNotFoundError,
)
from tidegate.core.segmentstore.api import SegmentNotFoundError, SegmentProperties, SegmentStore
from tidegate.gateway.config import GatewayConfig
from tidegate.gateway.log.compaction.checkpoint import clean_end_offset
from tidegate.gateway.log.envelope import ENVELOPE_BYTES
from tidegate.gateway.log.offset_index import IndexEntry, OffsetIndex
from tidegate.gateway.log.partitions import PARTITIONS_PER_STEP, PartitionLogs
from tidegate.gateway.log.topics import TopicRegistry

log = logging.getLogger(__name__)

SCAN_ENTRIES_MAX = 10_000


class LogStartContext(Protocol):
    """What moving log starts uses (the handlers' ``HandlerContext``): the topics and
    their partition logs, the offset index, the stream and segment APIs, and the node's
    configuration (the controller's retention period)."""

    @property
    def config(self) -> GatewayConfig: ...
    @property
    def controller(self) -> Controller: ...
    @property
    def store(self) -> SegmentStore: ...
    @property
    def topics(self) -> TopicRegistry: ...
    @property
    def logs(self) -> PartitionLogs: ...
    @property
    def index(self) -> OffsetIndex: ...


class _Segments:
    """Segment properties, read once per operation."""

    def __init__(self, ctx: LogStartContext, topic: str) -> None:
        self.ctx = ctx
        self.topic = topic
        self._props: dict[int, SegmentProperties | None] = {}

    async def props(self, seg_id: int) -> SegmentProperties | None:
        if seg_id not in self._props:
            name = self.ctx.topics.segment_name(self.topic, seg_id)
            try:
                self._props[seg_id] = await self.ctx.store.get_info(name)
            except SegmentNotFoundError:
                self._props[seg_id] = None
        return self._props[seg_id]


def _envelope_start(ctx: LogStartContext, topic: str, partition: int, e: IndexEntry) -> int:
    """Start of the envelope holding batch ``e``: batches of one append are contiguous
    and at consecutive offsets, and every envelope begins with its header."""
    while e.base_offset > 0:
        prev = ctx.index.floor(topic, partition, e.base_offset - 1)
        if prev is None or prev.segment_id != e.segment_id or prev.position + prev.length != e.position:
            break
        e = prev
    return e.position - ENVELOPE_BYTES


def _retained_starts(
    ctx: LogStartContext, topic: str, partition: int, scan_entries_max: int
) -> dict[int, int]:
    """segment id → the least envelope start of the partition's retained batches there."""
    plog = ctx.logs.get(topic, partition)
    out: dict[int, int] = {}
    # A compacted partition's entries below its cleaner checkpoint are in its clean
    # segment, none in the stream's (gateway/log/compaction).
    cleaned = ctx.index.clean_checkpoint(topic, partition)
    start = max(plog.log_start_offset, clean_end_offset(cleaned) if cleaned else 0)
    for n, e in enumerate(ctx.index.entries_from(topic, partition, start)):
        if n >= scan_entries_max:
            break
        if e.segment_id not in out or e.position - ENVELOPE_BYTES < out[e.segment_id]:
            out[e.segment_id] = _envelope_start(ctx, topic, partition, e)
    return out


async def truncate_to_log_starts(
    ctx: LogStartContext, topic: str, *, scan_entries_max: int = SCAN_ENTRIES_MAX
) -> dict[int, int] | None:
    """Truncate the topic's stream as far as every partition's log start allows; return
    the cut applied, or None when it cannot move (or another workflow holds the stream:
    the next call catches up)."""
    info = ctx.topics.get(topic)
    if info is None:
        return None
    scope = ctx.topics.scope
    head = await ctx.controller.get_head_segments(scope, topic)
    # segment id → the least envelope start of any partition's retained batches there
    retained: dict[int, int] = {}
    for p in range(info.partitions):
        if p % PARTITIONS_PER_STEP == PARTITIONS_PER_STEP - 1:
            await asyncio.sleep(0)  # index scans of a slice of partitions per loop step
        for seg_id, start in _retained_starts(ctx, topic, p, scan_entries_max).items():
            retained[seg_id] = min(start, retained.get(seg_id, start))
    segments = _Segments(ctx, topic)

    async def limit(seg_id: int) -> tuple[int, bool]:
        """How far the segment may be cut, and whether that is its sealed end."""
        props = await segments.props(seg_id)
        if props is None:
            return 0, False
        end = min(ctx.index.marker(ctx.topics.segment_name(topic, seg_id)), props.length)
        end = max(min(end, retained.get(seg_id, end)), props.start_offset)
        return end, props.sealed and end == props.length

    succ_cache: dict[int, dict[SegmentRecord, list[int]]] = {}

    async def successors_of(seg_id: int) -> dict[SegmentRecord, list[int]]:
        if seg_id not in succ_cache:
            succ_cache[seg_id] = await ctx.controller.get_successors(scope, topic, seg_id)
        return succ_cache[seg_id]

    cut = dict(head)
    done: dict[int, bool] = {}
    changed = True
    while changed:
        changed = False
        for n, seg_id in enumerate(list(cut)):
            if n % PARTITIONS_PER_STEP == PARTITIONS_PER_STEP - 1:
                await asyncio.sleep(0)  # thousands of segments: a loop step per slice
            if seg_id not in done:
                cut[seg_id], done[seg_id] = await limit(seg_id)
        for seg_id in list(cut):
            if seg_id not in cut or not done.get(seg_id):
                continue
            # The group of segments that must leave the cut together: all predecessors
            # of all successors, transitively; it moves only if each is cut at its end.
            group, successors, todo = {seg_id}, set(), [seg_id]
            while todo:
                for succ, preds in (await successors_of(todo.pop())).items():
                    successors.add(succ.id)
                    for p in preds:
                        if p not in group:
                            group.add(p)
                            todo.append(p)
            if not successors or not all(p in cut and done.get(p) for p in group):
                continue
            for p in group:
                del cut[p]
            for s in successors:
                cut[s] = 0
            changed = True
    if cut == head:
        return None
    try:
        await ctx.controller.truncate(scope, topic, cut)
    except ConflictError as exc:
        log.info("truncation of %s deferred: %s", topic, exc)
        return None
    return cut


async def follow_truncation(ctx: LogStartContext, topic: str) -> dict[int, int]:
    """Raise the log start of each partition of ``topic`` past batches no longer in
    their segments (truncated or deleted); return the partitions moved → new start."""
    info = ctx.topics.get(topic)
    if info is None:
        return {}
    segments = _Segments(ctx, topic)
    moved: dict[int, int] = {}
    pending: dict[int, int] = {}  # moved, not stored yet: one synced write per slice
    for p in range(info.partitions + 1):
        changed = ctx.topics.get(topic) is not info
        if changed or p == info.partitions or p % PARTITIONS_PER_STEP == PARTITIONS_PER_STEP - 1:
            current = ctx.topics.get(topic)
            if pending and current is not None and not current.deleting:
                ctx.logs.set_log_starts(topic, pending)
                moved.update(pending)
                pending = {}
            if changed or p == info.partitions:
                break  # deleted or changed meanwhile: a later round catches up
            await asyncio.sleep(0)  # index scans of a slice of partitions per loop step
        plog = ctx.logs.get(topic, p)
        start = plog.log_start_offset
        for e in ctx.index.entries_from(topic, p, start):
            if e.base_offset >= plog.high_watermark:
                start = max(start, plog.high_watermark)
                break
            props = await segments.props(e.segment_id)
            if props is not None and e.position >= props.start_offset:
                break  # a gap before it is not truncation (a compacted topic's cleaning)
            start = e.last_offset + 1
        if start > plog.log_start_offset:
            pending[p] = start
    return moved


#: How often log starts follow the stream head when the node's configuration does not
#: set the controller's retention period.
FOLLOW_PERIOD_MS_DEFAULT = 10_000


def follow_period_ms(ctx: LogStartContext) -> int:
    """The controller's retention period (``[controller] retention_period_ms`` in the node's
    config: the follower runs as often as the controller may truncate), else
    ``FOLLOW_PERIOD_MS_DEFAULT``."""
    configured = ctx.config.controller.get("retention_period_ms")
    return int(configured) if configured else FOLLOW_PERIOD_MS_DEFAULT


@runtime_checkable
class TruncationEvents(Protocol):
    """A controller that says when it has truncated a stream (``StreamController``)."""

    def on_truncated(
        self, listener: Callable[[str, str], Awaitable[None]]
    ) -> Callable[[], None]: ...


class RetentionFollower:
    """Runs ``follow_truncation`` for a topic as soon as the controller says it truncated
    the topic's stream (a controller with ``TruncationEvents``), and for every topic each
    ``period_ms`` for any other controller, so a truncation by the retention policy
    moves the log starts that Fetch and ListOffsets report (until then Fetch answers
    OFFSET_OUT_OF_RANGE for the bytes already gone). Kept in
    ``HandlerContext.retention_follower``."""

    def __init__(self, ctx: LogStartContext, *, period_ms: int | None = None) -> None:
        self.ctx = ctx
        self.period_ms = period_ms if period_ms is not None else follow_period_ms(ctx)
        self._task: asyncio.Task[None] | None = None
        #: The stream head each topic's log starts were last brought up to.
        self._heads: dict[str, dict[int, int]] = {}
        self._unsubscribe: Callable[[], None] | None = None

    def start(self) -> None:
        if isinstance(self.ctx.controller, TruncationEvents) and self._unsubscribe is None:
            self._unsubscribe = self.ctx.controller.on_truncated(self._truncated)
        if self.period_ms > 0 and self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _truncated(self, scope: str, stream: str) -> None:
        if scope != self.ctx.topics.scope or self.ctx.topics.get(stream) is None:
            return
        moved = await follow_truncation(self.ctx, stream)
        if moved:
            log.info("truncation moved the log start of %s: %s", stream, moved)

    async def run_once(self) -> None:
        """Follow every topic whose stream head moved since the last round."""
        for topic in self.ctx.topics.names():
            try:
                head = await self.ctx.controller.get_head_segments(self.ctx.topics.scope, topic)
                if self._heads.get(topic) == head:
                    continue
                moved = await follow_truncation(self.ctx, topic)
                self._heads[topic] = head
            except StreamNotFoundError:
                self._heads.pop(topic, None)  # deleted since it was listed
                continue
            except Exception:
                log.exception("following the truncation of %s", topic)
                continue
            if moved:
                log.info("retention moved the log start of %s: %s", topic, moved)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period_ms / 1000)
            await self.run_once()

    async def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
