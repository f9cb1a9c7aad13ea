"""AlterConfigs (key 33): replaces a topic's stored configs with the given set (configs
not named return to Kafka's defaults); validated (INVALID_CONFIG with a message) and
mapped onto stream policies. On a broker resource: the dynamic broker configs of that level
(``gateway/dynamic_configs.py``), the others refused as Kafka refuses them."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import AlterConfigsRequest, AlterConfigsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.handlers.config_resources import (
    ResourceError,
    ResourceType,
    alter_broker,
    apply_topic_configs,
    check_type,
    topic_of,
)
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(AlterConfigsRequest, AlterConfigsResponse, 0, 2)

_Result = AlterConfigsResponse.AlterConfigsResourceResponse


async def alter(ctx: HandlerContext, res: Any, validate_only: bool) -> None:
    # As Kafka: group configs are set with IncrementalAlterConfigs only.
    rtype = check_type(res.resource_type, (ResourceType.TOPIC, ResourceType.BROKER))
    names = [c.name for c in res.configs]
    if len(set(names)) != len(names):
        raise ResourceError(ErrorCode.INVALID_REQUEST, "duplicate config keys")
    if rtype == ResourceType.BROKER:
        await alter_broker(ctx, res.resource_name, {c.name: c.value for c in res.configs}, None,
                           validate_only)
        return
    info = topic_of(ctx, res.resource_name)
    await apply_topic_configs(ctx, info, {c.name: c.value for c in res.configs}, validate_only)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    results = []
    for res in request.resources:
        code, message = ErrorCode.NONE, None
        try:
            await alter(ctx, res, bool(request.validate_only))
        except ResourceError as exc:
            code, message = exc.code, str(exc)
        results.append(_Result(
            error_code=code, error_message=message, resource_type=res.resource_type,
            resource_name=res.resource_name,
        ))
    return AlterConfigsResponse(throttle_time_ms=0, responses=results)
