"""AddOffsetsToTxn (key 25), v0-4: the group whose offsets the transaction will commit
(``send_offsets_to_transaction``); TxnOffsetCommit follows."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.txn.wiring import coordinator_of, for_version
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 4)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    error: int
    if not request.group_id:
        error = ErrorCode.INVALID_GROUP_ID
    else:
        try:
            error = await coordinator_of(ctx).add_offsets(
                request.transactional_id, request.producer_id, request.producer_epoch,
                request.group_id,
            )
        except Exception:  # the coordinator's table cannot be written: the client retries
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=for_version(error, req.api_version, 2))
