"""OffsetForLeaderEpoch (key 23), v2-4 (KIP-101, KIP-320): the end offset of the epoch a
consumer last fetched in, which it compares with its position to detect a truncated
log (``gateway.log.leader_epochs``). The current leader epoch the client sends is
checked first: older is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH. Followers
(replica id >= 0) do not exist here: their requests are answered like a consumer's."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 2, 4)

_Topic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_Partition = _Topic.EpochEndOffset


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    epochs = ctx.leader_epochs
    cluster = ctx.cluster
    topics = []
    for t in request.topics:
        info = ctx.topics.get(t.topic)
        parts = []
        for p in t.partitions:
            error = ErrorCode.NONE
            if info is None or not 0 <= p.partition < info.partitions:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif cluster is not None:
                error = await cluster.partition_error(t.topic, p.partition)
            if error == ErrorCode.NONE and epochs is not None:
                error = epochs.check(t.topic, p.partition, p.current_leader_epoch)
            if error != ErrorCode.NONE or epochs is None:
                parts.append(_Partition(error_code=error, partition=p.partition,
                                        leader_epoch=-1, end_offset=-1))
                continue
            plog = ctx.logs.get(t.topic, p.partition)
            epoch, end = epochs.end_offset(t.topic, p.partition, p.leader_epoch, plog.next_offset)
            parts.append(_Partition(error_code=0, partition=p.partition, leader_epoch=epoch,
                                    end_offset=end))
        topics.append(_Topic(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
