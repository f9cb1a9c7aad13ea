"""IncrementalAlterConfigs (key 44): SET, DELETE (back to Kafka's default), APPEND and
SUBTRACT (list configs only: ``cleanup.policy``) on a topic's stored configs; validated
and mapped onto stream policies like AlterConfigs. On a broker resource: SET and DELETE of
the dynamic broker configs (``gateway/dynamic_configs.py``). GROUP resources take the
share group configs (``share.auto.offset.reset``, ...)."""

from __future__ import annotations

import enum
from typing import Any

from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
from tidegate.core.segmentstore.api import SegmentStoreError
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.handlers.config_resources import (
    ResourceError,
    ResourceType,
    alter_broker,
    apply_topic_configs,
    check_type,
    topic_of,
)
from tidegate.gateway.log import topic_config
from tidegate.gateway.log.topic_config import ConfigType
from tidegate.gateway.share.claims import ShareStateClaims
from tidegate.gateway.share.config import check_group_config
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 0, 1)

_Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse


class OpType(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def _list(value: str | None) -> list[str]:
    return [i.strip() for i in (value or "").split(",") if i.strip()]


def merged(stored: dict[str, str], ops: list[Any]) -> dict[str, str | None]:
    """The topic's stored configs after ``ops`` (raises ``ResourceError``)."""
    out: dict[str, str | None] = dict(topic_config.without_removed(stored))
    for op in ops:
        d = topic_config.TOPIC_CONFIGS.get(op.name)
        if d is None and op.name in topic_config.REMOVED_CONFIGS and (
            op.config_operation == OpType.DELETE
        ):
            continue  # gone already: Kafka 4.x deletes what its LogConfig no longer has
        if d is None:
            raise ResourceError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {op.name}")
        if op.config_operation == OpType.SET:
            out[op.name] = op.value
        elif op.config_operation == OpType.DELETE:
            out.pop(op.name, None)
        elif op.config_operation in (OpType.APPEND, OpType.SUBTRACT):
            if d.type != ConfigType.LIST:
                verb = "append" if op.config_operation == OpType.APPEND else "subtract"
                raise ResourceError(
                    ErrorCode.INVALID_CONFIG,
                    f"Config value {verb} is not allowed for config key: {op.name}",
                )
            current = _list(out.get(op.name) or d.default)
            items = _list(op.value)
            if op.config_operation == OpType.APPEND:
                current += [i for i in items if i not in current]
            else:
                current = [i for i in current if i not in items]
            out[op.name] = ",".join(current)
        else:
            raise ResourceError(
                ErrorCode.INVALID_REQUEST, f"unknown config operation {op.config_operation}"
            )
    return out


async def alter_share_group(ctx: HandlerContext, res: Any, validate_only: bool) -> None:
    """A share group's configs (``gateway/share/config.py``): SET and DELETE."""
    share = ctx.share_groups
    claims = ctx.share_leader.claims if ctx.share_leader is not None else None
    if share is None and claims is None:
        raise ResourceError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "share groups are not running")
    if not res.resource_name:
        raise ResourceError(ErrorCode.INVALID_REQUEST, "the group name is empty")
    if claims is not None:  # cluster mode: any node answers, from the coordinator's table
        configs = dict(await _stored_configs(claims, res.resource_name))
    else:
        assert share is not None
        configs = dict(share.group_configs.get(res.resource_name, {}))
    for op in res.configs:
        if op.config_operation not in (OpType.SET, OpType.DELETE):
            raise ResourceError(ErrorCode.INVALID_CONFIG,
                                f"Config value append or subtract is not allowed for config key: {op.name}")
        value = op.value if op.config_operation == OpType.SET else None
        problem = check_group_config(op.name, value)
        if problem is not None:
            raise ResourceError(ErrorCode.INVALID_CONFIG, problem)
        if value is None:
            configs.pop(op.name, None)
        else:
            configs[op.name] = value.lower() if op.name == "share.auto.offset.reset" else value
    if validate_only:
        return
    try:
        if share is not None:  # the coordinator's node: its cache too
            await share.set_group_configs(res.resource_name, configs)
        else:
            assert claims is not None
            await claims.put_group_configs(res.resource_name, configs)
    except OverflowError as exc:
        raise ResourceError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    except SegmentStoreError as exc:
        raise ResourceError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"share group configs: {exc}") from None


async def _stored_configs(claims: ShareStateClaims, group_id: str) -> dict[str, str]:
    try:
        return await claims.group_configs(group_id)
    except SegmentStoreError as exc:
        raise ResourceError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"share group configs: {exc}") from None


async def alter(ctx: HandlerContext, res: Any, validate_only: bool) -> None:
    if res.resource_type == ResourceType.GROUP:
        await alter_share_group(ctx, res, validate_only)
        return
    rtype = check_type(res.resource_type)
    names = [c.name for c in res.configs]
    if len(set(names)) != len(names):
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    if rtype == ResourceType.BROKER:
        await alter_broker(ctx, res.resource_name, None, list(res.configs), validate_only)
        return
    info = topic_of(ctx, res.resource_name)
    await apply_topic_configs(ctx, info, merged(info.configs, list(res.configs)), validate_only)


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
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)
