"""ListOffsets (key 2): earliest (-2), latest (-1; the last stable offset with isolation
level 1, read_committed), max timestamp (-3), earliest local
(-4, the same as earliest here), and by timestamp (the first record whose timestamp is
at or after it; offset and timestamp -1 when none is). The time index finds the batch;
only that one batch is decoded (kafka-python's record reader, decompressing if needed)
to find the record, as Kafka does."""

from __future__ import annotations

import itertools
import logging
from typing import Any

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.record.default_records import DefaultRecordBatch
from tidegate.gateway.handlers import HandlerContext, RequestContext, lead_error
from tidegate.gateway.log.partition_log import PartitionLog
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(ListOffsetsRequest, ListOffsetsResponse, 1, 9)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4

_Topic = ListOffsetsResponse.ListOffsetsTopicResponse
_Partition = _Topic.ListOffsetsPartitionResponse

log = logging.getLogger(__name__)

#: Batches read after the time index's answer before giving up (compacted topics).
SCAN_BATCHES_MAX = 64


async def _records(ctx: HandlerContext, plog: PartitionLog, base_offset: int) -> list[tuple[int, int]]:
    """``(offset, timestamp)`` of every record in the batch at ``base_offset``."""
    entry = ctx.index.floor(plog.topic, plog.partition, base_offset)
    if entry is None:
        return []
    try:
        raw = await ctx.logs.read_entry(plog.topic, entry)
        return [(r.offset, r.timestamp) for r in DefaultRecordBatch(raw)]
    except Exception as exc:  # codec library missing, data truncated: batch granularity
        log.warning("cannot decode batch at %s/%d@%d: %r", plog.topic, plog.partition,
                    entry.base_offset, exc)
        return [(entry.base_offset, entry.max_timestamp)]


async def _lookup(
    ctx: HandlerContext, plog: PartitionLog, timestamp: int, read_committed: bool
) -> tuple[int, int]:
    # What a consumer of this isolation level may read (Kafka's lastFetchableOffset):
    # a record at or past it is not an answer, as Kafka's Partition filters them.
    fetchable = plog.high_watermark
    txns = ctx.partition_txns
    if read_committed and txns is not None:
        fetchable = txns.last_stable_offset(plog.topic, plog.partition, plog.high_watermark)
    if timestamp == LATEST:
        return fetchable, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return plog.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        found = ctx.index.max_timestamp(plog.topic, plog.partition)
        if found is None or found[1] >= fetchable:
            return -1, -1
        max_ts, base = found
        for offset, ts in await _records(ctx, plog, base):
            if ts == max_ts:
                return (offset, ts) if offset < fetchable else (-1, -1)
        return base, max_ts
    if timestamp < 0:
        return -1, -1
    found_base = ctx.index.offset_for_timestamp(plog.topic, plog.partition, timestamp)
    if found_base is None or found_base >= fetchable:
        return -1, -1
    # From the batch the time index names on: in a compacted topic it may be gone, or
    # hold no such record any more, and a later batch does.
    entries = ctx.index.entries_from(plog.topic, plog.partition, found_base)
    for entry in itertools.islice(entries, SCAN_BATCHES_MAX):
        if entry.base_offset >= fetchable:
            break
        for offset, ts in await _records(ctx, plog, entry.base_offset):
            if offset >= fetchable:
                return -1, -1
            if ts >= timestamp and offset >= plog.log_start_offset:
                return offset, ts
    return -1, -1


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    topics = []
    read_committed = req.api_version >= 2 and request.isolation_level == 1
    for topic in request.topics:
        info = ctx.topics.get(topic.name)
        partitions = []
        for p in topic.partitions:
            if info is None or not 0 <= p.partition_index < info.partitions:
                partitions.append(
                    _Partition(partition_index=p.partition_index,
                               error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                )
                continue
            epochs = ctx.leader_epochs
            current = p.current_leader_epoch if req.api_version >= 4 else -1
            error = await lead_error(ctx, topic.name, p.partition_index)
            if not error and epochs is not None:
                error = epochs.check(topic.name, p.partition_index, current)
            if error:
                partitions.append(_Partition(partition_index=p.partition_index, error_code=error,
                                             timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            plog = ctx.logs.get(topic.name, p.partition_index)
            offset, ts = await _lookup(ctx, plog, p.timestamp, read_committed)
            # The epoch that appended the offset: consumers keep it for truncation checks.
            epoch = -1
            if epochs is not None and offset >= 0:
                epoch = epochs.epoch_of(topic.name, p.partition_index, offset, plog.next_offset)
            partitions.append(
                _Partition(partition_index=p.partition_index, error_code=0, timestamp=ts,
                           offset=offset, leader_epoch=epoch)
            )
        topics.append(_Topic(name=topic.name, partitions=partitions))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
