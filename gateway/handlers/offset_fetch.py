"""OffsetFetch (key 9), v1-9: one group (v1-7) or several (v8+, as the Java admin's
listConsumerGroupOffsets batches them). Null topics (v2+) mean every committed
partition. A partition with no commit answers offset -1 and metadata "". With
``require_stable`` (v7+, KIP-447) a partition whose offset waits in an open transaction
answers UNSTABLE_OFFSET_COMMIT, so a consumer does not start from an offset that the
transaction is about to move."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse
from tidegate.gateway.groups import CommittedOffset
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(OffsetFetchRequest, OffsetFetchResponse, 1, 9)

_Topic = OffsetFetchResponse.OffsetFetchResponseTopic
_Partition = _Topic.OffsetFetchResponsePartition
_Group = OffsetFetchResponse.OffsetFetchResponseGroup
_GTopic = _Group.OffsetFetchResponseTopics
_GPartition = _GTopic.OffsetFetchResponsePartitions

Fetched = dict[tuple[str, int], CommittedOffset | None]


def _fetch(
    ctx: HandlerContext, group_id: str, topics: Any, member_id: str | None = None, member_epoch: int = -1
) -> tuple[int, Fetched]:
    wanted = None
    if topics is not None:
        wanted = [(t.name, p) for t in topics for p in t.partition_indexes]
    return ctx.groups.fetch_offsets(group_id, wanted, member_id=member_id, member_epoch=member_epoch)


def _unstable(ctx: HandlerContext, group_id: str, require_stable: bool) -> set[tuple[str, int]]:
    txns = ctx.transactions
    if not require_stable or txns is None:
        return set()
    pending: set[tuple[str, int]] = txns.pending_offsets(group_id)
    return pending


def _by_topic(
    fetched: Fetched, error: int, unstable: set[tuple[str, int]] | None = None
) -> dict[str, list[tuple[int, int, int, str, int]]]:
    """topic -> [(partition, offset, leader epoch, metadata, error)], sorted."""
    out: dict[str, list[tuple[int, int, int, str, int]]] = {}
    for (topic, partition), c in sorted(fetched.items()):
        row: tuple[int, int, int, str, int]
        if unstable and (topic, partition) in unstable:
            row = (partition, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
        elif c is None:
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
            for name, rows in _by_topic(
                fetched, 0, _unstable(ctx, request.group_id, v >= 7 and request.require_stable)
            ).items()
        ]
        return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=error)
    groups = []
    for g in request.groups:
        # v9 (KIP-848): a consumer group's member is checked against its epoch.
        member = (g.member_id, g.member_epoch) if v >= 9 else (None, -1)
        error, fetched = _fetch(ctx, g.group_id, g.topics, *member)
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
                    for name, rows in _by_topic(
                        fetched, 0, _unstable(ctx, g.group_id, request.require_stable)
                    ).items()
                ],
            )
        )
    return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
