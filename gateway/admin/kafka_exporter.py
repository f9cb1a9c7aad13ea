"""The series of ``kafka_exporter`` (github.com/danielqsj/kafka_exporter), with its
names, help texts and labels, so dashboards built for it (Grafana's "Kafka Exporter
Overview") read tidegate unchanged; beside them Kafka's per-topic byte and message
counters under the names the JMX exporter gives them.

- ``kafka_brokers``, ``kafka_broker_info{address,id}``: the live nodes.
- ``kafka_topic_partitions{topic}``; per partition ``..._current_offset`` (high
  watermark), ``..._oldest_offset`` (log start), ``..._leader``, ``..._replicas``,
  ``..._in_sync_replica``, ``..._leader_is_preferred``, ``..._under_replicated_partition``.
  On one node a partition has one Kafka replica (its durability is the Tier-1 log's); in
  cluster mode its replicas are the nodes holding its container's replicated Tier-1 log,
  in sync while their plog servers are registered (``core/cluster/replicas.py``).
- ``kafka_consumergroup_current_offset{consumergroup,topic,partition}`` and ``_sum``,
  ``kafka_consumergroup_lag`` (high watermark minus committed offset, control records
  left out) and ``_sum``,
  ``kafka_consumergroup_members{consumergroup}``.
- ``kafka_server_brokertopicmetrics_{bytesin,bytesout,messagesin}_total{topic}`` and
  ``tidegate_topic_records_out_total{topic}``.

In cluster mode a Prometheus that scrapes every node sees each series once: the
controller leader alone reports the cluster's series (``kafka_brokers``,
``kafka_broker_info``, ``kafka_topic_partitions``), each node the partitions it leads,
and the group coordinator's node the groups, with their lag on every partition (other
leaders' high watermarks asked with ListOffsets, ``gateway/cluster/watermarks.py``).

A partition a group's members are assigned but the group never committed gets
``current_offset`` and ``lag`` -1, as kafka_exporter gives them so users can alert on it;
the ``_sum`` series leave those out.

``refresh()`` (async: leadership lookups) takes a snapshot before each scrape;
``collect()`` turns it into metric families.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from tidegate.gateway.log.topic_io import TopicIO
from tidegate.gateway.log.topics import TopicInfo


class Offsets(Protocol):
    @property
    def high_watermark(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...


class Topics(Protocol):
    def names(self) -> list[str]: ...

    def get(self, name: str) -> TopicInfo | None: ...


class Logs(Protocol):
    def get(self, topic: str, partition: int) -> Offsets: ...

    async def read_batches(
        self, plog: Any, offset: int, max_bytes: int, must_return_one: bool,
        end_offset: int | None = None,
    ) -> list[memoryview]: ...


class Leaders(Protocol):
    """Cluster mode's partition leadership (``gateway.cluster.leadership``)."""

    @property
    def node_id(self) -> int: ...

    async def leader(self, topic: str, partition: int) -> int | None: ...

    def brokers(self) -> list[tuple[int, str, int]]: ...

    def controller_id(self) -> int: ...

    async def remote_high_watermarks(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], int]: ...

    async def replica_set(self, topic: str, partition: int, leader: int) -> ReplicaCounts: ...


class ReplicaCounts(Protocol):
    """A partition's replicas and in-sync replicas (``core/cluster/replicas.py``)."""

    @property
    def replicas(self) -> list[int]: ...

    @property
    def isr(self) -> list[int]: ...


class Committed(Protocol):
    @property
    def offset(self) -> int: ...


class Member(Protocol):
    @property
    def member_id(self) -> str: ...


class Described(Protocol):
    @property
    def error(self) -> int: ...

    @property
    def members(self) -> Sequence[Member]: ...


class Groups(Protocol):
    """The group coordinator's admin views (``gateway.groups.GroupCoordinator``)."""

    def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> tuple[int, list[tuple[str, str, str, str]]]: ...

    def describe_groups(self, group_ids: Sequence[str]) -> Sequence[Described]: ...

    def consumer_group_members(self, group_id: str) -> int: ...

    def assigned_partitions(self, group_id: str) -> set[tuple[str, int]]: ...

    def fetch_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, int]] | None
    ) -> tuple[int, Mapping[tuple[str, int], Committed | None]]: ...


