"""DescribeClientQuotas (key 48), v0-1: no quotas exist, so every valid filter matches
no entity. A filter Kafka refuses (an unknown match type, a name missing for an exact
match, an entity type given twice) gets INVALID_REQUEST with Kafka's reason."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeClientQuotasRequest, DescribeClientQuotasResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(DescribeClientQuotasRequest, DescribeClientQuotasResponse, 0, 1)

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _filter_error(components: list[Any]) -> str | None:
    seen: set[str] = set()
    for c in components:
        if c.entity_type in seen:
            return f"Duplicate entity type in filter: {c.entity_type}"
        seen.add(c.entity_type)
        if c.match_type == MATCH_EXACT and c.match is None:
            return f"Null match name for exact match of entity type {c.entity_type}"
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            return f"Unexpected match type: {c.match_type}"
    return None


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    error = _filter_error(list(request.components))
    if error is not None:
        return DescribeClientQuotasResponse(
            throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, error_message=error,
            entries=None,
        )
    return DescribeClientQuotasResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=[],
    )
