"""What DescribeConfigs, AlterConfigs and IncrementalAlterConfigs share (not a handler
module): resource types, describing a resource, and applying a topic's new configs.

Topic resources hold the configs of ``gateway.log.topic_config``; the broker resource (name
``""``, the cluster default, or this node's id) reports this node's settings, read-only but
for the dynamic ones (``gateway/dynamic_configs.py``), which AlterConfigs and
IncrementalAlterConfigs set. Group resources (DescribeConfigs and IncrementalAlterConfigs)
hold the share group configs (``gateway/share/config.py``). Other resource types (broker
loggers, client metrics) answer INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from kafka.protocol.admin import DescribeConfigsResponse
from tidegate.core.controller.api import ConflictError, StreamConfig
from tidegate.core.segmentstore.api import SegmentStoreError
from tidegate.gateway import failpoints
from tidegate.gateway.config import GatewayConfig
from tidegate.gateway.dynamic_configs import DYNAMIC_KEYS, DynamicConfigError
from tidegate.gateway.handlers import HandlerContext
from tidegate.gateway.log import topic_config
from tidegate.gateway.log.topic_config import ConfigSource, ConfigType, InvalidConfig
from tidegate.gateway.log.topics import TopicInfo
from tidegate.gateway.share.config import group_config_defaults
from tidegate.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

_ConfigResult = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
_Synonym = _ConfigResult.DescribeConfigsSynonym

#: Attempts (100 ms apart) at a stream policy update while another workflow holds the
#: stream (a scale, a truncation).
UPDATE_ATTEMPTS_MAX = 50
UPDATE_RETRY_DELAY_MS = 100


class ResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type (not the ACL resource types of ``security.acls``)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ResourceError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def topic_of(ctx: HandlerContext, name: str) -> TopicInfo:
    info = ctx.topics.get(name)
    if info is None:
        raise ResourceError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name!r} does not exist."
        )
    return info


def check_broker(ctx: HandlerContext, name: str) -> None:
    if name not in ("", str(ctx.config.node_id)):
        raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id {name!r}")


def check_type(resource_type: int, served: Collection[ResourceType] = (
        ResourceType.TOPIC, ResourceType.BROKER, ResourceType.GROUP)) -> ResourceType:
    if resource_type not in served:
        raise ResourceError(
            ErrorCode.INVALID_REQUEST, f"resource type {resource_type} is not supported"
        )
    return ResourceType(resource_type)


def describe(
    ctx: HandlerContext, rtype: ResourceType, name: str, keys: Collection[str] | None,
    synonyms: bool, documentation: bool, version: int,
    group_configs: dict[str, str] | None = None,
) -> list[Any]:
    """The configs of one resource as DescribeConfigs entries (``keys`` None: all;
    ``group_configs``: a GROUP's as read from the table in cluster mode)."""
    out = []
    if rtype == ResourceType.TOPIC:
        stored = topic_of(ctx, name).configs
        for cname, d in topic_config.TOPIC_CONFIGS.items():
            if keys is not None and cname not in keys:
                continue
            is_set = cname in stored
            value = stored.get(cname, d.default)
            source = ConfigSource.DYNAMIC_TOPIC_CONFIG if is_set else ConfigSource.DEFAULT_CONFIG
            syn = []
            if synonyms:
                if is_set:
                    syn.append(_Synonym(name=cname, value=value, source=source))
                syn.append(_Synonym(name=d.broker_synonym or cname, value=d.default,
                                    source=ConfigSource.DEFAULT_CONFIG))
            out.append(_entry(cname, value, False, source, not is_set, d.type, d.doc, syn,
                              documentation, version))
    elif rtype == ResourceType.GROUP:
        out = _describe_group(ctx, name, keys, synonyms, documentation, version, group_configs)
    else:
        check_broker(ctx, name)
        if name == "" and ctx.dynamic_configs is not None:
            out = _describe_cluster_default(ctx.dynamic_configs.cluster_default, keys, synonyms,
                                            documentation, version)
        else:
            out = _describe_broker(ctx, keys, synonyms, documentation, version)
    return out


async def stored_group_configs(ctx: HandlerContext, name: str) -> dict[str, str] | None:
    """Cluster mode: a GROUP's share configs as stored in the share coordinator's table
    (any node answers configs); None on a single node (the coordinator has them)."""
    claims = ctx.share_leader.claims if ctx.share_leader is not None else None
    if claims is None or not name:
        return None
    try:
        return await claims.group_configs(name)
    except SegmentStoreError as exc:
        raise ResourceError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"share group configs: {exc}") from None


