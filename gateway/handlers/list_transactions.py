"""ListTransactions (key 66, KIP-664), v0-2: filters by state (unknown state names are
echoed back), producer id, v1's duration (running at least that long) and v2's
transactional id pattern (a regular expression matched against the whole id, by RE2 in
time linear in the id, whatever the pattern; one that does not compile gets
INVALID_REQUEST)."""

from __future__ import annotations

from typing import Any

import re2
from kafka.protocol.admin import ListTransactionsRequest, ListTransactionsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.txn.state import TxnState
from tidegate.gateway.txn.wiring import coordinator_of
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(ListTransactionsRequest, ListTransactionsResponse, 0, 2)

_State = ListTransactionsResponse.TransactionState
_KNOWN = {s.value for s in TxnState}


def _empty(error: int, unknown: list[str]) -> Any:
    return ListTransactionsResponse(
        throttle_time_ms=0, error_code=error, unknown_state_filters=unknown, transaction_states=[]
    )


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    v = req.api_version
    states = set(request.state_filters or ())
    unknown = sorted(states - _KNOWN)
    pids = set(request.producer_id_filters or ())
    duration_ms = request.duration_filter if v >= 1 else -1
    pattern = None
    if v >= 2 and request.transactional_id_pattern:
        try:
            pattern = re2.compile(request.transactional_id_pattern)
        except re2.error:
            return _empty(ErrorCode.INVALID_REQUEST, unknown)
    if states and not states & _KNOWN:
        return _empty(ErrorCode.NONE, unknown)
    now = ctx.clock_ms()
    out = []
    for meta in coordinator_of(ctx).transactions():
        if states and meta.state.value not in states:
            continue
        if pids and meta.producer_id not in pids:
            continue
        if duration_ms >= 0 and (meta.state != TxnState.ONGOING or now - meta.start_ms < duration_ms):
            continue
        if pattern is not None and not pattern.fullmatch(meta.transactional_id):
            continue
        out.append(_State(
            transactional_id=meta.transactional_id, producer_id=meta.producer_id,
            transaction_state=meta.state.value,
        ))
    return ListTransactionsResponse(
        throttle_time_ms=0, error_code=0, unknown_state_filters=unknown, transaction_states=out
    )
