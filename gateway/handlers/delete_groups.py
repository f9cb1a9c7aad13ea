"""DeleteGroups (key 42): only groups with no members (NON_EMPTY_GROUP otherwise);
their commits and metadata are removed durably. A share group (``gateway/share``) loses
its share-partition state and configs."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec

SPEC = ApiSpec(DeleteGroupsRequest, DeleteGroupsResponse, 0, 2)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    share = ctx.share_groups
    names = list(request.groups_names)
    shared = [g for g in names if share is not None and share.is_share_group(g)]
    result = await ctx.groups.delete_groups([g for g in names if g not in shared])
    for gid in shared:
        assert share is not None
        result[gid] = await share.delete_group(gid)
    return DeleteGroupsResponse(
        throttle_time_ms=0,
        results=[
            DeleteGroupsResponse.DeletableGroupResult(group_id=gid, error_code=err)
            for gid, err in result.items()
        ],
    )