class NodeView(Protocol):
    """What of the gateway the exporter reads (the handler context has it)."""

    @property
    def topics(self) -> Topics: ...

    @property
    def logs(self) -> Logs: ...

    @property
    def cluster(self) -> Leaders | None: ...

    @property
    def group_coordinator(self) -> Groups | None: ...


@dataclass
class _Partition:
    topic: str
    partition: int
    leader: int
    current: int
    oldest: int
    #: Replicas and in-sync replicas (cluster mode: ``core/cluster/replicas.py``).
    replicas: int = 1
    isr: int = 1


@dataclass
class _Group:
    group_id: str
    members: int
    #: (topic, partition) -> (committed offset, lag): -1 and -1 for an assigned partition
    #: never committed; lag None where the partition's high watermark is not known.
    offsets: dict[tuple[str, int], tuple[int, int | None]] = field(default_factory=dict)


@dataclass
class _Snapshot:
    brokers: list[tuple[int, str, int]] = field(default_factory=list)
    topics: list[tuple[str, int]] = field(default_factory=list)
    partitions: list[_Partition] = field(default_factory=list)
    groups: list[_Group] = field(default_factory=list)
    #: This node reports the cluster's series (single node, or the controller leader).
    reports_cluster: bool = True


class KafkaExporterMetrics(Collector):
    def __init__(
        self, view: NodeView, node_id: int, address: tuple[str, int], io: TopicIO
    ) -> None:
        """``address`` is what Metadata advertises for this node (single-node mode)."""
        self.view = view
        self.node_id = node_id
        self.address = address
        self.io = io
        self._snapshot = _Snapshot()

    async def refresh(self) -> None:
        view = self.view
        cluster = view.cluster
        snap = _Snapshot()
        if cluster is None:
            snap.brokers = [(self.node_id, *self.address)]
        else:
            snap.brokers = cluster.brokers()
            snap.reports_cluster = cluster.controller_id() == cluster.node_id
        node = self.node_id if cluster is None else cluster.node_id
        watermarks: dict[tuple[str, int], int] = {}
        for name in sorted(view.topics.names()):
            info = view.topics.get(name)
            if info is None:
                continue
            snap.topics.append((name, info.partitions))
            for p in range(info.partitions):
                if cluster is not None and await cluster.leader(name, p) != node:
                    continue
                plog = view.logs.get(name, p)
                watermarks[(name, p)] = plog.high_watermark
                part = _Partition(name, p, node, plog.high_watermark, plog.log_start_offset)
                if cluster is not None:
                    found = await cluster.replica_set(name, p, node)
                    part.replicas, part.isr = len(found.replicas), len(found.isr)
                snap.partitions.append(part)
        groups = view.group_coordinator
        if groups is not None:
            snap.groups = _groups(groups)
            local = set(watermarks)
            counts = dict(snap.topics)
            unknown = {
                (t, p) for g in snap.groups for (t, p), (offset, _) in g.offsets.items()
                if offset >= 0 and p < counts.get(t, 0)
            } - watermarks.keys()
            if cluster is not None and unknown:
                watermarks.update(await cluster.remote_high_watermarks(sorted(unknown)))
            _fill_lag(snap.groups, watermarks)
            for g in snap.groups:
                await _leave_out_control_records(view.logs, g, watermarks, local)
        self._snapshot = snap

    def overview(self) -> dict[str, object]:
        """The last snapshot as JSON-ready data (the ``/ui`` page reads it)."""
        snap = self._snapshot
        return {
            "node_id": self.node_id,
            "brokers": [{"id": n, "host": h, "port": p} for n, h, p in snap.brokers],
            "topics": [
                {
                    "name": t,
                    "partitions": [
                        {"partition": p.partition, "leader": p.leader,
                         "current_offset": p.current, "oldest_offset": p.oldest}
                        for p in snap.partitions if p.topic == t
                    ],
                    "partition_count": n,
                    **self._io_of(t),
                }
                for t, n in snap.topics
            ],
            "groups": [
                {
                    "group": g.group_id,
                    "members": g.members,
                    "lag": sum(lag for _, lag in g.offsets.values() if lag is not None and lag > 0),
                    "offsets": [
                        {"topic": t, "partition": p, "offset": off, "lag": lag}
                        for (t, p), (off, lag) in sorted(g.offsets.items())
                    ],
                }
                for g in snap.groups
            ],
        }

    def _io_of(self, topic: str) -> dict[str, int]:
        totals = self.io.totals.get(topic)
        if totals is None:
            return {"bytes_in": 0, "records_in": 0, "bytes_out": 0, "records_out": 0}
        return dict(zip(("bytes_in", "records_in", "bytes_out", "records_out"), totals, strict=True))

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot
        if snap.reports_cluster:
            yield from _cluster_families(snap)
        yield from _partition_families(snap.partitions)
        yield from _group_families(snap.groups)
        yield from self._io_families()

    def _io_families(self) -> Iterator[Metric]:
        names = (
            ("kafka_server_brokertopicmetrics_bytesin", "Bytes appended to the topic"),
            ("kafka_server_brokertopicmetrics_messagesin", "Records appended to the topic"),
            ("kafka_server_brokertopicmetrics_bytesout", "Bytes of the topic sent to fetches"),
            ("tidegate_topic_records_out", "Records of the topic sent to fetches"),
        )
        families = [CounterMetricFamily(n, doc, labels=["topic"]) for n, doc in names]
        for topic, totals in sorted(self.io.totals.items()):
            for family, value in zip(families, totals, strict=True):
                family.add_metric([topic], value)
        yield from families


