"""DeleteRecords (key 21): raises a partition's log start offset (never lowers it;
-1 means the high watermark; beyond the high watermark is OFFSET_OUT_OF_RANGE). The new
log start is durable before the answer (one synced index write per slice of partitions,
a loop step each) and Fetch and ListOffsets honour it at once; the
stream is then truncated as far as every partition sharing its segments allows
(``gateway.log.log_start``), which may be less far or nothing."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse
from tidegate.gateway import failpoints
from tidegate.gateway.handlers import HandlerContext, RequestContext, lead_error
from tidegate.gateway.log.log_start import truncate_to_log_starts
from tidegate.gateway.log.partitions import PARTITIONS_PER_STEP
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(DeleteRecordsRequest, DeleteRecordsResponse, 0, 2)

log = logging.getLogger(__name__)

_Topic = DeleteRecordsResponse.DeleteRecordsTopicResult
_Partition = _Topic.DeleteRecordsPartitionResult

#: DeleteRecords' "up to the high watermark".
HIGH_WATERMARK = -1


def _target(ctx: HandlerContext, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """(error, the log start asked for) of one partition."""
    info = ctx.topics.get(topic)
    if info is None or not 0 <= partition < info.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1
    plog = ctx.logs.get(topic, partition)
    if offset == HIGH_WATERMARK:
        offset = plog.high_watermark
    if not 0 <= offset <= plog.high_watermark:
        return ErrorCode.OFFSET_OUT_OF_RANGE, -1
    return ErrorCode.NONE, offset


def _delete(ctx: HandlerContext, topic: str, asked: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(error, low watermark) of each (partition, offset): one synced index write for all."""
    targets = [_target(ctx, topic, p, offset) for p, offset in asked]
    starts: dict[int, int] = {}
    for (p, _), (error, offset) in zip(asked, targets, strict=True):
        if error == ErrorCode.NONE:
            starts[p] = max(offset, starts.get(p, offset))
    try:
        lows = ctx.logs.set_log_starts(topic, starts)
    except Exception as exc:  # the offset index cannot be written (a full disk)
        log.error("DeleteRecords %s: the log starts could not be stored: %r", topic, exc)
        return [(ErrorCode.KAFKA_STORAGE_ERROR, -1) if error == ErrorCode.NONE else (error, low)
                for error, low in targets]
    return [(error, lows[p]) if error == ErrorCode.NONE else (error, -1)
            for (p, _), (error, _) in zip(asked, targets, strict=True)]


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    topics = []
    for t in request.topics:
        results = []
        moved = False
        asked = []
        for p in t.partitions:
            led = await lead_error(ctx, t.name, p.partition_index)
            if led:
                results.append(_Partition(partition_index=p.partition_index, low_watermark=-1,
                                          error_code=led))
            else:
                asked.append((p.partition_index, p.offset))
        for i in range(0, len(asked), PARTITIONS_PER_STEP):
            if i:
                await asyncio.sleep(0)  # one loop step per slice of partitions
            part = asked[i : i + PARTITIONS_PER_STEP]
            for (p, _), (error, low) in zip(part, _delete(ctx, t.name, part), strict=True):
                moved |= error == ErrorCode.NONE
                results.append(_Partition(partition_index=p, low_watermark=low, error_code=error))
        if moved:
            failpoints.hit("delete_records.log_start_stored")
            try:
                await truncate_to_log_starts(ctx, t.name)
            except Exception:  # the log starts are durable; the next call truncates further
                log.exception("truncating the stream of %s after DeleteRecords", t.name)
        topics.append(_Topic(name=t.name, partitions=results))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
