"""CreateTopics (key 19): partitions and configs; replication factor and assignments
are accepted and ignored (durability comes from the segment store); ``validate_only``
checks without creating. Configs are validated and mapped onto stream policies by
``gateway.log.topic_config`` (INVALID_CONFIG with a message otherwise); v5+ answers list
every config of the new topic."""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.log import topic_config
from tidegate.gateway.log.topics import topic_name_error
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(CreateTopicsRequest, CreateTopicsResponse, 2, 7)

_Result = CreateTopicsResponse.CreatableTopicResult

#: Partition counts above this are refused (each partition starts as a segment).
PARTITIONS_MAX = 10_000


def _result(name: str, error: ErrorCode, message: str | None = None, **kw: Any) -> Any:
    return _Result(
        name=name, topic_id=kw.pop("topic_id", uuid.UUID(int=0)), error_code=error,
        error_message=message, **kw,
    )


def _configs(configs: dict[str, str]) -> list[Any]:
    cfg = _Result.CreatableTopicConfigs
    return [
        cfg(name=k, value=v, read_only=False, is_sensitive=False,
            config_source=topic_config.ConfigSource.DYNAMIC_TOPIC_CONFIG if k in configs
            else topic_config.ConfigSource.DEFAULT_CONFIG)
        for k, v in topic_config.effective(configs).items()
    ]


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    results = []
    seen: set[str] = set()
    for topic in request.topics:
        name = topic.name
        if name in seen:
            results.append(_result(name, ErrorCode.INVALID_REQUEST, "duplicate topic"))
            continue
        seen.add(name)
        partitions = ctx.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        if topic.assignments:  # manual assignments give the partition count
            partitions = len(topic.assignments)
        bad_name = topic_name_error(name)
        if bad_name is not None:
            results.append(_result(name, ErrorCode.INVALID_TOPIC_EXCEPTION, bad_name))
        elif ctx.topics.get(name) is not None:
            results.append(
                _result(name, ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
            )
        elif not 1 <= partitions <= PARTITIONS_MAX:
            results.append(
                _result(name, ErrorCode.INVALID_PARTITIONS, f"{partitions} partitions")
            )
        elif topic.replication_factor not in (-1,) and topic.replication_factor < 1:
            results.append(_result(name, ErrorCode.INVALID_REPLICATION_FACTOR, None))
        else:
            try:
                configs = topic_config.validate({c.name: c.value for c in topic.configs})
                topic_config.stream_config(configs, partitions)
            except topic_config.InvalidConfig as exc:
                results.append(_result(name, ErrorCode.INVALID_CONFIG, str(exc)))
                continue
            if request.validate_only:
                results.append(
                    _result(name, ErrorCode.NONE, num_partitions=partitions, replication_factor=1,
                            configs=_configs(configs))
                )
                continue
            info = await ctx.topics.create(name, partitions, configs)
            if info is None:
                results.append(_result(name, ErrorCode.TOPIC_ALREADY_EXISTS, None))
            else:
                results.append(
                    _result(
                        name, ErrorCode.NONE, topic_id=info.topic_id,
                        num_partitions=partitions, replication_factor=1,
                        configs=_configs(configs),
                    )
                )
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)
