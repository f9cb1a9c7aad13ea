"""OffsetFetch (key 9), v1-9: one group (v1-7) or several (v8+, as the Java admin's
listConsumerGroupOffsets batches them). Null topics (v2+) mean every committed
partition. A partition with no commit answers offset -1 and metadata ""."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse
from tidegate.gateway.groups import CommittedOffset
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec

SPEC = ApiSpec(OffsetFetchRequest, OffsetFetchResponse, 1, 9)

_Topic = OffsetFetchResponse.OffsetFetchResponseTopic
_Partition = _Topic.OffsetFetchResponsePartition
_Group = OffsetFetchResponse.OffsetFetchResponseGroup
_GTopic = _Group.OffsetFetchResponseTopics
_GPartition = _GTopic.OffsetFetchResponsePartitions

Fetched = dict[tuple[str, int], CommittedOffset | None]


def _fetch(ctx: HandlerContext, group_id: str, topics: Any) -> tuple[int, Fetched]:
    wanted = None
    if topics is not None:
        wanted = [(t.name, p) for t in topics for p in t.partition_indexes]
    return ctx.groups.fetch_offsets(group_id, wanted)


def _by_topic(fetched: Fetched, error: int) -> dict[str, list[tuple[int, int, int, str, int]]]:
    """topic -> [(partition, offset, leader epoch, metadata, error)], sorted."""
    out: dict[str, list[tuple[int, int, int, str, int]]] = {}
    for (topic, partition), c in sorted(fetched.items()):
        if c is None:
            row = (partition, -1, -1, "", error)
        else:
            row = (partition, c.offset, c.leader_epoch, c.metadata or "", error)
        out.setdefault(topic, []).append(row)
    return out


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    v = req.api_version
    if v < 8:
        error, fetched = _fetch(ctx, request.group_id, request.topics)
        partition_error = error if v < 2 else 0
        topics = [
            _Topic(
                name=name,
                partitions=[
                    _Partition(
                        partition_index=p, committed_offset=o, committed_leader_epoch=e,
                        metadata=m, error_code=partition_error or err,
                    )
                    for p, o, e, m, err in rows
                ],
            )
            for name, rows in _by_topic(fetched, 0).items()
        ]
        return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=error)
    groups = []
    for g in request.groups:
        error, fetched = _fetch(ctx, g.group_id, g.topics)
        groups.append(
            _Group(
                group_id=g.group_id,
                error_code=error,
                topics=[
                    _GTopic(
                        name=name,
                        partitions=[
                            _GPartition(
                                partition_index=p, committed_offset=o,
                                committed_leader_epoch=e, metadata=m, error_code=err,
                            )
                            for p, o, e, m, err in rows
                        ],
                    )
                    for name, rows in _by_topic(fetched, 0).items()
                ],
            )
        )
    return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
