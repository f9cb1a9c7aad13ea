"""The online migration of a live group with real clients against ``tidegate serve``:
three confluent-kafka (librdkafka) classic consumers (range assignor) read a topic of 6
partitions; one by one each is replaced by a librdkafka consumer with
``group.protocol=consumer`` (the group is upgraded when the first joins, the classic
members rejoin into the server-side assignment); then the reverse, one by one, until
the last consumer-protocol member leaves and the group is downgraded to a classic group.
Records keep coming; every record is delivered exactly once (the ``D`` lines of
``member.py``: read, then committed after each batch) and the committed offsets end at
the log ends. A second test shows the ``disabled`` policy refusing the upgrade with
Kafka's error, and DescribeConfigs reporting the policy."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from tests.clients.server import Tidegate
from tests.groups.member_process import GroupRun, Member, wait_for

TOPIC = "migrating"
GROUP = "migrating-group"
PARTITIONS = 6
PHASE_TIMEOUT_S = 75
CLASSIC = "range"
CONSUMER = "consumer:uniform"


def _server(tmp_path: Path, policy: str) -> Tidegate:
    config = tmp_path / "tidegate.toml"
    config.write_text(
        "[groups]\nconsumer_heartbeat_interval_ms = 500\nconsumer_session_timeout_ms = 6000\n"
        f'initial_rebalance_delay_ms = 0\nconsumer_migration_policy = "{policy}"\n'
    )
    s = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config)
    s.start()
    return s


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Tidegate]:
    s = _server(tmp_path, "bidirectional")
    try:
        yield s
    finally:
        s.close()


def _create_topic(server: Tidegate) -> None:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])
    admin.close()


def test_rolling_upgrade_and_downgrade_exactly_once(server: Tidegate, tmp_path: Path) -> None:
    _create_topic(server)
    run = GroupRun(server.bootstrap, TOPIC)
    produced, members = run.produced, run.members

    def start(name: str, protocol: str) -> Member:
        # The JVM is not used by librdkafka members.
        return run.add(Member(name, "confluent-kafka", None, server, tmp_path, TOPIC, GROUP, protocol))  # type: ignore[arg-type]

    def progress() -> object:
        missing = sorted(produced - set(run.delivered()))[:10]
        return {
            "produced": len(produced), "delivered": len(set(run.delivered())),
            "missing": {r: [m.name for m in members if r in m.lines("R")] for r in missing},
            "members": {m.name: (m.proc.poll(), len(m.lines("D"))) for m in members},
            "server": server.tail(20),
        }

    def wait(cond: Callable[[], bool], what: str) -> float:
        return wait_for(cond, what, progress, PHASE_TIMEOUT_S)

    def converted(words: str) -> int:
        return sum(f"{GROUP!r}" in ln and words in ln for ln in server.tail(100_000).splitlines())

    phases: dict[str, float] = {}
    try:
        classic = [start(f"classic{i}", CLASSIC) for i in range(3)]
        run.produce(120, 2)
        phases["3 classic"] = wait(run.all_delivered, "deliveries of the classic group")
        consumers: list[Member] = []
        for i, old in enumerate(classic):
            consumers.append(start(f"consumer{i}", CONSUMER))  # the first one upgrades the group
            run.produce(90, 2)
            phases[f"consumer{i} joins"] = wait(run.all_delivered, f"deliveries after consumer{i} joined")
            old.finish()  # LeaveGroup
            run.produce(90, 2)
            phases[f"classic{i} leaves"] = wait(run.all_delivered, f"deliveries after classic{i} left")
        assert converted("becomes a consumer group") == 1, server.tail(200)
        assert converted("becomes a classic group") == 0, server.tail(200)

        again = []
        for i, old in enumerate(consumers):
            again.append(start(f"again{i}", CLASSIC))
            run.produce(90, 2)
            phases[f"again{i} joins"] = wait(run.all_delivered, f"deliveries after again{i} joined")
            old.finish()  # the last one's leave downgrades the group
            run.produce(90, 2)
            phases[f"consumer{i} leaves"] = wait(run.all_delivered, f"deliveries after consumer{i} left")
        assert converted("becomes a classic group") == 1, server.tail(200)
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        listed = admin.list_groups()
        admin.close()
        assert GROUP in str(listed) and "classic" in str(listed), listed
    finally:
        outputs = {m.name: m.finish() for m in members}
    print("seconds from change to every record delivered:", phases)
    reads = [r for m in members for r in m.lines("R")]
    print("records read more than once (a read whose commit failed):", len(reads) - len(set(reads)))

    for m in members:
        assert "OK closed" in outputs[m.name], (m.name, outputs[m.name][-2000:])
        assert m.lines("D"), f"{m.name} delivered nothing"
    got = run.delivered()
    duplicates = {r for r in got if got.count(r) > 1}
    assert not duplicates, f"delivered twice: {sorted(duplicates)[:20]}"
    assert set(got) == produced
    run.check_committed_at_ends(GROUP, PARTITIONS)


def test_disabled_policy_refuses_the_upgrade(tmp_path: Path) -> None:
    server = _server(tmp_path, "disabled")
    members: list[Member] = []
    try:
        _create_topic(server)
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        described = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all")
        admin.close()
        assert described["broker"]["0"]["group.consumer.migration.policy"]["value"] == "disabled", described
        members.append(Member("classic", "confluent-kafka", None, server, tmp_path, TOPIC, GROUP, CLASSIC))  # type: ignore[arg-type]
        GroupRun(server.bootstrap, TOPIC).produce(10, 0.1)
        wait_for(lambda: len(members[0].lines("D")) == 10, "the classic member's reads", server.tail, PHASE_TIMEOUT_S)
        consumer = Consumer({
            "bootstrap.servers": server.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        })
        try:
            consumer.subscribe([TOPIC])
            errors: list[str] = []

            def refused() -> bool:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is not None:
                    errors.append(str(msg.error()))
                return any("group id does not exist" in e for e in errors)  # GROUP_ID_NOT_FOUND

            try:
                wait_for(refused, "GROUP_ID_NOT_FOUND for the consumer-protocol member", lambda: errors, 30)
            except KafkaException as exc:  # librdkafka may raise the fatal error from poll
                assert "group id does not exist" in str(exc), exc
        finally:
            consumer.close()
        assert "becomes a consumer group" not in server.tail(100_000)
        assert "online upgrade is disabled" in server.tail(100_000)
    finally:
        for m in members:
            m.finish()
        server.close()
