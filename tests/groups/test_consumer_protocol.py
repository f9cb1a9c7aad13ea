"""KIP-848 (``group.protocol=consumer``) end to end: one consumer group of Java
kafka-clients 4.3.0 and confluent-kafka (librdkafka) members, the broker assigning
with the ``uniform`` assignor, against a real ``tidegate serve``. Members join, leave,
crash (``kill -9``) and the server is killed with ``kill -9`` and restarted while
records keep coming; every record is delivered exactly once (the ``D`` lines of
``member.py``/``GroupConsumer.java``, as in ``test_mixed_clients.py``), the Java
AdminClient lists and describes the group as a consumer-type group, and at the end the
committed offsets are the log ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.clients.server import Tidegate
from tests.groups.member_process import GroupRun, Member, wait_for
from tests.java.conftest import Java, java  # noqa: F401 (fixture)

TOPIC = "kip848"
GROUP = "kip848-group"
PARTITIONS = 6
PHASE_TIMEOUT_S = 75
ASSIGNOR = "consumer:uniform"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Tidegate]:
    config = tmp_path / "tidegate.toml"
    config.write_text(
        "[groups]\nconsumer_heartbeat_interval_ms = 500\nconsumer_session_timeout_ms = 6000\n"
    )
    s = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config)
    s.start()
    try:
        yield s
    finally:
        s.close()


def _member(name: str, client: str, jvm: Java, server: Tidegate, tmp: Path, *args: str) -> Member:
    return Member(name, client, jvm, server, tmp, TOPIC, GROUP, *(args or (ASSIGNOR,)))


def _wait(cond: Callable[[], bool], what: str, detail: Callable[[], object]) -> float:
    return wait_for(cond, what, detail, PHASE_TIMEOUT_S)


def test_consumer_protocol_group_exactly_once(java: Java, server: Tidegate, tmp_path: Path) -> None:  # noqa: F811
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])
    admin.close()
    run = GroupRun(server.bootstrap, TOPIC)
    produced, members = run.produced, run.members
    produce, delivered, all_delivered = run.produce, run.delivered, run.all_delivered

    def start(name: str, client: str) -> Member:
        return run.add(_member(name, client, java, server, tmp_path))

    def progress() -> object:
        missing = sorted(produced - set(delivered()))[:10]
        return {
            "produced": len(produced), "delivered": len(set(delivered())),
            "missing": {r: [m.name for m in members if r in m.lines("R")] for r in missing},
            "members": {m.name: (m.proc.poll(), len(m.lines("D"))) for m in members},
            "server": server.tail(15),
        }

    def describe() -> str:
        return java.run("ConsumerGroupAdmin", server.bootstrap, GROUP, TOPIC, str(PARTITIONS))

    phases: dict[str, float] = {}
    try:
        java1 = start("java1", "java")
        cf1 = start("cf1", "confluent-kafka")
        produce(150, 3)
        phases["java + librdkafka"] = _wait(all_delivered, "first deliveries", progress)

        start("java2", "java")
        start("cf2", "confluent-kafka")
        produce(150, 3)
        phases["two join"] = _wait(all_delivered, "deliveries after joins", progress)

        cf1.finish()  # leaves the group (member epoch -1)
        produce(150, 3)
        phases["leave"] = _wait(all_delivered, "deliveries after a leave", progress)

        java1.kill9()  # its session ends on the broker; its partitions move
        produce(150, 3)
        phases["member kill -9"] = _wait(all_delivered, "deliveries after a member crash", progress)

        def settled() -> bool:
            out = describe()
            return "state=Stable members=2" in out

        _wait(settled, "a Stable group of the two live members", describe)
        out = describe()
        assert f"listed {GROUP} Consumer Stable" in out, out
        assert "type=Consumer state=Stable members=2 assignor=uniform" in out, out
        owned = [ln for ln in out.splitlines() if ln.startswith("member ")]
        assert len(owned) == 2 and all("partitions=[]" not in ln for ln in owned), out

        server.kill9()  # the group's state and commits must survive
        server.start()
        produce(150, 3)
        phases["server kill -9"] = _wait(all_delivered, "deliveries after the server's kill -9", progress)
    finally:
        outputs = {m.name: m.finish() for m in members}
    print("seconds from change to every record delivered:", phases)

    for m in members:
        if not m.killed:
            assert "OK closed" in outputs[m.name], (m.name, outputs[m.name][-2000:])
    got = delivered()
    duplicates = {r for r in got if got.count(r) > 1}
    assert not duplicates, f"delivered twice: {sorted(duplicates)[:20]}"
    assert all_delivered()
    assert set(got) <= produced
    for m in members:
        assert m.lines("D"), f"{m.name} ({m.client}) delivered nothing"

    run.check_committed_at_ends(GROUP, PARTITIONS)


def _describe_line(out: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith("describe "))


def test_java_static_members_with_the_range_assignor(java: Java, server: Tidegate, tmp_path: Path) -> None:  # noqa: F811
    """Two static Java members (``group.instance.id``) with ``consumer:range``: one
    closes (member epoch -2: it keeps its partitions) and a new process with the same
    instance id takes them back without a new group epoch; nothing is read twice."""
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    admin.create_topics([NewTopic(TOPIC, num_partitions=4, replication_factor=1)])
    admin.close()
    producer = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(40):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=i % 4)
    assert producer.flush(30) == 0

    def describe() -> str:
        return java.run("ConsumerGroupAdmin", server.bootstrap, GROUP, TOPIC, "4")

    members = [_member(f"s{i}", "java", java, server, tmp_path, "consumer:range", f"inst-{i}") for i in (1, 2)]
    try:
        def settled() -> bool:
            got = [m.assignment() for m in members]
            return all(a is not None and len(a) == 2 for a in got) and "state=Stable members=2" in describe()

        _wait(settled, "two static members with two partitions each", describe)
        first = describe()
        assert "assignor=range" in first, first
        # Kafka's range order: static members by instance id, whatever their member ids
        assert [m.assignment() for m in members] == [{0, 1}, {2, 3}], first
        epoch = _describe_line(first).rsplit(" epoch=", 1)[1]
        before = members[0].assignment()
        other_changes = len([ln for ln in members[1].log.read_text().splitlines() if ln.startswith("A ")])
        members[0].finish()  # closes: a static leave (epoch -2)
        members.append(_member("s1-again", "java", java, server, tmp_path, "consumer:range", "inst-1"))
        _wait(lambda: members[2].assignment() == before, "the same partitions back", describe)
        again = describe()
        assert _describe_line(again).endswith(f" epoch={epoch}"), (first, again)  # no rebalance
        _wait(lambda: {r for m in members for r in m.lines("D")} >= {(p, o) for p in range(4) for o in range(10)},
              "every record delivered", describe)
    finally:
        for m in members:
            m.finish()
    got = [r for m in members for r in m.lines("D")]
    assert len(got) == len(set(got)) == 40
    # The other member's assignment did not change while the static member was away.
    assert len([ln for ln in members[1].log.read_text().splitlines() if ln.startswith("A ")]) == other_changes


def test_java_range_third_static_member_gets_kafkas_ranges(
    java: Java, server: Tidegate, tmp_path: Path  # noqa: F811
) -> None:
    """Kafka's range is recomputed, not sticky: with static members ``inst-1``,
    ``inst-2`` on 6 partitions ({0,1,2}, {3,4,5}), ``inst-3`` joining makes the ranges
    {0,1}, {2,3}, {4,5}: partitions 2 and 5 move, as they would on a Kafka 4.x broker."""
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    admin.create_topics([NewTopic(TOPIC, num_partitions=6, replication_factor=1)])
    admin.close()

    def describe() -> str:
        return java.run("ConsumerGroupAdmin", server.bootstrap, GROUP, TOPIC, "6")

    members = [_member(f"s{i}", "java", java, server, tmp_path, "consumer:range", f"inst-{i}") for i in (1, 2)]
    try:
        _wait(lambda: [m.assignment() for m in members] == [{0, 1, 2}, {3, 4, 5}], "two ranges of three", describe)
        members.append(_member("s3", "java", java, server, tmp_path, "consumer:range", "inst-3"))
        _wait(lambda: [m.assignment() for m in members] == [{0, 1}, {2, 3}, {4, 5}], "three ranges of two", describe)
        assert "assignor=range" in describe()
    finally:
        for m in members:
            m.finish()
