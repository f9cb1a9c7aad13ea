"""ShareGroupHeartbeat (key 76), v1: joining, staying in and leaving a share group
(KIP-932, ``gateway/share/coordinator.py``). The client makes up its member id; every
member is assigned every partition of the topics it subscribes to."""

from __future__ import annotations

from typing import Any

from tidegate.gateway.groups.wiring import client_host
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.security.acls import Operation, ResourceType
from tidegate.gateway.security.item_acls import refusal
from tidegate.gateway.share.coordinator import ShareCoordinator
from tidegate.gateway.share.reading import group_refusal
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.share_group import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse

SPEC = ApiSpec(ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, 1, 1)

_Assignment = ShareGroupHeartbeatResponse.Assignment
_TopicPartitions = _Assignment.TopicPartitions
#: In cluster mode the group coordinator's node runs the share coordinator
#: (``gateway/cluster/groups.py``); ShareFetch and ShareAcknowledge go to each partition's
#: leader, which holds its share-partitions (``ctx.share_leader``).
NOT_HERE = "this node is not the share group coordinator"


def unserved(ctx: HandlerContext) -> tuple[ErrorCode, str]:
    """Why this node has no share coordinator: in cluster mode another node runs it (or
    it is moving), which clients retry after FindCoordinator; else it is not started."""
    if ctx.config.zookeeper:
        return ErrorCode.NOT_COORDINATOR, NOT_HERE
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the share coordinator is not running"


def offsets_refusal(
    ctx: HandlerContext, req: RequestContext, operation: Operation, group_id: str
) -> tuple[ErrorCode, str] | None:
    """Why a share group offsets request (alter, delete) is refused as a whole, if it is:
    share groups not served here, or ``operation`` on the group not allowed."""
    if ctx.share_groups is None:
        return unserved(ctx)
    refused = refusal(ctx.security, req.session, operation, ResourceType.GROUP, group_id)
    if refused is not None:
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, refused
    return None


def member_share(ctx: HandlerContext) -> ShareCoordinator | None:
    """What serves ShareFetch and ShareAcknowledge here: in cluster mode the leader's
    share-partitions, else the share coordinator."""
    return ctx.share_leader if ctx.config.zookeeper else ctx.share_groups


def member_refusal(
    ctx: HandlerContext, req: RequestContext, group_id: str, member_id: str
) -> tuple[ErrorCode, str] | None:
    """Why a member's ShareFetch or ShareAcknowledge is refused as a whole, if it is: share
    groups not served here, ids missing, or READ on the group not allowed."""
    if member_share(ctx) is None:
        return unserved(ctx)
    if not group_id or not member_id:
        return ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be set"
    refused = group_refusal(ctx, req, group_id)
    if refused is not None:
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, refused
    return None


def _error(code: ErrorCode, message: str | None) -> Any:
    return ShareGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=code, error_message=message, member_id=None,
        member_epoch=-1, heartbeat_interval_ms=0, assignment=None,
    )


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    share = ctx.share_groups
    if share is None:
        return _error(*unserved(ctx))
    refused = group_refusal(ctx, req, request.group_id)
    if refused is not None:
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, refused)
    groups = ctx.group_coordinator
    if groups is not None and (groups.group(request.group_id) is not None
                               or request.group_id in groups.consumer.groups):
        # One namespace of group ids: a classic or consumer group is not a share group.
        return _error(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {request.group_id} is not a share group.")

    def counts(topic: str) -> int | None:
        info = ctx.topics.get(topic)
        return info.partitions if info is not None else None

    result = share.heartbeat(
        request.group_id, request.member_id, request.member_epoch, request.rack_id,
        request.subscribed_topic_names, req.client_id or "", client_host(req.peer), counts,
    )
    assignment = None
    if result.assignment is not None:
        parts = []
        for name, ps in sorted(result.assignment.items()):
            info = ctx.topics.get(name)
            if info is not None:
                parts.append(_TopicPartitions(topic_id=info.topic_id, partitions=list(ps)))
        assignment = _Assignment(topic_partitions=parts)
    return ShareGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=result.error, error_message=result.message,
        member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment,
    )
