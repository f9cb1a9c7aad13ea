"""ListPartitionReassignments (key 46), v0: always none. Partitions have no replicas to
move (the segment store replicates), and scaling a stream changes which segments hold a
partition without changing its leader, so it is not a reassignment. Partitions a request
names that do not exist are left out, as Kafka does."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, 0, 0)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    return ListPartitionReassignmentsResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, topics=[],
    )