def _describe_group(
    ctx: HandlerContext, name: str, keys: Collection[str] | None, synonyms: bool,
    documentation: bool, version: int, stored_here: dict[str, str] | None,
) -> list[Any]:
    """A group's share configs: those it sets (GROUP_CONFIG), the others with the value
    that applies to it (DEFAULT_CONFIG), as Kafka describes a group resource."""
    share = ctx.share_groups or ctx.share_leader
    if share is None:
        raise ResourceError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "share groups are not running")
    if not name:
        raise ResourceError(ErrorCode.INVALID_REQUEST, "the group name is empty")
    stored = stored_here if stored_here is not None else share.group_configs.get(name, {})
    out = []
    for cname, default in group_config_defaults(share.config).items():
        if keys is not None and cname not in keys:
            continue
        is_set = cname in stored
        source = ConfigSource.GROUP_CONFIG if is_set else ConfigSource.DEFAULT_CONFIG
        value = stored[cname] if is_set else default
        ctype = ConfigType.STRING if cname == "share.auto.offset.reset" else ConfigType.INT
        syn = [_Synonym(name=cname, value=v, source=src) for src, v in
               ([(source, value)] if is_set else []) + [(ConfigSource.DEFAULT_CONFIG, default)]
               ] if synonyms else []
        out.append(_entry(cname, value, False, source, not is_set, ctype,
                          "A share group config (KIP-932).", syn, documentation, version))
    return out


def _describe_cluster_default(
    stored: dict[str, str], keys: Collection[str] | None, synonyms: bool, documentation: bool,
    version: int,
) -> list[Any]:
    """The cluster default resource (empty name) holds only the dynamic defaults set, as
    Kafka describes it."""
    out = []
    types = topic_config.broker_configs(GatewayConfig())
    for cname, value in sorted(stored.items()):
        if keys is not None and cname not in keys:
            continue
        source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        syn = [_Synonym(name=cname, value=value, source=source)] if synonyms else []
        _, ctype, doc = types[cname]
        out.append(_entry(cname, value, False, source, False, ctype, doc, syn, documentation,
                          version))
    return out


def _describe_broker(
    ctx: HandlerContext, keys: Collection[str] | None, synonyms: bool, documentation: bool,
    version: int,
) -> list[Any]:
    """Each broker config with its source: a dynamic config set for this node or as the
    cluster default first, then the static value (flags, config file), then the default;
    the synonyms list every level that sets it in that order, as Kafka does."""
    out = []
    dynamic = ctx.dynamic_configs
    static_config = ctx.config
    if dynamic is not None:
        # The static values the dynamic ones override.
        static_config = replace(ctx.config, **{
            k.attribute: dynamic.static[n] for n, k in DYNAMIC_KEYS.items()})
    defaults = topic_config.broker_configs(GatewayConfig())
    for cname, (value, ctype, doc) in topic_config.broker_configs(static_config).items():
        if keys is not None and cname not in keys:
            continue
        default = defaults[cname][0]
        levels: list[tuple[ConfigSource, str]] = []
        if dynamic is not None:
            levels += [(ConfigSource[src], v) for src, v in dynamic.source_values(cname)]
        if value != default:
            levels.append((ConfigSource.STATIC_BROKER_CONFIG, value))
        levels.append((ConfigSource.DEFAULT_CONFIG, default))
        source, current = levels[0]
        syn = [_Synonym(name=cname, value=v, source=src) for src, v in levels] if synonyms else []
        out.append(_entry(cname, current, cname not in DYNAMIC_KEYS, source,
                          source == ConfigSource.DEFAULT_CONFIG, ctype, doc, syn,
                          documentation, version))
    return out


