"""Share consumption (KIP-932) on three nodes with kafka-clients 4.3's
``KafkaShareConsumer``: it fetches each partition from its leader, which holds the
share-partition and stores it in the share coordinator's table (docs/share-groups.md).
The group's ``share.auto.offset.reset`` is set through any node and every node describes
it (the share coordinator's table). Every record is delivered and accepted once across
partitions led by different nodes; then a partition leader is killed with ``kill -9``
while the consumer runs: no record whose acceptance was committed is delivered again,
none is lost, and the share coordinator lists every share-partition's start offset at
the end of the log."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse
from tidegate.gateway.log.topic_config import ConfigSource

from tests.cluster.clients import QUIET, ask, coordinator, leaders, wait_for
from tests.cluster.nodes import Node, start_nodes
from tests.cluster.zk import ZooKeeperServer
from tests.java.conftest import Java

TOPIC, GROUP, PARTITIONS, PER_PARTITION = "sq6", "sg6", 6, 30
GROUP_RESOURCE = 32


class _Consumer:
    """One ShareScenarios consume process (accept mode) stopping once ``stop`` exists."""

    def __init__(self, java: Java, bootstrap: str, tmp: Path, name: str = "consumer") -> None:
        self.log = tmp / f"{name}.out"
        self.stop = tmp / f"{name}.stop"
        self._file = open(self.log, "w")
        self.proc = java.popen("ShareScenarios", bootstrap, "consume", GROUP, TOPIC, "accept",
                               "1000", "240000", str(self.stop), stdout=self._file)

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def values(self) -> set[str]:
        return {line.split()[4] for line in self.lines() if line.startswith("R ")}

    def finish(self, timeout_s: float = 90) -> str:
        self.stop.touch()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._file.close()
        return self.log.read_text()


def _produce(bootstrap: str, batch: str) -> set[str]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **QUIET})
    values = set()
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            value = f"{batch}-{p}-{i}"
            producer.produce(TOPIC, value=value.encode(), partition=p)
            values.add(value)
    assert producer.flush(60) == 0
    return values


def _group_config(port: int, name: str) -> tuple[str, int]:
    """A share group config as one node describes it: value and source."""
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=GROUP_RESOURCE, resource_name=GROUP, configuration_keys=[name])
    answer = ask(port, DescribeConfigsRequest(resources=[resource], include_synonyms=False,
                                              include_documentation=False),
                 4, DescribeConfigsResponse)
    (result,) = answer.results
    assert result.error_code == 0, result
    (entry,) = result.configs
    return entry.value, entry.config_source


def _deliveries(lines: list[str]) -> tuple[list[tuple[int, int, str]], list[int]]:
    """Every delivery (partition, offset, value) in order, and for each the index of the
    delivery after which its acceptance was committed (-1: never, or not known to be:
    the commit failed)."""
    given: list[tuple[int, int, str]] = []
    committed_at: list[int] = []
    pending: list[int] = []
    for line in lines:
        if line.startswith("R "):
            _, partition, offset, _, value, _ = line.split()
            given.append((int(partition), int(offset), value))
            committed_at.append(-1)
            pending.append(len(given) - 1)
        elif line.startswith("C "):
            for i in pending:
                committed_at[i] = len(given) - 1
            pending = []
        elif line.startswith("COMMIT-FAILED"):
            pending = []
    return given, committed_at


def _accepted_then_given_again(lines: list[str]) -> list[tuple[int, int, str]]:
    given, committed_at = _deliveries(lines)
    done: dict[tuple[int, int], int] = {}
    again = []
    for i, (partition, offset, value) in enumerate(given):
        at = done.get((partition, offset))
        if at is not None and at < i:
            again.append((partition, offset, value))
        if committed_at[i] >= 0:
            done.setdefault((partition, offset), committed_at[i])
    return again


def _committed_then_given_elsewhere(logs: list[list[str]]) -> list[tuple[int, int, str]]:
    """Deliveries to one consumer of a record whose acceptance another consumer had
    committed before (by the ``T`` wall clock lines: a poll returned after the commit)."""
    committed: dict[tuple[int, int], tuple[int, int]] = {}  # (p, o) -> (time, consumer)
    timed: list[tuple[int, int, int, int, str]] = []
    for who, lines in enumerate(logs):
        now, pending = 0, []
        for line in lines:
            if line.startswith("T "):
                now = int(line.split()[1])
            elif line.startswith("R "):
                _, partition, offset, _, value, _ = line.split()
                timed.append((now, who, int(partition), int(offset), value))
                pending.append((int(partition), int(offset)))
            elif line.startswith("C "):
                for key in pending:
                    if key not in committed or committed[key][0] > now:
                        committed[key] = (now, who)
                pending = []
            elif line.startswith("COMMIT-FAILED"):
                pending = []
    return [(p, o, v) for at, who, p, o, v in timed
            if (c := committed.get((p, o))) is not None and c[1] != who and c[0] < at]


def _start_group(java: Java, nodes: list[Node]) -> tuple[str, set[str]]:
    """The topic, led by more than one node, its first batch, and the group reading from
    the log start."""
    bootstrap = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    led = wait_for("every partition led",
                   lambda: (ls := leaders(bootstrap, TOPIC)) and len(ls) == PARTITIONS and ls, 90)
    assert len(set(led.values())) >= 2, f"one node leads every partition: {led}"
    first = _produce(bootstrap, "a")
    out = java.run("ShareScenarios", bootstrap, "config", GROUP,
                   "share.auto.offset.reset", "earliest")
    assert "OK config" in out, out
    return bootstrap, first


def test_share_consumers_through_a_kill9_of_the_share_coordinator(
    tmp_path: Path, zookeeper: ZooKeeperServer, java: Java
) -> None:
    """Two consumers consume and acknowledge while the node holding the share
    coordinator (members, assignments, the state table's container) is killed: they
    join the new coordinator, every record is delivered, none accepted is given again."""
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=6)
    consumers: list[_Consumer] = []
    try:
        bootstrap, first = _start_group(java, nodes)
        consumers = [_Consumer(java, bootstrap, tmp_path, f"c{i}") for i in range(2)]

        def consumed() -> set[str]:
            return set().union(*(c.values() for c in consumers))

        wait_for("the first batch consumed", lambda: first <= consumed(), 120)
        coord_id = coordinator(nodes[0].port, GROUP, 0)
        victim = next(n for n in nodes if n.node_id == coord_id)
        survivors = [n for n in nodes if n is not victim]
        second = _produce(bootstrap, "b")
        wait_for("some of the second batch consumed",
                 lambda: any(v.startswith("b-") for v in consumed()), 60)
        victim.kill9()
        wait_for("another share coordinator", lambda: coordinator(
            survivors[0].port, GROUP, 0) not in (-1, coord_id), 90)
        third = _produce(",".join(n.bootstrap for n in survivors), "c")
        wanted = first | second | third
        wait_for("every record consumed", lambda: wanted <= consumed(), 180)
        logs = []
        for c in consumers:
            text = c.finish()
            assert "OK consume" in text, text[-3000:]
            logs.append(text.splitlines())
        consumers = []
        for lines in logs:
            assert not _accepted_then_given_again(lines), "accepted records were delivered again"
        assert not _committed_then_given_elsewhere(logs), "accepted records given to the other"
        given = [line.split()[4] for lines in logs for line in lines if line.startswith("R ")]
        assert set(given) == wanted
        out = java.run("ShareScenarios", ",".join(n.bootstrap for n in survivors), "admin", GROUP)
        offsets = set(re.findall(rf"OFFSET {TOPIC}-(\d+) start=(-?\d+) lag=(-?\d+)", out))
        assert offsets == {(str(p), str(3 * PER_PARTITION), "0") for p in range(PARTITIONS)}, out
    finally:
        for c in consumers:
            c.finish(10)
        for node in nodes:
            node.close()


def test_share_consumer_fetches_from_each_leader_through_a_leader_kill9(
    tmp_path: Path, zookeeper: ZooKeeperServer, java: Java
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=6)
    consumer = None
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        led = wait_for("every partition led",
                       lambda: (ls := leaders(bootstrap, TOPIC)) and len(ls) == PARTITIONS and ls, 90)
        assert len(set(led.values())) >= 2, f"one node leads every partition: {led}"
        first = _produce(bootstrap, "a")
        # The group starts at the log start: a group config, set through any node, read by
        # every leader from the share coordinator's table.
        out = java.run("ShareScenarios", bootstrap, "config", GROUP,
                       "share.auto.offset.reset", "earliest")
        assert "OK config" in out, out
        for node in nodes:
            assert _group_config(node.port, "share.auto.offset.reset") == (
                "earliest", ConfigSource.GROUP_CONFIG)

        consumer = _Consumer(java, bootstrap, tmp_path)
        wait_for("the first batch consumed", lambda: first <= consumer.values(), 120)
        lines = consumer.lines()
        given = [line.split()[4] for line in lines if line.startswith("R ")]
        assert sorted(given) == sorted(first), "a record was delivered twice or not at all"

        coord_id = coordinator(nodes[0].port, GROUP, 0)
        led = leaders(bootstrap, TOPIC)
        victim: Node = next(n for n in nodes if n.node_id != coord_id
                            and n.node_id in led.values())
        second = _produce(bootstrap, "b")
        wait_for("some of the second batch consumed",
                 lambda: any(v.startswith("b-") for v in consumer.values()), 60)
        victim.kill9()
        wait_for("more of the second batch consumed after the kill",
                 lambda: len({v for v in consumer.values() if v.startswith("b-")}) > 20, 120)
        # The node comes back while the consumer runs: containers move back to it.
        victim.start()
        third = _produce(bootstrap, "c")
        wanted = first | second | third
        wait_for("every record consumed", lambda: wanted <= consumer.values(), 180)
        text = consumer.finish()
        consumer = None
        assert "OK consume" in text, text[-3000:]
        lines = text.splitlines()
        assert not _accepted_then_given_again(lines), "accepted records were delivered again"
        given = [line.split()[4] for line in lines if line.startswith("R ")]
        assert set(given) == wanted
        # The share coordinator lists what the leaders stored: everything acknowledged.
        out = java.run("ShareScenarios", bootstrap, "admin", GROUP)
        offsets = set(re.findall(rf"OFFSET {TOPIC}-(\d+) start=(-?\d+) lag=(-?\d+)", out))
        assert offsets == {(str(p), str(3 * PER_PARTITION), "0") for p in range(PARTITIONS)}, out
    finally:
        if consumer is not None:
            consumer.finish(10)
        for node in nodes:
            node.close()
