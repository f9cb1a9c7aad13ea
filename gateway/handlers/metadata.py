"""Metadata (key 3): this node leads every partition (in cluster mode: every live node
is a broker, and a partition's leader is the owner of its current segment's container,
answered with its leader epoch from the same map, ``gateway/cluster/leadership.py``, and
its replicas the nodes holding the container's Tier-1 log, ``core/cluster/replicas.py``);
a single node's epochs are 0. Unknown topics are created when both the request
(``allow_auto_topic_creation``, v4+) and ``auto.create.topics.enable`` allow it, at most
``AUTO_CREATE_MAX`` per request: the others answer LEADER_NOT_AVAILABLE (retriable, as Kafka
answers while a topic is being created) and are created by the client's next asks."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.log.topics import TopicInfo, topic_name_error
from tidegate.gateway.security.acls import ResourceType
from tidegate.gateway.security.operations import authorized
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(MetadataRequest, MetadataResponse, 0, 12)

#: Topics whose leaders one Metadata request reads at once (cluster mode).
LEADER_READS_MAX = 64
#: Topics one Metadata request may auto-create: bounds the work one request starts.
AUTO_CREATE_MAX = 16

_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition


def topic_response(ctx: HandlerContext, info: TopicInfo,
                   leaders: list[tuple[int | None, int]] | None = None,
                   replica_sets: Sequence[Any] | None = None) -> Any:
    """``leaders``: each partition's leader (None: not available) and leader epoch in
    cluster mode; ``replica_sets`` its replicas and ISR (else the leader alone)."""
    node = ctx.config.node_id
    epochs = ctx.leader_epochs
    partitions = []
    for p in range(info.partitions):
        leader: int | None
        if leaders is None:
            leader, epoch = node, (epochs.current(info.name, p) if epochs is not None else -1)
        else:
            leader, epoch = leaders[p]
        if leader is None:
            partitions.append(_Partition(
                error_code=ErrorCode.LEADER_NOT_AVAILABLE, partition_index=p, leader_id=-1,
                leader_epoch=-1, replica_nodes=[], isr_nodes=[], offline_replicas=[],
            ))
            continue
        found = replica_sets[p] if replica_sets is not None else None
        partitions.append(_Partition(
            error_code=0, partition_index=p, leader_id=leader, leader_epoch=epoch,
            replica_nodes=found.replicas if found else [leader],
            isr_nodes=found.isr if found else [leader],
            offline_replicas=found.offline if found else [],
        ))
    return _Topic(
        error_code=0, name=info.name, topic_id=info.topic_id, is_internal=False,
        partitions=partitions,
    )


_NO_TOPIC_ID = uuid.UUID(int=0)


async def _replica_set(cluster: Any, topic: str, partition: int, leader: int | None) -> Any:
    """The partition's ``ReplicaSet`` (``core/cluster/replicas.py``), None without a leader."""
    return None if leader is None else await cluster.replica_set(topic, partition, leader)


def _error_topic(name: str | None, error: ErrorCode, topic_id: uuid.UUID = _NO_TOPIC_ID) -> Any:
    return _Topic(error_code=error, name=name, topic_id=topic_id, is_internal=False, partitions=[])


class _AutoCreate:
    """What one request may still auto-create."""

    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed
        self.left = AUTO_CREATE_MAX


async def ensure_topic(ctx: HandlerContext, name: str, create: _AutoCreate) -> TopicInfo | ErrorCode:
    """The topic, auto-created if allowed; or the error to answer with."""
    info = ctx.topics.get(name)
    if info is not None:
        return info
    if topic_name_error(name) is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if not (create.allowed and ctx.config.auto_create_topics_enable):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if create.left <= 0:
        return ErrorCode.LEADER_NOT_AVAILABLE
    create.left -= 1
    await ctx.topics.create(name, ctx.config.num_partitions)
    return ctx.topics.get(name) or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    version = req.api_version
    requested = request.topics
    names: list[str | None]
    ids: list[uuid.UUID] = []
    if requested is None or (version == 0 and not requested):
        names = list(ctx.topics.names())
        allow = False
    else:
        # v10+ asks for topics by id (KIP-516; librdkafka does for the ids a KIP-848
        # assignment names); an unknown id answers UNKNOWN_TOPIC_ID.
        names = [t.name if t.name is not None or version < 10 else ctx.topics.name_of(t.topic_id)
                 for t in requested]
        ids = [t.topic_id if version >= 10 else _NO_TOPIC_ID for t in requested]
        allow = version < 4 or bool(request.allow_auto_topic_creation)
    create = _AutoCreate(allow)
    topics: list[Any] = []
    cluster = ctx.cluster
    led: list[tuple[int, TopicInfo]] = []  # cluster mode: (place in topics, topic)
    for i, name in enumerate(names):
        if name is None:
            # Kafka answers an unknown id with that id and no name (v12+ names are nullable).
            topics.append(_error_topic(None if version >= 12 else "", ErrorCode.UNKNOWN_TOPIC_ID, ids[i]))
            continue
        found = await ensure_topic(ctx, name, create)
        if isinstance(found, ErrorCode):
            topics.append(_error_topic(name, found))
        elif cluster is not None:
            led.append((len(topics), found))
            topics.append(None)
        else:
            topics.append(topic_response(ctx, found))
    # Each topic's leaders take a metadata read, maybe on another node: read together.
    for wave in range(0, len(led), LEADER_READS_MAX):
        batch = led[wave : wave + LEADER_READS_MAX]
        assert cluster is not None
        found_leaders = await asyncio.gather(*(cluster.leaders(t.name, t.partitions) for _, t in batch))
        for (at, info), leaders in zip(batch, found_leaders, strict=True):
            sets = await asyncio.gather(*(
                _replica_set(cluster, info.name, p, leader) for p, (leader, _) in enumerate(leaders)
            ))
            topics[at] = topic_response(ctx, info, leaders, sets)
    if cluster is not None:
        brokers = [
            MetadataResponse.MetadataResponseBroker(node_id=n, host=h, port=p, rack=None)
            for n, h, p in cluster.brokers(req.session.listener.name if req.session else None)
        ]
        controller_id = cluster.controller_id()
    else:
        host, port = req.session.advertised if req.session else ctx.config.advertised_address
        brokers = [MetadataResponse.MetadataResponseBroker(
            node_id=ctx.config.node_id, host=host, port=port, rack=None
        )]
        controller_id = ctx.config.node_id
    if version >= 8 and request.include_topic_authorized_operations:
        for t in topics:
            if t.error_code == 0:
                t.authorized_operations = authorized(ctx.security, req.session, ResourceType.TOPIC, t.name)
    response = MetadataResponse(
        throttle_time_ms=0, brokers=brokers, cluster_id=ctx.config.cluster_id,
        controller_id=controller_id, topics=topics,
    )
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        response.authorized_operations = authorized(ctx.security, req.session, ResourceType.CLUSTER)
    return response
