"""EndTxn (key 26), v0-5: commit or abort. Answered once the decision (PrepareCommit or
PrepareAbort) is durable, as Kafka answers it; the markers follow (see
``gateway.txn.coordinator``). v5 is transaction version 2 (KIP-890; kafka-clients 4.x
sends it once ApiVersions finalizes ``transaction.version`` 2): every commit or abort
bumps the producer epoch, and the answer carries the producer id and epoch the producer
goes on with."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import EndTxnRequest, EndTxnResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.txn.wiring import coordinator_of, for_version
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(EndTxnRequest, EndTxnResponse, 0, 5)
#: The first EndTxn version of transaction version 2.
TV2_VERSION = 5


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    try:
        error, pid, epoch = await coordinator_of(ctx).end_transaction(
            request.transactional_id, request.producer_id, request.producer_epoch,
            request.committed, tv2=req.api_version >= TV2_VERSION,
        )
    except Exception:  # the coordinator's table cannot be written: the client retries
        error, pid, epoch = ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
    return EndTxnResponse(
        throttle_time_ms=0, error_code=for_version(error, req.api_version, 2),
        producer_id=pid, producer_epoch=epoch,
    )
