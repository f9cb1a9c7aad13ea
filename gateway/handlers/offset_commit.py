"""OffsetCommit (key 8), v2-9 (v10 names topics by id; not advertised). Partitions of
unknown topics get UNKNOWN_TOPIC_OR_PARTITION, as Kafka checks them before the
coordinator; a null metadata string is stored as "" (Kafka's NoMetadata). For a KIP-848
consumer group the generation is the member epoch (STALE_MEMBER_EPOCH/FENCED_MEMBER_EPOCH)
and its members must use v9+ (UNSUPPORTED_VERSION)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse
from tidegate.gateway.groups import OffsetCommit
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(OffsetCommitRequest, OffsetCommitResponse, 2, 9)

_Topic = OffsetCommitResponse.OffsetCommitResponseTopic
_Partition = _Topic.OffsetCommitResponsePartition


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    v = req.api_version
    errors: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], OffsetCommit] = {}
    order: list[tuple[str, int]] = []
    for t in request.topics:
        info = ctx.topics.get(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            order.append(tp)
            if info is None or not 0 <= p.partition_index < info.partitions:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            epoch = p.committed_leader_epoch if v >= 6 else -1
            metadata = p.committed_metadata if p.committed_metadata is not None else ""
            offsets[tp] = OffsetCommit(p.committed_offset, epoch, metadata)
    if offsets:
        errors.update(
            await ctx.groups.commit_offsets(
                request.group_id,
                request.generation_id_or_member_epoch,
                request.member_id,
                request.group_instance_id if v >= 7 else None,
                offsets,
                api_version=v,
            )
        )
    topics: dict[str, list[Any]] = {}
    for tp in order:
        topics.setdefault(tp[0], []).append(
            _Partition(partition_index=tp[1], error_code=errors[tp])
        )
    return OffsetCommitResponse(
        throttle_time_ms=0,
        topics=[_Topic(name=name, partitions=parts) for name, parts in topics.items()],
    )