def _groups(groups: Groups) -> list[_Group]:
    """Each group with its committed offsets, and -1 for the partitions its members are
    assigned and it never committed (lag filled in by ``_fill_lag``)."""
    err, listed = groups.list_groups()
    if err:
        return []
    out = []
    for gid, _protocol_type, _state, group_type in sorted(listed):
        if group_type == "consumer":  # KIP-848
            members = groups.consumer_group_members(gid)
        else:
            described = groups.describe_groups([gid])
            members = len(described[0].members) if described and not described[0].error else 0
        g = _Group(gid, members)
        err, committed = groups.fetch_offsets(gid, None)
        for tp, c in ([] if err else sorted(committed.items())):
            if c is None or c.offset < 0:
                continue
            g.offsets[tp] = (c.offset, None)
        for tp in sorted(groups.assigned_partitions(gid) - g.offsets.keys()):
            g.offsets[tp] = (-1, -1)
        out.append(g)
    return out


def _fill_lag(groups: Sequence[_Group], watermarks: Mapping[tuple[str, int], int]) -> None:
    for g in groups:
        for tp, (offset, _) in g.offsets.items():
            hw = watermarks.get(tp)
            if offset >= 0 and hw is not None:
                g.offsets[tp] = (offset, max(hw - offset, 0))


def _cluster_families(snap: _Snapshot) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "kafka_brokers", "Number of Brokers in the Kafka Cluster.", value=len(snap.brokers)
    )
    info = GaugeMetricFamily(
        "kafka_broker_info", "Information about the Kafka Broker.", labels=["address", "id"]
    )
    for n, host, port in snap.brokers:
        info.add_metric([f"{host}:{port}", str(n)], 1)
    yield info
    partitions = GaugeMetricFamily(
        "kafka_topic_partitions", "Number of partitions for this Topic", labels=["topic"]
    )
    for topic, count in snap.topics:
        partitions.add_metric([topic], count)
    yield partitions


#: A lag of at most this many offsets is read to leave out control records (transaction
#: markers), which no consumer ever receives; a larger one is the offset difference.
CONTROL_CHECK_OFFSETS_MAX = 1000
_CONTROL_CHECK_BYTES_MAX = 1 << 20
_CONTROL = 0x20  # the control bit of a record batch's attributes


async def _leave_out_control_records(
    logs: Logs, g: _Group, watermarks: Mapping[tuple[str, int], int],
    local: set[tuple[str, int]],
) -> None:
    """Only the partitions this node leads (``local``) are read."""
    for (topic, partition), (committed, lag) in list(g.offsets.items()):
        if lag is None or not 0 < lag <= CONTROL_CHECK_OFFSETS_MAX or (topic, partition) not in local:
            continue
        hw = watermarks[(topic, partition)]
        try:
            chunks = await logs.read_batches(logs.get(topic, partition), committed, _CONTROL_CHECK_BYTES_MAX, True, hw)
        except Exception:  # a read that fails leaves the offset difference
            continue
        g.offsets[(topic, partition)] = (committed, lag - _control_offsets(b"".join(chunks), committed, hw))


