"""ConsumerGroupHeartbeat (key 68), v0-1: KIP-848's one call for joining, staying in,
reconciling with and leaving a consumer group (``gateway/groups/consumer_groups.py``).
Topics travel by id; the coordinator works with names. A regex subscription resolves
over the topics the member's principal may DESCRIBE."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from tidegate.gateway.groups.consumer_groups import HeartbeatRequest
from tidegate.gateway.groups.consumer_model import Assignment
from tidegate.gateway.groups.wiring import client_host
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.security.acls import Operation, ResourceType
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.consumer_group import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, 0, 1)

_Assignment = ConsumerGroupHeartbeatResponse.Assignment
_TopicPartitions = _Assignment.TopicPartitions


def _owned(ctx: HandlerContext, topic_partitions: Any) -> Assignment | None:
    """The member's owned partitions by topic name; partitions of topics that no longer
    exist are left out (they cannot be assigned anyway)."""
    if topic_partitions is None:
        return None
    by_id = _names_by_id(ctx)
    out: dict[str, frozenset[int]] = {}
    for tp in topic_partitions:
        name = by_id.get(tp.topic_id)
        if name is not None and tp.partitions:
            out[name] = out.get(name, frozenset()) | frozenset(tp.partitions)
    return out


def _names_by_id(ctx: HandlerContext) -> dict[uuid.UUID, str]:
    out: dict[uuid.UUID, str] = {}
    for name in ctx.topics.names():
        info = ctx.topics.get(name)
        if info is not None:
            out[info.topic_id] = name
    return out


def _may_describe(ctx: HandlerContext, req: RequestContext) -> Callable[[str], bool] | None:
    """The topics the member's principal may DESCRIBE: what its regex may resolve to
    (Kafka resolves regexes with the member's authorization). None: no authorizer."""
    security, session = ctx.security, req.session
    if security is None or security.authorizer is None or session is None:
        return None
    authorizer, principal, host = security.authorizer, session.principal, session.client_host

    def may(name: str) -> bool:
        return authorizer.allowed(principal, host, Operation.DESCRIBE, ResourceType.TOPIC, name)

    return may


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    v = req.api_version
    if ctx.group_coordinator is None:  # cluster mode: another node has the groups now
        return ConsumerGroupHeartbeatResponse(
            throttle_time_ms=0, error_code=ErrorCode.NOT_COORDINATOR,
            error_message="this node does not coordinate consumer groups now",
            member_id=None, member_epoch=-1, heartbeat_interval_ms=0, assignment=None,
        )
    result = await ctx.groups.consumer_heartbeat(
        HeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_names=request.subscribed_topic_names,
            subscribed_regex=request.subscribed_topic_regex if v >= 1 else None,
            server_assignor=request.server_assignor,
            owned=_owned(ctx, request.topic_partitions),
            client_id=req.client_id or "",
            client_host=client_host(req.peer),
            api_version=v,
            may_describe=_may_describe(ctx, req),
        ),
        ctx.topics,
    )
    assignment = None
    if result.assignment is not None:
        parts = []
        for name, ps in sorted(result.assignment.items()):
            info = ctx.topics.get(name)
            if info is not None:
                parts.append(_TopicPartitions(topic_id=info.topic_id, partitions=sorted(ps)))
        assignment = _Assignment(topic_partitions=parts)
    return ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0,
        error_code=result.error,
        error_message=result.message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms,
        assignment=assignment,
    )
