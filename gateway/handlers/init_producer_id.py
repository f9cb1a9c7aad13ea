"""InitProducerId (key 22): producer ids and epochs for idempotent (and, with a
transactional id, fenced) producers; see ``gateway.log.producer_ids``."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(InitProducerIdRequest, InitProducerIdResponse, 0, 5)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    pid_given = request.producer_id if req.api_version >= 3 else -1
    epoch_given = request.producer_epoch if req.api_version >= 3 else -1
    try:
        pid, epoch = await ctx.producer_ids.init(request.transactional_id, pid_given, epoch_given)
    except Exception:  # store unavailable: the client retries
        return InitProducerIdResponse(
            throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
            producer_id=-1, producer_epoch=-1,
        )
    return InitProducerIdResponse(
        throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=epoch
    )
