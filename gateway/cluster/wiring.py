"""``ClusterWiring``: what ``tidegate serve --zookeeper`` adds to the embedded node.

Order: the segment-store server listens; the node joins ZooKeeper (registers, follows
the container map, stands for controller leader); the routing store waits for a map;
the caller builds the controller over the routing store and the gateway over both; the
gateway follows partition leadership before it listens (``attach``: a request served in
between as by a single node could reuse offsets another node leads); once it listens the
node registers again with the Kafka address bound (``announce``).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Protocol

from tidegate.core.cluster.node import ClusterNode, ContainerCountError
from tidegate.core.cluster.replicas import PlogReplicas
from tidegate.core.cluster.routing import RoutingSegmentStore
from tidegate.core.cluster.zookeeper import (
    STARTING,
    ClusterSession,
    CoordinationError,
    ZooKeeperError,
)
from tidegate.core.segmentstore.api import SegmentStore
from tidegate.core.segmentstore.remote.server import SegmentStoreServer
from tidegate.core.segmentstore.service import StreamSegmentStore, container_of
from tidegate.gateway import failpoints
from tidegate.gateway.cluster.groups import GroupPlacement
from tidegate.gateway.cluster.internode import InterNode, inter_node
from tidegate.gateway.cluster.leadership import PartitionLeaders, live_brokers
from tidegate.gateway.cluster.txn_markers import ClusterMarkerWriter
from tidegate.gateway.cluster.txn_verify import RemoteTxnVerifier
from tidegate.gateway.cluster.watermarks import PeerWatermarks
from tidegate.gateway.config import GatewayConfig, parse_host_port
from tidegate.gateway.share.claims import ShareStateClaims
from tidegate.gateway.share.coordinator import ShareCoordinator
from tidegate.gateway.startup import StartupError
from tidegate.gateway.waiting import StartupState, Waiter

log = logging.getLogger(__name__)


class LeaderController(Protocol):
    """The controller's lifecycle as the leader runs it."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class TopicsTable(Protocol):
    async def reload(self) -> set[str]: ...


class TopicLogs(Protocol):
    def delete_topic(self, topic: str) -> None: ...


def cluster_tier1_settings(zookeeper: str, segment_store: str, settings: dict[str, Any]) -> None:
    """Cluster mode's Tier-1 (``docs/cluster.md``), into the store's ``settings``: without
    a shared ``tier1_dir`` (the file log, chosen explicitly) each container's log is
    replicated on plog servers found through the cluster's ZooKeeper, every node runs
    one beside its segment store, and the inactive-segment records live in the shared
    Tier-2 directory."""
    if settings.get("tier1_dir"):
        return
    tier2 = settings.get("tier2_dir")
    if not tier2:
        raise OSError("cluster mode needs --tier2-dir, a directory every node shares")
    settings.setdefault("tier1_plog_zookeeper", zookeeper)
    settings.setdefault("tier1_plog_server_listen", f"{parse_host_port(segment_store)[0]}:0")
    settings.setdefault("metadata_dir", str(Path(tier2) / ".containers"))


class ClusterWiring:
    def __init__(self, config: GatewayConfig, local: StreamSegmentStore) -> None:
        self.config = config
        self.local = local
        self.server = SegmentStoreServer(local)
        self.session = ClusterSession(
            config.zookeeper, config.node_id,
            session_timeout_s=config.zookeeper_session_timeout_ms / 1000,
        )
        # Until it serves (``announce``), the leader moves no running container here.
        self.info: dict[str, Any] = {"node": config.node_id, STARTING: True}
        self.node = ClusterNode(
            self.session, local, node_id=config.node_id,
            container_count=local.config.container_count, info=self.info,
        )
        self.routing = RoutingSegmentStore(
            local, config.node_id, local.config.container_count,
            self.node.containers, self.node.peers,
        )
        self.leaders: PartitionLeaders | None = None
        self.topics_refresh_ms = 500
        self._topics_task: asyncio.Task[None] | None = None
        self._groups_task: asyncio.Task[None] | None = None
        self._warm_task: asyncio.Task[None] | None = None

    def container_of(self, segment: str) -> int:
        return container_of(segment, self.local.config.container_count)

    def brokers(self, listener: str | None = None) -> list[tuple[int, str, int]]:
        """The live nodes' Kafka addresses as ZooKeeper lists them (empty until this node
        has joined): what a starting node's Metadata names (``gateway/handlers/starting.py``)."""
        return live_brokers(self.node.members, listener)

    @property
    def store(self) -> SegmentStore:
        store: SegmentStore = self.routing
        return store

    def leader_grpc(self) -> str | None:
        """The controller leader's gRPC address for forwarded writes; None while this
        node leads, no leader is known, or the leader serves no gRPC."""
        if self.node.leader:
            return None
        leader = self.session.leader_id
        info = self.node.members.get(leader) if leader is not None else None
        address = str(info.get("grpc", "")) if info else ""
        return address if address not in ("", "off", "none") else None

    def follow_leadership(self, controller: LeaderController) -> None:
        """Run the controller's workflows and policies while this node leads."""

        async def changed(leading: bool) -> None:
            if leading:
                log.info("controller leader: resuming workflows and starting policies")
                await controller.start()  # ClusterNode takes leadership up again if this fails
            else:
                log.info("no longer the controller leader: policies stop")
                await controller.close()

        self.node.on_leadership = changed

    async def start(self, waiter: Waiter | None = None) -> None:
        """Join the cluster; with a patient ``waiter`` (``tidegate serve``) ZooKeeper
        and the container map are waited for as long as it takes."""
        waiter = waiter or Waiter(StartupState(), patient=False)
        # Owns nothing yet: the map decides (its plog server starts and registers).
        await waiter.until_done(f"ZooKeeper at {self.config.zookeeper}", self._start_local)
        if self.local.plog_server is not None:  # its plogs make this node a Kafka replica
            self.info["plog"] = self.local.plog_server.server_id
        host, port = parse_host_port(self.config.segment_store)
        shost, sport = await self.server.start(host, port)
        self.info.update(
            store=f"{shost}:{sport}",
            kafka="{}:{}".format(*self.config.advertised_address),
            rest=self.config.rest, grpc=self.config.grpc,
        )
        if self.config.listeners:
            # Known from the config already: the others read members when one joins.
            host = self.config.advertised_address[0]
            configured = self.config.advertised_by_listener()
            self._set_listeners({
                x.name: configured.get(x.name, (x.host or host, x.port))
                for x in self.config.kafka_listeners()
            })
        await waiter.until_done(f"ZooKeeper at {self.config.zookeeper}", self._start_node)
        waiter.state.details.append(self.node.waiting_for)
        await waiter.until_done("a container map in ZooKeeper", self._container_map)
        log.info("cluster: node %d joined; containers here: %s",
                 self.config.node_id, sorted(self.node.owned()))

    async def _start_local(self) -> None:
        try:
            await self.local.start()
        except ZooKeeperError as exc:
            raise OSError(f"cannot join the cluster at {self.config.zookeeper}: {exc}") from exc

    async def _start_node(self) -> None:
        try:
            await self.node.start()
        except ContainerCountError as exc:  # a mistake: waiting would not mend it
            raise StartupError(str(exc)) from None
        except CoordinationError as exc:
            raise OSError(f"cannot join the cluster at {self.config.zookeeper}: {exc}") from exc

    async def _container_map(self, wait_s: float = 10.0) -> None:
        deadline = asyncio.get_running_loop().time() + wait_s
        while len(self.node.containers.owners) < self.local.config.container_count:
            if asyncio.get_running_loop().time() > deadline:
                raise OSError("no container map in ZooKeeper yet (the controller leader writes it)")
            await self.node.containers.wait_change(0.2)

    async def attach(self, ctx: Any) -> None:
        """Before the gateway listens: follow partition leadership, the groups' container
        and the topics table, so no request is ever served as by a single node."""
        self.leaders = PartitionLeaders(ctx, self.node, self.routing)
        if self.local.plog_server is not None:
            c = self.local.config
            self.leaders.replicas = PlogReplicas(
                self.session, lambda: self.node.members, container_count=c.container_count,
                root=c.tier1_plog_zookeeper_root, log_prefix=c.tier1_plog_log_prefix,
            )
        ctx.cluster = self.leaders
        ctx.logs.succession = self.leaders.still_leads_segment
        internode = _internode(self.config)
        markers = ClusterMarkerWriter(ctx.txn_markers, self.leaders, ctx.topics,
                                      internode=internode)
        ctx.txn_verifier = RemoteTxnVerifier(self.leaders, internode=internode)
        self.leaders.peer_watermarks = PeerWatermarks(self.leaders, internode)
        groups = GroupPlacement(ctx, self.routing, self.local.config.container_count, markers,
                                local=self.local)
        # This node's share-partitions as leader, stored in the share coordinator's table.
        ctx.share_leader = ShareCoordinator(
            self.routing, groups.share_config, clock_ms=None,
            claims=ShareStateClaims(self.routing, groups.share_config.table))
        self.leaders.groups_container = groups.container
        leaders = self.leaders

        async def owned(gained: set[int], lost: set[int]) -> None:
            await leaders.on_owned(gained, lost)
            try:
                await groups.follow(self.node.running)
            except Exception as exc:  # noqa: BLE001 - retried off the map's path
                log.warning("group coordination not followed (%r); retrying", exc)
                if self._groups_task is None or self._groups_task.done():
                    self._groups_task = asyncio.get_running_loop().create_task(
                        groups.follow_until_done(lambda: set(self.node.running))
                    )

        async def owned_later(gained: set[int], lost: set[int]) -> None:
            await failpoints.stall("cluster.on_owned")
            await owned(gained, lost)

        self.node.on_owned = owned_later

        def interrupted(cids: set[int]) -> None:
            leaders.interrupted(cids)
            groups.interrupted(cids)

        self.node.on_interrupted = interrupted
        await owned(set(self.node.running), set())
        self._topics_task = asyncio.get_running_loop().create_task(
            self._follow_topics(ctx.topics, ctx.logs, ctx.controller, ctx)
        )

    async def announce(self, listeners: dict[str, tuple[str, int]] | None = None) -> None:
        """Once the gateway listens: register again with the Kafka address bound, and
        every listener's advertised address (a client is told the brokers' addresses on
        the listener it came in on, as Kafka registers all of a broker's endpoints)."""
        self.info["kafka"] = "{}:{}".format(*self.config.advertised_address)
        if listeners and self.config.listeners:
            self._set_listeners(listeners)
        await self.session.register(dict(self.info))
        self._warm_task = asyncio.get_running_loop().create_task(self._started_once_warm())

    async def _started_once_warm(self) -> None:
        """Leave "starting" (take containers from live owners) once the node has indexed
        what the other nodes' segments hold: a container moved here earlier would wait on
        that (a node back with an empty disk reads every segment)."""
        assert self.leaders is not None
        await self.leaders.warm.wait()
        self.info.pop(STARTING, None)
        while True:
            try:
                await self.session.register(dict(self.info))
                return
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away: the next try decides
                log.warning("registration as started failed (%r); retrying", exc)
                await asyncio.sleep(1.0)

    def _set_listeners(self, listeners: dict[str, tuple[str, int]]) -> None:
        self.info["listeners"] = ",".join(
            f"{name}://{host}:{port}" for name, (host, port) in listeners.items())

    async def _follow_topics(
        self, topics: TopicsTable, logs: TopicLogs, controller: Any, ctx: Any
    ) -> None:
        """Topics created, changed or deleted through other nodes become known here; the
        local logs, index entries, producer state and cached epochs of deleted ones are
        dropped (a topic of the same name may follow), and the group coordinator, if it
        is here, drops their committed offsets."""
        while True:
            await asyncio.sleep(self.topics_refresh_ms / 1000)
            try:
                gone = await topics.reload()
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                log.warning("topics not reloaded: %r", exc)
                continue
            for name in sorted(gone):
                log.info("topic %s was deleted through another node", name)
                logs.delete_topic(name)
                controller.forget_stream(self.config.scope, name)
                if ctx.group_coordinator is not None:
                    try:
                        await ctx.group_coordinator.remove_topic_offsets([name])
                    except Exception as exc:  # noqa: BLE001 - offsets of a gone topic stay
                        log.warning("offsets of deleted topic %s not removed: %r", name, exc)

    async def close(self) -> None:
        for task in (self._topics_task, self._groups_task, self._warm_task):
            if task is not None:
                task.cancel()
        if self.leaders is not None:
            self.leaders.close()
            if self.leaders.replicas is not None:
                await self.leaders.replicas.close()
        await self.node.close()
        await self.server.close()
        await self.routing.close()


def _internode(config: GatewayConfig) -> InterNode:
    """``inter.broker.listener.name`` (when ``listeners`` is set: else the first
    listener's announced address, plaintext, as before listeners were announced)."""
    if not config.listeners:
        return InterNode()
    listeners = config.kafka_listeners()
    name = config.inter_broker_listener_name.upper() or listeners[0].name
    listener = next((x for x in listeners if x.name == name), None)
    if listener is None:
        raise ValueError(f"inter.broker.listener.name: {name} is not in listeners")
    mechanisms = [m.strip().upper() for m in config.sasl_enabled_mechanisms.split(",")]
    return inter_node(
        listener, user=config.admin_forward_user, password=config.admin_forward_password,
        mechanisms=mechanisms, keystore=config.ssl_keystore_location,
        chain=config.ssl_keystore_certificate_chain, key_password=config.ssl_key_password,
        truststore=config.ssl_truststore_location,
    )
