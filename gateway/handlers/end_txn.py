"""EndTxn (key 26), v0-5: commit or abort. Answered once the decision (PrepareCommit or
PrepareAbort) is durable, as Kafka answers it; the markers follow (see
``gateway.txn.coordinator``). v5's epoch in
the answer is the producer's current one: the per-transaction epoch bump of KIP-890's
transaction version 2 is not advertised, so clients do not expect it."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import EndTxnRequest, EndTxnResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.txn.wiring import coordinator_of, for_version
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(EndTxnRequest, EndTxnResponse, 0, 5)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    try:
        error = await coordinator_of(ctx).end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch,
            request.committed,
        )
    except Exception:  # the coordinator's table cannot be written: the client retries
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    return EndTxnResponse(
        throttle_time_ms=0, error_code=for_version(error, req.api_version, 2),
        producer_id=request.producer_id, producer_epoch=request.producer_epoch,
    )
