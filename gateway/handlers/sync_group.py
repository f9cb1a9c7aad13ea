"""SyncGroup (key 14): the leader sends every member's assignment, the coordinator
stores the generation and relays each member its own (any client-side assignor works,
the broker never looks inside). Released at once: followers wait for the leader."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import SyncGroupRequest, SyncGroupResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.sync_group import decode_sync_group_request

# Assignments decoded as slices of the frame: the coordinator copies them once they are
# known to fit the group (a hostile SyncGroup of any size is never held twice).
SPEC = ApiSpec(SyncGroupRequest, SyncGroupResponse, 0, 5, decoder=decode_sync_group_request)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    req.release()
    v = req.api_version
    result = await ctx.groups.sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if v >= 3 else None,
        request.protocol_type if v >= 5 else None,
        request.protocol_name if v >= 5 else None,
        {a.member_id: a.assignment for a in request.assignments},
    )
    return SyncGroupResponse(
        throttle_time_ms=0,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )
