"""Which node leads each Kafka partition, in cluster mode.

The leader of a partition is the owner of the container holding the partition's current
segment (the one whose key range holds its point). Produce and Fetch for a partition led
elsewhere answer ``NOT_LEADER_OR_FOLLOWER``; clients refresh Metadata and follow.

A partition's current segment is looked up through the controller and kept for
``segment_ttl_ms`` (a scale moves it; the map moves its container): a stale answer costs
one ``NOT_LEADER_OR_FOLLOWER`` round trip, never data, since only the container's owner
can append to the segment. Metadata reads it afresh (``leaders``): every node then names
the new leader as soon as a scale is recorded, and no client is sent back to the old one.

A partition's leader epoch is the container map's version plus the creation epoch of
the partition's current segment, read in the same step as the leader: the leader changes
only when the map or the current segment does, both numbers only grow (in ZooKeeper and
the controller, across restarts), so the epoch grows with every leader change and never
names two leaders of one partition.

On a change of owned containers, the node indexes what the segments of the containers it
gained hold past its markers (another node appended them), then forgets its cached logs
of partitions it did not lead throughout, so their offsets, high watermark and producer
state are read again from the rebuilt index, as at start-up, and serves the gained
containers; what other nodes' containers gained is indexed after, in the background. A
partition's first catch-up here reads only the segments that held its point. A container the
map gives away is dropped at once (``interrupted``), before the node gets round to
stopping it, and served again only after such a catch-up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any, Protocol

from tidegate.core.cluster.replicas import PlogReplicas, ReplicaSet
from tidegate.core.cluster.routing import patience
from tidegate.core.segmentstore.service import container_of
from tidegate.gateway.cluster.watermarks import PeerWatermarks
from tidegate.gateway.log.partitions import UNAVAILABLE
from tidegate.gateway.log.topics import partition_point
from tidegate.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

#: How often a partition that stays behind its segments is logged again.
CATCH_UP_LOG_S = 30.0
#: How long a catch-up waits for a moving container: the producer retries (and the
#: catch-ups of other partitions wait behind this one).
CATCH_UP_PATIENCE_MS = 2_000
#: How often a node indexes what other nodes appended (``_index_others``).
INDEX_OTHERS_S = 10.0

class Owners(Protocol):
    container_count: int

    def owner(self, name: str) -> int | None: ...


class ClusterView(Protocol):
    node_id: int
    members: dict[int, dict[str, Any]]
    running: set[int]
    #: Containers the map gave another node while they ran here (``core/cluster/node.py``).
    interrupted: set[int]
    containers: Any

    @property
    def session(self) -> Any: ...


class PartitionLeaders:
    def __init__(self, ctx: Any, node: ClusterView, owners: Owners, *, segment_ttl_ms: int = 1000) -> None:
        self.topics = ctx.topics
        self.controller = ctx.controller
        self.logs = ctx.logs
        self.node = node
        self.owners = owners
        self.segment_ttl_ms = segment_ttl_ms
        self._segments: dict[tuple[str, int], tuple[float, str]] = {}
        #: Creation epoch of each partition's current segment as last looked up (kept
        #: through ``on_owned``: the epoch of a partition is answered at any time).
        self._segment_epochs: dict[tuple[str, int], int] = {}
        #: Containers whose partitions this node serves: running here, and what other
        #: nodes appended to their segments indexed (``on_owned``).
        self.ready: set[int] = set()
        #: Partitions whose cached log this node keeps: it has led them since it last
        #: caught up with their segments (``_catch_up``), with the segment it last knew
        #: current and the ``_generation`` it knew it then.
        self.leading: dict[tuple[str, int], tuple[str, int]] = {}
        #: Counts ``on_owned`` calls; ``_ready_at``: the count when each container was
        #: last made ready (a container given away and back gets a new one).
        self._generation = 0
        self._ready_at: dict[int, int] = {}
        self._catching_up = asyncio.Lock()
        self._catch_up_logged: dict[tuple[str, int], tuple[str, float]] = {}
        #: The container of the groups' table (``gateway/cluster/groups.py``).
        self.groups_container: int | None = None
        #: Other leaders' high watermarks, for the exporter's group lag (``watermarks.py``).
        self.peer_watermarks: PeerWatermarks | None = None
        #: The nodes holding each container's Tier-1 log (None: the file log).
        self.replicas: PlogReplicas | None = None
        #: The background indexing of other nodes' containers (``_index_others``).
        self._others: asyncio.Task[None] | None = None
        #: Set once a pass of it went over every topic: the node may take containers.
        self.warm = asyncio.Event()

    @property
    def node_id(self) -> int:
        return self.node.node_id

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's leader epoch as this node knows it now: the map's version
        plus its current segment's creation epoch (as last looked up)."""
        return max(int(self.node.containers.version), 0) + self._segment_epochs.get((topic, partition), 0)

    async def leader_and_epoch(self, topic: str, partition: int) -> tuple[int | None, int]:
        """The partition's leader (None: not available) and leader epoch, of one map."""
        try:
            name = await self.segment_of(topic, partition)
        except Exception as exc:  # noqa: BLE001 - stream gone or metadata unreachable
            log.debug("no segment for %s/%d: %r", topic, partition, exc)
            return None, self.leader_epoch(topic, partition)
        # No await from here: the owner and the version are read from the same map.
        return self._live_owner(name), self.leader_epoch(topic, partition)

    def _note_segment(self, topic: str, partition: int, seg: Any, expires: float) -> str:
        name: str = self.topics.segment_name(topic, seg.id)
        if len(self._segments) > 100_000:
            self._segments.clear()
            self._segment_epochs.clear()
        self._segments[(topic, partition)] = (expires, name)
        self._segment_epochs[(topic, partition)] = int(seg.epoch)
        return name

    async def segment_of(self, topic: str, partition: int) -> str:
        key = (topic, partition)
        now = time.monotonic()
        known = self._segments.get(key)
        if known is not None and known[0] > now:
            return known[1]
        seg = await self.topics.current_segment(topic, partition)
        return self._note_segment(topic, partition, seg, now + self.segment_ttl_ms / 1000)

    async def leader(self, topic: str, partition: int) -> int | None:
        try:
            name = await self.segment_of(topic, partition)
        except Exception as exc:  # noqa: BLE001 - stream gone or metadata unreachable
            log.debug("no segment for %s/%d: %r", topic, partition, exc)
            return None
        return self._live_owner(name)

    async def leaders(self, topic: str, partitions: int) -> list[tuple[int | None, int]]:
        """Every partition's leader (None: not available) and leader epoch as Metadata
        answers them: read afresh (one read of the stream's current epoch), never from
        the cache, so that once a scale is recorded no node names the old leader again
        (each node's cache would lag by up to its TTL). One metadata read: the stream's
        current epoch number (its epochs are cached)."""
        try:
            current = await self.controller.current_segments(self.topics.scope, topic)
        except Exception as exc:  # noqa: BLE001 - stream gone or metadata unreachable
            log.debug("no segments for %s: %r", topic, exc)
            return [(None, -1)] * partitions
        # No await from here: every leader and epoch comes from the same map.
        expires = time.monotonic() + self.segment_ttl_ms / 1000
        out: list[tuple[int | None, int]] = []
        for partition in range(partitions):
            point = partition_point(partition)
            seg = next((s for s in current if s.key_start <= point < s.key_end), None)
            if seg is None:
                out.append((None, -1))
                continue
            name = self._note_segment(topic, partition, seg, expires)
            out.append((self._live_owner(name), self.leader_epoch(topic, partition)))
        return out

    async def replica_set(self, topic: str, partition: int, leader: int) -> ReplicaSet:
        """The partition's Kafka replicas and ISR (``replicas.py``), ``leader`` first; the
        segment as ``leaders`` or ``segment_of`` last looked it up."""
        if self.replicas is None:
            return ReplicaSet.alone(leader)
        snapshot = await self.replicas.snapshot()
        try:
            name = await self.segment_of(topic, partition)
        except Exception:  # noqa: BLE001 - stream gone or metadata unreachable
            return ReplicaSet.alone(leader)
        return self.replicas.replica_set(snapshot, container_of(name, self.owners.container_count), leader)

    def _live_owner(self, name: str) -> int | None:
        owner = self.owners.owner(name)
        return owner if owner in self.node.members else None

    async def partition_error(self, topic: str, partition: int) -> ErrorCode:
        """NONE where this node leads the partition and has caught up with its segments,
        else the error to answer with."""
        try:
            name = await self.segment_of(topic, partition)
        except Exception:  # noqa: BLE001 - stream gone or metadata unreachable
            return ErrorCode.LEADER_NOT_AVAILABLE
        cid = container_of(name, self.owners.container_count)
        if cid in self.ready and cid in self.node.running and cid not in self.node.interrupted:
            if not await self._still_led(topic, partition, name):
                try:
                    await self._catch_up(topic, partition)
                except UNAVAILABLE as exc:  # served once the topic's segments are readable
                    self._not_caught_up(topic, partition, exc)
                    return ErrorCode.LEADER_NOT_AVAILABLE
            return ErrorCode.NONE
        self.leading.pop((topic, partition), None)
        leader = await self.leader(topic, partition)
        if leader is None:
            return ErrorCode.LEADER_NOT_AVAILABLE
        return ErrorCode.NOT_LEADER_OR_FOLLOWER

    def _not_caught_up(self, topic: str, partition: int, exc: BaseException) -> None:
        """Logged when the cause changes, else once in a while: producers of the
        partition are refused meanwhile."""
        text, now = repr(exc), time.monotonic()
        last = self._catch_up_logged.get((topic, partition))
        if last is None or last[0] != text or now - last[1] >= CATCH_UP_LOG_S:
            self._catch_up_logged[(topic, partition)] = (text, now)
            log.warning("%s/%d led here but not caught up yet (%s); answering "
                        "LEADER_NOT_AVAILABLE", topic, partition, text)

    async def _still_led(self, topic: str, partition: int, current: str) -> bool:
        """Whether this node has led the partition since it last caught up, up to its
        ``current`` segment. A scale may have moved the partition to another node's
        container and a later one back: its cached log then misses what was appended
        there (issue 36: the read stopped at the old high watermark, offsets were given
        twice)."""
        key = (topic, partition)
        known = self.leading.get(key)
        if known is None:
            return False
        if known[0] == current:
            return True
        if await self._led_throughout(topic, partition, known, current):
            self.leading[key] = (current, known[1])
            return True
        self.leading.pop(key, None)
        return False

    async def still_leads_segment(self, topic: str, partition: int, segment: Any) -> bool:
        """``PartitionLogs.succession``: whether a log whose segment was sealed may re-send
        its appends to ``segment``, the partition's current one now (this node led every
        segment between)."""
        return await self._still_led(topic, partition, self.topics.segment_name(topic, segment.id))

    async def _led_throughout(
        self, topic: str, partition: int, known: tuple[str, int], current: str
    ) -> bool:
        """Every segment of the partition's lineage after ``known``'s, up to ``current``,
        sits in a container ready here since ``known``'s generation (none of them was
        led by another node meanwhile)."""
        lineage = await self._lineage(topic, partition)
        if known[0] not in lineage or current not in lineage:
            return False
        since, now = lineage.index(known[0]), lineage.index(current)
        cids = {container_of(name, self.owners.container_count) for name in lineage[since + 1:now + 1]}
        return all(cid in self.ready and self._ready_at.get(cid, known[1] + 1) <= known[1] for cid in cids)

    async def _lineage(self, topic: str, partition: int) -> list[str]:
        """The segments that ever held the partition's point, oldest first."""
        point = partition_point(partition)
        return [self.topics.segment_name(topic, seg.id)
                for seg in await self.topics.all_segments(topic)
                if seg.key_start <= point < seg.key_end]

    async def _catch_up(self, topic: str, partition: int) -> None:
        """Before this node first serves a partition it did not lead just before (a scale
        moved its current segment into a container of this node, or it was led elsewhere
        while this node ran): index what the topic's segments hold past this node's
        markers, and reopen the partition's log from the index."""
        async with self._catching_up:
            if (topic, partition) in self.leading:
                return
            generation = self._generation
            # Only the segments that ever held the partition's point: the rest of the
            # topic is no part of its log (and may sit in containers that are moving).
            lineage = await self._lineage(topic, partition)
            with patience(CATCH_UP_PATIENCE_MS):
                indexed = await self.logs.rebuild_where(
                    set(lineage).__contains__, strict=True, topics=[topic])
            self.logs.retire_where(lambda t, p: t == topic and p == partition)
            self.leading[(topic, partition)] = (lineage[-1] if lineage else "", generation)
            self._catch_up_logged.pop((topic, partition), None)
            if indexed:
                log.info("%s/%d led here now: %d appends indexed", topic, partition, indexed)

    def brokers(self, listener: str | None = None) -> list[tuple[int, str, int]]:
        """Every live node with a Kafka listener: (node id, host, port). With a listener
        name, its address on that listener; a node without one is left out (Kafka's
        rule), a node registered before listeners were announced gives its first one."""
        return live_brokers(self.node.members, listener)

    async def remote_high_watermarks(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """High watermarks of partitions other nodes lead, asked of them (empty when
        this node cannot ask)."""
        if self.peer_watermarks is None:
            return {}
        return await self.peer_watermarks.high_watermarks(partitions)

    def controller_id(self) -> int:
        leader = self.node.session.leader_id
        return self.node_id if leader is None else int(leader)

    def group_coordinator(self, listener: str | None = None) -> tuple[int, tuple[str, int]] | None:
        """The node coordinating groups and transactional ids, with its Kafka address."""
        if self.groups_container is None:
            return None
        owner = self.container_owner(self.groups_container)
        address = None if owner is None else self.kafka_address(owner, listener)
        return None if owner is None or address is None else (owner, address)

    def container_owner(self, cid: int) -> int | None:
        """The live node owning container ``cid``."""
        owner = self.node.containers.owners.get(cid)
        return owner if owner in self.node.members else None

    def kafka_address(self, node: int, listener: str | None = None) -> tuple[str, int] | None:
        for n, host, port in self.brokers(listener):
            if n == node:
                return host, port
        return None

    async def on_owned(self, gained: set[int], lost: set[int]) -> None:
        """Serve the gained containers once what other nodes appended to them is indexed;
        the segments of containers other nodes run are indexed afterwards, in the
        background (``_index_others``): a failover waits for its own containers only."""
        if self._others is not None:
            self._others.cancel()
        self.ready -= lost
        self._segments.clear()
        kept = self.node.running - gained
        count = self.owners.container_count
        indexed = 0
        if gained:
            with patience(CATCH_UP_PATIENCE_MS):  # what is skipped is caught up when served
                indexed = await self.logs.rebuild_where(
                    lambda name: container_of(name, count) in gained)
        dropped = self.logs.retire_where(lambda topic, p: self._moved(topic, p, kept))
        self.leading = {k: v for k, v in self.leading.items() if not self._moved(*k, kept)}
        self._generation += 1  # after the awaits: a catch-up meanwhile counts as before
        for cid in gained - self.node.interrupted - self.ready:
            self._ready_at[cid] = self._generation
        self.ready |= gained - self.node.interrupted
        log.info(
            "containers gained %s, lost %s: %d appends indexed, %d partition logs reopened",
            sorted(gained), sorted(lost), indexed, dropped,
        )
        self._others = asyncio.get_running_loop().create_task(self._index_others())

    def close(self) -> None:
        if self._others is not None:
            self._others.cancel()

    async def _index_others(self) -> None:
        """Index what containers other nodes run appended, now and every
        ``INDEX_OTHERS_S``, so a partition later led here (a failover) has little to
        catch up however long ago this node last led it. A topic at a time, between
        partitions' catch-ups."""
        count = self.owners.container_count

        def foreign(name: str) -> bool:
            # Owned here but not running yet: read once it starts (its own ``on_owned``).
            cid = container_of(name, count)
            return cid not in self.node.running and self.node.containers.owners.get(cid) != self.node_id

        while True:
            down: set[int] = set()
            indexed, failed = 0, []
            for topic in self.topics.names():
                try:
                    async with self._catching_up:
                        with patience(CATCH_UP_PATIENCE_MS):
                            indexed += await self.logs.rebuild_where(foreign, topics=[topic], down=down)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a head start only: catch-ups read it anyway
                    failed.append(f"{topic}: {exc!r}")
            if failed:
                log.warning("indexing other nodes' containers skipped %d topics (%s); trying "
                            "again in %.0f s", len(failed), "; ".join(failed[:3]), INDEX_OTHERS_S)
            log.log(logging.DEBUG if self.warm.is_set() else logging.INFO,
                    "other nodes' containers indexed: %d appends", indexed)
            self.warm.set()
            await asyncio.sleep(INDEX_OTHERS_S)

    def interrupted(self, cids: set[int]) -> None:
        """The map gave containers this node runs to another node (called as the map
        change is seen, before the containers are stopped): their partitions are no
        longer served, and their logs are dropped with the appends not yet sent, so
        nothing is appended or answered from state another node may move past. They are
        caught up afresh once the containers run here again (``on_owned``)."""
        self.ready -= cids
        held = set(self.node.running) - cids
        dropped = self.logs.abandon_where(lambda topic, p: self._moved(topic, p, held))
        self.leading = {k: v for k, v in self.leading.items() if not self._moved(*k, held)}
        log.info("containers %s given to another node: %d partition logs dropped",
                 sorted(cids), dropped)

    def _moved(self, topic: str, partition: int, kept: set[int]) -> bool:
        """Whether the partition's cached log may be stale: its segment is not in a
        container this node held throughout (unknown segment: stale)."""
        known = self._segments.get((topic, partition))
        if known is None:
            plog = self.logs.cached(topic, partition)
            seg = getattr(plog, "segment", None)
            if seg is None:
                return True
            name = self.topics.segment_name(topic, seg.id)
        else:
            name = known[1]
        return container_of(name, self.owners.container_count) not in kept


def live_brokers(members: dict[int, dict[str, Any]], listener: str | None) -> list[tuple[int, str, int]]:
    """``(node id, host, port)`` of every member with a Kafka address on ``listener``."""
    out = []
    for node, info in sorted(members.items()):
        address = _address(info, listener)
        if address is not None:
            out.append((node, *address))
    return out


def _address(info: dict[str, Any], listener: str | None) -> tuple[str, int] | None:
    """A member's Kafka address on ``listener`` (None: its first listener's)."""
    text = str(info.get("kafka", ""))
    announced = info.get("listeners")
    if listener is not None and announced:
        for item in str(announced).split(","):
            name, sep, address = item.partition("://")
            if sep and name == listener:
                text = address
                break
        else:
            return None
    host, _, port = text.rpartition(":")
    return (host.strip("[]"), int(port)) if host and port.isdigit() else None
