"""JoinGroup (key 11): a thin adapter to ``GroupCoordinator.join_group``. From v4 an
unknown member first gets MEMBER_ID_REQUIRED with its id. The handler releases the
connection at once: a join waits for the rest of the group, and the member's
heartbeats on the same connection must not queue behind it."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse
from tidegate.gateway.groups import JoinRequest
from tidegate.gateway.groups.wiring import client_host
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.join_group import decode_join_group_request

# Metadata decoded as slices of the frame: the budget's charge for the frame covers it.
SPEC = ApiSpec(JoinGroupRequest, JoinGroupResponse, 0, 9, decoder=decode_join_group_request)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    req.release()
    v = req.api_version
    session_ms = request.session_timeout_ms
    rebalance_ms = request.rebalance_timeout_ms if v >= 1 else -1
    if sum(len(p.metadata) for p in request.protocols) > ctx.groups.config.member_metadata_bytes_max:
        # Refused before the metadata is copied out of the frame (the coordinator checks it too).
        return JoinGroupResponse(
            throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, generation_id=-1,
            protocol_type=None, protocol_name=None if v >= 7 else "", leader="",
            skip_assignment=False, member_id=request.member_id, members=[],
        )
    result = await ctx.groups.join_group(
        JoinRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id if v >= 5 else None,
            protocol_type=request.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
            session_timeout_ms=session_ms,
            # v0 has no rebalance timeout: Kafka uses the session timeout.
            rebalance_timeout_ms=rebalance_ms if rebalance_ms > 0 else session_ms,
            client_id=req.client_id or "",
            client_host=client_host(req.peer),
            require_known_member_id=v >= 4,
        ),
        ctx.topics,
    )
    members = [
        JoinGroupResponse.JoinGroupResponseMember(
            member_id=mid, group_instance_id=iid, metadata=md
        )
        for mid, iid, md in result.members
    ]
    protocol_name = result.protocol_name
    if protocol_name is None and v < 7:
        protocol_name = ""
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader_id,
        skip_assignment=False,
        member_id=result.member_id,
        members=members,
    )