def _control_offsets(raw: bytes, start: int, end: int) -> int:
    """Offsets in [start, end) held by the control batches of ``raw`` (whole v2 batches)."""
    control = 0
    at = 0
    while at + 27 <= len(raw):
        base = int.from_bytes(raw[at:at + 8], "big", signed=True)
        length = int.from_bytes(raw[at + 8:at + 12], "big", signed=True)
        attributes = int.from_bytes(raw[at + 21:at + 23], "big")
        last = base + int.from_bytes(raw[at + 23:at + 27], "big", signed=True)
        if attributes & _CONTROL:
            control += max(0, min(last + 1, end) - max(base, start))
        at += 12 + length
    return control


def _partition_families(parts: Sequence[_Partition]) -> Iterator[Metric]:
    labels = ["topic", "partition"]
    current = GaugeMetricFamily(
        "kafka_topic_partition_current_offset", "Current Offset of a Broker at Topic/Partition",
        labels=labels,
    )
    oldest = GaugeMetricFamily(
        "kafka_topic_partition_oldest_offset", "Oldest Offset of a Broker at Topic/Partition",
        labels=labels,
    )
    leader = GaugeMetricFamily(
        "kafka_topic_partition_leader", "Leader Broker ID of this Topic/Partition", labels=labels
    )
    replicas = GaugeMetricFamily(
        "kafka_topic_partition_replicas", "Number of Replicas for this Topic/Partition",
        labels=labels,
    )
    isr = GaugeMetricFamily(
        "kafka_topic_partition_in_sync_replica",
        "Number of In-Sync Replicas for this Topic/Partition", labels=labels,
    )
    preferred = GaugeMetricFamily(
        "kafka_topic_partition_leader_is_preferred",
        "1 if Topic/Partition is using the Preferred Broker", labels=labels,
    )
    under = GaugeMetricFamily(
        "kafka_topic_partition_under_replicated_partition",
        "1 if Topic/Partition is under Replicated", labels=labels,
    )
    for p in parts:
        key = [p.topic, str(p.partition)]
        current.add_metric(key, p.current)
        oldest.add_metric(key, p.oldest)
        leader.add_metric(key, p.leader)
        replicas.add_metric(key, p.replicas)
        isr.add_metric(key, p.isr)
        preferred.add_metric(key, 1)
        under.add_metric(key, 1 if p.isr < p.replicas else 0)
    yield from (current, oldest, leader, replicas, isr, preferred, under)


def _group_families(groups: Sequence[_Group]) -> Iterator[Metric]:
    tp_labels = ["consumergroup", "topic", "partition"]
    t_labels = ["consumergroup", "topic"]
    current = GaugeMetricFamily(
        "kafka_consumergroup_current_offset",
        "Current Offset of a ConsumerGroup at Topic/Partition", labels=tp_labels,
    )
    current_sum = GaugeMetricFamily(
        "kafka_consumergroup_current_offset_sum",
        "Current Offset of a ConsumerGroup at Topic for all partitions", labels=t_labels,
    )
    lag = GaugeMetricFamily(
        "kafka_consumergroup_lag", "Current Approximate Lag of a ConsumerGroup at Topic/Partition",
        labels=tp_labels,
    )
    lag_sum = GaugeMetricFamily(
        "kafka_consumergroup_lag_sum",
        "Current Approximate Lag of a ConsumerGroup at Topic for all partitions", labels=t_labels,
    )
    members = GaugeMetricFamily(
        "kafka_consumergroup_members", "Amount of members in a consumer group",
        labels=["consumergroup"],
    )
    for g in groups:
        members.add_metric([g.group_id], g.members)
        sums: dict[str, list[int]] = {}
        for (topic, partition), (offset, behind) in sorted(g.offsets.items()):
            current.add_metric([g.group_id, topic, str(partition)], offset)
            s = sums.setdefault(topic, [0, 0, 0])
            if behind is not None:
                lag.add_metric([g.group_id, topic, str(partition)], behind)
                s[2] += 1
            if offset < 0:
                continue  # never committed: -1 above, left out of the sums
            s[0] += offset
            if behind is not None:
                s[1] += behind
        for topic, (offset_sum, behind_sum, known) in sorted(sums.items()):
            current_sum.add_metric([g.group_id, topic], offset_sum)
            if known:
                lag_sum.add_metric([g.group_id, topic], behind_sum)
    yield from (current, current_sum, lag, lag_sum, members)
