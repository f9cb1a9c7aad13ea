"""DeleteGroups (key 42): only groups with no members (NON_EMPTY_GROUP otherwise);
their commits and metadata are removed durably."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec

SPEC = ApiSpec(DeleteGroupsRequest, DeleteGroupsResponse, 0, 2)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    result = await ctx.groups.delete_groups(list(request.groups_names))
    return DeleteGroupsResponse(
        throttle_time_ms=0,
        results=[
            DeleteGroupsResponse.DeletableGroupResult(group_id=gid, error_code=err)
            for gid, err in result.items()
        ],
    )
