"""LeaveGroup (key 13): one member (v0-2) or a batch of members by id or
``group.instance.id`` (v3+); in v0-2 the member's error is the top-level error."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import LeaveGroupRequest, LeaveGroupResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec

SPEC = ApiSpec(LeaveGroupRequest, LeaveGroupResponse, 0, 5)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    coord = ctx.groups
    if req.api_version < 3:
        top, per = coord.leave_group(request.group_id, [(request.member_id, None)])
        error = per[0][2] if top == 0 and per else top
        return LeaveGroupResponse(throttle_time_ms=0, error_code=error, members=[])
    top, per = coord.leave_group(
        request.group_id, [(m.member_id, m.group_instance_id) for m in request.members]
    )
    return LeaveGroupResponse(
        throttle_time_ms=0,
        error_code=top,
        members=[
            LeaveGroupResponse.MemberResponse(
                member_id=mid, group_instance_id=iid, error_code=err
            )
            for mid, iid, err in per
        ],
    )
