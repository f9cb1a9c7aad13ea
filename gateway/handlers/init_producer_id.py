"""InitProducerId (key 22): producer ids and epochs. Without a transactional id, from
``gateway.log.producer_ids`` (idempotence); with one, from the transaction coordinator
(``gateway.txn``): epochs, fencing, KIP-360 bumps, INVALID_TRANSACTION_TIMEOUT,
CONCURRENT_TRANSACTIONS while a previous transaction completes. v6's two-phase-commit
fields (KIP-939) are not served: v0-5.

An empty transactional id answers INVALID_REQUEST, as Kafka's coordinator; one longer
than ``TRANSACTIONAL_ID_BYTES_MAX`` too (its state could not be stored, and a retriable
error would be retried forever)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.txn.wiring import coordinator_of
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(InitProducerIdRequest, InitProducerIdResponse, 0, 5)

#: Longest transactional id in UTF-8 bytes (Kafka has none; ours keys a table entry).
TRANSACTIONAL_ID_BYTES_MAX = 4096


def _answer(error: int, pid: int = -1, epoch: int = -1) -> Any:
    return InitProducerIdResponse(
        throttle_time_ms=0, error_code=error, producer_id=pid, producer_epoch=epoch
    )


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    pid_given = request.producer_id if req.api_version >= 3 else -1
    epoch_given = request.producer_epoch if req.api_version >= 3 else -1
    if request.transactional_id is not None:
        tid = request.transactional_id
        if not tid or len(tid.encode()) > TRANSACTIONAL_ID_BYTES_MAX:
            return _answer(ErrorCode.INVALID_REQUEST)
        try:
            error, pid, epoch = await coordinator_of(ctx).init_producer_id(
                request.transactional_id, request.transaction_timeout_ms, pid_given, epoch_given
            )
        except Exception:  # store unavailable: the client retries
            return _answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if error == ErrorCode.PRODUCER_FENCED and req.api_version < 4:
            error = ErrorCode.INVALID_PRODUCER_EPOCH  # KIP-588: older clients know this one
        return _answer(error, pid, epoch)
    try:
        pid, epoch = await ctx.producer_ids.init(None, pid_given, epoch_given)
    except Exception:  # store unavailable: the client retries
        return _answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return _answer(ErrorCode.NONE, pid, epoch)