async def alter_broker(
    ctx: HandlerContext, name: str, configs: dict[str, str | None] | None,
    ops: list[Any] | None, validate_only: bool,
) -> None:
    """AlterConfigs (``configs``: the complete new set) or IncrementalAlterConfigs
    (``ops``) on broker ``name`` ("" is the cluster default): Kafka's refusals for static
    configs and bad values (INVALID_REQUEST with ``DynamicBrokerConfig``'s messages)."""
    check_broker(ctx, name)
    dynamic = ctx.dynamic_configs
    if dynamic is None:
        raise ResourceError(ErrorCode.REQUEST_TIMED_OUT, "the dynamic broker configs are loading")
    if configs is None:
        configs = dict(dynamic.level(name))
        for op in ops or []:
            if op.config_operation == 0:  # SET
                configs[op.name] = op.value
            elif op.config_operation == 1:  # DELETE
                configs.pop(op.name, None)
                if op.name not in DYNAMIC_KEYS:
                    configs[op.name] = None  # refused below as Kafka refuses it
            elif op.config_operation in (2, 3):  # APPEND, SUBTRACT: list configs only
                verb = "append" if op.config_operation == 2 else "subtract"
                raise ResourceError(ErrorCode.INVALID_CONFIG,
                                    f"Config value {verb} is not allowed for config key: {op.name}")
            else:
                raise ResourceError(ErrorCode.INVALID_REQUEST,
                                    f"unknown config operation {op.config_operation}")
    try:
        await dynamic.replace(name, configs, validate_only)
    except DynamicConfigError as exc:
        raise ResourceError(ErrorCode.INVALID_REQUEST, str(exc)) from None


def _entry(
    name: str, value: str, read_only: bool, source: ConfigSource, is_default: bool,
    ctype: ConfigType, doc: str, synonyms: list[Any], documentation: bool, version: int,
) -> Any:
    return _ConfigResult(
        name=name, value=value, read_only=read_only,
        config_source=source if version >= 1 else -1, is_default=is_default,
        is_sensitive=False, synonyms=synonyms, config_type=ctype,
        documentation=doc if documentation else None,
    )


async def apply_topic_configs(
    ctx: HandlerContext, info: TopicInfo, configs: dict[str, str | None], validate_only: bool
) -> None:
    """Validate ``configs`` as the topic's complete set of stored configs and, unless
    ``validate_only``, make them the topic's: the topics table first (durable before the
    answer), then the stream policies (``controller.update_stream`` when they change).
    A crash between the two is finished at the next start (``TopicRegistry`` reconciles
    each stream's policies with its topic's configs); a stream that stays busy puts the
    old configs back."""
    try:
        new = topic_config.validate(configs)
        old_policy = topic_config.stream_config(info.configs, info.partitions)
        new_policy = topic_config.stream_config(new, info.partitions)
    except InvalidConfig as exc:
        raise ResourceError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    if validate_only:
        return
    await ctx.topics.update(replace(info, configs=new))
    failpoints.hit("alter_configs.configs_stored")
    if new_policy != old_policy:
        try:
            await update_stream_policy(ctx, info.name, new_policy)
        except ResourceError:
            await ctx.topics.update(info)
            raise


async def update_stream_policy(ctx: HandlerContext, topic: str, policy: StreamConfig) -> None:
    """``controller.update_stream``, retried while another workflow holds the stream."""
    for attempt in range(UPDATE_ATTEMPTS_MAX):
        try:
            await ctx.controller.update_stream(ctx.topics.scope, topic, policy)
            return
        except ConflictError:
            if attempt + 1 == UPDATE_ATTEMPTS_MAX:
                raise ResourceError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"the stream of {topic!r} stayed busy; its policies are unchanged",
                ) from None
            await asyncio.sleep(UPDATE_RETRY_DELAY_MS / 1000)
