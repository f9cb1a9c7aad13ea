"""ApiVersions (key 18): built from the handler registry, so it advertises exactly the
APIs and versions that have handlers.

Quirk: a request in a version we do not know is answered in v0 with
UNSUPPORTED_VERSION and our ApiVersions range, so the client can retry lower."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(ApiVersionsRequest, ApiVersionsResponse, 0, 4)


def response(ctx: HandlerContext, error: ErrorCode = ErrorCode.NONE) -> Any:
    keys = [
        ApiVersionsResponse.ApiVersion(
            api_key=api.spec.api_key,
            min_version=api.spec.min_version,
            max_version=api.spec.max_version,
        )
        for api in ctx.registry.apis()
    ]
    return ApiVersionsResponse(error_code=error, api_keys=keys, throttle_time_ms=0)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    return response(ctx)
