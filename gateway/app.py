"""The gateway assembled: topics, offset index, partition logs, producer state, the
handler registry and the Kafka listener, over a segment store and a controller that the
caller owns (starts before, closes after)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from tidegate.core.controller.api import Controller
from tidegate.core.segmentstore.api import SegmentStore
from tidegate.gateway.admin.kafka_exporter import KafkaExporterMetrics
from tidegate.gateway.admin.metrics import Metrics
from tidegate.gateway.admin.scaling_metrics import ControllerCounts, ScalingMetrics
from tidegate.gateway.config import GatewayConfig
from tidegate.gateway.dynamic_configs import DynamicBrokerConfigs
from tidegate.gateway.fetch.metrics import FetchSessionCollector
from tidegate.gateway.fetch.sessions import FetchSessionCache
from tidegate.gateway.groups import GroupConfig, GroupCoordinator
from tidegate.gateway.handlers import HandlerContext, Registry, default_registry
from tidegate.gateway.handlers.starting import starting_registry
from tidegate.gateway.log.compaction.cleaner import LogCleaner
from tidegate.gateway.log.leader_epochs import IndexHooks, LeaderEpochs
from tidegate.gateway.log.log_start import RetentionFollower, truncate_to_log_starts
from tidegate.gateway.log.offset_index import OffsetIndex
from tidegate.gateway.log.partitions import PartitionLogs
from tidegate.gateway.log.producer_ids import ProducerIdAllocator
from tidegate.gateway.log.producer_state import ProducerStates
from tidegate.gateway.log.topic_io import TopicIO
from tidegate.gateway.log.topics import TopicRegistry
from tidegate.gateway.log.traffic import PartitionTraffic
from tidegate.gateway.net.server import KafkaServer
from tidegate.gateway.security.acls import AclStore
from tidegate.gateway.security.authorizer import Authorizer, parse_super_users
from tidegate.gateway.security.credentials import CredentialStore
from tidegate.gateway.security.sasl import SUPPORTED
from tidegate.gateway.security.session import FailedLogins, LoginLog, Security
from tidegate.gateway.waiting import StartupState, Waiter

log = logging.getLogger(__name__)


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        store: SegmentStore,
        controller: Controller,
        *,
        registry: Registry | None = None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        traffic: PartitionTraffic | None = None,
        controller_counts: ControllerCounts | None = None,
        before_listen: Callable[[HandlerContext], Awaitable[None]] | None = None,
        local_store: object | None = None,
        waiter: Waiter | None = None,
        container_of: Callable[[str], int] | None = None,
        brokers: Callable[[str | None], list[tuple[int, str, int]]] | None = None,
    ) -> None:
        """``traffic`` counts produce traffic per partition; pass the one the controller's
        auto-scaler reads (``StreamController(key_traffic=...)``). ``controller_counts``
        (the in-process controller's ``stats``) feeds the scale and truncation metrics.
        ``before_listen(ctx)`` runs once the handler context is built, before the first
        request can arrive (cluster mode installs partition leadership there).
        ``local_store`` is this node's own store where ``store`` routes to others (cluster
        mode): the metrics describe this node's containers. ``waiter`` runs the start-up
        steps that read stored state (cluster mode: waiting for containers elsewhere);
        with ``container_of`` (a segment's container) the offset-index rebuild leaves the
        segments of unavailable containers for when their partitions are led.
        ``brokers(listener)`` (cluster mode) lists the live nodes a starting node's
        Metadata names."""
        self.config = config
        self.store = store
        self.controller = controller
        self.registry = registry or default_registry()
        #: Served at the admin REST API's ``/metrics`` (``gateway.admin.metrics``).
        self.metrics = Metrics(local_store if local_store is not None else store)
        self.clock_ms = clock_ms
        self.controller_counts = controller_counts
        self.traffic = traffic or PartitionTraffic(
            config.scope, int(config.store.get("traffic_window_ms", 10_000))
        )
        self.before_listen = before_listen
        self.container_of = container_of
        self.brokers = brokers
        self.waiter = waiter or Waiter(StartupState(), patient=False)
        #: Whether every API is served yet, and if not what the node waits for.
        self.state = self.waiter.state
        self.ctx: HandlerContext | None = None
        self.server: KafkaServer | None = None
        self.cleaner: LogCleaner | None = None
        self.address: tuple[str, int] | None = None
        #: kafka_exporter's series (``gateway/admin/kafka_exporter.py``), once listening.
        self.exporter: KafkaExporterMetrics | None = None

    def _leader_epoch(self, topic: str, partition: int) -> int:
        cluster = self.ctx.cluster if self.ctx is not None else None
        return 0 if cluster is None else cluster.leader_epoch(topic, partition)

    async def start(self) -> tuple[str, int]:
        """Listen, then load topics and rebuild the offset index past its markers."""
        address = await self.listen()
        await self.load()
        return address

    async def listen(self, serving: bool = True) -> tuple[str, int]:
        """Build what needs no stored state and listen: until ``load`` has finished the
        listener answers as a node that is starting (``gateway/handlers/starting.py``).
        ``serving`` False binds the listeners only, until ``serve``."""
        index = OffsetIndex(self.config.data_dir / "gateway" / "index")
        topics = TopicRegistry(self.controller, self.store, self.config.scope)
        producers = ProducerStates(index)
        io = TopicIO(self.traffic)
        logs = PartitionLogs(
            topics, self.store, index, producers,
            rebuild_read_bytes=self.config.rebuild_read_bytes, traffic=io,
        )
        logs.io = io
        logs.container_of = self.container_of
        self.traffic.bind(lambda t: info.partitions if (info := topics.get(t)) else None)
        scaling = ScalingMetrics(
            self.controller, self.config.scope,
            lambda: [(n, i.partitions) for n in topics.names() if (i := topics.get(n))],
            self.store.traffic, self.controller_counts, self.traffic,
        )
        self.metrics.add_collector(scaling, scaling.refresh)
        # Transactions (gateway/txn): each partition's transaction index is kept with the
        # offset index, so it is hooked in before the rebuild replays the segments.
        from tidegate.gateway.txn.partition_txns import PartitionTxns

        partition_txns = PartitionTxns(index)
        # Leader epochs (docs/kafka-apis.md): the history is derived as batches are indexed.
        epochs = LeaderEpochs(index, self._leader_epoch)
        logs.index_hook = IndexHooks(partition_txns, epochs)
        logs.epoch_source = epochs.current
        self.ctx = HandlerContext(
            config=self.config, controller=self.controller, store=self.store, topics=topics,
            logs=logs, index=index, producers=producers,
            producer_ids=ProducerIdAllocator(self.store),
            registry=starting_registry(self.registry, self.state.waiting_for, self.brokers),
            group_coordinator=None, clock_ms=self.clock_ms, leader_epochs=epochs,
            fetch_sessions=FetchSessionCache(
                self.config.max_incremental_fetch_session_cache_slots, self.clock_ms),
        )
        self.ctx.partition_txns = partition_txns
        self.metrics.add_collector(FetchSessionCollector(self.ctx.fetch_sessions))
        self.server = KafkaServer(self.ctx, self.metrics)
        try:
            self.address = await self.server.start(serving)
        except OSError:  # the listen address is taken: leave nothing open behind
            self.server = None
            await self.close()
            raise
        if self.config.advertised_listener is None or self.config.listeners:
            # What one address stands for (cluster mode, the ready line): the first listener's.
            first = self.config.kafka_listeners()[0].name
            host, port = self.config.advertised_by_listener().get(first, self.address)
            self.config.advertised_listener = f"{host}:{port}"
        return self.address

    async def serve(self) -> None:
        """Accept connections on listeners bound by ``listen(serving=False)``."""
        assert self.server is not None
        await self.server.start_serving()

    async def load(self) -> None:
        """What needs the stored state, each step through ``waiter`` (cluster mode waits
        for containers elsewhere); then every API is served."""
        ctx, until_done = self.ctx, self.waiter.until_done
        assert ctx is not None
        topics, logs, index = ctx.topics, ctx.logs, ctx.index
        await until_done("the topics", topics.start)
        # A cluster node indexes other nodes' segments in the background once it serves
        # (gateway/cluster/leadership.py), and its own containers' as it starts them.
        if not self.config.zookeeper:
            rebuilt = await until_done("the offset index rebuild", logs.rebuild)
            if rebuilt:
                log.info("offset index: %d appends indexed from the segments", rebuilt)
        await until_done("the producer ids", ctx.producer_ids.start)
        # Consumer groups (gateway/groups): coordinator state from its table segment; in
        # cluster mode the node owning that segment's container loads it (before_listen).
        if not self.config.zookeeper:
            groups = GroupCoordinator(self.store, GroupConfig.from_table(self.config.groups))
            await groups.start()
            ctx.group_coordinator = groups
            # Share groups (gateway/share): the embedded single node only, for now.
            from tidegate.gateway.share.config import ShareConfig
            from tidegate.gateway.share.coordinator import ShareCoordinator

            share = ShareCoordinator(self.store, ShareConfig.from_table(self.config.share))
            await share.start()
            ctx.share_groups = share
        # The transaction coordinator: in-doubt transactions are completed before serving.
        # In cluster mode the groups' coordinator node runs it (gateway/cluster/groups.py).
        from tidegate.gateway.txn import wiring as txn_wiring

        markers = txn_wiring.LogMarkerWriter(topics, logs, ctx.producers, self.clock_ms)
        ctx.txn_markers = markers
        if not self.config.zookeeper:
            txns = txn_wiring.build_coordinator(ctx, markers)
            await txns.start()
            ctx.transactions = txns
        # Log starts follow the controller's retention truncation (gateway/log/log_start.py).
        follower = RetentionFollower(ctx)
        follower.start()
        ctx.retention_follower = follower
        if self.before_listen is not None:
            before_listen = self.before_listen
            await until_done("partition leadership", lambda: before_listen(ctx))
        from tidegate.gateway.handlers.admin_recovery import finish_admin_operations

        await until_done("unfinished admin operations", lambda: finish_admin_operations(ctx))
        # Compacted topics' cleaner (gateway/log/compaction).
        assert ctx.partition_txns is not None
        self.cleaner = LogCleaner(
            topics, logs, index, self.store, backoff_ms=self.config.log_cleaner_backoff_ms,
            dedupe_buffer_bytes=self.config.log_cleaner_dedupe_buffer_size,
            clock_ms=self.clock_ms, reclaim=lambda topic: truncate_to_log_starts(ctx, topic),
            io_bytes_per_second_max=self.config.log_cleaner_io_max_bytes_per_second,
            txns=ctx.partition_txns, switch_entries_max=self.config.log_cleaner_switch_entries_max,
        )
        self.cleaner.start()
        dynamic = DynamicBrokerConfigs(self.store, self.config)
        cleaner = self.cleaner
        dynamic.on_change.append(
            lambda c: setattr(cleaner, "io_bytes_per_second_max", c.log_cleaner_io_max_bytes_per_second))
        await until_done("the dynamic broker configs", dynamic.start)
        ctx.dynamic_configs = dynamic
        ctx.security = await until_done("the credentials and ACLs",
                                        lambda: _security(self.config, self.store))
        assert logs.io is not None
        self.exporter = KafkaExporterMetrics(
            ctx, self.config.node_id, self.config.advertised_address, logs.io
        )
        self.metrics.add_collector(self.exporter, self.exporter.refresh)
        ctx.registry = self.registry
        self.state.ready = True

    async def kafka_overview(self) -> dict[str, object]:
        """Topics, partitions and groups as the ``/ui`` page shows them."""
        if self.exporter is None:
            return {"node_id": self.config.node_id, "brokers": [], "topics": [], "groups": []}
        await self.exporter.refresh()
        return {**self.exporter.overview(), "scope": self.config.scope}

    async def close(self, timeout_s: float = 10.0) -> None:
        """Answer what is in flight, wait for appends, close the index."""
        if self.ctx is None:
            return
        self.ctx.stop()
        txns, self.ctx.transactions = self.ctx.transactions, None
        if txns is not None:
            await txns.close()
        follower, self.ctx.retention_follower = self.ctx.retention_follower, None
        if follower is not None:
            await follower.close()
        cleaner, self.cleaner = self.cleaner, None
        if cleaner is not None:
            await cleaner.close()
        dynamic, self.ctx.dynamic_configs = self.ctx.dynamic_configs, None
        if dynamic is not None:
            await dynamic.close()
        if self.server is not None:
            await self.server.close(timeout_s)
        security, self.ctx.security = self.ctx.security, None
        if security is not None and security.authorizer is not None:
            await security.authorizer.close()
        await self.ctx.logs.drain(timeout_s)
        self.ctx.logs.close()
        share, self.ctx.share_groups = self.ctx.share_groups, None
        if share is not None:
            await share.close()
        groups, self.ctx.group_coordinator = self.ctx.group_coordinator, None
        if groups is not None:
            await groups.close()
        self.ctx.index.close()
        self.ctx = None


async def _security(config: GatewayConfig, store: SegmentStore) -> Security:
    """SCRAM credentials (``[sasl.users]`` stored when absent), ACLs and the authorizer."""
    mechanisms = [m.strip().upper() for m in config.sasl_enabled_mechanisms.split(",") if m.strip()]
    unknown = [m for m in mechanisms if m not in SUPPORTED]
    if unknown:
        raise ValueError(f"sasl.enabled.mechanisms: {', '.join(unknown)} not supported")
    credentials = CredentialStore(store)
    users = config.sasl.get("users", {})
    if not isinstance(users, dict):
        raise ValueError("[sasl.users] must be a table of name = password")
    added = await credentials.start({str(k): str(v) for k, v in users.items()})
    if added:
        log.info("security: %d SCRAM credentials stored from [sasl.users]", added)
    acls = AclStore(store)
    await acls.start()
    authorizer = None
    if config.authorizer_class_name:
        authorizer = Authorizer(
            acls, parse_super_users(config.super_users), config.allow_everyone_if_no_acl_found
        )
        authorizer.start()
    return Security(
        mechanisms, credentials, acls, config.connections_max_reauth_ms,
        LoginLog(config.sasl_failed_login_log_per_minute),
        FailedLogins(config.connection_failed_authentications_per_ip_max), authorizer,
    )
