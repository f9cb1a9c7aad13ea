"""CreateAcls (key 30), v1-3: store ACL bindings (durably, in the security table
segment). An invalid binding gets INVALID_REQUEST with the reason; without an authorizer
every creation gets SECURITY_DISABLED."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import CreateAclsRequest, CreateAclsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.security.acls import AclBinding
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(CreateAclsRequest, CreateAclsResponse, 1, 3)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    Result = CreateAclsResponse.AclCreationResult
    security = ctx.security
    if security is None or security.authorizer is None:
        return CreateAclsResponse(throttle_time_ms=0, results=[
            Result(error_code=ErrorCode.SECURITY_DISABLED,
                   error_message="No Authorizer is configured.")
            for _ in request.creations
        ])
    results: list[Any] = []
    valid: list[AclBinding] = []
    for c in request.creations:
        binding = AclBinding(
            c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
            c.operation, c.permission_type,
        )
        reason = binding.invalid()
        if reason is None:
            valid.append(binding)
            results.append(Result(error_code=ErrorCode.NONE, error_message=None))
        else:
            results.append(Result(error_code=ErrorCode.INVALID_REQUEST, error_message=reason))
    await security.acls.add(valid)
    return CreateAclsResponse(throttle_time_ms=0, results=results)
