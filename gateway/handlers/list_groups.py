"""ListGroups (key 16), with the state (v4+) and type (v5+) filters; groups are
"classic" or "consumer" (KIP-848), as Kafka 4.0 lists them, or "share" (KIP-932,
``gateway/share``: state Stable with members, Empty without)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec

SPEC = ApiSpec(ListGroupsRequest, ListGroupsResponse, 0, 5)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    v = req.api_version
    states = list(request.states_filter or ()) if v >= 4 else []
    types = list(request.types_filter or ()) if v >= 5 else []
    error, groups = ctx.groups.list_groups(states, types)
    share = ctx.share_groups
    if share is not None and (not types or "share" in {t.lower() for t in types}):
        wanted = {s.lower() for s in states}
        share.maintain()  # members past their session timeout are not listed
        for gid, group in sorted(share.groups.items()):
            state = "Stable" if group.members else "Empty"
            if not wanted or state.lower() in wanted:
                groups.append((gid, "share", state, "share"))
    return ListGroupsResponse(
        throttle_time_ms=0,
        error_code=error,
        groups=[
            ListGroupsResponse.ListedGroup(
                group_id=gid, protocol_type=ptype, group_state=state, group_type=gtype
            )
            for gid, ptype, state, gtype in groups
        ],
    )
