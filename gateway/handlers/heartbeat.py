"""Heartbeat (key 12)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec

SPEC = ApiSpec(HeartbeatRequest, HeartbeatResponse, 0, 4)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    error = ctx.groups.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if req.api_version >= 3 else None,
    )
    return HeartbeatResponse(throttle_time_ms=0, error_code=error)
