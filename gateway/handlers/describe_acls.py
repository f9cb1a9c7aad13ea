"""DescribeAcls (key 29), v1-3: the ACL bindings a filter matches, grouped by resource
pattern. Without an authorizer configured: SECURITY_DISABLED, as Kafka answers (admin
UIs probe it at start)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeAclsRequest, DescribeAclsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.security.acls import AclBinding, AclFilter
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(DescribeAclsRequest, DescribeAclsResponse, 1, 3)


def acl_filter(f: Any) -> AclFilter:
    return AclFilter(
        f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
        f.principal_filter, f.host_filter, f.operation, f.permission_type,
    )


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    security = ctx.security
    if security is None or security.authorizer is None:
        return DescribeAclsResponse(
            throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED,
            error_message="No Authorizer is configured.", resources=[],
        )
    flt = acl_filter(request)
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in sorted(security.acls.bindings(), key=lambda b: (b.resource_type, b.name)):
        if flt.matches(b):
            by_resource.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    R = DescribeAclsResponse.DescribeAclsResource
    resources = [
        R(resource_type=rt, resource_name=name, pattern_type=pt, acls=[
            R.AclDescription(principal=b.principal, host=b.host, operation=b.operation,
                             permission_type=b.permission)
            for b in bindings
        ])
        for (rt, name, pt), bindings in by_resource.items()
    ]
    return DescribeAclsResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, resources=resources
    )
