"""DescribeTransactions (key 65, KIP-664), v0: each transactional id's coordinator
state; an unknown id gets TRANSACTIONAL_ID_NOT_FOUND."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeTransactionsRequest, DescribeTransactionsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.txn.wiring import coordinator_of
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(DescribeTransactionsRequest, DescribeTransactionsResponse, 0, 0)

_State = DescribeTransactionsResponse.TransactionState
_Topic = _State.TopicData


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    coord = coordinator_of(ctx)
    states = []
    for tid in request.transactional_ids:
        meta = coord.describe(tid)
        if meta is None:
            states.append(_State(
                error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND if coord.coordinating
                else ErrorCode.NOT_COORDINATOR, transactional_id=tid,
                transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1,
                producer_id=-1, producer_epoch=-1, topics=[],
            ))
            continue
        states.append(_State(
            error_code=0, transactional_id=tid, transaction_state=meta.state.value,
            transaction_timeout_ms=meta.timeout_ms, transaction_start_time_ms=meta.start_ms,
            producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
            topics=[_Topic(topic=t, partitions=ps) for t, ps in meta.topics().items()],
        ))
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)
