"""DescribeConfigs (key 32): topic configs (stored ones and Kafka's defaults) and this
node's broker configs, a group's share configs; synonyms (v1+) and documentation (v3+) when asked for."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.handlers.config_resources import (
    ResourceError,
    ResourceType,
    check_type,
    describe,
    stored_group_configs,
)
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(DescribeConfigsRequest, DescribeConfigsResponse, 0, 4)

_Result = DescribeConfigsResponse.DescribeConfigsResult


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    v = req.api_version
    synonyms = v >= 1 and bool(request.include_synonyms)
    documentation = v >= 3 and bool(request.include_documentation)
    results = []
    for res in request.resources:
        keys = None if res.configuration_keys is None else set(res.configuration_keys)
        try:
            rtype = check_type(res.resource_type)
            stored = None
            if rtype == ResourceType.GROUP:
                stored = await stored_group_configs(ctx, res.resource_name)
            configs = describe(ctx, rtype, res.resource_name, keys, synonyms, documentation, v,
                               stored)
        except ResourceError as exc:
            results.append(_Result(
                error_code=exc.code, error_message=str(exc), resource_type=res.resource_type,
                resource_name=res.resource_name, configs=[],
            ))
            continue
        results.append(_Result(
            error_code=ErrorCode.NONE, error_message=None, resource_type=res.resource_type,
            resource_name=res.resource_name, configs=configs,
        ))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
