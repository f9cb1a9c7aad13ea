"""OffsetDelete (key 47): drop a group's commits for some partitions; refused per
partition with GROUP_SUBSCRIBED_TO_TOPIC while live members subscribe to the topic."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetDeleteRequest, OffsetDeleteResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(OffsetDeleteRequest, OffsetDeleteResponse, 0, 0)

_Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_Partition = _Topic.OffsetDeleteResponsePartition


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    errors: dict[tuple[str, int], int] = {}
    known: list[tuple[str, int]] = []
    order: list[tuple[str, int]] = []
    for t in request.topics:
        info = ctx.topics.get(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            order.append(tp)
            if info is None or not 0 <= p.partition_index < info.partitions:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                known.append(tp)
    top, result = await ctx.groups.delete_offsets(request.group_id, known)
    if top != ErrorCode.NONE:
        return OffsetDeleteResponse(error_code=top, throttle_time_ms=0, topics=[])
    errors.update(result)
    topics: dict[str, list[Any]] = {}
    for tp in order:
        topics.setdefault(tp[0], []).append(
            _Partition(partition_index=tp[1], error_code=errors[tp])
        )
    return OffsetDeleteResponse(
        error_code=0,
        throttle_time_ms=0,
        topics=[_Topic(name=name, partitions=parts) for name, parts in topics.items()],
    )
