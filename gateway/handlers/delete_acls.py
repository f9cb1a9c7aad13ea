"""DeleteAcls (key 31), v1-3: delete the ACL bindings each filter matches and name them
in the answer. Without an authorizer every filter gets SECURITY_DISABLED."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DeleteAclsRequest, DeleteAclsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.handlers.describe_acls import acl_filter
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(DeleteAclsRequest, DeleteAclsResponse, 1, 3)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    Result = DeleteAclsResponse.DeleteAclsFilterResult
    security = ctx.security
    if security is None or security.authorizer is None:
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            Result(error_code=ErrorCode.SECURITY_DISABLED,
                   error_message="No Authorizer is configured.", matching_acls=[])
            for _ in request.filters
        ])
    matched = await security.acls.remove([acl_filter(f) for f in request.filters])
    M = Result.DeleteAclsMatchingAcl
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        Result(error_code=ErrorCode.NONE, error_message=None, matching_acls=[
            M(error_code=ErrorCode.NONE, error_message=None, resource_type=b.resource_type,
              resource_name=b.name, pattern_type=b.pattern_type, principal=b.principal,
              host=b.host, operation=b.operation, permission_type=b.permission)
            for b in found
        ])
        for found in matched
    ])
