"""Kafka API handlers: one module per API, registered by API key.

How to add an API (the admin and consumer-group work plug in here):

1. Write ``gateway/handlers/<api>.py`` with two names:

   - ``SPEC = ApiSpec(XRequest, XResponse, min_version, max_version)`` from
     ``protocol.apis``, with the ``kafka.protocol`` classes and the versions implemented
     (ApiVersions advertises exactly these);
   - ``async def handle(ctx: HandlerContext, req: RequestContext, request) -> response``
     where ``request`` is the decoded ``kafka.protocol`` object and the result is a
     ``kafka.protocol`` response object (encoded at ``req.api_version``), an
     ``EncodedBody`` (pre-encoded buffers, see ``fetch``), or ``None`` for no answer
     (acks=0 Produce).

2. Add the module's name to ``HANDLER_MODULES`` below (two modules registering the
   same API key is an error at start).

Ordering on a connection: a request's handler starts only after the previous request on
the same connection has *released* (by returning, or by calling ``req.release()``
earlier); answers are always written in request order. A handler that may wait long
(Fetch) or that has a synchronous ordering point (Produce: offsets assigned and appends
submitted) calls ``req.release()`` as soon as later requests may overtake it.

Errors: expected conditions become Kafka error codes in the response; an exception
escaping a handler closes the connection (logged), as Kafka does for requests it cannot
process.

``HandlerContext`` holds everything a handler may use; a new subsystem (transactions,
admin state) becomes a typed field of its own, created in ``gateway.app.Gateway.start``.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from tidegate.core.controller.api import Controller
from tidegate.core.segmentstore.api import SegmentStore
from tidegate.gateway.cluster.leadership import PartitionLeaders
from tidegate.gateway.cluster.txn_verify import RemoteTxnVerifier as TxnVerifier
from tidegate.gateway.config import GatewayConfig
from tidegate.gateway.dynamic_configs import DynamicBrokerConfigs
from tidegate.gateway.fetch.sessions import FetchSessionCache
from tidegate.gateway.groups.coordinator import GroupCoordinator
from tidegate.gateway.log.leader_epochs import LeaderEpochs
from tidegate.gateway.log.log_start import RetentionFollower
from tidegate.gateway.log.offset_index import OffsetIndex
from tidegate.gateway.log.partitions import PartitionLogs
from tidegate.gateway.log.producer_ids import ProducerIdAllocator
from tidegate.gateway.log.producer_state import ProducerStates
from tidegate.gateway.log.topics import TopicRegistry
from tidegate.gateway.security.session import Security, Session
from tidegate.gateway.share.coordinator import ShareCoordinator
from tidegate.gateway.txn.coordinator import TransactionCoordinator
from tidegate.gateway.txn.partition_txns import PartitionTxns
from tidegate.gateway.txn.wiring import LogMarkerWriter
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode


@dataclass
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    #: Set when the next request on the connection may start.
    released: asyncio.Event = field(default_factory=asyncio.Event)
    peer: str = ""
    #: ``time.monotonic()`` when its whole frame had been read (request metrics).
    received: float = 0.0
    #: The connection's listener, principal and SASL state (``gateway.security``).
    session: Session | None = None

    def release(self) -> None:
        self.released.set()


@dataclass(frozen=True, slots=True)
class EncodedBody:
    """A response body already encoded, as buffers written in order with ``writelines``
    (lets Fetch splice stored record slices into the answer without copying them)."""

    buffers: Sequence[bytes | memoryview]


Handler = Callable[["HandlerContext", RequestContext, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Api:
    spec: ApiSpec
    handle: Handler


class Registry:
    def __init__(self) -> None:
        self._apis: dict[int, Api] = {}

    def register(self, spec: ApiSpec, handle: Handler) -> None:
        if spec.api_key in self._apis:
            raise ValueError(f"API key {spec.api_key} ({spec.name}) registered twice")
        self._apis[spec.api_key] = Api(spec, handle)

    def add_module(self, module: ModuleType) -> None:
        self.register(module.SPEC, module.handle)

    def get(self, api_key: int) -> Api | None:
        return self._apis.get(api_key)

    def apis(self) -> list[Api]:
        return [self._apis[k] for k in sorted(self._apis)]


#: Handler modules in this package, registered by ``default_registry``.
HANDLER_MODULES = [
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "offset_for_leader_epoch",
    "init_producer_id",
    "create_topics",
    # Admin APIs.
    "delete_topics",
    "create_partitions",
    "describe_configs",
    "alter_configs",
    "incremental_alter_configs",
    "delete_records",
    "describe_cluster",
    # Security (gateway/security).
    "sasl_handshake",
    "sasl_authenticate",
    "describe_acls",
    "create_acls",
    "delete_acls",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
    # What admin UIs read (docs/kafka-apis.md).
    "describe_log_dirs",
    "list_partition_reassignments",
    "describe_client_quotas",
    # Consumer groups (gateway/groups).
    "find_coordinator",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "offset_delete",
    "describe_groups",
    "list_groups",
    "delete_groups",
    "consumer_group_heartbeat",
    "consumer_group_describe",
    # Share groups (gateway/share).
    "share_group_heartbeat",
    "share_group_describe",
    "share_fetch",
    "share_acknowledge",
    "describe_share_group_offsets",
    "alter_share_group_offsets",
    "delete_share_group_offsets",
    # Transactions (gateway/txn).
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "txn_offset_commit",
    "end_txn",
    "write_txn_markers",
    "describe_transactions",
    "list_transactions",
    "describe_producers",
]


def default_registry(modules: Sequence[str] = HANDLER_MODULES) -> Registry:
    registry = Registry()
    for name in modules:
        registry.add_module(importlib.import_module(f"{__name__}.{name}"))
    return registry


@dataclass
class HandlerContext:
    """What handlers work with:

    - ``topics`` (``gateway.log.topics.TopicRegistry``): ``get(name)`` → ``TopicInfo``
      (partitions, configs, topic id), ``create``, ``update`` (partition count, configs),
      ``forget``; topics are streams in ``topics.scope``.
    - ``logs`` (``gateway.log.partitions.PartitionLogs``): ``get(topic, partition)`` →
      ``PartitionLog`` with ``high_watermark``, ``log_start_offset``, ``next_offset``
      and ``set_log_start(offset)`` (durable; Fetch/ListOffsets honour it at once — call
      it before truncating the stream); ``delete_topic(topic)`` after a stream is deleted.
    - ``index`` (``gateway.log.offset_index.OffsetIndex``): ``floor(topic, partition, offset)``
      → the batch holding an offset (segment id and position: the StreamCut for a
      DeleteRecords is the envelope start, ``position - ENVELOPE_BYTES``).
    - ``controller``, ``store``: the stream and segment APIs underneath.
    - ``groups`` (``gateway.groups.GroupCoordinator``): the consumer groups' coordinator,
      started before the listener and closed before the segment store; in cluster mode
      only on the node owning the groups' table container (``gateway/cluster/groups.py``).
    - ``cluster`` (``gateway.cluster.leadership.PartitionLeaders``): which node leads
      each partition, in cluster mode.
    - ``retention_follower`` (``gateway.log.log_start.RetentionFollower``): moves log
      starts after the controller's retention truncated a stream; set once the context
      exists (it reads the context).
    """

    config: GatewayConfig
    controller: Controller
    store: SegmentStore
    topics: TopicRegistry
    logs: PartitionLogs
    index: OffsetIndex
    producers: ProducerStates
    producer_ids: ProducerIdAllocator
    registry: Registry
    #: None on a cluster node that does not coordinate groups now (``groups`` raises).
    group_coordinator: GroupCoordinator | None
    #: Wall clock in milliseconds (injected for tests).
    clock_ms: Callable[[], int]
    #: Set when the gateway shuts down: long polls end early.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    #: Called (synchronously) once ``stopping`` is set: long polls waiting by callback.
    on_stop: list[Callable[[], None]] = field(default_factory=list)
    retention_follower: RetentionFollower | None = None
    #: Partition leadership in cluster mode; None on the embedded single node.
    cluster: PartitionLeaders | None = None
    #: Kafka transactions (``gateway/txn``): the coordinator, each partition's open and
    #: aborted transactions, and the writer of commit/abort markers.
    transactions: TransactionCoordinator | None = None
    partition_txns: PartitionTxns | None = None
    txn_markers: LogMarkerWriter | None = None
    #: Cluster mode: asks the transaction coordinator on another node whether a
    #: transaction holds a partition (``gateway/cluster/txn_verify.py``).
    txn_verifier: TxnVerifier | None = None
    #: SASL mechanisms, SCRAM credentials, ACLs and the authorizer (``gateway/security``).
    security: Security | None = None
    #: Incremental fetch sessions (KIP-227); None: every fetch is sessionless.
    fetch_sessions: FetchSessionCache | None = None
    #: Each partition's leader epoch and its history; None: epochs are not checked.
    leader_epochs: LeaderEpochs | None = None

    #: Share groups (KIP-932, ``gateway/share``); in cluster mode only on the node that
    #: coordinates groups (``gateway/cluster/groups.py``).
    share_groups: ShareCoordinator | None = None
    #: Cluster mode: the share-partitions of the partitions this node leads, served to
    #: ShareFetch and ShareAcknowledge (``gateway/share/claims.py``).
    share_leader: ShareCoordinator | None = None
    #: Dynamic broker configs (``gateway/dynamic_configs.py``); None until loaded.
    dynamic_configs: DynamicBrokerConfigs | None = None
    #: Cluster mode: answer group and transactional requests NOT_COORDINATOR while this
    #: node coordinates neither (``gateway/cluster/groups.py``).
    not_coordinator: GroupCoordinator | None = None
    not_txn_coordinator: TransactionCoordinator | None = None

    @property
    def groups(self) -> GroupCoordinator:
        if self.group_coordinator is not None:
            return self.group_coordinator
        if self.not_coordinator is None:
            raise RuntimeError("this node does not coordinate consumer groups now")
        return self.not_coordinator

    def stop(self) -> None:
        self.stopping.set()
        callbacks, self.on_stop = self.on_stop, []
        for callback in callbacks:
            callback()


async def lead_error(ctx: HandlerContext, topic: str, partition: int) -> ErrorCode:
    """In cluster mode, why this node may not answer for the partition's log (another node
    leads it, or this one has not caught up with it): Kafka's leaders alone answer
    ListOffsets, DeleteRecords and DescribeProducers. NONE on one node, and for a
    partition the topic does not have (the handler answers that)."""
    info = ctx.topics.get(topic)
    if ctx.cluster is None or info is None or not 0 <= partition < info.partitions:
        return ErrorCode.NONE
    return await ctx.cluster.partition_error(topic, partition)
