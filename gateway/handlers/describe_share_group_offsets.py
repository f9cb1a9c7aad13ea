"""DescribeShareGroupOffsets (key 90), v0-1: each share-partition's start offset (records
below it are done) and, from v1, its lag: records from there to the high watermark not
yet acknowledged or archived (``gateway/share``). A partition the group never fetched
answers -1; no topics named: every share-partition the group has. In cluster mode the high
watermarks of partitions other nodes lead are asked of them (``gateway/cluster/watermarks.py``);
a leader that does not answer leaves the lag unknown (-1)."""

from __future__ import annotations

import uuid
from typing import Any

from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.handlers.share_group_heartbeat import unserved
from tidegate.gateway.security.acls import Operation, ResourceType
from tidegate.gateway.security.item_acls import refusal
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.share_group import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
)

SPEC = ApiSpec(DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, 0, 1)

_Group = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup
_Topic = _Group.DescribeShareGroupOffsetsResponseTopic
_Partition = _Topic.DescribeShareGroupOffsetsResponsePartition
_NO_ID = uuid.UUID(int=0)


async def _high_watermarks(ctx: HandlerContext, parts: set[tuple[str, int]]
                           ) -> dict[tuple[str, int], int]:
    """Each partition's high watermark: this node's own, or its leader's in cluster mode."""
    cluster = ctx.cluster
    if cluster is None:
        return {(t, p): ctx.logs.get(t, p).high_watermark for t, p in parts}
    out, remote = {}, []
    for t, p in sorted(parts):
        if await cluster.leader(t, p) == cluster.node_id:
            out[(t, p)] = ctx.logs.get(t, p).high_watermark
        else:
            remote.append((t, p))
    if remote:
        out.update(await cluster.remote_high_watermarks(remote))
    return out


def _group_error(group_id: str, code: ErrorCode, message: str) -> Any:
    return _Group(group_id=group_id, topics=[], error_code=code, error_message=message)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    share = ctx.share_groups
    out = []
    for g in request.groups:
        if share is None:
            out.append(_group_error(g.group_id, *unserved(ctx)))
            continue
        refused = refusal(ctx.security, req.session, Operation.DESCRIBE, ResourceType.GROUP,
                          g.group_id)
        if refused is not None:
            out.append(_group_error(g.group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, refused))
            continue
        if not share.is_share_group(g.group_id):
            out.append(_group_error(g.group_id, ErrorCode.GROUP_ID_NOT_FOUND,
                                    f"Group {g.group_id} not found."))
            continue
        await share.refresh(g.group_id)  # cluster mode: as the partition leaders stored them
        known = share.start_offsets(g.group_id)
        asked: dict[str, list[int]] = {}
        if g.topics is None:
            for topic, partition in sorted(known):
                asked.setdefault(topic, []).append(partition)
        else:
            for t in g.topics:
                asked.setdefault(t.topic_name, []).extend(t.partitions)
        wanted = {(t, p) for t, ps in asked.items() for p in ps
                  if (t, p) in known and (info := ctx.topics.get(t)) is not None
                  and 0 <= p < info.partitions}
        watermarks = await _high_watermarks(ctx, wanted)
        topics = []
        for name, partitions in asked.items():
            info = ctx.topics.get(name)
            hidden = refusal(ctx.security, req.session, Operation.DESCRIBE, ResourceType.TOPIC,
                             name) is not None
            answers = []
            for p in partitions:
                start, done = known.get((name, p), (-1, 0))
                code, message = ErrorCode.NONE, None
                if hidden:
                    code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
                elif info is None or not 0 <= p < info.partitions:
                    code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown partition"
                lag = -1
                if start < 0 or code != ErrorCode.NONE:
                    start = -1
                elif (name, p) in watermarks:
                    lag = max(watermarks[(name, p)] - start - done, 0)
                answers.append(_Partition(partition_index=p, start_offset=start, leader_epoch=0,
                                          lag=lag, error_code=code, error_message=message))
            topics.append(_Topic(topic_name=name,
                                 topic_id=info.topic_id if info is not None else _NO_ID,
                                 partitions=answers))
        out.append(_Group(group_id=g.group_id, topics=topics, error_code=0, error_message=None))
    return DescribeShareGroupOffsetsResponse(throttle_time_ms=0, groups=out)
