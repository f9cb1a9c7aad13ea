"""CreateTopics (key 19): partitions and configs; ``validate_only`` checks without
creating and answers as the creation would. Replication factors and explicit replica
assignments are checked as Kafka 4.x checks them (its messages), then not placed:
durability comes from the segment store, so a replication factor above the number of
nodes is accepted and every partition reports one replica. Configs are validated and mapped onto stream policies by
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


def _assignment_error(topic: Any, brokers: set[int]) -> tuple[ErrorCode, str] | None:
    """Kafka 4.x's checks of explicit replica assignments (ReplicationControlManager's
    createTopic and validateManualPartitionAssignment), with its messages. The
    replicas are then not placed: the segment store replicates every partition."""
    if topic.replication_factor != -1:
        return ErrorCode.INVALID_REQUEST, ("A manual partition assignment was specified, "
                                           "but replication factor was not set to -1.")
    if topic.num_partitions != -1:
        return ErrorCode.INVALID_REQUEST, ("A manual partition assignment was specified, "
                                           "but numPartitions was not set to -1.")
    bad = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    seen: set[int] = set()
    replicas: int | None = None
    for a in topic.assignments:
        if a.partition_index in seen:
            return bad, f"Found multiple manual partition assignments for partition {a.partition_index}"
        seen.add(a.partition_index)
        if not a.broker_ids:
            return bad, "The manual partition assignment includes an empty replica list."
        previous = None
        for broker in sorted(a.broker_ids):
            if broker not in brokers:
                return bad, (f"The manual partition assignment includes broker {broker}, "
                             "but no such broker is registered.")
            if broker == previous:
                return bad, f"The manual partition assignment includes the broker {broker} more than once."
            previous = broker
        if replicas is not None and len(a.broker_ids) != replicas:
            return bad, (f"The manual partition assignment includes a partition with {len(a.broker_ids)} "
                         "replica(s), but this is not consistent with previous partitions, which have "
                         f"{replicas} replica(s).")
        replicas = len(a.broker_ids)
    if seen != set(range(len(seen))):
        return bad, "partitions should be a consecutive 0-based integer sequence"
    return None


def _brokers(ctx: HandlerContext, req: RequestContext) -> set[int]:
    if ctx.cluster is None:
        return {ctx.config.node_id}
    return {n for n, _, _ in ctx.cluster.brokers(req.session.listener.name if req.session else None)}


def _check(ctx: HandlerContext, req: RequestContext, topic: Any) -> tuple[ErrorCode, str] | int:
    """The partition count to create, or why not (Kafka's order of checks)."""
    if topic.assignments:
        error = _assignment_error(topic, _brokers(ctx, req))
        if error is not None:
            return error
        partitions = len(topic.assignments)
    elif topic.replication_factor < -1 or topic.replication_factor == 0:
        return ErrorCode.INVALID_REPLICATION_FACTOR, (
            "Replication factor must be larger than 0, or -1 to use the default value.")
    elif topic.num_partitions < -1 or topic.num_partitions == 0:
        return ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."
    else:
        partitions = ctx.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    if partitions > PARTITIONS_MAX:
        return ErrorCode.INVALID_PARTITIONS, f"{partitions} partitions: at most {PARTITIONS_MAX}"
    return partitions


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    results = []
    names = [t.name for t in request.topics]
    # Kafka creates none of a name given twice and answers it once.
    duplicates = {n for n in names if names.count(n) > 1}
    for topic in request.topics:
        name = topic.name
        if name in duplicates:
            continue
        bad_name = topic_name_error(name)
        if bad_name is not None:
            results.append(_result(name, ErrorCode.INVALID_TOPIC_EXCEPTION, bad_name))
            continue
        if ctx.topics.get(name) is not None:
            results.append(_result(name, ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."))
            continue
        nulls = [c.name for c in topic.configs if c.value is None]
        if nulls:  # Kafka's computeConfigChanges; a name given twice: the last value counts
            results.append(_result(name, ErrorCode.INVALID_CONFIG,
                                   "Null value not supported for topic configs: " + ",".join(nulls)))
            continue
        try:
            configs = topic_config.validate({c.name: c.value for c in topic.configs})
        except topic_config.InvalidConfig as exc:
            results.append(_result(name, ErrorCode.INVALID_CONFIG, str(exc)))
            continue
        checked = _check(ctx, req, topic)
        if isinstance(checked, tuple):
            results.append(_result(name, *checked))
            continue
        partitions = checked
        try:
            topic_config.stream_config(configs, partitions)
        except topic_config.InvalidConfig as exc:
            results.append(_result(name, ErrorCode.INVALID_CONFIG, str(exc)))
            continue
        if request.validate_only:
            # Kafka's validate-only answer is the creation's, a fresh topic id included.
            results.append(
                _result(name, ErrorCode.NONE, topic_id=uuid.uuid4(), num_partitions=partitions,
                        replication_factor=1, configs=_configs(configs))
            )
            continue
        info = await ctx.topics.create(name, partitions, configs)
        if info is None:
            results.append(_result(name, ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."))
        else:
            results.append(
                _result(
                    name, ErrorCode.NONE, topic_id=info.topic_id,
                    num_partitions=partitions, replication_factor=1,
                    configs=_configs(configs),
                )
            )
    for name in sorted(duplicates):
        results.append(_result(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)
