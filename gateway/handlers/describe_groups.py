"""DescribeGroups (key 15): Kafka's group summary (member metadata and assignments
only while Stable). Unknown groups: Dead with no error before v6, GROUP_ID_NOT_FOUND
from v6. Authorized operations (v3+) where the client asks for them."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.security.acls import ResourceType
from tidegate.gateway.security.operations import authorized
from tidegate.protocol.apis import ApiSpec

SPEC = ApiSpec(DescribeGroupsRequest, DescribeGroupsResponse, 0, 6)

_Group = DescribeGroupsResponse.DescribedGroup
_Member = _Group.DescribedGroupMember

#: Quirk: kafka-python patches this field into a bit set; None encodes Kafka's
#: Int.MinValue, "authorized operations not requested or not known".
_AUTHORIZED_OPERATIONS_UNKNOWN = None


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    asked = req.api_version >= 3 and bool(request.include_authorized_operations)
    described = ctx.groups.describe_groups(
        list(request.groups), unknown_is_error=req.api_version >= 6
    )
    groups = [
        _Group(
            error_code=d.error,
            error_message=None if d.error == 0 else d.message or f"group {d.group_id!r}: error {d.error}",
            group_id=d.group_id,
            group_state=d.state,
            protocol_type=d.protocol_type,
            protocol_data=d.protocol_data,
            members=[
                _Member(
                    member_id=m.member_id, group_instance_id=m.group_instance_id,
                    client_id=m.client_id, client_host=m.client_host,
                    member_metadata=m.metadata, member_assignment=m.assignment,
                )
                for m in d.members
            ],
            authorized_operations=(
                authorized(ctx.security, req.session, ResourceType.GROUP, d.group_id)
                if asked and d.error == 0 else _AUTHORIZED_OPERATIONS_UNKNOWN
            ),
        )
        for d in described
    ]
    return DescribeGroupsResponse(throttle_time_ms=0, groups=groups)
